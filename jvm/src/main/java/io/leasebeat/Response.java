package io.leasebeat;

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
   * @param headers header name to its values
   * @return a new response
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
