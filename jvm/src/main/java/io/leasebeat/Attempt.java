package io.leasebeat;

import java.util.Arrays;
import java.util.Objects;
import java.util.OptionalLong;

/**
 * One attempt the caller must send (or has sent and awaits). Immutable.
 *
 * <p>Send {@link #body()} to the create endpoint ({@link AttemptKind#CREATE}) or to {@code POST
 * /v1/reservations/{id}/extend} ({@link AttemptKind#EXTEND}) with the header {@code
 * X-Idempotency-Key} equal to {@link #key()}.
 *
 * @param id identifies this attempt in {@link Heartbeat#handleSent}, {@link
 *     Heartbeat#handleResponse} and {@link Heartbeat#handleFailure}; 1 for the first attempt
 * @param kind create or extend
 * @param due when to send it, in nanoseconds since the heartbeat's origin ({@link Num#INF}: never)
 * @param key the idempotency key (header and body)
 * @param keyIndex 1 for the first key of the lease, 2 for the next new one, ...
 * @param keyUse whether the key is new or the previous attempt's
 * @param body the exact JSON request body; byte-identical on a same-key retry
 * @param sentNanoTime the {@link System#nanoTime()} value reported by {@link Heartbeat#handleSent},
 *     empty until then
 * @param zeroWindowRetry true for the single immediate retry a zero retry window allows (HB-27)
 * @param originNanos the {@link System#nanoTime()} value of the heartbeat's time 0
 */
public record Attempt(
    long id,
    AttemptKind kind,
    Num due,
    String key,
    long keyIndex,
    KeyUse keyUse,
    byte[] body,
    OptionalLong sentNanoTime,
    boolean zeroWindowRetry,
    long originNanos) {

  /**
   * Checks for nulls and copies the body.
   *
   * @param id see {@link #id()}
   * @param kind see {@link #kind()}
   * @param due see {@link #due()}
   * @param key see {@link #key()}
   * @param keyIndex see {@link #keyIndex()}
   * @param keyUse see {@link #keyUse()}
   * @param body see {@link #body()}
   * @param sentNanoTime see {@link #sentNanoTime()}
   * @param zeroWindowRetry see {@link #zeroWindowRetry()}
   * @param originNanos see {@link #originNanos()}
   */
  public Attempt {
    Objects.requireNonNull(kind, "kind");
    Objects.requireNonNull(due, "due");
    Objects.requireNonNull(key, "key");
    Objects.requireNonNull(keyUse, "keyUse");
    body = Objects.requireNonNull(body, "body").clone();
    Objects.requireNonNull(sentNanoTime, "sentNanoTime");
  }

  /**
   * The exact request body (a copy).
   *
   * @return the body bytes (UTF-8 JSON)
   */
  @Override
  public byte[] body() {
    return body.clone();
  }

  /**
   * The {@link System#nanoTime()} value at which to send: empty for never or a time more than
   * {@code Long.MAX_VALUE} ns after the origin.
   *
   * @return the due time
   */
  public OptionalLong dueNanoTime() {
    return Times.nanoTime(originNanos, due);
  }

  /**
   * How long to wait from {@code nowNanoTime} until the attempt is due: 0 if already due, {@code
   * Long.MAX_VALUE} for never.
   *
   * @param nowNanoTime a {@link System#nanoTime()} value
   * @return the delay in nanoseconds
   */
  public long delayNanos(long nowNanoTime) {
    return Times.delay(originNanos, due, nowNanoTime);
  }

  /**
   * Equal components, the body compared by content.
   *
   * @param o another object
   * @return whether equal
   */
  @Override
  public boolean equals(Object o) {
    if (!(o instanceof Attempt)) {
      return false;
    }
    Attempt a = (Attempt) o;
    return id == a.id
        && kind == a.kind
        && due.equals(a.due)
        && key.equals(a.key)
        && keyIndex == a.keyIndex
        && keyUse == a.keyUse
        && Arrays.equals(body, a.body)
        && sentNanoTime.equals(a.sentNanoTime)
        && zeroWindowRetry == a.zeroWindowRetry
        && originNanos == a.originNanos;
  }

  /**
   * A hash consistent with {@link #equals(Object)}.
   *
   * @return the hash
   */
  @Override
  public int hashCode() {
    return Objects.hash(id, kind, due, key, keyIndex, keyUse, Arrays.hashCode(body), sentNanoTime);
  }

  /**
   * A readable form with the body as text.
   *
   * @return the text
   */
  @Override
  public String toString() {
    return "Attempt[id=" + id + ", kind=" + kind + ", due=" + due + ", key=" + key
        + ", keyIndex=" + keyIndex + ", keyUse=" + keyUse + ", body="
        + new String(body, java.nio.charset.StandardCharsets.UTF_8) + ", sentNanoTime="
        + sentNanoTime + ", zeroWindowRetry=" + zeroWindowRetry + "]";
  }
}
