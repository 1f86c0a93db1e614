package io.leasebeat;

/** A warning attached to a decision. */
public enum Warning {
  /** The fallback holds a fixed cadence because grants look like maximum-lead clamping. */
  EXTENSION_BUDGET_DEPLETING("extension_budget_depleting");

  private final String wire;

  Warning(String wire) {
    this.wire = wire;
  }

  /**
   * The stable string of this constant, the same in every language binding.
   *
   * @return the stable string, e.g. {@code "extension_budget_depleting"}
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
  public static Warning fromWire(String wire) {
    java.util.Objects.requireNonNull(wire, "wire");
    for (Warning v : values()) {
      if (v.wire.equals(wire)) {
        return v;
      }
    }
    throw new IllegalArgumentException("unknown Warning: " + wire);
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
