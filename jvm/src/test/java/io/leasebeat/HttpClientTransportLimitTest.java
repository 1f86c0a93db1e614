package io.leasebeat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/**
 * Issue 25, defect 5: the default transport reads at most {@link
 * HttpClientTransport#MAX_BODY_BYTES} of a response body, against a small 127.0.0.1 server of this
 * test that sends a 100 MB body or an endless chunked body. Asserted: the outcome (a response with
 * an empty body, as the Rust driver returns for an over-cap body), the bytes the server handed to
 * the kernel, and that the client closed the connection. No assertion on wall time.
 */
class HttpClientTransportLimitTest {
  static final long MB = 1_000_000;
  static final long SEND_LIMIT = 200 * MB;
  /** Loopback socket buffers can hold a few MB the client never read. */
  static final long SLACK = 32 * MB;

  /** What one connection sent, and whether it ended because the client closed it. */
  record Sent(long bytes, boolean closedByClient) {}

  /** Serves one request with a 200 whose body {@code mode} makes; completes when it ends. */
  static CompletableFuture<Sent> serveOnce(ServerSocket listener, String mode) {
    CompletableFuture<Sent> out = new CompletableFuture<>();
    Thread t =
        new Thread(
            () -> {
              long sent = 0;
              boolean closed = false;
              try (ServerSocket l = listener;
                  Socket s = l.accept()) {
                s.setSoTimeout(30_000);
                InputStream in = s.getInputStream();
                readRequest(in);
                OutputStream o = s.getOutputStream();
                byte[] block = new byte[65536];
                Arrays.fill(block, (byte) 'x');
                try {
                  if (mode.equals("big")) {
                    o.write("HTTP/1.1 200 OK\r\nContent-Length: 100000000\r\n\r\n".getBytes(StandardCharsets.US_ASCII));
                    while (sent < 100 * MB) {
                      int n = (int) Math.min(block.length, 100 * MB - sent);
                      o.write(block, 0, n);
                      sent += n;
                    }
                  } else if (mode.equals("exact")) {
                    o.write(("HTTP/1.1 200 OK\r\nContent-Length: " + HttpClientTransport.MAX_BODY_BYTES + "\r\n\r\n")
                        .getBytes(StandardCharsets.US_ASCII));
                    for (int i = 0; i < HttpClientTransport.MAX_BODY_BYTES / block.length; i++) {
                      o.write(block);
                    }
                    sent = HttpClientTransport.MAX_BODY_BYTES;
                    o.flush();
                  } else {
                    o.write("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".getBytes(StandardCharsets.US_ASCII));
                    byte[] head = "10000\r\n".getBytes(StandardCharsets.US_ASCII);
                    byte[] tail = "\r\n".getBytes(StandardCharsets.US_ASCII);
                    while (sent < SEND_LIMIT) {
                      o.write(head);
                      o.write(block);
                      o.write(tail);
                      sent += block.length;
                    }
                  }
                  o.flush();
                  // Wait for the client to close (an EOF) rather than closing first.
                  closed = in.read() == -1;
                } catch (IOException e) {
                  closed = true; // reset or broken pipe: the client closed it
                }
              } catch (IOException e) {
                out.completeExceptionally(e);
                return;
              }
              out.complete(new Sent(sent, closed));
            },
            "body-server");
    t.setDaemon(true);
    t.start();
    return out;
  }

  static void readRequest(InputStream in) throws IOException {
    StringBuilder head = new StringBuilder();
    while (!head.toString().endsWith("\r\n\r\n")) {
      int c = in.read();
      if (c < 0) {
        throw new IOException("EOF in the request head");
      }
      head.append((char) c);
    }
    long length = 0;
    for (String line : head.toString().split("\r\n")) {
      if (line.toLowerCase().startsWith("content-length:")) {
        length = Long.parseLong(line.substring(15).trim());
      }
    }
    in.readNBytes((int) length);
  }

  static Response call(ServerSocket listener) throws Exception {
    HttpClientTransport t =
        new HttpClientTransport(URI.create("http://127.0.0.1:" + listener.getLocalPort()), "key");
    Transport.Call call =
        new Transport.Call(
            Transport.Endpoint.EXTEND,
            "/v1/reservations/r-1/extend",
            Optional.of("r-1"),
            "k-1",
            "{\"idempotency_key\":\"k-1\",\"extend_by_ms\":60000}".getBytes(StandardCharsets.UTF_8),
            System.nanoTime() + TimeUnit.SECONDS.toNanos(60));
    return t.send(call).get(120, TimeUnit.SECONDS);
  }

  void overCap(String mode) throws Exception {
    ServerSocket listener = new ServerSocket(0, 1, InetAddress.getLoopbackAddress());
    CompletableFuture<Sent> sent = serveOnce(listener, mode);
    Response r = call(listener);
    assertEquals(200, r.status());
    assertEquals(0, r.body().length);
    Sent s = sent.get(60, TimeUnit.SECONDS);
    assertTrue(s.closedByClient(), "the client closed the connection");
    assertTrue(s.bytes() < HttpClientTransport.MAX_BODY_BYTES + SLACK, "the server sent " + s.bytes());
  }

  @Test
  void aDeclared100MbBodyIsNotRead() throws Exception {
    overCap("big");
  }

  @Test
  void anEndlessChunkedBodyIsNotRead() throws Exception {
    overCap("chunked");
  }

  @Test
  void aBodyOfExactlyTheCapIsRead() throws Exception {
    ServerSocket listener = new ServerSocket(0, 1, InetAddress.getLoopbackAddress());
    CompletableFuture<Sent> sent = serveOnce(listener, "exact");
    Response r = call(listener);
    assertEquals(200, r.status());
    assertEquals(HttpClientTransport.MAX_BODY_BYTES, r.body().length);
    sent.cancel(false);
  }
}
