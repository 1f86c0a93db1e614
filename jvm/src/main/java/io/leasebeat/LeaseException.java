package io.leasebeat;

import java.util.Objects;

/**
 * A call into a {@link Heartbeat} or a {@link Settlement} was refused. Refusing changes nothing
 * in it.
 *
 * <p>{@link #code()} tells why, with one constant per error kind of the Rust core plus {@link
 * Code#PANIC} for a bug in the native code (a Rust panic caught at the boundary). Bad arguments
 * that Java can check itself are reported as {@link IllegalArgumentException} or {@link
 * NullPointerException} instead, and calls on a closed object as {@link IllegalStateException}.
 */
public final class LeaseException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  /** Why a call was refused. The stable strings are the same in every language binding. */
  public enum Code {
    /** The configuration is out of range (e.g. {@code ttl_ms} outside 1000..=86400000). */
    INVALID_CONFIG("invalid_config"),
    /** An argument is out of range (e.g. an HTTP status outside 100..=999). */
    INVALID_ARGUMENT("invalid_argument"),
    /** An event's time is earlier than the previous event's time (or the origin). */
    TIME_WENT_BACKWARDS("time_went_backwards"),
    /** The attempt named is not the outstanding one (late, duplicate or unknown, D-14). */
    NOT_OUTSTANDING("not_outstanding"),
    /** An outcome was reported for an attempt that was never marked sent. */
    NOT_SENT("not_sent"),
    /** The attempt was already marked sent. */
    ALREADY_SENT("already_sent"),
    /** The heartbeat has stopped, or the settlement has ended; a stop (an end) is final. */
    STOPPED("stopped"),
    /** The key source produced an unusable key (empty, too long, or already used). */
    INVALID_KEY("invalid_key"),
    /** A bug: the native code panicked. The panic was caught; the JVM is unharmed. */
    PANIC("panic");

    private final String wire;

    Code(String wire) {
      this.wire = wire;
    }

    /**
     * The stable code string, e.g. {@code "time_went_backwards"}.
     *
     * @return the stable string
     */
    public String wire() {
      return wire;
    }
  }

  /** Why the call was refused. */
  private final Code code;

  /**
   * A refusal with a code and a message.
   *
   * @param code why
   * @param message a human-readable message (without the code)
   */
  public LeaseException(Code code, String message) {
    super(Objects.requireNonNull(code, "code").wire() + ": " + message);
    this.code = code;
  }

  /**
   * Why the call was refused.
   *
   * @return the code
   */
  public Code code() {
    return code;
  }
}
