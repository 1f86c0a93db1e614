package io.leasebeat;

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
 * @param reservationId the reservation, once a create succeeded
 * @param send the kind of attempt to send next; empty for a stop
 * @param stopReason why the heartbeat stopped; empty unless this decision stops it
 * @param at when the next attempt is due, in nanoseconds since the origin ({@link Num#INF}:
 *     never); empty for a stop
 * @param key whether the next attempt uses a new key or the previous one; empty for a stop
 * @param keyIndex 1 for the first key of the lease, 2 for the next new one, ...; empty for a stop
 * @param mode the algorithm that decided, where one applies
 * @param numbers the numbers behind the decision
 * @param warnings warnings (only {@link Warning#EXTENSION_BUDGET_DEPLETING} exists)
 * @param outcome how the deciding outcome was classified
 * @param detail a human-readable detail (e.g. the Retry-After problem, the error code)
 * @param provenUntil D-15: until when the lease is proven alive, in nanoseconds since the origin
 *     (like {@link #at()}): the receipt of the last primary-path success plus its lead floor.
 *     {@link Num#INF} means +infinity (the sum overflowed; see {@link #provenForever()}). Empty
 *     before the first success and on the fallback path, which proves nothing. Present on every
 *     primary-path decision, retries and stops included. Reaching it without a newer success puts
 *     the lease in jeopardy.
 * @param expiresAtMs the deciding success's {@code expires_at_ms} (the server's clock, ms since the
 *     Unix epoch), when this decision answers a success that carried it
 * @param remainingTtlMs the deciding success's {@code remaining_ttl_ms}, when this decision answers
 *     a success that carried it
 * @param originNanos the {@link System#nanoTime()} value of the heartbeat's time 0
 * @param json the core's emitted-decision JSON object
 */
public record Decision(
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
  public Decision {
    Objects.requireNonNull(reservationId, "reservationId");
    Objects.requireNonNull(send, "send");
    Objects.requireNonNull(stopReason, "stopReason");
    Objects.requireNonNull(at, "at");
    Objects.requireNonNull(key, "key");
    Objects.requireNonNull(keyIndex, "keyIndex");
    Objects.requireNonNull(mode, "mode");
    Objects.requireNonNull(numbers, "numbers");
    warnings = List.copyOf(warnings);
    Objects.requireNonNull(outcome, "outcome");
    Objects.requireNonNull(detail, "detail");
    Objects.requireNonNull(provenUntil, "provenUntil");
    Objects.requireNonNull(expiresAtMs, "expiresAtMs");
    Objects.requireNonNull(remainingTtlMs, "remainingTtlMs");
    if (provenUntil.isPresent()
        && (provenUntil.get().signum() < 0 || provenUntil.get().equals(Num.NEG_INF))) {
      throw new IllegalArgumentException("provenUntil must not be negative");
    }
    Objects.requireNonNull(json, "json");
    if (send.isPresent() == stopReason.isPresent()) {
      throw new IllegalArgumentException("exactly one of send and stopReason must be present");
    }
  }

  /**
   * True when this decision stops the heartbeat for good.
   *
   * @return whether a stop
   */
  public boolean isStop() {
    return stopReason.isPresent();
  }

  /**
   * The {@link System#nanoTime()} value at which the next attempt is due: empty for a stop, for
   * never ({@link Num#INF}) and for a time more than {@code Long.MAX_VALUE} ns after the origin.
   *
   * @return the due time
   */
  public OptionalLong dueNanoTime() {
    return at.map(a -> Times.nanoTime(originNanos, a)).orElse(OptionalLong.empty());
  }

  /**
   * How long to wait from {@code nowNanoTime} until the next attempt is due: 0 if already due,
   * {@code Long.MAX_VALUE} for never or for a stop.
   *
   * @param nowNanoTime a {@link System#nanoTime()} value
   * @return the delay in nanoseconds
   */
  public long delayNanos(long nowNanoTime) {
    return at.map(a -> Times.delay(originNanos, a, nowNanoTime)).orElse(Long.MAX_VALUE);
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
    return provenUntil.map(p -> Times.nanoTime(originNanos, p)).orElse(OptionalLong.empty());
  }

  /**
   * True when the proven lead is +infinity: receipt plus lead floor overflowed (P-2), so no instant
   * ever puts this lease in jeopardy on its own. False when nothing is proven or the instant is
   * finite.
   *
   * @return whether proven until +infinity
   */
  public boolean provenForever() {
    return provenUntil.map(Num::isInfinite).orElse(false);
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
    return json;
  }
}
