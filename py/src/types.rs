//! Immutable value classes: `Numbers`, `Decision`, `Attempt`, `Action` and the
//! results of the pure arithmetic functions.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use leasebeat::arith::{FallbackCadence, PrimarySchedule, RetryWindow};
use leasebeat::{Attempt, Decision, Next, Num, Numbers, StopReason};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyTuple};

use crate::convert::{duration, num};
use crate::enums::{E, member};

fn opt_member<'py>(py: Python<'py>, e: E, v: Option<&str>) -> PyResult<Option<Bound<'py, PyAny>>> {
    v.map(|v| member(py, e, v)).transpose()
}

fn hash_of(v: impl Hash) -> u64 {
    let mut h = DefaultHasher::new();
    v.hash(&mut h);
    // Python reserves -1; keep the hash in the non-negative i64 range.
    h.finish() >> 1
}

// ------------------------------------------------------------------ Numbers

/// The numbers behind one decision (HB-44), in milliseconds.
///
/// Each attribute is an ``int``, ``float('inf')`` (+infinity: an unbounded
/// budget, an overflowing value) or ``float('-inf')`` (-infinity: the retry
/// window when the budget is unbounded), or ``None`` when it does not apply to
/// the decision. Compare with ``math.isinf`` or ``== float('inf')``.
#[pyclass(frozen, eq, module = "leasebeat", name = "Numbers")]
#[derive(Clone, PartialEq)]
pub struct PyNumbers {
    pub inner: Numbers,
}

impl PyNumbers {
    fn get<'py>(&self, py: Python<'py>, n: Option<Num>) -> PyResult<Option<Bound<'py, PyAny>>> {
        n.map(|n| num(py, n)).transpose()
    }
}

#[pymethods]
impl PyNumbers {
    /// Every number name, in a fixed order.
    #[classattr]
    #[pyo3(name = "NAMES")]
    fn names(py: Python<'_>) -> PyResult<Bound<'_, PyTuple>> {
        PyTuple::new(py, Numbers::NAMES)
    }

    /// Round trip of the attempt that produced this success, rounded up (HB-05/06).
    #[getter]
    fn rtt<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        self.get(py, self.inner.rtt())
    }
    /// Largest rtt over this lease's schema-valid successes (HB-07, D-3).
    #[getter]
    fn max_rtt<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        self.get(py, self.inner.max_rtt())
    }
    /// max(0, remaining_ttl_ms - rtt); on a failure, that of the anchoring success.
    #[getter]
    fn lead_floor<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        self.get(py, self.inner.lead_floor())
    }
    /// max(request_timeout_ms, 1000, 2 x max_rtt); inf when the timeout is unbounded.
    #[getter]
    fn attempt_budget<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        self.get(py, self.inner.attempt_budget())
    }
    /// max(1000, 2 x max_rtt).
    #[getter]
    fn safety_margin<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        self.get(py, self.inner.safety_margin())
    }
    /// 2 x attempt_budget + safety_margin.
    #[getter]
    fn retry_reserve<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        self.get(py, self.inner.retry_reserve())
    }
    /// Delay from the observation to the next beat.
    #[getter]
    fn next_delay<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        self.get(py, self.inner.next_delay())
    }
    /// Current lead estimate after a failure (HB-21).
    #[getter]
    fn lead<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        self.get(py, self.inner.lead())
    }
    /// lead - attempt_budget - safety_margin, unclamped (HB-22); may be negative or -inf.
    #[getter]
    fn retry_window<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        self.get(py, self.inner.retry_window())
    }
    /// Delay from the failure's observation to the same-key retry.
    #[getter]
    fn retry_delay<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        self.get(py, self.inner.retry_delay())
    }
    /// Fallback lead lower bound at the observation (FB-01); may be negative.
    #[getter]
    fn lead_min<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        self.get(py, self.inner.lead_min())
    }
    /// Fallback grant: difference of successive expires_at_ms values; may be negative.
    #[getter]
    fn grant<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        self.get(py, self.inner.grant())
    }
    /// Fallback cadence (FB-03).
    #[getter]
    fn cadence<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        self.get(py, self.inner.cadence())
    }
    /// Fallback cadences skipped (FB-04).
    #[getter]
    fn skips<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        self.get(py, self.inner.skips())
    }

    /// The numbers that apply, as a new dict ``{name: int | float}`` in a fixed order.
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for (k, v) in self.inner.iter() {
            d.set_item(k, num(py, v)?)?;
        }
        Ok(d)
    }

    fn __repr__(&self) -> String {
        let parts: Vec<String> = self
            .inner
            .iter()
            .map(|(k, v)| format!("{k}={}", py_num(v)))
            .collect();
        format!("Numbers({})", parts.join(", "))
    }

    fn __hash__(&self) -> u64 {
        hash_of(self.inner.iter().collect::<Vec<_>>())
    }
}

fn py_num(n: Num) -> String {
    match n {
        Num::Int(i) => i.to_string(),
        Num::Inf => "inf".into(),
        Num::NegInf => "-inf".into(),
    }
}

// ----------------------------------------------------------------- Decision

/// One decision of the scheduler: the answer to an outcome or a cancel.
///
/// Immutable and hashable. ``next`` says what to do (``Next.EXTEND``,
/// ``Next.CREATE`` or ``Next.STOP``); for a send, ``at_ns`` is the due time
/// (``None`` = +infinity, never) and ``key_use``/``key_index`` describe the key;
/// for a stop, ``reason`` says why. ``numbers`` holds the numbers behind it and
/// ``to_json()`` the emitted-decision object of the scenario format.
#[pyclass(frozen, eq, module = "leasebeat", name = "Decision")]
#[derive(Clone, PartialEq)]
pub struct PyDecision {
    // Boxed: a Decision is ~600 bytes (14 optional i128-backed numbers);
    // boxed, it is copied once and the Python object stays small.
    pub inner: Box<Decision>,
}

impl PyDecision {
    /// Wraps a decision (boxed or not).
    pub fn new(d: impl Into<Box<Decision>>) -> PyDecision {
        PyDecision { inner: d.into() }
    }
}

#[pymethods]
impl PyDecision {
    /// The reservation id, once a create succeeded (else None).
    #[getter]
    fn reservation_id(&self) -> Option<String> {
        self.inner.reservation_id.as_deref().map(str::to_owned)
    }

    /// What to do next: Next.CREATE, Next.EXTEND or Next.STOP.
    #[getter]
    fn next<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let v = match self.inner.next {
            Next::Send(kind) => kind.as_str(),
            Next::Stop(_) => "stop",
        };
        member(py, E::Next, v)
    }

    /// Due time of the next attempt in caller nanoseconds (the clock of the
    /// now_ns values you pass in); None for +infinity (never) and for a stop.
    #[getter]
    fn at_ns(&self) -> Option<u64> {
        match self.inner.next {
            Next::Send(_) => self.inner.at_ns,
            Next::Stop(_) => None,
        }
    }

    /// KeyUse.NEW or KeyUse.SAME for a send; None for a stop.
    #[getter]
    fn key_use<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        opt_member(py, E::KeyUse, self.inner.key.map(|k| k.as_str()))
    }

    /// 1 for the first key of the lease, 2 for the next new one, ... (a send); None for a stop.
    #[getter]
    fn key_index(&self) -> Option<u32> {
        self.inner.key_index
    }

    /// The StopReason for a stop; None for a send.
    #[getter]
    fn reason<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        opt_member(
            py,
            E::StopReason,
            self.inner.stop_reason().map(StopReason::as_str),
        )
    }

    /// Mode.PRIMARY or Mode.FALLBACK where an algorithm applies, else None.
    #[getter]
    fn mode<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        opt_member(py, E::Mode, self.inner.mode.map(|m| m.as_str()))
    }

    /// The numbers behind the decision (a Numbers object).
    #[getter]
    fn numbers(&self) -> PyNumbers {
        PyNumbers {
            inner: self.inner.numbers,
        }
    }

    /// A tuple of DecisionWarning (usually empty).
    #[getter]
    fn warnings<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let items = self
            .inner
            .warnings
            .iter()
            .map(|w| member(py, E::DecisionWarning, w.as_str()))
            .collect::<PyResult<Vec<_>>>()?;
        PyTuple::new(py, items)
    }

    /// How the deciding outcome was classified (an OutcomeClass).
    #[getter]
    fn outcome<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        member(py, E::OutcomeClass, self.inner.outcome.as_str())
    }

    /// A human-readable detail (e.g. the Retry-After problem, the error code), or None.
    #[getter]
    fn detail(&self) -> Option<String> {
        self.inner.detail.clone()
    }

    /// D-15: until when the lease is proven alive, in caller nanoseconds (the
    /// clock of ``at_ns``): the receipt of the last primary-path success plus
    /// its lead floor. ``None`` when nothing is proven (before the first
    /// success, and on the fallback path). +infinity (the sum overflowed) is
    /// ``leasebeat.INFINITE_NS`` (``2**64 - 1``, an int no monotonic clock
    /// reaches), so ``now_ns >= proven_until_ns`` is a correct jeopardy test.
    #[getter]
    fn proven_until_ns(&self) -> Option<u64> {
        self.inner.proven_until_ns
    }

    /// The deciding success's ``expires_at_ms`` (server clock, ms since the
    /// epoch), when this decision answers a success that carried it; else None.
    #[getter]
    fn expires_at_ms(&self) -> Option<u64> {
        self.inner.expires_at_ms
    }

    /// The deciding success's ``remaining_ttl_ms``, when this decision answers
    /// a success that carried it; else None.
    #[getter]
    fn remaining_ttl_ms(&self) -> Option<u64> {
        self.inner.remaining_ttl_ms
    }

    /// True when this decision stops the heartbeat.
    #[getter]
    fn is_stop(&self) -> bool {
        matches!(self.inner.next, Next::Stop(_))
    }

    /// The emitted-decision object of the scenario format as a new dict:
    /// ``next``, ``at`` (ms: int, float with up to 6 decimals, or "inf"),
    /// ``key``, ``key_index``, ``reason``, ``mode``, ``numbers`` (ints, "inf",
    /// "-inf") and ``warnings``, and where they apply ``proven_until`` (ms, or
    /// "inf"), ``expires_at_ms`` and ``remaining_ttl_ms``. Exactly the core's
    /// emitted-decision object, every integer exact (P-9: parsed from the
    /// core's exact JSON text, so a retry window below -2**63 stays an int).
    fn to_json<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let parsed = py
            .import("json")?
            .call_method1("loads", (self.inner.to_json_string(),))?;
        Ok(parsed.cast_into::<PyDict>()?)
    }

    /// ``to_json()`` as one compact JSON line (members sorted by name, as the core emits them).
    fn to_json_str(&self) -> String {
        self.inner.to_json_string()
    }

    fn __repr__(&self) -> String {
        let d = &self.inner;
        let mut parts = Vec::new();
        match d.next {
            Next::Send(kind) => {
                parts.push(format!("next='{}'", kind.as_str()));
                match d.at_ns {
                    Some(at) => parts.push(format!("at_ns={at}")),
                    None => parts.push("at_ns=None".into()),
                }
                if let Some(k) = d.key {
                    parts.push(format!("key_use='{}'", k.as_str()));
                }
                if let Some(i) = d.key_index {
                    parts.push(format!("key_index={i}"));
                }
            }
            Next::Stop(r) => {
                parts.push("next='stop'".into());
                parts.push(format!("reason='{}'", r.as_str()));
            }
        }
        if let Some(m) = d.mode {
            parts.push(format!("mode='{}'", m.as_str()));
        }
        if let Some(r) = &d.reservation_id {
            parts.push(format!("reservation_id={}", py_str(r)));
        }
        parts.push(format!("outcome='{}'", d.outcome.as_str()));
        if !d.warnings.is_empty() {
            let w: Vec<String> = d
                .warnings
                .iter()
                .map(|w| format!("'{}'", w.as_str()))
                .collect();
            parts.push(format!("warnings=({},)", w.join(", ")));
        }
        parts.push(format!(
            "numbers={}",
            PyNumbers { inner: d.numbers }.__repr__()
        ));
        if let Some(p) = d.proven_until_ns {
            parts.push(format!("proven_until_ns={p}"));
        }
        if let Some(e) = d.expires_at_ms {
            parts.push(format!("expires_at_ms={e}"));
        }
        if let Some(r) = d.remaining_ttl_ms {
            parts.push(format!("remaining_ttl_ms={r}"));
        }
        if let Some(detail) = &d.detail {
            parts.push(format!("detail={}", py_str(detail)));
        }
        format!("Decision({})", parts.join(", "))
    }

    fn __hash__(&self) -> u64 {
        hash_of(format!("{:?}", self.inner))
    }
}

// ------------------------------------------------------------------ Attempt

/// One attempt the caller must send (or has sent): a create or an extend.
///
/// Send ``body`` as the exact JSON request body, with ``key`` as the
/// ``X-Idempotency-Key`` header (the body carries the same key). A same-key
/// retry has a byte-identical body.
#[pyclass(frozen, eq, module = "leasebeat", name = "Attempt")]
#[derive(Clone, PartialEq)]
pub struct PyAttempt {
    pub inner: Attempt,
}

#[pymethods]
impl PyAttempt {
    /// Identifies this attempt in handle_sent/handle_response/handle_failure; 1 for the first.
    #[getter]
    fn id(&self) -> u64 {
        self.inner.id
    }
    /// AttemptKind.CREATE or AttemptKind.EXTEND.
    #[getter]
    fn kind<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        member(py, E::AttemptKind, self.inner.kind.as_str())
    }
    /// When to send it, in caller nanoseconds; None = +infinity (never).
    #[getter]
    fn due_ns(&self) -> Option<u64> {
        self.inner.due_ns
    }
    /// The idempotency key (header X-Idempotency-Key and the body's idempotency_key).
    #[getter]
    fn key(&self) -> String {
        self.inner.key.clone()
    }
    /// 1 for the first key of the lease, 2 for the next new one, ...
    #[getter]
    fn key_index(&self) -> u32 {
        self.inner.key_index
    }
    /// KeyUse.NEW or KeyUse.SAME (the previous attempt's key and body).
    #[getter]
    fn key_use<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        member(py, E::KeyUse, self.inner.key_use.as_str())
    }
    /// The exact JSON request body (bytes).
    #[getter]
    fn body<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.inner.body)
    }
    /// When the caller reported sending it (nanoseconds), or None if not yet sent.
    #[getter]
    fn sent_ns(&self) -> Option<u64> {
        self.inner.sent_ns
    }
    /// True for the single immediate retry a zero retry window allows (HB-27).
    #[getter]
    fn is_zero_window_retry(&self) -> bool {
        self.inner.is_zero_window_retry()
    }

    fn __repr__(&self) -> String {
        let a = &self.inner;
        format!(
            "Attempt(id={}, kind='{}', due_ns={}, key={}, key_index={}, key_use='{}', sent_ns={}, body={})",
            a.id,
            a.kind.as_str(),
            a.due_ns.map_or("None".into(), |d| d.to_string()),
            py_str(&a.key),
            a.key_index,
            a.key_use.as_str(),
            a.sent_ns.map_or("None".into(), |d| d.to_string()),
            bytes_repr(&a.body),
        )
    }

    fn __hash__(&self) -> u64 {
        hash_of(format!("{:?}", self.inner))
    }
}

/// A Python-style repr of a str (single quotes).
fn py_str(s: &str) -> String {
    let mut out = String::from("'");
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

fn bytes_repr(b: &[u8]) -> String {
    let mut s = String::from("b'");
    for &c in b {
        match c {
            b'\\' => s.push_str("\\\\"),
            b'\'' => s.push_str("\\'"),
            0x20..=0x7e => s.push(c as char),
            _ => s.push_str(&format!("\\x{c:02x}")),
        }
    }
    s.push('\'');
    s
}

// ------------------------------------------------------------------- Action

/// What the core asks for, as plain data.
#[derive(Clone, PartialEq)]
pub enum ActionData {
    /// Send this attempt.
    Send(Attempt),
    /// The attempt is in flight.
    Await(Attempt),
    /// Stopped for good.
    Stop(StopReason),
}

/// What the caller must do now (the result of ``Heartbeat.poll_action()``).
///
/// ``action`` is ActionKind.SEND (send ``attempt`` at ``due_ns``, then call
/// ``handle_sent``), ActionKind.AWAIT_OUTCOME (the attempt is in flight: report
/// its outcome) or ActionKind.STOP (stopped for good: see ``reason``). The
/// attempt's fields are repeated on the action for convenience; they are None
/// for a stop.
#[pyclass(frozen, eq, module = "leasebeat", name = "Action")]
#[derive(Clone, PartialEq)]
pub struct PyAction {
    pub inner: ActionData,
}

impl PyAction {
    fn attempt_ref(&self) -> Option<&Attempt> {
        match &self.inner {
            ActionData::Send(a) | ActionData::Await(a) => Some(a),
            ActionData::Stop(_) => None,
        }
    }
}

#[pymethods]
impl PyAction {
    /// ActionKind.SEND, ActionKind.AWAIT_OUTCOME or ActionKind.STOP.
    #[getter]
    fn action<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let v = match self.inner {
            ActionData::Send(_) => "send",
            ActionData::Await(_) => "await_outcome",
            ActionData::Stop(_) => "stop",
        };
        member(py, E::ActionKind, v)
    }
    /// The attempt to send or in flight (an Attempt), or None for a stop.
    #[getter]
    fn attempt(&self) -> Option<PyAttempt> {
        self.attempt_ref().map(|a| PyAttempt { inner: a.clone() })
    }
    /// The StopReason for a stop, else None.
    #[getter]
    fn reason<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        match self.inner {
            ActionData::Stop(r) => member(py, E::StopReason, r.as_str()).map(Some),
            _ => Ok(None),
        }
    }
    /// True for ActionKind.SEND.
    #[getter]
    fn is_send(&self) -> bool {
        matches!(self.inner, ActionData::Send(_))
    }
    /// True for ActionKind.STOP.
    #[getter]
    fn is_stop(&self) -> bool {
        matches!(self.inner, ActionData::Stop(_))
    }
    /// The attempt's AttemptKind (create or extend), or None for a stop.
    #[getter]
    fn kind<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        opt_member(
            py,
            E::AttemptKind,
            self.attempt_ref().map(|a| a.kind.as_str()),
        )
    }
    /// The attempt id, or None for a stop.
    #[getter]
    fn attempt_id(&self) -> Option<u64> {
        self.attempt_ref().map(|a| a.id)
    }
    /// The attempt's due time in nanoseconds; None for +infinity (never) or a stop.
    #[getter]
    fn due_ns(&self) -> Option<u64> {
        self.attempt_ref().and_then(|a| a.due_ns)
    }
    /// The attempt's idempotency key, or None for a stop.
    #[getter]
    fn key(&self) -> Option<String> {
        self.attempt_ref().map(|a| a.key.clone())
    }
    /// The attempt's key index, or None for a stop.
    #[getter]
    fn key_index(&self) -> Option<u32> {
        self.attempt_ref().map(|a| a.key_index)
    }
    /// The attempt's KeyUse, or None for a stop.
    #[getter]
    fn key_use<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        opt_member(
            py,
            E::KeyUse,
            self.attempt_ref().map(|a| a.key_use.as_str()),
        )
    }
    /// The attempt's exact JSON request body, or None for a stop.
    #[getter]
    fn body<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyBytes>> {
        self.attempt_ref().map(|a| PyBytes::new(py, &a.body))
    }

    fn __repr__(&self) -> String {
        match &self.inner {
            ActionData::Send(a) => format!(
                "Action(action='send', attempt={})",
                PyAttempt { inner: a.clone() }.__repr__()
            ),
            ActionData::Await(a) => format!(
                "Action(action='await_outcome', attempt={})",
                PyAttempt { inner: a.clone() }.__repr__()
            ),
            ActionData::Stop(r) => format!("Action(action='stop', reason='{}')", r.as_str()),
        }
    }

    fn __hash__(&self) -> u64 {
        match &self.inner {
            ActionData::Send(a) => hash_of(("send", format!("{a:?}"))),
            ActionData::Await(a) => hash_of(("await", format!("{a:?}"))),
            ActionData::Stop(r) => hash_of(("stop", r.as_str())),
        }
    }
}

// ------------------------------------------------------- arithmetic results

/// The primary schedule from one success (result of ``primary_schedule``).
/// Durations in ms; ``float('inf')`` is +infinity.
#[pyclass(frozen, eq, module = "leasebeat", name = "PrimarySchedule")]
#[derive(Clone, PartialEq)]
pub struct PyPrimarySchedule {
    pub inner: PrimarySchedule,
}

#[pymethods]
impl PyPrimarySchedule {
    /// max(0, remaining_ttl_ms - rtt); 0 when timing is unknown (HB-12).
    #[getter]
    fn lead_floor<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        duration(py, self.inner.lead_floor)
    }
    /// max(request_timeout_ms, 1000, 2 x max_rtt); inf when unbounded.
    #[getter]
    fn attempt_budget<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        duration(py, self.inner.attempt_budget)
    }
    /// max(1000, 2 x max_rtt).
    #[getter]
    fn safety_margin<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        duration(py, self.inner.safety_margin)
    }
    /// 2 x attempt_budget + safety_margin.
    #[getter]
    fn retry_reserve<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        duration(py, self.inner.retry_reserve)
    }
    /// max(0, lead_floor - retry_reserve): the next beat is due this long after receipt.
    #[getter]
    fn next_delay<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        duration(py, self.inner.next_delay)
    }
    fn __repr__(&self) -> String {
        let s = &self.inner;
        let d = |v: u64| py_num(Num::from_ms(v));
        format!(
            "PrimarySchedule(lead_floor={}, attempt_budget={}, safety_margin={}, retry_reserve={}, next_delay={})",
            d(s.lead_floor),
            d(s.attempt_budget),
            d(s.safety_margin),
            d(s.retry_reserve),
            d(s.next_delay)
        )
    }
    fn __hash__(&self) -> u64 {
        let s = &self.inner;
        hash_of((
            s.lead_floor,
            s.attempt_budget,
            s.safety_margin,
            s.retry_reserve,
            s.next_delay,
        ))
    }
}

/// What the primary path may do after a transient failure (result of
/// ``retry_window``): ``lead`` (ms), ``window`` (ms; may be negative, or
/// ``float('-inf')`` when the budget is unbounded) and ``delay`` (ms until the
/// same-key retry, or None when the window is negative: stop).
#[pyclass(frozen, eq, module = "leasebeat", name = "RetryWindow")]
#[derive(Clone, PartialEq)]
pub struct PyRetryWindow {
    pub inner: RetryWindow,
}

#[pymethods]
impl PyRetryWindow {
    /// max(0, lead_floor - elapsed): the current lead estimate.
    #[getter]
    fn lead<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        duration(py, self.inner.lead)
    }
    /// lead - attempt_budget - safety_margin, not clamped; -inf when unbounded.
    #[getter]
    fn window<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        num(py, self.inner.window)
    }
    /// min(30000, lead / 4, window) when window >= 0, else None (stop).
    #[getter]
    fn delay(&self) -> Option<u64> {
        self.inner.delay
    }
    fn __repr__(&self) -> String {
        let r = &self.inner;
        format!(
            "RetryWindow(lead={}, window={}, delay={})",
            py_num(Num::from_ms(r.lead)),
            py_num(r.window),
            r.delay.map_or("None".into(), |d| d.to_string())
        )
    }
    fn __hash__(&self) -> u64 {
        let r = &self.inner;
        hash_of((r.lead, r.window, r.delay))
    }
}

/// The fallback cadence chosen after an extension success (result of
/// ``fallback_cadence``): ``cadence`` in ms (never below 1000) and ``hold``
/// (True when the hold branch was taken: the extension budget will deplete).
#[pyclass(frozen, eq, module = "leasebeat", name = "FallbackCadence")]
#[derive(Clone, PartialEq)]
pub struct PyFallbackCadence {
    pub inner: FallbackCadence,
}

#[pymethods]
impl PyFallbackCadence {
    /// The delay between beats in ms, never below 1000.
    #[getter]
    fn cadence(&self) -> u64 {
        self.inner.cadence
    }
    /// True when the "hold" branch was taken.
    #[getter]
    fn hold(&self) -> bool {
        self.inner.hold
    }
    fn __repr__(&self) -> String {
        format!(
            "FallbackCadence(cadence={}, hold={})",
            self.inner.cadence,
            if self.inner.hold { "True" } else { "False" }
        )
    }
    fn __hash__(&self) -> u64 {
        hash_of((self.inner.cadence, self.inner.hold))
    }
}
