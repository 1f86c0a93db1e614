package io.leasebeat;

/** The request an attempt makes. */
public enum AttemptKind {
  /** {@code POST /v1/reservations}. */
  CREATE("create"),
  /** {@code POST /v1/reservations/{id}/extend}. */
  EXTEND("extend");

  private final String wire;

  AttemptKind(String wire) {
    this.wire = wire;
  }

  /**
   * The stable string of this constant, the same in every language binding.
   *
   * @return the stable string, e.g. {@code "create"}
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
  public static AttemptKind fromWire(String wire) {
    java.util.Objects.requireNonNull(wire, "wire");
    for (AttemptKind v : values()) {
      if (v.wire.equals(wire)) {
        return v;
      }
    }
    throw new IllegalArgumentException("unknown AttemptKind: " + wire);
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
