//! The timer thread and its worker pool.
//!
//! Scheduling is driven by two binary heaps with lazy deletion, so the work
//! of one wake-up is `O(k log n)` for the `k` entries that fire, never a scan
//! of all `n` leases:
//!
//! * the **beat heap** holds each lease's next extend, keyed by its due time
//!   (fired early by the measured timer slack);
//! * the **watch heap** holds the jeopardy checks (D-15), keyed by the exact
//!   instant they apply: `proven_until` of the last primary success (0,
//!   i.e. at once, for a fallback decision after the first success: the
//!   fallback path proves nothing), `due + safety_margin` of the
//!   scheduled beat (a beat not sent by then is late), and the first create
//!   attempt's send instant plus the TTL (a create still unresolved then
//!   may have left a reservation on the server that is expiring unseen).
//!
//! Every entry carries a generation number; an entry whose generation no
//! longer matches its lease's (a newer decision, a stop) is dropped when it
//! surfaces. New creates wait in a FIFO and are sent only while fewer than
//! `max_workers` attempts are outstanding, after every due beat: when the
//! driver is behind, it sheds new work (creates), never beats of live leases.
//! The same-key retry of a failed create is not new work (the server may
//! hold its reservation already): it goes into the beat heap like any beat.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use super::jn::{Jn, ReplayOut};
use super::settle::{
    self, Disposition, EventBody, FailurePolicy, HeartbeatFailure, LeaseOptions, PendingShared,
    SettleAttemptReport, SettleResult, Usage,
};
use super::{
    ApiKey, AttemptReport, BaseUrl, Command, DriverError, Event, JeopardyReason, LeaseHandle,
    Outcome, PendingCreate, Start, clock, http,
};
use crate::{
    Action, AttemptKind, Decision, ErrorKind, Heartbeat, KeyUse, Next, Now, Num, OutcomeClass,
    RecordUpdate, Response, RetryPolicy, Settlement, SettlementAction, SettlementConfig,
    SettlementDecision, StopReason, TransportFailure,
};

const MIN_TIMER_SLACK_NS: u64 = 200_000;
const MAX_TIMER_SLACK_NS: u64 = 20_000_000;
const INITIAL_TIMER_SLACK_NS: u64 = 1_000_000;
/// Commands handled per wake-up before the heaps are looked at again.
const COMMAND_BATCH: usize = 256;
/// Within a batch, how often (in commands) the timer checks whether a beat
/// has fallen due, so a burst of completions does not delay it.
const DUE_CHECK_EVERY: usize = 8;
/// The timer slack decays by 1/8 once per this interval (not per wake-up:
/// at thousands of wake-ups per second a per-wake-up decay forgets a
/// scheduling hiccup within milliseconds, and the next one makes beats late).
const SLACK_DECAY_NS: u64 = 100_000_000;
/// `Slot::proven_queued_ns` when no watch entry is queued (entries are
/// queued only for finite instants).
const NOT_QUEUED: u64 = u64::MAX;
/// The safety margin assumed before any decision carried one (its floor).
const DEFAULT_MARGIN_MS: u64 = 1_000;

/// The outcome of one HTTP exchange, sent back by a worker.
pub(crate) struct Completion {
    lease: LeaseHandle,
    attempt_id: u64,
    result: Result<Response, TransportFailure>,
    observed_ns: u64,
    /// The attempt was a settlement's (not a beat's).
    settle: bool,
}

struct HttpJob {
    lease: LeaseHandle,
    attempt_id: u64,
    url: String,
    key: String,
    body: Vec<u8>,
    deadline_ns: u64,
    settle: bool,
}

/// Work for the pool: an HTTP exchange, or a journal call (which blocks on
/// fsync and so never runs on the timer thread).
enum Job {
    Http(HttpJob),
    Persist(LeaseHandle, Box<Settlement>),
    Finish(LeaseHandle, Box<Settlement>),
    Replay(RetryPolicy),
}

struct Pool {
    jobs: Option<Sender<Job>>,
    queue: Arc<Mutex<Receiver<Job>>>,
    idle: Arc<AtomicUsize>,
    workers: Vec<JoinHandle<()>>,
    max: usize,
    agent: ureq::Agent,
    api_key: ApiKey,
    done: Sender<Command>,
    journal: Option<Arc<Jn>>,
}

impl Pool {
    fn submit(&mut self, job: Job) -> Result<(), Job> {
        if self.idle.load(Ordering::SeqCst) == 0 && self.workers.len() < self.max {
            self.spawn();
        }
        match &self.jobs {
            Some(tx) => tx.send(job).map_err(|e| e.0),
            None => Err(job),
        }
    }

    fn spawn(&mut self) {
        let queue = Arc::clone(&self.queue);
        let idle = Arc::clone(&self.idle);
        let agent = self.agent.clone();
        let api_key = self.api_key.clone();
        let done = self.done.clone();
        let journal = self.journal.clone();
        let n = self.workers.len();
        let spawned = std::thread::Builder::new()
            .name(format!("leasebeat-worker-{n}"))
            .stack_size(256 * 1024)
            .spawn(move || worker(&queue, &idle, &agent, &api_key, &done, journal.as_deref()));
        match spawned {
            Ok(h) => self.workers.push(h),
            Err(e) => {
                tracing::error!(target: "leasebeat::driver", error = %e, "cannot spawn a worker")
            }
        }
    }

    fn join(&mut self) {
        self.jobs = None;
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

fn worker(
    queue: &Mutex<Receiver<Job>>,
    idle: &AtomicUsize,
    agent: &ureq::Agent,
    api_key: &ApiKey,
    done: &Sender<Command>,
    journal: Option<&Jn>,
) {
    loop {
        idle.fetch_add(1, Ordering::SeqCst);
        let job = {
            let rx = match queue.lock() {
                Ok(rx) => rx,
                Err(poisoned) => poisoned.into_inner(),
            };
            rx.recv()
        };
        idle.fetch_sub(1, Ordering::SeqCst);
        let job = match job {
            Ok(Job::Http(job)) => job,
            Ok(Job::Persist(lease, mut s)) => {
                let result = match journal {
                    Some(j) => j.persist(&mut s, clock::now_ns()),
                    None => s.handle_persisted(clock::now_ns()),
                };
                let _ = done.send(Command::Persisted(lease, s, result));
                continue;
            }
            Ok(Job::Finish(lease, s)) => {
                let error = journal.and_then(|j| j.finish(&s).err());
                let _ = done.send(Command::Finished(lease, s, error));
                continue;
            }
            Ok(Job::Replay(retry)) => {
                let result = match journal {
                    Some(j) => j.replay(retry, Now::new(clock::now_ns(), settle::wall_ms())),
                    None => Err("the driver has no journal".to_owned()),
                };
                let _ = done.send(Command::Replayed(result));
                continue;
            }
            Err(_) => return,
        };
        let now = clock::now_ns();
        let (result, observed_ns) = if now >= job.deadline_ns {
            // Queued past its deadline (every worker busy): a timeout.
            (Err(TransportFailure::Timeout), now)
        } else {
            let timeout = Duration::from_nanos(job.deadline_ns - now);
            http::post(
                agent,
                &job.url,
                api_key.expose(),
                Some(&job.key),
                &job.body,
                timeout,
            )
        };
        let completion = Completion {
            lease: job.lease,
            attempt_id: job.attempt_id,
            result,
            observed_ns,
            settle: job.settle,
        };
        // The timer may be gone (shutdown): the outcome is then moot.
        let _ = done.send(Command::Done(completion));
    }
}

/// The driver's own state for one lease (besides the core's heartbeat).
struct Slot {
    base: BaseUrl,
    hb: Heartbeat,
    /// An attempt is in flight (the heartbeat holds it: its report is
    /// built from `hb.attempt()` when its outcome arrives, not kept here).
    in_flight: bool,
    /// Generation of the scheduled send (bumped by every decision).
    send_gen: u32,
    /// Generation of `proven_until` (bumped by every primary success).
    proven_gen: u32,
    /// Due time of the scheduled send (driver clock, ns).
    due_ns: u64,
    /// The scheduled send is a beat after a success, which may leave early
    /// by the timer slack. A retry (after a failure: its delay may be a
    /// server's Retry-After, its window small) leaves exactly at its due time.
    early_ok: bool,
    /// The safety margin of the last decision that carried one (ms).
    margin_ms: u64,
    /// D-15: the proven lead of the last primary success, if any.
    proven_until_ns: Option<u64>,
    /// The instant the `proven_until_reached` watch is armed for: the
    /// decision's `proven_until`, or 0 for a decision without one after the
    /// lease's first success (the fallback path proves nothing, so its proven
    /// lead is already reached).
    proven_watch_ns: Option<u64>,
    /// The lease has had its first success.
    succeeded: bool,
    /// A `late_beat` jeopardy was reported for the scheduled send.
    late_reported: bool,
    /// A `proven_until_reached` jeopardy was reported for `proven_until_ns`.
    proven_reported: bool,
    /// The earliest `Watch::Proven` entry of this lease in the watch heap.
    /// A lease keeps about one such entry: a later instant does not push a
    /// new one; the queued entry re-queues itself at the armed instant when
    /// it surfaces early (see `Timer::queue_proven`). [`NOT_QUEUED`] when
    /// there is none.
    proven_queued_ns: u64,
}

/// A lease's options beyond the defaults (allocated only when given).
pub(crate) struct LeaseExtra {
    event: Option<EventBody>,
    policy: FailurePolicy,
}

impl LeaseExtra {
    pub(crate) fn of(o: LeaseOptions) -> Option<Box<LeaseExtra>> {
        if o.event.is_none() && matches!(o.policy, FailurePolicy::Warn) {
            return None;
        }
        Some(Box::new(LeaseExtra {
            event: o.event,
            policy: o.policy,
        }))
    }
}

/// What the driver keeps of a stopped lease with a reservation, so that
/// it can still be settled.
struct EndedLease {
    reservation_id: String,
    base: BaseUrl,
    event: Option<EventBody>,
    /// The heartbeat's stop, when the policy is `fail_on_finalize`.
    failure: Option<HeartbeatFailure>,
    fail_on_finalize: bool,
}

/// Who a settlement request is for.
pub(crate) enum SettleTarget {
    /// A lease of this driver (running or stopped).
    Lease(LeaseHandle),
    /// A reservation held elsewhere, under this fresh handle.
    Reservation(LeaseHandle, String),
}

/// What a settlement request does.
pub(crate) enum SettleKind {
    Commit {
        usage: Usage,
        event: Option<EventBody>,
    },
    Release {
        reason: Option<String>,
    },
}

pub(crate) struct SettleRequest {
    pub(crate) target: SettleTarget,
    pub(crate) kind: SettleKind,
    pub(crate) ack: Sender<Result<LeaseHandle, DriverError>>,
    pub(crate) result: Sender<SettleResult>,
}

/// The settlement settings of a driver.
pub(crate) struct SettleSetup {
    pub(crate) journal: Option<Arc<Jn>>,
    pub(crate) retry: RetryPolicy,
    pub(crate) budget_ms: u64,
    pub(crate) base: BaseUrl,
    pub(crate) pending: PendingShared,
    pub(crate) next_lease: Arc<std::sync::atomic::AtomicU64>,
    pub(crate) replay: bool,
}

/// One settlement in progress.
struct SettleSlot {
    /// `None` while a worker holds it (persist, finish).
    s: Option<Box<Settlement>>,
    reservation_id: String,
    base: BaseUrl,
    /// The lease's heartbeat may still run: stop it on `stop_heartbeat`.
    heartbeat: bool,
    fail_on_finalize: bool,
    hb_failure: Option<HeartbeatFailure>,
    /// The settlement goes through the journal (one is open and the
    /// settlement keeps a record): persists and the final `finish`.
    journaled: bool,
    /// A record of it is on disk: a persist succeeded, or it was replayed
    /// from one. A failed first write (SP-3) leaves this false: nothing is
    /// reported journaled or kept that the disk does not hold.
    written: bool,
    replayed: bool,
    decisions: Vec<SettlementDecision>,
    reply: Option<Sender<SettleResult>>,
    last_ns: u64,
    /// The attempt in flight.
    sent: Option<SettleAttemptReport>,
    journal_error: Option<String>,
}

impl Slot {
    /// A new lease's slot: nothing sent or watched yet, its first send due
    /// at `due_ns`.
    fn new(base: BaseUrl, hb: Heartbeat, due_ns: u64) -> Slot {
        Slot {
            base,
            hb,
            in_flight: false,
            send_gen: 0,
            proven_gen: 0,
            due_ns,
            margin_ms: DEFAULT_MARGIN_MS,
            proven_until_ns: None,
            proven_watch_ns: None,
            succeeded: false,
            late_reported: false,
            proven_reported: false,
            proven_queued_ns: NOT_QUEUED,
            early_ok: false,
        }
    }

    /// D-15 is the core's: the driver only watches the instant a decision
    /// carries. After the lease's first success, a decision without one
    /// (the fallback path: it proves nothing) counts as proven until 0, i.e.
    /// reached at once. A newer primary success (or a changed instant)
    /// re-arms the watch; a failure, a cancel or another fallback decision
    /// leaves it as it was (reported once). Returns the instant to watch and
    /// its generation when re-armed.
    fn rearm_proven(&mut self, success: bool, proven: Option<u64>) -> Option<(u64, u32)> {
        self.succeeded |= success;
        let watch_at = proven.or(self.succeeded.then_some(0));
        if !(success && proven.is_some()) && watch_at == self.proven_watch_ns {
            return None;
        }
        self.proven_gen = self.proven_gen.wrapping_add(1);
        self.proven_until_ns = proven;
        self.proven_watch_ns = watch_at;
        self.proven_reported = false;
        watch_at
            .filter(|p| *p != u64::MAX)
            .map(|p| (p, self.proven_gen))
    }
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Watch {
    /// `proven_until` reached (ordered first at equal times).
    Proven,
    /// The scheduled beat is later than due + safety margin.
    Late,
    /// The first create attempt's send instant plus the TTL: the create is
    /// still unresolved (no success, no stop).
    Create,
}

/// (time ns, lease, generation)
type BeatEntry = Reverse<(u64, u64, u32)>;
/// (time ns, what, lease, generation)
type WatchEntry = Reverse<(u64, Watch, u64, u32)>;

pub(crate) struct Timer {
    commands: Receiver<Command>,
    events: Sender<Event>,
    /// Boxed: a map's spare buckets then cost a pointer each, not a
    /// whole slot (the heartbeat is about 1 KB inline).
    leases: HashMap<LeaseHandle, Box<Slot>>,
    beats: BinaryHeap<BeatEntry>,
    watches: BinaryHeap<WatchEntry>,
    creates: VecDeque<(LeaseHandle, u32)>,
    /// Leases started from a configuration whose create has not gone out:
    /// the heartbeat is built when it does (its place in `creates` has
    /// generation 0). Built here, on the timer thread, the heartbeat and its
    /// create body come from this thread's allocator arena; built by the
    /// caller while the creates queue up, 100,000 of them left the caller's
    /// arena holding tens of MB of freed pages.
    pending: HashMap<LeaseHandle, (BaseUrl, PendingCreate, Option<Box<LeaseExtra>>)>,
    /// Sends deferred by the test hold (see `Command::HoldSends`).
    held: Vec<(LeaseHandle, u32)>,
    hold: bool,
    outstanding: usize,
    max_workers: usize,
    pool: Pool,
    slack_ns: u64,
    /// When the slack next decays (driver clock, ns).
    slack_decay_at_ns: u64,
    max_wait: Duration,
    /// Lease options other than the defaults (event body, HP-1 policy), by
    /// lease: kept beside the slots, so a slot stays small.
    extras: HashMap<LeaseHandle, Box<LeaseExtra>>,
    /// Event bodies shared by the leases that have the same one (at most 64).
    event_bodies: Vec<EventBody>,
    /// Settlements in progress, by lease.
    settles: HashMap<LeaseHandle, Box<SettleSlot>>,
    /// Due settlement attempts: (due ns, lease, attempt id).
    settle_due: BinaryHeap<Reverse<(u64, u64, u64)>>,
    /// Stopped leases with a reservation, not settled yet.
    ended: HashMap<LeaseHandle, EndedLease>,
    setup: Option<SettleSetup>,
}

/// Percent-encodes a path segment (everything but RFC 3986 unreserved).
pub(crate) fn encode_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn ms_to_ns(ms: u64) -> u64 {
    ms.saturating_mul(1_000_000)
}

fn num_ms(n: Option<Num>) -> Option<u64> {
    match n? {
        Num::Int(v) => Some(u64::try_from(v.max(0)).unwrap_or(u64::MAX)),
        Num::Inf => Some(u64::MAX),
        Num::NegInf => Some(0),
    }
}

impl Timer {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        api_key: ApiKey,
        agent: ureq::Agent,
        max_workers: usize,
        max_wait_ms: u64,
        done: Sender<Command>,
        commands: Receiver<Command>,
        events: Sender<Event>,
    ) -> Timer {
        let (jobs, queue) = mpsc::channel();
        Timer {
            commands,
            events,
            leases: HashMap::new(),
            beats: BinaryHeap::new(),
            watches: BinaryHeap::new(),
            creates: VecDeque::new(),
            pending: HashMap::new(),
            held: Vec::new(),
            hold: false,
            outstanding: 0,
            max_workers,
            pool: Pool {
                jobs: Some(jobs),
                queue: Arc::new(Mutex::new(queue)),
                idle: Arc::new(AtomicUsize::new(0)),
                workers: Vec::new(),
                max: max_workers,
                agent,
                api_key,
                done,
                journal: None,
            },
            slack_ns: INITIAL_TIMER_SLACK_NS,
            slack_decay_at_ns: 0,
            max_wait: Duration::from_millis(max_wait_ms),
            extras: HashMap::new(),
            event_bodies: Vec::new(),
            settles: HashMap::new(),
            settle_due: BinaryHeap::new(),
            ended: HashMap::new(),
            setup: None,
        }
    }

    /// One shared copy of an event body (leases of one kind of work share it).
    fn intern_event(&mut self, body: EventBody) -> EventBody {
        if let Some(b) = self.event_bodies.iter().find(|b| b.0 == body.0) {
            return b.clone();
        }
        if self.event_bodies.len() < 64 {
            self.event_bodies.push(body.clone());
        }
        body
    }

    /// Takes the settlement settings; queues the start replay.
    pub(crate) fn configure_settlements(&mut self, setup: SettleSetup) {
        self.pool.journal = setup.journal.clone();
        let replay = setup.replay.then_some(setup.retry);
        self.setup = Some(setup);
        if let Some(retry) = replay {
            self.submit_side(Job::Replay(retry));
        }
    }

    /// When the timer must next wake up (driver clock, ns), if anything is
    /// scheduled: the earliest beat (early by the slack) or watch.
    fn next_wake(&self) -> Option<u64> {
        let beat = self.beat_fire_at();
        let watch = self.watches.peek().map(|Reverse((t, _, _, _))| *t);
        let create =
            (!self.creates.is_empty() && !self.hold && self.outstanding < self.max_workers)
                .then_some(0);
        let settle = self.settle_due.peek().map(|Reverse((t, _, _))| *t);
        [beat, watch, create, settle].into_iter().flatten().min()
    }

    /// When the earliest beat entry fires: its due time minus the slack,
    /// or exactly its due time for a live retry.
    fn beat_fire_at(&self) -> Option<u64> {
        let Reverse((t, lease, generation)) = *self.beats.peek()?;
        let retry = self
            .leases
            .get(&LeaseHandle(lease))
            .is_some_and(|s| s.send_gen == generation && !s.early_ok);
        Some(if retry {
            t
        } else {
            t.saturating_sub(self.slack_ns)
        })
    }

    /// Whether a beat (early by the slack, a retry at its due time) or a
    /// watch is due at `now`.
    fn something_due(&self, now: u64) -> bool {
        self.beat_fire_at().is_some_and(|t| t <= now)
            || self
                .settle_due
                .peek()
                .is_some_and(|Reverse((t, _, _))| *t <= now)
            || self
                .watches
                .peek()
                .is_some_and(|Reverse((t, _, _, _))| *t <= now)
    }

    /// The slack is the largest recent delay between the instant the timer
    /// meant to act and the instant it did (an oversleep, or a beat sent
    /// late), decaying by 1/8 every [`SLACK_DECAY_NS`].
    fn raise_slack(&mut self, delay_ns: u64) {
        let now = clock::now_ns();
        if now >= self.slack_decay_at_ns {
            self.slack_ns -= self.slack_ns / 8;
            self.slack_decay_at_ns = now.saturating_add(SLACK_DECAY_NS);
        }
        self.slack_ns = self
            .slack_ns
            .max(delay_ns)
            .clamp(MIN_TIMER_SLACK_NS, MAX_TIMER_SLACK_NS);
    }

    pub(crate) fn run(mut self) {
        'outer: loop {
            self.fire_due();
            let now = clock::now_ns();
            let next = self.next_wake();
            let wait = match next {
                Some(t) => Duration::from_nanos(t.saturating_sub(now)).min(self.max_wait),
                None => self.max_wait,
            };
            match self.commands.recv_timeout(wait) {
                Ok(Command::Shutdown) | Err(RecvTimeoutError::Disconnected) => break,
                Ok(cmd) => {
                    self.handle(cmd);
                    // Drain a batch: many completions arrive together; stop
                    // early when a beat or a watch falls due meanwhile.
                    for i in 1..=COMMAND_BATCH {
                        if i % DUE_CHECK_EVERY == 0 && self.something_due(clock::now_ns()) {
                            break;
                        }
                        match self.commands.try_recv() {
                            Ok(Command::Shutdown) | Err(TryRecvError::Disconnected) => {
                                break 'outer;
                            }
                            Ok(cmd) => self.handle(cmd),
                            Err(TryRecvError::Empty) => break,
                        }
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    if next.is_some() && !wait.is_zero() {
                        let over = clock::now_ns().saturating_sub(now + wait.as_nanos() as u64);
                        self.raise_slack(over);
                    }
                }
            }
        }
        let handles: Vec<LeaseHandle> = self
            .leases
            .keys()
            .chain(self.pending.keys())
            .copied()
            .collect();
        for lease in handles {
            self.cancel(lease);
        }
        self.pool.join();
        // Settlements still under way stop here: their records stay in the
        // journal (the next replay settles them); their waiters get `None`.
        if let Some(setup) = &self.setup {
            let mut p = settle::pending_lock(&setup.pending);
            p.ids.clear();
            p.replaying = 0;
            drop(p);
            setup.pending.1.notify_all();
        }
        if let Some(j) = self.setup.as_ref().and_then(|s| s.journal.as_ref()) {
            for slot in self.settles.values() {
                j.release_claim(&slot.reservation_id);
            }
        }
        self.settles.clear();
    }

    fn handle(&mut self, cmd: Command) {
        match cmd {
            Command::Start(lease, base, Start::Heartbeat(hb), extra) => {
                self.install(lease, base, *hb, true, extra);
            }
            Command::Start(lease, base, Start::Config(config), extra) => {
                tracing::debug!(target: "leasebeat::driver", %lease, "start (queued)");
                self.pending
                    .insert(lease, (base, config.relocated(), extra));
                self.creates.push_back((lease, 0));
            }
            Command::Settle(req) => self.start_settle(*req),
            Command::Persisted(lease, s, result) => self.persisted(lease, s, result),
            Command::Finished(lease, s, error) => self.finished(lease, s, error),
            Command::Replayed(result) => self.replayed(result),
            Command::Replay => {
                if let Some(retry) = self.setup.as_ref().map(|s| s.retry) {
                    self.submit_side(Job::Replay(retry));
                }
            }
            Command::Cancel(lease) => self.cancel(lease),
            Command::Forget(lease) => {
                // A settlement in progress keeps its lease (its heartbeat runs
                // until a decision says stop, ST-11); it is dropped at its end.
                if !self.settles.contains_key(&lease) {
                    self.cancel(lease);
                    self.ended.remove(&lease);
                }
            }
            Command::Done(c) => {
                self.outstanding = self.outstanding.saturating_sub(1);
                if c.settle {
                    self.settle_complete(c);
                } else {
                    self.complete(c);
                }
            }
            Command::HoldSends(hold) => {
                self.hold = hold;
                if !hold {
                    let now = clock::now_ns();
                    for (lease, generation) in std::mem::take(&mut self.held) {
                        self.beats.push(Reverse((now, lease.0, generation)));
                    }
                }
            }
            Command::Shutdown => {}
        }
    }

    /// Takes a heartbeat into the driver: its slot, the proven_until watch an
    /// adopted create's decision seeds, and its first send, queued (`queue`)
    /// or armed for the caller to dispatch at once (a create built when its
    /// turn came).
    fn install(
        &mut self,
        lease: LeaseHandle,
        base: BaseUrl,
        hb: Heartbeat,
        queue: bool,
        extra: Option<Box<LeaseExtra>>,
    ) {
        tracing::debug!(target: "leasebeat::driver", %lease, "start");
        // A heartbeat that has not decided yet (a create, or the first
        // extension of an adopted reservation) asks for its first send "at
        // 0", i.e. at once: that is now on the driver's clock, not its
        // instant 0, or an on-time first beat would look late (a false
        // `late_beat`) and inflate the timer slack.
        // `None`: +infinity (a decided heartbeat whose next send never
        // falls due).
        let due_ns = match hb.last_decision() {
            Some(_) => hb.poll_timeout(),
            None => Some(clock::now_ns().max(hb.last_event_ns())),
        };
        let kind = match hb.poll_action() {
            Action::Send(a) => a.kind,
            _ => AttemptKind::Create,
        };
        // A heartbeat that already decided (an adopted create): its
        // last decision seeds the proven_until watch.
        let seed = hb
            .last_decision()
            .filter(|d| d.stop_reason().is_none())
            .map(|d| (d.outcome == OutcomeClass::Success, d.proven_until_ns));
        let mut slot = Box::new(Slot::new(base, hb, due_ns.unwrap_or(u64::MAX)));
        if let Some(extra) = extra {
            self.extras.insert(lease, extra);
        }
        let armed = seed.and_then(|(success, proven)| slot.rearm_proven(success, proven));
        self.leases.insert(lease, slot);
        if let Some((at, _)) = armed {
            self.queue_proven(lease, at);
        }
        let early_ok = seed.is_some_and(|(success, _)| success);
        if queue {
            self.schedule_send(lease, kind, due_ns, early_ok);
        } else {
            self.arm_send(lease, due_ns, early_ok);
        }
    }

    /// Builds the heartbeat of a lease started from a configuration (checked
    /// by `Driver::start`), with its first send armed, not queued. False
    /// (reported as an error and a stop) if the core refused it anyway.
    fn build(
        &mut self,
        lease: LeaseHandle,
        base: BaseUrl,
        config: PendingCreate,
        extra: Option<Box<LeaseExtra>>,
    ) -> bool {
        match config.into_config().and_then(Heartbeat::new) {
            Ok(hb) => {
                self.install(lease, base, hb, false, extra);
                true
            }
            Err(error) => {
                tracing::error!(target: "leasebeat::driver", %lease, error = %error,
                    "core refused a configuration");
                let _ = self.events.send(Event::Error {
                    lease,
                    reservation_id: None,
                    error,
                });
                let _ = self.events.send(Event::Stopped {
                    lease,
                    reservation_id: None,
                    reason: crate::StopReason::Cancelled,
                    at_ns: clock::now_ns(),
                });
                false
            }
        }
    }

    /// Queues the lease's next send (after a decision or a start): creates
    /// go to the FIFO, extends to the beat heap with a late-beat watch.
    fn schedule_send(
        &mut self,
        lease: LeaseHandle,
        kind: AttemptKind,
        at_ns: Option<u64>,
        early_ok: bool,
    ) {
        let Some((at, generation)) = self.arm_send(lease, at_ns, early_ok) else {
            return;
        };
        match kind {
            AttemptKind::Create => self.creates.push_back((lease, generation)),
            // The late-beat check rides on the beat itself: the timer
            // thread pops a beat and sends it in the same pass, and
            // `dispatch` reports `late_beat` when that is past due + margin.
            // Only a beat that is popped but *not* sent (the test hold)
            // gets a watch of its own, in `fire_due`.
            AttemptKind::Extend => self.beats.push(Reverse((at, lease.0, generation))),
        }
    }

    /// Records the lease's next send in its slot (a new generation, its due
    /// time) and returns (due, generation), or `None` if it is never due.
    fn arm_send(
        &mut self,
        lease: LeaseHandle,
        at_ns: Option<u64>,
        early_ok: bool,
    ) -> Option<(u64, u32)> {
        let slot = self.leases.get_mut(&lease)?;
        slot.early_ok = early_ok;
        slot.send_gen = slot.send_gen.wrapping_add(1);
        slot.late_reported = false;
        let Some(at) = at_ns else {
            // +infinity: never due.
            slot.due_ns = u64::MAX;
            return None;
        };
        slot.due_ns = at;
        Some((at, slot.send_gen))
    }

    fn fire_due(&mut self) {
        let now = clock::now_ns();
        // Jeopardy first: it is reported before anything else happens.
        while let Some(Reverse((t, what, lease, generation))) = self.watches.peek().copied() {
            if t > now {
                break;
            }
            self.watches.pop();
            self.watch(LeaseHandle(lease), what, generation, t, now);
        }
        // Beats of live leases, earliest due first.
        while let Some(Reverse((t, lease, generation))) = self.beats.peek().copied() {
            if self.beat_fire_at().is_none_or(|f| f > now) {
                break;
            }
            self.beats.pop();
            let lease = LeaseHandle(lease);
            if self
                .leases
                .get(&lease)
                .is_none_or(|s| s.send_gen != generation || s.in_flight)
            {
                continue;
            }
            if self.hold {
                self.held.push((lease, generation));
                if let Some(slot) = self.leases.get(&lease) {
                    let late_at = t.saturating_add(ms_to_ns(slot.margin_ms)).saturating_add(1);
                    if late_at != u64::MAX {
                        self.watches
                            .push(Reverse((late_at, Watch::Late, lease.0, generation)));
                    }
                }
                continue;
            }
            self.dispatch(lease);
        }
        // Settlement attempts that fell due (known usage: never shed).
        while let Some(Reverse((t, lease, attempt_id))) = self.settle_due.peek().copied() {
            if t > now {
                break;
            }
            self.settle_due.pop();
            self.settle_send(LeaseHandle(lease), attempt_id);
        }
        // Then new work, only while the pool keeps up.
        while !self.hold && self.outstanding < self.max_workers {
            let Some((lease, generation)) = self.creates.pop_front() else {
                break;
            };
            if let Some((base, config, extra)) = self.pending.remove(&lease) {
                if self.build(lease, base, config, extra) {
                    self.dispatch(lease);
                }
                continue;
            }
            if self
                .leases
                .get(&lease)
                .is_some_and(|s| s.send_gen == generation && !s.in_flight)
            {
                self.dispatch(lease);
            }
        }
        // The FIFO held a whole ramp-up: give its buffer back once drained.
        if self.creates.is_empty() && self.creates.capacity() > 1024 {
            self.creates = VecDeque::new();
        }
        if self.pending.is_empty() && self.pending.capacity() > 1024 {
            self.pending = HashMap::new();
        }
    }

    /// Makes sure a `Watch::Proven` entry at or before `at` is queued for the
    /// lease (at most one new entry; none if one is already queued earlier).
    fn queue_proven(&mut self, lease: LeaseHandle, at: u64) {
        let Some(slot) = self.leases.get_mut(&lease) else {
            return;
        };
        if slot.proven_queued_ns != NOT_QUEUED && slot.proven_queued_ns <= at {
            return;
        }
        slot.proven_queued_ns = at;
        self.watches
            .push(Reverse((at, Watch::Proven, lease.0, slot.proven_gen)));
    }

    fn watch(&mut self, lease: LeaseHandle, what: Watch, generation: u32, at: u64, now: u64) {
        let Some(slot) = self.leases.get_mut(&lease) else {
            return;
        };
        let reason = match what {
            Watch::Proven => {
                // `generation` is not needed: the slot's armed instant is
                // the truth; this entry only wakes the check up.
                let _ = generation;
                if slot.proven_queued_ns == at {
                    slot.proven_queued_ns = NOT_QUEUED;
                }
                let armed = slot.proven_watch_ns.filter(|w| *w != u64::MAX);
                match armed {
                    None => return,
                    Some(_) if slot.proven_reported => return,
                    Some(w) if w > now => {
                        // Re-armed later since this entry was queued.
                        self.queue_proven(lease, w);
                        return;
                    }
                    Some(_) => {}
                }
                slot.proven_reported = true;
                JeopardyReason::ProvenUntilReached
            }
            Watch::Late => {
                if slot.send_gen != generation || slot.in_flight || slot.late_reported {
                    return;
                }
                slot.late_reported = true;
                JeopardyReason::LateBeat
            }
            Watch::Create => {
                // Resolved: a success proved the lease (a stop removed the
                // slot, so the lookup above already returned).
                if slot.succeeded {
                    return;
                }
                JeopardyReason::CreateUnresolved
            }
        };
        self.jeopardy(lease, reason, now);
    }

    fn jeopardy(&mut self, lease: LeaseHandle, reason: JeopardyReason, now: u64) {
        let Some(slot) = self.leases.get(&lease) else {
            return;
        };
        let reservation_id = slot.hb.reservation_id().map(str::to_owned);
        tracing::warn!(target: "leasebeat::driver", %lease,
            reservation_id = reservation_id.as_deref().unwrap_or(""),
            reason = reason.as_str(), "lease_in_jeopardy");
        let _ = self.events.send(Event::Jeopardy {
            lease,
            reservation_id,
            reason,
            at_ns: now,
            due_ns: (slot.due_ns != u64::MAX).then_some(slot.due_ns),
            proven_until_ns: slot.proven_until_ns,
        });
    }

    fn url(slot: &Slot, kind: AttemptKind) -> String {
        match kind {
            AttemptKind::Create => format!("{}/v1/reservations", slot.base),
            AttemptKind::Extend => format!(
                "{}/v1/reservations/{}/extend",
                slot.base,
                encode_segment(slot.hb.reservation_id().unwrap_or_default())
            ),
        }
    }

    fn dispatch(&mut self, lease: LeaseHandle) {
        let Some(slot) = self.leases.get(&lease) else {
            return;
        };
        let Action::Send(attempt) = slot.hb.poll_action() else {
            return;
        };
        let attempt = attempt.clone();
        let url = Self::url(slot, attempt.kind);
        let budget_ms = slot
            .hb
            .config()
            .request_timeout_ms
            .expect("checked finite at start");
        let slot = self.leases.get_mut(&lease).expect("looked up above");
        let now = clock::now_ns().max(slot.hb.last_event_ns());
        let due_ns = slot.due_ns;
        // How much later than meant (due minus the slack) this beat goes
        // out: raises the slack so the next beats leave that much earlier.
        let meant = if slot.early_ok {
            due_ns.saturating_sub(self.slack_ns)
        } else {
            due_ns
        };
        let delay = (attempt.kind == AttemptKind::Extend && due_ns != u64::MAX && !self.hold)
            .then(|| now.saturating_sub(meant));
        // Only a beat a decision scheduled can be late (D-15); the first
        // extension of an adopted reservation is due at once.
        let late = attempt.kind == AttemptKind::Extend
            && slot.hb.last_decision().is_some()
            && !slot.late_reported
            && now > due_ns.saturating_add(ms_to_ns(slot.margin_ms));
        if late {
            slot.late_reported = true;
        }
        if let Err(e) = slot.hb.handle_sent(attempt.id, now) {
            self.core_error(lease, e);
            return;
        }
        if let Some(d) = delay {
            self.raise_slack(d);
        }
        if late {
            self.jeopardy(lease, JeopardyReason::LateBeat, now);
        }
        if attempt.kind == AttemptKind::Create && attempt.key_use == KeyUse::New {
            // The server may create the reservation at any instant from now
            // on, and it expires no earlier than now + TTL (unless the server
            // grants less). If nothing has resolved the create a safety
            // margin before that, it may be expiring there unseen: reported
            // then, so the report comes before the expiry, not at it.
            let slot = &self.leases[&lease];
            let ttl_ns = ms_to_ns(slot.hb.config().ttl_ms);
            let at = now.saturating_add(ttl_ns.saturating_sub(ms_to_ns(slot.margin_ms)));
            if at != u64::MAX {
                self.watches.push(Reverse((at, Watch::Create, lease.0, 0)));
            }
        }
        let slot = self.leases.get_mut(&lease).expect("still present");
        let enforce_ms = budget_ms - super::detection_slack_ms(budget_ms);
        debug_assert!(enforce_ms >= 1);
        let deadline_ns = now.saturating_add(ms_to_ns(enforce_ms));
        slot.in_flight = true;
        tracing::debug!(target: "leasebeat::driver", %lease,
            reservation_id = slot.hb.reservation_id().unwrap_or(""),
            attempt = attempt.id, kind = attempt.kind.as_str(),
            key_use = attempt.key_use.as_str(), "send");
        let job = Job::Http(HttpJob {
            lease,
            attempt_id: attempt.id,
            url,
            key: attempt.key,
            body: attempt.body,
            deadline_ns,
            settle: false,
        });
        self.outstanding += 1;
        if self.pool.submit(job).is_err() {
            // No pool (cannot happen before shutdown): report a failure.
            self.outstanding -= 1;
            self.complete(Completion {
                lease,
                attempt_id: attempt.id,
                result: Err(TransportFailure::Reset),
                observed_ns: clock::now_ns(),
                settle: false,
            });
        }
    }

    fn complete(&mut self, c: Completion) {
        let Some(slot) = self.leases.get_mut(&c.lease) else {
            tracing::debug!(target: "leasebeat::driver", lease = %c.lease,
                attempt = c.attempt_id, "outcome for a finished lease ignored");
            return;
        };
        let observed = c.observed_ns.max(slot.hb.last_event_ns());
        let outcome = match &c.result {
            Ok(r) => Outcome::Status(r.status),
            Err(f) => Outcome::Failure(*f),
        };
        // The report of the attempt this outcome answers, read before the
        // core installs the next one.
        let report = match (slot.in_flight, slot.hb.attempt()) {
            (true, Some(a)) if a.id == c.attempt_id => Some(AttemptReport {
                id: a.id,
                kind: a.kind,
                key: a.key.clone(),
                key_use: a.key_use,
                key_index: a.key_index,
                sent_ns: a.sent_ns.unwrap_or(observed),
                due_ns: (slot.due_ns != u64::MAX).then_some(slot.due_ns),
            }),
            _ => None,
        };
        // The create's subject and action, for the settlement's event
        // fallback: the heartbeat drops its create members once the create
        // succeeds, so they are read here, while it is outstanding.
        let create_members = match (&report, &c.result) {
            (Some(r), Ok(resp))
                if r.kind == AttemptKind::Create
                    && resp.status / 100 == 2
                    && self.extras.get(&c.lease).is_none_or(|e| e.event.is_none()) =>
            {
                slot.hb.create_request()
            }
            _ => None,
        };
        let result = match c.result {
            Ok(response) => slot.hb.handle_response(c.attempt_id, response, observed),
            Err(failure) => slot.hb.handle_failure(c.attempt_id, failure, observed),
        };
        match result {
            Ok(decision) => {
                slot.in_flight = false;
                if let Some(members) = create_members {
                    if decision.reservation_id.is_some() {
                        if let Some(body) = EventBody::from_create(&members) {
                            let body = self.intern_event(body);
                            self.extras
                                .entry(c.lease)
                                .or_insert_with(|| {
                                    Box::new(LeaseExtra {
                                        event: None,
                                        policy: FailurePolicy::Warn,
                                    })
                                })
                                .event = Some(body);
                        }
                    }
                }
                self.emit(c.lease, report, outcome, observed, decision);
            }
            Err(e) => match e.kind() {
                ErrorKind::NotOutstanding | ErrorKind::Stopped => {
                    tracing::debug!(target: "leasebeat::driver", lease = %c.lease,
                        attempt = c.attempt_id, error = %e, "late outcome ignored");
                }
                ErrorKind::InvalidConfig
                | ErrorKind::InvalidArgument
                | ErrorKind::TimeWentBackwards
                | ErrorKind::NotSent
                | ErrorKind::AlreadySent
                | ErrorKind::InvalidKey => self.core_error(c.lease, e),
            },
        }
    }

    fn core_error(&mut self, lease: LeaseHandle, error: crate::Error) {
        let reservation_id = self
            .leases
            .get(&lease)
            .and_then(|s| s.hb.reservation_id().map(str::to_owned));
        tracing::error!(target: "leasebeat::driver", %lease, error = %error, "core refused an input");
        let _ = self.events.send(Event::Error {
            lease,
            reservation_id,
            error,
        });
        self.cancel(lease);
    }

    fn cancel(&mut self, lease: LeaseHandle) {
        // A lease whose create has not gone out: built now, so that its
        // cancel is reported like any other (a `cancelled` decision, then
        // the stop); its place in `creates` is skipped when it surfaces.
        if let Some((base, config, extra)) = self.pending.remove(&lease) {
            if !self.build(lease, base, config, extra) {
                return;
            }
        }
        let Some(slot) = self.leases.get_mut(&lease) else {
            return;
        };
        let now = clock::now_ns().max(slot.hb.last_event_ns());
        match slot.hb.cancel(now) {
            Ok(decision) => self.emit(lease, None, Outcome::Cancelled, now, decision),
            Err(e) => {
                // Only a stop makes cancel fail, and stopped leases are removed.
                let slot = self.leases.remove(&lease).expect("present");
                let reason = slot
                    .hb
                    .stop_reason()
                    .unwrap_or(crate::StopReason::Cancelled);
                tracing::warn!(target: "leasebeat::driver", %lease, error = %e, "cancel refused");
                let _ = self.events.send(Event::Stopped {
                    lease,
                    reservation_id: slot.hb.reservation_id().map(str::to_owned),
                    reason,
                    at_ns: now,
                });
            }
        }
    }

    /// Updates the lease's watches after a decision, schedules its next send
    /// and reports the decision (and the stop, if it is one).
    fn emit(
        &mut self,
        lease: LeaseHandle,
        attempt: Option<AttemptReport>,
        outcome: Outcome,
        observed_ns: u64,
        decision: Decision,
    ) {
        let reservation_id = decision.reservation_id.as_deref().map(str::to_owned);
        if tracing::enabled!(target: "leasebeat::driver", tracing::Level::INFO) {
            tracing::info!(target: "leasebeat::driver", %lease,
                reservation_id = reservation_id.as_deref().unwrap_or(""),
                outcome = %outcome, decision = %decision, "decision");
        }
        let stop = decision.stop_reason();
        if stop.is_none() {
            if let Some(slot) = self.leases.get_mut(&lease) {
                if let Some(m) = num_ms(decision.numbers.safety_margin()) {
                    slot.margin_ms = m;
                }
                let success = decision.outcome == OutcomeClass::Success;
                if let Some((at, _)) = slot.rearm_proven(success, decision.proven_until_ns) {
                    self.queue_proven(lease, at);
                }
            }
            if let Next::Send(kind) = decision.next {
                let early_ok = decision.outcome == OutcomeClass::Success;
                match kind {
                    // A create asked for by a decision is the same-key retry
                    // of a failed create: the server may already hold its
                    // reservation, so it is not new work to queue behind
                    // other creates but a beat, sent at its due time.
                    AttemptKind::Create => {
                        if let Some((at, generation)) =
                            self.arm_send(lease, decision.at_ns, early_ok)
                        {
                            self.beats.push(Reverse((at, lease.0, generation)));
                        }
                    }
                    AttemptKind::Extend => {
                        self.schedule_send(lease, kind, decision.at_ns, early_ok)
                    }
                }
            }
        }
        // HP-1: a failed attempt, or a stop that is not a cancel.
        let failed = !matches!(
            decision.outcome,
            OutcomeClass::Success | OutcomeClass::Cancelled
        ) || stop.is_some_and(|r| r != StopReason::Cancelled);
        let failure = failed.then(|| HeartbeatFailure {
            lease,
            reservation_id: reservation_id.clone(),
            outcome: outcome.clone(),
            class: decision.outcome.as_str(),
            disposition: match decision.next {
                Next::Stop(r) => Disposition::Stop(r),
                Next::Send(_) if decision.key == Some(KeyUse::Same) => Disposition::Retry {
                    at_ns: decision.at_ns.unwrap_or(u64::MAX),
                },
                Next::Send(_) => Disposition::Continue {
                    at_ns: decision.at_ns.unwrap_or(u64::MAX),
                },
            },
            detail: decision.detail.clone(),
            at_ns: observed_ns,
        });
        let _ = self.events.send(Event::Decision {
            lease,
            reservation_id: reservation_id.clone(),
            attempt,
            outcome,
            observed_ns,
            decision: Box::new(decision),
        });
        if let Some(f) = &failure {
            tracing::warn!(target: "leasebeat::driver", %lease,
                reservation_id = reservation_id.as_deref().unwrap_or(""),
                failure = %f, "heartbeat_failure");
            let _ = self.events.send(Event::HeartbeatFailure {
                lease,
                failure: f.clone(),
            });
        }
        if let Some(reason) = stop {
            let slot = self.leases.remove(&lease);
            let stop_failure = failure.filter(|_| reason != StopReason::Cancelled);
            self.stopped(lease, slot, stop_failure);
            tracing::info!(target: "leasebeat::driver", %lease,
                reservation_id = reservation_id.as_deref().unwrap_or(""),
                reason = reason.as_str(), "stopped");
            let _ = self.events.send(Event::Stopped {
                lease,
                reservation_id,
                reason,
                at_ns: observed_ns,
            });
        }
    }
}

/// Settlements on the timer thread: each is a core [`Settlement`] driven
/// like a heartbeat (due times from its decisions, HTTP on the pool), its
/// journal calls (persist, finish, replay) on the pool too.
impl Timer {
    /// Hands a journal job or a replay to the pool (never counted as an
    /// outstanding attempt).
    fn submit_side(&mut self, job: Job) {
        if let Err(job) = self.pool.submit(job) {
            // No pool (cannot happen before shutdown).
            match job {
                Job::Persist(lease, mut s) => {
                    let r = s.handle_persist_failed("the driver is shutting down", clock::now_ns());
                    self.persisted(lease, s, r);
                }
                Job::Finish(lease, s) => self.finished(lease, s, Some("shutting down".into())),
                Job::Replay(_) => self.replayed(Err("the driver is shutting down".into())),
                Job::Http(_) => {}
            }
        }
    }

    /// What the lease's stop leaves: HP-1 for a failure, the settlement
    /// told, and the lease remembered for a later settlement.
    fn stopped(
        &mut self,
        lease: LeaseHandle,
        slot: Option<Box<Slot>>,
        failure: Option<HeartbeatFailure>,
    ) {
        let extra = self.extras.remove(&lease);
        let Some(slot) = slot else { return };
        let policy = extra.as_ref().map(|e| &e.policy);
        if let (Some(f), Some(FailurePolicy::Cancel(c))) = (&failure, policy) {
            c.fire(f);
        }
        let fail_on_finalize = matches!(policy, Some(FailurePolicy::FailOnFinalize));
        if let Some(ss) = self.settles.get_mut(&lease) {
            ss.heartbeat = false;
            if ss.fail_on_finalize && ss.hb_failure.is_none() {
                ss.hb_failure = failure;
            }
            return;
        }
        let Some(reservation_id) = slot.hb.reservation_id().map(str::to_owned) else {
            return;
        };
        let event = extra.as_ref().and_then(|e| e.event.clone());
        self.ended.insert(
            lease,
            EndedLease {
                reservation_id,
                base: slot.base.clone(),
                event,
                failure: failure.filter(|_| fail_on_finalize),
                fail_on_finalize,
            },
        );
    }

    fn start_settle(&mut self, req: SettleRequest) {
        let SettleRequest {
            target,
            kind,
            ack,
            result,
        } = req;
        let Some(setup) = self.setup.as_ref() else {
            let _ = ack.send(Err(DriverError::ShutDown));
            return;
        };
        let journal = setup.journal.is_some();
        let retry = setup.retry;
        // Who: the reservation, its server, its event body, HP-1.
        let from_lease = matches!(target, SettleTarget::Lease(_));
        let (lease, reservation_id, base, default_event, heartbeat, fail_on_finalize, hb_failure) =
            match target {
                SettleTarget::Lease(lease) => {
                    if self.settles.contains_key(&lease) {
                        let _ = ack.send(Err(DriverError::AlreadySettling(lease)));
                        return;
                    }
                    if let Some(slot) = self.leases.get(&lease) {
                        let Some(id) = slot.hb.reservation_id() else {
                            let _ = ack.send(Err(DriverError::NoReservation(lease)));
                            return;
                        };
                        let extra = self.extras.get(&lease);
                        let event = extra.and_then(|e| e.event.clone());
                        let fof = extra
                            .is_some_and(|e| matches!(e.policy, FailurePolicy::FailOnFinalize));
                        (
                            lease,
                            id.to_owned(),
                            slot.base.clone(),
                            event,
                            true,
                            fof,
                            None,
                        )
                    } else if self.pending.contains_key(&lease) {
                        let _ = ack.send(Err(DriverError::NoReservation(lease)));
                        return;
                    } else if let Some(e) = self.ended.remove(&lease) {
                        (
                            lease,
                            e.reservation_id,
                            e.base,
                            e.event,
                            false,
                            e.fail_on_finalize,
                            e.failure,
                        )
                    } else {
                        let _ = ack.send(Err(DriverError::UnknownLease(lease)));
                        return;
                    }
                }
                SettleTarget::Reservation(lease, id) => {
                    (lease, id, setup.base.clone(), None, false, false, None)
                }
            };
        let mut config = match kind {
            SettleKind::Commit { usage, event } => {
                let mut c = SettlementConfig::commit(reservation_id.clone(), Vec::new());
                c.commit = usage.into_body();
                c.event = event.or(default_event.clone()).map(|e| e.0.to_vec());
                c
            }
            SettleKind::Release { reason } => {
                SettlementConfig::release(reservation_id.clone(), reason)
            }
        };
        config.base_url = base.as_str().to_owned();
        config.retry = retry;
        let now = Now::new(clock::now_ns(), settle::wall_ms());
        let s = match Settlement::new(config, now) {
            Ok(s) => s,
            Err(e) => {
                // Nothing started: a stopped lease can be settled again.
                if from_lease && !heartbeat {
                    self.ended.insert(
                        lease,
                        EndedLease {
                            reservation_id,
                            base,
                            event: default_event,
                            failure: hb_failure,
                            fail_on_finalize,
                        },
                    );
                }
                let _ = ack.send(Err(DriverError::Core(e)));
                return;
            }
        };
        // Registered before the caller hears of it: a `flush` right after
        // `commit` returns must wait for this settlement.
        if let Some(setup) = &self.setup {
            settle::pending_lock(&setup.pending)
                .ids
                .insert(lease, reservation_id.clone());
        }
        let _ = ack.send(Ok(lease));
        let journaled = journal && s.record().is_some();
        self.add_settlement(
            lease,
            SettleSlot {
                s: Some(Box::new(s)),
                reservation_id,
                base,
                heartbeat,
                fail_on_finalize,
                hb_failure,
                journaled,
                written: false,
                replayed: false,
                decisions: Vec::new(),
                reply: Some(result),
                last_ns: now.mono_ns,
                sent: None,
                journal_error: None,
            },
        );
    }

    /// Registers a settlement, reports its first decision and drives it.
    fn add_settlement(&mut self, lease: LeaseHandle, slot: SettleSlot) {
        if let Some(setup) = &self.setup {
            settle::pending_lock(&setup.pending)
                .ids
                .insert(lease, slot.reservation_id.clone());
        }
        let first = slot
            .s
            .as_ref()
            .map(|s| s.last_decision().clone())
            .expect("a new settlement is here");
        self.settles.insert(lease, Box::new(slot));
        self.settle_decided(lease, None, None, first);
        self.drive(lease);
    }

    /// Reports a settlement decision; stops the heartbeat on ST-11.
    fn settle_decided(
        &mut self,
        lease: LeaseHandle,
        attempt: Option<SettleAttemptReport>,
        outcome: Option<Outcome>,
        d: SettlementDecision,
    ) {
        let Some(slot) = self.settles.get_mut(&lease) else {
            return;
        };
        tracing::info!(target: "leasebeat::driver", %lease,
            reservation_id = slot.reservation_id.as_str(), decision = %d, "settlement");
        slot.decisions.push(d.clone());
        let stop = d.stop_heartbeat && slot.heartbeat;
        if stop {
            slot.heartbeat = false;
        }
        let _ = self.events.send(Event::Settlement {
            lease,
            reservation_id: slot.reservation_id.clone(),
            attempt,
            outcome,
            decision: Box::new(d),
        });
        if stop && self.leases.contains_key(&lease) {
            // ST-11: the outcome is final, or the reservation is gone.
            self.cancel(lease);
        }
    }

    /// Does what the settlement asks next.
    fn drive(&mut self, lease: LeaseHandle) {
        loop {
            let journal = self.setup.as_ref().and_then(|s| s.journal.clone());
            let Some(slot) = self.settles.get_mut(&lease) else {
                return;
            };
            let Some(s) = slot.s.as_mut() else { return };
            match s.poll_action() {
                SettlementAction::Persist(_) => {
                    if journal.is_some() && slot.journaled {
                        let s = slot.s.take().expect("checked");
                        self.submit_side(Job::Persist(lease, s));
                        return;
                    }
                    // No journal: acknowledged without a write (nothing
                    // durable: the opt-out).
                    let now = clock::now_ns().max(slot.last_ns);
                    slot.last_ns = now;
                    match s.handle_persisted(now) {
                        Ok(d) => self.settle_decided(lease, None, None, d),
                        Err(e) => return self.settle_error(lease, e),
                    }
                }
                SettlementAction::Send(a) => {
                    let (due, id) = (a.due_ns, a.id);
                    if due > clock::now_ns() {
                        self.settle_due.push(Reverse((due, lease.0, id)));
                    } else {
                        self.settle_send(lease, id);
                    }
                    return;
                }
                SettlementAction::Wait(_) => return,
                SettlementAction::Done(_) => {
                    let record = s.last_decision().record;
                    if journal.is_some() && slot.journaled && record.is_some() {
                        let s = slot.s.take().expect("checked");
                        self.submit_side(Job::Finish(lease, s));
                    } else {
                        self.settle_end(lease, None);
                    }
                    return;
                }
            }
        }
    }

    /// A core refusal inside a settlement (a driver bug or a clock anomaly):
    /// reported, and the settlement ends where it is (its record kept).
    fn settle_error(&mut self, lease: LeaseHandle, error: crate::Error) {
        let reservation_id = self.settles.get(&lease).map(|s| s.reservation_id.clone());
        tracing::error!(target: "leasebeat::driver", %lease, error = %error, "settlement refused an input");
        let _ = self.events.send(Event::Error {
            lease,
            reservation_id,
            error: error.clone(),
        });
        self.settle_end(lease, Some(error.to_string()));
    }

    fn settle_send(&mut self, lease: LeaseHandle, attempt_id: u64) {
        let Some(setup) = self.setup.as_ref() else {
            return;
        };
        let budget_ms = setup.budget_ms;
        let Some(slot) = self.settles.get_mut(&lease) else {
            return;
        };
        let Some(s) = slot.s.as_mut() else { return };
        let SettlementAction::Send(a) = s.poll_action() else {
            return;
        };
        if a.id != attempt_id {
            return;
        }
        let (endpoint, key, body, due_ns, number) = (
            a.endpoint,
            a.key.clone(),
            a.body.clone(),
            a.due_ns,
            a.number,
        );
        let now = clock::now_ns().max(slot.last_ns);
        let d = match s.handle_sent(attempt_id, now) {
            Ok(d) => d,
            Err(e) => return self.settle_error(lease, e),
        };
        slot.last_ns = now;
        let report = SettleAttemptReport {
            id: attempt_id,
            endpoint,
            key: key.clone(),
            number,
            due_ns,
            sent_ns: now,
        };
        slot.sent = Some(report.clone());
        let url = format!(
            "{}{}",
            slot.base,
            endpoint.path(&encode_segment(&slot.reservation_id))
        );
        let enforce_ms = budget_ms - super::detection_slack_ms(budget_ms);
        let deadline_ns = now.saturating_add(ms_to_ns(enforce_ms.max(1)));
        self.settle_decided(lease, Some(report), None, d);
        let job = Job::Http(HttpJob {
            lease,
            attempt_id,
            url,
            key,
            body,
            deadline_ns,
            settle: true,
        });
        self.outstanding += 1;
        if self.pool.submit(job).is_err() {
            self.outstanding -= 1;
            self.settle_complete(Completion {
                lease,
                attempt_id,
                result: Err(TransportFailure::Reset),
                observed_ns: clock::now_ns(),
                settle: true,
            });
        }
    }

    fn settle_complete(&mut self, c: Completion) {
        let Some(slot) = self.settles.get_mut(&c.lease) else {
            return;
        };
        let Some(s) = slot.s.as_mut() else { return };
        let observed = c.observed_ns.max(slot.last_ns);
        slot.last_ns = observed;
        let outcome = match &c.result {
            Ok(r) => Outcome::Status(r.status),
            Err(f) => Outcome::Failure(*f),
        };
        let result = match c.result {
            Ok(r) => s.handle_response(
                c.attempt_id,
                r.view(),
                Now::new(observed, settle::wall_ms()),
            ),
            Err(f) => s.handle_failure(c.attempt_id, f, observed),
        };
        let report = slot.sent.take();
        match result {
            Ok(d) => {
                self.settle_decided(c.lease, report, Some(outcome), d);
                self.drive(c.lease);
            }
            Err(e) => self.settle_error(c.lease, e),
        }
    }

    fn persisted(
        &mut self,
        lease: LeaseHandle,
        s: Box<Settlement>,
        result: Result<SettlementDecision, crate::Error>,
    ) {
        let Some(slot) = self.settles.get_mut(&lease) else {
            return;
        };
        slot.last_ns = slot.last_ns.max(clock::now_ns());
        slot.s = Some(s);
        match result {
            Ok(d) => {
                if !d.warnings.contains(&crate::SettleWarning::PersistFailed) {
                    slot.written = true;
                }
                self.settle_decided(lease, None, None, d);
                self.drive(lease);
            }
            Err(e) => self.settle_error(lease, e),
        }
    }

    fn finished(&mut self, lease: LeaseHandle, s: Box<Settlement>, error: Option<String>) {
        if let Some(slot) = self.settles.get_mut(&lease) {
            slot.s = Some(s);
        }
        self.settle_end(lease, error);
    }

    /// The settlement ended: its result to the waiter and the channel.
    fn settle_end(&mut self, lease: LeaseHandle, journal_error: Option<String>) {
        let Some(mut slot) = self.settles.remove(&lease) else {
            return;
        };
        if let Some(setup) = &self.setup {
            settle::pending_lock(&setup.pending).ids.remove(&lease);
            setup.pending.1.notify_all();
        }
        if journal_error.is_some() {
            slot.journal_error = journal_error;
        }
        let last = slot.decisions.last().cloned();
        let outcome = slot
            .s
            .as_ref()
            .and_then(|s| s.outcome())
            .unwrap_or(crate::SettleOutcome::Unclassified);
        let record = last.as_ref().and_then(|d| d.record);
        let record_kept = slot.written
            && match record {
                Some(RecordUpdate::Keep) => true,
                Some(RecordUpdate::Remove) => slot.journal_error.is_some(),
                _ => slot.s.as_ref().is_some_and(|s| s.outcome().is_none()),
            };
        if slot.journaled && slot.s.as_ref().is_some_and(|s| s.outcome().is_none()) {
            // Ended on an error: the claim goes, the record stays.
            if let Some(j) = self.setup.as_ref().and_then(|s| s.journal.as_ref()) {
                j.release_claim(&slot.reservation_id);
            }
        }
        let failed_after_heartbeat = slot.fail_on_finalize && slot.hb_failure.is_some();
        let result = SettleResult {
            lease,
            reservation_id: slot.reservation_id.clone(),
            outcome,
            code: last.as_ref().and_then(|d| d.code.clone()),
            status: last.as_ref().and_then(|d| d.status),
            key: slot
                .s
                .as_ref()
                .map(|s| s.key().to_owned())
                .unwrap_or_default(),
            record_kept,
            journaled: slot.written,
            decisions: std::mem::take(&mut slot.decisions),
            heartbeat_failure: slot.hb_failure.take(),
            failed_after_heartbeat,
            replayed: slot.replayed,
            journal_error: slot.journal_error.take(),
        };
        tracing::info!(target: "leasebeat::driver", %lease,
            reservation_id = result.reservation_id.as_str(), outcome = result.outcome.as_str(),
            record_kept, failed_after_heartbeat, "settled");
        if let Some(reply) = slot.reply.take() {
            let _ = reply.send(result.clone());
        }
        let _ = self.events.send(Event::Settled {
            lease,
            result: Box::new(result),
        });
        if slot.heartbeat && self.leases.contains_key(&lease) {
            // Ended without a `stop_heartbeat` decision (an error): the
            // heartbeat has nothing left to guard.
            self.cancel(lease);
        }
    }

    fn replayed(&mut self, result: Result<ReplayOut, String>) {
        let (settlements, report) = match result {
            Ok(r) => (r.settlements, r.report),
            Err(e) => (
                Vec::new(),
                super::JournalReport {
                    error: Some(e),
                    ..Default::default()
                },
            ),
        };
        let Some(setup) = self.setup.as_ref() else {
            return;
        };
        let base = setup.base.clone();
        let next = Arc::clone(&setup.next_lease);
        let journaled = setup.journal.is_some();
        for s in settlements {
            let lease = LeaseHandle(next.fetch_add(1, Ordering::Relaxed));
            let last_ns = clock::now_ns();
            self.add_settlement(
                lease,
                SettleSlot {
                    reservation_id: s.reservation_id().to_owned(),
                    s: Some(Box::new(s)),
                    base: base.clone(),
                    heartbeat: false,
                    fail_on_finalize: false,
                    hb_failure: None,
                    journaled,
                    written: journaled,
                    replayed: true,
                    decisions: Vec::new(),
                    reply: None,
                    last_ns,
                    sent: None,
                    journal_error: None,
                },
            );
        }
        tracing::info!(target: "leasebeat::driver", replayed = report.replayed.len(),
            busy = report.busy.len(), quarantined = report.quarantined.len(), "journal replay");
        let _ = self.events.send(Event::Journal {
            lease: LeaseHandle(0),
            report: Box::new(report),
        });
        if let Some(setup) = &self.setup {
            let mut p = settle::pending_lock(&setup.pending);
            p.replaying = p.replaying.saturating_sub(1);
            drop(p);
            setup.pending.1.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot() -> Slot {
        Slot::new(
            BaseUrl::new("http://127.0.0.1:1".to_owned()),
            Heartbeat::new(crate::Config::new(4_000, Some(1_000))).unwrap(),
            0,
        )
    }

    /// A slot is its heartbeat plus at most 80 bytes (100,000 leases: every
    /// 16 bytes of a slot's allocation are 1.6 MB of the driver's memory).
    #[test]
    fn a_slot_adds_at_most_80_bytes_to_its_heartbeat() {
        let extra = std::mem::size_of::<Slot>() - std::mem::size_of::<Heartbeat>();
        assert!(extra <= 80, "a slot adds {extra} bytes to its heartbeat");
    }

    /// D-15: the proven_until watch's re-arm rule, fallback path included.
    #[test]
    fn proven_watch_rearms_on_a_new_lead_and_reaches_at_once_on_the_fallback_path() {
        let mut s = slot();
        // Before any success nothing is watched (a failed create).
        assert_eq!(s.rearm_proven(false, None), None);
        // First success on the fallback path: proven until 0, reached at once.
        assert_eq!(s.rearm_proven(true, None), Some((0, 1)));
        s.proven_reported = true;
        // Later fallback decisions (successes or failures): not re-armed.
        assert_eq!(s.rearm_proven(true, None), None);
        assert_eq!(s.rearm_proven(false, None), None);
        assert!(s.proven_reported);
        // A primary success re-arms at its instant; a retry keeps it.
        assert_eq!(s.rearm_proven(true, Some(5_000)), Some((5_000, 2)));
        assert!(!s.proven_reported);
        assert_eq!(s.rearm_proven(false, Some(5_000)), None);
        assert_eq!(s.rearm_proven(true, Some(7_000)), Some((7_000, 3)));
        // Back on the fallback path: reached at once again.
        assert_eq!(s.rearm_proven(true, None), Some((0, 4)));
        assert_eq!(s.proven_until_ns, None);
        // +infinity is never reached: re-armed, nothing to watch.
        assert_eq!(s.rearm_proven(true, Some(u64::MAX)), None);
        assert_eq!(s.proven_gen, 5);
    }
}
