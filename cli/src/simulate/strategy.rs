//! Heartbeat strategies compared by `leasebeat simulate`.
//!
//! `leasebeat` drives the core's [`Heartbeat`] unchanged. Every other
//! strategy is a small scheduler that lives here, in the simulator, never in
//! the core: the historical one all four SDKs shipped, alternate-beat, fixed
//! fractions like etcd's and Vault's, and the official Python SDK's
//! floating-point variant of the primary algorithm.
//!
//! All of them are sans-IO like the core: they see the client's clock (ns)
//! and raw responses, and say what to send when.

use leasebeat::{
    Action, AttemptKind, Config, Decision, Heartbeat, OutcomeClass, Response, SequentialKeys,
    StopReason, TransportFailure, schema,
};
use serde_json::{Map, Value, json};

use super::history::{History, MS};

/// The strategies, in table order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// The core, unchanged.
    Leasebeat,
    /// Beat every max(ttl/2, 1 s), extend by ttl, fresh key every beat.
    Historical,
    /// Ticks every max(ttl/2, 1 s), extends on every other tick.
    AlternateBeat,
    /// Beat at a third of the remaining lease (etcd's keep-alive).
    EtcdThird,
    /// Beat at two thirds of the remaining lease (Vault's renewer).
    VaultTwoThirds,
    /// The Python SDK's primary algorithm: floats, budget connect + read + 5 s.
    PythonSdk,
}

impl Kind {
    /// Every strategy, in table order.
    pub const ALL: [Kind; 6] = [
        Kind::Leasebeat,
        Kind::Historical,
        Kind::AlternateBeat,
        Kind::EtcdThird,
        Kind::VaultTwoThirds,
        Kind::PythonSdk,
    ];

    /// Its name in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Leasebeat => "leasebeat",
            Kind::Historical => "historical",
            Kind::AlternateBeat => "alternate-beat",
            Kind::EtcdThird => "etcd-ttl/3",
            Kind::VaultTwoThirds => "vault-2/3",
            Kind::PythonSdk => "python-sdk",
        }
    }

    /// One line on what it does.
    pub fn about(self) -> &'static str {
        match self {
            Kind::Leasebeat => {
                "the core, unchanged: lead-driven beats, same-key recovery, jeopardy"
            }
            Kind::Historical => {
                "every max(ttl/2, 1 s), extend by ttl, a fresh key every beat, never stops"
            }
            Kind::AlternateBeat => {
                "ticks every max(ttl/2, 1 s), extends on every other tick; same-key retry next tick"
            }
            Kind::EtcdThird => {
                "beat at remaining/3, retry same key after 1 s, give up at receipt + remaining"
            }
            Kind::VaultTwoThirds => {
                "beat at 2/3 of remaining, retry same key after 1 s, give up at receipt + remaining"
            }
            Kind::PythonSdk => {
                "primary algorithm in floats with budget connect + read + 5 s (runcycles 0.5.3)"
            }
        }
    }

    /// A fresh strategy for one lease of `h`.
    pub fn start(self, h: &History) -> Box<dyn Strategy> {
        match self {
            Kind::Leasebeat => Box::new(Core::new(h)),
            Kind::Historical => Box::new(Ticker::new(h, false)),
            Kind::AlternateBeat => Box::new(Ticker::new(h, true)),
            Kind::EtcdThird => Box::new(Fraction::new(h, 1, 3)),
            Kind::VaultTwoThirds => Box::new(Fraction::new(h, 2, 3)),
            Kind::PythonSdk => Box::new(PySdk::new(h)),
        }
    }
}

/// What a strategy asks for next.
#[derive(Debug)]
pub enum Next<'a> {
    /// Send this request when the client's clock reads `due_ns`
    /// (`u64::MAX`: never).
    Send {
        /// Create or extend.
        kind: AttemptKind,
        /// Client-clock due time (ns).
        due_ns: u64,
        /// Idempotency key.
        key: &'a str,
        /// Request body.
        body: &'a [u8],
    },
    /// Stopped for good (a reported stop, or `cancelled`).
    Stop(&'static str),
}

/// The outcome of the outstanding attempt.
#[derive(Debug)]
pub enum Observed {
    /// An HTTP response.
    Response {
        /// Status.
        status: u16,
        /// `Retry-After` (seconds), if any.
        retry_after: Option<u64>,
        /// Raw body.
        body: Vec<u8>,
    },
    /// A transport failure.
    Failure(TransportFailure),
}

/// A heartbeat strategy, sans-IO.
pub trait Strategy {
    /// What to do now.
    fn next(&self) -> Next<'_>;
    /// The request asked for was sent at client time `now`.
    fn sent(&mut self, now: u64);
    /// Its outcome was observed at client time `now`.
    fn outcome(&mut self, observed: Observed, now: u64);
    /// D-15: the client-clock instant after which the lease is no longer
    /// proven alive (`None`: nothing proven). Only `leasebeat` has one.
    fn proven_until(&self) -> Option<u64> {
        None
    }
    /// D-15 (b): a beat sent later than due by more than this (ns) is
    /// jeopardy. Only `leasebeat` has one.
    fn late_margin(&self) -> Option<u64> {
        None
    }
    /// A client-clock instant at which the strategy gives up by itself
    /// (a reported stop, reason `local_expiry`), e.g. etcd's keep-alive
    /// deadline.
    fn deadline(&self) -> Option<u64> {
        None
    }
    /// The core refused an input (a simulator bug if it ever happens).
    fn core_errors(&self) -> u32 {
        0
    }
    /// What it last decided, for `--explain`.
    fn explain(&self) -> String {
        match self.next() {
            Next::Send { kind, due_ns, .. } => format!("{kind:?} due {due_ns} ns"),
            Next::Stop(r) => format!("stop {r}"),
        }
    }
}

fn create_request() -> Map<String, Value> {
    json!({
        "subject": {"tenant": "sim"},
        "action": {"kind": "job", "name": "simulated"},
        "estimate": {"unit": "TOKENS", "amount": 1000}
    })
    .as_object()
    .cloned()
    .expect("an object")
}

fn create_body(key: &str, ttl_ms: u64) -> Vec<u8> {
    let mut m = create_request();
    m.insert("idempotency_key".into(), key.into());
    m.insert("ttl_ms".into(), ttl_ms.into());
    serde_json::to_vec(&m).expect("JSON")
}

fn extend_body(key: &str, ttl_ms: u64) -> Vec<u8> {
    serde_json::to_vec(&json!({"idempotency_key": key, "extend_by_ms": ttl_ms})).expect("JSON")
}

/// How the non-core strategies read an extend outcome.
enum Read {
    Success {
        expires_at: u64,
        remaining: Option<u64>,
    },
    Transient,
    Throttled(Option<u64>),
    Permanent(&'static str),
    Rejected,
}

fn read_extend(o: &Observed) -> Read {
    match o {
        Observed::Failure(_) => Read::Transient,
        Observed::Response {
            status,
            retry_after,
            body,
        } => {
            if *status == 200 {
                return match schema::extend_response(body) {
                    Ok(b) => Read::Success {
                        expires_at: b.expires_at_ms,
                        remaining: b.remaining_ttl_ms,
                    },
                    Err(_) => Read::Transient,
                };
            }
            if (200..300).contains(status) {
                return Read::Transient;
            }
            if let Some(r) = schema::error_code(body)
                .as_deref()
                .and_then(leasebeat::permanent_reason)
            {
                return Read::Permanent(r.as_str());
            }
            match status {
                500..=599 => Read::Transient,
                429 => Read::Throttled(*retry_after),
                410 => Read::Permanent("expired"),
                404 => Read::Permanent("not_found"),
                _ => Read::Rejected,
            }
        }
    }
}

/// The create outcome for the non-core strategies: `(received-remaining,
/// expires_at)` on success.
fn read_create(o: &Observed) -> Option<(Option<u64>, Option<u64>)> {
    match o {
        Observed::Response {
            status: 200, body, ..
        } => schema::create_response(body)
            .ok()
            .filter(|b| b.reservation_id.is_some())
            .map(|b| (b.remaining_ttl_ms, b.expires_at_ms)),
        _ => None,
    }
}

/// The outstanding request of a non-core strategy.
struct Pending {
    kind: AttemptKind,
    due_ns: u64,
    key: String,
    body: Vec<u8>,
    sent_ns: u64,
}

struct Keys {
    n: u64,
}

impl Keys {
    fn fresh(&mut self) -> String {
        self.n += 1;
        format!("k{}", self.n)
    }
}

// ----- leasebeat: the core -----

/// The core, driven unchanged.
pub struct Core {
    hb: Heartbeat,
    proven: Option<u64>,
    created: bool,
    last: Option<Decision>,
    margin_ns: u64,
    errors: u32,
}

impl Core {
    fn new(h: &History) -> Core {
        let mut config = Config::new(h.ttl_ms, Some(h.budget_ms));
        config.create_request = create_request();
        let hb = Heartbeat::with_key_source(config, Box::new(SequentialKeys::new("k")))
            .expect("valid config");
        Core {
            hb,
            proven: None,
            created: false,
            last: None,
            margin_ns: 1_000 * MS,
            errors: 0,
        }
    }

    fn decided(&mut self, d: Result<Decision, leasebeat::Error>, now: u64) {
        let d = match d {
            Ok(d) => d,
            Err(_) => {
                self.errors += 1;
                let _ = self.hb.cancel(now);
                return;
            }
        };
        // D-15, from the core: every primary decision after the first
        // success carries `proven_until_ns`. A lease the core runs on the
        // fallback path has none (a fallback success proves nothing), so the
        // runner treats it as past any proven lead at once (instant 0).
        if d.outcome == OutcomeClass::Success {
            self.created = true;
        }
        if self.created {
            self.proven = Some(d.proven_until_ns.unwrap_or(0));
        }
        if let Some(m) = d.numbers.safety_margin().and_then(|n| n.finite()) {
            self.margin_ns = (m as u64).saturating_mul(MS);
        }
        self.last = Some(d);
    }

    fn id(&self) -> u64 {
        self.hb.attempt().map_or(0, |a| a.id)
    }
}

impl Strategy for Core {
    fn next(&self) -> Next<'_> {
        match self.hb.poll_action() {
            Action::Send(a) | Action::AwaitOutcome(a) => Next::Send {
                kind: a.kind,
                due_ns: a.due_ns.unwrap_or(u64::MAX),
                key: &a.key,
                body: &a.body,
            },
            Action::Stop(r) => Next::Stop(r.as_str()),
        }
    }

    fn sent(&mut self, now: u64) {
        if self.hb.handle_sent(self.id(), now).is_err() {
            self.errors += 1;
            let _ = self.hb.cancel(now);
        }
    }

    fn outcome(&mut self, observed: Observed, now: u64) {
        let id = self.id();
        let d = match observed {
            Observed::Failure(f) => self.hb.handle_failure(id, f, now),
            Observed::Response {
                status,
                retry_after,
                body,
            } => {
                let mut r = Response::new(status).body(body);
                if let Some(s) = retry_after {
                    r = r.header("Retry-After", s.to_string());
                }
                self.hb.handle_response(id, r, now)
            }
        };
        self.decided(d, now);
    }

    fn proven_until(&self) -> Option<u64> {
        self.proven
    }

    fn late_margin(&self) -> Option<u64> {
        Some(self.margin_ns)
    }

    fn core_errors(&self) -> u32 {
        self.errors
    }

    fn explain(&self) -> String {
        self.last
            .as_ref()
            .map_or_else(|| "(no decision)".to_owned(), |d| d.to_string())
    }
}

// ----- historical and alternate-beat: fixed ticks -----

/// Ticks every max(ttl/2, 1 s) from the create's receipt. Historical:
/// extends on every tick with a fresh key and ignores every outcome (the
/// SDKs logged failures and beat on; they never stopped). Alternate-beat:
/// extends on every other tick, retries a failure on the next tick with the
/// same key, and stops on a permanent error.
struct Ticker {
    ttl_ms: u64,
    interval_ns: u64,
    alternate: bool,
    keys: Keys,
    origin: u64,
    tick: u64,
    pending: Pending,
    stopped: Option<&'static str>,
}

impl Ticker {
    fn new(h: &History, alternate: bool) -> Ticker {
        let mut keys = Keys { n: 0 };
        let key = keys.fresh();
        let body = create_body(&key, h.ttl_ms);
        Ticker {
            ttl_ms: h.ttl_ms,
            interval_ns: (h.ttl_ms / 2).max(1_000) * MS,
            alternate,
            keys,
            origin: 0,
            tick: 0,
            pending: Pending {
                kind: AttemptKind::Create,
                due_ns: 0,
                key,
                body,
                sent_ns: 0,
            },
            stopped: None,
        }
    }

    /// Schedules the request for tick `tick + step`. A tick that already
    /// passed (the previous request was in flight, or the timer fired late)
    /// goes out at once, and the ticks it covered are not sent again.
    fn schedule(&mut self, now: u64, step: u64, same_key: bool) {
        let k = self.tick + step;
        let latest = now.saturating_sub(self.origin) / self.interval_ns;
        if k <= latest {
            self.tick = latest;
            self.pending.due_ns = now;
        } else {
            self.tick = k;
            self.pending.due_ns = self.origin + k * self.interval_ns;
        }
        self.pending.kind = AttemptKind::Extend;
        if !same_key {
            self.pending.key = self.keys.fresh();
            self.pending.body = extend_body(&self.pending.key, self.ttl_ms);
        }
    }
}

impl Strategy for Ticker {
    fn next(&self) -> Next<'_> {
        match self.stopped {
            Some(r) => Next::Stop(r),
            None => Next::Send {
                kind: self.pending.kind,
                due_ns: self.pending.due_ns,
                key: &self.pending.key,
                body: &self.pending.body,
            },
        }
    }

    fn sent(&mut self, now: u64) {
        self.pending.sent_ns = now;
    }

    fn outcome(&mut self, o: Observed, now: u64) {
        if self.pending.kind == AttemptKind::Create {
            if read_create(&o).is_none() {
                self.stopped = Some("create_failed");
                return;
            }
            self.origin = now;
            self.tick = 0;
            self.schedule(now, 1, false);
            return;
        }
        if !self.alternate {
            self.schedule(now, 1, false);
            return;
        }
        match read_extend(&o) {
            Read::Success { .. } => self.schedule(now, 2, false),
            Read::Transient | Read::Throttled(_) => self.schedule(now, 1, true),
            Read::Permanent(r) => self.stopped = Some(r),
            Read::Rejected => self.stopped = Some("rejected"),
        }
    }
}

// ----- etcd and Vault: a fixed fraction of the remaining lease -----

/// Beats at `num/den` of the remaining lease after each success (the
/// response's `remaining_ttl_ms`, else the requested ttl), retries a failed
/// beat with the same key after 1 s (after Retry-After if longer), stops on
/// a permanent error, and gives up by itself (`local_expiry`) when its own
/// clock passes receipt + remaining without a newer success, as etcd's
/// keep-alive deadline does.
struct Fraction {
    ttl_ms: u64,
    num: u64,
    den: u64,
    keys: Keys,
    pending: Pending,
    deadline: Option<u64>,
    stopped: Option<&'static str>,
}

impl Fraction {
    fn new(h: &History, num: u64, den: u64) -> Fraction {
        let mut keys = Keys { n: 0 };
        let key = keys.fresh();
        let body = create_body(&key, h.ttl_ms);
        Fraction {
            ttl_ms: h.ttl_ms,
            num,
            den,
            keys,
            pending: Pending {
                kind: AttemptKind::Create,
                due_ns: 0,
                key,
                body,
                sent_ns: 0,
            },
            deadline: None,
            stopped: None,
        }
    }

    fn success(&mut self, remaining: Option<u64>, now: u64) {
        let lease = remaining.unwrap_or(self.ttl_ms);
        self.deadline = Some(now.saturating_add(lease.saturating_mul(MS)));
        self.pending.kind = AttemptKind::Extend;
        self.pending.due_ns = now.saturating_add(lease * self.num / self.den * MS);
        self.pending.key = self.keys.fresh();
        self.pending.body = extend_body(&self.pending.key, self.ttl_ms);
    }
}

impl Strategy for Fraction {
    fn next(&self) -> Next<'_> {
        match self.stopped {
            Some(r) => Next::Stop(r),
            None => Next::Send {
                kind: self.pending.kind,
                due_ns: self.pending.due_ns,
                key: &self.pending.key,
                body: &self.pending.body,
            },
        }
    }

    fn sent(&mut self, now: u64) {
        self.pending.sent_ns = now;
    }

    fn outcome(&mut self, o: Observed, now: u64) {
        if self.pending.kind == AttemptKind::Create {
            match read_create(&o) {
                Some((remaining, _)) => self.success(remaining, now),
                None => self.stopped = Some("create_failed"),
            }
            return;
        }
        match read_extend(&o) {
            Read::Success { remaining, .. } => self.success(remaining, now),
            Read::Transient => self.pending.due_ns = now + 1_000 * MS,
            Read::Throttled(ra) => {
                self.pending.due_ns = now + ra.unwrap_or(1).max(1) * 1_000 * MS;
            }
            Read::Permanent(r) => self.stopped = Some(r),
            Read::Rejected => self.stopped = Some("rejected"),
        }
    }

    fn deadline(&self) -> Option<u64> {
        self.deadline
    }
}

// ----- the Python SDK's variant -----

/// runcycles 0.5.3 (`_AuthoritativeScheduler`): the primary algorithm in
/// floating-point milliseconds (rtt not rounded up), with the attempt budget
/// `(connect + read + 5 s)`; here connect + read is the history's budget, so
/// the arithmetic uses budget + 5 s while failures are still observed at the
/// transport's own timeout. Without `remaining_ttl_ms` it runs the SDK's
/// measured-grant fallback (cadence floor 500 ms). It has no jeopardy.
struct PySdk {
    ttl_ms: f64,
    budget_ms: f64,
    keys: Keys,
    pending: Pending,
    stopped: Option<&'static str>,
    rtt_max: f64,
    lead_floor: Option<f64>,
    anchor_ms: f64,
    zero_streak: u32,
    prev_fail_window: Option<f64>,
    // Fallback bookkeeping.
    fallback: bool,
    create_recv_ms: f64,
    grants: f64,
    last_grant: f64,
    last_expires: Option<u64>,
    last_success_ms: f64,
    cadence_ms: f64,
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

fn ns(ms: f64) -> u64 {
    if ms.is_finite() {
        (ms.max(0.0) * 1e6) as u64
    } else {
        u64::MAX
    }
}

impl PySdk {
    fn new(h: &History) -> PySdk {
        let mut keys = Keys { n: 0 };
        let key = keys.fresh();
        let body = create_body(&key, h.ttl_ms);
        PySdk {
            ttl_ms: h.ttl_ms as f64,
            budget_ms: h.budget_ms as f64 + 5_000.0,
            keys,
            pending: Pending {
                kind: AttemptKind::Create,
                due_ns: 0,
                key,
                body,
                sent_ns: 0,
            },
            stopped: None,
            rtt_max: 0.0,
            lead_floor: None,
            anchor_ms: 0.0,
            zero_streak: 0,
            prev_fail_window: None,
            fallback: false,
            create_recv_ms: 0.0,
            grants: 0.0,
            last_grant: 0.0,
            last_expires: None,
            last_success_ms: 0.0,
            cadence_ms: 0.0,
        }
    }

    fn attempt_budget(&self) -> f64 {
        self.budget_ms.max(1_000.0).max(2.0 * self.rtt_max)
    }

    fn margin(&self) -> f64 {
        1_000.0f64.max(2.0 * self.rtt_max)
    }

    fn hold(&self) -> f64 {
        (self.ttl_ms / 2.0).min(30_000.0)
    }

    fn fresh(&mut self, due_ms: f64) {
        self.pending.kind = AttemptKind::Extend;
        self.pending.due_ns = ns(due_ms);
        self.pending.key = self.keys.fresh();
        self.pending.body = extend_body(&self.pending.key, self.ttl_ms as u64);
    }

    fn primary_success(&mut self, remaining: u64, rtt: f64, now: f64) {
        self.fallback = false;
        self.rtt_max = self.rtt_max.max(rtt);
        let lead_floor = (remaining as f64 - rtt).max(0.0);
        self.prev_fail_window = None;
        self.lead_floor = Some(lead_floor);
        self.anchor_ms = now;
        let reserve = 2.0 * self.attempt_budget() + self.margin();
        let delay = lead_floor - reserve;
        if delay > 0.0 {
            self.zero_streak = 0;
            self.fresh(now + delay);
        } else {
            self.zero_streak += 1;
            if self.zero_streak >= 2 {
                self.stopped = Some("lease_too_short");
            } else {
                self.fresh(now);
            }
        }
    }

    fn fallback_success(&mut self, expires_at: Option<u64>, now: f64, first: bool) {
        self.fallback = true;
        if first {
            self.create_recv_ms = now;
            self.last_expires = expires_at;
            self.last_success_ms = now;
            self.cadence_ms = self.hold();
            self.fresh(now);
            return;
        }
        let grant = match (expires_at, self.last_expires) {
            (Some(e), Some(p)) => e as f64 - p as f64,
            _ => self.ttl_ms,
        };
        self.last_expires = expires_at.or(self.last_expires);
        let credited = grant.max(0.0);
        self.grants += credited;
        self.last_grant = credited;
        let elapsed = now - self.last_success_ms;
        self.last_success_ms = now;
        let clamped = grant <= 0.0
            || (grant < 0.9 * self.ttl_ms && 0.75 * elapsed <= grant && grant <= 1.25 * elapsed);
        self.cadence_ms = if clamped {
            self.hold()
        } else {
            (grant / 2.0).max(500.0).min(self.ttl_ms / 2.0)
        };
        // Skip beats while the lead bound at the due time stays >= 1.5 x grant.
        let mut due = now + self.cadence_ms;
        for _ in 0..1_000 {
            let lead_min = self.grants - (due - self.create_recv_ms);
            if self.last_grant > 0.0 && lead_min >= 1.5 * self.last_grant {
                due += self.cadence_ms;
            } else {
                break;
            }
        }
        self.fresh(due);
    }

    fn transient(&mut self, now: f64, throttled: Option<Option<u64>>) {
        if self.fallback {
            let wait = match throttled {
                Some(Some(s)) => self.cadence_ms.max(s as f64 * 1_000.0),
                Some(None) => {
                    self.stopped = Some("throttled");
                    return;
                }
                None => self.cadence_ms,
            };
            self.pending.due_ns = ns(now + wait);
            return;
        }
        let lead = match self.lead_floor {
            Some(l) => (l - (now - self.anchor_ms)).max(0.0),
            None => 0.0,
        };
        let window = lead - self.attempt_budget() - self.margin();
        if window < 0.0 {
            self.stopped = Some("retry_window_exhausted");
            return;
        }
        if self.prev_fail_window.is_some_and(|p| window >= p) {
            self.stopped = Some("no_progress");
            return;
        }
        self.prev_fail_window = Some(window);
        let delay = match throttled {
            Some(ra) => match ra.map(|s| s as f64 * 1_000.0) {
                Some(ra) if ra <= window => ra,
                _ => {
                    self.stopped = Some("throttled");
                    return;
                }
            },
            None => 30_000.0f64.min(lead / 4.0).min(window),
        };
        self.pending.due_ns = ns(now + delay);
    }
}

impl Strategy for PySdk {
    fn next(&self) -> Next<'_> {
        match self.stopped {
            Some(r) => Next::Stop(r),
            None => Next::Send {
                kind: self.pending.kind,
                due_ns: self.pending.due_ns,
                key: &self.pending.key,
                body: &self.pending.body,
            },
        }
    }

    fn sent(&mut self, now: u64) {
        self.pending.sent_ns = now;
    }

    fn outcome(&mut self, o: Observed, now: u64) {
        let rtt = ms(now - self.pending.sent_ns);
        let now = ms(now);
        if self.pending.kind == AttemptKind::Create {
            match read_create(&o) {
                Some((Some(remaining), _)) => self.primary_success(remaining, rtt, now),
                Some((None, expires)) => self.fallback_success(expires, now, true),
                None => self.stopped = Some("create_failed"),
            }
            return;
        }
        match read_extend(&o) {
            Read::Success {
                remaining: Some(r),
                expires_at,
            } => {
                self.last_expires = Some(expires_at);
                self.primary_success(r, rtt, now)
            }
            Read::Success {
                remaining: None,
                expires_at,
            } => self.fallback_success(Some(expires_at), now, false),
            Read::Transient => self.transient(now, None),
            Read::Throttled(ra) => self.transient(now, Some(ra)),
            Read::Permanent(r) => self.stopped = Some(r),
            Read::Rejected => self.stopped = Some("rejected"),
        }
    }
}

/// The stop reasons a table lists, in order: the core's, then the
/// simulator's own (`local_expiry`).
pub fn stop_reasons() -> Vec<&'static str> {
    let mut v: Vec<&'static str> = StopReason::ALL.iter().map(|r| r.as_str()).collect();
    v.push("local_expiry");
    v
}
