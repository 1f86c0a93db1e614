package io.leasebeat;

import java.lang.ref.Cleaner;
import java.util.Locale;
import java.util.Objects;
import java.util.Optional;
import java.util.OptionalLong;
import java.util.function.LongFunction;

/**
 * The settlement of one reservation: commit of the actual usage, the expired-commit fallback
 * through {@code POST /v1/events}, or release (rules ST-1..ST-11 of the settlement contract), as a
 * sans-IO state machine. Every rule is the Rust core's; this class only converts values.
 *
 * <p>Build it with {@link #commit(String, String)}, {@link #withoutActual(String)} or {@link
 * #release(String)} and {@link Builder#build(long, long)}, or rebuild it after a restart from its
 * durable record alone with {@link #fromRecord(byte[], long, long)}. Do what {@link #pollAction()}
 * asks (persist the record, send an attempt at its due time), report it with {@link
 * #handlePersisted} / {@link #handlePersistFailed}, {@link #handleSent}, then {@link
 * #handleResponse} or {@link #handleFailure}; every report returns a {@link SettlementDecision}. A
 * call that throws {@link LeaseException} changes nothing.
 *
 * <h2>Time</h2>
 *
 * Every {@code nowNanos} is a {@link System#nanoTime()} value; the settlement's origin is the
 * {@code nowNanos} it was built with, and a time before it (or before the previous event) is
 * refused with {@link LeaseException.Code#TIME_WENT_BACKWARDS}. {@code Long.MIN_VALUE} is refused
 * with {@link IllegalArgumentException}. Every {@code wallMillis} is the wall clock in Unix
 * milliseconds ({@link System#currentTimeMillis()}), on which a {@code Retry-After} floor ({@code
 * not_before_ms}) is measured, since only the wall clock survives a restart; a negative one is an
 * {@link IllegalArgumentException}.
 *
 * <h2>Threads and closing</h2>
 *
 * All methods may be called from any thread; calls are serialized. {@link #close()} is idempotent
 * and waits for calls in progress; any call after it throws {@link IllegalStateException}. A
 * settlement that is never closed is freed by a {@link Cleaner} once unreachable.
 *
 * <p>Settlement decisions are rare (a handful per lease), so this class uses plain JNI calls and
 * objects, none of the heartbeat's hot-path machinery.
 *
 * <pre>{@code
 * try (Settlement s = Settlement.commit(reservationId, "{\"actual\":{\"unit\":\"TOKENS\",\"amount\":900}}")
 *     .build(System.nanoTime(), System.currentTimeMillis())) {
 *   SettlementRecord record = s.pollAction().record().orElseThrow();
 *   // ... write record.jsonBytes() durably ...
 *   s.handlePersisted(System.nanoTime());
 *   SettleAttempt commit = s.pollAction().attempt().orElseThrow();
 *   s.handleSent(commit.id(), System.nanoTime());
 *   // ... POST commit.body() with X-Idempotency-Key: commit.key() ...
 *   SettlementDecision d = s.handleResponse(commit.id(), response, System.nanoTime(),
 *       System.currentTimeMillis());
 * }
 * }</pre>
 */
public final class Settlement implements AutoCloseable {
  private static final Cleaner CLEANER = Cleaner.create();

  // ----- stable names -----

  /** The endpoint an attempt goes to. */
  public enum Endpoint {
    /** {@code POST /v1/reservations/{reservation_id}/commit}. */
    COMMIT,
    /** {@code POST /v1/events}. */
    EVENT,
    /** {@code POST /v1/reservations/{reservation_id}/release}. */
    RELEASE;

    /**
     * The stable name, e.g. {@code "commit"}.
     *
     * @return the stable name
     */
    public String wire() {
      return name().toLowerCase(Locale.ROOT);
    }
  }

  /** What a settlement is doing. */
  public enum Mode {
    /** Committing the actual. */
    COMMIT,
    /** The expired-commit fallback through {@code POST /v1/events} (ST-5). */
    EVENT,
    /** Releasing (not journaled). */
    RELEASE;

    /**
     * The stable name, e.g. {@code "event"}.
     *
     * @return the stable name
     */
    public String wire() {
      return name().toLowerCase(Locale.ROOT);
    }
  }

  /** The mode stored in a durable record. */
  public enum RecordMode {
    /** The commit is to be sent. */
    COMMIT,
    /** The event fallback is to be sent. */
    EVENT;

    /**
     * The stable name, e.g. {@code "commit"}.
     *
     * @return the stable name
     */
    public String wire() {
      return name().toLowerCase(Locale.ROOT);
    }
  }

  /** What happens to the durable record with a decision. */
  public enum RecordChange {
    /** Write the record ({@link SettlementDecision#next()} is {@link Next#PERSIST}). */
    WRITE,
    /** Remove it (J-5: only after a success or an understood rejection). */
    REMOVE,
    /** Keep it for a later replay. */
    KEEP;

    /**
     * The stable name, e.g. {@code "remove"}.
     *
     * @return the stable name
     */
    public String wire() {
      return name().toLowerCase(Locale.ROOT);
    }
  }

  /** What comes after a decision. */
  public enum Next {
    /** Persist the record, then acknowledge it. */
    PERSIST,
    /** Send the commit at the decision's due time. */
    COMMIT,
    /** Send the event at the decision's due time. */
    EVENT,
    /** Send the release at the decision's due time. */
    RELEASE,
    /** The attempt is in flight: report its outcome. */
    WAIT,
    /** The settlement ended; see the outcome. */
    DONE;

    /**
     * The stable name, e.g. {@code "persist"}.
     *
     * @return the stable name
     */
    public String wire() {
      return name().toLowerCase(Locale.ROOT);
    }
  }

  /** How a settlement ended. The stable strings are the same in every language. */
  public enum Outcome {
    /** ST-2: commit success. The record is removed. */
    COMMITTED,
    /** ST-2: event success (the expired-commit fallback). The record is removed. */
    APPLIED,
    /** ST-2: release success. */
    RELEASED,
    /** ST-7: the server understood and refused (see the code). The record is removed. */
    REJECTED,
    /** ST-6: 401 or 403. The record stays; never a release. */
    AUTH_FAILED,
    /** ST-8: a 4xx without a usable code. The record stays. */
    UNCLASSIFIED,
    /** ST-3: the attempts of this run are used up. The record stays for replay. */
    EXHAUSTED,
    /** ST-5: the reservation expired and no event body is known. The record stays. */
    EXPIRED_UNRECORDED,
    /** ST-10: no actual amount is known; nothing was sent. */
    NO_ACTUAL;

    /**
     * The stable name, e.g. {@code "auth_failed"}.
     *
     * @return the stable name
     */
    public String wire() {
      return name().toLowerCase(Locale.ROOT);
    }

    /**
     * Whether this is a terminal success (ST-2).
     *
     * @return true for committed, applied and released
     */
    public boolean isSuccess() {
      return this == COMMITTED || this == APPLIED || this == RELEASED;
    }
  }

  /** How the event behind a decision was classified. */
  public enum Classification {
    /** The settlement was built from its configuration. */
    START,
    /** The settlement was built from a record (SP-4). */
    RESTART,
    /** The caller acknowledged the persist. */
    PERSISTED,
    /** The caller reported that the persist failed (SP-3). */
    PERSIST_FAILED,
    /** The caller sent the attempt. */
    SENT,
    /** ST-2 success. */
    SUCCESS,
    /** A 2xx that is not the exact success (ST-2). */
    AMBIGUOUS,
    /** A timeout, connection failure or reset (ST-3). */
    TRANSPORT,
    /** A 5xx, 1xx, 3xx or a status of 600 and above (ST-3). */
    SERVER_ERROR,
    /** 429 or {@code LIMIT_EXCEEDED} (ST-4). */
    THROTTLED,
    /** 410 or {@code RESERVATION_EXPIRED} on a commit (ST-5). */
    EXPIRED,
    /** 401 or 403 (ST-6). */
    AUTH,
    /** An understood rejection (ST-7). */
    REJECTED,
    /** Any other 4xx (ST-8). */
    UNCLASSIFIED;

    /**
     * The stable name, e.g. {@code "server_error"}.
     *
     * @return the stable name
     */
    public String wire() {
      return name().toLowerCase(Locale.ROOT);
    }
  }

  /** A warning carried by a decision. */
  public enum Warning {
    /** SP-3: the persist failed; the request goes anyway (the message is the detail). */
    PERSIST_FAILED,
    /** ST-4: a 429 without a usable {@code Retry-After}: the backoff alone decides. */
    RETRY_AFTER_UNUSABLE,
    /** ST-4: the {@code Retry-After} exceeded 3600 s and was capped. */
    RETRY_AFTER_CAPPED;

    /**
     * The stable name, e.g. {@code "persist_failed"}.
     *
     * @return the stable name
     */
    public String wire() {
      return name().toLowerCase(Locale.ROOT);
    }
  }

  /**
   * The retry policy of a settlement (ST-3, SP-1): at most {@code maxAttempts} requests of one
   * mode in one process run, {@code initialMillis} after the first failure, doubling, at most
   * {@code maxMillis} between attempts. The core checks the values ({@code maxAttempts} at least
   * 1, {@code initialMillis <= maxMillis}: else {@link LeaseException.Code#INVALID_CONFIG}).
   *
   * @param maxAttempts requests of one mode per run (default 5)
   * @param initialMillis the delay after the first failure in ms (default 500)
   * @param maxMillis the longest delay between attempts in ms (default 30000)
   */
  public record RetryPolicy(int maxAttempts, long initialMillis, long maxMillis) {
    /** The defaults: 5 attempts, 500 ms doubling, at most 30 s. */
    public static final RetryPolicy DEFAULT = new RetryPolicy(5, 500, 30_000);

    /**
     * Checks that no value is negative.
     *
     * @param maxAttempts requests of one mode per run
     * @param initialMillis the delay after the first failure in ms
     * @param maxMillis the longest delay between attempts in ms
     * @throws IllegalArgumentException for a negative value
     */
    public RetryPolicy {
      if (maxAttempts < 0 || initialMillis < 0 || maxMillis < 0) {
        throw new IllegalArgumentException(
            "retry policy values must not be negative: maxAttempts="
                + maxAttempts
                + ", initialMillis="
                + initialMillis
                + ", maxMillis="
                + maxMillis);
      }
    }
  }

  // ----- the builder -----

  /** Configures a {@link Settlement}. Not thread-safe; reusable. */
  public static final class Builder {
    private final String reservationId;
    private final String commitJson;
    private final boolean release;
    private String baseUrl;
    private String eventJson;
    private String releaseReason;
    private RetryPolicy retry = RetryPolicy.DEFAULT;
    private String keyPrefix;

    private Builder(String reservationId, String commitJson, boolean release) {
      this.reservationId = Objects.requireNonNull(reservationId, "reservationId");
      this.commitJson = commitJson;
      this.release = release;
    }

    /**
     * The server, stored in the record (default {@code ""}; at most 4096 bytes).
     *
     * @param baseUrl the base URL
     * @return this builder
     */
    public Builder baseUrl(String baseUrl) {
      this.baseUrl = Objects.requireNonNull(baseUrl, "baseUrl");
      return this;
    }

    /**
     * What the expired-commit fallback adds, as JSON text: an object with {@code subject} and
     * {@code action} (ST-5). Without it, a 410 ends {@link Outcome#EXPIRED_UNRECORDED}.
     *
     * @param eventJson the event members, or null for none
     * @return this builder
     */
    public Builder event(String eventJson) {
      this.eventJson = eventJson;
      return this;
    }

    /**
     * The release's {@code reason} (at most 256 characters), for a release only.
     *
     * @param reason the reason, or null for none
     * @return this builder
     */
    public Builder releaseReason(String reason) {
      this.releaseReason = reason;
      return this;
    }

    /**
     * The retry policy (default {@link RetryPolicy#DEFAULT}).
     *
     * @param retry the policy
     * @return this builder
     */
    public Builder retry(RetryPolicy retry) {
      this.retry = Objects.requireNonNull(retry, "retry");
      return this;
    }

    /**
     * Deterministic keys {@code "<prefix>1"} instead of a random UUIDv4 key. For tests and
     * replays only.
     *
     * @param prefix the prefix
     * @return this builder
     */
    public Builder keyPrefix(String prefix) {
      this.keyPrefix = Objects.requireNonNull(prefix, "prefix");
      return this;
    }

    /**
     * Builds the settlement at {@code nowNanos} (its origin) and {@code wallMillis}. A commit's
     * first action is {@link SettlementAction.Type#PERSIST} of its record; without an actual it is
     * done at once ({@link Outcome#NO_ACTUAL}); a release is due at once.
     *
     * @param nowNanos a {@link System#nanoTime()} value: the origin
     * @param wallMillis the wall clock, Unix ms
     * @return the settlement (close it)
     * @throws LeaseException {@link LeaseException.Code#INVALID_CONFIG} for what the core refuses:
     *     a reservation id outside 1..=128 characters or with a control character, a commit body
     *     that is not a JSON object with a valid {@code actual} (an amount beyond 2^63-1
     *     included), a body with {@code idempotency_key}, an event without {@code subject} and
     *     {@code action}, a bad retry policy, ...
     * @throws IllegalArgumentException for {@code Long.MIN_VALUE}, a negative wall clock, or text
     *     with an unpaired surrogate
     */
    public Settlement build(long nowNanos, long wallMillis) {
      Heartbeat.checkTime(nowNanos, "nowNanos");
      checkWall(wallMillis);
      byte[] envelope =
          NativeBridge.nativeSettleNew(
              Utf8.encode(reservationId, "reservationId"),
              Utf8.encodeNullable(baseUrl, "baseUrl"),
              Utf8.encodeNullable(commitJson, "commitJson"),
              Utf8.encodeNullable(eventJson, "eventJson"),
              release,
              Utf8.encodeNullable(releaseReason, "releaseReason"),
              retry.maxAttempts(),
              retry.initialMillis(),
              retry.maxMillis(),
              Utf8.encodeNullable(keyPrefix, "keyPrefix"),
              0,
              wallMillis);
      return open(envelope, nowNanos);
    }
  }

  /**
   * A commit of a known actual amount.
   *
   * @param reservationId the reservation
   * @param commitJson the commit body without its key, as JSON text: an object with {@code actual}
   *     (an {@code Amount}) and optional {@code metrics} and {@code metadata}
   * @return a builder
   */
  public static Builder commit(String reservationId, String commitJson) {
    return new Builder(reservationId, Objects.requireNonNull(commitJson, "commitJson"), false);
  }

  /**
   * A commit whose actual amount is unknown: nothing is sent (ST-10), the settlement is done at
   * once with {@link Outcome#NO_ACTUAL}.
   *
   * @param reservationId the reservation
   * @return a builder
   */
  public static Builder withoutActual(String reservationId) {
    return new Builder(reservationId, null, false);
  }

  /**
   * A release (work that used nothing; ST-9): due at once, not journaled.
   *
   * @param reservationId the reservation
   * @return a builder
   */
  public static Builder release(String reservationId) {
    return new Builder(reservationId, null, true);
  }

  /**
   * A settlement rebuilt from its durable record alone (a restart, SP-4), with the default retry
   * policy. See {@link #fromRecord(byte[], RetryPolicy, long, long)}.
   *
   * @param record the record file's bytes
   * @param nowNanos a {@link System#nanoTime()} value: the origin
   * @param wallMillis the wall clock, Unix ms
   * @return the settlement (close it)
   */
  public static Settlement fromRecord(byte[] record, long nowNanos, long wallMillis) {
    return fromRecord(record, RetryPolicy.DEFAULT, nowNanos, wallMillis);
  }

  /**
   * A settlement rebuilt from its durable record alone (a restart, SP-4): the record's key and
   * mode, a fresh attempt count; the first request is due {@code max(0, not_before_ms -
   * wallMillis)} after {@code nowNanos} (at most 3600 s), and nothing is persisted until the record
   * changes.
   *
   * @param record the record file's bytes
   * @param retry the retry policy
   * @param nowNanos a {@link System#nanoTime()} value: the origin
   * @param wallMillis the wall clock, Unix ms
   * @return the settlement (close it)
   * @throws LeaseException {@link LeaseException.Code#INVALID_ARGUMENT} for a record the core
   *     refuses (not JSON, another version, a missing or mismatched key, ...: a journal
   *     quarantines it, J-4), {@link LeaseException.Code#INVALID_CONFIG} for a bad retry policy
   * @throws IllegalArgumentException for {@code Long.MIN_VALUE} or a negative wall clock
   */
  public static Settlement fromRecord(
      byte[] record, RetryPolicy retry, long nowNanos, long wallMillis) {
    Objects.requireNonNull(record, "record");
    Objects.requireNonNull(retry, "retry");
    Heartbeat.checkTime(nowNanos, "nowNanos");
    checkWall(wallMillis);
    byte[] envelope =
        NativeBridge.nativeSettleFromRecord(
            record.clone(), retry.maxAttempts(), retry.initialMillis(), retry.maxMillis(), 0, wallMillis);
    return open(envelope, nowNanos);
  }

  /**
   * {@link #fromRecord(byte[], RetryPolicy, long, long)} of the record's text.
   *
   * @param record the record file's text
   * @param retry the retry policy
   * @param nowNanos a {@link System#nanoTime()} value: the origin
   * @param wallMillis the wall clock, Unix ms
   * @return the settlement (close it)
   */
  public static Settlement fromRecord(
      String record, RetryPolicy retry, long nowNanos, long wallMillis) {
    return fromRecord(Utf8.encode(Objects.requireNonNull(record, "record"), "record"), retry, nowNanos, wallMillis);
  }

  // ----- state -----

  /** Frees the native handle exactly once (run by close() or by the Cleaner). */
  private static final class Free implements Runnable {
    private final long handle;

    Free(long handle) {
      this.handle = handle;
    }

    @Override
    public void run() {
      NativeBridge.nativeSettleFree(handle);
    }
  }

  private final long handle;
  private final long origin;
  private final Cleaner.Cleanable cleanable;
  private final Object lock = new Object();
  private boolean closed; // guarded by lock
  private SettlementDecision last; // guarded by lock

  private Settlement(long handle, long origin, SettlementDecision first) {
    this.handle = handle;
    this.origin = origin;
    this.last = first;
    this.cleanable = CLEANER.register(this, new Free(handle));
  }

  private static Settlement open(byte[] envelope, long origin) {
    return read(Wire.open(envelope), origin);
  }

  /** A settlement from a handle and its first decision in {@code w} (also {@link Journal#replay}). */
  static Settlement read(Wire w, long origin) {
    long handle = w.u64();
    return new Settlement(handle, origin, SettlementDecision.read(w, origin));
  }

  private static void checkWall(long wallMillis) {
    if (wallMillis < 0) {
      throw new IllegalArgumentException(
          "wallMillis must be a Unix time in ms (not negative), got " + wallMillis);
    }
  }

  /** Runs one native call on the open handle, serialized with every other and with close(). */
  Wire call(LongFunction<byte[]> f) {
    synchronized (lock) {
      if (closed) {
        throw new IllegalStateException("leasebeat: this Settlement is closed");
      }
      return Wire.open(f.apply(handle));
    }
  }

  SettlementDecision decide(LongFunction<byte[]> f) {
    synchronized (lock) {
      SettlementDecision d = SettlementDecision.read(call(f), origin);
      last = d;
      return d;
    }
  }

  /** nowNanos - origin as the core's unsigned ns. */
  long since(long nowNanos) {
    Heartbeat.checkTime(nowNanos, "nowNanos");
    long since = nowNanos - origin;
    if (since < 0) {
      throw new LeaseException(
          LeaseException.Code.TIME_WENT_BACKWARDS,
          "time " + nowNanos + " is before this settlement's origin " + origin);
    }
    return since;
  }

  // ----- calls -----

  /**
   * What the caller must do now.
   *
   * @return the action
   * @throws IllegalStateException if closed
   */
  public SettlementAction pollAction() {
    return SettlementAction.read(call(h -> NativeBridge.nativeSettleGet(h, 5)), origin);
  }

  /**
   * When the next attempt is due, as a {@link System#nanoTime()} value, if one waits to be sent.
   *
   * @return the due time, or empty
   * @throws IllegalStateException if closed
   */
  public OptionalLong pollTimeoutNanos() {
    Wire w = call(h -> NativeBridge.nativeSettleGet(h, 4));
    return w.bool() ? OptionalLong.of(nanoTime(origin, w.u64())) : OptionalLong.empty();
  }

  /**
   * The record of the last {@link SettlementAction.Type#PERSIST} is durable (at {@code nowNanos}).
   *
   * @param nowNanos a {@link System#nanoTime()} value
   * @return the decision
   * @throws LeaseException {@link LeaseException.Code#NOT_OUTSTANDING} when no persist is
   *     outstanding, {@link LeaseException.Code#STOPPED} after the end, ...
   * @throws IllegalStateException if closed
   */
  public SettlementDecision handlePersisted(long nowNanos) {
    long now = since(nowNanos);
    return decide(h -> NativeBridge.nativeSettlePersisted(h, now));
  }

  /**
   * The write of the last {@link SettlementAction.Type#PERSIST} failed (SP-3): the request goes
   * anyway at the same due time, and the decision carries {@link Warning#PERSIST_FAILED}.
   *
   * @param message why it failed
   * @param nowNanos a {@link System#nanoTime()} value
   * @return the decision
   * @throws IllegalStateException if closed
   */
  public SettlementDecision handlePersistFailed(String message, long nowNanos) {
    byte[] m = Utf8.encode(Objects.requireNonNull(message, "message"), "message");
    long now = since(nowNanos);
    return decide(h -> NativeBridge.nativeSettlePersistFailed(h, m, now));
  }

  /**
   * The caller sent attempt {@code attemptId} at {@code nowNanos}.
   *
   * @param attemptId the attempt's id
   * @param nowNanos a {@link System#nanoTime()} value
   * @return the decision
   * @throws IllegalStateException if closed
   */
  public SettlementDecision handleSent(long attemptId, long nowNanos) {
    long now = since(nowNanos);
    return decide(h -> NativeBridge.nativeSettleSent(h, attemptId, now));
  }

  /**
   * The HTTP response to attempt {@code attemptId}, observed at {@code nowNanos} (after its
   * complete body) and wall clock {@code wallMillis}. The response's timing flag is not used.
   *
   * @param attemptId the attempt's id
   * @param response the response as it arrived
   * @param nowNanos a {@link System#nanoTime()} value
   * @param wallMillis the wall clock, Unix ms
   * @return the decision
   * @throws LeaseException {@link LeaseException.Code#INVALID_ARGUMENT} for a status outside
   *     100..=999, ...
   * @throws IllegalStateException if closed
   */
  public SettlementDecision handleResponse(
      long attemptId, Response response, long nowNanos, long wallMillis) {
    Objects.requireNonNull(response, "response");
    checkWall(wallMillis);
    byte[] headers = Heartbeat.headerPairs(response);
    byte[] body = response.body();
    long now = since(nowNanos);
    return decide(
        h ->
            NativeBridge.nativeSettleResponse(
                h, attemptId, response.status(), headers, body, now, wallMillis));
  }

  /**
   * A transport failure of attempt {@code attemptId} (no response), observed at {@code nowNanos}:
   * transient (ST-3).
   *
   * @param attemptId the attempt's id
   * @param failure what failed
   * @param nowNanos a {@link System#nanoTime()} value
   * @return the decision
   * @throws IllegalStateException if closed
   */
  public SettlementDecision handleFailure(long attemptId, TransportFailure failure, long nowNanos) {
    int code = Heartbeat.failureCode(Objects.requireNonNull(failure, "failure"));
    long now = since(nowNanos);
    return decide(h -> NativeBridge.nativeSettleFailure(h, attemptId, code, now));
  }

  // ----- getters -----

  private Wire state() {
    return call(h -> NativeBridge.nativeSettleGet(h, 0));
  }

  /**
   * The reservation id.
   *
   * @return the id
   * @throws IllegalStateException if closed
   */
  public String reservationId() {
    return state().str();
  }

  /**
   * The settlement's one idempotency key ({@code ""} for {@link Outcome#NO_ACTUAL}).
   *
   * @return the key
   * @throws IllegalStateException if closed
   */
  public String key() {
    Wire w = state();
    w.str();
    return w.str();
  }

  /**
   * The current mode.
   *
   * @return the mode
   * @throws IllegalStateException if closed
   */
  public Mode mode() {
    Wire w = state();
    w.str();
    w.str();
    return wired(Mode.class, w.str());
  }

  /**
   * The outcome, once done.
   *
   * @return the outcome, or empty
   * @throws IllegalStateException if closed
   */
  public Optional<Outcome> outcome() {
    Wire w = state();
    w.str();
    w.str();
    w.str();
    return w.optStr().map(o -> wired(Outcome.class, o));
  }

  /**
   * The failed requests of the current mode in this run.
   *
   * @return the count
   * @throws IllegalStateException if closed
   */
  public int failures() {
    Wire w = state();
    w.str();
    w.str();
    w.str();
    w.optStr();
    return w.u32();
  }

  /**
   * The record as it is (or is to be) persisted; empty for a release and for {@link
   * Outcome#NO_ACTUAL}.
   *
   * @return the record, or empty
   * @throws IllegalStateException if closed
   */
  public Optional<SettlementRecord> record() {
    Wire w = call(h -> NativeBridge.nativeSettleGet(h, 1));
    return w.bool() ? Optional.of(SettlementRecord.read(w)) : Optional.empty();
  }

  /**
   * The attempt to send or in flight.
   *
   * @return the attempt, or empty
   * @throws IllegalStateException if closed
   */
  public Optional<SettleAttempt> attempt() {
    Wire w = call(h -> NativeBridge.nativeSettleGet(h, 2));
    return w.bool() ? Optional.of(SettleAttempt.read(w, origin)) : Optional.empty();
  }

  /**
   * The most recent decision (the first one is made when the settlement is built).
   *
   * @return the decision
   * @throws IllegalStateException if closed
   */
  public SettlementDecision lastDecision() {
    synchronized (lock) {
      if (closed) {
        throw new IllegalStateException("leasebeat: this Settlement is closed");
      }
      return last;
    }
  }

  /**
   * The origin: the {@link System#nanoTime()} value this settlement was built at.
   *
   * @return the origin
   */
  public long originNanos() {
    return origin;
  }

  /**
   * Whether {@link #close()} was called.
   *
   * @return true once closed
   */
  public boolean isClosed() {
    synchronized (lock) {
      return closed;
    }
  }

  /** Frees the native state. Idempotent; waits for a call in progress. */
  @Override
  public void close() {
    synchronized (lock) {
      if (closed) {
        return;
      }
      closed = true;
      cleanable.clean();
    }
  }

  @Override
  public String toString() {
    return "Settlement{origin=" + origin + ", last=" + last + "}";
  }

  // ----- decoding helpers -----

  /** The constant of {@code type} whose stable name is {@code wire}. */
  static <E extends Enum<E>> E wired(Class<E> type, String wire) {
    E e = Enum.valueOf(type, wire.toUpperCase(Locale.ROOT));
    if (!e.name().toLowerCase(Locale.ROOT).equals(wire)) {
      throw new IllegalStateException("leasebeat: unknown " + type.getSimpleName() + " " + wire);
    }
    return e;
  }

  /** A u64 bit pattern as a long, saturated to Long.MAX_VALUE. */
  static long saturated(long bits) {
    return bits < 0 ? Long.MAX_VALUE : bits;
  }

  static OptionalLong optMillis(Wire w) {
    return w.bool() ? OptionalLong.of(saturated(w.u64())) : OptionalLong.empty();
  }

  /** origin + u64 ns since it, as a nanoTime value; Long.MAX_VALUE when not expressible. */
  static long nanoTime(long origin, long sinceBits) {
    if (sinceBits < 0) {
      return Long.MAX_VALUE;
    }
    long t = origin + sinceBits;
    return (origin > 0 && t < 0) ? Long.MAX_VALUE : t;
  }
}
