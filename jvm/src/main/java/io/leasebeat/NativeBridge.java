package io.leasebeat;

/**
 * The native methods of libleasebeat_jni. Each returns an envelope decoded by {@link Wire}. Only
 * primitives and byte arrays cross the boundary; strings travel as UTF-8.
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

  static native byte[] nativeAdopt(
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
      boolean timingUnknown);

  static native void nativeFree(long handle);

  static native byte[] nativeSent(long handle, long attemptId, long nowNs);

  static native byte[] nativeResponse(
      long handle, long attemptId, int status, byte[] headers, byte[] body, boolean timingUnknown, long nowNs);

  static native byte[] nativeFailure(long handle, long attemptId, int failure, long nowNs);

  static native byte[] nativeCancel(long handle, long nowNs);

  static native byte[] nativeState(long handle);

  static native byte[] nativeCatalog();

  static native byte[] nativePanic();

  static native byte[] nativeMath(int op, long a, long b, long c, long d, boolean flagA, boolean flagB);

  static native byte[] nativeRetryAfter(byte[] values);
}
