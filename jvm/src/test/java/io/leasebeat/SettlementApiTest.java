package io.leasebeat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.OptionalLong;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;

/**
 * The Settlement API: shapes, exact big integers, typed errors for bad input (nothing sent, nothing
 * lost), the record round trip, close(), and calls out of turn.
 */
class SettlementApiTest {
  private static final long WALL = 1_785_585_600_000L;
  private static final long MS = 1_000_000L;
  private static final String COMMIT = "{\"actual\":{\"unit\":\"TOKENS\",\"amount\":900}}";
  private static final String EVENT =
      "{\"subject\":{\"tenant\":\"acme\"},\"action\":{\"kind\":\"llm\",\"name\":\"x\"}}";

  private static Settlement commit(long origin) {
    return Settlement.commit("r-1", COMMIT).event(EVENT).keyPrefix("k-").build(origin, WALL);
  }

  private static void refused(LeaseException.Code code, org.junit.jupiter.api.function.Executable call) {
    LeaseException e = assertThrows(LeaseException.class, call);
    assertEquals(code, e.code(), e.getMessage());
  }

  @Test
  void aCommitGoesPersistCommitDone() {
    long origin = -5_000_000_000L; // nanoTime values may be negative
    try (Settlement s = commit(origin)) {
      assertEquals(origin, s.originNanos());
      assertEquals("k-1", s.key());
      assertEquals("r-1", s.reservationId());
      assertEquals(Settlement.Mode.COMMIT, s.mode());
      SettlementAction p = s.pollAction();
      assertEquals(SettlementAction.Type.PERSIST, p.type());
      SettlementRecord r = p.record().orElseThrow();
      assertEquals(Settlement.RecordMode.COMMIT, r.mode());
      assertEquals(WALL, r.recordedAtMillis());
      assertEquals(OptionalLong.empty(), r.notBeforeMillis());
      assertEquals("k-1", r.key());
      assertTrue(r.json().startsWith("{\"version\":1,\"reservation_id\":\"r-1\""), r.json());
      assertEquals(r.json(), new String(r.jsonBytes(), StandardCharsets.UTF_8));
      assertEquals(OptionalLong.empty(), s.pollTimeoutNanos());
      SettlementDecision first = s.lastDecision();
      assertEquals(Settlement.Next.PERSIST, first.next());
      assertEquals(Optional.of(Settlement.RecordChange.WRITE), first.record());
      assertEquals(Optional.of(Settlement.RecordMode.COMMIT), first.recordMode());

      SettlementDecision d = s.handlePersisted(origin + MS);
      assertEquals(Settlement.Next.COMMIT, d.next());
      assertEquals(OptionalLong.of(origin + MS), d.atNanos());
      assertEquals(OptionalLong.of(origin + MS), s.pollTimeoutNanos());
      SettleAttempt a = s.pollAction().attempt().orElseThrow();
      assertEquals(Settlement.Endpoint.COMMIT, a.endpoint());
      assertEquals(origin + MS, a.dueNanos());
      assertEquals(0, a.delayNanos(origin + 2 * MS));
      assertEquals(MS, a.delayNanos(origin));
      assertEquals(
          "{\"actual\":{\"amount\":900,\"unit\":\"TOKENS\"},\"idempotency_key\":\"k-1\"}", a.bodyText());
      assertEquals(Settlement.Next.WAIT, s.handleSent(a.id(), origin + 2 * MS).next());
      assertEquals(OptionalLong.of(origin + 2 * MS), s.attempt().orElseThrow().sentNanos());
      SettlementDecision done =
          s.handleResponse(
              a.id(),
              Response.of(200)
                  .withHeader("Content-Type", "application/json")
                  .withBody("{\"status\":\"COMMITTED\",\"charged\":{\"unit\":\"TOKENS\",\"amount\":900}}"),
              origin + 30 * MS,
              WALL + 30);
      assertEquals(Optional.of(Settlement.Outcome.COMMITTED), done.outcome());
      assertEquals(Optional.of(Settlement.RecordChange.REMOVE), done.record());
      assertTrue(done.stopHeartbeat());
      assertEquals(
          "{\"class\":\"success\",\"heartbeat\":\"stop\",\"mode\":\"commit\",\"next\":\"done\",\"outcome\":\"committed\",\"record\":\"remove\",\"status\":200}",
          done.toJson());
      assertEquals(SettlementAction.Type.DONE, s.pollAction().type());
      assertEquals(Optional.of(Settlement.Outcome.COMMITTED), s.outcome());
      assertEquals(done.toJson(), s.lastDecision().toJson());
      refused(LeaseException.Code.STOPPED, () -> s.handleFailure(a.id(), TransportFailure.RESET, origin + 40 * MS));
    }
  }

  @Test
  void amountsAreExactAndBeyondTwoToTheSixtyThreeRefused() {
    try (Settlement s =
        Settlement.commit("r-1", "{\"actual\":{\"unit\":\"TOKENS\",\"amount\":9223372036854775807}}")
            .build(0, WALL)) {
      assertTrue(s.record().orElseThrow().json().contains("\"amount\":9223372036854775807"));
    }
    refused(
        LeaseException.Code.INVALID_CONFIG,
        () ->
            Settlement.commit("r-1", "{\"actual\":{\"unit\":\"TOKENS\",\"amount\":9223372036854775808}}")
                .build(0, WALL));
  }

  @Test
  void badBodiesAndIdsAreTypedErrors() {
    String[][] bad = {
      {"r-1", "not json"},
      {"r-1", "[1,2]"},
      {"r-1", "{\"actual\":{\"unit\":\"TOKENS\",\"amount\":1},\"idempotency_key\":\"mine\"}"},
      {"r-1", "{\"actual\":{\"unit\":\"TOKENS\",\"amount\":1.5}}"},
      {"r\u00001", COMMIT},
      {"r".repeat(10_000), COMMIT},
      {"", COMMIT},
    };
    for (String[] b : bad) {
      refused(LeaseException.Code.INVALID_CONFIG, () -> Settlement.commit(b[0], b[1]).build(0, WALL));
    }
    refused(
        LeaseException.Code.INVALID_CONFIG,
        () -> Settlement.commit("r-1", COMMIT).event("{\"subject\":{}}").build(0, WALL));
    refused(
        LeaseException.Code.INVALID_CONFIG,
        () -> Settlement.commit("r-1", COMMIT).releaseReason("x").build(0, WALL));
    refused(
        LeaseException.Code.INVALID_CONFIG,
        () -> Settlement.release("r-1").event(EVENT).build(0, WALL));
    refused(
        LeaseException.Code.INVALID_CONFIG,
        () -> Settlement.commit("r-1", COMMIT).retry(new Settlement.RetryPolicy(0, 500, 30_000)).build(0, WALL));
    refused(
        LeaseException.Code.INVALID_CONFIG,
        () -> Settlement.commit("r-1", COMMIT).retry(new Settlement.RetryPolicy(5, 2000, 1000)).build(0, WALL));
    assertThrows(IllegalArgumentException.class, () -> new Settlement.RetryPolicy(-1, 500, 30_000));
    assertThrows(IllegalArgumentException.class, () -> new Settlement.RetryPolicy(5, -1, 30_000));
    assertThrows(IllegalArgumentException.class, () -> Settlement.commit("r-\ud800", COMMIT).build(0, WALL));
    assertThrows(NullPointerException.class, () -> Settlement.commit(null, COMMIT));
    assertThrows(NullPointerException.class, () -> Settlement.commit("r-1", null));
    // Slashes are allowed in an id (the caller percent-encodes the path).
    try (Settlement s = Settlement.commit("a/b/../c", COMMIT).build(0, WALL)) {
      assertEquals("a/b/../c", s.reservationId());
    }
  }

  @Test
  void timesAndWallClockAreValidated() {
    assertThrows(IllegalArgumentException.class, () -> Settlement.commit("r-1", COMMIT).build(Long.MIN_VALUE, WALL));
    assertThrows(IllegalArgumentException.class, () -> Settlement.commit("r-1", COMMIT).build(0, -1));
    try (Settlement s = commit(1_000)) {
      refused(LeaseException.Code.TIME_WENT_BACKWARDS, () -> s.handlePersisted(999));
      assertThrows(IllegalArgumentException.class, () -> s.handlePersisted(Long.MIN_VALUE));
      s.handlePersisted(2_000);
      refused(LeaseException.Code.TIME_WENT_BACKWARDS, () -> s.handleSent(1, 1_500));
      long id = s.pollAction().attempt().orElseThrow().id();
      s.handleSent(id, 2_000);
      assertThrows(
          IllegalArgumentException.class, () -> s.handleResponse(id, Response.of(200), 3_000, -5));
    }
  }

  @Test
  void aRetryAfterFloorIsPersistedFirstOnTheWallClock() {
    try (Settlement s = commit(0)) {
      s.handlePersisted(0);
      long id = s.pollAction().attempt().orElseThrow().id();
      s.handleSent(id, 0);
      SettlementDecision d =
          s.handleResponse(id, Response.of(429).withHeader("Retry-After", "7"), MS, WALL + 1);
      assertEquals(Settlement.Next.PERSIST, d.next());
      assertEquals(Settlement.Classification.THROTTLED, d.classification());
      assertEquals(OptionalLong.of(WALL + 7001), d.notBeforeMillis());
      assertEquals(OptionalLong.of(WALL + 7001), d.recordNotBeforeMillis());
      assertEquals(OptionalLong.of(7000), d.delayMillis());
      assertEquals(
          OptionalLong.of(WALL + 7001), s.pollAction().record().orElseThrow().notBeforeMillis());
      SettlementDecision next = s.handlePersistFailed("disk full", 2 * MS);
      assertEquals(List.of(Settlement.Warning.PERSIST_FAILED), next.warnings());
      assertTrue(next.detail().orElseThrow().contains("disk full"));
      assertEquals(OptionalLong.of(7001 * MS), next.atNanos());
    }
  }

  @Test
  void aRecordRoundTripsThroughFromRecordWithTheSameKey() {
    byte[] json;
    String key;
    try (Settlement s = Settlement.commit("r-1", COMMIT).event(EVENT).build(0, WALL)) {
      json = s.record().orElseThrow().jsonBytes();
      key = s.key();
    }
    try (Settlement r = Settlement.fromRecord(json, 5 * MS, WALL + 5)) {
      assertEquals(key, r.key());
      assertEquals(Settlement.Classification.RESTART, r.lastDecision().classification());
      SettleAttempt a = r.pollAction().attempt().orElseThrow();
      assertEquals(Settlement.Endpoint.COMMIT, a.endpoint());
      assertEquals(5 * MS, a.dueNanos());
    }
    try (Settlement r =
        Settlement.fromRecord(
            new String(json, StandardCharsets.UTF_8), new Settlement.RetryPolicy(2, 100, 200), 0, WALL)) {
      assertEquals(key, r.key());
    }
  }

  @Test
  void aCorruptOrForeignRecordIsATypedError() {
    String[] bad = {
      "",
      "{",
      "{\"version\":2}",
      "null",
      "{\"version\":1,\"reservation_id\":\"r-1\",\"mode\":\"commit\",\"commit_body\":{\"actual\":{\"unit\":\"TOKENS\",\"amount\":1}},\"recorded_at_ms\":0}",
    };
    for (String b : bad) {
      refused(
          LeaseException.Code.INVALID_ARGUMENT,
          () -> Settlement.fromRecord(b.getBytes(StandardCharsets.UTF_8), 0, WALL));
    }
    assertThrows(NullPointerException.class, () -> Settlement.fromRecord((byte[]) null, 0, WALL));
  }

  @Test
  void noActualIsDoneAtOnceAndAReleaseIsNotJournaled() {
    try (Settlement s = Settlement.withoutActual("r-1").build(0, WALL)) {
      assertEquals(Optional.of(Settlement.Outcome.NO_ACTUAL), s.outcome());
      assertEquals(SettlementAction.Type.DONE, s.pollAction().type());
      assertEquals(Optional.empty(), s.record());
      assertEquals("", s.key());
      assertTrue(s.lastDecision().stopHeartbeat());
    }
    try (Settlement s = Settlement.release("r-1").releaseReason("unused").keyPrefix("rel-").build(7 * MS, WALL)) {
      assertEquals(Settlement.Mode.RELEASE, s.mode());
      assertEquals(Optional.empty(), s.record());
      SettleAttempt a = s.pollAction().attempt().orElseThrow();
      assertEquals(Settlement.Endpoint.RELEASE, a.endpoint());
      assertEquals(7 * MS, a.dueNanos());
      assertEquals("{\"idempotency_key\":\"rel-1\",\"reason\":\"unused\"}", a.bodyText());
      s.handleSent(a.id(), 7 * MS);
      SettlementDecision d =
          s.handleResponse(
              a.id(),
              Response.of(200).withBody("{\"status\":\"RELEASED\",\"released\":{\"unit\":\"TOKENS\",\"amount\":0}}"),
              9 * MS,
              WALL);
      assertEquals(Optional.of(Settlement.Outcome.RELEASED), d.outcome());
      assertEquals(Optional.empty(), d.record());
    }
  }

  @Test
  void callsOutOfTurnAreRefusedAndChangeNothing() {
    try (Settlement s = commit(0)) {
      refused(LeaseException.Code.NOT_OUTSTANDING, () -> s.handleSent(1, 1));
      refused(LeaseException.Code.NOT_OUTSTANDING, () -> s.handleFailure(1, TransportFailure.TIMEOUT, 1));
      s.handlePersisted(5);
      refused(LeaseException.Code.NOT_OUTSTANDING, () -> s.handlePersisted(6));
      refused(LeaseException.Code.NOT_SENT, () -> s.handleResponse(1, Response.of(200), 6, WALL));
      refused(LeaseException.Code.NOT_OUTSTANDING, () -> s.handleSent(2, 6));
      s.handleSent(1, 6);
      refused(LeaseException.Code.ALREADY_SENT, () -> s.handleSent(1, 6));
      // A status outside 100..=999 cannot even be built (as for the heartbeat).
      assertThrows(IllegalArgumentException.class, () -> s.handleResponse(1, Response.of(1000), 7, WALL));
      assertThrows(IllegalArgumentException.class, () -> s.handleResponse(1, Response.of(99), 7, WALL));
      assertThrows(NullPointerException.class, () -> s.handleResponse(1, null, 7, WALL));
      assertThrows(NullPointerException.class, () -> s.handleFailure(1, null, 7));
      assertEquals(SettlementAction.Type.WAIT, s.pollAction().type());
      SettlementDecision d = s.handleFailure(1, TransportFailure.TIMEOUT, 8);
      assertEquals(Settlement.Next.COMMIT, d.next());
      assertEquals(OptionalLong.of(500), d.delayMillis());
      assertEquals(1, s.failures());
      assertEquals("k-1", s.key());
    }
  }

  @Test
  void closeIsIdempotentAndLaterCallsThrow() {
    Settlement s = commit(0);
    assertFalse(s.isClosed());
    s.close();
    s.close();
    assertTrue(s.isClosed());
    List<Executable> calls = new ArrayList<>();
    calls.add(s::pollAction);
    calls.add(() -> s.handlePersisted(1));
    calls.add(s::key);
    calls.add(s::lastDecision);
    calls.add(s::record);
    for (Executable c : calls) {
      assertThrows(IllegalStateException.class, c::run);
    }
  }

  /** Local alias so that a list of calls can hold method references. */
  private interface Executable {
    void run() throws Throwable;
  }

  @Test
  void closeIsSerializedAgainstCallsInFlight() throws Exception {
    for (int round = 0; round < 20; round++) {
      Settlement s = commit(0);
      int threads = 4;
      CountDownLatch start = new CountDownLatch(1);
      AtomicInteger unexpected = new AtomicInteger();
      List<Thread> ts = new ArrayList<>();
      for (int t = 0; t < threads; t++) {
        Thread th =
            new Thread(
                () -> {
                  try {
                    start.await();
                    for (int i = 0; i < 200; i++) {
                      s.pollAction();
                      s.key();
                    }
                  } catch (IllegalStateException closed) {
                    // expected once close() ran
                  } catch (Throwable e) {
                    unexpected.incrementAndGet();
                  }
                });
        th.start();
        ts.add(th);
      }
      start.countDown();
      s.close();
      for (Thread th : ts) {
        th.join();
      }
      assertEquals(0, unexpected.get());
      assertThrows(IllegalStateException.class, s::pollAction);
    }
  }

  @Test
  void theStableNamesAreTheCores() {
    assertEquals("auth_failed", Settlement.Outcome.AUTH_FAILED.wire());
    assertEquals("expired_unrecorded", Settlement.Outcome.EXPIRED_UNRECORDED.wire());
    assertEquals("server_error", Settlement.Classification.SERVER_ERROR.wire());
    assertEquals("retry_after_capped", Settlement.Warning.RETRY_AFTER_CAPPED.wire());
    assertEquals(Settlement.Outcome.NO_ACTUAL, Settlement.wired(Settlement.Outcome.class, "no_actual"));
    assertThrows(IllegalArgumentException.class, () -> Settlement.wired(Settlement.Outcome.class, "nope"));
  }
}
