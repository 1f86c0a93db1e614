package io.leasebeat;

import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Objects;
import java.util.Optional;
import java.util.OptionalLong;

/**
 * One decision of the scheduler: the answer to an outcome or a cancel, with the numbers behind it.
 * Immutable.
 *
 * <p>Times: {@link #at()} is in nanoseconds since the heartbeat's origin ({@link
 * Heartbeat#originNanos()}), exact; {@link #dueNanoTime()} and {@link #delayNanos(long)} translate
 * it to {@link System#nanoTime()} terms. {@link #toJson()} is the core's emitted-decision JSON, in
 * which {@code "at"} is in milliseconds since the origin.
 *
 * <p>A final class with exactly the members a record of its components would have (the canonical
 * constructor, one accessor per component, {@code equals}, {@code hashCode}, {@code toString}),
 * but not a {@code record}: a heartbeat's decisions keep the core's primitive slots and build their
 * components on first access, and write their JSON only when {@link #toJson()} is first called,
 * which a record's final components could not.
 */
public final class Decision {
  /** The components, decoded from {@link #raw} on first access for a heartbeat's decisions. */
  static final class Parts {
    final Optional<String> reservationId;
    final Optional<AttemptKind> send;
    final Optional<StopReason> stopReason;
    final Optional<Num> at;
    final Optional<KeyUse> key;
    final OptionalLong keyIndex;
    final Optional<Mode> mode;
    final Numbers numbers;
    final List<Warning> warnings;
    final OutcomeClass outcome;
    final Optional<String> detail;
    final Optional<Num> provenUntil;
    final OptionalLong expiresAtMs;
    final OptionalLong remainingTtlMs;

    Parts(
        Optional<String> reservationId,
        Optional<AttemptKind> send,
        Optional<StopReason> stopReason,
        Optional<Num> at,
        Optional<KeyUse> key,
        OptionalLong keyIndex,
        Optional<Mode> mode,
        Numbers numbers,
        List<Warning> warnings,
        OutcomeClass outcome,
        Optional<String> detail,
        Optional<Num> provenUntil,
        OptionalLong expiresAtMs,
        OptionalLong remainingTtlMs) {
      this.reservationId = Objects.requireNonNull(reservationId, "reservationId");
      this.send = Objects.requireNonNull(send, "send");
      this.stopReason = Objects.requireNonNull(stopReason, "stopReason");
      this.at = Objects.requireNonNull(at, "at");
      this.key = Objects.requireNonNull(key, "key");
      this.keyIndex = Objects.requireNonNull(keyIndex, "keyIndex");
      this.mode = Objects.requireNonNull(mode, "mode");
      this.numbers = Objects.requireNonNull(numbers, "numbers");
      this.warnings = List.copyOf(warnings);
      this.outcome = Objects.requireNonNull(outcome, "outcome");
      this.detail = Objects.requireNonNull(detail, "detail");
      this.provenUntil = Objects.requireNonNull(provenUntil, "provenUntil");
      this.expiresAtMs = Objects.requireNonNull(expiresAtMs, "expiresAtMs");
      this.remainingTtlMs = Objects.requireNonNull(remainingTtlMs, "remainingTtlMs");
      if (provenUntil.isPresent()
          && (provenUntil.get().signum() < 0 || provenUntil.get().equals(Num.NEG_INF))) {
        throw new IllegalArgumentException("provenUntil must not be negative");
      }
      if (send.isPresent() == stopReason.isPresent()) {
        throw new IllegalArgumentException("exactly one of send and stopReason must be present");
      }
    }
  }

  private final long originNanos;

  /**
   * The native slots this decision was decoded from ({@code Slots.DEC_LEN} from offset 0; null
   * when built from components): the components are decoded from them on first access, and the
   * JSON is written from them on first {@link #toJson()}.
   */
  private final long[] raw;

  /**
   * A native decision's texts: the UTF-8 bytes of its reservation id then of its detail (their
   * lengths in {@link #raw}; null: neither), decoded on first use; a text too long for the native
   * text buffer came as a String ({@link #rawReservationId}, {@link #rawDetail}).
   */
  private final byte[] rawText;

  private final String rawReservationId;

  private final String rawDetail;

  /**
   * The components: set by the public constructor, else decoded from {@link #raw} on first use (a
   * racy but idempotent cache: {@link Parts} has only final fields, so it is safely published).
   */
  private Parts parts;

  /** The JSON text; written from {@link #raw} on first use (a racy but idempotent cache). */
  private String json;

  /**
   * Checks that no component is null and exactly one of send and stopReason is present.
   *
   * @param reservationId see {@link #reservationId()}
   * @param send see {@link #send()}
   * @param stopReason see {@link #stopReason()}
   * @param at see {@link #at()}
   * @param key see {@link #key()}
   * @param keyIndex see {@link #keyIndex()}
   * @param mode see {@link #mode()}
   * @param numbers see {@link #numbers()}
   * @param warnings see {@link #warnings()}
   * @param outcome see {@link #outcome()}
   * @param detail see {@link #detail()}
   * @param provenUntil see {@link #provenUntil()}
   * @param expiresAtMs see {@link #expiresAtMs()}
   * @param remainingTtlMs see {@link #remainingTtlMs()}
   * @param originNanos see {@link #originNanos()}
   * @param json see {@link #json()}
   */
  public Decision(
      Optional<String> reservationId,
      Optional<AttemptKind> send,
      Optional<StopReason> stopReason,
      Optional<Num> at,
      Optional<KeyUse> key,
      OptionalLong keyIndex,
      Optional<Mode> mode,
      Numbers numbers,
      List<Warning> warnings,
      OutcomeClass outcome,
      Optional<String> detail,
      Optional<Num> provenUntil,
      OptionalLong expiresAtMs,
      OptionalLong remainingTtlMs,
      long originNanos,
      String json) {
    this.parts =
        new Parts(
            reservationId, send, stopReason, at, key, keyIndex, mode, numbers, warnings, outcome,
            detail, provenUntil, expiresAtMs, remainingTtlMs);
    this.originNanos = originNanos;
    this.raw = null;
    this.rawText = null;
    this.rawReservationId = null;
    this.rawDetail = null;
    this.json = Objects.requireNonNull(json, "json");
  }

  /**
   * A decision of the core, kept as its native slots ({@code raw}, {@code Slots.DEC_LEN} from
   * offset 0) and the UTF-8 bytes of its texts ({@code text}: the reservation id then the detail,
   * null for neither), both owned by this decision from now on; a text the slots mark as an object
   * is at {@code objs[oo + O_RID]} or {@code objs[oo + O_DETAIL]}. Components and texts are
   * decoded on first access, the JSON written by the core on demand.
   */
  Decision(long[] raw, byte[] text, Object[] objs, int oo, long originNanos) {
    this.raw = raw;
    this.rawText = text;
    this.rawReservationId =
        raw[Slots.D_RID_LEN] == -2 ? (String) objs[oo + Slots.O_RID] : null;
    this.rawDetail = raw[Slots.D_DETAIL_LEN] == -2 ? (String) objs[oo + Slots.O_DETAIL] : null;
    this.originNanos = originNanos;
  }

  /** Text {@code slot} of a native decision, from byte {@code from} of {@link #rawText}. */
  private String text(int slot, int from, String object) {
    long n = raw[slot];
    if (n == -2) {
      return object;
    }
    return n < 0 ? null : new String(rawText, from, (int) n, StandardCharsets.UTF_8);
  }

  private String rawRid() {
    return text(Slots.D_RID_LEN, 0, rawReservationId);
  }

  private String rawDetail() {
    return text(Slots.D_DETAIL_LEN, (int) Math.max(0, raw[Slots.D_RID_LEN]), rawDetail);
  }

  private Parts p() {
    Parts x = parts;
    if (x == null) {
      x = Slots.parts(raw, rawRid(), rawDetail());
      parts = x;
    }
    return x;
  }

  /**
   * The reservation, once a create succeeded.
   *
   * @return the reservation id
   */
  public Optional<String> reservationId() {
    return p().reservationId;
  }

  /**
   * The kind of attempt to send next; empty for a stop.
   *
   * @return the kind
   */
  public Optional<AttemptKind> send() {
    return p().send;
  }

  /**
   * Why the heartbeat stopped; empty unless this decision stops it.
   *
   * @return the reason
   */
  public Optional<StopReason> stopReason() {
    return p().stopReason;
  }

  /**
   * When the next attempt is due, in nanoseconds since the origin ({@link Num#INF}: never); empty
   * for a stop.
   *
   * @return the due time
   */
  public Optional<Num> at() {
    return p().at;
  }

  /**
   * Whether the next attempt uses a new key or the previous one; empty for a stop.
   *
   * @return the key use
   */
  public Optional<KeyUse> key() {
    return p().key;
  }

  /**
   * 1 for the first key of the lease, 2 for the next new one, ...; empty for a stop.
   *
   * @return the key index
   */
  public OptionalLong keyIndex() {
    return p().keyIndex;
  }

  /**
   * The algorithm that decided, where one applies.
   *
   * @return the mode
   */
  public Optional<Mode> mode() {
    return p().mode;
  }

  /**
   * The numbers behind the decision.
   *
   * @return the numbers
   */
  public Numbers numbers() {
    return p().numbers;
  }

  /**
   * Warnings (only {@link Warning#EXTENSION_BUDGET_DEPLETING} exists).
   *
   * @return an unmodifiable list
   */
  public List<Warning> warnings() {
    return p().warnings;
  }

  /**
   * How the deciding outcome was classified.
   *
   * @return the outcome class
   */
  public OutcomeClass outcome() {
    return p().outcome;
  }

  /**
   * A human-readable detail (e.g. the Retry-After problem, the error code).
   *
   * @return the detail
   */
  public Optional<String> detail() {
    return p().detail;
  }

  /**
   * D-15: until when the lease is proven alive, in nanoseconds since the origin (like {@link
   * #at()}): the receipt of the last primary-path success plus its lead floor. {@link Num#INF}
   * means +infinity (the sum overflowed; see {@link #provenForever()}). Empty before the first
   * success and on the fallback path, which proves nothing. Present on every primary-path
   * decision, retries and stops included. Reaching it without a newer success puts the lease in
   * jeopardy.
   *
   * @return the instant
   */
  public Optional<Num> provenUntil() {
    return p().provenUntil;
  }

  /**
   * The deciding success's {@code expires_at_ms}, when this decision answers a success that
   * carried it.
   *
   * @return milliseconds since the Unix epoch (server clock)
   */
  public OptionalLong expiresAtMs() {
    return p().expiresAtMs;
  }

  /**
   * The deciding success's {@code remaining_ttl_ms}, when this decision answers a success that
   * carried it.
   *
   * @return milliseconds
   */
  public OptionalLong remainingTtlMs() {
    return p().remainingTtlMs;
  }

  /**
   * The {@link System#nanoTime()} value of the heartbeat's time 0.
   *
   * @return the origin
   */
  public long originNanos() {
    return originNanos;
  }

  /**
   * The core's emitted-decision JSON object (the same as {@link #toJson()}).
   *
   * @return the JSON text
   */
  public String json() {
    String j = json;
    if (j == null) {
      j = NativeBridge.nativeDecisionJson(raw, rawRid(), rawDetail());
      json = j;
    }
    return j;
  }

  /**
   * True when this decision stops the heartbeat for good.
   *
   * @return whether a stop
   */
  public boolean isStop() {
    return raw != null ? raw[Slots.D_NEXT] != 0 : parts.stopReason.isPresent();
  }

  /**
   * The {@link System#nanoTime()} value at which the next attempt is due: empty for a stop, for
   * never ({@link Num#INF}) and for a time more than {@code Long.MAX_VALUE} ns after the origin.
   *
   * @return the due time
   */
  public OptionalLong dueNanoTime() {
    return at().map(a -> Times.nanoTime(originNanos, a)).orElse(OptionalLong.empty());
  }

  /**
   * How long to wait from {@code nowNanoTime} until the next attempt is due: 0 if already due,
   * {@code Long.MAX_VALUE} for never or for a stop.
   *
   * @param nowNanoTime a {@link System#nanoTime()} value
   * @return the delay in nanoseconds
   */
  public long delayNanos(long nowNanoTime) {
    return at().map(a -> Times.delay(originNanos, a, nowNanoTime)).orElse(Long.MAX_VALUE);
  }

  /**
   * D-15 as a {@link System#nanoTime()} value: until when the lease is proven alive. Empty when
   * nothing is proven ({@link #provenUntil()} empty), when it is +infinity ({@link
   * #provenForever()}), or more than {@code Long.MAX_VALUE} ns after the origin (which a runner
   * treats like +infinity: no nanoTime value reaches it).
   *
   * @return the nanoTime value
   */
  public OptionalLong provenUntilNanoTime() {
    return provenUntil().map(p -> Times.nanoTime(originNanos, p)).orElse(OptionalLong.empty());
  }

  /**
   * True when the proven lead is +infinity: receipt plus lead floor overflowed (P-2), so no instant
   * ever puts this lease in jeopardy on its own. False when nothing is proven or the instant is
   * finite.
   *
   * @return whether proven until +infinity
   */
  public boolean provenForever() {
    return provenUntil().map(Num::isInfinite).orElse(false);
  }

  /**
   * The core's emitted-decision JSON object: {@code next}, {@code at} (ms since the origin),
   * {@code key}, {@code key_index}, {@code reason}, {@code mode}, {@code numbers}, {@code
   * warnings}, and where they apply {@code proven_until} (ms since the origin, or {@code "inf"}),
   * {@code expires_at_ms} and {@code remaining_ttl_ms}. A decision printed this way can be pasted into a scenario vector as its expect.
   *
   * @return the JSON text
   */
  public String toJson() {
    return json();
  }

  /**
   * Equal components (as a record's {@code equals}).
   *
   * @param o another object
   * @return whether equal
   */
  @Override
  public boolean equals(Object o) {
    if (this == o) {
      return true;
    }
    if (!(o instanceof Decision)) {
      return false;
    }
    Decision d = (Decision) o;
    Parts a = p();
    Parts b = d.p();
    return originNanos == d.originNanos
        && a.reservationId.equals(b.reservationId)
        && a.send.equals(b.send)
        && a.stopReason.equals(b.stopReason)
        && a.at.equals(b.at)
        && a.key.equals(b.key)
        && a.keyIndex.equals(b.keyIndex)
        && a.mode.equals(b.mode)
        && a.numbers.equals(b.numbers)
        && a.warnings.equals(b.warnings)
        && a.outcome == b.outcome
        && a.detail.equals(b.detail)
        && a.provenUntil.equals(b.provenUntil)
        && a.expiresAtMs.equals(b.expiresAtMs)
        && a.remainingTtlMs.equals(b.remainingTtlMs)
        && json().equals(d.json());
  }

  /**
   * A hash consistent with {@link #equals(Object)}.
   *
   * @return the hash
   */
  @Override
  public int hashCode() {
    Parts a = p();
    return Objects.hash(
        a.reservationId, a.send, a.stopReason, a.at, a.key, a.keyIndex, a.mode, a.numbers,
        a.warnings, a.outcome, a.detail, a.provenUntil, a.expiresAtMs, a.remainingTtlMs,
        originNanos, json());
  }

  /**
   * The components in a record's format: {@code Decision[reservationId=..., ..., json=...]}.
   *
   * @return the text
   */
  @Override
  public String toString() {
    Parts a = p();
    return "Decision[reservationId=" + a.reservationId + ", send=" + a.send + ", stopReason="
        + a.stopReason + ", at=" + a.at + ", key=" + a.key + ", keyIndex=" + a.keyIndex
        + ", mode=" + a.mode + ", numbers=" + a.numbers + ", warnings=" + a.warnings
        + ", outcome=" + a.outcome + ", detail=" + a.detail + ", provenUntil=" + a.provenUntil
        + ", expiresAtMs=" + a.expiresAtMs + ", remainingTtlMs=" + a.remainingTtlMs
        + ", originNanos=" + originNanos + ", json="
        + json() + "]";
  }
}
