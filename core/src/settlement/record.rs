//! The durable settlement record: pure data in runcycles Python 0.5.3's
//! journal layout (`journal.py`, `PendingCommitRecord`, version 1), with no
//! I/O. The journal (a module of its own) writes and reads these.

use std::fmt;

use serde_json::{Map, Value};

use crate::error::{Error, ErrorKind};
use crate::heartbeat::MAX_KEY_CHARS;
use crate::json;

/// The longest reservation id the protocol allows (its path parameter).
pub const MAX_RESERVATION_ID_CHARS: usize = 128;

/// How deep a record or a configured body may nest (serde_json's own limit
/// is 128; the strict reader checks the text first).
const BODY_DEPTH: usize = 64;

/// The mode of a journaled settlement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RecordMode {
    /// `POST /v1/reservations/{id}/commit` with `commit_body`.
    Commit,
    /// `POST /v1/events` with `event_fallback_body` (the reservation expired, ST-5).
    Event,
}

impl RecordMode {
    /// `"commit"` or `"event"`.
    pub fn as_str(self) -> &'static str {
        match self {
            RecordMode::Commit => "commit",
            RecordMode::Event => "event",
        }
    }

    /// The mode with this name.
    pub fn parse(s: &str) -> Option<RecordMode> {
        match s {
            "commit" => Some(RecordMode::Commit),
            "event" => Some(RecordMode::Event),
            _ => None,
        }
    }
}

impl fmt::Display for RecordMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One unresolved settlement, as the journal stores it: the members of
/// runcycles Python 0.5.3's `PendingCommitRecord` (version 1), so that a
/// record written by that SDK replays here and back.
///
/// The idempotency key has no member of its own: it is the
/// `idempotency_key` of `commit_body` and of `event_fallback_body` (the same
/// key in both, ST-1); see [`SettlementRecord::key`].
#[derive(Clone, Debug, PartialEq)]
pub struct SettlementRecord {
    /// The reservation, exactly as the server named it (1..=128 characters,
    /// no control character).
    pub reservation_id: String,
    /// The server the record belongs to (`""` when unknown).
    pub base_url: String,
    /// Commit or event mode.
    pub mode: RecordMode,
    /// The complete `CommitRequest` body, key included.
    pub commit_body: Option<Map<String, Value>>,
    /// The complete `EventCreateRequest` body of the expired-commit fallback,
    /// the same key included; `None` when no event body is known.
    pub event_fallback_body: Option<Map<String, Value>>,
    /// When this version of the record was written (wall clock, Unix ms).
    pub recorded_at_ms: u64,
    /// The wall-clock floor (Unix ms) of the next attempt, from a 429's
    /// `Retry-After` (ST-4); `None` when there is none.
    pub not_before_ms: Option<u64>,
}

impl SettlementRecord {
    /// The record format version this crate reads and writes.
    pub const VERSION: u64 = 1;

    /// The idempotency key: the `idempotency_key` of the body of the record's
    /// mode (`""` if it has none; [`SettlementRecord::validate`] refuses that).
    pub fn key(&self) -> &str {
        let body = match self.mode {
            RecordMode::Commit => self.commit_body.as_ref(),
            RecordMode::Event => self.event_fallback_body.as_ref(),
        };
        body.and_then(|b| b.get("idempotency_key"))
            .and_then(Value::as_str)
            .unwrap_or("")
    }

    /// The record as a JSON object, members in `journal.py`'s order
    /// (`version`, `reservation_id`, `base_url`, `mode`, `commit_body`,
    /// `event_fallback_body`, `recorded_at_ms`, `not_before_ms`).
    pub fn to_json(&self) -> String {
        let mut out = String::with_capacity(256);
        out.push_str("{\"version\":1,\"reservation_id\":");
        out.push_str(&Value::from(self.reservation_id.as_str()).to_string());
        out.push_str(",\"base_url\":");
        out.push_str(&Value::from(self.base_url.as_str()).to_string());
        out.push_str(",\"mode\":\"");
        out.push_str(self.mode.as_str());
        out.push_str("\",\"commit_body\":");
        push_body(&mut out, self.commit_body.as_ref());
        out.push_str(",\"event_fallback_body\":");
        push_body(&mut out, self.event_fallback_body.as_ref());
        out.push_str(",\"recorded_at_ms\":");
        out.push_str(&self.recorded_at_ms.to_string());
        out.push_str(",\"not_before_ms\":");
        match self.not_before_ms {
            Some(n) => out.push_str(&n.to_string()),
            None => out.push_str("null"),
        }
        out.push('}');
        out
    }

    /// The record as a `serde_json` value (members sorted, as `serde_json`
    /// keeps them).
    pub fn to_value(&self) -> Value {
        let mut m = Map::new();
        m.insert("version".into(), Value::from(Self::VERSION));
        m.insert(
            "reservation_id".into(),
            Value::from(self.reservation_id.as_str()),
        );
        m.insert("base_url".into(), Value::from(self.base_url.as_str()));
        m.insert("mode".into(), Value::from(self.mode.as_str()));
        m.insert(
            "commit_body".into(),
            self.commit_body.clone().map_or(Value::Null, Value::Object),
        );
        m.insert(
            "event_fallback_body".into(),
            self.event_fallback_body
                .clone()
                .map_or(Value::Null, Value::Object),
        );
        m.insert("recorded_at_ms".into(), Value::from(self.recorded_at_ms));
        m.insert(
            "not_before_ms".into(),
            self.not_before_ms.map_or(Value::Null, Value::from),
        );
        Value::Object(m)
    }

    /// Reads a record file's bytes. Refused ([`ErrorKind::InvalidArgument`],
    /// the journal then quarantines the file, J-4): what `journal.py`'s
    /// `from_json` refuses (not a JSON object, `version` not the integer 1,
    /// missing or empty `reservation_id`, unknown `mode`, commit mode without
    /// a `commit_body` object, event mode without an `event_fallback_body`
    /// object, a body neither an object nor null, `base_url` not a string,
    /// `recorded_at_ms` / `not_before_ms` not a non-negative integer), and
    /// also text that is not strict JSON (P-1: a duplicated member, a lone
    /// surrogate), a number `serde_json` cannot hold exactly, and everything
    /// [`SettlementRecord::validate`] refuses. Members `journal.py` defaults
    /// are defaulted the same way (`mode` "commit", `base_url` "",
    /// `recorded_at_ms` 0); unknown members are ignored, as there.
    pub fn from_json(bytes: &[u8]) -> Result<SettlementRecord, Error> {
        let value = strict_value(bytes, "the record")?;
        SettlementRecord::from_value(&value)
    }

    /// [`SettlementRecord::from_json`] for a value already parsed.
    pub fn from_value(value: &Value) -> Result<SettlementRecord, Error> {
        let o = value
            .as_object()
            .ok_or_else(|| invalid("a journal record must be a JSON object"))?;
        match o.get("version") {
            Some(Value::Number(n)) if n.as_u64() == Some(Self::VERSION) => {}
            other => {
                return Err(invalid(format!(
                    "unsupported journal version: {}",
                    other.map_or("absent".into(), short)
                )));
            }
        }
        let reservation_id = match o.get("reservation_id") {
            Some(Value::String(s)) if !s.is_empty() => s.clone(),
            _ => return Err(invalid("journal record missing reservation_id")),
        };
        let mode = match o.get("mode") {
            None => RecordMode::Commit,
            Some(Value::String(s)) => RecordMode::parse(s)
                .ok_or_else(|| invalid(format!("journal record has unknown mode: {s:?}")))?,
            Some(v) => {
                return Err(invalid(format!(
                    "journal record has unknown mode: {}",
                    short(v)
                )));
            }
        };
        let body = |name: &str| -> Result<Option<Map<String, Value>>, Error> {
            match o.get(name) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::Object(m)) => Ok(Some(m.clone())),
                Some(_) => Err(invalid(format!("journal record has invalid {name}"))),
            }
        };
        let commit_body = body("commit_body")?;
        let event_fallback_body = body("event_fallback_body")?;
        let base_url = match o.get("base_url") {
            None => String::new(),
            Some(Value::String(s)) => s.clone(),
            Some(_) => return Err(invalid("journal record has invalid base_url")),
        };
        let recorded_at_ms = match o.get("recorded_at_ms") {
            None => 0,
            Some(v) => v
                .as_u64()
                .ok_or_else(|| invalid("journal record has invalid recorded_at_ms"))?,
        };
        let not_before_ms = match o.get("not_before_ms") {
            None | Some(Value::Null) => None,
            Some(v) => Some(
                v.as_u64()
                    .ok_or_else(|| invalid("journal record has invalid not_before_ms"))?,
            ),
        };
        let record = SettlementRecord {
            reservation_id,
            base_url,
            mode,
            commit_body,
            event_fallback_body,
            recorded_at_ms,
            not_before_ms,
        };
        record.validate()?;
        Ok(record)
    }

    /// Checks what a settlement needs of a record
    /// ([`ErrorKind::InvalidArgument`] otherwise): a valid reservation id
    /// (see [`check_reservation_id`]); the body of the record's mode present;
    /// its `idempotency_key` a string of 1..=256 characters; and, when both
    /// bodies carry a key, the same key (ST-1).
    pub fn validate(&self) -> Result<(), Error> {
        check_reservation_id(&self.reservation_id).map_err(|e| invalid(e.message()))?;
        let (name, body) = match self.mode {
            RecordMode::Commit => ("commit_body", self.commit_body.as_ref()),
            RecordMode::Event => ("event_fallback_body", self.event_fallback_body.as_ref()),
        };
        let Some(body) = body else {
            return Err(invalid(format!(
                "{}-mode journal record missing {name}",
                self.mode
            )));
        };
        let key = match body.get("idempotency_key") {
            Some(Value::String(k)) => k,
            _ => return Err(invalid(format!("{name} has no string idempotency_key"))),
        };
        let chars = key.chars().count();
        if chars == 0 || chars > MAX_KEY_CHARS {
            return Err(invalid(format!(
                "{name}.idempotency_key has {chars} characters (must be 1..={MAX_KEY_CHARS})"
            )));
        }
        // The amount is what the record exists for: a record whose mode's body has no valid
        // `actual` (hand-edited, or written by a tool that does not check it) is refused,
        // so the journal quarantines it (J-4) rather than send it and lose it to the
        // server's 400 (an understood rejection would remove it, ST-7).
        match body.get("actual") {
            Some(actual) => super::check_amount(actual, &format!("{name}.actual"))
                .map_err(|e| invalid(e.message()))?,
            None => return Err(invalid(format!("{name} has no actual"))),
        }
        for other in [self.commit_body.as_ref(), self.event_fallback_body.as_ref()]
            .into_iter()
            .flatten()
        {
            if let Some(k) = other.get("idempotency_key") {
                if k.as_str() != Some(key.as_str()) {
                    return Err(invalid(
                        "commit_body and event_fallback_body carry different idempotency keys",
                    ));
                }
            }
        }
        Ok(())
    }
}

impl serde::Serialize for SettlementRecord {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.to_value().serialize(serializer)
    }
}

impl<'de> serde::Deserialize<'de> for SettlementRecord {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(deserializer)?;
        SettlementRecord::from_value(&v).map_err(serde::de::Error::custom)
    }
}

fn push_body(out: &mut String, body: Option<&Map<String, Value>>) {
    match body {
        // A map of values always serializes.
        Some(b) => out.push_str(&serde_json::to_string(b).unwrap_or_else(|_| "null".into())),
        None => out.push_str("null"),
    }
}

fn invalid(msg: impl Into<String>) -> Error {
    Error::new(ErrorKind::InvalidArgument, msg)
}

fn short(v: &Value) -> String {
    json::cut(&v.to_string(), 40).0
}

/// Checks a reservation id: 1..=128 characters (the protocol's path
/// parameter) and no control character (U+0000..U+001F, U+007F..U+009F).
/// Anything else is allowed, `/`, `%` and spaces included: the caller
/// percent-encodes the id where it goes into a URL path (RFC 3986 segment
/// rules), and the journal names files by its SHA-256 (J-2). Refused with
/// [`ErrorKind::InvalidConfig`].
pub fn check_reservation_id(id: &str) -> Result<(), Error> {
    let chars = id.chars().count();
    if chars == 0 || chars > MAX_RESERVATION_ID_CHARS {
        return Err(Error::new(
            ErrorKind::InvalidConfig,
            format!(
                "reservation_id must be 1..={MAX_RESERVATION_ID_CHARS} characters, got {chars}"
            ),
        ));
    }
    if let Some(c) = id.chars().find(|c| c.is_control()) {
        return Err(Error::new(
            ErrorKind::InvalidConfig,
            format!("reservation_id contains the control character {c:?}"),
        ));
    }
    Ok(())
}

/// Strict JSON text (P-1: UTF-8, no duplicated member, no lone surrogate)
/// read into a `serde_json` value; an integer literal outside the `i64` and
/// `u64` ranges (which `serde_json` would round to a float) is refused.
pub(crate) fn strict_value(bytes: &[u8], what: &str) -> Result<Value, Error> {
    let j = json::parse(bytes, BODY_DEPTH)
        .map_err(|e| invalid(format!("{what} is not valid JSON: {e}")))?;
    if let Some(t) = inexact_integer(&j) {
        return Err(invalid(format!(
            "{what} holds the integer {} beyond the 64-bit range",
            json::cut(t, 40).0
        )));
    }
    serde_json::from_slice(bytes).map_err(|e| invalid(format!("{what} is not usable JSON: {e}")))
}

fn inexact_integer<'v>(j: &'v json::J<'_>) -> Option<&'v str> {
    match j {
        json::J::Num(t) if !t.contains(['.', 'e', 'E']) => {
            if t.parse::<i64>().is_ok() || t.parse::<u64>().is_ok() {
                None
            } else {
                Some(t)
            }
        }
        json::J::Arr(a) => a.iter().find_map(inexact_integer),
        json::J::Obj(o) => o.iter().find_map(|(_, v)| inexact_integer(v)),
        _ => None,
    }
}
