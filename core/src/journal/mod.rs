//! The settlement journal (J-1..J-8 of [`docs/settlement-contract.md`](https://github.com/leasebeat/leasebeat/blob/main/docs/settlement-contract.md)): one file per pending
//! settlement, written atomically and durably before the request it guards, interchangeable
//! with runcycles Python 0.5.3's pending-commit journal (`journal.py`) in both directions.
//!
//! This is file I/O, so it lives outside the sans-IO core behind the `journal` feature
//! (unix only). It is synchronous: each call does its system calls and returns.
//!
//! # Layout (J-2, as journal.py)
//!
//! ```text
//! <base>/                      CYCLES_JOURNAL_DIR, else ~/.runcycles/commit-journal
//!   <partition>/               partition_name(base_url, api_key, tenant): 16 hex digits
//!     v2-<sha256 hex>.json     one record per reservation id (JournalRecord)
//!     v2-<sha256 hex>.lock     a claim (flock) while a worker settles it (J-6)
//!     v2-<...>.json.<pid>.<8 hex>.tmp   a write in progress (reaped after an hour)
//!     v2-<sha256 hex>.corrupt  a quarantined record (J-4; `.<n>.corrupt` if taken)
//!     <sanitized id>.json      a legacy name (J-8), migrated when its id matches
//! ```
//!
//! # Safety rules kept
//!
//! * Every file operation is relative to the partition's open directory descriptor and
//!   uses a plain file name (never a path with `/`), with `O_NOFOLLOW`: a symbolic link
//!   for the partition or any record is never followed (J-3), it is an error
//!   ([`JournalErrorKind::Symlink`]) or, in [`Journal::scan`], skipped and reported.
//! * Directories are created 0700 and records 0600 (J-3). The base directory is only
//!   created and tightened if it did not exist (journal.py chmods an existing one too).
//! * [`Journal::write`]: a unique temporary file in the same directory, written, made
//!   0600, fsync'd, renamed over the record, then the directory fsync'd (J-1). A failure
//!   at any step leaves the previous record as it was.
//! * [`Journal::remove`] unlinks without fsyncing the directory: a removal lost in a
//!   crash replays the record with its stored key, which the server answers
//!   idempotently, and then removes it again.
//!
//! # Replay (J-6)
//!
//! [`Journal::scan`] lists the partition's records (quarantining, migrating and reporting
//! on the way). A worker then takes [`Journal::claim`] for a record (an exclusive `flock`
//! on its `.lock` file, released when the [`Claim`] drops or the process dies), loads it
//! again with [`Journal::load`] (another worker may have settled it since the scan), and
//! settles it. A live settlement takes the claim before its first write, so a replaying
//! process never sends for a record that a running process still owns.
#![allow(clippy::module_name_repetitions)]

mod error;
mod record;
mod settle;

use std::collections::HashMap;
use std::ffi::CStr;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rustix::fs::{AtFlags, FileType, FlockOperation, Mode, OFlags};
use rustix::io::Errno;
use sha2::{Digest, Sha256};

pub use error::{JournalError, JournalErrorKind};
pub use record::{JournalRecord, RECORD_VERSION, RecordMode};
pub use settle::Replay;

/// The environment variable naming the journal's base directory (as the SDKs read it).
pub const JOURNAL_DIR_ENV: &str = "CYCLES_JOURNAL_DIR";
/// A temporary file older than this is a crashed writer's and is removed by a scan
/// (journal.py's cutoff).
pub const STALE_TEMP_AGE: Duration = Duration::from_secs(3600);
/// PBKDF2 rounds of the partition name (journal.py's fixed constant).
pub const PARTITION_PBKDF2_ROUNDS: u32 = 30_000;

const SUFFIX: &str = ".json";
const DIR_MODE: u32 = 0o700;
const FILE_MODE: u32 = 0o600;
/// Most threads [`Journal::write_batch`] fsyncs from at once.
const FSYNC_THREADS: usize = 64;

/// The record file name of a reservation id: `v2-<sha256 lower hex of its UTF-8>.json`.
/// Any id has one, NUL, `/` and 10,000 characters included.
pub fn record_file_name(reservation_id: &str) -> String {
    format!("v2-{}{SUFFIX}", sha256_hex(reservation_id))
}

/// The claim (lock) file name of a reservation id: `v2-<sha256 hex>.lock`.
pub fn claim_file_name(reservation_id: &str) -> String {
    format!("v2-{}.lock", sha256_hex(reservation_id))
}

/// The legacy file name SDK releases before the v2 scheme wrote (J-8): every character
/// other than `A-Z a-z 0-9 _ -` replaced by `_`, then `.json`. Many ids share one.
pub fn legacy_file_name(reservation_id: &str) -> String {
    let mut s: String = reservation_id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    s.push_str(SUFFIX);
    s
}

fn sha256_hex(s: &str) -> String {
    hex(&Sha256::digest(s.as_bytes()))
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 15)]));
    }
    s
}

/// The partition directory name for a server and principal (journal.py's
/// `auth_fingerprint`): the first 16 hex digits of PBKDF2-HMAC-SHA256 over
/// `"tenant\n" + tenant` when a tenant is configured (non-blank), else `"key\n" + api_key`,
/// salted with `"runcycles-commit-journal\n" + base_url`, 30,000 rounds. Stable across API-key
/// rotation when a tenant is set; the key itself is never stored. Cached per process.
pub fn partition_name(base_url: &str, api_key: &str, tenant: Option<&str>) -> String {
    let principal = match tenant {
        Some(t) if !t.trim().is_empty() => format!("tenant\n{t}"),
        _ => format!("key\n{api_key}"),
    };
    static CACHE: OnceLock<Mutex<HashMap<(String, String), String>>> = OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    let cache_key = (base_url.to_owned(), principal);
    if let Some(hit) = cache.lock().ok().and_then(|m| m.get(&cache_key).cloned()) {
        return hit;
    }
    let mut out = [0u8; 32];
    pbkdf2::pbkdf2_hmac::<Sha256>(
        cache_key.1.as_bytes(),
        format!("runcycles-commit-journal\n{base_url}").as_bytes(),
        PARTITION_PBKDF2_ROUNDS,
        &mut out,
    );
    let name = hex(&out[..8]);
    if let Ok(mut m) = cache.lock() {
        if m.len() >= 256 {
            m.clear();
        }
        m.insert(cache_key, name.clone());
    }
    name
}

/// The journal's base directory: `explicit` if given, else `CYCLES_JOURNAL_DIR` if set and
/// non-empty, else `$HOME/.runcycles/commit-journal`.
pub fn base_dir(explicit: Option<&Path>) -> Result<PathBuf, JournalError> {
    if let Some(p) = explicit {
        return Ok(p.to_path_buf());
    }
    if let Some(v) = std::env::var_os(JOURNAL_DIR_ENV).filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(v));
    }
    match std::env::var_os("HOME").filter(|v| !v.is_empty()) {
        Some(home) => Ok(PathBuf::from(home)
            .join(".runcycles")
            .join("commit-journal")),
        None => Err(JournalError::new(
            JournalErrorKind::NoDirectory,
            None,
            format!("no journal directory: {JOURNAL_DIR_ENV} and HOME are unset"),
        )),
    }
}

/// Wall-clock Unix milliseconds (for `recorded_at_ms`).
pub fn now_unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

struct Inner {
    dir: PathBuf,
    fd: OwnedFd,
    base_url: String,
    /// The claims this journal holds for its settlements ([`Journal::persist`],
    /// [`Journal::replay`]), by reservation id; released by [`Journal::finish`],
    /// [`Journal::release_claim`] or when the last clone is dropped.
    claims: Mutex<HashMap<String, HeldClaim>>,
}

/// A claim held inside the journal (a [`Claim`] would keep the journal alive).
struct HeldClaim {
    name: String,
    fd: OwnedFd,
}

impl Inner {
    fn unlock(&self, held: HeldClaim) {
        // The name goes first, then the lock (as `Claim::drop`): a waiter that locked the
        // old inode sees the name gone and takes a fresh file.
        let _ = rustix::fs::unlinkat(&self.fd, held.name.as_str(), AtFlags::empty());
        drop(held.fd);
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        let held: Vec<HeldClaim> = match self.claims.get_mut() {
            Ok(map) => map.drain().map(|(_, h)| h).collect(),
            Err(poisoned) => poisoned.into_inner().drain().map(|(_, h)| h).collect(),
        };
        for h in held {
            self.unlock(h);
        }
    }
}

/// One partition of the journal, open. Cheap to clone (shared descriptor); `Send + Sync`.
#[derive(Clone)]
pub struct Journal {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Journal")
            .field("dir", &self.inner.dir)
            .field("base_url", &self.inner.base_url)
            .finish()
    }
}

fn errno(e: Errno) -> io::Error {
    io::Error::from(e)
}

fn open_dir_nofollow(at: &OwnedFd, name: &Path, full: &Path) -> Result<OwnedFd, JournalError> {
    rustix::fs::openat(
        at,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| dir_error(e, full))
}

fn dir_error(e: Errno, full: &Path) -> JournalError {
    if e == Errno::LOOP || (e == Errno::NOTDIR && is_symlink(full)) {
        JournalError::new(
            JournalErrorKind::Symlink,
            Some(full),
            "the journal directory is a symbolic link (not followed)".into(),
        )
    } else {
        JournalError::io("open journal directory", full, errno(e))
    }
}

fn is_symlink(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_symlink())
}

impl Journal {
    /// Opens (creating if needed) the partition of `base_url` and the principal (`tenant`
    /// when non-blank, else `api_key`) under `base` (see [`base_dir`]).
    ///
    /// Errors: [`JournalErrorKind::Symlink`] when `base` or the partition is a symbolic
    /// link, `NotADirectory`, `NotWritable` (cannot create), `NoSpace`, `Io`.
    pub fn open(
        base: &Path,
        base_url: &str,
        api_key: &str,
        tenant: Option<&str>,
    ) -> Result<Journal, JournalError> {
        let existed = std::fs::symlink_metadata(base).is_ok();
        if !existed {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(DIR_MODE)
                .create(base)
                .map_err(|e| JournalError::io("create journal directory", base, e))?;
        }
        let cwd = rustix::fs::CWD;
        let base_fd = rustix::fs::openat(
            cwd,
            base,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| dir_error(e, base))?;
        if !existed {
            let _ = rustix::fs::fchmod(&base_fd, Mode::from_raw_mode(DIR_MODE));
        }
        let name = partition_name(base_url, api_key, tenant);
        let dir = base.join(&name);
        Self::open_in(&base_fd, Path::new(&name), dir, base_url)
    }

    /// Opens (creating if needed) the partition directory `dir` itself, for records of
    /// `base_url` (for tools that are given the partition path, e.g. `leasebeat journal
    /// --partition`). `dir`'s parent must exist.
    pub fn open_partition(dir: &Path, base_url: &str) -> Result<Journal, JournalError> {
        let parent = match dir.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let name = dir.file_name().ok_or_else(|| {
            JournalError::new(
                JournalErrorKind::NotADirectory,
                Some(dir),
                "a partition path must end in a directory name".into(),
            )
        })?;
        let parent_fd = rustix::fs::openat(
            rustix::fs::CWD,
            parent,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| JournalError::io("open journal directory", parent, errno(e)))?;
        Self::open_in(&parent_fd, Path::new(name), dir.to_path_buf(), base_url)
    }

    fn open_in(
        parent: &OwnedFd,
        name: &Path,
        dir: PathBuf,
        base_url: &str,
    ) -> Result<Journal, JournalError> {
        match rustix::fs::mkdirat(parent, name, Mode::from_raw_mode(DIR_MODE)) {
            Ok(()) | Err(Errno::EXIST) => {}
            Err(e) => {
                return Err(JournalError::io(
                    "create partition directory",
                    &dir,
                    errno(e),
                ));
            }
        }
        let fd = open_dir_nofollow(parent, name, &dir)?;
        // Ours alone (J-3); best effort, as the SDKs (a foreign owner's directory stays).
        let _ = rustix::fs::fchmod(&fd, Mode::from_raw_mode(DIR_MODE));
        Ok(Journal {
            inner: Arc::new(Inner {
                dir,
                fd,
                base_url: base_url.to_owned(),
                claims: Mutex::new(HashMap::new()),
            }),
        })
    }

    /// The partition directory.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// The server this journal's replay is for.
    pub fn base_url(&self) -> &str {
        &self.inner.base_url
    }

    fn path(&self, name: &str) -> PathBuf {
        self.inner.dir.join(name)
    }

    /// Writes `record` durably (J-1): a unique temporary file (0600, `O_EXCL`,
    /// `O_NOFOLLOW`), fsync'd, renamed over `v2-<sha256>.json`, then the directory
    /// fsync'd. Any failure leaves the previous record intact and the temporary file
    /// removed. One fsync of the record and one of the directory per call.
    ///
    /// Errors: [`JournalErrorKind::InvalidRecord`] (nothing touched), `NoSpace`,
    /// `NotWritable`, `Io`.
    pub fn write(&self, record: &JournalRecord) -> Result<(), JournalError> {
        let mut results = self.write_batch(std::slice::from_ref(record));
        results.pop().unwrap_or(Ok(()))
    }

    /// Group commit: writes every record as [`Journal::write`] does, in phases (all
    /// temporary files written, each fsync'd, all renamed, then the directory fsync'd
    /// once), so the file system commits them together. Still one fsync per record (J-1),
    /// and one directory fsync per batch instead of per record. One result per record, in
    /// order; a record that fails leaves its previous version intact and does not stop the
    /// others. A record's write is acknowledged only when the directory fsync succeeded.
    /// The same reservation id twice in one batch: the later record wins.
    pub fn write_batch(&self, records: &[JournalRecord]) -> Vec<Result<(), JournalError>> {
        // 1-2. Each record to its own temporary file, written and fsync'd (J-1: the record's
        // one fsync), from up to FSYNC_THREADS threads at once: a file system's journal
        // commits concurrent fsyncs together, sequential ones one by one.
        let staged: Vec<Result<Pending, JournalError>> = if records.len() <= 1 {
            records.iter().map(|r| self.stage(r)).collect()
        } else {
            let per = records.len().div_ceil(FSYNC_THREADS);
            std::thread::scope(|s| {
                let handles: Vec<_> = records
                    .chunks(per)
                    .map(|chunk| {
                        s.spawn(move || chunk.iter().map(|r| self.stage(r)).collect::<Vec<_>>())
                    })
                    .collect();
                handles
                    .into_iter()
                    .zip(records.chunks(per))
                    .flat_map(|(h, chunk)| {
                        h.join().unwrap_or_else(|_| {
                            chunk
                                .iter()
                                .map(|_| {
                                    Err(JournalError::new(
                                        JournalErrorKind::Io,
                                        Some(self.dir()),
                                        "a journal write thread panicked".into(),
                                    ))
                                })
                                .collect()
                        })
                    })
                    .collect()
            })
        };
        let mut results: Vec<Result<(), JournalError>> = Vec::with_capacity(records.len());
        let mut pending: Vec<Option<Pending>> = Vec::with_capacity(records.len());
        for st in staged {
            match st {
                Ok(p) => {
                    pending.push(Some(p));
                    results.push(Ok(()));
                }
                Err(e) => {
                    pending.push(None);
                    results.push(Err(e));
                }
            }
        }
        // 3. Renamed over the records.
        let mut renamed = false;
        for (slot, result) in pending.iter_mut().zip(results.iter_mut()) {
            let Some(p) = slot else { continue };
            match rustix::fs::renameat(
                &self.inner.fd,
                p.tmp.as_str(),
                &self.inner.fd,
                p.name.as_str(),
            ) {
                Ok(()) => renamed = true,
                Err(e) => {
                    *result = Err(JournalError::io(
                        "rename record",
                        &self.path(&p.name),
                        errno(e),
                    ));
                    self.discard_tmp(p);
                    *slot = None;
                }
            }
        }
        // 4. The directory, once.
        if renamed {
            if let Err(e) = rustix::fs::fsync(&self.inner.fd) {
                for (slot, result) in pending.iter().zip(results.iter_mut()) {
                    if slot.is_some() {
                        *result = Err(JournalError::io(
                            "fsync journal directory",
                            self.dir(),
                            io::Error::from_raw_os_error(e.raw_os_error()),
                        ));
                    }
                }
            }
        }
        results
    }

    /// One record's temporary file: created (0600, `O_EXCL`, `O_NOFOLLOW`), written,
    /// fsync'd. On failure it is removed again.
    fn stage(&self, record: &JournalRecord) -> Result<Pending, JournalError> {
        let text = record
            .to_json()
            .map_err(|m| JournalError::new(JournalErrorKind::InvalidRecord, Some(self.dir()), m))?;
        let name = record_file_name(&record.reservation_id);
        let tmp = format!(
            "{name}.{}.{:08x}.tmp",
            std::process::id(),
            uuid::Uuid::new_v4().as_u128() as u32
        );
        let fd = rustix::fs::openat(
            &self.inner.fd,
            tmp.as_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(FILE_MODE),
        )
        .map_err(|e| JournalError::io("create temporary record", &self.path(&tmp), errno(e)))?;
        let mut file = File::from(fd);
        let p = Pending { name, tmp };
        let done = file
            .write_all(text.as_bytes())
            .map_err(|e| JournalError::io("write record", &self.path(&p.tmp), e))
            .and_then(|()| {
                let _ = rustix::fs::fchmod(&file, Mode::from_raw_mode(FILE_MODE));
                file.sync_all()
                    .map_err(|e| JournalError::io("fsync record", &self.path(&p.tmp), e))
            });
        drop(file);
        match done {
            Ok(()) => Ok(p),
            Err(e) => {
                self.discard_tmp(&p);
                Err(e)
            }
        }
    }

    fn discard_tmp(&self, p: &Pending) {
        let _ = rustix::fs::unlinkat(&self.inner.fd, p.tmp.as_str(), AtFlags::empty());
    }

    /// Removes the record of `reservation_id` (J-5: call only after ST-2 success or an ST-7
    /// rejection), and its legacy-named file only if that holds exactly this id (J-8).
    /// Returns whether a file was removed; a missing record is not an error.
    pub fn remove(&self, reservation_id: &str) -> Result<bool, JournalError> {
        let name = record_file_name(reservation_id);
        let mut removed =
            match rustix::fs::unlinkat(&self.inner.fd, name.as_str(), AtFlags::empty()) {
                Ok(()) => true,
                Err(Errno::NOENT) => false,
                Err(e) => {
                    return Err(JournalError::io(
                        "remove record",
                        &self.path(&name),
                        errno(e),
                    ));
                }
            };
        let legacy = legacy_file_name(reservation_id);
        if let Ok(Some(bytes)) = self.read_file(&legacy) {
            if JournalRecord::from_json(&bytes).is_ok_and(|r| r.reservation_id == reservation_id) {
                match rustix::fs::unlinkat(&self.inner.fd, legacy.as_str(), AtFlags::empty()) {
                    Ok(()) => removed = true,
                    Err(Errno::NOENT) => {}
                    Err(e) => {
                        return Err(JournalError::io(
                            "remove legacy record",
                            &self.path(&legacy),
                            errno(e),
                        ));
                    }
                }
            }
        }
        Ok(removed)
    }

    /// Loads the record of `reservation_id`, or `None`.
    ///
    /// A record that does not parse or validate is quarantined and reported as
    /// [`JournalErrorKind::Corrupt`] (J-4). A record under the id's name that holds another
    /// id is [`JournalErrorKind::Misplaced`] (left alone). Without a `v2-` record, a file
    /// under the id's legacy name is migrated to the `v2-` name and returned only if its
    /// stored id equals `reservation_id` exactly; otherwise it is left untouched (J-8).
    pub fn load(&self, reservation_id: &str) -> Result<Option<JournalRecord>, JournalError> {
        let name = record_file_name(reservation_id);
        if let Some(bytes) = self.read_file(&name)? {
            return match JournalRecord::from_json(&bytes) {
                Ok(r) if r.reservation_id == reservation_id => Ok(Some(r)),
                Ok(r) => Err(JournalError::new(
                    JournalErrorKind::Misplaced,
                    Some(&self.path(&name)),
                    format!(
                        "the record holds reservation id {:?}, not the one asked for",
                        r.reservation_id
                    ),
                )),
                Err(reason) => {
                    let moved = self.quarantine_file(&name).ok();
                    Err(JournalError::corrupt(
                        &self.path(&name),
                        reason,
                        moved.map(|m| self.path(&m)),
                    ))
                }
            };
        }
        let legacy = legacy_file_name(reservation_id);
        let Some(bytes) = self.read_file(&legacy).or_else(|e| match e.kind() {
            // A legacy name that cannot exist (longer than NAME_MAX) is no record.
            JournalErrorKind::Io => Ok(None),
            _ => Err(e),
        })?
        else {
            return Ok(None);
        };
        match JournalRecord::from_json(&bytes) {
            Ok(r) if r.reservation_id == reservation_id => {
                match self.rename_noreplace(&legacy, &name) {
                    Ok(true) => {
                        let _ = rustix::fs::fsync(&self.inner.fd);
                        Ok(Some(r))
                    }
                    // The v2 record appeared meanwhile: it is the one to settle.
                    Ok(false) => self.load(reservation_id),
                    Err(e) => Err(JournalError::io(
                        "migrate legacy record",
                        &self.path(&legacy),
                        e,
                    )),
                }
            }
            // Someone else's (a colliding legacy name) or unreadable: never touched here.
            _ => Ok(None),
        }
    }

    /// Renames the record of `reservation_id` aside (J-4) and returns where it went, `None`
    /// if there is no record. For a record this journal reads but the settlement refuses
    /// (e.g. `SettlementRecord::from_json` is stricter than journal.py: id length, key):
    /// it must not replay, and is never deleted.
    pub fn quarantine(&self, reservation_id: &str) -> Result<Option<PathBuf>, JournalError> {
        let name = record_file_name(reservation_id);
        match self.quarantine_file(&name) {
            Ok(to) => Ok(Some(self.path(&to))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(JournalError::io("quarantine record", &self.path(&name), e)),
        }
    }

    /// Takes the exclusive claim on `reservation_id` (J-6): `Some` if this caller now holds
    /// it, `None` if another holder (this or another process) has it. Released when the
    /// [`Claim`] is dropped, and by the OS when the process exits or is killed.
    pub fn claim(&self, reservation_id: &str) -> Result<Option<Claim>, JournalError> {
        Ok(self.lock_claim(reservation_id)?.map(|held| Claim {
            journal: self.clone(),
            name: held.name,
            reservation_id: reservation_id.to_owned(),
            _fd: held.fd,
        }))
    }

    fn lock_claim(&self, reservation_id: &str) -> Result<Option<HeldClaim>, JournalError> {
        let name = claim_file_name(reservation_id);
        for _ in 0..16 {
            let fd = rustix::fs::openat(
                &self.inner.fd,
                name.as_str(),
                OFlags::RDWR | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::from_raw_mode(FILE_MODE),
            )
            .map_err(|e| JournalError::io("open claim file", &self.path(&name), errno(e)))?;
            match rustix::fs::flock(&fd, FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => {}
                Err(Errno::WOULDBLOCK) => return Ok(None),
                Err(e) => {
                    return Err(JournalError::io(
                        "lock claim file",
                        &self.path(&name),
                        errno(e),
                    ));
                }
            }
            // The previous holder unlinks the file before it unlocks: if the name no longer
            // leads to the inode locked, that lock is stale; take a fresh file.
            let held = rustix::fs::fstat(&fd)
                .map_err(|e| JournalError::io("stat claim file", &self.path(&name), errno(e)))?;
            match rustix::fs::statat(&self.inner.fd, name.as_str(), AtFlags::SYMLINK_NOFOLLOW) {
                Ok(now) if now.st_ino == held.st_ino && now.st_dev == held.st_dev => {
                    return Ok(Some(HeldClaim { name, fd }));
                }
                Ok(_) | Err(Errno::NOENT) => continue,
                Err(e) => {
                    return Err(JournalError::io(
                        "stat claim file",
                        &self.path(&name),
                        errno(e),
                    ));
                }
            }
        }
        Ok(None)
    }

    /// Lists the partition for replay (J-6), doing on the way what journal.py's
    /// `load_pending` does: temporary files older than an hour are removed; a record that
    /// does not parse or validate is renamed aside (J-4); a legacy-named record whose
    /// stored id's legacy name is its file name is migrated to its `v2-` name, or removed
    /// when a `v2-` record of exactly that id already exists (J-8). Symbolic links,
    /// non-regular files and records under a name that is neither their `v2-` nor their
    /// legacy name are skipped and reported, never followed, moved or replayed.
    pub fn scan(&self) -> Result<Scan, JournalError> {
        let mut names = self.names()?;
        names.sort();
        let mut scan = Scan::default();
        let now = SystemTime::now();
        for name in names.iter().filter(|n| n.ends_with(".tmp")) {
            if let Ok(st) =
                rustix::fs::statat(&self.inner.fd, name.as_str(), AtFlags::SYMLINK_NOFOLLOW)
            {
                let mtime =
                    UNIX_EPOCH + Duration::from_secs(u64::try_from(st.st_mtime).unwrap_or(0));
                let stale = now
                    .duration_since(mtime)
                    .is_ok_and(|age| age > STALE_TEMP_AGE);
                if FileType::from_raw_mode(st.st_mode) == FileType::RegularFile
                    && stale
                    && rustix::fs::unlinkat(&self.inner.fd, name.as_str(), AtFlags::empty()).is_ok()
                {
                    scan.reaped_temp_files += 1;
                }
            }
        }
        let mut seen: std::collections::HashSet<String> = std::collections::HashSet::new();
        for name in names.iter().filter(|n| n.ends_with(SUFFIX)) {
            let skip = |scan: &mut Scan, reason: &str| {
                scan.skipped.push(Skipped {
                    file: name.clone(),
                    reason: reason.to_owned(),
                });
            };
            match rustix::fs::statat(&self.inner.fd, name.as_str(), AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => match FileType::from_raw_mode(st.st_mode) {
                    FileType::RegularFile => {}
                    FileType::Symlink => {
                        skip(&mut scan, "symbolic link (not followed)");
                        continue;
                    }
                    _ => {
                        skip(&mut scan, "not a regular file");
                        continue;
                    }
                },
                Err(Errno::NOENT) => continue,
                Err(e) => {
                    skip(&mut scan, &format!("stat failed: {}", errno(e)));
                    continue;
                }
            }
            let bytes = match self.read_file(name) {
                Ok(Some(b)) => b,
                Ok(None) => continue,
                Err(e) => {
                    skip(&mut scan, &format!("read failed: {e}"));
                    continue;
                }
            };
            let record = match JournalRecord::from_json(&bytes) {
                Ok(r) => r,
                Err(reason) => {
                    let moved_to = self.quarantine_file(name).ok();
                    scan.quarantined.push(Quarantined {
                        file: name.clone(),
                        moved_to,
                        reason,
                    });
                    continue;
                }
            };
            let standard = record_file_name(&record.reservation_id);
            if *name != standard {
                if *name != legacy_file_name(&record.reservation_id) {
                    skip(
                        &mut scan,
                        "misplaced: the file name is neither the v2 nor the legacy name of \
                         the reservation id it holds (left alone)",
                    );
                    continue;
                }
                match self.migrate(name, &standard, &record.reservation_id) {
                    Ok(Migration::Renamed) => scan.migrated.push(Migrated {
                        from: name.clone(),
                        to: standard.clone(),
                        reservation_id: record.reservation_id.clone(),
                        duplicate_removed: false,
                    }),
                    Ok(Migration::Duplicate) => {
                        scan.migrated.push(Migrated {
                            from: name.clone(),
                            to: standard.clone(),
                            reservation_id: record.reservation_id.clone(),
                            duplicate_removed: true,
                        });
                        continue;
                    }
                    Ok(Migration::Blocked) => {
                        skip(
                            &mut scan,
                            "legacy record: its v2 name holds another or an unreadable record \
                             (left alone)",
                        );
                        continue;
                    }
                    Err(e) => {
                        skip(&mut scan, &format!("legacy record: migration failed: {e}"));
                        continue;
                    }
                }
            }
            if !seen.insert(record.reservation_id.clone()) {
                continue;
            }
            if record.base_url == self.inner.base_url {
                scan.records.push(record);
            } else {
                scan.foreign.push(record);
            }
        }
        Ok(scan)
    }

    fn migrate(&self, from: &str, to: &str, id: &str) -> io::Result<Migration> {
        if self.rename_noreplace(from, to)? {
            let _ = rustix::fs::fsync(&self.inner.fd);
            return Ok(Migration::Renamed);
        }
        match self.read_file(to) {
            Ok(Some(b)) if JournalRecord::from_json(&b).is_ok_and(|r| r.reservation_id == id) => {
                // J-8: the legacy file holds exactly this id and the v2 record exists.
                match rustix::fs::unlinkat(&self.inner.fd, from, AtFlags::empty()) {
                    Ok(()) | Err(Errno::NOENT) => Ok(Migration::Duplicate),
                    Err(e) => Err(errno(e)),
                }
            }
            _ => Ok(Migration::Blocked),
        }
    }

    /// Every file name in the partition (non-UTF-8 names are not the journal's: skipped).
    fn names(&self) -> Result<Vec<String>, JournalError> {
        let dir = rustix::fs::Dir::read_from(&self.inner.fd)
            .map_err(|e| JournalError::io("read journal directory", self.dir(), errno(e)))?;
        let mut names = Vec::new();
        for entry in dir {
            let entry = entry
                .map_err(|e| JournalError::io("read journal directory", self.dir(), errno(e)))?;
            let n: &CStr = entry.file_name();
            if let Ok(s) = n.to_str() {
                if s != "." && s != ".." {
                    names.push(s.to_owned());
                }
            }
        }
        Ok(names)
    }

    /// The bytes of the regular file `name`, `None` if absent. A symbolic link is
    /// [`JournalErrorKind::Symlink`]; a name too long for the file system is `Io`.
    fn read_file(&self, name: &str) -> Result<Option<Vec<u8>>, JournalError> {
        let fd = match rustix::fs::openat(
            &self.inner.fd,
            name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(None),
            Err(Errno::LOOP) => {
                return Err(JournalError::new(
                    JournalErrorKind::Symlink,
                    Some(&self.path(name)),
                    "a record is a symbolic link (not followed)".into(),
                ));
            }
            Err(e) => return Err(JournalError::io("open record", &self.path(name), errno(e))),
        };
        let st = rustix::fs::fstat(&fd)
            .map_err(|e| JournalError::io("stat record", &self.path(name), errno(e)))?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return Err(JournalError::new(
                JournalErrorKind::Io,
                Some(&self.path(name)),
                "not a regular file".into(),
            ));
        }
        let mut bytes = Vec::with_capacity(usize::try_from(st.st_size).unwrap_or(0));
        File::from(fd)
            .read_to_end(&mut bytes)
            .map_err(|e| JournalError::io("read record", &self.path(name), e))?;
        Ok(Some(bytes))
    }

    /// Renames `from` to `to` unless `to` exists: `Ok(false)` then.
    fn rename_noreplace(&self, from: &str, to: &str) -> io::Result<bool> {
        #[cfg(target_os = "linux")]
        {
            match rustix::fs::renameat_with(
                &self.inner.fd,
                from,
                &self.inner.fd,
                to,
                rustix::fs::RenameFlags::NOREPLACE,
            ) {
                Ok(()) => return Ok(true),
                Err(Errno::EXIST) => return Ok(false),
                // A file system without RENAME_NOREPLACE: check, then rename.
                Err(Errno::INVAL | Errno::NOSYS) => {}
                Err(e) => return Err(errno(e)),
            }
        }
        match rustix::fs::statat(&self.inner.fd, to, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(_) => Ok(false),
            Err(Errno::NOENT) => rustix::fs::renameat(&self.inner.fd, from, &self.inner.fd, to)
                .map(|()| true)
                .map_err(errno),
            Err(e) => Err(errno(e)),
        }
    }

    /// J-4: renames `name` (`<stem>.json`) to `<stem>.corrupt` (journal.py's name), or
    /// `<stem>.<n>.corrupt` if that is taken: an earlier quarantined file is never
    /// replaced. Returns the new name.
    fn quarantine_file(&self, name: &str) -> io::Result<String> {
        let stem = name.strip_suffix(SUFFIX).unwrap_or(name);
        for n in 0..1000u32 {
            let to = if n == 0 {
                format!("{stem}.corrupt")
            } else {
                format!("{stem}.{n}.corrupt")
            };
            if self.rename_noreplace(name, &to)? {
                let _ = rustix::fs::fsync(&self.inner.fd);
                return Ok(to);
            }
        }
        Err(io::Error::other("no free quarantine name"))
    }
}

/// A record of a batch between its phases.
struct Pending {
    name: String,
    tmp: String,
}

enum Migration {
    Renamed,
    Duplicate,
    Blocked,
}

/// An exclusive claim on one reservation's record (J-6), from [`Journal::claim`]. Dropping
/// it releases the claim (its lock file is removed first, then unlocked); a process that
/// exits or is killed releases it too.
pub struct Claim {
    journal: Journal,
    name: String,
    reservation_id: String,
    _fd: OwnedFd,
}

impl std::fmt::Debug for Claim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Claim")
            .field("reservation_id", &self.reservation_id)
            .finish()
    }
}

impl Claim {
    /// The reservation id claimed.
    pub fn reservation_id(&self) -> &str {
        &self.reservation_id
    }

    /// Releases the claim now (same as dropping it).
    pub fn release(self) {}
}

impl Drop for Claim {
    fn drop(&mut self) {
        let _ = rustix::fs::unlinkat(&self.journal.inner.fd, self.name.as_str(), AtFlags::empty());
    }
}

/// What [`Journal::scan`] found and did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Scan {
    /// Valid records of this journal's server, in file name order, one per reservation id.
    pub records: Vec<JournalRecord>,
    /// Valid records of another server (`base_url` differs): not replayed, left alone.
    pub foreign: Vec<JournalRecord>,
    /// Records renamed aside (J-4).
    pub quarantined: Vec<Quarantined>,
    /// Legacy-named records migrated (J-8).
    pub migrated: Vec<Migrated>,
    /// `.json` files left alone, with why.
    pub skipped: Vec<Skipped>,
    /// Stale temporary files removed.
    pub reaped_temp_files: usize,
}

/// A record renamed aside (J-4).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Quarantined {
    /// Its file name.
    pub file: String,
    /// Its new name, `None` if the rename failed.
    pub moved_to: Option<String>,
    /// Why it was refused.
    pub reason: String,
}

/// A legacy-named record migrated (J-8).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Migrated {
    /// The legacy file name.
    pub from: String,
    /// The `v2-` name.
    pub to: String,
    /// The stored (and matching) reservation id.
    pub reservation_id: String,
    /// The `v2-` record of that exact id already existed: the legacy file was removed.
    pub duplicate_removed: bool,
}

/// A `.json` file left alone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skipped {
    /// Its file name.
    pub file: String,
    /// Why.
    pub reason: String,
}

/// A bounded flush (J-7): the caller's deadline for draining settlements at shutdown.
/// The journal is synchronous; a runner waits on its in-flight settlements for at most
/// [`FlushDeadline::remaining`] and leaves whatever is unresolved on disk, where the next
/// [`Journal::scan`] finds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlushDeadline {
    deadline: Instant,
}

impl FlushDeadline {
    /// A deadline `timeout` after `now`.
    pub fn after(now: Instant, timeout: Duration) -> FlushDeadline {
        FlushDeadline {
            deadline: now
                .checked_add(timeout)
                .or_else(|| now.checked_add(Duration::from_secs(1 << 32)))
                .unwrap_or(now),
        }
    }

    /// The instant it ends.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// How long a wait may still last at `now` (zero once over).
    pub fn remaining(&self, now: Instant) -> Duration {
        self.deadline.saturating_duration_since(now)
    }

    /// Whether the flush is over at `now`.
    pub fn is_over(&self, now: Instant) -> bool {
        now >= self.deadline
    }
}
