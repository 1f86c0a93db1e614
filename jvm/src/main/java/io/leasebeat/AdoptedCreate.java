package io.leasebeat;

import java.nio.ByteBuffer;
import java.util.Objects;
import java.util.Optional;
import java.util.OptionalLong;

/**
 * A create request the caller already performed with its own HTTP client (an SDK's create), for
 * {@link Heartbeat.Builder#adopt(AdoptedCreate)}: its idempotency key, when it was sent and when its
 * outcome was observed ({@link System#nanoTime()} values), the exact request body if known, and the
 * raw outcome (a {@link Response} or a {@link TransportFailure}). Immutable.
 *
 * <pre>{@code
 * long sent = System.nanoTime();
 * HttpResponse<byte[]> r = client.send(createRequest, BodyHandlers.ofByteArray());
 * long received = System.nanoTime();
 * Adopted adopted = Heartbeat.builder().ttlMillis(60_000).requestTimeoutMillis(5_000)
 *     .adopt(AdoptedCreate.builder()
 *         .key(createKey).sentNanos(sent).receivedNanos(received)
 *         .requestBody(createBodyBytes)
 *         .response(Response.from(r))
 *         .build());
 * }</pre>
 */
public final class AdoptedCreate {
  private final String key;
  private final byte[] keyUtf8;
  private final byte[] requestBody;
  private final OptionalLong sentNanos;
  private final long receivedNanos;
  private final Response response;
  private final TransportFailure failure;

  private AdoptedCreate(Builder b) {
    this.key = b.key;
    this.keyUtf8 = b.keyUtf8;
    this.requestBody = b.requestBody;
    this.sentNanos = b.sentNanos;
    this.receivedNanos = b.receivedNanos;
    this.response = b.response;
    this.failure = b.failure;
  }

  /**
   * A new builder.
   *
   * @return the builder
   */
  public static Builder builder() {
    return new Builder();
  }

  /** Builds an {@link AdoptedCreate}. Not thread-safe. */
  public static final class Builder {
    private String key;
    private byte[] keyUtf8;
    private byte[] requestBody;
    private OptionalLong sentNanos = OptionalLong.empty();
    private Long receivedNanos;
    private Response response;
    private TransportFailure failure;

    private Builder() {}

    /**
     * The idempotency key the create used (its {@code X-Idempotency-Key} header and its body's
     * {@code idempotency_key}); a same-key create retry reuses it. The core takes 1..256 characters.
     *
     * @param key the key
     * @return this builder
     * @throws NullPointerException if null
     * @throws IllegalArgumentException if it holds an unpaired surrogate
     */
    public Builder key(String key) {
      Objects.requireNonNull(key, "key");
      this.keyUtf8 = Utf8.encode(key, "key");
      this.key = key;
      return this;
    }

    /**
     * When the create was sent ({@link System#nanoTime()} just before the request went out). Not
     * set (the default) means unknown: the round trip cannot be measured (HB-12), so a success
     * gives a lead floor of 0 and an immediate first extension.
     *
     * @param sentNanos a nanoTime value, not after {@link #receivedNanos(long)}
     * @return this builder
     * @throws IllegalArgumentException for {@code Long.MIN_VALUE}
     */
    public Builder sentNanos(long sentNanos) {
      Heartbeat.checkTime(sentNanos, "sentNanos");
      this.sentNanos = OptionalLong.of(sentNanos);
      return this;
    }

    /**
     * When the create's outcome was observed ({@link System#nanoTime()} after its complete body was
     * received, or when the failure was noticed). Required.
     *
     * @param receivedNanos a nanoTime value
     * @return this builder
     * @throws IllegalArgumentException for {@code Long.MIN_VALUE}
     */
    public Builder receivedNanos(long receivedNanos) {
      Heartbeat.checkTime(receivedNanos, "receivedNanos");
      this.receivedNanos = receivedNanos;
      return this;
    }

    /**
     * The exact request body the create sent, if the caller has it: a same-key create retry
     * resends these bytes. It must be a JSON object whose {@code idempotency_key}, if present,
     * equals {@link #key(String)}. Not set: a retry sends the body the heartbeat builds from its
     * configuration ({@link Heartbeat.Builder#createRequestJson(String)} plus {@code
     * idempotency_key} and {@code ttl_ms}).
     *
     * @param body the bytes (copied), or null for none
     * @return this builder
     */
    public Builder requestBody(byte[] body) {
      this.requestBody = body == null ? null : body.clone();
      return this;
    }

    /**
     * {@link #requestBody(byte[])} from the remaining bytes of a buffer (its position does not
     * move).
     *
     * @param body the bytes, or null for none
     * @return this builder
     */
    public Builder requestBody(ByteBuffer body) {
      this.requestBody = body == null ? null : Utf8.bytesOf(body);
      return this;
    }

    /**
     * {@link #requestBody(byte[])} from JSON text, as UTF-8.
     *
     * @param body the JSON text, or null for none
     * @return this builder
     * @throws IllegalArgumentException if it holds an unpaired surrogate
     */
    public Builder requestBody(String body) {
      this.requestBody = Utf8.encodeNullable(body, "requestBody");
      return this;
    }

    /**
     * The create's HTTP response, as it arrived (any status). Excludes {@link
     * #failure(TransportFailure)}.
     *
     * @param response the response
     * @return this builder
     * @throws NullPointerException if null
     */
    public Builder response(Response response) {
      this.response = Objects.requireNonNull(response, "response");
      this.failure = null;
      return this;
    }

    /**
     * The create got no response: it timed out, could not connect, or was reset. Excludes {@link
     * #response(Response)}.
     *
     * @param failure what failed
     * @return this builder
     * @throws NullPointerException if null
     */
    public Builder failure(TransportFailure failure) {
      this.failure = Objects.requireNonNull(failure, "failure");
      this.response = null;
      return this;
    }

    /**
     * The adopted create.
     *
     * @return the value
     * @throws IllegalStateException if the key, the received time, or the outcome (a response or a
     *     failure) is missing
     */
    public AdoptedCreate build() {
      if (key == null) {
        throw new IllegalStateException("AdoptedCreate needs the create's key");
      }
      if (receivedNanos == null) {
        throw new IllegalStateException("AdoptedCreate needs receivedNanos");
      }
      if (response == null && failure == null) {
        throw new IllegalStateException("AdoptedCreate needs a response or a failure");
      }
      return new AdoptedCreate(this);
    }
  }

  /**
   * The create's idempotency key.
   *
   * @return the key
   */
  public String key() {
    return key;
  }

  /**
   * The exact request body, if given.
   *
   * @return a copy of the bytes
   */
  public Optional<byte[]> requestBody() {
    return Optional.ofNullable(requestBody).map(byte[]::clone);
  }

  /**
   * When the create was sent; empty when unknown.
   *
   * @return a nanoTime value
   */
  public OptionalLong sentNanos() {
    return sentNanos;
  }

  /**
   * When its outcome was observed.
   *
   * @return a nanoTime value
   */
  public long receivedNanos() {
    return receivedNanos;
  }

  /**
   * The response, unless the create failed in transport.
   *
   * @return the response
   */
  public Optional<Response> response() {
    return Optional.ofNullable(response);
  }

  /**
   * The transport failure, unless a response arrived.
   *
   * @return the failure
   */
  public Optional<TransportFailure> failure() {
    return Optional.ofNullable(failure);
  }

  byte[] keyUtf8() {
    return keyUtf8;
  }

  byte[] rawRequestBody() {
    return requestBody;
  }

  /** The earliest instant of this create: sent if known, else received. */
  long earliestNanos() {
    return sentNanos.isPresent() ? sentNanos.getAsLong() : receivedNanos;
  }
}
