package io.leasebeat;

import java.util.Objects;

/**
 * Under {@link HeartbeatRunner.HeartbeatFailurePolicy#FAIL_ON_FINALIZE}: the heartbeat failed
 * during the lease. The settlement still ran; its result is {@link #result()}.
 */
public final class HeartbeatFailureException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  private final transient HeartbeatRunner.HeartbeatFailure failure;
  private final transient SettleResult result;

  /**
   * The heartbeat's failure and the settlement's result.
   *
   * @param failure the heartbeat's failure
   * @param result the settlement's result
   */
  public HeartbeatFailureException(HeartbeatRunner.HeartbeatFailure failure, SettleResult result) {
    super(
        "leasebeat: the heartbeat failed ("
            + Objects.requireNonNull(failure, "failure").disposition()
            + failure.stopReason().map(r -> " " + r.wire()).orElse("")
            + ") before the settlement ended "
            + Objects.requireNonNull(result, "result").outcome().wire());
    this.failure = failure;
    this.result = result;
  }

  /**
   * The heartbeat's failure.
   *
   * @return the failure
   */
  public HeartbeatRunner.HeartbeatFailure failure() {
    return failure;
  }

  /**
   * The settlement's result (it ran).
   *
   * @return the result
   */
  public SettleResult result() {
    return result;
  }
}
