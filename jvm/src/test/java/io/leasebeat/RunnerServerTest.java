package io.leasebeat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.IOException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.OptionalLong;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.BooleanSupplier;
import org.junit.jupiter.api.Test;

/**
 * Issue 11: {@link HeartbeatRunner} against {@code leasebeat serve} (started here on 127.0.0.1),
 * normal and faulty. Every test reads the server's log: the keys used (a key is reused only by the
 * same-key retry right after it, and header key = body key) and zero unreported lapses. No
 * assertion is on wall time; waits are bounded only to never hang.
 */
class RunnerServerTest {
  static final String CREATE = AdoptServerTest.CREATE_REQUEST;

  /** Records everything a runner reports. */
  static final class Recorder implements HeartbeatRunner.Listener {
    final List<Decision> decisions = Collections.synchronizedList(new ArrayList<>());
    final List<HeartbeatRunner.Jeopardy> jeopardies = Collections.synchronizedList(new ArrayList<>());
    final AtomicReference<Decision> stop = new AtomicReference<>();
    final AtomicReference<Optional<String>> stopId = new AtomicReference<>();
    final List<String> finalized = Collections.synchronizedList(new ArrayList<>());
    final List<String> violations = Collections.synchronizedList(new ArrayList<>());
    /** Decisions ({@code decision:<outcome>}) and jeopardies ({@code jeopardy:<kind>}) in order. */
    final List<String> seq = Collections.synchronizedList(new ArrayList<>());

    @Override
    public void onDecision(Optional<String> reservationId, Decision decision) {
      if (stop.get() != null) {
        violations.add("a decision after the stop: " + decision.toJson());
      }
      decisions.add(decision);
      seq.add("decision:" + decision.outcome().wire());
    }

    @Override
    public void onJeopardy(HeartbeatRunner.Jeopardy jeopardy) {
      jeopardies.add(jeopardy);
      seq.add("jeopardy:" + jeopardy.kind());
    }

    @Override
    public void onStop(Optional<String> reservationId, Decision decision) {
      if (!stop.compareAndSet(null, decision)) {
        violations.add("onStop twice");
      }
      stopId.set(reservationId);
    }

    @Override
    public void onFinalized(
        Transport.Endpoint endpoint,
        String reservationId,
        Optional<Response> response,
        Optional<TransportFailure> failure) {
      finalized.add(
          endpoint + " " + response.map(r -> String.valueOf(r.status())).orElseGet(() -> failure.orElseThrow().wire()));
    }

    long successes() {
      synchronized (decisions) {
        return decisions.stream().filter(d -> d.outcome() == OutcomeClass.SUCCESS).count();
      }
    }

    boolean any(OutcomeClass c) {
      synchronized (decisions) {
        return decisions.stream().anyMatch(d -> d.outcome() == c);
      }
    }
  }

  static void waitUntil(String what, BooleanSupplier cond, Duration max) throws InterruptedException {
    long end = System.nanoTime() + max.toNanos();
    while (!cond.getAsBoolean()) {
      if (System.nanoTime() - end > 0) {
        fail("gave up waiting for " + what);
      }
      Thread.sleep(20);
    }
  }

  static Heartbeat heartbeat(long ttl, long timeout) {
    return Heartbeat.builder().ttlMillis(ttl).requestTimeoutMillis(timeout).createRequestJson(CREATE).build();
  }

  /**
   * The server log's rules: header key = body key on every create/extend; within one reservation a
   * key is reused only by the call right after it (a same-key retry); no lapse at all (every
   * runner here stops with a release).
   */
  static Map<String, List<JsonNode>> checkLog(ServeProcess serve, boolean expectNoLapse) throws IOException {
    Map<String, List<JsonNode>> byReservation = new HashMap<>();
    for (JsonNode e : serve.requests("extend")) {
      byReservation.computeIfAbsent(e.get("reservation_id").textValue(), k -> new ArrayList<>()).add(e);
    }
    List<JsonNode> all = new ArrayList<>(serve.requests("create"));
    all.addAll(serve.requests("extend"));
    for (JsonNode e : all) {
      JsonNode body = VectorReplay.MAPPER.readTree(e.get("body").textValue());
      assertEquals(e.get("header_key").textValue(), body.get("idempotency_key").textValue(), "header key = body key");
    }
    for (Map.Entry<String, List<JsonNode>> r : byReservation.entrySet()) {
      Set<String> seen = new HashSet<>();
      String prev = null;
      for (JsonNode e : r.getValue()) {
        String key = e.get("header_key").textValue();
        if (!key.equals(prev)) {
          assertTrue(seen.add(key), "key " + key + " reused after another key on " + r.getKey());
        }
        prev = key;
      }
    }
    if (expectNoLapse) {
      assertEquals(List.of(), serve.lapses(), "lapses");
    }
    return byReservation;
  }

  /** One lease until {@code successes} successes, then stop; returns the recorder. */
  static Recorder runLease(ServeProcess serve, long ttl, long timeout, int successes) throws Exception {
    Recorder rec = new Recorder();
    try (Heartbeat hb = heartbeat(ttl, timeout);
        HeartbeatRunner runner =
            HeartbeatRunner.builder(hb, new HttpClientTransport(serve.base, "test-key"))
                .listener(rec)
                .releaseOnStop(true)
                .build()) {
      CompletableFuture<Decision> result = runner.start();
      waitUntil(successes + " successes", () -> rec.successes() >= successes || result.isDone(), Duration.ofSeconds(60));
      Decision stop = runner.stop().get(30, TimeUnit.SECONDS);
      assertSame(stop, rec.stop.get());
      assertEquals(StopReason.CANCELLED, stop.stopReason().orElseThrow(), () -> stop.toJson());
      assertEquals(List.of("RELEASE 200"), rec.finalized);
      assertEquals(List.of(), rec.violations);
    }
    return rec;
  }

  /**
   * Issue 25 (2): an adopted reservation's first extension is due at once ("at 0"), not at an
   * instant of {@code System.nanoTime()}: sent on time, it is no late beat, even when the runner
   * starts well after the heartbeat was built (before the fix: BEAT_LATE on every such adoption).
   */
  @Test
  void adoptedReservationFirstBeatIsNotLate() throws Exception {
    try (ServeProcess serve = ServeProcess.start()) {
      java.net.http.HttpClient client =
          java.net.http.HttpClient.newBuilder().version(java.net.http.HttpClient.Version.HTTP_1_1).build();
      String createKey = "sdk-" + java.util.UUID.randomUUID();
      byte[] createBody =
          ("{\"idempotency_key\":\"" + createKey + "\",\"ttl_ms\":4000," + CREATE.substring(1))
              .getBytes(java.nio.charset.StandardCharsets.UTF_8);
      java.net.http.HttpResponse<byte[]> created =
          AdoptServerTest.post(client, serve.base.resolve("/v1/reservations"), createKey, createBody);
      assertEquals(200, created.statusCode());
      String id = VectorReplay.MAPPER.readTree(created.body()).get("reservation_id").textValue();
      Recorder rec = new Recorder();
      try (Heartbeat hb =
              Heartbeat.builder().ttlMillis(4_000).requestTimeoutMillis(1_000).reservationId(id).build();
          HeartbeatRunner runner =
              HeartbeatRunner.builder(hb, new HttpClientTransport(serve.base, "test-key"))
                  .listener(rec)
                  .releaseOnStop(true)
                  .build()) {
        Thread.sleep(1_500); // the runner starts well after the heartbeat was built
        CompletableFuture<Decision> result = runner.start();
        waitUntil("2 successes", () -> rec.successes() >= 2 || result.isDone(), Duration.ofSeconds(60));
        Decision stop = runner.stop().get(30, TimeUnit.SECONDS);
        assertEquals(StopReason.CANCELLED, stop.stopReason().orElseThrow(), () -> stop.toJson());
      }
      assertTrue(rec.successes() >= 2);
      assertEquals(List.of(), rec.jeopardies, "no jeopardy for on-time beats");
      checkLog(serve, true);
    }
  }

  @Test
  void normalLease() throws Exception {
    try (ServeProcess serve = ServeProcess.start()) {
      Recorder rec = runLease(serve, 4_000, 1_000, 4);
      assertTrue(rec.successes() >= 4);
      Map<String, List<JsonNode>> ext = checkLog(serve, true);
      assertEquals(1, serve.requests("create").size());
      assertEquals(1, ext.size());
      assertTrue(ext.values().iterator().next().size() >= 3);
      assertEquals(1, serve.requests("release").size());
      assertEquals(rec.stopId.get().orElseThrow(), ext.keySet().iterator().next());
    }
  }

  /** Runs one lease until it stops by itself; returns the recorder (issue 25). */
  static Recorder runToItsOwnStop(ServeProcess serve, boolean release, HeartbeatRunner[] keep) throws Exception {
    Recorder rec = new Recorder();
    Heartbeat hb = heartbeat(4_000, 1_000);
    HeartbeatRunner runner =
        HeartbeatRunner.builder(hb, new HttpClientTransport(serve.base, "test-key"))
            .listener(rec)
            .releaseOnStop(release)
            .build();
    keep[0] = runner;
    runner.start().get(60, TimeUnit.SECONDS);
    return rec;
  }

  /** After {@code expired} the release is sent all the same; the server's answer is reported. */
  @Test
  void releaseIsSentAfterExpired() throws Exception {
    try (ServeProcess serve = ServeProcess.start("--max-lead-ms", "4000", "--fault", "extend:2=410:RESERVATION_EXPIRED")) {
      HeartbeatRunner[] runner = new HeartbeatRunner[1];
      Recorder rec = runToItsOwnStop(serve, true, runner);
      runner[0].close();
      assertEquals(StopReason.EXPIRED, rec.stop.get().stopReason().orElseThrow());
      assertEquals(List.of("RELEASE 200"), rec.finalized);
      assertEquals(1, serve.requests("release").size());
    }
  }

  /** stopAndCommit after the runner stopped by itself without a release commits then. */
  @Test
  void stopAndCommitAfterAStopByItselfCommits() throws Exception {
    try (ServeProcess serve = ServeProcess.start("--max-lead-ms", "4000", "--max-extensions", "2")) {
      HeartbeatRunner[] runner = new HeartbeatRunner[1];
      Recorder rec = runToItsOwnStop(serve, false, runner);
      assertEquals(StopReason.MAX_EXTENSIONS, rec.stop.get().stopReason().orElseThrow());
      assertEquals(List.of(), rec.finalized);
      Decision d = runner[0].stopAndCommit("{\"unit\":\"TOKENS\",\"amount\":5}").get(30, TimeUnit.SECONDS);
      assertSame(rec.stop.get(), d);
      assertEquals(List.of("COMMIT 200"), rec.finalized);
      assertEquals(1, serve.requests("commit").size());
      // At most once: a second request sends nothing.
      runner[0].stopAndCommit("{\"unit\":\"TOKENS\",\"amount\":6}").get(30, TimeUnit.SECONDS);
      runner[0].close();
      assertEquals(1, serve.requests("commit").size());
      assertEquals(List.of(), rec.violations);
    }
  }

  /** After {@code not_found} there is nothing to release: nothing is sent. */
  @Test
  void nothingIsSentAfterNotFound() throws Exception {
    try (ServeProcess serve = ServeProcess.start("--max-lead-ms", "4000", "--fault", "extend:2=404:NOT_FOUND")) {
      HeartbeatRunner[] runner = new HeartbeatRunner[1];
      Recorder rec = runToItsOwnStop(serve, true, runner);
      assertEquals(StopReason.NOT_FOUND, rec.stop.get().stopReason().orElseThrow());
      runner[0].stopAndCommit("{\"unit\":\"TOKENS\",\"amount\":5}").get(30, TimeUnit.SECONDS);
      runner[0].close();
      assertEquals(List.of(), rec.finalized);
      assertEquals(0, serve.requests("release").size() + serve.requests("commit").size());
    }
  }

  /**
   * D-15 on the fallback path (an older server, no remaining_ttl_ms): nothing is proven, so the
   * lead is reached at once: one PROVEN_LEAD_REACHED right after the first success, and only that
   * one (later fallback successes do not re-arm it).
   */
  @Test
  void fallbackReportsJeopardyAtOnceAfterTheFirstSuccess() throws Exception {
    try (ServeProcess serve = ServeProcess.start("--omit-remaining")) {
      Recorder rec = runLease(serve, 4_000, 1_000, 3);
      List<String> seq;
      synchronized (rec.seq) {
        seq = new ArrayList<>(rec.seq);
      }
      int first = seq.indexOf("decision:success");
      List<Integer> at = new ArrayList<>();
      for (int i = 0; i < seq.size(); i++) {
        if (seq.get(i).startsWith("jeopardy:")) {
          at.add(i);
        }
      }
      assertEquals(List.of(first + 1), at, seq::toString);
      HeartbeatRunner.Jeopardy j = rec.jeopardies.get(0);
      assertEquals(HeartbeatRunner.Jeopardy.Kind.PROVEN_LEAD_REACHED, j.kind());
      assertEquals(OptionalLong.empty(), j.provenUntilNanoTime());
      assertEquals(rec.stopId.get(), j.reservationId());
      assertTrue(rec.decisions.stream().anyMatch(d -> d.mode().orElse(null) == Mode.FALLBACK));
    }
  }

  @Test
  void lostResponseIsRetriedWithTheSameKey() throws Exception {
    try (ServeProcess serve = ServeProcess.start("--fault", "extend:1=drop")) {
      Recorder rec = runLease(serve, 4_000, 1_000, 3);
      assertTrue(rec.any(OutcomeClass.TRANSPORT_FAILURE));
      List<JsonNode> ext = checkLog(serve, true).values().iterator().next();
      assertEquals("dropped", ext.get(0).get("outcome").textValue());
      assertEquals(ext.get(0).get("header_key"), ext.get(1).get("header_key"), "same-key replay");
    }
  }

  @Test
  void burstOf5xx() throws Exception {
    try (ServeProcess serve = ServeProcess.start("--fault", "extend:1-2=503")) {
      Recorder rec = runLease(serve, 6_000, 1_000, 3);
      assertTrue(rec.any(OutcomeClass.SERVER_ERROR));
      List<JsonNode> ext = checkLog(serve, true).values().iterator().next();
      assertEquals(503, ext.get(0).get("status").intValue());
      assertEquals(503, ext.get(1).get("status").intValue());
      assertEquals(ext.get(0).get("header_key"), ext.get(1).get("header_key"));
      assertEquals(ext.get(1).get("header_key"), ext.get(2).get("header_key"));
      assertEquals(200, ext.get(2).get("status").intValue());
    }
  }

  @Test
  void throttledInsideTheWindow() throws Exception {
    // Budget 2000, margin 1000: the window at a beat is about 2000 ms; Retry-After 1 s fits.
    try (ServeProcess serve = ServeProcess.start("--fault", "extend:1=429,retry-after=1")) {
      Recorder rec = runLease(serve, 8_000, 2_000, 2);
      assertTrue(rec.any(OutcomeClass.THROTTLED));
      List<JsonNode> ext = checkLog(serve, true).values().iterator().next();
      assertEquals(429, ext.get(0).get("status").intValue());
      assertEquals(200, ext.get(1).get("status").intValue());
      assertEquals(ext.get(0).get("header_key"), ext.get(1).get("header_key"));
    }
  }

  @Test
  void slowResponsePastTheBudgetIsATimeout() throws Exception {
    // The server applies the first extension, then answers after 1500 ms: past the 1000 ms
    // budget. The runner's own deadline turns it into a timeout, the same-key retry follows, and
    // the late answer is ignored.
    try (ServeProcess serve = ServeProcess.start("--fault", "extend:1=delay=1500")) {
      Recorder rec = runLease(serve, 4_000, 1_000, 3);
      assertTrue(rec.any(OutcomeClass.TRANSPORT_FAILURE));
      List<JsonNode> ext = checkLog(serve, true).values().iterator().next();
      assertEquals(ext.get(0).get("header_key"), ext.get(1).get("header_key"));
    }
  }

  @Test
  void serverKilledMidRun() throws Exception {
    ServeProcess serve = ServeProcess.start();
    Recorder rec = new Recorder();
    try (Heartbeat hb = heartbeat(4_000, 1_000);
        HeartbeatRunner runner =
            HeartbeatRunner.builder(hb, new HttpClientTransport(serve.base, "test-key"))
                .listener(rec)
                .releaseOnStop(true)
                .build()) {
      CompletableFuture<Decision> result = runner.start();
      waitUntil("2 successes", () -> rec.successes() >= 2, Duration.ofSeconds(60));
      serve.kill();
      // The core stops the lease itself (its retries cannot reach a server) and reports it.
      Decision stop = result.get(60, TimeUnit.SECONDS);
      assertTrue(stop.isStop());
      assertEquals(StopReason.RETRY_WINDOW_EXHAUSTED, stop.stopReason().orElseThrow(), stop::toJson);
      assertSame(stop, rec.stop.get());
      assertEquals(List.of("RELEASE connect"), rec.finalized);
      assertTrue(rec.any(OutcomeClass.TRANSPORT_FAILURE));
      assertEquals(List.of(), rec.violations);
      checkLog(serve, true); // what the server logged before it died
    } finally {
      serve.close();
    }
  }

  @Test
  void stopWhileAnAttemptIsInFlight() throws Exception {
    try (ServeProcess serve = ServeProcess.start("--fault", "extend:1=hold=2000")) {
      Recorder rec = new Recorder();
      CountDownLatch extendSent = new CountDownLatch(1);
      HttpClientTransport http = new HttpClientTransport(serve.base, "test-key");
      Transport watching =
          call -> {
            CompletableFuture<Response> f = http.send(call);
            if (call.endpoint() == Transport.Endpoint.EXTEND) {
              extendSent.countDown();
            }
            return f;
          };
      try (Heartbeat hb = heartbeat(10_000, 3_000);
          HeartbeatRunner runner =
              HeartbeatRunner.builder(hb, watching).listener(rec).releaseOnStop(true).build()) {
        CompletableFuture<Decision> result = runner.start();
        assertTrue(extendSent.await(60, TimeUnit.SECONDS));
        // Let the request reach the server (which holds it 2 s): still in flight for the runner.
        Thread.sleep(300);
        assertTrue(serve.requests("extend").isEmpty(), "held: not answered yet");
        // Two threads stop at once, and the test thread a third time.
        Thread other = new Thread(runner::stop);
        other.start();
        CompletableFuture<Decision> mine = runner.stop();
        other.join();
        assertSame(result, mine);
        Decision stop = result.get(30, TimeUnit.SECONDS);
        assertEquals(StopReason.CANCELLED, stop.stopReason().orElseThrow());
        assertSame(result, runner.stop());
        int decisions = rec.decisions.size();
        // The held extension is answered later; the runner ignores it.
        waitUntil("the held extension logged", () -> {
          try {
            return serve.requests("extend").size() >= 1;
          } catch (IOException e) {
            return false;
          }
        }, Duration.ofSeconds(30));
        assertEquals(decisions, rec.decisions.size(), "no decision after the stop");
        assertEquals(List.of(), rec.violations);
        assertEquals(List.of("RELEASE 200"), rec.finalized);
      }
      checkLog(serve, true);
      assertEquals(1, serve.requests("release").size());
    }
  }

  @Test
  void aThousandLeasesInOneProcess() throws Exception {
    int n = 1_000;
    try (ServeProcess serve = ServeProcess.start()) {
      ScheduledThreadPoolExecutor executor = new ScheduledThreadPoolExecutor(4);
      executor.setRemoveOnCancelPolicy(true);
      HttpClientTransport http = new HttpClientTransport(serve.base, "test-key");
      List<Heartbeat> hbs = new ArrayList<>();
      List<HeartbeatRunner> runners = new ArrayList<>();
      List<Recorder> recs = new ArrayList<>();
      try {
        for (int i = 0; i < n; i++) {
          Heartbeat hb = heartbeat(20_000, 5_000);
          Recorder rec = new Recorder();
          HeartbeatRunner r =
              HeartbeatRunner.builder(hb, http).executor(executor).listener(rec).releaseOnStop(true).build();
          hbs.add(hb);
          recs.add(rec);
          runners.add(r);
          r.start();
          if (i % 5 == 4) {
            // A ramp (1000 leases over about 5 s), as leases arrive in a real service: 1000
            // creates at the same instant would measure the shared test machine, not the runner.
            Thread.sleep(25);
          }
        }
        // Every lease created and extended at least once.
        waitUntil(
            "every lease extended once",
            () -> recs.stream().allMatch(r -> r.successes() >= 2 || r.stop.get() != null),
            Duration.ofSeconds(120));
        for (HeartbeatRunner r : runners) {
          r.stop();
        }
        for (int i = 0; i < n; i++) {
          Decision stop = runners.get(i).result().get(60, TimeUnit.SECONDS);
          assertEquals(StopReason.CANCELLED, stop.stopReason().orElseThrow(), stop::toJson);
          assertEquals(List.of("RELEASE 200"), recs.get(i).finalized);
          assertFalse(recs.get(i).decisions.isEmpty());
          assertEquals(List.of(), recs.get(i).violations);
        }
      } finally {
        for (HeartbeatRunner r : runners) {
          r.close();
        }
        for (Heartbeat hb : hbs) {
          hb.close();
        }
        executor.shutdownNow();
      }
      Map<String, List<JsonNode>> ext = checkLog(serve, true);
      // Under load some creates time out and are retried with the same key: n distinct keys.
      assertEquals(
          n,
          serve.requests("create").stream().map(e -> e.get("header_key").textValue()).distinct().count());
      assertEquals(n, ext.size());
      assertEquals(n, serve.requests("release").size());
      Set<String> ids = new HashSet<>();
      for (Recorder rec : recs) {
        assertNotNull(rec.stopId.get());
        assertTrue(ids.add(rec.stopId.get().orElseThrow()));
      }
    }
  }
}
