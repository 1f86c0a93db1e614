package io.leasebeat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.OptionalLong;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.Test;

/**
 * The hot calls' scratches come from a pool shared by all threads ({@code Slots.take} / {@code
 * give}): new threads do not each make one, and threads in calls at once never share one.
 */
class ScratchPoolTest {
  static final long MS = 1_000_000L;

  /** A heartbeat whose create succeeded at 1.5 s and whose first extend went out at 38.5 s. */
  static Heartbeat inFlight(long[] id) {
    Heartbeat hb = Heartbeat.builder().ttlMillis(60_000).requestTimeoutMillis(10_000).originNanos(0).build();
    long c = hb.pollAction().attempt().orElseThrow().id();
    hb.handleSent(c, 0);
    hb.handleResponse(c, Response.of(200).withBody(HeartbeatApiTest.CREATE_OK), 1_500 * MS);
    id[0] = hb.pollAction().attempt().orElseThrow().id();
    hb.handleSent(id[0], 38_500 * MS);
    return hb;
  }

  static byte[] extendBody(long remainingMs) {
    return ("{\"status\":\"ACTIVE\",\"expires_at_ms\":1785585720000,\"remaining_ttl_ms\":"
            + remainingMs
            + "}")
        .getBytes(StandardCharsets.UTF_8);
  }

  @Test
  void threadsThatComeAndGoDoNotEachMakeAScratch() throws Exception {
    // Warm: this thread's calls have taken (and given back) a scratch already.
    inFlight(new long[1]).close();
    long before = Slots.made();
    AtomicReference<Throwable> failed = new AtomicReference<>();
    for (int t = 0; t < 300; t++) {
      Thread thread =
          new Thread(
              () -> {
                try (Heartbeat hb = inFlight(new long[1])) {
                  assertTrue(hb.pollAction().attempt().isPresent());
                } catch (Throwable e) {
                  failed.compareAndSet(null, e);
                }
              });
      thread.start();
      thread.join();
    }
    assertNull(failed.get());
    // One thread at a time: each finds the scratch the previous one gave back (a slot near its
    // own; at worst a few are made while the pool fills), not one per thread (300).
    long made = Slots.made() - before;
    assertTrue(made <= 16, "scratches made for 300 short-lived threads: " + made);
  }

  @Test
  void callsInProgressAtOnceNeverShareAScratch() throws Exception {
    int threads = 12;
    int beats = 3_000;
    CyclicBarrier start = new CyclicBarrier(threads);
    AtomicReference<Throwable> failed = new AtomicReference<>();
    List<Thread> all = new ArrayList<>();
    for (int t = 0; t < threads; t++) {
      // Each thread's extends answer with its own remaining ttl: a decision decoded from another
      // call's result would show another thread's number.
      long remaining = 50_000 + t;
      byte[] body = extendBody(remaining);
      Thread thread =
          new Thread(
              () -> {
                long[] id = new long[1];
                try (Heartbeat hb = inFlight(id)) {
                  start.await();
                  long now = 38_600 * MS;
                  for (int i = 0; i < beats; i++) {
                    Decision d = hb.handleResponse(id[0], Response.of(200).withBody(body), now);
                    assertEquals(OptionalLong.of(remaining), d.remainingTtlMs());
                    assertEquals(Optional.of(AttemptKind.EXTEND), d.send());
                    Attempt next = hb.pollAction().attempt().orElseThrow();
                    assertTrue(next.id() > id[0], "a new attempt after a success");
                    id[0] = next.id();
                    now += 20_000 * MS;
                    hb.handleSent(id[0], now);
                    now += 100 * MS;
                  }
                } catch (Throwable e) {
                  failed.compareAndSet(null, e);
                }
              });
      all.add(thread);
      thread.start();
    }
    for (Thread thread : all) {
      thread.join();
    }
    if (failed.get() != null) {
      throw new AssertionError("a thread failed", failed.get());
    }
  }
}
