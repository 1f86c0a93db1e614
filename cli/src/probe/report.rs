//! What leasebeat will do on the probed server: the core itself
//! ([`leasebeat::Heartbeat`], unchanged) run in virtual time against the
//! server model ([`leasebeat::sim::SimServer`]) set to the regime, limit
//! and round trip the probe measured. No rule is re-implemented here: every
//! delay, budget, reserve and stop comes from the core's decisions.
//!
//! The model: every request reaches the server half a round trip after it
//! is sent and its answer arrives a full round trip after (the largest
//! round trip measured, rounded up to whole ms); an outage makes every
//! attempt in it fail, either hanging until `--timeout-ms` (a timeout) or
//! at once (a refused connection).

use leasebeat::sim::{Policy, SimServer};
use leasebeat::{
    Action, AttemptKind, Config, Heartbeat, KeyUse, OutcomeClass, Response, SequentialKeys,
    StopReason, TransportFailure,
};
use serde_json::{Map, Value};

use super::{ProbeOptions, ProbeResult};

const MS: u64 = 1_000_000;
const HOUR_MS: u64 = 3_600_000;
/// Server clock at virtual time 0.
const EPOCH_MS: u64 = 1_700_000_000_000;
/// Most core steps one virtual run may take.
const MAX_STEPS: u32 = 200_000;
/// The extension limit assumed when none was measured (the protocol's
/// example default).
pub const ASSUMED_LIMIT: u32 = 10;

/// How an outage makes attempts fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutageKind {
    /// Each attempt hangs until the timeout.
    Hanging,
    /// Each attempt is refused at once (1 ms).
    Refused,
}

/// One virtual run.
#[derive(Clone, Debug, Default)]
pub struct Run {
    /// The stop, if the heartbeat stopped: reason and virtual time (ms).
    pub stop: Option<(StopReason, u64)>,
    /// Send times (ms) of new-key extensions.
    pub beats: Vec<u64>,
    /// Successful extensions.
    pub extensions: u32,
    /// When the outage started (ms).
    pub outage_start: Option<u64>,
    /// The last attempt sent during the outage (ms).
    pub last_outage_attempt: Option<u64>,
    /// The create's decision: (next_delay, attempt_budget, safety_margin,
    /// retry_reserve) in ms.
    pub create_numbers: Option<[Option<u64>; 4]>,
    /// The last success's numbers: (next_delay, lead_floor).
    pub last_success: Option<(Option<u64>, Option<u64>)>,
    /// The path of the last success.
    pub fallback: bool,
    /// The outage outlasted the lease (the heartbeat had not stopped).
    pub lapsed: bool,
    /// The run ended at [`MAX_STEPS`], before its horizon.
    pub truncated: bool,
}

fn num(n: Option<leasebeat::Num>) -> Option<u64> {
    n.and_then(|n| n.finite())
        .and_then(|v| u64::try_from(v).ok())
}

/// Runs the core against the model from a create at virtual time 0 until
/// it stops, `max_beats` new-key extensions were sent, or `horizon_ms`
/// passed. `outage`: after this many beats, every attempt fails.
#[allow(clippy::too_many_arguments)]
pub fn simulate(
    policy: &Policy,
    members: &Map<String, Value>,
    ttl_ms: u64,
    timeout_ms: u64,
    rtt_ms: u64,
    outage: Option<(u32, OutageKind)>,
    max_beats: Option<u32>,
    horizon_ms: u64,
) -> Run {
    let mut run = Run::default();
    let mut config = Config::new(ttl_ms, Some(timeout_ms));
    config.create_request = members.clone();
    let Ok(mut hb) = Heartbeat::with_key_source(config, Box::new(SequentialKeys::new("sim-")))
    else {
        return run;
    };
    let mut server = SimServer::new(policy.clone());
    let rtt = rtt_ms * MS;
    let mut now = 0u64;
    run.truncated = true;
    for _ in 0..MAX_STEPS {
        let (id, kind, due, key_use, key, body) = match hb.poll_action() {
            Action::Send(a) => (
                a.id,
                a.kind,
                a.due_ns,
                a.key_use,
                a.key.clone(),
                a.body.clone(),
            ),
            Action::Stop(r) => {
                run.stop = Some((r, now / MS));
                run.truncated = false;
                break;
            }
            Action::AwaitOutcome(_) => break,
        };
        let Some(due) = due else { break };
        now = now.max(due);
        if now / MS > horizon_ms {
            run.truncated = false;
            break;
        }
        if kind == AttemptKind::Extend && key_use == KeyUse::New {
            if max_beats.is_some_and(|m| run.beats.len() as u32 >= m) {
                run.truncated = false;
                break;
            }
            run.beats.push(now / MS);
            if let Some((after, _)) = outage {
                if run.outage_start.is_none() && run.beats.len() as u32 > after {
                    run.outage_start = Some(now / MS);
                }
            }
        }
        if hb.handle_sent(id, now).is_err() {
            break;
        }
        let decision = if let (Some(_), Some((_, how))) = (run.outage_start, outage) {
            // An attempt that would reach the server after the lease's
            // true expiry cannot save it (the fallback path, which has no
            // retry window, would retry on past the lapse).
            let rid = hb.reservation_id().unwrap_or_default();
            let expiry = server.lease(rid).map_or(0, |l| l.expires_at_ms);
            if EPOCH_MS + (now + rtt / 2) / MS > expiry {
                run.lapsed = true;
                break;
            }
            run.last_outage_attempt = Some(now / MS);
            let (failure, after) = match how {
                OutageKind::Hanging => (TransportFailure::Timeout, timeout_ms * MS),
                OutageKind::Refused => (TransportFailure::Connect, MS),
            };
            now += after;
            hb.handle_failure(id, failure, now)
        } else {
            let at_server = EPOCH_MS + (now + rtt / 2) / MS;
            let r = match kind {
                AttemptKind::Create => server.create(at_server, Some(&key), &body),
                AttemptKind::Extend => {
                    let rid = hb.reservation_id().unwrap_or_default().to_owned();
                    server.extend(at_server, &rid, Some(&key), &body)
                }
            };
            now += rtt;
            hb.handle_response(id, Response::new(r.status).body(r.body), now)
        };
        let Ok(d) = decision else { break };
        if d.outcome == OutcomeClass::Success {
            let n = &d.numbers;
            if kind == AttemptKind::Create {
                run.create_numbers = Some([
                    num(n.next_delay()).or_else(|| num(n.cadence())),
                    num(n.attempt_budget()),
                    num(n.safety_margin()),
                    num(n.retry_reserve()),
                ]);
            } else {
                run.extensions += 1;
            }
            run.fallback = d.mode == Some(leasebeat::Mode::Fallback);
            run.last_success = Some((
                num(n.next_delay()).or_else(|| num(n.cadence())),
                num(n.lead_floor()),
            ));
        }
    }
    run
}

/// The report of item 2 of the issue.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// `--ttl-ms`.
    pub ttl_ms: u64,
    /// `--timeout-ms`.
    pub timeout_ms: u64,
    /// The round trip the model uses: the largest measured, rounded up.
    pub rtt_ms: u64,
    /// `primary` or `fallback` (no `remaining_ttl_ms`).
    pub path: &'static str,
    /// The core's numbers after the create.
    pub attempt_budget_ms: Option<u64>,
    /// Safety margin.
    pub safety_margin_ms: Option<u64>,
    /// Retry reserve.
    pub retry_reserve_ms: Option<u64>,
    /// The first beat, this long after the create's answer.
    pub first_beat_ms: Option<u64>,
    /// Time between beats in the steady state.
    pub steady_cadence_ms: Option<u64>,
    /// The lead floor after a steady beat.
    pub steady_lead_ms: Option<u64>,
    /// Extensions in the first hour of work.
    pub extensions_per_hour: Option<u32>,
    /// The extension limit used, and whether it was measured.
    pub limit: Option<u32>,
    /// The limit was measured (`--exhaust`); otherwise [`ASSUMED_LIMIT`].
    pub limit_measured: bool,
    /// Work time until the limit stops the heartbeat (ms).
    pub limit_stop_ms: Option<u64>,
    /// The limited run stopped for another reason first (why).
    pub limit_not_reached: Option<String>,
    /// Longest outage survived, attempts hanging until the timeout (ms).
    pub outage_hanging_ms: Option<u64>,
    /// Longest outage survived, connections refused (ms).
    pub outage_refused_ms: Option<u64>,
    /// In the outage runs the lease lapsed before the heartbeat stopped
    /// (only the fallback path can: it has no retry window).
    pub outage_lapses_silently: bool,
    /// The dead zone: the steady run stopped (why).
    pub dead_zone: Option<String>,
    /// The largest timeout that leaves a positive cadence (when in the dead zone).
    pub fix_timeout_ms: Option<u64>,
    /// The smallest TTL that leaves a positive cadence (when in the dead zone).
    pub fix_ttl_ms: Option<u64>,
    /// Plain sentences.
    pub notes: Vec<String>,
}

/// The model of the server the probe measured.
pub fn policy_of(result: &ProbeResult) -> Policy {
    let mut p = Policy::default();
    if let Some(g) = &result.regime {
        p.initial_ttl_cap_ms = g.initial_cap_ms;
        p.grant_cap_ms = g.grant_cap_ms;
        p.max_lead_ms = g.max_lead_ms;
        p.omit_remaining = g.omits_remaining;
    }
    if let Some(Ok(n)) = &result.limit {
        p.max_extensions = Some(*n);
    }
    p
}

/// The largest round trip of a create or extend answer, rounded up (ms).
pub fn max_rtt_ms(result: &ProbeResult) -> u64 {
    result
        .records
        .iter()
        .filter(|r| {
            r.status().is_some() && (r.path == "/v1/reservations" || r.path.ends_with("/extend"))
        })
        .map(|r| r.rtt_ms().ceil() as u64)
        .max()
        .unwrap_or(0)
}

/// No stop within 12 beats of steady work (or an hour, whichever is later).
fn works(policy: &Policy, members: &Map<String, Value>, ttl: u64, timeout: u64, rtt: u64) -> bool {
    let mut p = policy.clone();
    p.max_extensions = None;
    let r = simulate(
        &p,
        members,
        ttl,
        timeout,
        rtt,
        None,
        Some(12),
        u64::MAX / MS,
    );
    r.stop.is_none()
}

/// The report for the options and what the probe measured.
pub fn from_probe(result: &ProbeResult, opts: &ProbeOptions) -> Report {
    let policy = policy_of(result);
    let limit = match &result.limit {
        Some(Ok(n)) => Some((*n, true)),
        Some(Err(_)) => None,
        None => Some((ASSUMED_LIMIT, false)),
    };
    compute(
        &policy,
        &opts.create,
        opts.ttl_ms,
        opts.timeout_ms,
        max_rtt_ms(result),
        limit,
    )
}

/// The report for a server model: `limit` is the extension limit and
/// whether it was measured (`None`: no limit).
pub fn compute(
    policy: &Policy,
    members: &Map<String, Value>,
    ttl_ms: u64,
    timeout_ms: u64,
    rtt_ms: u64,
    limit: Option<(u32, bool)>,
) -> Report {
    let mut rep = Report {
        ttl_ms,
        timeout_ms,
        rtt_ms,
        path: if policy.omit_remaining {
            "fallback"
        } else {
            "primary"
        },
        ..Report::default()
    };
    let mut unlimited = policy.clone();
    unlimited.max_extensions = None;
    // Steady work for an hour (or 12 beats, whichever is later).
    let mut steady = simulate(
        &unlimited, members, ttl_ms, timeout_ms, rtt_ms, None, None, HOUR_MS,
    );
    if steady.stop.is_none() && steady.beats.len() < 12 {
        steady = simulate(
            &unlimited,
            members,
            ttl_ms,
            timeout_ms,
            rtt_ms,
            None,
            Some(12),
            u64::MAX / MS,
        );
    }
    if let Some([first, budget, margin, reserve]) = steady.create_numbers {
        rep.first_beat_ms = first;
        rep.attempt_budget_ms = budget;
        rep.safety_margin_ms = margin;
        rep.retry_reserve_ms = reserve;
    }
    rep.extensions_per_hour = Some(steady.beats.iter().filter(|t| **t < HOUR_MS).count() as u32);
    if steady.truncated {
        // A cadence so short that an hour exceeds MAX_STEPS: extrapolate.
        if let Some(last) = steady.beats.last().filter(|l| **l > 0 && **l < HOUR_MS) {
            let n = steady.beats.len() as u64 * HOUR_MS / last;
            rep.extensions_per_hour = Some(u32::try_from(n).unwrap_or(u32::MAX));
        }
    }
    if let [.., a, b] = steady.beats[..] {
        rep.steady_cadence_ms = Some(b - a);
    }
    rep.steady_lead_ms = steady.last_success.and_then(|(_, lead)| lead);
    if let Some((reason, at)) = steady.stop {
        rep.dead_zone = Some(format!(
            "the heartbeat stops `{}` after {} ms",
            reason.as_str(),
            at
        ));
        rep.steady_cadence_ms = None;
        rep.extensions_per_hour = None;
        if !works(policy, members, ttl_ms, 1, rtt_ms) {
            rep.notes.push("no timeout fixes it at this TTL".into());
        } else {
            let (mut lo, mut hi) = (1u64, timeout_ms);
            while hi - lo > 1 {
                let mid = lo + (hi - lo) / 2;
                if works(policy, members, ttl_ms, mid, rtt_ms) {
                    lo = mid;
                } else {
                    hi = mid;
                }
            }
            rep.fix_timeout_ms = Some(lo);
        }
        let top = leasebeat::MAX_TTL_MS;
        if ttl_ms < top && works(policy, members, top, timeout_ms, rtt_ms) {
            let (mut lo, mut hi) = (ttl_ms, top);
            while hi - lo > 1 {
                let mid = lo + (hi - lo) / 2;
                if works(policy, members, mid, timeout_ms, rtt_ms) {
                    hi = mid;
                } else {
                    lo = mid;
                }
            }
            rep.fix_ttl_ms = Some(hi);
        } else {
            rep.notes
                .push("no TTL fixes it at this timeout (the server caps the lead)".into());
        }
    }
    if steady.fallback {
        rep.notes.push("no remaining_ttl_ms: the fallback path decides, and it proves no lead (lease_in_jeopardy at once)".into());
    }
    // The extension limit.
    if let Some((n, measured)) = limit {
        rep.limit = Some(n);
        rep.limit_measured = measured;
        let mut limited = policy.clone();
        limited.max_extensions = Some(n);
        let r = simulate(
            &limited,
            members,
            ttl_ms,
            timeout_ms,
            rtt_ms,
            None,
            None,
            u64::MAX / MS,
        );
        match r.stop {
            Some((StopReason::MaxExtensions, at)) => rep.limit_stop_ms = Some(at),
            Some((other, at)) => {
                rep.limit_not_reached = Some(format!(
                    "the heartbeat stops `{}` after {at} ms first",
                    other.as_str()
                ));
            }
            None => rep.limit_not_reached = Some("not reached".into()),
        }
    }
    // Outages from the third beat on (a steady one).
    if rep.dead_zone.is_none() {
        for kind in [OutageKind::Hanging, OutageKind::Refused] {
            let r = simulate(
                &unlimited,
                members,
                ttl_ms,
                timeout_ms,
                rtt_ms,
                Some((2, kind)),
                None,
                u64::MAX / MS,
            );
            rep.outage_lapses_silently |= r.lapsed;
            let survived = match (r.outage_start, r.last_outage_attempt) {
                (Some(s), Some(l)) => Some(l + rtt_ms / 2 - s),
                _ => None,
            };
            match kind {
                OutageKind::Hanging => rep.outage_hanging_ms = survived,
                OutageKind::Refused => rep.outage_refused_ms = survived,
            }
        }
    }
    rep
}
