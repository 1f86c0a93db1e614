package io.leasebeat.example;

import io.leasebeat.Attempt;
import io.leasebeat.AttemptKind;
import io.leasebeat.Decision;
import io.leasebeat.Heartbeat;
import io.leasebeat.Response;
import io.leasebeat.StopReason;
import io.leasebeat.TransportFailure;
import java.io.IOException;
import java.net.ConnectException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpConnectTimeoutException;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.net.http.HttpTimeoutException;
import java.time.Duration;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;

/**
 * How a Java service (a Spring bean, say) drives a lease heartbeat: {@link HttpClient} for the
 * requests, one {@link ScheduledExecutorService} for the timers, and the leasebeat {@link
 * Heartbeat} for every decision. Compiled with the tests; not run in CI (it needs a server).
 *
 * <pre>{@code
 * var scheduler = Executors.newSingleThreadScheduledExecutor();
 * var lease = new HttpClientHeartbeat(URI.create("http://127.0.0.1:7878"), "api-key",
 *     "{\"subject\":{\"tenant\":\"acme\"},\"action\":{\"kind\":\"llm\",\"name\":\"x\"},"
 *         + "\"estimate\":{\"unit\":\"TOKENS\",\"amount\":1000}}",
 *     scheduler, d -> log.info("leasebeat {}", d.toJson()));
 * lease.start();
 * // ... long work ...
 * lease.stop();
 * }</pre>
 */
public final class HttpClientHeartbeat implements AutoCloseable {
  /** The enforced per-attempt timeout; the same number is the heartbeat's request timeout. */
  private static final Duration REQUEST_TIMEOUT = Duration.ofSeconds(10);

  private final URI base;
  private final String apiKey;
  private final ScheduledExecutorService scheduler;
  private final Consumer<Decision> events;
  private final HttpClient http;
  private final Heartbeat heartbeat;

  /**
   * A heartbeat for one reservation, not started yet.
   *
   * @param base the Cycles server, e.g. {@code http://127.0.0.1:7878}
   * @param apiKey the {@code X-Cycles-API-Key}
   * @param createRequestJson the create request's other members (subject, action, estimate)
   * @param scheduler where timers run (shared by many leases)
   * @param events receives every decision, with the reservation id and the numbers behind it
   */
  public HttpClientHeartbeat(
      URI base,
      String apiKey,
      String createRequestJson,
      ScheduledExecutorService scheduler,
      Consumer<Decision> events) {
    this.base = base;
    this.apiKey = apiKey;
    this.scheduler = scheduler;
    this.events = events;
    this.http = HttpClient.newBuilder().connectTimeout(REQUEST_TIMEOUT).build();
    this.heartbeat =
        Heartbeat.builder()
            .ttlMillis(60_000)
            .requestTimeoutMillis(REQUEST_TIMEOUT.toMillis())
            .createRequestJson(createRequestJson)
            .build();
  }

  /** Sends the create now; every later beat schedules itself. */
  public void start() {
    scheduleNext();
  }

  /**
   * The reservation id once the create succeeded.
   *
   * @return the id
   */
  public Optional<String> reservationId() {
    return heartbeat.reservationId();
  }

  /** Cancels the heartbeat (stop {@code cancelled}); a beat in flight is ignored afterwards. */
  public void stop() {
    synchronized (heartbeat) {
      if (!heartbeat.isClosed() && heartbeat.stopReason().isEmpty()) {
        events.accept(heartbeat.cancel(System.nanoTime()));
      }
    }
  }

  /** Stops and frees the native heartbeat. */
  @Override
  public void close() {
    stop();
    heartbeat.close();
  }

  private void scheduleNext() {
    Optional<Attempt> next;
    synchronized (heartbeat) {
      if (heartbeat.isClosed() || heartbeat.stopReason().isPresent()) {
        return;
      }
      next = heartbeat.attempt();
    }
    next.ifPresent(
        attempt -> {
          long delay = attempt.delayNanos(System.nanoTime());
          if (delay != Long.MAX_VALUE) {
            scheduler.schedule(() -> send(attempt), delay, TimeUnit.NANOSECONDS);
          }
        });
  }

  private void send(Attempt attempt) {
    String path =
        attempt.kind() == AttemptKind.CREATE
            ? "/v1/reservations"
            : "/v1/reservations/" + heartbeat.reservationId().orElseThrow() + "/extend";
    HttpRequest request =
        HttpRequest.newBuilder(base.resolve(path))
            .timeout(REQUEST_TIMEOUT)
            .header("Content-Type", "application/json")
            .header("X-Cycles-API-Key", apiKey)
            .header("X-Idempotency-Key", attempt.key())
            .POST(HttpRequest.BodyPublishers.ofByteArray(attempt.body()))
            .build();
    synchronized (heartbeat) {
      if (heartbeat.isClosed() || heartbeat.stopReason().isPresent()) {
        return;
      }
      heartbeat.handleSent(attempt.id(), System.nanoTime());
    }
    CompletableFuture<HttpResponse<byte[]>> future =
        http.sendAsync(request, HttpResponse.BodyHandlers.ofByteArray());
    future.whenComplete((response, error) -> onOutcome(attempt, response, error));
  }

  private void onOutcome(Attempt attempt, HttpResponse<byte[]> response, Throwable error) {
    long now = System.nanoTime();
    Decision decision;
    synchronized (heartbeat) {
      if (heartbeat.isClosed() || heartbeat.stopReason().isPresent()) {
        return; // cancelled while in flight
      }
      if (response != null) {
        decision =
            heartbeat.handleResponse(
                attempt.id(),
                Response.of(response.statusCode(), response.headers().map(), response.body()),
                now);
      } else {
        decision = heartbeat.handleFailure(attempt.id(), classify(error), now);
      }
    }
    events.accept(decision);
    if (decision.stopReason().filter(r -> r != StopReason.CANCELLED).isPresent()) {
      return; // the events consumer saw why; the service decides what to do with the work
    }
    scheduleNext();
  }

  private static TransportFailure classify(Throwable error) {
    Throwable e = error instanceof java.util.concurrent.CompletionException ? error.getCause() : error;
    if (e instanceof HttpConnectTimeoutException || e instanceof ConnectException) {
      return TransportFailure.CONNECT;
    }
    if (e instanceof HttpTimeoutException) {
      return TransportFailure.TIMEOUT;
    }
    if (e instanceof IOException) {
      return TransportFailure.RESET;
    }
    return TransportFailure.RESET;
  }

  /**
   * Runs one heartbeat against a server given on the command line until Enter is pressed.
   *
   * @param args the server URL and the API key
   * @throws Exception on I/O errors
   */
  public static void main(String[] args) throws Exception {
    ScheduledExecutorService scheduler = Executors.newSingleThreadScheduledExecutor();
    try (HttpClientHeartbeat lease =
        new HttpClientHeartbeat(
            URI.create(args[0]),
            args[1],
            "{\"subject\":{\"tenant\":\"acme\"},\"action\":{\"kind\":\"demo\",\"name\":\"example\"},"
                + "\"estimate\":{\"unit\":\"TOKENS\",\"amount\":1}}",
            scheduler,
            d -> System.out.println(d.reservationId().orElse("-") + " " + d.toJson()))) {
      lease.start();
      System.in.read();
    } finally {
      scheduler.shutdownNow();
    }
  }
}
