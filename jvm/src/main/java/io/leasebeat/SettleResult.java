package io.leasebeat;

import java.util.List;
import java.util.Optional;

/**
 * How a settlement driven by a {@link HeartbeatRunner} ended: {@link HeartbeatRunner#commit},
 * {@link HeartbeatRunner#release}, or a record replayed from the journal on start.
 *
 * @param reservationId the reservation
 * @param key the settlement's one idempotency key ({@code ""} for {@link
 *     Settlement.Outcome#NO_ACTUAL})
 * @param outcome the outcome; {@link Settlement.Outcome#NO_ACTUAL} when no actual amount was known
 *     (nothing sent, ST-10)
 * @param code the error code of the final answer, if any (e.g. {@code RESERVATION_EXPIRED})
 * @param recordKept whether the record stays on disk for the next replay (an unresolved outcome:
 *     exhausted, unclassified, auth failed; or a removal that failed); false when no write of it
 *     succeeded (the journal off, or every write failed: the request went anyway, see {@link
 *     #journalWarning()})
 * @param replayed whether the settlement was rebuilt from the journal (a restart)
 * @param decisions every decision of the settlement, in order (the last is the final one)
 * @param journalWarning the journal failure text when a record could not be written (SP-3: the
 *     request went anyway), else empty
 */
public record SettleResult(
    String reservationId,
    String key,
    Settlement.Outcome outcome,
    Optional<String> code,
    boolean recordKept,
    boolean replayed,
    List<SettlementDecision> decisions,
    Optional<String> journalWarning) {

  /**
   * Copies the list (unmodifiable).
   *
   * @param reservationId see {@link #reservationId()}
   * @param key see {@link #key()}
   * @param outcome see {@link #outcome()}
   * @param code see {@link #code()}
   * @param recordKept see {@link #recordKept()}
   * @param replayed see {@link #replayed()}
   * @param decisions see {@link #decisions()}
   * @param journalWarning see {@link #journalWarning()}
   */
  public SettleResult {
    decisions = List.copyOf(decisions);
  }

  /**
   * The final decision.
   *
   * @return the last decision
   */
  public SettlementDecision lastDecision() {
    return decisions.get(decisions.size() - 1);
  }

  /**
   * Whether the usage (or the release) is settled on the server: committed, applied through the
   * event fallback, or released.
   *
   * @return true on success
   */
  public boolean settled() {
    return outcome == Settlement.Outcome.COMMITTED
        || outcome == Settlement.Outcome.APPLIED
        || outcome == Settlement.Outcome.RELEASED;
  }
}
