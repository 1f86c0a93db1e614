//! The shared scenario vectors: parsing and replay through the public API.
//!
//! The format is specified in the project's contract
//! ([`docs/heartbeat-contract.md`](https://github.com/leasebeat/leasebeat/blob/main/docs/heartbeat-contract.md),
//! "The scenario vector format"). Every binding has its own replay in its own language;
//! this one serves the Rust tests and `leasebeat replay`.
//!
//! The replay checks more than the core claims about itself: it remembers
//! every key and body it was asked to send, so `"key": "new"` is verified as
//! "never used before" and `"key": "same"` as "exactly the previous attempt's
//! key, with a byte-identical body".

pub mod settlement;

use std::collections::HashSet;
use std::fmt;

use serde_json::{Map, Value};

use crate::decision::{AttemptKind, Decision, NUM_MARK, write_exact};
use crate::heartbeat::{
    Action, AdoptedCreate, Config, CreateOutcome, Heartbeat, Response, TransportFailure,
};
use crate::json::{self, J};
use crate::keys::SequentialKeys;
use crate::{Num, ns_to_ms_json};

/// One scenario file.
#[derive(Clone, Debug)]
pub struct Scenario {
    /// The scenario id (the file stem by convention).
    pub id: String,
    /// What it shows.
    pub about: String,
    /// The heartbeat configuration.
    pub config: Config,
    /// The steps, in time order.
    pub steps: Vec<Step>,
}

/// One step of a scenario.
#[derive(Clone, Debug)]
pub struct Step {
    /// The step's time in nanoseconds (`round(ms x 1000) x 1000`).
    pub at_ns: u64,
    /// What happens.
    pub event: Event,
    /// What the decision after it must look like (fields absent are not checked).
    pub expect: Option<Map<String, Value>>,
}

/// What happens at a step.
#[derive(Clone, Debug)]
pub enum Event {
    /// The caller sends the attempt the core asked for.
    Send(AttemptKind),
    /// The outstanding attempt's response arrives.
    Recv(Response),
    /// The outstanding attempt fails in transport.
    Fail(TransportFailure),
    /// The caller cancels.
    Cancel,
    /// The caller performed the create itself and hands it over
    /// ([`Heartbeat::adopt_create`]); only as the first step. The step's `at`
    /// is when the create's outcome was observed.
    Adopt(Adopt),
}

/// An adopted create (`"adopt"` step): the create the caller sent itself.
#[derive(Clone, Debug)]
pub struct Adopt {
    /// The idempotency key the caller's create used.
    pub key: String,
    /// When it was sent, ns (`"sent"`); `None` = timing unknown.
    pub sent_ns: Option<u64>,
    /// The request body the caller sent (`"request"`, serialized), if given.
    pub request: Option<Vec<u8>>,
    /// Its outcome (`"recv"` or `"fail"`).
    pub outcome: CreateOutcome,
}

/// Why a scenario file cannot be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FormatError(pub String);

impl fmt::Display for FormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for FormatError {}

fn bad<T>(msg: impl Into<String>) -> Result<T, FormatError> {
    Err(FormatError(msg.into()))
}

/// Scenario milliseconds (an integer, or a decimal with up to 6 decimals)
/// to nanoseconds, exactly.
pub fn ms_to_ns(v: &Value) -> Result<u64, FormatError> {
    let text = match v {
        Value::Number(n) => n.to_string(),
        _ => match number_text(v) {
            Some(t) => t.to_owned(),
            None => return bad(format!("time {v} is not a number")),
        },
    };
    let too_big = || FormatError(format!("time {text} ms overflows u64 nanoseconds"));
    let (int, frac) = text.split_once('.').unwrap_or((&text, ""));
    let frac = frac.trim_end_matches('0');
    if int.is_empty()
        || !int.bytes().all(|b| b.is_ascii_digit())
        || !frac.bytes().all(|b| b.is_ascii_digit())
        || frac.len() > 6
    {
        return bad(format!(
            "time {text} must be a non-negative number of ms with at most 6 decimals"
        ));
    }
    let ms: u64 = int.parse().map_err(|_| too_big())?;
    let sub: u64 = format!("{frac:0<6}").parse().unwrap_or(0);
    ms.checked_mul(1_000_000)
        .and_then(|ns| ns.checked_add(sub))
        .ok_or_else(too_big)
}

fn only_keys(o: &Map<String, Value>, what: &str, allowed: &[&str]) -> Result<(), FormatError> {
    for k in o.keys() {
        if !allowed.contains(&k.as_str()) {
            return bad(format!("{what} has an unknown field {k:?}"));
        }
    }
    Ok(())
}

fn opt_u64(v: Option<&Value>, what: &str) -> Result<Option<u64>, FormatError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .map(Some)
            .ok_or_else(|| FormatError(format!("{what} must be a non-negative integer or null"))),
    }
}

/// Parses one scenario file's text.
pub fn parse(text: &str) -> Result<Scenario, FormatError> {
    let j = json::parse(text.as_bytes(), MAX_SCENARIO_DEPTH)
        .map_err(|e| FormatError(format!("invalid JSON: {e}")))?;
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
    only_keys(cfg, "config", &["ttl_ms", "request_timeout_ms"])?;
    let mut config = Config::default();
    if let Some(ttl) = opt_u64(cfg.get("ttl_ms"), "config.ttl_ms")? {
        config.ttl_ms = ttl;
    }
    config.request_timeout_ms =
        opt_u64(cfg.get("request_timeout_ms"), "config.request_timeout_ms")?;
    let steps_v = o
        .get("steps")
        .and_then(Value::as_array)
        .ok_or_else(|| FormatError("missing array \"steps\"".into()))?;
    let mut steps = Vec::with_capacity(steps_v.len());
    for (i, s) in steps_v.iter().enumerate() {
        let step = parse_step(s).map_err(|e| FormatError(format!("step {i}: {e}")))?;
        if i > 0 && matches!(step.event, Event::Adopt(_)) {
            return bad(format!("step {i}: adopt is only allowed as the first step"));
        }
        steps.push(step);
    }
    Ok(Scenario {
        id,
        about,
        config,
        steps,
    })
}

/// How deep a scenario file may nest (bodies included).
const MAX_SCENARIO_DEPTH: usize = 64;

/// The scenario tree as `serde_json` values, every number kept exact (P-9):
/// an integer that `serde_json` holds exactly and writes back with the same
/// text stays a number; any other number (`-0`, `1e400`, a decimal time, an
/// integer below -2^63) becomes a marked string that only [`ms_to_ns`],
/// [`expected_num`] and [`write_body`] read.
fn to_value(j: &J<'_>) -> Result<Value, FormatError> {
    Ok(match j {
        J::Null => Value::Null,
        J::Bool(b) => Value::Bool(*b),
        J::Num(t) => {
            // Canonical integer text only: `-0`, `1e3`, `1.5` keep their text.
            let canonical = !t.contains(['.', 'e', 'E']) && *t != "-0";
            let exact = if canonical {
                t.parse::<u64>()
                    .ok()
                    .map(Value::from)
                    .or_else(|| t.parse::<i64>().ok().map(Value::from))
            } else {
                None
            };
            exact.unwrap_or_else(|| Value::String(format!("{NUM_MARK}{t}")))
        }
        J::Str(s) if s.starts_with(NUM_MARK) => {
            return bad("a string starts with a NUL character and '#'");
        }
        J::Str(s) => Value::String(s.to_string()),
        J::Arr(a) => Value::Array(a.iter().map(to_value).collect::<Result<_, _>>()?),
        J::Obj(o) => Value::Object(
            o.iter()
                .map(|(k, v)| Ok((k.to_string(), to_value(v)?)))
                .collect::<Result<_, FormatError>>()?,
        ),
        J::Deep => return bad(format!("nested deeper than {MAX_SCENARIO_DEPTH} levels")),
    })
}

fn number_text(v: &Value) -> Option<&str> {
    v.as_str().and_then(|s| s.strip_prefix(NUM_MARK))
}

/// A body object as bytes, numbers with their exact text from the file.
fn write_body(v: &Value, out: &mut Vec<u8>) {
    match v {
        Value::String(_) if number_text(v).is_some() => {
            out.extend_from_slice(number_text(v).unwrap_or_default().as_bytes());
        }
        Value::Array(a) => {
            out.push(b'[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_body(x, out);
            }
            out.push(b']');
        }
        Value::Object(o) => {
            out.push(b'{');
            for (i, (k, x)) in o.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(Value::from(k.as_str()).to_string().as_bytes());
                out.push(b':');
                write_body(x, out);
            }
            out.push(b'}');
        }
        other => out.extend_from_slice(other.to_string().as_bytes()),
    }
}

fn body_bytes(v: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    write_body(v, &mut out);
    out
}

fn parse_step(v: &Value) -> Result<Step, FormatError> {
    let o = v
        .as_object()
        .ok_or_else(|| FormatError("a step is a JSON object".into()))?;
    only_keys(
        o,
        "step",
        &["at", "send", "recv", "fail", "cancel", "adopt", "expect"],
    )?;
    let at_ns = ms_to_ns(
        o.get("at")
            .ok_or_else(|| FormatError("missing \"at\"".into()))?,
    )?;
    let mut events = Vec::new();
    if let Some(s) = o.get("send") {
        events.push(match s.as_str() {
            Some("create") => Event::Send(AttemptKind::Create),
            Some("extend") => Event::Send(AttemptKind::Extend),
            _ => return bad(format!("send must be \"create\" or \"extend\", got {s}")),
        });
    }
    if let Some(r) = o.get("recv") {
        events.push(Event::Recv(parse_recv(r)?));
    }
    if let Some(f) = o.get("fail") {
        let failure = f
            .as_str()
            .and_then(TransportFailure::parse)
            .ok_or_else(|| {
                FormatError(format!("fail must be timeout, connect or reset, got {f}"))
            })?;
        events.push(Event::Fail(failure));
    }
    if let Some(c) = o.get("cancel") {
        if c != &Value::Bool(true) {
            return bad("cancel must be true");
        }
        events.push(Event::Cancel);
    }
    if let Some(a) = o.get("adopt") {
        events.push(Event::Adopt(parse_adopt(a)?));
    }
    if events.len() != 1 {
        return bad("a step has exactly one of send, recv, fail, cancel, adopt");
    }
    let event = events.pop().expect("one event");
    let expect = match o.get("expect") {
        None => None,
        Some(Value::Object(e)) => {
            if matches!(event, Event::Send(_)) {
                return bad("a send step has no expect");
            }
            check_expect_shape(e)?;
            Some(e.clone())
        }
        Some(_) => return bad("expect must be an object"),
    };
    Ok(Step {
        at_ns,
        event,
        expect,
    })
}

fn parse_adopt(v: &Value) -> Result<Adopt, FormatError> {
    let o = v
        .as_object()
        .ok_or_else(|| FormatError("adopt must be an object".into()))?;
    only_keys(o, "adopt", &["key", "sent", "request", "recv", "fail"])?;
    let key = o
        .get("key")
        .and_then(Value::as_str)
        .ok_or_else(|| FormatError("adopt.key must be a string".into()))?
        .to_owned();
    let sent_ns = match o.get("sent") {
        None => None,
        Some(t) => Some(ms_to_ns(t)?),
    };
    let request = match o.get("request") {
        None => None,
        Some(r @ Value::Object(_)) => Some(body_bytes(r)),
        Some(_) => return bad("adopt.request must be an object"),
    };
    let outcome = match (o.get("recv"), o.get("fail")) {
        (Some(r), None) => CreateOutcome::Response(parse_recv(r)?),
        (None, Some(f)) => {
            CreateOutcome::Failure(f.as_str().and_then(TransportFailure::parse).ok_or_else(
                || {
                    FormatError(format!(
                        "adopt.fail must be timeout, connect or reset, got {f}"
                    ))
                },
            )?)
        }
        _ => return bad("adopt has exactly one of recv, fail"),
    };
    Ok(Adopt {
        key,
        sent_ns,
        request,
        outcome,
    })
}

fn parse_recv(v: &Value) -> Result<Response, FormatError> {
    let o = v
        .as_object()
        .ok_or_else(|| FormatError("recv must be an object".into()))?;
    only_keys(o, "recv", &["status", "headers", "body", "raw", "timing"])?;
    let status = o
        .get("status")
        .and_then(Value::as_u64)
        .and_then(|s| u16::try_from(s).ok())
        .ok_or_else(|| FormatError("recv.status must be an integer status code".into()))?;
    let mut response = Response::new(status);
    match o.get("headers") {
        None => {}
        Some(Value::Object(h)) => {
            for (name, value) in h {
                match value {
                    Value::String(s) => response
                        .headers
                        .push((name.clone().into(), s.clone().into())),
                    Value::Array(items) => {
                        for item in items {
                            let s = item.as_str().ok_or_else(|| {
                                FormatError(format!("header {name:?} values must be strings"))
                            })?;
                            response
                                .headers
                                .push((name.clone().into(), s.to_owned().into()));
                        }
                    }
                    _ => {
                        return bad(format!(
                            "header {name:?} must be a string or a list of strings"
                        ));
                    }
                }
            }
        }
        Some(_) => return bad("recv.headers must be an object"),
    }
    match (o.get("body"), o.get("raw")) {
        (Some(_), Some(_)) => return bad("recv has both body and raw"),
        (Some(b), None) => response.body = body_bytes(b),
        (None, Some(Value::String(r))) => response.body = r.clone().into_bytes(),
        (None, Some(_)) => return bad("recv.raw must be a string"),
        (None, None) => {}
    }
    match o.get("timing") {
        None => {}
        Some(Value::String(t)) if t == "unknown" => response = response.timing_unknown(),
        Some(t) => return bad(format!("recv.timing must be \"unknown\", got {t}")),
    }
    Ok(response)
}

const EXPECT_FIELDS: &[&str] = &[
    "id",
    "step",
    "next",
    "at",
    "key",
    "key_index",
    "reason",
    "mode",
    "numbers",
    "warnings",
    "proven_until",
    "expires_at_ms",
    "remaining_ttl_ms",
];

fn check_expect_shape(e: &Map<String, Value>) -> Result<(), FormatError> {
    only_keys(e, "expect", EXPECT_FIELDS)?;
    if let Some(n) = e.get("numbers") {
        let n = n
            .as_object()
            .ok_or_else(|| FormatError("expect.numbers must be an object".into()))?;
        for (k, v) in n {
            if !crate::Numbers::NAMES.contains(&k.as_str()) {
                return bad(format!("expect.numbers has an unknown number {k:?}"));
            }
            expected_num(v).map_err(|e| FormatError(format!("expect.numbers.{k}: {e}")))?;
        }
    }
    for field in ["at", "proven_until"] {
        if let Some(at) = e.get(field) {
            if at != "inf" {
                ms_to_ns(at).map_err(|e| FormatError(format!("expect.{field}: {e}")))?;
            }
        }
    }
    Ok(())
}

/// An expected number: a JSON integer, `"inf"` or `"-inf"`.
fn expected_num(v: &Value) -> Result<Num, FormatError> {
    match v {
        Value::String(s) if s == "inf" => Ok(Num::Inf),
        Value::String(s) if s == "-inf" => Ok(Num::NegInf),
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                Ok(Num::Int(i128::from(u)))
            } else if let Some(i) = n.as_i64() {
                Ok(Num::Int(i128::from(i)))
            } else {
                bad(format!("{v} is not an exact integer"))
            }
        }
        Value::String(_) if number_text(v).is_some() => {
            let t = number_text(v).unwrap_or_default();
            match t.parse::<i128>() {
                Ok(i) => Ok(Num::Int(i)),
                _ => bad(format!("{t} is not an integer")),
            }
        }
        _ => bad(format!("{v} must be an integer, \"inf\" or \"-inf\"")),
    }
}

/// The first difference between an expectation and what happened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mismatch {
    /// The step index.
    pub step: usize,
    /// The field that differs (e.g. `numbers.next_delay`).
    pub field: String,
    /// What the scenario expected.
    pub expected: String,
    /// What the replay got.
    pub got: String,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "step {}: {}: expected {}, got {}",
            self.step, self.field, self.expected, self.got
        )
    }
}

/// What a replay produced.
#[derive(Clone, Debug, Default)]
pub struct Replay {
    /// Every decision as an emitted-decision JSON object (with `id` and
    /// `step`); see [`Decision::to_json`] for the numbers it cannot hold.
    pub decisions: Vec<Map<String, Value>>,
    /// Every decision as one JSON line (with `id` and `step`), every number
    /// exact (P-9): what `leasebeat replay --emit` prints.
    pub lines: Vec<String>,
    /// The first mismatch, if any (the replay stops there).
    pub mismatch: Option<Mismatch>,
}

/// Replays a scenario through [`Heartbeat`] with deterministic keys and
/// checks every expectation; the replay stops at the first mismatch.
pub fn replay(s: &Scenario) -> Replay {
    replay_with(s, true)
}

/// Replays a scenario; with `check` false, expectations are ignored and only
/// errors of the core (or an action that does not match a step) stop it.
pub fn replay_with(s: &Scenario, check: bool) -> Replay {
    let mut out = Replay::default();
    if let Err(m) = run(s, check, &mut out) {
        out.mismatch = Some(m);
    }
    out
}

fn mismatch(
    step: usize,
    field: &str,
    expected: impl fmt::Display,
    got: impl fmt::Display,
) -> Mismatch {
    Mismatch {
        step,
        field: field.to_owned(),
        expected: expected.to_string(),
        got: got.to_string(),
    }
}

fn run(s: &Scenario, check: bool, out: &mut Replay) -> Result<(), Mismatch> {
    let mut used_keys: HashSet<String> = HashSet::new();
    // (key, body) of the attempt sent last.
    let mut current: Option<(String, Vec<u8>)> = None;
    let keys = Box::new(SequentialKeys::new("key-"));
    let (mut hb, adopted) = match s.steps.first().map(|st| &st.event) {
        Some(Event::Adopt(a)) => {
            let create = AdoptedCreate {
                key: a.key.clone(),
                body: a.request.clone(),
                sent_ns: a.sent_ns,
                received_ns: s.steps[0].at_ns,
                outcome: a.outcome.clone(),
            };
            let (hb, d) = Heartbeat::adopt_create_with_key_source(s.config.clone(), create, keys)
                .map_err(|e| mismatch(0, "adopt", "accepted", e))?;
            used_keys.insert(a.key.clone());
            let body = a
                .request
                .clone()
                .unwrap_or_else(|| adopted_default_body(&s.config, &a.key));
            current = Some((a.key.clone(), body));
            (hb, Some(d))
        }
        _ => (
            Heartbeat::with_key_source(s.config.clone(), keys)
                .map_err(|e| mismatch(0, "config", "a valid configuration", e))?,
            None,
        ),
    };
    let mut adopted = adopted;
    for (i, step) in s.steps.iter().enumerate() {
        let decision: Decision = match &step.event {
            Event::Adopt(_) => adopted.take().expect("adopt is the first step"),
            Event::Send(kind) => {
                let attempt = match hb.poll_action() {
                    Action::Send(a) => a.clone(),
                    Action::AwaitOutcome(a) => {
                        return Err(mismatch(
                            i,
                            "send",
                            format!("send {}", kind.as_str()),
                            format!("attempt {} still in flight", a.id),
                        ));
                    }
                    Action::Stop(r) => {
                        return Err(mismatch(
                            i,
                            "send",
                            format!("send {}", kind.as_str()),
                            format!("stopped ({r})"),
                        ));
                    }
                };
                if attempt.kind != *kind {
                    return Err(mismatch(i, "send", kind.as_str(), attempt.kind.as_str()));
                }
                hb.handle_sent(attempt.id, step.at_ns)
                    .map_err(|e| mismatch(i, "send", "accepted", e))?;
                current = Some((attempt.key.clone(), attempt.body.clone()));
                used_keys.insert(attempt.key.clone());
                continue;
            }
            Event::Recv(response) => {
                let id = outstanding(&hb, i)?;
                hb.handle_response(id, response.clone(), step.at_ns)
                    .map_err(|e| mismatch(i, "recv", "accepted", e))?
            }
            Event::Fail(failure) => {
                let id = outstanding(&hb, i)?;
                hb.handle_failure(id, *failure, step.at_ns)
                    .map_err(|e| mismatch(i, "fail", "accepted", e))?
            }
            Event::Cancel => hb
                .cancel(step.at_ns)
                .map_err(|e| mismatch(i, "cancel", "accepted", e))?,
        };
        let mut emitted = Map::new();
        emitted.insert("id".into(), Value::from(s.id.clone()));
        emitted.insert("step".into(), Value::from(i));
        let mut marked = emitted.clone();
        marked.extend(decision.to_json_marked());
        emitted.extend(decision.to_json());
        // The harness's own check of S-4: what the key claim means in bytes.
        if let (Some(attempt), Some(claim)) = (hb.attempt(), decision.key) {
            let last = current.as_ref();
            let ok = match claim {
                crate::KeyUse::New => !used_keys.contains(&attempt.key),
                crate::KeyUse::Same => {
                    last.is_some_and(|(k, b)| *k == attempt.key && *b == attempt.body)
                }
            };
            if !ok {
                return Err(mismatch(
                    i,
                    "key",
                    format!("{} key really {}", claim.as_str(), claim.as_str()),
                    format!("{:?}", attempt.key),
                ));
            }
        }
        out.decisions.push(emitted.clone());
        out.lines.push(write_exact(&marked));
        if let Some(expect) = step.expect.as_ref().filter(|_| check) {
            compare(i, expect, &decision, &emitted)?;
        }
    }
    Ok(())
}

/// The body [`Heartbeat`] builds for a create when an adopted create gave
/// none (what a same-key create retry then sends).
fn adopted_default_body(config: &Config, key: &str) -> Vec<u8> {
    let mut body = config.create_request.clone();
    body.insert("idempotency_key".into(), Value::from(key));
    body.insert("ttl_ms".into(), Value::from(config.ttl_ms));
    serde_json::to_vec(&body).expect("a JSON map always serializes")
}

fn outstanding(hb: &Heartbeat, step: usize) -> Result<u64, Mismatch> {
    match hb.poll_action() {
        Action::AwaitOutcome(a) => Ok(a.id),
        Action::Send(a) => Err(mismatch(
            step,
            "outcome",
            "an attempt in flight",
            format!("attempt {} not yet sent", a.id),
        )),
        Action::Stop(r) => Err(mismatch(
            step,
            "outcome",
            "an attempt in flight",
            format!("stopped ({r})"),
        )),
    }
}

fn compare(
    step: usize,
    expect: &Map<String, Value>,
    decision: &Decision,
    emitted: &Map<String, Value>,
) -> Result<(), Mismatch> {
    for (field, want) in expect {
        match field.as_str() {
            "proven_until" => {
                let want_ns = if want == "inf" {
                    Some(u64::MAX)
                } else {
                    Some(ms_to_ns(want).expect("checked"))
                };
                if decision.proven_until_ns != want_ns {
                    let got = match decision.proven_until_ns {
                        None => Value::from("absent"),
                        Some(u64::MAX) => Value::from("inf"),
                        Some(p) => ns_to_ms_json(Some(p)),
                    };
                    return Err(mismatch(step, "proven_until", want, got));
                }
            }
            "at" => {
                let want_ns = if want == "inf" {
                    None
                } else {
                    Some(ms_to_ns(want).expect("checked"))
                };
                let got = match decision.next {
                    crate::Next::Send(_) => decision.at_ns,
                    crate::Next::Stop(_) => {
                        return Err(mismatch(step, "at", want, "absent (a stop)"));
                    }
                };
                if got != want_ns {
                    return Err(mismatch(step, "at", want, ns_to_ms_json(got)));
                }
            }
            "numbers" => {
                let want = want.as_object().expect("checked");
                for (name, v) in want {
                    let w = expected_num(v).expect("checked");
                    match decision.numbers.get(name) {
                        Some(g) if g == w => {}
                        Some(g) => return Err(mismatch(step, &format!("numbers.{name}"), w, g)),
                        None => {
                            return Err(mismatch(step, &format!("numbers.{name}"), w, "absent"));
                        }
                    }
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
                    let got = if got.is_null() {
                        "absent".to_owned()
                    } else {
                        got.to_string()
                    };
                    return Err(mismatch(step, other, want, got));
                }
            }
        }
    }
    Ok(())
}
