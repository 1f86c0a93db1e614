package io.leasebeat;

import java.io.ByteArrayOutputStream;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.List;
import java.util.Objects;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionStage;
import java.util.concurrent.Flow;

/**
 * The default {@link Transport}: {@code java.net.http.HttpClient} (HTTP/1.1, no redirects), each
 * call a POST to {@code base + path} with {@code X-Cycles-API-Key}, {@code X-Idempotency-Key},
 * {@code Content-Type: application/json} and the exact body bytes. The request's timeout is the
 * time left to the call's deadline (the JDK bounds only the wait for the response headers with it;
 * the runner enforces the whole attempt). Thread-safe; share one for many runners.
 *
 * <p>A response body is read up to {@link #MAX_BODY_BYTES} (1 MiB), as the Rust driver does: a
 * longer body (declared by {@code Content-Length}, or found while reading a chunked or
 * close-delimited body) is not read further, its exchange is cancelled (which closes the
 * connection), and the response is returned with its status, its headers and an empty body, which
 * the core classifies by status as a response without a usable body (P-3: a 200 is then ambiguous,
 * a 404 {@code not_found}).
 */
public final class HttpClientTransport implements Transport {
  /** The largest response body this transport reads: 1 MiB, the Rust driver's cap. */
  public static final int MAX_BODY_BYTES = 1 << 20;

  private final HttpClient client;
  private final String base;
  private final String apiKey;

  /**
   * A transport on a new {@code HttpClient} (HTTP/1.1, connect timeout 10 s, no redirects).
   *
   * @param baseUrl the server's base URL, e.g. {@code http://127.0.0.1:7878}
   * @param apiKey the {@code X-Cycles-API-Key} value
   * @throws IllegalArgumentException if the URL is not absolute http(s) or the API key is empty or
   *     cannot be a header value (the message never contains the key)
   */
  public HttpClientTransport(URI baseUrl, String apiKey) {
    this(
        HttpClient.newBuilder()
            .version(HttpClient.Version.HTTP_1_1)
            .followRedirects(HttpClient.Redirect.NEVER)
            .connectTimeout(Duration.ofSeconds(10))
            .build(),
        baseUrl,
        apiKey);
  }

  /**
   * A transport on the caller's {@code HttpClient}.
   *
   * @param client the client
   * @param baseUrl the server's base URL
   * @param apiKey the {@code X-Cycles-API-Key} value
   * @throws IllegalArgumentException if the URL is not absolute http(s) or the API key is empty or
   *     cannot be a header value (the message never contains the key)
   */
  public HttpClientTransport(HttpClient client, URI baseUrl, String apiKey) {
    this.client = Objects.requireNonNull(client, "client");
    Objects.requireNonNull(baseUrl, "baseUrl");
    Objects.requireNonNull(apiKey, "apiKey");
    String scheme = baseUrl.getScheme();
    if (!("http".equalsIgnoreCase(scheme) || "https".equalsIgnoreCase(scheme))
        || baseUrl.getHost() == null) {
      throw new IllegalArgumentException("baseUrl must be an absolute http(s) URL, got " + baseUrl);
    }
    if (apiKey.isEmpty()) {
      throw new IllegalArgumentException("the API key is empty");
    }
    for (int i = 0; i < apiKey.length(); i++) {
      char c = apiKey.charAt(i);
      if (c < 0x20 || c == 0x7f || c > 0xff) {
        throw new IllegalArgumentException(
            "the API key cannot be an HTTP header value (control or non-Latin-1 character at index "
                + i
                + ")");
      }
    }
    String b = baseUrl.toString();
    this.base = b.endsWith("/") ? b.substring(0, b.length() - 1) : b;
    this.apiKey = apiKey;
  }

  /**
   * The server's base URL (without a trailing slash), as the journal partitions by it.
   *
   * @return the base URL
   */
  public String baseUrl() {
    return base;
  }

  /** The API key (for the journal's partition name only; never written). */
  String apiKey() {
    return apiKey;
  }

  @Override
  public CompletableFuture<Response> send(Call call) {
    HttpRequest.Builder req =
        HttpRequest.newBuilder(URI.create(base + call.path()))
            .header("X-Cycles-API-Key", apiKey)
            .header("X-Idempotency-Key", call.idempotencyKey())
            .header("Content-Type", "application/json")
            .POST(HttpRequest.BodyPublishers.ofByteArray(call.body()));
    call.remaining().ifPresent(req::timeout);
    return client.sendAsync(req.build(), HttpClientTransport::cappedBody).thenApply(Response::from);
  }

  /** The body handler reading at most {@link #MAX_BODY_BYTES} (see the class documentation). */
  static HttpResponse.BodySubscriber<byte[]> cappedBody(HttpResponse.ResponseInfo info) {
    Optional<String> declared = info.headers().firstValue("content-length");
    boolean tooLong = false;
    if (declared.isPresent()) {
      try {
        tooLong = Long.parseLong(declared.get().trim()) > MAX_BODY_BYTES;
      } catch (NumberFormatException e) {
        // Not a length: read up to the cap.
      }
    }
    return new CappedBody(tooLong);
  }

  /** Collects a body up to the cap; over it, cancels the subscription and yields no bytes. */
  private static final class CappedBody implements HttpResponse.BodySubscriber<byte[]> {
    private static final byte[] EMPTY = new byte[0];
    private final CompletableFuture<byte[]> result = new CompletableFuture<>();
    private final boolean skip;
    private final ByteArrayOutputStream out = new ByteArrayOutputStream();
    private Flow.Subscription subscription;
    private long size;

    CappedBody(boolean skip) {
      this.skip = skip;
    }

    @Override
    public void onSubscribe(Flow.Subscription s) {
      subscription = s;
      if (skip) {
        s.cancel();
        result.complete(EMPTY);
      } else {
        s.request(Long.MAX_VALUE);
      }
    }

    @Override
    public void onNext(List<ByteBuffer> items) {
      if (result.isDone()) {
        return;
      }
      for (ByteBuffer b : items) {
        size += b.remaining();
        if (size > MAX_BODY_BYTES) {
          subscription.cancel();
          result.complete(EMPTY);
          return;
        }
        byte[] chunk = new byte[b.remaining()];
        b.get(chunk);
        out.write(chunk, 0, chunk.length);
      }
    }

    @Override
    public void onError(Throwable t) {
      result.completeExceptionally(t);
    }

    @Override
    public void onComplete() {
      result.complete(out.toByteArray());
    }

    @Override
    public CompletionStage<byte[]> getBody() {
      return result;
    }
  }
}
