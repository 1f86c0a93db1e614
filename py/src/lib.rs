//! `leasebeat._leasebeat`: the Python extension of leasebeat (PyO3, abi3).
//!
//! A thin translation of the Rust core: every rule lives in the core; this
//! crate converts arguments strictly, maps errors to a Python exception
//! hierarchy and exposes immutable value objects. No panic can cross into
//! Python: every argument is validated before the core sees it, and the core
//! itself never panics (S-5).
#![deny(missing_docs)]

#[cfg(feature = "bench")]
mod bench;
mod convert;
mod enums;
mod errors;
mod heartbeat;
mod journal;
mod settlement;
mod types;

use leasebeat::arith;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};

use convert::{duration, to_bytes, to_duration, to_i128, to_u64};
use errors::{retry_after_error, type_error};
use types::{PyFallbackCadence, PyPrimarySchedule, PyRetryWindow};

fn opt<'a, 'py>(v: Option<&'a Bound<'py, PyAny>>) -> Option<&'a Bound<'py, PyAny>> {
    v.filter(|v| !v.is_none())
}

/// The primary schedule from one schema-valid success (HB-03).
///
/// ``remaining_ttl_ms`` from the response; ``rtt_ms`` the rounded-up round trip
/// of the attempt that produced it (None when its timing is unknown);
/// ``request_timeout_ms`` the enforced timeout (None = unbounded); ``max_rtt_ms``
/// the largest rtt over this lease's successes, this one included. Durations
/// may be ``float('inf')``. Returns a PrimarySchedule.
///
/// >>> s = primary_schedule(61500, 1500, 10000, 1500)
/// >>> (s.attempt_budget, s.safety_margin, s.retry_reserve, s.next_delay)
/// (10000, 3000, 23000, 37000)
#[pyfunction]
#[pyo3(signature = (remaining_ttl_ms, rtt_ms, request_timeout_ms, max_rtt_ms))]
fn primary_schedule(
    remaining_ttl_ms: &Bound<'_, PyAny>,
    rtt_ms: Option<&Bound<'_, PyAny>>,
    request_timeout_ms: Option<&Bound<'_, PyAny>>,
    max_rtt_ms: &Bound<'_, PyAny>,
) -> PyResult<PyPrimarySchedule> {
    let remaining = to_duration(remaining_ttl_ms, "remaining_ttl_ms")?;
    let rtt = opt(rtt_ms).map(|v| to_duration(v, "rtt_ms")).transpose()?;
    let timeout = opt(request_timeout_ms)
        .map(|v| to_duration(v, "request_timeout_ms"))
        .transpose()?;
    let max_rtt = to_duration(max_rtt_ms, "max_rtt_ms")?;
    Ok(PyPrimarySchedule {
        inner: arith::primary_schedule(remaining, rtt, timeout, max_rtt),
    })
}

/// The retry window after a transient failure observed ``elapsed_ms``
/// (rounded up) after the receipt of the success that set ``lead_floor_ms``
/// (HB-21/22). Returns a RetryWindow (lead, window, delay).
///
/// >>> r = retry_window(60000, 45000, 7000, 1000)
/// >>> (r.lead, r.window, r.delay)
/// (15000, 7000, 3750)
#[pyfunction]
fn retry_window(
    lead_floor_ms: &Bound<'_, PyAny>,
    elapsed_ms: &Bound<'_, PyAny>,
    attempt_budget_ms: &Bound<'_, PyAny>,
    safety_margin_ms: &Bound<'_, PyAny>,
) -> PyResult<PyRetryWindow> {
    Ok(PyRetryWindow {
        inner: arith::retry_window(
            to_duration(lead_floor_ms, "lead_floor_ms")?,
            to_duration(elapsed_ms, "elapsed_ms")?,
            to_duration(attempt_budget_ms, "attempt_budget_ms")?,
            to_duration(safety_margin_ms, "safety_margin_ms")?,
        ),
    })
}

/// Parses the Retry-After values of one response into milliseconds (P-5, D-11).
///
/// ``values`` holds every value of every header named Retry-After (names
/// compare case-insensitively: filter them before calling): an iterable of str
/// or bytes, or one str/bytes. Exactly one delta-seconds value is accepted
/// (ASCII digits, optional surrounding spaces/tabs). Raises RetryAfterError
/// (a ValueError) with ``reason`` "missing", "multiple", "invalid" or "overflow".
///
/// >>> parse_retry_after([" 2 "])
/// 2000
#[pyfunction]
fn parse_retry_after(py: Python<'_>, values: &Bound<'_, PyAny>) -> PyResult<u64> {
    let list: Vec<Vec<u8>> =
        if values.is_instance_of::<PyString>() || values.is_instance_of::<PyBytes>() {
            vec![to_bytes(values, "a Retry-After value")?]
        } else {
            let iter = values.try_iter().map_err(|_| {
                type_error("values must be an iterable of str or bytes, or one str/bytes")
            })?;
            let mut list = Vec::new();
            for v in iter {
                list.push(to_bytes(&v?, "a Retry-After value")?);
            }
            list
        };
    arith::parse_retry_after(&list).map_err(|e| retry_after_error(py, e))
}

/// ``attempt_budget = max(request_timeout_ms, 1000, 2 x max_rtt_ms)`` in ms;
/// ``float('inf')`` when ``request_timeout_ms`` is None (unbounded) or infinite.
///
/// >>> attempt_budget(10000, 1500), attempt_budget(None, 0)
/// (10000, inf)
#[pyfunction]
fn attempt_budget<'py>(
    py: Python<'py>,
    request_timeout_ms: Option<&Bound<'py, PyAny>>,
    max_rtt_ms: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let timeout = opt(request_timeout_ms)
        .map(|v| to_duration(v, "request_timeout_ms"))
        .transpose()?;
    duration(
        py,
        arith::attempt_budget(timeout, to_duration(max_rtt_ms, "max_rtt_ms")?),
    )
}

/// ``safety_margin = max(1000, 2 x max_rtt_ms)`` in ms (``float('inf')`` on overflow).
///
/// >>> safety_margin(1500)
/// 3000
#[pyfunction]
fn safety_margin<'py>(
    py: Python<'py>,
    max_rtt_ms: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    duration(
        py,
        arith::safety_margin(to_duration(max_rtt_ms, "max_rtt_ms")?),
    )
}

/// ``retry_reserve = 2 x attempt_budget_ms + safety_margin_ms``, saturating
/// (``float('inf')`` on overflow or for an infinite budget).
///
/// >>> retry_reserve(10000, 3000)
/// 23000
#[pyfunction]
fn retry_reserve<'py>(
    py: Python<'py>,
    attempt_budget_ms: &Bound<'py, PyAny>,
    safety_margin_ms: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    duration(
        py,
        arith::retry_reserve(
            to_duration(attempt_budget_ms, "attempt_budget_ms")?,
            to_duration(safety_margin_ms, "safety_margin_ms")?,
        ),
    )
}

/// The fallback's "hold" cadence ``max(1000, min(ttl_ms / 2, 30000))`` (FB-03).
///
/// >>> hold_cadence(60000)
/// 30000
#[pyfunction]
fn hold_cadence(ttl_ms: &Bound<'_, PyAny>) -> PyResult<u64> {
    Ok(arith::hold_cadence(to_duration(ttl_ms, "ttl_ms")?))
}

/// The fallback cadence after an extension success (FB-03), first match wins:
/// grant <= 0: hold; grant >= 0.9 x ttl: clamp(grant / 2, 1000, ttl / 2);
/// 0.75 x elapsed <= grant <= 1.25 x elapsed: hold; otherwise
/// clamp(grant / 2, 1000, ttl / 2). ``grant_ms`` may be negative. Returns a
/// FallbackCadence (cadence, hold).
///
/// >>> fallback_cadence(10000, 30000, 60000)
/// FallbackCadence(cadence=5000, hold=False)
#[pyfunction]
fn fallback_cadence(
    grant_ms: &Bound<'_, PyAny>,
    elapsed_ms: &Bound<'_, PyAny>,
    ttl_ms: &Bound<'_, PyAny>,
) -> PyResult<PyFallbackCadence> {
    Ok(PyFallbackCadence {
        inner: arith::fallback_cadence(
            to_i128(grant_ms, "grant_ms")?,
            to_duration(elapsed_ms, "elapsed_ms")?,
            to_duration(ttl_ms, "ttl_ms")?,
        ),
    })
}

/// FB-04: how many whole cadences to skip after an extension success with a
/// positive grant (``lead_min_ms`` and ``grant_ms`` may be negative).
///
/// >>> fallback_skips(100000, 20000, 10000)
/// 7
#[pyfunction]
fn fallback_skips(
    lead_min_ms: &Bound<'_, PyAny>,
    grant_ms: &Bound<'_, PyAny>,
    cadence_ms: &Bound<'_, PyAny>,
) -> PyResult<u64> {
    Ok(arith::fallback_skips(
        to_i128(lead_min_ms, "lead_min_ms")?,
        to_i128(grant_ms, "grant_ms")?,
        to_duration(cadence_ms, "cadence_ms")?,
    ))
}

/// A nanosecond interval rounded up to whole milliseconds (HB-05/06, P-4).
///
/// >>> ceil_ms(1500000001)
/// 1501
#[pyfunction]
fn ceil_ms(nanos: &Bound<'_, PyAny>) -> PyResult<u64> {
    Ok(arith::ceil_ms(to_u64(nanos, "nanos")?))
}

/// Native core of the ``leasebeat`` package (import ``leasebeat`` instead).
/// Reseeds this thread's key generator from the operating system. The package
/// registers it with ``os.register_at_fork(after_in_child=...)`` on import, so
/// a forked child never draws its parent's idempotency keys; returns False if
/// the operating system's generator failed.
#[pyfunction]
fn _reseed_after_fork() -> bool {
    leasebeat::UuidV4Keys::reseed_after_fork()
}

#[pymodule]
fn _leasebeat(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("DEFAULT_TTL_MS", leasebeat::DEFAULT_TTL_MS)?;
    m.add("MIN_TTL_MS", leasebeat::MIN_TTL_MS)?;
    m.add("MAX_TTL_MS", leasebeat::MAX_TTL_MS)?;
    m.add("MAX_KEY_CHARS", leasebeat::MAX_KEY_CHARS)?;
    m.add("INFINITE_NS", u64::MAX)?;
    enums::register(m)?;
    errors::register(m)?;
    m.add_class::<heartbeat::PyHeartbeat>()?;
    m.add_class::<settlement::PySettlement>()?;
    journal::register_errors(m)?;
    m.add_class::<journal::PyJournal>()?;
    m.add_class::<journal::PyScan>()?;
    m.add_class::<journal::PyReplay>()?;
    m.add_class::<journal::PyQuarantined>()?;
    m.add_class::<journal::PyMigrated>()?;
    m.add_class::<journal::PySkipped>()?;
    m.add_class::<settlement::PySettlementDecision>()?;
    m.add_class::<settlement::PySettlementAction>()?;
    m.add_class::<types::PyDecision>()?;
    m.add_class::<types::PyNumbers>()?;
    m.add_class::<types::PyAttempt>()?;
    m.add_class::<types::PyAction>()?;
    m.add_class::<PyPrimarySchedule>()?;
    m.add_class::<PyRetryWindow>()?;
    m.add_class::<PyFallbackCadence>()?;
    m.add_function(wrap_pyfunction!(primary_schedule, m)?)?;
    m.add_function(wrap_pyfunction!(retry_window, m)?)?;
    m.add_function(wrap_pyfunction!(parse_retry_after, m)?)?;
    m.add_function(wrap_pyfunction!(_reseed_after_fork, m)?)?;
    m.add_function(wrap_pyfunction!(attempt_budget, m)?)?;
    m.add_function(wrap_pyfunction!(safety_margin, m)?)?;
    m.add_function(wrap_pyfunction!(retry_reserve, m)?)?;
    m.add_function(wrap_pyfunction!(hold_cadence, m)?)?;
    m.add_function(wrap_pyfunction!(fallback_cadence, m)?)?;
    m.add_function(wrap_pyfunction!(fallback_skips, m)?)?;
    m.add_function(wrap_pyfunction!(ceil_ms, m)?)?;
    #[cfg(feature = "bench")]
    m.add_function(wrap_pyfunction!(bench::bench_core_decision, m)?)?;
    #[cfg(feature = "bench")]
    m.add_function(wrap_pyfunction!(bench::bench_core_beat, m)?)?;
    #[cfg(feature = "bench")]
    m.add_function(wrap_pyfunction!(bench::bench_core_on, m)?)?;
    #[cfg(feature = "bench")]
    m.add_function(wrap_pyfunction!(bench::bench_sizes, m)?)?;
    Ok(())
}
