package io.leasebeat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.FutureTask;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@link HeartbeatRunner}'s settlement (issue 27) against {@code leasebeat serve}: commit and
 * release through the settlement and the journal, the heartbeat kept until {@code stop_heartbeat},
 * the three HP-1 policies, replay on start, a bounded flush, the journal opt-out and bad input.
 */
class SettleRunnerTest {
  static final String ACTUAL = RecoveryTest.ACTUAL;

  @TempDir Path tmp;

  /** Records the runner's reports. */
  static final class Recorder implements HeartbeatRunner.Listener {
    final List<HeartbeatRunner.HeartbeatFailure> failures = Collections.synchronizedList(new ArrayList<>());
    final List<SettleResult> settled = Collections.synchronizedList(new ArrayList<>());
    final List<String> finalized = Collections.synchronizedList(new ArrayList<>());

    @Override
    public void onHeartbeatFailure(HeartbeatRunner.HeartbeatFailure f) {
      failures.add(f);
    }

    @Override
    public void onSettled(SettleResult r) {
      settled.add(r);
    }

    @Override
    public void onFinalized(Transport.Endpoint endpoint, String reservationId,
        java.util.Optional<Response> response, java.util.Optional<TransportFailure> failure) {
      finalized.add(endpoint.name());
    }
  }

  HeartbeatRunner.Builder builder(ServeProcess serve, Heartbeat hb, Recorder rec) {
    return HeartbeatRunner.builder(hb, new HttpClientTransport(serve.base, RecoveryTest.KEY))
        .journalDir(tmp)
        .listener(rec)
        .settlementRetry(new Settlement.RetryPolicy(5, 500, 2_000));
  }

  static Heartbeat hb(long ttl, long timeout) {
    return Heartbeat.builder().ttlMillis(ttl).requestTimeoutMillis(timeout).createRequestJson(RecoveryTest.CREATE).build();
  }

  static String started(HeartbeatRunner runner, Heartbeat hb) throws InterruptedException {
    runner.start();
    RunnerServerTest.waitUntil("the reservation", () -> hb.reservationId().isPresent(), Duration.ofSeconds(10));
    return hb.reservationId().orElseThrow();
  }

  @Test
  void theHeartbeatRunsUntilTheCommitSaysStop() throws Exception {
    try (ServeProcess serve = ServeProcess.start("--fault", "commit:1=503");
        Heartbeat hb = hb(60_000, 2_000)) {
      Recorder rec = new Recorder();
      try (HeartbeatRunner runner = builder(serve, hb, rec).releaseOnStop(true).build()) {
        String id = started(runner, hb);
        CompletableFuture<SettleResult> f = runner.commit(ACTUAL, null, "{\"k\":\"v\"}");
        assertSame(f, runner.commit("{\"unit\":\"TOKENS\",\"amount\":1}"), "only the first settles");
        RunnerServerTest.waitUntil("the first commit answered 503", () -> {
          try {
            return !serve.requests("commit").isEmpty();
          } catch (java.io.IOException e) {
            return false;
          }
        }, Duration.ofSeconds(10));
        assertFalse(runner.result().isDone(), "ST-11: the heartbeat keeps running while the commit is unresolved");
        SettleResult r = f.get(20, TimeUnit.SECONDS);
        assertEquals(Settlement.Outcome.COMMITTED, r.outcome());
        assertTrue(r.settled());
        assertFalse(r.replayed());
        assertEquals(id, r.reservationId());
        Decision stop = runner.result().get(10, TimeUnit.SECONDS);
        assertEquals(java.util.Optional.of(StopReason.CANCELLED), stop.stopReason(), "stopped by stop_heartbeat");
        assertTrue(r.lastDecision().stopHeartbeat());
        assertEquals(List.of(), serve.requests("release"), "the settlement owns the end: no release on stop");
        assertTrue(runner.flush(Duration.ofSeconds(1)));
        assertEquals(1, rec.settled.size());
      }
    }
  }

  /**
   * The legacy stop path ({@code stopAndCommit}) settles like {@code commit}: the record is on disk
   * before the first commit reaches the server (J-1), a 503 is retried with the same key, a 410
   * RESERVATION_EXPIRED falls back to {@code POST /v1/events} with the create's subject and action,
   * the record is removed once applied, and only then are onSettled and onFinalized called and the
   * stop future completed. No release is sent: the commit replaces it. Asserted from serve's log.
   */
  @Test
  void stopAndCommitSettlesThroughTheJournal() throws Exception {
    try (ServeProcess serve =
            ServeProcess.start("--fault", "commit:1=hold=800,503", "--fault", "commit:2=410:RESERVATION_EXPIRED");
        Heartbeat hb = hb(60_000, 2_000)) {
      Recorder rec = new Recorder();
      try (HeartbeatRunner runner = builder(serve, hb, rec).releaseOnStop(true).build()) {
        String id = started(runner, hb);
        CompletableFuture<Decision> done = runner.stopAndCommit(ACTUAL);
        RunnerServerTest.waitUntil("the first commit held by serve", () -> {
          try {
            return !serve.held("commit").isEmpty();
          } catch (java.io.IOException e) {
            return false;
          }
        }, Duration.ofSeconds(10));
        assertEquals(1, RecoveryTest.journalFiles(tmp, ".json").size(), "J-1: journaled before it was sent");
        assertFalse(done.isDone(), "the stop future waits for the commit's outcome");
        Decision stop = done.get(30, TimeUnit.SECONDS);
        assertEquals(java.util.Optional.of(StopReason.CANCELLED), stop.stopReason());
        assertEquals(1, rec.settled.size(), rec.settled.toString());
        SettleResult r = rec.settled.get(0);
        assertEquals(Settlement.Outcome.APPLIED, r.outcome());
        assertEquals(id, r.reservationId());
        assertFalse(r.recordKept());
        assertEquals(List.of("EVENT"), rec.finalized, "the last attempt's endpoint");
        List<JsonNode> reqs = RecoveryTest.settlement(serve, id);
        assertEquals(List.of("commit", "commit", "events"), RecoveryTest.endpoints(reqs));
        assertEquals(r.key(), RecoveryTest.oneKey(reqs.subList(0, 2)));
        RecoveryTest.appliedOnce(reqs);
        JsonNode event = RecoveryTest.body(reqs.get(2));
        assertEquals(VectorReplay.MAPPER.readTree(ACTUAL), event.get("actual"));
        assertTrue(event.has("subject") && event.has("action"), event::toString);
        assertEquals(List.of(), serve.requests("release"), "the commit replaces the release on stop");
        assertEquals(List.of(), RecoveryTest.journalFiles(tmp, ".json"), "J-5: removed once applied");
        // At most one settlement: a later commit() returns the same, ended, settlement.
        assertEquals(r, runner.commit(ACTUAL).get(1, TimeUnit.SECONDS));
      }
    }
  }

  /**
   * A release on stop that the server never answers in time: retried with one key as the
   * settlement decides, reported to onFinalized with the last answer; the stop future completes
   * after it.
   */
  @Test
  void releaseOnStopIsRetriedWithOneKey() throws Exception {
    try (ServeProcess serve = ServeProcess.start("--fault", "release:1-2=503");
        Heartbeat hb = hb(60_000, 2_000)) {
      Recorder rec = new Recorder();
      try (HeartbeatRunner runner = builder(serve, hb, rec).releaseOnStop(true).build()) {
        String id = started(runner, hb);
        Decision stop = runner.stop().get(30, TimeUnit.SECONDS);
        assertEquals(java.util.Optional.of(StopReason.CANCELLED), stop.stopReason());
        List<JsonNode> rel = serve.requests("release");
        assertEquals(3, rel.size());
        for (JsonNode e : rel) {
          assertEquals(id, e.path("reservation_id").textValue());
          assertEquals(rel.get(0).path("header_key").textValue(), e.path("header_key").textValue());
        }
        assertEquals(Settlement.Outcome.RELEASED, rec.settled.get(0).outcome());
        assertEquals(List.of("RELEASE"), rec.finalized);
        assertEquals(List.of(), RecoveryTest.journalFiles(tmp, ".json"), "a release is not journaled");
      }
    }
  }

  @Test
  void aReleaseSettlesWithOneKey() throws Exception {
    try (ServeProcess serve = ServeProcess.start("--fault", "release:1=503");
        Heartbeat hb = hb(60_000, 2_000)) {
      try (HeartbeatRunner runner = builder(serve, hb, new Recorder()).build()) {
        started(runner, hb);
        SettleResult r = runner.release("unused").get(20, TimeUnit.SECONDS);
        assertEquals(Settlement.Outcome.RELEASED, r.outcome());
        List<JsonNode> rel = serve.requests("release");
        assertEquals(2, rel.size());
        assertEquals(rel.get(0).path("header_key").textValue(), rel.get(1).path("header_key").textValue());
        assertEquals("unused", RecoveryTest.body(rel.get(1)).path("reason").textValue());
        assertEquals(List.of(), serve.requests("commit"));
        assertEquals(List.of(), RecoveryTest.journalFiles(tmp, ".json"), "a release is not journaled");
      }
    }
  }

  @Test
  void warnPolicyReportsEveryFailureAndTheWorkGoesOn() throws Exception {
    try (ServeProcess serve = ServeProcess.start("--fault", "extend:*=503");
        Heartbeat hb = hb(3_000, 1_000)) {
      Recorder rec = new Recorder();
      CompletableFuture<String> work = new CompletableFuture<>();
      try (HeartbeatRunner runner = builder(serve, hb, rec).work(work).build()) {
        String id = started(runner, hb);
        Decision stop = runner.result().get(20, TimeUnit.SECONDS);
        assertTrue(stop.isStop());
        // HP-1 warn: every failure reported with the reservation and what happens next
        assertTrue(rec.failures.size() >= 2, rec.failures.toString());
        for (HeartbeatRunner.HeartbeatFailure f : rec.failures) {
          assertEquals(java.util.Optional.of(id), f.reservationId());
        }
        assertEquals(HeartbeatRunner.HeartbeatFailure.Disposition.RETRY_SAME_KEY, rec.failures.get(0).disposition());
        HeartbeatRunner.HeartbeatFailure last = rec.failures.get(rec.failures.size() - 1);
        assertEquals(HeartbeatRunner.HeartbeatFailure.Disposition.STOP, last.disposition());
        assertTrue(last.stopReason().isPresent());
        assertEquals(java.util.Optional.of(last), runner.heartbeatFailure());
        assertFalse(work.isDone(), "warn: the work carries on");
        // the final settlement still runs, after the stop
        SettleResult r = runner.commit(ACTUAL).get(20, TimeUnit.SECONDS);
        assertEquals(Settlement.Outcome.COMMITTED, r.outcome(), "final_settlement_is_attempted");
      }
    }
  }

  @Test
  void cancelPolicyInterruptsTheWork() throws Exception {
    try (ServeProcess serve = ServeProcess.start("--fault", "extend:1=404:NOT_FOUND");
        Heartbeat hb = hb(3_000, 1_000)) {
      CountDownLatch interrupted = new CountDownLatch(1);
      FutureTask<Void> work =
          new FutureTask<>(
              () -> {
                try {
                  Thread.sleep(60_000);
                } catch (InterruptedException e) {
                  interrupted.countDown();
                }
                return null;
              });
      Thread worker = new Thread(work, "work");
      worker.start();
      try (HeartbeatRunner runner =
          builder(serve, hb, new Recorder())
              .heartbeatFailurePolicy(HeartbeatRunner.HeartbeatFailurePolicy.CANCEL)
              .work(work)
              .build()) {
        started(runner, hb);
        runner.result().get(20, TimeUnit.SECONDS);
        assertTrue(interrupted.await(10, TimeUnit.SECONDS), "cancel: the work's thread is interrupted");
        assertTrue(work.isCancelled());
      } finally {
        worker.join(5_000);
      }
    }
  }

  @Test
  void failOnFinalizeFailsTheCommitAfterSettlement() throws Exception {
    try (ServeProcess serve = ServeProcess.start("--fault", "extend:1=409:BUDGET_EXCEEDED");
        Heartbeat hb = hb(3_000, 1_000)) {
      try (HeartbeatRunner runner =
          builder(serve, hb, new Recorder())
              .heartbeatFailurePolicy(HeartbeatRunner.HeartbeatFailurePolicy.FAIL_ON_FINALIZE)
              .build()) {
        String id = started(runner, hb);
        runner.result().get(20, TimeUnit.SECONDS);
        ExecutionException e =
            assertThrows(ExecutionException.class, () -> runner.commit(ACTUAL).get(20, TimeUnit.SECONDS));
        HeartbeatFailureException hf = (HeartbeatFailureException) e.getCause();
        assertEquals(HeartbeatRunner.HeartbeatFailure.Disposition.STOP, hf.failure().disposition());
        assertEquals(Settlement.Outcome.COMMITTED, hf.result().outcome(), "the settlement ran first");
        assertEquals(1, RecoveryTest.settlement(serve, id).size());
      }
    }
  }

  @Test
  void replayOnStartSettlesARecordLeftBehind() throws Exception {
    try (ServeProcess serve = ServeProcess.start();
        Heartbeat hb = hb(60_000, 2_000)) {
      String old = RecoveryTest.create(serve, "c-old");
      try (Journal j = Journal.open(tmp, serve.base.toString(), RecoveryTest.KEY, null);
          Settlement s = Settlement.commit(old, "{\"actual\":" + ACTUAL + "}").baseUrl(serve.base.toString())
              .build(System.nanoTime(), System.currentTimeMillis())) {
        j.persist(s, System.nanoTime());
      } // a crash: the record stays
      Recorder rec = new Recorder();
      try (HeartbeatRunner runner = builder(serve, hb, rec).build()) {
        runner.start();
        assertTrue(runner.flush(Duration.ofSeconds(20)), "J-7: flushed");
        assertEquals(1, rec.settled.size(), rec.settled.toString());
        SettleResult r = rec.settled.get(0);
        assertEquals(old, r.reservationId());
        assertTrue(r.replayed());
        assertEquals(Settlement.Outcome.COMMITTED, r.outcome());
        assertEquals(List.of("commit"), RecoveryTest.endpoints(RecoveryTest.settlement(serve, old)));
        assertEquals(List.of(), RecoveryTest.journalFiles(tmp, ".json"));
      }
    }
  }

  @Test
  void aFlushIsBoundedAndLeavesTheRecordOnDisk() throws Exception {
    try (ServeProcess serve = ServeProcess.start("--fault", "commit:*=503");
        Heartbeat hb = hb(60_000, 2_000)) {
      HeartbeatRunner runner = builder(serve, hb, new Recorder()).build();
      started(runner, hb);
      CompletableFuture<SettleResult> f = runner.commit(ACTUAL);
      long t0 = System.nanoTime();
      assertFalse(runner.flush(Duration.ofMillis(300)), "unresolved within 300 ms");
      assertTrue(System.nanoTime() - t0 < TimeUnit.SECONDS.toNanos(2), "bounded");
      assertEquals(1, runner.settlementsInProgress());
      assertEquals(1, RecoveryTest.journalFiles(tmp, ".json").size(), "J-7: left on disk");
      runner.close();
      assertTrue(f.isDone());
      assertEquals(1, RecoveryTest.journalFiles(tmp, ".json").size(), "still on disk for the next replay");
    }
  }

  /**
   * SP-3: the journal's partition becomes a plain file after the runner opened it, so every write
   * fails; the commit still goes (one key), the result carries the journal's warning, and an
   * exhausted settlement does not claim a record that was never written.
   */
  @Test
  void aFailedJournalWriteStillSendsAndKeepsNothing() throws Exception {
    try (ServeProcess serve = ServeProcess.start("--fault", "commit:*=503");
        Heartbeat hb = hb(60_000, 2_000)) {
      try (HeartbeatRunner runner =
          builder(serve, hb, new Recorder()).settlementRetry(new Settlement.RetryPolicy(2, 50, 100)).build()) {
        started(runner, hb);
        Path part = runner.journal().orElseThrow().dir();
        try (var walk = Files.walk(part)) {
          for (Path p : walk.sorted(java.util.Comparator.reverseOrder()).toList()) {
            Files.delete(p);
          }
        }
        Files.writeString(part, "not a directory");
        SettleResult r = runner.commit(ACTUAL).get(20, TimeUnit.SECONDS);
        assertEquals(Settlement.Outcome.EXHAUSTED, r.outcome());
        assertFalse(r.recordKept(), "nothing was written: nothing is kept");
        assertTrue(r.journalWarning().orElseThrow().contains("journal "), r.journalWarning().toString());
        List<JsonNode> commits = serve.requests("commit");
        assertEquals(2, commits.size(), "the commit went anyway, retried");
        assertEquals(r.key(), commits.get(0).path("header_key").textValue());
        assertEquals(r.key(), commits.get(1).path("header_key").textValue());
        assertEquals("not a directory", Files.readString(part));
      }
    }
  }

  @Test
  void theJournalCanBeTurnedOff() throws Exception {
    try (ServeProcess serve = ServeProcess.start();
        Heartbeat hb = hb(60_000, 2_000)) {
      try (HeartbeatRunner runner =
          HeartbeatRunner.builder(hb, new HttpClientTransport(serve.base, RecoveryTest.KEY)).noJournal().build()) {
        assertTrue(runner.journal().isEmpty());
        started(runner, hb);
        assertEquals(Settlement.Outcome.COMMITTED, runner.commit(ACTUAL).get(20, TimeUnit.SECONDS).outcome());
      }
      assertEquals(List.of(), RecoveryTest.journalFiles(tmp, ".json"));
    }
  }

  @Test
  void badInputIsTyped() throws Exception {
    Path link = Files.createSymbolicLink(tmp.resolve("link"), Files.createDirectory(tmp.resolve("real")));
    try (ServeProcess serve = ServeProcess.start();
        Heartbeat hb = hb(60_000, 2_000)) {
      JournalException je =
          assertThrows(JournalException.class,
              () -> HeartbeatRunner.builder(hb, new HttpClientTransport(serve.base, RecoveryTest.KEY)).journalDir(link).build());
      assertEquals(JournalException.Kind.SYMLINK, je.kind());
      try (HeartbeatRunner runner = builder(serve, hb, new Recorder()).build()) {
        assertThrows(IllegalStateException.class, () -> runner.commit(ACTUAL), "no reservation yet");
        started(runner, hb);
        LeaseException e = assertThrows(LeaseException.class, () -> runner.commit("not json"));
        assertEquals(LeaseException.Code.INVALID_CONFIG, e.code());
        e = assertThrows(LeaseException.class,
            () -> runner.commit("{\"unit\":\"TOKENS\",\"amount\":9223372036854775808}"));
        assertEquals(LeaseException.Code.INVALID_CONFIG, e.code());
        e = assertThrows(LeaseException.class, () -> runner.stopAndCommit("{\"unit\":\"TOKENS\",\"amount\":"));
        assertEquals(LeaseException.Code.INVALID_CONFIG, e.code());
        assertFalse(runner.result().isDone(), "a refused stopAndCommit stops nothing");
        assertEquals(List.of(), serve.requests("commit"), "nothing sent");
        assertEquals(List.of(), RecoveryTest.journalFiles(tmp, ".json"), "nothing written");
        assertEquals(Settlement.Outcome.COMMITTED, runner.commit(ACTUAL).get(20, TimeUnit.SECONDS).outcome());
      }
    }
  }
}
