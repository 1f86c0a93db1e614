package io.leasebeat;

import java.nio.charset.StandardCharsets;
import java.util.OptionalLong;

/**
 * One request of a settlement that the caller must send (or has sent). Immutable; {@link #body()}
 * returns a copy.
 */
public final class SettleAttempt {
  private final long id;
  private final Settlement.Endpoint endpoint;
  private final String key;
  private final String body;
  private final long dueNanos;
  private final int number;
  private final OptionalLong sentNanos;

  private SettleAttempt(
      long id,
      Settlement.Endpoint endpoint,
      String key,
      String body,
      long dueNanos,
      int number,
      OptionalLong sentNanos) {
    this.id = id;
    this.endpoint = endpoint;
    this.key = key;
    this.body = body;
    this.dueNanos = dueNanos;
    this.number = number;
    this.sentNanos = sentNanos;
  }

  static SettleAttempt read(Wire w, long origin) {
    long id = w.u64();
    Settlement.Endpoint endpoint = Settlement.wired(Settlement.Endpoint.class, w.str());
    String key = w.str();
    String body = w.str();
    long due = Settlement.nanoTime(origin, w.u64());
    int number = w.u32();
    OptionalLong sent =
        w.bool() ? OptionalLong.of(Settlement.nanoTime(origin, w.u64())) : OptionalLong.empty();
    return new SettleAttempt(id, endpoint, key, body, due, number, sent);
  }

  /**
   * Identifies this attempt in {@code handleSent}, {@code handleResponse} and {@code
   * handleFailure}; 1 for the first of a settlement, counting on across modes.
   *
   * @return the attempt id
   */
  public long id() {
    return id;
  }

  /**
   * Where it goes.
   *
   * @return the endpoint
   */
  public Settlement.Endpoint endpoint() {
    return endpoint;
  }

  /**
   * The idempotency key, for both the {@code X-Idempotency-Key} header and the body (ST-1: the same
   * for every attempt of the settlement).
   *
   * @return the key
   */
  public String key() {
    return key;
  }

  /**
   * The exact JSON request body, byte-identical for every attempt of one mode (a fresh copy).
   *
   * @return the UTF-8 bytes
   */
  public byte[] body() {
    return body.getBytes(StandardCharsets.UTF_8);
  }

  /**
   * The request body as text.
   *
   * @return the JSON text
   */
  public String bodyText() {
    return body;
  }

  /**
   * When to send it, as a {@link System#nanoTime()} value ({@code Long.MAX_VALUE} when that is
   * not expressible).
   *
   * @return the due time
   */
  public long dueNanos() {
    return dueNanos;
  }

  /**
   * How long to wait from {@code nowNanos} until the due time, at least 0.
   *
   * @param nowNanos a {@link System#nanoTime()} value
   * @return the delay in ns
   */
  public long delayNanos(long nowNanos) {
    long d = dueNanos - nowNanos;
    if (dueNanos == Long.MAX_VALUE || ((dueNanos ^ nowNanos) < 0 && (dueNanos ^ d) < 0)) {
      return dueNanos >= nowNanos ? Long.MAX_VALUE : 0;
    }
    return Math.max(0, d);
  }

  /**
   * Its ordinal within its mode, 1-based (SP-1).
   *
   * @return the number
   */
  public int number() {
    return number;
  }

  /**
   * When the caller reported sending it ({@link System#nanoTime()} value), if it did.
   *
   * @return the send time, or empty
   */
  public OptionalLong sentNanos() {
    return sentNanos;
  }

  @Override
  public String toString() {
    return "SettleAttempt{id=" + id + ", endpoint=" + endpoint.wire() + ", key=" + key
        + ", number=" + number + ", body=" + body + "}";
  }
}
