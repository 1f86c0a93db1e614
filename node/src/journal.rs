//! The durable settlement journal (`Journal`): rules J-1..J-8 of
//! `settlement.md`, all in the core's `leasebeat::journal` (record layout,
//! file names, atomic writes, quarantine, claims, replay). This module only
//! converts values in and out; every failure is a `JournalError` (code
//! `ERR_LEASEBEAT_JOURNAL`, with the core's `kind`).
//!
//! Unix only, as the core's journal: on other platforms the class exists and
//! every call throws a `JournalError` of kind `'io'`.

use std::sync::Mutex;

#[cfg(unix)]
use leasebeat::journal as lj;
use napi::bindgen_prelude::*;
use napi_derive::napi;

#[cfg(unix)]
use crate::conv;
use crate::errors::{Class, ErrorCode, Fail, R, run};
use crate::settlement::{Settlement, SettlementDecision};

/// The options of `Journal.open(options)`. Unknown properties are refused.
#[napi(object, object_from_js = false, object_to_js = false)]
pub struct JournalOpenOptions {
    /// The base directory; absent: `CYCLES_JOURNAL_DIR`, else
    /// `~/.runcycles/commit-journal`. Created 0700 if missing; never
    /// followed if it is a symbolic link.
    #[napi(ts_type = "string")]
    pub dir: Option<()>,
    /// The server the records settle against (part of the partition name).
    #[napi(ts_type = "string")]
    pub base_url: (),
    /// The API key: names the partition (hashed) when no tenant is given;
    /// never stored.
    #[napi(ts_type = "string")]
    pub api_key: (),
    /// The tenant: when given and not blank the partition is the tenant's,
    /// so a rotated API key finds the same records.
    #[napi(ts_type = "string | null")]
    pub tenant: Option<()>,
}

/// The options of `journal.replay(options)`. Unknown properties are refused.
#[napi(object, object_from_js = false, object_to_js = false)]
pub struct ReplayOptions {
    /// The monotonic clock now (ms as a `number`, or ns as a `bigint`), the
    /// settlements' time origin.
    #[napi(ts_type = "number | bigint")]
    pub now: (),
    /// The wall clock now (Unix ms): `not_before_ms` floors are measured on it.
    #[napi(ts_type = "number | bigint")]
    pub wall_ms: (),
    /// The retry policy of the rebuilt settlements; absent: the defaults.
    #[napi(ts_type = "RetryOptions")]
    pub retry: Option<()>,
}

/// A record quarantined (renamed aside, J-4) by a scan or a replay.
#[napi(object, object_from_js = false, use_nullable = true)]
pub struct JournalQuarantined {
    /// Its file name in the partition.
    pub file: String,
    /// Its new name, `null` if the rename failed.
    pub moved_to: Option<String>,
    /// Why it was refused.
    pub reason: String,
}

/// A legacy-named record migrated to its `v2-` name (J-8).
#[napi(object, object_from_js = false, use_nullable = true)]
pub struct JournalMigrated {
    /// The legacy file name.
    pub from: String,
    /// The `v2-` file name.
    pub to: String,
    /// The stored reservation id.
    pub reservation_id: String,
    /// A `v2-` record of that id already existed: the legacy file was removed.
    pub duplicate_removed: bool,
}

/// A `.json` file a scan left alone (a symbolic link, a misplaced record, ...).
#[napi(object, object_from_js = false, use_nullable = true)]
pub struct JournalSkipped {
    /// Its file name.
    pub file: String,
    /// Why it was left alone.
    pub reason: String,
}

/// One valid record found by `scan()` (read only: replay goes through `replay`).
#[napi(object, object_from_js = false, use_nullable = true)]
pub struct JournalRecordInfo {
    /// The exact reservation id.
    pub reservation_id: String,
    /// The server the record settles against.
    pub base_url: String,
    /// `'commit'` or `'event'`.
    #[napi(ts_type = "RecordMode")]
    pub mode: String,
    /// When the record was written (Unix ms).
    pub recorded_at_ms: f64,
    /// No request before this wall-clock instant (Unix ms), or `null`.
    pub not_before_ms: Option<f64>,
}

/// What `scan()` found and did.
#[napi(object, object_from_js = false, use_nullable = true)]
pub struct JournalScan {
    /// Valid records of this journal's server, in file name order.
    pub records: Vec<JournalRecordInfo>,
    /// Valid records of another server (left alone).
    pub foreign: Vec<JournalRecordInfo>,
    /// Records renamed aside (J-4).
    pub quarantined: Vec<JournalQuarantined>,
    /// Legacy-named records migrated (J-8).
    pub migrated: Vec<JournalMigrated>,
    /// Files left alone, with why.
    pub skipped: Vec<JournalSkipped>,
    /// Stale temporary files removed.
    pub reaped_temp_files: u32,
}

/// What `replay()` returns: the settlements to drive (each one's claim is
/// held by this journal until `finish` or `releaseClaim`), the ids claimed by
/// another worker or process (not returned), and the scan's findings.
#[napi(object, object_from_js = false, use_nullable = true)]
pub struct JournalReplay {
    /// One settlement per record of this server that this journal claimed,
    /// rebuilt from the record alone (SP-4). Drive each like a new one and
    /// call `journal.finish(settlement)` when it is done.
    #[napi(ts_type = "Settlement[]")]
    pub settlements: Vec<Settlement>,
    /// Reservation ids whose record another worker or process is settling.
    pub busy: Vec<String>,
    /// Records renamed aside (J-4), including those the settlement refused.
    pub quarantined: Vec<JournalQuarantined>,
    /// Legacy-named records migrated (J-8).
    pub migrated: Vec<JournalMigrated>,
    /// Files left alone, with why.
    pub skipped: Vec<JournalSkipped>,
}

#[cfg(unix)]
fn ms(v: u64) -> f64 {
    // Unix ms fit a double exactly for the next 285,000 years.
    v as f64
}

#[cfg(unix)]
fn record_info(r: &lj::JournalRecord) -> JournalRecordInfo {
    JournalRecordInfo {
        reservation_id: r.reservation_id.clone(),
        base_url: r.base_url.clone(),
        mode: r.mode.as_str().to_owned(),
        recorded_at_ms: ms(r.recorded_at_ms),
        not_before_ms: r.not_before_ms.map(ms),
    }
}

#[cfg(unix)]
fn quarantined(q: &[lj::Quarantined]) -> Vec<JournalQuarantined> {
    q.iter()
        .map(|q| JournalQuarantined {
            file: q.file.clone(),
            moved_to: q.moved_to.clone(),
            reason: q.reason.clone(),
        })
        .collect()
}

#[cfg(unix)]
fn migrated(m: &[lj::Migrated]) -> Vec<JournalMigrated> {
    m.iter()
        .map(|m| JournalMigrated {
            from: m.from.clone(),
            to: m.to.clone(),
            reservation_id: m.reservation_id.clone(),
            duplicate_removed: m.duplicate_removed,
        })
        .collect()
}

#[cfg(unix)]
fn skipped(s: &[lj::Skipped]) -> Vec<JournalSkipped> {
    s.iter()
        .map(|s| JournalSkipped {
            file: s.file.clone(),
            reason: s.reason.clone(),
        })
        .collect()
}

#[cfg(unix)]
type Inner = lj::Journal;
#[cfg(not(unix))]
type Inner = ();

/// One partition of the durable settlement journal (J-1..J-8), open: one
/// file per pending settlement (`v2-<sha256 of the id>.json`, 0600, in a
/// 0700 directory, symbolic links never followed), written atomically and
/// fsync'd before the request it guards, interchangeable with the official
/// SDKs' journal.
///
/// `Journal.open({ dir?, baseUrl, apiKey, tenant? })` opens the partition of
/// a server and principal under `dir`, else `CYCLES_JOURNAL_DIR`, else
/// `~/.runcycles/commit-journal`. Every method is synchronous (a few system
/// calls and at most two fsyncs) and throws a `JournalError` (code
/// `ERR_LEASEBEAT_JOURNAL`, `kind`) for what the file system refuses, a
/// `TypeError`/`RangeError` (`ERR_LEASEBEAT_INVALID_ARGUMENT`) for bad
/// arguments.
#[napi]
pub struct Journal {
    inner: Mutex<Option<Inner>>,
}

fn closed() -> Fail {
    Fail::new(Class::Error, ErrorCode::Closed, "this Journal was closed")
}

impl Journal {
    fn get(&self) -> R<Inner> {
        let guard = self.inner.lock().map_err(|_| {
            Fail::new(
                Class::Error,
                ErrorCode::Poisoned,
                "a previous call on this Journal panicked; it can no longer be used",
            )
        })?;
        guard.clone().ok_or_else(closed)
    }
}

#[cfg(not(unix))]
fn unsupported<T>() -> R<T> {
    Err(Fail::new(
        Class::Error,
        ErrorCode::Journal,
        "the settlement journal is only available on Unix",
    ))
}

#[cfg(unix)]
fn settlement_arg<'e>(v: Unknown<'e>, what: &str) -> R<ClassInstance<'e, Settlement>> {
    let ok = v.get_type().is_ok_and(|t| t == napi::ValueType::Object);
    let inst = if ok {
        ClassInstance::<Settlement>::from_unknown(v).ok()
    } else {
        None
    };
    inst.ok_or_else(|| Fail::ty(format!("{what} must be a Settlement")))
}

#[cfg(unix)]
fn id_arg(v: &Unknown<'_>) -> R<String> {
    conv::string(v, "reservationId")
}

#[napi]
impl Journal {
    /// Opens (creating it 0700 if needed) the partition of `baseUrl` and the
    /// principal (`tenant` when given and not blank, else `apiKey`; the key
    /// itself is never stored) under `dir`, else `CYCLES_JOURNAL_DIR`, else
    /// `~/.runcycles/commit-journal`.
    ///
    /// Throws a `JournalError` of kind `'symlink'` (the directory or the
    /// partition is a symbolic link: never followed), `'not_writable'`,
    /// `'not_a_directory'`, `'no_directory'`, `'no_space'` or `'io'`.
    #[napi(factory, catch_unwind)]
    pub fn open(
        env: &Env,
        #[napi(ts_arg_type = "JournalOpenOptions")] options: Unknown<'_>,
    ) -> Result<Journal> {
        run(env, || {
            #[cfg(unix)]
            {
                let o = conv::journal_open_options(&options)?;
                let base = lj::base_dir(o.dir.as_deref().map(std::path::Path::new))
                    .map_err(|e| Fail::journal(&e))?;
                let j = lj::Journal::open(&base, &o.base_url, &o.api_key, o.tenant.as_deref())
                    .map_err(|e| Fail::journal(&e))?;
                Ok(Journal {
                    inner: Mutex::new(Some(j)),
                })
            }
            #[cfg(not(unix))]
            {
                let _ = options;
                unsupported()
            }
        })
    }

    /// Opens (creating if needed) the partition directory `dir` itself, for
    /// records of `baseUrl` (for tools given a partition path). `dir`'s
    /// parent must exist.
    #[napi(factory, catch_unwind)]
    pub fn open_partition(
        env: &Env,
        #[napi(ts_arg_type = "string")] dir: Unknown<'_>,
        #[napi(ts_arg_type = "string")] base_url: Unknown<'_>,
    ) -> Result<Journal> {
        run(env, || {
            #[cfg(unix)]
            {
                let dir = conv::string(&dir, "dir")?;
                if dir.is_empty() || dir.contains('\0') {
                    return Err(Fail::range("dir must be a non-empty path without NUL"));
                }
                let base_url = conv::string(&base_url, "baseUrl")?;
                let j = lj::Journal::open_partition(std::path::Path::new(&dir), &base_url)
                    .map_err(|e| Fail::journal(&e))?;
                Ok(Journal {
                    inner: Mutex::new(Some(j)),
                })
            }
            #[cfg(not(unix))]
            {
                let _ = (dir, base_url);
                unsupported()
            }
        })
    }

    /// The partition directory (an absolute or relative path as opened).
    #[napi(getter, catch_unwind)]
    pub fn dir(&self, env: &Env) -> Result<String> {
        run(env, || {
            #[cfg(unix)]
            {
                Ok(self.get()?.dir().to_string_lossy().into_owned())
            }
            #[cfg(not(unix))]
            {
                unsupported()
            }
        })
    }

    /// The server this journal's records (and replay) are for.
    #[napi(getter, catch_unwind)]
    pub fn base_url(&self, env: &Env) -> Result<String> {
        run(env, || {
            #[cfg(unix)]
            {
                Ok(self.get()?.base_url().to_owned())
            }
            #[cfg(not(unix))]
            {
                unsupported()
            }
        })
    }

    /// Does what a settlement's `persist` action asks (J-1): writes its
    /// record durably, takes this journal's claim on the reservation (J-6),
    /// and returns the settlement's decision (`handlePersisted`). A failed
    /// write does not throw: the decision carries warning `persist_failed`
    /// and the journal's message in `detail` (SP-3: the request still goes).
    ///
    /// Throws `ERR_LEASEBEAT_STOPPED` (or another core code) when the
    /// settlement is not asking for a persist.
    #[napi(catch_unwind)]
    pub fn persist(
        &self,
        env: &Env,
        #[napi(ts_arg_type = "Settlement")] settlement: Unknown<'_>,
        #[napi(ts_arg_type = "number | bigint")] now: Unknown<'_>,
    ) -> Result<SettlementDecision> {
        run(env, || {
            #[cfg(unix)]
            {
                let s = settlement_arg(settlement, "settlement")?;
                let now = conv::time_ns(&now, "now")?;
                let j = self.get()?;
                s.with(|s| {
                    j.persist(s, now)
                        .map(|d| SettlementDecision::from(&d))
                        .map_err(|e| Fail::core(&e))
                })
            }
            #[cfg(not(unix))]
            {
                let _ = (settlement, now);
                unsupported()
            }
        })
    }

    /// Once `settlement` is done: applies its final record update (J-5:
    /// removes the record, or keeps it for a later replay) and releases this
    /// journal's claim on it. Throws a `JournalError` (kind
    /// `'not_finished'`) if the settlement is not done; nothing is touched
    /// then.
    #[napi(catch_unwind)]
    pub fn finish(
        &self,
        env: &Env,
        #[napi(ts_arg_type = "Settlement")] settlement: Unknown<'_>,
    ) -> Result<()> {
        run(env, || {
            #[cfg(unix)]
            {
                let s = settlement_arg(settlement, "settlement")?;
                let j = self.get()?;
                s.with(|s| j.finish(s).map_err(|e| Fail::journal(&e)))
            }
            #[cfg(not(unix))]
            {
                let _ = settlement;
                unsupported()
            }
        })
    }

    /// Replay (J-6, SP-4): scans the partition (quarantine J-4, migration
    /// J-8), then claims every record of this server and rebuilds its
    /// settlement from the record alone; a record another worker or process
    /// holds is listed in `busy`, a record the settlement refuses is
    /// quarantined. `options`: `{ now, wallMs, retry? }`.
    #[napi(catch_unwind)]
    pub fn replay(
        &self,
        env: &Env,
        #[napi(ts_arg_type = "ReplayOptions")] options: Unknown<'_>,
    ) -> Result<JournalReplay> {
        run(env, || {
            #[cfg(unix)]
            {
                let (now, retry) = conv::replay_options(&options)?;
                let j = self.get()?;
                let r = j.replay(retry, now).map_err(|e| Fail::journal(&e))?;
                Ok(JournalReplay {
                    settlements: r.settlements.into_iter().map(Settlement::open).collect(),
                    busy: r.busy,
                    quarantined: quarantined(&r.scan.quarantined),
                    migrated: migrated(&r.scan.migrated),
                    skipped: skipped(&r.scan.skipped),
                })
            }
            #[cfg(not(unix))]
            {
                let _ = options;
                unsupported()
            }
        })
    }

    /// Lists the partition (quarantining, migrating and reporting on the
    /// way, as `replay` does) without claiming or rebuilding anything: for
    /// operators and tests.
    #[napi(catch_unwind)]
    pub fn scan(&self, env: &Env) -> Result<JournalScan> {
        run(env, || {
            #[cfg(unix)]
            {
                let s = self.get()?.scan().map_err(|e| Fail::journal(&e))?;
                Ok(JournalScan {
                    records: s.records.iter().map(record_info).collect(),
                    foreign: s.foreign.iter().map(record_info).collect(),
                    quarantined: quarantined(&s.quarantined),
                    migrated: migrated(&s.migrated),
                    skipped: skipped(&s.skipped),
                    reaped_temp_files: u32::try_from(s.reaped_temp_files).unwrap_or(u32::MAX),
                })
            }
            #[cfg(not(unix))]
            {
                unsupported()
            }
        })
    }

    /// Removes the record of `reservationId`; `true` if there was one.
    #[napi(catch_unwind)]
    pub fn remove(
        &self,
        env: &Env,
        #[napi(ts_arg_type = "string")] reservation_id: Unknown<'_>,
    ) -> Result<bool> {
        run(env, || {
            #[cfg(unix)]
            {
                let id = id_arg(&reservation_id)?;
                self.get()?.remove(&id).map_err(|e| Fail::journal(&e))
            }
            #[cfg(not(unix))]
            {
                let _ = reservation_id;
                unsupported()
            }
        })
    }

    /// Renames the record of `reservationId` aside (J-4) and returns its new
    /// path, `null` if there is no record. Never deletes it.
    #[napi(catch_unwind)]
    pub fn quarantine(
        &self,
        env: &Env,
        #[napi(ts_arg_type = "string")] reservation_id: Unknown<'_>,
    ) -> Result<Option<String>> {
        run(env, || {
            #[cfg(unix)]
            {
                let id = id_arg(&reservation_id)?;
                self.get()?
                    .quarantine(&id)
                    .map(|p| p.map(|p| p.to_string_lossy().into_owned()))
                    .map_err(|e| Fail::journal(&e))
            }
            #[cfg(not(unix))]
            {
                let _ = reservation_id;
                unsupported()
            }
        })
    }

    /// Releases this journal's claim on `reservationId` (if held), e.g. for
    /// a replayed settlement this process will not drive after all.
    #[napi(catch_unwind)]
    pub fn release_claim(
        &self,
        env: &Env,
        #[napi(ts_arg_type = "string")] reservation_id: Unknown<'_>,
    ) -> Result<()> {
        run(env, || {
            #[cfg(unix)]
            {
                let id = id_arg(&reservation_id)?;
                self.get()?.release_claim(&id);
                Ok(())
            }
            #[cfg(not(unix))]
            {
                let _ = reservation_id;
                unsupported()
            }
        })
    }

    /// Closes this object and releases the claims it holds (they are also
    /// released when it is garbage-collected, and by the OS when the process
    /// ends). Idempotent; every later call throws `ERR_LEASEBEAT_CLOSED`.
    #[napi(catch_unwind)]
    pub fn close(&self) {
        if let Ok(mut g) = self.inner.lock() {
            *g = None;
        }
    }

    /// Whether `close()` was called.
    #[napi(getter, catch_unwind)]
    pub fn closed(&self) -> bool {
        self.inner.lock().map_or(true, |g| g.is_none())
    }
}
