//! `leasebeat.Journal`: the settlement journal (J-1..J-8) of the core
//! (`leasebeat::journal`, feature `journal`), and its error classes.
//!
//! Thin: record layout, file names, atomic writes, partitions, quarantine,
//! claims and legacy migration are the core's. This module converts
//! arguments, releases the GIL around file I/O and maps `JournalError` to a
//! `JournalError` exception subclass per kind.
//!
//! `persist`, `finish` and `replay` are the settlement glue (a settlement's
//! persist action written and acknowledged, J-5 applied when it is done, the
//! partition replayed under claims); see `Journal` below.

use std::path::PathBuf;

use leasebeat::journal::{self, Journal, JournalError, JournalErrorKind, JournalRecord};
use leasebeat::{ErrorKind, Now};
use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyString, PyTuple, PyType};

use crate::convert::{to_bytes, to_u64};
use crate::errors::{base_class, core_error, new_class, raise_kind, type_error};
use crate::settlement::{PySettlement, PySettlementDecision, policy};

// ------------------------------------------------------------------ errors

const KINDS: [JournalErrorKind; 10] = JournalErrorKind::ALL;

fn describe(kind: JournalErrorKind) -> (&'static str, &'static str) {
    // Exhaustive on purpose: a new core kind must be mapped here.
    match kind {
        JournalErrorKind::NotWritable => (
            "JournalNotWritable",
            "The journal directory (or a record in it) cannot be written: permission\n\
             denied, a read-only file system.",
        ),
        JournalErrorKind::Symlink => (
            "JournalSymlink",
            "A symbolic link where the journal expects its directory or a record\n\
             (J-3: never followed).",
        ),
        JournalErrorKind::NoSpace => (
            "JournalNoSpace",
            "The file system is full (or the quota is exhausted); the previous record,\n\
             if any, is intact.",
        ),
        JournalErrorKind::NotADirectory => (
            "JournalNotADirectory",
            "The journal path (or the partition in it) exists and is not a directory.",
        ),
        JournalErrorKind::NoDirectory => (
            "JournalNoDirectory",
            "No journal directory: none given, CYCLES_JOURNAL_DIR and HOME unset.",
        ),
        JournalErrorKind::InvalidRecord => (
            "JournalInvalidRecord",
            "A record that would not read back (empty reservation id, a missing or\n\
             non-object body).",
        ),
        JournalErrorKind::Corrupt => (
            "JournalCorrupt",
            "A stored record did not parse or validate (J-4): it was renamed aside\n\
             (``quarantined_to``).",
        ),
        JournalErrorKind::Misplaced => (
            "JournalMisplaced",
            "The file under the id's name holds another reservation id; left alone.",
        ),
        JournalErrorKind::NotFinished => (
            "JournalNotFinished",
            "finish() of a settlement that has not ended: nothing was touched.",
        ),
        JournalErrorKind::Io => ("JournalIOError", "Any other I/O error of the journal."),
    }
}

struct Classes {
    base: Py<PyType>,
    kinds: Vec<Py<PyType>>,
}

static CLASSES: PyOnceLock<Classes> = PyOnceLock::new();

fn classes(py: Python<'_>) -> PyResult<&'static Classes> {
    CLASSES.get_or_try_init(py, || {
        let lease_error = base_class(py)?;
        let os_error = py.get_type::<PyOSError>();
        let base = new_class(
            py,
            "JournalError",
            PyTuple::new(py, [lease_error.into_any(), os_error.into_any()])?,
            "A failure of the settlement journal (a LeaseError and an OSError).\n\n\
             ``kind`` is the core's stable kind (\"not_writable\", \"symlink\",\n\
             \"no_space\", \"not_a_directory\", \"no_directory\", \"invalid_record\",\n\
             \"corrupt\", \"misplaced\", \"not_finished\", \"io\"); one subclass per kind. Instances carry\n\
             ``path`` (the file or directory concerned, or None), ``message`` and\n\
             ``quarantined_to`` (for ``corrupt``: where the record went, or None).",
            &[("code", "journal"), ("kind", "")],
        )?;
        let mut kinds = Vec::new();
        for kind in KINDS {
            let (name, doc) = describe(kind);
            let doc = format!("{doc}\n\nkind = {:?}", kind.as_str());
            kinds.push(new_class(
                py,
                name,
                PyTuple::new(py, [base.bind(py).clone()])?,
                &doc,
                &[("code", "journal"), ("kind", kind.as_str())],
            )?);
        }
        Ok(Classes { base, kinds })
    })
}

/// Adds `JournalError` and its subclasses to the module.
pub fn register_errors(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    let c = classes(py)?;
    m.add("JournalError", c.base.bind(py))?;
    for (kind, cls) in KINDS.iter().zip(&c.kinds) {
        m.add(describe(*kind).0, cls.bind(py))?;
    }
    Ok(())
}

fn path_str(p: Option<&std::path::Path>) -> Option<String> {
    p.map(|p| p.to_string_lossy().into_owned())
}

/// A journal failure as the binding reports it: a core `JournalError`, or
/// a refusal of the binding's own (a record text that does not read back, a
/// settlement that is not finished), reported with the same kinds.
pub struct Fail {
    kind: JournalErrorKind,
    text: String,
    message: String,
    path: Option<String>,
    quarantined_to: Option<String>,
}

impl From<JournalError> for Fail {
    fn from(e: JournalError) -> Fail {
        Fail {
            kind: e.kind(),
            text: e.to_string(),
            message: e.message().to_owned(),
            path: path_str(e.path()),
            quarantined_to: path_str(e.quarantined_to()),
        }
    }
}

fn invalid_record(message: &str) -> Fail {
    Fail {
        kind: JournalErrorKind::InvalidRecord,
        text: format!("journal invalid_record: {message}"),
        message: message.to_owned(),
        path: None,
        quarantined_to: None,
    }
}

/// The exception for a journal failure.
pub fn journal_error(py: Python<'_>, e: Fail) -> PyErr {
    let build = || -> PyResult<PyErr> {
        let c = classes(py)?;
        let i = KINDS
            .iter()
            .position(|k| *k == e.kind)
            .unwrap_or(KINDS.len() - 1);
        let cls = c.kinds[i].bind(py);
        let err = cls.call1((e.text.clone(),))?;
        err.setattr("path", e.path.clone())?;
        err.setattr("message", e.message.clone())?;
        err.setattr("quarantined_to", e.quarantined_to.clone())?;
        Ok(PyErr::from_value(err))
    };
    build().unwrap_or_else(|err| err)
}

// ------------------------------------------------------------------ values

/// A record renamed aside (J-4) by a scan or a replay.
#[pyclass(frozen, get_all, module = "leasebeat", name = "QuarantinedRecord")]
pub struct PyQuarantined {
    /// Its file name.
    file: String,
    /// Its new name, None if the rename failed.
    moved_to: Option<String>,
    /// Why it was refused.
    reason: String,
}

#[pymethods]
impl PyQuarantined {
    fn __repr__(&self) -> String {
        format!(
            "QuarantinedRecord(file={:?}, moved_to={:?}, reason={:?})",
            self.file, self.moved_to, self.reason
        )
    }
}

/// A legacy-named record migrated to its ``v2-`` name (J-8).
#[pyclass(frozen, get_all, module = "leasebeat", name = "MigratedRecord")]
pub struct PyMigrated {
    /// The legacy file name.
    from_file: String,
    /// The ``v2-`` name.
    to_file: String,
    /// The stored (and matching) reservation id.
    reservation_id: String,
    /// The ``v2-`` record of that id existed: the legacy file was removed.
    duplicate_removed: bool,
}

#[pymethods]
impl PyMigrated {
    fn __repr__(&self) -> String {
        format!(
            "MigratedRecord(from_file={:?}, to_file={:?}, reservation_id={:?})",
            self.from_file, self.to_file, self.reservation_id
        )
    }
}

/// A ``.json`` file a scan left alone, with why.
#[pyclass(frozen, get_all, module = "leasebeat", name = "SkippedFile")]
pub struct PySkipped {
    /// Its file name.
    file: String,
    /// Why.
    reason: String,
}

#[pymethods]
impl PySkipped {
    fn __repr__(&self) -> String {
        format!(
            "SkippedFile(file={:?}, reason={:?})",
            self.file, self.reason
        )
    }
}

/// What ``Journal.scan()`` found and did.
#[pyclass(frozen, get_all, module = "leasebeat", name = "JournalScan")]
pub struct PyScan {
    /// Valid records of this journal's server: their record texts.
    records: Vec<String>,
    /// Valid records of another server (not replayed, left alone): their texts.
    foreign: Vec<String>,
    /// Records renamed aside (J-4).
    quarantined: Vec<Py<PyQuarantined>>,
    /// Legacy-named records migrated (J-8).
    migrated: Vec<Py<PyMigrated>>,
    /// ``.json`` files left alone.
    skipped: Vec<Py<PySkipped>>,
    /// Stale temporary files removed.
    reaped_temp_files: usize,
}

/// What ``Journal.replay()`` returns: the settlements to drive (this journal
/// holds each one's claim until ``finish`` or ``release_claim``), the ids
/// another worker or process holds (``busy``), and what the scan did.
#[pyclass(frozen, get_all, module = "leasebeat", name = "Replay")]
pub struct PyReplay {
    /// One Settlement per record of this server, rebuilt from the record alone.
    settlements: Vec<Py<PySettlement>>,
    /// Reservation ids whose record another holder has claimed.
    busy: Vec<String>,
    /// Records quarantined by the scan, or refused by the settlement.
    quarantined: Vec<Py<PyQuarantined>>,
    /// Legacy-named records migrated.
    migrated: Vec<Py<PyMigrated>>,
    /// Files left alone.
    skipped: Vec<Py<PySkipped>>,
    /// Records of another server (not replayed): their texts.
    foreign: Vec<String>,
}

fn record_text(r: &JournalRecord) -> String {
    r.to_json().unwrap_or_default()
}

struct ScanParts {
    quarantined: Vec<Py<PyQuarantined>>,
    migrated: Vec<Py<PyMigrated>>,
    skipped: Vec<Py<PySkipped>>,
}

fn scan_parts(py: Python<'_>, scan: &journal::Scan) -> PyResult<ScanParts> {
    let quarantined = scan
        .quarantined
        .iter()
        .map(|q| {
            Py::new(
                py,
                PyQuarantined {
                    file: q.file.clone(),
                    moved_to: q.moved_to.clone(),
                    reason: q.reason.clone(),
                },
            )
        })
        .collect::<PyResult<Vec<_>>>()?;
    let migrated = scan
        .migrated
        .iter()
        .map(|m| {
            Py::new(
                py,
                PyMigrated {
                    from_file: m.from.clone(),
                    to_file: m.to.clone(),
                    reservation_id: m.reservation_id.clone(),
                    duplicate_removed: m.duplicate_removed,
                },
            )
        })
        .collect::<PyResult<Vec<_>>>()?;
    let skipped = scan
        .skipped
        .iter()
        .map(|s| {
            Py::new(
                py,
                PySkipped {
                    file: s.file.clone(),
                    reason: s.reason.clone(),
                },
            )
        })
        .collect::<PyResult<Vec<_>>>()?;
    Ok(ScanParts {
        quarantined,
        migrated,
        skipped,
    })
}

// ------------------------------------------------------------------ Journal

fn str_arg(v: &Bound<'_, PyAny>, what: &str) -> PyResult<String> {
    Ok(v.cast::<PyString>()
        .map_err(|_| type_error(format!("{what} must be a str")))?
        .to_str()?
        .to_owned())
}

fn path_arg(v: &Bound<'_, PyAny>, what: &str) -> PyResult<PathBuf> {
    if v.is_instance_of::<PyString>() {
        return Ok(PathBuf::from(str_arg(v, what)?));
    }
    if v.is_instance_of::<PyBytes>() {
        use std::os::unix::ffi::OsStrExt;
        let b = to_bytes(v, what)?;
        return Ok(PathBuf::from(std::ffi::OsStr::from_bytes(&b)));
    }
    // os.PathLike
    let fspath = v
        .getattr("__fspath__")
        .map_err(|_| type_error(format!("{what} must be a str, bytes or os.PathLike")))?
        .call0()?;
    if fspath.is_instance_of::<PyString>() || fspath.is_instance_of::<PyBytes>() {
        path_arg(&fspath, what)
    } else {
        Err(type_error(format!(
            "{what}.__fspath__() must return str or bytes"
        )))
    }
}

/// The settlement journal: one partition (server + principal) of durable
/// settlement records (J-1..J-8), interchangeable with runcycles Python
/// 0.5.3's ``journal.py``.
///
/// ``Journal.open(base_url, api_key, dir=None, tenant=None)`` opens (creating
/// it 0700) the partition of ``base_url`` and the principal (``tenant`` when
/// not blank, else ``api_key``; the key itself is never stored) under ``dir``
/// (default: ``$CYCLES_JOURNAL_DIR``, else ``~/.runcycles/commit-journal``).
/// ``Journal.open_partition(dir, base_url)`` opens a partition directory
/// itself.
///
/// Driving a settlement through it: while ``settlement.poll_action().kind``
/// is ``persist``, call ``persist(settlement, now_ns)`` (writes the record
/// durably, takes this journal's claim on the reservation and acknowledges
/// it; a failed write is acknowledged as failed, SP-3: the decision warns
/// ``persist_failed``, the request still goes); when the settlement is
/// done, ``finish(settlement)`` (J-5: removes the record or keeps it, and
/// releases the claim). ``replay(now_ns, wall_ms)`` rebuilds a Settlement
/// per record of this server, under claims (J-6).
///
/// Errors are ``JournalError`` subclasses (also ``OSError``). Thread-safe;
/// every file operation releases the GIL.
#[pyclass(frozen, module = "leasebeat", name = "Journal")]
pub struct PyJournal {
    inner: Journal,
}

impl PyJournal {
    fn wrap(inner: Journal) -> PyJournal {
        PyJournal { inner }
    }
}

fn settlement_of<'a, 'py>(v: &'a Bound<'py, PyAny>) -> PyResult<&'a Bound<'py, PySettlement>> {
    v.cast::<PySettlement>()
        .map_err(|_| type_error("settlement must be a leasebeat.Settlement"))
}

#[pymethods]
impl PyJournal {
    /// Opens the partition of ``base_url`` and the principal under ``dir``
    /// (see the class). Raises JournalSymlink (``dir`` or the partition is a
    /// symbolic link), JournalNotWritable, JournalNotADirectory,
    /// JournalNoSpace, JournalNoDirectory, JournalIOError; TypeError.
    #[classmethod]
    #[pyo3(signature = (base_url, api_key, *, dir = None, tenant = None))]
    fn open(
        _cls: &Bound<'_, PyType>,
        py: Python<'_>,
        base_url: &Bound<'_, PyAny>,
        api_key: &Bound<'_, PyAny>,
        dir: Option<&Bound<'_, PyAny>>,
        tenant: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyJournal> {
        let base_url = str_arg(base_url, "base_url")?;
        let api_key = str_arg(api_key, "api_key")?;
        let dir = dir
            .filter(|d| !d.is_none())
            .map(|d| path_arg(d, "dir"))
            .transpose()?;
        let tenant = tenant
            .filter(|t| !t.is_none())
            .map(|t| str_arg(t, "tenant"))
            .transpose()?;
        let opened = py.detach(|| -> Result<Journal, JournalError> {
            let base = journal::base_dir(dir.as_deref())?;
            Journal::open(&base, &base_url, &api_key, tenant.as_deref())
        });
        opened
            .map(PyJournal::wrap)
            .map_err(|e| journal_error(py, e.into()))
    }

    /// Opens (creating) the partition directory ``dir`` itself, for records
    /// of ``base_url`` (its parent must exist).
    #[classmethod]
    fn open_partition(
        _cls: &Bound<'_, PyType>,
        py: Python<'_>,
        dir: &Bound<'_, PyAny>,
        base_url: &Bound<'_, PyAny>,
    ) -> PyResult<PyJournal> {
        let dir = path_arg(dir, "dir")?;
        let base_url = str_arg(base_url, "base_url")?;
        py.detach(|| Journal::open_partition(&dir, &base_url))
            .map(PyJournal::wrap)
            .map_err(|e| journal_error(py, e.into()))
    }

    /// The journal's base directory for ``dir`` (default: ``$CYCLES_JOURNAL_DIR``,
    /// else ``~/.runcycles/commit-journal``), as a str.
    #[staticmethod]
    #[pyo3(signature = (dir = None))]
    fn base_dir(py: Python<'_>, dir: Option<&Bound<'_, PyAny>>) -> PyResult<String> {
        let dir = dir
            .filter(|d| !d.is_none())
            .map(|d| path_arg(d, "dir"))
            .transpose()?;
        journal::base_dir(dir.as_deref())
            .map(|p| p.to_string_lossy().into_owned())
            .map_err(|e| journal_error(py, e.into()))
    }

    /// The partition name (16 hex) of ``base_url`` and the principal.
    #[staticmethod]
    #[pyo3(signature = (base_url, api_key, tenant = None))]
    fn partition_name(
        base_url: &Bound<'_, PyAny>,
        api_key: &Bound<'_, PyAny>,
        tenant: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<String> {
        let tenant = tenant
            .filter(|t| !t.is_none())
            .map(|t| str_arg(t, "tenant"))
            .transpose()?;
        Ok(journal::partition_name(
            &str_arg(base_url, "base_url")?,
            &str_arg(api_key, "api_key")?,
            tenant.as_deref(),
        ))
    }

    /// The record file name of ``reservation_id``: ``v2-<sha256 hex>.json``.
    #[staticmethod]
    fn record_file_name(reservation_id: &Bound<'_, PyAny>) -> PyResult<String> {
        Ok(journal::record_file_name(&str_arg(
            reservation_id,
            "reservation_id",
        )?))
    }

    /// The partition directory (str).
    #[getter]
    fn dir(&self) -> String {
        self.inner.dir().to_string_lossy().into_owned()
    }

    /// The server this journal's replay is for.
    #[getter]
    fn base_url(&self) -> String {
        self.inner.base_url().to_owned()
    }

    /// Persists ``settlement``'s outstanding record (its action is
    /// ``persist``): writes it durably (J-1), takes this journal's claim on
    /// the reservation (J-6), and returns ``handle_persisted(now_ns)``; when
    /// the write fails, returns ``handle_persist_failed(<the error>,
    /// now_ns)`` (warning ``persist_failed``, the message in ``detail``:
    /// SP-3, the request still goes). Raises NotOutstanding when no persist
    /// is asked for, TimeWentBackwards, Stopped, TypeError.
    fn persist(
        &self,
        py: Python<'_>,
        settlement: &Bound<'_, PyAny>,
        now_ns: &Bound<'_, PyAny>,
    ) -> PyResult<PySettlementDecision> {
        let s = settlement_of(settlement)?.get();
        let now = to_u64(now_ns, "now_ns")?;
        let result = py.detach(|| -> Result<_, (ErrorKind, String)> {
            let mut guard = s
                .lock()
                .map_err(|_| (ErrorKind::Stopped, "the settlement is unusable".to_owned()))?;
            self.inner
                .persist(&mut guard, now)
                .map_err(|e| (e.kind(), e.message().to_owned()))
        });
        result
            .map(PySettlementDecision::new)
            .map_err(|(k, m)| raise_kind(py, k, m))
    }

    /// Ends ``settlement`` in the journal once it is done (J-5): the final
    /// decision's record update is applied (``remove`` deletes the record,
    /// ``keep`` leaves it for a later replay) and this journal's claim on the
    /// reservation is released. Raises JournalNotFinished (the settlement has
    /// not ended; nothing touched), another JournalError (the removal failed;
    /// the claim is released all the same), TypeError.
    fn finish(&self, py: Python<'_>, settlement: &Bound<'_, PyAny>) -> PyResult<()> {
        let s = settlement_of(settlement)?.get();
        let result = py.detach(|| -> Result<(), Fail> {
            let guard = s
                .lock()
                .map_err(|_| invalid_record("the settlement is unusable"))?;
            self.inner.finish(&guard).map_err(Fail::from)
        });
        result.map_err(|e| journal_error(py, e))
    }

    /// Replays the partition (J-6, SP-4): ``scan()`` (quarantine, migration),
    /// then for every record of this server takes the claim (a record
    /// another worker or process holds is listed in ``busy``) and rebuilds a
    /// Settlement from it (a record the settlement refuses is quarantined and
    /// listed). Drive each settlement like a new one and call ``finish``.
    /// Retry options as for ``Settlement.from_record``.
    #[pyo3(signature = (now_ns, wall_ms, *, max_attempts = None, initial_ms = None, max_ms = None))]
    fn replay(
        &self,
        py: Python<'_>,
        now_ns: &Bound<'_, PyAny>,
        wall_ms: &Bound<'_, PyAny>,
        max_attempts: Option<&Bound<'_, PyAny>>,
        initial_ms: Option<&Bound<'_, PyAny>>,
        max_ms: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyReplay> {
        let now = Now::new(to_u64(now_ns, "now_ns")?, to_u64(wall_ms, "wall_ms")?);
        let retry = policy(py, max_attempts, initial_ms, max_ms)?;
        // A bad policy is the caller's configuration error (InvalidConfig), not the journal's.
        retry.validate().map_err(|e| core_error(py, e))?;
        let replay = py
            .detach(|| self.inner.replay(retry, now))
            .map_err(|e| journal_error(py, e.into()))?;
        let parts = scan_parts(py, &replay.scan)?;
        Ok(PyReplay {
            settlements: replay
                .settlements
                .into_iter()
                .map(|s| Py::new(py, PySettlement::from_core(s)))
                .collect::<PyResult<Vec<_>>>()?,
            busy: replay.busy,
            quarantined: parts.quarantined,
            migrated: parts.migrated,
            skipped: parts.skipped,
            foreign: replay.scan.foreign.iter().map(record_text).collect(),
        })
    }

    /// Lists the partition as a replay would (J-4 quarantine, J-8 migration,
    /// stale temporary files reaped) without claiming or settling anything.
    fn scan(&self, py: Python<'_>) -> PyResult<PyScan> {
        let scan = py
            .detach(|| self.inner.scan())
            .map_err(|e| journal_error(py, e.into()))?;
        let parts = scan_parts(py, &scan)?;
        Ok(PyScan {
            records: scan.records.iter().map(record_text).collect(),
            foreign: scan.foreign.iter().map(record_text).collect(),
            quarantined: parts.quarantined,
            migrated: parts.migrated,
            skipped: parts.skipped,
            reaped_temp_files: scan.reaped_temp_files,
        })
    }

    /// Writes a record (its JSON text, str or bytes: the layout of
    /// ``Settlement.record_json``) durably (J-1). For tools and tests; a
    /// settlement is persisted with ``persist``. Raises JournalInvalidRecord
    /// (a record that would not read back), other JournalErrors.
    fn write(&self, py: Python<'_>, record: &Bound<'_, PyAny>) -> PyResult<()> {
        let bytes = to_bytes(record, "record")?;
        py.detach(|| {
            let r = JournalRecord::from_json(&bytes).map_err(|m| invalid_record(&m))?;
            self.inner.write(&r).map_err(Fail::from)
        })
        .map_err(|e| journal_error(py, e))
    }

    /// The record of ``reservation_id`` (its JSON text), or None. A record
    /// that does not parse is quarantined and raises JournalCorrupt.
    fn load(&self, py: Python<'_>, reservation_id: &Bound<'_, PyAny>) -> PyResult<Option<String>> {
        let id = str_arg(reservation_id, "reservation_id")?;
        py.detach(|| self.inner.load(&id))
            .map(|r| r.as_ref().map(record_text))
            .map_err(|e| journal_error(py, e.into()))
    }

    /// Removes the record of ``reservation_id`` (and its legacy-named file
    /// only if it holds exactly this id); True if a file was removed.
    fn remove(&self, py: Python<'_>, reservation_id: &Bound<'_, PyAny>) -> PyResult<bool> {
        let id = str_arg(reservation_id, "reservation_id")?;
        py.detach(|| self.inner.remove(&id))
            .map_err(|e| journal_error(py, e.into()))
    }

    /// Renames the record of ``reservation_id`` aside (never deleted) and
    /// returns where it went, or None if there is no record.
    fn quarantine(
        &self,
        py: Python<'_>,
        reservation_id: &Bound<'_, PyAny>,
    ) -> PyResult<Option<String>> {
        let id = str_arg(reservation_id, "reservation_id")?;
        py.detach(|| self.inner.quarantine(&id))
            .map(|p| p.map(|p| p.to_string_lossy().into_owned()))
            .map_err(|e| journal_error(py, e.into()))
    }

    /// Releases this journal's claim on ``reservation_id`` (a settlement
    /// abandoned before it is done: its record stays for a later replay).
    /// No-op when not held. All claims go when the Journal is dropped, and
    /// with the process (exit or kill).
    fn release_claim(&self, py: Python<'_>, reservation_id: &Bound<'_, PyAny>) -> PyResult<()> {
        let id = str_arg(reservation_id, "reservation_id")?;
        py.detach(|| self.inner.release_claim(&id));
        Ok(())
    }

    /// Whether this journal holds the claim on ``reservation_id`` (J-6).
    fn holds_claim(&self, reservation_id: &Bound<'_, PyAny>) -> PyResult<bool> {
        Ok(self
            .inner
            .holds_claim(&str_arg(reservation_id, "reservation_id")?))
    }

    fn __repr__(&self) -> String {
        format!(
            "Journal(dir={:?}, base_url={:?})",
            self.inner.dir(),
            self.inner.base_url()
        )
    }
}
