package io.leasebeat;

import java.util.Objects;

/**
 * A transport call got no HTTP response: what failed, for the core (timeout, connect, reset). A
 * {@link Transport} completes its future with it.
 */
public final class TransportException extends Exception {
  private static final long serialVersionUID = 1L;

  /** What failed. */
  private final TransportFailure failure;

  /**
   * A failure with a message and its cause.
   *
   * @param failure what failed
   * @param message the message
   * @param cause the cause, or null
   */
  public TransportException(TransportFailure failure, String message, Throwable cause) {
    super(message, cause);
    this.failure = Objects.requireNonNull(failure, "failure");
  }

  /**
   * What failed.
   *
   * @return the failure
   */
  public TransportFailure failure() {
    return failure;
  }

  /**
   * The failure an exception from an HTTP client means (see {@link Transport}): the exception's own
   * failure for a {@link TransportException} (also when wrapped, e.g. in a {@code
   * CompletionException}); connect for connection refusals, connect timeouts and unresolved
   * addresses; timeout for other timeouts; reset for anything else.
   *
   * @param t the exception
   * @return the failure
   */
  public static TransportFailure classify(Throwable t) {
    for (Throwable c = t; c != null; c = c.getCause()) {
      if (c instanceof TransportException) {
        return ((TransportException) c).failure();
      }
      if (c instanceof java.net.ConnectException
          || c instanceof java.net.http.HttpConnectTimeoutException
          || c instanceof java.nio.channels.UnresolvedAddressException
          || c instanceof java.net.UnknownHostException) {
        return TransportFailure.CONNECT;
      }
      if (c instanceof java.net.http.HttpTimeoutException
          || c instanceof java.util.concurrent.TimeoutException
          || c instanceof java.net.SocketTimeoutException) {
        return TransportFailure.TIMEOUT;
      }
      if (c.getCause() == c) {
        break;
      }
    }
    return TransportFailure.RESET;
  }
}
