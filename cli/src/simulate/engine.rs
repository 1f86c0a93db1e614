//! Runs one strategy through one history against the server model
//! (`leasebeat::sim`), in virtual time, and accounts for lapses.
//!
//! Time is true time in nanoseconds; the server reads it in whole
//! milliseconds, the client through its [`Clock`](super::history::Clock).
//! One attempt is in flight at a time. A request reaches the server half a
//! round trip after it was sent; its response is observed a full round trip
//! after (a timeout: when the client's clock reaches sent + budget).
//!
//! # Reports and lapses
//!
//! The lease lapses when the server's expiry passes while it is ACTIVE. The
//! lapse is *reported* when, by then, the client had stopped or reported
//! jeopardy (D-15) and no newer success had cleared that report. A client
//! paused over the expiry cannot report anything: its report counts when it
//! comes at the first instant it runs again (the runner's first act on
//! waking is the jeopardy check, before it learns anything from the server).
//!
//! Jeopardy is reported (a) when the client's clock reaches the strategy's
//! proven-until instant without a newer success (on the runner's timer, so a
//! late timer makes it late too), and (b) when a beat goes out later than due
//! by more than the strategy's safety margin. Only `leasebeat` has a proven
//! lead; every other strategy reports only by stopping.

use leasebeat::sim::{LeaseState, SimServer};
use leasebeat::{AttemptKind, TransportFailure};
use rand::RngExt;

use super::history::{Fault, History, MS};
use super::strategy::{Next, Observed, Strategy};

/// A lapse of the lease on the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lapse {
    /// The first instant (true time, ns) at which the lease was dead.
    pub at_ns: u64,
    /// A stop or a standing jeopardy report came before it.
    pub reported: bool,
}

/// What one strategy did on one history.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunResult {
    /// Extensions the server applied.
    pub extensions: u32,
    /// Requests sent (create included).
    pub attempts: u32,
    /// Virtual time the run covered (ns): until cancel, stop or lapse.
    pub held_ns: u64,
    /// The lapse, if the lease lapsed before the client stopped.
    pub lapse: Option<Lapse>,
    /// How the client ended (`cancelled` at the end of the work).
    pub stop: Option<&'static str>,
    /// The server answered MAX_EXTENSIONS_EXCEEDED.
    pub exhausted: bool,
    /// Jeopardy reports.
    pub jeopardy: u32,
    /// Inputs the core refused (a simulator bug if ever non-zero).
    pub core_errors: u32,
    /// The server's expiry at the end of the run (ms), if a lease exists.
    pub final_expiry_ms: Option<u64>,
}

struct Run<'h, 'l> {
    h: &'h History,
    lead: &'l mut dyn FnMut(u64),
    trace: Option<&'l mut Vec<String>>,
    server: SimServer,
    id: Option<String>,
    t: u64,
    end: u64,
    jeopardy_at: Option<u64>,
    /// The instant at which the client observes the outstanding attempt's
    /// outcome, while [`Run::advance`] moves time there.
    observing_at: Option<u64>,
    /// A lapse that fell while the client was not running and whose report
    /// is judged after the client's first act on waking: observing that
    /// outcome (ns of the lapse, server expiry ms).
    lapse_on_waking: Option<(u64, u64)>,
    res: RunResult,
}

enum Step {
    Go,
    Over,
}

/// Adds a line to the trace, if one is kept (`--explain`).
fn note(trace: &mut Option<&mut Vec<String>>, t: u64, line: impl FnOnce() -> String) {
    if let Some(tr) = trace.as_deref_mut() {
        tr.push(format!("{:>12.3}  {}", t as f64 / 1e9, line()));
    }
}

impl Run<'_, '_> {
    /// Moves time to `target`: fires the jeopardy and give-up timers due on
    /// the way, then checks the lease.
    fn advance(&mut self, s: &dyn Strategy, target: u64) -> Step {
        let target = target.max(self.t);
        // Deadline checks are not beats: a late-timer fault delays sends,
        // not these (the contract: jeopardy is reported however overloaded
        // the runner is); only a pause of the whole client delays them.
        let fire = |c: u64| self.h.wake(self.h.clock.may_have_reached(c)).max(self.t);
        if self.jeopardy_at.is_none() {
            if let Some(p) = s.proven_until() {
                let tj = fire(p);
                if tj <= target {
                    self.jeopardy_at = Some(tj);
                    self.res.jeopardy += 1;
                    note(&mut self.trace, tj, || {
                        format!("jeopardy: the client's clock may have reached proven_until {p} ns")
                    });
                }
            }
        }
        let give_up = s.deadline().map(fire).filter(|&td| td <= target);
        // The lease, as the server sees it.
        if self.res.lapse.is_none() && self.lapse_on_waking.is_none() {
            if let Some(l) = self.id.as_deref().and_then(|id| self.server.lease(id)) {
                let dead = (l.expires_at_ms + 1) * MS;
                let upto = give_up.unwrap_or(target);
                if l.state == LeaseState::Active && upto >= dead {
                    let wake = self.h.wake(dead);
                    let reported = self.jeopardy_at.is_some_and(|j| j <= wake)
                        || give_up.is_some_and(|g| g <= wake);
                    if !reported && wake > dead && self.observing_at == Some(wake) {
                        // Paused (or descheduled) over the expiry, and the
                        // first thing the client does on waking is to
                        // observe the outstanding attempt's outcome (e.g.
                        // the create's response, which tells it the lease
                        // exists): judge the report after that decision.
                        self.lapse_on_waking = Some((dead, l.expires_at_ms));
                        self.t = target;
                        return Step::Go;
                    }
                    self.res.lapse = Some(Lapse {
                        at_ns: dead,
                        reported,
                    });
                    let jeopardy_at = self.jeopardy_at;
                    note(&mut self.trace, dead, || {
                        format!(
                            "LAPSE ({}): server expiry {} ms passed while active; the client runs again at {:.3} s; jeopardy reported at {:?} ns",
                            if reported { "reported" } else { "UNREPORTED" },
                            l.expires_at_ms,
                            wake as f64 / 1e9,
                            jeopardy_at
                        )
                    });
                    self.t = dead.max(self.t);
                    return Step::Over;
                }
            }
        }
        if let Some(td) = give_up {
            self.t = td;
            self.res.stop = Some("local_expiry");
            note(&mut self.trace, td, || {
                "gives up by itself: local_expiry".to_owned()
            });
            return Step::Over;
        }
        self.t = target;
        Step::Go
    }

    /// Ends the run with the lapse that fell while the client was not
    /// running, judged at the instant it runs again, after the decision on
    /// the outcome it observed then: a stop, or a decision whose proven
    /// lead the client's clock may already have reached (jeopardy at once,
    /// D-15), reports it.
    fn judge_on_waking(&mut self, s: &dyn Strategy, dead: u64, expiry_ms: u64) {
        let now = self.t;
        let stopped = matches!(s.next(), Next::Stop(_));
        if self.jeopardy_at.is_none() {
            if let Some(p) = s.proven_until() {
                if self.h.clock.may_have_reached(p) <= now {
                    self.jeopardy_at = Some(now);
                    self.res.jeopardy += 1;
                    note(&mut self.trace, now, || {
                        format!("jeopardy: the decision's proven_until {p} ns is already reached")
                    });
                }
            }
        }
        let reported = stopped || self.jeopardy_at.is_some_and(|j| j <= now);
        self.res.lapse = Some(Lapse {
            at_ns: dead,
            reported,
        });
        note(&mut self.trace, dead, || {
            format!(
                "LAPSE ({}): server expiry {expiry_ms} ms passed while active and while the client was not running; \
                 judged on waking at {:.3} s, after its decision",
                if reported { "reported" } else { "UNREPORTED" },
                now as f64 / 1e9
            )
        });
        self.t = dead;
    }

    fn cancel(&mut self, s: &dyn Strategy) {
        let at = self.h.wake(self.end);
        if let Step::Go = self.advance(s, at) {
            self.res.stop = Some("cancelled");
            note(&mut self.trace, at, || "work done: cancelled".to_owned());
        }
    }

    fn server_call(&mut self, kind: AttemptKind, at: u64, key: &str, body: &[u8]) -> Observed {
        let now_ms = at / MS;
        let r = match kind {
            AttemptKind::Create => {
                let r = self.server.create(now_ms, Some(key), body);
                if r.status == 200 && self.id.is_none() {
                    self.id = self.server.leases().next().map(|l| l.id.clone());
                }
                if self.trace.is_some() {
                    let exp = self
                        .id
                        .as_deref()
                        .and_then(|id| self.server.lease(id))
                        .map(|l| l.expires_at_ms);
                    note(&mut self.trace, at, || {
                        format!(
                            "server: create key {key} -> {} (expiry {exp:?} ms)",
                            r.status
                        )
                    });
                }
                r
            }
            AttemptKind::Extend => {
                let id = self.id.as_deref().unwrap_or("none");
                let before = self
                    .server
                    .lease(id)
                    .map(|l| (l.expires_at_ms, l.extensions));
                if let Some((exp, _)) = before {
                    // The lead the beat found left on the server.
                    if self.server.lease(id).is_some_and(|l| l.is_live(now_ms)) {
                        (self.lead)(exp - now_ms);
                    }
                }
                let r = self.server.extend(now_ms, id, Some(key), body);
                if self.trace.is_some() {
                    let after = self.server.lease(id).map(|l| l.expires_at_ms);
                    let exp = before.map(|b| b.0);
                    note(&mut self.trace, at, || {
                        format!(
                            "server: extend key {key} -> {} (expiry {exp:?} -> {after:?} ms)",
                            r.status
                        )
                    });
                }
                if let Some(l) = self.server.lease(id) {
                    if before.is_some_and(|(_, n)| l.extensions > n) {
                        self.res.extensions += 1;
                    }
                }
                if r.status == 409
                    && leasebeat::schema::error_code(&r.body).as_deref()
                        == Some("MAX_EXTENSIONS_EXCEEDED")
                {
                    self.res.exhausted = true;
                }
                r
            }
        };
        Observed::Response {
            status: r.status,
            retry_after: None,
            body: r.body,
        }
    }
}

/// Runs strategy `s` through history `h`. `lead` receives the lead (ms) the
/// server had left at each extend that found the lease alive.
pub fn run(h: &History, s: &mut dyn Strategy, lead: &mut dyn FnMut(u64)) -> RunResult {
    run_traced(h, s, lead, None)
}

/// [`run`], also writing one line per event (true time in seconds first) to
/// `trace` when given.
pub fn run_traced(
    h: &History,
    s: &mut dyn Strategy,
    lead: &mut dyn FnMut(u64),
    trace: Option<&mut Vec<String>>,
) -> RunResult {
    let mut run = Run {
        h,
        lead,
        trace,
        server: SimServer::new(h.policy.clone()),
        id: None,
        t: 0,
        end: h.work_ns,
        jeopardy_at: None,
        observing_at: None,
        lapse_on_waking: None,
        res: RunResult::default(),
    };
    run.go(s);
    let mut res = run.res;
    res.held_ns = run.t;
    res.core_errors = s.core_errors();
    res.final_expiry_ms = run
        .id
        .as_deref()
        .and_then(|id| run.server.lease(id))
        .map(|l| l.expires_at_ms);
    res
}

impl Run<'_, '_> {
    fn go(&mut self, s: &mut dyn Strategy) {
        let h = self.h;
        let mut rng = h.attempt_rng();
        let budget_ns = h.budget_ms * MS;
        let mut key = String::new();
        let mut body = Vec::new();
        loop {
            let (kind, due_c) = match s.next() {
                Next::Stop(r) => {
                    self.res.stop = Some(r);
                    return;
                }
                Next::Send {
                    kind,
                    due_ns,
                    key: k,
                    body: b,
                } => {
                    key.clear();
                    key.push_str(k);
                    body.clear();
                    body.extend_from_slice(b);
                    (kind, due_ns)
                }
            };
            let t_fire = if due_c == u64::MAX {
                u64::MAX
            } else {
                h.fire_at(h.clock.true_at(due_c).max(self.t))
            };
            let end = h.wake(self.end);
            if t_fire >= end {
                self.cancel(&*s);
                return;
            }
            if let Step::Over = self.advance(&*s, t_fire) {
                return;
            }
            let t = self.t;
            let c_sent = h.clock.read(t);
            if let Some(m) = s.late_margin() {
                if c_sent > due_c.saturating_add(m) && self.jeopardy_at.is_none() {
                    self.jeopardy_at = Some(t);
                    self.res.jeopardy += 1;
                }
            }
            s.sent(c_sent);
            self.res.attempts += 1;
            note(&mut self.trace, t, || {
                format!("client: sends {kind:?} key {key} (clock {c_sent} ns, due {due_c} ns)")
            });
            // The attempt's fate.
            let rtt = (h.rtt_ms + rng.random_range(0..=h.rtt_ms)) * MS;
            let fault = match kind {
                AttemptKind::Extend => h.fault_at(t),
                AttemptKind::Create => None,
            };
            let timeout_at = h.clock.true_at(c_sent.saturating_add(budget_ns));
            // (server arrival, observation, what is observed; None = the
            // server's own response)
            let (arrival, observe, canned): (Option<u64>, u64, Option<Observed>) = match fault {
                None | Some(Fault::LateTimer { .. }) => {
                    if t + rtt > timeout_at {
                        (
                            Some(t + rtt / 2),
                            timeout_at,
                            Some(Observed::Failure(TransportFailure::Timeout)),
                        )
                    } else {
                        (Some(t + rtt / 2), t + rtt, None)
                    }
                }
                Some(Fault::ServerError) => (
                    None,
                    (t + rtt).min(timeout_at),
                    Some(Observed::Response {
                        status: 503,
                        retry_after: None,
                        body: Vec::new(),
                    }),
                ),
                Some(Fault::Timeout { applied }) => (
                    applied.then_some(t + rtt / 2),
                    timeout_at,
                    Some(Observed::Failure(TransportFailure::Timeout)),
                ),
                Some(Fault::Reset) => (
                    None,
                    t + rtt / 2,
                    Some(Observed::Failure(TransportFailure::Reset)),
                ),
                Some(Fault::LostResponse) => (
                    Some(t + rtt / 2),
                    (t + rtt).min(timeout_at),
                    Some(Observed::Failure(TransportFailure::Reset)),
                ),
                Some(Fault::Throttled { secs }) => (
                    None,
                    (t + rtt).min(timeout_at),
                    Some(Observed::Response {
                        status: 429,
                        retry_after: Some(secs),
                        body: Vec::new(),
                    }),
                ),
                Some(Fault::Slow { extra_ms }) => {
                    let slow = t + rtt + extra_ms * MS;
                    if slow > timeout_at {
                        (
                            Some(t + rtt / 2),
                            timeout_at,
                            Some(Observed::Failure(TransportFailure::Timeout)),
                        )
                    } else {
                        (Some(t + rtt / 2), slow, None)
                    }
                }
            };
            let observe = h.wake(observe);
            let mut response = None;
            if let Some(a) = arrival.filter(|&a| a < end) {
                if let Step::Over = self.advance(&*s, a) {
                    return;
                }
                let r = self.server_call(kind, a, &key, &body);
                if canned.is_none() {
                    response = Some(r);
                }
            }
            // The work ends before the outcome comes: cancel. When both fall
            // on the same instant (the client wakes to both), it observes
            // first; the next turn of the loop cancels.
            if observe > end {
                self.cancel(&*s);
                return;
            }
            self.observing_at = Some(observe);
            let step = self.advance(&*s, observe);
            self.observing_at = None;
            if let Step::Over = step {
                return;
            }
            let observed = canned.or(response).expect("an outcome");
            let before = s.proven_until();
            if self.trace.is_some() {
                let o = match &observed {
                    Observed::Response {
                        status,
                        retry_after,
                        body,
                    } => format!(
                        "{status}{} {}",
                        retry_after.map_or(String::new(), |r| format!(" Retry-After {r}")),
                        String::from_utf8_lossy(body)
                    ),
                    Observed::Failure(f) => format!("{f:?}"),
                };
                note(&mut self.trace, self.t, || format!("client: observes {o}"));
            }
            s.outcome(observed, h.clock.read(self.t));
            if s.proven_until() != before {
                self.jeopardy_at = None;
            }
            if self.trace.is_some() {
                let d = s.explain();
                note(&mut self.trace, self.t, || format!("client: decides {d}"));
            }
            if let Some((dead, expiry_ms)) = self.lapse_on_waking.take() {
                self.judge_on_waking(&*s, dead, expiry_ms);
                return;
            }
        }
    }
}
