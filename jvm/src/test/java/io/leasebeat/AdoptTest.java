package io.leasebeat;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.net.http.HttpHeaders;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Map;
import java.util.OptionalLong;
import org.junit.jupiter.api.Test;

/** Heartbeat.Builder#adopt, the decision's instants, natural inputs and bad input (issues 10, 13). */
class AdoptTest {
  static final long MS = 1_000_000L;
  static final String OK_BODY =
      "{\"decision\":\"ALLOW\",\"reservation_id\":\"r-1\",\"affected_scopes\":[\"tenant:a\"],"
          + "\"expires_at_ms\":1785585661500,\"remaining_ttl_ms\":61500}";

  static Heartbeat.Builder config() {
    return Heartbeat.builder().ttlMillis(60_000).requestTimeoutMillis(10_000).keyPrefix("k-");
  }

  static AdoptedCreate.Builder create(long sent, long received) {
    return AdoptedCreate.builder().key("sdk-create-key").sentNanos(sent).receivedNanos(received);
  }

  @Test
  void adoptsASuccessWithoutPrimingExtension() {
    long sent = 5_000 * MS; // any nanoTime value: the origin defaults to the send time
    Adopted a =
        config()
            .adopt(create(sent, sent + 1_500 * MS).response(Response.of(200).withBody(OK_BODY)).build());
    try (Heartbeat hb = a.heartbeat()) {
      Decision d = a.decision();
      assertEquals(sent, hb.originNanos());
      assertEquals(AttemptKind.EXTEND, d.send().orElseThrow());
      assertEquals(Num.of(38_500 * MS), d.at().orElseThrow());
      assertEquals(OptionalLong.of(sent + 38_500 * MS), d.dueNanoTime());
      assertEquals(Num.of(61_500 * MS), d.provenUntil().orElseThrow());
      assertEquals(OptionalLong.of(sent + 61_500 * MS), d.provenUntilNanoTime());
      assertFalse(d.provenForever());
      assertEquals(OptionalLong.of(1_785_585_661_500L), d.expiresAtMs());
      assertEquals(OptionalLong.of(61_500), d.remainingTtlMs());
      assertEquals(2, d.keyIndex().getAsLong());
      assertEquals("r-1", hb.reservationId().orElseThrow());
      assertTrue(d.toJson().contains("\"proven_until\":61500"), d.toJson());
      assertTrue(d.toJson().contains("\"expires_at_ms\":1785585661500"), d.toJson());
      assertEquals(OptionalLong.of(10_000), hb.requestTimeoutMillis());
      // The next attempt is the first extension, with a new key.
      Attempt next = hb.attempt().orElseThrow();
      assertEquals(AttemptKind.EXTEND, next.kind());
      assertEquals(KeyUse.NEW, next.keyUse());
      assertTrue(!next.key().equals("sdk-create-key"));
    }
  }

  @Test
  void aTimedOutCreateIsRetriedWithTheCallersKeyAndBody() {
    byte[] body =
        "{\"idempotency_key\":\"sdk-create-key\",\"ttl_ms\":60000,\"subject\":{\"tenant\":\"a\"}}"
            .getBytes(StandardCharsets.UTF_8);
    Adopted a =
        config()
            .adopt(create(0, 10_000 * MS).requestBody(ByteBuffer.wrap(body)).failure(TransportFailure.TIMEOUT).build());
    try (Heartbeat hb = a.heartbeat()) {
      assertEquals(AttemptKind.CREATE, a.decision().send().orElseThrow());
      assertEquals(KeyUse.SAME, a.decision().key().orElseThrow());
      assertTrue(a.decision().provenUntil().isEmpty(), "nothing proven before a success");
      Attempt retry = hb.attempt().orElseThrow();
      assertEquals("sdk-create-key", retry.key());
      assertArrayEquals(body, retry.body());
    }
  }

  @Test
  void unknownSendTimeMeansUnknownRoundTrip() {
    Adopted a =
        config()
            .adopt(
                AdoptedCreate.builder()
                    .key("c")
                    .receivedNanos(42)
                    .response(Response.of(200).withBody(OK_BODY))
                    .build());
    try (Heartbeat hb = a.heartbeat()) {
      assertEquals(42, hb.originNanos());
      assertEquals(Num.of(0), a.decision().at().orElseThrow(), "lead floor 0: beat at once (HB-12)");
    }
  }

  @Test
  void aRejectedCreateStops() {
    Adopted a =
        config()
            .adopt(create(0, MS).response(Response.of(400).withBody("{\"error\":\"INVALID_REQUEST\",\"message\":\"x\",\"request_id\":\"q\"}")).build());
    try (Heartbeat hb = a.heartbeat()) {
      assertEquals(StopReason.CREATE_REJECTED, a.decision().stopReason().orElseThrow());
      assertEquals(StopReason.CREATE_REJECTED, hb.stopReason().orElseThrow());
    }
  }

  /** Headers as HttpHeaders, a Map in any case, and bodies as byte[], ByteBuffer and String agree. */
  @Test
  void naturalInputsAgree() {
    byte[] bytes = OK_BODY.getBytes(StandardCharsets.UTF_8);
    Map<String, List<String>> map = Map.of("content-TYPE", List.of("application/json"));
    HttpHeaders http = HttpHeaders.of(map, (n, v) -> true);
    List<Response> forms =
        List.of(
            Response.of(200, map, bytes),
            Response.of(200, http, bytes),
            Response.of(200).withHeaders(http).withBody(ByteBuffer.wrap(bytes)),
            Response.of(200).withHeaders(map).withBody(OK_BODY));
    String json = null;
    for (Response r : forms) {
      Adopted a = config().adopt(create(0, 1_500 * MS).response(r).build());
      try (Heartbeat hb = a.heartbeat()) {
        assertEquals("r-1", hb.reservationId().orElseThrow());
        if (json == null) {
          json = a.decision().toJson();
        }
        assertEquals(json, a.decision().toJson());
      }
    }
    // A ByteBuffer's position does not move.
    ByteBuffer buf = ByteBuffer.wrap(bytes);
    Response.of(200).withBody(buf);
    assertEquals(0, buf.position());
  }

  /** A minimal HttpResponse, as java.net.http hands one over. */
  static <T> java.net.http.HttpResponse<T> httpResponse(int status, HttpHeaders headers, T body) {
    return new java.net.http.HttpResponse<T>() {
      @Override
      public int statusCode() {
        return status;
      }

      @Override
      public java.net.http.HttpRequest request() {
        return java.net.http.HttpRequest.newBuilder(java.net.URI.create("http://127.0.0.1/")).build();
      }

      @Override
      public java.util.Optional<java.net.http.HttpResponse<T>> previousResponse() {
        return java.util.Optional.empty();
      }

      @Override
      public HttpHeaders headers() {
        return headers;
      }

      @Override
      public T body() {
        return body;
      }

      @Override
      public java.util.Optional<javax.net.ssl.SSLSession> sslSession() {
        return java.util.Optional.empty();
      }

      @Override
      public java.net.URI uri() {
        return java.net.URI.create("http://127.0.0.1/");
      }

      @Override
      public java.net.http.HttpClient.Version version() {
        return java.net.http.HttpClient.Version.HTTP_1_1;
      }
    };
  }

  @Test
  void responseFromHttpResponse() {
    HttpHeaders h = HttpHeaders.of(Map.of("Retry-After", List.of("2")), (n, v) -> true);
    byte[] bytes = OK_BODY.getBytes(StandardCharsets.UTF_8);
    for (Object body : List.of(bytes, OK_BODY, ByteBuffer.wrap(bytes))) {
      Response r = Response.from(httpResponse(200, h, body));
      assertEquals(200, r.status());
      assertArrayEquals(bytes, r.body());
      assertEquals(List.of(new Header("Retry-After", "2")), r.headers());
    }
    assertEquals(0, Response.from(httpResponse(204, h, null)).body().length);
    IllegalArgumentException e =
        assertThrows(
            IllegalArgumentException.class,
            () -> Response.from(httpResponse(200, h, new java.io.ByteArrayInputStream(bytes))));
    assertTrue(e.getMessage().contains("read it completely first"), e.getMessage());
    assertThrows(IllegalArgumentException.class, () -> Response.from(httpResponse(99, h, bytes)));
  }

  @Test
  void badAdoptionsAreTypedErrors() {
    assertThrows(IllegalStateException.class, () -> AdoptedCreate.builder().receivedNanos(0).response(Response.of(200)).build());
    assertThrows(IllegalStateException.class, () -> AdoptedCreate.builder().key("k").response(Response.of(200)).build());
    assertThrows(IllegalStateException.class, () -> AdoptedCreate.builder().key("k").receivedNanos(0).build());
    assertThrows(NullPointerException.class, () -> AdoptedCreate.builder().key(null));
    assertThrows(NullPointerException.class, () -> config().adopt(null));
    // Sent after received.
    LeaseException e =
        assertThrows(LeaseException.class, () -> config().originNanos(0).adopt(create(2 * MS, MS).response(Response.of(200)).build()));
    assertEquals(LeaseException.Code.INVALID_ARGUMENT, e.code());
    // Before an explicit origin.
    e = assertThrows(LeaseException.class, () -> config().originNanos(10 * MS).adopt(create(0, MS).response(Response.of(200)).build()));
    assertEquals(LeaseException.Code.TIME_WENT_BACKWARDS, e.code());
    // Key too long, empty.
    e = assertThrows(LeaseException.class, () -> config().adopt(AdoptedCreate.builder().key("").receivedNanos(0).failure(TransportFailure.RESET).build()));
    assertEquals(LeaseException.Code.INVALID_KEY, e.code());
    e = assertThrows(LeaseException.class, () -> config().adopt(AdoptedCreate.builder().key("x".repeat(257)).receivedNanos(0).failure(TransportFailure.RESET).build()));
    assertEquals(LeaseException.Code.INVALID_KEY, e.code());
    // A key that cannot be a header value: refused up front (issue 25).
    for (String bad : new String[] {"k\r\nX-Evil: 1", "k\n", "\rk", "k\u0000"}) {
      e = assertThrows(LeaseException.class, () -> config().adopt(AdoptedCreate.builder().key(bad).receivedNanos(0).failure(TransportFailure.RESET).build()));
      assertEquals(LeaseException.Code.INVALID_KEY, e.code(), bad);
      assertTrue(e.getMessage().contains("header value"), e.getMessage());
    }
    // A request body with another key.
    e = assertThrows(LeaseException.class, () -> config().adopt(create(0, MS).requestBody("{\"idempotency_key\":\"other\"}").failure(TransportFailure.TIMEOUT).build()));
    assertEquals(LeaseException.Code.INVALID_ARGUMENT, e.code());
    // Excludes reservationId.
    assertThrows(IllegalStateException.class, () -> config().reservationId("r-1").adopt(create(0, MS).failure(TransportFailure.RESET).build()));
  }

  /** Issue 13: Long.MIN_VALUE is no time. */
  @Test
  void longMinValueIsRefusedAndChangesNothing() {
    try (Heartbeat hb = config().originNanos(100).build()) {
      Attempt a = hb.attempt().orElseThrow();
      IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> hb.handleSent(a.id(), Long.MIN_VALUE));
      assertTrue(e.getMessage().contains("Long.MIN_VALUE"), e.getMessage());
      assertThrows(IllegalArgumentException.class, () -> hb.cancel(Long.MIN_VALUE));
      hb.handleSent(a.id(), 200);
      assertThrows(IllegalArgumentException.class, () -> hb.handleResponse(a.id(), Response.of(200), Long.MIN_VALUE));
      assertThrows(IllegalArgumentException.class, () -> hb.handleFailure(a.id(), TransportFailure.RESET, Long.MIN_VALUE));
      // The heartbeat still works: the next real time is accepted.
      Decision d = hb.handleFailure(a.id(), TransportFailure.CONNECT, 300);
      assertEquals(AttemptKind.CREATE, d.send().orElseThrow());
      assertEquals(StopReason.CANCELLED, hb.cancel(400).stopReason().orElseThrow());
    }
    assertThrows(IllegalArgumentException.class, () -> Heartbeat.builder().originNanos(Long.MIN_VALUE));
    assertThrows(IllegalArgumentException.class, () -> AdoptedCreate.builder().sentNanos(Long.MIN_VALUE));
    assertThrows(IllegalArgumentException.class, () -> AdoptedCreate.builder().receivedNanos(Long.MIN_VALUE));
  }

  /** Issue 13: a lone surrogate has no UTF-8 form; it is refused, never sent as "?". */
  @Test
  void loneSurrogatesAreRefused() {
    String lone = "a\uD800b";
    assertThrows(IllegalArgumentException.class, () -> Heartbeat.builder().keyPrefix(lone));
    assertThrows(IllegalArgumentException.class, () -> Heartbeat.builder().createRequestJson("{\"s\":\"" + lone + "\"}"));
    assertThrows(IllegalArgumentException.class, () -> Heartbeat.builder().reservationId(lone));
    assertThrows(IllegalArgumentException.class, () -> AdoptedCreate.builder().key(lone));
    assertThrows(IllegalArgumentException.class, () -> AdoptedCreate.builder().requestBody(lone));
    assertThrows(IllegalArgumentException.class, () -> Response.of(200).withBody(lone));
    try (Heartbeat hb = config().originNanos(0).build()) {
      Attempt a = hb.attempt().orElseThrow();
      hb.handleSent(a.id(), 0);
      IllegalArgumentException e =
          assertThrows(IllegalArgumentException.class, () -> hb.handleResponse(a.id(), Response.of(200).withHeader("X-" + lone, "v"), MS));
      assertTrue(e.getMessage().contains("unpaired surrogate"), e.getMessage());
      assertThrows(IllegalArgumentException.class, () -> hb.handleResponse(a.id(), Response.of(200).withHeader("X", lone), MS));
      // Still in flight: nothing changed.
      assertEquals(Action.Type.AWAIT_OUTCOME, hb.pollAction().type());
    }
    // A valid pair is fine.
    try (Heartbeat hb = Heartbeat.builder().keyPrefix("k\uD83D\uDE00-").build()) {
      assertTrue(hb.attempt().orElseThrow().key().startsWith("k\uD83D\uDE00-"));
    }
  }
}
