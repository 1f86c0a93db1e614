package io.leasebeat;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import java.math.BigInteger;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.OptionalLong;
import org.junit.jupiter.api.Test;

class HeartbeatApiTest {
  static final long MS = 1_000_000L;
  static final byte[] CREATE_OK =
      ("{\"decision\":\"ALLOW\",\"reservation_id\":\"r-1\",\"affected_scopes\":[\"tenant:a\"],"
              + "\"expires_at_ms\":1785585660000,\"remaining_ttl_ms\":61500}")
          .getBytes(StandardCharsets.UTF_8);

  static Heartbeat workedExample(long origin) {
    return Heartbeat.builder()
        .ttlMillis(60_000)
        .requestTimeoutMillis(10_000)
        .keyPrefix("key-")
        .originNanos(origin)
        .build();
  }

  @Test
  void workedExampleThroughTheApi() throws Exception {
    try (Heartbeat hb = workedExample(0)) {
      Action a = hb.pollAction();
      assertEquals(Action.Type.SEND, a.type());
      Attempt create = a.attempt().orElseThrow();
      assertEquals(1, create.id());
      assertEquals(AttemptKind.CREATE, create.kind());
      assertEquals(Num.of(0), create.due());
      assertEquals("key-1", create.key());
      assertEquals(KeyUse.NEW, create.keyUse());
      JsonNode body = VectorReplay.MAPPER.readTree(create.body());
      assertEquals("key-1", body.get("idempotency_key").asText());
      assertEquals(60000, body.get("ttl_ms").asInt());

      hb.handleSent(create.id(), 0);
      assertEquals(Action.Type.AWAIT_OUTCOME, hb.pollAction().type());
      assertEquals(OptionalLong.of(0), hb.attempt().orElseThrow().sentNanoTime());

      Decision d = hb.handleResponse(create.id(), Response.of(200).withBody(CREATE_OK), 1_500 * MS);
      assertFalse(d.isStop());
      assertEquals(Optional.of(AttemptKind.EXTEND), d.send());
      assertEquals(Optional.of(Num.of(38_500 * MS)), d.at());
      assertEquals(Optional.of(KeyUse.NEW), d.key());
      assertEquals(OptionalLong.of(2), d.keyIndex());
      assertEquals(Optional.of(Mode.PRIMARY), d.mode());
      assertEquals(OutcomeClass.SUCCESS, d.outcome());
      assertEquals(Optional.of("r-1"), d.reservationId());
      assertEquals(Optional.of(Num.of(60_000)), d.numbers().leadFloor());
      assertEquals(Optional.of(Num.of(10_000)), d.numbers().attemptBudget());
      assertEquals(Optional.of(Num.of(3_000)), d.numbers().safetyMargin());
      assertEquals(Optional.of(Num.of(23_000)), d.numbers().retryReserve());
      assertEquals(Optional.of(Num.of(37_000)), d.numbers().nextDelay());
      assertEquals(Optional.empty(), d.numbers().retryWindow());
      assertEquals(Num.of(37_000), d.numbers().asMap().get("next_delay"));
      assertEquals(List.of(), d.warnings());
      assertEquals(OptionalLong.of(38_500 * MS), d.dueNanoTime());
      assertEquals(37_000 * MS, d.delayNanos(1_500 * MS));
      assertEquals(0, d.delayNanos(40_000 * MS));

      JsonNode json = VectorReplay.MAPPER.readTree(d.toJson());
      assertEquals("extend", json.get("next").asText());
      assertEquals(38500, json.get("at").asLong());
      assertEquals(37000, json.get("numbers").get("next_delay").asLong());

      assertEquals(Optional.of("r-1"), hb.reservationId());
      assertEquals(Optional.of(Mode.PRIMARY), hb.mode());
      assertEquals(1500, hb.maxRttMillis());
      assertEquals(1_500 * MS, hb.lastEventNanoTime());
      assertEquals(Optional.of(d), hb.lastDecision());
      assertEquals(Optional.of(Num.of(38_500 * MS)), hb.pollTimeout());

      Attempt extend = hb.attempt().orElseThrow();
      assertEquals(2, extend.id());
      assertEquals("key-2", extend.key());
      JsonNode eb = VectorReplay.MAPPER.readTree(extend.body());
      assertEquals(60000, eb.get("extend_by_ms").asInt());

      hb.handleSent(extend.id(), 38_500 * MS);
      Decision retry = hb.handleFailure(extend.id(), TransportFailure.TIMEOUT, 38_600 * MS);
      assertEquals(Optional.of(KeyUse.SAME), retry.key());
      assertEquals(OutcomeClass.TRANSPORT_FAILURE, retry.outcome());
      Attempt again = hb.attempt().orElseThrow();
      assertEquals("key-2", again.key());
      assertArrayEquals(extend.body(), again.body());
      assertNotEquals(extend.id(), again.id());

      Decision stop = hb.cancel(39_000 * MS);
      assertTrue(stop.isStop());
      assertEquals(Optional.of(StopReason.CANCELLED), stop.stopReason());
      assertEquals(Optional.empty(), stop.at());
      assertEquals(Long.MAX_VALUE, stop.delayNanos(0));
      assertEquals(Action.Type.STOP, hb.pollAction().type());
      assertEquals(Optional.of(StopReason.CANCELLED), hb.stopReason());
      assertEquals(Optional.empty(), hb.attempt());
      LeaseException e = assertThrows(LeaseException.class, () -> hb.cancel(40_000 * MS));
      assertEquals(LeaseException.Code.STOPPED, e.code());
    }
  }

  @Test
  void negativeNanoTimeOriginWorks() {
    long origin = -7_000_000_000_000L;
    try (Heartbeat hb = workedExample(origin)) {
      Attempt create = hb.attempt().orElseThrow();
      assertEquals(OptionalLong.of(origin), create.dueNanoTime());
      hb.handleSent(create.id(), origin);
      Decision d = hb.handleResponse(create.id(), Response.of(200).withBody(CREATE_OK), origin + 1_500 * MS);
      assertEquals(Optional.of(Num.of(38_500 * MS)), d.at());
      assertEquals(OptionalLong.of(origin + 38_500 * MS), d.dueNanoTime());
      LeaseException e =
          assertThrows(LeaseException.class, () -> hb.cancel(origin - 1));
      assertEquals(LeaseException.Code.TIME_WENT_BACKWARDS, e.code());
      assertEquals(LeaseException.Code.TIME_WENT_BACKWARDS,
          assertThrows(LeaseException.class, () -> hb.cancel(origin + MS)).code());
      assertEquals(Optional.of(StopReason.CANCELLED), hb.cancel(origin + 2_000 * MS).stopReason());
    }
  }

  @Test
  void nanoTimeWrapAroundIsADifference() {
    long origin = Long.MAX_VALUE - 1_000 * MS; // nanoTime wraps to negative 1 s later
    try (Heartbeat hb = workedExample(origin)) {
      Attempt create = hb.attempt().orElseThrow();
      hb.handleSent(create.id(), origin);
      Decision d = hb.handleResponse(create.id(), Response.of(200).withBody(CREATE_OK), origin + 1_500 * MS);
      assertEquals(Optional.of(Num.of(38_500 * MS)), d.at());
      assertTrue(d.dueNanoTime().getAsLong() < 0);
      assertEquals(37_000 * MS, d.delayNanos(origin + 1_500 * MS));
    }
  }

  @Test
  void defaultKeysAreUuids() {
    try (Heartbeat hb = Heartbeat.builder().build()) {
      String key = hb.attempt().orElseThrow().key();
      assertTrue(key.matches("[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"), key);
      long now = System.nanoTime();
      assertTrue(hb.attempt().orElseThrow().delayNanos(now) == 0);
    }
  }

  @Test
  void createRequestIsMerged() throws Exception {
    try (Heartbeat hb =
        Heartbeat.builder().createRequestJson("{\"subject\":{\"tenant\":\"acme\"},\"action\":{\"kind\":\"x\"}}").build()) {
      JsonNode body = VectorReplay.MAPPER.readTree(hb.attempt().orElseThrow().body());
      assertEquals("acme", body.get("subject").get("tenant").asText());
      assertTrue(body.has("idempotency_key"));
    }
  }

  @Test
  void badConfigurations() {
    assertEquals(LeaseException.Code.INVALID_CONFIG,
        assertThrows(LeaseException.class, () -> Heartbeat.builder().ttlMillis(999).build()).code());
    assertEquals(LeaseException.Code.INVALID_CONFIG,
        assertThrows(LeaseException.class, () -> Heartbeat.builder().ttlMillis(86_400_001).build()).code());
    assertEquals(LeaseException.Code.INVALID_CONFIG,
        assertThrows(LeaseException.class, () -> Heartbeat.builder().createRequestJson("[1]").build()).code());
    assertEquals(LeaseException.Code.INVALID_CONFIG,
        assertThrows(LeaseException.class, () -> Heartbeat.builder().createRequestJson("{").build()).code());
    assertEquals(LeaseException.Code.INVALID_CONFIG,
        assertThrows(LeaseException.class,
            () -> Heartbeat.builder().createRequestJson("{\"ttl_ms\":5}").build()).code());
    assertThrows(IllegalArgumentException.class, () -> Heartbeat.builder().ttlMillis(-1));
    assertThrows(IllegalArgumentException.class, () -> Heartbeat.builder().requestTimeoutMillis(-1));
    assertThrows(IllegalArgumentException.class,
        () -> Heartbeat.builder().requestTimeoutMillis(BigInteger.ONE.shiftLeft(64)));
    assertThrows(NullPointerException.class, () -> Heartbeat.builder().requestTimeoutMillis(null));
  }

  static Heartbeat.Builder existing() {
    return Heartbeat.builder()
        .reservationId("rsv-9")
        .ttlMillis(60_000)
        .requestTimeoutMillis(10_000)
        .originNanos(0);
  }

  static LeaseException.Code buildFails(Heartbeat.Builder b) {
    return assertThrows(LeaseException.class, b::build).code();
  }

  @Test
  void anExistingReservationStartsWithAnExtension() {
    byte[] ok =
        "{\"status\":\"ACTIVE\",\"expires_at_ms\":90000,\"remaining_ttl_ms\":60000}"
            .getBytes(StandardCharsets.UTF_8);
    try (Heartbeat hb = existing().keyPrefix("k").build()) {
      Action action = hb.pollAction();
      assertEquals(Action.Type.SEND, action.type());
      Attempt a = action.attempt().orElseThrow();
      assertEquals(AttemptKind.EXTEND, a.kind());
      assertEquals(1, a.id());
      assertEquals("k1", a.key());
      assertEquals(1, a.keyIndex());
      assertEquals(KeyUse.NEW, a.keyUse());
      assertEquals(Num.of(0), a.due());
      assertEquals(
          "{\"extend_by_ms\":60000,\"idempotency_key\":\"k1\"}",
          new String(a.body(), StandardCharsets.UTF_8));
      assertEquals(Optional.of("rsv-9"), hb.reservationId());
      assertEquals(Optional.of(Num.of(0)), hb.pollTimeout());
      hb.handleSent(1, 0);
      Decision d = hb.handleResponse(1, Response.of(200).withBody(ok), 1_000 * MS);
      assertEquals(Optional.of(Num.of(59_000 - 22_000)), d.numbers().nextDelay());
      assertEquals(OptionalLong.of(2), d.keyIndex());
      assertEquals(Optional.of(AttemptKind.EXTEND), d.send());
      assertEquals(Optional.of("rsv-9"), d.reservationId());
    }

    // Before any success nothing proves a lead: a transient failure stops.
    try (Heartbeat hb = existing().build()) {
      String key = hb.attempt().orElseThrow().key();
      assertTrue(key.matches("[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"), key);
      hb.handleSent(1, 0);
      Decision d = hb.handleFailure(1, TransportFailure.TIMEOUT, 10_000 * MS);
      assertEquals(Optional.of(StopReason.RETRY_WINDOW_EXHAUSTED), d.stopReason());
      assertEquals(Optional.of(StopReason.RETRY_WINDOW_EXHAUSTED), hb.stopReason());
    }

    // Without remaining_ttl_ms, the first success is the fallback's anchor.
    try (Heartbeat hb = existing().build()) {
      hb.handleSent(1, 0);
      Decision d =
          hb.handleResponse(
              1,
              Response.of(200)
                  .withBody("{\"status\":\"ACTIVE\",\"expires_at_ms\":90000}".getBytes(StandardCharsets.UTF_8)),
              MS);
      assertEquals(Optional.of(Mode.FALLBACK), d.mode());
      assertEquals(Optional.of(Num.of(MS)), d.at());
    }
  }

  @Test
  void reservationIdsAreCountedInCharacters() {
    String x128 = "x".repeat(128);
    try (Heartbeat hb = Heartbeat.builder().reservationId(x128).build()) {
      assertEquals(Optional.of(x128), hb.reservationId());
    }
    // 128 supplementary characters are 256 UTF-16 chars, and still 128 characters.
    String astral = new String(Character.toChars(0x1F600)).repeat(128);
    assertEquals(256, astral.length());
    try (Heartbeat hb = Heartbeat.builder().reservationId(astral).build()) {
      assertEquals(Optional.of(astral), hb.reservationId());
      assertEquals(AttemptKind.EXTEND, hb.attempt().orElseThrow().kind());
    }
  }

  @Test
  void badReservationIds() {
    for (String bad : new String[] {"", "x".repeat(129), "\u00e9".repeat(129)}) {
      LeaseException e =
          assertThrows(LeaseException.class, () -> Heartbeat.builder().reservationId(bad).build());
      assertEquals(LeaseException.Code.INVALID_ARGUMENT, e.code());
      assertTrue(e.getMessage().contains("reservation_id"), e.getMessage());
    }
    assertThrows(NullPointerException.class, () -> Heartbeat.builder().reservationId(null));
    // An unpaired surrogate has no UTF-8 form: refused before it could become another id.
    assertThrows(IllegalArgumentException.class, () -> Heartbeat.builder().reservationId("rsv-\ud800"));
    // Nothing is created for an existing reservation: no create request.
    assertThrows(IllegalStateException.class, () -> existing().createRequestJson("{}").build());
    assertEquals(LeaseException.Code.INVALID_CONFIG, buildFails(existing().ttlMillis(999)));
    assertEquals(LeaseException.Code.INVALID_KEY, buildFails(existing().keyPrefix("x".repeat(256))));
    // A prefix with CR or LF could not be a header value (issue 25).
    assertEquals(LeaseException.Code.INVALID_KEY, buildFails(existing().keyPrefix("p\r\n")));
    assertEquals(LeaseException.Code.INVALID_KEY, buildFails(Heartbeat.builder().keyPrefix("p\n")));
  }

  @Test
  void unsignedTimeoutAboveLongMax() {
    BigInteger big = BigInteger.ONE.shiftLeft(63).add(BigInteger.TEN);
    try (Heartbeat hb = Heartbeat.builder().keyPrefix("k").originNanos(0).requestTimeoutMillis(big).build()) {
      hb.handleSent(1, 0);
      Decision d = hb.handleResponse(1, Response.of(200).withBody(CREATE_OK), 1_500 * MS);
      assertEquals(Optional.of(Num.of(big)), d.numbers().attemptBudget());
      assertEquals(Optional.of(Num.INF), d.numbers().retryReserve());
    }
  }

  @Test
  void badEventsAreTyped() {
    try (Heartbeat hb = workedExample(0)) {
      assertEquals(LeaseException.Code.NOT_SENT,
          assertThrows(LeaseException.class, () -> hb.handleFailure(1, TransportFailure.RESET, 0)).code());
      assertEquals(LeaseException.Code.NOT_OUTSTANDING,
          assertThrows(LeaseException.class, () -> hb.handleSent(7, 0)).code());
      hb.handleSent(1, 5 * MS);
      assertEquals(LeaseException.Code.ALREADY_SENT,
          assertThrows(LeaseException.class, () -> hb.handleSent(1, 6 * MS)).code());
      assertEquals(LeaseException.Code.TIME_WENT_BACKWARDS,
          assertThrows(LeaseException.class, () -> hb.handleFailure(1, TransportFailure.CONNECT, 4 * MS)).code());
      assertThrows(IllegalArgumentException.class, () -> hb.handleSent(0, 6 * MS));
      assertThrows(IllegalArgumentException.class, () -> hb.handleSent(-3, 6 * MS));
      assertThrows(IllegalArgumentException.class, () -> Response.of(99));
      assertThrows(IllegalArgumentException.class, () -> Response.of(1000));
      assertThrows(NullPointerException.class, () -> hb.handleResponse(1, null, 6 * MS));
      assertThrows(NullPointerException.class, () -> hb.handleFailure(1, null, 6 * MS));
      assertThrows(NullPointerException.class, () -> Response.of(200).withBody((byte[]) null));
      assertThrows(NullPointerException.class, () -> Response.of(200).withHeader("a", null));
      // Nothing changed: the attempt is still in flight and accepts its outcome.
      assertEquals(Action.Type.AWAIT_OUTCOME, hb.pollAction().type());
      Decision d = hb.handleFailure(1, TransportFailure.CONNECT, 6 * MS);
      assertEquals(Optional.of(AttemptKind.CREATE), d.send());
      assertEquals(Optional.of(KeyUse.SAME), d.key());
    }
  }

  @Test
  void headersFromAMapAndRetryAfter() {
    try (Heartbeat hb = workedExample(0)) {
      hb.handleSent(1, 0);
      hb.handleResponse(1, Response.of(200).withBody(CREATE_OK), 1_500 * MS);
      hb.handleSent(2, 38_500 * MS);
      Map<String, List<String>> headers = new LinkedHashMap<>();
      headers.put("retry-after", List.of(" 2 "));
      Decision d = hb.handleResponse(2, Response.of(429, headers, new byte[0]), 38_600 * MS);
      assertEquals(OutcomeClass.THROTTLED, d.outcome());
      assertEquals(Optional.of(Num.of(2_000)), d.numbers().retryDelay());
      assertEquals(Optional.of(Num.of(40_600 * MS)), d.at());
    }
  }

  @Test
  void timingUnknownGivesZeroDelay() {
    try (Heartbeat hb = workedExample(0)) {
      hb.handleSent(1, 0);
      Decision d = hb.handleResponse(1, Response.of(200).withBody(CREATE_OK).withTimingUnknown(), 1_500 * MS);
      assertEquals(Optional.of(Num.of(0)), d.numbers().nextDelay());
      assertEquals(0, hb.maxRttMillis());
    }
  }

  @Test
  void catalogMatchesTheCore() {
    Wire w = Wire.open(NativeBridge.nativeCatalog());
    List<LeaseException.Code> codes = new ArrayList<>();
    for (int i = 0, n = w.u32(); i < n; i++) {
      LeaseException.Code c = LeaseException.Code.valueOf(w.str());
      assertEquals(c.wire(), w.str());
      codes.add(c);
    }
    List<LeaseException.Code> expected = new ArrayList<>(List.of(LeaseException.Code.values()));
    expected.remove(LeaseException.Code.PANIC);
    assertEquals(expected, codes);
    List<StopReason> reasons = new ArrayList<>();
    for (int i = 0, n = w.u32(); i < n; i++) {
      StopReason r = StopReason.valueOf(w.str());
      assertEquals(r.wire(), w.str());
      reasons.add(r);
    }
    assertEquals(List.of(StopReason.values()), reasons);
    assertEquals(Heartbeat.nativeVersion(), w.str());
    assertEquals("retry_window_exhausted", StopReason.RETRY_WINDOW_EXHAUSTED.wire());
    assertEquals(StopReason.NO_PROGRESS, StopReason.fromWire("no_progress"));
    assertThrows(IllegalArgumentException.class, () -> StopReason.fromWire("nope"));
  }

  @Test
  void aPanicBecomesAJavaException() {
    LeaseException e = assertThrows(LeaseException.class, () -> Wire.open(NativeBridge.nativePanic()));
    assertEquals(LeaseException.Code.PANIC, e.code());
    assertTrue(e.getMessage().contains("deliberate panic"), e.getMessage());
    // The JVM and the library are fine afterwards.
    try (Heartbeat hb = workedExample(0)) {
      assertEquals(Action.Type.SEND, hb.pollAction().type());
    }
  }

  @Test
  void closeIsIdempotentAndUseAfterCloseThrows() {
    Heartbeat hb = workedExample(0);
    assertFalse(hb.isClosed());
    hb.close();
    hb.close();
    assertTrue(hb.isClosed());
    assertThrows(IllegalStateException.class, hb::pollAction);
    assertThrows(IllegalStateException.class, () -> hb.handleSent(1, 0));
    assertThrows(IllegalStateException.class, () -> hb.cancel(0));
    assertThrows(IllegalStateException.class, hb::lastDecision);
    assertEquals(0, hb.originNanos());
  }

  @Test
  void cleanerFreesLeakedHeartbeats() throws InterruptedException {
    System.gc();
    long before = Heartbeat.liveHandles();
    for (int i = 0; i < 200; i++) {
      workedExample(0).pollAction(); // never closed
    }
    assertTrue(Heartbeat.liveHandles() >= before + 1);
    long after = Long.MAX_VALUE;
    for (int i = 0; i < 200 && after > before; i++) {
      System.gc();
      Thread.sleep(10);
      after = Heartbeat.liveHandles();
    }
    assertTrue(after <= before, "leaked handles not freed: " + after + " > " + before);
  }

  @Test
  void numParsesComparesAndKeepsExactValues() {
    assertEquals(Num.INF, Num.parse("inf"));
    assertEquals(Num.NEG_INF, Num.parse("-inf"));
    Num big = Num.parse("18446744073709551614");
    assertTrue(big.isFinite());
    assertEquals(new BigInteger("18446744073709551614"), big.value());
    assertThrows(ArithmeticException.class, big::longValueExact);
    assertThrows(ArithmeticException.class, Num.INF::value);
    assertTrue(Num.NEG_INF.compareTo(Num.of(Long.MIN_VALUE)) < 0);
    assertTrue(Num.INF.compareTo(big) > 0);
    assertEquals(-1, Num.NEG_INF.signum());
    assertEquals("inf", Num.INF.toString());
    assertEquals(Num.of(new BigInteger("18446744073709551615")), Num.ofUnsigned(-1));
    assertThrows(NumberFormatException.class, () -> Num.parse("1.5"));
  }

  @Test
  void pureArithmetic() {
    HeartbeatMath.PrimarySchedule s =
        HeartbeatMath.primarySchedule(61_500, OptionalLong.of(1_500), OptionalLong.of(10_000), 1_500);
    assertEquals(
        new HeartbeatMath.PrimarySchedule(Num.of(60_000), Num.of(10_000), Num.of(3_000), Num.of(23_000), Num.of(37_000)),
        s);
    s = HeartbeatMath.primarySchedule(60_000, OptionalLong.of(0), OptionalLong.of(30_000), 0);
    assertEquals(Num.of(61_000), s.retryReserve());
    assertEquals(Num.of(0), s.nextDelay());
    s = HeartbeatMath.primarySchedule(60_000, OptionalLong.empty(), OptionalLong.empty(), 0);
    assertEquals(Num.INF, s.attemptBudget());
    assertEquals(Num.of(0), s.leadFloor());

    assertEquals(Num.of(10_000), HeartbeatMath.attemptBudget(OptionalLong.of(10_000), 1_500));
    assertEquals(Num.of(1_000), HeartbeatMath.attemptBudget(OptionalLong.of(200), 300));
    assertEquals(Num.INF, HeartbeatMath.attemptBudget(OptionalLong.empty(), 0));
    assertEquals(Num.of(3_000), HeartbeatMath.safetyMargin(1_500));
    assertEquals(Num.of(23_000), HeartbeatMath.retryReserve(Num.of(10_000), Num.of(3_000)));
    assertEquals(Num.INF, HeartbeatMath.retryReserve(Num.INF, Num.of(3_000)));
    assertEquals(1501, HeartbeatMath.ceilMs(1_500_000_001L));

    HeartbeatMath.RetryWindow r = HeartbeatMath.retryWindow(60_000, 45_000, Num.of(7_000), Num.of(1_000));
    assertEquals(new HeartbeatMath.RetryWindow(Num.of(15_000), Num.of(7_000), Optional.of(Num.of(3_750))), r);
    r = HeartbeatMath.retryWindow(60_000, 52_001, Num.of(7_000), Num.of(1_000));
    assertEquals(Num.of(-1), r.window());
    assertEquals(Optional.empty(), r.delay());
    r = HeartbeatMath.retryWindow(Long.MAX_VALUE, 0, Num.INF, Num.of(1_000));
    assertEquals(Num.NEG_INF, r.window());

    assertEquals(Optional.of(Num.of(2_000)), HeartbeatMath.parseRetryAfter(List.of(" 2 ")).millis());
    assertEquals(Optional.of(RetryAfterProblem.INVALID), HeartbeatMath.parseRetryAfter(List.of("+3")).problem());
    assertEquals(Optional.of(RetryAfterProblem.MULTIPLE), HeartbeatMath.parseRetryAfter(List.of("2, 3")).problem());
    assertEquals(Optional.of(RetryAfterProblem.MULTIPLE), HeartbeatMath.parseRetryAfter(List.of("2", "3")).problem());
    assertEquals(Optional.of(RetryAfterProblem.MISSING), HeartbeatMath.parseRetryAfter(List.of()).problem());
    assertEquals(Optional.of(RetryAfterProblem.OVERFLOW),
        HeartbeatMath.parseRetryAfter(List.of("18446744073709552")).problem());
    assertEquals(Optional.of(Num.of(new BigInteger("18446744073709551000"))),
        HeartbeatMath.parseRetryAfter(List.of("18446744073709551")).millis());

    assertEquals(Num.of(30_000), HeartbeatMath.holdCadence(60_000));
    assertEquals(Num.of(30_000), HeartbeatMath.fallbackCadence(60_000, 30_000, 60_000).cadence());
    assertTrue(HeartbeatMath.fallbackCadence(30_000, 30_000, 60_000).hold());
    assertEquals(Num.of(5_000), HeartbeatMath.fallbackCadence(10_000, 30_000, 60_000).cadence());
    assertEquals(Num.of(7), HeartbeatMath.fallbackSkips(100_000, 20_000, 10_000));
    assertEquals(Num.of(0), HeartbeatMath.fallbackSkips(-5_000, 20_000, 10_000));

    assertThrows(IllegalArgumentException.class, () -> HeartbeatMath.ceilMs(-1));
    assertThrows(IllegalArgumentException.class, () -> HeartbeatMath.safetyMargin(-1));
    assertThrows(IllegalArgumentException.class, () -> HeartbeatMath.retryReserve(Num.of(-1), Num.of(0)));
    assertThrows(IllegalArgumentException.class, () -> HeartbeatMath.retryReserve(Num.NEG_INF, Num.of(0)));
    assertThrows(IllegalArgumentException.class,
        () -> HeartbeatMath.retryReserve(Num.of(new BigInteger("18446744073709551615")), Num.of(0)));
    assertThrows(NullPointerException.class, () -> HeartbeatMath.retryReserve(null, Num.of(0)));
    assertThrows(NullPointerException.class, () -> HeartbeatMath.parseRetryAfter(null));
  }

  /**
   * A reservation id, key and body together longer than the hot calls' 512-byte text buffer: what
   * does not fit comes back as objects, whole, and the scratch buffer leaves nothing behind for
   * the next call (an error, then a short decision).
   */
  @Test
  void textsLongerThanTheBufferComeBackWhole() throws Exception {
    String rid = "r-" + "x".repeat(126);
    String prefix = "k-" + "y".repeat(250);
    try (Heartbeat hb =
        Heartbeat.builder()
            .ttlMillis(60_000)
            .requestTimeoutMillis(10_000)
            .keyPrefix(prefix)
            .reservationId(rid)
            .originNanos(0)
            .build()) {
      Attempt first = hb.pollAction().attempt().orElseThrow();
      assertTrue(first.key().startsWith(prefix));
      hb.handleSent(first.id(), 0);
      byte[] ok =
          "{\"status\":\"ACTIVE\",\"expires_at_ms\":1785585720000,\"remaining_ttl_ms\":60000}"
              .getBytes(StandardCharsets.UTF_8);
      Decision d = hb.handleResponse(first.id(), Response.of(200).withBody(ok), 1_000 * MS);
      assertEquals(Optional.of(rid), d.reservationId());
      Attempt next = hb.pollAction().attempt().orElseThrow();
      assertNotEquals(first.id(), next.id());
      assertTrue(next.key().startsWith(prefix));
      String body = new String(next.body(), StandardCharsets.UTF_8);
      assertTrue(body.length() > 256 && body.contains(next.key()), body);
      assertTrue(d.toJson().startsWith("{"), d.toJson());
      LeaseException e =
          assertThrows(LeaseException.class, () -> hb.handleSent(next.id() + 7, 2_000 * MS));
      assertEquals(LeaseException.Code.NOT_OUTSTANDING, e.code());
      Decision c = hb.cancel(3_000 * MS);
      assertEquals(Optional.of(StopReason.CANCELLED), c.stopReason());
      assertEquals(Optional.of(rid), c.reservationId());
    }
  }

  /**
   * A response body longer than the per-thread native buffer's input area (3 KiB) goes to the core
   * as an array instead, and decides exactly as the same body would in the buffer; a body that
   * just fits and an empty one do too.
   */
  @Test
  void bodiesOfEveryLengthReachTheCore() {
    String json =
        "{\"status\":\"ACTIVE\",\"expires_at_ms\":1785585720000,\"remaining_ttl_ms\":60000}";
    String reference = null;
    for (int pad : new int[] {0, 3072 - json.length(), 3073 - json.length(), 100_000}) {
      byte[] body = (json + " ".repeat(pad)).getBytes(StandardCharsets.UTF_8);
      try (Heartbeat hb =
          Heartbeat.builder()
              .ttlMillis(60_000)
              .requestTimeoutMillis(10_000)
              .keyPrefix("k")
              .reservationId("r-1")
              .originNanos(0)
              .build()) {
        Attempt first = hb.pollAction().attempt().orElseThrow();
        hb.handleSent(first.id(), 0);
        Decision d = hb.handleResponse(first.id(), Response.of(200).withBody(body), 1_000 * MS);
        assertEquals(java.util.OptionalLong.of(60_000L), d.remainingTtlMs(), "pad " + pad);
        if (reference == null) {
          reference = d.toJson();
        }
        assertEquals(reference, d.toJson(), "pad " + pad);
      }
    }
    try (Heartbeat hb =
        Heartbeat.builder().ttlMillis(60_000).keyPrefix("k").reservationId("r-1").originNanos(0)
            .build()) {
      Attempt first = hb.pollAction().attempt().orElseThrow();
      hb.handleSent(first.id(), 0);
      Decision d = hb.handleResponse(first.id(), Response.of(200), 1_000 * MS);
      assertTrue(d.toJson().startsWith("{"), d.toJson());
    }
  }

  /**
   * A heartbeat's attempt (key, body and due time decoded lazily) has a record's semantics: equal
   * to, with the same hash and text as, the attempt built from its accessors with the public
   * constructor; the body is a copy each time; the awaited attempt after handleSent differs only
   * in sentNanoTime and shares nothing mutable.
   */
  @Test
  void attemptsBehaveAsRecords() {
    try (Heartbeat hb = workedExample(5)) {
      Attempt create = hb.pollAction().attempt().orElseThrow();
      Attempt copy =
          new Attempt(
              create.id(),
              create.kind(),
              create.due(),
              create.key(),
              create.keyIndex(),
              create.keyUse(),
              create.body(),
              create.sentNanoTime(),
              create.zeroWindowRetry(),
              create.originNanos());
      assertEquals(copy, create);
      assertEquals(create, copy);
      assertEquals(copy.hashCode(), create.hashCode());
      assertEquals(copy.toString(), create.toString());
      assertTrue(create.toString().startsWith("Attempt[id=1, kind=create, due=0, key=key-1,"),
          create.toString());
      byte[] b = create.body();
      b[0] = 'x';
      assertArrayEquals(copy.body(), create.body());
      hb.handleSent(create.id(), 10);
      Attempt sent = hb.attempt().orElseThrow();
      assertNotEquals(create, sent);
      assertEquals(OptionalLong.of(10), sent.sentNanoTime());
      assertEquals(create.key(), sent.key());
      assertArrayEquals(create.body(), sent.body());
      assertEquals(create.due(), sent.due());
      Decision d = hb.handleResponse(create.id(), Response.of(200).withBody(CREATE_OK), 1_500 * MS);
      Attempt extend = hb.pollAction().attempt().orElseThrow();
      // A finite due time decoded on first use equals the decision's.
      assertEquals(d.at().orElseThrow(), extend.due());
      assertEquals(d.dueNanoTime(), extend.dueNanoTime());
      assertEquals(OptionalLong.of(38_500 * MS), extend.dueNanoTime());
      assertEquals(1_000 * MS, extend.delayNanos(37_500 * MS));
      Attempt rebuilt =
          new Attempt(
              extend.id(),
              extend.kind(),
              d.at().orElseThrow(),
              "key-2",
              2,
              KeyUse.NEW,
              extend.body(),
              OptionalLong.empty(),
              false,
              5);
      assertEquals(rebuilt, extend);
      assertEquals(rebuilt.hashCode(), extend.hashCode());
      assertThrows(
          NullPointerException.class,
          () ->
              new Attempt(
                  1, AttemptKind.CREATE, Num.of(0), null, 1, KeyUse.NEW, new byte[0],
                  OptionalLong.empty(), false, 0));
    }
  }
}
