package io.leasebeat;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;

/**
 * {@code leasebeat serve} on 127.0.0.1:0, started by a test: its address from the first stdout line,
 * its JSON-lines log (requests and lapses) read back with {@link #log()}.
 */
final class ServeProcess implements AutoCloseable {
  final Process process;
  final URI base;
  final Path logFile;
  private final Path dir;
  private final Thread drain;

  private ServeProcess(Process process, URI base, Path dir, Path logFile, Thread drain) {
    this.process = process;
    this.base = base;
    this.dir = dir;
    this.logFile = logFile;
    this.drain = drain;
  }

  /** The CLI binary: -Dleasebeat.cli (set by the pom), else ../target/release/leasebeat. */
  static Path cli() {
    return Paths.get(System.getProperty("leasebeat.cli", "../target/release/leasebeat"));
  }

  /** Starts {@code leasebeat serve --log <tmp> extraArgs...} and waits for its address. */
  static ServeProcess start(String... extraArgs) throws IOException {
    Path dir = Files.createTempDirectory("leasebeat-serve-");
    Path log = dir.resolve("serve.jsonl");
    List<String> cmd = new ArrayList<>();
    cmd.add(cli().toAbsolutePath().toString());
    cmd.add("serve");
    cmd.add("--log");
    cmd.add(log.toString());
    cmd.addAll(List.of(extraArgs));
    Process p =
        new ProcessBuilder(cmd)
            .redirectErrorStream(true)
            .redirectInput(ProcessBuilder.Redirect.PIPE)
            .start();
    BufferedReader out =
        new BufferedReader(new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8));
    String first = out.readLine();
    if (first == null || !first.startsWith("listening on ")) {
      p.destroyForcibly();
      throw new IOException("leasebeat serve did not start: " + first);
    }
    URI base = URI.create(first.substring("listening on ".length()).trim());
    // Keep reading stdout (LAPSE lines) so the server never blocks on a full pipe.
    Thread drain =
        new Thread(
            () -> {
              try {
                while (out.readLine() != null) {
                  // discard: the log file has the same facts
                }
              } catch (IOException e) {
                // the process ended
              }
            },
            "serve-stdout");
    drain.setDaemon(true);
    drain.start();
    return new ServeProcess(p, base, dir, log, drain);
  }

  /** Every log entry so far. */
  List<JsonNode> log() throws IOException {
    if (!Files.exists(logFile)) {
      return List.of();
    }
    List<JsonNode> entries = new ArrayList<>();
    for (String line : Files.readAllLines(logFile, StandardCharsets.UTF_8)) {
      if (!line.isBlank()) {
        entries.add(VectorReplay.MAPPER.readTree(line));
      }
    }
    return entries;
  }

  /** Request entries for one endpoint ("create", "extend", "release", "commit"). */
  List<JsonNode> requests(String endpoint) throws IOException {
    return log().stream()
        .filter(e -> "request".equals(e.path("event").textValue()))
        .filter(e -> endpoint.equals(e.path("endpoint").textValue()))
        .collect(Collectors.toList());
  }

  /**
   * Held entries for one endpoint: a request a {@code hold=} fault is holding, logged when the
   * hold begins (its request line comes when it is answered).
   */
  List<JsonNode> held(String endpoint) throws IOException {
    return log().stream()
        .filter(e -> "held".equals(e.path("event").textValue()))
        .filter(e -> endpoint.equals(e.path("endpoint").textValue()))
        .collect(Collectors.toList());
  }

  /** Lapse entries: reservations that expired while still active. */
  List<JsonNode> lapses() throws IOException {
    return log().stream()
        .filter(e -> "lapse".equals(e.path("event").textValue()))
        .collect(Collectors.toList());
  }

  /** Kills the server at once (SIGKILL), as a crash would. */
  void kill() throws InterruptedException {
    process.destroyForcibly();
    process.waitFor(10, TimeUnit.SECONDS);
  }

  @Override
  public void close() throws IOException {
    process.destroy();
    try {
      if (!process.waitFor(5, TimeUnit.SECONDS)) {
        process.destroyForcibly();
        process.waitFor(5, TimeUnit.SECONDS);
      }
      drain.join(2_000);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
    try (var files = Files.walk(dir)) {
      files.sorted(java.util.Comparator.reverseOrder()).forEach(f -> f.toFile().delete());
    }
  }
}
