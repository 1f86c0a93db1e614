package io.leasebeat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.RepeatedTest;

/** Many threads call one heartbeat while one closes it: no crash, every call succeeds or throws ISE. */
class ConcurrencyTest {
  static final int THREADS = 8;

  @RepeatedTest(20)
  void closeRacesCalls() throws Exception {
    Heartbeat hb = HeartbeatApiTest.workedExample(0);
    hb.handleSent(1, 0);
    hb.handleResponse(1, Response.of(200).withBody(HeartbeatApiTest.CREATE_OK), 1_500_000_000L);

    ExecutorService pool = Executors.newFixedThreadPool(THREADS + 2);
    CyclicBarrier start = new CyclicBarrier(THREADS + 1);
    AtomicLong ok = new AtomicLong();
    AtomicLong closedSeen = new AtomicLong();
    AtomicReference<Throwable> unexpected = new AtomicReference<>();
    CountDownLatch someCalls = new CountDownLatch(THREADS * 20);
    try {
      List<Future<?>> futures = new ArrayList<>();
      for (int t = 0; t < THREADS; t++) {
        final int which = t;
        futures.add(
            pool.submit(
                () -> {
                  start.await();
                  for (int i = 0; i < 2_000; i++) {
                    try {
                      switch ((which + i) % 5) {
                        case 0:
                          hb.pollAction();
                          break;
                        case 1:
                          hb.lastDecision();
                          break;
                        case 2:
                          hb.attempt();
                          break;
                        case 3:
                          hb.reservationId();
                          break;
                        default:
                          hb.maxRttMillis();
                          break;
                      }
                      ok.incrementAndGet();
                    } catch (IllegalStateException e) {
                      closedSeen.incrementAndGet();
                    } catch (Throwable e) {
                      unexpected.compareAndSet(null, e);
                    }
                    someCalls.countDown();
                  }
                  return null;
                }));
      }
      start.await();
      assertTrue(someCalls.await(60, TimeUnit.SECONDS));
      // Several closers at once: close is idempotent.
      List<Future<?>> closers = new ArrayList<>();
      closers.add(pool.submit(hb::close));
      closers.add(pool.submit(hb::close));
      for (Future<?> f : closers) {
        f.get();
      }
      for (Future<?> f : futures) {
        f.get();
      }
    } finally {
      pool.shutdownNow();
    }
    if (unexpected.get() != null) {
      throw new AssertionError("a call failed with something other than IllegalStateException", unexpected.get());
    }
    assertTrue(ok.get() >= THREADS * 20L);
    assertEquals(THREADS * 2_000L, ok.get() + closedSeen.get());
    assertTrue(hb.isClosed());
  }

  @RepeatedTest(5)
  void manyHeartbeatsOnManyThreads() throws Exception {
    ExecutorService pool = Executors.newFixedThreadPool(THREADS);
    try {
      List<Future<Integer>> futures = new ArrayList<>();
      for (int t = 0; t < THREADS * 4; t++) {
        futures.add(
            pool.submit(
                () -> {
                  try (Heartbeat hb = HeartbeatApiTest.workedExample(0)) {
                    hb.handleSent(1, 0);
                    Decision d =
                        hb.handleResponse(1, Response.of(200).withBody(HeartbeatApiTest.CREATE_OK), 1_500_000_000L);
                    return d.numbers().nextDelay().orElseThrow().value().intValueExact();
                  }
                }));
      }
      for (Future<Integer> f : futures) {
        assertEquals(37_000, f.get());
      }
    } finally {
      pool.shutdownNow();
    }
  }
}
