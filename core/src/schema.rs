//! Strict response parsing and the schema checks of the protocol's success
//! bodies (HB-18, D-1, P-1, P-7, P-8).
//!
//! Rule ids are those of the [heartbeat contract](https://github.com/leasebeat/leasebeat/blob/main/docs/heartbeat-contract.md).
//!
//! Bodies are read by the crate's own strict reader in `json.rs` (numbers kept as their literal text,
//! duplicated member names rejected, no recursion limit). The checks then
//! follow the protocol file: `additionalProperties: false` everywhere it says
//! so, no nulls, integers only as JSON integer literals of any size, `format:
//! int64` ranges enforced. Cross-field rules the protocol leaves to clients (a
//! balance mixing units) are not schema rules (P-8).

use std::borrow::Cow;

use crate::json::{self, J};

/// How deep a success body is built: the deepest schema position is
/// `balances[i].remaining.amount` (depth 4); anything deeper is invalid.
const SUCCESS_DEPTH: usize = 6;

/// A reason a body is not schema-valid.
pub type Invalid = String;

type Obj<'a> = [(Cow<'a, str>, J<'a>)];

fn object<'v, 'a>(v: &'v J<'a>, what: &str) -> Result<&'v Obj<'a>, Invalid> {
    match v {
        J::Obj(o) => Ok(o),
        _ => Err(format!("{what} is not a JSON object")),
    }
}

fn get<'v, 'a>(o: &'v Obj<'a>, name: &str) -> Option<&'v J<'a>> {
    o.iter().find(|(k, _)| k == name).map(|(_, v)| v)
}

fn only_known(o: &Obj, what: &str, known: &[&str]) -> Result<(), Invalid> {
    for (k, v) in o {
        if !known.contains(&k.as_ref()) {
            return Err(format!("{what} has an unknown property {k:?}"));
        }
        if *v == J::Null {
            return Err(format!("{what}.{k} is null"));
        }
    }
    Ok(())
}

fn required<'v, 'a>(o: &'v Obj<'a>, what: &str, name: &str) -> Result<&'v J<'a>, Invalid> {
    get(o, name).ok_or_else(|| format!("{what} lacks required {name:?}"))
}

/// An integer literal (P-1, P-7) no lower than `min` and, when given, no
/// higher than `max`; `60000.0` and `6e4` are not integers, `-0` is 0, and an
/// integer of any size is an integer. Values outside `i128` saturate (they
/// are then outside every bound a caller gives).
fn int_in(v: &J<'_>, what: &str, min: i128, max: Option<i128>) -> Result<i128, Invalid> {
    let t = match v {
        J::Num(t) => *t,
        _ => return Err(format!("{what} is not a number")),
    };
    if t.contains(['.', 'e', 'E']) {
        return Err(format!("{what} is not an integer literal"));
    }
    let (neg, digits) = match t.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, t),
    };
    let i = match digits.parse::<i128>() {
        Ok(m) if neg => -m,
        Ok(m) => m,
        Err(_) if neg => i128::MIN,
        Err(_) => i128::MAX,
    };
    if i < min || max.is_some_and(|m| i > m) {
        let shown = json::cut(t, 40);
        let shown = if shown.1 {
            format!("{}...", shown.0)
        } else {
            shown.0
        };
        let range = match max {
            Some(m) => format!("{min}..={m}"),
            None => format!(">= {min}"),
        };
        return Err(format!("{what} = {shown} is outside {range}"));
    }
    Ok(i)
}

const I64_MAX: Option<i128> = Some(i64::MAX as i128);
const I64_MIN: i128 = i64::MIN as i128;

fn string<'v>(v: &'v J<'_>, what: &str) -> Result<&'v str, Invalid> {
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

fn boolean(v: &J<'_>, what: &str) -> Result<(), Invalid> {
    if let J::Bool(_) = v {
        Ok(())
    } else {
        Err(format!("{what} is not a boolean"))
    }
}

fn array<'v, 'a>(v: &'v J<'a>, what: &str) -> Result<&'v [J<'a>], Invalid> {
    match v {
        J::Arr(a) => Ok(a),
        _ => Err(format!("{what} is not an array")),
    }
}

fn string_array(v: &J<'_>, what: &str, max_item_len: Option<usize>) -> Result<(), Invalid> {
    let items = array(v, what)?;
    for (i, item) in items.iter().enumerate() {
        let s = string(item, &format!("{what}[{i}]"))?;
        if let Some(m) = max_item_len {
            max_len(s, &format!("{what}[{i}]"), m)?;
        }
    }
    Ok(())
}

const UNITS: &[&str] = &["USD_MICROCENTS", "TOKENS", "CREDITS", "RISK_POINTS"];

fn amount(v: &J<'_>, what: &str, signed: bool) -> Result<(), Invalid> {
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
    Ok(())
}

fn balance(v: &J<'_>, what: &str) -> Result<(), Invalid> {
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
    amount(
        required(o, what, "remaining")?,
        &format!("{what}.remaining"),
        true,
    )?;
    // P-8: units may differ between amounts; that is not a schema rule.
    for name in ["reserved", "spent", "debt", "allocated", "overdraft_limit"] {
        if let Some(a) = get(o, name) {
            amount(a, &format!("{what}.{name}"), false)?;
        }
    }
    if let Some(b) = get(o, "is_over_limit") {
        boolean(b, &format!("{what}.is_over_limit"))?;
    }
    Ok(())
}

fn balances(v: &J<'_>, what: &str) -> Result<(), Invalid> {
    let items = array(v, what)?;
    for (i, b) in items.iter().enumerate() {
        balance(b, &format!("{what}[{i}]"))?;
    }
    Ok(())
}

fn caps(v: &J<'_>, what: &str) -> Result<(), Invalid> {
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
        if let Some(n) = get(o, name) {
            // No `format` here: a non-negative integer literal of any size (P-7).
            int_in(n, &format!("{what}.{name}"), 0, None)?;
        }
    }
    for name in ["tool_allowlist", "tool_denylist"] {
        if let Some(a) = get(o, name) {
            string_array(a, &format!("{what}.{name}"), Some(256))?;
        }
    }
    Ok(())
}

fn evidence_ref(v: &J<'_>, what: &str) -> Result<(), Invalid> {
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
    let v = json::parse(body, SUCCESS_DEPTH).map_err(|e| format!("body is not valid JSON: {e}"))?;
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
    let reservation_id = match get(o, "reservation_id") {
        Some(r) => Some(string(r, "reservation_id")?.to_owned()),
        None => None,
    };
    if let Some(r) = get(o, "reserved") {
        amount(r, "reserved", false)?;
    }
    let expires_at_ms = get(o, "expires_at_ms")
        .map(|e| int_in(e, "expires_at_ms", 0, I64_MAX))
        .transpose()?
        .map(|e| e as u64);
    let remaining_ttl_ms = get(o, "remaining_ttl_ms")
        .map(|e| int_in(e, "remaining_ttl_ms", 0, I64_MAX))
        .transpose()?
        .map(|e| e as u64);
    if let Some(s) = get(o, "scope_path") {
        string(s, "scope_path")?;
    }
    if let Some(c) = get(o, "caps") {
        caps(c, "caps")?;
    }
    if let Some(b) = get(o, "balances") {
        balances(b, "balances")?;
    }
    if let Some(r) = get(o, "reason_code") {
        max_len(string(r, "reason_code")?, "reason_code", 128)?;
    }
    if let Some(r) = get(o, "retry_after_ms") {
        int_in(r, "retry_after_ms", 0, None)?;
    }
    if let Some(e) = get(o, "cycles_evidence") {
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
#[inline]
pub fn extend_response(body: &[u8]) -> Result<ExtendBody, Invalid> {
    // The common body, read without building anything (a strict subset of
    // what the full check below accepts, with the same numbers).
    if let Some((expires_at_ms, remaining_ttl_ms)) = json::extend_fast(body) {
        return Ok(ExtendBody {
            expires_at_ms,
            remaining_ttl_ms,
        });
    }
    extend_response_strict(body)
}

/// [`extend_response`] without its fast path: the full strict reader.
fn extend_response_strict(body: &[u8]) -> Result<ExtendBody, Invalid> {
    let v = json::parse(body, SUCCESS_DEPTH).map_err(|e| format!("body is not valid JSON: {e}"))?;
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
    let remaining_ttl_ms = get(o, "remaining_ttl_ms")
        .map(|e| int_in(e, "remaining_ttl_ms", 0, I64_MAX))
        .transpose()?
        .map(|e| e as u64);
    if let Some(b) = get(o, "balances") {
        balances(b, "balances")?;
    }
    Ok(ExtendBody {
        expires_at_ms,
        remaining_ttl_ms,
    })
}

/// The string `error` member of a JSON-object body, if there is one (P-3,
/// P-7). Only the top-level `error` member is read into memory; the rest of
/// the body is validated as JSON text and skipped, whatever it holds (deep
/// `details`, huge numbers, duplicated names below the top level). A second
/// top-level `error` member makes the body unusable. A code longer than
/// 256 bytes is cut and ends with `...` (it cannot be a permanent code).
pub fn error_code(body: &[u8]) -> Option<String> {
    let (code, was_cut) = json::top_level_error(body)?;
    Some(if was_cut { format!("{code}...") } else { code })
}

/// The protocol's `ErrorCode` enum.
pub const ERROR_CODES: &[&str] = &[
    "INVALID_REQUEST",
    "UNAUTHORIZED",
    "FORBIDDEN",
    "NOT_FOUND",
    "BUDGET_EXCEEDED",
    "BUDGET_FROZEN",
    "BUDGET_CLOSED",
    "RESERVATION_EXPIRED",
    "RESERVATION_FINALIZED",
    "IDEMPOTENCY_MISMATCH",
    "UNIT_MISMATCH",
    "OVERDRAFT_LIMIT_EXCEEDED",
    "DEBT_OUTSTANDING",
    "MAX_EXTENSIONS_EXCEEDED",
    "LIMIT_EXCEEDED",
    "TENANT_CLOSED",
    "INTERNAL_ERROR",
];

/// Checks a body against `CommitResponse` (ST-2): `status` = `COMMITTED`,
/// `charged` an `Amount`, optional `released` (`Amount`), `balances` and
/// `cycles_evidence`, nothing else, no nulls, exact integers (P-1, P-7).
pub fn commit_response(body: &[u8]) -> Result<(), Invalid> {
    let v = json::parse(body, SUCCESS_DEPTH).map_err(|e| format!("body is not valid JSON: {e}"))?;
    let what = "CommitResponse";
    let o = object(&v, what)?;
    only_known(
        o,
        what,
        &[
            "status",
            "charged",
            "released",
            "balances",
            "cycles_evidence",
        ],
    )?;
    let status = string(required(o, what, "status")?, "status")?;
    one_of(status, "status", &["COMMITTED"])?;
    amount(required(o, what, "charged")?, "charged", false)?;
    if let Some(r) = get(o, "released") {
        amount(r, "released", false)?;
    }
    if let Some(b) = get(o, "balances") {
        balances(b, "balances")?;
    }
    if let Some(e) = get(o, "cycles_evidence") {
        evidence_ref(e, "cycles_evidence")?;
    }
    Ok(())
}

/// Checks a body against `EventCreateResponse` (ST-2): `status` =
/// `APPLIED`, a string `event_id`, optional `charged` (`Amount`) and
/// `balances`, nothing else, no nulls.
pub fn event_response(body: &[u8]) -> Result<(), Invalid> {
    let v = json::parse(body, SUCCESS_DEPTH).map_err(|e| format!("body is not valid JSON: {e}"))?;
    let what = "EventCreateResponse";
    let o = object(&v, what)?;
    only_known(o, what, &["status", "event_id", "charged", "balances"])?;
    let status = string(required(o, what, "status")?, "status")?;
    one_of(status, "status", &["APPLIED"])?;
    string(required(o, what, "event_id")?, "event_id")?;
    if let Some(c) = get(o, "charged") {
        amount(c, "charged", false)?;
    }
    if let Some(b) = get(o, "balances") {
        balances(b, "balances")?;
    }
    Ok(())
}

/// Checks a body against `ReleaseResponse` (ST-2): `status` = `RELEASED`,
/// `released` an `Amount`, optional `balances`, `cycles_evidence` and
/// `has_more` (boolean), nothing else, no nulls.
pub fn release_response(body: &[u8]) -> Result<(), Invalid> {
    let v = json::parse(body, SUCCESS_DEPTH).map_err(|e| format!("body is not valid JSON: {e}"))?;
    let what = "ReleaseResponse";
    let o = object(&v, what)?;
    only_known(
        o,
        what,
        &[
            "status",
            "released",
            "balances",
            "cycles_evidence",
            "has_more",
        ],
    )?;
    let status = string(required(o, what, "status")?, "status")?;
    one_of(status, "status", &["RELEASED"])?;
    amount(required(o, what, "released")?, "released", false)?;
    if let Some(b) = get(o, "balances") {
        balances(b, "balances")?;
    }
    if let Some(e) = get(o, "cycles_evidence") {
        evidence_ref(e, "cycles_evidence")?;
    }
    if let Some(h) = get(o, "has_more") {
        boolean(h, "has_more")?;
    }
    Ok(())
}

/// Checks a body against `ErrorResponse` (ST-7) and returns its code:
/// `error` one of [`ERROR_CODES`], string `message` and `request_id`,
/// optional `trace_id` (32 lowercase hex characters), `details` (any
/// object) and `cycles_evidence`, nothing else, no nulls.
pub fn error_response(body: &[u8]) -> Result<String, Invalid> {
    let v = json::parse(body, SUCCESS_DEPTH).map_err(|e| format!("body is not valid JSON: {e}"))?;
    let what = "ErrorResponse";
    let o = object(&v, what)?;
    only_known(
        o,
        what,
        &[
            "error",
            "message",
            "request_id",
            "trace_id",
            "details",
            "cycles_evidence",
        ],
    )?;
    let code = string(required(o, what, "error")?, "error")?;
    one_of(code, "error", ERROR_CODES)?;
    string(required(o, what, "message")?, "message")?;
    string(required(o, what, "request_id")?, "request_id")?;
    if let Some(t) = get(o, "trace_id") {
        let t = string(t, "trace_id")?;
        if t.len() != 32 || !t.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return Err("trace_id is not 32 lowercase hex characters".into());
        }
    }
    if let Some(d) = get(o, "details") {
        object(d, "details")?;
    }
    if let Some(e) = get(o, "cycles_evidence") {
        evidence_ref(e, "cycles_evidence")?;
    }
    Ok(code.to_owned())
}

/// The string `message` member of a JSON-object error body, if there is
/// one (read as [`error_code`] reads `error`), cut to 256 bytes (then
/// ending with `...`). Only for reporting: no decision depends on it.
pub fn error_message(body: &[u8]) -> Option<String> {
    let (message, was_cut) = json::top_level_string(body, "message", 256)?;
    Some(if was_cut {
        format!("{message}...")
    } else {
        message
    })
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
            br#"{"status":"ACTIVE","expires_at_ms":-0.0}"#,
            br#"{"status":"ACTIVE","expires_at_ms":1e400}"#,
            br#"{"status":"ACTIVE","expires_at_ms":"\ud800"}"#,
            b"{\"status\":\"ACTIVE\",\"expires_at_ms\":5,\"x\":\"\xff\"}",
        ] {
            assert!(
                extend_response(bad).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn the_fast_path_agrees_with_the_strict_reader() {
        let bases: &[&[u8]] = &[
            br#"{"status":"ACTIVE","expires_at_ms":1785585720000,"remaining_ttl_ms":60000}"#,
            br#" { "remaining_ttl_ms" : 0 , "expires_at_ms" :5,"status":"ACTIVE"}
"#,
            br#"{"status":"ACTIVE","expires_at_ms":999999999999999999}"#,
            br#"{"status":"ACTIVE","expires_at_ms":9223372036854775807}"#,
            br#"{"status":"ACTIVE","expires_at_ms":-0,"remaining_ttl_ms":01}"#,
            br#"{"status":"ACTIVE","expires_at_ms":5,"balances":[]}"#,
        ];
        // Every length of number, 1 to 20 digits, in each position (the
        // fast path reads eight digits at a time).
        let mut generated = Vec::new();
        for n in 1..=20 {
            let d = &"98765432101234567890"[..n];
            generated.push(format!(
                r#"{{"status":"ACTIVE","expires_at_ms":{d},"remaining_ttl_ms":{d}}}"#
            ));
            generated.push(format!(r#"{{"status":"ACTIVE","expires_at_ms":{d}}}"#));
            generated.push(format!(r#" {{"expires_at_ms": {d} ,"status":"ACTIVE"}}"#));
        }
        let bases: Vec<&[u8]> = bases
            .iter()
            .copied()
            .chain(generated.iter().map(|g| g.as_bytes()))
            .collect();
        let mut fast = 0;
        for base in bases {
            // The body itself, every prefix, and every one-byte change to a
            // byte that matters to the grammar.
            let mut bodies = vec![base.to_vec()];
            for n in 0..base.len() {
                bodies.push(base[..n].to_vec());
                for b in [
                    b'"', b'0', b'9', b'-', b'.', b'e', b',', b'}', b' ', b'\\', b'x', 0xc3,
                ] {
                    let mut m = base.to_vec();
                    m[n] = b;
                    bodies.push(m);
                }
            }
            for body in bodies {
                let strict = extend_response_strict(&body);
                if let Some((e, r)) = json::extend_fast(&body) {
                    fast += 1;
                    let want = ExtendBody {
                        expires_at_ms: e,
                        remaining_ttl_ms: r,
                    };
                    assert_eq!(strict, Ok(want), "{}", String::from_utf8_lossy(&body));
                }
                assert_eq!(
                    extend_response(&body).ok(),
                    strict.ok(),
                    "{}",
                    String::from_utf8_lossy(&body)
                );
            }
        }
        assert!(fast > 100, "the fast path took {fast} bodies");
    }

    #[test]
    fn p7_p8_valid_bodies() {
        let b = extend_response(br#"{"status":"ACTIVE","expires_at_ms":5,"remaining_ttl_ms":-0}"#);
        assert_eq!(b.unwrap().remaining_ttl_ms, Some(0));
        // P-8: mixed units are not a schema rule.
        assert!(extend_response(br#"{"status":"ACTIVE","expires_at_ms":5,"balances":[{"scope":"a","scope_path":"a","remaining":{"unit":"TOKENS","amount":1},"spent":{"unit":"CREDITS","amount":1}}]}"#).is_ok());
        // P-7: no format, any size.
        let c = create_response(
            br#"{"decision":"ALLOW","reservation_id":"r","affected_scopes":[],"expires_at_ms":5,"caps":{"max_tokens":18446744073709551616000000000000000000000000},"retry_after_ms":99999999999999999999999999999999999999999999999}"#,
        );
        assert!(c.is_ok(), "{c:?}");
        assert!(
            create_response(
                br#"{"decision":"ALLOW","affected_scopes":[],"caps":{"max_tokens":-1}}"#
            )
            .is_err()
        );
        assert!(
            create_response(br#"{"decision":"ALLOW","affected_scopes":[],"caps":{"max_tokens":-99999999999999999999999999999999999999999}}"#)
                .is_err()
        );
    }

    #[test]
    fn settlement_bodies() {
        assert!(
            commit_response(br#"{"status":"COMMITTED","charged":{"unit":"TOKENS","amount":9}}"#)
                .is_ok()
        );
        assert!(
            commit_response(
                br#"{"status":"COMMITTED","charged":{"unit":"TOKENS","amount":9},"released":null}"#
            )
            .is_err()
        );
        assert!(
            commit_response(br#"{"status":"COMMITTED","charged":{"unit":"TOKENS","amount":9.0}}"#)
                .is_err()
        );
        assert!(commit_response(br#"{"status":"COMMITTED"}"#).is_err());
        assert!(event_response(br#"{"status":"APPLIED","event_id":"e"}"#).is_ok());
        assert!(event_response(br#"{"status":"APPLIED"}"#).is_err());
        assert!(release_response(br#"{"status":"RELEASED","released":{"unit":"TOKENS","amount":0},"has_more":false}"#).is_ok());
        assert!(
            release_response(
                br#"{"status":"RELEASED","released":{"unit":"TOKENS","amount":0},"x":1}"#
            )
            .is_err()
        );
        assert_eq!(
            error_response(
                br#"{"error":"NOT_FOUND","message":"m","request_id":"r","details":{"a":[1e400]}}"#
            ),
            Ok("NOT_FOUND".into())
        );
        assert!(error_response(br#"{"error":"NOT_FOUND","message":"m"}"#).is_err());
        assert!(error_response(br#"{"error":"NEW_CODE","message":"m","request_id":"r"}"#).is_err());
        assert!(
            error_response(
                br#"{"error":"NOT_FOUND","message":"m","request_id":"r","trace_id":"X"}"#
            )
            .is_err()
        );
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

    #[test]
    fn error_messages() {
        assert_eq!(
            error_message(br#"{"error":"INVALID_REQUEST","message":"subject is required"}"#)
                .as_deref(),
            Some("subject is required")
        );
        assert_eq!(error_message(br#"{"error":"X","message":1}"#), None);
        assert_eq!(error_message(br#"{"message":"a","message":"b"}"#), None);
        let long = format!(r#"{{"message":"{}"}}"#, "m".repeat(300));
        assert_eq!(error_message(long.as_bytes()).unwrap().len(), 259);
    }
}
