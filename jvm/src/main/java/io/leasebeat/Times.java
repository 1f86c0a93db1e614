package io.leasebeat;

import java.math.BigInteger;
import java.util.OptionalLong;

/** Conversions between the core's timeline (ns since the origin) and System.nanoTime(). */
final class Times {
  private static final BigInteger LONG_MAX = BigInteger.valueOf(Long.MAX_VALUE);

  private Times() {}

  /** origin + sinceOrigin as a nanoTime value, when it is at most Long.MAX_VALUE ns away. */
  static OptionalLong nanoTime(long origin, Num sinceOrigin) {
    if (!sinceOrigin.isFinite() || sinceOrigin.value().compareTo(LONG_MAX) > 0) {
      return OptionalLong.empty();
    }
    return OptionalLong.of(origin + sinceOrigin.value().longValueExact());
  }

  /** max(0, due - now) saturated to Long.MAX_VALUE; Long.MAX_VALUE for +infinity. */
  static long delay(long origin, Num sinceOrigin, long nowNanoTime) {
    if (!sinceOrigin.isFinite()) {
      return Long.MAX_VALUE;
    }
    // due - now = sinceOrigin - (now - origin); nanoTime differences are taken by subtraction.
    BigInteger d = sinceOrigin.value().subtract(BigInteger.valueOf(nowNanoTime - origin));
    if (d.signum() <= 0) {
      return 0;
    }
    return d.compareTo(LONG_MAX) > 0 ? Long.MAX_VALUE : d.longValueExact();
  }
}
