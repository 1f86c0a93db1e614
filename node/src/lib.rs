//! # leasebeat for Node.js
//!
//! The Node.js addon of `leasebeat`, the one audited lease-heartbeat scheduler
//! for Cycles reservations, built with napi-rs. It is a thin translation of
//! the Rust core: every rule (schema checks, classification, Retry-After,
//! rounding, saturation, keys) is the core's; this crate only converts
//! JavaScript values in and out and turns core errors into JavaScript errors
//! with stable `code`s.
//!
//! Conventions (see `node/README.md`):
//!
//! * Times are accepted as monotonic milliseconds in a `number` (fractions
//!   allowed, as `performance.now()` gives; converted with
//!   `ns = Math.round(ms * 1e6)`) or as nanoseconds in a `bigint` (as
//!   `process.hrtime.bigint()` gives). Non-finite and negative values throw.
//! * Millisecond quantities come out as a `number` when they are safe
//!   integers, else a `bigint`; `Infinity`/`-Infinity` stand for the core's
//!   infinities.
//! * Every call is synchronous and fast (no I/O, no locks held across calls):
//!   nothing blocks the event loop.
#![deny(missing_docs)]

mod conv;
mod errors;
mod fast;
mod journal;
mod raw;
mod settlement;

use std::sync::{Arc, Mutex};

use leasebeat as lb;
use napi::bindgen_prelude::*;
use napi_derive::napi;

pub use errors::ErrorCode;
use errors::{Class, Fail, R, run};
pub use journal::*;
pub use settlement::*;

// ----- string literal unions -----

/// Why a heartbeat stopped. The strings are stable and the same in every
/// language.
#[napi(string_enum = "snake_case")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// Two consecutive successes left no room for a positive delay (HB-33).
    LeaseTooShort,
    /// No complete retry plus margin fits in the proven lead (HB-22, HB-27).
    RetryWindowExhausted,
    /// Consecutive failures without elapsed time advancing (HB-28).
    NoProgress,
    /// A 429 whose Retry-After is missing, invalid or beyond the window.
    Throttled,
    /// `RESERVATION_EXPIRED`, or a bodyless 410.
    Expired,
    /// `RESERVATION_FINALIZED`.
    Finalized,
    /// `MAX_EXTENSIONS_EXCEEDED`.
    MaxExtensions,
    /// `TENANT_CLOSED`.
    TenantClosed,
    /// `NOT_FOUND`, or a bodyless 404.
    NotFound,
    /// Any other 4xx (408 included).
    Rejected,
    /// A 1xx or 3xx (or unknown class) status.
    UnexpectedStatus,
    /// The create and its one same-key retry both failed transiently.
    CreateFailed,
    /// A 4xx on a create (429 included).
    CreateRejected,
    /// The create did not yield a live reservation with an anchor.
    NoReservation,
    /// The caller cancelled.
    Cancelled,
}

impl From<lb::StopReason> for StopReason {
    fn from(r: lb::StopReason) -> StopReason {
        match r {
            lb::StopReason::LeaseTooShort => StopReason::LeaseTooShort,
            lb::StopReason::RetryWindowExhausted => StopReason::RetryWindowExhausted,
            lb::StopReason::NoProgress => StopReason::NoProgress,
            lb::StopReason::Throttled => StopReason::Throttled,
            lb::StopReason::Expired => StopReason::Expired,
            lb::StopReason::Finalized => StopReason::Finalized,
            lb::StopReason::MaxExtensions => StopReason::MaxExtensions,
            lb::StopReason::TenantClosed => StopReason::TenantClosed,
            lb::StopReason::NotFound => StopReason::NotFound,
            lb::StopReason::Rejected => StopReason::Rejected,
            lb::StopReason::UnexpectedStatus => StopReason::UnexpectedStatus,
            lb::StopReason::CreateFailed => StopReason::CreateFailed,
            lb::StopReason::CreateRejected => StopReason::CreateRejected,
            lb::StopReason::NoReservation => StopReason::NoReservation,
            lb::StopReason::Cancelled => StopReason::Cancelled,
        }
    }
}

/// Which algorithm scheduled a decision: `'primary'` (the response carried
/// `remaining_ttl_ms`) or `'fallback'` (it did not).
#[napi(string_enum = "snake_case")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// The normative algorithm.
    Primary,
    /// The non-normative measured-grant fallback.
    Fallback,
}

impl From<lb::Mode> for Mode {
    fn from(m: lb::Mode) -> Mode {
        match m {
            lb::Mode::Primary => Mode::Primary,
            lb::Mode::Fallback => Mode::Fallback,
        }
    }
}

/// Whether an attempt uses a new idempotency key or the previous attempt's.
#[napi(string_enum = "snake_case")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyUse {
    /// A key never used before on this lease.
    New,
    /// Exactly the previous attempt's key, with a byte-identical body.
    Same,
}

impl From<lb::KeyUse> for KeyUse {
    fn from(k: lb::KeyUse) -> KeyUse {
        match k {
            lb::KeyUse::New => KeyUse::New,
            lb::KeyUse::Same => KeyUse::Same,
        }
    }
}

/// The request an attempt makes: `'create'` (`POST /v1/reservations`) or
/// `'extend'` (`POST /v1/reservations/{id}/extend`).
#[napi(string_enum = "snake_case")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttemptKind {
    /// `POST /v1/reservations`.
    Create,
    /// `POST /v1/reservations/{id}/extend`.
    Extend,
}

impl From<lb::AttemptKind> for AttemptKind {
    fn from(k: lb::AttemptKind) -> AttemptKind {
        match k {
            lb::AttemptKind::Create => AttemptKind::Create,
            lb::AttemptKind::Extend => AttemptKind::Extend,
        }
    }
}

/// What a decision says to do next: send a `'create'` (retry) or an
/// `'extend'`, or `'stop'` for good.
#[napi(string_enum = "snake_case")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Send a create attempt (the create's one same-key retry).
    Create,
    /// Send an extend attempt.
    Extend,
    /// Stop for good; see `reason`.
    Stop,
}

/// How the outcome that led to a decision was classified.
#[napi(string_enum = "snake_case")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutcomeClass {
    /// HTTP 200 with a schema-valid body.
    Success,
    /// Another 2xx, or a 200 whose body is not schema-valid.
    Ambiguous,
    /// A transport failure: timeout, connect error or reset.
    TransportFailure,
    /// A 5xx without a permanent error code.
    ServerError,
    /// A 429 without a permanent error code.
    Throttled,
    /// A permanent condition.
    Permanent,
    /// Any other 4xx.
    Rejected,
    /// A 1xx or 3xx.
    Unexpected,
    /// The caller cancelled.
    Cancelled,
}

impl From<lb::OutcomeClass> for OutcomeClass {
    fn from(o: lb::OutcomeClass) -> OutcomeClass {
        match o {
            lb::OutcomeClass::Success => OutcomeClass::Success,
            lb::OutcomeClass::Ambiguous => OutcomeClass::Ambiguous,
            lb::OutcomeClass::TransportFailure => OutcomeClass::TransportFailure,
            lb::OutcomeClass::ServerError => OutcomeClass::ServerError,
            lb::OutcomeClass::Throttled => OutcomeClass::Throttled,
            lb::OutcomeClass::Permanent => OutcomeClass::Permanent,
            lb::OutcomeClass::Rejected => OutcomeClass::Rejected,
            lb::OutcomeClass::Unexpected => OutcomeClass::Unexpected,
            lb::OutcomeClass::Cancelled => OutcomeClass::Cancelled,
        }
    }
}

/// A warning attached to a decision (stable strings).
#[napi(string_enum = "snake_case")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Warning {
    /// The fallback holds a fixed cadence because the grants look like
    /// maximum-lead clamping; the server's extension budget will deplete.
    ExtensionBudgetDepleting,
}

impl From<lb::Warning> for Warning {
    fn from(w: lb::Warning) -> Warning {
        match w {
            lb::Warning::ExtensionBudgetDepleting => Warning::ExtensionBudgetDepleting,
        }
    }
}

/// A transport failure of one attempt (no HTTP response was observed):
/// `'timeout'` (the enforced per-attempt timeout fired), `'connect'` (the
/// connection could not be established) or `'reset'` (reset or closed before
/// a complete response).
#[napi(string_enum = "snake_case")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransportFailure {
    /// The enforced per-attempt timeout fired.
    Timeout,
    /// The connection could not be established.
    Connect,
    /// The connection was reset or closed before a complete response.
    Reset,
}

/// What `pollAction()` asks for: `'send'` the attempt (at its due time),
/// `'await'` its outcome (it is in flight), or `'stop'` (for good).
#[napi(string_enum = "snake_case")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ActionType {
    /// Send `attempt` at `attempt.dueNs`, then call `handleSent`.
    Send,
    /// `attempt` is in flight: report its outcome.
    Await,
    /// The heartbeat stopped for good; see `reason`.
    Stop,
}

/// Why a `Retry-After` value cannot be used.
#[napi(string_enum = "snake_case")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetryAfterError {
    /// No `Retry-After` header at all.
    Missing,
    /// More than one value: a repeated header or a comma-separated list.
    Multiple,
    /// Not one delta-seconds value: empty, a sign, a fraction, an HTTP-date, ...
    Invalid,
    /// The seconds, or the seconds x 1000, overflow 64 bits.
    Overflow,
}

impl From<lb::arith::RetryAfterError> for RetryAfterError {
    fn from(e: lb::arith::RetryAfterError) -> RetryAfterError {
        match e {
            lb::arith::RetryAfterError::Missing => RetryAfterError::Missing,
            lb::arith::RetryAfterError::Multiple => RetryAfterError::Multiple,
            lb::arith::RetryAfterError::Invalid => RetryAfterError::Invalid,
            lb::arith::RetryAfterError::Overflow => RetryAfterError::Overflow,
        }
    }
}

// ----- numbers out -----

/// A millisecond quantity that may be infinite, as JavaScript sees it: a
/// `number` when it is a safe integer, else a `bigint`; `Infinity` and
/// `-Infinity` for the infinities.
pub struct JsNum(lb::Num);

impl ToNapiValue for JsNum {
    unsafe fn to_napi_value(env: sys::napi_env, val: Self) -> Result<sys::napi_value> {
        // SAFETY: forwarded to napi's own conversions with the same env.
        unsafe {
            match val.0 {
                lb::Num::Inf => f64::to_napi_value(env, f64::INFINITY),
                lb::Num::NegInf => f64::to_napi_value(env, f64::NEG_INFINITY),
                lb::Num::Int(v) if v.unsigned_abs() <= u128::from(conv::MAX_SAFE) => {
                    // |v| <= 2^53-1: exact as an f64.
                    f64::to_napi_value(env, v as f64)
                }
                lb::Num::Int(v) => BigInt::to_napi_value(env, BigInt::from(v)),
            }
        }
    }
}

impl TypeName for JsNum {
    fn type_name() -> &'static str {
        "number | bigint"
    }

    fn value_type() -> ValueType {
        ValueType::Unknown
    }
}

/// A getter's value, computed by the same expression for the `#[napi]`
/// getters and for the raw `__lbGet` callback of `fast.js` (see `raw.rs`).
pub enum Got {
    /// `reservationId`.
    ReservationId(Option<String>),
    /// `stopReason`.
    StopReason(Option<StopReason>),
    /// `mode`.
    Mode(Option<Mode>),
    /// `pollTimeout()`.
    PollTimeout(Option<BigInt>),
    /// `lastEventNs`.
    LastEventNs(BigInt),
    /// `ttlMs`.
    TtlMs(f64),
    /// `requestTimeoutMs`.
    RequestTimeoutMs(Option<JsNum>),
    /// `maxRttMs`.
    MaxRttMs(JsNum),
}

impl Got {
    /// The value of getter `which` (the codes of `fast.js`), if it exists.
    pub fn of(which: u32, hb: &lb::Heartbeat) -> Option<Got> {
        Some(match which {
            0 => Got::ReservationId(hb.reservation_id().map(str::to_owned)),
            1 => Got::StopReason(hb.stop_reason().map(StopReason::from)),
            2 => Got::Mode(hb.mode().map(Mode::from)),
            3 => Got::PollTimeout(hb.poll_timeout().map(BigInt::from)),
            4 => Got::LastEventNs(BigInt::from(hb.last_event_ns())),
            5 => Got::TtlMs(hb.config().ttl_ms as f64),
            6 => Got::RequestTimeoutMs(
                hb.config()
                    .request_timeout_ms
                    .filter(|t| *t != lb::arith::INFINITE)
                    .map(num),
            ),
            7 => Got::MaxRttMs(num(hb.max_rtt_ms())),
            _ => return None,
        })
    }
}

impl ToNapiValue for Got {
    unsafe fn to_napi_value(env: sys::napi_env, val: Self) -> Result<sys::napi_value> {
        // SAFETY: forwarded to the conversions of the `#[napi]` getters' types.
        unsafe {
            match val {
                Got::ReservationId(v) => ToNapiValue::to_napi_value(env, v),
                Got::StopReason(v) => ToNapiValue::to_napi_value(env, v),
                Got::Mode(v) => ToNapiValue::to_napi_value(env, v),
                Got::PollTimeout(v) => ToNapiValue::to_napi_value(env, v),
                Got::LastEventNs(v) => ToNapiValue::to_napi_value(env, v),
                Got::TtlMs(v) => ToNapiValue::to_napi_value(env, v),
                Got::RequestTimeoutMs(v) => ToNapiValue::to_napi_value(env, v),
                Got::MaxRttMs(v) => ToNapiValue::to_napi_value(env, v),
            }
        }
    }
}

fn num(ms: u64) -> JsNum {
    JsNum(lb::Num::from_ms(ms))
}

/// Nanoseconds as (approximate) milliseconds; the integer part is exact.
fn ns_to_ms_f64(ns: u64) -> f64 {
    (ns / 1_000_000) as f64 + (ns % 1_000_000) as f64 / 1e6
}

// ----- plain objects out -----

/// The numbers behind one decision. A field is present exactly when it
/// applies to that decision. Values are milliseconds: a `number` when a safe
/// integer, else a `bigint`; `Infinity`/`-Infinity` for the infinities.
#[napi(object, object_from_js = false)]
pub struct Numbers {
    /// Round trip of the attempt that produced this success, rounded up.
    #[napi(ts_type = "number | bigint")]
    pub rtt: Option<JsNum>,
    /// Largest rtt over this lease's schema-valid successes.
    #[napi(ts_type = "number | bigint")]
    pub max_rtt: Option<JsNum>,
    /// `max(0, remaining_ttl_ms - rtt)`; on a failure, that of the anchoring success.
    #[napi(ts_type = "number | bigint")]
    pub lead_floor: Option<JsNum>,
    /// `max(request_timeout_ms, 1000, 2 x max_rtt)`.
    #[napi(ts_type = "number | bigint")]
    pub attempt_budget: Option<JsNum>,
    /// `max(1000, 2 x max_rtt)`.
    #[napi(ts_type = "number | bigint")]
    pub safety_margin: Option<JsNum>,
    /// `2 x attempt_budget + safety_margin`.
    #[napi(ts_type = "number | bigint")]
    pub retry_reserve: Option<JsNum>,
    /// Delay from the observation to the next beat.
    #[napi(ts_type = "number | bigint")]
    pub next_delay: Option<JsNum>,
    /// Current lead estimate after a failure.
    #[napi(ts_type = "number | bigint")]
    pub lead: Option<JsNum>,
    /// `lead - attempt_budget - safety_margin`, unclamped (may be negative or `-Infinity`).
    #[napi(ts_type = "number | bigint")]
    pub retry_window: Option<JsNum>,
    /// Delay from the failure's observation to the same-key retry.
    #[napi(ts_type = "number | bigint")]
    pub retry_delay: Option<JsNum>,
    /// Fallback lead lower bound at the observation (may be negative).
    #[napi(ts_type = "number | bigint")]
    pub lead_min: Option<JsNum>,
    /// Fallback grant: difference of successive `expires_at_ms` values.
    #[napi(ts_type = "number | bigint")]
    pub grant: Option<JsNum>,
    /// Fallback cadence.
    #[napi(ts_type = "number | bigint")]
    pub cadence: Option<JsNum>,
    /// Fallback cadences skipped.
    #[napi(ts_type = "number | bigint")]
    pub skips: Option<JsNum>,
}

impl From<&lb::Numbers> for Numbers {
    fn from(n: &lb::Numbers) -> Numbers {
        let f = |v: Option<lb::Num>| v.map(JsNum);
        Numbers {
            rtt: f(n.rtt()),
            max_rtt: f(n.max_rtt()),
            lead_floor: f(n.lead_floor()),
            attempt_budget: f(n.attempt_budget()),
            safety_margin: f(n.safety_margin()),
            retry_reserve: f(n.retry_reserve()),
            next_delay: f(n.next_delay()),
            lead: f(n.lead()),
            retry_window: f(n.retry_window()),
            retry_delay: f(n.retry_delay()),
            lead_min: f(n.lead_min()),
            grant: f(n.grant()),
            cadence: f(n.cadence()),
            skips: f(n.skips()),
        }
    }
}

/// One decision of the scheduler: the answer to an outcome or a cancel. Every
/// decision carries the reservation id and the numbers behind it.
#[napi(object, object_from_js = false, use_nullable = true)]
pub struct Decision {
    /// `'create'` or `'extend'` (send that attempt), or `'stop'`.
    pub next: Next,
    /// Due time of the next attempt in milliseconds on the caller's clock
    /// (`Infinity` when never due); `null` for a stop. Fractions of a
    /// millisecond are approximate; `atNs` is exact.
    pub at: Option<f64>,
    /// Due time of the next attempt in nanoseconds; `null` for a stop and
    /// when the due time is +infinity.
    pub at_ns: Option<BigInt>,
    /// `'new'` or `'same'` key, for a send; `null` for a stop.
    pub key: Option<KeyUse>,
    /// 1 for the first key of this lease, 2 for the next new one, ... (a send).
    pub key_index: Option<u32>,
    /// The stop reason, for a stop.
    pub reason: Option<StopReason>,
    /// The algorithm that decided, where one applies.
    pub mode: Option<Mode>,
    /// The numbers behind the decision.
    pub numbers: Numbers,
    /// Warnings (only `'extension_budget_depleting'` exists).
    pub warnings: Vec<Warning>,
    /// How the deciding outcome was classified.
    pub outcome: OutcomeClass,
    /// A human-readable detail (e.g. the Retry-After problem, the error code).
    pub detail: Option<String>,
    /// The reservation id, once a create succeeded.
    pub reservation_id: Option<String>,
    /// D-15: until when the lease is proven alive, in milliseconds on the
    /// caller's clock (like `at`): the receipt of the last primary-path
    /// success plus its lead floor. `Infinity` when that sum overflows;
    /// `null` before the first success and on the fallback path (which
    /// proves nothing). Reaching it without a newer success puts the lease in
    /// jeopardy. Fractions are approximate; `provenUntilNs` is exact.
    pub proven_until: Option<f64>,
    /// `provenUntil` in nanoseconds: `null` when absent, and `2n ** 64n - 1n`
    /// (the largest 64-bit instant) for +infinity, so that
    /// `now >= provenUntilNs` is never true for it.
    pub proven_until_ns: Option<BigInt>,
    /// The deciding success's `expires_at_ms` (server clock, ms since the
    /// epoch) when this decision answers a success that carried it, else
    /// `null`. A `number` (a `bigint` beyond 2^53-1).
    #[napi(ts_type = "number | bigint")]
    pub expires_at_ms: Option<JsNum>,
    /// The deciding success's `remaining_ttl_ms` when this decision answers a
    /// success that carried it, else `null`. A `number` (a `bigint` beyond
    /// 2^53-1).
    #[napi(ts_type = "number | bigint")]
    pub remaining_ttl_ms: Option<JsNum>,
}

impl From<&lb::Decision> for Decision {
    fn from(d: &lb::Decision) -> Decision {
        let (next, reason) = match d.next {
            lb::Next::Send(lb::AttemptKind::Create) => (Next::Create, None),
            lb::Next::Send(lb::AttemptKind::Extend) => (Next::Extend, None),
            lb::Next::Stop(r) => (Next::Stop, Some(StopReason::from(r))),
        };
        let sending = reason.is_none();
        Decision {
            next,
            at: sending.then(|| d.at_ns.map_or(f64::INFINITY, ns_to_ms_f64)),
            at_ns: if sending {
                d.at_ns.map(BigInt::from)
            } else {
                None
            },
            key: d.key.map(KeyUse::from),
            key_index: d.key_index,
            reason,
            mode: d.mode.map(Mode::from),
            numbers: Numbers::from(&d.numbers),
            warnings: d.warnings.iter().map(Warning::from).collect(),
            outcome: OutcomeClass::from(d.outcome),
            detail: d.detail.clone(),
            reservation_id: d.reservation_id.as_deref().map(str::to_owned),
            proven_until: d.proven_until_ns.map(|p| {
                if p == u64::MAX {
                    f64::INFINITY
                } else {
                    ns_to_ms_f64(p)
                }
            }),
            proven_until_ns: d.proven_until_ns.map(BigInt::from),
            expires_at_ms: d.expires_at_ms.map(num),
            remaining_ttl_ms: d.remaining_ttl_ms.map(num),
        }
    }
}

/// One attempt the caller must send (or has sent).
#[napi(object, object_from_js = false, use_nullable = true)]
pub struct Attempt {
    /// Identifies this attempt in `handleSent`, `handleResponse` and
    /// `handleFailure`; 1 for the first attempt of a heartbeat. (Ids stay far
    /// below 2^53.)
    pub id: f64,
    /// `'create'` or `'extend'`.
    pub kind: AttemptKind,
    /// When to send it, in milliseconds on the caller's clock; `Infinity`
    /// when never. Fractions are approximate; `dueNs` is exact.
    pub due_ms: f64,
    /// When to send it, in nanoseconds; `null` when never (+infinity).
    pub due_ns: Option<BigInt>,
    /// The idempotency key: both the `X-Idempotency-Key` header and the body's
    /// `idempotency_key`.
    pub key: String,
    /// 1 for the first key of the lease, 2 for the next new one, ...
    pub key_index: u32,
    /// Whether the key is new or the previous attempt's.
    pub key_use: KeyUse,
    /// The exact JSON request body; byte-identical on a same-key retry. A
    /// `Buffer` at run time (typed as its base class `Uint8Array<ArrayBuffer>`
    /// so that the declarations need no `@types/node`); `fetch` accepts it as
    /// a body as it is.
    #[napi(ts_type = "Uint8Array<ArrayBuffer>")]
    pub body: Buffer,
    /// The same body as a string (it is always UTF-8 JSON).
    pub body_text: String,
    /// When the caller reported sending it (nanoseconds), or `null`.
    pub sent_ns: Option<BigInt>,
    /// True for the single immediate retry a zero retry window allows.
    pub zero_window_retry: bool,
}

impl From<&lb::Attempt> for Attempt {
    fn from(a: &lb::Attempt) -> Attempt {
        Attempt {
            id: a.id as f64,
            kind: AttemptKind::from(a.kind),
            due_ms: a.due_ns.map_or(f64::INFINITY, ns_to_ms_f64),
            due_ns: a.due_ns.map(BigInt::from),
            key: a.key.clone(),
            key_index: a.key_index,
            key_use: KeyUse::from(a.key_use),
            body: Buffer::from(a.body.clone()),
            body_text: String::from_utf8_lossy(&a.body).into_owned(),
            sent_ns: a.sent_ns.map(BigInt::from),
            zero_window_retry: a.is_zero_window_retry(),
        }
    }
}

/// What the caller must do now, a union discriminated by `type`:
///
/// * `{ type: 'send', attempt }`: send `attempt` at `attempt.dueNs`, then
///   call `handleSent`;
/// * `{ type: 'await', attempt }`: `attempt` is in flight, report its outcome
///   with `handleResponse` or `handleFailure`;
/// * `{ type: 'stop', reason }`: the heartbeat stopped for good.
///
/// After `if (action.type === 'send')` TypeScript knows `action.attempt` is
/// an `Attempt` (no `!` needed).
// The variant fields carry no doc comments: napi-rs would inline them into
// the union type; the enum's comment above documents them.
#[allow(missing_docs)]
#[napi(
    discriminant = "type",
    discriminant_case = "lowercase",
    object_from_js = false
)]
pub enum Action {
    /// Send the attempt at its due time, then call `handleSent`.
    Send { attempt: Attempt },
    /// The attempt is in flight: report its outcome.
    Await { attempt: Attempt },
    /// The heartbeat stopped for good.
    Stop { reason: StopReason },
}

// ----- input shapes (TypeScript only: inputs are validated by hand) -----

/// The options of `new Heartbeat(options)`. Unknown properties are refused.
#[napi(object, object_from_js = false, object_to_js = false)]
pub struct HeartbeatOptions {
    /// Requested lease length in ms: the create's `ttl_ms` and every
    /// extension's `extend_by_ms`. 1000..=86400000 (`DEFAULT_TTL_MS` is 60000).
    #[napi(ts_type = "number | bigint")]
    pub ttl_ms: (),
    /// The enforced upper bound of one complete attempt in ms (connect, write,
    /// read, failure detection); `null` (or `Infinity`) when unknown or
    /// unbounded, which makes the attempt budget infinite.
    #[napi(ts_type = "number | bigint | null")]
    pub request_timeout_ms: (),
    /// Further members of the create request body (`subject`, `action`,
    /// `estimate`, ...): JSON data only; must not contain `idempotency_key`
    /// or `ttl_ms` (the core sets them). Bigints are written as exact integers.
    #[napi(ts_type = "Record<string, unknown>")]
    pub create_request: Option<()>,
    /// Deterministic keys `"<prefix>1"`, `"<prefix>2"`, ... instead of random
    /// UUIDv4 keys. For tests and replays only.
    #[napi(ts_type = "string")]
    pub key_prefix: Option<()>,
}

/// The options of `Heartbeat.forReservation(reservationId, options)`: those
/// of `HeartbeatOptions` without `createRequest` (nothing is created).
/// Unknown properties are refused.
#[napi(object, object_from_js = false, object_to_js = false)]
pub struct ForReservationOptions {
    /// Requested lease length in ms: every extension's `extend_by_ms`.
    /// 1000..=86400000 (`DEFAULT_TTL_MS` is 60000).
    #[napi(ts_type = "number | bigint")]
    pub ttl_ms: (),
    /// The enforced upper bound of one complete attempt in ms (connect, write,
    /// read, failure detection); `null` (or `Infinity`) when unknown or
    /// unbounded, which makes the attempt budget infinite.
    #[napi(ts_type = "number | bigint | null")]
    pub request_timeout_ms: (),
    /// Deterministic keys `"<prefix>1"`, `"<prefix>2"`, ... instead of random
    /// UUIDv4 keys. For tests and replays only.
    #[napi(ts_type = "string")]
    pub key_prefix: Option<()>,
}

/// An HTTP response to the outstanding attempt, as raw as it arrived.
/// Unknown properties are refused.
#[napi(object, object_from_js = false, object_to_js = false)]
pub struct ResponseInit {
    /// The status code, 100..=999.
    #[napi(ts_type = "number")]
    pub status: (),
    /// The headers, in any of the forms JavaScript code has them: a fetch
    /// `Headers` (e.g. `res.headers`), a `Map` or any iterable of
    /// `[name, value]` pairs, an array of such pairs, or a plain object of
    /// name to value, or to an array of values for a repeated header. Names
    /// compare case-insensitively. Absent or `null`: none.
    #[napi(
        ts_type = "Record<string, string | readonly string[]> | Iterable<readonly [string, string]> | null"
    )]
    pub headers: Option<()>,
    /// The raw body: bytes (`Buffer`, `Uint8Array`, `ArrayBuffer`) or a string
    /// (encoded as UTF-8). Absent or `null`: empty.
    #[napi(ts_type = "Uint8Array | ArrayBuffer | string | null")]
    pub body: Option<()>,
    /// True when the round trip could not be measured: a success then gives
    /// lead_floor 0 and next_delay 0 and does not update max_rtt.
    #[napi(ts_type = "boolean")]
    pub timing_unknown: Option<()>,
}

/// A create the caller already performed with its own HTTP client (an SDK's
/// create), for `Heartbeat.adoptCreate`. Exactly one of `response` and
/// `failure`. Unknown properties are refused.
#[napi(object, object_from_js = false, object_to_js = false)]
pub struct AdoptedCreateInit {
    /// The idempotency key the create used (its `X-Idempotency-Key` and its
    /// body's `idempotency_key`): 1..=256 characters. A create retry reuses
    /// it; it counts as key 1 of the lease.
    #[napi(ts_type = "string")]
    pub key: (),
    /// When the create was sent, on the clock of every later call (a number
    /// of ms or a bigint of ns, as `now` everywhere). Absent or `null` when
    /// unknown: the round trip is then unknown (a success gives lead floor 0
    /// and an immediate first extension).
    #[napi(ts_type = "number | bigint | null")]
    pub sent_at: Option<()>,
    /// When its outcome was observed (after the complete body), same clock.
    #[napi(ts_type = "number | bigint")]
    pub received_at: (),
    /// The HTTP response to the create, as raw as it arrived (as for
    /// `handleResponse`).
    #[napi(ts_type = "ResponseInit")]
    pub response: Option<()>,
    /// Or the create's transport failure: `'timeout'`, `'connect'` or
    /// `'reset'`.
    #[napi(ts_type = "TransportFailure")]
    pub failure: Option<()>,
    /// The exact request body the create sent (bytes or a string), so that a
    /// same-key create retry resends it byte for byte; it must be a JSON
    /// object whose `idempotency_key`, if present, is `key`. Absent or
    /// `null`: a retry sends the body this heartbeat builds from the options
    /// (`createRequest` plus `idempotency_key` and `ttl_ms`).
    #[napi(ts_type = "Uint8Array | ArrayBuffer | string | null")]
    pub request_body: Option<()>,
}

/// What `Heartbeat.adoptCreate` returns: the heartbeat and its first
/// decision (the answer to the adopted create's outcome).
#[napi(object, object_from_js = false, object_to_js = false)]
pub struct AdoptedHeartbeat {
    /// The heartbeat that took the lease over.
    #[napi(ts_type = "Heartbeat")]
    pub heartbeat: (),
    /// Its first decision, as if it had sent the create itself.
    #[napi(ts_type = "Decision")]
    pub decision: (),
}

// ----- the heartbeat -----

enum State {
    Open(Box<lb::Heartbeat>),
    Closed,
}

/// Runs `f` on the open heartbeat behind `state`.
fn with_state<T>(state: &Mutex<State>, f: impl FnOnce(&mut lb::Heartbeat) -> R<T>) -> R<T> {
    let mut guard = state.lock().map_err(|_| {
        Fail::new(
            Class::Error,
            ErrorCode::Poisoned,
            "a previous call on this Heartbeat panicked; it can no longer be used",
        )
    })?;
    match &mut *guard {
        State::Open(hb) => f(hb),
        State::Closed => Err(Fail::new(
            Class::Error,
            ErrorCode::Closed,
            "this Heartbeat was closed",
        )),
    }
}

/// True once `close()` was called on the heartbeat behind `state` (the
/// `closed` getter, also read by `fast.js` through `__lbGet`).
fn is_closed(state: &Mutex<State>) -> bool {
    match state.lock() {
        Ok(guard) => matches!(*guard, State::Closed),
        Err(poisoned) => matches!(*poisoned.into_inner(), State::Closed),
    }
}

/// Puts the raw callbacks of `fast.js` on the exports.
#[napi(module_exports)]
pub fn module_init(mut exports: Object<'_>, env: Env) -> Result<()> {
    raw::install(&env, &mut exports)
}

/// The heartbeat of one reservation: a sans-IO state machine.
///
/// It starts with a create attempt (`new Heartbeat(options)`), or, for a
/// reservation created elsewhere, with an immediate extension
/// (`Heartbeat.forReservation(reservationId, options)`). Send what
/// `pollAction()` asks for, report it with `handleSent`, then report the
/// outcome with `handleResponse` or `handleFailure` (or end it with
/// `cancel`), each with a monotonic time that never goes backwards. Each
/// outcome returns a `Decision`. A call that throws changes nothing. Every
/// method is synchronous and fast; none blocks the event loop.
///
/// Times are a `number` of monotonic milliseconds (fractions allowed, e.g.
/// `performance.now()`; converted with `ns = Math.round(ms * 1e6)`) or a
/// `bigint` of nanoseconds (e.g. `process.hrtime.bigint()`). Use one clock for
/// the whole heartbeat.
#[napi]
pub struct Heartbeat {
    state: Arc<raw::Shared>,
}

impl Heartbeat {
    fn with<T>(&self, f: impl FnOnce(&mut lb::Heartbeat) -> R<T>) -> R<T> {
        with_state(&self.state, f)
    }
}

#[napi]
impl Heartbeat {
    /// A heartbeat for one reservation, starting with a create attempt.
    ///
    /// Throws a `TypeError`/`RangeError` (`ERR_LEASEBEAT_INVALID_ARGUMENT`) for
    /// malformed options and a `RangeError` (`ERR_LEASEBEAT_INVALID_CONFIG`)
    /// for values the core refuses (e.g. `ttlMs` outside 1000..=86400000).
    #[napi(constructor, catch_unwind)]
    pub fn new(
        env: &Env,
        #[napi(ts_arg_type = "HeartbeatOptions")] options: Unknown<'_>,
    ) -> Result<Heartbeat> {
        run(env, || {
            let (config, prefix) = conv::options(&options)?;
            let hb = match prefix {
                Some(p) => {
                    lb::Heartbeat::with_key_source(config, Box::new(lb::SequentialKeys::new(p)))
                }
                None => lb::Heartbeat::new(config),
            }
            .map_err(|e| Fail::core(&e))?;
            Ok(Heartbeat {
                state: Arc::new(Mutex::new(State::Open(Box::new(hb)))),
            })
        })
    }

    /// A heartbeat for a reservation created elsewhere (by another process,
    /// or by a create request you sent yourself): its first action is an
    /// immediate extension (attempt id 1, key index 1, due at 0) with a new
    /// key, instead of a create, and `reservationId` is set from the start.
    ///
    /// Until that first extension succeeds nothing proves any lead: its
    /// success anchors the schedule as a create's would, and a transient
    /// failure before it stops with `retry_window_exhausted`.
    ///
    /// `reservationId` must be a string of 1..=128 characters (Unicode code
    /// points, not UTF-16 units). Throws a `TypeError`
    /// (`ERR_LEASEBEAT_INVALID_ARGUMENT`) when it is not a string or the
    /// options are malformed, a `RangeError` (`ERR_LEASEBEAT_INVALID_ARGUMENT`)
    /// when it is empty or longer than 128 characters, and a `RangeError`
    /// (`ERR_LEASEBEAT_INVALID_CONFIG`) for values the core refuses (e.g.
    /// `ttlMs` outside 1000..=86400000).
    #[napi(factory, catch_unwind)]
    pub fn for_reservation(
        env: &Env,
        #[napi(ts_arg_type = "string")] reservation_id: Unknown<'_>,
        #[napi(ts_arg_type = "ForReservationOptions")] options: Unknown<'_>,
    ) -> Result<Heartbeat> {
        run(env, || {
            let id = conv::string(&reservation_id, "reservationId")?;
            let (config, prefix) = conv::reservation_options(&options)?;
            let hb = match prefix {
                Some(p) => lb::Heartbeat::for_reservation_with_key_source(
                    config,
                    id,
                    Box::new(lb::SequentialKeys::new(p)),
                ),
                None => lb::Heartbeat::for_reservation(config, id),
            }
            .map_err(|e| Fail::core(&e))?;
            Ok(Heartbeat {
                state: Arc::new(Mutex::new(State::Open(Box::new(hb)))),
            })
        })
    }

    /// Takes over a lease whose create the caller performed itself (an SDK's
    /// own HTTP client): the create's key, its send and receive instants and
    /// its raw outcome are classified exactly as if this heartbeat had sent
    /// the create. A success anchors the schedule with no extra extension
    /// (the first decision is the first beat's due time); an ambiguous or
    /// transient outcome asks for the one same-key create retry (with the
    /// caller's key and body); a 4xx stops `'create_rejected'`; and so on.
    /// Returns `{ heartbeat, decision }`; `heartbeat.lastDecision` is that
    /// decision too. The create counts as attempt 1 and its key as key 1.
    ///
    /// ```js
    /// const sentAt = performance.now()
    /// const res = await fetch(url, { method: 'POST', headers, body })
    /// const bytes = new Uint8Array(await res.arrayBuffer())
    /// const { heartbeat, decision } = Heartbeat.adoptCreate(
    ///   { ttlMs: 60000, requestTimeoutMs: 10000 },
    ///   { key, sentAt, receivedAt: performance.now(), requestBody: body,
    ///     response: { status: res.status, headers: res.headers, body: bytes } })
    /// ```
    ///
    /// Throws a `TypeError`/`RangeError` (`ERR_LEASEBEAT_INVALID_ARGUMENT`)
    /// for malformed arguments (both or neither of `response` and `failure`,
    /// `sentAt` after `receivedAt`, a `requestBody` that is not a JSON object
    /// or carries another `idempotency_key`), a `RangeError`
    /// (`ERR_LEASEBEAT_INVALID_CONFIG`) for options the core refuses, and an
    /// `Error` (`ERR_LEASEBEAT_INVALID_KEY`) for a key of 0 or more than 256
    /// characters.
    #[napi(catch_unwind, ts_return_type = "AdoptedHeartbeat")]
    pub fn adopt_create<'e>(
        env: &'e Env,
        #[napi(ts_arg_type = "HeartbeatOptions")] options: Unknown<'_>,
        #[napi(ts_arg_type = "AdoptedCreateInit")] create: Unknown<'_>,
    ) -> Result<Object<'e>> {
        let (hb, decision) = run(env, || {
            let (config, prefix) = conv::options(&options)?;
            let create = conv::adopted_create(env, &create)?;
            match prefix {
                Some(p) => lb::Heartbeat::adopt_create_with_key_source(
                    config,
                    create,
                    Box::new(lb::SequentialKeys::new(p)),
                ),
                None => lb::Heartbeat::adopt_create(config, create),
            }
            .map_err(|e| Fail::core(&e))
        })?;
        let heartbeat = Heartbeat {
            state: Arc::new(Mutex::new(State::Open(Box::new(hb)))),
        }
        .into_instance(env)?;
        let mut out = Object::new(env)?;
        out.set("heartbeat", heartbeat)?;
        out.set("decision", Decision::from(&decision))?;
        Ok(out)
    }

    /// What the caller must do now: send an attempt, await its outcome, or
    /// stop.
    #[napi(catch_unwind)]
    pub fn poll_action(&self, env: &Env) -> Result<Action> {
        run(env, || {
            self.with(|hb| {
                Ok(match hb.poll_action() {
                    lb::Action::Send(a) => Action::Send {
                        attempt: Attempt::from(a),
                    },
                    lb::Action::AwaitOutcome(a) => Action::Await {
                        attempt: Attempt::from(a),
                    },
                    lb::Action::Stop(r) => Action::Stop {
                        reason: StopReason::from(r),
                    },
                })
            })
        })
    }

    /// Internal (`fast.js`): the handle the raw callbacks take (see `raw.rs`).
    #[napi(skip_typescript, js_name = "__handle", catch_unwind)]
    pub fn fast_handle<'e>(&self, env: &'e Env) -> Result<Unknown<'e>> {
        raw::handle(env, &self.state)
    }

    /// When the next attempt is due, in nanoseconds, if one waits to be sent;
    /// `null` when stopped, in flight, or due at +infinity.
    #[napi(catch_unwind)]
    pub fn poll_timeout(&self, env: &Env) -> Result<Option<BigInt>> {
        run(env, || {
            self.with(|hb| Ok(hb.poll_timeout().map(BigInt::from)))
        })
    }

    /// The caller sent attempt `attemptId` at time `now`. Sending later than
    /// due (a late timer) or earlier (a stalled clock) is accepted.
    #[napi(catch_unwind)]
    pub fn handle_sent(
        &self,
        env: &Env,
        #[napi(ts_arg_type = "number | bigint")] attempt_id: Unknown<'_>,
        #[napi(ts_arg_type = "number | bigint")] now: Unknown<'_>,
    ) -> Result<()> {
        run(env, || {
            let id = conv::integer_u64(&attempt_id, "attemptId")?;
            let now = conv::time_ns(&now, "now")?;
            self.with(|hb| hb.handle_sent(id, now).map_err(|e| Fail::core(&e)))
        })
    }

    /// The HTTP response to attempt `attemptId`, observed at time `now`
    /// (after its complete body was received). Returns the decision.
    #[napi(catch_unwind)]
    pub fn handle_response(
        &self,
        env: &Env,
        #[napi(ts_arg_type = "number | bigint")] attempt_id: Unknown<'_>,
        #[napi(ts_arg_type = "ResponseInit")] response: Unknown<'_>,
        #[napi(ts_arg_type = "number | bigint")] now: Unknown<'_>,
    ) -> Result<Decision> {
        run(env, || {
            let id = conv::integer_u64(&attempt_id, "attemptId")?;
            let response = conv::response(env, &response, "response")?;
            let now = conv::time_ns(&now, "now")?;
            self.with(|hb| {
                hb.handle_response(id, response, now)
                    .map(|d| Decision::from(&d))
                    .map_err(|e| Fail::core(&e))
            })
        })
    }

    /// A transport failure (`'timeout'`, `'connect'` or `'reset'`) of attempt
    /// `attemptId`, observed at time `now`. Returns the decision.
    #[napi(catch_unwind)]
    pub fn handle_failure(
        &self,
        env: &Env,
        #[napi(ts_arg_type = "number | bigint")] attempt_id: Unknown<'_>,
        #[napi(ts_arg_type = "TransportFailure")] failure: Unknown<'_>,
        #[napi(ts_arg_type = "number | bigint")] now: Unknown<'_>,
    ) -> Result<Decision> {
        run(env, || {
            let id = conv::integer_u64(&attempt_id, "attemptId")?;
            let failure = conv::transport_failure(&failure, "failure")?;
            let now = conv::time_ns(&now, "now")?;
            self.with(|hb| {
                hb.handle_failure(id, failure, now)
                    .map(|d| Decision::from(&d))
                    .map_err(|e| Fail::core(&e))
            })
        })
    }

    /// The caller ends the heartbeat at time `now`: a stop `'cancelled'`.
    /// After a stop, every event (this one included) throws
    /// `ERR_LEASEBEAT_STOPPED`.
    #[napi(catch_unwind)]
    pub fn cancel(
        &self,
        env: &Env,
        #[napi(ts_arg_type = "number | bigint")] now: Unknown<'_>,
    ) -> Result<Decision> {
        run(env, || {
            let now = conv::time_ns(&now, "now")?;
            self.with(|hb| {
                hb.cancel(now)
                    .map(|d| Decision::from(&d))
                    .map_err(|e| Fail::core(&e))
            })
        })
    }

    /// Releases the native state. Idempotent. Every later call (except
    /// `close()` and the `closed` getter) throws `ERR_LEASEBEAT_CLOSED`.
    #[napi(catch_unwind)]
    pub fn close(&self) {
        match self.state.lock() {
            Ok(mut guard) => *guard = State::Closed,
            Err(poisoned) => *poisoned.into_inner() = State::Closed,
        }
    }

    /// True once `close()` was called.
    #[napi(getter, catch_unwind)]
    pub fn closed(&self) -> bool {
        is_closed(&self.state)
    }

    /// The reservation id: once a create succeeded, or from the start for a
    /// heartbeat made by `Heartbeat.forReservation`; else `null`.
    #[napi(getter, catch_unwind)]
    pub fn reservation_id(&self, env: &Env) -> Result<Option<String>> {
        run(env, || {
            self.with(|hb| Ok(hb.reservation_id().map(str::to_owned)))
        })
    }

    /// The stop reason, once stopped; else `null`.
    #[napi(getter, catch_unwind)]
    pub fn stop_reason(&self, env: &Env) -> Result<Option<StopReason>> {
        run(env, || {
            self.with(|hb| Ok(hb.stop_reason().map(StopReason::from)))
        })
    }

    /// The mode of the last success, if any; else `null`.
    #[napi(getter, catch_unwind)]
    pub fn mode(&self, env: &Env) -> Result<Option<Mode>> {
        run(env, || self.with(|hb| Ok(hb.mode().map(Mode::from))))
    }

    /// Largest rtt (ms) over this lease's schema-valid measured successes; 0
    /// before the first.
    #[napi(getter, catch_unwind, ts_return_type = "number | bigint")]
    pub fn max_rtt_ms(&self, env: &Env) -> Result<JsNum> {
        run(env, || self.with(|hb| Ok(num(hb.max_rtt_ms()))))
    }

    /// The most recent decision, or `null` before the first.
    #[napi(getter, catch_unwind)]
    pub fn last_decision(&self, env: &Env) -> Result<Option<Decision>> {
        run(env, || {
            self.with(|hb| Ok(hb.last_decision().map(Decision::from)))
        })
    }

    /// The most recent decision as the emitted-decision JSON text of the
    /// scenario format (`next`, `at` in ms, `key`, `key_index`, `reason`,
    /// `mode`, `numbers`, `warnings`; `"inf"`/`"-inf"` for infinities), for
    /// logs; `null` before the first decision.
    #[napi(getter, catch_unwind)]
    pub fn last_decision_json(&self, env: &Env) -> Result<Option<String>> {
        run(env, || {
            self.with(|hb| Ok(hb.last_decision().map(|d| d.to_json_string())))
        })
    }

    /// The outstanding attempt (to send, or in flight), or `null` when
    /// stopped.
    #[napi(getter, catch_unwind)]
    pub fn attempt(&self, env: &Env) -> Result<Option<Attempt>> {
        run(env, || self.with(|hb| Ok(hb.attempt().map(Attempt::from))))
    }

    /// The time of the latest event accepted, in nanoseconds.
    #[napi(getter, catch_unwind)]
    pub fn last_event_ns(&self, env: &Env) -> Result<BigInt> {
        run(env, || self.with(|hb| Ok(BigInt::from(hb.last_event_ns()))))
    }

    /// The configured lease length in ms.
    #[napi(getter, catch_unwind)]
    pub fn ttl_ms(&self, env: &Env) -> Result<f64> {
        run(env, || self.with(|hb| Ok(hb.config().ttl_ms as f64)))
    }

    /// The configured per-attempt timeout in ms; `null` when unbounded.
    #[napi(getter, catch_unwind, ts_return_type = "number | bigint | null")]
    pub fn request_timeout_ms(&self, env: &Env) -> Result<Option<JsNum>> {
        run(env, || {
            self.with(|hb| {
                Ok(hb
                    .config()
                    .request_timeout_ms
                    .filter(|t| *t != lb::arith::INFINITE)
                    .map(num))
            })
        })
    }
}

// ----- constants and tables -----

/// The `ttlMs` the protocol uses when a caller gives none: 60000.
#[napi]
pub const DEFAULT_TTL_MS: u32 = lb::DEFAULT_TTL_MS as u32;
/// The smallest `ttlMs`: 1000.
#[napi]
pub const MIN_TTL_MS: u32 = lb::MIN_TTL_MS as u32;
/// The largest `ttlMs` (24 h): 86400000.
#[napi]
pub const MAX_TTL_MS: u32 = lb::MAX_TTL_MS as u32;

/// Every stop reason, in a fixed order.
#[napi(catch_unwind)]
pub fn stop_reasons() -> Vec<StopReason> {
    lb::StopReason::ALL
        .into_iter()
        .map(StopReason::from)
        .collect()
}

/// Every error `code` this package can throw, in a fixed order.
#[napi(catch_unwind)]
pub fn error_codes() -> Vec<ErrorCode> {
    ErrorCode::ALL.to_vec()
}

/// The stop reason for one of the five permanent error codes
/// (`RESERVATION_EXPIRED`, ...), else `null`.
#[napi(catch_unwind)]
pub fn permanent_reason(
    env: &Env,
    #[napi(ts_arg_type = "string")] code: Unknown<'_>,
) -> Result<Option<StopReason>> {
    run(env, || {
        let code = conv::string(&code, "code")?;
        Ok(lb::permanent_reason(&code).map(StopReason::from))
    })
}

/// Milliseconds to nanoseconds exactly as every time argument is converted:
/// `Math.round(ms * 1e6)` as a bigint. Throws a `RangeError` for NaN,
/// infinities, negatives and values that overflow 64-bit nanoseconds.
#[napi(catch_unwind)]
pub fn ms_to_ns(env: &Env, #[napi(ts_arg_type = "number")] ms: Unknown<'_>) -> Result<BigInt> {
    run(env, || conv::time_ns(&ms, "ms").map(BigInt::from))
}

// ----- the pure arithmetic -----

/// The primary algorithm's numbers for one schema-valid success.
#[napi(object, object_from_js = false)]
pub struct PrimarySchedule {
    /// `max(0, remaining_ttl_ms - rtt)`; 0 when timing is unknown.
    #[napi(ts_type = "number | bigint")]
    pub lead_floor: JsNum,
    /// `max(request_timeout_ms, 1000, 2 x max_rtt)`.
    #[napi(ts_type = "number | bigint")]
    pub attempt_budget: JsNum,
    /// `max(1000, 2 x max_rtt)`.
    #[napi(ts_type = "number | bigint")]
    pub safety_margin: JsNum,
    /// `2 x attempt_budget + safety_margin`.
    #[napi(ts_type = "number | bigint")]
    pub retry_reserve: JsNum,
    /// `max(0, lead_floor - retry_reserve)`: the delay after the receipt.
    #[napi(ts_type = "number | bigint")]
    pub next_delay: JsNum,
}

/// What the primary path may do after a transient failure.
#[napi(object, object_from_js = false, use_nullable = true)]
pub struct RetryWindow {
    /// `max(0, lead_floor - elapsed)`: the current lead estimate.
    #[napi(ts_type = "number | bigint")]
    pub lead: JsNum,
    /// `lead - attempt_budget - safety_margin`, unclamped; `-Infinity` when
    /// the budget plus margin is infinite.
    #[napi(ts_type = "number | bigint")]
    pub window: JsNum,
    /// `min(30000, lead / 4, window)` when `window >= 0`, else `null` (stop).
    #[napi(ts_type = "number | bigint")]
    pub delay: Option<JsNum>,
}

/// The fallback cadence after an extension success.
#[napi(object, object_from_js = false)]
pub struct FallbackCadence {
    /// The delay between beats in ms, never below 1000.
    #[napi(ts_type = "number | bigint")]
    pub cadence: JsNum,
    /// True when the "hold" branch was taken: the extension budget will deplete.
    pub hold: bool,
}

/// A parsed `Retry-After`: `ms` on success, else `error`.
#[napi(object, object_from_js = false, use_nullable = true)]
pub struct RetryAfter {
    /// The delay in milliseconds, or `null` when unusable.
    #[napi(ts_type = "number | bigint")]
    pub ms: Option<JsNum>,
    /// Why the value is unusable, or `null` when usable.
    pub error: Option<RetryAfterError>,
}

/// A nanosecond interval rounded up to whole milliseconds. `nanos` is a
/// non-negative integer (a safe-integer number or a bigint).
#[napi(catch_unwind, ts_return_type = "number | bigint")]
pub fn ceil_ms(
    env: &Env,
    #[napi(ts_arg_type = "number | bigint")] nanos: Unknown<'_>,
) -> Result<JsNum> {
    run(env, || {
        let n = conv::integer_u64(&nanos, "nanos")?;
        Ok(num(lb::arith::ceil_ms(n)))
    })
}

/// `attempt_budget = max(request_timeout_ms, 1000, 2 x max_rtt)`; a `null`
/// (or infinite) timeout gives `Infinity`. Durations in this module are
/// non-negative integer ms (number or bigint), `Infinity` meaning +infinity.
#[napi(catch_unwind, ts_return_type = "number | bigint")]
pub fn attempt_budget(
    env: &Env,
    #[napi(ts_arg_type = "number | bigint | null")] request_timeout_ms: Unknown<'_>,
    #[napi(ts_arg_type = "number | bigint")] max_rtt_ms: Unknown<'_>,
) -> Result<JsNum> {
    run(env, || {
        let t = conv::opt_duration_ms(&request_timeout_ms, "requestTimeoutMs")?;
        let m = conv::duration_ms(&max_rtt_ms, "maxRttMs")?;
        Ok(num(lb::arith::attempt_budget(t, m)))
    })
}

/// `safety_margin = max(1000, 2 x max_rtt)`.
#[napi(catch_unwind, ts_return_type = "number | bigint")]
pub fn safety_margin(
    env: &Env,
    #[napi(ts_arg_type = "number | bigint")] max_rtt_ms: Unknown<'_>,
) -> Result<JsNum> {
    run(env, || {
        let m = conv::duration_ms(&max_rtt_ms, "maxRttMs")?;
        Ok(num(lb::arith::safety_margin(m)))
    })
}

/// `retry_reserve = 2 x attempt_budget + safety_margin`, saturating to
/// `Infinity`.
#[napi(catch_unwind, ts_return_type = "number | bigint")]
pub fn retry_reserve(
    env: &Env,
    #[napi(ts_arg_type = "number | bigint")] attempt_budget_ms: Unknown<'_>,
    #[napi(ts_arg_type = "number | bigint")] safety_margin_ms: Unknown<'_>,
) -> Result<JsNum> {
    run(env, || {
        let b = conv::duration_ms(&attempt_budget_ms, "attemptBudgetMs")?;
        let s = conv::duration_ms(&safety_margin_ms, "safetyMarginMs")?;
        Ok(num(lb::arith::retry_reserve(b, s)))
    })
}

/// The primary schedule from one success: `remaining_ttl_ms` from the
/// response, the rounded-up rtt of the attempt (`null` when its timing is
/// unknown), the enforced timeout (`null` = unbounded) and the largest rtt
/// over this lease's successes, this one included.
#[napi(catch_unwind)]
pub fn primary_schedule(
    env: &Env,
    #[napi(ts_arg_type = "number | bigint")] remaining_ttl_ms: Unknown<'_>,
    #[napi(ts_arg_type = "number | bigint | null")] rtt_ms: Unknown<'_>,
    #[napi(ts_arg_type = "number | bigint | null")] request_timeout_ms: Unknown<'_>,
    #[napi(ts_arg_type = "number | bigint")] max_rtt_ms: Unknown<'_>,
) -> Result<PrimarySchedule> {
    run(env, || {
        let remaining = conv::duration_ms(&remaining_ttl_ms, "remainingTtlMs")?;
        let rtt = conv::opt_duration_ms(&rtt_ms, "rttMs")?;
        let timeout = conv::opt_duration_ms(&request_timeout_ms, "requestTimeoutMs")?;
        let max_rtt = conv::duration_ms(&max_rtt_ms, "maxRttMs")?;
        let s = lb::arith::primary_schedule(remaining, rtt, timeout, max_rtt);
        Ok(PrimarySchedule {
            lead_floor: num(s.lead_floor),
            attempt_budget: num(s.attempt_budget),
            safety_margin: num(s.safety_margin),
            retry_reserve: num(s.retry_reserve),
            next_delay: num(s.next_delay),
        })
    })
}

/// The retry window after a transient failure observed `elapsedMs` (rounded
/// up) after the receipt of the success that set `leadFloorMs`.
#[napi(catch_unwind)]
pub fn retry_window(
    env: &Env,
    #[napi(ts_arg_type = "number | bigint")] lead_floor_ms: Unknown<'_>,
    #[napi(ts_arg_type = "number | bigint")] elapsed_ms: Unknown<'_>,
    #[napi(ts_arg_type = "number | bigint")] attempt_budget_ms: Unknown<'_>,
    #[napi(ts_arg_type = "number | bigint")] safety_margin_ms: Unknown<'_>,
) -> Result<RetryWindow> {
    run(env, || {
        let lead_floor = conv::duration_ms(&lead_floor_ms, "leadFloorMs")?;
        let elapsed = conv::duration_ms(&elapsed_ms, "elapsedMs")?;
        let budget = conv::duration_ms(&attempt_budget_ms, "attemptBudgetMs")?;
        let margin = conv::duration_ms(&safety_margin_ms, "safetyMarginMs")?;
        let r = lb::arith::retry_window(lead_floor, elapsed, budget, margin);
        Ok(RetryWindow {
            lead: num(r.lead),
            window: JsNum(r.window),
            delay: r.delay.map(num),
        })
    })
}

/// Parses the `Retry-After` values of one response (every value of every
/// header named `Retry-After`: a string, an array of strings, or `null` for
/// none). Exactly one delta-seconds value is usable.
#[napi(catch_unwind)]
pub fn parse_retry_after(
    env: &Env,
    #[napi(ts_arg_type = "string | string[] | null")] values: Option<Unknown<'_>>,
) -> Result<RetryAfter> {
    run(env, || {
        let values = conv::header_values(values.as_ref(), "values")?;
        Ok(match lb::arith::parse_retry_after(&values) {
            Ok(ms) => RetryAfter {
                ms: Some(num(ms)),
                error: None,
            },
            Err(e) => RetryAfter {
                ms: None,
                error: Some(RetryAfterError::from(e)),
            },
        })
    })
}

/// The fallback's "hold" cadence: `max(1000, min(ttl / 2, 30000))`.
#[napi(catch_unwind, ts_return_type = "number | bigint")]
pub fn hold_cadence(
    env: &Env,
    #[napi(ts_arg_type = "number | bigint")] ttl_ms: Unknown<'_>,
) -> Result<JsNum> {
    run(env, || {
        let ttl = conv::duration_ms(&ttl_ms, "ttlMs")?;
        Ok(num(lb::arith::hold_cadence(ttl)))
    })
}

/// The fallback cadence after an extension success with this grant (signed
/// ms), elapsed time since the previous success and ttl.
#[napi(catch_unwind)]
pub fn fallback_cadence(
    env: &Env,
    #[napi(ts_arg_type = "number | bigint")] grant_ms: Unknown<'_>,
    #[napi(ts_arg_type = "number | bigint")] elapsed_ms: Unknown<'_>,
    #[napi(ts_arg_type = "number | bigint")] ttl_ms: Unknown<'_>,
) -> Result<FallbackCadence> {
    run(env, || {
        let grant = conv::signed_ms(&grant_ms, "grantMs")?;
        let elapsed = conv::duration_ms(&elapsed_ms, "elapsedMs")?;
        let ttl = conv::duration_ms(&ttl_ms, "ttlMs")?;
        let c = lb::arith::fallback_cadence(grant, elapsed, ttl);
        Ok(FallbackCadence {
            cadence: num(c.cadence),
            hold: c.hold,
        })
    })
}

/// How many whole cadences to skip after an extension success with a
/// positive grant (`leadMinMs` and `grantMs` are signed ms).
#[napi(catch_unwind, ts_return_type = "number | bigint")]
pub fn fallback_skips(
    env: &Env,
    #[napi(ts_arg_type = "number | bigint")] lead_min_ms: Unknown<'_>,
    #[napi(ts_arg_type = "number | bigint")] grant_ms: Unknown<'_>,
    #[napi(ts_arg_type = "number | bigint")] cadence_ms: Unknown<'_>,
) -> Result<JsNum> {
    run(env, || {
        let lead_min = conv::signed_ms(&lead_min_ms, "leadMinMs")?;
        let grant = conv::signed_ms(&grant_ms, "grantMs")?;
        let cadence = conv::duration_ms(&cadence_ms, "cadenceMs")?;
        Ok(num(lb::arith::fallback_skips(lead_min, grant, cadence)))
    })
}
