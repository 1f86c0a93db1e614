package io.leasebeat;

import com.fasterxml.jackson.core.StreamReadFeature;
import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.cfg.JsonNodeFeature;
import com.fasterxml.jackson.databind.json.JsonMapper;
import java.io.IOException;
import java.math.BigDecimal;
import java.math.BigInteger;
import java.math.RoundingMode;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.stream.Collectors;
import java.util.stream.Stream;

/**
 * Replays one scenario vector (tests/vectors/*.json, format in docs/heartbeat-contract.md) through the public
 * Java API, like the Rust replay (core/src/scenario.rs): deterministic keys "key-1", "key-2", ...,
 * origin 0, and the harness's own key check ("new" = never used on this lease, "same" = exactly the
 * previous attempt's key with a byte-identical body).
 */
final class VectorReplay {
  /** Exact numbers: integers as BigInteger (above 2^53 appear), decimals as exact BigDecimal. */
  static final JsonMapper MAPPER =
      JsonMapper.builder()
          .enable(DeserializationFeature.USE_BIG_INTEGER_FOR_INTS)
          .enable(DeserializationFeature.USE_BIG_DECIMAL_FOR_FLOATS)
          .configure(JsonNodeFeature.STRIP_TRAILING_BIGDECIMAL_ZEROES, false)
          .enable(StreamReadFeature.STRICT_DUPLICATE_DETECTION)
          .build();

  private VectorReplay() {}

  /** The vector directory: -Dleasebeat.vectors.dir (set by the pom), else ../tests/vectors. */
  static Path vectorsDir() {
    return Paths.get(System.getProperty("leasebeat.vectors.dir", "../tests/vectors"));
  }

  /** Every *.json file of the vector directory, sorted. */
  static List<Path> vectorFiles() throws IOException {
    return jsonFiles(vectorsDir());
  }

  private static List<Path> jsonFiles(Path dir) throws IOException {
    try (Stream<Path> s = Files.list(dir)) {
      return s.filter(p -> p.getFileName().toString().endsWith(".json"))
          .sorted()
          .collect(Collectors.toList());
    }
  }

  static final class Mismatch extends AssertionError {
    private static final long serialVersionUID = 1L;

    Mismatch(String id, int step, String field, Object expected, Object got) {
      super(id + ": step " + step + ": " + field + ": expected " + expected + ", got " + got);
    }
  }

  /** Scenario milliseconds (integer, or up to 3 decimals) to nanoseconds: round(ms x 1000) x 1000. */
  static long msToNs(JsonNode v) {
    if (!v.isNumber()) {
      throw new IllegalArgumentException("time " + v + " is not a number");
    }
    BigDecimal ms = v.decimalValue();
    if (ms.signum() < 0) {
      throw new IllegalArgumentException("time " + v + " is negative");
    }
    BigInteger micros = ms.movePointRight(3).setScale(0, RoundingMode.HALF_UP).toBigIntegerExact();
    return micros.multiply(BigInteger.valueOf(1000)).longValueExact();
  }

  static Num expectedNum(JsonNode v) {
    if (v.isTextual()) {
      return Num.parse(v.asText()); // "inf" or "-inf"
    }
    if (!v.isIntegralNumber()) {
      throw new IllegalArgumentException(v + " is not an exact integer");
    }
    return Num.of(v.bigIntegerValue());
  }

  static Response parseRecv(JsonNode r) throws IOException {
    Response response = Response.of(r.get("status").intValue());
    JsonNode headers = r.get("headers");
    if (headers != null) {
      for (Map.Entry<String, JsonNode> h : headers.properties()) {
        if (h.getValue().isArray()) {
          for (JsonNode v : h.getValue()) {
            response = response.withHeader(h.getKey(), v.textValue());
          }
        } else {
          response = response.withHeader(h.getKey(), h.getValue().textValue());
        }
      }
    }
    if (r.has("body")) {
      response = response.withBody(MAPPER.writeValueAsBytes(r.get("body")));
    } else if (r.has("raw")) {
      response = response.withBody(r.get("raw").textValue().getBytes(StandardCharsets.UTF_8));
    }
    JsonNode timing = r.get("timing");
    if (timing != null) {
      if (!"unknown".equals(timing.textValue())) {
        throw new IllegalArgumentException("recv.timing must be \"unknown\", got " + timing);
      }
      response = response.withTimingUnknown();
    }
    return response;
  }

  /** Replays one file; returns the number of decisions checked against an expect. */
  static int replay(Path file) throws IOException {
    JsonNode root = MAPPER.readTree(file.toFile());
    String id = root.get("id").textValue();
    JsonNode cfg = root.get("config");
    Heartbeat.Builder builder = Heartbeat.builder().keyPrefix("key-").originNanos(0);
    JsonNode ttl = cfg.get("ttl_ms");
    if (ttl != null && !ttl.isNull()) {
      builder.ttlMillis(ttl.bigIntegerValue().longValueExact());
    }
    JsonNode timeout = cfg.get("request_timeout_ms");
    if (timeout == null || timeout.isNull()) {
      builder.unboundedTimeout();
    } else {
      builder.requestTimeoutMillis(timeout.bigIntegerValue());
    }
    int checked = 0;
    JsonNode steps = root.get("steps");
    Heartbeat built;
    Decision adoptedFirst = null;
    Set<String> usedKeys = new HashSet<>();
    String lastKey = null;
    byte[] lastBody = null;
    JsonNode first = steps.get(0);
    if (first.has("adopt")) {
      JsonNode adopt = first.get("adopt");
      AdoptedCreate.Builder create =
          AdoptedCreate.builder()
              .key(adopt.get("key").textValue())
              .receivedNanos(msToNs(first.get("at")));
      if (adopt.has("sent")) {
        create.sentNanos(msToNs(adopt.get("sent")));
      }
      if (adopt.has("request")) {
        lastBody = MAPPER.writeValueAsBytes(adopt.get("request"));
        create.requestBody(lastBody);
      }
      if (adopt.has("recv")) {
        create.response(parseRecv(adopt.get("recv")));
      } else if (adopt.has("fail")) {
        create.failure(TransportFailure.fromWire(adopt.get("fail").textValue()));
      } else {
        throw new IllegalArgumentException(id + ": adopt has neither recv nor fail");
      }
      Adopted adopted = builder.adopt(create.build());
      built = adopted.heartbeat();
      adoptedFirst = adopted.decision();
      lastKey = adopt.get("key").textValue();
      usedKeys.add(lastKey);
    } else {
      built = builder.build();
    }
    try (Heartbeat hb = built) {
      for (int i = 0; i < steps.size(); i++) {
        JsonNode step = steps.get(i);
        long at = msToNs(step.get("at"));
        Decision d;
        if (i == 0 && adoptedFirst != null) {
          d = adoptedFirst;
        } else if (step.has("adopt")) {
          throw new IllegalArgumentException(id + ": step " + i + ": adopt must be the first step");
        } else if (step.has("send")) {
          Action a = hb.pollAction();
          if (a.type() != Action.Type.SEND) {
            throw new Mismatch(id, i, "send", "send " + step.get("send").textValue(), a);
          }
          Attempt attempt = a.attempt().orElseThrow();
          if (!attempt.kind().wire().equals(step.get("send").textValue())) {
            throw new Mismatch(id, i, "send", step.get("send").textValue(), attempt.kind().wire());
          }
          hb.handleSent(attempt.id(), at);
          lastKey = attempt.key();
          lastBody = attempt.body();
          usedKeys.add(attempt.key());
          continue;
        } else if (step.has("recv")) {
          d = hb.handleResponse(outstanding(hb, id, i), parseRecv(step.get("recv")), at);
        } else if (step.has("fail")) {
          d =
              hb.handleFailure(
                  outstanding(hb, id, i), TransportFailure.fromWire(step.get("fail").textValue()), at);
        } else if (step.has("cancel")) {
          d = hb.cancel(at);
        } else {
          throw new IllegalArgumentException(id + ": step " + i + " has no event");
        }
        checkJsonAgrees(id, i, d);
        // The harness's own check of S-4: what the key claim means in bytes.
        if (d.key().isPresent()) {
          Attempt cur = hb.attempt().orElseThrow();
          // After an adopted create without its request body, only the key can be compared.
          boolean ok =
              d.key().get() == KeyUse.NEW
                  ? !usedKeys.contains(cur.key())
                  : cur.key().equals(lastKey) && (lastBody == null || Arrays.equals(cur.body(), lastBody));
          if (!ok) {
            throw new Mismatch(id, i, "key", d.key().get().wire() + " key really " + d.key().get().wire(), cur.key());
          }
        }
        JsonNode expect = step.get("expect");
        if (expect != null) {
          compare(id, i, expect, d);
          checked++;
        }
      }
    }
    return checked;
  }

  private static long outstanding(Heartbeat hb, String id, int step) {
    Action a = hb.pollAction();
    if (a.type() != Action.Type.AWAIT_OUTCOME) {
      throw new Mismatch(id, step, "outcome", "an attempt in flight", a);
    }
    return a.attempt().orElseThrow().id();
  }

  /** The typed decision and its toJson() must say the same thing. */
  private static void checkJsonAgrees(String id, int step, Decision d) throws IOException {
    JsonNode j = MAPPER.readTree(d.toJson());
    String next = d.isStop() ? "stop" : d.send().orElseThrow().wire();
    if (!next.equals(j.path("next").textValue())) {
      throw new Mismatch(id, step, "toJson().next", next, j.path("next"));
    }
    Map<String, Num> numbers = d.numbers().asMap();
    JsonNode jn = j.get("numbers");
    if (jn.size() != numbers.size()) {
      throw new Mismatch(id, step, "toJson().numbers", numbers, jn);
    }
    for (Map.Entry<String, Num> e : numbers.entrySet()) {
      if (!expectedNum(jn.get(e.getKey())).equals(e.getValue())) {
        throw new Mismatch(id, step, "toJson().numbers." + e.getKey(), e.getValue(), jn.get(e.getKey()));
      }
    }
    JsonNode jp = j.get("proven_until");
    Optional<Num> provenFromJson =
        jp == null
            ? Optional.empty()
            : Optional.of(jp.isTextual() ? Num.parse(jp.textValue()) : Num.of(BigInteger.valueOf(msToNs(jp))));
    if (!provenFromJson.equals(d.provenUntil())) {
      throw new Mismatch(id, step, "toJson().proven_until", d.provenUntil(), jp);
    }
    if (d.provenForever() != provenFromJson.map(Num::isInfinite).orElse(false)) {
      throw new Mismatch(id, step, "provenForever()", provenFromJson, d.provenForever());
    }
    checkLongAgrees(id, step, "expires_at_ms", j, d.expiresAtMs());
    checkLongAgrees(id, step, "remaining_ttl_ms", j, d.remainingTtlMs());
    if (d.at().isPresent()) {
      Num at = d.at().get();
      JsonNode ja = j.get("at");
      Num fromJson = ja.isTextual() ? Num.parse(ja.textValue()) : Num.of(BigInteger.valueOf(msToNs(ja)));
      if (!fromJson.equals(at)) {
        throw new Mismatch(id, step, "toJson().at", at, ja);
      }
    }
  }

  private static void checkLongAgrees(
      String id, int step, String field, JsonNode json, java.util.OptionalLong got) {
    JsonNode v = json.get(field);
    java.util.OptionalLong fromJson =
        v == null ? java.util.OptionalLong.empty() : java.util.OptionalLong.of(v.bigIntegerValue().longValueExact());
    if (!fromJson.equals(got)) {
      throw new Mismatch(id, step, "toJson()." + field, got, v);
    }
  }

  private static void compare(String id, int step, JsonNode expect, Decision d) {
    for (Map.Entry<String, JsonNode> e : expect.properties()) {
      String field = e.getKey();
      JsonNode want = e.getValue();
      switch (field) {
        case "id":
          same(id, step, field, want, Optional.of(id));
          break;
        case "step":
          if (!want.isIntegralNumber() || want.bigIntegerValue().intValue() != step) {
            throw new Mismatch(id, step, field, want, step);
          }
          break;
        case "next":
          same(id, step, field, want, Optional.of(d.isStop() ? "stop" : d.send().orElseThrow().wire()));
          break;
        case "at":
          {
            Num w = want.isTextual() ? Num.parse(want.textValue()) : Num.of(msToNs(want));
            if (d.at().isEmpty()) {
              throw new Mismatch(id, step, field, want, "absent (a stop)");
            }
            if (!d.at().get().equals(w)) {
              throw new Mismatch(id, step, field, w + " ns", d.at().get() + " ns");
            }
            break;
          }
        case "key":
          same(id, step, field, want, d.key().map(KeyUse::wire));
          break;
        case "proven_until":
          {
            Optional<Num> w =
                want.isNull()
                    ? Optional.empty()
                    : Optional.of(want.isTextual() ? Num.parse(want.textValue()) : Num.of(msToNs(want)));
            if (!w.equals(d.provenUntil())) {
              throw new Mismatch(
                  id, step, field, w.map(n -> n + " ns").orElse("absent"),
                  d.provenUntil().map(n -> n + " ns").orElse("absent"));
            }
            if (w.isPresent() && w.get().isInfinite() != d.provenForever()) {
              throw new Mismatch(id, step, "provenForever()", w.get(), d.provenForever());
            }
            break;
          }
        case "expires_at_ms":
          sameLong(id, step, field, want, d.expiresAtMs());
          break;
        case "remaining_ttl_ms":
          sameLong(id, step, field, want, d.remainingTtlMs());
          break;
        case "key_index":
          {
            Optional<BigInteger> got =
                d.keyIndex().isPresent()
                    ? Optional.of(BigInteger.valueOf(d.keyIndex().getAsLong()))
                    : Optional.empty();
            Optional<BigInteger> w =
                want.isNull() ? Optional.empty() : Optional.of(want.bigIntegerValue());
            if (!got.equals(w)) {
              throw new Mismatch(id, step, field, want, got.map(Object::toString).orElse("absent"));
            }
            break;
          }
        case "reason":
          same(id, step, field, want, d.stopReason().map(StopReason::wire));
          break;
        case "mode":
          same(id, step, field, want, d.mode().map(Mode::wire));
          break;
        case "numbers":
          for (Map.Entry<String, JsonNode> ne : want.properties()) {
            Num w = expectedNum(ne.getValue());
            Optional<Num> got = d.numbers().get(ne.getKey());
            if (got.isEmpty() || !got.get().equals(w)) {
              throw new Mismatch(
                  id, step, "numbers." + ne.getKey(), w, got.map(Num::toString).orElse("absent"));
            }
          }
          break;
        case "warnings":
          {
            List<String> w = new ArrayList<>();
            want.forEach(x -> w.add(x.textValue()));
            List<String> got = d.warnings().stream().map(Warning::wire).collect(Collectors.toList());
            if (!w.equals(got)) {
              throw new Mismatch(id, step, field, w, got);
            }
            break;
          }
        default:
          throw new IllegalArgumentException(id + ": step " + step + ": unknown expect field " + field);
      }
    }
  }

  private static void sameLong(
      String id, int step, String field, JsonNode want, java.util.OptionalLong got) {
    if (!want.isNull() && !want.isIntegralNumber()) {
      throw new IllegalArgumentException(id + ": step " + step + ": " + field + " must be an integer");
    }
    java.util.OptionalLong w =
        want.isNull() ? java.util.OptionalLong.empty() : java.util.OptionalLong.of(want.bigIntegerValue().longValueExact());
    if (!w.equals(got)) {
      throw new Mismatch(id, step, field, want, got);
    }
  }

  private static void same(String id, int step, String field, JsonNode want, Optional<String> got) {
    Optional<String> w = want.isNull() ? Optional.empty() : Optional.of(want.asText());
    if (!want.isNull() && !want.isTextual()) {
      throw new Mismatch(id, step, field, want, got.orElse("absent"));
    }
    if (!w.equals(got)) {
      throw new Mismatch(id, step, field, want, got.orElse("absent"));
    }
  }
}
