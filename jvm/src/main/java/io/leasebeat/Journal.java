package io.leasebeat;

import java.lang.ref.Cleaner;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;
import java.util.Optional;
import java.util.concurrent.locks.ReentrantReadWriteLock;
import java.util.function.LongFunction;

/**
 * The durable settlement journal (rules J-1..J-8 of the settlement contract): one file per pending
 * settlement, written atomically and durably before the request it guards, so that known usage
 * survives a crash and is settled by the next process ({@link #replay}). Every rule (layout, file
 * names, atomic writes with fsync, 0700/0600, no symbolic links followed, quarantine, the
 * cross-process claim, legacy-name migration) is the Rust core's {@code leasebeat::journal}; this
 * class only converts values. Records are interchangeable with the official SDKs' journals.
 *
 * <h2>Use</h2>
 *
 * <pre>{@code
 * try (Journal journal = Journal.open(null, baseUrl, apiKey, null);   // CYCLES_JOURNAL_DIR or ~/.runcycles/commit-journal
 *      Settlement s = Settlement.commit(id, commitJson).build(System.nanoTime(), System.currentTimeMillis())) {
 *   SettlementDecision d = journal.persist(s, System.nanoTime());     // J-1: durable before the first send
 *   // ... send what s.pollAction() asks, feed the answers ...
 *   journal.finish(s);                                                // J-5: remove (or keep) the record
 * }
 * }</pre>
 *
 * On start, {@link #replay} hands over a settlement for every record of this server that no other
 * worker or process is settling.
 *
 * <h2>Errors and threads</h2>
 *
 * File-system failures and invalid calls are {@link JournalException} with a {@link
 * JournalException.Kind}; a settlement call refused by the core is a {@link LeaseException}; bad
 * Java arguments are {@link NullPointerException} / {@link IllegalArgumentException}; calls after
 * {@link #close()} are {@link IllegalStateException}. All methods may be called from any thread at
 * once. {@link #close()} waits for calls in progress and releases this journal's claims (the OS
 * releases them too when the process exits or is killed). A journal never closed is freed by a
 * {@link Cleaner} once unreachable.
 */
public final class Journal implements AutoCloseable {
  private static final Cleaner CLEANER = Cleaner.create();

  /** Frees the native handle exactly once. */
  private static final class Free implements Runnable {
    private final long handle;

    Free(long handle) {
      this.handle = handle;
    }

    @Override
    public void run() {
      NativeBridge.nativeJournalFree(handle);
    }
  }

  private final long handle;
  private final Path dir;
  private final String baseUrl;
  private final Cleaner.Cleanable cleanable;
  private final ReentrantReadWriteLock lock = new ReentrantReadWriteLock();
  private boolean closed; // guarded by lock (write)

  private Journal(byte[] envelope, String baseUrl) {
    Wire w = Wire.open(envelope);
    this.handle = w.u64();
    this.dir = Path.of(w.str());
    this.baseUrl = baseUrl;
    this.cleanable = CLEANER.register(this, new Free(handle));
  }

  private static byte[] text(String s, String what) {
    return Utf8.encode(Objects.requireNonNull(s, what), what);
  }

  private static byte[] optText(String s, String what) {
    return s == null ? null : Utf8.encode(s, what);
  }

  /**
   * Opens (creating it 0700 if needed) the partition of {@code baseUrl} and the principal ({@code
   * tenant} when non-blank, else {@code apiKey}; the key itself is never written) under {@code
   * dir}.
   *
   * @param dir the base directory; null: {@code CYCLES_JOURNAL_DIR}, else {@code
   *     ~/.runcycles/commit-journal}
   * @param baseUrl the server the records are for
   * @param apiKey the API key (partition when no tenant)
   * @param tenant the tenant, or null
   * @return the journal (close it)
   * @throws JournalException {@link JournalException.Kind#SYMLINK} when {@code dir} or the
   *     partition is a symbolic link, {@code NOT_A_DIRECTORY}, {@code NOT_WRITABLE}, {@code
   *     NO_SPACE}, {@code NO_DIRECTORY}, {@code IO}
   */
  public static Journal open(Path dir, String baseUrl, String apiKey, String tenant) {
    byte[] d = dir == null ? null : Utf8.encode(dir.toString(), "dir");
    return new Journal(
        NativeBridge.nativeJournalOpen(
            d, text(baseUrl, "baseUrl"), text(apiKey, "apiKey"), optText(tenant, "tenant")),
        baseUrl);
  }

  /**
   * Opens (creating if needed) the partition directory {@code partition} itself (its parent must
   * exist), for records of {@code baseUrl}: for tools given a partition path.
   *
   * @param partition the partition directory
   * @param baseUrl the server the records are for
   * @return the journal (close it)
   * @throws JournalException as {@link #open}
   */
  public static Journal openPartition(Path partition, String baseUrl) {
    Objects.requireNonNull(partition, "partition");
    return new Journal(
        NativeBridge.nativeJournalOpenPartition(
            Utf8.encode(partition.toString(), "partition"), text(baseUrl, "baseUrl")),
        baseUrl);
  }

  /**
   * The base directory {@link #open} uses for {@code dir}: {@code dir} itself, else {@code
   * CYCLES_JOURNAL_DIR} if set and non-empty, else {@code $HOME/.runcycles/commit-journal}.
   *
   * @param dir an explicit directory, or null
   * @return the base directory
   * @throws JournalException {@link JournalException.Kind#NO_DIRECTORY} when neither is set
   */
  public static Path baseDir(Path dir) {
    byte[] d = dir == null ? null : Utf8.encode(dir.toString(), "dir");
    return Path.of(Wire.open(NativeBridge.nativeJournalBaseDir(d)).str());
  }

  private Wire call(LongFunction<byte[]> f) {
    lock.readLock().lock();
    try {
      if (closed) {
        throw new IllegalStateException("leasebeat: this Journal is closed");
      }
      return Wire.open(f.apply(handle));
    } finally {
      lock.readLock().unlock();
    }
  }

  /**
   * Persists what {@code s} asks to persist (J-1) and reports it to {@code s}: the record is
   * written durably, this journal takes the claim on the reservation (J-6) if nobody holds it, and
   * the settlement's decision is returned. If the write fails, the settlement is told so (SP-3: the
   * request still goes) and the decision carries {@link Settlement.Warning#PERSIST_FAILED} with the failure
   * in its detail; no exception is thrown for that.
   *
   * @param s a settlement whose {@link Settlement#pollAction()} is a persist
   * @param nowNanos a {@link System#nanoTime()} value
   * @return the settlement's decision
   * @throws LeaseException when the settlement is not asking for a persist ({@code
   *     NOT_OUTSTANDING}, {@code STOPPED}, ...)
   * @throws IllegalStateException if this journal or the settlement is closed
   */
  public SettlementDecision persist(Settlement s, long nowNanos) {
    Objects.requireNonNull(s, "settlement");
    long now = s.since(nowNanos);
    lock.readLock().lock();
    try {
      if (closed) {
        throw new IllegalStateException("leasebeat: this Journal is closed");
      }
      return s.decide(h -> NativeBridge.nativeJournalPersist(handle, h, now));
    } finally {
      lock.readLock().unlock();
    }
  }

  /**
   * Ends {@code s}'s journaling once it is done (J-5): the record is removed, or kept when the
   * final decision says so (an unresolved outcome, for the next replay), and this journal's claim
   * on the id is released.
   *
   * @param s a finished settlement
   * @throws JournalException {@link JournalException.Kind#NOT_FINISHED} when {@code s} is not
   *     done (nothing touched), or an I/O kind
   * @throws IllegalStateException if this journal or the settlement is closed
   */
  public void finish(Settlement s) {
    Objects.requireNonNull(s, "settlement");
    lock.readLock().lock();
    try {
      if (closed) {
        throw new IllegalStateException("leasebeat: this Journal is closed");
      }
      s.call(h -> NativeBridge.nativeJournalFinish(handle, h));
    } finally {
      lock.readLock().unlock();
    }
  }

  /**
   * Replays the partition (J-6, SP-4): scans it (quarantining unreadable records, migrating legacy
   * names), then for each record of this server takes its claim and rebuilds its {@link
   * Settlement} (a record the settlement refuses is quarantined and reported). Records another
   * worker or process holds are listed in {@link JournalReplay#busy()}. Drive each settlement like
   * a new one, then call {@link #finish} and close it.
   *
   * @param nowNanos a {@link System#nanoTime()} value: every settlement's origin
   * @param wallMillis the wall clock, Unix ms (a persisted Retry-After floor is measured on it)
   * @param retry the retry policy of the rebuilt settlements
   * @return the settlements and the reports
   * @throws JournalException when the partition cannot be listed
   */
  public JournalReplay replay(long nowNanos, long wallMillis, Settlement.RetryPolicy retry) {
    Objects.requireNonNull(retry, "retry");
    Heartbeat.checkTime(nowNanos, "nowNanos");
    if (wallMillis < 0) {
      throw new IllegalArgumentException("wallMillis must not be negative, got " + wallMillis);
    }
    Wire w =
        call(
            h ->
                NativeBridge.nativeJournalReplay(
                    h, retry.maxAttempts(), retry.initialMillis(), retry.maxMillis(), wallMillis));
    int n = w.u32();
    List<Settlement> settlements = new ArrayList<>(n);
    for (int i = 0; i < n; i++) {
      settlements.add(Settlement.read(w, nowNanos));
    }
    int b = w.u32();
    List<String> busy = new ArrayList<>(b);
    for (int i = 0; i < b; i++) {
      busy.add(w.str());
    }
    return new JournalReplay(
        settlements, busy, JournalScan.quarantined(w), JournalScan.migrated(w), JournalScan.skipped(w));
  }

  /**
   * {@link #replay(long, long, Settlement.RetryPolicy)} with {@link
   * Settlement.RetryPolicy#DEFAULT} and the current clocks.
   *
   * @return the settlements and the reports
   */
  public JournalReplay replay() {
    return replay(System.nanoTime(), System.currentTimeMillis(), Settlement.RetryPolicy.DEFAULT);
  }

  /**
   * Lists the partition (J-6) without claiming or settling anything (quarantine, migration and
   * stale temporary files are handled on the way, as by {@link #replay}).
   *
   * @return what was found
   */
  public JournalScan scan() {
    Wire w = call(NativeBridge::nativeJournalScan);
    return new JournalScan(
        JournalScan.entries(w),
        JournalScan.entries(w),
        JournalScan.quarantined(w),
        JournalScan.migrated(w),
        JournalScan.skipped(w),
        Settlement.saturated(w.u64()));
  }

  private Wire byId(String reservationId, int what) {
    byte[] id = text(reservationId, "reservationId");
    return call(h -> NativeBridge.nativeJournalById(h, id, what));
  }

  /**
   * Removes the record of {@code reservationId} (for an operator: the usage is then lost).
   *
   * @param reservationId the reservation (any string: slashes, NUL, 10,000 characters)
   * @return whether a record was removed
   */
  public boolean remove(String reservationId) {
    return byId(reservationId, 0).bool();
  }

  /**
   * Renames the record of {@code reservationId} aside (J-4), keeping it for inspection.
   *
   * @param reservationId the reservation
   * @return where it went, or empty if there was no record
   */
  public Optional<Path> quarantine(String reservationId) {
    return byId(reservationId, 1).optStr().map(Path::of);
  }

  /**
   * Releases this journal's claim on {@code reservationId}, if it holds one.
   *
   * @param reservationId the reservation
   */
  public void releaseClaim(String reservationId) {
    byId(reservationId, 2);
  }

  /**
   * Reads the record of {@code reservationId}, if there is one.
   *
   * @param reservationId the reservation
   * @return the record, or empty
   * @throws JournalException {@link JournalException.Kind#CORRUPT} for a record that does not
   *     parse (it is quarantined), {@code MISPLACED}, an I/O kind
   */
  public Optional<JournalScan.Entry> load(String reservationId) {
    Wire w = byId(reservationId, 3);
    return w.bool() ? Optional.of(JournalScan.entry(w)) : Optional.empty();
  }

  /**
   * The partition directory.
   *
   * @return the directory
   */
  public Path dir() {
    return dir;
  }

  /**
   * The server this journal's replay is for.
   *
   * @return the base URL
   */
  public String baseUrl() {
    return baseUrl;
  }

  /**
   * Whether {@link #close()} was called.
   *
   * @return true once closed
   */
  public boolean isClosed() {
    lock.readLock().lock();
    try {
      return closed;
    } finally {
      lock.readLock().unlock();
    }
  }

  /** Frees the native state and releases this journal's claims. Idempotent. */
  @Override
  public void close() {
    lock.writeLock().lock();
    try {
      if (closed) {
        return;
      }
      closed = true;
      cleanable.clean();
    } finally {
      lock.writeLock().unlock();
    }
  }

  @Override
  public String toString() {
    return "Journal{dir=" + dir + ", baseUrl=" + baseUrl + "}";
  }
}
