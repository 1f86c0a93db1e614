package io.leasebeat;

import java.util.List;
import java.util.OptionalLong;

/**
 * What {@link Journal#scan()} found in the partition (J-6): this server's records, other servers'
 * records, and what it quarantined (J-4), migrated from a legacy name (J-8) or skipped (a symbolic
 * link, a non-regular file, a record under a foreign name) on the way.
 *
 * @param records the records of this journal's server
 * @param foreign records of other servers (left alone)
 * @param quarantined records renamed aside
 * @param migrated legacy-named records moved to their {@code v2-} name
 * @param skipped entries left alone and reported
 * @param reapedTempFiles stale temporary files (older than an hour) removed
 */
public record JournalScan(
    List<Entry> records,
    List<Entry> foreign,
    List<Quarantined> quarantined,
    List<Migrated> migrated,
    List<Skipped> skipped,
    long reapedTempFiles) {

  /**
   * Copies the lists (unmodifiable).
   *
   * @param records see {@link #records()}
   * @param foreign see {@link #foreign()}
   * @param quarantined see {@link #quarantined()}
   * @param migrated see {@link #migrated()}
   * @param skipped see {@link #skipped()}
   * @param reapedTempFiles see {@link #reapedTempFiles()}
   */
  public JournalScan {
    records = List.copyOf(records);
    foreign = List.copyOf(foreign);
    quarantined = List.copyOf(quarantined);
    migrated = List.copyOf(migrated);
    skipped = List.copyOf(skipped);
  }

  /**
   * One pending record.
   *
   * @param reservationId the reservation
   * @param baseUrl the server it is for
   * @param mode what is to be sent
   * @param notBeforeMs the persisted Retry-After floor (Unix ms), if any
   * @param recordedAtMs when it was written (Unix ms)
   * @param json the record's text, as the core writes it
   */
  public record Entry(
      String reservationId,
      String baseUrl,
      Settlement.RecordMode mode,
      OptionalLong notBeforeMs,
      long recordedAtMs,
      String json) {}

  /**
   * A record renamed aside (J-4).
   *
   * @param file its file name
   * @param movedTo where it went, or null when the rename failed
   * @param reason why
   */
  public record Quarantined(String file, String movedTo, String reason) {}

  /**
   * A legacy-named record migrated (J-8).
   *
   * @param from the legacy file name
   * @param to the {@code v2-} file name
   * @param reservationId the reservation
   * @param duplicateRemoved true when a {@code v2-} record of that id existed and the legacy file
   *     was removed instead
   */
  public record Migrated(String from, String to, String reservationId, boolean duplicateRemoved) {}

  /**
   * An entry left alone.
   *
   * @param file its file name
   * @param reason why
   */
  public record Skipped(String file, String reason) {}

  static Entry entry(Wire w) {
    String id = w.str();
    String baseUrl = w.str();
    Settlement.RecordMode mode = Settlement.wired(Settlement.RecordMode.class, w.str());
    OptionalLong notBefore = Settlement.optMillis(w);
    long at = Settlement.saturated(w.u64());
    return new Entry(id, baseUrl, mode, notBefore, at, w.str());
  }

  static List<Entry> entries(Wire w) {
    int n = w.u32();
    Entry[] out = new Entry[n];
    for (int i = 0; i < n; i++) {
      out[i] = entry(w);
    }
    return List.of(out);
  }

  static List<Quarantined> quarantined(Wire w) {
    int n = w.u32();
    Quarantined[] out = new Quarantined[n];
    for (int i = 0; i < n; i++) {
      out[i] = new Quarantined(w.str(), w.optStr().orElse(null), w.str());
    }
    return List.of(out);
  }

  static List<Migrated> migrated(Wire w) {
    int n = w.u32();
    Migrated[] out = new Migrated[n];
    for (int i = 0; i < n; i++) {
      out[i] = new Migrated(w.str(), w.str(), w.str(), w.bool());
    }
    return List.of(out);
  }

  static List<Skipped> skipped(Wire w) {
    int n = w.u32();
    Skipped[] out = new Skipped[n];
    for (int i = 0; i < n; i++) {
      out[i] = new Skipped(w.str(), w.str());
    }
    return List.of(out);
  }
}
