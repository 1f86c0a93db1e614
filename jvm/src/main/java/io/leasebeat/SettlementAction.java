package io.leasebeat;

import java.util.Optional;

/**
 * What a {@link Settlement} asks the caller to do now: persist its record ({@link #record()}),
 * send an attempt or wait for its outcome ({@link #attempt()}), or nothing (done, {@link
 * #outcome()}). Immutable.
 */
public final class SettlementAction {
  /** The kind of action. */
  public enum Type {
    /** Make {@link SettlementAction#record()} durable, then call {@code handlePersisted}. */
    PERSIST,
    /** Send {@link SettlementAction#attempt()} at its due time, then call {@code handleSent}. */
    SEND,
    /** The attempt is in flight: report its outcome. */
    WAIT,
    /** The settlement ended; see {@link SettlementAction#outcome()}. */
    DONE
  }

  private final Type type;
  private final SettlementRecord record;
  private final SettleAttempt attempt;
  private final Settlement.Outcome outcome;

  private SettlementAction(
      Type type, SettlementRecord record, SettleAttempt attempt, Settlement.Outcome outcome) {
    this.type = type;
    this.record = record;
    this.attempt = attempt;
    this.outcome = outcome;
  }

  static SettlementAction read(Wire w, long origin) {
    int tag = w.u8();
    switch (tag) {
      case 0:
        return new SettlementAction(Type.PERSIST, SettlementRecord.read(w), null, null);
      case 1:
        return new SettlementAction(Type.SEND, null, SettleAttempt.read(w, origin), null);
      case 2:
        return new SettlementAction(Type.WAIT, null, SettleAttempt.read(w, origin), null);
      case 3:
        return new SettlementAction(
            Type.DONE, null, null, Settlement.wired(Settlement.Outcome.class, w.str()));
      default:
        throw new IllegalStateException("leasebeat: unknown settlement action " + tag);
    }
  }

  /**
   * The kind of action.
   *
   * @return the type
   */
  public Type type() {
    return type;
  }

  /**
   * The record to persist, for {@link Type#PERSIST}.
   *
   * @return the record, or empty
   */
  public Optional<SettlementRecord> record() {
    return Optional.ofNullable(record);
  }

  /**
   * The attempt to send or in flight, for {@link Type#SEND} and {@link Type#WAIT}.
   *
   * @return the attempt, or empty
   */
  public Optional<SettleAttempt> attempt() {
    return Optional.ofNullable(attempt);
  }

  /**
   * The outcome, for {@link Type#DONE}.
   *
   * @return the outcome, or empty
   */
  public Optional<Settlement.Outcome> outcome() {
    return Optional.ofNullable(outcome);
  }

  @Override
  public String toString() {
    switch (type) {
      case PERSIST:
        return "persist " + record;
      case DONE:
        return "done " + outcome.wire();
      default:
        return type.name().toLowerCase(java.util.Locale.ROOT) + " " + attempt;
    }
  }
}
