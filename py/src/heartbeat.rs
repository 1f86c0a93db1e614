//! The `Heartbeat` class: the core state machine behind a mutex.
//!
//! Thread safety: the class is `frozen` and holds a `std::sync::Mutex`. The
//! lock is taken only around pure Rust calls into the core (which never call
//! back into Python and never block), and released before any Python object
//! is built, so concurrent calls serialize and cannot deadlock, not even when
//! a garbage-collection callback re-enters the same heartbeat.

use std::sync::Mutex;

use leasebeat::{
    Action, AdoptedCreate, Config, CreateOutcome, DEFAULT_TTL_MS, Error, Heartbeat, Response,
    SequentialKeys, TransportFailure,
};
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString, PyType};

use crate::convert::{
    from_json_object, to_bytes, to_headers, to_json_object, to_u16_status, to_u64,
};
use crate::enums::{E, member};
use crate::errors::{core_error, invalid_argument, type_error};
use crate::types::{ActionData, PyAction, PyAttempt, PyDecision};

/// The heartbeat of one reservation: a sans-IO state machine.
///
/// ``ttl_ms`` is the requested lease length (the create's ``ttl_ms`` and every
/// extension's ``extend_by_ms``), 1000..=86400000. ``request_timeout_ms`` is the
/// enforced upper bound of one complete attempt; None means unknown/unbounded
/// (the attempt budget is then +infinity). ``create_request`` is a dict of
/// further members of the create request body (``subject``, ``action``,
/// ``estimate``, ...; not ``idempotency_key`` nor ``ttl_ms``). ``key_prefix``
/// makes keys deterministic (``"<prefix>1"``, ``"<prefix>2"``, ...) for tests;
/// by default keys are random UUIDv4.
///
/// It starts with a create attempt; ``Heartbeat.for_reservation(...)`` instead
/// heartbeats a reservation created elsewhere, starting with an immediate
/// extension. Loop: ``poll_action()`` says what to send
/// and when; call ``handle_sent(attempt_id, now_ns)`` when you send it, then
/// ``handle_response(...)`` or ``handle_failure(...)`` with the outcome; each
/// returns a Decision. ``cancel(now_ns)`` ends it. Every ``now_ns`` is a
/// ``time.monotonic_ns()`` reading (any monotonic nanosecond clock) that never
/// goes backwards. A call that raises changes nothing.
///
/// Thread-safe: calls from several threads serialize on an internal lock;
/// every call is fast and never blocks, so it is fine to call from asyncio code.
#[pyclass(frozen, module = "leasebeat", name = "Heartbeat")]
pub struct PyHeartbeat {
    pub(crate) inner: Mutex<Heartbeat>,
}

/// `ttl_ms` with a strict conversion.
pub struct TtlMs(u64);

impl<'a, 'py> FromPyObject<'a, 'py> for TtlMs {
    type Error = PyErr;
    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        to_u64(&obj.to_owned(), "ttl_ms").map(TtlMs)
    }
}

impl PyHeartbeat {
    fn with<R>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut Heartbeat) -> Result<R, Error>,
    ) -> PyResult<R> {
        let result = {
            let mut guard = self.inner.lock().map_err(|_| {
                PyRuntimeError::new_err("the heartbeat is unusable after an internal panic")
            })?;
            f(&mut guard)
        };
        result.map_err(|e| core_error(py, e))
    }

    fn read<R>(&self, f: impl FnOnce(&Heartbeat) -> R) -> PyResult<R> {
        let guard = self.inner.lock().map_err(|_| {
            PyRuntimeError::new_err("the heartbeat is unusable after an internal panic")
        })?;
        Ok(f(&guard))
    }
}

/// `request_timeout_ms`: None (or absent) = unknown/unbounded, else a u64.
fn timeout_from(v: Option<&Bound<'_, PyAny>>) -> PyResult<Option<u64>> {
    match v {
        Some(t) if !t.is_none() => Ok(Some(to_u64(t, "request_timeout_ms")?)),
        _ => Ok(None),
    }
}

/// `key_prefix`: None (or absent) = random UUIDv4 keys, else a str.
fn key_prefix_from(v: Option<&Bound<'_, PyAny>>) -> PyResult<Option<String>> {
    match v.filter(|k| !k.is_none()) {
        Some(k) => Ok(Some(
            k.cast::<PyString>()
                .map_err(|_| type_error("key_prefix must be a str or None"))?
                .to_str()?
                .to_owned(),
        )),
        None => Ok(None),
    }
}

/// The configuration shared by `Heartbeat(...)` and `Heartbeat.adopt_create(...)`.
fn config_from(
    ttl_ms: TtlMs,
    request_timeout_ms: Option<&Bound<'_, PyAny>>,
    create_request: Option<&Bound<'_, PyAny>>,
) -> PyResult<Config> {
    let timeout = timeout_from(request_timeout_ms)?;
    let mut config = Config::new(ttl_ms.0, timeout);
    if let Some(cr) = create_request.filter(|c| !c.is_none()) {
        let d = cr
            .cast::<PyDict>()
            .map_err(|_| type_error("create_request must be a dict or None"))?;
        config.create_request = to_json_object(d, "create_request", 1)?;
    }
    Ok(config)
}

fn failure_from(v: &Bound<'_, PyAny>) -> PyResult<TransportFailure> {
    let s = v.cast::<PyString>().map_err(|_| {
        type_error(
            "failure must be a TransportFailure or one of \"timeout\", \"connect\", \"reset\"",
        )
    })?;
    // A TransportFailure member is a str subclass; its value is the string.
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

#[pymethods]
impl PyHeartbeat {
    #[new]
    #[pyo3(signature = (ttl_ms = TtlMs(DEFAULT_TTL_MS), request_timeout_ms = None, *, create_request = None, key_prefix = None))]
    #[pyo3(
        text_signature = "(ttl_ms=60000, request_timeout_ms=None, *, create_request=None, key_prefix=None)"
    )]
    fn new(
        py: Python<'_>,
        ttl_ms: TtlMs,
        request_timeout_ms: Option<&Bound<'_, PyAny>>,
        create_request: Option<&Bound<'_, PyAny>>,
        key_prefix: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let config = config_from(ttl_ms, request_timeout_ms, create_request)?;
        let hb = match key_prefix_from(key_prefix)? {
            Some(p) => Heartbeat::with_key_source(config, Box::new(SequentialKeys::new(p))),
            None => Heartbeat::new(config),
        }
        .map_err(|e| core_error(py, e))?;
        Ok(PyHeartbeat {
            inner: Mutex::new(hb),
        })
    }

    /// A heartbeat for a reservation created elsewhere (e.g. by another
    /// process, or by a create you sent yourself): its first action is an
    /// immediate extension (attempt id 1, key index 1, due at 0) with a new
    /// key, instead of a create. ``reservation_id`` is the reservation's id,
    /// a str of 1..=128 characters; ``ttl_ms``, ``request_timeout_ms`` and
    /// ``key_prefix`` are as for ``Heartbeat(...)`` (there is no
    /// ``create_request``: nothing is created).
    ///
    /// Until that first extension succeeds nothing proves any lead: its
    /// success anchors the schedule as a create's would, and a transient
    /// failure before it stops with ``StopReason.RETRY_WINDOW_EXHAUSTED``.
    /// ``reservation_id`` (the property) is set from the start.
    ///
    /// Raises InvalidArgument (an empty or longer than 128 characters
    /// ``reservation_id``), InvalidConfig (ttl_ms out of range), TypeError
    /// (``reservation_id`` not a str, or a bad type for another argument).
    #[classmethod]
    #[pyo3(signature = (reservation_id, ttl_ms = TtlMs(DEFAULT_TTL_MS), request_timeout_ms = None, *, key_prefix = None))]
    #[pyo3(
        text_signature = "(reservation_id, ttl_ms=60000, request_timeout_ms=None, *, key_prefix=None)"
    )]
    fn for_reservation(
        _cls: &Bound<'_, PyType>,
        py: Python<'_>,
        reservation_id: &Bound<'_, PyAny>,
        ttl_ms: TtlMs,
        request_timeout_ms: Option<&Bound<'_, PyAny>>,
        key_prefix: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let id = reservation_id
            .cast::<PyString>()
            .map_err(|_| type_error("reservation_id must be a str"))?
            .to_str()?
            .to_owned();
        let config = Config::new(ttl_ms.0, timeout_from(request_timeout_ms)?);
        let hb = match key_prefix_from(key_prefix)? {
            Some(p) => Heartbeat::for_reservation_with_key_source(
                config,
                id,
                Box::new(SequentialKeys::new(p)),
            ),
            None => Heartbeat::for_reservation(config, id),
        }
        .map_err(|e| core_error(py, e))?;
        Ok(PyHeartbeat {
            inner: Mutex::new(hb),
        })
    }

    /// Takes over a lease whose create you performed yourself (an SDK's own
    /// HTTP client), with no extra extension: the create's outcome is
    /// classified exactly as if this heartbeat had sent it (HB-15). Returns
    /// ``(heartbeat, first_decision)``.
    ///
    /// ``ttl_ms``, ``request_timeout_ms``, ``create_request`` and
    /// ``key_prefix`` are as for ``Heartbeat(...)``. ``key`` is the
    /// idempotency key your create used (1..=256 characters); it counts as
    /// key 1 and the create as attempt 1. ``received_ns`` is when its outcome
    /// was observed (after the complete body) and ``sent_ns`` when it was
    /// sent, both ``time.monotonic_ns()`` readings (the clock of every later
    /// call); ``sent_ns=None`` means the round trip is unknown (HB-12: the
    /// first beat is then immediate). Give the outcome as exactly one of:
    ///
    /// * ``status`` (with ``headers`` and ``body``, in the forms
    ///   ``handle_response`` takes: a mapping of any case, an
    ///   ``httpx.Headers``-like object, pairs; bytes, str, memoryview...), or
    /// * ``failure`` (a TransportFailure or "timeout", "connect", "reset").
    ///
    /// ``timing_unknown=True`` (with ``status``) marks a response whose round
    /// trip could not be measured although ``sent_ns`` is known (e.g. the
    /// SDK's client retried inside the call), as ``handle_response`` takes
    /// it: the create then proves no lead (HB-12). ``sent_ns=None`` implies
    /// it.
    ///
    /// ``request_body`` is the exact create body you sent (bytes or str; a
    /// JSON object whose ``idempotency_key``, if any, is ``key``): a same-key
    /// create retry resends it byte for byte. Without it a retry sends the
    /// body this heartbeat would have built from ``create_request``.
    ///
    /// Raises TypeError (a wrong type, or not exactly one of ``status`` and
    /// ``failure``), InvalidConfig, InvalidKey (``key`` empty, too long, or
    /// with a CR, LF or other control character: not a header value),
    /// InvalidArgument (a status outside 100..=999, ``sent_ns`` after
    /// ``received_ns``, a ``request_body`` that is not a JSON object with
    /// this key).
    #[classmethod]
    #[pyo3(signature = (ttl_ms = TtlMs(DEFAULT_TTL_MS), request_timeout_ms = None, *, key, received_ns, sent_ns = None, status = None, headers = None, body = None, failure = None, request_body = None, create_request = None, key_prefix = None, timing_unknown = false))]
    #[pyo3(
        text_signature = "(ttl_ms=60000, request_timeout_ms=None, *, key, received_ns, sent_ns=None, status=None, headers=None, body=None, failure=None, request_body=None, create_request=None, key_prefix=None, timing_unknown=False)"
    )]
    #[allow(clippy::too_many_arguments)]
    fn adopt_create<'py>(
        _cls: &Bound<'py, PyType>,
        py: Python<'py>,
        ttl_ms: TtlMs,
        request_timeout_ms: Option<&Bound<'py, PyAny>>,
        key: &Bound<'py, PyAny>,
        received_ns: &Bound<'py, PyAny>,
        sent_ns: Option<&Bound<'py, PyAny>>,
        status: Option<&Bound<'py, PyAny>>,
        headers: Option<&Bound<'py, PyAny>>,
        body: Option<&Bound<'py, PyAny>>,
        failure: Option<&Bound<'py, PyAny>>,
        request_body: Option<&Bound<'py, PyAny>>,
        create_request: Option<&Bound<'py, PyAny>>,
        key_prefix: Option<&Bound<'py, PyAny>>,
        timing_unknown: bool,
    ) -> PyResult<(PyHeartbeat, PyDecision)> {
        let config = config_from(ttl_ms, request_timeout_ms, create_request)?;
        let key = key
            .cast::<PyString>()
            .map_err(|_| type_error("key must be a str"))?
            .to_str()?
            .to_owned();
        let received_ns = to_u64(received_ns, "received_ns")?;
        let sent_ns = sent_ns
            .filter(|s| !s.is_none())
            .map(|s| to_u64(s, "sent_ns"))
            .transpose()?;
        let status = status.filter(|s| !s.is_none());
        let failure = failure.filter(|f| !f.is_none());
        let outcome = match (status, failure) {
            (Some(status), None) => {
                let mut response = Response::new(to_u16_status(status)?);
                response.headers = to_headers(headers)?;
                if let Some(b) = body.filter(|b| !b.is_none()) {
                    response.body = to_bytes(b, "body")?;
                }
                if timing_unknown {
                    response = response.timing_unknown();
                }
                CreateOutcome::Response(response)
            }
            (None, Some(f)) => {
                if headers.is_some_and(|h| !h.is_none())
                    || body.is_some_and(|b| !b.is_none())
                    || timing_unknown
                {
                    return Err(type_error(
                        "headers, body and timing_unknown belong to a response: give them with status, not with failure",
                    ));
                }
                CreateOutcome::Failure(failure_from(f)?)
            }
            _ => {
                return Err(type_error(
                    "give exactly one of status (a response) and failure (no response)",
                ));
            }
        };
        let request_body = request_body
            .filter(|b| !b.is_none())
            .map(|b| to_bytes(b, "request_body"))
            .transpose()?;
        let create = AdoptedCreate {
            key,
            body: request_body,
            sent_ns,
            received_ns,
            outcome,
        };
        let (hb, d) = match key_prefix_from(key_prefix)? {
            Some(p) => Heartbeat::adopt_create_with_key_source(
                config,
                create,
                Box::new(SequentialKeys::new(p)),
            ),
            None => Heartbeat::adopt_create(config, create),
        }
        .map_err(|e| core_error(py, e))?;
        Ok((
            PyHeartbeat {
                inner: Mutex::new(hb),
            },
            PyDecision::new(d),
        ))
    }

    /// What the caller must do now: an Action (send an attempt, await its
    /// outcome, or stop). Does not change anything.
    fn poll_action(&self) -> PyResult<PyAction> {
        let data = self.read(|hb| match hb.poll_action() {
            Action::Send(a) => ActionData::Send(a.clone()),
            Action::AwaitOutcome(a) => ActionData::Await(a.clone()),
            Action::Stop(r) => ActionData::Stop(r),
        })?;
        Ok(PyAction { inner: data })
    }

    /// When the next attempt is due (nanoseconds), if one waits to be sent;
    /// None when stopped, in flight, or due at +infinity.
    fn poll_timeout(&self) -> PyResult<Option<u64>> {
        self.read(|hb| hb.poll_timeout())
    }

    /// Reports that attempt ``attempt_id`` was sent at ``now_ns``. Sending later
    /// than due (a late timer) or earlier (a stalled clock) is accepted.
    ///
    /// Raises NotOutstanding, AlreadySent, Stopped or TimeWentBackwards.
    #[pyo3(signature = (attempt_id, now_ns))]
    fn handle_sent(
        &self,
        py: Python<'_>,
        attempt_id: &Bound<'_, PyAny>,
        now_ns: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let id = to_u64(attempt_id, "attempt_id")?;
        let now = to_u64(now_ns, "now_ns")?;
        self.with(py, |hb| hb.handle_sent(id, now))
    }

    /// Reports the HTTP response to attempt ``attempt_id``, observed at
    /// ``now_ns`` (after its complete body was received), and returns the
    /// Decision.
    ///
    /// ``status`` is the HTTP status (100..=999). ``headers`` is a mapping
    /// (name -> value, or name -> list of values for a repeated header) or an
    /// iterable of (name, value) pairs, with str (UTF-8) or bytes names and
    /// values; pass every header as received (e.g. httpx's
    /// ``response.headers.multi_items()``). ``body`` is the raw body (bytes,
    /// bytearray, memoryview or str, UTF-8 encoded); None is empty.
    /// ``timing_unknown=True`` marks an attempt whose round trip could not be
    /// measured (HB-12).
    ///
    /// Raises NotOutstanding, NotSent, Stopped, TimeWentBackwards or
    /// InvalidArgument (status out of range).
    #[pyo3(signature = (attempt_id, now_ns, status, headers = None, body = None, *, timing_unknown = false))]
    #[allow(clippy::too_many_arguments)]
    fn handle_response(
        &self,
        py: Python<'_>,
        attempt_id: &Bound<'_, PyAny>,
        now_ns: &Bound<'_, PyAny>,
        status: &Bound<'_, PyAny>,
        headers: Option<&Bound<'_, PyAny>>,
        body: Option<&Bound<'_, PyAny>>,
        timing_unknown: bool,
    ) -> PyResult<PyDecision> {
        let id = to_u64(attempt_id, "attempt_id")?;
        let now = to_u64(now_ns, "now_ns")?;
        let status = to_u16_status(status)?;
        let mut response = Response::new(status);
        response.headers = to_headers(headers)?;
        if let Some(b) = body.filter(|b| !b.is_none()) {
            response.body = to_bytes(b, "body")?;
        }
        if timing_unknown {
            response = response.timing_unknown();
        }
        let d = self.with(py, |hb| hb.handle_response(id, response, now).map(Box::new))?;
        Ok(PyDecision::new(d))
    }

    /// Benchmark only (feature `bench`): the call floor of ``handle_response``'s
    /// signature (arguments bound, nothing converted, returns None).
    #[cfg(feature = "bench")]
    #[pyo3(signature = (attempt_id, now_ns, status, headers = None, body = None, *, timing_unknown = false))]
    #[allow(clippy::too_many_arguments)]
    fn _bench_noop(
        &self,
        attempt_id: &Bound<'_, PyAny>,
        now_ns: &Bound<'_, PyAny>,
        status: &Bound<'_, PyAny>,
        headers: Option<&Bound<'_, PyAny>>,
        body: Option<&Bound<'_, PyAny>>,
        timing_unknown: bool,
    ) {
        std::hint::black_box((attempt_id, now_ns, status, headers, body, timing_unknown));
    }

    /// Benchmark only (feature `bench`): ``handle_response``'s argument
    /// conversion and result object without the core's work (returns a copy
    /// of the last decision), to measure the binding's own cost.
    #[cfg(feature = "bench")]
    #[pyo3(signature = (attempt_id, now_ns, status, headers = None, body = None, *, timing_unknown = false))]
    #[allow(clippy::too_many_arguments)]
    fn _bench_null_response(
        &self,
        py: Python<'_>,
        attempt_id: &Bound<'_, PyAny>,
        now_ns: &Bound<'_, PyAny>,
        status: &Bound<'_, PyAny>,
        headers: Option<&Bound<'_, PyAny>>,
        body: Option<&Bound<'_, PyAny>>,
        timing_unknown: bool,
    ) -> PyResult<PyDecision> {
        let id = to_u64(attempt_id, "attempt_id")?;
        let now = to_u64(now_ns, "now_ns")?;
        let status = to_u16_status(status)?;
        let mut response = Response::new(status);
        response.headers = to_headers(headers)?;
        if let Some(b) = body.filter(|b| !b.is_none()) {
            response.body = to_bytes(b, "body")?;
        }
        if timing_unknown {
            response = response.timing_unknown();
        }
        let d = self.with(py, |hb| {
            std::hint::black_box((id, now, &response));
            hb.last_decision()
                .cloned()
                .ok_or_else(|| Error::new(leasebeat::ErrorKind::Stopped, "no decision"))
        })?;
        Ok(PyDecision::new(d))
    }

    /// Reports a transport failure of attempt ``attempt_id`` observed at
    /// ``now_ns``: ``failure`` is a TransportFailure or one of "timeout",
    /// "connect", "reset". Returns the Decision.
    ///
    /// Raises NotOutstanding, NotSent, Stopped, TimeWentBackwards or
    /// InvalidArgument (unknown failure).
    #[pyo3(signature = (attempt_id, now_ns, failure))]
    fn handle_failure(
        &self,
        py: Python<'_>,
        attempt_id: &Bound<'_, PyAny>,
        now_ns: &Bound<'_, PyAny>,
        failure: &Bound<'_, PyAny>,
    ) -> PyResult<PyDecision> {
        let id = to_u64(attempt_id, "attempt_id")?;
        let now = to_u64(now_ns, "now_ns")?;
        let failure = failure_from(failure)?;
        let d = self.with(py, |hb| hb.handle_failure(id, failure, now))?;
        Ok(PyDecision::new(d))
    }

    /// Ends the heartbeat at ``now_ns`` (stop "cancelled") and returns the
    /// Decision. Raises Stopped if it had already stopped, TimeWentBackwards.
    #[pyo3(signature = (now_ns))]
    fn cancel(&self, py: Python<'_>, now_ns: &Bound<'_, PyAny>) -> PyResult<PyDecision> {
        let now = to_u64(now_ns, "now_ns")?;
        let d = self.with(py, |hb| hb.cancel(now))?;
        Ok(PyDecision::new(d))
    }

    /// The configured ttl_ms.
    #[getter]
    fn ttl_ms(&self) -> PyResult<u64> {
        self.read(|hb| hb.config().ttl_ms)
    }

    /// The configured request_timeout_ms (None = unknown/unbounded).
    #[getter]
    fn request_timeout_ms(&self) -> PyResult<Option<u64>> {
        self.read(|hb| hb.config().request_timeout_ms)
    }

    /// A copy of the configured create_request members (a new dict), read
    /// back from the create attempt's body while the create is outstanding;
    /// ``{}`` once it succeeded (the lease keeps no copy of it), for an
    /// adopted create and for ``for_reservation``.
    #[getter]
    fn create_request<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let m = self.read(|hb| hb.create_request().unwrap_or_default())?;
        from_json_object(py, &m)
    }

    /// The reservation id: once a create succeeded, or from the start for a
    /// heartbeat made by ``for_reservation`` (else None).
    #[getter]
    fn reservation_id(&self) -> PyResult<Option<String>> {
        self.read(|hb| hb.reservation_id().map(str::to_owned))
    }

    /// The StopReason once stopped, else None.
    #[getter]
    fn stop_reason<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        let r = self.read(|hb| hb.stop_reason())?;
        r.map(|r| member(py, E::StopReason, r.as_str())).transpose()
    }

    /// True once the heartbeat has stopped (for good).
    #[getter]
    fn is_stopped(&self) -> PyResult<bool> {
        self.read(|hb| hb.stop_reason().is_some())
    }

    /// The Mode of the last success, if any.
    #[getter]
    fn mode<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        let m = self.read(|hb| hb.mode())?;
        m.map(|m| member(py, E::Mode, m.as_str())).transpose()
    }

    /// Largest rtt (ms) over this lease's schema-valid measured successes; 0 before the first.
    #[getter]
    fn max_rtt_ms(&self) -> PyResult<u64> {
        self.read(|hb| hb.max_rtt_ms())
    }

    /// The most recent Decision, if any.
    #[getter]
    fn last_decision(&self) -> PyResult<Option<PyDecision>> {
        self.read(|hb| hb.last_decision().cloned().map(PyDecision::new))
    }

    /// The outstanding Attempt (to send, or in flight), unless stopped.
    #[getter]
    fn attempt(&self) -> PyResult<Option<PyAttempt>> {
        self.read(|hb| hb.attempt().cloned().map(|a| PyAttempt { inner: a }))
    }

    /// The time of the latest event accepted, in nanoseconds (0 before any).
    #[getter]
    fn last_event_ns(&self) -> PyResult<u64> {
        self.read(|hb| hb.last_event_ns())
    }

    fn __repr__(&self) -> PyResult<String> {
        self.read(|hb| {
            let state = match hb.poll_action() {
                Action::Send(a) => format!("send {} #{}", a.kind.as_str(), a.id),
                Action::AwaitOutcome(a) => format!("awaiting {} #{}", a.kind.as_str(), a.id),
                Action::Stop(r) => format!("stopped {}", r.as_str()),
            };
            format!(
                "<Heartbeat ttl_ms={} request_timeout_ms={} reservation_id={} state={:?}>",
                hb.config().ttl_ms,
                hb.config()
                    .request_timeout_ms
                    .map_or("None".into(), |t| t.to_string()),
                hb.reservation_id()
                    .map_or("None".into(), |r| format!("{r:?}")),
                state
            )
        })
    }
}
