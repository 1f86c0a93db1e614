package io.runcycles.client.java.spring;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.runcycles.client.java.spring.annotation.Cycles;
import io.runcycles.client.java.spring.autoconfigure.CyclesAutoConfiguration;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.springframework.boot.autoconfigure.AutoConfigurations;
import org.springframework.boot.autoconfigure.aop.AopAutoConfiguration;
import org.springframework.boot.test.context.runner.ApplicationContextRunner;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;

/**
 * The starter's public API ({@code @Cycles} on a Spring bean, through the auto-configuration,
 * the aspect and the starter's own WebClient) against leasebeat's reference server
 * ({@code leasebeat serve}, started here on 127.0.0.1): a guarded method that works twice as
 * long as its lease, once with a lost extend response and once with a 5xx burst. The lease must
 * survive (the commit is applied and the server logs no lapse), and the retry after a fault must
 * reuse the faulted attempt's idempotency key and body.
 *
 * <p>Added by leasebeat's integration (integrations/spring-starter/run.sh), which builds the
 * server and passes its path in {@code LEASEBEAT_BIN}.
 */
class LeasebeatServeTest {

    /** Requested lease: with a 500 + 500 ms attempt budget the first beat is ~3 s after create. */
    static final long TTL_MS = 6_000;
    /** How long the guarded method works: twice the lease. */
    static final long WORK_MS = 12_000;

    @TempDir
    Path dir;

    /** A bean with an {@code @Cycles} method, as an application declares it. */
    public static class Worker {
        @Cycles(value = "1000", actual = "700", unit = "TOKENS", ttlMs = TTL_MS,
                actionKind = "llm.completion", actionName = "gpt-4o")
        public String work() throws InterruptedException {
            Thread.sleep(WORK_MS);
            return "done";
        }
    }

    @Configuration(proxyBeanMethods = false)
    static class App {
        @Bean
        Worker worker() {
            return new Worker();
        }
    }

    record Server(Process process, String url, Path log) implements AutoCloseable {
        @Override
        public void close() throws InterruptedException {
            process.destroy();
            process.waitFor();
        }
    }

    private Server serve(String... faults) throws IOException {
        String bin = System.getenv("LEASEBEAT_BIN");
        assertThat(bin).as("LEASEBEAT_BIN (set by integrations/spring-starter/run.sh)").isNotBlank();
        Path log = dir.resolve("serve.jsonl");
        List<String> cmd = new ArrayList<>(List.of(bin, "serve", "--bind", "127.0.0.1:0",
                "--log", log.toString()));
        for (String f : faults) {
            cmd.add("--fault");
            cmd.add(f);
        }
        Process p = new ProcessBuilder(cmd).redirectError(ProcessBuilder.Redirect.INHERIT).start();
        BufferedReader out = new BufferedReader(
                new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8));
        String first = out.readLine();
        assertThat(first).as("first line of leasebeat serve").startsWith("listening on ");
        Thread drain = new Thread(() -> {
            try {
                while (out.readLine() != null) { /* LAPSE lines: the log file is what we read */ }
            } catch (IOException ignored) {
                // the server ended
            }
        });
        drain.setDaemon(true);
        drain.start();
        return new Server(p, first.substring("listening on ".length()).trim(), log);
    }

    private List<JsonNode> guardedRun(String... faults) throws Exception {
        try (Server server = serve(faults)) {
            ApplicationContextRunner runner = new ApplicationContextRunner()
                    .withConfiguration(AutoConfigurations.of(
                            AopAutoConfiguration.class, CyclesAutoConfiguration.class))
                    .withUserConfiguration(App.class)
                    .withPropertyValues(
                            "cycles.base-url=" + server.url(),
                            "cycles.api-key=test-key",
                            "cycles.tenant=acme",
                            "cycles.http.connect-timeout=500ms",
                            "cycles.http.read-timeout=500ms",
                            "cycles.journal.dir=" + dir.resolve("journal"));
            List<String> results = new ArrayList<>();
            runner.run(ctx -> {
                assertThat(ctx).hasNotFailed();
                results.add(ctx.getBean(Worker.class).work());
            });
            assertThat(results).containsExactly("done");
            Thread.sleep(300); // let the server's lapse monitor look once more after the commit
            List<JsonNode> entries = new ArrayList<>();
            ObjectMapper json = new ObjectMapper();
            for (String line : Files.readAllLines(server.log())) {
                if (!line.isBlank()) {
                    entries.add(json.readTree(line));
                }
            }
            return entries;
        }
    }

    private static List<JsonNode> requests(List<JsonNode> entries, String endpoint) {
        return entries.stream()
                .filter(e -> "request".equals(e.path("event").asText())
                        && endpoint.equals(e.path("endpoint").asText()))
                .toList();
    }

    /** Zero lapses; each faulted extend retried with its key and body; renewed throughout; committed. */
    private static void check(List<JsonNode> entries, int expectedFaults) {
        assertThat(entries.stream().filter(e -> "lapse".equals(e.path("event").asText())).toList())
                .as("unreported lapses").isEmpty();
        List<JsonNode> extends_ = requests(entries, "extend");
        List<Integer> faulted = new ArrayList<>();
        for (int i = 0; i < extends_.size(); i++) {
            if (!extends_.get(i).path("fault").isMissingNode() && !extends_.get(i).path("fault").isNull()) {
                faulted.add(i);
            }
        }
        assertThat(faulted).as("faulted extends in %s", extends_).hasSize(expectedFaults);
        for (int i : faulted) {
            assertThat(extends_.size()).as("a retry follows faulted extend %d: %s", i, extends_)
                    .isGreaterThan(i + 1);
            JsonNode retry = extends_.get(i + 1);
            assertThat(retry.path("header_key")).as("the retry reuses the idempotency key")
                    .isEqualTo(extends_.get(i).path("header_key"));
            assertThat(retry.path("body")).as("the retry resends the same body")
                    .isEqualTo(extends_.get(i).path("body"));
        }
        JsonNode last = extends_.get(extends_.size() - 1);
        assertThat(last.path("status").asInt()).as("last extend %s", last).isEqualTo(200);
        assertThat(extends_.size()).as("extends after the recovery: %s", extends_)
                .isGreaterThan(expectedFaults + 1);
        // One create (adopted: no priming extension), one applied commit.
        assertThat(requests(entries, "create")).hasSize(1);
        assertThat(requests(entries, "commit").stream().anyMatch(c -> c.path("status").asInt() == 200))
                .as("commit applied: %s", requests(entries, "commit")).isTrue();
    }

    @Test
    void leaseSurvivesALostExtendResponseWithTheSameKey() throws Exception {
        check(guardedRun("extend:1=drop"), 1);
    }

    @Test
    void leaseSurvivesA5xxBurstWithTheSameKey() throws Exception {
        check(guardedRun("extend:1-2=503"), 2);
    }
}
