package io.leasebeat;

import java.nio.charset.StandardCharsets;
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
 * <p>A final class with exactly the members a record of its components would have (the canonical
 * constructor, one accessor per component, {@code equals}, {@code hashCode}, {@code toString}),
 * but not a {@code record}: a heartbeat's attempt keeps one copy of the key and body bytes the
 * core returned and builds the key {@code String} on first use, which a record's final
 * components could not.
 */
public final class Attempt {
  private final long id;
  private final AttemptKind kind;

  /**
   * When due; for a heartbeat's attempt with a finite due time built from {@link #dueBits} on
   * first use (racy, idempotent: {@link Num} is immutable with final fields).
   */
  private Num due;

  /** The core's u64 due time (ns since the origin) when {@link #due} is built lazily. */
  private final long dueBits;

  /** Whether {@link #due} is (to be) built from {@link #dueBits}. */
  private final boolean dueLazy;
  private final long keyIndex;
  private final KeyUse keyUse;
  private final OptionalLong sentNanoTime;
  private final boolean zeroWindowRetry;
  private final long originNanos;

  /**
   * The key's UTF-8 bytes ({@link #keyLen}) then the body (a heartbeat's attempt: one copy of
   * what the core returned), or the body alone ({@link #keyLen} 0, the public constructor).
   * Never exposed: {@link #body()} returns a copy.
   */
  private final byte[] bytes;

  private final int keyLen;

  /** The key; for a heartbeat's attempt built from {@link #bytes} on first use (racy, idempotent). */
  private String key;

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
  public Attempt(
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
    this(
        id,
        kind,
        Objects.requireNonNull(due, "due"),
        0,
        Objects.requireNonNull(key, "key"),
        Objects.requireNonNull(body, "body").clone(),
        0,
        keyIndex,
        keyUse,
        sentNanoTime,
        zeroWindowRetry,
        originNanos);
  }

  /**
   * A heartbeat's attempt: {@code bytes} (owned from now on) holds the key's {@code keyLen} UTF-8
   * bytes then the body; {@code key}, if not null, is that key already decoded; {@code due} null
   * means the finite due time {@code dueBits} (the core's u64 nanoseconds), built on first use.
   */
  Attempt(
      long id,
      AttemptKind kind,
      Num due,
      long dueBits,
      String key,
      byte[] bytes,
      int keyLen,
      long keyIndex,
      KeyUse keyUse,
      OptionalLong sentNanoTime,
      boolean zeroWindowRetry,
      long originNanos) {
    this.id = id;
    this.kind = Objects.requireNonNull(kind, "kind");
    this.due = due;
    this.dueBits = dueBits;
    this.dueLazy = due == null;
    this.key = key;
    this.bytes = bytes;
    this.keyLen = keyLen;
    this.keyIndex = keyIndex;
    this.keyUse = Objects.requireNonNull(keyUse, "keyUse");
    this.sentNanoTime = Objects.requireNonNull(sentNanoTime, "sentNanoTime");
    this.zeroWindowRetry = zeroWindowRetry;
    this.originNanos = originNanos;
  }

  /**
   * Whether the due time is the core's {@code set}/{@code bits} ({@code set} false: +infinity),
   * without building a {@link Num} when both come from the core.
   */
  boolean dueIs(boolean set, long bits) {
    if (dueLazy) {
      return set && bits == dueBits;
    }
    return due.equals(set ? Num.ofUnsigned(bits) : Num.INF);
  }

  /** The same attempt (same key and body) with these other components. */
  Attempt with(
      AttemptKind kind,
      Num due,
      long dueBits,
      long keyIndex,
      KeyUse keyUse,
      OptionalLong sentNanoTime,
      boolean zeroWindowRetry) {
    return new Attempt(
        id, kind, due, dueBits, key, bytes, keyLen, keyIndex, keyUse, sentNanoTime,
        zeroWindowRetry, originNanos);
  }

  /**
   * Identifies this attempt in {@link Heartbeat#handleSent}, {@link Heartbeat#handleResponse} and
   * {@link Heartbeat#handleFailure}; 1 for the first attempt.
   *
   * @return the id
   */
  public long id() {
    return id;
  }

  /**
   * Create or extend.
   *
   * @return the kind
   */
  public AttemptKind kind() {
    return kind;
  }

  /**
   * When to send it, in nanoseconds since the heartbeat's origin ({@link Num#INF}: never).
   *
   * @return the due time
   */
  public Num due() {
    Num d = due;
    if (d == null) {
      d = Num.ofUnsigned(dueBits);
      due = d;
    }
    return d;
  }

  /**
   * The idempotency key (header and body).
   *
   * @return the key
   */
  public String key() {
    String k = key;
    if (k == null) {
      k = new String(bytes, 0, keyLen, StandardCharsets.UTF_8);
      key = k;
    }
    return k;
  }

  /**
   * 1 for the first key of the lease, 2 for the next new one, ...
   *
   * @return the key index
   */
  public long keyIndex() {
    return keyIndex;
  }

  /**
   * Whether the key is new or the previous attempt's.
   *
   * @return the key use
   */
  public KeyUse keyUse() {
    return keyUse;
  }

  /**
   * The exact JSON request body (a copy); byte-identical on a same-key retry.
   *
   * @return the body bytes (UTF-8 JSON)
   */
  public byte[] body() {
    return Arrays.copyOfRange(bytes, keyLen, bytes.length);
  }

  /**
   * The {@link System#nanoTime()} value reported by {@link Heartbeat#handleSent}, empty until
   * then.
   *
   * @return the send time
   */
  public OptionalLong sentNanoTime() {
    return sentNanoTime;
  }

  /**
   * True for the single immediate retry a zero retry window allows (HB-27).
   *
   * @return whether the zero-window retry
   */
  public boolean zeroWindowRetry() {
    return zeroWindowRetry;
  }

  /**
   * The {@link System#nanoTime()} value of the heartbeat's time 0.
   *
   * @return the origin
   */
  public long originNanos() {
    return originNanos;
  }

  /**
   * The {@link System#nanoTime()} value at which to send: empty for never or a time more than
   * {@code Long.MAX_VALUE} ns after the origin.
   *
   * @return the due time
   */
  public OptionalLong dueNanoTime() {
    return Times.nanoTime(originNanos, due());
  }

  /**
   * How long to wait from {@code nowNanoTime} until the attempt is due: 0 if already due, {@code
   * Long.MAX_VALUE} for never.
   *
   * @param nowNanoTime a {@link System#nanoTime()} value
   * @return the delay in nanoseconds
   */
  public long delayNanos(long nowNanoTime) {
    return Times.delay(originNanos, due(), nowNanoTime);
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
        && due().equals(a.due())
        && key().equals(a.key())
        && keyIndex == a.keyIndex
        && keyUse == a.keyUse
        && Arrays.equals(bytes, keyLen, bytes.length, a.bytes, a.keyLen, a.bytes.length)
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
    return Objects.hash(
        id, kind, due(), key(), keyIndex, keyUse, Arrays.hashCode(body()), sentNanoTime);
  }

  /**
   * A readable form with the body as text.
   *
   * @return the text
   */
  @Override
  public String toString() {
    return "Attempt[id=" + id + ", kind=" + kind + ", due=" + due() + ", key=" + key()
        + ", keyIndex=" + keyIndex + ", keyUse=" + keyUse + ", body="
        + new String(bytes, keyLen, bytes.length - keyLen, StandardCharsets.UTF_8)
        + ", sentNanoTime="
        + sentNanoTime + ", zeroWindowRetry=" + zeroWindowRetry + "]";
  }
}
