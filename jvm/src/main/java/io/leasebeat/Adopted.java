package io.leasebeat;

import java.util.Objects;

/**
 * The result of {@link Heartbeat.Builder#adopt(AdoptedCreate)}: the heartbeat that took the lease
 * over and its first decision (the adopted create's outcome, classified exactly as if the heartbeat
 * had sent the create). Close the heartbeat when done.
 *
 * @param heartbeat the heartbeat (close it)
 * @param decision its first decision
 */
public record Adopted(Heartbeat heartbeat, Decision decision) {
  /**
   * Checks for nulls.
   *
   * @param heartbeat see {@link #heartbeat()}
   * @param decision see {@link #decision()}
   */
  public Adopted {
    Objects.requireNonNull(heartbeat, "heartbeat");
    Objects.requireNonNull(decision, "decision");
  }
}
