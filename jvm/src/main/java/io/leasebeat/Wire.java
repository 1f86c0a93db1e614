package io.leasebeat;

import java.io.ByteArrayOutputStream;
import java.math.BigInteger;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.OptionalLong;

/** Decoder of the native envelopes (format documented in jvm/native/lib.rs). */
final class Wire {
  private final ByteBuffer buf;

  private Wire(ByteBuffer buf) {
    this.buf = buf;
  }

  /** Opens an envelope: returns a reader on the OK payload or throws the error it carries. */
  static Wire open(byte[] envelope) {
    if (envelope == null || envelope.length == 0) {
      throw new IllegalStateException("leasebeat: empty answer from the native library");
    }
    Wire w = new Wire(ByteBuffer.wrap(envelope));
    int status = w.u8();
    switch (status) {
      case 0:
        return w;
      case 1:
        {
          String constant = w.str();
          String wire = w.str();
          String message = w.str();
          LeaseException.Code code = LeaseException.Code.valueOf(constant);
          if (!code.wire().equals(wire)) {
            throw new IllegalStateException("leasebeat: code " + constant + " has wire " + wire);
          }
          throw new LeaseException(code, message);
        }
      case 2:
        throw new LeaseException(LeaseException.Code.PANIC, w.str());
      case 3:
        {
          String kind = w.str();
          Optional<String> path = w.optStr();
          String message = w.str();
          Optional<String> moved = w.optStr();
          throw new JournalException(JournalException.Kind.ofWire(kind), path, message, moved);
        }
      default:
        throw new IllegalStateException("leasebeat: unknown envelope status " + status);
    }
  }

  int u8() {
    return buf.get() & 0xff;
  }

  boolean bool() {
    return u8() != 0;
  }

  int u32() {
    int n = buf.getInt();
    if (n < 0) {
      throw new IllegalStateException("leasebeat: length out of range");
    }
    return n;
  }

  long u64() {
    return buf.getLong();
  }

  byte[] bytes() {
    byte[] b = new byte[u32()];
    buf.get(b);
    return b;
  }

  String str() {
    return new String(bytes(), StandardCharsets.UTF_8);
  }

  Optional<String> optStr() {
    return bool() ? Optional.of(str()) : Optional.empty();
  }

  OptionalLong optU64() {
    return bool() ? OptionalLong.of(u64()) : OptionalLong.empty();
  }

  Num num() {
    int tag = u8();
    switch (tag) {
      case 0:
        return Num.NEG_INF;
      case 1:
        {
          byte[] b = new byte[16];
          buf.get(b);
          return Num.of(new BigInteger(b));
        }
      case 2:
        return Num.INF;
      default:
        throw new IllegalStateException("leasebeat: unknown number tag " + tag);
    }
  }

  StopReason reason() {
    String constant = str();
    String wire = str();
    StopReason r = StopReason.valueOf(constant);
    if (!r.wire().equals(wire)) {
      throw new IllegalStateException("leasebeat: reason " + constant + " has wire " + wire);
    }
    return r;
  }

  /**
   * Encodes (name, value) pairs: u32 count, then u32 length + UTF-8 bytes of each.
   *
   * @throws IllegalArgumentException if a name or value holds an unpaired surrogate
   */
  static byte[] pairs(List<String[]> pairs) {
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    writeInt(out, pairs.size());
    for (String[] p : pairs) {
      for (String s : p) {
        byte[] b = Utf8.encode(s, "header " + (s == p[0] ? "name " : "value of ") + p[0]);
        writeInt(out, b.length);
        out.write(b, 0, b.length);
      }
    }
    return out.toByteArray();
  }

  private static void writeInt(ByteArrayOutputStream out, int v) {
    out.write(v >>> 24);
    out.write(v >>> 16);
    out.write(v >>> 8);
    out.write(v);
  }
}
