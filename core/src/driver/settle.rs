//! The driver's settlement types: what a caller gives to end a lease
//! ([`Usage`], [`EventBody`], [`LeaseOptions`]) and what it gets back
//! ([`Settling`], [`SettleResult`], [`HeartbeatFailure`], [`FlushReport`]),
//! and the journal settings ([`JournalOptions`]).

use std::fmt;
use std::path::PathBuf;
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Map, Value};

use super::{LeaseHandle, Outcome};
use crate::{Endpoint, SettleOutcome, SettlementDecision, StopReason};

/// Where and whether the driver journals its settlements (J-1..J-8).
///
/// The journal needs the crate feature `journal`. With it, the default is
/// **on**, at [`crate::journal::base_dir`]`(None)` (`$CYCLES_JOURNAL_DIR`, else
/// `~/.runcycles/commit-journal`), partitioned by the API key, with a replay
/// of the partition when the driver starts. Without the feature the default
/// is off (settlements still retry and fall back, nothing is durable), and
/// `enabled: true` is refused by [`super::Driver::new`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JournalOptions {
    /// Journal the settlements (`false`: the explicit opt-out).
    pub enabled: bool,
    /// The base directory; `None`: `$CYCLES_JOURNAL_DIR`, else
    /// `~/.runcycles/commit-journal`.
    pub dir: Option<PathBuf>,
    /// Partition by this tenant (the records survive an API-key rotation),
    /// else by the API key (the key itself is never stored).
    pub tenant: Option<String>,
    /// Replay the partition's records in the background when the driver
    /// starts (default true).
    pub replay_on_start: bool,
}

impl Default for JournalOptions {
    fn default() -> JournalOptions {
        JournalOptions {
            enabled: cfg!(feature = "journal"),
            dir: None,
            tenant: None,
            replay_on_start: true,
        }
    }
}

impl JournalOptions {
    /// No journal (the explicit opt-out).
    pub fn disabled() -> JournalOptions {
        JournalOptions {
            enabled: false,
            ..JournalOptions::default()
        }
    }

    /// A journal under `dir` (tests use a temporary directory).
    pub fn at(dir: impl Into<PathBuf>) -> JournalOptions {
        JournalOptions {
            enabled: true,
            dir: Some(dir.into()),
            ..JournalOptions::default()
        }
    }
}

/// The usage to commit: the commit body without its idempotency key.
///
/// Checked by the core when the settlement is built (`actual` an Amount with
/// an integer amount in 0..=2^63-1, `metrics` StandardMetrics, `metadata` an
/// object): a bad body is refused by [`super::Driver::commit`] with
/// [`super::DriverError::Core`] (`invalid_config`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Usage {
    body: Option<Vec<u8>>,
}

impl Usage {
    /// `{"actual": actual}` (an Amount object such as
    /// `{"unit":"TOKENS","amount":42}`).
    pub fn new(actual: Value) -> Usage {
        let mut m = Map::new();
        m.insert("actual".into(), actual);
        Usage::from_map(m)
    }

    fn from_map(m: Map<String, Value>) -> Usage {
        Usage {
            body: Some(serde_json::to_vec(&m).unwrap_or_default()),
        }
    }

    fn map(&self) -> Map<String, Value> {
        self.body
            .as_deref()
            .and_then(|b| serde_json::from_slice(b).ok())
            .unwrap_or_default()
    }

    /// Adds `metrics` (StandardMetrics).
    pub fn metrics(self, metrics: Value) -> Usage {
        let mut m = self.map();
        m.insert("metrics".into(), metrics);
        Usage::from_map(m)
    }

    /// Adds `metadata` (an object).
    pub fn metadata(self, metadata: Value) -> Usage {
        let mut m = self.map();
        m.insert("metadata".into(), metadata);
        Usage::from_map(m)
    }

    /// A whole commit body without key, as JSON text (kept byte for byte
    /// until the core checks it).
    pub fn from_json(body: impl Into<Vec<u8>>) -> Usage {
        Usage {
            body: Some(body.into()),
        }
    }

    /// No actual amount is known (ST-10): nothing is sent, the settlement
    /// ends `no_actual` at once and says so.
    pub fn unknown() -> Usage {
        Usage { body: None }
    }

    /// The body text, `None` for [`Usage::unknown`].
    pub fn body(&self) -> Option<&[u8]> {
        self.body.as_deref()
    }

    pub(crate) fn into_body(self) -> Option<Vec<u8>> {
        self.body
    }
}

/// What the expired-commit event fallback (ST-5) adds to the usage:
/// `subject` and `action`, as JSON text. A lease started from a create
/// knows them from its create body; an adopted reservation gets them here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventBody(pub(crate) Arc<[u8]>);

impl EventBody {
    /// `{"subject": subject, "action": action}`.
    pub fn new(subject: Value, action: Value) -> EventBody {
        let mut m = Map::new();
        m.insert("subject".into(), subject);
        m.insert("action".into(), action);
        EventBody(serde_json::to_vec(&m).unwrap_or_default().into())
    }

    /// The body as JSON text (checked by the core when a settlement uses it).
    pub fn from_json(text: impl Into<Vec<u8>>) -> EventBody {
        EventBody(text.into().into())
    }

    /// `subject` and `action` of a create body, if it has both.
    pub fn from_create(create: &Map<String, Value>) -> Option<EventBody> {
        match (create.get("subject"), create.get("action")) {
            (Some(s), Some(a)) => Some(EventBody::new(s.clone(), a.clone())),
            _ => None,
        }
    }

    /// The JSON text.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

/// What the driver does about a heartbeat failure (HP-1).
///
/// Under every policy, each failed heartbeat attempt and each stop that is
/// not a cancel is reported as [`super::Event::HeartbeatFailure`] with the
/// reservation id and what happens next; the final settlement always runs.
#[derive(Clone, Default)]
pub enum FailurePolicy {
    /// Report and carry on (the default).
    #[default]
    Warn,
    /// Also ask the work to stop, once, when the heartbeat stops for any
    /// reason but a cancel (the lease is lost or in doubt).
    Cancel(Canceller),
    /// The settlement runs; then its [`SettleResult`] carries the heartbeat's
    /// stop (`heartbeat_failure`, `failed_after_heartbeat`).
    FailOnFinalize,
}

impl fmt::Debug for FailurePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FailurePolicy {
    /// `"warn"`, `"cancel"` or `"fail_on_finalize"`.
    pub fn as_str(&self) -> &'static str {
        match self {
            FailurePolicy::Warn => "warn",
            FailurePolicy::Cancel(_) => "cancel",
            FailurePolicy::FailOnFinalize => "fail_on_finalize",
        }
    }
}

/// How [`FailurePolicy::Cancel`] reaches the work.
#[derive(Clone)]
pub enum Canceller {
    /// Cancels this token (the work polls or waits on it).
    Token(CancellationToken),
    /// Calls this, once, on the driver's timer thread (keep it short: no
    /// blocking, no call back into the driver that waits).
    Callback(Arc<dyn Fn(&HeartbeatFailure) + Send + Sync>),
}

impl Canceller {
    pub(crate) fn fire(&self, failure: &HeartbeatFailure) {
        match self {
            Canceller::Token(t) => t.cancel_with(failure.clone()),
            Canceller::Callback(f) => f(failure),
        }
    }
}

/// A cancellation flag shared between the driver and the work (clone it).
#[derive(Clone, Default)]
pub struct CancellationToken(Arc<(Mutex<TokenState>, Condvar)>);

#[derive(Default)]
struct TokenState {
    cancelled: bool,
    failure: Option<HeartbeatFailure>,
}

impl fmt::Debug for CancellationToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CancellationToken(cancelled: {})", self.is_cancelled())
    }
}

impl CancellationToken {
    /// A token not cancelled yet.
    pub fn new() -> CancellationToken {
        CancellationToken::default()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, TokenState> {
        self.0.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Cancels (idempotent).
    pub fn cancel(&self) {
        self.state().cancelled = true;
        self.0.1.notify_all();
    }

    fn cancel_with(&self, failure: HeartbeatFailure) {
        let mut st = self.state();
        st.cancelled = true;
        st.failure.get_or_insert(failure);
        drop(st);
        self.0.1.notify_all();
    }

    /// Whether it was cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.state().cancelled
    }

    /// The heartbeat failure that cancelled it, if the driver did.
    pub fn failure(&self) -> Option<HeartbeatFailure> {
        self.state().failure.clone()
    }

    /// Waits at most `timeout` for the cancel; true if cancelled.
    pub fn wait_timeout(&self, timeout: Duration) -> bool {
        let until = Instant::now() + timeout;
        let mut st = self.state();
        while !st.cancelled {
            let now = Instant::now();
            if now >= until {
                return false;
            }
            st = self
                .0
                .1
                .wait_timeout(st, until - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        true
    }
}

/// What happens after a heartbeat failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Disposition {
    /// The attempt is retried with the same key, due at this instant
    /// (driver clock, ns).
    Retry {
        /// When the retry is due.
        at_ns: u64,
    },
    /// A new attempt with a new key follows at this instant (a beat after
    /// an ambiguous success).
    Continue {
        /// When the next attempt is due.
        at_ns: u64,
    },
    /// The heartbeat stopped for good.
    Stop(StopReason),
}

impl Disposition {
    /// `"retry_same_key"`, `"continue"` or `"stop"`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Disposition::Retry { .. } => "retry_same_key",
            Disposition::Continue { .. } => "continue",
            Disposition::Stop(_) => "stop",
        }
    }
}

/// A failed heartbeat attempt or a stop (HP-1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeartbeatFailure {
    /// The lease.
    pub lease: LeaseHandle,
    /// The reservation, once known.
    pub reservation_id: Option<String>,
    /// What the attempt got (or `Cancelled`).
    pub outcome: Outcome,
    /// The core's class of it (`transport_failure`, `server_error`, ...).
    pub class: &'static str,
    /// What happens next.
    pub disposition: Disposition,
    /// The decision's detail.
    pub detail: Option<String>,
    /// When (driver clock, ns).
    pub at_ns: u64,
}

impl fmt::Display for HeartbeatFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "heartbeat of {} ({}) failed: {} ({}), {}",
            self.lease,
            self.reservation_id.as_deref().unwrap_or("no reservation"),
            self.outcome,
            self.class,
            self.disposition.as_str()
        )?;
        if let Disposition::Stop(r) = self.disposition {
            write!(f, " ({r})")?;
        }
        Ok(())
    }
}

/// How a lease is run (see [`super::Driver::start_with`]).
#[derive(Clone, Debug, Default)]
pub struct LeaseOptions {
    /// Subject and action for the expired-commit fallback; default: the
    /// create body's (none for an adopted reservation).
    pub event: Option<EventBody>,
    /// HP-1.
    pub policy: FailurePolicy,
}

/// One settlement attempt, as sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SettleAttemptReport {
    /// The core's attempt id.
    pub id: u64,
    /// Where it went.
    pub endpoint: Endpoint,
    /// The idempotency key (the settlement's one key, ST-1).
    pub key: String,
    /// Its ordinal within its mode (1-based).
    pub number: u32,
    /// When it was due and sent (driver clock, ns).
    pub due_ns: u64,
    /// When it was handed to a worker.
    pub sent_ns: u64,
}

/// The end of a settlement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SettleResult {
    /// The lease (a fresh handle for a replayed record).
    pub lease: LeaseHandle,
    /// The reservation.
    pub reservation_id: String,
    /// The outcome (`committed`, `applied`, `released`, `rejected`,
    /// `auth_failed`, `unclassified`, `exhausted`, `expired_unrecorded`,
    /// `no_actual`).
    pub outcome: SettleOutcome,
    /// The server's error code that decided, if any.
    pub code: Option<String>,
    /// The HTTP status that decided, if any.
    pub status: Option<u16>,
    /// The settlement's one idempotency key (`""` for `no_actual`).
    pub key: String,
    /// The record stays in the journal (a later replay settles it).
    pub record_kept: bool,
    /// A record of the settlement reached the disk (J-1): false when the
    /// journal is off, for a release, or when every write failed (SP-3: the
    /// requests went anyway; the decisions carry `persist_failed`).
    pub journaled: bool,
    /// Every decision, in order.
    pub decisions: Vec<SettlementDecision>,
    /// [`FailurePolicy::FailOnFinalize`]: the heartbeat's stop, if it failed.
    pub heartbeat_failure: Option<HeartbeatFailure>,
    /// [`FailurePolicy::FailOnFinalize`] and the heartbeat failed: report the
    /// lease as failed after the heartbeat, whatever the outcome.
    pub failed_after_heartbeat: bool,
    /// Started from a journal record (replay).
    pub replayed: bool,
    /// The journal could not apply the final record update (J-5).
    pub journal_error: Option<String>,
}

impl SettleResult {
    /// The usage is recorded (or the release done) and no policy failure is
    /// attached.
    pub fn is_success(&self) -> bool {
        self.outcome.is_success() && !self.failed_after_heartbeat
    }

    /// The last decision.
    pub fn last_decision(&self) -> Option<&SettlementDecision> {
        self.decisions.last()
    }
}

/// A settlement under way (returned by [`super::Driver::commit`] and
/// friends). Its decisions and its end are also reported as events.
#[derive(Debug)]
pub struct Settling {
    pub(crate) lease: LeaseHandle,
    pub(crate) rx: Receiver<SettleResult>,
}

impl Settling {
    /// The lease the settlement belongs to.
    pub fn lease(&self) -> LeaseHandle {
        self.lease
    }

    /// Waits for the end. `None` if the driver shut down first (the record,
    /// if any, stays in the journal).
    pub fn wait(self) -> Option<SettleResult> {
        self.rx.recv().ok()
    }

    /// Waits at most `timeout`.
    pub fn wait_timeout(&self, timeout: Duration) -> Option<SettleResult> {
        self.rx.recv_timeout(timeout).ok()
    }
}

/// What [`super::Driver::flush`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FlushReport {
    /// Every settlement ended (and the start replay, if any, is done).
    pub settled: bool,
    /// Reservations still settling when the wait ended (their records
    /// stay in the journal, J-7).
    pub pending: Vec<String>,
}

/// What a journal replay found (reported as [`super::Event::Journal`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JournalReport {
    /// The partition directory.
    pub dir: Option<PathBuf>,
    /// Records taken for settlement (reservation ids), each reported as a
    /// settlement of its own.
    pub replayed: Vec<String>,
    /// Records another worker or process holds (J-6): left alone.
    pub busy: Vec<String>,
    /// Records put aside (file, reason): corrupt, unsupported, refused.
    pub quarantined: Vec<(String, String)>,
    /// Records of other servers (not replayed).
    pub foreign: usize,
    /// Legacy files moved to their standard names (J-8).
    pub migrated: usize,
    /// Files skipped (misplaced, symlinks), with the reason.
    pub skipped: Vec<(String, String)>,
    /// The replay failed.
    pub error: Option<String>,
}

/// The driver's register of settlements in progress, for `flush`.
#[derive(Default)]
pub(crate) struct Pending {
    pub(crate) ids: std::collections::HashMap<LeaseHandle, String>,
    /// Replays asked for (at start, [`super::Driver::replay`]) that have not
    /// handed their settlements over yet: a count, so that the end of one
    /// does not hide another still queued.
    pub(crate) replaying: u32,
}

pub(crate) type PendingShared = Arc<(Mutex<Pending>, Condvar)>;

pub(crate) fn pending_lock(p: &PendingShared) -> std::sync::MutexGuard<'_, Pending> {
    p.0.lock().unwrap_or_else(|e| e.into_inner())
}

/// Waits at most `timeout` until nothing is pending.
pub(crate) fn flush(p: &PendingShared, timeout: Duration) -> FlushReport {
    let until = Instant::now() + timeout;
    let mut st = pending_lock(p);
    loop {
        if st.ids.is_empty() && st.replaying == 0 {
            return FlushReport {
                settled: true,
                pending: Vec::new(),
            };
        }
        let now = Instant::now();
        if now >= until {
            let mut pending: Vec<String> = st.ids.values().cloned().collect();
            pending.sort();
            return FlushReport {
                settled: false,
                pending,
            };
        }
        st =
            p.1.wait_timeout(st, until - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
    }
}

/// Wall-clock Unix milliseconds.
pub(crate) fn wall_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn usage_builds_the_commit_body_without_a_key() {
        let u = Usage::new(json!({"unit": "TOKENS", "amount": 7}))
            .metrics(json!({"tokens_input": 3}))
            .metadata(json!({"a": 1}));
        let v: Value = serde_json::from_slice(u.body().unwrap()).unwrap();
        assert_eq!(
            v,
            json!({"actual": {"unit": "TOKENS", "amount": 7},
                   "metrics": {"tokens_input": 3}, "metadata": {"a": 1}})
        );
        assert_eq!(Usage::unknown().body(), None);
        assert_eq!(Usage::from_json("x").body(), Some(&b"x"[..]));
    }

    #[test]
    fn event_body_from_a_create_needs_subject_and_action() {
        let create = json!({"subject": {"tenant": "t"}, "action": {"kind": "k", "name": "n"},
                            "estimate": {"unit": "TOKENS", "amount": 1}});
        let e = EventBody::from_create(create.as_object().unwrap()).unwrap();
        let v: Value = serde_json::from_slice(e.as_bytes()).unwrap();
        assert_eq!(
            v,
            json!({"subject": {"tenant": "t"}, "action": {"kind": "k", "name": "n"}})
        );
        let partial = json!({"subject": {"tenant": "t"}});
        assert!(EventBody::from_create(partial.as_object().unwrap()).is_none());
    }

    #[test]
    fn a_cancellation_token_wakes_its_waiter_and_keeps_the_first_failure() {
        let t = CancellationToken::new();
        assert!(!t.wait_timeout(Duration::from_millis(10)));
        let t2 = t.clone();
        let waiter = std::thread::spawn(move || t2.wait_timeout(Duration::from_secs(20)));
        let f = HeartbeatFailure {
            lease: LeaseHandle(1),
            reservation_id: Some("r".into()),
            outcome: Outcome::Status(404),
            class: "permanent",
            disposition: Disposition::Stop(StopReason::NotFound),
            detail: None,
            at_ns: 1,
        };
        Canceller::Token(t.clone()).fire(&f);
        assert!(waiter.join().unwrap());
        assert!(t.is_cancelled());
        let mut g = f.clone();
        g.at_ns = 2;
        Canceller::Token(t.clone()).fire(&g);
        assert_eq!(t.failure(), Some(f.clone()));
        assert!(f.to_string().contains("stop (not_found)"), "{f}");
        assert_eq!(FailurePolicy::default().as_str(), "warn");
    }

    #[test]
    fn flush_of_nothing_is_settled_at_once_and_a_bounded_wait_lists_the_pending() {
        let p: PendingShared = Default::default();
        assert!(flush(&p, Duration::ZERO).settled);
        pending_lock(&p).ids.insert(LeaseHandle(3), "rsv-3".into());
        let t = Instant::now();
        let r = flush(&p, Duration::from_millis(30));
        assert!(t.elapsed() >= Duration::from_millis(30));
        assert_eq!(
            r,
            FlushReport {
                settled: false,
                pending: vec!["rsv-3".into()]
            }
        );
    }

    /// Two replays asked for: the end of the first does not let a flush
    /// return while the second has not handed its settlements over.
    #[test]
    fn flush_waits_for_every_replay_asked_for() {
        let p: PendingShared = Default::default();
        pending_lock(&p).replaying = 2;
        assert!(!flush(&p, Duration::ZERO).settled);
        pending_lock(&p).replaying -= 1;
        assert!(
            !flush(&p, Duration::ZERO).settled,
            "one replay still queued"
        );
        let q = Arc::clone(&p);
        let last = std::thread::spawn(move || {
            let mut g = pending_lock(&q);
            g.replaying -= 1;
            drop(g);
            q.1.notify_all();
        });
        assert!(flush(&p, Duration::from_secs(20)).settled);
        last.join().unwrap();
    }
}
