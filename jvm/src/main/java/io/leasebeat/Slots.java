package io.leasebeat;

import java.math.BigInteger;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.LongBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Objects;
import java.util.Optional;
import java.util.OptionalLong;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReferenceArray;

/**
 * Decoder of the hot calls' results (layout documented in jvm/native/lib.rs, modules {@code dec},
 * {@code act}, {@code state}): a {@code long[]} of primitives and an {@code Object[]} holding only
 * real strings and bytes. Enum constants arrive as indices into tables the native catalog sends
 * once, matched here by stable string (no ordinal is assumed).
 */
final class Slots {
  private Slots() {}

  // Decision block (dec).
  static final int D_NEXT = 0;
  static final int D_WHAT = 1;
  static final int D_FLAGS = 2;
  static final int D_AT = 3;
  static final int D_KEY = 4;
  static final int D_KEY_INDEX = 5;
  static final int D_MODE = 6;
  static final int D_OUTCOME = 7;
  static final int D_PROVEN = 8;
  static final int D_EXPIRES = 9;
  static final int D_REMAINING = 10;
  static final int D_NUM_TAGS = 11;
  static final int D_WARN_COUNT = 12;
  static final int D_WARN = 13;
  static final int D_NUMS = 20;
  static final int D_RID_LEN = 34;
  static final int D_DETAIL_LEN = 35;
  static final int DEC_LEN = 36;
  static final long F_AT = 1;
  static final long F_KEY = 2;
  static final long F_KEY_INDEX = 4;
  static final long F_MODE = 8;
  static final long F_PROVEN = 16;
  static final long F_EXPIRES = 32;
  static final long F_REMAINING = 64;
  static final int O_RID = 0;
  static final int O_DETAIL = 1;

  // Action block (act).
  static final int A_TAG = 0;
  static final int A_REASON = 1;
  static final int A_ID = 2;
  static final int A_KIND = 3;
  static final int A_DUE_SET = 4;
  static final int A_DUE = 5;
  static final int A_KEY_INDEX = 6;
  static final int A_KEY_USE = 7;
  static final int A_SENT_SET = 8;
  static final int A_SENT = 9;
  static final int A_ZERO_WINDOW = 10;
  static final int A_KEY_LEN = 11;
  static final int A_BODY_LEN = 12;
  static final int ACT_LEN = 13;
  static final int O_KEY = 0;
  static final int O_BODY = 1;

  // A decision followed by the action it leaves (decided results).
  static final int DECIDED_LEN = DEC_LEN + ACT_LEN;
  static final int DECIDED_O_ACTION = 2;
  static final int DECIDED_OBJS = 4;

  // State (state).
  static final int S_MODE = ACT_LEN;
  static final int S_MAX_RTT = ACT_LEN + 1;
  static final int S_LAST_EVENT = ACT_LEN + 2;
  static final int S_HAS_LAST = ACT_LEN + 3;
  static final int S_DECISION = 18;
  static final int STATE_LEN = S_DECISION + DEC_LEN;
  static final int S_O_RID = 2;
  static final int S_O_DECISION = 3;
  static final int STATE_OBJS = 5;

  /**
   * The size of the text buffer a hot call gets: strings and bodies that fit come back in it (a
   * length slot), longer ones as objects (length -2); -1 = absent.
   */
  static final int TEXT_LEN = 512;

  /** The native buffer's layout (jvm/native/lib.rs, BUF_*): slots, text, input body. */
  static final int BUF_TEXT = 512;

  static final int BUF_IN = BUF_TEXT + TEXT_LEN;
  static final int BUF_IN_CAP = 3072;
  static final int BUF_LEN = BUF_IN + BUF_IN_CAP;

  /**
   * The buffers of one hot call (a decision or a poll): the native buffer the call reads the body
   * from and writes its result to (a direct buffer: no JNI call per access; texts and bodies are
   * copied out of it), the object slots and an action's slots read while decoding. Nothing keeps
   * them after the call: a call {@link #take takes} one from a shared pool and {@link #give gives}
   * it back, which {@link #clear clears} it (drops any object the call left: an error's message, a
   * text too long for the buffer).
   */
  static final class Scratch {
    final ByteBuffer buf = ByteBuffer.allocateDirect(BUF_LEN).order(ByteOrder.nativeOrder());
    final LongBuffer longs = buf.asLongBuffer();
    /** The address of {@link #buf}, for the native calls (valid while this scratch lives). */
    final long addr = NativeBridge.nativeBufferAddress(buf);

    final Object[] objs = new Object[DECIDED_OBJS];
    /** An action's slots (decoded, never kept). */
    final long[] act = new long[ACT_LEN];

    Scratch() {
      if (addr == 0) {
        throw new IllegalStateException("leasebeat: no native buffer");
      }
    }

    /**
     * The body argument: copied into the native buffer when it fits (returns its length; the
     * array argument is then null), else -1 (the array goes as is).
     */
    int putBody(byte[] body) {
      if (body == null || body.length > BUF_IN_CAP) {
        return -1;
      }
      buf.put(BUF_IN, body);
      return body.length;
    }

    /** The first {@code n} slots of the result into {@code s} from {@code from}. */
    void slots(int from, long[] s, int n) {
      longs.get(from, s, 0, n);
    }

    /** A copy of {@code n} bytes of the result's text from {@code from} (null for none). */
    byte[] bytes(int from, int n) {
      if (n == 0) {
        return null;
      }
      byte[] b = new byte[n];
      buf.get(BUF_TEXT + from, b);
      return b;
    }

    void clear() {
      Arrays.fill(objs, null);
    }
  }

  /**
   * The scratches not in use, shared by all threads: a few slots per core, a thread starting at the
   * slot its id hashes to. A scratch is only needed during a native call, and a thread in one is on
   * a core (a virtual thread too: pinned during the call), so the pool holds about as many as
   * threads ever were inside calls at once. A scratch per thread (a {@code ThreadLocal}) would
   * instead make every new thread (a virtual thread per task, a short-lived pool thread) allocate
   * a 4 KiB direct buffer of its own, freed only by the collector. Taking and giving back cost one
   * atomic operation each.
   */
  private static final AtomicReferenceArray<Scratch> FREE =
      new AtomicReferenceArray<>(
          Integer.highestOneBit(Math.max(8, 4 * Runtime.getRuntime().availableProcessors()) - 1)
              << 1);

  private static final int PROBES = 4;

  /** Scratches made since the class was loaded (for tests). */
  private static final AtomicLong MADE = new AtomicLong();

  /** The first pool slot the calling thread tries. */
  private static int home() {
    long id = Thread.currentThread().getId();
    return (int) (id * 0x9E3779B97F4A7C15L >>> 40);
  }

  /** A scratch for one call: from the pool, or a new one if the pool has none near this thread. */
  static Scratch take() {
    int mask = FREE.length() - 1;
    int h = home();
    for (int k = 0; k < PROBES; k++) {
      Scratch s = FREE.getAndSet((h + k) & mask, null);
      if (s != null) {
        return s;
      }
    }
    MADE.incrementAndGet();
    return new Scratch();
  }

  /**
   * Gives a scratch back after its call: cleared, then kept in the pool if a slot near this thread
   * is free (else dropped; the collector frees its buffer).
   */
  static void give(Scratch s) {
    s.clear();
    int mask = FREE.length() - 1;
    int h = home();
    for (int k = 0; k < PROBES; k++) {
      if (FREE.compareAndSet((h + k) & mask, null, s)) {
        return;
      }
    }
  }

  /** How many scratches were made so far (for tests). */
  static long made() {
    return MADE.get();
  }

  /** The adoption's handle slot, after its first decision. */
  static final int ADOPT_HANDLE = DECIDED_LEN;

  private static final BigInteger TWO_64 = BigInteger.ONE.shiftLeft(64);

  /** The index tables, from the native catalog (loaded with the first decision). */
  private static final class Tables {
    static final StopReason[] REASONS;
    static final AttemptKind[] KINDS;
    static final KeyUse[] KEY_USES;
    static final Mode[] MODES;
    static final Warning[] WARNINGS;
    static final OutcomeClass[] OUTCOMES;

    static {
      Wire w = Wire.open(NativeBridge.nativeCatalog());
      for (int i = 0, n = w.u32(); i < n; i++) {
        w.str();
        w.str();
      }
      REASONS = new StopReason[w.u32()];
      for (int i = 0; i < REASONS.length; i++) {
        REASONS[i] = w.reason();
      }
      w.str(); // version
      KINDS = table(w, AttemptKind.class);
      KEY_USES = table(w, KeyUse.class);
      MODES = table(w, Mode.class);
      WARNINGS = table(w, Warning.class);
      OUTCOMES = table(w, OutcomeClass.class);
      List<String> names = new ArrayList<>();
      for (int i = 0, n = w.u32(); i < n; i++) {
        names.add(w.str());
      }
      if (!names.equals(Numbers.NAMES)) {
        throw new IllegalStateException(
            "leasebeat: the native numbers " + names + " differ from " + Numbers.NAMES);
      }
    }

    @SuppressWarnings("unchecked")
    private static <E extends Enum<E>> E[] table(Wire w, Class<E> type) {
      int n = w.u32();
      E[] t = (E[]) java.lang.reflect.Array.newInstance(type, n);
      for (int i = 0; i < n; i++) {
        String wire = w.str();
        for (E c : type.getEnumConstants()) {
          if (c.toString().equals(wire)) {
            t[i] = c;
          }
        }
        if (t[i] == null) {
          throw new IllegalStateException("leasebeat: no " + type.getSimpleName() + " for " + wire);
        }
      }
      return t;
    }
  }

  /** The mode at a state's mode slot (-1 = none). */
  static Optional<Mode> mode(long i) {
    return i < 0 ? Optional.empty() : Optional.of(at(Tables.MODES, i));
  }

  /** Loads the tables now (a mismatch with the native library fails here). */
  static void checkTables() {
    Tables.KINDS.getClass();
  }

  /**
   * Throws what a non-zero status carries: objects 0 and 1 are the {@code Code} constant and the
   * message of a core error (1), object 1 the message of a panic (2).
   */
  static void check(int status, Object[] objs) {
    switch (status) {
      case 0:
        return;
      case 1:
        throw new LeaseException(LeaseException.Code.valueOf((String) objs[0]), (String) objs[1]);
      case 2:
        throw new LeaseException(LeaseException.Code.PANIC, (String) objs[1]);
      default:
        throw new IllegalStateException("leasebeat: unknown native status " + status);
    }
  }

  /** Bytes of the text buffer a decision at {@code o} uses. */
  static int decisionText(long[] s, int o) {
    return (int) (Math.max(0, s[o + D_RID_LEN]) + Math.max(0, s[o + D_DETAIL_LEN]));
  }

  /** Bytes of the text buffer an action at {@code o} uses. */
  static int actionText(long[] s, int o) {
    return (int) (Math.max(0, s[o + A_KEY_LEN]) + Math.max(0, s[o + A_BODY_LEN]));
  }

  private static <T> T at(T[] table, long i) {
    if (i < 0 || i >= table.length) {
      throw new IllegalStateException("leasebeat: index " + i + " out of range from the core");
    }
    return table[(int) i];
  }

  /** A u64 bit pattern the core bounds to 0..2^63-1 (P-1). */
  private static OptionalLong signed(long[] s, long flags, long flag, int slot, String what) {
    if ((flags & flag) == 0) {
      return OptionalLong.empty();
    }
    if (s[slot] < 0) {
      throw new IllegalStateException("leasebeat: " + what + " above 2^63-1 from the core");
    }
    return OptionalLong.of(s[slot]);
  }

  /**
   * Number {@code i} of a decision's slots: the core's packed form ({@code Numbers::packed}),
   * three tag bits per number (0 absent, 1 the finite magnitude, 2 its negation, 3 +inf, 4 -inf)
   * and the magnitude's u64 bits.
   */
  private static Optional<Num> num(long tags, int i, long[] s, int o) {
    long mag = s[o + D_NUMS + i];
    switch ((int) (tags >>> (3 * i)) & 7) {
      case 0:
        return Optional.empty();
      case 1:
        return Optional.of(mag >= 0 ? Num.of(mag) : Num.ofUnsigned(mag));
      case 2:
        // -mag: a long down to -2^63 (mag = 2^63 has the bits of Long.MIN_VALUE).
        return Optional.of(
            mag > 0 || mag == Long.MIN_VALUE
                ? Num.of(-mag)
                : Num.of(BigInteger.valueOf(mag).add(TWO_64).negate()));
      case 3:
        return Optional.of(Num.INF);
      case 4:
        return Optional.of(Num.NEG_INF);
      default:
        throw new IllegalStateException("leasebeat: number tag out of range from the core");
    }
  }

  /**
   * The decision at slot offset {@code o}, objects from {@code oo}: its texts are read now (the
   * text buffer is reused), its components on first access ({@link #parts}).
   */
  static Decision decision(
      long[] s, int o, Object[] objs, int oo, byte[] text, int t, long origin) {
    // Kept for the components and the JSON on demand; every call allocates its own slots, so
    // offset 0 is not copied.
    long[] raw = o == 0 ? s : Arrays.copyOfRange(s, o, o + DEC_LEN);
    int n = decisionText(s, o);
    return new Decision(raw, n == 0 ? null : Arrays.copyOfRange(text, t, t + n), objs, oo, origin);
  }

  /** The components of the decision in {@code s} (offset 0), with its texts. */
  static Decision.Parts parts(long[] s, String rid, String detail) {
    final int o = 0;
    long flags = s[o + D_FLAGS];
    Optional<AttemptKind> send = Optional.empty();
    Optional<StopReason> stop = Optional.empty();
    Optional<Num> at = Optional.empty();
    Optional<KeyUse> key = Optional.empty();
    OptionalLong keyIndex = OptionalLong.empty();
    if (s[o + D_NEXT] == 0) {
      send = Optional.of(at(Tables.KINDS, s[o + D_WHAT]));
      at = Optional.of((flags & F_AT) != 0 ? Num.ofUnsigned(s[o + D_AT]) : Num.INF);
    } else {
      stop = Optional.of(at(Tables.REASONS, s[o + D_WHAT]));
    }
    if ((flags & F_KEY) != 0) {
      key = Optional.of(at(Tables.KEY_USES, s[o + D_KEY]));
    }
    if ((flags & F_KEY_INDEX) != 0) {
      keyIndex = OptionalLong.of(s[o + D_KEY_INDEX]);
    }
    Optional<Mode> mode =
        (flags & F_MODE) != 0 ? Optional.of(at(Tables.MODES, s[o + D_MODE])) : Optional.empty();
    long tags = s[o + D_NUM_TAGS];
    Numbers numbers =
        new Numbers(
            num(tags, 0, s, o),
            num(tags, 1, s, o),
            num(tags, 2, s, o),
            num(tags, 3, s, o),
            num(tags, 4, s, o),
            num(tags, 5, s, o),
            num(tags, 6, s, o),
            num(tags, 7, s, o),
            num(tags, 8, s, o),
            num(tags, 9, s, o),
            num(tags, 10, s, o),
            num(tags, 11, s, o),
            num(tags, 12, s, o),
            num(tags, 13, s, o));
    int nw = (int) s[o + D_WARN_COUNT];
    List<Warning> warnings;
    if (nw == 0) {
      warnings = List.of();
    } else {
      Warning[] w = new Warning[nw];
      for (int i = 0; i < nw; i++) {
        w[i] = at(Tables.WARNINGS, s[o + D_WARN + i]);
      }
      warnings = List.of(w);
    }
    OutcomeClass outcome = at(Tables.OUTCOMES, s[o + D_OUTCOME]);
    Optional<Num> provenUntil = Optional.empty();
    if ((flags & F_PROVEN) != 0) {
      long p = s[o + D_PROVEN];
      provenUntil = Optional.of(p == -1L ? Num.INF : Num.ofUnsigned(p));
    }
    return new Decision.Parts(
        Optional.ofNullable(rid),
        send,
        stop,
        at,
        key,
        keyIndex,
        mode,
        numbers,
        warnings,
        outcome,
        Optional.ofNullable(detail),
        provenUntil,
        signed(s, flags, F_EXPIRES, o + D_EXPIRES, "expires_at_ms"),
        signed(s, flags, F_REMAINING, o + D_REMAINING, "remaining_ttl_ms"));
  }

  /**
   * The action in {@code s}; {@code known} is the attempt the caller holds (its key and body were
   * not sent again when the ids match), reused as is when nothing changed.
   */
  static Action action(
      long[] s,
      int o,
      Object[] objs,
      int oo,
      ByteBuffer text,
      int t,
      Attempt known,
      Action knownAction,
      long origin) {
    int tag = (int) s[o + A_TAG];
    if (tag == 2) {
      StopReason r = at(Tables.REASONS, s[o + A_REASON]);
      if (knownAction != null && knownAction.stopReason().orElse(null) == r) {
        return knownAction;
      }
      return new Action(Action.Type.STOP, Optional.empty(), Optional.of(r));
    }
    Attempt a = attempt(s, o, objs, oo, text, t, known, origin);
    Action.Type type = tag == 0 ? Action.Type.SEND : Action.Type.AWAIT_OUTCOME;
    if (knownAction != null
        && knownAction.type() == type
        && knownAction.attempt().orElse(null) == a) {
      return knownAction;
    }
    return new Action(type, Optional.of(a), Optional.empty());
  }

  private static Attempt attempt(
      long[] s, int o, Object[] objs, int oo, ByteBuffer text, int t, Attempt known, long origin) {
    long id = s[o + A_ID];
    AttemptKind kind = at(Tables.KINDS, s[o + A_KIND]);
    // A finite due time is built on first use (null here).
    boolean dueSet = s[o + A_DUE_SET] != 0;
    long dueBits = s[o + A_DUE];
    Num due = dueSet ? null : Num.INF;
    long keyIndex = s[o + A_KEY_INDEX];
    KeyUse keyUse = at(Tables.KEY_USES, s[o + A_KEY_USE]);
    OptionalLong sent =
        s[o + A_SENT_SET] != 0 ? OptionalLong.of(origin + s[o + A_SENT]) : OptionalLong.empty();
    boolean zeroWindow = s[o + A_ZERO_WINDOW] != 0;
    if (known != null && known.id() == id) {
      if (known.kind() == kind
          && known.dueIs(dueSet, dueBits)
          && known.keyIndex() == keyIndex
          && known.keyUse() == keyUse
          && known.sentNanoTime().equals(sent)
          && known.zeroWindowRetry() == zeroWindow) {
        return known;
      }
      return known.with(kind, due, dueBits, keyIndex, keyUse, sent, zeroWindow);
    }
    long keyLen = s[o + A_KEY_LEN];
    long bodyLen = s[o + A_BODY_LEN];
    if (keyLen >= 0 && bodyLen >= 0) {
      // The usual case: key and body in the text buffer, copied once; the key String is built
      // on first use.
      byte[] bytes = new byte[(int) (keyLen + bodyLen)];
      text.get(t, bytes);
      return new Attempt(
          id,
          kind,
          due,
          dueBits,
          null,
          bytes,
          (int) keyLen,
          keyIndex,
          keyUse,
          sent,
          zeroWindow,
          origin);
    }
    int b = t + (int) Math.max(0, keyLen);
    byte[] body;
    if (bodyLen == -2) {
      body = (byte[]) objs[oo + O_BODY];
    } else {
      body = new byte[(int) bodyLen];
      text.get(b, body);
    }
    String key;
    if (keyLen == -2) {
      key = (String) objs[oo + O_KEY];
    } else {
      byte[] k = new byte[(int) keyLen];
      text.get(t, k);
      key = new String(k, StandardCharsets.UTF_8);
    }
    // Both fresh (a copy, or an object made for this call): owned by the attempt as they are.
    return new Attempt(
        id,
        kind,
        due,
        dueBits,
        Objects.requireNonNull(key, "key"),
        body,
        0,
        keyIndex,
        keyUse,
        sent,
        zeroWindow,
        origin);
  }
}
