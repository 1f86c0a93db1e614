package io.leasebeat;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.stream.Collectors;
import java.util.stream.Stream;

/**
 * Replays one settlement vector (tests/vectors/settlement/*.json, format in settlement.md,
 * "Vectors", and docs/settlement-vectors.md) through the public Java API ({@link Settlement}), like
 * the Rust replay (core/src/scenario/settlement.rs): deterministic keys "key-1", and the harness's
 * own rule checks on every step (ST-1 across restarts, no send before its due time, before the
 * acknowledged record's not_before_ms on the wall clock, or while a persist is unacknowledged; at
 * most one terminal success). Each step's decision is turned into the vectors' vocabulary from the
 * Java objects alone and compared with the step's expect.
 */
final class SettleReplay {
  private static final JsonNodeFactory NODES = JsonNodeFactory.instance;
  private static final long DEFAULT_WALL_BASE_MS = 1_785_585_600_000L;

  private SettleReplay() {}

  /** Every *.json of the settlement vector directory, sorted. */
  static List<Path> files() throws IOException {
    Path dir = VectorReplay.vectorsDir().resolve("settlement");
    try (Stream<Path> s = Files.list(dir)) {
      return s.filter(p -> p.getFileName().toString().endsWith(".json"))
          .sorted()
          .collect(Collectors.toList());
    }
  }

  static final class Mismatch extends AssertionError {
    private static final long serialVersionUID = 1L;
    final String field;

    Mismatch(String id, int step, String field, Object expected, Object got) {
      super(id + ": step " + step + ": " + field + ": expected " + expected + ", got " + got);
      this.field = field;
    }
  }

  private static final class World {
    Settlement s;
    SettlementRecord store;
    SettlementRecord writing;
    final List<String> keys = new ArrayList<>();
    int successes;
    long wallOffset = DEFAULT_WALL_BASE_MS;
  }

  /** A body given in a file: an object (its exact JSON text) or a string of raw text. */
  private static String given(JsonNode v) throws IOException {
    if (v.isObject()) {
      return VectorReplay.MAPPER.writeValueAsString(v);
    }
    if (v.isTextual()) {
      return v.textValue();
    }
    throw new IllegalArgumentException("a body is an object or a string of raw text, got " + v);
  }

  static int replay(Path file) throws IOException {
    return replay(VectorReplay.MAPPER.readTree(file.toFile()));
  }

  /** Replays a parsed scenario; returns the number of steps. */
  static int replay(JsonNode root) throws IOException {
    String id = root.get("id").textValue();
    JsonNode cfg = root.get("config");
    boolean release = cfg.path("release").asBoolean(false);
    String reservationId = cfg.get("reservation_id").textValue();
    Settlement.Builder builder;
    if (release) {
      builder = Settlement.release(reservationId);
    } else if (cfg.get("commit") == null || cfg.get("commit").isNull()) {
      builder = Settlement.withoutActual(reservationId);
    } else {
      builder = Settlement.commit(reservationId, given(cfg.get("commit")));
    }
    builder.keyPrefix("key-");
    if (cfg.has("base_url")) {
      builder.baseUrl(cfg.get("base_url").textValue());
    }
    if (cfg.has("event") && !cfg.get("event").isNull()) {
      builder.event(given(cfg.get("event")));
    }
    if (cfg.has("release_reason") && !cfg.get("release_reason").isNull()) {
      builder.releaseReason(cfg.get("release_reason").textValue());
    }
    Settlement.RetryPolicy retry = Settlement.RetryPolicy.DEFAULT;
    JsonNode r = cfg.get("retry");
    if (r != null) {
      retry =
          new Settlement.RetryPolicy(
              r.has("max_attempts") ? r.get("max_attempts").intValue() : retry.maxAttempts(),
              r.has("initial_ms") ? r.get("initial_ms").longValue() : retry.initialMillis(),
              r.has("max_ms") ? r.get("max_ms").longValue() : retry.maxMillis());
      builder.retry(retry);
    }
    World w = new World();
    JsonNode steps = root.get("steps");
    try {
      for (int i = 0; i < steps.size(); i++) {
        step(id, i, steps.get(i), builder, retry, w);
      }
    } finally {
      if (w.s != null) {
        w.s.close();
      }
    }
    return steps.size();
  }

  private static void step(
      String id, int i, JsonNode step, Settlement.Builder builder, Settlement.RetryPolicy retry, World w)
      throws IOException {
    long atNs = VectorReplay.msToNs(step.get("at"));
    long atMs = atNs / 1_000_000L;
    if (step.has("wall")) {
      w.wallOffset = step.get("wall").longValue() - atMs;
    }
    long wallMs = Math.max(0, w.wallOffset + atMs);
    SettlementDecision d = null;
    ObjectNode line;
    try {
      d = apply(id, i, step, builder, retry, w, atNs, wallMs);
      line = emit(w, d);
      after(id, i, w, d);
    } catch (LeaseException e) {
      line = NODES.objectNode();
      if (step.has("restart")) {
        line.put("next", "done");
        line.put("record", "quarantine");
      }
      line.put("error", e.code().wire());
      line.put("detail", e.getMessage());
    }
    JsonNode expect = step.get("expect");
    if (expect == null) {
      if (d == null) {
        throw new Mismatch(id, i, "error", "no error", line.get("error") + ": " + line.get("detail"));
      }
      return;
    }
    compare(id, i, expect, d, line, w);
  }

  private static Settlement live(String id, int i, World w) {
    if (w.s == null) {
      throw new Mismatch(id, i, "settlement", "a settlement", "none (refused or never built)");
    }
    return w.s;
  }

  private static SettlementDecision apply(
      String id,
      int i,
      JsonNode step,
      Settlement.Builder builder,
      Settlement.RetryPolicy retry,
      World w,
      long atNs,
      long wallMs)
      throws IOException {
    if (step.has("start")) {
      Settlement s = builder.build(atNs, wallMs);
      w.s = s;
      SettlementDecision d = s.lastDecision();
      w.writing = d.next() == Settlement.Next.PERSIST ? s.record().orElseThrow() : null;
      return d;
    }
    if (step.has("restart")) {
      if (w.s != null) {
        w.s.close();
      }
      w.s = null;
      w.writing = null;
      Settlement s;
      if (step.has("record")) {
        String text = given(step.get("record"));
        s = Settlement.fromRecord(text, retry, atNs, wallMs);
      } else {
        if (w.store == null) {
          throw new Mismatch(id, i, "restart", "an acknowledged record to replay", "none");
        }
        s = Settlement.fromRecord(w.store.jsonBytes(), retry, atNs, wallMs);
      }
      w.s = s;
      w.store = s.record().orElse(null);
      return s.lastDecision();
    }
    if (step.has("persisted")) {
      SettlementDecision d = live(id, i, w).handlePersisted(atNs);
      w.store = w.writing;
      w.writing = null;
      return d;
    }
    if (step.has("persist_failed")) {
      SettlementDecision d = live(id, i, w).handlePersistFailed(step.get("persist_failed").textValue(), atNs);
      w.writing = null;
      return d;
    }
    if (step.has("send")) {
      String endpoint = step.get("send").textValue();
      Settlement s = live(id, i, w);
      SettlementAction action = s.pollAction();
      if (action.type() != SettlementAction.Type.SEND) {
        throw new Mismatch(id, i, "send", "send " + endpoint, action);
      }
      SettleAttempt a = action.attempt().orElseThrow();
      if (!a.endpoint().wire().equals(endpoint)) {
        throw new Mismatch(id, i, "send", endpoint, a.endpoint().wire());
      }
      if (atNs < a.dueNanos()) {
        throw new Mismatch(id, i, "send", "no send before its due time " + a.dueNanos(), "sent at " + atNs);
      }
      if (w.store != null && !"release".equals(endpoint) && w.store.notBeforeMillis().isPresent()
          && wallMs < w.store.notBeforeMillis().getAsLong()) {
        throw new Mismatch(id, i, "send", "no send before not_before_ms " + w.store.notBeforeMillis(), "wall " + wallMs);
      }
      if (w.writing != null) {
        throw new Mismatch(id, i, "send", "no send while a persist is unacknowledged", "a send");
      }
      JsonNode bodyKey = VectorReplay.MAPPER.readTree(a.body()).get("idempotency_key");
      if (bodyKey == null || !a.key().equals(bodyKey.textValue())) {
        throw new Mismatch(id, i, "key", "the body's key = the header key", bodyKey);
      }
      if (!w.keys.isEmpty() && !w.keys.get(0).equals(a.key())) {
        throw new Mismatch(id, i, "key", w.keys.get(0) + " (ST-1)", a.key());
      }
      if (w.keys.isEmpty()) {
        w.keys.add(a.key());
      }
      return s.handleSent(a.id(), atNs);
    }
    if (step.has("recv")) {
      Settlement s = live(id, i, w);
      return s.handleResponse(inFlight(id, i, s), VectorReplay.parseRecv(step.get("recv")), atNs, wallMs);
    }
    if (step.has("fail")) {
      Settlement s = live(id, i, w);
      return s.handleFailure(
          inFlight(id, i, s), TransportFailure.fromWire(step.get("fail").textValue()), atNs);
    }
    throw new IllegalArgumentException(id + ": step " + i + ": no event");
  }

  private static long inFlight(String id, int i, Settlement s) {
    SettlementAction action = s.pollAction();
    if (action.type() != SettlementAction.Type.WAIT) {
      throw new Mismatch(id, i, "outcome", "an attempt in flight", action);
    }
    return action.attempt().orElseThrow().id();
  }

  /** The decision in the vectors' vocabulary, from the Java objects alone. */
  private static ObjectNode emit(World w, SettlementDecision d) {
    ObjectNode out = NODES.objectNode();
    out.put("class", d.classification().wire());
    out.put("mode", d.mode().wire());
    out.put("next", d.next().wire());
    d.atNanos().ifPresent(at -> out.put("at_ns", at));
    d.attempt().ifPresent(a -> out.put("attempt", a));
    d.code().ifPresent(c -> out.put("code", c));
    d.delayMillis().ifPresent(v -> out.put("delay_ms", v));
    d.detail().ifPresent(v -> out.put("detail", v));
    if (d.stopHeartbeat()) {
      out.put("heartbeat", "stop");
    }
    switch (d.next()) {
      case COMMIT:
      case EVENT:
      case RELEASE:
      case WAIT:
        {
          // The key's ordinal among the keys of the scenario (ST-1: always 1).
          String key = w.s.key();
          if (!w.keys.contains(key)) {
            w.keys.add(key);
          }
          out.put("key", w.keys.indexOf(key) + 1);
          break;
        }
      default:
        break;
    }
    d.notBeforeMillis().ifPresent(v -> out.put("not_before_ms", v));
    d.outcome().ifPresent(o -> out.put("outcome", o.wire()));
    d.record()
        .ifPresent(
            change -> {
              if (change == Settlement.RecordChange.WRITE) {
                ObjectNode rec = out.putObject("record");
                rec.put("mode", d.recordMode().orElseThrow().wire());
                if (d.recordNotBeforeMillis().isPresent()) {
                  rec.put("not_before_ms", d.recordNotBeforeMillis().getAsLong());
                } else {
                  rec.putNull("not_before_ms");
                }
              } else {
                out.put("record", change.wire());
              }
            });
    d.status().ifPresent(v -> out.put("status", v));
    if (!d.warnings().isEmpty()) {
      ArrayNode ws = out.putArray("warnings");
      d.warnings().forEach(x -> ws.add(x.wire()));
    }
    return out;
  }

  private static void after(String id, int i, World w, SettlementDecision d) {
    if (d.next() == Settlement.Next.PERSIST) {
      w.writing = w.s.record().orElseThrow();
    }
    if (d.record().orElse(null) == Settlement.RecordChange.REMOVE) {
      w.store = null;
    }
    if (d.outcome().map(Settlement.Outcome::isSuccess).orElse(false)) {
      w.successes++;
      if (w.successes > 1) {
        throw new Mismatch(id, i, "outcome", "at most one terminal success", "a second");
      }
    }
  }

  /** Numbers compared by value (BigInteger), everything else structurally. */
  private static JsonNode norm(JsonNode v) {
    if (v == null || v.isMissingNode()) {
      return NODES.nullNode();
    }
    if (v.isIntegralNumber()) {
      return NODES.numberNode(v.bigIntegerValue());
    }
    if (v.isObject()) {
      ObjectNode o = NODES.objectNode();
      for (Map.Entry<String, JsonNode> e : v.properties()) {
        o.set(e.getKey(), norm(e.getValue()));
      }
      return o;
    }
    if (v.isArray()) {
      ArrayNode a = NODES.arrayNode();
      v.forEach(x -> a.add(norm(x)));
      return a;
    }
    return v;
  }

  private static void compare(
      String id, int i, JsonNode expect, SettlementDecision d, ObjectNode line, World w)
      throws IOException {
    if (d == null && !expect.has("error")) {
      throw new Mismatch(id, i, "error", "no error", line.get("error") + ": " + line.get("detail"));
    }
    for (Map.Entry<String, JsonNode> e : expect.properties()) {
      String field = e.getKey();
      JsonNode want = e.getValue();
      switch (field) {
        case "at":
          {
            JsonNode got = line.get("at_ns");
            if (got == null || got.longValue() != VectorReplay.msToNs(want)) {
              throw new Mismatch(id, i, "at", want, got == null ? "absent" : got.longValue() / 1e6);
            }
            break;
          }
        case "record":
          {
            JsonNode got = line.get("record");
            if (want.isObject() && got != null && got.isObject()) {
              // A subset of the whole record being written.
              JsonNode full =
                  VectorReplay.MAPPER.readTree(w.s.record().orElseThrow().jsonBytes());
              for (Map.Entry<String, JsonNode> m : want.properties()) {
                if (!norm(full.get(m.getKey())).equals(norm(m.getValue()))) {
                  throw new Mismatch(id, i, "record." + m.getKey(), m.getValue(), full.get(m.getKey()));
                }
              }
            } else if (!norm(got).equals(norm(want))) {
              throw new Mismatch(id, i, "record", want, got == null ? "absent" : got);
            }
            break;
          }
        case "body":
          {
            JsonNode got = null;
            if (d != null) {
              switch (d.next()) {
                case COMMIT:
                case EVENT:
                case RELEASE:
                case WAIT:
                  got = VectorReplay.MAPPER.readTree(w.s.attempt().orElseThrow().body());
                  break;
                default:
                  break;
              }
            }
            if (!norm(got).equals(norm(want))) {
              throw new Mismatch(id, i, "body", want, got == null ? "absent" : got);
            }
            break;
          }
        case "warnings":
          {
            JsonNode got = line.has("warnings") ? line.get("warnings") : NODES.arrayNode();
            if (!norm(got).equals(norm(want))) {
              throw new Mismatch(id, i, "warnings", want, got);
            }
            break;
          }
        default:
          {
            JsonNode got = line.get(field);
            if (!norm(got).equals(norm(want))) {
              throw new Mismatch(id, i, field, want, got == null ? "absent" : got);
            }
          }
      }
    }
  }

  /** The text of a scenario with one step's expect replaced (for the harness's own tests). */
  static JsonNode withExpect(JsonNode root, int step, String expectJson) throws IOException {
    JsonNode copy = root.deepCopy();
    ((ObjectNode) copy.get("steps").get(step)).set("expect", VectorReplay.MAPPER.readTree(expectJson.getBytes(StandardCharsets.UTF_8)));
    return copy;
  }
}
