package io.leasebeat;

import java.math.BigInteger;
import java.util.Objects;

/**
 * A millisecond (or nanosecond) quantity that may be infinite. Durations are finite and
 * non-negative or {@link #INF}; the retry window may also be negative or {@link #NEG_INF}. Finite
 * values are exact {@link BigInteger}s (the core uses unsigned 64-bit and 128-bit integers), so no
 * value is ever rounded or truncated on its way to Java.
 */
public final class Num implements Comparable<Num> {
  /** Whether a {@link Num} is finite, and the sign of an infinite one. */
  public enum Kind {
    /** -infinity. */
    NEGATIVE_INFINITY,
    /** A finite integer. */
    FINITE,
    /** +infinity. */
    POSITIVE_INFINITY
  }

  /** +infinity (an unbounded budget, an overflowing due time): JSON {@code "inf"}. */
  public static final Num INF = new Num(Kind.POSITIVE_INFINITY, null);

  /** -infinity (the retry window when the budget is unbounded): JSON {@code "-inf"}. */
  public static final Num NEG_INF = new Num(Kind.NEGATIVE_INFINITY, null);

  private static final BigInteger TWO_64 = BigInteger.ONE.shiftLeft(64);

  private final Kind kind;
  private final BigInteger value;

  private Num(Kind kind, BigInteger value) {
    this.kind = kind;
    this.value = value;
  }

  /**
   * A finite value.
   *
   * @param value the value
   * @return the number
   */
  public static Num of(long value) {
    return new Num(Kind.FINITE, BigInteger.valueOf(value));
  }

  /**
   * A finite value.
   *
   * @param value the value
   * @return the number
   * @throws NullPointerException if {@code value} is null
   */
  public static Num of(BigInteger value) {
    return new Num(Kind.FINITE, Objects.requireNonNull(value, "value"));
  }

  /**
   * The finite value of an unsigned 64-bit bit pattern (as the core returns it).
   *
   * @param bits the bits, read as unsigned
   * @return the number, between 0 and 2^64-1
   */
  static Num ofUnsigned(long bits) {
    BigInteger v = BigInteger.valueOf(bits);
    return of(bits >= 0 ? v : v.add(TWO_64));
  }

  /**
   * Parses the JSON form: an integer, {@code "inf"} or {@code "-inf"}.
   *
   * @param text the text
   * @return the number
   * @throws NumberFormatException if the text is none of these
   */
  public static Num parse(String text) {
    Objects.requireNonNull(text, "text");
    switch (text) {
      case "inf":
        return INF;
      case "-inf":
        return NEG_INF;
      default:
        return of(new BigInteger(text));
    }
  }

  /**
   * Whether finite or which infinity.
   *
   * @return the kind
   */
  public Kind kind() {
    return kind;
  }

  /**
   * True for a finite value.
   *
   * @return whether finite
   */
  public boolean isFinite() {
    return kind == Kind.FINITE;
  }

  /**
   * True for +infinity or -infinity.
   *
   * @return whether infinite
   */
  public boolean isInfinite() {
    return kind != Kind.FINITE;
  }

  /**
   * The sign: -1, 0 or 1 (infinities have sign -1 and 1).
   *
   * @return the sign
   */
  public int signum() {
    switch (kind) {
      case NEGATIVE_INFINITY:
        return -1;
      case POSITIVE_INFINITY:
        return 1;
      default:
        return value.signum();
    }
  }

  /**
   * The exact finite value.
   *
   * @return the value
   * @throws ArithmeticException if infinite
   */
  public BigInteger value() {
    if (value == null) {
      throw new ArithmeticException("infinite: " + this);
    }
    return value;
  }

  /**
   * The finite value as a {@code long}.
   *
   * @return the value
   * @throws ArithmeticException if infinite or outside the {@code long} range
   */
  public long longValueExact() {
    return value().longValueExact();
  }

  /**
   * Orders -infinity before every finite value before +infinity.
   *
   * @param other another number
   * @return a negative number, zero or a positive number
   */
  @Override
  public int compareTo(Num other) {
    int k = Integer.compare(kind.ordinal(), other.kind.ordinal());
    if (k != 0 || kind != Kind.FINITE) {
      return k;
    }
    return value.compareTo(other.value);
  }

  /**
   * Equal kind and, if finite, equal value.
   *
   * @param o another object
   * @return whether equal
   */
  @Override
  public boolean equals(Object o) {
    return o instanceof Num && compareTo((Num) o) == 0;
  }

  /**
   * A hash consistent with {@link #equals(Object)}.
   *
   * @return the hash
   */
  @Override
  public int hashCode() {
    return Objects.hash(kind, value);
  }

  /**
   * The JSON form without quotes: the integer, {@code inf} or {@code -inf}.
   *
   * @return the text
   */
  @Override
  public String toString() {
    switch (kind) {
      case NEGATIVE_INFINITY:
        return "-inf";
      case POSITIVE_INFINITY:
        return "inf";
      default:
        return value.toString();
    }
  }
}
