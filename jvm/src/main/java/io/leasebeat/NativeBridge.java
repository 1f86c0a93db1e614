package io.leasebeat;

/**
 * The native methods of libleasebeat_jni (conventions in jvm/native/lib.rs). Hot calls fill a
 * {@code long[]} and an {@code Object[]} the caller owns and return a status ({@link
 * Slots#check}); cold calls return an envelope decoded by {@link Wire}. Strings going in travel as
 * strict UTF-8 bytes.
 */
final class NativeBridge {
  static {
    NativeLoader.load();
  }

  private NativeBridge() {}

  static void ensureLoaded() {
    // Running the static initializer is enough.
  }

  static native byte[] nativeNew(
      long ttlMs, long timeoutBits, boolean timeoutUnbounded, byte[] createRequestJson, byte[] keyPrefix);

  static native byte[] nativeForReservation(
      long ttlMs, long timeoutBits, boolean timeoutUnbounded, byte[] reservationId, byte[] keyPrefix);

  static native int nativeAdopt(
      long ttlMs,
      long timeoutBits,
      boolean timeoutUnbounded,
      byte[] createRequestJson,
      byte[] keyPrefix,
      byte[] key,
      byte[] requestBody,
      boolean sentKnown,
      long sentNs,
      long receivedNs,
      int failure,
      int status,
      byte[] headers,
      byte[] body,
      boolean timingUnknown,
      long[] slots,
      Object[] objs,
      byte[] text);

  static native void nativeFree(long handle);

  static native int nativeSent(long handle, long attemptId, long nowNs, Object[] objs);

  // The hot calls below read and write the calling thread's native buffer (Slots.Scratch), whose
  // address is buf: results at 0 (slots) and Slots.BUF_TEXT (text), a body at Slots.BUF_IN.

  static native int nativeResponse(
      long handle,
      long attemptId,
      int status,
      byte[] headers,
      byte[] body,
      int bodyLen,
      boolean timingUnknown,
      long nowNs,
      long knownAttemptId,
      long buf,
      Object[] objs);

  static native int nativeFailure(
      long handle, long attemptId, int failure, long nowNs, long knownAttemptId, long buf, Object[] objs);

  static native int nativeCancel(long handle, long nowNs, long knownAttemptId, long buf, Object[] objs);

  static native int nativePoll(long handle, long knownAttemptId, long buf, Object[] objs);

  /** The address of a direct buffer of Slots.BUF_LEN bytes; 0 for anything else. */
  static native long nativeBufferAddress(java.nio.ByteBuffer buf);

  static native int nativeState(long handle, long knownAttemptId, long[] slots, Object[] objs, byte[] text);

  static native String nativeDecisionJson(long[] slots, String reservationId, String detail);

  static native byte[] nativeCatalog();

  static native byte[] nativePanic();

  static native byte[] nativeMath(int op, long a, long b, long c, long d, boolean flagA, boolean flagB);

  static native byte[] nativeRetryAfter(byte[] values);

  /** The benchmark's timed region in Rust alone (see DecisionBench): median ns per operation. */
  static native double nativeBenchCore(int n, int batches, int mode);

  /**
   * The same calls in one Rust loop on heartbeats made through the Java API (DecisionBench's
   * splits): ns per operation.
   */
  static native double nativeBenchHandles(long[] handles, long[] ids, long nowNs);

  /** As {@link #benchCore}, each heartbeat behind its own box and lock (as a Java handle). */
  static double benchCoreBoxed(int n, int batches) {
    return nativeBenchCore(n, batches, 1);
  }

  /** As {@link #benchCore}, with the caches flushed (64 MiB written) before each timed loop. */
  static double benchCoreFlushed(int n, int batches) {
    return nativeBenchCore(n, batches, 2);
  }

  /** A batch of n Rust-made heartbeats for {@link #nativeBenchRun} (DecisionBench). */
  static native long nativeBenchPrepare(int n);

  /**
   * The timed region on a prepared batch, which it frees: ns per operation (-1 if {@code order}
   * is not a permutation of the batch). Visits the heartbeats in {@code order} (indices in the
   * batch), or in address order for null.
   */
  static native double nativeBenchRun(long batch, int[] order);

  static double benchCore(int n, int batches) {
    return nativeBenchCore(n, batches, 0);
  }

  // ----- settlement (cold calls only: envelopes, see jvm/native/settlement.rs) -----

  static native byte[] nativeSettleNew(
      byte[] reservationId,
      byte[] baseUrl,
      byte[] commitJson,
      byte[] eventJson,
      boolean release,
      byte[] releaseReason,
      int maxAttempts,
      long initialMs,
      long maxMs,
      byte[] keyPrefix,
      long nowNs,
      long wallMs);

  static native byte[] nativeSettleFromRecord(
      byte[] record, int maxAttempts, long initialMs, long maxMs, long nowNs, long wallMs);

  static native void nativeSettleFree(long handle);

  static native byte[] nativeSettleGet(long handle, int what);

  static native byte[] nativeSettlePersisted(long handle, long nowNs);

  static native byte[] nativeSettlePersistFailed(long handle, byte[] message, long nowNs);

  static native byte[] nativeSettleSent(long handle, long attemptId, long nowNs);

  static native byte[] nativeSettleResponse(
      long handle, long attemptId, int status, byte[] headers, byte[] body, long nowNs, long wallMs);

  static native byte[] nativeSettleFailure(long handle, long attemptId, int failure, long nowNs);

  static native byte[] nativeEventOfCreate(byte[] createJson);

  // ----- journal (cold calls only: envelopes, see jvm/native/journal.rs) -----

  static native byte[] nativeJournalOpen(byte[] dir, byte[] baseUrl, byte[] apiKey, byte[] tenant);

  static native byte[] nativeJournalOpenPartition(byte[] dir, byte[] baseUrl);

  static native byte[] nativeJournalBaseDir(byte[] dir);

  static native void nativeJournalFree(long handle);

  static native byte[] nativeJournalPersist(long journal, long settlement, long nowNs);

  static native byte[] nativeJournalFinish(long journal, long settlement);

  static native byte[] nativeJournalReplay(
      long journal, int maxAttempts, long initialMs, long maxMs, long wallMs);

  static native byte[] nativeJournalScan(long journal);

  static native byte[] nativeJournalById(long journal, byte[] id, int what);
}
