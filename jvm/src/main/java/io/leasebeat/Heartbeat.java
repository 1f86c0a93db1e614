package io.leasebeat;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.lang.ref.Cleaner;
import java.lang.ref.Reference;
import java.math.BigInteger;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;
import java.util.Optional;
import java.util.OptionalLong;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The heartbeat of one Cycles reservation: a sans-IO state machine that decides when to extend the
 * lease, when to retry with the same idempotency key, and when to stop.
 *
 * <p>It starts with a create attempt; or takes over a create the caller already performed ({@link
 * Builder#adopt(AdoptedCreate)}); or, for a reservation created elsewhere whose create response is
 * unknown ({@link Builder#reservationId(String)}), starts with an immediate extension. The caller sends what {@link
 * #pollAction()} asks for, reports it with {@link #handleSent}, then reports the outcome with
 * {@link #handleResponse} or {@link #handleFailure} (or ends it with {@link #cancel}). Each
 * outcome yields a {@link Decision}. A call that throws {@link LeaseException} changes nothing.
 *
 * <h2>Time</h2>
 *
 * Every {@code nowNanos} argument is a {@link System#nanoTime()} value, which may be negative. The
 * heartbeat has an <em>origin</em> ({@link Builder#originNanos(long)}, by default {@code
 * System.nanoTime()} when {@link Builder#build()} ran): the core sees {@code nowNanos - origin}
 * (computed as nanoTime differences are, by subtraction) as unsigned nanoseconds. A time before the
 * origin is refused with {@link LeaseException.Code#TIME_WENT_BACKWARDS}, as is a time before the
 * previous event. Due times come back as nanoseconds since the origin ({@link Decision#at()}) and,
 * for convenience, as nanoTime values and delays ({@link Decision#delayNanos(long)}). Times more
 * than 2^63-1 ns (292 years) after the origin cannot be expressed. {@code Long.MIN_VALUE} is
 * refused everywhere with {@link IllegalArgumentException}: it is no nanoTime value a caller can
 * mean (a difference with it wraps), typically an uninitialized or sentinel time.
 *
 * <h2>Threads and closing</h2>
 *
 * All methods may be called from any thread; calls are serialized by the native heartbeat. {@link
 * #close()} is idempotent and waits for calls in progress (calls and close hold one monitor);
 * any call after it throws {@link IllegalStateException}. A
 * heartbeat that is never closed is freed by a {@link Cleaner} once unreachable.
 *
 * <pre>{@code
 * try (Heartbeat hb = Heartbeat.builder().ttlMillis(60_000).requestTimeoutMillis(10_000).build()) {
 *   Attempt create = hb.pollAction().attempt().orElseThrow();
 *   hb.handleSent(create.id(), System.nanoTime());
 *   // ... POST create.body() with X-Idempotency-Key: create.key() ...
 *   Decision d = hb.handleResponse(create.id(), Response.of(200).withBody(body), System.nanoTime());
 *   long wait = d.delayNanos(System.nanoTime());
 * }
 * }</pre>
 */
public final class Heartbeat implements AutoCloseable {
  private static final Cleaner CLEANER = Cleaner.create();
  private static final AtomicLong LIVE_HANDLES = new AtomicLong();

  /** Frees the native handle exactly once (run by close() or by the Cleaner). */
  private static final class Free implements Runnable {
    private final long handle;

    Free(long handle) {
      this.handle = handle;
    }

    @Override
    public void run() {
      NativeBridge.nativeFree(handle);
      LIVE_HANDLES.decrementAndGet();
    }
  }

  private final long handle;
  private final long origin;
  private final long timeoutBits;
  private final boolean timeoutUnbounded;
  private final Cleaner.Cleanable cleanable;
  /**
   * Every native call on the handle, and {@link #close()}, runs holding this monitor: calls are
   * serialized (as the native heartbeat's own mutex would serialize them anyway) and close waits
   * for the call in progress. One uncontended monitor costs two atomic operations, where the
   * former read/write lock plus monitor cost four.
   */
  private final Object lock = new Object();

  private volatile boolean closed; // written holding the lock

  /**
   * The current action, so that a {@link #pollAction()} needs no native call: set (holding {@link
   * #lock}) by every call that brings the action back, cleared (holding it) before every change;
   * read without the lock, with acquire semantics. A poll that races a change either sees the
   * action from before it (the poll is ordered first) or finds none and waits for the lock.
   */
  @SuppressWarnings("unused") // accessed through CURRENT
  private Action current;

  private static final VarHandle CURRENT;

  static {
    try {
      CURRENT = MethodHandles.lookup().findVarHandle(Heartbeat.class, "current", Action.class);
    } catch (ReflectiveOperationException e) {
      throw new ExceptionInInitializerError(e);
    }
  }

  /**
   * Read and written holding {@link #lock}: the attempt this side holds (its key and body, which
   * the native calls do not send again while its id is {@link #heldId}), its id (0: none), and
   * the action it came in (also for a stop: same reason, same object).
   */
  private Attempt held;

  private long heldId;
  private Action heldAction;

  /** The create request this heartbeat was built from, if any (for a runner's event fallback). */
  volatile String createRequestJson;

  private Heartbeat(long handle, long origin, long timeoutBits, boolean timeoutUnbounded) {
    this.handle = handle;
    this.origin = origin;
    this.timeoutBits = timeoutBits;
    this.timeoutUnbounded = timeoutUnbounded;
    LIVE_HANDLES.incrementAndGet();
    this.cleanable = CLEANER.register(this, new Free(handle));
  }

  /**
   * A builder with the defaults: ttl 60000 ms, unbounded request timeout, random UUIDv4 keys, an
   * empty create request, origin = {@code System.nanoTime()} at build time.
   *
   * @return a new builder
   */
  public static Builder builder() {
    return new Builder();
  }

  /** Configures a {@link Heartbeat}. Not thread-safe; reusable. */
  public static final class Builder {
    private static final BigInteger U64_MAX = BigInteger.ONE.shiftLeft(64).subtract(BigInteger.ONE);

    private long ttlMillis = 60_000;
    private long timeoutBits;
    private boolean timeoutUnbounded = true;
    private String createRequestJson;
    private String keyPrefix;
    private byte[] reservationIdUtf8;
    private Long originNanos;

    private Builder() {}

    /**
     * The requested lease length: the create's {@code ttl_ms} and every extension's {@code
     * extend_by_ms}. The core accepts 1000..86400000.
     *
     * @param ttlMillis milliseconds
     * @return this builder
     * @throws IllegalArgumentException if negative
     */
    public Builder ttlMillis(long ttlMillis) {
      if (ttlMillis < 0) {
        throw new IllegalArgumentException("ttlMillis must not be negative, got " + ttlMillis);
      }
      this.ttlMillis = ttlMillis;
      return this;
    }

    /**
     * The enforced upper bound of one complete attempt (connect, write, read, failure detection).
     *
     * @param requestTimeoutMillis milliseconds, at least 0
     * @return this builder
     * @throws IllegalArgumentException if negative
     */
    public Builder requestTimeoutMillis(long requestTimeoutMillis) {
      if (requestTimeoutMillis < 0) {
        throw new IllegalArgumentException(
            "requestTimeoutMillis must not be negative, got " + requestTimeoutMillis);
      }
      this.timeoutBits = requestTimeoutMillis;
      this.timeoutUnbounded = false;
      return this;
    }

    /**
     * The request timeout as an unsigned 64-bit value, for values above {@code Long.MAX_VALUE};
     * 2^64-1 means unbounded, as in the core.
     *
     * @param requestTimeoutMillis milliseconds, 0..2^64-1
     * @return this builder
     * @throws IllegalArgumentException if outside 0..2^64-1
     */
    public Builder requestTimeoutMillis(BigInteger requestTimeoutMillis) {
      Objects.requireNonNull(requestTimeoutMillis, "requestTimeoutMillis");
      if (requestTimeoutMillis.signum() < 0 || requestTimeoutMillis.compareTo(U64_MAX) > 0) {
        throw new IllegalArgumentException(
            "requestTimeoutMillis must be within 0..2^64-1, got " + requestTimeoutMillis);
      }
      this.timeoutBits = requestTimeoutMillis.longValue(); // the low 64 bits: exact for u64
      this.timeoutUnbounded = false;
      return this;
    }

    /**
     * No enforced request timeout (the default): the attempt budget is +infinity (HB-13), so a
     * failure stops the heartbeat with {@code retry_window_exhausted}.
     *
     * @return this builder
     */
    public Builder unboundedTimeout() {
      this.timeoutUnbounded = true;
      this.timeoutBits = 0;
      return this;
    }

    /**
     * Further members of the create request body ({@code subject}, {@code action}, {@code
     * estimate}, ...) as a JSON object; the core adds {@code idempotency_key} and {@code ttl_ms}.
     *
     * @param json a JSON object, or null for none
     * @return this builder
     * @throws IllegalArgumentException if it holds an unpaired surrogate (no UTF-8 form)
     */
    public Builder createRequestJson(String json) {
      Utf8.encodeNullable(json, "createRequestJson");
      this.createRequestJson = json;
      return this;
    }

    /**
     * Heartbeat an existing reservation, created elsewhere (by another process, or by a create
     * request sent without this library), instead of creating one: {@link #build()} then makes a
     * heartbeat whose first action is an immediate extension of {@code reservationId} (attempt id
     * 1, key index 1, due at the origin) with a new key, and whose {@link Heartbeat#reservationId()}
     * is set from the start.
     *
     * <p>Until that first extension succeeds nothing proves any lead: its success anchors the
     * schedule as a create's would, and a transient failure before it stops with {@link
     * StopReason#RETRY_WINDOW_EXHAUSTED}. There is no create request, so it excludes {@link
     * #createRequestJson(String)}.
     *
     * <p>The core requires 1..128 characters (Unicode code points); {@link #build()} refuses
     * another length with {@link LeaseException.Code#INVALID_ARGUMENT}.
     *
     * @param reservationId the reservation's id
     * @return this builder
     * @throws NullPointerException if null (a missing id never silently means "create one")
     * @throws IllegalArgumentException if it is not valid Unicode (an unpaired surrogate), which
     *     could not be sent as the same id
     */
    public Builder reservationId(String reservationId) {
      Objects.requireNonNull(reservationId, "reservationId");
      this.reservationIdUtf8 = Utf8.encode(reservationId, "reservationId");
      return this;
    }

    /**
     * Deterministic keys {@code prefix1}, {@code prefix2}, ... instead of random UUIDv4 keys: for
     * tests and replays only.
     *
     * @param prefix the prefix, or null for UUIDv4 keys
     * @return this builder
     * @throws IllegalArgumentException if it holds an unpaired surrogate (no UTF-8 form)
     */
    public Builder keyPrefix(String prefix) {
      Utf8.encodeNullable(prefix, "keyPrefix");
      this.keyPrefix = prefix;
      return this;
    }

    /**
     * The {@link System#nanoTime()} value that is time 0 for the core. The default is {@code
     * System.nanoTime()} at {@link #build()}; replays of recorded timelines pass 0.
     *
     * @param originNanos a nanoTime value
     * @return this builder
     * @throws IllegalArgumentException for {@code Long.MIN_VALUE}, which is no time (see {@link
     *     Heartbeat})
     */
    public Builder originNanos(long originNanos) {
      checkTime(originNanos, "originNanos");
      this.originNanos = originNanos;
      return this;
    }

    /**
     * Creates the heartbeat, whose first action is due at the origin: the create attempt, or,
     * with {@link #reservationId(String)}, the extension of that reservation.
     *
     * @return a new heartbeat (close it)
     * @throws LeaseException with {@link LeaseException.Code#INVALID_CONFIG} if the core refuses
     *     the configuration (ttl out of range, create request not a JSON object or setting {@code
     *     idempotency_key} or {@code ttl_ms}); with {@link LeaseException.Code#INVALID_ARGUMENT} if
     *     it refuses the reservation id (empty, or longer than 128 characters)
     * @throws IllegalStateException if both {@link #reservationId(String)} and {@link
     *     #createRequestJson(String)} were set
     */
    public Heartbeat build() {
      if (reservationIdUtf8 != null && createRequestJson != null) {
        throw new IllegalStateException(
            "reservationId (heartbeat an existing reservation) and createRequestJson (create one)"
                + " exclude each other");
      }
      long origin = originNanos != null ? originNanos : System.nanoTime();
      byte[] prefix = Utf8.encodeNullable(keyPrefix, "keyPrefix");
      byte[] envelope;
      if (reservationIdUtf8 != null) {
        envelope =
            NativeBridge.nativeForReservation(
                ttlMillis, timeoutBits, timeoutUnbounded, reservationIdUtf8, prefix);
      } else {
        byte[] create = Utf8.encodeNullable(createRequestJson, "createRequestJson");
        envelope = NativeBridge.nativeNew(ttlMillis, timeoutBits, timeoutUnbounded, create, prefix);
      }
      Heartbeat hb = new Heartbeat(Wire.open(envelope).u64(), origin, timeoutBits, timeoutUnbounded);
      hb.createRequestJson = createRequestJson;
      return hb;
    }

    /**
     * Takes over a lease whose create the caller already performed with its own HTTP client (an
     * SDK's create), instead of sending one: the create's outcome is classified exactly as if the
     * heartbeat had sent it (HB-15). A success anchors the schedule with the create's round trip
     * and {@code remaining_ttl_ms}, with no priming extension; an ambiguous or transient outcome
     * asks for the one same-key create retry, with the caller's key (and {@link
     * AdoptedCreate.Builder#requestBody(byte[]) body}); a 4xx stops {@link
     * StopReason#CREATE_REJECTED}; and so on. The create counts as attempt 1 and its key as key 1.
     *
     * <p>Use this, not {@link #reservationId(String)}, whenever the create's response is at hand:
     * that one spends an extension at once and stops on an early transient failure.
     *
     * <p>Time: without {@link #originNanos(long)}, the origin is the create's send time (its
     * receive time when the send time is unknown), so every later time must be at or after it.
     * This builder's ttl and request timeout must be those the create used; {@link
     * #createRequestJson(String)} is used only for a create retry without {@link
     * AdoptedCreate.Builder#requestBody(byte[])}.
     *
     * @param create the create the caller performed
     * @return the heartbeat (close it) and its first decision
     * @throws NullPointerException if {@code create} is null
     * @throws IllegalStateException if {@link #reservationId(String)} was set
     * @throws LeaseException {@link LeaseException.Code#INVALID_CONFIG} for the configuration,
     *     {@link LeaseException.Code#INVALID_KEY} for a key of 0 or more than 256 characters or
     *     with a CR, LF or other control character (not a header value), {@link
     *     LeaseException.Code#INVALID_ARGUMENT} for a request body that is not a JSON object with
     *     this key, or a send time after the receive time; {@link
     *     LeaseException.Code#TIME_WENT_BACKWARDS} for a time before an explicit origin
     */
    public Adopted adopt(AdoptedCreate create) {
      Objects.requireNonNull(create, "create");
      if (reservationIdUtf8 != null) {
        throw new IllegalStateException(
            "reservationId (heartbeat an existing reservation) and adopt (take over a create)"
                + " exclude each other");
      }
      long origin = originNanos != null ? originNanos : create.earliestNanos();
      long received = sinceOrigin(create.receivedNanos(), origin);
      long sent = create.sentNanos().isPresent() ? sinceOrigin(create.sentNanos().getAsLong(), origin) : 0;
      byte[] prefix = Utf8.encodeNullable(keyPrefix, "keyPrefix");
      byte[] createJson = Utf8.encodeNullable(createRequestJson, "createRequestJson");
      Response r = create.response().orElse(null);
      byte[] headers = null;
      byte[] body = null;
      int failure = -1;
      int status = 0;
      boolean timingUnknown = false;
      if (r != null) {
        headers = headerPairs(r);
        body = r.rawBody();
        status = r.status();
        timingUnknown = r.timingUnknown();
      } else {
        failure = failureCode(create.failure().orElseThrow());
      }
      long[] slots = new long[Slots.ADOPT_HANDLE + 1];
      Object[] objs = new Object[Slots.DECIDED_OBJS];
      byte[] text = new byte[Slots.TEXT_LEN];
      Slots.check(
              NativeBridge.nativeAdopt(
                  ttlMillis,
                  timeoutBits,
                  timeoutUnbounded,
                  createJson,
                  prefix,
                  create.keyUtf8(),
                  create.rawRequestBody(),
                  create.sentNanos().isPresent(),
                  sent,
                  received,
                  failure,
                  status,
                  headers,
                  body,
                  timingUnknown,
                  slots,
                  objs,
                  text),
          objs);
      Heartbeat hb = new Heartbeat(slots[Slots.ADOPT_HANDLE], origin, timeoutBits, timeoutUnbounded);
      Decision first;
      try {
        first = Slots.decision(slots, 0, objs, 0, text, 0, origin);
        synchronized (hb.lock) {
          hb.remember(
              slots,
              Slots.DEC_LEN,
              objs,
              Slots.DECIDED_O_ACTION,
              ByteBuffer.wrap(text),
              Slots.decisionText(slots, 0));
        }
      } catch (RuntimeException e) {
        hb.close();
        throw e;
      }
      return new Adopted(hb, first);
    }
  }

  /**
   * {@code builder.adopt(create)}: takes over a lease whose create the caller already performed.
   * See {@link Builder#adopt(AdoptedCreate)}.
   *
   * @param config the configuration the create used (ttl, request timeout)
   * @param create the create the caller performed
   * @return the heartbeat (close it) and its first decision
   */
  public static Adopted adoptCreate(Builder config, AdoptedCreate create) {
    return Objects.requireNonNull(config, "config").adopt(create);
  }

  // ----- plumbing -----

  /** Refuses Long.MIN_VALUE, which no nanoTime difference can reach (its negation overflows). */
  static void checkTime(long nanos, String what) {
    if (nanos == Long.MIN_VALUE) {
      throw new IllegalArgumentException(
          what + " must be a System.nanoTime() value, got Long.MIN_VALUE");
    }
  }

  private static long sinceOrigin(long nowNanos, long origin) {
    long since = nowNanos - origin;
    if (since < 0) {
      throw new LeaseException(
          LeaseException.Code.TIME_WENT_BACKWARDS,
          "time " + nowNanos + " is before this heartbeat's origin " + origin);
    }
    return since;
  }

  /** The encoded headers, or null for none. */
  static byte[] headerPairs(Response response) {
    if (response.headers().isEmpty()) {
      return null;
    }
    List<String[]> pairs = new ArrayList<>(response.headers().size());
    for (Header h : response.headers()) {
      pairs.add(new String[] {h.name(), h.value()});
    }
    return Wire.pairs(pairs);
  }

  static int failureCode(TransportFailure failure) {
    switch (failure) {
      case TIMEOUT:
        return 0;
      case CONNECT:
        return 1;
      case RESET:
        return 2;
      default:
        throw new IllegalArgumentException("unknown failure " + failure);
    }
  }

  /**
   * Checks, holding {@link #lock} before a native call, that the handle was not freed; pair with
   * {@link #exit()} in a finally block around the synchronized block.
   *
   * @throws IllegalStateException if closed
   */
  private void enter() {
    if (closed) {
      throw new IllegalStateException("leasebeat: this Heartbeat is closed");
    }
  }

  private void exit() {
    // Keep this object (and so the handle) reachable until the native call returned.
    Reference.reachabilityFence(this);
  }

  /**
   * Runs a decision-returning native call (a change: {@code call} with the arguments it takes)
   * and decodes its decision and the action it leaves, which becomes the current one; all holding
   * {@link #lock}. One method for the three calls, with no lambda capturing their arguments (an
   * allocation per decision).
   */
  private Decision decide(
      Slots.Scratch scratch,
      int call,
      long attemptId,
      int code,
      long now,
      byte[] headers,
      byte[] body,
      int bodyLen,
      boolean timingUnknown) {
    Object[] objs = scratch.objs;
    try {
      long h = handle;
      try {
        synchronized (lock) {
          enter();
          // A change invalidates the current action first: whatever happens below (a refusal, a
          // panic, a decoding failure), no poll returns the action from before it.
          CURRENT.setRelease(this, null);
          long buf = scratch.addr;
          int status;
          switch (call) {
            case RESPONSE:
              status =
                  NativeBridge.nativeResponse(
                      h, attemptId, code, headers, body, bodyLen, timingUnknown, now, heldId, buf,
                      objs);
              break;
            case FAILURE:
              status = NativeBridge.nativeFailure(h, attemptId, code, now, heldId, buf, objs);
              break;
            default:
              status = NativeBridge.nativeCancel(h, now, heldId, buf, objs);
          }
          Slots.check(status, objs);
          long[] raw = new long[Slots.DEC_LEN]; // kept by the decision
          long[] act = scratch.act;
          scratch.slots(0, raw, Slots.DEC_LEN);
          scratch.slots(Slots.DEC_LEN, act, Slots.ACT_LEN);
          int t = Slots.decisionText(raw, 0);
          // The texts are decoded on first use: no String is built (nor compared) here.
          Decision d = new Decision(raw, scratch.bytes(0, t), objs, 0, origin);
          remember(act, 0, objs, Slots.DECIDED_O_ACTION, scratch.buf, Slots.BUF_TEXT + t);
          return d;
        }
      } finally {
        exit();
        Reference.reachabilityFence(scratch);
      }
    } finally {
      Slots.give(scratch);
    }
  }

  /**
   * Decodes the action at slot offset {@code o} (its texts from {@code t} in {@code text}) and
   * makes it the current one; reuses the held attempt (and action) where they match. Holding
   * {@link #lock}.
   */
  private Action remember(long[] slots, int o, Object[] objs, int oo, ByteBuffer text, int t) {
    boolean stop = slots[o + Slots.A_TAG] == 2;
    boolean same = heldAction != null && (stop || heldId == slots[o + Slots.A_ID]);
    Action a =
        Slots.action(
            slots,
            o,
            objs,
            oo,
            text,
            t,
            same && !stop ? held : null,
            same ? heldAction : null,
            origin);
    Attempt at = a.attempt().orElse(null);
    held = at;
    heldId = at == null ? 0 : at.id();
    heldAction = a;
    CURRENT.setRelease(this, a);
    return a;
  }

  /** The decision-returning native calls ({@link #decide}). */
  private static final int RESPONSE = 0;

  private static final int FAILURE = 1;
  private static final int CANCEL = 2;

  private long core(long nowNanos) {
    checkTime(nowNanos, "nowNanos");
    return sinceOrigin(nowNanos, origin);
  }

  private static void checkId(long attemptId) {
    if (attemptId <= 0) {
      throw new IllegalArgumentException("attemptId must be positive, got " + attemptId);
    }
  }

  private State state() {
    long[] slots = new long[Slots.STATE_LEN];
    Object[] objs = new Object[Slots.STATE_OBJS];
    byte[] text = new byte[Slots.TEXT_LEN];
    int status;
    Attempt known;
    long h = handle;
    try {
      synchronized (lock) {
        enter();
        known = held;
        status = NativeBridge.nativeState(h, heldId, slots, objs, text);
      }
    } finally {
      exit();
    }
    Slots.check(status, objs);
    return new State(slots, objs, text, known, origin);
  }

  private static final class State {
    final Action action;
    final Optional<String> reservationId;
    final Optional<Mode> mode;
    final long maxRtt;
    final long lastEvent;
    final Optional<Decision> last;

    State(long[] s, Object[] objs, byte[] text, Attempt known, long origin) {
      action = Slots.action(s, 0, objs, 0, ByteBuffer.wrap(text), 0, known, null, origin);
      reservationId = Optional.ofNullable((String) objs[Slots.S_O_RID]);
      mode = Slots.mode(s[Slots.S_MODE]);
      maxRtt = s[Slots.S_MAX_RTT];
      lastEvent = s[Slots.S_LAST_EVENT];
      last =
          s[Slots.S_HAS_LAST] != 0
              ? Optional.of(
                  Slots.decision(
                      s,
                      Slots.S_DECISION,
                      objs,
                      Slots.S_O_DECISION,
                      text,
                      Slots.actionText(s, 0),
                      origin))
              : Optional.empty();
    }
  }

  // ----- polls and getters -----

  /**
   * What the caller must do now: send an attempt (when it is due), await the outcome of the one in
   * flight, or stop.
   *
   * @return the action
   * @throws IllegalStateException if closed
   */
  public Action pollAction() {
    Action a = (Action) CURRENT.getAcquire(this);
    if (a != null) {
      // Nothing changed since that action was current.
      if (closed) {
        throw new IllegalStateException("leasebeat: this Heartbeat is closed");
      }
      return a;
    }
    Slots.Scratch scratch = Slots.take();
    Object[] objs = scratch.objs;
    try {
      long h = handle;
      try {
        synchronized (lock) {
          enter();
          Slots.check(NativeBridge.nativePoll(h, heldId, scratch.addr, objs), objs);
          long[] slots = scratch.act;
          scratch.slots(0, slots, Slots.ACT_LEN);
          return remember(slots, 0, objs, 0, scratch.buf, Slots.BUF_TEXT);
        }
      } finally {
        exit();
        Reference.reachabilityFence(scratch);
      }
    } finally {
      Slots.give(scratch);
    }
  }

  /**
   * The outstanding attempt (to send, or in flight), unless stopped.
   *
   * @return the attempt
   * @throws IllegalStateException if closed
   */
  public Optional<Attempt> attempt() {
    return pollAction().attempt();
  }

  /**
   * When the next attempt is due, in nanoseconds since the origin, if one waits to be sent; empty
   * when stopped, in flight, or due at +infinity.
   *
   * @return the due time
   * @throws IllegalStateException if closed
   */
  public Optional<Num> pollTimeout() {
    Action a = pollAction();
    return a.type() == Action.Type.SEND
        ? a.attempt().map(Attempt::due).filter(Num::isFinite)
        : Optional.empty();
  }

  /**
   * The reservation id: once a create succeeded, or from the start for a heartbeat built with
   * {@link Builder#reservationId(String)}.
   *
   * @return the id
   * @throws IllegalStateException if closed
   */
  public Optional<String> reservationId() {
    return state().reservationId;
  }

  /**
   * The stop reason, once stopped.
   *
   * @return the reason
   * @throws IllegalStateException if closed
   */
  public Optional<StopReason> stopReason() {
    return pollAction().stopReason();
  }

  /**
   * The mode of the last success, if any.
   *
   * @return the mode
   * @throws IllegalStateException if closed
   */
  public Optional<Mode> mode() {
    return state().mode;
  }

  /**
   * Largest rtt (ms) over this lease's schema-valid measured successes; 0 before the first.
   *
   * @return milliseconds
   * @throws IllegalStateException if closed
   */
  public long maxRttMillis() {
    return state().maxRtt;
  }

  /**
   * The time of the latest event accepted, as a nanoTime value (the origin before any).
   *
   * @return a nanoTime value
   * @throws IllegalStateException if closed
   */
  public long lastEventNanoTime() {
    return origin + state().lastEvent;
  }

  /**
   * The most recent decision.
   *
   * @return the decision, empty before the first outcome
   * @throws IllegalStateException if closed
   */
  public Optional<Decision> lastDecision() {
    return state().last;
  }

  /**
   * The request timeout (the enforced bound of one whole attempt) this heartbeat was built with, in
   * milliseconds: empty when unbounded, or above {@code Long.MAX_VALUE}. Runners use it as the
   * attempt deadline.
   *
   * @return milliseconds
   */
  public OptionalLong requestTimeoutMillis() {
    return timeoutUnbounded || timeoutBits < 0 ? OptionalLong.empty() : OptionalLong.of(timeoutBits);
  }

  /**
   * The nanoTime value that is time 0 for the core.
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
    return closed;
  }

  // ----- events -----

  /**
   * The caller sent attempt {@code attemptId} at {@code nowNanos}. Sending later than due (a late
   * timer) or earlier (a stalled clock) is accepted.
   *
   * @param attemptId {@link Attempt#id()}
   * @param nowNanos a nanoTime value, not before the previous event
   * @throws LeaseException {@code NOT_OUTSTANDING}, {@code ALREADY_SENT}, {@code STOPPED}, {@code
   *     TIME_WENT_BACKWARDS}
   * @throws IllegalArgumentException if {@code attemptId} is not positive
   * @throws IllegalStateException if closed
   */
  public void handleSent(long attemptId, long nowNanos) {
    checkId(attemptId);
    long now = core(nowNanos);
    Object[] objs = new Object[2];
    int status;
    long h = handle;
    try {
      synchronized (lock) {
        enter();
        // The action changes (sent: now awaiting the outcome): the next poll asks for it.
        CURRENT.setRelease(this, null);
        status = NativeBridge.nativeSent(h, attemptId, now, objs);
      }
    } finally {
      exit();
    }
    Slots.check(status, objs);
  }

  /**
   * The HTTP response to attempt {@code attemptId}, observed at {@code nowNanos} (after its
   * complete body was received). The core classifies it (success, ambiguous, transient,
   * throttled, permanent, rejected, unexpected).
   *
   * @param attemptId {@link Attempt#id()}
   * @param response the response as it arrived
   * @param nowNanos a nanoTime value, not before the previous event
   * @return the decision
   * @throws LeaseException {@code NOT_OUTSTANDING}, {@code NOT_SENT}, {@code STOPPED}, {@code
   *     TIME_WENT_BACKWARDS}, {@code INVALID_KEY}
   * @throws IllegalArgumentException if {@code attemptId} is not positive
   * @throws NullPointerException if {@code response} is null
   * @throws IllegalStateException if closed
   */
  public Decision handleResponse(long attemptId, Response response, long nowNanos) {
    checkId(attemptId);
    Objects.requireNonNull(response, "response");
    long now = core(nowNanos);
    byte[] headers = headerPairs(response);
    int code = response.status();
    boolean timingUnknown = response.timingUnknown();
    Slots.Scratch scratch = Slots.take();
    byte[] raw = response.rawBody();
    int bodyLen = scratch.putBody(raw);
    byte[] body = bodyLen < 0 ? raw : null;
    return decide(
        scratch, RESPONSE, attemptId, code, now, headers, body, bodyLen, timingUnknown);
  }

  /**
   * A transport failure of attempt {@code attemptId}, observed at {@code nowNanos}.
   *
   * @param attemptId {@link Attempt#id()}
   * @param failure what failed
   * @param nowNanos a nanoTime value, not before the previous event
   * @return the decision
   * @throws LeaseException {@code NOT_OUTSTANDING}, {@code NOT_SENT}, {@code STOPPED}, {@code
   *     TIME_WENT_BACKWARDS}, {@code INVALID_KEY}
   * @throws IllegalArgumentException if {@code attemptId} is not positive
   * @throws NullPointerException if {@code failure} is null
   * @throws IllegalStateException if closed
   */
  public Decision handleFailure(long attemptId, TransportFailure failure, long nowNanos) {
    checkId(attemptId);
    Objects.requireNonNull(failure, "failure");
    long now = core(nowNanos);
    int code = failureCode(failure);
    return decide(Slots.take(), FAILURE, attemptId, code, now, null, null, -1, false);
  }

  /**
   * The caller ends the heartbeat at {@code nowNanos}: stop {@link StopReason#CANCELLED}.
   *
   * @param nowNanos a nanoTime value, not before the previous event
   * @return the stop decision
   * @throws LeaseException {@code STOPPED} (a stop is final), {@code TIME_WENT_BACKWARDS}
   * @throws IllegalStateException if closed
   */
  public Decision cancel(long nowNanos) {
    long now = core(nowNanos);
    return decide(Slots.take(), CANCEL, 0, 0, now, null, null, -1, false);
  }

  /**
   * Frees the native heartbeat. Idempotent; waits for calls in progress on other threads; every
   * later call throws {@link IllegalStateException}.
   */
  @Override
  public void close() {
    synchronized (lock) {
      if (!closed) {
        closed = true;
        cleanable.clean();
      }
    }
  }

  // ----- library-level -----

  /**
   * The version of the native library (the Rust crates' version).
   *
   * @return e.g. {@code "0.1.0"}
   */
  public static String nativeVersion() {
    Wire w = Wire.open(NativeBridge.nativeCatalog());
    for (int i = 0, n = w.u32(); i < n; i++) {
      w.str();
      w.str();
    }
    for (int i = 0, n = w.u32(); i < n; i++) {
      w.str();
      w.str();
    }
    return w.str();
  }

  /** Native handles not yet freed (for the binding's leak tests). */
  static long liveHandles() {
    return LIVE_HANDLES.get();
  }
}
