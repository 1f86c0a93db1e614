//! The native half of `io.leasebeat.Journal`: the core's durable settlement
//! journal (`leasebeat::journal`, rules J-1..J-8) behind plain cold JNI calls.
//!
//! Thin: record layout, file names, atomic writes, quarantine, claims and the
//! settle glue (`persist`, `finish`, `replay`) are the core's; this file only
//! converts values. The handle is a `Box<Journal>` (the core's `Journal` is
//! `Send + Sync` and cheap to clone) turned into a `jlong`; the Java side
//! frees it once (`nativeJournalFree`), never while a call on it is inside.
//!
//! A journal failure travels as envelope status 3 (`JOURNAL_ERROR`): `str
//! kind` (the core's stable `JournalErrorKind::as_str`), `opt str path`, `str
//! message`, `opt str quarantined_to`; `Wire.java` throws it as
//! `JournalException`.
//!
//! Payloads (big-endian, as `settlement.rs`):
//!
//! * quarantined: `str file`, `opt str moved_to`, `str reason`;
//! * migrated: `str from`, `str to`, `str reservation_id`, `bool
//!   duplicate_removed`;
//! * skipped: `str file`, `str reason`;
//! * entry (a scanned record): `str reservation_id`, `str base_url`, `str
//!   mode`, `opt u64 not_before_ms`, `u64 recorded_at_ms`, `str json` (its
//!   text as the core writes it);
//! * scan: `u32 n` entries (this server's), `u32 n` entries (foreign), `u32
//!   n` quarantined, `u32 n` migrated, `u32 n` skipped, `u64 reaped`.

use std::path::{Path, PathBuf};

use jni::objects::{JByteArray, JClass};
use jni::sys::{jint, jlong};
use jni::{Env, EnvUnowned};
use leasebeat::journal::{Journal, JournalError, JournalRecord, Scan};

use super::settlement::{into_handle, now_of, put_decision, retry_of, text_arg, with_settlement};
use super::{Fail, JOURNAL_ERROR, W, arg_fail, cold, opt_text, u64_of};

impl From<JournalError> for Fail {
    fn from(e: JournalError) -> Fail {
        Fail::Journal(e)
    }
}

/// The envelope of a journal failure (status 3).
pub(super) fn error_envelope(e: &JournalError) -> Vec<u8> {
    let mut w = W::default();
    w.u8(JOURNAL_ERROR).str(e.kind().as_str());
    let path = e.path().map(|p| p.to_string_lossy().into_owned());
    w.opt_str(path.as_deref()).str(e.message());
    let moved = e.quarantined_to().map(|p| p.to_string_lossy().into_owned());
    w.opt_str(moved.as_deref());
    w.0
}

fn into_journal_handle(j: Journal) -> u64 {
    Box::into_raw(Box::new(j)) as usize as u64
}

fn with_journal<T>(handle: jlong, f: impl FnOnce(&Journal) -> Result<T, Fail>) -> Result<T, Fail> {
    if handle == 0 {
        return Err(arg_fail("null journal handle"));
    }
    // SAFETY: a non-zero handle comes from `into_journal_handle` and the Java
    // side never passes it after `nativeJournalFree` nor concurrently with it.
    let j = unsafe { &*(handle as usize as *const Journal) };
    f(j)
}

fn path_str(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

fn put_opened(j: Journal) -> W {
    let dir = path_str(j.dir());
    let mut w = W::ok();
    w.u64(into_journal_handle(j)).str(&dir);
    w
}

fn put_entry(w: &mut W, r: &JournalRecord) {
    let json = r.to_json().unwrap_or_default();
    w.str(&r.reservation_id)
        .str(&r.base_url)
        .str(r.mode.as_str())
        .opt_u64(r.not_before_ms)
        .u64(r.recorded_at_ms)
        .str(&json);
}

/// Quarantined, migrated and skipped lists of a scan.
fn put_scan_reports(w: &mut W, scan: &Scan) {
    w.u32(scan.quarantined.len() as u32);
    for q in &scan.quarantined {
        w.str(&q.file).opt_str(q.moved_to.as_deref()).str(&q.reason);
    }
    w.u32(scan.migrated.len() as u32);
    for m in &scan.migrated {
        w.str(&m.from)
            .str(&m.to)
            .str(&m.reservation_id)
            .bool(m.duplicate_removed);
    }
    w.u32(scan.skipped.len() as u32);
    for s in &scan.skipped {
        w.str(&s.file).str(&s.reason);
    }
}

// ----- entry points -----

/// `static native byte[] nativeJournalOpen(byte[] dir, byte[] baseUrl,
/// byte[] apiKey, byte[] tenant)`: `Journal::open(base_dir(dir), ...)` (a
/// null `dir`: `CYCLES_JOURNAL_DIR`, else `~/.runcycles/commit-journal`; a
/// null `tenant`: partitioned by the API key). OK payload: the handle (u64),
/// `str` the partition directory.
#[unsafe(no_mangle)]
pub extern "system" fn Java_io_leasebeat_NativeBridge_nativeJournalOpen<'c>(
    env: EnvUnowned<'c>,
    _class: JClass<'c>,
    dir: JByteArray<'c>,
    base_url: JByteArray<'c>,
    api_key: JByteArray<'c>,
    tenant: JByteArray<'c>,
) -> JByteArray<'c> {
    cold(env, |env| {
        let dir = opt_text(env, &dir, "dir")?.map(PathBuf::from);
        let base_url = text_arg(env, &base_url, "baseUrl")?;
        let api_key = text_arg(env, &api_key, "apiKey")?;
        let tenant = opt_text(env, &tenant, "tenant")?;
        let base = leasebeat::journal::base_dir(dir.as_deref())?;
        let j = Journal::open(&base, &base_url, &api_key, tenant.as_deref())?;
        Ok(put_opened(j))
    })
}

/// `static native byte[] nativeJournalOpenPartition(byte[] dir, byte[]
/// baseUrl)`: `Journal::open_partition`. OK payload: as `nativeJournalOpen`.
#[unsafe(no_mangle)]
pub extern "system" fn Java_io_leasebeat_NativeBridge_nativeJournalOpenPartition<'c>(
    env: EnvUnowned<'c>,
    _class: JClass<'c>,
    dir: JByteArray<'c>,
    base_url: JByteArray<'c>,
) -> JByteArray<'c> {
    cold(env, |env| {
        let dir = PathBuf::from(text_arg(env, &dir, "dir")?);
        let base_url = text_arg(env, &base_url, "baseUrl")?;
        Ok(put_opened(Journal::open_partition(&dir, &base_url)?))
    })
}

/// `static native byte[] nativeJournalBaseDir(byte[] dir)`: the base
/// directory `Journal::open` would use (`str`).
#[unsafe(no_mangle)]
pub extern "system" fn Java_io_leasebeat_NativeBridge_nativeJournalBaseDir<'c>(
    env: EnvUnowned<'c>,
    _class: JClass<'c>,
    dir: JByteArray<'c>,
) -> JByteArray<'c> {
    cold(env, |env| {
        let dir = opt_text(env, &dir, "dir")?.map(PathBuf::from);
        let base = leasebeat::journal::base_dir(dir.as_deref())?;
        let mut w = W::ok();
        w.str(&path_str(&base));
        Ok(w)
    })
}

/// `static native void nativeJournalFree(long handle)`: frees a handle (its
/// claims are released with the last clone); 0 is a no-op.
#[unsafe(no_mangle)]
pub extern "system" fn Java_io_leasebeat_NativeBridge_nativeJournalFree<'c>(
    _env: EnvUnowned<'c>,
    _class: JClass<'c>,
    handle: jlong,
) {
    if handle == 0 {
        return;
    }
    let _ = std::panic::catch_unwind(|| {
        // SAFETY: see `with_journal`; freed exactly once, with no call inside.
        drop(unsafe { Box::from_raw(handle as usize as *mut Journal) });
    });
}

/// `static native byte[] nativeJournalPersist(long journal, long
/// settlement, long nowNs)`: `Journal::persist` (J-1, J-6, SP-3). OK
/// payload: the decision.
#[unsafe(no_mangle)]
pub extern "system" fn Java_io_leasebeat_NativeBridge_nativeJournalPersist<'c>(
    env: EnvUnowned<'c>,
    _class: JClass<'c>,
    journal: jlong,
    settlement: jlong,
    now_ns: jlong,
) -> JByteArray<'c> {
    cold(env, |_| {
        with_journal(journal, |j| {
            with_settlement(settlement, |s| {
                let d = j.persist(s, u64_of(now_ns))?;
                let mut w = W::ok();
                put_decision(&mut w, &d);
                Ok(w)
            })
        })
    })
}

/// `static native byte[] nativeJournalFinish(long journal, long
/// settlement)`: `Journal::finish` (J-5, the claim released). OK payload:
/// empty.
#[unsafe(no_mangle)]
pub extern "system" fn Java_io_leasebeat_NativeBridge_nativeJournalFinish<'c>(
    env: EnvUnowned<'c>,
    _class: JClass<'c>,
    journal: jlong,
    settlement: jlong,
) -> JByteArray<'c> {
    cold(env, |_| {
        with_journal(journal, |j| {
            with_settlement(settlement, |s| {
                j.finish(s)?;
                Ok(W::ok())
            })
        })
    })
}

/// `static native byte[] nativeJournalReplay(long journal, int maxAttempts,
/// long initialMs, long maxMs, long wallMs)`: `Journal::replay` at mono 0
/// (each settlement's origin is the Java caller's `nowNanos`). OK payload:
/// `u32 n` x (`u64 handle`, decision), `u32 n` x `str` busy, then the scan's
/// quarantined, migrated and skipped lists.
#[unsafe(no_mangle)]
pub extern "system" fn Java_io_leasebeat_NativeBridge_nativeJournalReplay<'c>(
    env: EnvUnowned<'c>,
    _class: JClass<'c>,
    journal: jlong,
    max_attempts: jint,
    initial_ms: jlong,
    max_ms: jlong,
    wall_ms: jlong,
) -> JByteArray<'c> {
    cold(env, |_| {
        let retry = retry_of(max_attempts, initial_ms, max_ms)?;
        let now = now_of(0, wall_ms)?;
        with_journal(journal, |j| {
            let replay = j.replay(retry, now)?;
            let mut w = W::ok();
            w.u32(replay.settlements.len() as u32);
            for s in replay.settlements {
                let first = s.last_decision().clone();
                w.u64(into_handle(s));
                put_decision(&mut w, &first);
            }
            w.u32(replay.busy.len() as u32);
            for id in &replay.busy {
                w.str(id);
            }
            put_scan_reports(&mut w, &replay.scan);
            Ok(w)
        })
    })
}

/// `static native byte[] nativeJournalScan(long journal)`: `Journal::scan`.
/// OK payload: the scan.
#[unsafe(no_mangle)]
pub extern "system" fn Java_io_leasebeat_NativeBridge_nativeJournalScan<'c>(
    env: EnvUnowned<'c>,
    _class: JClass<'c>,
    journal: jlong,
) -> JByteArray<'c> {
    cold(env, |_| {
        with_journal(journal, |j| {
            let scan = j.scan()?;
            let mut w = W::ok();
            for list in [&scan.records, &scan.foreign] {
                w.u32(list.len() as u32);
                for r in list {
                    put_entry(&mut w, r);
                }
            }
            put_scan_reports(&mut w, &scan);
            w.u64(scan.reaped_temp_files as u64);
            Ok(w)
        })
    })
}

/// `static native byte[] nativeJournalById(long journal, byte[] id, int
/// what)`: 0 `remove` (`bool` removed), 1 `quarantine` (`opt str` moved
/// to), 2 `release_claim` (empty), 3 `load` (`opt` entry; a corrupt record
/// is quarantined and reported as an error).
#[unsafe(no_mangle)]
pub extern "system" fn Java_io_leasebeat_NativeBridge_nativeJournalById<'c>(
    env: EnvUnowned<'c>,
    _class: JClass<'c>,
    journal: jlong,
    id: JByteArray<'c>,
    what: jint,
) -> JByteArray<'c> {
    cold(env, |env: &mut Env<'c>| {
        let id = text_arg(env, &id, "reservationId")?;
        with_journal(journal, |j| {
            let mut w = W::ok();
            match what {
                0 => {
                    w.bool(j.remove(&id)?);
                }
                1 => {
                    let moved = j.quarantine(&id)?.map(|p| path_str(&p));
                    w.opt_str(moved.as_deref());
                }
                2 => j.release_claim(&id),
                3 => match j.load(&id)? {
                    Some(r) => put_entry(w.bool(true), &r),
                    None => {
                        w.bool(false);
                    }
                },
                _ => return Err(arg_fail(&format!("unknown journal call {what}"))),
            }
            Ok(w)
        })
    })
}
