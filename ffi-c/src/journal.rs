//! The settlement journal (J-1..J-8 of `settlement.md`) behind opaque handles:
//! one partition of durable, atomic, per-record files, interchangeable with
//! runcycles Python 0.5.3's pending-commit journal.
//!
//! Thin on purpose: the record's layout, the file names, the atomic writes,
//! quarantine, claims and migration all live in the core's `journal` module.
//! This module converts pointers, maps the journal's error kinds to
//! `lb_status` values (`LB_STATUS_JOURNAL_*`, 110..=119) and calls the
//! journal's settlement glue (`Journal::persist`, `finish`, `replay`).

use std::ffi::c_char;
use std::path::{Path, PathBuf};

use leasebeat::journal::{Journal, JournalError, JournalErrorKind, JournalRecord, Scan};
use leasebeat::{Now, Settlement};

use crate::buf::{check_out, copy_bytes, copy_text, try_ref, try_str, try_str_len, write_out};
use crate::error::{Fail, guard, lb_status};
use crate::settlement::{
    boxed, lb_settlement, lb_settlement_config, lb_settlement_decision, mutate, read,
};

/// One open partition of the settlement journal (opaque): a directory of
/// records for one server and principal, from lb_journal_open() or
/// lb_journal_open_partition(), freed by lb_journal_free().
///
/// A `const lb_journal *` may be used from several threads at once (every
/// call is synchronous file I/O on the partition's directory). The journal
/// holds the claims (J-6) it took while persisting or replaying; they are
/// released by lb_journal_finish(), lb_journal_release_claim(), when the
/// journal is freed, and by the OS when the process exits or is killed.
pub struct lb_journal {
    inner: Journal,
}

/// What a scan of a partition found and did (opaque): the records of this
/// server, those of another server (left alone), the records quarantined
/// (J-4), the legacy records migrated (J-8), the files skipped and why, the
/// stale temporary files removed. From lb_journal_scan() (owned, free with
/// lb_journal_report_free()) or lb_journal_replay_report() (borrowed).
pub struct lb_journal_report {
    scan: Scan,
}

/// The result of lb_journal_replay() (opaque): the settlements rebuilt from
/// this server's records (each under this journal's claim), the ids other
/// workers hold (busy, not returned), and the scan's report. Free with
/// lb_journal_replay_free() (settlements not taken are freed with it).
pub struct lb_journal_replay_result {
    settlements: Vec<Option<Settlement>>,
    busy: Vec<String>,
    report: lb_journal_report,
}

/// The counts of an ::lb_journal_report.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct lb_journal_counts {
    /// Valid records of this journal's server.
    pub records: usize,
    /// Valid records of another server (not replayed, left alone).
    pub foreign: usize,
    /// Records renamed aside (J-4: they did not parse, or the settlement
    /// refused them).
    pub quarantined: usize,
    /// Legacy-named records migrated to their `v2-` name (J-8).
    pub migrated: usize,
    /// `.json` files left alone (symbolic links, misplaced records, ...).
    pub skipped: usize,
    /// Stale temporary files removed.
    pub reaped_temp_files: usize,
}

impl lb_status {
    /// The status of a journal error kind. Exhaustive on purpose: a new kind
    /// does not compile until it is mapped here.
    pub fn from_journal_kind(kind: JournalErrorKind) -> lb_status {
        match kind {
            JournalErrorKind::NotWritable => lb_status::JournalNotWritable,
            JournalErrorKind::Symlink => lb_status::JournalSymlink,
            JournalErrorKind::NoSpace => lb_status::JournalNoSpace,
            JournalErrorKind::NotADirectory => lb_status::JournalNotADirectory,
            JournalErrorKind::NoDirectory => lb_status::JournalNoDirectory,
            JournalErrorKind::InvalidRecord => lb_status::JournalInvalidRecord,
            JournalErrorKind::Corrupt => lb_status::JournalCorrupt,
            JournalErrorKind::Misplaced => lb_status::JournalMisplaced,
            JournalErrorKind::NotFinished => lb_status::JournalNotFinished,
            JournalErrorKind::Io => lb_status::JournalIo,
        }
    }
}

impl From<JournalError> for Fail {
    fn from(e: JournalError) -> Fail {
        Fail::new(lb_status::from_journal_kind(e.kind()), e.to_string())
    }
}

// ----- opening -----

fn boxed_journal(out: *mut *mut lb_journal, inner: Journal) {
    let j = Box::into_raw(Box::new(lb_journal { inner }));
    // SAFETY: `out` was checked non-NULL; the caller promises it is writable.
    unsafe { write_out(out, j) };
}

/// Opens (creating it if needed, 0700) the journal partition of `base_url`
/// and the principal under `base_dir`: `tenant` when non-NULL and not blank
/// (the partition then survives an API-key rotation), else `api_key` (never
/// stored: the partition's name is a PBKDF2 fingerprint, J-2).
///
/// `base_dir` NULL means `$CYCLES_JOURNAL_DIR` if set and non-empty, else
/// `$HOME/.runcycles/commit-journal`. All strings are NUL-terminated UTF-8.
/// On success `*out` owns the journal: free it with lb_journal_free().
///
/// Errors: `LB_STATUS_JOURNAL_SYMLINK` (`base_dir` or the partition is a
/// symbolic link: never followed), `LB_STATUS_JOURNAL_NOT_A_DIRECTORY`,
/// `LB_STATUS_JOURNAL_NOT_WRITABLE`, `LB_STATUS_JOURNAL_NO_SPACE`,
/// `LB_STATUS_JOURNAL_NO_DIRECTORY`, `LB_STATUS_JOURNAL_IO`,
/// `LB_STATUS_INVALID_UTF8`, `LB_STATUS_NULL_ARGUMENT`.
#[unsafe(no_mangle)]
pub extern "C" fn lb_journal_open(
    base_dir: *const c_char,
    base_url: *const c_char,
    api_key: *const c_char,
    tenant: *const c_char,
    out: *mut *mut lb_journal,
) -> lb_status {
    guard(|| {
        let base = if base_dir.is_null() {
            None
        } else {
            // SAFETY: non-NULL, NUL-terminated by the caller's promise.
            Some(PathBuf::from(unsafe { try_str(base_dir, "base_dir") }?))
        };
        // SAFETY: NULL or NUL-terminated, by the caller's promise.
        let base_url = unsafe { try_str(base_url, "base_url") }?;
        // SAFETY: as above.
        let api_key = unsafe { try_str(api_key, "api_key") }?;
        let tenant = if tenant.is_null() {
            None
        } else {
            // SAFETY: non-NULL, NUL-terminated by the caller's promise.
            Some(unsafe { try_str(tenant, "tenant") }?)
        };
        check_out(out, "out")?;
        let base = leasebeat::journal::base_dir(base.as_deref())?;
        let j = Journal::open(&base, base_url, api_key, tenant)?;
        boxed_journal(out, j);
        Ok(())
    })
}

/// Opens (creating it if needed) the partition directory `dir` itself, for
/// records of `base_url`: for operators' tools given the partition's path
/// (as `leasebeat journal --partition`). `dir`'s parent must exist.
///
/// Errors: as lb_journal_open().
#[unsafe(no_mangle)]
pub extern "C" fn lb_journal_open_partition(
    dir: *const c_char,
    base_url: *const c_char,
    out: *mut *mut lb_journal,
) -> lb_status {
    guard(|| {
        // SAFETY: NULL or NUL-terminated, by the caller's promise.
        let dir = unsafe { try_str(dir, "dir") }?;
        // SAFETY: as above.
        let base_url = unsafe { try_str(base_url, "base_url") }?;
        check_out(out, "out")?;
        let j = Journal::open_partition(Path::new(dir), base_url)?;
        boxed_journal(out, j);
        Ok(())
    })
}

/// Frees a journal and releases the claims it holds. NULL is a no-op.
/// Records on disk stay.
#[unsafe(no_mangle)]
pub extern "C" fn lb_journal_free(j: *mut lb_journal) {
    let _ = guard(|| {
        if !j.is_null() {
            // SAFETY: a non-NULL `j` came from lb_journal_open*() and is freed
            // once, by the caller's promise.
            drop(unsafe { Box::from_raw(j) });
        }
        Ok(())
    });
}

fn with_journal(
    j: *const lb_journal,
    f: impl FnOnce(&lb_journal) -> Result<(), Fail>,
) -> lb_status {
    guard(|| {
        // SAFETY: `j` is NULL or a live journal (shared use is allowed).
        let j = unsafe { try_ref(j, "journal") }?;
        f(j)
    })
}

/// Copies the partition directory's path (NUL-terminated) into `buf`, with
/// the caller-buffer convention of lb_last_error().
#[unsafe(no_mangle)]
pub extern "C" fn lb_journal_dir(
    j: *const lb_journal,
    buf: *mut c_char,
    buf_len: usize,
    out_needed: *mut usize,
) -> lb_status {
    with_journal(j, |j| {
        let text = j.inner.dir().to_string_lossy();
        // SAFETY: `buf` NULL or valid for `buf_len` bytes; `out_needed` checked inside.
        unsafe { copy_text(text.as_bytes(), buf, buf_len, out_needed) }
    })
}

// ----- settlement glue -----

/// J-1, SP-3: when `s` asks for a persist (lb_settlement_poll_action() is
/// `LB_SETTLEMENT_ACTION_KIND_PERSIST`), writes its record durably (file and
/// directory fsync'd), takes this journal's claim on the reservation (J-6)
/// and reports the write to `s` (lb_settlement_handle_persisted()). When the
/// write fails, the failure is reported to `s` instead
/// (lb_settlement_handle_persist_failed(): the decision carries the warning
/// `persist_failed` and the journal's error in its detail, and the request
/// still goes): that is not an error of this call.
///
/// On success `*out_decision` (if `out_decision` is not NULL) owns the
/// decision: free it with lb_settlement_decision_free().
///
/// Errors: `LB_STATUS_NOT_OUTSTANDING` (`s` is not asking for a persist),
/// `LB_STATUS_STOPPED` (`s` has ended), `LB_STATUS_TIME_WENT_BACKWARDS`,
/// `LB_STATUS_NULL_ARGUMENT`. `s` is unchanged then.
#[unsafe(no_mangle)]
pub extern "C" fn lb_journal_persist(
    j: *const lb_journal,
    s: *mut lb_settlement,
    now_ns: u64,
    out_decision: *mut *mut lb_settlement_decision,
) -> lb_status {
    let mut journal: Option<&lb_journal> = None;
    let status = guard(|| {
        // SAFETY: `j` is NULL or a live journal.
        journal = Some(unsafe { try_ref(j, "journal") }?);
        Ok(())
    });
    let Some(journal) = journal else {
        return status;
    };
    mutate(s, |s| {
        let d = journal.inner.persist(s, now_ns)?;
        if !out_decision.is_null() {
            let d = Box::into_raw(Box::new(lb_settlement_decision { inner: d }));
            // SAFETY: non-NULL; the caller promises it is writable.
            unsafe { write_out(out_decision, d) };
        }
        Ok(())
    })
}

/// J-5: once `s` is done, applies its final decision to the record (removed
/// after a success or a rejection; kept otherwise, for a later replay) and
/// releases this journal's claim on the reservation. A settlement without a
/// record (a release, `no_actual`) only releases the claim.
///
/// Errors: `LB_STATUS_JOURNAL_NOT_FINISHED` (`s` is not done; nothing is
/// touched), the journal's errors of the removal (`LB_STATUS_JOURNAL_*`).
#[unsafe(no_mangle)]
pub extern "C" fn lb_journal_finish(j: *const lb_journal, s: *const lb_settlement) -> lb_status {
    let mut journal: Option<&lb_journal> = None;
    let status = guard(|| {
        // SAFETY: `j` is NULL or a live journal.
        journal = Some(unsafe { try_ref(j, "journal") }?);
        Ok(())
    });
    let Some(journal) = journal else {
        return status;
    };
    read(s, |s| Ok(journal.inner.finish(s)?))
}

/// J-6, SP-4: scans the partition (quarantining, migrating and reporting on
/// the way, as lb_journal_scan()), then, for every record of this journal's
/// server, takes the claim (a record another worker or process holds is
/// listed as busy and not returned) and rebuilds its settlement from the
/// record alone (lb_settlement_from_record(); a record the settlement
/// refuses is quarantined and reported). Only `cfg`'s retry policy is used.
/// Drive each returned settlement like a new one (it sends first at its
/// record's `not_before_ms`) and call lb_journal_finish() when it is done.
///
/// On success `*out` owns the result: free it with lb_journal_replay_free().
///
/// Errors: the journal's (`LB_STATUS_JOURNAL_*`), `LB_STATUS_INVALID_CONFIG`
/// (retry policy).
#[unsafe(no_mangle)]
pub extern "C" fn lb_journal_replay(
    j: *const lb_journal,
    cfg: *const lb_settlement_config,
    now_ns: u64,
    wall_ms: u64,
    out: *mut *mut lb_journal_replay_result,
) -> lb_status {
    with_journal(j, |j| {
        // SAFETY: `cfg` is NULL or a live configuration not mutated during the call.
        let cfg = unsafe { try_ref(cfg, "cfg") }?;
        check_out(out, "out")?;
        cfg.retry.validate()?;
        let r = j.inner.replay(cfg.retry, Now::new(now_ns, wall_ms))?;
        let r = Box::into_raw(Box::new(lb_journal_replay_result {
            settlements: r.settlements.into_iter().map(Some).collect(),
            busy: r.busy,
            report: lb_journal_report { scan: r.scan },
        }));
        // SAFETY: `out` was checked non-NULL; the caller promises it is writable.
        unsafe { write_out(out, r) };
        Ok(())
    })
}

fn with_replay(
    r: *const lb_journal_replay_result,
    f: impl FnOnce(&lb_journal_replay_result) -> Result<(), Fail>,
) -> lb_status {
    guard(|| {
        // SAFETY: `r` is NULL or a live replay result.
        let r = unsafe { try_ref(r, "replay") }?;
        f(r)
    })
}

/// Writes how many settlements the replay returned into `*out`.
#[unsafe(no_mangle)]
pub extern "C" fn lb_journal_replay_count(
    r: *const lb_journal_replay_result,
    out: *mut usize,
) -> lb_status {
    with_replay(r, |r| {
        check_out(out, "out")?;
        // SAFETY: checked non-NULL; writable by the caller's promise.
        unsafe { write_out(out, r.settlements.len()) };
        Ok(())
    })
}

/// Takes the `i`-th settlement of the replay: on success `*out` owns it
/// (free it with lb_settlement_free()); each can be taken once.
///
/// Errors: `LB_STATUS_INVALID_ARGUMENT` (`i` out of range, or already taken).
#[unsafe(no_mangle)]
pub extern "C" fn lb_journal_replay_take(
    r: *mut lb_journal_replay_result,
    i: usize,
    out: *mut *mut lb_settlement,
) -> lb_status {
    guard(|| {
        // SAFETY: `r` is NULL or a live replay result used by this thread only.
        let r = unsafe { crate::buf::try_mut(r, "replay") }?;
        check_out(out, "out")?;
        let n = r.settlements.len();
        let slot = r
            .settlements
            .get_mut(i)
            .ok_or_else(|| Fail::invalid(format!("index {i} is out of range (count {n})")))?;
        let s = slot
            .take()
            .ok_or_else(|| Fail::invalid(format!("settlement {i} was already taken")))?;
        boxed(out, s);
        Ok(())
    })
}

/// Writes how many records were busy (claimed by another worker or process:
/// not returned) into `*out`.
#[unsafe(no_mangle)]
pub extern "C" fn lb_journal_replay_busy_count(
    r: *const lb_journal_replay_result,
    out: *mut usize,
) -> lb_status {
    with_replay(r, |r| {
        check_out(out, "out")?;
        // SAFETY: checked non-NULL; writable by the caller's promise.
        unsafe { write_out(out, r.busy.len()) };
        Ok(())
    })
}

/// Copies the reservation id of the `i`-th busy record into `buf` as bytes
/// (UTF-8, not NUL-terminated: an id may contain NUL), with the
/// caller-buffer convention.
///
/// Errors: `LB_STATUS_INVALID_ARGUMENT` (`i` out of range),
/// `LB_STATUS_BUFFER_TOO_SMALL`.
#[unsafe(no_mangle)]
pub extern "C" fn lb_journal_replay_busy(
    r: *const lb_journal_replay_result,
    i: usize,
    buf: *mut u8,
    buf_len: usize,
    out_needed: *mut usize,
) -> lb_status {
    with_replay(r, |r| {
        let id = r.busy.get(i).ok_or_else(|| {
            Fail::invalid(format!(
                "index {i} is out of range (count {})",
                r.busy.len()
            ))
        })?;
        // SAFETY: `buf` NULL or valid for `buf_len`; `out_needed` checked inside.
        unsafe { copy_bytes(id.as_bytes(), buf, buf_len, out_needed) }
    })
}

/// Writes a pointer to the replay's scan report into `*out`: borrowed, valid
/// until the replay result is freed (do not free it).
#[unsafe(no_mangle)]
pub extern "C" fn lb_journal_replay_report(
    r: *const lb_journal_replay_result,
    out: *mut *const lb_journal_report,
) -> lb_status {
    with_replay(r, |r| {
        check_out(out, "out")?;
        // SAFETY: checked non-NULL; writable by the caller's promise.
        unsafe { write_out(out, &raw const r.report) };
        Ok(())
    })
}

/// Frees a replay result and every settlement not taken from it (their
/// claims stay with the journal until lb_journal_release_claim() or
/// lb_journal_free()). NULL is a no-op.
#[unsafe(no_mangle)]
pub extern "C" fn lb_journal_replay_free(r: *mut lb_journal_replay_result) {
    let _ = guard(|| {
        if !r.is_null() {
            // SAFETY: a non-NULL `r` came from lb_journal_replay() and is freed
            // once, by the caller's promise.
            drop(unsafe { Box::from_raw(r) });
        }
        Ok(())
    });
}

// ----- operators' calls -----

fn id_arg<'a>(id: *const c_char, id_len: usize) -> Result<&'a str, Fail> {
    // SAFETY: NULL (with 0) or valid for `id_len` bytes, by the caller's promise.
    unsafe { try_str_len(id, id_len, "reservation_id") }
}

/// Removes the record of `reservation_id` (`reservation_id_len` bytes of
/// UTF-8, any character; J-5: only after a settlement ended in success or a
/// rejection, or by an operator). `*out_removed` (if not NULL) says whether
/// a record was there.
///
/// Errors: the journal's (`LB_STATUS_JOURNAL_*`), `LB_STATUS_INVALID_UTF8`.
#[unsafe(no_mangle)]
pub extern "C" fn lb_journal_remove(
    j: *const lb_journal,
    reservation_id: *const c_char,
    reservation_id_len: usize,
    out_removed: *mut bool,
) -> lb_status {
    with_journal(j, |j| {
        let id = id_arg(reservation_id, reservation_id_len)?;
        let removed = j.inner.remove(id)?;
        if !out_removed.is_null() {
            // SAFETY: non-NULL; writable by the caller's promise.
            unsafe { write_out(out_removed, removed) };
        }
        Ok(())
    })
}

/// J-4: renames the record of `reservation_id` aside (`<stem>.corrupt`, or
/// `<stem>.<n>.corrupt`: an earlier quarantined file is never replaced), for
/// a record the caller's settlement refuses. `*out_moved` (if not NULL) says
/// whether a record was there and moved.
///
/// Errors: the journal's (`LB_STATUS_JOURNAL_*`), `LB_STATUS_INVALID_UTF8`.
#[unsafe(no_mangle)]
pub extern "C" fn lb_journal_quarantine(
    j: *const lb_journal,
    reservation_id: *const c_char,
    reservation_id_len: usize,
    out_moved: *mut bool,
) -> lb_status {
    with_journal(j, |j| {
        let id = id_arg(reservation_id, reservation_id_len)?;
        let moved = j.inner.quarantine(id)?.is_some();
        if !out_moved.is_null() {
            // SAFETY: non-NULL; writable by the caller's promise.
            unsafe { write_out(out_moved, moved) };
        }
        Ok(())
    })
}

/// Releases this journal's claim on `reservation_id` (J-6), if it holds one:
/// for a settlement the caller gives up on without lb_journal_finish().
///
/// Errors: `LB_STATUS_INVALID_UTF8`.
#[unsafe(no_mangle)]
pub extern "C" fn lb_journal_release_claim(
    j: *const lb_journal,
    reservation_id: *const c_char,
    reservation_id_len: usize,
) -> lb_status {
    with_journal(j, |j| {
        let id = id_arg(reservation_id, reservation_id_len)?;
        j.inner.release_claim(id);
        Ok(())
    })
}

/// Lists the partition as a replay would (J-4 quarantine of records that do
/// not parse, J-8 migration of legacy names, stale temporary files removed),
/// without claiming or settling anything: for operators' tools. On success
/// `*out` owns the report: free it with lb_journal_report_free().
///
/// Errors: the journal's (`LB_STATUS_JOURNAL_*`).
#[unsafe(no_mangle)]
pub extern "C" fn lb_journal_scan(
    j: *const lb_journal,
    out: *mut *mut lb_journal_report,
) -> lb_status {
    with_journal(j, |j| {
        check_out(out, "out")?;
        let scan = j.inner.scan()?;
        let r = Box::into_raw(Box::new(lb_journal_report { scan }));
        // SAFETY: checked non-NULL; writable by the caller's promise.
        unsafe { write_out(out, r) };
        Ok(())
    })
}

/// Frees a report from lb_journal_scan(). NULL is a no-op. (A report
/// borrowed from a replay result is freed with it, never here.)
#[unsafe(no_mangle)]
pub extern "C" fn lb_journal_report_free(r: *mut lb_journal_report) {
    let _ = guard(|| {
        if !r.is_null() {
            // SAFETY: a non-NULL `r` came from lb_journal_scan() and is freed
            // once, by the caller's promise.
            drop(unsafe { Box::from_raw(r) });
        }
        Ok(())
    });
}

fn with_report(
    r: *const lb_journal_report,
    f: impl FnOnce(&Scan) -> Result<(), Fail>,
) -> lb_status {
    guard(|| {
        // SAFETY: `r` is NULL or a live report.
        let r = unsafe { try_ref(r, "report") }?;
        f(&r.scan)
    })
}

/// Writes the report's counts into `*out`.
#[unsafe(no_mangle)]
pub extern "C" fn lb_journal_report_counts(
    r: *const lb_journal_report,
    out: *mut lb_journal_counts,
) -> lb_status {
    with_report(r, |s| {
        check_out(out, "out")?;
        let c = lb_journal_counts {
            records: s.records.len(),
            foreign: s.foreign.len(),
            quarantined: s.quarantined.len(),
            migrated: s.migrated.len(),
            skipped: s.skipped.len(),
            reaped_temp_files: s.reaped_temp_files,
        };
        // SAFETY: checked non-NULL; writable by the caller's promise.
        unsafe { write_out(out, c) };
        Ok(())
    })
}

fn record_text(r: &JournalRecord) -> Result<String, Fail> {
    r.to_json().map_err(Fail::invalid)
}

/// Copies the `i`-th record of this server (the record file's JSON text,
/// NUL-terminated) into `buf`, with the caller-buffer convention.
///
/// Errors: `LB_STATUS_INVALID_ARGUMENT` (`i` out of range),
/// `LB_STATUS_BUFFER_TOO_SMALL`.
#[unsafe(no_mangle)]
pub extern "C" fn lb_journal_report_record(
    r: *const lb_journal_report,
    i: usize,
    buf: *mut c_char,
    buf_len: usize,
    out_needed: *mut usize,
) -> lb_status {
    with_report(r, |s| {
        let rec = s.records.get(i).ok_or_else(|| {
            Fail::invalid(format!(
                "index {i} is out of range (count {})",
                s.records.len()
            ))
        })?;
        let text = record_text(rec)?;
        // SAFETY: `buf` NULL or valid for `buf_len`; `out_needed` checked inside.
        unsafe { copy_text(text.as_bytes(), buf, buf_len, out_needed) }
    })
}

/// Copies the whole report as one JSON object (NUL-terminated) into `buf`,
/// with the caller-buffer convention: `records` and `foreign` (the record
/// texts), `quarantined` (`file`, `moved_to` or null, `reason`), `migrated`
/// (`from`, `to`, `reservation_id`, `duplicate_removed`), `skipped` (`file`,
/// `reason`), `reaped_temp_files`.
#[unsafe(no_mangle)]
pub extern "C" fn lb_journal_report_json(
    r: *const lb_journal_report,
    buf: *mut c_char,
    buf_len: usize,
    out_needed: *mut usize,
) -> lb_status {
    with_report(r, |s| {
        let text = report_json(s)?;
        // SAFETY: `buf` NULL or valid for `buf_len`; `out_needed` checked inside.
        unsafe { copy_text(text.as_bytes(), buf, buf_len, out_needed) }
    })
}

fn report_json(s: &Scan) -> Result<String, Fail> {
    use serde_json::{Value, json};
    let list = |rs: &[JournalRecord]| -> Result<String, Fail> {
        let texts: Result<Vec<String>, Fail> = rs.iter().map(record_text).collect();
        Ok(format!("[{}]", texts?.join(",")))
    };
    let quarantined: Vec<Value> = s
        .quarantined
        .iter()
        .map(|q| json!({"file": q.file, "moved_to": q.moved_to, "reason": q.reason}))
        .collect();
    let migrated: Vec<Value> = s
        .migrated
        .iter()
        .map(|m| {
            json!({"from": m.from, "to": m.to, "reservation_id": m.reservation_id,
                   "duplicate_removed": m.duplicate_removed})
        })
        .collect();
    let skipped: Vec<Value> = s
        .skipped
        .iter()
        .map(|k| json!({"file": k.file, "reason": k.reason}))
        .collect();
    // Records are embedded as their exact text (bodies verbatim, amounts of
    // any size), the rest through serde_json.
    Ok(format!(
        "{{\"records\":{},\"foreign\":{},\"quarantined\":{},\"migrated\":{},\"skipped\":{},\"reaped_temp_files\":{}}}",
        list(&s.records)?,
        list(&s.foreign)?,
        Value::Array(quarantined),
        Value::Array(migrated),
        Value::Array(skipped),
        s.reaped_temp_files
    ))
}
