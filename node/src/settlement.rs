//! The settlement of one reservation (`Settlement`): commit, the
//! expired-commit event fallback and release, rules ST-1..ST-11 and
//! SP-1..SP-4 of `settlement.md`, all decided by the core's
//! `leasebeat::Settlement`. This module only converts values in and out.
//!
//! Settlement decisions are rare (a handful per lease), so this binding is
//! plain napi-rs objects and calls: none of the heartbeat's fast paths
//! (`fast.js`, raw callbacks) apply here.
//!
//! Extension point: the durable journal (J-1..J-8) is a separate Rust module
//! not bound yet. A settlement's `Persist` action hands out the record's
//! exact file text (`record.json`) and `Settlement.fromRecord` takes it back,
//! so a journal binding can sit beside this class without changing it.

use std::sync::Mutex;

use leasebeat as lb;
use napi::bindgen_prelude::*;
use napi_derive::napi;

use crate::errors::{Class, ErrorCode, Fail, R, run};
use crate::{JsNum, conv, ns_to_ms_f64, num};

// ----- string literal unions -----

/// The endpoint an attempt goes to: `'commit'`
/// (`POST /v1/reservations/{id}/commit`), `'event'` (`POST /v1/events`) or
/// `'release'` (`POST /v1/reservations/{id}/release`).
#[napi(string_enum = "snake_case")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// `POST /v1/reservations/{reservation_id}/commit`.
    Commit,
    /// `POST /v1/events`.
    Event,
    /// `POST /v1/reservations/{reservation_id}/release`.
    Release,
}

impl From<lb::Endpoint> for Endpoint {
    fn from(e: lb::Endpoint) -> Endpoint {
        match e {
            lb::Endpoint::Commit => Endpoint::Commit,
            lb::Endpoint::Event => Endpoint::Event,
            lb::Endpoint::Release => Endpoint::Release,
        }
    }
}

/// What a settlement is doing: `'commit'`, `'event'` (the expired-commit
/// fallback, ST-5) or `'release'`.
#[napi(string_enum = "snake_case")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SettleMode {
    /// Committing the actual.
    Commit,
    /// The expired-commit fallback through `POST /v1/events`.
    Event,
    /// Releasing (not journaled).
    Release,
}

impl From<lb::SettleMode> for SettleMode {
    fn from(m: lb::SettleMode) -> SettleMode {
        match m {
            lb::SettleMode::Commit => SettleMode::Commit,
            lb::SettleMode::Event => SettleMode::Event,
            lb::SettleMode::Release => SettleMode::Release,
        }
    }
}

/// The mode stored in a durable record: `'commit'` or `'event'`.
#[napi(string_enum = "snake_case")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordMode {
    /// The commit is to be sent.
    Commit,
    /// The event fallback is to be sent.
    Event,
}

impl From<lb::RecordMode> for RecordMode {
    fn from(m: lb::RecordMode) -> RecordMode {
        match m {
            lb::RecordMode::Commit => RecordMode::Commit,
            lb::RecordMode::Event => RecordMode::Event,
        }
    }
}

/// How a settlement ended. The strings are stable and the same in every
/// language.
#[napi(string_enum = "snake_case")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SettleOutcome {
    /// ST-2: commit success. The record is removed.
    Committed,
    /// ST-2: event success (the expired-commit fallback). The record is removed.
    Applied,
    /// ST-2: release success.
    Released,
    /// ST-7: the server understood and refused (see `code`). The record is removed.
    Rejected,
    /// ST-6: 401 or 403. The record stays; never a release.
    AuthFailed,
    /// ST-8: a 4xx without a usable code. The record stays.
    Unclassified,
    /// ST-3: the attempts of this run are used up. The record stays for replay.
    Exhausted,
    /// ST-5: the reservation expired and no event body is known. The record
    /// stays; the usage is not recorded on the server.
    ExpiredUnrecorded,
    /// ST-10: no actual amount is known; nothing was sent.
    NoActual,
}

impl From<lb::SettleOutcome> for SettleOutcome {
    fn from(o: lb::SettleOutcome) -> SettleOutcome {
        match o {
            lb::SettleOutcome::Committed => SettleOutcome::Committed,
            lb::SettleOutcome::Applied => SettleOutcome::Applied,
            lb::SettleOutcome::Released => SettleOutcome::Released,
            lb::SettleOutcome::Rejected => SettleOutcome::Rejected,
            lb::SettleOutcome::AuthFailed => SettleOutcome::AuthFailed,
            lb::SettleOutcome::Unclassified => SettleOutcome::Unclassified,
            lb::SettleOutcome::Exhausted => SettleOutcome::Exhausted,
            lb::SettleOutcome::ExpiredUnrecorded => SettleOutcome::ExpiredUnrecorded,
            lb::SettleOutcome::NoActual => SettleOutcome::NoActual,
        }
    }
}

/// How the event behind a settlement decision was classified.
#[napi(string_enum = "snake_case")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SettleClass {
    /// The settlement was built from its options.
    Start,
    /// The settlement was built from a record (SP-4).
    Restart,
    /// The caller acknowledged the persist.
    Persisted,
    /// The caller reported that the persist failed (SP-3).
    PersistFailed,
    /// The caller sent the attempt.
    Sent,
    /// ST-2 success.
    Success,
    /// A 2xx that is not the exact success (ST-2).
    Ambiguous,
    /// A timeout, connection failure or reset (ST-3).
    Transport,
    /// A 5xx, 1xx, 3xx or a status of 600 and above (ST-3).
    ServerError,
    /// 429 or `LIMIT_EXCEEDED` (ST-4).
    Throttled,
    /// 410 or `RESERVATION_EXPIRED` on a commit (ST-5).
    Expired,
    /// 401 or 403 (ST-6).
    Auth,
    /// An understood rejection (ST-7).
    Rejected,
    /// Any other 4xx (ST-8).
    Unclassified,
}

impl From<lb::SettleClass> for SettleClass {
    fn from(c: lb::SettleClass) -> SettleClass {
        match c {
            lb::SettleClass::Start => SettleClass::Start,
            lb::SettleClass::Restart => SettleClass::Restart,
            lb::SettleClass::Persisted => SettleClass::Persisted,
            lb::SettleClass::PersistFailed => SettleClass::PersistFailed,
            lb::SettleClass::Sent => SettleClass::Sent,
            lb::SettleClass::Success => SettleClass::Success,
            lb::SettleClass::Ambiguous => SettleClass::Ambiguous,
            lb::SettleClass::Transport => SettleClass::Transport,
            lb::SettleClass::ServerError => SettleClass::ServerError,
            lb::SettleClass::Throttled => SettleClass::Throttled,
            lb::SettleClass::Expired => SettleClass::Expired,
            lb::SettleClass::Auth => SettleClass::Auth,
            lb::SettleClass::Rejected => SettleClass::Rejected,
            lb::SettleClass::Unclassified => SettleClass::Unclassified,
        }
    }
}

/// A warning carried by a settlement decision.
#[napi(string_enum = "snake_case")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SettleWarning {
    /// SP-3: the persist failed; the request goes anyway (the message is the
    /// decision's `detail`).
    PersistFailed,
    /// ST-4: a 429 without a usable `Retry-After`: the backoff alone decides.
    RetryAfterUnusable,
    /// ST-4: the `Retry-After` exceeded 3600 s and was capped.
    RetryAfterCapped,
}

impl From<lb::SettleWarning> for SettleWarning {
    fn from(w: lb::SettleWarning) -> SettleWarning {
        match w {
            lb::SettleWarning::PersistFailed => SettleWarning::PersistFailed,
            lb::SettleWarning::RetryAfterUnusable => SettleWarning::RetryAfterUnusable,
            lb::SettleWarning::RetryAfterCapped => SettleWarning::RetryAfterCapped,
        }
    }
}

/// What comes after a settlement decision: `'persist'` the record, send a
/// `'commit'`, `'event'` or `'release'`, `'wait'` for the attempt in flight,
/// or `'done'`.
#[napi(string_enum = "snake_case")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SettleNext {
    /// Persist `settlement.record`, then acknowledge it.
    Persist,
    /// Send the commit at `at`.
    Commit,
    /// Send the event at `at`.
    Event,
    /// Send the release at `at`.
    Release,
    /// The attempt is in flight: report its outcome.
    Wait,
    /// The settlement ended; see `outcome`.
    Done,
}

impl From<lb::SettleNext> for SettleNext {
    fn from(n: lb::SettleNext) -> SettleNext {
        match n {
            lb::SettleNext::Persist => SettleNext::Persist,
            lb::SettleNext::Send(lb::Endpoint::Commit) => SettleNext::Commit,
            lb::SettleNext::Send(lb::Endpoint::Event) => SettleNext::Event,
            lb::SettleNext::Send(lb::Endpoint::Release) => SettleNext::Release,
            lb::SettleNext::Wait => SettleNext::Wait,
            lb::SettleNext::Done(_) => SettleNext::Done,
        }
    }
}

// ----- plain objects out -----

/// What happens to the durable record with a decision, a union
/// discriminated by `type`: `{ type: 'write', mode, notBeforeMs }` (the
/// decision's `next` is `'persist'`; the whole record is
/// `settlement.record`), `{ type: 'remove' }` (J-5: only after a success or
/// an understood rejection) or `{ type: 'keep' }` (for a later replay).
// The variant fields carry no doc comments: napi-rs would inline them into
// the union type; the enum's comment above documents them.
#[allow(missing_docs)]
#[napi(
    discriminant = "type",
    discriminant_case = "lowercase",
    object_from_js = false
)]
pub enum RecordUpdate {
    /// Write the record.
    Write {
        mode: RecordMode,
        #[napi(ts_type = "number | bigint | null")]
        not_before_ms: NullableNum,
    },
    /// Remove it.
    Remove,
    /// Keep it.
    Keep,
}

/// A millisecond value or `null` (never `undefined`, where napi-rs would
/// leave an absent `Option` out of a union variant).
pub struct NullableNum(Option<JsNum>);

impl ToNapiValue for NullableNum {
    unsafe fn to_napi_value(env: sys::napi_env, val: Self) -> Result<sys::napi_value> {
        // SAFETY: forwarded to napi's own conversions with the same env.
        unsafe {
            match val.0 {
                Some(n) => JsNum::to_napi_value(env, n),
                None => Null::to_napi_value(env, Null),
            }
        }
    }
}

impl TypeName for NullableNum {
    fn type_name() -> &'static str {
        "number | bigint | null"
    }

    fn value_type() -> ValueType {
        ValueType::Unknown
    }
}

impl From<&lb::RecordUpdate> for RecordUpdate {
    fn from(u: &lb::RecordUpdate) -> RecordUpdate {
        match u {
            lb::RecordUpdate::Write {
                mode,
                not_before_ms,
            } => RecordUpdate::Write {
                mode: RecordMode::from(*mode),
                not_before_ms: NullableNum(not_before_ms.map(num)),
            },
            lb::RecordUpdate::Remove => RecordUpdate::Remove,
            lb::RecordUpdate::Keep => RecordUpdate::Keep,
        }
    }
}

/// One decision of a settlement: the answer to every call. A field is
/// `null` when it does not apply. `settlement.lastDecisionJson` prints it as
/// one JSON line (the vectors' vocabulary).
#[napi(object, object_from_js = false, use_nullable = true)]
pub struct SettlementDecision {
    /// What comes next.
    pub next: SettleNext,
    /// Due time of the next send in milliseconds on the caller's monotonic
    /// clock (a send only). Fractions are approximate; `atNs` is exact.
    pub at: Option<f64>,
    /// Due time of the next send in nanoseconds (a send only).
    pub at_ns: Option<BigInt>,
    /// The ordinal of the next request within its mode, 1-based (a send or
    /// a wait).
    pub attempt: Option<u32>,
    /// The mode after this decision.
    pub mode: SettleMode,
    /// What happens to the durable record (`null` for a release and when
    /// nothing changes).
    pub record: Option<RecordUpdate>,
    /// How the deciding event was classified.
    pub class: SettleClass,
    /// The server's error code, where one decided (or was given).
    pub code: Option<String>,
    /// The HTTP status of the deciding response.
    pub status: Option<u32>,
    /// The delay chosen after a failure in ms (SP-1, ST-4). A `number` (a
    /// `bigint` beyond 2^53-1).
    #[napi(ts_type = "number | bigint")]
    pub delay_ms: Option<JsNum>,
    /// The wall-clock floor set by this decision (ST-4), Unix ms. A
    /// `number` (a `bigint` beyond 2^53-1).
    #[napi(ts_type = "number | bigint")]
    pub not_before_ms: Option<JsNum>,
    /// Warnings, in order of appearance.
    pub warnings: Vec<SettleWarning>,
    /// A human-readable detail.
    pub detail: Option<String>,
    /// The outcome, when `next` is `'done'`.
    pub outcome: Option<SettleOutcome>,
    /// ST-11: stop the heartbeat now (the outcome is final, or the
    /// reservation is gone: event mode).
    pub stop_heartbeat: bool,
}

impl From<&lb::SettlementDecision> for SettlementDecision {
    fn from(d: &lb::SettlementDecision) -> SettlementDecision {
        let sending = matches!(d.next, lb::SettleNext::Send(_));
        SettlementDecision {
            next: SettleNext::from(d.next),
            at: d.at_ns.filter(|_| sending).map(ns_to_ms_f64),
            at_ns: d.at_ns.filter(|_| sending).map(BigInt::from),
            attempt: d.attempt,
            mode: SettleMode::from(d.mode),
            record: d.record.as_ref().map(RecordUpdate::from),
            class: SettleClass::from(d.class),
            code: d.code.clone(),
            status: d.status.map(u32::from),
            delay_ms: d.delay_ms.map(num),
            not_before_ms: d.not_before_ms.map(num),
            warnings: d.warnings.iter().map(|w| SettleWarning::from(*w)).collect(),
            detail: d.detail.clone(),
            outcome: d.outcome().map(SettleOutcome::from),
            stop_heartbeat: d.stop_heartbeat,
        }
    }
}

/// One request the caller must send (or has sent).
#[napi(object, object_from_js = false, use_nullable = true)]
pub struct SettleAttempt {
    /// Identifies this attempt in `handleSent`, `handleResponse` and
    /// `handleFailure`; 1 for the first of a settlement, counting on across
    /// modes.
    pub id: f64,
    /// Where it goes.
    pub endpoint: Endpoint,
    /// The idempotency key, for both the `X-Idempotency-Key` header and the
    /// body (ST-1: the same for every attempt of the settlement).
    pub key: String,
    /// The exact JSON request body, byte-identical for every attempt of one
    /// mode. A `Buffer` at run time (typed as `Uint8Array<ArrayBuffer>`).
    #[napi(ts_type = "Uint8Array<ArrayBuffer>")]
    pub body: Buffer,
    /// The same body as a string (it is always UTF-8 JSON).
    pub body_text: String,
    /// When to send it, in milliseconds on the caller's monotonic clock.
    /// Fractions are approximate; `dueNs` is exact.
    pub due_ms: f64,
    /// When to send it, in nanoseconds.
    pub due_ns: BigInt,
    /// Its ordinal within its mode, 1-based (SP-1).
    pub number: u32,
    /// When the caller reported sending it (nanoseconds), or `null`.
    pub sent_ns: Option<BigInt>,
}

impl From<&lb::SettleAttempt> for SettleAttempt {
    fn from(a: &lb::SettleAttempt) -> SettleAttempt {
        SettleAttempt {
            id: a.id as f64,
            endpoint: Endpoint::from(a.endpoint),
            key: a.key.clone(),
            body: Buffer::from(a.body.clone()),
            body_text: String::from_utf8_lossy(&a.body).into_owned(),
            due_ms: ns_to_ms_f64(a.due_ns),
            due_ns: BigInt::from(a.due_ns),
            number: a.number,
            sent_ns: a.sent_ns.map(BigInt::from),
        }
    }
}

/// The durable record of a commit or event settlement (runcycles Python
/// 0.5.3's journal layout, version 1), as it is (or is to be) persisted.
#[napi(object, object_from_js = false, use_nullable = true)]
pub struct SettlementRecord {
    /// The reservation.
    pub reservation_id: String,
    /// The server (`''` when none was given).
    pub base_url: String,
    /// The mode to settle in.
    pub mode: RecordMode,
    /// The settlement's one idempotency key (inside the record's bodies).
    pub key: String,
    /// When this version of the record was made, wall-clock Unix ms. A
    /// `number` (a `bigint` beyond 2^53-1).
    #[napi(ts_type = "number | bigint")]
    pub recorded_at_ms: JsNum,
    /// No request before this wall-clock instant (Unix ms), or `null`. A
    /// `number` (a `bigint` beyond 2^53-1).
    #[napi(ts_type = "number | bigint")]
    pub not_before_ms: Option<JsNum>,
    /// The record file's exact text: write these bytes (J-1), and give them
    /// back to `Settlement.fromRecord` after a restart.
    pub json: String,
}

impl From<&lb::SettlementRecord> for SettlementRecord {
    fn from(r: &lb::SettlementRecord) -> SettlementRecord {
        SettlementRecord {
            reservation_id: r.reservation_id.clone(),
            base_url: r.base_url.clone(),
            mode: RecordMode::from(r.mode),
            key: r.key().to_owned(),
            recorded_at_ms: num(r.recorded_at_ms),
            not_before_ms: r.not_before_ms.map(num),
            json: r.to_json(),
        }
    }
}

/// What a settlement's `pollAction()` asks for, a union discriminated by
/// `type`:
///
/// * `{ type: 'persist', record }`: make `record.json` durable, then call
///   `handlePersisted` (or `handlePersistFailed`); nothing is sent before;
/// * `{ type: 'send', attempt }`: send `attempt` at `attempt.dueNs`, then
///   call `handleSent`;
/// * `{ type: 'wait', attempt }`: `attempt` is in flight, report its outcome
///   with `handleResponse` or `handleFailure`;
/// * `{ type: 'done', outcome }`: the settlement ended.
// The variant fields carry no doc comments: napi-rs would inline them into
// the union type; the enum's comment above documents them.
#[allow(missing_docs)]
#[napi(
    discriminant = "type",
    discriminant_case = "lowercase",
    object_from_js = false
)]
pub enum SettlementAction {
    /// Persist the record, then acknowledge it.
    Persist { record: SettlementRecord },
    /// Send the attempt at its due time, then call `handleSent`.
    Send { attempt: SettleAttempt },
    /// The attempt is in flight: report its outcome.
    Wait { attempt: SettleAttempt },
    /// The settlement ended.
    Done { outcome: SettleOutcome },
}

impl From<lb::SettlementAction<'_>> for SettlementAction {
    fn from(a: lb::SettlementAction<'_>) -> SettlementAction {
        match a {
            lb::SettlementAction::Persist(r) => SettlementAction::Persist {
                record: SettlementRecord::from(r),
            },
            lb::SettlementAction::Send(a) => SettlementAction::Send {
                attempt: SettleAttempt::from(a),
            },
            lb::SettlementAction::Wait(a) => SettlementAction::Wait {
                attempt: SettleAttempt::from(a),
            },
            lb::SettlementAction::Done(o) => SettlementAction::Done {
                outcome: SettleOutcome::from(o),
            },
        }
    }
}

// ----- input shapes (TypeScript only: inputs are validated by hand) -----

/// The retry policy of a settlement (ST-3, SP-1). Absent members take
/// their defaults. Unknown properties are refused.
#[napi(object, object_from_js = false, object_to_js = false)]
pub struct RetryOptions {
    /// Requests of one mode in one process run, at least 1 (default 5).
    #[napi(ts_type = "number | bigint")]
    pub max_attempts: Option<()>,
    /// The delay after the first failure in ms (default 500); it doubles.
    #[napi(ts_type = "number | bigint")]
    pub initial_ms: Option<()>,
    /// The longest delay between attempts in ms (default 30000), at least
    /// `initialMs`.
    #[napi(ts_type = "number | bigint")]
    pub max_ms: Option<()>,
}

/// The options of `new Settlement(options, now, wallMs)`. Unknown
/// properties are refused.
#[napi(object, object_from_js = false, object_to_js = false)]
pub struct SettlementOptions {
    /// The reservation: 1..=128 characters, no control characters.
    #[napi(ts_type = "string")]
    pub reservation_id: (),
    /// The server, stored in the record (default `''`); at most 4096 bytes.
    #[napi(ts_type = "string")]
    pub base_url: Option<()>,
    /// Required for a commit: the commit body without its key (`actual`, an
    /// `Amount`, and optional `metrics` and `metadata`) as JSON data (bigints
    /// are written as exact integers) or as its JSON text (a string or bytes,
    /// passed byte for byte); `null` when no actual amount is known (then
    /// nothing is sent: outcome `'no_actual'`, ST-10). Absent for a release.
    #[napi(ts_type = "Record<string, unknown> | string | Uint8Array | ArrayBuffer | null")]
    pub commit: Option<()>,
    /// What the expired-commit fallback adds (`subject`, `action`), as JSON
    /// data or text; absent or `null`: no fallback (a 410 then ends
    /// `'expired_unrecorded'`).
    #[napi(ts_type = "Record<string, unknown> | string | Uint8Array | ArrayBuffer | null")]
    pub event: Option<()>,
    /// `true` for a release (work that used nothing): then no `commit` and no
    /// `event`.
    #[napi(ts_type = "boolean")]
    pub release: Option<()>,
    /// The release's `reason` (at most 256 characters), for a release only.
    #[napi(ts_type = "string | null")]
    pub release_reason: Option<()>,
    /// The retry policy; absent: the defaults.
    #[napi(ts_type = "RetryOptions")]
    pub retry: Option<()>,
    /// Deterministic keys `"<prefix>1"` instead of a random UUIDv4 key. For
    /// tests and replays only.
    #[napi(ts_type = "string")]
    pub key_prefix: Option<()>,
}

/// The options of `Settlement.fromRecord`. Unknown properties are refused.
#[napi(object, object_from_js = false, object_to_js = false)]
pub struct RestartOptions {
    /// The retry policy; absent: the defaults.
    #[napi(ts_type = "RetryOptions")]
    pub retry: Option<()>,
}

// ----- the settlement -----

enum State {
    Open(Box<lb::Settlement>),
    Closed,
}

/// The settlement of one reservation: a sans-IO state machine (rules
/// ST-1..ST-11 of the settlement contract, all decided by the Rust core).
///
/// Build it with `new Settlement(options, now, wallMs)` (a commit or a
/// release) or `Settlement.fromRecord(record, now, wallMs)` (a restart from
/// the durable record alone). Do what `pollAction()` asks (persist the
/// record, send an attempt at its due time) and report it with
/// `handlePersisted` / `handlePersistFailed`, `handleSent`, then
/// `handleResponse` or `handleFailure`; every report returns a
/// `SettlementDecision`. A call that throws changes nothing.
///
/// `now` is a `number` of monotonic milliseconds (fractions allowed, e.g.
/// `performance.now()`) or a `bigint` of nanoseconds (e.g.
/// `process.hrtime.bigint()`), never going backwards; `wallMs` is the wall
/// clock in Unix milliseconds (e.g. `Date.now()`; a non-negative integer
/// `number`, or a `bigint`), which `not_before_ms` is measured on (it
/// survives a restart). Every method is synchronous and fast.
#[napi]
pub struct Settlement {
    state: Mutex<State>,
}

impl Settlement {
    pub(crate) fn open(s: lb::Settlement) -> Settlement {
        Settlement {
            state: Mutex::new(State::Open(Box::new(s))),
        }
    }

    pub(crate) fn with<T>(&self, f: impl FnOnce(&mut lb::Settlement) -> R<T>) -> R<T> {
        let mut guard = self.state.lock().map_err(|_| {
            Fail::new(
                Class::Error,
                ErrorCode::Poisoned,
                "a previous call on this Settlement panicked; it can no longer be used",
            )
        })?;
        match &mut *guard {
            State::Open(s) => f(s),
            State::Closed => Err(Fail::new(
                Class::Error,
                ErrorCode::Closed,
                "this Settlement was closed",
            )),
        }
    }

    fn decide(
        &self,
        f: impl FnOnce(&mut lb::Settlement) -> std::result::Result<lb::SettlementDecision, lb::Error>,
    ) -> R<SettlementDecision> {
        self.with(|s| {
            f(s).map(|d| SettlementDecision::from(&d))
                .map_err(|e| Fail::core(&e))
        })
    }
}

#[napi]
impl Settlement {
    /// A settlement of one reservation: a commit of a known actual (the first
    /// action is `persist` of its record: the commit goes once it is
    /// acknowledged), a commit with `commit: null` (done at once,
    /// `'no_actual'`), or a release (`release: true`: the release is due at
    /// `now`, nothing is journaled).
    ///
    /// Throws a `TypeError`/`RangeError` (`ERR_LEASEBEAT_INVALID_ARGUMENT`)
    /// for malformed options or times, a `RangeError`
    /// (`ERR_LEASEBEAT_INVALID_CONFIG`) for what the core refuses (a
    /// reservation id outside 1..=128 characters or with a control character,
    /// a commit body that is not a JSON object with a valid `actual`, an
    /// amount beyond 2^63-1, a body with `idempotency_key`, an event without
    /// `subject` and `action`, a bad retry policy, ...).
    #[napi(constructor, catch_unwind)]
    pub fn new(
        env: &Env,
        #[napi(ts_arg_type = "SettlementOptions")] options: Unknown<'_>,
        #[napi(ts_arg_type = "number | bigint")] now: Unknown<'_>,
        #[napi(ts_arg_type = "number | bigint")] wall_ms: Unknown<'_>,
    ) -> Result<Settlement> {
        run(env, || {
            let o = conv::settlement_options(&options)?;
            let now = lb::Now::new(
                conv::time_ns(&now, "now")?,
                conv::wall_ms(&wall_ms, "wallMs")?,
            );
            let s = match o.key_prefix {
                Some(p) => {
                    lb::Settlement::with_key_source(o.config, now, &mut lb::SequentialKeys::new(p))
                }
                None => lb::Settlement::new(o.config, now),
            }
            .map_err(|e| Fail::core(&e))?;
            Ok(Settlement::open(s))
        })
    }

    /// A settlement rebuilt from its durable record alone (a restart, SP-4):
    /// the record's key and mode, a fresh attempt count; the first request is
    /// due `max(0, notBeforeMs - wallMs)` after `now` (at most 3600 s), and
    /// nothing is persisted until the record changes. `record` is the record
    /// file's text (a string or bytes).
    ///
    /// Throws a `RangeError` (`ERR_LEASEBEAT_INVALID_ARGUMENT`) for a record
    /// the core refuses (not JSON, another version, a missing or mismatched
    /// key, ...: a journal quarantines it, J-4), and a `RangeError`
    /// (`ERR_LEASEBEAT_INVALID_CONFIG`) for a bad retry policy.
    #[napi(factory, catch_unwind)]
    pub fn from_record(
        env: &Env,
        #[napi(ts_arg_type = "string | Uint8Array | ArrayBuffer")] record: Unknown<'_>,
        #[napi(ts_arg_type = "number | bigint")] now: Unknown<'_>,
        #[napi(ts_arg_type = "number | bigint")] wall_ms: Unknown<'_>,
        #[napi(ts_arg_type = "RestartOptions")] options: Option<Unknown<'_>>,
    ) -> Result<Settlement> {
        run(env, || {
            let bytes = conv::record_bytes(&record, "record")?;
            let now = lb::Now::new(
                conv::time_ns(&now, "now")?,
                conv::wall_ms(&wall_ms, "wallMs")?,
            );
            let retry = conv::restart_options(options.as_ref())?;
            let s =
                lb::Settlement::from_record_json(&bytes, retry, now).map_err(|e| Fail::core(&e))?;
            Ok(Settlement::open(s))
        })
    }

    /// What the caller must do now: persist the record, send an attempt,
    /// wait for its outcome, or nothing (done).
    #[napi(catch_unwind)]
    pub fn poll_action(&self, env: &Env) -> Result<SettlementAction> {
        run(env, || {
            self.with(|s| Ok(SettlementAction::from(s.poll_action())))
        })
    }

    /// When the next attempt is due, in nanoseconds, if one waits to be
    /// sent; else `null`.
    #[napi(catch_unwind)]
    pub fn poll_timeout(&self, env: &Env) -> Result<Option<BigInt>> {
        run(env, || {
            self.with(|s| Ok(s.poll_timeout().map(BigInt::from)))
        })
    }

    /// The record of the last `persist` action is durable (at time `now`).
    #[napi(catch_unwind)]
    pub fn handle_persisted(
        &self,
        env: &Env,
        #[napi(ts_arg_type = "number | bigint")] now: Unknown<'_>,
    ) -> Result<SettlementDecision> {
        run(env, || {
            let now = conv::time_ns(&now, "now")?;
            self.decide(|s| s.handle_persisted(now))
        })
    }

    /// The write of the last `persist` action failed (at time `now`;
    /// `message` says why): the request goes anyway at the same due time
    /// (SP-3), and the decision carries the warning `'persist_failed'`.
    #[napi(catch_unwind)]
    pub fn handle_persist_failed(
        &self,
        env: &Env,
        #[napi(ts_arg_type = "string")] message: Unknown<'_>,
        #[napi(ts_arg_type = "number | bigint")] now: Unknown<'_>,
    ) -> Result<SettlementDecision> {
        run(env, || {
            let message = conv::string(&message, "message")?;
            let now = conv::time_ns(&now, "now")?;
            self.decide(|s| s.handle_persist_failed(&message, now))
        })
    }

    /// The caller sent attempt `attemptId` at time `now`.
    #[napi(catch_unwind)]
    pub fn handle_sent(
        &self,
        env: &Env,
        #[napi(ts_arg_type = "number | bigint")] attempt_id: Unknown<'_>,
        #[napi(ts_arg_type = "number | bigint")] now: Unknown<'_>,
    ) -> Result<SettlementDecision> {
        run(env, || {
            let id = conv::integer_u64(&attempt_id, "attemptId")?;
            let now = conv::time_ns(&now, "now")?;
            self.decide(|s| s.handle_sent(id, now))
        })
    }

    /// The HTTP response to attempt `attemptId`, observed at time `now`
    /// (after its complete body) and wall-clock `wallMs` (a `Retry-After`
    /// floor is measured on it). `response.timingUnknown` is accepted and
    /// not used.
    #[napi(catch_unwind)]
    pub fn handle_response(
        &self,
        env: &Env,
        #[napi(ts_arg_type = "number | bigint")] attempt_id: Unknown<'_>,
        #[napi(ts_arg_type = "ResponseInit")] response: Unknown<'_>,
        #[napi(ts_arg_type = "number | bigint")] now: Unknown<'_>,
        #[napi(ts_arg_type = "number | bigint")] wall_ms: Unknown<'_>,
    ) -> Result<SettlementDecision> {
        run(env, || {
            let id = conv::integer_u64(&attempt_id, "attemptId")?;
            let response = conv::response(env, &response, "response")?;
            let now = lb::Now::new(
                conv::time_ns(&now, "now")?,
                conv::wall_ms(&wall_ms, "wallMs")?,
            );
            self.decide(|s| s.handle_response(id, response.view(), now))
        })
    }

    /// A transport failure (`'timeout'`, `'connect'` or `'reset'`) of
    /// attempt `attemptId`, observed at time `now`: transient (ST-3).
    #[napi(catch_unwind)]
    pub fn handle_failure(
        &self,
        env: &Env,
        #[napi(ts_arg_type = "number | bigint")] attempt_id: Unknown<'_>,
        #[napi(ts_arg_type = "TransportFailure")] failure: Unknown<'_>,
        #[napi(ts_arg_type = "number | bigint")] now: Unknown<'_>,
    ) -> Result<SettlementDecision> {
        run(env, || {
            let id = conv::integer_u64(&attempt_id, "attemptId")?;
            let failure = conv::transport_failure(&failure, "failure")?;
            let now = conv::time_ns(&now, "now")?;
            self.decide(|s| s.handle_failure(id, failure, now))
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
        match self.state.lock() {
            Ok(guard) => matches!(*guard, State::Closed),
            Err(poisoned) => matches!(*poisoned.into_inner(), State::Closed),
        }
    }

    /// The reservation id.
    #[napi(getter, catch_unwind)]
    pub fn reservation_id(&self, env: &Env) -> Result<String> {
        run(env, || self.with(|s| Ok(s.reservation_id().to_owned())))
    }

    /// The settlement's one idempotency key (`''` for `'no_actual'`).
    #[napi(getter, catch_unwind)]
    pub fn key(&self, env: &Env) -> Result<String> {
        run(env, || self.with(|s| Ok(s.key().to_owned())))
    }

    /// The current mode.
    #[napi(getter, catch_unwind)]
    pub fn mode(&self, env: &Env) -> Result<SettleMode> {
        run(env, || self.with(|s| Ok(SettleMode::from(s.mode()))))
    }

    /// The outcome once done, else `null`.
    #[napi(getter, catch_unwind)]
    pub fn outcome(&self, env: &Env) -> Result<Option<SettleOutcome>> {
        run(env, || {
            self.with(|s| Ok(s.outcome().map(SettleOutcome::from)))
        })
    }

    /// The failed requests of the current mode in this run.
    #[napi(getter, catch_unwind)]
    pub fn failures(&self, env: &Env) -> Result<u32> {
        run(env, || self.with(|s| Ok(s.failures())))
    }

    /// The record as it is (or is to be) persisted; `null` for a release and
    /// for `'no_actual'`.
    #[napi(getter, catch_unwind)]
    pub fn record(&self, env: &Env) -> Result<Option<SettlementRecord>> {
        run(env, || {
            self.with(|s| Ok(s.record().map(SettlementRecord::from)))
        })
    }

    /// The attempt to send or in flight, or `null`.
    #[napi(getter, catch_unwind)]
    pub fn attempt(&self, env: &Env) -> Result<Option<SettleAttempt>> {
        run(env, || {
            self.with(|s| Ok(s.attempt().map(SettleAttempt::from)))
        })
    }

    /// The most recent decision (the first one is made when the settlement
    /// is built).
    #[napi(getter, catch_unwind)]
    pub fn last_decision(&self, env: &Env) -> Result<SettlementDecision> {
        run(env, || {
            self.with(|s| Ok(SettlementDecision::from(s.last_decision())))
        })
    }

    /// The most recent decision as one JSON line, members in lexicographic
    /// order, in the settlement vectors' vocabulary (`next`, `at` in ms,
    /// `record`, `outcome`, ...), for logs.
    #[napi(getter, catch_unwind)]
    pub fn last_decision_json(&self, env: &Env) -> Result<String> {
        run(env, || self.with(|s| Ok(s.last_decision().to_string())))
    }
}

/// Every settlement outcome, in a fixed order.
#[napi(catch_unwind)]
pub fn settle_outcomes() -> Vec<SettleOutcome> {
    lb::SettleOutcome::ALL
        .into_iter()
        .map(SettleOutcome::from)
        .collect()
}
