package io.leasebeat;

import java.util.ArrayList;
import java.util.List;
import java.util.Objects;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.Future;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;

/**
 * Drives one {@link Settlement} to its end over a {@link Transport} on an executor: persists
 * through the {@link Journal} what it asks to persist, sends each attempt at its due time, feeds
 * every answer back, and finishes the journal record. It holds no rule: every key, delay, floor and
 * classification is the settlement's (the core's). Package-private: the runner's machinery.
 */
final class Settler {
  private static final System.Logger LOG = System.getLogger(Settler.class.getName());

  private final Settlement s;
  private final Journal journal; // null: journal off (nothing is written)
  private final Transport transport;
  private final ScheduledExecutorService executor;
  private final long attemptTimeoutNs;
  private final boolean replayed;
  private final Consumer<SettlementDecision> onDecision;
  private final CompletableFuture<SettleResult> result = new CompletableFuture<>();
  private final List<SettlementDecision> decisions = new ArrayList<>();
  private String journalWarning;
  // A record of it is on disk: rebuilt from one (replayed), or a write succeeded (SP-3: a failed
  // write still sends, and then nothing is reported kept).
  private boolean written;
  private long inFlight; // guarded by this: the attempt id in flight, 0 for none
  private Future<Response> call;
  private ScheduledFuture<?> timer;
  private boolean ended;
  // The last attempt's endpoint and what it got (a response or a failure), for the runner's
  // legacy onFinalized report.
  private Transport.Endpoint lastEndpoint;
  private Response lastResponse;
  private TransportFailure lastFailure;

  /** The last attempt's endpoint and answer (both empty before any answer). */
  record Answer(
      Optional<Transport.Endpoint> endpoint,
      Optional<Response> response,
      Optional<TransportFailure> failure) {}

  Settler(
      Settlement s,
      Journal journal,
      Transport transport,
      ScheduledExecutorService executor,
      long attemptTimeoutNs,
      boolean replayed,
      Consumer<SettlementDecision> onDecision) {
    this.s = Objects.requireNonNull(s, "settlement");
    this.journal = journal;
    this.transport = transport;
    this.executor = executor;
    this.attemptTimeoutNs = attemptTimeoutNs;
    this.replayed = replayed;
    this.written = replayed && journal != null;
    this.onDecision = onDecision;
  }

  /** Starts driving (on the executor); the future completes once the settlement is done. */
  CompletableFuture<SettleResult> start() {
    synchronized (this) {
      if (ended) {
        return result; // abandoned (the runner closed) before it started
      }
      decided(s.lastDecision());
    }
    later(this::step, 0);
    return result;
  }

  CompletableFuture<SettleResult> result() {
    return result;
  }

  /**
   * The endpoint of the last attempt sent and its answer: a response, or the transport failure it
   * ended with (an attempt cancelled by {@link #abandon} counts as {@link TransportFailure#TIMEOUT}:
   * the runner stopped waiting for it).
   */
  synchronized Answer lastAnswer() {
    TransportFailure f = lastFailure;
    if (lastEndpoint != null && lastResponse == null && f == null) {
      f = TransportFailure.TIMEOUT; // sent, never answered
    }
    return new Answer(
        Optional.ofNullable(lastEndpoint), Optional.ofNullable(lastResponse), Optional.ofNullable(f));
  }

  /** Stops driving: the record stays as it is on disk (for the next replay); the claim is freed. */
  synchronized void abandon(String why) {
    if (ended) {
      return;
    }
    ended = true;
    cancelTimers();
    try {
      journalRelease();
    } finally {
      s.close();
      result.completeExceptionally(new java.util.concurrent.CancellationException(why));
    }
  }

  private void journalRelease() {
    if (journal != null && !journal.isClosed()) {
      try {
        journal.releaseClaim(s.reservationId());
      } catch (RuntimeException e) {
        LOG.log(System.Logger.Level.WARNING, "leasebeat: releasing a journal claim failed", e);
      }
    }
  }

  private void cancelTimers() {
    if (timer != null) {
      timer.cancel(false);
      timer = null;
    }
    if (call != null) {
      call.cancel(true);
      call = null;
    }
    inFlight = 0;
  }

  private void later(Runnable task, long delayNs) {
    try {
      ScheduledFuture<?> f = executor.schedule(task, Math.max(delayNs, 0), TimeUnit.NANOSECONDS);
      synchronized (this) {
        timer = f;
      }
    } catch (RejectedExecutionException e) {
      abandon("the executor is shut down");
    }
  }

  private void decided(SettlementDecision d) {
    decisions.add(d);
    if (d.warnings().contains(Settlement.Warning.PERSIST_FAILED)) {
      journalWarning = d.detail().orElse("persist failed");
      LOG.log(
          System.Logger.Level.WARNING,
          "leasebeat: the settlement record could not be journaled (the request goes anyway): "
              + journalWarning);
    }
    if (onDecision != null) {
      try {
        onDecision.accept(d);
      } catch (VirtualMachineError e) {
        throw e;
      } catch (Throwable e) {
        LOG.log(System.Logger.Level.WARNING, "leasebeat: a settlement decision hook threw", e);
      }
    }
  }

  private synchronized void step() {
    if (ended) {
      return;
    }
    try {
      SettlementAction a = s.pollAction();
      long now = System.nanoTime();
      switch (a.type()) {
        case PERSIST:
          if (journal != null) {
            SettlementDecision d = journal.persist(s, now);
            if (!d.warnings().contains(Settlement.Warning.PERSIST_FAILED)) {
              written = true;
            }
            decided(d);
          } else {
            decided(s.handlePersisted(now));
          }
          later(this::step, 0);
          return;
        case SEND:
          {
            SettleAttempt at = a.attempt().orElseThrow();
            long delay = at.delayNanos(now);
            if (delay > 0) {
              later(this::step, delay);
              return;
            }
            send(at, now);
            return;
          }
        case WAIT:
          return; // an outcome is awaited
        case DONE:
        default:
          end();
      }
    } catch (RuntimeException e) {
      fail(e);
    }
  }

  private void send(SettleAttempt at, long now) {
    decided(s.handleSent(at.id(), now));
    String id = s.reservationId();
    Transport.Endpoint ep;
    String path;
    switch (at.endpoint()) {
      case COMMIT:
        ep = Transport.Endpoint.COMMIT;
        path = "/v1/reservations/" + HeartbeatRunner.encodeSegment(id) + "/commit";
        break;
      case RELEASE:
        ep = Transport.Endpoint.RELEASE;
        path = "/v1/reservations/" + HeartbeatRunner.encodeSegment(id) + "/release";
        break;
      case EVENT:
      default:
        ep = Transport.Endpoint.EVENT;
        path = "/v1/events";
        break;
    }
    long deadline = attemptTimeoutNs == Long.MAX_VALUE ? Long.MAX_VALUE : now + attemptTimeoutNs;
    Transport.Call c = new Transport.Call(ep, path, Optional.of(id), at.key(), at.body(), deadline);
    long attemptId = at.id();
    inFlight = attemptId;
    lastEndpoint = ep;
    lastResponse = null;
    lastFailure = null;
    CompletableFuture<Response> f;
    try {
      f = Objects.requireNonNull(transport.send(c), "the transport returned null");
    } catch (RuntimeException e) {
      f = CompletableFuture.failedFuture(e);
    }
    if (deadline != Long.MAX_VALUE) {
      f = f.orTimeout(attemptTimeoutNs, TimeUnit.NANOSECONDS);
    }
    call = f;
    f.whenComplete((r, ex) -> outcome(attemptId, r, ex));
  }

  private synchronized void outcome(long attemptId, Response r, Throwable ex) {
    if (ended || inFlight != attemptId) {
      return;
    }
    inFlight = 0;
    call = null;
    lastResponse = r;
    lastFailure = r != null ? null : TransportException.classify(ex);
    try {
      long now = System.nanoTime();
      decided(
          r != null
              ? s.handleResponse(attemptId, r, now, System.currentTimeMillis())
              : s.handleFailure(attemptId, lastFailure, now));
    } catch (RuntimeException e) {
      fail(e);
      return;
    }
    later(this::step, 0);
  }

  private void end() {
    ended = true;
    SettlementDecision last = decisions.get(decisions.size() - 1);
    Settlement.Outcome outcome = s.outcome().orElse(Settlement.Outcome.EXHAUSTED);
    // J-5: the final decision says whether the record is removed or kept for the next replay; a
    // failed removal keeps it too.
    boolean remove = last.record().map(c -> c == Settlement.RecordChange.REMOVE).orElse(false);
    String id = s.reservationId();
    String key = s.key();
    boolean removed = false;
    try {
      if (journal != null && !journal.isClosed() && s.record().isPresent()) {
        journal.finish(s);
        removed = remove;
      }
    } catch (RuntimeException e) {
      LOG.log(System.Logger.Level.WARNING, "leasebeat: finishing the journal record failed", e);
      journalRelease();
    } finally {
      s.close();
    }
    SettleResult res =
        new SettleResult(
            id,
            key,
            outcome,
            last.code(),
            written && !removed,
            replayed,
            decisions,
            Optional.ofNullable(journalWarning));
    result.complete(res);
  }

  private void fail(RuntimeException e) {
    LOG.log(System.Logger.Level.ERROR, "leasebeat: the settlement refused a call (a bug)", e);
    ended = true;
    cancelTimers();
    journalRelease();
    s.close();
    result.completeExceptionally(e);
  }
}
