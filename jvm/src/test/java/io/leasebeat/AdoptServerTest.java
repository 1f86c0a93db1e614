package io.leasebeat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.UUID;
import org.junit.jupiter.api.Test;

/**
 * Issue 10 against the reference server: an SDK-style create performed with {@code
 * java.net.http.HttpClient}, adopted by the heartbeat, then beats as the heartbeat decides. The
 * server's log shows that the adoption cost no extension: exactly one create and exactly the
 * extensions the heartbeat scheduled, none of them an immediate "priming" one.
 */
class AdoptServerTest {
  static final String CREATE_REQUEST =
      "{\"subject\":{\"tenant\":\"acme\"},\"action\":{\"kind\":\"llm.completion\",\"name\":\"gpt\"},"
          + "\"estimate\":{\"unit\":\"TOKENS\",\"amount\":1000}}";

  static HttpResponse<byte[]> post(HttpClient client, URI uri, String key, byte[] body)
      throws Exception {
    HttpRequest req =
        HttpRequest.newBuilder(uri)
            .timeout(Duration.ofSeconds(5))
            .header("X-Cycles-API-Key", "test-key")
            .header("X-Idempotency-Key", key)
            .header("Content-Type", "application/json")
            .POST(HttpRequest.BodyPublishers.ofByteArray(body))
            .build();
    return client.send(req, HttpResponse.BodyHandlers.ofByteArray());
  }

  @Test
  void adoptedCreateCostsNoExtension() throws Exception {
    try (ServeProcess serve = ServeProcess.start()) {
      HttpClient client = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1).build();
      // The SDK's own create: its key, its body, its client.
      String createKey = "sdk-" + UUID.randomUUID();
      byte[] createBody =
          ("{\"idempotency_key\":\"" + createKey + "\",\"ttl_ms\":6000,"
                  + CREATE_REQUEST.substring(1))
              .getBytes(StandardCharsets.UTF_8);
      long sent = System.nanoTime();
      HttpResponse<byte[]> created =
          post(client, serve.base.resolve("/v1/reservations"), createKey, createBody);
      long received = System.nanoTime();
      assertEquals(200, created.statusCode());

      Adopted adopted =
          Heartbeat.adoptCreate(
              Heartbeat.builder().ttlMillis(6_000).requestTimeoutMillis(300),
              AdoptedCreate.builder()
                  .key(createKey)
                  .sentNanos(sent)
                  .receivedNanos(received)
                  .requestBody(createBody)
                  .response(Response.from(created))
                  .build());
      List<String> extendKeys = new ArrayList<>();
      try (Heartbeat hb = adopted.heartbeat()) {
        Decision first = adopted.decision();
        JsonNode createJson = VectorReplay.MAPPER.readTree(created.body());
        String id = createJson.get("reservation_id").textValue();
        assertEquals(id, hb.reservationId().orElseThrow());
        assertEquals(AttemptKind.EXTEND, first.send().orElseThrow());
        assertEquals(2, first.keyIndex().getAsLong(), "the create's key was key 1");
        assertTrue(first.delayNanos(received) > 0, "no priming extension: the first beat waits: " + first.toJson());
        assertEquals(createJson.get("expires_at_ms").longValue(), first.expiresAtMs().getAsLong());
        assertEquals(6_000, first.remainingTtlMs().getAsLong());
        assertTrue(first.provenUntilNanoTime().isPresent());
        assertTrue(first.provenUntilNanoTime().getAsLong() - first.dueNanoTime().getAsLong() > 0);

        Decision d = first;
        for (int beat = 0; beat < 2; beat++) {
          long wait = d.delayNanos(System.nanoTime());
          Thread.sleep(wait / 1_000_000, (int) (wait % 1_000_000));
          Attempt a = hb.pollAction().attempt().orElseThrow();
          assertEquals(AttemptKind.EXTEND, a.kind());
          URI uri = serve.base.resolve("/v1/reservations/" + id + "/extend");
          hb.handleSent(a.id(), System.nanoTime());
          HttpResponse<byte[]> r = post(client, uri, a.key(), a.body());
          d = hb.handleResponse(a.id(), Response.from(r), System.nanoTime());
          extendKeys.add(a.key());
          assertEquals(200, r.statusCode());
          assertTrue(d.expiresAtMs().isPresent());
        }
        hb.cancel(System.nanoTime());
        String releaseKey = UUID.randomUUID().toString();
        HttpResponse<byte[]> released =
            post(
                client,
                serve.base.resolve("/v1/reservations/" + id + "/release"),
                releaseKey,
                ("{\"idempotency_key\":\"" + releaseKey + "\"}").getBytes(StandardCharsets.UTF_8));
        assertEquals(200, released.statusCode());
      }

      // The server's log: one create (the SDK's), exactly the two scheduled extensions.
      List<JsonNode> creates = serve.requests("create");
      List<JsonNode> extends_ = serve.requests("extend");
      assertEquals(1, creates.size());
      assertEquals(createKey, creates.get(0).get("header_key").textValue());
      assertEquals(2, extends_.size(), "no extension beyond the two the schedule asked for");
      for (int i = 0; i < 2; i++) {
        assertEquals(extendKeys.get(i), extends_.get(i).get("header_key").textValue());
        assertNotEquals(createKey, extends_.get(i).get("header_key").textValue());
      }
      assertEquals(0, serve.lapses().size());
    }
  }
}
