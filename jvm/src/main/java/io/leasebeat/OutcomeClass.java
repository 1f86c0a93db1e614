package io.leasebeat;

/** How the outcome that led to a decision was classified. */
public enum OutcomeClass {
  /** HTTP 200 with a schema-valid body. */
  SUCCESS("success"),
  /** Another 2xx, or a 200 whose body is not schema-valid (HB-18). */
  AMBIGUOUS("ambiguous"),
  /** A transport failure: timeout, connect error or reset. */
  TRANSPORT_FAILURE("transport_failure"),
  /** A 5xx without a permanent error code. */
  SERVER_ERROR("server_error"),
  /** A 429 without a permanent error code. */
  THROTTLED("throttled"),
  /** A permanent condition (P-3). */
  PERMANENT("permanent"),
  /** Any other 4xx. */
  REJECTED("rejected"),
  /** A 1xx or 3xx. */
  UNEXPECTED("unexpected"),
  /** The caller cancelled. */
  CANCELLED("cancelled");

  private final String wire;

  OutcomeClass(String wire) {
    this.wire = wire;
  }

  /**
   * The stable string of this constant, the same in every language binding.
   *
   * @return the stable string, e.g. {@code "success"}
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
  public static OutcomeClass fromWire(String wire) {
    java.util.Objects.requireNonNull(wire, "wire");
    for (OutcomeClass v : values()) {
      if (v.wire.equals(wire)) {
        return v;
      }
    }
    throw new IllegalArgumentException("unknown OutcomeClass: " + wire);
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
