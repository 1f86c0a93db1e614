package io.leasebeat;

import java.net.http.HttpHeaders;
import java.net.http.HttpResponse;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Objects;

/**
 * An HTTP response to the outstanding attempt, as raw as it arrived: status, headers in arrival
 * order (repeated headers repeat), body bytes, and whether its round trip could be measured.
 * Immutable; the {@code with*} methods return a new value. The core classifies it (never the
 * binding).
 */
public final class Response {
  private final int status;
  private final List<Header> headers;
  private final byte[] body;
  private final boolean timingUnknown;

  private Response(int status, List<Header> headers, byte[] body, boolean timingUnknown) {
    this.status = status;
    this.headers = List.copyOf(headers);
    this.body = body;
    this.timingUnknown = timingUnknown;
  }

  /**
   * A response with this status, no headers and an empty body.
   *
   * @param status the HTTP status, 100..999
   * @return the response
   * @throws IllegalArgumentException if the status is outside 100..999
   */
  public static Response of(int status) {
    if (status < 100 || status > 999) {
      throw new IllegalArgumentException("HTTP status must be within 100..=999, got " + status);
    }
    return new Response(status, List.of(), new byte[0], false);
  }

  /**
   * A response from the parts {@code java.net.http.HttpResponse} offers.
   *
   * @param status the HTTP status, 100..999
   * @param headers header name to its values (e.g. {@code HttpHeaders.map()})
   * @param body the body bytes
   * @return the response
   * @throws IllegalArgumentException if the status is outside 100..999
   * @throws NullPointerException if an argument, name or value is null
   */
  public static Response of(int status, Map<String, List<String>> headers, byte[] body) {
    return of(status).withHeaders(headers).withBody(body);
  }

  /**
   * A response from the parts {@code java.net.http.HttpResponse} offers.
   *
   * @param status the HTTP status, 100..999
   * @param headers the headers (any case; repeated values repeat)
   * @param body the body bytes
   * @return the response
   * @throws IllegalArgumentException if the status is outside 100..999
   * @throws NullPointerException if an argument is null
   */
  public static Response of(int status, HttpHeaders headers, byte[] body) {
    return of(status).withHeaders(headers).withBody(body);
  }

  /**
   * A response from a {@code java.net.http.HttpResponse} whose body is a {@code byte[]} ({@code
   * BodyHandlers.ofByteArray()}), a {@code String} ({@code ofString()}, sent to the core as UTF-8),
   * a {@code ByteBuffer}, or null (no body).
   *
   * @param response the response, after its complete body was received
   * @return the response
   * @throws IllegalArgumentException if the body is of another type (e.g. an {@code InputStream},
   *     which would have to be read first) or the status is outside 100..999
   * @throws NullPointerException if {@code response} is null
   */
  public static Response from(HttpResponse<?> response) {
    Objects.requireNonNull(response, "response");
    Response r = of(response.statusCode()).withHeaders(response.headers());
    Object body = response.body();
    if (body == null) {
      return r;
    } else if (body instanceof byte[]) {
      return r.withBody((byte[]) body);
    } else if (body instanceof String) {
      return r.withBody((String) body);
    } else if (body instanceof ByteBuffer) {
      return r.withBody((ByteBuffer) body);
    }
    throw new IllegalArgumentException(
        "the response body must be a byte[], String or ByteBuffer (read it completely first), got "
            + body.getClass().getName());
  }

  /**
   * This response with one more header.
   *
   * @param name the name
   * @param value the value
   * @return a new response
   */
  public Response withHeader(String name, String value) {
    List<Header> h = new ArrayList<>(headers);
    h.add(new Header(name, value));
    return new Response(status, h, body, timingUnknown);
  }

  /**
   * This response with more headers: each name with each of its values, in the map's order.
   *
   * @param headers header name to its values (names in any case)
   * @return a new response
   * @throws NullPointerException if the map, a name, a value list or a value is null
   */
  public Response withHeaders(Map<String, List<String>> headers) {
    Objects.requireNonNull(headers, "headers");
    List<Header> h = new ArrayList<>(this.headers);
    headers.forEach(
        (name, values) -> {
          Objects.requireNonNull(values, "values of " + name);
          for (String v : values) {
            h.add(new Header(name, v));
          }
        });
    return new Response(status, h, body, timingUnknown);
  }

  /**
   * This response with more headers: each name with each of its values, as {@code HttpHeaders}
   * holds them.
   *
   * @param headers the headers
   * @return a new response
   * @throws NullPointerException if null
   */
  public Response withHeaders(HttpHeaders headers) {
    return withHeaders(Objects.requireNonNull(headers, "headers").map());
  }

  /**
   * This response with this body: the remaining bytes of {@code body} (copied; its position does
   * not move).
   *
   * @param body the raw body bytes
   * @return a new response
   * @throws NullPointerException if null
   */
  public Response withBody(ByteBuffer body) {
    return new Response(
        status, headers, Utf8.bytesOf(Objects.requireNonNull(body, "body")), timingUnknown);
  }

  /**
   * This response with this body, as UTF-8 (for a client that decoded the body to text).
   *
   * @param body the body text
   * @return a new response
   * @throws NullPointerException if null
   * @throws IllegalArgumentException if it holds an unpaired surrogate (it has no UTF-8 form)
   */
  public Response withBody(String body) {
    return new Response(
        status, headers, Utf8.encode(Objects.requireNonNull(body, "body"), "body"), timingUnknown);
  }

  /**
   * This response with this body.
   *
   * @param body the raw body bytes (copied)
   * @return a new response
   */
  public Response withBody(byte[] body) {
    return new Response(status, headers, Objects.requireNonNull(body, "body").clone(), timingUnknown);
  }

  /**
   * This response marked as one whose round trip could not be measured (HB-12): a success gives
   * lead_floor 0 and next_delay 0, and does not update max_rtt.
   *
   * @return a new response
   */
  public Response withTimingUnknown() {
    return new Response(status, headers, body, true);
  }

  /**
   * The HTTP status.
   *
   * @return the status
   */
  public int status() {
    return status;
  }

  /**
   * The headers in arrival order.
   *
   * @return an unmodifiable list
   */
  public List<Header> headers() {
    return headers;
  }

  /**
   * The body bytes (a copy).
   *
   * @return the body
   */
  public byte[] body() {
    return body.clone();
  }

  /**
   * Whether the round trip is unknown.
   *
   * @return true if unknown
   */
  public boolean timingUnknown() {
    return timingUnknown;
  }

  byte[] rawBody() {
    return body;
  }
}
