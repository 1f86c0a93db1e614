//! The `Settlement` class (the core's sans-IO settlement: commit, the
//! expired-commit event fallback, release; rules ST-1..ST-11, SP-1..SP-4)
//! and its value classes `SettlementDecision` and `SettlementAction`.
//!
//! Thin: every rule (classification, backoff, `Retry-After`, the record's
//! layout and checks, the key) is the core's. The durable journal (J-1..J-8)
//! is not bound yet: the core's journal module is not ready. The caller
//! stores `Settlement.record_json` and rebuilds with
//! `Settlement.from_record(...)`; the journal's functions will take and give
//! the same text.
//!
//! Thread safety as for `Heartbeat`: a `std::sync::Mutex` taken only around
//! pure Rust calls into the core.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::Mutex;

use leasebeat::{
    Error, Now, RecordUpdate, ResponseRef, RetryPolicy, SequentialKeys, SettleNext, Settlement,
    SettlementAction, SettlementConfig, SettlementDecision, TransportFailure, UuidV4Keys,
};
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyString, PyTuple, PyType};

use crate::convert::{
    from_json_object, to_bytes, to_headers, to_json_value, to_u16_status, to_u64,
};
use crate::enums::{E, member};
use crate::errors::{core_error, invalid_argument, type_error};

fn hash_of(v: impl Hash) -> u64 {
    let mut h = DefaultHasher::new();
    v.hash(&mut h);
    h.finish() >> 1
}

fn opt<'a, 'py>(v: Option<&'a Bound<'py, PyAny>>) -> Option<&'a Bound<'py, PyAny>> {
    v.filter(|v| !v.is_none())
}

/// A body argument: a dict (serialized exactly by the core's JSON writer),
/// or `str`/`bytes` taken as the raw JSON text. `None` is absent.
fn body_from(v: Option<&Bound<'_, PyAny>>, what: &str) -> PyResult<Option<Vec<u8>>> {
    let Some(v) = opt(v) else {
        return Ok(None);
    };
    if v.is_instance_of::<PyDict>() {
        let value = to_json_value(v, what, 1)?;
        return serde_json::to_vec(&value)
            .map(Some)
            .map_err(|e| invalid_argument(v.py(), format!("{what}: {e}")));
    }
    if v.is_instance_of::<PyString>() || v.is_instance_of::<PyBytes>() {
        return to_bytes(v, what).map(Some);
    }
    Err(type_error(format!(
        "{what} must be a dict, str or bytes (JSON text), or None"
    )))
}

fn str_from(v: &Bound<'_, PyAny>, what: &str) -> PyResult<String> {
    Ok(v.cast::<PyString>()
        .map_err(|_| type_error(format!("{what} must be a str")))?
        .to_str()?
        .to_owned())
}

fn opt_str(v: Option<&Bound<'_, PyAny>>, what: &str) -> PyResult<Option<String>> {
    opt(v).map(|v| str_from(v, what)).transpose()
}

fn retry_from(
    max_attempts: &Bound<'_, PyAny>,
    initial_ms: &Bound<'_, PyAny>,
    max_ms: &Bound<'_, PyAny>,
) -> PyResult<RetryPolicy> {
    let m = to_u64(max_attempts, "max_attempts")?;
    let max_attempts = u32::try_from(m).map_err(|_| {
        invalid_argument(
            max_attempts.py(),
            format!("max_attempts {m} does not fit in 32 bits"),
        )
    })?;
    Ok(RetryPolicy {
        max_attempts,
        initial_ms: to_u64(initial_ms, "initial_ms")?,
        max_ms: to_u64(max_ms, "max_ms")?,
    })
}

fn failure_from(v: &Bound<'_, PyAny>) -> PyResult<TransportFailure> {
    let s = v.cast::<PyString>().map_err(|_| {
        type_error(
            "failure must be a TransportFailure or one of \"timeout\", \"connect\", \"reset\"",
        )
    })?;
    let text: String = if s.is_exact_instance_of::<PyString>() {
        s.to_str()?.to_owned()
    } else {
        match v.getattr("value").and_then(|x| x.extract::<String>()) {
            Ok(t) => t,
            Err(_) => s.to_str()?.to_owned(),
        }
    };
    TransportFailure::parse(&text).ok_or_else(|| {
        invalid_argument(
            v.py(),
            format!("failure must be \"timeout\", \"connect\" or \"reset\", got {text:?}"),
        )
    })
}

/// The settlement of one reservation: commit, the expired-commit event
/// fallback (``POST /v1/events``) and release, as a sans-IO state machine.
///
/// Build it with ``Settlement.commit(...)``, ``Settlement.release(...)`` or
/// ``Settlement.from_record(...)`` (a restart from the durable record alone).
/// Loop: ``poll_action()`` says what to do: ``persist`` the record text
/// (``action.record_json``) durably and call ``handle_persisted(now_ns)``
/// (or ``handle_persist_failed(message, now_ns)``); ``send`` the attempt at
/// ``action.due_ns`` (``action.endpoint``, header ``X-Idempotency-Key:
/// action.key``, body ``action.body``) and call ``handle_sent(...)``, then
/// ``handle_response(...)`` or ``handle_failure(...)``; until ``done``
/// (``action.outcome``). Every call returns a SettlementDecision. Every
/// ``now_ns`` is a monotonic nanosecond reading that never goes backwards;
/// ``wall_ms`` is Unix milliseconds (``time.time_ns() // 1_000_000``): a 429's
/// ``Retry-After`` floor is persisted on the wall clock (ST-4). A call that
/// raises changes nothing.
///
/// Thread-safe like Heartbeat.
#[pyclass(frozen, module = "leasebeat", name = "Settlement")]
pub struct PySettlement {
    inner: Mutex<Settlement>,
}

impl PySettlement {
    /// The settlement, locked (for the journal's `persist` / `finish`).
    pub(crate) fn lock(&self) -> PyResult<std::sync::MutexGuard<'_, Settlement>> {
        self.inner.lock().map_err(|_| {
            PyRuntimeError::new_err("the settlement is unusable after an internal panic")
        })
    }

    /// Wraps a core settlement (the journal's replay).
    pub(crate) fn from_core(s: Settlement) -> PySettlement {
        PySettlement {
            inner: Mutex::new(s),
        }
    }

    fn with<R>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut Settlement) -> Result<R, Error>,
    ) -> PyResult<R> {
        let result = {
            let mut guard = self.inner.lock().map_err(|_| {
                PyRuntimeError::new_err("the settlement is unusable after an internal panic")
            })?;
            f(&mut guard)
        };
        result.map_err(|e| core_error(py, e))
    }

    fn read<R>(&self, f: impl FnOnce(&Settlement) -> R) -> PyResult<R> {
        let guard = self.inner.lock().map_err(|_| {
            PyRuntimeError::new_err("the settlement is unusable after an internal panic")
        })?;
        Ok(f(&guard))
    }

    fn build(
        py: Python<'_>,
        config: SettlementConfig,
        now: Now,
        key_prefix: Option<String>,
    ) -> PyResult<PySettlement> {
        let s = match key_prefix {
            Some(p) => Settlement::with_key_source(config, now, &mut SequentialKeys::new(p)),
            None => Settlement::with_key_source(config, now, &mut UuidV4Keys),
        }
        .map_err(|e| core_error(py, e))?;
        Ok(PySettlement {
            inner: Mutex::new(s),
        })
    }
}

#[pymethods]
impl PySettlement {
    /// The settlement of a commit of ``reservation_id`` (a str of 1..=128
    /// characters without a control character; slashes are fine).
    ///
    /// ``commit`` is the commit body without its key: a dict (or its JSON
    /// text as str/bytes) with ``actual`` (``{"unit": ..., "amount": ...}``,
    /// amount 0..=2**63-1) and optional ``metrics`` and ``metadata``; None
    /// means no actual amount is known (ST-10): the settlement is done at
    /// once with ``SettleOutcome.NO_ACTUAL`` and nothing is ever sent.
    /// ``event`` is what the expired-commit fallback adds (``subject`` and
    /// ``action``), or None (then a 410 ends ``expired_unrecorded``).
    /// ``base_url`` is stored in the record. ``max_attempts``,
    /// ``initial_ms``, ``max_ms``: the retry policy (ST-3, SP-1).
    /// ``key_prefix`` makes the key deterministic (``"<prefix>1"``), for
    /// tests; by default it is a random UUIDv4.
    ///
    /// Raises InvalidConfig (a bad id, body, event, policy or base URL; also
    /// a ValueError), InvalidArgument (an integer beyond 64 bits in a dict),
    /// TypeError (a wrong type).
    #[classmethod]
    #[pyo3(signature = (reservation_id, commit, *, now_ns, wall_ms, event = None, base_url = None, max_attempts = None, initial_ms = None, max_ms = None, key_prefix = None))]
    #[allow(clippy::too_many_arguments)]
    fn commit(
        _cls: &Bound<'_, PyType>,
        py: Python<'_>,
        reservation_id: &Bound<'_, PyAny>,
        commit: Option<&Bound<'_, PyAny>>,
        now_ns: &Bound<'_, PyAny>,
        wall_ms: &Bound<'_, PyAny>,
        event: Option<&Bound<'_, PyAny>>,
        base_url: Option<&Bound<'_, PyAny>>,
        max_attempts: Option<&Bound<'_, PyAny>>,
        initial_ms: Option<&Bound<'_, PyAny>>,
        max_ms: Option<&Bound<'_, PyAny>>,
        key_prefix: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PySettlement> {
        let config = SettlementConfig {
            reservation_id: str_from(reservation_id, "reservation_id")?,
            base_url: opt_str(base_url, "base_url")?.unwrap_or_default(),
            commit: body_from(commit, "commit")?,
            event: body_from(event, "event")?,
            release: false,
            release_reason: None,
            retry: policy(py, max_attempts, initial_ms, max_ms)?,
        };
        let now = Now::new(to_u64(now_ns, "now_ns")?, to_u64(wall_ms, "wall_ms")?);
        PySettlement::build(py, config, now, opt_str(key_prefix, "key_prefix")?)
    }

    /// The settlement of a release of ``reservation_id`` (work that used
    /// nothing; not journaled, ST-9): the release is due at ``now_ns``.
    /// ``reason`` (at most 256 characters) goes in the body. Other arguments
    /// as for ``Settlement.commit``.
    #[classmethod]
    #[pyo3(signature = (reservation_id, *, now_ns, wall_ms, reason = None, base_url = None, max_attempts = None, initial_ms = None, max_ms = None, key_prefix = None))]
    #[allow(clippy::too_many_arguments)]
    fn release(
        _cls: &Bound<'_, PyType>,
        py: Python<'_>,
        reservation_id: &Bound<'_, PyAny>,
        now_ns: &Bound<'_, PyAny>,
        wall_ms: &Bound<'_, PyAny>,
        reason: Option<&Bound<'_, PyAny>>,
        base_url: Option<&Bound<'_, PyAny>>,
        max_attempts: Option<&Bound<'_, PyAny>>,
        initial_ms: Option<&Bound<'_, PyAny>>,
        max_ms: Option<&Bound<'_, PyAny>>,
        key_prefix: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PySettlement> {
        let config = SettlementConfig {
            reservation_id: str_from(reservation_id, "reservation_id")?,
            base_url: opt_str(base_url, "base_url")?.unwrap_or_default(),
            commit: None,
            event: None,
            release: true,
            release_reason: opt_str(reason, "reason")?,
            retry: policy(py, max_attempts, initial_ms, max_ms)?,
        };
        let now = Now::new(to_u64(now_ns, "now_ns")?, to_u64(wall_ms, "wall_ms")?);
        PySettlement::build(py, config, now, opt_str(key_prefix, "key_prefix")?)
    }

    /// A settlement rebuilt from its durable record alone (SP-4): ``record``
    /// is the record file's text (str or bytes; what ``record_json`` gave, or
    /// a record runcycles Python 0.5.3 wrote). Same key, the record's mode,
    /// a fresh attempt count; the first request is due
    /// ``max(0, not_before_ms - wall_ms)`` after ``now_ns`` (at most 3600 s).
    ///
    /// Raises InvalidArgument (a record the core refuses: quarantine it,
    /// J-4), InvalidConfig (the retry policy), TypeError.
    #[classmethod]
    #[pyo3(signature = (record, *, now_ns, wall_ms, max_attempts = None, initial_ms = None, max_ms = None))]
    #[allow(clippy::too_many_arguments)]
    fn from_record(
        _cls: &Bound<'_, PyType>,
        py: Python<'_>,
        record: &Bound<'_, PyAny>,
        now_ns: &Bound<'_, PyAny>,
        wall_ms: &Bound<'_, PyAny>,
        max_attempts: Option<&Bound<'_, PyAny>>,
        initial_ms: Option<&Bound<'_, PyAny>>,
        max_ms: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PySettlement> {
        let bytes = to_bytes(record, "record")?;
        let retry = policy(py, max_attempts, initial_ms, max_ms)?;
        let now = Now::new(to_u64(now_ns, "now_ns")?, to_u64(wall_ms, "wall_ms")?);
        let s = Settlement::from_record_json(&bytes, retry, now).map_err(|e| core_error(py, e))?;
        Ok(PySettlement {
            inner: Mutex::new(s),
        })
    }

    /// What to do now: a SettlementAction.
    fn poll_action(&self) -> PyResult<PySettlementAction> {
        self.read(PySettlementAction::from_core)
    }

    /// The record of the outstanding persist is durable (at ``now_ns``).
    /// Raises NotOutstanding (no persist is), TimeWentBackwards, Stopped.
    fn handle_persisted(
        &self,
        py: Python<'_>,
        now_ns: &Bound<'_, PyAny>,
    ) -> PyResult<PySettlementDecision> {
        let now = to_u64(now_ns, "now_ns")?;
        self.with(py, |s| s.handle_persisted(now))
            .map(PySettlementDecision::new)
    }

    /// The write of the outstanding persist failed (``message`` says why):
    /// SP-3, the request goes anyway; the decision warns ``persist_failed``.
    fn handle_persist_failed(
        &self,
        py: Python<'_>,
        message: &Bound<'_, PyAny>,
        now_ns: &Bound<'_, PyAny>,
    ) -> PyResult<PySettlementDecision> {
        let message = str_from(message, "message")?;
        let now = to_u64(now_ns, "now_ns")?;
        self.with(py, |s| s.handle_persist_failed(&message, now))
            .map(PySettlementDecision::new)
    }

    /// Attempt ``attempt_id`` was sent at ``now_ns``. Raises NotOutstanding,
    /// AlreadySent, TimeWentBackwards, Stopped.
    fn handle_sent(
        &self,
        py: Python<'_>,
        attempt_id: &Bound<'_, PyAny>,
        now_ns: &Bound<'_, PyAny>,
    ) -> PyResult<PySettlementDecision> {
        let id = to_u64(attempt_id, "attempt_id")?;
        let now = to_u64(now_ns, "now_ns")?;
        self.with(py, |s| s.handle_sent(id, now))
            .map(PySettlementDecision::new)
    }

    /// The HTTP response to attempt ``attempt_id``, observed at ``now_ns``
    /// (after its complete body) and ``wall_ms``. ``headers`` as for
    /// ``Heartbeat.handle_response``; ``body`` the raw bytes (or str).
    /// Raises InvalidArgument (status outside 100..=999), NotOutstanding,
    /// NotSent, TimeWentBackwards, Stopped.
    #[pyo3(signature = (attempt_id, now_ns, wall_ms, status, headers = None, body = None))]
    #[allow(clippy::too_many_arguments)]
    fn handle_response(
        &self,
        py: Python<'_>,
        attempt_id: &Bound<'_, PyAny>,
        now_ns: &Bound<'_, PyAny>,
        wall_ms: &Bound<'_, PyAny>,
        status: &Bound<'_, PyAny>,
        headers: Option<&Bound<'_, PyAny>>,
        body: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PySettlementDecision> {
        let id = to_u64(attempt_id, "attempt_id")?;
        let now = Now::new(to_u64(now_ns, "now_ns")?, to_u64(wall_ms, "wall_ms")?);
        let status = to_u16_status(status)?;
        let headers = to_headers(headers)?;
        let body = match opt(body) {
            Some(b) => to_bytes(b, "body")?,
            None => Vec::new(),
        };
        let response = ResponseRef::new(status, &body).headers(&headers);
        self.with(py, |s| s.handle_response(id, response, now))
            .map(PySettlementDecision::new)
    }

    /// A transport failure (``"timeout"``, ``"connect"``, ``"reset"`` or a
    /// TransportFailure) of attempt ``attempt_id`` at ``now_ns``: transient.
    fn handle_failure(
        &self,
        py: Python<'_>,
        attempt_id: &Bound<'_, PyAny>,
        failure: &Bound<'_, PyAny>,
        now_ns: &Bound<'_, PyAny>,
    ) -> PyResult<PySettlementDecision> {
        let id = to_u64(attempt_id, "attempt_id")?;
        let failure = failure_from(failure)?;
        let now = to_u64(now_ns, "now_ns")?;
        self.with(py, |s| s.handle_failure(id, failure, now))
            .map(PySettlementDecision::new)
    }

    /// The reservation id.
    #[getter]
    fn reservation_id(&self) -> PyResult<String> {
        self.read(|s| s.reservation_id().to_owned())
    }

    /// The settlement's one idempotency key (ST-1; ``""`` for no_actual).
    #[getter]
    fn key(&self) -> PyResult<String> {
        self.read(|s| s.key().to_owned())
    }

    /// The current mode (SettleMode).
    #[getter]
    fn mode<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let m = self.read(|s| s.mode().as_str())?;
        member(py, E::SettleMode, m)
    }

    /// The outcome (SettleOutcome) once done, else None.
    #[getter]
    fn outcome<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        let o = self.read(|s| s.outcome())?;
        o.map(|o| member(py, E::SettleOutcome, o.as_str()))
            .transpose()
    }

    /// The record as it is (or is to be) persisted: the record file's text
    /// (runcycles Python 0.5.3's layout, version 1); None for a release and
    /// for no_actual.
    #[getter]
    fn record_json(&self) -> PyResult<Option<String>> {
        self.read(|s| s.record().map(|r| r.to_json()))
    }

    /// The failed requests of the current mode in this run.
    #[getter]
    fn failures(&self) -> PyResult<u32> {
        self.read(|s| s.failures())
    }

    /// The most recent decision (the first is made when it is built).
    #[getter]
    fn last_decision(&self) -> PyResult<PySettlementDecision> {
        self.read(|s| PySettlementDecision::new(s.last_decision().clone()))
    }

    fn __repr__(&self) -> PyResult<String> {
        self.read(|s| {
            format!(
                "Settlement(reservation_id={:?}, mode={:?}, outcome={})",
                s.reservation_id(),
                s.mode().as_str(),
                s.outcome()
                    .map_or("None".to_owned(), |o| format!("{:?}", o.as_str()))
            )
        })
    }
}

pub(crate) fn policy(
    py: Python<'_>,
    max_attempts: Option<&Bound<'_, PyAny>>,
    initial_ms: Option<&Bound<'_, PyAny>>,
    max_ms: Option<&Bound<'_, PyAny>>,
) -> PyResult<RetryPolicy> {
    let d = RetryPolicy::default();
    let max_attempts = opt(max_attempts)
        .cloned()
        .unwrap_or(d.max_attempts.into_pyobject(py)?.into_any());
    let initial_ms = opt(initial_ms)
        .cloned()
        .unwrap_or(d.initial_ms.into_pyobject(py)?.into_any());
    let max_ms = opt(max_ms)
        .cloned()
        .unwrap_or(d.max_ms.into_pyobject(py)?.into_any());
    retry_from(&max_attempts, &initial_ms, &max_ms)
}

// ------------------------------------------------------------------ Action

#[derive(Clone, PartialEq, Eq, Hash)]
enum ActionData {
    Persist(String),
    Send {
        id: u64,
        endpoint: &'static str,
        key: String,
        body: Vec<u8>,
        due_ns: u64,
        number: u32,
        sent_ns: Option<u64>,
    },
    Done(&'static str),
}

/// What a settlement asks for now (the result of ``poll_action()``); an
/// immutable copy.
#[pyclass(frozen, eq, hash, module = "leasebeat", name = "SettlementAction")]
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct PySettlementAction {
    data: ActionData,
}

impl PySettlementAction {
    fn from_core(s: &Settlement) -> PySettlementAction {
        let data = match s.poll_action() {
            SettlementAction::Persist(r) => ActionData::Persist(r.to_json()),
            SettlementAction::Send(a) | SettlementAction::Wait(a) => ActionData::Send {
                id: a.id,
                endpoint: a.endpoint.as_str(),
                key: a.key.clone(),
                body: a.body.clone(),
                due_ns: a.due_ns,
                number: a.number,
                sent_ns: a.sent_ns,
            },
            SettlementAction::Done(o) => ActionData::Done(o.as_str()),
        };
        PySettlementAction { data }
    }
}

#[pymethods]
impl PySettlementAction {
    /// ``SettleActionKind``: persist, send, wait or done.
    #[getter]
    fn kind<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let k = match &self.data {
            ActionData::Persist(_) => "persist",
            ActionData::Send { sent_ns: None, .. } => "send",
            ActionData::Send { .. } => "wait",
            ActionData::Done(_) => "done",
        };
        member(py, E::SettleActionKind, k)
    }
    /// For persist: the record file's text to write durably.
    #[getter]
    fn record_json(&self) -> Option<String> {
        match &self.data {
            ActionData::Persist(r) => Some(r.clone()),
            _ => None,
        }
    }
    /// For send/wait: the attempt id to report.
    #[getter]
    fn attempt_id(&self) -> Option<u64> {
        match &self.data {
            ActionData::Send { id, .. } => Some(*id),
            _ => None,
        }
    }
    /// For send/wait: where it goes (SettleMode).
    #[getter]
    fn endpoint<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        match &self.data {
            ActionData::Send { endpoint, .. } => Ok(Some(member(py, E::SettleMode, endpoint)?)),
            _ => Ok(None),
        }
    }
    /// For send/wait: the idempotency key (header and body; ST-1).
    #[getter]
    fn key(&self) -> Option<String> {
        match &self.data {
            ActionData::Send { key, .. } => Some(key.clone()),
            _ => None,
        }
    }
    /// For send/wait: the exact JSON body.
    #[getter]
    fn body<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyBytes>> {
        match &self.data {
            ActionData::Send { body, .. } => Some(PyBytes::new(py, body)),
            _ => None,
        }
    }
    /// For send/wait: when to send (monotonic ns).
    #[getter]
    fn due_ns(&self) -> Option<u64> {
        match &self.data {
            ActionData::Send { due_ns, .. } => Some(*due_ns),
            _ => None,
        }
    }
    /// For send/wait: the attempt's ordinal within its mode, 1-based.
    #[getter]
    fn attempt_number(&self) -> Option<u32> {
        match &self.data {
            ActionData::Send { number, .. } => Some(*number),
            _ => None,
        }
    }
    /// For wait: when the attempt was reported sent.
    #[getter]
    fn sent_ns(&self) -> Option<u64> {
        match &self.data {
            ActionData::Send { sent_ns, .. } => *sent_ns,
            _ => None,
        }
    }
    /// For done: the outcome (SettleOutcome).
    #[getter]
    fn outcome<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        match &self.data {
            ActionData::Done(o) => Ok(Some(member(py, E::SettleOutcome, o)?)),
            _ => Ok(None),
        }
    }
    fn __repr__(&self) -> String {
        match &self.data {
            ActionData::Persist(_) => "SettlementAction(kind='persist')".to_owned(),
            ActionData::Send {
                id,
                endpoint,
                due_ns,
                sent_ns,
                ..
            } => format!(
                "SettlementAction(kind={:?}, attempt_id={id}, endpoint={endpoint:?}, due_ns={due_ns})",
                if sent_ns.is_some() { "wait" } else { "send" }
            ),
            ActionData::Done(o) => format!("SettlementAction(kind='done', outcome={o:?})"),
        }
    }
}

// ---------------------------------------------------------------- Decision

/// One decision of a settlement (immutable, hashable). ``str(d)`` is its one
/// JSON line; ``to_json()`` the same as a dict.
#[pyclass(frozen, module = "leasebeat", name = "SettlementDecision")]
#[derive(Clone)]
pub struct PySettlementDecision {
    inner: SettlementDecision,
}

impl PySettlementDecision {
    pub(crate) fn new(inner: SettlementDecision) -> PySettlementDecision {
        PySettlementDecision { inner }
    }
}

#[pymethods]
impl PySettlementDecision {
    /// What comes next (SettleNext).
    #[getter]
    fn next<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        member(py, E::SettleNext, self.inner.next_str())
    }
    /// The outcome (SettleOutcome) when next is done, else None.
    #[getter]
    fn outcome<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        self.inner
            .outcome()
            .map(|o| member(py, E::SettleOutcome, o.as_str()))
            .transpose()
    }
    /// The due time of the next send (monotonic ns); None unless a send.
    #[getter]
    fn at_ns(&self) -> Option<u64> {
        match self.inner.next {
            SettleNext::Send(_) => self.inner.at_ns,
            _ => None,
        }
    }
    /// The key's ordinal for a send or wait: always 1 (ST-1); else None.
    #[getter]
    fn key(&self) -> Option<u32> {
        matches!(self.inner.next, SettleNext::Send(_) | SettleNext::Wait).then_some(1)
    }
    /// The next request's ordinal within its mode (send or wait), or None.
    #[getter]
    fn attempt(&self) -> Option<u32> {
        self.inner.attempt
    }
    /// The mode after this decision (SettleMode).
    #[getter]
    fn mode<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        member(py, E::SettleMode, self.inner.mode.as_str())
    }
    /// What happens to the durable record: ``"write"`` (then see
    /// ``record_mode`` and ``record_not_before_ms``), ``"remove"``,
    /// ``"keep"``, or None.
    #[getter]
    fn record(&self) -> Option<&'static str> {
        self.inner.record.map(|r| match r {
            RecordUpdate::Write { .. } => "write",
            RecordUpdate::Remove => "remove",
            RecordUpdate::Keep => "keep",
        })
    }
    /// For a write: the record's mode (SettleMode commit or event).
    #[getter]
    fn record_mode<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        match self.inner.record {
            Some(RecordUpdate::Write { mode, .. }) => {
                Ok(Some(member(py, E::SettleMode, mode.as_str())?))
            }
            _ => Ok(None),
        }
    }
    /// For a write: the record's not_before_ms (Unix ms), or None.
    #[getter]
    fn record_not_before_ms(&self) -> Option<u64> {
        match self.inner.record {
            Some(RecordUpdate::Write { not_before_ms, .. }) => not_before_ms,
            _ => None,
        }
    }
    /// How the deciding event was classified (SettleClass).
    #[getter]
    fn event_class<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        member(py, E::SettleClass, self.inner.class.as_str())
    }
    /// The server's error code that decided, or None.
    #[getter]
    fn code(&self) -> Option<String> {
        self.inner.code.clone()
    }
    /// The HTTP status of the deciding response, or None.
    #[getter]
    fn status(&self) -> Option<u16> {
        self.inner.status
    }
    /// The delay chosen after a failure, ms (SP-1, ST-4), or None.
    #[getter]
    fn delay_ms(&self) -> Option<u64> {
        self.inner.delay_ms
    }
    /// The wall-clock floor this decision set (ST-4), Unix ms, or None.
    #[getter]
    fn not_before_ms(&self) -> Option<u64> {
        self.inner.not_before_ms
    }
    /// The warnings (SettleWarning), in order.
    #[getter]
    fn warnings<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let items = self
            .inner
            .warnings
            .iter()
            .map(|w| member(py, E::SettleWarning, w.as_str()))
            .collect::<PyResult<Vec<_>>>()?;
        PyTuple::new(py, items)
    }
    /// A human-readable detail, or None.
    #[getter]
    fn detail(&self) -> Option<String> {
        self.inner.detail.clone()
    }
    /// ST-11: stop the heartbeat now.
    #[getter]
    fn stop_heartbeat(&self) -> bool {
        self.inner.stop_heartbeat
    }
    /// True when the settlement ended.
    #[getter]
    fn is_done(&self) -> bool {
        matches!(self.inner.next, SettleNext::Done(_))
    }
    /// The decision as a dict (the vectors' vocabulary; ``at`` in ms).
    fn to_json<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        from_json_object(py, &self.inner.to_json())
    }
    /// The decision as one JSON line, members sorted.
    fn to_json_str(&self) -> String {
        self.inner.to_string()
    }
    fn __str__(&self) -> String {
        self.inner.to_string()
    }
    fn __repr__(&self) -> String {
        format!("SettlementDecision({})", self.inner)
    }
    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other
            .cast::<PySettlementDecision>()
            .is_ok_and(|o| o.get().inner == self.inner)
    }
    fn __hash__(&self) -> u64 {
        hash_of(self.inner.to_string())
    }
}
