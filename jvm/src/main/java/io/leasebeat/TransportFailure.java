package io.leasebeat;

/** A transport failure of one attempt: no HTTP response was observed. */
public enum TransportFailure {
  /** The enforced per-attempt timeout fired. */
  TIMEOUT("timeout"),
  /** The connection could not be established. */
  CONNECT("connect"),
  /** The connection was reset or closed before a complete response. */
  RESET("reset");

  private final String wire;

  TransportFailure(String wire) {
    this.wire = wire;
  }

  /**
   * The stable string of this constant, the same in every language binding.
   *
   * @return the stable string, e.g. {@code "timeout"}
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
  public static TransportFailure fromWire(String wire) {
    java.util.Objects.requireNonNull(wire, "wire");
    for (TransportFailure v : values()) {
      if (v.wire.equals(wire)) {
        return v;
      }
    }
    throw new IllegalArgumentException("unknown TransportFailure: " + wire);
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
