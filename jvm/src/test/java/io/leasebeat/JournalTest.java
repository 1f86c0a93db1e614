package io.leasebeat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.List;
import java.util.Optional;
import java.util.OptionalLong;
import java.util.stream.Collectors;
import java.util.stream.Stream;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The journal binding: round trip, a Retry-After floor across a restart, quarantine of truncated
 * and edited records, awkward ids, a symbolic link, a directory that is not writable, a full disk,
 * and bad input. Every test uses a temporary directory.
 */
class JournalTest {
  static final String URL = "http://127.0.0.1:7878";
  static final String KEY = "sk-test-key";
  private static final long MS = 1_000_000L;
  private static final String COMMIT = "{\"actual\":{\"unit\":\"TOKENS\",\"amount\":900}}";
  private static final String COMMITTED =
      "{\"status\":\"COMMITTED\",\"charged\":{\"unit\":\"TOKENS\",\"amount\":900}}";

  @TempDir Path tmp;

  private static Settlement commit(String id, long now, long wall) {
    return Settlement.commit(id, COMMIT).baseUrl(URL).build(now, wall);
  }

  private static List<Path> files(Path dir) throws IOException {
    try (Stream<Path> s = Files.list(dir)) {
      return s.sorted().collect(Collectors.toList());
    }
  }

  private static List<Path> records(Path dir) throws IOException {
    return files(dir).stream()
        .filter(p -> p.getFileName().toString().endsWith(".json"))
        .collect(Collectors.toList());
  }

  private static boolean root() {
    return "root".equals(System.getProperty("user.name"));
  }

  @Test
  void aCommitIsPersistedThenRemovedWhenSettled() throws IOException {
    long now = System.nanoTime();
    long wall = System.currentTimeMillis();
    try (Journal j = Journal.open(tmp, URL, KEY, null);
        Settlement s = commit("r-1", now, wall)) {
      assertEquals(tmp, j.dir().getParent());
      assertEquals(16, j.dir().getFileName().toString().length(), "partition: 16 hex digits");
      assertEquals(URL, j.baseUrl());
      SettlementDecision d = j.persist(s, now + MS);
      assertEquals(Settlement.Next.COMMIT, d.next(), d.toJson());
      assertEquals(1, records(j.dir()).size());
      JournalScan.Entry e = j.load("r-1").orElseThrow();
      assertEquals("r-1", e.reservationId());
      assertEquals(URL, e.baseUrl());
      assertEquals(Settlement.RecordMode.COMMIT, e.mode());
      assertTrue(e.json().contains(s.key()), e.json());
      assertEquals(List.of("r-1"),
          j.scan().records().stream().map(JournalScan.Entry::reservationId).collect(Collectors.toList()));
      // Finishing before the end touches nothing.
      JournalException early = assertThrows(JournalException.class, () -> j.finish(s));
      assertEquals(JournalException.Kind.NOT_FINISHED, early.kind(), early.getMessage());
      assertEquals(1, records(j.dir()).size());

      SettleAttempt a = s.pollAction().attempt().orElseThrow();
      s.handleSent(a.id(), now + 2 * MS);
      SettlementDecision done =
          s.handleResponse(a.id(), Response.of(200).withBody(COMMITTED), now + 3 * MS, wall + 3);
      assertEquals(Optional.of(Settlement.Outcome.COMMITTED), done.outcome());
      j.finish(s);
      assertEquals(List.of(), records(j.dir()), "J-5: removed once committed");
      assertEquals(Optional.empty(), j.load("r-1"));
    }
  }

  @Test
  void aRestartReplaysTheRecordWithItsKey() throws IOException {
    long now = System.nanoTime();
    long wall = System.currentTimeMillis();
    String key;
    try (Journal j = Journal.open(tmp, URL, KEY, "acme");
        Settlement s = commit("r/with/slashes", now, wall)) {
      j.persist(s, now);
      key = s.key();
      // The same process, another journal object: the claim is held, the record is busy.
      try (Journal other = Journal.open(tmp, URL, "another-key", "acme")) {
        JournalReplay busy = other.replay(now, wall, Settlement.RetryPolicy.DEFAULT);
        assertEquals(List.of(), busy.settlements());
        assertEquals(List.of("r/with/slashes"), busy.busy());
      }
    } // closed without finishing: a crash as far as the record goes
    try (Journal j = Journal.open(tmp, URL, "another-key", "acme")) {
      JournalReplay r = j.replay(now + MS, wall + 1, Settlement.RetryPolicy.DEFAULT);
      assertEquals(1, r.settlements().size(), r.toString());
      try (Settlement s = r.settlements().get(0)) {
        assertEquals("r/with/slashes", s.reservationId());
        assertEquals(key, s.key(), "ST-1: the same key after a restart");
        SettleAttempt a = s.pollAction().attempt().orElseThrow();
        assertEquals(Settlement.Endpoint.COMMIT, a.endpoint());
        assertTrue(a.bodyText().contains(key));
        s.handleSent(a.id(), now + 2 * MS);
        s.handleResponse(a.id(), Response.of(200).withBody(COMMITTED), now + 3 * MS, wall + 3);
        j.finish(s);
      }
      assertEquals(List.of(), records(j.dir()));
      // Another key without a tenant is another partition.
      try (Journal k = Journal.open(tmp, URL, "another-key", null)) {
        assertFalse(k.dir().equals(j.dir()));
      }
    }
  }

  @Test
  void aRetryAfterFloorSurvivesARestart() throws IOException {
    long now = System.nanoTime();
    long wall = System.currentTimeMillis();
    try (Journal j = Journal.open(tmp, URL, KEY, null);
        Settlement s = commit("r-429", now, wall)) {
      j.persist(s, now);
      SettleAttempt a = s.pollAction().attempt().orElseThrow();
      s.handleSent(a.id(), now + MS);
      SettlementDecision d =
          s.handleResponse(
              a.id(), Response.of(429).withHeader("Retry-After", "30"), now + 2 * MS, wall);
      assertEquals(Settlement.Next.PERSIST, d.next(), "the floor is persisted first: " + d.toJson());
      SettlementDecision p = j.persist(s, now + 3 * MS);
      assertEquals(Settlement.Next.COMMIT, p.next(), p.toJson());
      OptionalLong floor = j.load("r-429").orElseThrow().notBeforeMs();
      assertTrue(floor.isPresent() && floor.getAsLong() >= wall + 30_000, floor.toString());
    } // crash
    try (Journal j = Journal.open(tmp, URL, KEY, null)) {
      long later = System.nanoTime();
      JournalReplay r = j.replay(later, wall + 1_000, Settlement.RetryPolicy.DEFAULT);
      try (Settlement s = r.settlements().get(0)) {
        long due = s.pollAction().attempt().orElseThrow().dueNanos();
        assertTrue(
            due - later >= 28_000 * MS,
            "no request before the persisted not_before_ms: due in " + (due - later) / MS + " ms");
      }
    }
  }

  @Test
  void truncatedAndEditedRecordsAreQuarantined() throws IOException {
    long now = System.nanoTime();
    long wall = System.currentTimeMillis();
    Path dir;
    try (Journal j = Journal.open(tmp, URL, KEY, null);
        Settlement a = commit("r-trunc", now, wall);
        Settlement b = commit("r-edit", now, wall);
        Settlement c = commit("r-good", now, wall);
        Settlement e = commit("r-huge", now, wall)) {
      j.persist(a, now);
      j.persist(b, now);
      j.persist(c, now);
      j.persist(e, now);
      dir = j.dir();
    }
    for (Path p : records(dir)) {
      String text = Files.readString(p, StandardCharsets.UTF_8);
      if (text.contains("r-trunc")) {
        Files.writeString(p, text.substring(0, text.length() / 2));
      } else if (text.contains("r-edit")) {
        // Hand-edited: the journal's own schema refuses it (J-4).
        Files.writeString(p, text.replace("\"mode\":\"commit\"", "\"mode\":\"bogus\""));
      } else if (text.contains("r-huge")) {
        // Hand-edited: the journal reads it, the settlement refuses it (an amount beyond 2^64).
        Files.writeString(p, text.replace("\"amount\":900", "\"amount\":18446744073709551616"));
      }
    }
    try (Journal j = Journal.open(tmp, URL, KEY, null)) {
      JournalReplay r = j.replay(now, wall, Settlement.RetryPolicy.DEFAULT);
      assertEquals(
          List.of("r-good"),
          r.settlements().stream().map(Settlement::reservationId).collect(Collectors.toList()));
      r.settlements().forEach(Settlement::close);
      assertEquals(3, r.quarantined().size(), r.quarantined().toString());
      for (JournalScan.Quarantined q : r.quarantined()) {
        assertTrue(q.movedTo() != null && q.movedTo().endsWith(".corrupt"), q.toString());
        assertFalse(q.reason().isEmpty());
      }
      assertEquals(1, records(j.dir()).size(), "the quarantined files are kept aside, not replayed");
      assertEquals(
          3,
          files(j.dir()).stream().filter(p -> p.toString().endsWith(".corrupt")).count(),
          "kept for an operator");
    }
  }

  @Test
  void awkwardIdsAreTypedErrorsOrWork() throws IOException {
    try (Journal j = Journal.open(tmp, URL, KEY, null)) {
      for (String id : new String[] {"a\u0000b", "x".repeat(10_000), "a/b/../c", "é/ü"}) {
        assertFalse(j.remove(id), "nothing to remove");
        assertEquals(Optional.empty(), j.quarantine(id));
        assertEquals(Optional.empty(), j.load(id));
        j.releaseClaim(id);
      }
      // The settlement refuses ids its record cannot hold (ST: 1..=128 characters, no control
      // characters): a typed error before anything is written.
      for (String id : new String[] {"a\u0000b", "x".repeat(10_000), ""}) {
        LeaseException e =
            assertThrows(LeaseException.class, () -> commit(id, 0, 1_785_585_600_000L));
        assertEquals(LeaseException.Code.INVALID_CONFIG, e.code(), e.getMessage());
      }
      assertEquals(List.of(), files(j.dir()));
      try (Settlement s = commit("a/b/../c", System.nanoTime(), System.currentTimeMillis())) {
        j.persist(s, System.nanoTime());
        assertEquals(1, records(j.dir()).size());
        assertTrue(records(j.dir()).get(0).getFileName().toString().startsWith("v2-"));
        assertTrue(j.remove("a/b/../c"));
      }
    }
  }

  @Test
  void aSymlinkedDirectoryIsRefused() throws IOException {
    Path real = Files.createDirectory(tmp.resolve("real"));
    Path link = Files.createSymbolicLink(tmp.resolve("link"), real);
    JournalException e =
        assertThrows(JournalException.class, () -> Journal.open(link, URL, KEY, null));
    assertEquals(JournalException.Kind.SYMLINK, e.kind(), e.getMessage());
    assertEquals(List.of(), files(real), "nothing created through the link");
    // A symlinked partition too.
    String partition;
    try (Journal j = Journal.open(real, URL, KEY, null)) {
      partition = j.dir().getFileName().toString();
    }
    Path base = Files.createDirectory(tmp.resolve("base"));
    Files.createSymbolicLink(base.resolve(partition), real.resolve(partition));
    e = assertThrows(JournalException.class, () -> Journal.open(base, URL, KEY, null));
    assertEquals(JournalException.Kind.SYMLINK, e.kind(), e.getMessage());
  }

  @Test
  void aDirectoryThatIsNotWritableIsNotWritable() throws IOException {
    Assumptions.assumeFalse(root(), "root writes anywhere: see aReadOnlyJournalIsNotWritable");
    Path base = Files.createDirectory(tmp.resolve("ro"));
    Files.setPosixFilePermissions(base, PosixFilePermissions.fromString("r-x------"));
    try {
      JournalException e =
          assertThrows(JournalException.class, () -> Journal.open(base, URL, KEY, null));
      assertEquals(JournalException.Kind.NOT_WRITABLE, e.kind(), e.getMessage());
    } finally {
      Files.setPosixFilePermissions(base, PosixFilePermissions.fromString("rwx------"));
    }
  }

  @Test
  void aReadOnlyJournalIsNotWritableAndTheRequestStillGoes() throws Exception {
    try (TinyTmpfs m = TinyTmpfs.mount(tmp.resolve("mnt"), "size=64k,mode=0700")) {
      Assumptions.assumeTrue(m != null, "cannot mount a tmpfs here (not root)");
      long now = System.nanoTime();
      try (Journal j = Journal.open(m.dir, URL, KEY, null);
          Settlement s = commit("r-ro", now, System.currentTimeMillis())) {
        m.remount("ro");
        SettlementDecision d = j.persist(s, now);
        assertTrue(d.warnings().contains(Settlement.Warning.PERSIST_FAILED), d.toJson());
        assertTrue(d.detail().orElse("").contains("not_writable"), d.toJson());
        assertEquals(Settlement.Next.COMMIT, d.next(), "SP-3: the request still goes");
        JournalException e =
            assertThrows(JournalException.class, () -> Journal.open(m.dir, URL, "other", null));
        assertEquals(JournalException.Kind.NOT_WRITABLE, e.kind(), e.getMessage());
      }
    }
  }

  @Test
  void aFullDiskIsReportedAndKeepsThePreviousRecord() throws Exception {
    try (TinyTmpfs m = TinyTmpfs.mount(tmp.resolve("mnt"), "size=48k,mode=0700")) {
      Assumptions.assumeTrue(m != null, "cannot mount a tmpfs here (not root)");
      long now = System.nanoTime();
      long wall = System.currentTimeMillis();
      String big =
          "{\"actual\":{\"unit\":\"TOKENS\",\"amount\":1},\"metadata\":{\"pad\":\""
              + "x".repeat(200_000)
              + "\"}}";
      try (Journal j = Journal.open(m.dir, URL, KEY, null);
          Settlement small = commit("r-small", now, wall);
          Settlement s = Settlement.commit("r-big", big).baseUrl(URL).build(now, wall)) {
        j.persist(small, now);
        SettlementDecision d = j.persist(s, now);
        assertTrue(d.warnings().contains(Settlement.Warning.PERSIST_FAILED), d.toJson());
        assertTrue(d.detail().orElse("").contains("no_space"), d.toJson());
        assertEquals(Settlement.Next.COMMIT, d.next(), "SP-3: the request still goes");
        assertEquals("r-small", j.load("r-small").orElseThrow().reservationId(), "intact");
        assertEquals(0, files(j.dir()).stream().filter(p -> p.toString().endsWith(".tmp")).count(),
            "no temporary file left");
      }
    }
  }

  @Test
  void badInputIsATypedError() throws IOException {
    assertThrows(NullPointerException.class, () -> Journal.open(tmp, null, KEY, null));
    assertThrows(NullPointerException.class, () -> Journal.open(tmp, URL, null, null));
    assertThrows(IllegalArgumentException.class, () -> Journal.open(tmp, URL, "\ud800", null));
    Path file = Files.writeString(tmp.resolve("a-file"), "x");
    JournalException e =
        assertThrows(JournalException.class, () -> Journal.open(file, URL, KEY, null));
    assertEquals(JournalException.Kind.NOT_A_DIRECTORY, e.kind(), e.getMessage());
    Journal j = Journal.open(tmp, URL, KEY, null);
    try (Settlement release = Settlement.release("r-rel").build(0, 1)) {
      LeaseException le = assertThrows(LeaseException.class, () -> j.persist(release, 1));
      assertTrue(le.getMessage().length() > 0);
    }
    assertThrows(
        IllegalArgumentException.class, () -> j.replay(0, -1, Settlement.RetryPolicy.DEFAULT));
    j.close();
    j.close();
    assertTrue(j.isClosed());
    assertThrows(IllegalStateException.class, j::scan);
    assertEquals(tmp, Journal.baseDir(tmp));
  }

  /** A tiny tmpfs (root only), unmounted on close. */
  static final class TinyTmpfs implements AutoCloseable {
    final Path dir;

    private TinyTmpfs(Path dir) {
      this.dir = dir;
    }

    static TinyTmpfs mount(Path dir, String opts) throws Exception {
      Files.createDirectories(dir);
      Process p =
          new ProcessBuilder("mount", "-t", "tmpfs", "-o", opts, "tmpfs", dir.toString())
              .redirectErrorStream(true)
              .start();
      p.getInputStream().readAllBytes();
      return p.waitFor() == 0 ? new TinyTmpfs(dir) : null;
    }

    void remount(String how) throws Exception {
      Process p =
          new ProcessBuilder("mount", "-o", "remount," + how, dir.toString())
              .redirectErrorStream(true)
              .start();
      p.getInputStream().readAllBytes();
      assertEquals(0, p.waitFor(), "remount " + how);
    }

    @Override
    public void close() throws IOException {
      Process p = new ProcessBuilder("umount", dir.toString()).start();
      try {
        p.waitFor();
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
    }
  }
}
