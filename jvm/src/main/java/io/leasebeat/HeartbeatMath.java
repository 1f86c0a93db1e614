package io.leasebeat;

import java.math.BigInteger;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;
import java.util.Optional;
import java.util.OptionalLong;

/**
 * The scheduling arithmetic alone, as pure functions computed by the Rust core (never re-implemented
 * here). Durations are milliseconds; results are exact {@link Num}s in which {@link Num#INF} is
 * +infinity (P-2: any sum or product that would overflow saturates to it). Inputs are non-negative
 * {@code long}s; a duration input that may be infinite is a {@link Num} (finite 0..2^64-2, or
 * {@link Num#INF}).
 */
public final class HeartbeatMath {
  private static final BigInteger U64_INF = BigInteger.ONE.shiftLeft(64).subtract(BigInteger.ONE);

  private HeartbeatMath() {}

  /**
   * The numbers of the primary algorithm for one schema-valid success.
   *
   * @param leadFloor {@code max(0, remaining_ttl_ms - rtt)}; 0 when timing is unknown
   * @param attemptBudget {@code max(request_timeout_ms, 1000, 2 x max_rtt)}
   * @param safetyMargin {@code max(1000, 2 x max_rtt)}
   * @param retryReserve {@code 2 x attempt_budget + safety_margin}
   * @param nextDelay {@code max(0, lead_floor - retry_reserve)}: the next beat is due this long
   *     after the response was received
   */
  public record PrimarySchedule(
      Num leadFloor, Num attemptBudget, Num safetyMargin, Num retryReserve, Num nextDelay) {}

  /**
   * What the primary path may do after a transient failure (HB-21/22).
   *
   * @param lead {@code max(0, last lead_floor - elapsed)}
   * @param window {@code lead - attempt_budget - safety_margin}, not clamped; {@link Num#NEG_INF}
   *     when the budget plus margin is infinite
   * @param delay {@code min(30000, lead / 4, window)} when {@code window >= 0}, else empty (stop)
   */
  public record RetryWindow(Num lead, Num window, Optional<Num> delay) {}

  /**
   * The fallback cadence chosen after an extension success (FB-03).
   *
   * @param cadence the delay between beats, never below 1000 ms
   * @param hold true when the "hold" branch was taken: the extension budget will deplete
   */
  public record FallbackCadence(Num cadence, boolean hold) {}

  /**
   * A parsed {@code Retry-After}: exactly one of the two is present.
   *
   * @param millis the delay in milliseconds
   * @param problem why the value cannot be used
   */
  public record RetryAfter(Optional<Num> millis, Optional<RetryAfterProblem> problem) {}

  private static long nonNegative(String name, long v) {
    if (v < 0) {
      throw new IllegalArgumentException(name + " must not be negative, got " + v);
    }
    return v;
  }

  /** A duration that may be infinite as the core's u64 bits (u64::MAX = +infinity). */
  private static long duration(String name, Num v) {
    Objects.requireNonNull(v, name);
    if (v.kind() == Num.Kind.POSITIVE_INFINITY) {
      return -1L; // u64::MAX
    }
    if (!v.isFinite() || v.signum() < 0 || v.value().compareTo(U64_INF) >= 0) {
      throw new IllegalArgumentException(
          name + " must be within 0..2^64-2 or Num.INF, got " + v);
    }
    return v.value().longValue();
  }

  private static Wire math(int op, long a, long b, long c, long d, boolean fa, boolean fb) {
    return Wire.open(NativeBridge.nativeMath(op, a, b, c, d, fa, fb));
  }

  /**
   * A nanosecond interval rounded up to whole milliseconds (HB-05/06, P-4).
   *
   * @param nanos a non-negative interval
   * @return milliseconds
   * @throws IllegalArgumentException if negative
   */
  public static long ceilMs(long nanos) {
    return math(0, nonNegative("nanos", nanos), 0, 0, 0, false, false).num().longValueExact();
  }

  /**
   * {@code attempt_budget = max(request_timeout_ms, 1000, 2 x max_rtt)}; an empty (unbounded)
   * timeout gives {@link Num#INF}.
   *
   * @param requestTimeoutMillis the enforced timeout, empty when unknown or unbounded
   * @param maxRttMillis the largest rtt so far
   * @return the budget
   */
  public static Num attemptBudget(OptionalLong requestTimeoutMillis, long maxRttMillis) {
    Objects.requireNonNull(requestTimeoutMillis, "requestTimeoutMillis");
    long t = requestTimeoutMillis.isPresent()
        ? nonNegative("requestTimeoutMillis", requestTimeoutMillis.getAsLong())
        : 0;
    return math(
            1,
            t,
            0,
            nonNegative("maxRttMillis", maxRttMillis),
            0,
            false,
            requestTimeoutMillis.isEmpty())
        .num();
  }

  /**
   * {@code safety_margin = max(1000, 2 x max_rtt)}.
   *
   * @param maxRttMillis the largest rtt so far
   * @return the margin
   */
  public static Num safetyMargin(long maxRttMillis) {
    return math(2, nonNegative("maxRttMillis", maxRttMillis), 0, 0, 0, false, false).num();
  }

  /**
   * {@code retry_reserve = 2 x attempt_budget + safety_margin}, saturating.
   *
   * @param attemptBudget the budget (may be {@link Num#INF})
   * @param safetyMargin the margin (may be {@link Num#INF})
   * @return the reserve
   */
  public static Num retryReserve(Num attemptBudget, Num safetyMargin) {
    return math(
            3,
            duration("attemptBudget", attemptBudget),
            duration("safetyMargin", safetyMargin),
            0,
            0,
            false,
            false)
        .num();
  }

  /**
   * The primary schedule from one success (HB-03). The protocol's worked example: remaining
   * 61500, rtt 1500, timeout 10000, max rtt 1500 gives lead floor 60000, budget 10000, margin
   * 3000, reserve 23000 and next delay 37000.
   *
   * @param remainingTtlMillis {@code remaining_ttl_ms} from the response
   * @param rttMillis the rounded-up rtt of the attempt, empty when its timing is unknown
   * @param requestTimeoutMillis the enforced timeout, empty when unbounded
   * @param maxRttMillis the largest rtt over this lease's successes, this one included
   * @return the schedule
   */
  public static PrimarySchedule primarySchedule(
      long remainingTtlMillis,
      OptionalLong rttMillis,
      OptionalLong requestTimeoutMillis,
      long maxRttMillis) {
    Objects.requireNonNull(rttMillis, "rttMillis");
    Objects.requireNonNull(requestTimeoutMillis, "requestTimeoutMillis");
    Wire w =
        math(
            4,
            nonNegative("remainingTtlMillis", remainingTtlMillis),
            rttMillis.isPresent() ? nonNegative("rttMillis", rttMillis.getAsLong()) : 0,
            requestTimeoutMillis.isPresent()
                ? nonNegative("requestTimeoutMillis", requestTimeoutMillis.getAsLong())
                : 0,
            nonNegative("maxRttMillis", maxRttMillis),
            rttMillis.isEmpty(),
            requestTimeoutMillis.isEmpty());
    return new PrimarySchedule(w.num(), w.num(), w.num(), w.num(), w.num());
  }

  /**
   * The retry window after a transient failure observed {@code elapsedMillis} (rounded up) after
   * the receipt of the success that set {@code leadFloorMillis} (HB-21/22).
   *
   * @param leadFloorMillis the anchoring success's lead floor
   * @param elapsedMillis elapsed since its receipt
   * @param attemptBudget the budget (may be {@link Num#INF})
   * @param safetyMargin the margin
   * @return the window
   */
  public static RetryWindow retryWindow(
      long leadFloorMillis, long elapsedMillis, Num attemptBudget, Num safetyMargin) {
    Wire w =
        math(
            5,
            nonNegative("leadFloorMillis", leadFloorMillis),
            nonNegative("elapsedMillis", elapsedMillis),
            duration("attemptBudget", attemptBudget),
            duration("safetyMargin", safetyMargin),
            false,
            false);
    Num lead = w.num();
    Num window = w.num();
    Optional<Num> delay = w.bool() ? Optional.of(w.num()) : Optional.empty();
    return new RetryWindow(lead, window, delay);
  }

  /**
   * Parses the {@code Retry-After} values of one response (D-11, P-5): exactly one value made of
   * ASCII digits with optional surrounding SP/HTAB; no sign, fraction, list or HTTP-date.
   *
   * @param values every value of every header named {@code Retry-After}
   * @return the milliseconds, or the problem
   */
  public static RetryAfter parseRetryAfter(List<String> values) {
    Objects.requireNonNull(values, "values");
    List<String[]> pairs = new ArrayList<>(values.size());
    for (String v : values) {
      pairs.add(new String[] {Objects.requireNonNull(v, "value"), ""});
    }
    Wire w = Wire.open(NativeBridge.nativeRetryAfter(Wire.pairs(pairs)));
    if (w.u8() == 0) {
      return new RetryAfter(Optional.of(w.num()), Optional.empty());
    }
    return new RetryAfter(Optional.empty(), Optional.of(RetryAfterProblem.fromWire(w.str())));
  }

  /**
   * The fallback's "hold" cadence: {@code max(1000, min(ttl / 2, 30000))} (FB-03).
   *
   * @param ttlMillis the configured ttl
   * @return the cadence
   */
  public static Num holdCadence(long ttlMillis) {
    return math(6, nonNegative("ttlMillis", ttlMillis), 0, 0, 0, false, false).num();
  }

  /**
   * FB-03, first match wins: grant &lt;= 0: hold; grant &gt;= 0.9 x ttl: clamp(grant / 2, 1000,
   * ttl / 2); 0.75 x elapsed &lt;= grant &lt;= 1.25 x elapsed: hold; otherwise clamp(grant / 2,
   * 1000, ttl / 2).
   *
   * @param grantMillis the grant (may be negative)
   * @param elapsedMillis elapsed since the previous success
   * @param ttlMillis the configured ttl
   * @return the cadence and whether it holds
   */
  public static FallbackCadence fallbackCadence(long grantMillis, long elapsedMillis, long ttlMillis) {
    Wire w =
        math(
            7,
            grantMillis,
            nonNegative("elapsedMillis", elapsedMillis),
            nonNegative("ttlMillis", ttlMillis),
            0,
            false,
            false);
    return new FallbackCadence(w.num(), w.bool());
  }

  /**
   * FB-04: how many whole cadences to skip after an extension success with a positive grant.
   *
   * @param leadMinMillis the lead lower bound at the observation (may be negative)
   * @param grantMillis the grant (may be negative)
   * @param cadenceMillis the cadence
   * @return the number of skips
   */
  public static Num fallbackSkips(long leadMinMillis, long grantMillis, long cadenceMillis) {
    return math(8, leadMinMillis, grantMillis, nonNegative("cadenceMillis", cadenceMillis), 0, false, false)
        .num();
  }
}
