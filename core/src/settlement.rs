//! The settlement of one reservation: commit, the expired-commit event
//! fallback, release (rules ST-1..ST-11 and SP-1..SP-4 of the project's
//! `settlement.md`). Sans-IO like [`crate::Heartbeat`]: time is an input,
//! [`Settlement::poll_action`] says what to do next, the `handle_*` calls
//! report what happened, and every call returns a [`SettlementDecision`]
//! that prints as one JSON line.
//!
//! See [`Settlement`] for an example.
//!
//! Decisions on points `settlement.md` leaves open are listed on
//! [`Settlement`].

mod record;

use std::fmt;

use serde_json::{Map, Value};

pub use record::{MAX_RESERVATION_ID_CHARS, RecordMode, SettlementRecord, check_reservation_id};

use crate::arith::RetryAfterError;
use crate::decision::ns_to_ms_json;
use crate::error::{Error, ErrorKind};
use crate::heartbeat::{MAX_KEY_CHARS, ResponseRef, TransportFailure, cap_detail};
use crate::keys::{KeySource, UuidV4Keys};
use crate::{json, schema};

/// The longest `Retry-After` a settlement honours (ST-4): 3600 s. A
/// restored `not_before_ms` further away than this is honoured only this far.
pub const MAX_RETRY_AFTER_MS: u64 = 3_600_000;
/// The longest release `reason` the protocol allows.
pub const MAX_REASON_CHARS: usize = 256;
/// The longest `base_url` accepted.
pub const MAX_BASE_URL_BYTES: usize = 4096;

/// A moment on both clocks: the monotonic clock every due time is measured
/// on (nanoseconds, never going backwards within one process) and the wall
/// clock (Unix ms) that `recorded_at_ms` and `not_before_ms` are measured on
/// (ST-4, SP-4: only the wall clock survives a restart).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Now {
    /// Monotonic nanoseconds (the caller's clock, as for a heartbeat).
    pub mono_ns: u64,
    /// Wall clock, Unix milliseconds.
    pub wall_ms: u64,
}

impl Now {
    /// A moment: monotonic ns and wall-clock Unix ms.
    pub fn new(mono_ns: u64, wall_ms: u64) -> Now {
        Now { mono_ns, wall_ms }
    }
}

/// The retry policy of a settlement (ST-3, SP-1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RetryPolicy {
    /// Requests of one mode in one process run, 1 or more (default 5).
    pub max_attempts: u32,
    /// The delay after the first failure, ms (default 500); it doubles.
    pub initial_ms: u64,
    /// The longest delay between attempts, ms (default 30000).
    pub max_ms: u64,
}

impl Default for RetryPolicy {
    fn default() -> RetryPolicy {
        RetryPolicy {
            max_attempts: 5,
            initial_ms: 500,
            max_ms: 30_000,
        }
    }
}

impl RetryPolicy {
    /// Checks the values ([`ErrorKind::InvalidConfig`]): `max_attempts` at
    /// least 1, `initial_ms` at most `max_ms`.
    pub fn validate(&self) -> Result<(), Error> {
        if self.max_attempts == 0 {
            return Err(config_error("retry.max_attempts must be at least 1"));
        }
        if self.initial_ms > self.max_ms {
            return Err(config_error(format!(
                "retry.initial_ms ({}) must not exceed retry.max_ms ({})",
                self.initial_ms, self.max_ms
            )));
        }
        Ok(())
    }

    /// The delay after the `k`-th failure of a mode (k >= 1):
    /// `min(initial x 2^(k-1), max)` ms (SP-1), saturating.
    pub fn backoff_ms(&self, k: u32) -> u64 {
        let shift = k.saturating_sub(1).min(63);
        let factor = 1u64 << shift;
        self.initial_ms.saturating_mul(factor).min(self.max_ms)
    }
}

/// What a settlement does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SettlementConfig {
    /// The reservation (see [`check_reservation_id`]).
    pub reservation_id: String,
    /// The server, stored in the record (`""` if the caller has none).
    pub base_url: String,
    /// The commit body without its key, as JSON text: an object with
    /// `actual` (an `Amount`) and optional `metrics` (`StandardMetrics`) and
    /// `metadata` (an object). `None` when no actual amount is known: then
    /// nothing is sent (ST-10, outcome `no_actual`).
    pub commit: Option<Vec<u8>>,
    /// What the expired-commit fallback adds, as JSON text: an object with
    /// `subject` (an object) and `action` (an object with string `kind` and
    /// `name`). `None`: no fallback (a 410 then ends `expired_unrecorded`).
    pub event: Option<Vec<u8>>,
    /// A release instead of a commit (work that used nothing): `commit` and
    /// `event` must be `None`.
    pub release: bool,
    /// The release's `reason` (at most 256 characters), if any.
    pub release_reason: Option<String>,
    /// The retry policy.
    pub retry: RetryPolicy,
}

impl SettlementConfig {
    /// A commit of `commit` (the body without its key) for `reservation_id`,
    /// no event fallback, no base URL, the default retry policy.
    pub fn commit(reservation_id: impl Into<String>, commit: Vec<u8>) -> SettlementConfig {
        SettlementConfig {
            reservation_id: reservation_id.into(),
            base_url: String::new(),
            commit: Some(commit),
            event: None,
            release: false,
            release_reason: None,
            retry: RetryPolicy::default(),
        }
    }

    /// A release of `reservation_id` with the default retry policy.
    pub fn release(reservation_id: impl Into<String>, reason: Option<String>) -> SettlementConfig {
        SettlementConfig {
            reservation_id: reservation_id.into(),
            base_url: String::new(),
            commit: None,
            event: None,
            release: true,
            release_reason: reason,
            retry: RetryPolicy::default(),
        }
    }
}

/// Which endpoint an attempt goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Endpoint {
    /// `POST /v1/reservations/{reservation_id}/commit`.
    Commit,
    /// `POST /v1/events`.
    Event,
    /// `POST /v1/reservations/{reservation_id}/release`.
    Release,
}

impl Endpoint {
    /// `"commit"`, `"event"` or `"release"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Endpoint::Commit => "commit",
            Endpoint::Event => "event",
            Endpoint::Release => "release",
        }
    }

    /// The endpoint with this name.
    pub fn parse(s: &str) -> Option<Endpoint> {
        match s {
            "commit" => Some(Endpoint::Commit),
            "event" => Some(Endpoint::Event),
            "release" => Some(Endpoint::Release),
            _ => None,
        }
    }

    /// The request path. `encoded_id` must already be percent-encoded as
    /// one path segment (a reservation id may contain `/`, `%`, spaces, any
    /// non-ASCII character): that is the caller's job, this crate does no I/O
    /// and no URL building beyond this concatenation.
    pub fn path(self, encoded_id: &str) -> String {
        match self {
            Endpoint::Commit => format!("/v1/reservations/{encoded_id}/commit"),
            Endpoint::Event => "/v1/events".to_owned(),
            Endpoint::Release => format!("/v1/reservations/{encoded_id}/release"),
        }
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The mode a settlement is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SettleMode {
    /// Committing the actual.
    Commit,
    /// The expired-commit fallback through `POST /v1/events`.
    Event,
    /// Releasing (not journaled).
    Release,
}

impl SettleMode {
    /// `"commit"`, `"event"` or `"release"`.
    pub fn as_str(self) -> &'static str {
        match self {
            SettleMode::Commit => "commit",
            SettleMode::Event => "event",
            SettleMode::Release => "release",
        }
    }

    fn endpoint(self) -> Endpoint {
        match self {
            SettleMode::Commit => Endpoint::Commit,
            SettleMode::Event => Endpoint::Event,
            SettleMode::Release => Endpoint::Release,
        }
    }
}

/// How a settlement ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SettleOutcome {
    /// ST-2: commit success. The record is removed.
    Committed,
    /// ST-2: event success (the expired-commit fallback). The record is removed.
    Applied,
    /// ST-2: release success.
    Released,
    /// ST-7: the server understood and refused (the code is in the
    /// decision). The record is removed.
    Rejected,
    /// ST-6: 401 or 403. The record stays; never a release.
    AuthFailed,
    /// ST-8: a 4xx without a usable code. The record stays.
    Unclassified,
    /// ST-3: the attempts of this run are used up. The record stays for replay.
    Exhausted,
    /// ST-5: the reservation expired and no event body is known. The
    /// record stays. Loud: the usage is not recorded on the server.
    ExpiredUnrecorded,
    /// ST-10: no actual amount is known; nothing was sent.
    NoActual,
}

impl SettleOutcome {
    /// Every outcome, in a fixed order.
    pub const ALL: [SettleOutcome; 9] = [
        SettleOutcome::Committed,
        SettleOutcome::Applied,
        SettleOutcome::Released,
        SettleOutcome::Rejected,
        SettleOutcome::AuthFailed,
        SettleOutcome::Unclassified,
        SettleOutcome::Exhausted,
        SettleOutcome::ExpiredUnrecorded,
        SettleOutcome::NoActual,
    ];

    /// The stable name, as in the vectors.
    pub fn as_str(self) -> &'static str {
        match self {
            SettleOutcome::Committed => "committed",
            SettleOutcome::Applied => "applied",
            SettleOutcome::Released => "released",
            SettleOutcome::Rejected => "rejected",
            SettleOutcome::AuthFailed => "auth_failed",
            SettleOutcome::Unclassified => "unclassified",
            SettleOutcome::Exhausted => "exhausted",
            SettleOutcome::ExpiredUnrecorded => "expired_unrecorded",
            SettleOutcome::NoActual => "no_actual",
        }
    }

    /// The outcome with this name.
    pub fn parse(s: &str) -> Option<SettleOutcome> {
        SettleOutcome::ALL.into_iter().find(|o| o.as_str() == s)
    }

    /// A terminal success (ST-2).
    pub fn is_success(self) -> bool {
        matches!(
            self,
            SettleOutcome::Committed | SettleOutcome::Applied | SettleOutcome::Released
        )
    }
}

impl fmt::Display for SettleOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What happens to the durable record with a decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RecordUpdate {
    /// Write the record (the decision's `next` is `persist`); its mode and
    /// floor are shown, the whole record is [`Settlement::record`].
    Write {
        /// The record's mode.
        mode: RecordMode,
        /// The record's `not_before_ms`.
        not_before_ms: Option<u64>,
    },
    /// Remove it (J-5: only after ST-2 success or ST-7 rejection).
    Remove,
    /// Keep it for a later replay.
    Keep,
}

/// How the event behind a decision was classified.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SettleClass {
    /// The settlement was built from a configuration.
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
    /// A 2xx that is not the exact success (ST-2, CR-CORE-004).
    Ambiguous,
    /// A timeout, connection failure or reset (ST-3).
    Transport,
    /// A 5xx, 1xx, 3xx or a status of 600 and above (ST-3, ST-8).
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

impl SettleClass {
    /// The stable name.
    pub fn as_str(self) -> &'static str {
        match self {
            SettleClass::Start => "start",
            SettleClass::Restart => "restart",
            SettleClass::Persisted => "persisted",
            SettleClass::PersistFailed => "persist_failed",
            SettleClass::Sent => "sent",
            SettleClass::Success => "success",
            SettleClass::Ambiguous => "ambiguous",
            SettleClass::Transport => "transport",
            SettleClass::ServerError => "server_error",
            SettleClass::Throttled => "throttled",
            SettleClass::Expired => "expired",
            SettleClass::Auth => "auth",
            SettleClass::Rejected => "rejected",
            SettleClass::Unclassified => "unclassified",
        }
    }
}

/// A warning carried by a decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SettleWarning {
    /// SP-3: the persist failed; the request goes anyway (the message is the
    /// decision's `detail`).
    PersistFailed,
    /// ST-4: a 429 without a usable `Retry-After` (missing, repeated,
    /// invalid, overflowing): the backoff alone decides.
    RetryAfterUnusable,
    /// ST-4: the `Retry-After` exceeded 3600 s and was capped.
    RetryAfterCapped,
}

impl SettleWarning {
    /// The stable name.
    pub fn as_str(self) -> &'static str {
        match self {
            SettleWarning::PersistFailed => "persist_failed",
            SettleWarning::RetryAfterUnusable => "retry_after_unusable",
            SettleWarning::RetryAfterCapped => "retry_after_capped",
        }
    }
}

/// What comes next after a decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SettleNext {
    /// Persist [`Settlement::record`], then acknowledge it.
    Persist,
    /// Send an attempt to this endpoint at the decision's `at_ns`.
    Send(Endpoint),
    /// The attempt is in flight: report its outcome.
    Wait,
    /// The settlement ended.
    Done(SettleOutcome),
}

/// One decision of a settlement: the answer to every call. It prints
/// ([`fmt::Display`]) as one JSON line in the vectors' `expect` vocabulary,
/// members in lexicographic order: `at` (ms), `attempt`, `class`, `code`,
/// `delay_ms`, `detail`, `heartbeat` (`"stop"`), `key` (1), `mode`, `next`
/// (`persist`, `commit`, `event`, `release`, `wait`, `done`), `not_before_ms`,
/// `outcome`, `record`, `status`, `warnings`; absent members are omitted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SettlementDecision {
    /// What comes next.
    pub next: SettleNext,
    /// The due time of the next send, caller nanoseconds (a send only).
    pub at_ns: Option<u64>,
    /// The ordinal of the next request within its mode, 1-based (a send or
    /// a wait).
    pub attempt: Option<u32>,
    /// The mode after this decision.
    pub mode: SettleMode,
    /// What happens to the durable record (absent for a release and when
    /// nothing changes).
    pub record: Option<RecordUpdate>,
    /// How the deciding event was classified.
    pub class: SettleClass,
    /// The server's error code, where one decided (or was given).
    pub code: Option<String>,
    /// The HTTP status of the deciding response.
    pub status: Option<u16>,
    /// The delay chosen after a failure, ms (SP-1, ST-4).
    pub delay_ms: Option<u64>,
    /// The wall-clock floor set by this decision (ST-4), Unix ms.
    pub not_before_ms: Option<u64>,
    /// Warnings, in order of appearance.
    pub warnings: Vec<SettleWarning>,
    /// A human-readable detail, at most [`crate::MAX_DETAIL_BYTES`] bytes (a longer
    /// text is cut and ends with [`crate::DETAIL_CUT_MARKER`]).
    pub detail: Option<String>,
    /// ST-11: stop the heartbeat now (the outcome is final, or the
    /// reservation is gone: event mode).
    pub stop_heartbeat: bool,
}

impl SettlementDecision {
    fn new(next: SettleNext, mode: SettleMode, class: SettleClass) -> SettlementDecision {
        SettlementDecision {
            next,
            at_ns: None,
            attempt: None,
            mode,
            record: None,
            class,
            code: None,
            status: None,
            delay_ms: None,
            not_before_ms: None,
            warnings: Vec::new(),
            detail: None,
            stop_heartbeat: false,
        }
    }

    /// The outcome, when the settlement ended.
    pub fn outcome(&self) -> Option<SettleOutcome> {
        match self.next {
            SettleNext::Done(o) => Some(o),
            _ => None,
        }
    }

    /// The `next` member's text.
    pub fn next_str(&self) -> &'static str {
        match self.next {
            SettleNext::Persist => "persist",
            SettleNext::Send(e) => e.as_str(),
            SettleNext::Wait => "wait",
            SettleNext::Done(_) => "done",
        }
    }

    /// The decision as a JSON object (see the type's documentation).
    pub fn to_json(&self) -> Map<String, Value> {
        let mut m = Map::new();
        if let (SettleNext::Send(_), Some(at)) = (self.next, self.at_ns) {
            m.insert("at".into(), ns_to_ms_json(Some(at)));
        }
        if let Some(a) = self.attempt {
            m.insert("attempt".into(), Value::from(a));
        }
        m.insert("class".into(), Value::from(self.class.as_str()));
        if let Some(c) = &self.code {
            m.insert("code".into(), Value::from(c.as_str()));
        }
        if let Some(d) = self.delay_ms {
            m.insert("delay_ms".into(), Value::from(d));
        }
        if let Some(d) = &self.detail {
            m.insert("detail".into(), Value::from(d.as_str()));
        }
        if self.stop_heartbeat {
            m.insert("heartbeat".into(), Value::from("stop"));
        }
        if matches!(self.next, SettleNext::Send(_) | SettleNext::Wait) {
            m.insert("key".into(), Value::from(1));
        }
        m.insert("mode".into(), Value::from(self.mode.as_str()));
        m.insert("next".into(), Value::from(self.next_str()));
        if let Some(n) = self.not_before_ms {
            m.insert("not_before_ms".into(), Value::from(n));
        }
        if let Some(o) = self.outcome() {
            m.insert("outcome".into(), Value::from(o.as_str()));
        }
        match self.record {
            None => {}
            Some(RecordUpdate::Write {
                mode,
                not_before_ms,
            }) => {
                let mut r = Map::new();
                r.insert("mode".into(), Value::from(mode.as_str()));
                r.insert(
                    "not_before_ms".into(),
                    not_before_ms.map_or(Value::Null, Value::from),
                );
                m.insert("record".into(), Value::Object(r));
            }
            Some(RecordUpdate::Remove) => {
                m.insert("record".into(), Value::from("remove"));
            }
            Some(RecordUpdate::Keep) => {
                m.insert("record".into(), Value::from("keep"));
            }
        }
        if let Some(s) = self.status {
            m.insert("status".into(), Value::from(s));
        }
        if !self.warnings.is_empty() {
            m.insert(
                "warnings".into(),
                Value::Array(
                    self.warnings
                        .iter()
                        .map(|w| Value::from(w.as_str()))
                        .collect(),
                ),
            );
        }
        m
    }
}

impl fmt::Display for SettlementDecision {
    /// One JSON line, members in lexicographic order.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", Value::Object(self.to_json()))
    }
}

/// One request the caller must send.
#[derive(Clone, PartialEq, Eq)]
pub struct SettleAttempt {
    /// Identifies the attempt in `handle_sent`, `handle_response` and
    /// `handle_failure`; 1 for the first of a settlement, counting on across
    /// modes.
    pub id: u64,
    /// Where it goes.
    pub endpoint: Endpoint,
    /// The idempotency key, for both the `X-Idempotency-Key` header and the
    /// body (ST-1: the same for every attempt of the settlement).
    pub key: String,
    /// The exact JSON body (members in lexicographic order); byte-identical
    /// for every attempt of one mode.
    pub body: Vec<u8>,
    /// When to send it, caller nanoseconds.
    pub due_ns: u64,
    /// Its ordinal within its mode, 1-based (SP-1).
    pub number: u32,
    /// When the caller reported sending it.
    pub sent_ns: Option<u64>,
}

impl fmt::Debug for SettleAttempt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SettleAttempt")
            .field("id", &self.id)
            .field("endpoint", &self.endpoint)
            .field("key", &self.key)
            .field("body", &String::from_utf8_lossy(&self.body))
            .field("due_ns", &self.due_ns)
            .field("number", &self.number)
            .field("sent_ns", &self.sent_ns)
            .finish()
    }
}

/// What the caller must do now.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SettlementAction<'a> {
    /// Make this record durable (J-1), then call
    /// [`Settlement::handle_persisted`] or [`Settlement::handle_persist_failed`].
    /// Nothing is sent before.
    Persist(&'a SettlementRecord),
    /// Send this attempt at `attempt.due_ns`, then call [`Settlement::handle_sent`].
    Send(&'a SettleAttempt),
    /// The attempt is in flight: report its outcome.
    Wait(&'a SettleAttempt),
    /// The settlement ended; the final decision says what happens to the
    /// record ([`SettlementDecision::record`]).
    Done(SettleOutcome),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum After {
    /// Install the next attempt, due no earlier than this.
    Send { planned_ns: u64 },
    /// End with this outcome (the record is kept).
    Done(SettleOutcome),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Persist(After),
    Ready,
    InFlight,
    Done(SettleOutcome),
}

/// How a response was classified.
enum Class {
    Success,
    Transient(SettleClass, String),
    Throttled(Result<u64, RetryAfterError>, Option<String>),
    Expired(Option<String>),
    Auth(Option<String>),
    Rejected(Option<String>),
    Unclassified(Option<String>, String),
}

/// The settlement of one reservation: a sans-IO state machine.
///
/// Built with [`Settlement::new`] (a commit or a release) or
/// [`Settlement::from_record`] (a restart, SP-4). The caller does what
/// [`Settlement::poll_action`] asks and reports it; every report returns a
/// [`SettlementDecision`]. A call that returns an error changes nothing.
/// Every `now` is monotonic and must not go backwards
/// ([`ErrorKind::TimeWentBackwards`]); a call after the end is refused with
/// [`ErrorKind::Stopped`].
///
/// ```
/// use leasebeat::{Now, ResponseRef, Settlement, SettlementAction, SettlementConfig, SettleOutcome};
/// let config = SettlementConfig::commit("r-1", br#"{"actual":{"unit":"TOKENS","amount":900}}"#.to_vec());
/// let mut s = Settlement::new(config, Now::new(0, 1_785_585_600_000)).unwrap();
/// // The record must be durable before the commit leaves (J-1, SP-3).
/// let SettlementAction::Persist(record) = s.poll_action() else { unreachable!() };
/// let _file_text = record.to_json(); // the journal writes this
/// s.handle_persisted(1_000_000).unwrap();
/// let SettlementAction::Send(attempt) = s.poll_action() else { unreachable!() };
/// let (id, key) = (attempt.id, attempt.key.clone());
/// assert_eq!(attempt.endpoint.as_str(), "commit");
/// s.handle_sent(id, 1_000_000).unwrap();
/// let body = br#"{"status":"COMMITTED","charged":{"unit":"TOKENS","amount":900}}"#;
/// let d = s
///     .handle_response(id, ResponseRef::new(200, body), Now::new(30_000_000, 1_785_585_600_030))
///     .unwrap();
/// assert_eq!(d.outcome(), Some(SettleOutcome::Committed));
/// assert_eq!(d.to_string(), r#"{"class":"success","heartbeat":"stop","mode":"commit","next":"done","outcome":"committed","record":"remove","status":200}"#);
/// assert_eq!(s.key(), key); // ST-1: one key
/// ```
///
/// Decisions on points `settlement.md` leaves open:
///
/// * The key comes from the key source once, when the settlement is built;
///   a restart takes it from the record. The event fallback body is built as
///   runcycles Python 0.5.3 builds it: `idempotency_key`, `subject`,
///   `action`, `actual`, `metrics` when the commit has them, and `metadata`:
///   the commit's metadata plus `recovered_reservation_id` and
///   `recovery_reason: "commit_after_reservation_expired"`.
/// * `LIMIT_EXCEEDED` (and 429) is read before 401/403 (as runcycles Python
///   does): a throttled 401 retries. The codes that decide ST-4 and ST-5 are
///   the top-level `error` string of any JSON object body (as the
///   heartbeat's P-3); ST-7 needs a schema-valid `ErrorResponse`.
/// * A `Retry-After` of 0 or a missing/unusable one sets no floor (nothing
///   is persisted); a positive one persists `not_before_ms = wall + min(value,
///   3600 s)` (the server's floor, as runcycles Python persists it) while the
///   in-process delay is `max(backoff, that)`. A 429 that exhausts the
///   attempts still persists its floor first, then ends `exhausted`.
/// * A request guarded by a persist is due no earlier than the persist's
///   acknowledgement (or failure report); a send earlier than due is
///   accepted, as for the heartbeat (timers may fire early).
/// * Statuses 600..=999 are transient like 5xx; statuses outside
///   100..=999 are refused ([`ErrorKind::InvalidArgument`]).
/// * A restored `not_before_ms` more than 3600 s ahead of the wall clock is
///   honoured for 3600 s only (as runcycles Python); each record write
///   stamps `recorded_at_ms` with the wall clock of that write.
/// * In event mode every 4xx that is not 401/403/429/`LIMIT_EXCEEDED` and not
///   an ST-7 rejection is ST-8 (SP-2), 410 included.
pub struct Settlement {
    reservation_id: String,
    mode: SettleMode,
    /// The durable record (commit and event modes; `None` for a release).
    record: Option<SettlementRecord>,
    key: String,
    /// The exact body of the current mode (serialized once per mode).
    body: Vec<u8>,
    retry: RetryPolicy,
    /// Failed requests in the current mode.
    failures: u32,
    next_attempt_id: u64,
    last_event_ns: u64,
    phase: Phase,
    attempt: Option<SettleAttempt>,
    last: SettlementDecision,
}

impl fmt::Debug for Settlement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Settlement")
            .field("reservation_id", &self.reservation_id)
            .field("mode", &self.mode)
            .field("key", &self.key)
            .field("failures", &self.failures)
            .field("phase", &self.phase)
            .field("attempt", &self.attempt)
            .finish_non_exhaustive()
    }
}

impl Settlement {
    /// A settlement with a random UUIDv4 key. See
    /// [`Settlement::with_key_source`].
    pub fn new(config: SettlementConfig, now: Now) -> Result<Settlement, Error> {
        Settlement::with_key_source(config, now, &mut UuidV4Keys)
    }

    /// A settlement whose one key comes from `keys` (ST-1), built at `now`.
    ///
    /// * A commit with a known actual: the first action is
    ///   [`SettlementAction::Persist`] of a commit-mode record; the commit
    ///   goes when it is acknowledged (SP-1, SP-3).
    /// * A commit without an actual (`config.commit` `None`): done at once,
    ///   `no_actual`, nothing to send or persist (ST-10).
    /// * A release: the release is due at `now` (not journaled, ST-9).
    ///
    /// Errors: [`ErrorKind::InvalidConfig`] for a reservation id outside
    /// 1..=128 characters or with a control character, a commit body that is
    /// not a JSON object with a valid `actual` (`unit` one of the protocol's,
    /// `amount` an integer in 0..=2^63-1), a body with
    /// `idempotency_key` (the core sets it), an event body without `subject`
    /// and `action`, a release with a commit or event body, a bad retry
    /// policy, a base URL over 4096 bytes; [`ErrorKind::InvalidKey`] for a key
    /// of 0 or more than 256 characters.
    pub fn with_key_source(
        config: SettlementConfig,
        now: Now,
        keys: &mut dyn KeySource,
    ) -> Result<Settlement, Error> {
        let SettlementConfig {
            reservation_id,
            base_url,
            commit,
            event,
            release,
            release_reason,
            retry,
        } = config;
        check_reservation_id(&reservation_id)?;
        retry.validate()?;
        if base_url.len() > MAX_BASE_URL_BYTES {
            return Err(config_error(format!(
                "base_url is {} bytes (at most {MAX_BASE_URL_BYTES})",
                base_url.len()
            )));
        }
        if release {
            if commit.is_some() || event.is_some() {
                return Err(config_error(
                    "a release carries no commit or event body (release is for work that used nothing)",
                ));
            }
            if let Some(r) = &release_reason {
                let chars = r.chars().count();
                if chars > MAX_REASON_CHARS {
                    return Err(config_error(format!(
                        "release_reason has {chars} characters (at most {MAX_REASON_CHARS})"
                    )));
                }
            }
        } else if release_reason.is_some() {
            return Err(config_error("release_reason is for a release only"));
        }
        let commit = commit.map(|c| commit_members(&c)).transpose()?;
        let event = event.map(|e| event_members(&e)).transpose()?;
        if !release && commit.is_none() {
            // ST-10: nothing is sent, nothing is persisted, no key is drawn.
            let mut d = SettlementDecision::new(
                SettleNext::Done(SettleOutcome::NoActual),
                SettleMode::Commit,
                SettleClass::Start,
            );
            d.stop_heartbeat = true;
            d.detail = Some("no actual amount is known: nothing is sent (ST-10)".into());
            return Ok(Settlement {
                reservation_id,
                mode: SettleMode::Commit,
                record: None,
                key: String::new(),
                body: Vec::new(),
                retry,
                failures: 0,
                next_attempt_id: 1,
                last_event_ns: now.mono_ns,
                phase: Phase::Done(SettleOutcome::NoActual),
                attempt: None,
                last: d,
            });
        }
        let key = keys.next_key();
        let chars = key.chars().count();
        if chars == 0 || chars > MAX_KEY_CHARS {
            return Err(Error::new(
                ErrorKind::InvalidKey,
                format!(
                    "the key source gave a key of {chars} characters (must be 1..={MAX_KEY_CHARS})"
                ),
            ));
        }
        let mut s = Settlement {
            reservation_id,
            mode: if release {
                SettleMode::Release
            } else {
                SettleMode::Commit
            },
            record: None,
            key,
            body: Vec::new(),
            retry,
            failures: 0,
            next_attempt_id: 1,
            last_event_ns: now.mono_ns,
            phase: Phase::Ready,
            attempt: None,
            last: SettlementDecision::new(SettleNext::Wait, SettleMode::Commit, SettleClass::Start),
        };
        if release {
            let mut body = Map::new();
            body.insert("idempotency_key".into(), Value::from(s.key.as_str()));
            if let Some(r) = release_reason {
                body.insert("reason".into(), Value::from(r));
            }
            s.body = to_bytes(&body);
            s.install(now.mono_ns);
            let mut d = s.send_decision(SettleClass::Start);
            d.record = None;
            s.last = d;
            return Ok(s);
        }
        let mut commit_body = commit.unwrap_or_default();
        commit_body.insert("idempotency_key".into(), Value::from(s.key.as_str()));
        let event_fallback_body = event.map(|e| event_body(&s.reservation_id, &commit_body, e));
        s.record = Some(SettlementRecord {
            reservation_id: s.reservation_id.clone(),
            base_url,
            mode: RecordMode::Commit,
            commit_body: Some(commit_body),
            event_fallback_body,
            recorded_at_ms: now.wall_ms,
            not_before_ms: None,
        });
        s.refresh_body();
        s.phase = Phase::Persist(After::Send {
            planned_ns: now.mono_ns,
        });
        s.last = s.persist_decision(SettleClass::Start);
        Ok(s)
    }

    /// A settlement rebuilt from its durable record alone (SP-4, J-6), at
    /// `now`: the record's key, the record's mode, a fresh attempt count;
    /// the first request is due `max(0, not_before_ms - now.wall_ms)` after
    /// `now` (at most 3600 s), and nothing is persisted until the record
    /// changes. Errors: [`ErrorKind::InvalidArgument`] for a record
    /// [`SettlementRecord::validate`] refuses, [`ErrorKind::InvalidConfig`]
    /// for a bad retry policy.
    pub fn from_record(
        record: SettlementRecord,
        retry: RetryPolicy,
        now: Now,
    ) -> Result<Settlement, Error> {
        retry.validate()?;
        record.validate()?;
        let key = record.key().to_owned();
        let mode = match record.mode {
            RecordMode::Commit => SettleMode::Commit,
            RecordMode::Event => SettleMode::Event,
        };
        let wait_ms = record
            .not_before_ms
            .map_or(0, |nb| nb.saturating_sub(now.wall_ms))
            .min(MAX_RETRY_AFTER_MS);
        let mut s = Settlement {
            reservation_id: record.reservation_id.clone(),
            mode,
            record: Some(record),
            key,
            body: Vec::new(),
            retry,
            failures: 0,
            next_attempt_id: 1,
            last_event_ns: now.mono_ns,
            phase: Phase::Ready,
            attempt: None,
            last: SettlementDecision::new(SettleNext::Wait, mode, SettleClass::Restart),
        };
        s.refresh_body();
        s.install(due_after(now.mono_ns, wait_ms));
        let mut d = s.send_decision(SettleClass::Restart);
        if wait_ms > 0 {
            d.delay_ms = Some(wait_ms);
        }
        s.last = d;
        Ok(s)
    }

    /// [`Settlement::from_record`] of a record file's bytes
    /// ([`SettlementRecord::from_json`]).
    pub fn from_record_json(
        bytes: &[u8],
        retry: RetryPolicy,
        now: Now,
    ) -> Result<Settlement, Error> {
        Settlement::from_record(SettlementRecord::from_json(bytes)?, retry, now)
    }

    // ----- getters -----

    /// The reservation id.
    pub fn reservation_id(&self) -> &str {
        &self.reservation_id
    }

    /// The instant (caller nanoseconds) of the last event reported, or of the
    /// settlement's construction: every later call must give a `now` no earlier.
    pub fn last_event_ns(&self) -> u64 {
        self.last_event_ns
    }

    /// The settlement's one idempotency key (`""` for `no_actual`).
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The current mode.
    pub fn mode(&self) -> SettleMode {
        self.mode
    }

    /// The record as it is (or is to be) persisted; `None` for a release
    /// and for `no_actual`.
    pub fn record(&self) -> Option<&SettlementRecord> {
        self.record.as_ref()
    }

    /// The outcome, once done.
    pub fn outcome(&self) -> Option<SettleOutcome> {
        match self.phase {
            Phase::Done(o) => Some(o),
            _ => None,
        }
    }

    /// The most recent decision (the first one is made when the settlement
    /// is built).
    pub fn last_decision(&self) -> &SettlementDecision {
        &self.last
    }

    /// The attempt to send or in flight, if any.
    pub fn attempt(&self) -> Option<&SettleAttempt> {
        match self.phase {
            Phase::Ready | Phase::InFlight => self.attempt.as_ref(),
            _ => None,
        }
    }

    /// The failed requests of the current mode in this run.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// What the caller must do now.
    pub fn poll_action(&self) -> SettlementAction<'_> {
        match (self.phase, &self.attempt, &self.record) {
            (Phase::Done(o), _, _) => SettlementAction::Done(o),
            (Phase::Persist(_), _, Some(r)) => SettlementAction::Persist(r),
            (Phase::Ready, Some(a), _) => SettlementAction::Send(a),
            (Phase::InFlight, Some(a), _) => SettlementAction::Wait(a),
            // Unreachable by construction: a persist has a record and a
            // ready or in-flight phase has an attempt.
            _ => SettlementAction::Done(SettleOutcome::Unclassified),
        }
    }

    /// When the next attempt is due (caller ns), if one waits to be sent.
    pub fn poll_timeout(&self) -> Option<u64> {
        match self.poll_action() {
            SettlementAction::Send(a) => Some(a.due_ns),
            _ => None,
        }
    }

    // ----- handlers -----

    /// The record of the last [`SettlementAction::Persist`] is durable (at
    /// `now_ns`).
    pub fn handle_persisted(&mut self, now_ns: u64) -> Result<SettlementDecision, Error> {
        let after = self.check_persist(now_ns)?;
        self.last_event_ns = now_ns;
        let d = self.after_persist(after, now_ns, SettleClass::Persisted);
        Ok(self.decide(d))
    }

    /// The write of the last [`SettlementAction::Persist`] failed (at
    /// `now_ns`, `message` says why): SP-3, the request goes anyway at the
    /// same due time, and the decision carries the warning `persist_failed`
    /// with the message as its detail.
    pub fn handle_persist_failed(
        &mut self,
        message: &str,
        now_ns: u64,
    ) -> Result<SettlementDecision, Error> {
        let after = self.check_persist(now_ns)?;
        self.last_event_ns = now_ns;
        let mut d = self.after_persist(after, now_ns, SettleClass::PersistFailed);
        d.warnings.insert(0, SettleWarning::PersistFailed);
        d.detail = Some(format!(
            "the record could not be persisted: {}",
            json::cut(message, 512).0
        ));
        Ok(self.decide(d))
    }

    /// The caller sent attempt `attempt_id` at `now_ns`.
    pub fn handle_sent(
        &mut self,
        attempt_id: u64,
        now_ns: u64,
    ) -> Result<SettlementDecision, Error> {
        self.check_time(now_ns)?;
        match (self.phase, &self.attempt) {
            (Phase::Ready, Some(a)) if a.id == attempt_id => {}
            (Phase::InFlight, Some(a)) if a.id == attempt_id => {
                return Err(Error::new(
                    ErrorKind::AlreadySent,
                    format!("attempt {attempt_id} was already marked sent"),
                ));
            }
            _ => return Err(self.not_outstanding(attempt_id)),
        }
        self.last_event_ns = now_ns;
        self.phase = Phase::InFlight;
        if let Some(a) = self.attempt.as_mut() {
            a.sent_ns = Some(now_ns);
        }
        let mut d = SettlementDecision::new(SettleNext::Wait, self.mode, SettleClass::Sent);
        d.attempt = self.attempt.as_ref().map(|a| a.number);
        Ok(self.decide(d))
    }

    /// The HTTP response to attempt `attempt_id`, observed at `now` (after
    /// its complete body). The `timing` of `response` is not used.
    pub fn handle_response<N: AsRef<[u8]>, V: AsRef<[u8]>>(
        &mut self,
        attempt_id: u64,
        response: ResponseRef<'_, N, V>,
        now: Now,
    ) -> Result<SettlementDecision, Error> {
        self.check_outcome(attempt_id, now.mono_ns)?;
        if !(100..=999).contains(&response.status) {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("HTTP status {} is outside 100..=999", response.status),
            ));
        }
        self.last_event_ns = now.mono_ns;
        let class = classify(self.mode, response);
        let status = response.status;
        let mut d = match class {
            Class::Success => {
                let outcome = match self.mode {
                    SettleMode::Commit => SettleOutcome::Committed,
                    SettleMode::Event => SettleOutcome::Applied,
                    SettleMode::Release => SettleOutcome::Released,
                };
                self.finish(outcome, SettleClass::Success, None)
            }
            Class::Transient(class, detail) => {
                let mut d = self.transient(class, None, None, now);
                d.detail = Some(detail);
                d
            }
            Class::Throttled(ra, code) => {
                self.transient(SettleClass::Throttled, Some(ra), code, now)
            }
            Class::Expired(code) => self.expired(code, now),
            Class::Auth(code) => self.finish(SettleOutcome::AuthFailed, SettleClass::Auth, code),
            Class::Rejected(code) => {
                self.finish(SettleOutcome::Rejected, SettleClass::Rejected, code)
            }
            Class::Unclassified(code, detail) => {
                let mut d =
                    self.finish(SettleOutcome::Unclassified, SettleClass::Unclassified, code);
                d.detail = Some(detail);
                d
            }
        };
        d.status = Some(status);
        Ok(self.decide(d))
    }

    /// A transport failure of attempt `attempt_id` (no response: timeout,
    /// connection failure, reset), observed at `now_ns`: transient (ST-3).
    pub fn handle_failure(
        &mut self,
        attempt_id: u64,
        failure: TransportFailure,
        now_ns: u64,
    ) -> Result<SettlementDecision, Error> {
        self.check_outcome(attempt_id, now_ns)?;
        self.last_event_ns = now_ns;
        // A transport failure never sets a floor, so the wall clock is not read.
        let mut d = self.transient(SettleClass::Transport, None, None, Now::new(now_ns, 0));
        d.detail = Some(format!("transport failure: {}", failure.as_str()));
        Ok(self.decide(d))
    }

    // ----- internals -----

    fn decide(&mut self, mut d: SettlementDecision) -> SettlementDecision {
        if let Some(detail) = d.detail.as_mut() {
            cap_detail(detail);
        }
        self.last = d.clone();
        d
    }

    fn check_time(&self, now_ns: u64) -> Result<(), Error> {
        if let Phase::Done(o) = self.phase {
            return Err(Error::new(
                ErrorKind::Stopped,
                format!("the settlement has ended ({o}); an end is final"),
            ));
        }
        if now_ns < self.last_event_ns {
            return Err(Error::new(
                ErrorKind::TimeWentBackwards,
                format!(
                    "time went backwards: {now_ns} ns is before the previous event at {} ns",
                    self.last_event_ns
                ),
            ));
        }
        Ok(())
    }

    fn check_persist(&self, now_ns: u64) -> Result<After, Error> {
        self.check_time(now_ns)?;
        match self.phase {
            Phase::Persist(after) => Ok(after),
            _ => Err(Error::new(
                ErrorKind::NotOutstanding,
                "no persist is outstanding",
            )),
        }
    }

    fn check_outcome(&self, attempt_id: u64, now_ns: u64) -> Result<(), Error> {
        self.check_time(now_ns)?;
        match (self.phase, &self.attempt) {
            (Phase::InFlight, Some(a)) if a.id == attempt_id => Ok(()),
            (Phase::Ready, Some(a)) if a.id == attempt_id => Err(Error::new(
                ErrorKind::NotSent,
                format!("attempt {attempt_id} was never marked sent"),
            )),
            _ => Err(self.not_outstanding(attempt_id)),
        }
    }

    fn not_outstanding(&self, attempt_id: u64) -> Error {
        let msg = match (self.phase, &self.attempt) {
            (Phase::Ready | Phase::InFlight, Some(a)) => format!(
                "attempt {attempt_id} is not the outstanding attempt (that is attempt {})",
                a.id
            ),
            (Phase::Persist(_), _) => {
                format!("attempt {attempt_id} is not outstanding: a persist is")
            }
            _ => format!("attempt {attempt_id} is not outstanding"),
        };
        Error::new(ErrorKind::NotOutstanding, msg)
    }

    /// Serializes the body of the current mode (commit or event) from the record.
    fn refresh_body(&mut self) {
        let body = match (self.mode, &self.record) {
            (SettleMode::Commit, Some(r)) => r.commit_body.as_ref(),
            (SettleMode::Event, Some(r)) => r.event_fallback_body.as_ref(),
            _ => None,
        };
        if let Some(b) = body {
            self.body = to_bytes(b);
        }
    }

    /// Installs the next attempt of the current mode, due at `due_ns`.
    fn install(&mut self, due_ns: u64) {
        let id = self.next_attempt_id;
        self.next_attempt_id = self.next_attempt_id.saturating_add(1);
        self.attempt = Some(SettleAttempt {
            id,
            endpoint: self.mode.endpoint(),
            key: self.key.clone(),
            body: self.body.clone(),
            due_ns,
            number: self.failures.saturating_add(1),
            sent_ns: None,
        });
        self.phase = Phase::Ready;
    }

    fn send_decision(&self, class: SettleClass) -> SettlementDecision {
        let mut d =
            SettlementDecision::new(SettleNext::Send(self.mode.endpoint()), self.mode, class);
        if let Some(a) = &self.attempt {
            d.at_ns = Some(a.due_ns);
            d.attempt = Some(a.number);
        }
        d
    }

    fn persist_decision(&self, class: SettleClass) -> SettlementDecision {
        let mut d = SettlementDecision::new(SettleNext::Persist, self.mode, class);
        if let Some(r) = &self.record {
            d.record = Some(RecordUpdate::Write {
                mode: r.mode,
                not_before_ms: r.not_before_ms,
            });
        }
        d
    }

    fn after_persist(
        &mut self,
        after: After,
        now_ns: u64,
        class: SettleClass,
    ) -> SettlementDecision {
        match after {
            After::Send { planned_ns } => {
                self.install(planned_ns.max(now_ns));
                self.send_decision(class)
            }
            After::Done(outcome) => {
                self.phase = Phase::Done(outcome);
                self.attempt = None;
                let mut d = SettlementDecision::new(SettleNext::Done(outcome), self.mode, class);
                d.record = self.record.as_ref().map(|_| RecordUpdate::Keep);
                d.stop_heartbeat = true;
                d
            }
        }
    }

    /// Ends with `outcome`.
    fn finish(
        &mut self,
        outcome: SettleOutcome,
        class: SettleClass,
        code: Option<String>,
    ) -> SettlementDecision {
        self.phase = Phase::Done(outcome);
        self.attempt = None;
        let mut d = SettlementDecision::new(SettleNext::Done(outcome), self.mode, class);
        d.code = code;
        d.stop_heartbeat = true;
        if self.record.is_some() {
            d.record = Some(match outcome {
                SettleOutcome::Committed | SettleOutcome::Applied | SettleOutcome::Rejected => {
                    RecordUpdate::Remove
                }
                _ => RecordUpdate::Keep,
            });
        }
        d
    }

    /// A failed request that may be retried (ST-3, ST-4, SP-1).
    fn transient(
        &mut self,
        class: SettleClass,
        retry_after: Option<Result<u64, RetryAfterError>>,
        code: Option<String>,
        now: Now,
    ) -> SettlementDecision {
        self.failures = self.failures.saturating_add(1);
        let backoff = self.retry.backoff_ms(self.failures);
        let mut warnings = Vec::new();
        let mut floor_ms = None;
        match retry_after {
            None => {}
            Some(Err(_)) => warnings.push(SettleWarning::RetryAfterUnusable),
            Some(Ok(ra)) => {
                if ra > MAX_RETRY_AFTER_MS {
                    warnings.push(SettleWarning::RetryAfterCapped);
                }
                let ra = ra.min(MAX_RETRY_AFTER_MS);
                if ra > 0 {
                    floor_ms = Some(ra);
                }
            }
        }
        let delay = backoff.max(floor_ms.unwrap_or(0));
        // ST-4: the floor is persisted (journaled modes only) before the wait.
        let not_before = match (&mut self.record, floor_ms, self.mode) {
            (Some(r), Some(ra), SettleMode::Commit | SettleMode::Event) => {
                let nb = now.wall_ms.saturating_add(ra);
                r.not_before_ms = Some(nb);
                r.recorded_at_ms = now.wall_ms;
                Some(nb)
            }
            _ => None,
        };
        let exhausted = self.failures >= self.retry.max_attempts;
        let mut d = if exhausted {
            let detail = format!(
                "{} attempts of {} failed in this run",
                self.failures,
                self.mode.as_str()
            );
            let mut d = if not_before.is_some() {
                self.phase = Phase::Persist(After::Done(SettleOutcome::Exhausted));
                self.attempt = None;
                self.persist_decision(class)
            } else {
                self.finish(SettleOutcome::Exhausted, class, None)
            };
            d.detail = Some(detail);
            d
        } else {
            let due = due_after(now.mono_ns, delay);
            let mut d = if not_before.is_some() {
                self.phase = Phase::Persist(After::Send { planned_ns: due });
                self.attempt = None;
                self.persist_decision(class)
            } else {
                self.install(due);
                self.send_decision(class)
            };
            d.delay_ms = Some(delay);
            d
        };
        d.code = code;
        d.not_before_ms = not_before;
        d.warnings = warnings;
        d
    }

    /// ST-5: a commit answered 410 / `RESERVATION_EXPIRED`.
    fn expired(&mut self, code: Option<String>, now: Now) -> SettlementDecision {
        let has_event = self
            .record
            .as_ref()
            .is_some_and(|r| r.event_fallback_body.is_some());
        if !has_event {
            let mut d = self.finish(SettleOutcome::ExpiredUnrecorded, SettleClass::Expired, code);
            d.detail = Some(
                "the reservation expired and no event body is known: the usage is NOT recorded (the record stays)"
                    .into(),
            );
            return d;
        }
        if let Some(r) = self.record.as_mut() {
            r.mode = RecordMode::Event;
            r.not_before_ms = None;
            r.recorded_at_ms = now.wall_ms;
        }
        self.mode = SettleMode::Event;
        self.refresh_body();
        self.failures = 0;
        self.attempt = None;
        self.phase = Phase::Persist(After::Send {
            planned_ns: now.mono_ns,
        });
        let mut d = self.persist_decision(SettleClass::Expired);
        d.code = code;
        d.stop_heartbeat = true;
        d
    }
}

fn due_after(at_ns: u64, delay_ms: u64) -> u64 {
    at_ns.saturating_add(delay_ms.saturating_mul(1_000_000))
}

fn config_error(msg: impl Into<String>) -> Error {
    Error::new(ErrorKind::InvalidConfig, msg)
}

fn to_bytes(m: &Map<String, Value>) -> Vec<u8> {
    // A map of JSON values always serializes.
    serde_json::to_vec(m).unwrap_or_default()
}

/// A success body's schema check.
type BodyCheck = fn(&[u8]) -> Result<(), String>;

/// Classifies a response in `mode` (ST-2..ST-8, SP-2).
fn classify<N: AsRef<[u8]>, V: AsRef<[u8]>>(mode: SettleMode, r: ResponseRef<'_, N, V>) -> Class {
    let status = r.status;
    if (200..300).contains(&status) {
        let (want, check): (u16, BodyCheck) = match mode {
            SettleMode::Commit => (200, schema::commit_response),
            SettleMode::Event => (201, schema::event_response),
            SettleMode::Release => (200, schema::release_response),
        };
        if status != want {
            return Class::Transient(
                SettleClass::Ambiguous,
                format!("ambiguous: status {status}, the success is {want}"),
            );
        }
        return match check(r.body) {
            Ok(()) => Class::Success,
            Err(why) => Class::Transient(SettleClass::Ambiguous, format!("ambiguous: {why}")),
        };
    }
    if !(400..500).contains(&status) {
        return Class::Transient(
            SettleClass::ServerError,
            format!("status {status}: transient"),
        );
    }
    let code = schema::error_code(r.body);
    let code_is = |c: &str| code.as_deref() == Some(c);
    if status == 429 || code_is("LIMIT_EXCEEDED") {
        return Class::Throttled(r.retry_after_ms(), code);
    }
    if status == 401 || status == 403 {
        return Class::Auth(code);
    }
    if status == 410 || code_is("RESERVATION_EXPIRED") {
        match mode {
            SettleMode::Commit => return Class::Expired(code),
            SettleMode::Release => return Class::Rejected(code),
            SettleMode::Event => {
                return Class::Unclassified(
                    code,
                    format!("status {status}: expired is not understood in event mode (SP-2)"),
                );
            }
        }
    }
    match schema::error_response(r.body) {
        Ok(c) if c != "INTERNAL_ERROR" => Class::Rejected(Some(c)),
        Ok(c) => Class::Unclassified(Some(c), format!("status {status}: INTERNAL_ERROR")),
        Err(why) => Class::Unclassified(code, format!("status {status}: {why}")),
    }
}

/// The members of a configured commit body (ST-10: `actual` required).
fn commit_members(bytes: &[u8]) -> Result<Map<String, Value>, Error> {
    let v = record::strict_value(bytes, "the commit body").map_err(as_config)?;
    let Value::Object(m) = v else {
        return Err(config_error("the commit body must be a JSON object"));
    };
    for k in m.keys() {
        if k == "idempotency_key" {
            return Err(config_error(
                "the commit body must not contain \"idempotency_key\": the core sets it",
            ));
        }
        if !["actual", "metrics", "metadata"].contains(&k.as_str()) {
            return Err(config_error(format!(
                "the commit body has an unknown member {:?} (CommitRequest allows actual, metrics, metadata)",
                json::cut(k, 64).0
            )));
        }
    }
    let actual = m
        .get("actual")
        .ok_or_else(|| config_error("the commit body has no \"actual\""))?;
    check_amount(actual, "actual")?;
    if let Some(metrics) = m.get("metrics") {
        check_metrics(metrics)?;
    }
    if let Some(md) = m.get("metadata") {
        if !md.is_object() {
            return Err(config_error("metadata must be a JSON object"));
        }
    }
    Ok(m)
}

fn check_amount(v: &Value, what: &str) -> Result<(), Error> {
    let o = v
        .as_object()
        .ok_or_else(|| config_error(format!("{what} must be an object with unit and amount")))?;
    for k in o.keys() {
        if k != "unit" && k != "amount" {
            return Err(config_error(format!("{what} has an unknown member {k:?}")));
        }
    }
    let unit = o.get("unit").and_then(Value::as_str).unwrap_or("");
    if !["USD_MICROCENTS", "TOKENS", "CREDITS", "RISK_POINTS"].contains(&unit) {
        return Err(config_error(format!(
            "{what}.unit must be USD_MICROCENTS, TOKENS, CREDITS or RISK_POINTS"
        )));
    }
    match o.get("amount") {
        Some(Value::Number(n)) if n.as_u64().is_some_and(|a| a <= i64::MAX as u64) => Ok(()),
        Some(Value::Number(n)) if n.is_u64() => Err(config_error(format!(
            "{what}.amount {n} is beyond 2^63-1 (int64)"
        ))),
        _ => Err(config_error(format!(
            "{what}.amount must be an integer in 0..=9223372036854775807"
        ))),
    }
}

fn check_metrics(v: &Value) -> Result<(), Error> {
    let o = v
        .as_object()
        .ok_or_else(|| config_error("metrics must be a JSON object"))?;
    for (k, x) in o {
        let ok = match k.as_str() {
            "tokens_input" | "tokens_output" | "latency_ms" => x.is_u64(),
            "model_version" => x.as_str().is_some_and(|s| s.chars().count() <= 128),
            "custom" => x.is_object(),
            _ => {
                return Err(config_error(format!(
                    "metrics has an unknown member {:?} (StandardMetrics; use custom)",
                    json::cut(k, 64).0
                )));
            }
        };
        if !ok {
            return Err(config_error(format!("metrics.{k} has an invalid value")));
        }
    }
    Ok(())
}

/// The members of a configured event body: `subject` and `action`.
fn event_members(bytes: &[u8]) -> Result<Map<String, Value>, Error> {
    let v = record::strict_value(bytes, "the event body").map_err(as_config)?;
    let Value::Object(m) = v else {
        return Err(config_error("the event body must be a JSON object"));
    };
    for k in m.keys() {
        if k != "subject" && k != "action" {
            return Err(config_error(format!(
                "the event body has an unknown member {:?} (only subject and action: the rest comes from the commit)",
                json::cut(k, 64).0
            )));
        }
    }
    match m.get("subject") {
        Some(Value::Object(s)) if !s.is_empty() => {}
        _ => {
            return Err(config_error(
                "the event body needs a non-empty subject object",
            ));
        }
    }
    match m.get("action") {
        Some(Value::Object(a))
            if a.get("kind").is_some_and(Value::is_string)
                && a.get("name").is_some_and(Value::is_string) => {}
        _ => {
            return Err(config_error(
                "the event body needs an action object with string kind and name",
            ));
        }
    }
    Ok(m)
}

/// The expired-commit fallback body, as runcycles Python 0.5.3 builds it.
fn event_body(
    reservation_id: &str,
    commit: &Map<String, Value>,
    mut event: Map<String, Value>,
) -> Map<String, Value> {
    let mut metadata = commit
        .get("metadata")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    metadata.insert(
        "recovered_reservation_id".into(),
        Value::from(reservation_id),
    );
    metadata.insert(
        "recovery_reason".into(),
        Value::from("commit_after_reservation_expired"),
    );
    for k in ["idempotency_key", "actual", "metrics"] {
        if let Some(v) = commit.get(k) {
            event.insert(k.into(), v.clone());
        }
    }
    event.insert("metadata".into(), Value::Object(metadata));
    event
}

fn as_config(e: Error) -> Error {
    Error::new(ErrorKind::InvalidConfig, e.message())
}
