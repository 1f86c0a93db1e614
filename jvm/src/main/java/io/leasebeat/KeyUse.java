package io.leasebeat;

/** Whether an attempt reuses the previous attempt's idempotency key. */
public enum KeyUse {
  /** A key never used before on this lease (a new logical request, HB-35). */
  NEW("new"),
  /** Exactly the previous attempt's key and byte-identical body (a retry, HB-34). */
  SAME("same");

  private final String wire;

  KeyUse(String wire) {
    this.wire = wire;
  }

  /**
   * The stable string of this constant, the same in every language binding.
   *
   * @return the stable string, e.g. {@code "new"}
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
  public static KeyUse fromWire(String wire) {
    java.util.Objects.requireNonNull(wire, "wire");
    for (KeyUse v : values()) {
      if (v.wire.equals(wire)) {
        return v;
      }
    }
    throw new IllegalArgumentException("unknown KeyUse: " + wire);
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
