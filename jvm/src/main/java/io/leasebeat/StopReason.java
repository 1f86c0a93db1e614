package io.leasebeat;

/** Why a heartbeat stopped. The stable strings are the same in every language. */
public enum StopReason {
  /** Two consecutive successes left no room for a positive delay (HB-33). */
  LEASE_TOO_SHORT("lease_too_short"),
  /** No complete retry plus margin fits in the proven lead (HB-22, HB-27). */
  RETRY_WINDOW_EXHAUSTED("retry_window_exhausted"),
  /** Consecutive failures without elapsed time advancing (HB-28). */
  NO_PROGRESS("no_progress"),
  /** A 429 whose Retry-After is missing, invalid or beyond the window. */
  THROTTLED("throttled"),
  /** {@code RESERVATION_EXPIRED}, or a bodyless 410. */
  EXPIRED("expired"),
  /** {@code RESERVATION_FINALIZED}. */
  FINALIZED("finalized"),
  /** {@code MAX_EXTENSIONS_EXCEEDED}. */
  MAX_EXTENSIONS("max_extensions"),
  /** {@code TENANT_CLOSED}. */
  TENANT_CLOSED("tenant_closed"),
  /** {@code NOT_FOUND}, or a bodyless 404. */
  NOT_FOUND("not_found"),
  /** Any other 4xx (408 included). */
  REJECTED("rejected"),
  /** A 1xx or 3xx (or unknown class) status. */
  UNEXPECTED_STATUS("unexpected_status"),
  /** The create and its one same-key retry both failed transiently. */
  CREATE_FAILED("create_failed"),
  /** A 4xx on a create (429 included). */
  CREATE_REJECTED("create_rejected"),
  /** The create did not yield a live reservation with an anchor. */
  NO_RESERVATION("no_reservation"),
  /** The caller cancelled. */
  CANCELLED("cancelled");

  private final String wire;

  StopReason(String wire) {
    this.wire = wire;
  }

  /**
   * The stable string of this constant, the same in every language binding.
   *
   * @return the stable string, e.g. {@code "lease_too_short"}
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
  public static StopReason fromWire(String wire) {
    java.util.Objects.requireNonNull(wire, "wire");
    for (StopReason v : values()) {
      if (v.wire.equals(wire)) {
        return v;
      }
    }
    throw new IllegalArgumentException("unknown StopReason: " + wire);
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
