package io.leasebeat;

/** Why a {@code Retry-After} value cannot be used (D-11, P-5). */
public enum RetryAfterProblem {
  /** No {@code Retry-After} header at all. */
  MISSING("missing"),
  /** More than one value: a repeated header or a comma-separated list. */
  MULTIPLE("multiple"),
  /** Not one delta-seconds value: empty, a sign, a fraction, an HTTP-date. */
  INVALID("invalid"),
  /** The seconds, or the seconds times 1000, overflow an unsigned 64-bit integer. */
  OVERFLOW("overflow");

  private final String wire;

  RetryAfterProblem(String wire) {
    this.wire = wire;
  }

  /**
   * The stable string of this constant, the same in every language binding.
   *
   * @return the stable string, e.g. {@code "missing"}
   */
  public String wire() {
    return wire;
  }

  /**
   * The constant with this stable string.
   *
   * @param wire a stable string
   * @return the constant
   * @throws IllegalArgumentException if no constant has this string
   * @throws NullPointerException if {@code wire} is null
   */
  public static RetryAfterProblem fromWire(String wire) {
    java.util.Objects.requireNonNull(wire, "wire");
    for (RetryAfterProblem v : values()) {
      if (v.wire.equals(wire)) {
        return v;
      }
    }
    throw new IllegalArgumentException("unknown RetryAfterProblem: " + wire);
  }

  /**
   * The stable string.
   *
   * @return {@link #wire()}
   */
  @Override
  public String toString() {
    return wire;
  }
}
