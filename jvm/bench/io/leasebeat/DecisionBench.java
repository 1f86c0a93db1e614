package io.leasebeat;

import java.nio.charset.StandardCharsets;
import java.util.Arrays;

/**
 * Warmed-loop benchmark of one primary decision through the Java API (scripts/bench-jvm.sh).
 *
 * <p>Fixture: the core's benches/heartbeat.rs one. Setup (not timed): a heartbeat (ttl 60000 ms,
 * timeout 10000 ms, sequential keys), the create sent at 0 and answered 200 at 1.5 s with the
 * create body, the first extend sent at 38.5 s. Timed: {@code handleResponse(id, 200 extend body,
 * 38.6 s)} then {@code pollAction()}, once per prepared heartbeat, over a batch; ns per operation =
 * batch time / batch size. The Response object is built once, outside the timed region (as
 * Response::new(200).body(EXTEND) is inside the Rust one: that copy is the core's input). Each
 * round reports a median over its batches; the figure is the median of the rounds. A full GC runs
 * after each batch's setup, outside the timed region (see {@link #GC}).
 */
final class DecisionBench {
  static final long MS = 1_000_000L;
  static final String CREATE =
      "{\"decision\":\"ALLOW\",\"reservation_id\":\"r-1\",\"affected_scopes\":[\"tenant:acme\"],"
          + "\"expires_at_ms\":1785585660000,\"remaining_ttl_ms\":61500}";
  static final String EXTEND =
      "{\"status\":\"ACTIVE\",\"expires_at_ms\":1785585720000,\"remaining_ttl_ms\":60000}";
  static final Response CREATE_OK = Response.of(200).withBody(CREATE.getBytes(StandardCharsets.UTF_8));
  static final Response EXTEND_OK = Response.of(200).withBody(EXTEND.getBytes(StandardCharsets.UTF_8));

  static volatile Object sink;

  /**
   * A full GC after each batch's setup (default true): the heartbeats' Java objects are then
   * compacted, as long-lived ones are in a running service. Without it they lie scattered among
   * the setup's garbage and the Java rounds of one run vary 2-5x (measured), while the Rust ones
   * do not.
   */
  static final boolean GC = !"false".equals(System.getProperty("bench.gc"));

  private DecisionBench() {}

  private static final java.lang.management.ThreadMXBean THREADS =
      java.lang.management.ManagementFactory.getThreadMXBean();

  /**
   * The clock: this thread's CPU time (time spent waiting while other processes ran is not
   * counted; the Rust hooks use the same clock), or nanoTime with -Dbench.clock=wall.
   */
  static final boolean CPU =
      !"wall".equals(System.getProperty("bench.clock")) && THREADS.isCurrentThreadCpuTimeSupported();

  static long now() {
    return CPU ? THREADS.getCurrentThreadCpuTime() : System.nanoTime();
  }

  /** A heartbeat whose create succeeded and whose first extend is in flight; returns its id. */
  static Heartbeat inFlight(long[] id, int i) {
    Heartbeat hb =
        Heartbeat.builder().ttlMillis(60_000).requestTimeoutMillis(10_000).keyPrefix("k").originNanos(0).build();
    long c = hb.pollAction().attempt().orElseThrow().id();
    hb.handleSent(c, 0);
    hb.handleResponse(c, CREATE_OK, 1_500 * MS);
    long e = hb.pollAction().attempt().orElseThrow().id();
    hb.handleSent(e, 38_500 * MS);
    id[i] = e;
    return hb;
  }

  /**
   * A fixed permutation of 0..n-1 (seed 42): the shuffled visiting order, as decisions come in a
   * running service (timer order, not creation order). The Java and Rust loops use the same one.
   */
  static int[] shuffled(int n) {
    int[] order = identity(n);
    java.util.Random r = new java.util.Random(42);
    for (int i = n - 1; i > 0; i--) {
      int j = r.nextInt(i + 1);
      int t = order[i];
      order[i] = order[j];
      order[j] = t;
    }
    return order;
  }

  static int[] identity(int n) {
    int[] order = new int[n];
    for (int i = 0; i < n; i++) {
      order[i] = i;
    }
    return order;
  }

  /** ns per op of one batch of the timed region, visiting the heartbeats in creation order. */
  static double batch(int n, boolean poll) {
    return batch(n, poll, identity(n));
  }

  /** ns per op of one batch of the timed region, visiting the heartbeats in {@code order}. */
  static double batch(int n, boolean poll, int[] order) {
    Heartbeat[] hbs = new Heartbeat[n];
    long[] ids = new long[n];
    for (int i = 0; i < n; i++) {
      hbs[i] = inFlight(ids, i);
    }
    if (GC) {
      System.gc(); // live heartbeats compacted, as long-lived ones are in a running service
    }
    Object last = null;
    long t0 = now();
    for (int k = 0; k < n; k++) {
      int i = order[k];
      Decision d = hbs[i].handleResponse(ids[i], EXTEND_OK, 38_600 * MS);
      last = poll ? hbs[i].pollAction() : d;
    }
    long t1 = now();
    sink = last;
    for (Heartbeat hb : hbs) {
      hb.close();
    }
    return (t1 - t0) / (double) n;
  }

  /**
   * ns per op of the same calls in one Rust loop (no JNI per operation) on a batch of heartbeats
   * made through the Java API exactly as {@link #batch}'s: the core's cost on the very heartbeats
   * (and memory placement) the Java loop walks.
   */
  static double rustBatch(int n, int[] order) throws ReflectiveOperationException {
    Heartbeat[] hbs = new Heartbeat[n];
    long[] made = new long[n];
    long[] ids = new long[n];
    long[] handles = new long[n];
    for (int i = 0; i < n; i++) {
      hbs[i] = inFlight(made, i);
    }
    for (int k = 0; k < n; k++) {
      ids[k] = made[order[k]];
      handles[k] = HANDLE.getLong(hbs[order[k]]);
    }
    if (GC) {
      System.gc();
    }
    double r = NativeBridge.nativeBenchHandles(handles, ids, 38_600 * MS);
    for (Heartbeat hb : hbs) {
      hb.close();
    }
    return r;
  }

  /** The core reference with the same GC between setup and timing as {@link #batch}. */
  static double coreBatch(int n, int[] order) {
    long b = NativeBridge.nativeBenchPrepare(n);
    if (GC) {
      System.gc();
    }
    return NativeBridge.nativeBenchRun(b, order);
  }

  private static final java.lang.reflect.Field HANDLE;

  static {
    try {
      HANDLE = Heartbeat.class.getDeclaredField("handle");
      HANDLE.setAccessible(true);
    } catch (ReflectiveOperationException e) {
      throw new ExceptionInInitializerError(e);
    }
  }

  /** Split timings (bench.splits=true): the native calls alone and the Java decoding alone. */
  static double[] splits(int n) throws ReflectiveOperationException {
    java.lang.reflect.Field hf = Heartbeat.class.getDeclaredField("handle");
    hf.setAccessible(true);
    Heartbeat[] hbs = new Heartbeat[n];
    long[] ids = new long[n];
    long[] handles = new long[n];
    for (int i = 0; i < n; i++) {
      hbs[i] = inFlight(ids, i);
      handles[i] = hf.getLong(hbs[i]);
    }
    byte[] body = EXTEND_OK.rawBody();
    Slots.Scratch sc = Slots.take();
    if (GC) {
      System.gc();
    }
    Object[] objs = sc.objs;
    long t0 = now();
    for (int i = 0; i < n; i++) {
      int len = sc.putBody(body);
      NativeBridge.nativeResponse(
          handles[i], ids[i], 200, null, null, len, false, 38_600 * MS, ids[i], sc.addr, objs);
    }
    long t1 = now();
    Object last = null;
    for (int i = 0; i < n; i++) {
      // What Heartbeat.decide does after the call: copy the result out and decode it.
      long[] raw = new long[Slots.DEC_LEN];
      sc.slots(0, raw, Slots.DEC_LEN);
      sc.slots(Slots.DEC_LEN, sc.act, Slots.ACT_LEN);
      int t = Slots.decisionText(raw, 0);
      last = new Decision(raw, sc.bytes(0, t), objs, 0, 0);
      last =
          Slots.action(
              sc.act, 0, objs, Slots.DECIDED_O_ACTION, sc.buf, Slots.BUF_TEXT + t, null, null, 0);
    }
    long t2 = now();
    for (int i = 0; i < n; i++) {
      NativeBridge.nativePoll(handles[i], 0, sc.addr, objs);
    }
    long t3 = now();
    for (int i = 0; i < n; i++) {
      sc.slots(0, sc.act, Slots.ACT_LEN);
      last = Slots.action(sc.act, 0, objs, 0, sc.buf, Slots.BUF_TEXT, null, null, 0);
    }
    long t4 = now();
    for (int i = 0; i < n; i++) {
      NativeBridge.nativeSent(handles[i], 99, 38_700 * MS, new Object[2]);
    }
    long t5 = now();
    sink = last;
    Slots.give(sc);
    for (Heartbeat hb : hbs) {
      hb.close();
    }
    long t6 = 0;
    long t7 = 0;
    // The core in one Rust loop, on heartbeats made through the Java API.
    for (int i = 0; i < n; i++) {
      hbs[i] = inFlight(ids, i);
      handles[i] = hf.getLong(hbs[i]);
    }
    if (GC) {
      System.gc();
    }
    double rustOnJava = NativeBridge.nativeBenchHandles(handles, ids, 38_600 * MS);
    for (Heartbeat hb : hbs) {
      hb.close();
    }
    return new double[] {
      (t1 - t0) / (double) n, (t2 - t1) / (double) n, (t3 - t2) / (double) n,
      (t4 - t3) / (double) n, (t5 - t4) / (double) n, (t7 - t6) / (double) n, rustOnJava
    };
  }

  static long[] round1(double[] v) {
    long[] r = new long[v.length];
    for (int i = 0; i < v.length; i++) {
      r[i] = Math.round(v[i]);
    }
    return r;
  }

  static double median(double[] v) {
    double[] s = v.clone();
    Arrays.sort(s);
    return s[s.length / 2];
  }

  public static void main(String[] args) throws ReflectiveOperationException {
    if (Boolean.getBoolean("bench.splits")) {
      String[] names = {
        "nativeResponse (JNI + core + decision and action slots)",
        "copy out + Slots.decision + Slots.action (Java decode)",
        "nativePoll (JNI + core + key/body)", "copy out + Slots.action (Java decode)",
        "nativeSent failing NOT_OUTSTANDING (JNI + error path)",
        "(unused)",
        "rust loop on heartbeats made through Java (no JNI per op)"
      };
      for (int w = 0; w < 150; w++) {
        splits(1000);
      }
      double[][] r = new double[names.length][40];
      for (int b = 0; b < 40; b++) {
        double[] x = splits(1000);
        for (int k = 0; k < names.length; k++) {
          r[k][b] = x[k];
        }
      }
      for (int k = 0; k < names.length; k++) {
        System.out.printf("%-58s %10.1f%n", names[k], median(r[k]));
      }
      System.out.printf("%-58s %10.1f%n", "rust core alone", NativeBridge.benchCore(1000, 40));
      System.out.printf(
          "%-58s %10.1f%n", "rust core alone, boxed heartbeats", NativeBridge.benchCoreBoxed(1000, 40));
      System.out.printf(
          "%-58s %10.1f%n",
          "rust core alone, caches flushed before timing",
          NativeBridge.benchCoreFlushed(1000, 40));
      return;
    }
    int n = 1000;
    int batches = Integer.getInteger("bench.batches", 40);
    int rounds = Integer.getInteger("bench.rounds", 7);
    // Warm-up: compile every path (C2) before measuring.
    int[] seq = identity(n);
    int[] shuf = shuffled(n);
    for (int w = 0; w < 300; w++) {
      batch(n, true, w % 2 == 0 ? seq : shuf);
      batch(n, false);
    }
    for (int w = 0; w < 20; w++) {
      rustBatch(n, seq);
      coreBatch(n, w % 2 == 0 ? seq : shuf);
    }
    double[] primary = new double[rounds];
    double[] responseOnly = new double[rounds];
    double[] core = new double[rounds];
    double[] same = new double[rounds];
    double[] warm = new double[rounds];
    double[] primaryShuffled = new double[rounds];
    double[] coreShuffled = new double[rounds];
    for (int r = 0; r < rounds; r++) {
      double[] a = new double[batches];
      double[] b = new double[batches];
      double[] h = new double[batches];
      double[] c = new double[batches];
      double[] as = new double[batches];
      double[] cs = new double[batches];
      for (int i = 0; i < batches; i++) {
        a[i] = batch(n, true, seq);
        b[i] = batch(n, false);
        h[i] = rustBatch(n, seq);
        c[i] = coreBatch(n, seq);
        as[i] = batch(n, true, shuf);
        cs[i] = coreBatch(n, shuf);
      }
      primary[r] = median(a);
      responseOnly[r] = median(b);
      same[r] = median(h);
      core[r] = median(c);
      primaryShuffled[r] = median(as);
      coreShuffled[r] = median(cs);
      warm[r] = NativeBridge.benchCore(n, batches);
    }
    double p = median(primary);
    double ro = median(responseOnly);
    double c = median(core);
    double sh = median(same);
    double cw = median(warm);
    double ps = median(primaryShuffled);
    double cs = median(coreShuffled);
    System.out.printf("rounds: %d x %d batches of %d heartbeats%n", rounds, batches, n);
    System.out.printf("round medians, decision + poll: %s%n", Arrays.toString(round1(primary)));
    System.out.printf("round medians, core:            %s%n", Arrays.toString(round1(core)));
    System.out.printf("round medians, core warm:       %s%n", Arrays.toString(round1(warm)));
    System.out.printf("round medians, core on Java's:  %s%n", Arrays.toString(round1(same)));
    System.out.printf(
        "round medians, shuffled, java:  %s%n", Arrays.toString(round1(primaryShuffled)));
    System.out.printf("round medians, shuffled, core:  %s%n", Arrays.toString(round1(coreShuffled)));
    System.out.printf("clock: %s%n", CPU ? "thread CPU time" : "wall (nanoTime; Rust hooks: CPU)");
    System.out.printf("%-58s %10s%n", "what (median ns per operation)", "ns");
    System.out.printf("%-58s %10.1f%n", "java handleResponse(200 extend) + pollAction", p);
    System.out.printf("%-58s %10.1f%n", "java handleResponse(200 extend) only", ro);
    System.out.printf("%-58s %10.1f%n", "rust core handle_response + poll_action, same process", c);
    System.out.printf("%-58s %10.1f%n", "rust core, warm (no GC between setup and timing)", cw);
    System.out.printf("%-58s %10.1f%n", "rust core, same calls on the Java-made heartbeats", sh);
    System.out.printf("%-58s %10.1f%n", "JNI + Java overhead above the core (target <= 300)", p - c);
    System.out.printf("%-58s %10.1f%n", "JNI + Java overhead above the core, same heartbeats", p - sh);
    System.out.printf("%-58s %10.1f%n", "shuffled order: java handleResponse + pollAction", ps);
    System.out.printf("%-58s %10.1f%n", "shuffled order: rust core, same process", cs);
    System.out.printf("%-58s %10.1f%n", "shuffled order: JNI + Java overhead above the core", ps - cs);
    System.out.printf(
        "BENCH {\"id\": \"jvm.decision\", \"what\": \"Java handleResponse(200 extend body) +"
            + " pollAction, warmed loop\", \"value\": %.1f, \"unit\": \"ns\"}%n",
        p);
    System.out.printf(
        "BENCH {\"id\": \"jvm.core_same_process\", \"what\": \"the same calls in Rust inside the"
            + " JVM process (no JNI; Rust-made heartbeats, same GC between setup and timing as the"
            + " Java batches)\", \"value\": %.1f, \"unit\": \"ns\"}%n",
        c);
    System.out.printf(
        "BENCH {\"id\": \"jvm.core_warm\", \"what\": \"the same, timed right after setup (caches warm,"
            + " as the core's criterion bench)\", \"value\": %.1f, \"unit\": \"ns\"}%n",
        cw);
    System.out.printf(
        "BENCH {\"id\": \"jvm.overhead\", \"what\": \"JNI and Java cost above the core, same run\","
            + " \"value\": %.1f, \"unit\": \"ns\"}%n",
        p - c);
    System.out.printf(
        "BENCH {\"id\": \"jvm.core_same_heartbeats\", \"what\": \"the same calls in one Rust loop on"
            + " the heartbeats made through the Java API (their memory placement)\", \"value\": %.1f,"
            + " \"unit\": \"ns\"}%n",
        sh);
    System.out.printf(
        "BENCH {\"id\": \"jvm.overhead_same_heartbeats\", \"what\": \"JNI and Java cost above the"
            + " core on the same heartbeats, same run\", \"value\": %.1f, \"unit\": \"ns\"}%n",
        p - sh);
    System.out.printf(
        "BENCH {\"id\": \"jvm.decision_shuffled\", \"what\": \"as jvm.decision, the heartbeats"
            + " visited in a fixed shuffled order (as timers visit them)\", \"value\": %.1f,"
            + " \"unit\": \"ns\"}%n",
        ps);
    System.out.printf(
        "BENCH {\"id\": \"jvm.core_shuffled\", \"what\": \"as jvm.core_same_process, same"
            + " shuffled order\", \"value\": %.1f, \"unit\": \"ns\"}%n",
        cs);
    System.out.printf(
        "BENCH {\"id\": \"jvm.overhead_shuffled\", \"what\": \"JNI and Java cost above the core,"
            + " shuffled order, same run\", \"value\": %.1f, \"unit\": \"ns\"}%n",
        ps - cs);
  }
}
