package io.leasebeat;

import java.util.List;

/**
 * What {@link Journal#replay} handed over (J-6, SP-4): one {@link Settlement} per record of this
 * server whose claim this journal now holds (drive each like a new one, then {@link
 * Journal#finish} and close it), the ids another worker or process holds ({@code busy}, not
 * returned), and the scan's reports.
 *
 * @param settlements the settlements to drive (the caller closes them)
 * @param busy reservation ids claimed by another holder
 * @param quarantined records renamed aside (unreadable, or refused by the settlement)
 * @param migrated legacy-named records migrated
 * @param skipped entries left alone
 */
public record JournalReplay(
    List<Settlement> settlements,
    List<String> busy,
    List<JournalScan.Quarantined> quarantined,
    List<JournalScan.Migrated> migrated,
    List<JournalScan.Skipped> skipped) {

  /**
   * Copies the lists (unmodifiable).
   *
   * @param settlements see {@link #settlements()}
   * @param busy see {@link #busy()}
   * @param quarantined see {@link #quarantined()}
   * @param migrated see {@link #migrated()}
   * @param skipped see {@link #skipped()}
   */
  public JournalReplay {
    settlements = List.copyOf(settlements);
    busy = List.copyOf(busy);
    quarantined = List.copyOf(quarantined);
    migrated = List.copyOf(migrated);
    skipped = List.copyOf(skipped);
  }
}
