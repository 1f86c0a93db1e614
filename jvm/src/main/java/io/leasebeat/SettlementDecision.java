package io.leasebeat;

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Optional;
import java.util.OptionalInt;
import java.util.OptionalLong;

/**
 * One decision of a {@link Settlement}: the answer to every call. An accessor is empty when it does
 * not apply. {@link #toJson()} prints it as one JSON line in the settlement vectors' vocabulary.
 * Immutable.
 */
public final class SettlementDecision {
  private final Settlement.Next next;
  private final OptionalLong atNanos;
  private final OptionalInt attempt;
  private final Settlement.Mode mode;
  private final Optional<Settlement.RecordChange> record;
  private final Optional<Settlement.RecordMode> recordMode;
  private final OptionalLong recordNotBeforeMillis;
  private final Settlement.Classification classification;
  private final Optional<String> code;
  private final OptionalInt status;
  private final OptionalLong delayMillis;
  private final OptionalLong notBeforeMillis;
  private final List<Settlement.Warning> warnings;
  private final Optional<String> detail;
  private final Optional<Settlement.Outcome> outcome;
  private final boolean stopHeartbeat;
  private final String json;

  private SettlementDecision(Wire w, long origin) {
    next = Settlement.wired(Settlement.Next.class, w.str());
    atNanos = w.bool() ? OptionalLong.of(Settlement.nanoTime(origin, w.u64())) : OptionalLong.empty();
    attempt = w.bool() ? OptionalInt.of(w.u32()) : OptionalInt.empty();
    mode = Settlement.wired(Settlement.Mode.class, w.str());
    int r = w.u8();
    switch (r) {
      case 0:
        record = Optional.empty();
        recordMode = Optional.empty();
        recordNotBeforeMillis = OptionalLong.empty();
        break;
      case 1:
        record = Optional.of(Settlement.RecordChange.WRITE);
        recordMode = Optional.of(Settlement.wired(Settlement.RecordMode.class, w.str()));
        recordNotBeforeMillis = Settlement.optMillis(w);
        break;
      case 2:
      case 3:
        record = Optional.of(r == 2 ? Settlement.RecordChange.REMOVE : Settlement.RecordChange.KEEP);
        recordMode = Optional.empty();
        recordNotBeforeMillis = OptionalLong.empty();
        break;
      default:
        throw new IllegalStateException("leasebeat: unknown record change " + r);
    }
    classification = Settlement.wired(Settlement.Classification.class, w.str());
    code = w.optStr();
    status = w.bool() ? OptionalInt.of(w.u32()) : OptionalInt.empty();
    delayMillis = Settlement.optMillis(w);
    notBeforeMillis = Settlement.optMillis(w);
    int n = w.u32();
    List<Settlement.Warning> ws = new ArrayList<>(n);
    for (int i = 0; i < n; i++) {
      ws.add(Settlement.wired(Settlement.Warning.class, w.str()));
    }
    warnings = Collections.unmodifiableList(ws);
    detail = w.optStr();
    outcome = w.optStr().map(o -> Settlement.wired(Settlement.Outcome.class, o));
    stopHeartbeat = w.bool();
    json = w.str();
  }

  static SettlementDecision read(Wire w, long origin) {
    return new SettlementDecision(w, origin);
  }

  /**
   * What comes next.
   *
   * @return the next step
   */
  public Settlement.Next next() {
    return next;
  }

  /**
   * The due time of the next send as a {@link System#nanoTime()} value ({@code Long.MAX_VALUE}
   * when not expressible); present for a send only.
   *
   * @return the due time, or empty
   */
  public OptionalLong atNanos() {
    return atNanos;
  }

  /**
   * The ordinal of the next request within its mode, 1-based (a send or a wait).
   *
   * @return the ordinal, or empty
   */
  public OptionalInt attempt() {
    return attempt;
  }

  /**
   * The mode after this decision.
   *
   * @return the mode
   */
  public Settlement.Mode mode() {
    return mode;
  }

  /**
   * What happens to the durable record (empty for a release and when nothing changes).
   *
   * @return write, remove or keep, or empty
   */
  public Optional<Settlement.RecordChange> record() {
    return record;
  }

  /**
   * The mode of the record to write, for {@link Settlement.RecordChange#WRITE}.
   *
   * @return the record's mode, or empty
   */
  public Optional<Settlement.RecordMode> recordMode() {
    return recordMode;
  }

  /**
   * The {@code not_before_ms} of the record to write, for {@link Settlement.RecordChange#WRITE},
   * if it has one.
   *
   * @return the floor (Unix ms), or empty
   */
  public OptionalLong recordNotBeforeMillis() {
    return recordNotBeforeMillis;
  }

  /**
   * How the deciding event was classified.
   *
   * @return the class
   */
  public Settlement.Classification classification() {
    return classification;
  }

  /**
   * The server's error code, where one decided (or was given).
   *
   * @return the code, or empty
   */
  public Optional<String> code() {
    return code;
  }

  /**
   * The HTTP status of the deciding response.
   *
   * @return the status, or empty
   */
  public OptionalInt status() {
    return status;
  }

  /**
   * The delay chosen after a failure, ms (SP-1, ST-4; {@code Long.MAX_VALUE} beyond it).
   *
   * @return the delay, or empty
   */
  public OptionalLong delayMillis() {
    return delayMillis;
  }

  /**
   * The wall-clock floor set by this decision (ST-4), Unix ms.
   *
   * @return the floor, or empty
   */
  public OptionalLong notBeforeMillis() {
    return notBeforeMillis;
  }

  /**
   * Warnings, in order of appearance.
   *
   * @return an unmodifiable list
   */
  public List<Settlement.Warning> warnings() {
    return warnings;
  }

  /**
   * A human-readable detail.
   *
   * @return the detail, or empty
   */
  public Optional<String> detail() {
    return detail;
  }

  /**
   * The outcome, when {@link #next()} is {@link Settlement.Next#DONE}.
   *
   * @return the outcome, or empty
   */
  public Optional<Settlement.Outcome> outcome() {
    return outcome;
  }

  /**
   * ST-11: stop the heartbeat now (the outcome is final, or the reservation is gone: event mode).
   *
   * @return true to stop the heartbeat
   */
  public boolean stopHeartbeat() {
    return stopHeartbeat;
  }

  /**
   * The decision as one JSON line, members in lexicographic order (the vectors' vocabulary, {@code
   * at} in ms since the settlement's origin), for logs.
   *
   * @return the JSON text
   */
  public String toJson() {
    return json;
  }

  @Override
  public String toString() {
    return json;
  }
}
