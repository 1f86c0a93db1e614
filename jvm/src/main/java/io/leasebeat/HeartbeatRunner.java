package io.leasebeat;

import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.Objects;
import java.util.Optional;
import java.util.Set;
import java.util.OptionalLong;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * The ready heartbeat loop for one lease, on a {@link ScheduledExecutorService}: it waits until each
 * attempt is due, sends it through a {@link Transport}, enforces the whole-attempt deadline, feeds
 * every outcome to the {@link Heartbeat}, and delivers every decision, jeopardy and stop to a
 * {@link Listener}. It holds no rule: the heartbeat decides everything.
 *
 * <pre>{@code
 * Transport transport = new HttpClientTransport(URI.create("http://127.0.0.1:7878"), apiKey);
 * Heartbeat hb = Heartbeat.builder().ttlMillis(60_000).requestTimeoutMillis(5_000)
 *     .createRequestJson(createJson).build();        // or Builder.adopt(...) after an SDK's create
 * try (HeartbeatRunner runner = HeartbeatRunner.builder(hb, transport)
 *         .listener(myListener).releaseOnStop(true).build()) {
 *   CompletableFuture<Decision> stopped = runner.start();
 *   doTheWork();
 *   runner.commit("{\"unit\":\"TOKENS\",\"amount\":812}").join();  // journaled; or runner.stop()
 * }
 * hb.close();
 * }</pre>
 *
 * <h2>Timing</h2>
 *
 * <ul>
 *   <li><b>Timer slack.</b> A scheduled task runs a little after its delay (thread wake-up, a busy
 *       executor, a GC pause). The runner measures how late each of its timer tasks ran and keeps
 *       the largest recent lateness, decaying by 1/8 per wake-up and kept within 0.5 ms .. 20 ms
 *       (starting at 1 ms), like the Rust driver; it schedules each send that much <em>early</em>
 *       and sends when it wakes within that slack of the due time. Sending early is the
 *       conservative direction (the core accepts it).
 *   <li><b>Attempt deadline.</b> With a request timeout of T ms ({@link
 *       Heartbeat#requestTimeoutMillis()}), each attempt's deadline ({@link
 *       Transport.Call#deadlineNanoTime()}) is {@code sent + T} minus a detection slack, as in the
 *       Rust driver: {@code (T - 30) x 8/9} ms (at least 1) are enforced, e.g. 856 ms of 1000. The
 *       runner schedules its own timeout task at {@code deadline - timer slack}, so a timed-out
 *       attempt is fed to the core as {@link TransportFailure#TIMEOUT} no later than {@code sent +
 *       T} (never after: the core's retry window is not spent by the runner's lateness). The in-flight future is then
 *       cancelled, and its outcome, should it still arrive, is ignored. Without a request timeout
 *       there is no deadline.
 *   <li><b>Sent time.</b> An attempt is marked sent just before the transport is called: the round
 *       trip the core measures is a little longer than the real one (conservative).
 * </ul>
 *
 * <h2>Jeopardy</h2>
 *
 * {@link Listener#onJeopardy} is called at once when the lease reaches its proven lead ({@link
 * Decision#provenUntil()}, D-15) with no newer success, and when a beat goes out later than due by
 * more than the safety margin (a starved executor, a suspended machine). On the fallback path (an
 * older server without {@code remaining_ttl_ms}) nothing is proven: right after the first success
 * the runner reports {@link Jeopardy.Kind#PROVEN_LEAD_REACHED} at once (with no {@code
 * provenUntilNanoTime}), once; a later decision with a different proven lead re-arms it.
 *
 * <h2>Stopping</h2>
 *
 * {@link #stop()} (or {@link #stopAndCommit(String)}, or {@link #close()}) may be called from any
 * thread, any number of times, at any moment: the first call cancels the heartbeat (unless it
 * already stopped), ignores any in-flight attempt's late outcome, and, if enabled, releases (or
 * commits) the reservation through a {@link Settlement} (one key and its retries; a commit is
 * journaled first); the future of {@link #start()} then completes with the stop decision, once that
 * settlement ended. The runner does not close the heartbeat: its owner does.
 *
 * <p>Threads: every callback runs on the executor or on the transport's completion threads, one at
 * a time per runner. Listeners must not block; what they throw is logged and ignored.
 */
public final class HeartbeatRunner implements AutoCloseable {
  static final long MIN_SLACK_NS = 500_000L;
  static final long MAX_SLACK_NS = 20_000_000L;
  static final long INITIAL_SLACK_NS = 1_000_000L;
  private static final System.Logger LOG = System.getLogger(HeartbeatRunner.class.getName());
  private static final AtomicInteger THREADS = new AtomicInteger();

  /**
   * Receives what the runner observes. Every method has an empty default; exceptions thrown are
   * logged and otherwise ignored. Calls for one runner never overlap.
   */
  public interface Listener {
    /**
     * A decision of the heartbeat (stops included).
     *
     * @param reservationId the reservation, once known
     * @param decision the decision
     */
    default void onDecision(Optional<String> reservationId, Decision decision) {}

    /**
     * The lease is in jeopardy (D-15).
     *
     * @param jeopardy what happened
     */
    default void onJeopardy(Jeopardy jeopardy) {}

    /**
     * The heartbeat stopped (after its last {@link #onDecision}), before any release or commit.
     *
     * @param reservationId the reservation, if one was created
     * @param stop the stop decision
     */
    default void onStop(Optional<String> reservationId, Decision stop) {}

    /**
     * The release ({@link Builder#releaseOnStop(boolean)}) or commit ({@link
     * HeartbeatRunner#stopAndCommit(String)}) on stop ended (after {@link #onSettled}): the last
     * attempt's answer. Not called for {@link HeartbeatRunner#commit} and {@link
     * HeartbeatRunner#release}, whose futures carry the result.
     *
     * @param endpoint the last attempt's endpoint: {@link Transport.Endpoint#RELEASE}, {@link
     *     Transport.Endpoint#COMMIT}, or {@link Transport.Endpoint#EVENT} after the expired-commit
     *     fallback
     * @param reservationId the reservation
     * @param response the last response, or empty if the last attempt failed
     * @param failure the last attempt's failure ({@link TransportFailure#TIMEOUT} too when no answer
     *     came before the runner was closed), or empty if a response arrived
     */
    default void onFinalized(
        Transport.Endpoint endpoint,
        String reservationId,
        Optional<Response> response,
        Optional<TransportFailure> failure) {}

    /**
     * A heartbeat failure or stop (HP-1): every failed beat (with what happens next: a retry with
     * the same or a new key) and every stop the runner did not ask for. Called under every policy.
     *
     * @param failure what happened
     */
    default void onHeartbeatFailure(HeartbeatFailure failure) {}

    /**
     * A decision of a settlement this runner drives ({@link #commit}, {@link #release}, or a
     * record replayed from the journal on start).
     *
     * @param reservationId the reservation
     * @param decision the decision
     */
    default void onSettlementDecision(String reservationId, SettlementDecision decision) {}

    /**
     * A settlement this runner drives ended.
     *
     * @param result how it ended
     */
    default void onSettled(SettleResult result) {}

    /**
     * The journal was replayed on start (before its settlements are driven).
     *
     * @param replay what the replay handed over and reported
     */
    default void onReplay(JournalReplay replay) {}
  }

  /** What the runner does when the heartbeat fails (HP-1). */
  public enum HeartbeatFailurePolicy {
    /**
     * The default: report every failure and stop ({@link Listener#onHeartbeatFailure}, and a log
     * warning); the work carries on and the final settlement runs.
     */
    WARN,
    /**
     * As {@link #WARN}, and when the heartbeat stops on its own (the lease is no longer kept) the
     * runner cancels the work's {@link Future} ({@link Builder#work(Future)}) with {@code
     * cancel(true)}: its thread is interrupted.
     */
    CANCEL,
    /**
     * As {@link #WARN}, and the settlement ({@link #commit}, {@link #release}) runs, then its
     * future completes exceptionally with a {@link HeartbeatFailureException} carrying the
     * heartbeat's failure and the settlement's result.
     */
    FAIL_ON_FINALIZE
  }

  /**
   * A heartbeat failure or stop (HP-1).
   *
   * @param reservationId the reservation, once known
   * @param decision the heartbeat's decision
   * @param disposition what happens next
   */
  public record HeartbeatFailure(
      Optional<String> reservationId, Decision decision, Disposition disposition) {
    /** What happens after a failure. */
    public enum Disposition {
      /** The beat is retried with the same idempotency key. */
      RETRY_SAME_KEY,
      /** The beat is retried with a new key. */
      RETRY_NEW_KEY,
      /** The heartbeat stopped ({@link Decision#stopReason()} says why). */
      STOP
    }

    /**
     * Checks for nulls.
     *
     * @param reservationId see {@link #reservationId()}
     * @param decision see {@link #decision()}
     * @param disposition see {@link #disposition()}
     */
    public HeartbeatFailure {
      Objects.requireNonNull(reservationId, "reservationId");
      Objects.requireNonNull(decision, "decision");
      Objects.requireNonNull(disposition, "disposition");
    }

    /**
     * The stop reason, for {@link Disposition#STOP}.
     *
     * @return the reason, or empty
     */
    public Optional<StopReason> stopReason() {
      return decision.stopReason();
    }
  }

  /**
   * A {@code lease_in_jeopardy} report (D-15).
   *
   * @param kind why
   * @param reservationId the reservation, once known
   * @param atNanoTime when it was noticed ({@link System#nanoTime()})
   * @param provenUntilNanoTime the proven lead it concerns, if any (none on the fallback path)
   * @param lateByNanos for {@link Kind#BEAT_LATE}: how much later than due the beat went out; 0
   *     otherwise
   */
  public record Jeopardy(
      Kind kind,
      Optional<String> reservationId,
      long atNanoTime,
      OptionalLong provenUntilNanoTime,
      long lateByNanos) {
    /** Why a lease is in jeopardy. */
    public enum Kind {
      /**
       * The lease reached its proven lead without a newer success (on the fallback path, which
       * proves nothing: right after the first success).
       */
      PROVEN_LEAD_REACHED,
      /** A beat went out later than due by more than the safety margin. */
      BEAT_LATE
    }

    /**
     * Checks for nulls.
     *
     * @param kind see {@link #kind()}
     * @param reservationId see {@link #reservationId()}
     * @param atNanoTime see {@link #atNanoTime()}
     * @param provenUntilNanoTime see {@link #provenUntilNanoTime()}
     * @param lateByNanos see {@link #lateByNanos()}
     */
    public Jeopardy {
      Objects.requireNonNull(kind, "kind");
      Objects.requireNonNull(reservationId, "reservationId");
      Objects.requireNonNull(provenUntilNanoTime, "provenUntilNanoTime");
    }

    /**
     * The stable name of this report.
     *
     * @return {@code "lease_in_jeopardy"}
     */
    public String wire() {
      return "lease_in_jeopardy";
    }
  }

  /**
   * A builder for a runner of {@code heartbeat} over {@code transport}.
   *
   * @param heartbeat the heartbeat to run (new, or adopted; its owner closes it)
   * @param transport how to send
   * @return the builder
   */
  public static Builder builder(Heartbeat heartbeat, Transport transport) {
    return new Builder(heartbeat, transport);
  }

  /** Configures a {@link HeartbeatRunner}. */
  public static final class Builder {
    private final Heartbeat heartbeat;
    private final Transport transport;
    private ScheduledExecutorService executor;
    private Listener listener = new Listener() {};
    private boolean releaseOnStop;
    private Duration finalizeTimeout = Duration.ofSeconds(10);
    private Journal journal;
    private boolean journalOff;
    private Path journalDir;
    private String tenant;
    private boolean replayOnStart = true;
    private String eventJson;
    private Settlement.RetryPolicy settlementRetry = Settlement.RetryPolicy.DEFAULT;
    private HeartbeatFailurePolicy failurePolicy = HeartbeatFailurePolicy.WARN;
    private Future<?> work;

    private Builder(Heartbeat heartbeat, Transport transport) {
      this.heartbeat = Objects.requireNonNull(heartbeat, "heartbeat");
      this.transport = Objects.requireNonNull(transport, "transport");
    }

    /**
     * The executor that waits and runs the loop (shared by many runners if you like). Not set: the
     * runner makes its own single daemon thread and shuts it down on {@link #close()}.
     *
     * @param executor the executor (the caller shuts it down)
     * @return this builder
     */
    public Builder executor(ScheduledExecutorService executor) {
      this.executor = Objects.requireNonNull(executor, "executor");
      return this;
    }

    /**
     * Who hears decisions, jeopardy and the stop.
     *
     * @param listener the listener
     * @return this builder
     */
    public Builder listener(Listener listener) {
      this.listener = Objects.requireNonNull(listener, "listener");
      return this;
    }

    /**
     * Release the reservation once the heartbeat stopped (any stop, unless the server already said
     * it is gone: finalized, not found, or a {@link HeartbeatRunner#commit} or {@link
     * HeartbeatRunner#release} was started), so that it never lapses while still active. The
     * release goes through a {@link Settlement} (one key, its retries; not journaled: it carries no
     * usage). After {@code expired} it is sent all the same: a server may accept it for a grace
     * period after expiry. Its result goes to {@link Listener#onSettled} and {@link
     * Listener#onFinalized}, and then the future of {@link HeartbeatRunner#start()} completes.
     * Default false. {@link HeartbeatRunner#stopAndCommit(String)} commits instead.
     *
     * @param release whether to release
     * @return this builder
     */
    public Builder releaseOnStop(boolean release) {
      this.releaseOnStop = release;
      return this;
    }

    /**
     * The deadline of each settlement attempt when the heartbeat has no request timeout (with one,
     * the heartbeat's enforced attempt budget is used), and how long {@link HeartbeatRunner#close()}
     * waits for settlements before it leaves them to the journal. Default 10 s.
     *
     * @param timeout the deadline, positive
     * @return this builder
     */
    public Builder finalizeTimeout(Duration timeout) {
      if (timeout.isNegative() || timeout.isZero()) {
        throw new IllegalArgumentException("finalizeTimeout must be positive, got " + timeout);
      }
      this.finalizeTimeout = timeout;
      return this;
    }

    /**
     * The journal settlements are persisted to (J-1) and replayed from on start; the caller owns
     * (and closes) it, and every start of a runner replays it. Not set: with an {@link
     * HttpClientTransport}, the runner uses the process-wide journal of its directory ({@link
     * #journalDir(Path)}, else {@code CYCLES_JOURNAL_DIR}, else {@code
     * ~/.runcycles/commit-journal}), server (the transport's base URL) and principal ({@link
     * #tenant(String)}, else the API key), opened once and shared by every such runner (never
     * closed: the OS releases its claims at exit), and replayed by the first runner started on
     * it; with another transport there is none unless set here.
     *
     * @param journal the journal (its base URL is the server's)
     * @return this builder
     */
    public Builder journal(Journal journal) {
      this.journal = Objects.requireNonNull(journal, "journal");
      this.journalOff = false;
      return this;
    }

    /**
     * The base directory of the runner's own journal (see {@link #journal(Journal)}).
     *
     * @param dir the directory
     * @return this builder
     */
    public Builder journalDir(Path dir) {
      this.journalDir = Objects.requireNonNull(dir, "dir");
      return this;
    }

    /**
     * The tenant the runner's own journal is partitioned by (instead of the API key), so that
     * another API key of the same tenant finds the records.
     *
     * @param tenant the tenant, or null for the API key
     * @return this builder
     */
    public Builder tenant(String tenant) {
      this.tenant = tenant;
      return this;
    }

    /**
     * No journal at all (explicit opt-out): settlements are not persisted, so a crash between the
     * work and the end of the commit loses the usage, and nothing is replayed on start.
     *
     * @return this builder
     */
    public Builder noJournal() {
      this.journal = null;
      this.journalOff = true;
      return this;
    }

    /**
     * Whether {@link HeartbeatRunner#start()} settles, in the background, every record of the
     * journal's partition that no other process is settling (J-6). Default true.
     *
     * @param replay whether to replay
     * @return this builder
     */
    public Builder replayOnStart(boolean replay) {
      this.replayOnStart = replay;
      return this;
    }

    /**
     * The expired-commit fallback's subject and action ({@code {"subject":{...},"action":{...}}})
     * for {@link HeartbeatRunner#commit}. Not set: taken from the heartbeat's create request (a
     * runner started from a create); an adopted reservation passes it here or to {@link
     * HeartbeatRunner#commit(String, String, String, String)}. Without it, a commit after expiry
     * ends {@code expired_unrecorded}.
     *
     * @param eventJson the JSON object
     * @return this builder
     */
    public Builder event(String eventJson) {
      this.eventJson = eventJson;
      return this;
    }

    /**
     * The settlements' retry policy (default {@link Settlement.RetryPolicy#DEFAULT}).
     *
     * @param retry the policy
     * @return this builder
     */
    public Builder settlementRetry(Settlement.RetryPolicy retry) {
      this.settlementRetry = Objects.requireNonNull(retry, "retry");
      return this;
    }

    /**
     * What happens when the heartbeat fails (HP-1); default {@link HeartbeatFailurePolicy#WARN}.
     *
     * @param policy the policy
     * @return this builder
     */
    public Builder heartbeatFailurePolicy(HeartbeatFailurePolicy policy) {
      this.failurePolicy = Objects.requireNonNull(policy, "policy");
      return this;
    }

    /**
     * The work the lease protects, cancelled ({@code cancel(true)}: its thread interrupted) under
     * {@link HeartbeatFailurePolicy#CANCEL} when the heartbeat stops on its own. May also be set
     * after start with {@link HeartbeatRunner#work(Future)}.
     *
     * @param work the work's future
     * @return this builder
     */
    public Builder work(Future<?> work) {
      this.work = Objects.requireNonNull(work, "work");
      return this;
    }

    /**
     * The runner (not started).
     *
     * @return the runner
     * @throws JournalException when the runner's own journal cannot be opened (a symbolic link,
     *     not writable, ...): choose another directory or {@link #noJournal()}
     */
    public HeartbeatRunner build() {
      return new HeartbeatRunner(this);
    }
  }

  private final Heartbeat hb;
  private final Transport transport;
  private final Listener listener;
  private final ScheduledExecutorService executor;
  private final boolean ownExecutor;
  private final boolean releaseOnStop;
  private final long finalizeTimeoutNs;
  private final long budgetNs; // Long.MAX_VALUE: no deadline
  private final long enforcedNs; // budget minus the detection slack
  private final CompletableFuture<Decision> done = new CompletableFuture<>();
  private final Journal journal; // null: no journal
  private final boolean replayOnStart;
  private final String eventJson;
  private final Settlement.RetryPolicy settlementRetry;
  private final HeartbeatFailurePolicy failurePolicy;
  /** The settlements in progress (commit, release, replayed), for flush and close. */
  private final Set<Settler> settling = ConcurrentHashMap.newKeySet();
  /** The process-wide journal this runner opened by default, if it did. */
  private SharedJournal sharedJournal;
  /** Completes once the replay on start handed its settlements over (at once without one). */
  private final CompletableFuture<Void> replayed = new CompletableFuture<>();

  // Guarded by this.
  private boolean started;
  private boolean stopRequested;
  private boolean stopped;
  private String commitActual;
  /** A release or commit was sent (or is on its way): at most one per runner. */
  private boolean finalizeSent;
  private long slackNs = INITIAL_SLACK_NS;
  private long inFlightId;
  private Future<Response> inFlight;
  private ScheduledFuture<?> tickTimer;
  private ScheduledFuture<?> deadlineTimer;
  private ScheduledFuture<?> jeopardyTimer;
  private Optional<Num> armedProvenUntil = Optional.empty();
  private boolean succeeded;
  private Decision last;
  private Future<?> work;
  /** The lease's own settlement (commit or release), once asked for: it owns the end. */
  private CompletableFuture<SettleResult> settlement;
  /** HP-1: the heartbeat's failure to report (a stop is sticky; a retry until a success). */
  private HeartbeatFailure failure;
  private boolean stopFailure;

  private HeartbeatRunner(Builder b) {
    this.hb = b.heartbeat;
    this.transport = b.transport;
    this.listener = b.listener;
    this.releaseOnStop = b.releaseOnStop;
    this.finalizeTimeoutNs = b.finalizeTimeout.toNanos();
    this.replayOnStart = b.replayOnStart;
    this.settlementRetry = b.settlementRetry;
    this.failurePolicy = b.failurePolicy;
    this.work = b.work;
    String event = b.eventJson;
    if (event == null && hb.createRequestJson != null) {
      event =
          Wire.open(NativeBridge.nativeEventOfCreate(Utf8.encode(hb.createRequestJson, "create")))
              .optStr()
              .orElse(null);
    }
    this.eventJson = event;
    if (b.journal != null) {
      this.journal = b.journal;
    } else if (!b.journalOff && transport instanceof HttpClientTransport) {
      HttpClientTransport t = (HttpClientTransport) transport;
      SharedJournal shared = SharedJournal.of(b.journalDir, t.baseUrl(), t.apiKey(), b.tenant);
      this.journal = shared.journal;
      this.sharedJournal = shared;
    } else {
      this.journal = null;
    }
    OptionalLong timeout = hb.requestTimeoutMillis();
    this.budgetNs =
        timeout.isPresent() && timeout.getAsLong() < Long.MAX_VALUE / 1_000_000L
            ? timeout.getAsLong() * 1_000_000L
            : Long.MAX_VALUE;
    this.enforcedNs =
        budgetNs == Long.MAX_VALUE
            ? Long.MAX_VALUE
            : (timeout.getAsLong() - detectionSlackMillis(timeout.getAsLong())) * 1_000_000L;
    if (b.executor != null) {
      this.executor = b.executor;
      this.ownExecutor = false;
    } else {
      ScheduledThreadPoolExecutor own =
          new ScheduledThreadPoolExecutor(
              1,
              r -> {
                Thread t = new Thread(r, "leasebeat-runner-" + THREADS.incrementAndGet());
                t.setDaemon(true);
                return t;
              });
      own.setRemoveOnCancelPolicy(true);
      this.executor = own;
      this.ownExecutor = true;
    }
  }

  /**
   * Starts the loop (the first attempt is sent when due). Calling it again returns the same future.
   *
   * @return completes with the stop decision (after the release or commit, if any)
   */
  public CompletableFuture<Decision> start() {
    synchronized (this) {
      if (!started && !stopRequested) {
        started = true;
        last = hb.lastDecision().orElse(null);
        if (last != null && !last.isStop()) {
          armJeopardy(last);
        }
        schedule(this::tick, 0);
        if (journal != null
            && replayOnStart
            && (sharedJournal == null || sharedJournal.replayed.compareAndSet(false, true))) {
          later(this::replayJournal, 0);
        } else {
          replayed.complete(null);
        }
      }
    }
    return done;
  }

  // ----- settlement (issue 27: commit / release through Settlement and the journal) -----

  /**
   * The journals runners open by default, one per (base directory, server, principal) for the
   * whole process: opening one costs a PBKDF2 of the partition name, and many runners share a
   * transport. Never closed (the OS releases their claims at exit); replayed on the first start.
   */
  static final class SharedJournal {
    private static final ConcurrentHashMap<List<String>, SharedJournal> OPEN = new ConcurrentHashMap<>();

    final Journal journal;
    final java.util.concurrent.atomic.AtomicBoolean replayed = new java.util.concurrent.atomic.AtomicBoolean();

    private SharedJournal(Journal journal) {
      this.journal = journal;
    }

    static SharedJournal of(Path dir, String baseUrl, String apiKey, String tenant) {
      Path base = Journal.baseDir(dir).toAbsolutePath().normalize();
      boolean byTenant = tenant != null && !tenant.isBlank();
      // The key lives in this process's memory only, as in the transport.
      List<String> id =
          List.of(base.toString(), baseUrl, byTenant ? "tenant" : "key", byTenant ? tenant : apiKey);
      SharedJournal j = OPEN.get(id);
      if (j != null) {
        return j;
      }
      return OPEN.computeIfAbsent(id, k -> new SharedJournal(Journal.open(base, baseUrl, apiKey, tenant)));
    }
  }

  /**
   * Commits the actual usage through a {@link Settlement} (ST-1..ST-11): the record is journaled
   * before the first commit leaves (J-1), the commit is sent and retried exactly as the
   * settlement decides (one key, its delays, {@code Retry-After}, the {@code POST /v1/events}
   * fallback after a 410 / {@code RESERVATION_EXPIRED} when the event's subject and action are
   * known), and the record is removed or kept at the end (J-5). The heartbeat keeps running while
   * the commit is in flight and stops when a settlement decision says so (ST-11). After the
   * heartbeat stopped (even {@code expired}) the commit is still sent: the server may be within
   * its grace; its answer is the result.
   *
   * <p>Only the first {@code commit} or {@link #release} of a runner settles; a later call returns
   * the same future. {@link Builder#releaseOnStop(boolean)} sends nothing once this was called.
   *
   * @param actualJson the {@code actual} Amount JSON object, e.g. {@code
   *     {"unit":"TOKENS","amount":812}}; null when no actual amount is known: nothing is sent and
   *     the result is {@link Settlement.Outcome#NO_ACTUAL} (ST-10)
   * @param metricsJson the {@code metrics} JSON object, or null
   * @param metadataJson the {@code metadata} JSON object, or null
   * @return completes with the result once the settlement ended; under {@link
   *     HeartbeatFailurePolicy#FAIL_ON_FINALIZE} exceptionally with a {@link
   *     HeartbeatFailureException} after settlement if the heartbeat failed
   * @throws LeaseException {@code INVALID_CONFIG} for a body the core refuses (not JSON, an amount
   *     beyond 2^63-1, ...): nothing is sent or written
   * @throws IllegalStateException when the lease has no reservation (its create did not succeed)
   */
  public CompletableFuture<SettleResult> commit(
      String actualJson, String metricsJson, String metadataJson) {
    return commit(actualJson, metricsJson, metadataJson, eventJson);
  }

  /**
   * {@link #commit(String, String, String)} with this event fallback (subject and action), e.g.
   * for an adopted reservation.
   *
   * @param actualJson see {@link #commit(String, String, String)}
   * @param metricsJson the {@code metrics} JSON object, or null
   * @param metadataJson the {@code metadata} JSON object, or null
   * @param eventJson {@code {"subject":{...},"action":{...}}}, or null for no fallback
   * @return see {@link #commit(String, String, String)}
   */
  public CompletableFuture<SettleResult> commit(
      String actualJson, String metricsJson, String metadataJson, String eventJson) {
    String body = null;
    if (actualJson != null) {
      StringBuilder b = new StringBuilder("{\"actual\":").append(actualJson);
      if (metricsJson != null) {
        b.append(",\"metrics\":").append(metricsJson);
      }
      if (metadataJson != null) {
        b.append(",\"metadata\":").append(metadataJson);
      }
      body = b.append('}').toString();
    }
    String commitBody = body;
    return settle(
        id ->
            (commitBody == null ? Settlement.withoutActual(id) : Settlement.commit(id, commitBody))
                .event(eventJson));
  }

  /**
   * {@link #commit(String, String, String)} of the actual amount alone.
   *
   * @param actualJson the {@code actual} Amount JSON object, or null (no actual known)
   * @return see {@link #commit(String, String, String)}
   */
  public CompletableFuture<SettleResult> commit(String actualJson) {
    return commit(actualJson, null, null);
  }

  /**
   * Releases the reservation through a {@link Settlement} (for work that used nothing): retried
   * with one key as the settlement decides, not journaled. Sent after any stop too ({@code
   * expired} included: the server may be within its grace). Only the first {@link #commit} or
   * {@code release} settles.
   *
   * @param reason the release's reason (at most 256 characters), or null
   * @return completes with the result; see {@link #commit(String, String, String)} for {@link
   *     HeartbeatFailurePolicy#FAIL_ON_FINALIZE}
   */
  public CompletableFuture<SettleResult> release(String reason) {
    return settle(id -> Settlement.release(id).releaseReason(reason));
  }

  private CompletableFuture<SettleResult> settle(
      java.util.function.Function<String, Settlement.Builder> how) {
    CompletableFuture<SettleResult> f;
    Settler st;
    // The settler is started outside this runner's lock: its decisions stop the heartbeat
    // (ST-11) under the settler's lock, which then takes this one; holding this lock while the
    // start takes the settler's would invert the order and could deadlock when the answer is
    // quick.
    synchronized (this) {
      if (settlement != null) {
        return settlement;
      }
      Optional<String> id = Optional.empty();
      try {
        id = hb.isClosed() ? Optional.empty() : hb.reservationId();
      } catch (IllegalStateException e) {
        // closed meanwhile
      }
      if (id.isEmpty() && last != null) {
        id = last.reservationId();
      }
      if (id.isEmpty()) {
        throw new IllegalStateException("leasebeat: the lease has no reservation to settle");
      }
      Settler created = settler(id.get(), how.apply(id.get()));
      st = created;
      f = st.result().whenComplete((r, ex) -> settled(created, r));
      if (failurePolicy == HeartbeatFailurePolicy.FAIL_ON_FINALIZE) {
        f =
            f.thenCompose(
                r -> {
                  HeartbeatFailure hf;
                  synchronized (this) {
                    hf = failure;
                  }
                  return hf == null
                      ? CompletableFuture.completedFuture(r)
                      : CompletableFuture.failedFuture(new HeartbeatFailureException(hf, r));
                });
      }
      settlement = f;
    }
    st.start();
    return f;
  }

  /**
   * A settler for the lease's own settlement of {@code rid} (not started), counted in progress.
   *
   * @throws LeaseException {@code INVALID_CONFIG} for a body the core refuses
   */
  private Settler settler(String rid, Settlement.Builder b) {
    Settlement s =
        b.retry(settlementRetry)
            .baseUrl(journal == null ? "" : journal.baseUrl())
            .build(System.nanoTime(), System.currentTimeMillis());
    Settler st =
        new Settler(
            s, journal, transport, executor, attemptTimeoutNs(), false, d -> settlementDecided(rid, d));
    settling.add(st);
    return st;
  }

  /** The deadline of one settlement attempt: the heartbeat's enforced budget, else the finalize timeout. */
  private long attemptTimeoutNs() {
    return enforcedNs == Long.MAX_VALUE ? finalizeTimeoutNs : enforcedNs;
  }

  private void settlementDecided(String reservationId, SettlementDecision d) {
    safely(() -> listener.onSettlementDecision(reservationId, d), "onSettlementDecision");
    if (d.stopHeartbeat()) {
      stopForSettlement();
    }
  }

  private void settled(Settler st, SettleResult r) {
    settling.remove(st);
    if (r != null) {
      safely(() -> listener.onSettled(r), "onSettled");
    }
  }

  /** ST-11: a settlement decision said stop_heartbeat: the heartbeat is cancelled, nothing sent. */
  private void stopForSettlement() {
    synchronized (this) {
      if (stopRequested || stopped) {
        return;
      }
    }
    stop(null);
  }

  /** Replays the journal on start (J-6): every record no other process holds is settled. */
  private void replayJournal() {
    try {
      replayRecords();
    } finally {
      replayed.complete(null);
    }
  }

  private void replayRecords() {
    JournalReplay r;
    try {
      r = journal.replay(System.nanoTime(), System.currentTimeMillis(), settlementRetry);
    } catch (RuntimeException e) {
      LOG.log(System.Logger.Level.WARNING, "leasebeat: the journal replay failed", e);
      return;
    }
    safely(() -> listener.onReplay(r), "onReplay");
    for (Settlement s : r.settlements()) {
      String rid = s.reservationId();
      Settler st =
          new Settler(
              s,
              journal,
              transport,
              executor,
              attemptTimeoutNs(),
              true,
              d -> safely(() -> listener.onSettlementDecision(rid, d), "onSettlementDecision"));
      settling.add(st);
      st.start().whenComplete((res, ex) -> settled(st, res));
    }
  }

  /**
   * Waits at most {@code timeout} for every settlement in progress (commit, release, replayed
   * records) to end (J-7). What is unresolved then stays journaled for the next replay (the
   * settlements go on in the background until {@link #close()}).
   *
   * @param timeout the longest wait
   * @return true when none is left in progress
   */
  public boolean flush(Duration timeout) {
    long deadline = System.nanoTime() + timeout.toNanos();
    synchronized (this) {
      if (!started) {
        replayed.complete(null); // never started: nothing replayed
      }
    }
    try {
      replayed.get(Math.max(deadline - System.nanoTime(), 0), TimeUnit.NANOSECONDS);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      return false;
    } catch (java.util.concurrent.TimeoutException e) {
      return false;
    } catch (java.util.concurrent.ExecutionException e) {
      // not completed exceptionally
    }
    for (Settler st : List.copyOf(settling)) {
      long left = deadline - System.nanoTime();
      try {
        st.result().get(Math.max(left, 0), TimeUnit.NANOSECONDS);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        return false;
      } catch (java.util.concurrent.TimeoutException e) {
        return false;
      } catch (java.util.concurrent.ExecutionException | java.util.concurrent.CancellationException e) {
        // ended (its failure was reported through its own future)
      }
    }
    return settling.isEmpty();
  }

  /**
   * The number of settlements in progress (commit, release, replayed records).
   *
   * @return the count
   */
  public int settlementsInProgress() {
    return settling.size();
  }

  /**
   * The work to cancel under {@link HeartbeatFailurePolicy#CANCEL} (see {@link
   * Builder#work(Future)}).
   *
   * @param work the work's future
   */
  public synchronized void work(Future<?> work) {
    this.work = Objects.requireNonNull(work, "work");
  }

  /**
   * The journal this runner persists to, if any.
   *
   * @return the journal, or empty (opted out, or a transport without a journal)
   */
  public Optional<Journal> journal() {
    return Optional.ofNullable(journal);
  }

  /**
   * The heartbeat failure the runner reported last and still holds (HP-1): a stop the runner did
   * not ask for, or a failed beat not yet followed by a success.
   *
   * @return the failure, or empty
   */
  public synchronized Optional<HeartbeatFailure> heartbeatFailure() {
    return Optional.ofNullable(failure);
  }

  /** HP-1: reports a failed beat or an unrequested stop; cancels the work under CANCEL. */
  private void heartbeatOutcome(Decision d) {
    boolean stop = d.isStop();
    if (!stop && d.outcome() == OutcomeClass.SUCCESS) {
      if (!stopFailure) {
        failure = null;
      }
      return;
    }
    if (stop && reasonOf(d) == StopReason.CANCELLED) {
      return; // asked for (stop(), a settlement's stop_heartbeat)
    }
    if (!stop && (d.outcome() == OutcomeClass.CANCELLED)) {
      return;
    }
    HeartbeatFailure.Disposition disp =
        stop
            ? HeartbeatFailure.Disposition.STOP
            : d.key().orElse(KeyUse.SAME) == KeyUse.SAME
                ? HeartbeatFailure.Disposition.RETRY_SAME_KEY
                : HeartbeatFailure.Disposition.RETRY_NEW_KEY;
    Optional<String> id = d.reservationId();
    if (id.isEmpty()) {
      try {
        id = hb.isClosed() ? Optional.empty() : hb.reservationId();
      } catch (IllegalStateException e) {
        id = Optional.empty();
      }
    }
    HeartbeatFailure hf = new HeartbeatFailure(id, d, disp);
    if (!stopFailure) {
      failure = hf;
      stopFailure = stop;
    }
    LOG.log(
        System.Logger.Level.WARNING,
        "leasebeat: heartbeat failure of "
            + id.orElse("(no reservation yet)")
            + ": "
            + disp
            + (stop ? " (" + reasonOf(d).wire() + ")" : "")
            + " "
            + d.toJson());
    safely(() -> listener.onHeartbeatFailure(hf), "onHeartbeatFailure");
    if (stop && failurePolicy == HeartbeatFailurePolicy.CANCEL && work != null) {
      work.cancel(true);
    }
  }

  /**
   * Stops the heartbeat ({@code cancelled}, unless it already stopped) and, with {@link
   * Builder#releaseOnStop(boolean)}, releases the reservation. Safe from any thread, any number of
   * times; an attempt in flight is abandoned and its late outcome ignored.
   *
   * @return the future of {@link #start()}
   */
  public CompletableFuture<Decision> stop() {
    return stop(null);
  }

  /**
   * Stops the heartbeat like {@link #stop()}, then commits the reservation with this actual amount
   * (instead of any release). Only the first stop call decides what happens.
   *
   * <p>The commit goes through the same {@link Settlement} and journal as {@link #commit(String)}:
   * the usage is journaled before the commit leaves, the commit is retried with one key as the
   * settlement decides, a 410 / {@code RESERVATION_EXPIRED} falls back to {@code POST /v1/events}
   * when the subject and action are known ({@link Builder#event(String)}, or the create request),
   * and what stays unresolved stays journaled for the next replay. The difference: the heartbeat
   * stops <em>before</em> the commit, so a commit retried past the lease's expiry lands on the
   * event fallback; {@link #commit(String)} keeps the lease alive until the outcome is final (ST-11)
   * and returns the {@link SettleResult}. Its result also reaches {@link Listener#onSettled}; the
   * last attempt's answer reaches {@link Listener#onFinalized}, and then the returned future
   * completes.
   *
   * <p>After the runner stopped by itself (e.g. {@code expired}, {@code max_extensions}) without
   * starting a release or commit, this commits now. Where it cannot (a release or commit was
   * already started, no reservation, or the server ended it: finalized, not found), nothing is
   * sent, a warning is logged and the runner's completed future is returned.
   *
   * @param actualJson the commit's {@code actual} member: an Amount JSON object, e.g. {@code
   *     {"unit":"TOKENS","amount":812}}
   * @return the future of {@link #start()}
   * @throws LeaseException {@code INVALID_CONFIG} for a body the core refuses (not JSON, an amount
   *     beyond 2^63-1, ...): nothing is stopped, sent or written
   */
  public CompletableFuture<Decision> stopAndCommit(String actualJson) {
    Objects.requireNonNull(actualJson, "actualJson");
    // Checked before anything stops: the core refuses a body it would not send.
    Settlement.commit("stop-and-commit", "{\"actual\":" + actualJson + "}")
        .build(System.nanoTime(), System.currentTimeMillis())
        .close();
    return stop(actualJson);
  }

  private CompletableFuture<Decision> stop(String actual) {
    synchronized (this) {
      if (stopRequested) {
        return done;
      }
      stopRequested = true;
      commitActual = actual;
      if (stopped) {
        // It stopped by itself: commit now if asked to and nothing was sent.
        if (actual == null) {
          return done;
        }
        Decision d = done.getNow(last);
        Optional<String> id = d == null ? Optional.empty() : d.reservationId();
        String why = null;
        if (finalizeSent || settlement != null) {
          why = "a release or commit was already started";
        } else if (id.isEmpty()) {
          why = "the lease has no reservation";
        } else if (gone(d)) {
          why = "the server ended it (" + reasonOf(d).wire() + ")";
        }
        if (why != null) {
          LOG.log(System.Logger.Level.WARNING, "leasebeat: no commit sent after the stop: " + why);
          return done;
        }
        CompletableFuture<Decision> late = new CompletableFuture<>();
        settleOnStop(d, id.get(), late);
        return late;
      }
      abandonInFlight();
      Decision d;
      boolean fresh = false;
      try {
        d = hb.cancel(System.nanoTime());
        fresh = true;
      } catch (LeaseException | IllegalStateException e) {
        // Already stopped in the core (its stop decision was delivered), or closed by its owner:
        // end with what it said last.
        d = hb.isClosed() ? last : hb.lastDecision().orElse(last);
      }
      if (d != null && !d.isStop()) {
        d = null;
      }
      if (fresh) {
        deliverDecision(d);
      }
      finish(d);
    }
    return done;
  }

  /**
   * {@link #stop()}, then waits (at most the finalize timeout plus one attempt budget, capped at a
   * minute) for the stop to complete, and shuts down the runner's own executor.
   */
  @Override
  public void close() {
    stop();
    try {
      done.get(Math.min(finalizeTimeoutNs + Math.min(budgetNs, 60_000_000_000L), 60_000_000_000L),
          TimeUnit.NANOSECONDS);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    } catch (Exception e) {
      // The stop decision is delivered through the future; nothing else to do here.
    }
    flush(Duration.ofNanos(finalizeTimeoutNs));
    for (Settler st : List.copyOf(settling)) {
      st.abandon("the runner was closed: the record stays journaled for the next replay");
    }
    if (ownExecutor) {
      executor.shutdownNow();
    }
  }

  /**
   * The future of {@link #start()}: completes with the stop decision.
   *
   * @return the future
   */
  public CompletableFuture<Decision> result() {
    return done;
  }

  /**
   * The current timer slack estimate (nanoseconds), for diagnostics.
   *
   * @return nanoseconds
   */
  public synchronized long timerSlackNanos() {
    return slackNs;
  }

  // ----- the loop -----

  private void schedule(Runnable task, long delayNs) {
    if (tickTimer != null) {
      tickTimer.cancel(false);
    }
    long intended = System.nanoTime() + Math.max(delayNs, 0);
    tickTimer = later(() -> timed(intended, task), delayNs);
  }

  /** Schedules a task; an executor that refuses it (shut down) stops the runner. */
  private ScheduledFuture<?> later(Runnable task, long delayNs) {
    try {
      return executor.schedule(task, Math.max(delayNs, 0), TimeUnit.NANOSECONDS);
    } catch (java.util.concurrent.RejectedExecutionException e) {
      LOG.log(System.Logger.Level.WARNING, "leasebeat: the executor refused a task; stopping", e);
      stop();
      return null;
    }
  }

  /** Runs a timer task after measuring how late it ran (timer slack). */
  private void timed(long intendedNanoTime, Runnable task) {
    synchronized (this) {
      long over = System.nanoTime() - intendedNanoTime;
      slackNs = Math.min(Math.max(Math.max(slackNs - slackNs / 8, over), MIN_SLACK_NS), MAX_SLACK_NS);
    }
    task.run();
  }

  private synchronized void tick() {
    if (stopped || stopRequested) {
      return;
    }
    Action a;
    try {
      a = hb.pollAction();
    } catch (IllegalStateException e) {
      stop();
      return;
    }
    switch (a.type()) {
      case STOP:
        finish(hb.lastDecision().orElse(last));
        return;
      case AWAIT_OUTCOME:
        return;
      case SEND:
      default:
        break;
    }
    Attempt attempt = a.attempt().orElseThrow();
    OptionalLong due = attempt.dueNanoTime();
    if (due.isEmpty()) {
      return; // due at +infinity: nothing to send until a stop
    }
    long now = System.nanoTime();
    long early = due.getAsLong() - slackNs - now;
    if (early > 0) {
      schedule(this::tick, early);
      return;
    }
    send(attempt, now, due.getAsLong());
  }

  private void send(Attempt attempt, long now, long due) {
    try {
      hb.handleSent(attempt.id(), now);
    } catch (RuntimeException e) {
      LOG.log(System.Logger.Level.ERROR, "leasebeat: the heartbeat refused a send", e);
      stop();
      return;
    }
    long late = now - due;
    long marginNs =
        last == null
            ? 1_000_000_000L
            : last.numbers().safetyMargin().filter(Num::isFinite).map(m -> m.value().longValue() * 1_000_000L).orElse(1_000_000_000L);
    // Only a beat a decision scheduled can be late (D-15): a create, or the first extension of an
    // adopted reservation, is due at once ("at 0", not an instant of System.nanoTime()).
    if (last != null && attempt.kind() == AttemptKind.EXTEND && late > marginNs) {
      report(
          new Jeopardy(
              Jeopardy.Kind.BEAT_LATE,
              hb.reservationId(),
              now,
              last == null ? OptionalLong.empty() : last.provenUntilNanoTime(),
              late));
    }
    long deadline = enforcedNs == Long.MAX_VALUE ? Long.MAX_VALUE : now + enforcedNs;
    Optional<String> id = hb.reservationId();
    Transport.Endpoint ep =
        attempt.kind() == AttemptKind.CREATE ? Transport.Endpoint.CREATE : Transport.Endpoint.EXTEND;
    String path =
        ep == Transport.Endpoint.CREATE
            ? "/v1/reservations"
            : "/v1/reservations/" + encodeSegment(id.orElse("")) + "/extend";
    Transport.Call call = new Transport.Call(ep, path, id, attempt.key(), attempt.body(), deadline);
    long attemptId = attempt.id();
    inFlightId = attemptId;
    if (deadline != Long.MAX_VALUE) {
      long fireIn = deadline - slackNs - System.nanoTime();
      deadlineTimer =
          later(
              () ->
                  outcome(
                      attemptId,
                      null,
                      new TransportException(TransportFailure.TIMEOUT, "attempt deadline", null)),
              fireIn);
    }
    if (stopRequested) {
      return; // the executor refused the deadline task and so stopped the runner
    }
    CompletableFuture<Response> f;
    try {
      f = Objects.requireNonNull(transport.send(call), "the transport returned null");
    } catch (RuntimeException e) {
      f = CompletableFuture.failedFuture(e);
    }
    inFlight = f;
    f.whenComplete((r, ex) -> outcome(attemptId, r, ex));
  }

  private synchronized void outcome(long attemptId, Response response, Throwable failure) {
    if (stopped || stopRequested || inFlightId != attemptId) {
      return; // a late outcome of an abandoned attempt
    }
    abandonInFlight();
    long now = System.nanoTime();
    Decision d;
    try {
      d =
          response != null
              ? hb.handleResponse(attemptId, response, now)
              : hb.handleFailure(attemptId, TransportException.classify(failure), now);
    } catch (RuntimeException e) {
      LOG.log(System.Logger.Level.ERROR, "leasebeat: the heartbeat refused an outcome", e);
      stop();
      return;
    }
    deliverDecision(d);
    heartbeatOutcome(d);
    if (d.isStop()) {
      finish(d);
      return;
    }
    if (stopRequested) {
      return; // the listener stopped the runner from onDecision
    }
    armJeopardy(d);
    long wait = d.delayNanos(System.nanoTime());
    if (wait != Long.MAX_VALUE) {
      schedule(this::tick, wait - slackNs);
    }
  }

  private void abandonInFlight() {
    inFlightId = 0;
    if (deadlineTimer != null) {
      deadlineTimer.cancel(false);
      deadlineTimer = null;
    }
    if (inFlight != null) {
      inFlight.cancel(true);
      inFlight = null;
    }
  }

  private void armJeopardy(Decision d) {
    if (d.outcome() == OutcomeClass.SUCCESS) {
      succeeded = true;
    }
    // D-15: after the first success, a decision without provenUntil (the fallback path: an older
    // server, nothing proven) counts as proven until 0: the lead is already reached.
    boolean fallback = d.provenUntil().isEmpty() && succeeded;
    Optional<Num> key = fallback ? Optional.of(Num.of(0)) : d.provenUntil();
    if (key.equals(armedProvenUntil)) {
      return; // the same proven lead: a retry, or another fallback decision, no newer success
    }
    armedProvenUntil = key;
    if (jeopardyTimer != null) {
      jeopardyTimer.cancel(false);
      jeopardyTimer = null;
    }
    if (fallback) {
      // Reached already: reported now, before anything else can come from the server (a task
      // scheduled with delay 0 could run after the next response).
      provenLeadReached(key, OptionalLong.empty());
      return;
    }
    OptionalLong at = d.provenUntilNanoTime();
    if (at.isEmpty()) {
      return; // nothing proven yet (before the first success) or +infinity
    }
    long delay = at.getAsLong() - System.nanoTime();
    if (delay <= 0) {
      provenLeadReached(key, at);
      return;
    }
    jeopardyTimer = later(() -> provenLeadReached(key, at), delay);
  }

  private synchronized void provenLeadReached(Optional<Num> armed, OptionalLong provenUntilNanoTime) {
    if (stopped || stopRequested || !armed.equals(armedProvenUntil)) {
      return;
    }
    report(
        new Jeopardy(
            Jeopardy.Kind.PROVEN_LEAD_REACHED,
            hb.reservationId(),
            System.nanoTime(),
            provenUntilNanoTime,
            0));
  }

  private void deliverDecision(Decision d) {
    if (d == null) {
      return;
    }
    last = d;
    Optional<String> id = d.reservationId();
    safely(() -> listener.onDecision(id, d), "onDecision");
  }

  private void report(Jeopardy j) {
    safely(() -> listener.onJeopardy(j), "onJeopardy");
  }

  /** The heartbeat stopped with {@code d}: report, release or commit, complete. */
  private void finish(Decision d) {
    if (stopped) {
      return;
    }
    stopped = true;
    abandonInFlight();
    if (tickTimer != null) {
      tickTimer.cancel(false);
    }
    if (jeopardyTimer != null) {
      jeopardyTimer.cancel(false);
    }
    Optional<String> id;
    try {
      id = hb.isClosed() ? Optional.empty() : hb.reservationId();
    } catch (IllegalStateException e) {
      id = Optional.empty();
    }
    if (id.isEmpty() && d != null) {
      id = d.reservationId();
    }
    Optional<String> stopId = id;
    safely(() -> listener.onStop(stopId, d), "onStop");
    boolean commit = commitActual != null;
    if (id.isEmpty() || gone(d) || settlement != null || !(commit || releaseOnStop)) {
      done.complete(d);
      return;
    }
    settleOnStop(d, id.get(), done);
  }

  private static StopReason reasonOf(Decision d) {
    return d == null ? StopReason.CANCELLED : d.stopReason().orElse(StopReason.CANCELLED);
  }

  /**
   * Whether the server ended the reservation, so that nothing is left to release or commit. Not
   * after {@code expired}: a server may still accept a release or commit for a grace period after
   * expiry (the Cycles server does, for 5 s); it is sent and its answer reported.
   */
  private static boolean gone(Decision d) {
    StopReason reason = reasonOf(d);
    return reason == StopReason.FINALIZED || reason == StopReason.NOT_FOUND;
  }

  /**
   * The release ({@link Builder#releaseOnStop(boolean)}) or commit ({@link #stopAndCommit(String)})
   * after stop {@code d}, under this lock: through a {@link Settlement} like {@link #commit} and
   * {@link #release} (the commit journaled first, one key, the settlement's retries, the event
   * fallback after expiry when the subject and action are known). It is started on the executor,
   * outside this lock (see {@link #settle}). Once it ended, {@link Listener#onSettled} and then
   * {@link Listener#onFinalized} (with the last attempt's answer) are called and {@code whenDone}
   * completes with {@code d}.
   */
  private void settleOnStop(Decision d, String rid, CompletableFuture<Decision> whenDone) {
    finalizeSent = true;
    boolean commit = commitActual != null;
    Transport.Endpoint ep = commit ? Transport.Endpoint.COMMIT : Transport.Endpoint.RELEASE;
    Settler st;
    try {
      st =
          settler(
              rid,
              commit
                  ? Settlement.commit(rid, "{\"actual\":" + commitActual + "}").event(eventJson)
                  : Settlement.release(rid));
    } catch (RuntimeException e) {
      // stopAndCommit checked the body before stopping; only a closed heartbeat's library state
      // could refuse it here. Reported, never thrown on the thread that stopped.
      LOG.log(System.Logger.Level.ERROR, "leasebeat: the settlement on stop could not be built", e);
      whenDone.complete(d);
      return;
    }
    CompletableFuture<SettleResult> f = st.result().whenComplete((r, ex) -> settled(st, r));
    settlement = f;
    f.whenComplete(
        (r, ex) -> {
          Settler.Answer a = st.lastAnswer();
          Optional<TransportFailure> failure =
              a.response().isPresent()
                  ? Optional.empty()
                  : Optional.of(a.failure().orElse(TransportFailure.TIMEOUT));
          try {
            safely(
                () -> listener.onFinalized(a.endpoint().orElse(ep), rid, a.response(), failure),
                "onFinalized");
          } finally {
            whenDone.complete(d);
          }
        });
    try {
      executor.execute(st::start);
    } catch (java.util.concurrent.RejectedExecutionException e) {
      LOG.log(System.Logger.Level.WARNING, "leasebeat: the executor refused the settlement on stop", e);
      st.abandon("the executor refused to start the settlement");
    }
  }

  /**
   * Runs a listener callback: whatever it throws (an assertion error included) is logged and
   * cannot leave the runner half-updated; only a {@link VirtualMachineError} propagates.
   */
  private static void safely(Runnable callback, String name) {
    try {
      callback.run();
    } catch (VirtualMachineError e) {
      throw e;
    } catch (Throwable e) {
      LOG.log(System.Logger.Level.WARNING, "leasebeat: listener." + name + " threw", e);
    }
  }

  /**
   * The detection slack (ms) for a request timeout, as the Rust driver's: the runner enforces
   * {@code (timeout - 30) x 8/9} (at least 1 ms), so a timed-out attempt is observed well before
   * {@code sent + timeout} even when a timer fires late (a loaded executor, a GC pause) and the
   * core keeps a retry window after a timeout. E.g. 1000 ms enforces 856 ms; 5000 ms, 4416 ms.
   */
  static long detectionSlackMillis(long timeoutMs) {
    long enforced = Math.max((Math.max(timeoutMs - 30, 0) / 9) * 8, 1);
    return Math.max(timeoutMs - enforced, 0);
  }

  /** Percent-encodes one path segment (RFC 3986 unreserved characters pass). */
  static String encodeSegment(String s) {
    StringBuilder out = new StringBuilder();
    for (byte b : s.getBytes(StandardCharsets.UTF_8)) {
      int c = b & 0xff;
      if ((c >= 'a' && c <= 'z')
          || (c >= 'A' && c <= 'Z')
          || (c >= '0' && c <= '9')
          || c == '-'
          || c == '.'
          || c == '_'
          || c == '~') {
        out.append((char) c);
      } else {
        out.append('%').append(Character.toUpperCase(Character.forDigit(c >> 4, 16)))
            .append(Character.toUpperCase(Character.forDigit(c & 15, 16)));
      }
    }
    return out.toString();
  }
}
