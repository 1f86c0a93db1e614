package io.leasebeat;

import java.nio.ByteBuffer;
import java.nio.CharBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;

/** Strict UTF-8 encoding of strings that cross to the native library. */
final class Utf8 {
  private Utf8() {}

  /**
   * The UTF-8 bytes of {@code s}; a lone (unpaired) surrogate, which has no UTF-8 form, is refused
   * instead of being replaced by {@code ?} (which would silently send a different value).
   *
   * @param s the string
   * @param what its name, for the message
   * @return the bytes
   * @throws IllegalArgumentException if {@code s} holds an unpaired surrogate
   */
  static byte[] encode(String s, String what) {
    try {
      ByteBuffer b =
          StandardCharsets.UTF_8
              .newEncoder()
              .onMalformedInput(CodingErrorAction.REPORT)
              .onUnmappableCharacter(CodingErrorAction.REPORT)
              .encode(CharBuffer.wrap(s));
      byte[] bytes = new byte[b.remaining()];
      b.get(bytes);
      return bytes;
    } catch (CharacterCodingException e) {
      throw new IllegalArgumentException(
          what + " is not valid Unicode (an unpaired surrogate)", e);
    }
  }

  /** {@link #encode} of a nullable string. */
  static byte[] encodeNullable(String s, String what) {
    return s == null ? null : encode(s, what);
  }

  /** The remaining bytes of a buffer, without moving its position. */
  static byte[] bytesOf(ByteBuffer buffer) {
    ByteBuffer d = buffer.duplicate();
    byte[] b = new byte[d.remaining()];
    d.get(b);
    return b;
  }
}
