package io.leasebeat;

import java.time.Duration;
import java.util.Objects;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;

/**
 * How a {@link HeartbeatRunner} performs its HTTP calls: the caller's own HTTP client (an SDK's),
 * or {@link HttpClientTransport} on {@code java.net.http.HttpClient}.
 *
 * <p>{@link #send(Call)} starts one POST and returns at once. Its future completes with the {@link
 * Response} as it arrived (any status: the core classifies it), or exceptionally with a {@link
 * TransportException} naming what failed. Other exceptions are mapped by the runner: a {@code
 * java.net.ConnectException}, {@code java.net.http.HttpConnectTimeoutException} or {@code
 * java.nio.channels.UnresolvedAddressException} is {@link TransportFailure#CONNECT}; any other
 * {@code java.net.http.HttpTimeoutException} or {@code java.util.concurrent.TimeoutException} is
 * {@link TransportFailure#TIMEOUT}; anything else is {@link TransportFailure#RESET}.
 *
 * <p>The runner enforces the whole-attempt deadline itself ({@link Call#deadlineNanoTime()}): when
 * it passes, the attempt is a timeout and the future is cancelled; a transport should still bound
 * its own work by the deadline so that a hanging call does not hold resources.
 */
@FunctionalInterface
public interface Transport {
  /**
   * Starts one call.
   *
   * @param call what to send
   * @return the response, or a failure
   */
  CompletableFuture<Response> send(Call call);

  /** The endpoint a call addresses. */
  enum Endpoint {
    /** {@code POST /v1/reservations}. */
    CREATE,
    /** {@code POST /v1/reservations/{id}/extend}. */
    EXTEND,
    /** {@code POST /v1/reservations/{id}/release}. */
    RELEASE,
    /** {@code POST /v1/reservations/{id}/commit}. */
    COMMIT,
    /** {@code POST /v1/events} (the expired-commit fallback of a settlement). */
    EVENT
  }

  /**
   * One POST to send: the path (relative to the server's base URL, the reservation id
   * percent-encoded), the {@code X-Idempotency-Key} header value, the exact JSON body bytes, and the
   * deadline of the whole attempt.
   *
   * @param endpoint which endpoint
   * @param path e.g. {@code /v1/reservations/rsv-1/extend}
   * @param reservationId the reservation, except for a create
   * @param idempotencyKey the {@code X-Idempotency-Key} header (equal to the body's key)
   * @param body the exact body bytes ({@code Content-Type: application/json})
   * @param deadlineNanoTime the {@link System#nanoTime()} value by which the whole attempt must
   *     end; {@code Long.MAX_VALUE} for none (an unbounded request timeout)
   */
  record Call(
      Endpoint endpoint,
      String path,
      Optional<String> reservationId,
      String idempotencyKey,
      byte[] body,
      long deadlineNanoTime) {
    /**
     * Checks for nulls.
     *
     * @param endpoint see {@link #endpoint()}
     * @param path see {@link #path()}
     * @param reservationId see {@link #reservationId()}
     * @param idempotencyKey see {@link #idempotencyKey()}
     * @param body see {@link #body()}
     * @param deadlineNanoTime see {@link #deadlineNanoTime()}
     */
    public Call {
      Objects.requireNonNull(endpoint, "endpoint");
      Objects.requireNonNull(path, "path");
      Objects.requireNonNull(reservationId, "reservationId");
      Objects.requireNonNull(idempotencyKey, "idempotencyKey");
      Objects.requireNonNull(body, "body");
    }

    /**
     * The time left until the deadline from now, at least 1 ms; empty for no deadline.
     *
     * @return the remaining time
     */
    public Optional<Duration> remaining() {
      if (deadlineNanoTime == Long.MAX_VALUE) {
        return Optional.empty();
      }
      long left = deadlineNanoTime - System.nanoTime();
      return Optional.of(Duration.ofNanos(Math.max(left, 1_000_000L)));
    }
  }
}
