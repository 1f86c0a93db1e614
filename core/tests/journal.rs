//! The settlement journal (J-1..J-8) against real directories.
#![cfg(all(feature = "journal", unix))]

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use leasebeat::journal::{
    FlushDeadline, Journal, JournalErrorKind, JournalRecord, RecordMode, claim_file_name,
    legacy_file_name, partition_name, record_file_name,
};

const URL: &str = "http://127.0.0.1:7878";

fn record(id: &str) -> JournalRecord {
    JournalRecord::commit(
        id,
        URL,
        format!(
            r#"{{"idempotency_key":"k-{}","actual":{{"unit":"TOKENS","amount":900}}}}"#,
            id.len()
        ),
        Some(r#"{"subject":{"tenant":"acme"},"action":{"kind":"llm","name":"x"}}"#.into()),
        1_785_585_600_000,
    )
}

fn open(base: &Path) -> Journal {
    Journal::open(base, URL, "key-1", Some("acme")).expect("open journal")
}

fn mode_of(p: &Path) -> u32 {
    fs::symlink_metadata(p).unwrap().permissions().mode() & 0o777
}

#[test]
fn partition_names_match_the_sdks() {
    // The values runcycles 0.3.2 (Rust) pins as "the Python, TypeScript and Java contract".
    assert_eq!(
        partition_name("http://localhost", "test-key", None),
        "68c905017df7dbfc"
    );
    assert_eq!(
        partition_name("http://localhost", "any-key", Some("acme")),
        "8baba538fb970da4"
    );
    assert_eq!(
        partition_name("http://localhost", "rotated-key", Some("acme")),
        "8baba538fb970da4"
    );
    // A blank tenant is no tenant.
    assert_eq!(
        partition_name("http://localhost", "test-key", Some("  ")),
        "68c905017df7dbfc"
    );
}

#[test]
fn write_load_remove_with_sha256_names_and_permissions() {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().join("j");
    let j = open(&base);
    assert_eq!(
        j.dir(),
        base.join(partition_name(URL, "key-1", Some("acme")))
    );
    let r = record("r-1");
    j.write(&r).unwrap();
    let file = j.dir().join(record_file_name("r-1"));
    // sha256 of the exact UTF-8 id, lower hex (CR-DURABLE-007).
    let out = Command::new("sh")
        .args(["-c", "printf %s r-1 | sha256sum"])
        .output()
        .unwrap();
    let hex = String::from_utf8(out.stdout[..64].to_vec()).unwrap();
    assert_eq!(record_file_name("r-1"), format!("v2-{hex}.json"));
    assert!(file.is_file());
    assert_eq!(mode_of(&file), 0o600, "record 0600 (J-3)");
    assert_eq!(mode_of(j.dir()), 0o700, "partition 0700 (J-3)");
    assert_eq!(mode_of(&base), 0o700, "created base 0700 (J-3)");
    assert_eq!(j.load("r-1").unwrap(), Some(r.clone()));
    assert_eq!(j.load("r-2").unwrap(), None);

    let mut r2 = r.clone();
    r2.mode = RecordMode::Event;
    r2.not_before_ms = Some(1_785_585_601_000);
    j.write(&r2).unwrap();
    assert_eq!(j.load("r-1").unwrap(), Some(r2));
    // No temporary file is left behind.
    assert_eq!(fs::read_dir(j.dir()).unwrap().count(), 1);

    assert!(j.remove("r-1").unwrap());
    assert!(!j.remove("r-1").unwrap());
    assert_eq!(j.load("r-1").unwrap(), None);
}

#[test]
fn a_batch_writes_each_record_and_reports_each_failure() {
    let tmp = tempfile::tempdir().unwrap();
    let j = open(tmp.path());
    let old = record("b");
    j.write(&old).unwrap();
    let mut bad = record("b");
    bad.commit_body = Some("[]".into());
    let mut newer = record("c");
    newer.not_before_ms = Some(5);
    let results = j.write_batch(&[record("a"), bad, newer.clone(), record("c")]);
    assert!(results[0].is_ok() && results[2].is_ok() && results[3].is_ok());
    assert_eq!(
        results[1].as_ref().unwrap_err().kind(),
        JournalErrorKind::InvalidRecord
    );
    assert_eq!(j.load("a").unwrap(), Some(record("a")));
    assert_eq!(
        j.load("b").unwrap(),
        Some(old),
        "the failed record's previous version stays"
    );
    assert_eq!(
        j.load("c").unwrap(),
        Some(record("c")),
        "the later record of an id wins"
    );
    assert_eq!(
        fs::read_dir(j.dir()).unwrap().count(),
        3,
        "no temporary file left"
    );
    assert!(j.write_batch(&[]).is_empty());
}

#[test]
fn the_api_key_is_never_stored() {
    let tmp = tempfile::tempdir().unwrap();
    let secret = "sk-very-secret-key-123";
    let j = Journal::open(tmp.path(), URL, secret, None).unwrap();
    j.write(&record("r-1")).unwrap();
    for entry in walk(tmp.path()) {
        assert!(!entry.to_string_lossy().contains(secret));
        if entry.is_file() {
            assert!(!fs::read_to_string(&entry).unwrap().contains(secret));
        }
    }
}

fn walk(p: &Path) -> Vec<PathBuf> {
    let mut out = vec![p.to_path_buf()];
    if p.is_dir() {
        for e in fs::read_dir(p).unwrap() {
            out.extend(walk(&e.unwrap().path()));
        }
    }
    out
}

#[test]
fn odd_reservation_ids_get_safe_distinct_names() {
    let tmp = tempfile::tempdir().unwrap();
    let j = open(tmp.path());
    let long = "x".repeat(10_000);
    let ids = [
        "a/b",
        "a.b",
        "a_b",
        "../../etc/passwd",
        "nul\0inside",
        long.as_str(),
        "é",
    ];
    for id in ids {
        j.write(&record(id)).unwrap();
    }
    let names: std::collections::HashSet<_> = ids.iter().map(|i| record_file_name(i)).collect();
    assert_eq!(
        names.len(),
        ids.len(),
        "distinct ids never share a file (CR-DURABLE-007)"
    );
    for id in ids {
        assert_eq!(j.load(id).unwrap().unwrap().reservation_id, id);
    }
    assert_eq!(j.scan().unwrap().records.len(), ids.len());
    for id in ids {
        assert!(j.remove(id).unwrap());
    }
    // The empty id is the one refused: a record without an id would not read back.
    let e = j.write(&record("")).unwrap_err();
    assert_eq!(e.kind(), JournalErrorKind::InvalidRecord);
    let mut bad = record("r");
    bad.commit_body = Some("not json".into());
    assert_eq!(
        j.write(&bad).unwrap_err().kind(),
        JournalErrorKind::InvalidRecord
    );
    assert_eq!(fs::read_dir(j.dir()).unwrap().count(), 0, "nothing written");
}

/// A writer that crashed after writing its temporary file and before the rename leaves the
/// previous record as it was; the scan ignores the fresh temporary file and reaps it once
/// stale.
#[test]
fn a_crash_between_temp_write_and_rename_leaves_the_old_record() {
    let tmp = tempfile::tempdir().unwrap();
    let j = open(tmp.path());
    let old = record("r-1");
    j.write(&old).unwrap();
    let mut new = old.clone();
    new.mode = RecordMode::Event;
    let name = record_file_name("r-1");
    let crashed = j.dir().join(format!("{name}.4242.deadbeef.tmp"));
    fs::write(&crashed, new.to_json().unwrap()).unwrap();
    let half = j.dir().join(format!("{name}.4243.0badf00d.tmp"));
    fs::write(&half, &new.to_json().unwrap()[..20]).unwrap();
    assert_eq!(j.load("r-1").unwrap(), Some(old.clone()));
    let scan = j.scan().unwrap();
    assert_eq!(scan.records, vec![old.clone()]);
    assert_eq!(
        scan.reaped_temp_files, 0,
        "a fresh temporary file may be a live writer's"
    );
    assert!(crashed.exists() && half.exists());
    let two_hours_ago = SystemTime::now() - Duration::from_secs(7200);
    fs::File::options()
        .write(true)
        .open(&crashed)
        .unwrap()
        .set_modified(two_hours_ago)
        .unwrap();
    let scan = j.scan().unwrap();
    assert_eq!(scan.reaped_temp_files, 1);
    assert!(!crashed.exists() && half.exists());
    assert_eq!(scan.records, vec![old]);
}

#[test]
fn symbolic_links_are_never_followed() {
    let tmp = tempfile::tempdir().unwrap();
    let real = tmp.path().join("real");
    fs::create_dir(&real).unwrap();
    // The journal directory itself a symlink.
    let link = tmp.path().join("link");
    symlink(&real, &link).unwrap();
    let e = Journal::open(&link, URL, "k", None).unwrap_err();
    assert_eq!(e.kind(), JournalErrorKind::Symlink, "{e}");
    // The partition a symlink.
    let base = tmp.path().join("base");
    fs::create_dir(&base).unwrap();
    symlink(&real, base.join(partition_name(URL, "k", None))).unwrap();
    let e = Journal::open(&base, URL, "k", None).unwrap_err();
    assert_eq!(e.kind(), JournalErrorKind::Symlink, "{e}");
    assert_eq!(fs::read_dir(&real).unwrap().count(), 0);

    // A record a symlink: load refuses, scan skips, write replaces the link, not its target.
    let j = open(&tmp.path().join("j"));
    let outside = tmp.path().join("outside.json");
    fs::write(&outside, record("r-1").to_json().unwrap()).unwrap();
    symlink(&outside, j.dir().join(record_file_name("r-1"))).unwrap();
    assert_eq!(j.load("r-1").unwrap_err().kind(), JournalErrorKind::Symlink);
    let scan = j.scan().unwrap();
    assert!(scan.records.is_empty());
    assert_eq!(scan.skipped.len(), 1);
    assert!(scan.skipped[0].reason.contains("symbolic link"));
    let before = fs::read(&outside).unwrap();
    let mut r = record("r-1");
    r.mode = RecordMode::Event;
    j.write(&r).unwrap();
    assert_eq!(
        fs::read(&outside).unwrap(),
        before,
        "the link's target is untouched"
    );
    assert_eq!(j.load("r-1").unwrap(), Some(r));
    // The claim file a symlink: refused, not followed.
    symlink(&outside, j.dir().join(claim_file_name("r-2"))).unwrap();
    assert_eq!(
        j.claim("r-2").unwrap_err().kind(),
        JournalErrorKind::Symlink
    );
}

#[test]
fn corrupt_truncated_edited_and_unsupported_records_are_quarantined() {
    let tmp = tempfile::tempdir().unwrap();
    let j = open(tmp.path());
    for id in [
        "good-1",
        "truncated",
        "edited",
        "future",
        "garbage",
        "good-2",
    ] {
        j.write(&record(id)).unwrap();
    }
    let path = |id: &str| j.dir().join(record_file_name(id));
    let full = fs::read_to_string(path("truncated")).unwrap();
    fs::write(path("truncated"), &full[..full.len() / 2]).unwrap();
    let edited = fs::read_to_string(path("edited"))
        .unwrap()
        .replace("\"commit\"", "\"commitx\"");
    fs::write(path("edited"), edited).unwrap();
    let future = fs::read_to_string(path("future"))
        .unwrap()
        .replace("\"version\":1", "\"version\":2");
    fs::write(path("future"), future).unwrap();
    fs::write(path("garbage"), b"\xff\xfe not json").unwrap();

    let scan = j.scan().unwrap();
    let mut ids: Vec<_> = scan
        .records
        .iter()
        .map(|r| r.reservation_id.as_str())
        .collect();
    ids.sort();
    assert_eq!(
        ids,
        ["good-1", "good-2"],
        "every other record still replays (CR-DURABLE-005)"
    );
    assert_eq!(scan.quarantined.len(), 4);
    for q in &scan.quarantined {
        let to = q.moved_to.as_ref().expect("renamed aside");
        assert_eq!(
            to,
            &q.file.replace(".json", ".corrupt"),
            "journal.py's name"
        );
        assert!(j.dir().join(to).is_file(), "never deleted");
        assert!(!j.dir().join(&q.file).exists());
    }
    let reasons: Vec<_> = scan.quarantined.iter().map(|q| q.reason.as_str()).collect();
    assert!(
        reasons
            .iter()
            .any(|r| r.contains("unsupported journal version")),
        "{reasons:?}"
    );
    assert!(
        reasons.iter().any(|r| r.contains("unknown mode")),
        "{reasons:?}"
    );

    // A second corrupt record under the same name does not replace the first quarantined one.
    fs::write(path("truncated"), "{").unwrap();
    let e = j.load("truncated").unwrap_err();
    assert_eq!(e.kind(), JournalErrorKind::Corrupt);
    let moved = e.quarantined_to().unwrap().to_path_buf();
    assert!(
        moved.to_string_lossy().ends_with(".1.corrupt"),
        "{}",
        moved.display()
    );
    assert_eq!(fs::read_to_string(&moved).unwrap(), "{");
    assert_eq!(
        fs::read_to_string(
            j.dir()
                .join(record_file_name("truncated").replace(".json", ".corrupt"))
        )
        .unwrap(),
        &full[..full.len() / 2]
    );
    // The quarantine does not come back in later scans.
    assert!(j.scan().unwrap().quarantined.is_empty());
    // A record the settlement refuses is put aside on demand.
    let to = j.quarantine("good-1").unwrap().unwrap();
    assert!(to.is_file() && to.to_string_lossy().ends_with(".corrupt"));
    assert_eq!(j.load("good-1").unwrap(), None);
    assert_eq!(j.quarantine("good-1").unwrap(), None);
}

#[test]
fn legacy_names_migrate_only_for_the_exact_id() {
    let tmp = tempfile::tempdir().unwrap();
    let j = open(tmp.path());
    // "a/b" and "a.b" share the legacy name a_b.json; it holds "a/b".
    assert_eq!(legacy_file_name("a/b"), "a_b.json");
    assert_eq!(legacy_file_name("a.b"), "a_b.json");
    assert_eq!(legacy_file_name("é!"), "__.json");
    let legacy = j.dir().join("a_b.json");
    let text = record("a/b").to_json().unwrap();
    fs::write(&legacy, &text).unwrap();

    // Asked for the colliding id: no migration, nothing deleted (CR-DURABLE-007).
    assert_eq!(j.load("a.b").unwrap(), None);
    assert!(!j.remove("a.b").unwrap());
    assert_eq!(fs::read_to_string(&legacy).unwrap(), text);

    // Asked for the stored id: migrated to the v2 name.
    assert_eq!(j.load("a/b").unwrap(), Some(record("a/b")));
    assert!(!legacy.exists());
    assert!(j.dir().join(record_file_name("a/b")).is_file());

    // In a scan: migrated when the file name is the stored id's legacy name ...
    fs::write(j.dir().join("c_d.json"), record("c:d").to_json().unwrap()).unwrap();
    // ... removed as a duplicate when the v2 record of exactly that id exists ...
    fs::write(j.dir().join("a_b.json"), &text).unwrap();
    // ... and left alone when the name fits neither (a hand-renamed file).
    fs::write(j.dir().join("renamed.json"), record("e").to_json().unwrap()).unwrap();
    let scan = j.scan().unwrap();
    let mut ids: Vec<_> = scan
        .records
        .iter()
        .map(|r| r.reservation_id.as_str())
        .collect();
    ids.sort();
    assert_eq!(ids, ["a/b", "c:d"]);
    assert_eq!(scan.migrated.len(), 2);
    assert!(
        scan.migrated
            .iter()
            .any(|m| m.from == "c_d.json" && !m.duplicate_removed)
    );
    assert!(
        scan.migrated
            .iter()
            .any(|m| m.from == "a_b.json" && m.duplicate_removed)
    );
    assert!(!j.dir().join("c_d.json").exists() && !j.dir().join("a_b.json").exists());
    assert_eq!(scan.skipped.len(), 1);
    assert_eq!(scan.skipped[0].file, "renamed.json");
    assert!(j.dir().join("renamed.json").is_file());

    // remove() deletes a legacy file only when it holds exactly the id.
    fs::write(j.dir().join("x_y.json"), record("x y").to_json().unwrap()).unwrap();
    assert!(!j.remove("x/y").unwrap());
    assert!(j.dir().join("x_y.json").exists());
    assert!(j.remove("x y").unwrap());
    assert!(!j.dir().join("x_y.json").exists());
}

#[test]
fn replay_skips_other_servers_records() {
    let tmp = tempfile::tempdir().unwrap();
    let j = open(tmp.path());
    let mut other = record("r-2");
    other.base_url = "https://elsewhere".into();
    j.write(&record("r-1")).unwrap();
    j.write(&other).unwrap();
    let scan = j.scan().unwrap();
    assert_eq!(scan.records, vec![record("r-1")]);
    assert_eq!(scan.foreign, vec![other]);
}

#[test]
fn partitions_separate_servers_and_principals() {
    let tmp = tempfile::tempdir().unwrap();
    let a = Journal::open(tmp.path(), URL, "k1", None).unwrap();
    let b = Journal::open(tmp.path(), URL, "k2", None).unwrap();
    let c = Journal::open(tmp.path(), "http://other", "k1", None).unwrap();
    let t1 = Journal::open(tmp.path(), URL, "k1", Some("acme")).unwrap();
    let t2 = Journal::open(tmp.path(), URL, "rotated", Some("acme")).unwrap();
    assert_ne!(a.dir(), b.dir());
    assert_ne!(a.dir(), c.dir());
    assert_eq!(
        t1.dir(),
        t2.dir(),
        "tenant partition survives key rotation (CR-DURABLE-004)"
    );
    t1.write(&record("r-1")).unwrap();
    assert_eq!(t2.load("r-1").unwrap(), Some(record("r-1")));
    assert_eq!(a.load("r-1").unwrap(), None);
}

#[test]
fn claims_are_exclusive_within_a_process() {
    let tmp = tempfile::tempdir().unwrap();
    let j = open(tmp.path());
    let j2 = open(tmp.path());
    let c = j.claim("r-1").unwrap().expect("first claim");
    assert_eq!(c.reservation_id(), "r-1");
    assert!(j2.claim("r-1").unwrap().is_none(), "second holder refused");
    assert!(
        j.claim("r-1").unwrap().is_none(),
        "also through the same journal"
    );
    let other = j2.claim("r-2").unwrap().expect("another record is free");
    drop(c);
    assert!(
        !j.dir().join(claim_file_name("r-1")).exists(),
        "released claims leave no file"
    );
    let again = j2.claim("r-1").unwrap().expect("free after release");
    again.release();
    drop(other);
}

const CHILD_ENV: &str = "LEASEBEAT_JOURNAL_CLAIM_CHILD";

/// Not a test on its own: run by `claims_are_exclusive_across_processes` as a child process
/// (the test binary re-executed) that takes the claim, says so, and holds it until killed.
#[test]
fn claim_child_process() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let j = Journal::open_partition(Path::new(&dir), URL).unwrap();
    let claim = j.claim("r-1").unwrap();
    // Straight to the pipe: the test harness captures `println!`.
    let mut out = std::io::stdout();
    writeln!(out, "CLAIMED {}", claim.is_some()).unwrap();
    out.flush().unwrap();
    std::thread::sleep(Duration::from_secs(120));
    drop(claim);
}

#[test]
fn claims_are_exclusive_across_processes_and_die_with_the_holder() {
    let tmp = tempfile::tempdir().unwrap();
    let j = open(tmp.path());
    j.write(&record("r-1")).unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "claim_child_process",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, j.dir())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let claimed = loop {
        let line = lines.next().expect("child output").unwrap();
        // The harness prints "test claim_child_process ... " on the same line first.
        if let Some((_, rest)) = line.split_once("CLAIMED ") {
            break rest.trim() == "true";
        }
    };
    assert!(claimed, "the child took the claim");
    assert!(
        j.claim("r-1").unwrap().is_none(),
        "held by the other process (CR-DURABLE-006)"
    );
    assert!(j.claim("r-2").unwrap().is_some());
    child.kill().unwrap(); // SIGKILL: no destructor runs
    child.wait().unwrap();
    let c = j
        .claim("r-1")
        .unwrap()
        .expect("the OS released the dead holder's claim");
    // The replaying worker re-loads under its claim.
    assert_eq!(j.load(c.reservation_id()).unwrap(), Some(record("r-1")));
}

#[test]
fn flush_deadline_is_bounded() {
    let t0 = Instant::now();
    let f = FlushDeadline::after(t0, Duration::from_millis(250));
    assert_eq!(f.remaining(t0), Duration::from_millis(250));
    assert!(!f.is_over(t0));
    assert_eq!(f.remaining(t0 + Duration::from_secs(1)), Duration::ZERO);
    assert!(f.is_over(t0 + Duration::from_millis(250)));
    let forever = FlushDeadline::after(t0, Duration::MAX);
    assert!(!forever.is_over(t0 + Duration::from_secs(86_400)));
}

/// A tiny tmpfs for the full-disk and read-only cases; `None` where mounting is not
/// permitted (not root): those tests then say so and pass without checking.
struct Mount(tempfile::TempDir);

impl Mount {
    fn tmpfs(opts: &str) -> Option<Mount> {
        let dir = tempfile::tempdir().ok()?;
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", opts, "tmpfs"])
            .arg(dir.path())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            Some(Mount(dir))
        } else {
            eprintln!("journal test: cannot mount a tmpfs here (not root?): case not checked");
            None
        }
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.0.path()).status();
    }
}

#[test]
fn a_full_disk_is_no_space_and_keeps_the_previous_record() {
    let Some(m) = Mount::tmpfs("size=48k,mode=0700") else {
        return;
    };
    let j = open(m.0.path());
    let small = record("r-1");
    j.write(&small).unwrap();
    let mut big = small.clone();
    big.commit_body = Some(format!(
        r#"{{"metadata":{{"pad":"{}"}}}}"#,
        "x".repeat(200_000)
    ));
    let e = j.write(&big).unwrap_err();
    assert_eq!(e.kind(), JournalErrorKind::NoSpace, "{e}");
    assert_eq!(
        j.load("r-1").unwrap(),
        Some(small),
        "the previous record is intact"
    );
    let left: Vec<_> = fs::read_dir(j.dir())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left.len(), 1, "no temporary file left: {left:?}");
}

#[test]
fn a_read_only_journal_is_not_writable() {
    let Some(m) = Mount::tmpfs("size=64k,mode=0700") else {
        return;
    };
    let j = open(m.0.path());
    j.write(&record("r-1")).unwrap();
    let remount = Command::new("mount")
        .args(["-o", "remount,ro"])
        .arg(m.0.path())
        .status()
        .unwrap();
    assert!(remount.success());
    let e = j.write(&record("r-2")).unwrap_err();
    assert_eq!(e.kind(), JournalErrorKind::NotWritable, "{e}");
    let e = Journal::open(m.0.path(), URL, "another-key", None).unwrap_err();
    assert_eq!(e.kind(), JournalErrorKind::NotWritable, "{e}");
    assert_eq!(
        j.load("r-1").unwrap(),
        Some(record("r-1")),
        "still readable"
    );
}

#[test]
fn a_journal_path_that_is_a_file_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let f = tmp.path().join("file");
    fs::write(&f, "x").unwrap();
    let e = Journal::open(&f, URL, "k", None).unwrap_err();
    assert_eq!(e.kind(), JournalErrorKind::NotADirectory, "{e}");
}
