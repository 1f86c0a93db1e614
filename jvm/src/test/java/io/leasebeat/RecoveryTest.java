package io.leasebeat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HexFormat;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.function.Predicate;
import java.util.stream.Collectors;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The 12 scenarios of the Cycles SDK Recovery Conformance Profile 0.3 (scenarios.yaml) for the
 * Java runner ({@link HeartbeatRunner} settling through {@link Settlement} and {@link Journal}),
 * each performed against {@code leasebeat serve} with the faults it needs and asserted from serve's
 * request log. Every assertion names the catalog's label. A restart is a fresh JVM ({@link
 * RecoveryChild}) started after the first was killed with SIGKILL ({@link
 * Process#destroyForcibly()}); a concurrent replay is two JVMs released at once by a barrier file.
 * The mapping scenario -> tests is in recovery/java/README.md.
 */
class RecoveryTest {
  static final String CREATE =
      "{\"subject\":{\"tenant\":\"acme\",\"workspace\":\"ws-1\"},"
          + "\"action\":{\"kind\":\"llm.completion\",\"name\":\"gpt\"},"
          + "\"estimate\":{\"unit\":\"TOKENS\",\"amount\":1000}}";
  static final String ACTUAL = "{\"unit\":\"TOKENS\",\"amount\":812}";
  static final String METRICS = "{\"tokens_input\":100,\"tokens_output\":712,\"latency_ms\":420}";
  static final String METADATA = "{\"run\":\"r-42\"}";
  static final String KEY = "sk-recovery-1";

  @TempDir Path tmp;

  // ----- helpers -----

  /** A runner in this process, started, with its reservation known. */
  static final class Lease implements AutoCloseable {
    final Heartbeat hb;
    final HeartbeatRunner runner;
    final String id;
    final List<HeartbeatRunner.HeartbeatFailure> failures =
        Collections.synchronizedList(new ArrayList<>());

    Lease(ServeProcess serve, Path journalDir, HeartbeatRunner.HeartbeatFailurePolicy policy,
        long ttl, long timeout) throws InterruptedException {
      hb = Heartbeat.builder().ttlMillis(ttl).requestTimeoutMillis(timeout).createRequestJson(CREATE).build();
      runner =
          HeartbeatRunner.builder(hb, new HttpClientTransport(serve.base, KEY))
              .journalDir(journalDir)
              .heartbeatFailurePolicy(policy)
              .settlementRetry(new Settlement.RetryPolicy(5, 500, 4_000))
              .listener(
                  new HeartbeatRunner.Listener() {
                    @Override
                    public void onHeartbeatFailure(HeartbeatRunner.HeartbeatFailure f) {
                      failures.add(f);
                    }
                  })
              .build();
      runner.start();
      RunnerServerTest.waitUntil("the reservation", () -> hb.reservationId().isPresent(), Duration.ofSeconds(10));
      id = hb.reservationId().orElseThrow();
    }

    Lease(ServeProcess serve, Path journalDir) throws InterruptedException {
      this(serve, journalDir, HeartbeatRunner.HeartbeatFailurePolicy.WARN, 60_000, 2_000);
    }

    @Override
    public void close() {
      runner.close();
      hb.close();
    }
  }

  /** A child JVM running {@link RecoveryChild}; its stdout lines collected. */
  static final class Child implements AutoCloseable {
    final Process process;
    final List<String> lines = Collections.synchronizedList(new ArrayList<>());

    Child(String... args) throws IOException {
      List<String> cmd = new ArrayList<>();
      cmd.add(Path.of(System.getProperty("java.home"), "bin", "java").toString());
      cmd.add("-cp");
      cmd.add(System.getProperty("surefire.test.class.path", System.getProperty("java.class.path")));
      String lib = System.getProperty("java.library.path");
      if (lib != null) {
        cmd.add("-Djava.library.path=" + lib);
      }
      cmd.add("-XX:TieredStopAtLevel=1");
      cmd.add("-Xshare:auto");
      cmd.add(RecoveryChild.class.getName());
      cmd.addAll(List.of(args));
      process = new ProcessBuilder(cmd).redirectError(ProcessBuilder.Redirect.INHERIT).start();
      Thread t =
          new Thread(
              () -> {
                try (BufferedReader r =
                    new BufferedReader(new InputStreamReader(process.getInputStream(), StandardCharsets.UTF_8))) {
                  String line;
                  while ((line = r.readLine()) != null) {
                    System.err.println("[child " + process.pid() + "] " + line);
                    lines.add(line);
                  }
                } catch (IOException e) {
                  // ended
                }
              },
              "child-stdout");
      t.setDaemon(true);
      t.start();
    }

    String await(String what, Predicate<String> p, Duration max) throws InterruptedException {
      long end = System.nanoTime() + max.toNanos();
      while (System.nanoTime() < end) {
        synchronized (lines) {
          for (String l : lines) {
            if (p.test(l)) {
              return l;
            }
          }
        }
        if (!process.isAlive() && lines.stream().noneMatch(p)) {
          Thread.sleep(50);
          synchronized (lines) {
            for (String l : lines) {
              if (p.test(l)) {
                return l;
              }
            }
          }
          fail("the child exited (" + process.exitValue() + ") before " + what + ": " + lines);
        }
        Thread.sleep(5);
      }
      fail("gave up waiting for " + what + ": " + lines);
      return null;
    }

    String reservation() throws InterruptedException {
      return await("its reservation", l -> l.startsWith("reservation "), Duration.ofSeconds(30))
          .substring("reservation ".length());
    }

    /** SIGKILL, as a crash. */
    void kill() throws InterruptedException {
      process.destroyForcibly();
      assertTrue(process.waitFor(10, TimeUnit.SECONDS));
    }

    void awaitExit() throws InterruptedException {
      assertTrue(process.waitFor(60, TimeUnit.SECONDS), "the child ends: " + lines);
      assertEquals(0, process.exitValue(), "the child's exit status: " + lines);
    }

    @Override
    public void close() {
      process.destroyForcibly();
    }
  }

  Child commitChild(ServeProcess serve, String apiKey, String tenant, Path jdir) throws IOException {
    return new Child("commit", serve.base.toString(), apiKey, tenant, jdir.toString(), ACTUAL);
  }

  Child replayChild(ServeProcess serve, String apiKey, String tenant, Path jdir, String barrier)
      throws IOException {
    return new Child("replay", serve.base.toString(), apiKey, tenant, jdir.toString(), barrier);
  }

  static JsonNode body(JsonNode entry) throws IOException {
    return VectorReplay.MAPPER.readTree(entry.get("body").textValue());
  }

  /** The commit and event requests of reservation {@code id} (events by its settlement key). */
  static List<JsonNode> settlement(ServeProcess serve, String id) throws IOException {
    List<JsonNode> out = new ArrayList<>();
    String key = null;
    for (JsonNode e : serve.log()) {
      if (!"request".equals(e.path("event").textValue())) {
        continue;
      }
      String ep = e.path("endpoint").textValue();
      if ("commit".equals(ep) && id.equals(e.path("reservation_id").textValue())) {
        out.add(e);
        key = e.path("header_key").textValue();
      } else if ("events".equals(ep) && key != null && key.equals(e.path("header_key").textValue())) {
        out.add(e);
      }
    }
    return out;
  }

  static List<String> endpoints(List<JsonNode> entries) {
    return entries.stream().map(e -> e.path("endpoint").textValue()).collect(Collectors.toList());
  }

  /** retry_uses_original_idempotency_key: one key, in the header and the body of every request. */
  static String oneKey(List<JsonNode> entries) throws IOException {
    String key = entries.get(0).path("header_key").textValue();
    for (JsonNode e : entries) {
      assertEquals(key, e.path("header_key").textValue(), "retry_uses_original_idempotency_key: " + e);
      assertEquals(key, body(e).path("idempotency_key").textValue(), "the header key is the body key: " + e);
    }
    return key;
  }

  /** settlement_occurs_at_most_once: serve applied exactly one of these requests. */
  static void appliedOnce(List<JsonNode> entries) {
    long applied = entries.stream().filter(e -> e.path("applied").asBoolean(false)).count();
    assertEquals(1, applied, "settlement_occurs_at_most_once (exactly once here): " + entries);
  }

  static void waitFor(String what, ServeProcess serve, String id, Predicate<List<JsonNode>> p)
      throws Exception {
    long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
    while (System.nanoTime() < end) {
      if (p.test(settlement(serve, id))) {
        return;
      }
      Thread.sleep(20);
    }
    fail("gave up waiting for " + what + ": " + settlement(serve, id));
  }

  static List<Path> journalFiles(Path base, String suffix) throws IOException {
    if (!Files.exists(base)) {
      return List.of();
    }
    try (Stream<Path> s = Files.walk(base)) {
      return s.filter(Files::isRegularFile)
          .filter(p -> p.getFileName().toString().endsWith(suffix))
          .sorted()
          .collect(Collectors.toList());
    }
  }

  static String sha256(String s) throws Exception {
    return HexFormat.of().formatHex(MessageDigest.getInstance("SHA-256").digest(s.getBytes(StandardCharsets.UTF_8)));
  }

  static String create(ServeProcess serve, String key) throws Exception {
    String body = CREATE.substring(0, CREATE.length() - 1) + ",\"idempotency_key\":\"" + key + "\",\"ttl_ms\":60000}";
    HttpResponse<String> r =
        HttpClient.newHttpClient()
            .send(
                HttpRequest.newBuilder(URI.create(serve.base + "/v1/reservations"))
                    .header("X-Cycles-API-Key", KEY)
                    .header("X-Idempotency-Key", key)
                    .header("Content-Type", "application/json")
                    .POST(HttpRequest.BodyPublishers.ofString(body))
                    .build(),
                HttpResponse.BodyHandlers.ofString());
    assertEquals(200, r.statusCode(), r.body());
    return VectorReplay.MAPPER.readTree(r.body()).path("reservation_id").textValue();
  }

  // ----- core -----

  /** CR-CORE-001: lost commit response reuses the same key. */
  @Test
  void lostCommitResponseReusesTheKey() throws Exception {
    try (ServeProcess serve = ServeProcess.start("--fault", "commit:1=drop");
        Lease lease = new Lease(serve, tmp)) {
      SettleResult r = lease.runner.commit(ACTUAL, METRICS, METADATA).get(30, TimeUnit.SECONDS);
      assertEquals(Settlement.Outcome.COMMITTED, r.outcome(), r.toString());
      List<JsonNode> reqs = settlement(serve, lease.id);
      assertEquals(List.of("commit", "commit"), endpoints(reqs), "expected_requests: commit, commit_same_key");
      assertEquals("dropped", reqs.get(0).path("outcome").textValue());
      String key = oneKey(reqs);
      assertEquals(r.key(), key, "retry_uses_original_idempotency_key");
      appliedOnce(reqs);
      assertTrue(reqs.get(0).path("applied").asBoolean(), "the lost one was applied, the retry a replay");
      assertFalse(r.recordKept());
      assertEquals(List.of(), journalFiles(tmp, ".json"), "the record is removed");
    }
  }

  /** CR-CORE-002: expired commit falls back to an event. */
  @Test
  void expiredCommitFallsBackToAnEvent() throws Exception {
    try (ServeProcess serve = ServeProcess.start("--fault", "commit:1=410:RESERVATION_EXPIRED");
        Lease lease = new Lease(serve, tmp)) {
      SettleResult r = lease.runner.commit(ACTUAL, METRICS, METADATA).get(30, TimeUnit.SECONDS);
      assertEquals(Settlement.Outcome.APPLIED, r.outcome(), r.toString());
      List<JsonNode> reqs = settlement(serve, lease.id);
      assertEquals(List.of("commit", "events"), endpoints(reqs), "expected_requests: commit, event_same_key");
      oneKey(reqs);
      appliedOnce(reqs); // settlement_occurs_at_most_once
      JsonNode event = body(reqs.get(1));
      JsonNode create = VectorReplay.MAPPER.readTree(CREATE);
      // event_carries_original_subject_action_actual (metrics and metadata too)
      assertEquals(create.get("subject"), event.get("subject"), "event_carries_original_subject_action_actual: subject");
      assertEquals(create.get("action"), event.get("action"), "event_carries_original_subject_action_actual: action");
      assertEquals(VectorReplay.MAPPER.readTree(ACTUAL), event.get("actual"), "event_carries_original_subject_action_actual: actual");
      assertEquals(VectorReplay.MAPPER.readTree(METRICS), event.get("metrics"), "metrics carried");
      assertEquals("r-42", event.path("metadata").path("run").textValue(), "metadata carried: " + event);
      assertEquals(List.of(), journalFiles(tmp, ".json"), "the record is removed");
    }
  }

  /** CR-CORE-003: heartbeat transport failure is observable and non-fatal. */
  @Test
  void heartbeatTransportFailureIsObservableAndNonFatal() throws Exception {
    try (ServeProcess serve = ServeProcess.start("--fault", "extend:1=drop-before");
        Lease lease = new Lease(serve, tmp, HeartbeatRunner.HeartbeatFailurePolicy.WARN, 5_000, 1_000)) {
      CompletableFuture<String> work = new CompletableFuture<>();
      lease.runner.work(work);
      RunnerServerTest.waitUntil(
          "a failed extension, then its same-key retry answered",
          () -> {
            try {
              List<JsonNode> ext = serve.requests("extend");
              return ext.size() >= 2 && ext.get(1).path("status").asInt() == 200;
            } catch (IOException e) {
              return false;
            }
          },
          Duration.ofSeconds(10));
      // heartbeat_failure_reports_reservation_and_disposition
      RunnerServerTest.waitUntil("the failure report", () -> !lease.failures.isEmpty(), Duration.ofSeconds(5));
      HeartbeatRunner.HeartbeatFailure f = lease.failures.get(0);
      assertEquals(Optional.of(lease.id), f.reservationId(), "heartbeat_failure_reports_reservation_and_disposition");
      assertEquals(HeartbeatRunner.HeartbeatFailure.Disposition.RETRY_SAME_KEY, f.disposition(),
          "heartbeat_failure_reports_reservation_and_disposition");
      // guarded_action_continues_under_warn_policy
      assertFalse(work.isDone(), "guarded_action_continues_under_warn_policy");
      work.complete("done");
      SettleResult r = lease.runner.commit(ACTUAL).get(30, TimeUnit.SECONDS);
      assertEquals(Settlement.Outcome.COMMITTED, r.outcome(), "final_settlement_is_attempted");
      List<JsonNode> ext = serve.requests("extend");
      assertEquals(ext.get(0).path("header_key").textValue(), ext.get(1).path("header_key").textValue(),
          "expected_requests: extend, extend_same_key");
      assertEquals(List.of("commit"), endpoints(settlement(serve, lease.id)), "expected_requests: commit");
    }
  }

  /** CR-CORE-004: protocol-invalid settlement success remains ambiguous. */
  @Test
  void malformedCommitSuccessRemainsAmbiguous() throws Exception {
    try (ServeProcess serve = ServeProcess.start("--fault", "commit:1=malformed");
        Lease lease = new Lease(serve, tmp)) {
      SettleResult r = lease.runner.commit(ACTUAL).get(30, TimeUnit.SECONDS);
      assertEquals(Settlement.Outcome.COMMITTED, r.outcome(), r.toString());
      List<JsonNode> reqs = settlement(serve, lease.id);
      assertEquals(List.of("commit", "commit"), endpoints(reqs), "expected_requests: commit, commit_same_key");
      // only_schema_valid_expected_status_is_terminal_success: the malformed 2xx was not the end
      assertEquals(Settlement.Classification.AMBIGUOUS, r.decisions().stream()
              .filter(d -> d.status().isPresent()).findFirst().orElseThrow().classification(),
          "only_schema_valid_expected_status_is_terminal_success");
      oneKey(reqs); // ambiguous_success_retains_original_idempotency_key
      appliedOnce(reqs);
    }
  }

  /** CR-BOUNDARY-001: missing actual is surfaced without settlement. */
  @Test
  void missingActualIsSurfacedWithoutSettlement() throws Exception {
    try (ServeProcess serve = ServeProcess.start();
        Lease lease = new Lease(serve, tmp)) {
      SettleResult r = lease.runner.commit(null).get(30, TimeUnit.SECONDS);
      // missing_actual_or_guarded_action_failure_is_surfaced
      assertEquals(Settlement.Outcome.NO_ACTUAL, r.outcome(), "missing_actual_or_guarded_action_failure_is_surfaced");
      assertFalse(r.settled());
      // no_commit_or_event_without_known_actual
      assertEquals(List.of(), serve.requests("commit"), "no_commit_or_event_without_known_actual");
      assertEquals(List.of(), serve.requests("events"), "no_commit_or_event_without_known_actual");
      assertEquals(List.of(), journalFiles(tmp, ".json"), "nothing journaled");
    }
  }

  // ----- durable -----

  /** CR-DURABLE-001: first commit is journaled before it leaves the process. */
  @Test
  void firstCommitIsJournaledBeforeItLeaves() throws Exception {
    try (ServeProcess serve = ServeProcess.start("--fault", "commit:1=delay=1500")) {
      String id;
      try (Child a = commitChild(serve, KEY, "-", tmp)) {
        id = a.reservation();
        // journal_write_precedes_first_settlement_request: the child reports the persisted
        // record's decision before the one that marks the commit sent.
        String sent = a.await("the commit sent", l -> l.startsWith("decision " + id) && l.contains("\"next\":\"wait\""), Duration.ofSeconds(20));
        int persisted = -1;
        int sentAt = a.lines.indexOf(sent);
        for (int i = 0; i < sentAt; i++) {
          if (a.lines.get(i).contains("\"class\":\"persisted\"")) {
            persisted = i;
          }
        }
        assertTrue(persisted >= 0 && persisted < sentAt, "journal_write_precedes_first_settlement_request: " + a.lines);
        Thread.sleep(200); // on the wire: applied at once, its answer delayed 1.5 s
        a.kill(); // process_terminated_while_first_commit_is_in_flight
      }
      // unresolved_record_survives_restart
      assertEquals(1, journalFiles(tmp, ".json").size(), "unresolved_record_survives_restart");
      try (Child b = replayChild(serve, KEY, "-", tmp, "-")) {
        b.await("the replayed settlement", l -> l.startsWith("settled " + id + " committed replayed=true"), Duration.ofSeconds(30));
        b.awaitExit();
      }
      waitFor("both commits logged", serve, id, l -> l.size() >= 2);
      List<JsonNode> reqs = settlement(serve, id);
      assertEquals(List.of("commit", "commit"), endpoints(reqs), "expected_requests: commit, commit_same_key_after_restart");
      oneKey(reqs);
      appliedOnce(reqs); // settlement_occurs_at_most_once
      assertEquals(List.of(), journalFiles(tmp, ".json"), "successful_replay_removes_record");
    }
  }

  /** CR-DURABLE-002: replayed expired commit switches durably to event mode. */
  @Test
  void replayedExpiredCommitSwitchesDurablyToEventMode() throws Exception {
    try (ServeProcess serve =
        ServeProcess.start(
            "--fault", "commit:1=hold=60000",
            "--fault", "commit:2=410:RESERVATION_EXPIRED",
            "--fault", "events:1=hold=60000")) {
      String id;
      try (Child a = commitChild(serve, KEY, "-", tmp)) { // journal_contains_commit
        id = a.reservation();
        a.await("the commit sent", l -> l.startsWith("decision " + id) && l.contains("\"next\":\"wait\""), Duration.ofSeconds(20));
        a.kill();
      }
      try (Child b = replayChild(serve, KEY, "-", tmp, "-")) { // process_restarted
        // commit_reservation_expired, then the event mode is persisted, then the event is sent
        String eventSent = b.await("the event sent", l -> l.startsWith("decision " + id) && l.contains("\"mode\":\"event\"") && l.contains("\"next\":\"wait\""), Duration.ofSeconds(30));
        int sentAt = b.lines.indexOf(eventSent);
        boolean persistedFirst = false;
        for (int i = 0; i < sentAt; i++) {
          String l = b.lines.get(i);
          if (l.startsWith("decision " + id) && l.contains("\"class\":\"persisted\"") && l.contains("\"mode\":\"event\"")) {
            persistedFirst = true;
          }
        }
        assertTrue(persistedFirst, "event_mode_is_persisted_before_event_attempt: " + b.lines);
        List<Path> recs = journalFiles(tmp, ".json");
        assertEquals(1, recs.size());
        assertTrue(Files.readString(recs.get(0)).contains("\"mode\":\"event\""), "event_mode_is_persisted_before_event_attempt: on disk");
        b.kill(); // process_terminated_after_mode_switch
      }
      try (Child c = replayChild(serve, KEY, "-", tmp, "-")) { // process_restarted
        c.await("the event applied", l -> l.startsWith("settled " + id + " applied replayed=true"), Duration.ofSeconds(30));
        c.awaitExit();
      }
      // serve logs a request when it is answered: the two held ones (the killed processes')
      // are still held (never applied while the test runs), so the log shows
      // commit_same_key_after_restart (410) and event_same_key_after_restart (applied).
      List<JsonNode> reqs = settlement(serve, id);
      assertEquals(List.of("commit", "events"), endpoints(reqs),
          "expected_requests: commit_same_key_after_restart, event_same_key_after_restart");
      assertEquals(410, reqs.get(0).path("status").asInt());
      oneKey(reqs);
      assertTrue(reqs.get(1).path("applied").asBoolean(), "the event applied");
      appliedOnce(reqs); // settlement_occurs_at_most_once
      assertEquals(List.of(), journalFiles(tmp, ".json"), "successful_event_removes_record");
    }
  }

  /** CR-DURABLE-003: rate-limit floor survives restart. */
  @Test
  void rateLimitFloorSurvivesRestart() throws Exception {
    try (ServeProcess serve = ServeProcess.start("--fault", "commit:1=429,retry-after=3")) {
      String id;
      long notBefore;
      try (Child a = commitChild(serve, KEY, "-", tmp)) {
        id = a.reservation();
        // commit_429_with_retry_after, then the floor is journaled
        a.await("the floor persisted", l -> l.startsWith("decision " + id) && l.contains("\"attempt\":2,\"class\":\"persisted\""), Duration.ofSeconds(20));
        a.kill(); // process_terminated_after_journal_write
      }
      List<Path> recs = journalFiles(tmp, ".json");
      assertEquals(1, recs.size());
      notBefore = VectorReplay.MAPPER.readTree(Files.readString(recs.get(0))).path("not_before_ms").asLong();
      assertTrue(notBefore > System.currentTimeMillis(), "process_restarted_before_retry_after");
      try (Child b = replayChild(serve, KEY, "-", tmp, "-")) {
        String sent = b.await("the retry sent", l -> l.startsWith("decision " + id) && l.contains("\"next\":\"wait\""), Duration.ofSeconds(30));
        long wall = Long.parseLong(sent.split(" ")[2].substring("wall=".length()));
        assertTrue(wall >= notBefore, "no_retry_before_persisted_not_before: sent at " + wall + ", floor " + notBefore);
        b.await("the replayed settlement", l -> l.startsWith("settled " + id + " committed replayed=true"), Duration.ofSeconds(30));
        b.awaitExit();
      }
      List<JsonNode> reqs = settlement(serve, id);
      assertEquals(List.of("commit", "commit"), endpoints(reqs), "expected_requests: commit, commit_same_key_after_retry_after");
      oneKey(reqs);
      long gap = reqs.get(1).path("arrived_ms").asLong() - reqs.get(0).path("arrived_ms").asLong();
      assertTrue(gap >= 2_900, "no_retry_before_persisted_not_before (serve's clock): " + gap + " ms");
      appliedOnce(reqs);
      assertEquals(List.of(), journalFiles(tmp, ".json"), "successful_replay_removes_record");
    }
  }

  /** CR-DURABLE-004: tenant journal survives API-key rotation. */
  @Test
  void tenantJournalSurvivesApiKeyRotation() throws Exception {
    String oldKey = "sk-old-rotated-key-1234";
    try (ServeProcess serve = ServeProcess.start("--fault", "commit:1=hold=60000")) {
      String id;
      try (Child a = commitChild(serve, oldKey, "acme", tmp)) { // journal_contains_commit_with_tenant_identity
        id = a.reservation();
        a.await("the commit sent", l -> l.startsWith("decision " + id) && l.contains("\"next\":\"wait\""), Duration.ofSeconds(20));
        a.kill();
      }
      // old_api_key_is_not_stored
      try (Stream<Path> s = Files.walk(tmp)) {
        for (Path p : s.filter(Files::isRegularFile).collect(Collectors.toList())) {
          assertFalse(Files.readString(p, StandardCharsets.ISO_8859_1).contains(oldKey), "old_api_key_is_not_stored: " + p);
          assertFalse(p.toString().contains(oldKey), "old_api_key_is_not_stored: " + p);
        }
      }
      try (Child b = replayChild(serve, "sk-new-rotated-key-5678", "acme", tmp, "-")) { // api_key_rotated
        b.await("the replayed settlement", l -> l.startsWith("settled " + id + " committed replayed=true"), Duration.ofSeconds(30));
        b.awaitExit();
      }
      // The first process's commit is still held by serve: its request line comes only when it
      // is answered, its held line is there already.
      List<JsonNode> reqs = settlement(serve, id);
      assertEquals(List.of("commit"), endpoints(reqs), "expected_requests: commit_same_key_after_restart");
      oneKey(reqs); // new_tenant_credential_finds_record
      assertTrue(reqs.get(0).path("applied").asBoolean(), "new_tenant_credential_finds_record: applied");
      List<JsonNode> held = serve.held("commit");
      assertEquals(1, held.size(), "the killed process's commit reached serve: " + held);
      assertEquals(id, held.get(0).path("reservation_id").textValue());
      assertEquals(
          reqs.get(0).path("header_key").textValue(),
          held.get(0).path("header_key").textValue(),
          "commit_same_key_after_restart: the replay used the killed process's key");
      assertEquals(List.of(), journalFiles(tmp, ".json"));
    }
  }

  /** CR-DURABLE-005: corrupt or unsupported journal record is quarantined. */
  @Test
  void corruptAndUnsupportedRecordsAreQuarantined() throws Exception {
    try (ServeProcess serve = ServeProcess.start()) {
      String good = create(serve, "c-good");
      String base = serve.base.toString();
      try (Journal j = Journal.open(tmp, base, KEY, null)) {
        for (String id : List.of("r-corrupt", "r-version", good)) {
          try (Settlement s = Settlement.commit(id, "{\"actual\":" + ACTUAL + "}").baseUrl(base)
              .build(System.nanoTime(), System.currentTimeMillis())) {
            j.persist(s, System.nanoTime());
          }
        }
        j.releaseClaim("r-corrupt");
        j.releaseClaim("r-version");
        j.releaseClaim(good);
      }
      for (Path p : journalFiles(tmp, ".json")) {
        String text = Files.readString(p);
        if (text.contains("r-corrupt")) {
          Files.writeString(p, text.substring(0, text.length() - 7)); // truncated
        } else if (text.contains("r-version")) {
          Files.writeString(p, text.replace("\"version\":1", "\"version\":99")); // unsupported
        }
      }
      try (Child b = replayChild(serve, KEY, "-", tmp, "-")) { // process_restarted
        b.await("the valid record settled", l -> l.startsWith("settled " + good + " committed replayed=true"), Duration.ofSeconds(30));
        b.awaitExit();
        // corruption_is_reported
        List<String> q = b.lines.stream().filter(l -> l.startsWith("quarantined ")).collect(Collectors.toList());
        assertEquals(2, q.size(), "corruption_is_reported: " + b.lines);
        assertTrue(q.stream().anyMatch(l -> l.contains("version")), "unsupported_record_version_is_quarantined: " + q);
      }
      // corrupt_record_is_quarantined, unsupported_record_version_is_quarantined
      assertEquals(2, journalFiles(tmp, ".corrupt").size(), "corrupt_record_is_quarantined");
      assertEquals(List.of(), journalFiles(tmp, ".json"), "other_valid_records_still_replay (and are removed)");
      // other_valid_records_still_replay
      assertEquals(List.of("commit"), endpoints(settlement(serve, good)), "other_valid_records_still_replay");
      assertEquals(List.of(), settlement(serve, "r-corrupt"), "no request for a quarantined record");
      assertEquals(List.of(), settlement(serve, "r-version"), "no request for a quarantined record");
    }
  }

  /** CR-DURABLE-006: concurrent replay remains exactly once. */
  @Test
  void concurrentReplayRemainsExactlyOnce() throws Exception {
    try (ServeProcess serve = ServeProcess.start("--fault", "commit:1=hold=60000")) {
      String id;
      try (Child a = commitChild(serve, KEY, "-", tmp)) { // journal_contains_commit
        id = a.reservation();
        a.await("the commit sent", l -> l.startsWith("decision " + id) && l.contains("\"next\":\"wait\""), Duration.ofSeconds(20));
        a.kill();
      }
      Path barrier = tmp.resolve("go");
      try (Child b = replayChild(serve, KEY, "-", tmp, barrier.toString());
          Child c = replayChild(serve, KEY, "-", tmp, barrier.toString())) {
        b.await("b ready", "ready"::equals, Duration.ofSeconds(30));
        c.await("c ready", "ready"::equals, Duration.ofSeconds(30));
        Files.createFile(barrier); // two_independent_workers_replay_same_record, released at once
        b.awaitExit();
        c.awaitExit();
        long settled = Stream.concat(b.lines.stream(), c.lines.stream())
            .filter(l -> l.startsWith("settled " + id + " committed replayed=true")).count();
        assertEquals(1, settled, "exactly one worker settled it: " + b.lines + c.lines);
      }
      List<JsonNode> reqs = settlement(serve, id);
      oneKey(reqs); // concurrent_commit_same_key
      // The first process's commit is still held by serve (logged only when answered): one
      // replayed commit from the two workers.
      assertEquals(1, reqs.size(), "one replayed commit from two workers: " + reqs);
      appliedOnce(reqs); // settlement_occurs_at_most_once
      assertEquals(List.of(), journalFiles(tmp, ".json"), "terminal_record_is_removed");
    }
  }

  /** CR-DURABLE-007: journal filenames preserve distinct arbitrary reservation identifiers. */
  @Test
  void journalFileNamesPreserveDistinctIds() throws Exception {
    try (ServeProcess serve = ServeProcess.start()) {
      String base = serve.base.toString();
      String foreign = "http://127.0.0.1:9/other-server"; // migrated by the scan, never sent here
      Path partition;
      try (Journal j = Journal.open(tmp, base, KEY, null)) {
        partition = j.dir();
        // standard_filename_is_sha256_of_exact_utf8_identifier; distinct_identifiers_never_share_a_journal_file
        for (String id : List.of("a/b", "a_b", "a:b", "é/ü")) {
          try (Settlement s = Settlement.commit(id, "{\"actual\":" + ACTUAL + "}").baseUrl(foreign)
              .build(System.nanoTime(), System.currentTimeMillis())) {
            j.persist(s, System.nanoTime());
            j.releaseClaim(id);
          }
          assertTrue(Files.exists(partition.resolve("v2-" + sha256(id) + ".json")),
              "standard_filename_is_sha256_of_exact_utf8_identifier: " + id);
        }
      }
      assertEquals(4, journalFiles(partition, ".json").size(), "distinct_identifiers_never_share_a_journal_file");
      // A legacy record (an older SDK's name: every other character replaced by '_') for id "x/y",
      // whose legacy name "x_y.json" collides with the id "x_y" (whose v2 record exists).
      try (Journal j = Journal.open(tmp, base, KEY, null);
          Settlement s = Settlement.commit("x_y", "{\"actual\":" + ACTUAL + "}").baseUrl(foreign)
              .build(System.nanoTime(), System.currentTimeMillis())) {
        j.persist(s, System.nanoTime());
        j.releaseClaim("x_y");
      }
      String v2xy = Files.readString(partition.resolve("v2-" + sha256("x_y") + ".json"));
      Files.writeString(partition.resolve("x_y.json"), v2xy.replace("\"x_y\"", "\"x/y\""));
      String xy = sha256("x/y");
      try (Child b = replayChild(serve, KEY, "-", tmp, "-")) { // legacy_record_encountered
        b.awaitExit();
        assertTrue(b.lines.stream().anyMatch(l -> l.startsWith("migrated ") && l.contains("x_y.json -> ") && l.contains("v2-" + xy)),
            "matching_legacy_record_migrates_without_deleting_collision: " + b.lines);
      }
      assertTrue(Files.exists(partition.resolve("v2-" + sha256("x/y") + ".json")), "migrated to its v2 name");
      assertTrue(Files.exists(partition.resolve("v2-" + sha256("x_y") + ".json")),
          "matching_legacy_record_migrates_without_deleting_collision: the other id's record stays");
      assertFalse(Files.exists(partition.resolve("x_y.json")), "the legacy name is gone");
      assertEquals(List.of(), serve.requests("commit"), "expected_requests: none (records of another server)");
    }
  }
}
