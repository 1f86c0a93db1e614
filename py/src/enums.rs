//! String-valued enums (`class X(str, enum.Enum)`), built once at module
//! initialization with the functional `enum.Enum` API. Members compare equal
//! to their stable strings, e.g. `StopReason.CANCELLED == "cancelled"`.

use leasebeat::{
    AttemptKind, KeyUse, Mode, OutcomeClass, SettleClass, SettleMode, SettleOutcome, SettleWarning,
    StopReason, TransportFailure, Warning,
};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyList, PyType};

/// The enums of the module.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum E {
    StopReason,
    Mode,
    KeyUse,
    AttemptKind,
    Next,
    OutcomeClass,
    DecisionWarning,
    TransportFailure,
    ActionKind,
    SettleOutcome,
    SettleMode,
    SettleNext,
    SettleClass,
    SettleWarning,
    SettleActionKind,
}

const ALL: [E; 15] = [
    E::StopReason,
    E::Mode,
    E::KeyUse,
    E::AttemptKind,
    E::Next,
    E::OutcomeClass,
    E::DecisionWarning,
    E::TransportFailure,
    E::ActionKind,
    E::SettleOutcome,
    E::SettleMode,
    E::SettleNext,
    E::SettleClass,
    E::SettleWarning,
    E::SettleActionKind,
];

fn settle_class_values() -> Vec<&'static str> {
    // Exhaustive: a new core class fails to compile here until listed.
    let all = |c: SettleClass| match c {
        SettleClass::Start
        | SettleClass::Restart
        | SettleClass::Persisted
        | SettleClass::PersistFailed
        | SettleClass::Sent
        | SettleClass::Success
        | SettleClass::Ambiguous
        | SettleClass::Transport
        | SettleClass::ServerError
        | SettleClass::Throttled
        | SettleClass::Expired
        | SettleClass::Auth
        | SettleClass::Rejected
        | SettleClass::Unclassified => c.as_str(),
    };
    [
        SettleClass::Start,
        SettleClass::Restart,
        SettleClass::Persisted,
        SettleClass::PersistFailed,
        SettleClass::Sent,
        SettleClass::Success,
        SettleClass::Ambiguous,
        SettleClass::Transport,
        SettleClass::ServerError,
        SettleClass::Throttled,
        SettleClass::Expired,
        SettleClass::Auth,
        SettleClass::Rejected,
        SettleClass::Unclassified,
    ]
    .into_iter()
    .map(all)
    .collect()
}

fn settle_warning_values() -> Vec<&'static str> {
    let all = |w: SettleWarning| match w {
        SettleWarning::PersistFailed
        | SettleWarning::RetryAfterUnusable
        | SettleWarning::RetryAfterCapped => w.as_str(),
    };
    [
        SettleWarning::PersistFailed,
        SettleWarning::RetryAfterUnusable,
        SettleWarning::RetryAfterCapped,
    ]
    .into_iter()
    .map(all)
    .collect()
}

fn outcome_values() -> Vec<&'static str> {
    // Exhaustive: a new core class fails to compile here until listed.
    let all = |o: OutcomeClass| match o {
        OutcomeClass::Success
        | OutcomeClass::Ambiguous
        | OutcomeClass::TransportFailure
        | OutcomeClass::ServerError
        | OutcomeClass::Throttled
        | OutcomeClass::Permanent
        | OutcomeClass::Rejected
        | OutcomeClass::Unexpected
        | OutcomeClass::Cancelled => o.as_str(),
    };
    [
        OutcomeClass::Success,
        OutcomeClass::Ambiguous,
        OutcomeClass::TransportFailure,
        OutcomeClass::ServerError,
        OutcomeClass::Throttled,
        OutcomeClass::Permanent,
        OutcomeClass::Rejected,
        OutcomeClass::Unexpected,
        OutcomeClass::Cancelled,
    ]
    .into_iter()
    .map(all)
    .collect()
}

fn spec(e: E) -> (&'static str, Vec<&'static str>, &'static str) {
    match e {
        E::StopReason => (
            "StopReason",
            StopReason::ALL.iter().map(|r| r.as_str()).collect(),
            "Why a heartbeat stopped. The values are the stable strings shared by every\n\
             language binding (e.g. \"retry_window_exhausted\"); members compare equal to them.",
        ),
        E::Mode => (
            "Mode",
            vec![Mode::Primary.as_str(), Mode::Fallback.as_str()],
            "Which algorithm decided: \"primary\" (the response carried remaining_ttl_ms)\n\
             or \"fallback\" (it did not; the non-normative measured-grant fallback).",
        ),
        E::KeyUse => (
            "KeyUse",
            vec![KeyUse::New.as_str(), KeyUse::Same.as_str()],
            "Whether an attempt uses a new idempotency key (\"new\", a new logical request)\n\
             or exactly the previous attempt's key and body (\"same\", a retry).",
        ),
        E::AttemptKind => (
            "AttemptKind",
            vec![AttemptKind::Create.as_str(), AttemptKind::Extend.as_str()],
            "The request an attempt makes: \"create\" (POST /v1/reservations) or \"extend\"\n\
             (POST /v1/reservations/{id}/extend).",
        ),
        E::Next => (
            "Next",
            vec!["create", "extend", "stop"],
            "What a decision says to do next: send a \"create\" (a create retry) or an\n\
             \"extend\" attempt, or \"stop\" for good (see Decision.reason).",
        ),
        E::OutcomeClass => (
            "OutcomeClass",
            outcome_values(),
            "How the core classified the outcome that led to a decision (\"success\",\n\
             \"ambiguous\", \"transport_failure\", \"server_error\", \"throttled\",\n\
             \"permanent\", \"rejected\", \"unexpected\", \"cancelled\").",
        ),
        E::DecisionWarning => (
            "DecisionWarning",
            vec![Warning::ExtensionBudgetDepleting.as_str()],
            "A warning attached to a decision (stable strings). Only\n\
             \"extension_budget_depleting\" exists: the fallback holds a fixed cadence and\n\
             the server's extension budget will deplete.",
        ),
        E::TransportFailure => (
            "TransportFailure",
            vec![
                TransportFailure::Timeout.as_str(),
                TransportFailure::Connect.as_str(),
                TransportFailure::Reset.as_str(),
            ],
            "A transport failure of one attempt (no HTTP response observed): \"timeout\"\n\
             (the enforced per-attempt timeout fired), \"connect\" or \"reset\".",
        ),
        E::ActionKind => (
            "ActionKind",
            vec!["send", "await_outcome", "stop"],
            "What poll_action() asks for: \"send\" the attempt (at its due time), \"await_outcome\"\n\
             of the attempt in flight, or \"stop\" (the heartbeat has stopped for good).",
        ),
        E::SettleOutcome => (
            "SettleOutcome",
            SettleOutcome::ALL.iter().map(|o| o.as_str()).collect(),
            "How a settlement ended: \"committed\", \"applied\" (the event fallback),\n\
             \"released\", \"rejected\" (ST-7), \"auth_failed\", \"unclassified\",\n\
             \"exhausted\", \"expired_unrecorded\" (the usage is NOT recorded) or\n\
             \"no_actual\" (nothing was sent, ST-10).",
        ),
        E::SettleMode => (
            "SettleMode",
            vec![
                SettleMode::Commit.as_str(),
                SettleMode::Event.as_str(),
                SettleMode::Release.as_str(),
            ],
            "A settlement's mode, also an attempt's endpoint: \"commit\"\n\
             (POST /v1/reservations/{id}/commit), \"event\" (POST /v1/events, the\n\
             expired-commit fallback) or \"release\".",
        ),
        E::SettleNext => (
            "SettleNext",
            vec!["persist", "commit", "event", "release", "wait", "done"],
            "What a settlement decision says to do next: \"persist\" the record, send the\n\
             \"commit\", the \"event\" or the \"release\", \"wait\" for the outcome in\n\
             flight, or \"done\".",
        ),
        E::SettleClass => (
            "SettleClass",
            settle_class_values(),
            "How the event behind a settlement decision was classified (\"start\",\n\
             \"persisted\", \"success\", \"ambiguous\", \"throttled\", \"expired\", ...).",
        ),
        E::SettleWarning => (
            "SettleWarning",
            settle_warning_values(),
            "A warning of a settlement decision: \"persist_failed\" (the request goes\n\
             anyway, SP-3), \"retry_after_unusable\" or \"retry_after_capped\" (ST-4).",
        ),
        E::SettleActionKind => (
            "SettleActionKind",
            vec!["persist", "send", "wait", "done"],
            "What Settlement.poll_action() asks for: \"persist\" the record (then\n\
             handle_persisted), \"send\" the attempt at its due time, \"wait\" for the\n\
             outcome of the attempt in flight, or \"done\".",
        ),
    }
}

/// One enum: its class and its members with their values, in `spec` order.
struct Table {
    class: Py<PyType>,
    members: Vec<(&'static str, Py<PyAny>)>,
}

static TABLES: PyOnceLock<Vec<Table>> = PyOnceLock::new();

fn build(py: Python<'_>) -> PyResult<Vec<Table>> {
    let enum_cls = py.import("enum")?.getattr("Enum")?;
    let str_type = py.get_type::<pyo3::types::PyString>();
    let mut out = Vec::with_capacity(ALL.len());
    for e in ALL {
        let (name, values, doc) = spec(e);
        let members = PyList::empty(py);
        for v in &values {
            members.append((v.to_uppercase(), *v))?;
        }
        let kwargs = PyDict::new(py);
        kwargs.set_item("module", "leasebeat")?;
        kwargs.set_item("qualname", name)?;
        kwargs.set_item("type", &str_type)?;
        let cls = enum_cls.call((name, members), Some(&kwargs))?;
        cls.setattr("__doc__", doc)?;
        // str(member) and f"{member}" give the stable string, as StrEnum does.
        cls.setattr("__str__", str_type.getattr("__str__")?)?;
        cls.setattr("__format__", str_type.getattr("__format__")?)?;
        // The members, looked up once: calling an Enum class per lookup
        // costs ~400 ns, a cached member is a reference count.
        let members = values
            .into_iter()
            .map(|v| Ok((v, cls.call1((v,))?.unbind())))
            .collect::<PyResult<Vec<_>>>()?;
        out.push(Table {
            class: cls.cast_into::<PyType>().map_err(PyErr::from)?.unbind(),
            members,
        });
    }
    Ok(out)
}

fn table(py: Python<'_>, e: E) -> PyResult<&'static Table> {
    let idx = ALL.iter().position(|x| *x == e).unwrap_or_default();
    TABLES
        .get_or_try_init(py, || build(py))?
        .get(idx)
        .ok_or_else(|| pyo3::exceptions::PyRuntimeError::new_err("enum table incomplete"))
}

/// The class of enum `e`.
pub fn class(py: Python<'_>, e: E) -> PyResult<Bound<'_, PyType>> {
    Ok(table(py, e)?.class.bind(py).clone())
}

/// The member of enum `e` whose value is `value`.
pub fn member<'py>(py: Python<'py>, e: E, value: &str) -> PyResult<Bound<'py, PyAny>> {
    let t = table(py, e)?;
    match t.members.iter().find(|(v, _)| *v == value) {
        Some((_, m)) => Ok(m.bind(py).clone()),
        None => t.class.bind(py).call1((value,)),
    }
}

/// Adds every enum class to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    for e in ALL {
        m.add(spec(e).0, class(m.py(), e)?)?;
    }
    Ok(())
}
