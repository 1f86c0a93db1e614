//! The exception hierarchy: `LeaseError` and one subclass per core
//! [`ErrorKind`], plus `RetryAfterError` for [`parse_retry_after`].
//!
//! The classes are built once at module initialization with `type(...)`, so
//! that kinds which are also bad arguments (`InvalidConfig`,
//! `InvalidArgument`, `TimeWentBackwards`) can inherit from both `LeaseError`
//! and the builtin `ValueError`.
//!
//! [`parse_retry_after`]: leasebeat::arith::parse_retry_after

use leasebeat::arith::RetryAfterError;
use leasebeat::{Error, ErrorKind};
use pyo3::exceptions::{PyException, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple, PyType};

/// The exception classes, created once.
pub struct Classes {
    base: Py<PyType>,
    /// In the order of [`ErrorKind::ALL`].
    kinds: Vec<Py<PyType>>,
    retry_after: Py<PyType>,
}

static CLASSES: PyOnceLock<Classes> = PyOnceLock::new();

/// Python class name, extra builtin base (if any) and docstring of a kind.
fn describe(kind: ErrorKind) -> (&'static str, bool, &'static str) {
    // Exhaustive on purpose: a new core kind must be mapped here.
    match kind {
        ErrorKind::InvalidConfig => (
            "InvalidConfig",
            true,
            "The configuration is out of range (e.g. ttl_ms outside 1000..=86400000, or a\n\
             create_request that sets idempotency_key or ttl_ms). Also a ValueError.",
        ),
        ErrorKind::InvalidArgument => (
            "InvalidArgument",
            true,
            "An argument is out of range: a negative or too large integer, an HTTP status\n\
             outside 100..=999, an unknown transport failure, a non-finite float in\n\
             create_request, ... Also a ValueError.",
        ),
        ErrorKind::TimeWentBackwards => (
            "TimeWentBackwards",
            true,
            "An event's time (now_ns) is earlier than the previous event's time. Also a\n\
             ValueError: the caller passed a wrong timestamp. Nothing changed.",
        ),
        ErrorKind::NotOutstanding => (
            "NotOutstanding",
            false,
            "The attempt id named is not the outstanding attempt (a late, duplicate or\n\
             unknown outcome, D-14). Nothing changed.",
        ),
        ErrorKind::NotSent => (
            "NotSent",
            false,
            "An outcome was reported for an attempt that was never marked sent; call\n\
             handle_sent() first. Nothing changed.",
        ),
        ErrorKind::AlreadySent => (
            "AlreadySent",
            false,
            "handle_sent() was called twice for the same attempt. Nothing changed.",
        ),
        ErrorKind::Stopped => (
            "Stopped",
            false,
            "The heartbeat has stopped; a stop is final and every later event is refused.",
        ),
        ErrorKind::InvalidKey => (
            "InvalidKey",
            false,
            "The key source produced an unusable idempotency key (empty, longer than 256\n\
             characters, or already used on this lease).",
        ),
    }
}

fn make_class<'py>(
    py: Python<'py>,
    name: &str,
    bases: Bound<'py, PyTuple>,
    doc: &str,
    attrs: &[(&str, &str)],
) -> PyResult<Py<PyType>> {
    let ns = PyDict::new(py);
    ns.set_item("__doc__", doc)?;
    ns.set_item("__module__", "leasebeat")?;
    ns.set_item("__qualname__", name)?;
    for (k, v) in attrs {
        ns.set_item(*k, *v)?;
    }
    let cls = py
        .get_type::<PyType>()
        .call1((name, bases, ns))?
        .cast_into::<PyType>()
        .map_err(PyErr::from)?;
    Ok(cls.unbind())
}

fn build(py: Python<'_>) -> PyResult<Classes> {
    let exc = py.get_type::<PyException>();
    let value_error = py.get_type::<PyValueError>();
    let base = make_class(
        py,
        "LeaseError",
        PyTuple::new(py, [exc])?,
        "Base class of every error the leasebeat core reports.\n\n\
         Each subclass has a class attribute ``code``: the core's stable error code\n\
         (the same string in every language binding). A call that raises a\n\
         LeaseError changed nothing in the heartbeat.",
        &[("code", "")],
    )?;
    let mut kinds = Vec::with_capacity(ErrorKind::ALL.len());
    for kind in ErrorKind::ALL {
        let (name, also_value_error, doc) = describe(kind);
        let bases = if also_value_error {
            PyTuple::new(
                py,
                [
                    base.bind(py).clone().into_any(),
                    value_error.clone().into_any(),
                ],
            )?
        } else {
            PyTuple::new(py, [base.bind(py).clone().into_any()])?
        };
        let doc = format!("{doc}\n\ncode = {:?}", kind.code());
        kinds.push(make_class(py, name, bases, &doc, &[("code", kind.code())])?);
    }
    let retry_after = make_class(
        py,
        "RetryAfterError",
        PyTuple::new(py, [value_error])?,
        "parse_retry_after() could not use the Retry-After values.\n\n\
         ``reason`` is one of \"missing\", \"multiple\", \"invalid\", \"overflow\".",
        &[("reason", "invalid")],
    )?;
    Ok(Classes {
        base,
        kinds,
        retry_after,
    })
}

/// `LeaseError`, the base class (for the journal's error classes).
pub fn base_class(py: Python<'_>) -> PyResult<Bound<'_, PyType>> {
    Ok(classes(py)?.base.bind(py).clone())
}

/// Builds one exception class (`__module__` = "leasebeat") with class attributes.
pub fn new_class<'py>(
    py: Python<'py>,
    name: &str,
    bases: Bound<'py, PyTuple>,
    doc: &str,
    attrs: &[(&str, &str)],
) -> PyResult<Py<PyType>> {
    make_class(py, name, bases, doc, attrs)
}

/// The classes, created on first use.
pub fn classes(py: Python<'_>) -> PyResult<&'static Classes> {
    CLASSES.get_or_try_init(py, || build(py))
}

/// Adds every exception class to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    let c = classes(py)?;
    m.add("LeaseError", c.base.bind(py))?;
    for (kind, cls) in ErrorKind::ALL.iter().zip(&c.kinds) {
        m.add(describe(*kind).0, cls.bind(py))?;
    }
    m.add("RetryAfterError", c.retry_after.bind(py))?;
    Ok(())
}

fn kind_index(kind: ErrorKind) -> usize {
    ErrorKind::ALL
        .iter()
        .position(|k| *k == kind)
        .unwrap_or_default()
}

/// An exception of the subclass for `kind` with `message`.
pub fn raise_kind(py: Python<'_>, kind: ErrorKind, message: impl Into<String>) -> PyErr {
    let message = message.into();
    match classes(py) {
        Ok(c) => match c.kinds.get(kind_index(kind)) {
            Some(cls) => PyErr::from_type(cls.bind(py).clone(), (message,)),
            None => PyRuntimeError::new_err(message),
        },
        Err(e) => e,
    }
}

/// The Python exception for a core error.
pub fn core_error(py: Python<'_>, e: Error) -> PyErr {
    raise_kind(py, e.kind(), e.message().to_owned())
}

/// `InvalidArgument` (a `LeaseError` and a `ValueError`).
pub fn invalid_argument(py: Python<'_>, message: impl Into<String>) -> PyErr {
    raise_kind(py, ErrorKind::InvalidArgument, message)
}

/// A plain `TypeError`.
pub fn type_error(message: impl Into<String>) -> PyErr {
    PyTypeError::new_err(message.into())
}

/// A `RetryAfterError` with its `reason`.
pub fn retry_after_error(py: Python<'_>, e: RetryAfterError) -> PyErr {
    let message = match e {
        RetryAfterError::Missing => "no Retry-After value",
        RetryAfterError::Multiple => "more than one Retry-After value",
        RetryAfterError::Invalid => "Retry-After is not one delta-seconds value",
        RetryAfterError::Overflow => "Retry-After overflows 64-bit milliseconds",
    };
    let build = || -> PyResult<PyErr> {
        let cls = classes(py)?.retry_after.bind(py);
        let err = cls.call1((message,))?;
        err.setattr("reason", e.as_str())?;
        Ok(PyErr::from_value(err))
    };
    build().unwrap_or_else(|err| err)
}
