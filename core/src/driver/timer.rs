//! The timer thread and its worker pool.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use super::{ApiKey, AttemptReport, Command, Event, LeaseHandle, Outcome, clock, http};
use crate::{Action, AttemptKind, Decision, ErrorKind, Heartbeat, Response, TransportFailure};

const MIN_TIMER_SLACK_NS: u64 = 200_000;
const MAX_TIMER_SLACK_NS: u64 = 20_000_000;
const INITIAL_TIMER_SLACK_NS: u64 = 1_000_000;

/// The outcome of one HTTP exchange, sent back by a worker.
pub(crate) struct Completion {
    lease: LeaseHandle,
    attempt_id: u64,
    result: Result<Response, TransportFailure>,
    observed_ns: u64,
}

struct Job {
    lease: LeaseHandle,
    attempt_id: u64,
    url: String,
    key: String,
    body: Vec<u8>,
    deadline_ns: u64,
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
        let n = self.workers.len();
        let spawned = std::thread::Builder::new()
            .name(format!("leasebeat-worker-{n}"))
            .spawn(move || worker(&queue, &idle, &agent, &api_key, &done));
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
        let Ok(job) = job else { return };
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
        };
        // The timer may be gone (shutdown): the outcome is then moot.
        let _ = done.send(Command::Done(completion));
    }
}

struct Slot {
    base: String,
    hb: Heartbeat,
    in_flight: Option<AttemptReport>,
}

pub(crate) struct Timer {
    commands: Receiver<Command>,
    events: Sender<Event>,
    leases: BTreeMap<LeaseHandle, Slot>,
    pool: Pool,
    slack_ns: u64,
    max_wait: Duration,
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
            leases: BTreeMap::new(),
            pool: Pool {
                jobs: Some(jobs),
                queue: Arc::new(Mutex::new(queue)),
                idle: Arc::new(AtomicUsize::new(0)),
                workers: Vec::new(),
                max: max_workers,
                agent,
                api_key,
                done,
            },
            slack_ns: INITIAL_TIMER_SLACK_NS,
            max_wait: Duration::from_millis(max_wait_ms),
        }
    }

    pub(crate) fn run(mut self) {
        loop {
            self.fire_due();
            let now = clock::now_ns();
            let next_fire = self
                .leases
                .values()
                .filter_map(|s| s.hb.poll_timeout())
                .min()
                .map(|due| due.saturating_sub(self.slack_ns));
            let wait = match next_fire {
                Some(t) => Duration::from_nanos(t.saturating_sub(now)).min(self.max_wait),
                None => self.max_wait,
            };
            match self.commands.recv_timeout(wait) {
                Ok(Command::Shutdown) | Err(RecvTimeoutError::Disconnected) => break,
                Ok(cmd) => self.handle(cmd),
                Err(RecvTimeoutError::Timeout) => {
                    if next_fire.is_some() {
                        let over = clock::now_ns().saturating_sub(now + wait.as_nanos() as u64);
                        self.slack_ns = (self.slack_ns - self.slack_ns / 8)
                            .max(over)
                            .clamp(MIN_TIMER_SLACK_NS, MAX_TIMER_SLACK_NS);
                    }
                }
            }
        }
        let handles: Vec<LeaseHandle> = self.leases.keys().copied().collect();
        for lease in handles {
            self.cancel(lease);
        }
        self.pool.join();
    }

    fn handle(&mut self, cmd: Command) {
        match cmd {
            Command::Start(lease, base, hb) => {
                tracing::debug!(target: "leasebeat::driver", %lease, "start");
                self.leases.insert(
                    lease,
                    Slot {
                        base,
                        hb: *hb,
                        in_flight: None,
                    },
                );
            }
            Command::Cancel(lease) => self.cancel(lease),
            Command::Done(c) => self.complete(c),
            Command::Shutdown => {}
        }
    }

    fn fire_due(&mut self) {
        let now = clock::now_ns();
        let due: Vec<LeaseHandle> = self
            .leases
            .iter()
            .filter(|(_, s)| {
                s.hb.poll_timeout()
                    .is_some_and(|t| t.saturating_sub(self.slack_ns) <= now)
            })
            .map(|(l, _)| *l)
            .collect();
        for lease in due {
            self.dispatch(lease);
        }
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
        if let Err(e) = slot.hb.handle_sent(attempt.id, now) {
            self.core_error(lease, e);
            return;
        }
        let enforce_ms = budget_ms - super::detection_slack_ms(budget_ms);
        debug_assert!(enforce_ms >= 1);
        let deadline_ns = now.saturating_add(enforce_ms.saturating_mul(1_000_000));
        slot.in_flight = Some(AttemptReport {
            id: attempt.id,
            kind: attempt.kind,
            key: attempt.key.clone(),
            key_use: attempt.key_use,
            key_index: attempt.key_index,
            sent_ns: now,
        });
        tracing::debug!(target: "leasebeat::driver", %lease,
            reservation_id = slot.hb.reservation_id().unwrap_or(""),
            attempt = attempt.id, kind = attempt.kind.as_str(),
            key_use = attempt.key_use.as_str(), "send");
        let job = Job {
            lease,
            attempt_id: attempt.id,
            url,
            key: attempt.key,
            body: attempt.body,
            deadline_ns,
        };
        if let Err(job) = self.pool.submit(job) {
            // No pool (cannot happen before shutdown): report a failure.
            self.complete(Completion {
                lease,
                attempt_id: job.attempt_id,
                result: Err(TransportFailure::Reset),
                observed_ns: clock::now_ns(),
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
        let result = match c.result {
            Ok(response) => slot.hb.handle_response(c.attempt_id, response, observed),
            Err(failure) => slot.hb.handle_failure(c.attempt_id, failure, observed),
        };
        match result {
            Ok(decision) => {
                let attempt = slot.in_flight.take();
                self.emit(c.lease, attempt, outcome, observed, decision);
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

    fn emit(
        &mut self,
        lease: LeaseHandle,
        attempt: Option<AttemptReport>,
        outcome: Outcome,
        observed_ns: u64,
        decision: Decision,
    ) {
        let reservation_id = decision.reservation_id.clone();
        let json = serde_json::Value::Object(decision.to_json());
        tracing::info!(target: "leasebeat::driver", %lease,
            reservation_id = reservation_id.as_deref().unwrap_or(""),
            outcome = %outcome, decision = %json, "decision");
        let stop = decision.stop_reason();
        let _ = self.events.send(Event::Decision {
            lease,
            reservation_id: reservation_id.clone(),
            attempt,
            outcome,
            observed_ns,
            decision: Box::new(decision),
        });
        if let Some(reason) = stop {
            self.leases.remove(&lease);
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
