package io.leasebeat.example;

import io.leasebeat.AdoptedCreate;
import io.leasebeat.Adopted;
import io.leasebeat.Decision;
import io.leasebeat.Heartbeat;
import io.leasebeat.HeartbeatRunner;
import io.leasebeat.HttpClientTransport;
import io.leasebeat.Response;
import io.leasebeat.Transport;
import java.net.URI;
import java.net.http.HttpResponse;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * What a Spring Boot starter (e.g. the Cycles starter) needs to wire {@link HeartbeatRunner}, with
 * no Spring on the class path: each method below is one bean of an auto-configuration, and the
 * comments name the Spring annotation it would carry. Compiled with the tests; not run in CI.
 *
 * <pre>{@code
 * @AutoConfiguration
 * @EnableConfigurationProperties(CyclesProperties.class)
 * public class LeasebeatAutoConfiguration {
 *   @Bean(destroyMethod = "shutdownNow") @ConditionalOnMissingBean(name = "leasebeatScheduler")
 *   ScheduledExecutorService leasebeatScheduler() { return SpringStarterWiring.scheduler(2); }
 *
 *   @Bean @ConditionalOnMissingBean
 *   Transport leasebeatTransport(CyclesProperties p) {
 *     return SpringStarterWiring.transport(p.getBaseUrl(), p.getApiKey());
 *   }
 *
 *   @Bean(destroyMethod = "close")
 *   SpringStarterWiring.Leases leasebeatLeases(ScheduledExecutorService s, Transport t,
 *       ObjectProvider<HeartbeatRunner.Listener> listener) {
 *     return new SpringStarterWiring.Leases(s, t, listener.getIfAvailable(() -> new HeartbeatRunner.Listener() {}));
 *   }
 * }
 * }</pre>
 *
 * <p>The starter's reservation aspect then performs its create as it does today, and instead of
 * its own {@code scheduleAtFixedRate} heartbeat calls {@link Leases#adopt}; on the method's return
 * it calls {@link Leases#commit}, on an exception {@link Leases#release}.
 */
public final class SpringStarterWiring {
  private SpringStarterWiring() {}

  /**
   * Bean: the shared scheduler of every lease (a few daemon threads serve thousands of leases;
   * {@code destroyMethod = "shutdownNow"}).
   *
   * @param threads thread count
   * @return the scheduler
   */
  public static ScheduledThreadPoolExecutor scheduler(int threads) {
    AtomicInteger n = new AtomicInteger();
    ThreadFactory f =
        r -> {
          Thread t = new Thread(r, "leasebeat-" + n.incrementAndGet());
          t.setDaemon(true);
          return t;
        };
    ScheduledThreadPoolExecutor s = new ScheduledThreadPoolExecutor(threads, f);
    s.setRemoveOnCancelPolicy(true);
    return s;
  }

  /**
   * Bean: the transport; the default one on {@code java.net.http.HttpClient}, or an adapter over
   * the starter's own client ({@code RestClient}/{@code WebClient}) implementing {@link Transport}.
   *
   * @param baseUrl the Cycles server (from the starter's properties)
   * @param apiKey the API key (from the starter's properties)
   * @return the transport
   */
  public static Transport transport(String baseUrl, String apiKey) {
    return new HttpClientTransport(URI.create(baseUrl), apiKey);
  }

  /** Bean: the running leases of the application ({@code destroyMethod = "close"}). */
  public static final class Leases implements AutoCloseable {
    private final ScheduledThreadPoolExecutor scheduler;
    private final Transport transport;
    private final HeartbeatRunner.Listener listener;
    private final ConcurrentHashMap<String, HeartbeatRunner> running = new ConcurrentHashMap<>();

    /**
     * The leases service.
     *
     * @param scheduler the shared scheduler bean
     * @param transport the transport bean
     * @param listener the application's listener (metrics, logs), or a no-op one
     */
    public Leases(
        ScheduledThreadPoolExecutor scheduler, Transport transport, HeartbeatRunner.Listener listener) {
      this.scheduler = scheduler;
      this.transport = transport;
      this.listener = listener;
    }

    /**
     * Takes over the starter's own create (no extra extension) and heartbeats it until {@link
     * #commit} or {@link #release}.
     *
     * @param ttlMillis the ttl the create asked for
     * @param timeoutMillis the starter's request timeout
     * @param createKey the create's idempotency key
     * @param createBody the exact create body sent
     * @param sentNanos {@code System.nanoTime()} before the create was sent
     * @param response the create's response
     * @param receivedNanos {@code System.nanoTime()} after its body was read
     * @return the reservation id, if the create succeeded
     */
    public Optional<String> adopt(
        long ttlMillis,
        long timeoutMillis,
        String createKey,
        byte[] createBody,
        long sentNanos,
        HttpResponse<byte[]> response,
        long receivedNanos) {
      Adopted adopted =
          Heartbeat.builder()
              .ttlMillis(ttlMillis)
              .requestTimeoutMillis(timeoutMillis)
              .adopt(
                  AdoptedCreate.builder()
                      .key(createKey)
                      .requestBody(createBody)
                      .sentNanos(sentNanos)
                      .receivedNanos(receivedNanos)
                      .response(Response.from(response))
                      .build());
      Heartbeat hb = adopted.heartbeat();
      Decision first = adopted.decision();
      Optional<String> id = first.reservationId();
      if (first.isStop() || id.isEmpty()) {
        hb.close();
        return id; // the starter reports the create's failure as it does today
      }
      HeartbeatRunner runner =
          HeartbeatRunner.builder(hb, transport)
              .executor(scheduler)
              .listener(listener)
              .releaseOnStop(true) // an abandoned lease is released, never left to lapse
              .build();
      running.put(id.get(), runner);
      runner.start().whenComplete((stop, e) -> {
        running.remove(id.get());
        hb.close();
      });
      return id;
    }

    /**
     * The guarded method returned: stop heartbeating and commit the actual amount.
     *
     * @param reservationId the reservation
     * @param actualJson the Amount JSON object
     * @return completes with the stop decision after the commit
     */
    public CompletableFuture<Decision> commit(String reservationId, String actualJson) {
      HeartbeatRunner r = running.get(reservationId);
      return r == null ? CompletableFuture.completedFuture(null) : r.stopAndCommit(actualJson);
    }

    /**
     * The guarded method threw: stop heartbeating and release.
     *
     * @param reservationId the reservation
     * @return completes with the stop decision after the release
     */
    public CompletableFuture<Decision> release(String reservationId) {
      HeartbeatRunner r = running.get(reservationId);
      return r == null ? CompletableFuture.completedFuture(null) : r.stop();
    }

    /** Application shutdown: every lease stops and is released. */
    @Override
    public void close() {
      running.values().forEach(HeartbeatRunner::stop);
      running.values().forEach(HeartbeatRunner::close);
    }
  }
}
