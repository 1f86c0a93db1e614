//! A real HTTP driver for many heartbeats at once (feature `http`).
//!
//! The core decides; this module only performs what it decides, with
//! [ureq](https://docs.rs/ureq/3.5.2) over HTTP/1.1 (https through rustls
//! with the ring provider and the webpki root certificates).
//!
//! * One **timer thread** owns every [`Heartbeat`]. It sends each attempt
//!   when the core says it is due, feeds every outcome back to the core, and
//!   turns every decision into an [`Event`] on the channel returned by
//!   [`Driver::new`] (and a `tracing` record, target `leasebeat::driver`).
//! * A **bounded worker pool** performs the HTTP exchanges, so a slow or
//!   hanging server call for one lease never delays another lease's beat:
//!   workers are started on demand up to [`DriverConfig::max_workers`]; the
//!   core allows at most one attempt in flight per lease. (With more hanging
//!   leases than workers, a queued attempt still reports on time: its
//!   deadline runs from the moment it was marked sent.)
//!
//! ## Timing promises
//!
//! * **Clock.** All times come from [`clock::now_ns`]: `CLOCK_BOOTTIME` on
//!   Linux (keeps counting through suspend), `std::time::Instant` elsewhere.
//!   The timer thread never waits longer than
//!   [`DriverConfig::max_timer_wait_ms`] at a time, so after a suspend it
//!   notices overdue beats within that bound.
//! * **Attempt budget.** Each attempt is bounded end to end (DNS, connect,
//!   send, receive, body) by ureq's global timeout, set to the configured
//!   `request_timeout_ms` *minus a detection slack* ([`detection_slack_ms`]:
//!   it allows for Linux firing socket timeouts up to 1/8 late, plus 30 ms
//!   of wake-up; about 11 % of the budget plus 30 ms), counted from the moment the attempt was marked
//!   sent. A timed-out attempt is therefore observed no later than
//!   `sent + request_timeout_ms`, never after: the retry window the core
//!   computes is never spent by the driver's own lateness.
//! * **Timer slack.** Beats that follow a success are sent early by the
//!   timer thread's measured slack: the largest recent delay between the
//!   instant it meant to act and the instant it did (an oversleep of its
//!   wait, or a beat sent later than meant), kept within 0.2 ms .. 20 ms
//!   (starting at 1 ms) and decaying by 1/8 every 100 ms. Sending early is
//!   the conservative direction (the core accepts it). A retry (after a
//!   failure) is sent at its due time, never early: its delay may be a
//!   server's `Retry-After` and its window small.
//! * **Sent time.** An attempt is marked sent (`handle_sent`) when the timer
//!   thread hands it to the pool, a little before the bytes leave: the round
//!   trip the core measures is a little longer than the real one, again the
//!   conservative direction.
//!
//! ## Requests
//!
//! `POST {base}/v1/reservations` (create) and
//! `POST {base}/v1/reservations/{id}/extend`, each with `X-Cycles-API-Key`,
//! `X-Idempotency-Key` (equal to the body's `idempotency_key`),
//! `Content-Type: application/json` and exactly the body bytes the core
//! produced ([`Attempt::body`](crate::Attempt::body)). Redirects are not
//! followed and no proxy is taken from the environment. Any complete HTTP
//! response (any status) goes to `handle_response`; a timeout is
//! [`TransportFailure::Timeout`], a refused connection or DNS failure
//! [`TransportFailure::Connect`], anything else (reset, early EOF, protocol
//! error) [`TransportFailure::Reset`]. A response whose body is longer than
//! [`MAX_BODY_BYTES`] is still a complete response: it reaches the core
//! with its status and an empty body ("no usable body", P-3), so a large
//! HTML 404 stops `not_found` instead of being retried.
//!
//! Connections are kept alive and reused (one idle connection per worker
//! and host): an attempt on loopback costs one request/response exchange,
//! not a TCP handshake. A server's name is resolved at most once every 10
//! seconds and the addresses are reused meanwhile (ureq's own resolver
//! starts a thread per request when a timeout is set); a changed DNS record
//! is picked up within those 10 seconds, and a failed lookup is not kept.
//!
//! ## Scale and overload (D-15)
//!
//! The timer thread keeps each lease's next beat in a binary heap keyed by
//! due time and each jeopardy check in a second heap, both with lazy
//! deletion (generation counters): a wake-up costs `O(log n)` per entry
//! that fires, independent of the number of leases. Workers perform the
//! exchanges; a worker per *in-flight attempt* up to
//! [`DriverConfig::max_workers`], never a thread per lease.
//!
//! When the driver falls behind, it sheds load in the safe direction: due
//! beats of live leases go first (earliest due first), and creates are sent
//! only while fewer than `max_workers` attempts are outstanding. Whatever
//! the load, a lease reports [`Event::Jeopardy`] the moment it reaches its
//! proven lead without a newer success (`proven_until_reached`; on the
//! fallback path, which proves nothing, right after its first success) and the
//! moment its scheduled beat is later than due by more than the safety
//! margin (`late_beat`): no lease lapses on the server without a stop or a
//! jeopardy event first. The same-key retry of a create that failed or
//! timed out is a beat of a lease the server may already hold: it goes
//! with the due beats, ahead of queued creates (the contract's one
//! *immediate* retry), and a lease whose create is still unresolved when
//! its first attempt's send instant plus the TTL has passed reports
//! `create_unresolved`.
//!
//! ## Stopping
//!
//! [`Driver::cancel`] ends one lease (a `cancelled` decision and a
//! [`Event::Stopped`]); an attempt still in flight for it finishes in the
//! pool and its outcome is ignored. A lease that stopped without a
//! settlement stays known (about 100 B) so that it can still be committed or
//! released; [`Driver::forget`] drops it (a driver that runs for long and
//! lets leases stop unsettled calls it). [`Driver::shutdown`] (or dropping the
//! driver) cancels every lease and joins every thread; it waits at most for
//! the attempts in flight, each bounded by its budget.
//!
//! ## Settlement (commit, release, the journal)
//!
//! A lease ends through a core [`crate::Settlement`] (ST-1..ST-11) that the
//! timer thread drives like a heartbeat: [`Driver::commit`] (or
//! [`Driver::release`] for work that used nothing) builds it, the journal
//! writes its record on a worker **before** the first commit leaves (J-1,
//! [`crate::journal::Journal::persist`]), attempts go out at the due times its
//! decisions set (one key; backoff, `Retry-After` floors persisted; after a
//! 410 `RESERVATION_EXPIRED` the event fallback with the create's subject
//! and action, or [`LeaseOptions::event`] for an adopted reservation), and
//! [`crate::journal::Journal::finish`] removes or keeps the record at the end
//! (J-5). The lease's heartbeat keeps running until a decision says
//! `stop_heartbeat` (ST-11); then it is cancelled. Every settlement decision
//! is an [`Event::Settlement`], the end an [`Event::Settled`] with a
//! [`SettleResult`] (also returned by [`Settling::wait`]).
//!
//! The journal (feature `journal`) is on by default
//! ([`JournalOptions`]: `$CYCLES_JOURNAL_DIR` or
//! `~/.runcycles/commit-journal`, partitioned by tenant or API key); the
//! driver replays its partition in the background when it starts
//! ([`crate::journal::Journal::replay`]: records claimed by another process
//! are left alone, J-6) and reports what it found as [`Event::Journal`].
//! [`Driver::flush`] waits a bounded time for settlements in flight (J-7);
//! [`Driver::shutdown`] flushes for [`DriverConfig::shutdown_flush_ms`]
//! first. Without the `journal` feature the driver still settles (retries,
//! fallback) but nothing is durable.
//!
//! Heartbeat failures (HP-1): every failed heartbeat attempt and every stop
//! that is not a cancel is an [`Event::HeartbeatFailure`] (reservation id,
//! outcome, disposition). [`FailurePolicy`] per lease: `Warn` (default),
//! `Cancel` (a [`CancellationToken`] is cancelled or a callback called when
//! the heartbeat stops), `FailOnFinalize` (the settlement runs; its result
//! then carries the heartbeat's stop and `failed_after_heartbeat`).
//!
//! ```no_run
//! use leasebeat::Config;
//! use leasebeat::driver::{ApiKey, Driver, DriverConfig, Event, Usage};
//! let (driver, events) =
//!     Driver::new(DriverConfig::new("http://127.0.0.1:7878", ApiKey::new("k"))).unwrap();
//! let mut config = Config::new(60_000, Some(5_000));
//! config.create_request = serde_json::from_str(
//!     r#"{"subject":{"tenant":"t"},"action":{"kind":"k","name":"n"},
//!         "estimate":{"unit":"TOKENS","amount":1}}"#).unwrap();
//! let lease = driver.start(config).unwrap();
//! for event in events.iter() {
//!     match event {
//!         Event::Decision { decision, reservation_id, .. } => {
//!             println!("{}", decision.to_json().len());
//!             if reservation_id.is_some() { break } // the work runs now
//!         }
//!         Event::Stopped { reason, .. } => { println!("stopped: {reason}"); break }
//!         Event::Jeopardy { reason, reservation_id, .. } => {
//!             eprintln!("lease_in_jeopardy {reason:?} {reservation_id:?}")
//!         }
//!         Event::HeartbeatFailure { failure, .. } => eprintln!("{failure}"),
//!         Event::Error { error, .. } => eprintln!("{error}"),
//!         _ => {}
//!     }
//! }
//! let usage = Usage::new(serde_json::json!({"unit": "TOKENS", "amount": 1}));
//! let result = driver.commit(lease, usage).unwrap().wait().unwrap();
//! println!("{} (record kept: {})", result.outcome, result.record_kept);
//! driver.shutdown();
//! ```

pub mod clock;
mod http;
mod jn;
mod settle;
mod timer;

use std::fmt;
use std::sync::mpsc::{self, Receiver, Sender};
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::{Map, Value};

use crate::{
    AttemptKind, Config, Decision, Error, ErrorKind, Heartbeat, KeyUse, Response, RetryPolicy,
    SettlementDecision, StopReason, TransportFailure,
};

pub use http::MAX_BODY_BYTES;
pub use settle::{
    CancellationToken, Canceller, Disposition, EventBody, FailurePolicy, FlushReport,
    HeartbeatFailure, JournalOptions, JournalReport, LeaseOptions, SettleAttemptReport,
    SettleResult, Settling, Usage,
};

/// A Cycles API key. Its `Debug` form is redacted and it has no `Display`:
/// the key is never printed by the driver.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    /// Wraps a key. It is checked by [`Driver::new`] (see
    /// [`ApiKey::check`]), so that an unusable key is refused up front
    /// rather than failing every request.
    pub fn new(key: impl Into<String>) -> ApiKey {
        ApiKey(key.into())
    }

    /// The key itself, for the request header.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether the key can be sent as an HTTP header value: not empty,
    /// and only visible ASCII, space and tab (RFC 9110 `field-value`
    /// without obsolete text), no leading or trailing whitespace. A key
    /// with CR, LF, NUL or any other control character, or non-ASCII
    /// bytes, is refused with [`DriverError::BadApiKey`], whose message
    /// never contains the key.
    pub fn check(&self) -> Result<(), DriverError> {
        let b = self.0.as_bytes();
        let why = if b.is_empty() {
            Some("the API key is empty")
        } else if b.iter().any(|c| *c == b'\r' || *c == b'\n') {
            Some("the API key contains CR or LF: it cannot be an HTTP header value")
        } else if b.iter().any(|c| *c != b'\t' && (*c < 0x20 || *c == 0x7f)) {
            Some("the API key contains a control character: it cannot be an HTTP header value")
        } else if !b.is_ascii() {
            Some("the API key contains non-ASCII bytes: it cannot be an HTTP header value")
        } else if b[0] == b' ' || b[0] == b'\t' || b[b.len() - 1] == b' ' || b[b.len() - 1] == b'\t'
        {
            Some("the API key has leading or trailing whitespace")
        } else {
            None
        };
        match why {
            Some(w) => Err(DriverError::BadApiKey(w)),
            None => Ok(()),
        }
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(<redacted>)")
    }
}

/// How a [`Driver`] reaches the server.
#[derive(Clone, Debug)]
pub struct DriverConfig {
    /// Base URL, e.g. `https://cycles.example.com` (a trailing `/` is
    /// ignored); requests go to `{base_url}/v1/reservations...`.
    pub base_url: String,
    /// Sent as `X-Cycles-API-Key`.
    pub api_key: ApiKey,
    /// Largest number of worker threads performing HTTP exchanges (at
    /// least 1). Default 16.
    pub max_workers: usize,
    /// Longest single wait of the timer thread, in ms (bounds how late a
    /// beat is noticed after a system suspend). Default 100.
    pub max_timer_wait_ms: u64,
    /// Budget of one settlement attempt (commit, event or release),
    /// enforced end to end like a beat's. Default 5000 ms.
    pub finalize_timeout_ms: u64,
    /// The settlements' retry policy (ST-3, SP-1). Default 5 attempts per
    /// mode, 500 ms doubling to 30 s.
    pub settle_retry: RetryPolicy,
    /// How long [`Driver::shutdown`] waits for settlements in flight (J-7;
    /// what is unresolved then stays in the journal). Default 5000 ms.
    pub shutdown_flush_ms: u64,
    /// The journal (see [`JournalOptions`]): on by default with the
    /// `journal` feature.
    pub journal: JournalOptions,
}

impl DriverConfig {
    /// A configuration with the defaults.
    pub fn new(base_url: impl Into<String>, api_key: ApiKey) -> DriverConfig {
        DriverConfig {
            base_url: base_url.into(),
            api_key,
            max_workers: 16,
            max_timer_wait_ms: 100,
            finalize_timeout_ms: 5_000,
            settle_retry: RetryPolicy::default(),
            shutdown_flush_ms: 5_000,
            journal: JournalOptions::default(),
        }
    }
}

/// Time the driver allows, within the budget, for a timeout to be
/// *noticed*: thread wake-up after the socket timeout fires (ms).
pub const WAKEUP_ALLOWANCE_MS: u64 = 30;

/// The detection slack for a configured attempt budget, in ms: the driver
/// hands ureq `budget - slack` so that a timeout is observed no later than
/// `sent + budget`.
///
/// The enforced part is `(budget - 30) x 8/9` (at least 1 ms). Why 8/9:
/// ureq waits for a response with `SO_RCVTIMEO`, which Linux implements on
/// its timer wheel; the wheel fires a timer up to 1/8 of its length late
/// (measured here: a 2375 ms read timeout fired after 2560 ms). An enforced
/// `T` thus fires by `T x 9/8`, and 30 ms ([`WAKEUP_ALLOWANCE_MS`]) covers
/// the worker's wake-up on a loaded machine. Examples: budget 400 ms ->
/// slack 72 ms; 2500 -> 308; 10000 -> 1144.
pub fn detection_slack_ms(budget_ms: u64) -> u64 {
    let enforced = (budget_ms.saturating_sub(WAKEUP_ALLOWANCE_MS) / 9 * 8).max(1);
    budget_ms.saturating_sub(enforced)
}

/// The driver's name for one lease (the reservation id is unknown until the
/// create succeeds).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LeaseHandle(pub u64);

impl fmt::Display for LeaseHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "lease-{}", self.0)
    }
}

/// What produced a decision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A complete HTTP response with this status.
    Status(u16),
    /// No response: a transport failure.
    Failure(TransportFailure),
    /// The caller cancelled (or the driver shut down).
    Cancelled,
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Status(s) => write!(f, "{s}"),
            Outcome::Failure(t) => f.write_str(t.as_str()),
            Outcome::Cancelled => f.write_str("cancelled"),
        }
    }
}

/// The attempt whose outcome a decision answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttemptReport {
    /// The core's attempt id.
    pub id: u64,
    /// Create or extend.
    pub kind: AttemptKind,
    /// The idempotency key sent.
    pub key: String,
    /// New or same key.
    pub key_use: KeyUse,
    /// The key's index on this lease.
    pub key_index: u32,
    /// When it was marked sent (driver clock, ns).
    pub sent_ns: u64,
    /// When it was due (driver clock, ns): `sent_ns - due_ns` is how late
    /// it went out (negative: early by the timer slack). `None` when it
    /// had no finite due time.
    pub due_ns: Option<u64>,
}

/// Why a lease is in jeopardy (D-15). Stable strings.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum JeopardyReason {
    /// The driver reached the lease's `proven_until` (the receipt of its
    /// last primary success plus that success's `lead_floor`) without a
    /// newer success. Also reported at once (once) when, after the lease's
    /// first success, a decision carries no `proven_until` (the fallback
    /// path, an older server without `remaining_ttl_ms`, proves nothing):
    /// as if its `proven_until` were 0.
    ProvenUntilReached,
    /// A scheduled beat was still not sent at its due time plus the safety
    /// margin (the driver is overloaded or was stalled). Only a beat whose
    /// due time a decision set counts: the first extension of an adopted
    /// reservation ([`crate::Heartbeat::for_reservation`]) is due at once
    /// and is never late.
    LateBeat,
    /// The lease's create is still unresolved (no success and no stop) a
    /// safety margin (1 s) before its first attempt's send instant plus the
    /// requested TTL: the server may hold a reservation the client has not
    /// seen, expiring unseen. Reported once per lease, with no reservation
    /// id (none is known).
    CreateUnresolved,
}

impl JeopardyReason {
    /// `"proven_until_reached"`, `"late_beat"` or `"create_unresolved"`.
    pub fn as_str(self) -> &'static str {
        match self {
            JeopardyReason::ProvenUntilReached => "proven_until_reached",
            JeopardyReason::LateBeat => "late_beat",
            JeopardyReason::CreateUnresolved => "create_unresolved",
        }
    }
}

impl fmt::Display for JeopardyReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the driver tells its caller. Every decision and every stop arrives
/// here; nothing is only logged.
#[derive(Clone, Debug)]
pub enum Event {
    /// The core decided (after an outcome, or a cancel).
    Decision {
        /// Which lease.
        lease: LeaseHandle,
        /// The reservation id, once known.
        reservation_id: Option<String>,
        /// The attempt answered (`None` for a cancel).
        attempt: Option<AttemptReport>,
        /// What happened to it.
        outcome: Outcome,
        /// When the outcome was observed (driver clock, ns).
        observed_ns: u64,
        /// The decision itself.
        decision: Box<Decision>,
    },
    /// The lease's heartbeat stopped for good (follows the stopping
    /// decision; the last event of the lease).
    Stopped {
        /// Which lease.
        lease: LeaseHandle,
        /// The reservation id, once known.
        reservation_id: Option<String>,
        /// Why.
        reason: StopReason,
        /// When (driver clock, ns).
        at_ns: u64,
    },
    /// `lease_in_jeopardy` (D-15): the lease may lapse on the server before
    /// the driver learns anything more. Reported the moment it happens
    /// (the checks are timers of their own, not a side effect of sending),
    /// at most once per proven lead and once per scheduled beat. The lease
    /// keeps heartbeating: the true lead may be longer than the proven one.
    Jeopardy {
        /// Which lease.
        lease: LeaseHandle,
        /// The reservation id, once known.
        reservation_id: Option<String>,
        /// Why.
        reason: JeopardyReason,
        /// When it was detected (driver clock, ns).
        at_ns: u64,
        /// Due time of the lease's scheduled beat, if one is scheduled.
        due_ns: Option<u64>,
        /// The lease's `proven_until` (driver clock, ns; `u64::MAX` is
        /// +infinity), if any: `None` on the fallback path (nothing proven).
        proven_until_ns: Option<u64>,
    },
    /// The core refused an input the driver gave it (a driver bug, or a
    /// clock anomaly). The lease is then cancelled: a `Decision` and a
    /// `Stopped` event follow.
    Error {
        /// Which lease.
        lease: LeaseHandle,
        /// The reservation id, once known.
        reservation_id: Option<String>,
        /// The core's error.
        error: Error,
    },
    /// HP-1: a heartbeat attempt failed, or the heartbeat stopped for a
    /// reason other than a cancel. Reported under every policy, after the
    /// decision it comes from (and before its `Stopped`).
    HeartbeatFailure {
        /// Which lease.
        lease: LeaseHandle,
        /// The failure: reservation id, outcome, disposition.
        failure: HeartbeatFailure,
    },
    /// A settlement decision (every one, the first included: the one made
    /// when the settlement was built).
    Settlement {
        /// The lease (a fresh handle for a replayed record).
        lease: LeaseHandle,
        /// The reservation.
        reservation_id: String,
        /// The attempt this decision answers or marks sent, if any.
        attempt: Option<SettleAttemptReport>,
        /// What the attempt got, for a decision on an outcome.
        outcome: Option<Outcome>,
        /// The decision.
        decision: Box<SettlementDecision>,
    },
    /// A settlement ended (its last event).
    Settled {
        /// The lease.
        lease: LeaseHandle,
        /// The outcome, the record's fate, the decisions.
        result: Box<SettleResult>,
    },
    /// A journal replay's findings (quarantined, busy, replayed records).
    /// `lease` is `LeaseHandle(0)`, which never names a lease.
    Journal {
        /// `LeaseHandle(0)`.
        lease: LeaseHandle,
        /// What the replay found.
        report: Box<JournalReport>,
    },
}

impl Event {
    /// The lease the event is about (`LeaseHandle(0)` for a journal report).
    pub fn lease(&self) -> LeaseHandle {
        match self {
            Event::Decision { lease, .. }
            | Event::Stopped { lease, .. }
            | Event::Jeopardy { lease, .. }
            | Event::Error { lease, .. }
            | Event::HeartbeatFailure { lease, .. }
            | Event::Settlement { lease, .. }
            | Event::Settled { lease, .. }
            | Event::Journal { lease, .. } => *lease,
        }
    }
}

/// Why the driver refused a call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DriverError {
    /// The core refused (e.g. an invalid configuration).
    Core(Error),
    /// The driver has shut down.
    ShutDown,
    /// The base URL is not `http://` or `https://`.
    BadUrl(String),
    /// The API key cannot be sent as a header value (why; never the key).
    BadApiKey(&'static str),
    /// The lease has no reservation to settle (its create never succeeded,
    /// or has not yet).
    NoReservation(LeaseHandle),
    /// A settlement of this lease is already under way (or done).
    AlreadySettling(LeaseHandle),
    /// The driver knows no such lease (never started, or already settled).
    UnknownLease(LeaseHandle),
    /// The journal cannot be used (`kind` is a `JournalErrorKind` name:
    /// `not_writable`, `symlink`, `no_space`, ..., or `unavailable` when
    /// the crate was built without the `journal` feature).
    Journal {
        /// The journal error's kind.
        kind: &'static str,
        /// What failed (never the API key).
        message: String,
    },
}

impl fmt::Display for DriverError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DriverError::Core(e) => write!(f, "{e}"),
            DriverError::ShutDown => f.write_str("the driver has shut down"),
            DriverError::BadUrl(u) => {
                write!(f, "base URL must start with http:// or https://: {u:?}")
            }
            DriverError::BadApiKey(why) => f.write_str(why),
            DriverError::NoReservation(l) => {
                write!(
                    f,
                    "{l} has no reservation to settle (its create did not succeed)"
                )
            }
            DriverError::AlreadySettling(l) => write!(f, "{l} is already being settled"),
            DriverError::UnknownLease(l) => write!(f, "no such lease: {l}"),
            DriverError::Journal { kind, message } => write!(f, "journal {kind}: {message}"),
        }
    }
}

impl std::error::Error for DriverError {}

impl From<Error> for DriverError {
    fn from(e: Error) -> DriverError {
        DriverError::Core(e)
    }
}

fn check_base(url: &str) -> Result<&str, DriverError> {
    let base = url.trim_end_matches('/');
    if base.starts_with("http://") || base.starts_with("https://") {
        Ok(base)
    } else {
        Err(DriverError::BadUrl(url.to_owned()))
    }
}

/// The driver needs a finite, non-zero request budget: it enforces it.
fn check_budget(request_timeout_ms: Option<u64>) -> Result<(), DriverError> {
    match request_timeout_ms {
        Some(t) if t != u64::MAX && t > 0 => Ok(()),
        _ => Err(DriverError::Core(Error::new(
            ErrorKind::InvalidConfig,
            "the driver needs a finite request_timeout_ms: it enforces it",
        ))),
    }
}

/// A lease's server (`scheme://host:port`), shared by the leases on it. An
/// `Arc<String>` rather than an `Arc<str>`: a thin pointer, 8 bytes less in
/// every driver slot.
pub(crate) type BaseUrl = std::sync::Arc<String>;

/// What a start command carries.
pub(crate) enum Start {
    /// A heartbeat built by the caller, waiting to send.
    Heartbeat(Box<Heartbeat>),
    /// A checked configuration: the timer thread builds its heartbeat (UUIDv4
    /// keys) when the create goes out.
    Config(PendingCreate),
}

/// A checked configuration waiting for its create to go out, compact: the
/// create members as JSON text (a `serde_json::Map` of three small objects
/// takes about 2.6 KB of tree nodes; its text about 100 bytes).
pub(crate) struct PendingCreate {
    ttl_ms: u64,
    request_timeout_ms: Option<u64>,
    members: Members,
}

/// `config.create_request` while its create waits.
enum Members {
    /// No members.
    None,
    /// The members as a JSON object's text, parsed back exactly: integers
    /// only (serde_json's default float parsing is best-effort, so a float
    /// could come back one unit in the last place off).
    Text(Box<[u8]>),
    /// Members with a float: kept as they are.
    Map(Map<String, Value>),
}

/// Whether `v` holds a number that is not an integer.
fn has_float(v: &Value) -> bool {
    match v {
        Value::Number(n) => n.is_f64(),
        Value::Array(a) => a.iter().any(has_float),
        Value::Object(o) => o.values().any(has_float),
        _ => false,
    }
}

impl PendingCreate {
    /// Serializes the members; the map is dropped here, on the caller's
    /// thread, so its memory is reused by the caller's next allocation.
    fn new(config: Config) -> PendingCreate {
        let map = config.create_request;
        let members = if map.is_empty() {
            Members::None
        } else if map.values().any(has_float) {
            Members::Map(map)
        } else {
            Members::Text(
                serde_json::to_vec(&map)
                    .expect("a JSON map always serializes")
                    .into_boxed_slice(),
            )
        };
        PendingCreate {
            ttl_ms: config.ttl_ms,
            request_timeout_ms: config.request_timeout_ms,
            members,
        }
    }

    /// The same, its text copied into memory of the calling thread (the
    /// timer's): the caller's copy is freed at once instead of after the
    /// create, so a ramp-up of many leases leaves no freed pages behind in
    /// the caller's allocator arena.
    pub(crate) fn relocated(self) -> PendingCreate {
        let members = match self.members {
            Members::Text(t) => Members::Text(Box::from(&*t)),
            other => other,
        };
        PendingCreate { members, ..self }
    }

    /// The configuration again, with the same members.
    pub(crate) fn into_config(self) -> Result<Config, Error> {
        let mut config = Config::new(self.ttl_ms, self.request_timeout_ms);
        config.create_request = match self.members {
            Members::None => Map::new(),
            Members::Map(map) => map,
            Members::Text(text) => serde_json::from_slice(&text).map_err(|e| {
                Error::new(
                    ErrorKind::InvalidConfig,
                    format!("create_request did not survive its JSON round trip: {e}"),
                )
            })?,
        };
        Ok(config)
    }
}

pub(crate) enum Command {
    Start(LeaseHandle, BaseUrl, Start, Option<Box<timer::LeaseExtra>>),
    Cancel(LeaseHandle),
    Forget(LeaseHandle),
    Done(timer::Completion),
    HoldSends(bool),
    Settle(Box<timer::SettleRequest>),
    Persisted(
        LeaseHandle,
        Box<crate::Settlement>,
        Result<SettlementDecision, Error>,
    ),
    Finished(LeaseHandle, Box<crate::Settlement>, Option<String>),
    Replayed(Result<jn::ReplayOut, String>),
    Replay,
    Shutdown,
}

/// Runs heartbeats over HTTP: see the module documentation.
pub struct Driver {
    commands: Sender<Command>,
    timer: Option<JoinHandle<()>>,
    next_lease: std::sync::Arc<std::sync::atomic::AtomicU64>,
    base: String,
    api_key: ApiKey,
    agent: ureq::Agent,
    finalize_timeout: Duration,
    shutdown_flush: Duration,
    pending: settle::PendingShared,
    journal_dir: Option<std::path::PathBuf>,
    /// Base URLs shared by every lease on that server (one allocation each).
    bases: std::sync::Mutex<Bases>,
}

#[derive(Default)]
struct Bases(Vec<BaseUrl>);

impl Bases {
    fn intern(&mut self, base: &str) -> BaseUrl {
        if let Some(b) = self.0.iter().find(|b| ***b == *base) {
            return b.clone();
        }
        let b = BaseUrl::new(base.to_owned());
        if self.0.len() < 64 {
            self.0.push(b.clone());
        }
        b
    }
}

impl fmt::Debug for Driver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Driver")
            .field("base", &self.base)
            .field("api_key", &self.api_key)
            .finish_non_exhaustive()
    }
}

#[cfg(feature = "journal")]
fn open_journal(config: &DriverConfig, base: &str) -> Result<Option<jn::Jn>, DriverError> {
    if !config.journal.enabled {
        return Ok(None);
    }
    jn::Jn::open(&config.journal, base, config.api_key.expose())
        .map(Some)
        .map_err(|e| DriverError::Journal {
            kind: e.kind().as_str(),
            message: e.to_string(),
        })
}

#[cfg(not(feature = "journal"))]
fn open_journal(config: &DriverConfig, _base: &str) -> Result<Option<jn::Jn>, DriverError> {
    if config.journal.enabled {
        return Err(DriverError::Journal {
            kind: "unavailable",
            message: "leasebeat was built without the `journal` feature".into(),
        });
    }
    Ok(None)
}

impl Driver {
    /// Starts the timer thread; returns the driver and the event channel.
    ///
    /// With the journal enabled ([`DriverConfig::journal`]) it opens the
    /// partition first (errors: [`DriverError::Journal`]) and, unless told
    /// not to, replays its records in the background: each is settled like
    /// a new settlement (events [`Event::Settlement`] / [`Event::Settled`]
    /// under a fresh lease handle) and the replay's findings arrive as
    /// [`Event::Journal`].
    pub fn new(config: DriverConfig) -> Result<(Driver, Receiver<Event>), DriverError> {
        let base = check_base(&config.base_url)?.to_owned();
        config.api_key.check()?;
        config.settle_retry.validate()?;
        let journal = open_journal(&config, &base)?;
        let journal_dir = journal.as_ref().map(jn::Jn::dir);
        let replay = journal.is_some() && config.journal.replay_on_start;
        let (commands, command_rx) = mpsc::channel();
        let (events_tx, events) = mpsc::channel();
        let agent = http::agent(config.max_workers.max(1));
        let pending: settle::PendingShared = Default::default();
        settle::pending_lock(&pending).replaying = u32::from(replay);
        let next_lease = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(1));
        let mut state = timer::Timer::new(
            config.api_key.clone(),
            agent.clone(),
            config.max_workers.max(1),
            config.max_timer_wait_ms.max(1),
            commands.clone(),
            command_rx,
            events_tx,
        );
        state.configure_settlements(timer::SettleSetup {
            journal: journal.map(std::sync::Arc::new),
            retry: config.settle_retry,
            budget_ms: config.finalize_timeout_ms.max(1),
            base: BaseUrl::new(base.clone()),
            pending: pending.clone(),
            next_lease: next_lease.clone(),
            replay,
        });
        let timer = std::thread::Builder::new()
            .name("leasebeat-timer".into())
            .spawn(move || state.run())
            .map_err(|e| DriverError::Core(Error::new(ErrorKind::InvalidConfig, e.to_string())))?;
        Ok((
            Driver {
                commands,
                timer: Some(timer),
                next_lease,
                base,
                api_key: config.api_key,
                agent,
                finalize_timeout: Duration::from_millis(config.finalize_timeout_ms.max(1)),
                shutdown_flush: Duration::from_millis(config.shutdown_flush_ms),
                pending,
                journal_dir,
                bases: std::sync::Mutex::new(Bases::default()),
            },
            events,
        ))
    }

    /// The journal's partition directory, when the journal is on.
    pub fn journal_dir(&self) -> Option<&std::path::Path> {
        self.journal_dir.as_deref()
    }

    /// Starts a heartbeat (create first) with random UUIDv4 keys, against
    /// the configured base URL.
    ///
    /// `config` is checked here (its errors are returned); the heartbeat
    /// itself is built on the driver's timer thread when its create goes out
    /// (creates wait behind beats of live leases). So a caller that starts
    /// 100,000 leases at once holds 100,000 configurations until then, not
    /// 100,000 heartbeats with their create bodies, and no per-lease memory
    /// is left in the calling thread's allocator arena.
    ///
    /// `config.request_timeout_ms` must be finite: the driver enforces it.
    /// The expired-commit fallback of its settlement takes `subject` and
    /// `action` from `config.create_request`.
    pub fn start(&self, config: Config) -> Result<LeaseHandle, DriverError> {
        self.start_at(&self.base, config)
    }

    /// [`Driver::start`] with options: an event body (else the create's
    /// subject and action) and the heartbeat failure policy (HP-1).
    pub fn start_with(
        &self,
        config: Config,
        options: LeaseOptions,
    ) -> Result<LeaseHandle, DriverError> {
        let base = check_base(&self.base)?.to_owned();
        config.validate()?;
        check_budget(config.request_timeout_ms)?;
        self.send_start(
            &base,
            Start::Config(PendingCreate::new(config)),
            timer::LeaseExtra::of(options),
        )
    }

    /// Like [`Driver::start`], against another server.
    pub fn start_at(&self, base_url: &str, config: Config) -> Result<LeaseHandle, DriverError> {
        let base = check_base(base_url)?;
        config.validate()?;
        check_budget(config.request_timeout_ms)?;
        self.send_start(base, Start::Config(PendingCreate::new(config)), None)
    }

    /// Runs an existing heartbeat, which must be waiting to send (e.g. a
    /// fresh [`Heartbeat::with_key_source`]), against the configured base URL.
    pub fn start_heartbeat(&self, hb: Heartbeat) -> Result<LeaseHandle, DriverError> {
        self.start_heartbeat_at(&self.base, hb)
    }

    /// [`Driver::start_heartbeat`] with options: for an adopted reservation
    /// ([`Heartbeat::for_reservation`]) `options.event` gives the subject and
    /// action the expired-commit fallback needs (without it a 410 ends the
    /// settlement `expired_unrecorded`, the record kept); the failure policy
    /// (HP-1).
    pub fn start_heartbeat_with(
        &self,
        hb: Heartbeat,
        options: LeaseOptions,
    ) -> Result<LeaseHandle, DriverError> {
        let base = self.base.clone();
        self.start_heartbeat_inner(&base, hb, timer::LeaseExtra::of(options))
    }

    /// Like [`Driver::start_heartbeat`], against another server: one driver
    /// can run leases on many servers (same API key).
    pub fn start_heartbeat_at(
        &self,
        base_url: &str,
        hb: Heartbeat,
    ) -> Result<LeaseHandle, DriverError> {
        self.start_heartbeat_inner(base_url, hb, None)
    }

    fn start_heartbeat_inner(
        &self,
        base_url: &str,
        hb: Heartbeat,
        extra: Option<Box<timer::LeaseExtra>>,
    ) -> Result<LeaseHandle, DriverError> {
        let base = check_base(base_url)?;
        check_budget(hb.config().request_timeout_ms)?;
        match hb.poll_action() {
            crate::Action::Send(_) => {}
            crate::Action::AwaitOutcome(a) => {
                return Err(DriverError::Core(Error::new(
                    ErrorKind::AlreadySent,
                    format!("attempt {} is already in flight elsewhere", a.id),
                )));
            }
            crate::Action::Stop(r) => {
                return Err(DriverError::Core(Error::new(
                    ErrorKind::Stopped,
                    format!("the heartbeat has stopped ({r})"),
                )));
            }
        }
        self.send_start(base, Start::Heartbeat(Box::new(hb)), extra)
    }

    fn send_start(
        &self,
        base: &str,
        start: Start,
        extra: Option<Box<timer::LeaseExtra>>,
    ) -> Result<LeaseHandle, DriverError> {
        let lease = self.new_handle();
        let base: BaseUrl = match self.bases.lock() {
            Ok(mut bases) => bases.intern(base),
            Err(_) => BaseUrl::new(base.to_owned()),
        };
        self.commands
            .send(Command::Start(lease, base, start, extra))
            .map_err(|_| DriverError::ShutDown)?;
        Ok(lease)
    }

    fn new_handle(&self) -> LeaseHandle {
        LeaseHandle(
            self.next_lease
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        )
    }

    /// Cancels one lease: its `cancelled` decision and `Stopped` event follow
    /// on the channel (nothing, if it had already stopped). Does not settle
    /// the reservation: see [`Driver::commit`] and [`Driver::release`].
    pub fn cancel(&self, lease: LeaseHandle) -> Result<(), DriverError> {
        self.commands
            .send(Command::Cancel(lease))
            .map_err(|_| DriverError::ShutDown)
    }

    /// Drops what the driver keeps of a lease after its heartbeat stopped
    /// without a settlement: its reservation id, server and event body (about
    /// 100 B), kept so that a stopped lease can still be committed or
    /// released. A driver that runs for long and lets leases stop unsettled
    /// (cancelled and abandoned, or settled by another component) calls this
    /// so that it does not grow. A lease still running is cancelled first
    /// (its `cancelled` decision and `Stopped` event follow); a lease whose
    /// settlement is in progress is left alone (the driver drops a lease
    /// once its settlement ended); an unknown or already forgotten lease is
    /// accepted and nothing happens. Afterwards [`Driver::commit`] and
    /// [`Driver::release`] of it fail with [`DriverError::UnknownLease`]:
    /// forget only a lease whose reservation is settled elsewhere or
    /// abandoned on purpose (it then holds its budget until it expires).
    pub fn forget(&self, lease: LeaseHandle) -> Result<(), DriverError> {
        self.commands
            .send(Command::Forget(lease))
            .map_err(|_| DriverError::ShutDown)
    }

    /// Commits the lease's usage through a settlement (ST-1..ST-11): the
    /// record is journaled before the first commit leaves (J-1), the commit
    /// is retried with its one key as the settlement decides (delays,
    /// `Retry-After`, the event fallback after a 410 `RESERVATION_EXPIRED`
    /// with the create's or the given subject and action), and the record is
    /// removed or kept at the end (J-5). The lease's heartbeat keeps running
    /// until a decision says `stop_heartbeat` (ST-11), then stops
    /// (`cancelled`). Works after the heartbeat stopped too (after
    /// `expired` the server may still be within its grace: the answer is
    /// reported). [`Usage::unknown`]: nothing is sent, outcome `no_actual`.
    ///
    /// Returns at once; the decisions arrive as [`Event::Settlement`], the
    /// end as [`Event::Settled`] and through [`Settling::wait`].
    ///
    /// Errors: [`DriverError::Core`] (`invalid_config`: a bad body),
    /// [`DriverError::NoReservation`], [`DriverError::AlreadySettling`],
    /// [`DriverError::UnknownLease`], [`DriverError::ShutDown`].
    pub fn commit(&self, lease: LeaseHandle, usage: Usage) -> Result<Settling, DriverError> {
        self.settle(
            timer::SettleTarget::Lease(lease),
            timer::SettleKind::Commit { usage, event: None },
        )
    }

    /// Releases the lease's reservation through a settlement (work that
    /// used nothing): one key, retried, not journaled; stops the heartbeat
    /// at its end.
    pub fn release(
        &self,
        lease: LeaseHandle,
        reason: Option<&str>,
    ) -> Result<Settling, DriverError> {
        self.settle(
            timer::SettleTarget::Lease(lease),
            timer::SettleKind::Release {
                reason: reason.map(str::to_owned),
            },
        )
    }

    /// Commits a reservation the driver does not heartbeat (held elsewhere),
    /// on the configured server; `event` enables the expired fallback.
    pub fn commit_reservation(
        &self,
        reservation_id: &str,
        usage: Usage,
        event: Option<EventBody>,
    ) -> Result<Settling, DriverError> {
        self.settle(
            timer::SettleTarget::Reservation(self.new_handle(), reservation_id.to_owned()),
            timer::SettleKind::Commit { usage, event },
        )
    }

    /// Releases a reservation the driver does not heartbeat.
    pub fn release_reservation(
        &self,
        reservation_id: &str,
        reason: Option<&str>,
    ) -> Result<Settling, DriverError> {
        self.settle(
            timer::SettleTarget::Reservation(self.new_handle(), reservation_id.to_owned()),
            timer::SettleKind::Release {
                reason: reason.map(str::to_owned),
            },
        )
    }

    fn settle(
        &self,
        target: timer::SettleTarget,
        kind: timer::SettleKind,
    ) -> Result<Settling, DriverError> {
        let (ack_tx, ack_rx) = mpsc::channel();
        let (result_tx, result_rx) = mpsc::channel();
        self.commands
            .send(Command::Settle(Box::new(timer::SettleRequest {
                target,
                kind,
                ack: ack_tx,
                result: result_tx,
            })))
            .map_err(|_| DriverError::ShutDown)?;
        let lease = ack_rx.recv().map_err(|_| DriverError::ShutDown)??;
        Ok(Settling {
            lease,
            rx: result_rx,
        })
    }

    /// Replays the journal's partition now (as at start): every record not
    /// claimed elsewhere is settled in the background.
    pub fn replay(&self) -> Result<(), DriverError> {
        if self.journal_dir.is_none() {
            return Err(DriverError::Journal {
                kind: "disabled",
                message: "the driver has no journal".into(),
            });
        }
        {
            let mut p = settle::pending_lock(&self.pending);
            p.replaying = p.replaying.saturating_add(1);
        }
        self.commands.send(Command::Replay).map_err(|_| {
            let mut p = settle::pending_lock(&self.pending);
            p.replaying = p.replaying.saturating_sub(1);
            drop(p);
            self.pending.1.notify_all();
            DriverError::ShutDown
        })
    }

    /// Waits at most `timeout` until every settlement in progress has ended
    /// (and a replay under way is done) (J-7). What is unresolved then stays
    /// in the journal and is listed in the report.
    pub fn flush(&self, timeout: Duration) -> FlushReport {
        settle::flush(&self.pending, timeout)
    }

    /// A single-attempt release on another server (one request, a fresh key, no retry,
    /// nothing journaled), for `leasebeat demo`'s many servers only: not an API. A lease is
    /// released with [`Driver::release`], a reservation with
    /// [`Driver::release_reservation`].
    #[doc(hidden)]
    pub fn release_once_at(
        &self,
        base_url: &str,
        reservation_id: &str,
        reason: Option<&str>,
    ) -> Result<Response, TransportFailure> {
        let mut body = Map::new();
        if let Some(r) = reason {
            body.insert("reason".into(), Value::from(r));
        }
        self.finalize(base_url, reservation_id, "release", body)
    }

    fn finalize(
        &self,
        base_url: &str,
        reservation_id: &str,
        verb: &str,
        mut body: Map<String, Value>,
    ) -> Result<Response, TransportFailure> {
        let key = uuid::Uuid::new_v4().to_string();
        body.insert("idempotency_key".into(), Value::from(key.clone()));
        let bytes = serde_json::to_vec(&Value::Object(body)).expect("JSON serializes");
        let url = format!(
            "{}/v1/reservations/{}/{verb}",
            base_url.trim_end_matches('/'),
            timer::encode_segment(reservation_id)
        );
        let (result, _) = http::post(
            &self.agent,
            &url,
            self.api_key.expose(),
            Some(&key),
            &bytes,
            self.finalize_timeout,
        );
        tracing::info!(target: "leasebeat::driver", reservation_id, verb,
            outcome = %match &result { Ok(r) => r.status.to_string(), Err(f) => f.as_str().to_owned() },
            "finalize");
        result
    }

    /// Test hook (not for production use): while `hold` is true the timer
    /// thread sends nothing (no create, no beat), as if it were stalled or
    /// hopelessly behind, but keeps running its jeopardy checks. Releasing
    /// the hold sends every held beat at once. Tests use it to prove that
    /// jeopardy is reported before the lease lapses on the server.
    #[doc(hidden)]
    pub fn hold_sends_for_testing(&self, hold: bool) -> Result<(), DriverError> {
        self.commands
            .send(Command::HoldSends(hold))
            .map_err(|_| DriverError::ShutDown)
    }

    /// Flushes (at most [`DriverConfig::shutdown_flush_ms`], J-7), then
    /// cancels every lease (each gets its `cancelled` decision and `Stopped`
    /// event) and joins the timer thread and every worker. Settlements
    /// still unresolved stop where they are; their records stay in the
    /// journal for the next replay. Returns the flush's report.
    pub fn shutdown(mut self) -> FlushReport {
        let report = self.flush(self.shutdown_flush);
        self.stop_threads();
        report
    }

    fn stop_threads(&mut self) {
        if let Some(timer) = self.timer.take() {
            let _ = self.commands.send(Command::Shutdown);
            let _ = timer.join();
        }
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        self.stop_threads();
    }
}

/// One-off requests with the driver's HTTP client, outside any heartbeat
/// (what `leasebeat probe` uses to check a server from the outside).
///
/// Same agent as the [`Driver`]'s: HTTP/1.1 over ureq (rustls), no
/// redirects followed, no proxy from the environment, every status a
/// response, bodies above [`MAX_BODY_BYTES`] not read. Each request sends
/// `X-Cycles-API-Key`, `Content-Type: application/json` and, when given,
/// `X-Idempotency-Key`, and is bounded end to end by its own timeout.
///
/// ```no_run
/// use std::time::Duration;
/// use leasebeat::driver::{ApiKey, Client};
/// let client = Client::new("http://127.0.0.1:7878", ApiKey::new("k")).unwrap();
/// let body = br#"{"idempotency_key":"k-1","reason":"done"}"#;
/// let x = client.post("/v1/reservations/rsv-1/release", Some("k-1"), body, Duration::from_secs(5));
/// println!("{:?} in {} ns", x.outcome.map(|r| r.status), x.received_ns - x.sent_ns);
/// ```
pub struct Client {
    base: String,
    api_key: ApiKey,
    agent: ureq::Agent,
}

/// What one [`Client::post`] observed.
#[derive(Clone, Debug)]
pub struct Exchange {
    /// [`clock::now_ns`] just before the request was handed to the agent.
    pub sent_ns: u64,
    /// [`clock::now_ns`] once the complete response (or the failure) was
    /// observed.
    pub received_ns: u64,
    /// The complete response (any status), or why there was none.
    pub outcome: Result<Response, TransportFailure>,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("base", &self.base)
            .field("api_key", &self.api_key)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// A client for `base_url` (`http://` or `https://`; a trailing `/` is
    /// ignored). The API key is checked as [`Driver::new`] checks it.
    pub fn new(base_url: &str, api_key: ApiKey) -> Result<Client, DriverError> {
        let base = check_base(base_url)?.to_owned();
        api_key.check()?;
        Ok(Client {
            base,
            api_key,
            agent: http::agent(1),
        })
    }

    /// The base URL, without a trailing `/`.
    pub fn base_url(&self) -> &str {
        &self.base
    }

    /// `POST {base}{path}` with `body`, bounded by `timeout` end to end
    /// (DNS, connect, send, receive, body), on the calling thread. `path`
    /// starts with `/` and is sent as given (percent-encode ids yourself).
    pub fn post(
        &self,
        path: &str,
        idempotency_key: Option<&str>,
        body: &[u8],
        timeout: Duration,
    ) -> Exchange {
        let url = format!("{}{path}", self.base);
        let sent_ns = clock::now_ns();
        let (outcome, received_ns) = http::post(
            &self.agent,
            &url,
            self.api_key.expose(),
            idempotency_key,
            body,
            timeout.max(Duration::from_millis(1)),
        );
        Exchange {
            sent_ns,
            received_ns,
            outcome,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn test_config(url: impl Into<String>, key: ApiKey) -> DriverConfig {
        let mut c = DriverConfig::new(url, key);
        c.journal = JournalOptions::disabled();
        c
    }

    #[test]
    fn api_key_is_redacted() {
        let key = ApiKey::new("sekrit-123");
        assert_eq!(format!("{key:?}"), "ApiKey(<redacted>)");
        let config = test_config("http://127.0.0.1:1", key);
        assert!(!format!("{config:?}").contains("sekrit"));
        let (driver, _events) = Driver::new(config).unwrap();
        assert!(!format!("{driver:?}").contains("sekrit"));
        driver.shutdown();
    }

    #[test]
    fn api_keys_that_cannot_be_header_values_are_refused_without_echo() {
        for key in [
            "a\r\nb-sekrit",
            "sekrit\n",
            "sek\x00rit",
            "sek\u{e9}rit",
            " sekrit",
            "",
        ] {
            let err = Driver::new(test_config("http://127.0.0.1:1", ApiKey::new(key)))
                .map(|_| ())
                .unwrap_err();
            assert!(matches!(err, DriverError::BadApiKey(_)), "{key:?}");
            assert!(!err.to_string().contains("sekrit"), "{err}");
        }
        assert!(ApiKey::new("ok key\twith-tab").check().is_ok());
    }

    #[test]
    fn client_checks_its_url_and_key_and_reports_a_refused_connection() {
        assert!(matches!(
            Client::new("ftp://x", ApiKey::new("k")),
            Err(DriverError::BadUrl(_))
        ));
        assert!(matches!(
            Client::new("http://127.0.0.1:1", ApiKey::new("a\nb")),
            Err(DriverError::BadApiKey(_))
        ));
        let c = Client::new("http://127.0.0.1:1/", ApiKey::new("sekrit")).unwrap();
        assert_eq!(c.base_url(), "http://127.0.0.1:1");
        assert!(!format!("{c:?}").contains("sekrit"));
        // Port 1 on loopback: nothing listens there.
        let x = c.post("/v1/reservations", None, b"{}", Duration::from_secs(2));
        assert!(x.received_ns >= x.sent_ns);
        assert!(matches!(
            x.outcome,
            Err(TransportFailure::Connect | TransportFailure::Reset)
        ));
    }

    #[test]
    fn detection_slack_stays_below_the_budget() {
        assert_eq!(detection_slack_ms(400), 72);
        assert_eq!(detection_slack_ms(2_500), 308);
        assert_eq!(detection_slack_ms(10_000), 1_144);
        for b in [31, 100, 1_000, 60_000, 86_400_000] {
            let s = detection_slack_ms(b);
            let enforced = b - s;
            assert!(
                enforced >= 1 && enforced + enforced / 8 + WAKEUP_ALLOWANCE_MS <= b,
                "{b}"
            );
        }
        assert_eq!(detection_slack_ms(1), 0);
    }

    #[test]
    fn segments_are_percent_encoded() {
        assert_eq!(timer::encode_segment("rsv-1_a.b~"), "rsv-1_a.b~");
        assert_eq!(timer::encode_segment("a/b c"), "a%2Fb%20c");
    }

    #[test]
    fn refuses_bad_urls_and_unbounded_budgets() {
        assert!(matches!(
            Driver::new(test_config("ftp://x", ApiKey::new("k"))),
            Err(DriverError::BadUrl(_))
        ));
        let (driver, _events) =
            Driver::new(test_config("http://127.0.0.1:1", ApiKey::new("k"))).unwrap();
        let err = driver.start(Config::new(60_000, None)).unwrap_err();
        assert!(matches!(err, DriverError::Core(e) if e.kind() == ErrorKind::InvalidConfig));
        driver.shutdown();
    }

    /// A queued configuration comes back with exactly the members it had:
    /// integers of every size, nested objects and arrays, and floats (kept
    /// as a map: a text round trip could move one by a unit in the last
    /// place).
    #[test]
    fn a_pending_create_keeps_its_members_exactly() {
        let cases = [
            serde_json::json!({}),
            serde_json::json!({
                "subject": {"tenant": "t", "tags": ["a", "b"]},
                "estimate": {"unit": "TOKENS", "amount": u64::MAX},
                "n": i64::MIN
            }),
            serde_json::json!({
                "estimate": {"unit": "USD", "amount": 0.30000000000000004},
                "tiny": 2.2250738585072014e-308,
                "list": [1, 1.7976931348623157e308]
            }),
        ];
        for members in cases {
            let mut config = Config::new(60_000, Some(1_000));
            config.create_request = members.as_object().unwrap().clone();
            let back = PendingCreate::new(config.clone())
                .relocated()
                .into_config()
                .unwrap();
            assert_eq!(back.create_request, config.create_request);
            assert_eq!(back.ttl_ms, 60_000);
            assert_eq!(back.request_timeout_ms, Some(1_000));
        }
    }

    /// `Driver::start` queues the configuration; the heartbeat is built when
    /// the create goes out. A lease cancelled (or shut down) before that still
    /// gets its `cancelled` decision and its stop, and nothing is sent.
    #[test]
    fn leases_cancelled_before_their_create_goes_out_stop_cancelled() {
        let (driver, events) =
            Driver::new(test_config("http://127.0.0.1:1", ApiKey::new("k"))).unwrap();
        driver.hold_sends_for_testing(true).unwrap();
        let first = driver.start(Config::new(60_000, Some(1_000))).unwrap();
        let second = driver.start(Config::new(60_000, Some(1_000))).unwrap();
        // Refused up front, as before: nothing is queued.
        let err = driver.start(Config::new(999, Some(1_000))).unwrap_err();
        assert!(matches!(err, DriverError::Core(e) if e.kind() == ErrorKind::InvalidConfig));
        driver.cancel(first).unwrap();
        driver.shutdown();
        let mut seen = Vec::new();
        while let Ok(event) = events.recv_timeout(Duration::from_secs(20)) {
            match event {
                Event::Decision {
                    lease,
                    attempt,
                    outcome,
                    decision,
                    ..
                } => {
                    assert!(attempt.is_none(), "nothing was sent");
                    assert_eq!(outcome, Outcome::Cancelled);
                    assert_eq!(decision.stop_reason(), Some(StopReason::Cancelled));
                    seen.push(("decision", lease));
                }
                Event::Stopped { lease, reason, .. } => {
                    assert_eq!(reason, StopReason::Cancelled);
                    seen.push(("stopped", lease));
                }
                Event::Error { error, .. } => panic!("{error}"),
                Event::Jeopardy { .. } => panic!("no lease had a proven lead"),
                _ => {}
            }
        }
        assert_eq!(
            seen,
            vec![
                ("decision", first),
                ("stopped", first),
                ("decision", second),
                ("stopped", second)
            ]
        );
    }

    #[test]
    fn connection_refused_is_a_connect_failure_and_the_create_stops() {
        // Bind then drop a listener: its port now refuses connections.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let (driver, events) = Driver::new(test_config(
            format!("http://127.0.0.1:{port}"),
            ApiKey::new("k"),
        ))
        .unwrap();
        let lease = driver.start(Config::new(60_000, Some(1_000))).unwrap();
        let mut outcomes = Vec::new();
        let reason = loop {
            match events
                .recv_timeout(Duration::from_secs(20))
                .expect("an event")
            {
                Event::Decision { outcome, .. } => outcomes.push(outcome),
                Event::Stopped {
                    lease: l, reason, ..
                } => {
                    assert_eq!(l, lease);
                    break reason;
                }
                Event::Error { error, .. } => panic!("{error}"),
                _ => {}
            }
        };
        assert_eq!(reason, StopReason::CreateFailed);
        assert_eq!(
            outcomes,
            vec![Outcome::Failure(TransportFailure::Connect); 2]
        );
        driver.shutdown();
    }
}
