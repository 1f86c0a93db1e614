package io.leasebeat;

import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Optional;

/**
 * The numbers behind one decision (HB-44), in milliseconds (skips: a count). A number is present
 * exactly when it applies to that decision. The wire names ({@link #NAMES}) are those of the
 * scenario format and of {@link Decision#toJson()}.
 *
 * @param rtt Round trip of the attempt that produced this success, rounded up to ms (HB-05/06).
 * @param maxRtt Largest rtt over this lease's schema-valid successes (HB-07, D-3).
 * @param leadFloor {@code max(0, remaining_ttl_ms - rtt)}; on a failure, that of the anchoring success.
 * @param attemptBudget {@code max(request_timeout_ms, 1000, 2 x max_rtt)}.
 * @param safetyMargin {@code max(1000, 2 x max_rtt)}.
 * @param retryReserve {@code 2 x attempt_budget + safety_margin}.
 * @param nextDelay Delay from the observation to the next beat.
 * @param lead Current lead estimate after a failure (HB-21).
 * @param retryWindow {@code lead - attempt_budget - safety_margin}, unclamped (HB-22).
 * @param retryDelay Delay from the failure's observation to the same-key retry.
 * @param leadMin Fallback lead lower bound at the observation (FB-01).
 * @param grant Fallback grant: difference of successive {@code expires_at_ms} values.
 * @param cadence Fallback cadence (FB-03).
 * @param skips Fallback cadences skipped (FB-04).
 */
public record Numbers(
    Optional<Num> rtt,
    Optional<Num> maxRtt,
    Optional<Num> leadFloor,
    Optional<Num> attemptBudget,
    Optional<Num> safetyMargin,
    Optional<Num> retryReserve,
    Optional<Num> nextDelay,
    Optional<Num> lead,
    Optional<Num> retryWindow,
    Optional<Num> retryDelay,
    Optional<Num> leadMin,
    Optional<Num> grant,
    Optional<Num> cadence,
    Optional<Num> skips) {

  /** Every wire name a number can have, in a fixed order. */
  public static final List<String> NAMES =
      List.of(
          "rtt",
          "max_rtt",
          "lead_floor",
          "attempt_budget",
          "safety_margin",
          "retry_reserve",
          "next_delay",
          "lead",
          "retry_window",
          "retry_delay",
          "lead_min",
          "grant",
          "cadence",
          "skips");

  /**
   * Every component must be non-null (use {@link Optional#empty()}).
   *
   * @param rtt see {@link #rtt()}
   * @param maxRtt see {@link #maxRtt()}
   * @param leadFloor see {@link #leadFloor()}
   * @param attemptBudget see {@link #attemptBudget()}
   * @param safetyMargin see {@link #safetyMargin()}
   * @param retryReserve see {@link #retryReserve()}
   * @param nextDelay see {@link #nextDelay()}
   * @param lead see {@link #lead()}
   * @param retryWindow see {@link #retryWindow()}
   * @param retryDelay see {@link #retryDelay()}
   * @param leadMin see {@link #leadMin()}
   * @param grant see {@link #grant()}
   * @param cadence see {@link #cadence()}
   * @param skips see {@link #skips()}
   */
  public Numbers {
    Objects.requireNonNull(rtt, "rtt");
    Objects.requireNonNull(maxRtt, "maxRtt");
    Objects.requireNonNull(leadFloor, "leadFloor");
    Objects.requireNonNull(attemptBudget, "attemptBudget");
    Objects.requireNonNull(safetyMargin, "safetyMargin");
    Objects.requireNonNull(retryReserve, "retryReserve");
    Objects.requireNonNull(nextDelay, "nextDelay");
    Objects.requireNonNull(lead, "lead");
    Objects.requireNonNull(retryWindow, "retryWindow");
    Objects.requireNonNull(retryDelay, "retryDelay");
    Objects.requireNonNull(leadMin, "leadMin");
    Objects.requireNonNull(grant, "grant");
    Objects.requireNonNull(cadence, "cadence");
    Objects.requireNonNull(skips, "skips");
  }

  /**
   * Numbers from a map of wire names to values; names not present are empty.
   *
   * @param values wire name to value
   * @return the numbers
   * @throws IllegalArgumentException if a name is not one of {@link #NAMES}
   */
  public static Numbers of(Map<String, Num> values) {
    Map<String, Num> m = new LinkedHashMap<>(values);
    Numbers n =
        new Numbers(
            opt(m, "rtt"),
            opt(m, "max_rtt"),
            opt(m, "lead_floor"),
            opt(m, "attempt_budget"),
            opt(m, "safety_margin"),
            opt(m, "retry_reserve"),
            opt(m, "next_delay"),
            opt(m, "lead"),
            opt(m, "retry_window"),
            opt(m, "retry_delay"),
            opt(m, "lead_min"),
            opt(m, "grant"),
            opt(m, "cadence"),
            opt(m, "skips"));
    if (!m.isEmpty()) {
      throw new IllegalArgumentException("unknown numbers: " + m.keySet());
    }
    return n;
  }

  private static Optional<Num> opt(Map<String, Num> m, String name) {
    return Optional.ofNullable(m.remove(name));
  }

  /**
   * The number with this wire name, if it applies.
   *
   * @param wireName e.g. {@code "next_delay"}
   * @return the number, or empty if it does not apply
   * @throws IllegalArgumentException if the name is not one of {@link #NAMES}
   */
  public Optional<Num> get(String wireName) {
    switch (wireName) {
      case "rtt":
        return rtt;
      case "max_rtt":
        return maxRtt;
      case "lead_floor":
        return leadFloor;
      case "attempt_budget":
        return attemptBudget;
      case "safety_margin":
        return safetyMargin;
      case "retry_reserve":
        return retryReserve;
      case "next_delay":
        return nextDelay;
      case "lead":
        return lead;
      case "retry_window":
        return retryWindow;
      case "retry_delay":
        return retryDelay;
      case "lead_min":
        return leadMin;
      case "grant":
        return grant;
      case "cadence":
        return cadence;
      case "skips":
        return skips;
      default:
        throw new IllegalArgumentException("unknown number: " + wireName);
    }
  }

  /**
   * The numbers that apply, by wire name, in the order of {@link #NAMES}.
   *
   * @return an unmodifiable map
   */
  public Map<String, Num> asMap() {
    Map<String, Num> m = new LinkedHashMap<>();
    for (String name : NAMES) {
      get(name).ifPresent(v -> m.put(name, v));
    }
    return Collections.unmodifiableMap(m);
  }
}
