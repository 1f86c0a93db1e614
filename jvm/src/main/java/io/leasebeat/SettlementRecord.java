package io.leasebeat;

import java.nio.charset.StandardCharsets;
import java.util.OptionalLong;

/**
 * The durable record of a commit or event settlement (runcycles Python 0.5.3's journal layout,
 * version 1), as it is or is to be persisted. {@link #json()} is the record file's exact text: write
 * it (J-1), and give it back to {@link Settlement#fromRecord(byte[], long, long)} after a restart.
 * Immutable.
 */
public final class SettlementRecord {
  private final String reservationId;
  private final String baseUrl;
  private final Settlement.RecordMode mode;
  private final String key;
  private final long recordedAtMillis;
  private final OptionalLong notBeforeMillis;
  private final String json;

  private SettlementRecord(
      String reservationId,
      String baseUrl,
      Settlement.RecordMode mode,
      String key,
      long recordedAtMillis,
      OptionalLong notBeforeMillis,
      String json) {
    this.reservationId = reservationId;
    this.baseUrl = baseUrl;
    this.mode = mode;
    this.key = key;
    this.recordedAtMillis = recordedAtMillis;
    this.notBeforeMillis = notBeforeMillis;
    this.json = json;
  }

  static SettlementRecord read(Wire w) {
    String id = w.str();
    String baseUrl = w.str();
    Settlement.RecordMode mode = Settlement.wired(Settlement.RecordMode.class, w.str());
    String key = w.str();
    long recordedAt = Settlement.saturated(w.u64());
    OptionalLong notBefore = Settlement.optMillis(w);
    return new SettlementRecord(id, baseUrl, mode, key, recordedAt, notBefore, w.str());
  }

  /**
   * The reservation.
   *
   * @return the reservation id
   */
  public String reservationId() {
    return reservationId;
  }

  /**
   * The server stored in the record ({@code ""} when none was given).
   *
   * @return the base URL
   */
  public String baseUrl() {
    return baseUrl;
  }

  /**
   * The mode to settle in.
   *
   * @return commit or event
   */
  public Settlement.RecordMode mode() {
    return mode;
  }

  /**
   * The settlement's one idempotency key (stored inside the record's bodies, ST-1).
   *
   * @return the key
   */
  public String key() {
    return key;
  }

  /**
   * When this version of the record was made, wall-clock Unix ms ({@code Long.MAX_VALUE} for a
   * stored value beyond it).
   *
   * @return the wall-clock instant
   */
  public long recordedAtMillis() {
    return recordedAtMillis;
  }

  /**
   * No request before this wall-clock instant (Unix ms, ST-4), if set.
   *
   * @return the floor, or empty
   */
  public OptionalLong notBeforeMillis() {
    return notBeforeMillis;
  }

  /**
   * The record file's exact text.
   *
   * @return the JSON text
   */
  public String json() {
    return json;
  }

  /**
   * The record file's exact bytes (UTF-8), a fresh copy.
   *
   * @return the bytes to write
   */
  public byte[] jsonBytes() {
    return json.getBytes(StandardCharsets.UTF_8);
  }

  @Override
  public String toString() {
    return json;
  }
}
