package io.leasebeat;

/** Which algorithm scheduled a decision (chosen per response, D-4). */
public enum Mode {
  /** The response carried {@code remaining_ttl_ms}: the normative algorithm. */
  PRIMARY("primary"),
  /** The response lacked it: the non-normative measured-grant fallback. */
  FALLBACK("fallback");

  private final String wire;

  Mode(String wire) {
    this.wire = wire;
  }

  /**
   * The stable string of this constant, the same in every language binding.
   *
   * @return the stable string, e.g. {@code "primary"}
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
  public static Mode fromWire(String wire) {
    java.util.Objects.requireNonNull(wire, "wire");
    for (Mode v : values()) {
      if (v.wire.equals(wire)) {
        return v;
      }
    }
    throw new IllegalArgumentException("unknown Mode: " + wire);
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
