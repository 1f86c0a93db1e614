//! Strict response parsing and the schema checks of the protocol's success
//! bodies (HB-18, D-1, P-1).
//!
//! Bodies are parsed by serde_json into a [`Value`] through a visitor that
//! rejects duplicated member names at any depth (P-1: `serde_json::Value`
//! alone silently keeps the last one). The checks then follow the protocol
//! file: `additionalProperties: false` everywhere it says so, no nulls,
//! integers only as JSON integer literals, `format: int64` ranges enforced.

use std::collections::HashSet;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// Parses JSON text, rejecting duplicated member names anywhere in it.
pub fn parse_strict(bytes: &[u8]) -> Result<Value, String> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = StrictValue
        .deserialize(&mut de)
        .map_err(|e| e.to_string())?;
    de.end().map_err(|e| e.to_string())?;
    Ok(value)
}

struct StrictValue;

impl<'de> DeserializeSeed<'de> for StrictValue {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(StrictVisitor)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom("non-finite number"))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        while let Some(v) = seq.next_element_seed(StrictValue)? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        let mut seen = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if !seen.insert(key.clone()) {
                return Err(de::Error::custom(format!("duplicated member name {key:?}")));
            }
            let v = map.next_value_seed(StrictValue)?;
            out.insert(key, v);
        }
        Ok(Value::Object(out))
    }
}

/// A reason a body is not schema-valid.
pub type Invalid = String;

type Obj = Map<String, Value>;

fn object<'a>(v: &'a Value, what: &str) -> Result<&'a Obj, Invalid> {
    v.as_object()
        .ok_or_else(|| format!("{what} is not a JSON object"))
}

fn only_known(o: &Obj, what: &str, known: &[&str]) -> Result<(), Invalid> {
    for (k, v) in o {
        if !known.contains(&k.as_str()) {
            return Err(format!("{what} has an unknown property {k:?}"));
        }
        if v.is_null() {
            return Err(format!("{what}.{k} is null"));
        }
    }
    Ok(())
}

fn required<'a>(o: &'a Obj, what: &str, name: &str) -> Result<&'a Value, Invalid> {
    o.get(name)
        .ok_or_else(|| format!("{what} lacks required {name:?}"))
}

/// An integer literal in `min..=max` (P-1); `60000.0` and `6e4` are not integers.
fn int_in(v: &Value, what: &str, min: i128, max: i128) -> Result<i128, Invalid> {
    let n = match v {
        Value::Number(n) => n,
        _ => return Err(format!("{what} is not a number")),
    };
    let i = if let Some(u) = n.as_u64() {
        i128::from(u)
    } else if let Some(i) = n.as_i64() {
        i128::from(i)
    } else {
        return Err(format!("{what} is not an integer literal"));
    };
    if i < min || i > max {
        return Err(format!("{what} = {i} is outside {min}..={max}"));
    }
    Ok(i)
}

const I64_MAX: i128 = i64::MAX as i128;
const I64_MIN: i128 = i64::MIN as i128;

fn string<'a>(v: &'a Value, what: &str) -> Result<&'a str, Invalid> {
    v.as_str().ok_or_else(|| format!("{what} is not a string"))
}

fn max_len(s: &str, what: &str, max: usize) -> Result<(), Invalid> {
    if s.chars().count() > max {
        return Err(format!("{what} is longer than {max} characters"));
    }
    Ok(())
}

fn one_of(s: &str, what: &str, allowed: &[&str]) -> Result<(), Invalid> {
    if allowed.contains(&s) {
        Ok(())
    } else {
        Err(format!("{what} = {s:?} is not one of {allowed:?}"))
    }
}

fn boolean(v: &Value, what: &str) -> Result<(), Invalid> {
    if v.is_boolean() {
        Ok(())
    } else {
        Err(format!("{what} is not a boolean"))
    }
}

fn string_array(v: &Value, what: &str, max_item_len: Option<usize>) -> Result<(), Invalid> {
    let items = v
        .as_array()
        .ok_or_else(|| format!("{what} is not an array"))?;
    for (i, item) in items.iter().enumerate() {
        let s = string(item, &format!("{what}[{i}]"))?;
        if let Some(m) = max_item_len {
            max_len(s, &format!("{what}[{i}]"), m)?;
        }
    }
    Ok(())
}

const UNITS: &[&str] = &["USD_MICROCENTS", "TOKENS", "CREDITS", "RISK_POINTS"];

fn amount(v: &Value, what: &str, signed: bool) -> Result<String, Invalid> {
    let o = object(v, what)?;
    only_known(o, what, &["unit", "amount"])?;
    let unit = string(required(o, what, "unit")?, &format!("{what}.unit"))?;
    one_of(unit, &format!("{what}.unit"), UNITS)?;
    let min = if signed { I64_MIN } else { 0 };
    int_in(
        required(o, what, "amount")?,
        &format!("{what}.amount"),
        min,
        I64_MAX,
    )?;
    Ok(unit.to_owned())
}

fn balance(v: &Value, what: &str) -> Result<(), Invalid> {
    let o = object(v, what)?;
    only_known(
        o,
        what,
        &[
            "scope",
            "scope_path",
            "remaining",
            "reserved",
            "spent",
            "debt",
            "allocated",
            "overdraft_limit",
            "is_over_limit",
        ],
    )?;
    string(required(o, what, "scope")?, &format!("{what}.scope"))?;
    string(
        required(o, what, "scope_path")?,
        &format!("{what}.scope_path"),
    )?;
    let unit = amount(
        required(o, what, "remaining")?,
        &format!("{what}.remaining"),
        true,
    )?;
    for name in ["reserved", "spent", "debt", "allocated", "overdraft_limit"] {
        if let Some(a) = o.get(name) {
            let u = amount(a, &format!("{what}.{name}"), false)?;
            if u != unit {
                return Err(format!("{what} mixes units ({unit} and {u})"));
            }
        }
    }
    if let Some(b) = o.get("is_over_limit") {
        boolean(b, &format!("{what}.is_over_limit"))?;
    }
    Ok(())
}

fn balances(v: &Value, what: &str) -> Result<(), Invalid> {
    let items = v
        .as_array()
        .ok_or_else(|| format!("{what} is not an array"))?;
    for (i, b) in items.iter().enumerate() {
        balance(b, &format!("{what}[{i}]"))?;
    }
    Ok(())
}

fn caps(v: &Value, what: &str) -> Result<(), Invalid> {
    let o = object(v, what)?;
    only_known(
        o,
        what,
        &[
            "max_tokens",
            "max_steps_remaining",
            "tool_allowlist",
            "tool_denylist",
            "cooldown_ms",
        ],
    )?;
    for name in ["max_tokens", "max_steps_remaining", "cooldown_ms"] {
        if let Some(n) = o.get(name) {
            // No int64 format here: any non-negative integer literal JSON can hold.
            int_in(n, &format!("{what}.{name}"), 0, i128::from(u64::MAX))?;
        }
    }
    for name in ["tool_allowlist", "tool_denylist"] {
        if let Some(a) = o.get(name) {
            string_array(a, &format!("{what}.{name}"), Some(256))?;
        }
    }
    Ok(())
}

fn evidence_ref(v: &Value, what: &str) -> Result<(), Invalid> {
    let o = object(v, what)?;
    only_known(o, what, &["evidence_id", "cycles_evidence_url"])?;
    let id = string(
        required(o, what, "evidence_id")?,
        &format!("{what}.evidence_id"),
    )?;
    if id.len() != 64 || !id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return Err(format!(
            "{what}.evidence_id is not 64 lowercase hex characters"
        ));
    }
    string(
        required(o, what, "cycles_evidence_url")?,
        &format!("{what}.cycles_evidence_url"),
    )?;
    Ok(())
}

/// A schema-valid `ReservationCreateResponse`, reduced to what scheduling uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CreateBody {
    /// `ALLOW`, `ALLOW_WITH_CAPS` or `DENY`.
    pub decision: String,
    /// The reservation id, when present.
    pub reservation_id: Option<String>,
    /// `expires_at_ms`, when present.
    pub expires_at_ms: Option<u64>,
    /// `remaining_ttl_ms`, when present.
    pub remaining_ttl_ms: Option<u64>,
}

/// Checks a body against `ReservationCreateResponse`.
pub fn create_response(body: &[u8]) -> Result<CreateBody, Invalid> {
    let v = parse_strict(body).map_err(|e| format!("body is not valid JSON: {e}"))?;
    let what = "ReservationCreateResponse";
    let o = object(&v, what)?;
    only_known(
        o,
        what,
        &[
            "decision",
            "reservation_id",
            "reserved",
            "expires_at_ms",
            "remaining_ttl_ms",
            "scope_path",
            "affected_scopes",
            "caps",
            "balances",
            "reason_code",
            "retry_after_ms",
            "cycles_evidence",
        ],
    )?;
    let decision = string(required(o, what, "decision")?, "decision")?;
    one_of(decision, "decision", &["ALLOW", "ALLOW_WITH_CAPS", "DENY"])?;
    string_array(
        required(o, what, "affected_scopes")?,
        "affected_scopes",
        None,
    )?;
    let reservation_id = match o.get("reservation_id") {
        Some(r) => Some(string(r, "reservation_id")?.to_owned()),
        None => None,
    };
    if let Some(r) = o.get("reserved") {
        amount(r, "reserved", false)?;
    }
    let expires_at_ms = o
        .get("expires_at_ms")
        .map(|e| int_in(e, "expires_at_ms", 0, I64_MAX))
        .transpose()?
        .map(|e| e as u64);
    let remaining_ttl_ms = o
        .get("remaining_ttl_ms")
        .map(|e| int_in(e, "remaining_ttl_ms", 0, I64_MAX))
        .transpose()?
        .map(|e| e as u64);
    if let Some(s) = o.get("scope_path") {
        string(s, "scope_path")?;
    }
    if let Some(c) = o.get("caps") {
        caps(c, "caps")?;
    }
    if let Some(b) = o.get("balances") {
        balances(b, "balances")?;
    }
    if let Some(r) = o.get("reason_code") {
        max_len(string(r, "reason_code")?, "reason_code", 128)?;
    }
    if let Some(r) = o.get("retry_after_ms") {
        int_in(r, "retry_after_ms", 0, i128::from(u64::MAX))?;
    }
    if let Some(e) = o.get("cycles_evidence") {
        evidence_ref(e, "cycles_evidence")?;
    }
    Ok(CreateBody {
        decision: decision.to_owned(),
        reservation_id,
        expires_at_ms,
        remaining_ttl_ms,
    })
}

/// A schema-valid `ReservationExtendResponse`, reduced to what scheduling uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExtendBody {
    /// The new server-authoritative expiry.
    pub expires_at_ms: u64,
    /// The server's observation of the remaining lifetime, when emitted.
    pub remaining_ttl_ms: Option<u64>,
}

/// Checks a body against `ReservationExtendResponse`: `status` = `ACTIVE`,
/// integer `expires_at_ms` in int64 range, optional integer `remaining_ttl_ms`,
/// optional `balances`, nothing else, no nulls.
pub fn extend_response(body: &[u8]) -> Result<ExtendBody, Invalid> {
    let v = parse_strict(body).map_err(|e| format!("body is not valid JSON: {e}"))?;
    let what = "ReservationExtendResponse";
    let o = object(&v, what)?;
    only_known(
        o,
        what,
        &["status", "expires_at_ms", "remaining_ttl_ms", "balances"],
    )?;
    let status = string(required(o, what, "status")?, "status")?;
    one_of(status, "status", &["ACTIVE"])?;
    let expires_at_ms = int_in(
        required(o, what, "expires_at_ms")?,
        "expires_at_ms",
        0,
        I64_MAX,
    )? as u64;
    let remaining_ttl_ms = o
        .get("remaining_ttl_ms")
        .map(|e| int_in(e, "remaining_ttl_ms", 0, I64_MAX))
        .transpose()?
        .map(|e| e as u64);
    if let Some(b) = o.get("balances") {
        balances(b, "balances")?;
    }
    Ok(ExtendBody {
        expires_at_ms,
        remaining_ttl_ms,
    })
}

/// The string `error` member of a JSON-object body, if there is one (P-3).
pub fn error_code(body: &[u8]) -> Option<String> {
    // Duplicates make the body unusable as an error body too.
    let v = parse_strict(body).ok()?;
    v.as_object()?.get("error")?.as_str().map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extend_body_checks() {
        assert!(extend_response(br#"{"status":"ACTIVE","expires_at_ms":5}"#).is_ok());
        let ok = extend_response(
            br#"{"status":"ACTIVE","expires_at_ms":5,"remaining_ttl_ms":9223372036854775807}"#,
        );
        assert_eq!(ok.unwrap().remaining_ttl_ms, Some(i64::MAX as u64));
        for bad in [
            &br#"{"status":"ACTIVE","expires_at_ms":5,"remaining_ttl_ms":9223372036854775808}"#[..],
            br#"{"status":"ACTIVE","expires_at_ms":5.0}"#,
            br#"{"status":"ACTIVE","expires_at_ms":5e0}"#,
            br#"{"status":"ACTIVE","expires_at_ms":-1}"#,
            br#"{"status":"ACTIVE","expires_at_ms":5,"expires_at_ms":6}"#,
            br#"{"status":"ACTIVE","expires_at_ms":5,"remaining_ttl_ms":null}"#,
            br#"{"status":"ACTIVE","expires_at_ms":5,"extra":1}"#,
            br#"{"status":"EXPIRED","expires_at_ms":5}"#,
            br#"{"status":"ACTIVE"}"#,
            br#"[]"#,
            br#""#,
            br#"{"status":"ACTIVE","expires_at_ms":5} x"#,
            br#"{"status":"ACTIVE","expires_at_ms":5,"balances":[{"scope":"a","scope_path":"a","remaining":{"unit":"TOKENS","amount":1},"spent":{"unit":"CREDITS","amount":1}}]}"#,
        ] {
            assert!(extend_response(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn nested_duplicates_are_rejected() {
        assert!(parse_strict(br#"{"a":{"b":1,"b":2}}"#).is_err());
        assert!(parse_strict(br#"[{"b":1},{"b":2}]"#).is_ok());
    }

    #[test]
    fn error_codes() {
        assert_eq!(
            error_code(br#"{"error":"NOT_FOUND"}"#).as_deref(),
            Some("NOT_FOUND")
        );
        assert_eq!(error_code(br#"{"error":7}"#), None);
        assert_eq!(error_code(b"<html>"), None);
    }
}
