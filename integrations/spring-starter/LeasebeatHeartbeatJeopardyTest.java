package io.runcycles.client.java.spring.context;

import static org.assertj.core.api.Assertions.assertThat;
import static org.mockito.ArgumentMatchers.any;
import static org.mockito.ArgumentMatchers.anyLong;
import static org.mockito.Mockito.mock;
import static org.mockito.Mockito.when;

import ch.qos.logback.classic.Level;
import ch.qos.logback.classic.Logger;
import ch.qos.logback.classic.spi.ILoggingEvent;
import ch.qos.logback.core.read.ListAppender;
import io.runcycles.client.java.spring.model.CyclesResponse;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.slf4j.LoggerFactory;

/**
 * D-15 reporting by the adapter's driver ({@link LeasebeatHeartbeat}): a lease that reaches its
 * proven instant with no newer success, and a beat sent later than due by more than the safety
 * margin, are each logged at WARN as {@code lease_in_jeopardy} with the reservation id; the
 * heartbeat keeps going. Added by leasebeat's integration (integrations/spring-starter/run.sh).
 */
class LeasebeatHeartbeatJeopardyTest {

    private ListAppender<ILoggingEvent> appender;
    private final List<Runnable> scheduled = new ArrayList<>();
    private final List<Long> delays = new ArrayList<>();
    private ScheduledExecutorService executor;

    @BeforeEach
    @SuppressWarnings("unchecked")
    void setUp() {
        appender = new ListAppender<>();
        appender.start();
        ((Logger) LoggerFactory.getLogger(CyclesLifecycleService.class)).addAppender(appender);
        executor = mock(ScheduledExecutorService.class);
        when(executor.schedule(any(Runnable.class), anyLong(), any(TimeUnit.class))).thenAnswer(inv -> {
            scheduled.add(inv.getArgument(0));
            delays.add(inv.getArgument(1));
            return mock(ScheduledFuture.class);
        });
    }

    @AfterEach
    void tearDown() {
        ((Logger) LoggerFactory.getLogger(CyclesLifecycleService.class)).detachAppender(appender);
    }

    private List<String> jeopardyWarnings() {
        synchronized (appender.list) {
            return appender.list.stream()
                    .filter(e -> e.getLevel() == Level.WARN)
                    .map(ILoggingEvent::getFormattedMessage)
                    .filter(m -> m.contains("lease_in_jeopardy"))
                    .toList();
        }
    }

    private static LeasebeatHeartbeat.CreateSample create(String id, long remainingTtlMs, long sent, long received) {
        Map<String, Object> body = new LinkedHashMap<>();
        body.put("decision", "ALLOW");
        body.put("reservation_id", id);
        body.put("affected_scopes", List.of("tenant:acme"));
        body.put("expires_at_ms", 1_000_000L + remainingTtlMs);
        body.put("remaining_ttl_ms", remainingTtlMs);
        return new LeasebeatHeartbeat.CreateSample(Map.of("idempotency_key", "create-" + id),
                CyclesResponse.success(200, body), sent, received);
    }

    @Test
    void aLateBeatPastItsProvenInstantIsReportedOnceAndTheHeartbeatGoesOn() {
        AtomicLong clock = new AtomicLong(0);
        AtomicLong expiry = new AtomicLong(1_060_000L);
        Runnable cancel = LeasebeatHeartbeat.start("rsv-late", 60_000L, 5_000L,
                create("rsv-late", 60_000L, 0, 0), executor, clock::get,
                body -> CyclesResponse.success(200, Map.of("status", "ACTIVE",
                        "expires_at_ms", expiry.addAndGet(60_000L), "remaining_ttl_ms", 60_000L)),
                () -> Map.of("extend_by_ms", 60_000L), null);
        assertThat(cancel).isNotNull();
        // reserve 2 x 5000 + 1000: the first beat is due at 49000, proven until 60000
        assertThat(delays).containsExactly(49_000L);
        assertThat(jeopardyWarnings()).isEmpty();

        clock.set(61_000L * 1_000_000L); // the executor was starved past the proven instant
        scheduled.get(0).run();
        List<String> warnings = jeopardyWarnings();
        assertThat(warnings).anySatisfy(m -> assertThat(m).contains("rsv-late").contains("proven_lead_reached"));
        assertThat(warnings).anySatisfy(m -> assertThat(m).contains("rsv-late").contains("beat_late"));
        assertThat(warnings).hasSize(2);
        // the heartbeat went on: the extend succeeded and the next beat is scheduled
        assertThat(delays).hasSize(2);
        cancel.run();
    }

    /** Issue 25: a beat run before its due time sends nothing and waits for the due time. */
    @Test
    void aBeatRunBeforeItsDueTimeSendsNothingAndWaits() {
        AtomicLong clock = new AtomicLong(0);
        AtomicLong expiry = new AtomicLong(1_060_000L);
        List<Map<String, Object>> sent = new ArrayList<>();
        Runnable cancel = LeasebeatHeartbeat.start("rsv-early", 60_000L, 5_000L,
                create("rsv-early", 60_000L, 0, 0), executor, clock::get,
                body -> {
                    sent.add(body);
                    return CyclesResponse.success(200, Map.of("status", "ACTIVE",
                            "expires_at_ms", expiry.addAndGet(60_000L), "remaining_ttl_ms", 60_000L));
                },
                () -> Map.of("extend_by_ms", 60_000L), null);
        assertThat(cancel).isNotNull();
        assertThat(delays).containsExactly(49_000L);
        clock.set(10_000L * 1_000_000L); // 39 s early
        scheduled.get(0).run();
        assertThat(sent).isEmpty();
        assertThat(delays).containsExactly(49_000L, 39_000L); // waits for the due time
        clock.set(49_000L * 1_000_000L - 500_000L); // within the 1 ms a timer may fire early
        scheduled.get(1).run();
        assertThat(sent).hasSize(1);
        assertThat(jeopardyWarnings()).isEmpty();
        cancel.run();
    }

    @Test
    void theProvenInstantPassingWhileNoBeatRunsIsReportedAtOnce() throws InterruptedException {
        // Real clock, a short lease: proven until the create's receipt + 1500 ms; the beat is
        // never run (a starved executor), so only the driver's own timer can report.
        long now = System.nanoTime();
        AtomicReference<Runnable> cancel = new AtomicReference<>(LeasebeatHeartbeat.start(
                "rsv-starved", 1_500L, 100L, create("rsv-starved", 1_500L, now, now), executor,
                System::nanoTime, body -> { throw new AssertionError("no beat runs"); },
                () -> Map.of("extend_by_ms", 1_500L), null));
        assertThat(cancel.get()).isNotNull();
        for (int i = 0; i < 200 && jeopardyWarnings().isEmpty(); i++) {
            Thread.sleep(50);
        }
        assertThat(jeopardyWarnings()).singleElement()
                .satisfies(m -> assertThat(m).contains("rsv-starved").contains("proven_lead_reached"));
        cancel.get().run();
    }
}
