package io.leasebeat;

import java.util.Objects;
import java.util.Optional;

/**
 * What the caller must do now ({@link Heartbeat#pollAction()}).
 *
 * @param type send an attempt, await its outcome, or stop
 * @param attempt the attempt to send or awaited; empty for a stop
 * @param stopReason why the heartbeat stopped; present only for a stop
 */
public record Action(Type type, Optional<Attempt> attempt, Optional<StopReason> stopReason) {

  /** The three things a caller can be asked to do. */
  public enum Type {
    /** Send {@link Action#attempt()} when it is due, then call {@link Heartbeat#handleSent}. */
    SEND,
    /** The attempt is in flight: report its outcome. */
    AWAIT_OUTCOME,
    /** The heartbeat stopped for good. */
    STOP
  }

  /**
   * Checks for nulls and that the optional parts match the type.
   *
   * @param type see {@link #type()}
   * @param attempt see {@link #attempt()}
   * @param stopReason see {@link #stopReason()}
   */
  public Action {
    Objects.requireNonNull(type, "type");
    Objects.requireNonNull(attempt, "attempt");
    Objects.requireNonNull(stopReason, "stopReason");
    if (attempt.isPresent() == (type == Type.STOP) || stopReason.isPresent() != (type == Type.STOP)) {
      throw new IllegalArgumentException("attempt and stopReason do not match " + type);
    }
  }
}
