//! The settlement vectors (`tests/vectors/settlement/`): parsing and replay
//! through the public [`Settlement`] API.
//!
//! The format is `settlement.md`'s "Vectors" with this project's extensions
//! (documented in `tests/vectors/settlement/README.md`). Besides the expectations,
//! the replay checks the rules on every step, whatever the file expects:
//! every request carries the settlement's first key in its header and body
//! (ST-1, across restarts too), no request goes before its due time, before
//! the acknowledged record's `not_before_ms` on the wall clock (ST-4), or
//! while a persist is unacknowledged (SP-3), at most one terminal success
//! per scenario, and a commit settlement never sends a release (ST-9).

use serde_json::{Map, Value};

use super::{
    FormatError, Mismatch, Replay, bad, body_bytes, mismatch, ms_to_ns, only_keys, parse_recv,
    to_value,
};
use crate::decision::write_exact;
use crate::heartbeat::{Response, TransportFailure};
use crate::json;
use crate::keys::SequentialKeys;
use crate::settlement::{
    Endpoint, Now, RecordUpdate, RetryPolicy, SettleNext, Settlement, SettlementAction,
    SettlementConfig, SettlementDecision, SettlementRecord,
};
use crate::{Error, ns_to_ms_json};

/// The wall clock of a scenario whose steps give none: the heartbeat
/// vectors' server clock, `1785585600000 + at`.
pub const DEFAULT_WALL_BASE_MS: u64 = 1_785_585_600_000;

/// One settlement scenario file.
#[derive(Clone, Debug)]
pub struct SettleScenario {
    /// The scenario id (the file stem).
    pub id: String,
    /// What it shows.
    pub about: String,
    /// The settlement configuration (bodies as the bytes the file gives).
    pub config: SettlementConfig,
    /// The steps, in order.
    pub steps: Vec<SettleStep>,
}

/// One step.
#[derive(Clone, Debug)]
pub struct SettleStep {
    /// Monotonic time, ns.
    pub at_ns: u64,
    /// The wall clock set at this step (Unix ms), if given.
    pub wall_ms: Option<u64>,
    /// What happens.
    pub event: SettleEvent,
    /// The expectations (absent fields are not checked).
    pub expect: Option<Map<String, Value>>,
}

/// What happens at a step.
#[derive(Clone, Debug)]
pub enum SettleEvent {
    /// Build the settlement from `config` (`"start": "commit" | "release"`).
    Start(Endpoint),
    /// The last persist is durable.
    Persisted,
    /// The last persist failed, with this message.
    PersistFailed(String),
    /// The caller sends the attempt to this endpoint.
    Send(Endpoint),
    /// The attempt's response arrives.
    Recv(Response),
    /// The attempt fails in transport.
    Fail(TransportFailure),
    /// All state is dropped; a new settlement is built from the last
    /// acknowledged record, or from these bytes given verbatim.
    Restart(Option<Vec<u8>>),
}

/// Whether a scenario file's text is a settlement vector (its `config` has
/// a `reservation_id`) rather than a heartbeat vector.
pub fn is_settlement(text: &str) -> bool {
    serde_json::from_str::<Value>(text)
        .ok()
        .and_then(|v| v.get("config").map(|c| c.get("reservation_id").is_some()))
        .unwrap_or(false)
}

/// Parses one settlement scenario file's text.
pub fn parse(text: &str) -> Result<SettleScenario, FormatError> {
    let j =
        json::parse(text.as_bytes(), 64).map_err(|e| FormatError(format!("invalid JSON: {e}")))?;
    let v = to_value(&j)?;
    let o = v
        .as_object()
        .ok_or_else(|| FormatError("a scenario is a JSON object".into()))?;
    only_keys(o, "scenario", &["id", "about", "config", "steps"])?;
    let id = o
        .get("id")
        .and_then(Value::as_str)
        .ok_or_else(|| FormatError("missing string \"id\"".into()))?
        .to_owned();
    let about = o
        .get("about")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let cfg = o
        .get("config")
        .and_then(Value::as_object)
        .ok_or_else(|| FormatError("missing object \"config\"".into()))?;
    let config = parse_config(cfg)?;
    let steps_v = o
        .get("steps")
        .and_then(Value::as_array)
        .ok_or_else(|| FormatError("missing array \"steps\"".into()))?;
    let mut steps = Vec::with_capacity(steps_v.len());
    for (i, s) in steps_v.iter().enumerate() {
        let step = parse_step(s).map_err(|e| FormatError(format!("step {i}: {e}")))?;
        let first_ok = matches!(step.event, SettleEvent::Start(_) | SettleEvent::Restart(_));
        if i == 0 && !first_ok {
            return bad("step 0: the first step is a start or a restart");
        }
        if i > 0 && matches!(step.event, SettleEvent::Start(_)) {
            return bad(format!("step {i}: start is only allowed as the first step"));
        }
        steps.push(step);
    }
    Ok(SettleScenario {
        id,
        about,
        config,
        steps,
    })
}

/// A body given in a file: an object (serialized with its exact numbers)
/// or a string (the raw bytes, for bodies that are not JSON objects).
fn given_bytes(v: &Value) -> Result<Vec<u8>, FormatError> {
    match v {
        Value::Object(_) => Ok(body_bytes(v)),
        Value::String(s) if super::number_text(v).is_none() => Ok(s.clone().into_bytes()),
        _ => bad("a body is an object or a string of raw text"),
    }
}

fn parse_config(cfg: &Map<String, Value>) -> Result<SettlementConfig, FormatError> {
    only_keys(
        cfg,
        "config",
        &[
            "reservation_id",
            "base_url",
            "commit",
            "event",
            "release",
            "release_reason",
            "retry",
        ],
    )?;
    let reservation_id = cfg
        .get("reservation_id")
        .and_then(Value::as_str)
        .ok_or_else(|| FormatError("config.reservation_id must be a string".into()))?
        .to_owned();
    let base_url = match cfg.get("base_url") {
        None => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(_) => return bad("config.base_url must be a string"),
    };
    let commit = match cfg.get("commit") {
        None | Some(Value::Null) => None,
        Some(v) => Some(given_bytes(v)?),
    };
    let event = match cfg.get("event") {
        None | Some(Value::Null) => None,
        Some(v) => Some(given_bytes(v)?),
    };
    let release = match cfg.get("release") {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return bad("config.release must be a boolean"),
    };
    let release_reason = match cfg.get("release_reason") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => return bad("config.release_reason must be a string"),
    };
    let mut retry = RetryPolicy::default();
    match cfg.get("retry") {
        None => {}
        Some(Value::Object(r)) => {
            only_keys(r, "config.retry", &["max_attempts", "initial_ms", "max_ms"])?;
            let num = |k: &str| -> Result<Option<u64>, FormatError> {
                match r.get(k) {
                    None => Ok(None),
                    Some(v) => v.as_u64().map(Some).ok_or_else(|| {
                        FormatError(format!("config.retry.{k} must be a non-negative integer"))
                    }),
                }
            };
            if let Some(m) = num("max_attempts")? {
                retry.max_attempts = u32::try_from(m)
                    .map_err(|_| FormatError("config.retry.max_attempts is too large".into()))?;
            }
            if let Some(m) = num("initial_ms")? {
                retry.initial_ms = m;
            }
            if let Some(m) = num("max_ms")? {
                retry.max_ms = m;
            }
        }
        Some(_) => return bad("config.retry must be an object"),
    }
    Ok(SettlementConfig {
        reservation_id,
        base_url,
        commit,
        event,
        release,
        release_reason,
        retry,
    })
}

const EXPECT_FIELDS: &[&str] = &[
    "next",
    "at",
    "key",
    "attempt",
    "mode",
    "record",
    "outcome",
    "code",
    "class",
    "status",
    "delay_ms",
    "not_before_ms",
    "warnings",
    "heartbeat",
    "body",
    "error",
];

fn endpoint(v: &Value, what: &str, allowed: &[Endpoint]) -> Result<Endpoint, FormatError> {
    v.as_str()
        .and_then(Endpoint::parse)
        .filter(|e| allowed.contains(e))
        .ok_or_else(|| {
            let names: Vec<&str> = allowed.iter().map(|e| e.as_str()).collect();
            FormatError(format!("{what} must be one of {names:?}, got {v}"))
        })
}

fn parse_step(v: &Value) -> Result<SettleStep, FormatError> {
    let o = v
        .as_object()
        .ok_or_else(|| FormatError("a step is a JSON object".into()))?;
    only_keys(
        o,
        "step",
        &[
            "at",
            "wall",
            "start",
            "persisted",
            "persist_failed",
            "send",
            "recv",
            "fail",
            "restart",
            "record",
            "expect",
        ],
    )?;
    let at_ns = ms_to_ns(
        o.get("at")
            .ok_or_else(|| FormatError("missing \"at\"".into()))?,
    )?;
    let wall_ms = match o.get("wall") {
        None => None,
        Some(w) => Some(
            w.as_u64()
                .ok_or_else(|| FormatError("wall must be a non-negative integer (ms)".into()))?,
        ),
    };
    let mut events = Vec::new();
    if let Some(s) = o.get("start") {
        events.push(SettleEvent::Start(endpoint(
            s,
            "start",
            &[Endpoint::Commit, Endpoint::Release],
        )?));
    }
    if let Some(p) = o.get("persisted") {
        if p != &Value::Bool(true) {
            return bad("persisted must be true");
        }
        events.push(SettleEvent::Persisted);
    }
    if let Some(p) = o.get("persist_failed") {
        let msg = p
            .as_str()
            .ok_or_else(|| FormatError("persist_failed must be a message string".into()))?;
        events.push(SettleEvent::PersistFailed(msg.to_owned()));
    }
    if let Some(s) = o.get("send") {
        events.push(SettleEvent::Send(endpoint(
            s,
            "send",
            &[Endpoint::Commit, Endpoint::Event, Endpoint::Release],
        )?));
    }
    if let Some(r) = o.get("recv") {
        events.push(SettleEvent::Recv(parse_recv(r)?));
    }
    if let Some(f) = o.get("fail") {
        let failure = f
            .as_str()
            .and_then(TransportFailure::parse)
            .ok_or_else(|| {
                FormatError(format!("fail must be timeout, connect or reset, got {f}"))
            })?;
        events.push(SettleEvent::Fail(failure));
    }
    if let Some(r) = o.get("restart") {
        if r != &Value::Bool(true) {
            return bad("restart must be true");
        }
        if wall_ms.is_none() {
            return bad("a restart step gives the wall clock (\"wall\")");
        }
        let verbatim = match o.get("record") {
            None => None,
            Some(v) => Some(given_bytes(v)?),
        };
        events.push(SettleEvent::Restart(verbatim));
    } else if o.contains_key("record") {
        return bad("record is only allowed in a restart step");
    }
    if events.len() != 1 {
        return bad(
            "a step has exactly one of start, persisted, persist_failed, send, recv, fail, restart",
        );
    }
    let event = events.pop().expect("one event");
    let expect = match o.get("expect") {
        None => None,
        Some(Value::Object(e)) => {
            only_keys(e, "expect", EXPECT_FIELDS)?;
            if let Some(at) = e.get("at") {
                ms_to_ns(at).map_err(|e| FormatError(format!("expect.at: {e}")))?;
            }
            Some(e.clone())
        }
        Some(_) => return bad("expect must be an object"),
    };
    Ok(SettleStep {
        at_ns,
        wall_ms,
        event,
        expect,
    })
}

/// Replays a settlement scenario and checks every expectation; the replay
/// stops at the first mismatch.
pub fn replay(s: &SettleScenario) -> Replay {
    replay_with(s, true)
}

/// Replays a settlement scenario; with `check` false, expectations are
/// ignored and only the harness's own rule checks (and errors of the core)
/// stop it.
pub fn replay_with(s: &SettleScenario, check: bool) -> Replay {
    let mut out = Replay::default();
    if let Err(m) = run(s, check, &mut out) {
        out.mismatch = Some(m);
    }
    out
}

/// What the replay knows besides the settlement.
#[derive(Default)]
struct World {
    settlement: Option<Settlement>,
    /// The durable record: the last one acknowledged, until removed.
    store: Option<SettlementRecord>,
    /// The record of the outstanding persist.
    writing: Option<SettlementRecord>,
    /// The first key any request used.
    first_key: Option<String>,
    /// Terminal successes seen.
    successes: u32,
    /// (wall ms) - (scenario ms) of the last step that gave `wall`.
    wall_offset: i128,
}

fn run(s: &SettleScenario, check: bool, out: &mut Replay) -> Result<(), Mismatch> {
    let mut w = World {
        wall_offset: i128::from(DEFAULT_WALL_BASE_MS),
        ..World::default()
    };
    for (i, step) in s.steps.iter().enumerate() {
        let at_ms = i128::from(step.at_ns / 1_000_000);
        if let Some(wall) = step.wall_ms {
            w.wall_offset = i128::from(wall) - at_ms;
        }
        let wall_ms = u64::try_from((w.wall_offset + at_ms).max(0)).unwrap_or(u64::MAX);
        let now = Now::new(step.at_ns, wall_ms);
        let result = apply(s, &mut w, i, &step.event, now)?;
        let mut emitted = Map::new();
        emitted.insert("id".into(), Value::from(s.id.clone()));
        emitted.insert("step".into(), Value::from(i));
        let decision = match result {
            Ok(d) => {
                emitted.extend(d.to_json());
                Some(d)
            }
            Err(e) => {
                emitted.extend(error_json(&e, &step.event));
                None
            }
        };
        if let Some(d) = &decision {
            after_decision(&mut w, i, d)?;
        }
        out.decisions.push(emitted.clone());
        out.lines.push(write_exact(&emitted));
        if let Some(expect) = step.expect.as_ref().filter(|_| check) {
            compare(i, expect, decision.as_ref(), &emitted, &w)?;
        } else if decision.is_none() && check {
            return Err(mismatch(i, "error", "no error", emitted_error(&emitted)));
        }
    }
    Ok(())
}

fn emitted_error(m: &Map<String, Value>) -> String {
    format!(
        "{}: {}",
        m.get("error").and_then(Value::as_str).unwrap_or("?"),
        m.get("detail").and_then(Value::as_str).unwrap_or("")
    )
}

/// The emitted line of a refused call: the error's code; for a restart
/// from a record the core refuses, the journal's disposition (J-4).
fn error_json(e: &Error, event: &SettleEvent) -> Map<String, Value> {
    let mut m = Map::new();
    if matches!(event, SettleEvent::Restart(_)) {
        m.insert("next".into(), Value::from("done"));
        m.insert("record".into(), Value::from("quarantine"));
    }
    m.insert("error".into(), Value::from(e.kind().code()));
    m.insert("detail".into(), Value::from(e.message()));
    m
}

fn live(w: &mut World, step: usize) -> Result<&mut Settlement, Mismatch> {
    w.settlement.as_mut().ok_or_else(|| {
        mismatch(
            step,
            "settlement",
            "a settlement",
            "none (refused or never built)",
        )
    })
}

/// Applies one event. `Err` is a harness mismatch; `Ok(Err)` a refusal by
/// the core (checked against `expect.error`).
fn apply(
    s: &SettleScenario,
    w: &mut World,
    i: usize,
    event: &SettleEvent,
    now: Now,
) -> Result<Result<SettlementDecision, Error>, Mismatch> {
    Ok(match event {
        SettleEvent::Start(kind) => {
            let want_release = *kind == Endpoint::Release;
            if want_release != s.config.release {
                return Err(mismatch(
                    i,
                    "start",
                    if s.config.release {
                        "release"
                    } else {
                        "commit"
                    },
                    kind.as_str(),
                ));
            }
            let mut keys = SequentialKeys::new("key-");
            match Settlement::with_key_source(s.config.clone(), now, &mut keys) {
                Ok(st) => {
                    let d = st.last_decision().clone();
                    w.writing = st
                        .record()
                        .cloned()
                        .filter(|_| d.next == SettleNext::Persist);
                    w.settlement = Some(st);
                    Ok(d)
                }
                Err(e) => Err(e),
            }
        }
        SettleEvent::Restart(verbatim) => {
            w.settlement = None;
            w.writing = None;
            let bytes = match verbatim {
                Some(b) => b.clone(),
                None => match &w.store {
                    Some(r) => r.to_json().into_bytes(),
                    None => {
                        return Err(mismatch(
                            i,
                            "restart",
                            "an acknowledged record to replay",
                            "none",
                        ));
                    }
                },
            };
            match Settlement::from_record_json(&bytes, s.config.retry, now) {
                Ok(st) => {
                    // Only durable state crossed the boundary.
                    w.store = st.record().cloned();
                    let d = st.last_decision().clone();
                    w.settlement = Some(st);
                    Ok(d)
                }
                Err(e) => Err(e),
            }
        }
        SettleEvent::Persisted => {
            let st = live(w, i)?;
            let r = st.handle_persisted(now.mono_ns);
            if r.is_ok() {
                w.store = w.writing.take();
            }
            r
        }
        SettleEvent::PersistFailed(msg) => {
            let st = live(w, i)?;
            let r = st.handle_persist_failed(msg, now.mono_ns);
            if r.is_ok() {
                w.writing = None;
            }
            r
        }
        SettleEvent::Send(ep) => {
            let store_floor = w.store.as_ref().and_then(|r| r.not_before_ms);
            let first_key = w.first_key.clone();
            let st = live(w, i)?;
            let attempt = match st.poll_action() {
                SettlementAction::Send(a) => a.clone(),
                other => {
                    return Err(mismatch(
                        i,
                        "send",
                        format!("send {ep}"),
                        format!("{other:?}"),
                    ));
                }
            };
            if attempt.endpoint != *ep {
                return Err(mismatch(i, "send", ep, attempt.endpoint));
            }
            if now.mono_ns < attempt.due_ns {
                return Err(mismatch(
                    i,
                    "send",
                    format!(
                        "no send before its due time {}",
                        ns_to_ms_json(Some(attempt.due_ns))
                    ),
                    format!("sent at {}", ns_to_ms_json(Some(now.mono_ns))),
                ));
            }
            if let (Some(nb), true) = (store_floor, *ep != Endpoint::Release) {
                if now.wall_ms < nb {
                    return Err(mismatch(
                        i,
                        "send",
                        format!("no send before not_before_ms {nb}"),
                        format!("wall {}", now.wall_ms),
                    ));
                }
            }
            // ST-1 in bytes: the header key and the body's key are the first key.
            let body_key = serde_json::from_slice::<Value>(&attempt.body)
                .ok()
                .and_then(|b| {
                    b.get("idempotency_key")
                        .and_then(Value::as_str)
                        .map(str::to_owned)
                });
            if body_key.as_deref() != Some(attempt.key.as_str()) {
                return Err(mismatch(
                    i,
                    "key",
                    "the body's key = the header key",
                    format!("{body_key:?}"),
                ));
            }
            match &first_key {
                Some(k) if *k != attempt.key => {
                    return Err(mismatch(
                        i,
                        "key",
                        format!("{k:?} (ST-1)"),
                        format!("{:?}", attempt.key),
                    ));
                }
                Some(_) => {}
                None => w.first_key = Some(attempt.key.clone()),
            }
            let st = live(w, i)?;
            st.handle_sent(attempt.id, now.mono_ns)
        }
        SettleEvent::Recv(response) => {
            let st = live(w, i)?;
            let id = in_flight(st, i)?;
            st.handle_response(id, response.view(), now)
        }
        SettleEvent::Fail(f) => {
            let st = live(w, i)?;
            let id = in_flight(st, i)?;
            st.handle_failure(id, *f, now.mono_ns)
        }
    })
}

fn in_flight(st: &Settlement, step: usize) -> Result<u64, Mismatch> {
    match st.poll_action() {
        SettlementAction::Wait(a) => Ok(a.id),
        other => Err(mismatch(
            step,
            "outcome",
            "an attempt in flight",
            format!("{other:?}"),
        )),
    }
}

fn after_decision(w: &mut World, i: usize, d: &SettlementDecision) -> Result<(), Mismatch> {
    if d.next == SettleNext::Persist {
        w.writing = w.settlement.as_ref().and_then(|s| s.record().cloned());
    }
    if d.record == Some(RecordUpdate::Remove) {
        w.store = None;
    }
    if d.outcome().is_some_and(|o| o.is_success()) {
        w.successes += 1;
        if w.successes > 1 {
            return Err(mismatch(
                i,
                "outcome",
                "at most one terminal success",
                "a second",
            ));
        }
    }
    Ok(())
}

fn compare(
    step: usize,
    expect: &Map<String, Value>,
    decision: Option<&SettlementDecision>,
    emitted: &Map<String, Value>,
    w: &World,
) -> Result<(), Mismatch> {
    if decision.is_none() && !expect.contains_key("error") {
        return Err(mismatch(step, "error", "no error", emitted_error(emitted)));
    }
    for (field, want) in expect {
        match field.as_str() {
            "at" => {
                let want_ns = ms_to_ns(want).expect("checked");
                let got = decision.and_then(|d| match d.next {
                    SettleNext::Send(_) => d.at_ns,
                    _ => None,
                });
                if got != Some(want_ns) {
                    return Err(mismatch(step, "at", want, ns_to_ms_json(got)));
                }
            }
            "record" => {
                let got = emitted.get("record").cloned().unwrap_or(Value::Null);
                match (want, &got) {
                    (Value::Object(wm), Value::Object(_)) => {
                        // Subset of the whole record being written.
                        let full = w
                            .settlement
                            .as_ref()
                            .and_then(|s| s.record())
                            .map(SettlementRecord::to_value)
                            .unwrap_or(Value::Null);
                        for (k, v) in wm {
                            let g = full.get(k).cloned().unwrap_or(Value::Null);
                            if &g != v {
                                return Err(mismatch(step, &format!("record.{k}"), v, g));
                            }
                        }
                    }
                    _ if &got != want => return Err(mismatch(step, "record", want, absent(&got))),
                    _ => {}
                }
            }
            "body" => {
                let got = decision
                    .filter(|d| matches!(d.next, SettleNext::Send(_) | SettleNext::Wait))
                    .and(w.settlement.as_ref())
                    .and_then(|s| s.attempt())
                    .and_then(|a| serde_json::from_slice::<Value>(&a.body).ok())
                    .unwrap_or(Value::Null);
                let want = exact(want);
                if got != want {
                    return Err(mismatch(step, "body", want, absent(&got)));
                }
            }
            "warnings" => {
                let got = emitted
                    .get("warnings")
                    .cloned()
                    .unwrap_or(Value::Array(vec![]));
                if &got != want {
                    return Err(mismatch(step, "warnings", want, got));
                }
            }
            other => {
                let got = emitted.get(other).cloned().unwrap_or(Value::Null);
                if &got != want {
                    return Err(mismatch(step, other, want, absent(&got)));
                }
            }
        }
    }
    Ok(())
}

fn absent(v: &Value) -> String {
    if v.is_null() {
        "absent".to_owned()
    } else {
        v.to_string()
    }
}

/// A value from a file with its marked numbers made `serde_json` numbers.
fn exact(v: &Value) -> Value {
    serde_json::from_slice(&body_bytes(v)).unwrap_or(Value::Null)
}
