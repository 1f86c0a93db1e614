package io.leasebeat;

import java.nio.file.Path;
import java.util.Locale;
import java.util.Objects;
import java.util.Optional;

/**
 * A call into the {@link Journal} failed on the file system, or was refused. One constant per
 * error kind of the Rust core's journal ({@link #kind()}); the stable strings ({@link Kind#wire()})
 * are the same in every language binding. A failed write leaves the previous record as it was.
 *
 * <p>It sits beside {@link LeaseException} (a refused call into a heartbeat or a settlement): both
 * are unchecked. A settlement call refused by the core through the journal (e.g. {@link
 * Journal#persist} when the settlement is not asking for a persist) is a {@link LeaseException}.
 */
public final class JournalException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  /** Why a journal call failed. */
  public enum Kind {
    /** The journal directory (or a record) cannot be written: permission denied, read-only. */
    NOT_WRITABLE,
    /** A symbolic link where the journal expects its directory or a record (never followed). */
    SYMLINK,
    /** The file system is full (or the quota is exhausted); nothing was replaced. */
    NO_SPACE,
    /** The journal path (or the partition in it) exists and is not a directory. */
    NOT_A_DIRECTORY,
    /** No directory given, {@code CYCLES_JOURNAL_DIR} unset and no home directory. */
    NO_DIRECTORY,
    /** The record (or the call) is invalid: nothing was touched . */
    INVALID_RECORD,
    /** A stored record did not parse or validate: it was renamed aside ({@link #quarantinedTo()}). */
    CORRUPT,
    /** The file under the id's name holds another reservation id; it was left alone. */
    MISPLACED,
    /** {@link Journal#finish} of a settlement that has not ended: nothing touched. */
    NOT_FINISHED,
    /** Any other I/O error. */
    IO;

    /**
     * The stable string, e.g. {@code "not_writable"}.
     *
     * @return the stable string
     */
    public String wire() {
      return name().toLowerCase(Locale.ROOT);
    }

    static Kind ofWire(String wire) {
      for (Kind k : values()) {
        if (k.wire().equals(wire)) {
          return k;
        }
      }
      return IO; // a kind added to the core and not yet here: still an I/O-like failure
    }
  }

  /** Why the call failed. */
  private final Kind kind;

  /** The file or directory concerned, or null. */
  private final String path;

  /** Where a corrupt record was moved to, or null. */
  private final String quarantinedTo;

  /**
   * A journal failure.
   *
   * @param kind why
   * @param path the file or directory concerned, if any
   * @param message what happened (without the path)
   * @param quarantinedTo where a corrupt record was moved to, if it was
   */
  public JournalException(
      Kind kind, Optional<String> path, String message, Optional<String> quarantinedTo) {
    super(
        "journal "
            + Objects.requireNonNull(kind, "kind").wire()
            + ": "
            + message
            + path.map(p -> " (" + p + ")").orElse("")
            + quarantinedTo.map(q -> "; quarantined to " + q).orElse(""));
    this.kind = kind;
    this.path = path.orElse(null);
    this.quarantinedTo = quarantinedTo.orElse(null);
  }

  /**
   * Why the call failed.
   *
   * @return the kind
   */
  public Kind kind() {
    return kind;
  }

  /**
   * The file or directory concerned, where there is one.
   *
   * @return the path, or empty
   */
  public Optional<Path> path() {
    return Optional.ofNullable(path).map(Path::of);
  }

  /**
   * Where a corrupt record was moved to ({@link Kind#CORRUPT}); empty if the rename failed.
   *
   * @return the path, or empty
   */
  public Optional<Path> quarantinedTo() {
    return Optional.ofNullable(quarantinedTo).map(Path::of);
  }
}
