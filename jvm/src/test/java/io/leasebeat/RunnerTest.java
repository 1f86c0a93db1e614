package io.leasebeat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.net.URI;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/** HeartbeatRunner without a server: a scripted transport. */
class RunnerTest {
  static final String OK_4000 =
      "{\"decision\":\"ALLOW\",\"reservation_id\":\"r 1/x\",\"affected_scopes\":[\"tenant:a\"],"
          + "\"expires_at_ms\":1785585661500,\"remaining_ttl_ms\":4000}";

  /** A transport whose calls never complete unless the test completes them. */
  static final class Scripted implements Transport {
    final List<Call> calls = new ArrayList<>();
    final List<CompletableFuture<Response>> futures = new ArrayList<>();
    final CountDownLatch first = new CountDownLatch(1);

    @Override
    public synchronized CompletableFuture<Response> send(Call call) {
      calls.add(call);
      CompletableFuture<Response> f = new CompletableFuture<>();
      futures.add(f);
      first.countDown();
      return f;
    }

    synchronized Call call(int i) {
      return calls.get(i);
    }

    /** Waits (at most 10 s) until call {@code i} was sent: settlements start on the executor. */
    Call awaitCall(int i) throws InterruptedException {
      long end = System.nanoTime() + 10_000_000_000L;
      while (true) {
        synchronized (this) {
          if (calls.size() > i) {
            return calls.get(i);
          }
        }
        if (System.nanoTime() - end > 0) {
          throw new AssertionError("call " + i + " was never sent");
        }
        Thread.sleep(5);
      }
    }

    synchronized CompletableFuture<Response> future(int i) {
      return futures.get(i);
    }
  }

  static Adopted adopted(long received) {
    return Heartbeat.builder()
        .ttlMillis(4_000)
        .requestTimeoutMillis(1_000)
        .adopt(
            AdoptedCreate.builder()
                .key("sdk-key")
                .sentNanos(received - 5_000_000L)
                .receivedNanos(received)
                .response(Response.of(200).withBody(OK_4000))
                .build());
  }

  /**
   * A settlement answered while the thread that asked for it is still starting it. The answer's
   * stop_heartbeat (ST-11) takes the runner's lock under the settler's, so starting a settlement
   * must not hold the runner's lock while it takes the settler's (the order was inverted once, and
   * a quick release answer under load deadlocked the caller). The executor holds the caller until
   * the release is inside the transport, and the transport answers only after a pause in which the
   * caller reaches the settler's lock.
   */
  @Test
  void aSettlementAnsweredWhileItStartsDoesNotDeadlock() throws Exception {
    CountDownLatch inSend = new CountDownLatch(1);
    Transport t =
        call -> {
          if (call.endpoint() != Transport.Endpoint.RELEASE) {
            return new CompletableFuture<>(); // extensions stay in flight
          }
          inSend.countDown();
          try {
            Thread.sleep(300);
          } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
          }
          return CompletableFuture.completedFuture(
              Response.of(200).withBody("{\"status\":\"RELEASED\",\"released\":{\"unit\":\"TOKENS\",\"amount\":0}}"));
        };
    final class Gated extends ScheduledThreadPoolExecutor {
      volatile Thread gated;

      Gated() {
        super(2);
      }

      @Override
      public java.util.concurrent.ScheduledFuture<?> schedule(Runnable task, long delay, TimeUnit unit) {
        java.util.concurrent.ScheduledFuture<?> f = super.schedule(task, delay, unit);
        if (Thread.currentThread() == gated) {
          gated = null;
          try {
            inSend.await(5, TimeUnit.SECONDS);
          } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
          }
        }
        return f;
      }
    }
    Gated executor = new Gated();
    try {
      Adopted a = adopted(System.nanoTime());
      try (Heartbeat hb = a.heartbeat()) {
        HeartbeatRunner r = HeartbeatRunner.builder(hb, t).executor(executor).noJournal().build();
        r.start();
        SettleResult res =
            org.junit.jupiter.api.Assertions.assertTimeoutPreemptively(
                Duration.ofSeconds(20),
                () -> {
                  executor.gated = Thread.currentThread();
                  return r.release("done").get(10, TimeUnit.SECONDS);
                },
                "the release deadlocked its caller");
        assertEquals(Settlement.Outcome.RELEASED, res.outcome());
        assertEquals(Optional.of(StopReason.CANCELLED), r.result().get(10, TimeUnit.SECONDS).stopReason());
      }
    } finally {
      executor.shutdownNow();
    }
  }

  @Test
  void stopBeforeStartAndTwiceFromManyThreads() throws Exception {
    Scripted t = new Scripted();
    try (Heartbeat hb = Heartbeat.builder().createRequestJson("{}").build()) {
      HeartbeatRunner r = HeartbeatRunner.builder(hb, t).releaseOnStop(true).build();
      CompletableFuture<Decision> a = r.stop();
      List<Thread> threads = new ArrayList<>();
      for (int i = 0; i < 8; i++) {
        Thread th = new Thread(r::stop);
        threads.add(th);
        th.start();
      }
      for (Thread th : threads) {
        th.join();
      }
      assertSame(a, r.start());
      assertEquals(StopReason.CANCELLED, a.get(5, TimeUnit.SECONDS).stopReason().orElseThrow());
      assertTrue(t.calls.isEmpty(), "nothing sent, nothing to release (no reservation)");
      r.close();
      r.close();
    }
  }

  @Test
  void sendsTheCreateThenIgnoresALateOutcomeAfterStop() throws Exception {
    Scripted t = new Scripted();
    List<Decision> seen = new ArrayList<>();
    try (Heartbeat hb = Heartbeat.builder().requestTimeoutMillis(60_000).createRequestJson("{}").build();
        HeartbeatRunner r =
            HeartbeatRunner.builder(hb, t)
                .listener(
                    new HeartbeatRunner.Listener() {
                      @Override
                      public synchronized void onDecision(java.util.Optional<String> id, Decision d) {
                        seen.add(d);
                      }
                    })
                .build()) {
      CompletableFuture<Decision> done = r.start();
      assertTrue(t.first.await(10, TimeUnit.SECONDS));
      Transport.Call create = t.call(0);
      assertEquals(Transport.Endpoint.CREATE, create.endpoint());
      assertEquals("/v1/reservations", create.path());
      assertTrue(create.deadlineNanoTime() != Long.MAX_VALUE);
      assertTrue(create.remaining().isPresent());
      Decision stop = r.stop().get(5, TimeUnit.SECONDS);
      assertSame(stop, done.get());
      assertEquals(StopReason.CANCELLED, stop.stopReason().orElseThrow());
      // The create's answer arrives after the stop: ignored, no decision, no exception.
      t.future(0).complete(Response.of(200).withBody(OK_4000));
      assertEquals(1, seen.size());
      assertSame(stop, seen.get(0));
      assertTrue(t.future(0).isDone());
    }
  }

  @Test
  void adoptedLeaseExtendsAndCommitsOnStop() throws Exception {
    Scripted t = new Scripted();
    Adopted a = adopted(System.nanoTime());
    List<String> finalized = new ArrayList<>();
    try (Heartbeat hb = a.heartbeat();
        HeartbeatRunner r =
            HeartbeatRunner.builder(hb, t)
                .releaseOnStop(true)
                .listener(
                    new HeartbeatRunner.Listener() {
                      @Override
                      public void onFinalized(
                          Transport.Endpoint ep,
                          String id,
                          java.util.Optional<Response> resp,
                          java.util.Optional<TransportFailure> f) {
                        finalized.add(ep + " " + id + " " + resp.map(Response::status).orElse(-1));
                      }
                    })
                .build()) {
      r.start();
      assertTrue(t.first.await(30, TimeUnit.SECONDS));
      Transport.Call extend = t.call(0);
      assertEquals(Transport.Endpoint.EXTEND, extend.endpoint());
      assertEquals("/v1/reservations/r%201%2Fx/extend", extend.path(), "the id is percent-encoded");
      assertEquals("r 1/x", extend.reservationId().orElseThrow());
      CompletableFuture<Decision> done = r.stopAndCommit("{\"unit\":\"TOKENS\",\"amount\":812}");
      assertEquals(Transport.Endpoint.COMMIT, t.awaitCall(1).endpoint());
      com.fasterxml.jackson.databind.JsonNode body = VectorReplay.MAPPER.readTree(t.call(1).body());
      assertEquals(
          VectorReplay.MAPPER.readTree("{\"unit\":\"TOKENS\",\"amount\":812}"), body.get("actual"), body::toString);
      assertEquals(t.call(1).idempotencyKey(), body.get("idempotency_key").textValue());
      // Issue 27: the commit on stop is a settlement: a 503 is retried with the same key and body.
      t.future(1).complete(Response.of(503).withBody("{\"error\":\"INTERNAL_ERROR\",\"message\":\"m\",\"request_id\":\"q\"}"));
      Transport.Call retry = t.awaitCall(2);
      assertEquals(Transport.Endpoint.COMMIT, retry.endpoint());
      assertEquals(t.call(1).idempotencyKey(), retry.idempotencyKey(), "one key for the settlement");
      assertEquals(body, VectorReplay.MAPPER.readTree(retry.body()));
      assertFalse(done.isDone(), "completes after the commit's outcome is final");
      assertTrue(finalized.isEmpty());
      t.future(2).complete(
          Response.of(200).withBody("{\"status\":\"COMMITTED\",\"charged\":{\"unit\":\"TOKENS\",\"amount\":812}}"));
      assertEquals(StopReason.CANCELLED, done.get(5, TimeUnit.SECONDS).stopReason().orElseThrow());
      assertEquals(List.of("COMMIT r 1/x 200"), finalized);
      assertEquals(3, t.calls.size());
    }
  }

  /** A starved executor: the beat goes out late and the proven lead passes: both reported. */
  @Test
  void jeopardyIsReportedWhenTheExecutorIsStarved() throws Exception {
    Scripted t = new Scripted();
    ScheduledThreadPoolExecutor executor = new ScheduledThreadPoolExecutor(1);
    List<HeartbeatRunner.Jeopardy> jeopardies = new ArrayList<>();
    CountDownLatch stopped = new CountDownLatch(1);
    Adopted a = adopted(System.nanoTime());
    try (Heartbeat hb = a.heartbeat();
        HeartbeatRunner r =
            HeartbeatRunner.builder(hb, t)
                .executor(executor)
                .listener(
                    new HeartbeatRunner.Listener() {
                      @Override
                      public synchronized void onJeopardy(HeartbeatRunner.Jeopardy j) {
                        jeopardies.add(j);
                      }

                      @Override
                      public void onStop(java.util.Optional<String> id, Decision d) {
                        stopped.countDown();
                      }
                    })
                .build()) {
      // Block the only executor thread past the proven lead (received + 4000 ms).
      CountDownLatch blocking = new CountDownLatch(1);
      executor.execute(
          () -> {
            blocking.countDown();
            try {
              Thread.sleep(a.decision().delayNanos(System.nanoTime()) / 1_000_000 + 4_500);
            } catch (InterruptedException e) {
              Thread.currentThread().interrupt();
            }
          });
      assertTrue(blocking.await(5, TimeUnit.SECONDS));
      r.start();
      assertTrue(stopped.await(60, TimeUnit.SECONDS));
      synchronized (r) {
        List<HeartbeatRunner.Jeopardy.Kind> kinds = new ArrayList<>();
        synchronized (jeopardies) {
          jeopardies.forEach(j -> kinds.add(j.kind()));
        }
        assertTrue(kinds.contains(HeartbeatRunner.Jeopardy.Kind.BEAT_LATE), kinds.toString());
        assertTrue(kinds.contains(HeartbeatRunner.Jeopardy.Kind.PROVEN_LEAD_REACHED), kinds.toString());
        assertEquals("lease_in_jeopardy", jeopardies.get(0).wire());
        assertEquals("r 1/x", jeopardies.get(0).reservationId().orElseThrow());
      }
    } finally {
      executor.shutdownNow();
    }
  }

  /** A listener that stops the runner from onDecision (on the core's own stop) sees one stop. */
  @Test
  void aListenerMayStopTheRunnerFromItsCallback() throws Exception {
    Scripted t = new Scripted();
    List<Decision> seen = new ArrayList<>();
    List<Decision> stops = new ArrayList<>();
    try (Heartbeat hb = Heartbeat.builder().requestTimeoutMillis(60_000).createRequestJson("{}").build()) {
      HeartbeatRunner[] self = new HeartbeatRunner[1];
      HeartbeatRunner r =
          HeartbeatRunner.builder(hb, t)
              .releaseOnStop(true)
              .listener(
                  new HeartbeatRunner.Listener() {
                    @Override
                    public void onDecision(java.util.Optional<String> id, Decision d) {
                      seen.add(d);
                      self[0].stop();
                    }

                    @Override
                    public void onStop(java.util.Optional<String> id, Decision d) {
                      stops.add(d);
                    }
                  })
              .build();
      self[0] = r;
      CompletableFuture<Decision> done = r.start();
      assertTrue(t.first.await(10, TimeUnit.SECONDS));
      // A 400 to the create: the core stops create_rejected; the listener's stop changes nothing.
      t.future(0).complete(Response.of(400).withBody("{\"error\":\"INVALID_REQUEST\",\"message\":\"m\",\"request_id\":\"q\"}"));
      Decision stop = done.get(10, TimeUnit.SECONDS);
      assertEquals(StopReason.CREATE_REJECTED, stop.stopReason().orElseThrow());
      assertEquals(1, seen.size());
      assertEquals(List.of(stop), stops);
      assertEquals(1, t.calls.size(), "no reservation: nothing to release");
      r.close();
    }
  }

  @Test
  void badConfigurationIsRefused() {
    URI base = URI.create("http://127.0.0.1:1");
    IllegalArgumentException e =
        assertThrows(IllegalArgumentException.class, () -> new HttpClientTransport(base, "sec\r\nret"));
    assertFalse(e.getMessage().contains("sec"), "the key is never echoed");
    assertThrows(IllegalArgumentException.class, () -> new HttpClientTransport(base, ""));
    assertThrows(IllegalArgumentException.class, () -> new HttpClientTransport(URI.create("ftp://x"), "k"));
    assertThrows(NullPointerException.class, () -> HeartbeatRunner.builder(null, c -> null));
    try (Heartbeat hb = Heartbeat.builder().build()) {
      assertThrows(
          IllegalArgumentException.class,
          () -> HeartbeatRunner.builder(hb, c -> null).finalizeTimeout(Duration.ZERO));
    }
  }

  @Test
  void timingHelpers() {
    assertEquals(144, HeartbeatRunner.detectionSlackMillis(1_000));
    assertEquals(584, HeartbeatRunner.detectionSlackMillis(5_000));
    assertEquals(0, HeartbeatRunner.detectionSlackMillis(1));
    assertEquals("a-b_c.d~e%20%2F%C3%A9", HeartbeatRunner.encodeSegment("a-b_c.d~e /\u00e9"));
    assertEquals(TransportFailure.CONNECT, TransportException.classify(new java.net.ConnectException()));
    assertEquals(
        TransportFailure.TIMEOUT,
        TransportException.classify(
            new java.util.concurrent.CompletionException(new java.net.http.HttpTimeoutException("t"))));
    assertEquals(
        TransportFailure.CONNECT,
        TransportException.classify(new java.net.http.HttpConnectTimeoutException("t")));
    assertEquals(TransportFailure.RESET, TransportException.classify(new java.io.IOException("closed")));
  }
}
