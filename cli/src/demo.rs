//! `leasebeat demo`: real heartbeats over HTTP against the reference server,
//! one in-process server per scenario, every lease through one driver, with
//! time scaled down (4 s leases, 400 ms request budgets) so the whole demo
//! takes about ten seconds.

use std::collections::HashMap;
use std::io::Write;
use std::process::ExitCode;
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};

use leasebeat::driver::{ApiKey, Driver, DriverConfig, Event, LeaseHandle, Outcome};
use leasebeat::sim::Policy;
use leasebeat::{Config, Mode, Next, Num, OutcomeClass, StopReason};
use serde_json::{Map, Value, json};

use crate::serve::{FaultRule, ServeOptions, Server};

/// How a scenario is expected to end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    /// The demo cancels after this many successful extensions.
    CancelAfter(u32),
    /// The heartbeat stops by itself for this reason.
    Stop(StopReason),
}

/// One demo scenario.
#[derive(Clone, Debug)]
pub struct Scenario {
    /// Short name.
    pub name: &'static str,
    /// What it shows.
    pub about: &'static str,
    /// Server policy.
    pub policy: Policy,
    /// Server fault rules (`--fault` syntax).
    pub faults: Vec<&'static str>,
    /// Lease length (ms).
    pub ttl_ms: u64,
    /// Request budget (ms).
    pub timeout_ms: u64,
    /// Expected ending.
    pub expect: Expect,
}

/// The demo's scenarios.
pub fn scenarios() -> Vec<Scenario> {
    let s = |name, about, policy, faults: Vec<&'static str>, expect| Scenario {
        name,
        about,
        policy,
        faults,
        ttl_ms: 4_000,
        timeout_ms: 400,
        expect,
    };
    let lead = || Policy {
        max_lead_ms: Some(4_000),
        ..Policy::default()
    };
    vec![
        s(
            "additive",
            "each extension adds extend_by_ms to the expiry; beats spread out",
            Policy::additive(),
            vec![],
            Expect::CancelAfter(3),
        ),
        s(
            "max-lead",
            "server clamps expiry to now + 4000 ms; steady beats",
            lead(),
            vec![],
            Expect::CancelAfter(5),
        ),
        s(
            "grant-cap",
            "each extension adds at most 1500 ms",
            Policy {
                grant_cap_ms: Some(1_500),
                ..Policy::default()
            },
            vec![],
            Expect::CancelAfter(4),
        ),
        s(
            "initial-ttl-cap",
            "create asks 4000 ms, server grants 3000 ms; the first extension goes out at once",
            Policy {
                initial_ttl_cap_ms: Some(3_000),
                ..Policy::default()
            },
            vec![],
            Expect::CancelAfter(3),
        ),
        s(
            "older-server",
            "no remaining_ttl_ms in responses: the measured-grant fallback",
            Policy {
                omit_remaining: true,
                ..Policy::default()
            },
            vec![],
            Expect::CancelAfter(4),
        ),
        s(
            "5xx-burst",
            "extends 2 and 3 get 503: same-key retries inside the window",
            lead(),
            vec!["extend:2-3=503"],
            Expect::CancelAfter(4),
        ),
        Scenario {
            name: "429-inside",
            about: "429 Retry-After: 1 s, inside a 2.5 s retry window: retried after 1 s, same key \
                    (8 s lease, 2.5 s budget, max lead 7 s)",
            policy: Policy {
                max_lead_ms: Some(7_000),
                ..Policy::default()
            },
            faults: vec!["extend:2=429,retry-after=1"],
            ttl_ms: 8_000,
            timeout_ms: 2_500,
            expect: Expect::CancelAfter(3),
        },
        s(
            "429-beyond",
            "429 Retry-After: 30 s, beyond the window: stop throttled (then release)",
            lead(),
            vec!["extend:2=429,retry-after=30"],
            Expect::Stop(StopReason::Throttled),
        ),
        s(
            "lost-response",
            "extend 2 is applied but its connection dropped: same-key replay recovers",
            lead(),
            vec!["extend:2=drop"],
            Expect::CancelAfter(4),
        ),
        s(
            "slow-response",
            "extend 2 is applied but answered after 800 ms (> 400 ms budget): timeout, replay",
            lead(),
            vec!["extend:2=delay=800"],
            Expect::CancelAfter(4),
        ),
        s(
            "malformed-200",
            "extend 2 is applied but its 200 body is truncated: ambiguous, same-key retry",
            lead(),
            vec!["extend:2=malformed"],
            Expect::CancelAfter(4),
        ),
        s(
            "permanent-stop",
            "server allows 2 extensions; the third gets 409 MAX_EXTENSIONS_EXCEEDED",
            Policy {
                max_extensions: Some(2),
                ..lead()
            },
            vec![],
            Expect::Stop(StopReason::MaxExtensions),
        ),
    ]
}

/// One line of a timeline.
#[derive(Clone, Debug)]
pub struct Row {
    /// Seconds since the demo's start.
    pub t: f64,
    /// `#id kind key-use`.
    pub attempt: String,
    /// First 8 characters of the key.
    pub key: String,
    /// Status or failure.
    pub outcome: String,
    /// lead_floor (success) or lead (failure), ms.
    pub lead: Option<Num>,
    /// What the core decided.
    pub decision: String,
}

/// What happened to one scenario.
#[derive(Clone, Debug)]
pub struct Report {
    /// The scenario.
    pub scenario: Scenario,
    /// Its timeline.
    pub rows: Vec<Row>,
    /// Successful extensions.
    pub extensions: u32,
    /// Smallest lead seen (ms).
    pub min_lead: Option<Num>,
    /// Why it stopped.
    pub stop: Option<StopReason>,
    /// Lapses the server saw while the client had not been told to stop.
    pub unreported_lapses: usize,
    /// All lapses the server saw.
    pub lapses: usize,
    /// Whether it ended as expected.
    pub as_expected: bool,
    /// Release outcome.
    pub release: String,
}

struct Live {
    scenario: Scenario,
    server: Server,
    rows: Vec<Row>,
    extensions: u32,
    min_lead: Option<Num>,
    stop: Option<(StopReason, Instant)>,
    reservation_id: Option<String>,
    cancel_sent: bool,
    release: String,
}

const API_KEY: &str = "demo-key";

fn create_request() -> Map<String, Value> {
    let v = json!({
        "subject": {"tenant": "demo"},
        "action": {"kind": "llm.completion", "name": "demo"},
        "estimate": {"unit": "TOKENS", "amount": 1000}
    });
    v.as_object().cloned().expect("object")
}

fn describe(
    next: Next,
    at_ns: Option<u64>,
    observed_ns: u64,
    key: Option<leasebeat::KeyUse>,
    key_index: Option<u32>,
) -> String {
    match next {
        Next::Stop(r) => format!("STOP {r}"),
        Next::Send(kind) => {
            let delay = match at_ns {
                None => "never".to_owned(),
                Some(at) => format!("in {} ms", at.saturating_sub(observed_ns) / 1_000_000),
            };
            let key = match (key, key_index) {
                (Some(k), Some(i)) => format!(" ({} key #{i})", k.as_str()),
                _ => String::new(),
            };
            format!("{} {delay}{key}", kind.as_str())
        }
    }
}

/// Runs the scenarios; returns the reports.
pub fn run_scenarios(scenarios: Vec<Scenario>, progress: bool) -> Result<Vec<Report>, String> {
    let start = Instant::now();
    // One driver for every lease; each scenario has its own server (its
    // own policy and faults), reached through `start_heartbeat_at`.
    let (driver, events) = Driver::new(DriverConfig {
        // The demo settles nothing: no journal.
        journal: leasebeat::driver::JournalOptions::disabled(),
        ..DriverConfig::new("http://127.0.0.1", ApiKey::new(API_KEY))
    })
    .map_err(|e| e.to_string())?;
    let mut lives: HashMap<LeaseHandle, Live> = HashMap::new();
    for sc in scenarios {
        let faults = sc
            .faults
            .iter()
            .map(|f| FaultRule::parse(f))
            .collect::<Result<Vec<_>, _>>()?;
        let server = Server::start(ServeOptions {
            policy: sc.policy.clone(),
            faults,
            api_key: Some(API_KEY.into()),
            ..ServeOptions::default()
        })
        .map_err(|e| format!("cannot start a server: {e}"))?;
        let mut config = Config::new(sc.ttl_ms, Some(sc.timeout_ms));
        config.create_request = create_request();
        let hb = leasebeat::Heartbeat::new(config).map_err(|e| e.to_string())?;
        let lease = driver
            .start_heartbeat_at(&server.url(), hb)
            .map_err(|e| e.to_string())?;
        lives.insert(
            lease,
            Live {
                scenario: sc,
                server,
                rows: Vec::new(),
                extensions: 0,
                min_lead: None,
                stop: None,
                reservation_id: None,
                cancel_sent: false,
                release: "-".into(),
            },
        );
    }
    let deadline = start + Duration::from_secs(50);
    let t0_ns = leasebeat::driver::clock::now_ns();
    let secs = |ns: u64| ns.saturating_sub(t0_ns) as f64 / 1e9;
    while lives.values().any(|l| l.stop.is_none()) {
        let event = match events.recv_timeout(Duration::from_millis(200)) {
            Ok(e) => e,
            Err(RecvTimeoutError::Timeout) => {
                if Instant::now() > deadline {
                    for (lease, l) in lives.iter_mut() {
                        if l.stop.is_none() && !l.cancel_sent {
                            l.cancel_sent = true;
                            let _ = driver.cancel(*lease);
                        }
                    }
                }
                continue;
            }
            Err(RecvTimeoutError::Disconnected) => break,
        };
        let lease = event.lease();
        let Some(live) = lives.get_mut(&lease) else {
            continue;
        };
        match event {
            Event::Decision {
                reservation_id,
                attempt,
                outcome,
                observed_ns,
                decision,
                ..
            } => {
                live.reservation_id = reservation_id.or(live.reservation_id.take());
                // The fallback path (an older server without
                // remaining_ttl_ms) proves no lead (D-15): no number here.
                let lead = match (decision.mode, decision.outcome) {
                    (Some(Mode::Fallback), _) => None,
                    (_, OutcomeClass::Success) => decision.numbers.lead_floor(),
                    _ => decision.numbers.lead(),
                };
                if let Some(l) = lead {
                    live.min_lead = Some(live.min_lead.map_or(l, |m| m.min(l)));
                }
                let is_extend_success = decision.outcome == OutcomeClass::Success
                    && attempt
                        .as_ref()
                        .is_some_and(|a| a.kind == leasebeat::AttemptKind::Extend);
                if is_extend_success {
                    live.extensions += 1;
                }
                let row = Row {
                    t: secs(observed_ns),
                    attempt: attempt.as_ref().map_or("-".into(), |a| {
                        format!("#{} {} {}", a.id, a.kind.as_str(), a.key_use.as_str())
                    }),
                    key: attempt
                        .as_ref()
                        .map_or("-".into(), |a| a.key.chars().take(8).collect()),
                    outcome: match (&outcome, decision.outcome) {
                        (Outcome::Status(s), c) if c != OutcomeClass::Success => {
                            format!("{s} {}", c.as_str())
                        }
                        (o, _) => o.to_string(),
                    },
                    lead,
                    decision: describe(
                        decision.next,
                        decision.at_ns,
                        observed_ns,
                        decision.key,
                        decision.key_index,
                    ),
                };
                if progress {
                    eprintln!(
                        "[{:6.2}s] {:<16} {:<16} {:<22} -> {}",
                        row.t, live.scenario.name, row.attempt, row.outcome, row.decision
                    );
                }
                live.rows.push(row);
                if let Expect::CancelAfter(n) = live.scenario.expect {
                    if live.extensions >= n && !live.cancel_sent && decision.stop_reason().is_none()
                    {
                        live.cancel_sent = true;
                        let _ = driver.cancel(lease);
                    }
                }
            }
            Event::Stopped {
                reason,
                reservation_id,
                ..
            } => {
                live.stop = Some((reason, Instant::now()));
                let id = reservation_id.or(live.reservation_id.clone());
                live.release = match id {
                    None => "no reservation".into(),
                    Some(id) => match driver.release_once_at(
                        &live.server.url(),
                        &id,
                        Some("leasebeat demo: heartbeat stopped"),
                    ) {
                        Ok(r) => r.status.to_string(),
                        Err(f) => f.as_str().to_owned(),
                    },
                };
                if progress {
                    eprintln!(
                        "[{:6.2}s] {:<16} stopped: {reason}; release -> {}",
                        secs(leasebeat::driver::clock::now_ns()),
                        live.scenario.name,
                        live.release
                    );
                }
            }
            Event::Jeopardy { reason, .. } => {
                if progress {
                    eprintln!(
                        "[{:6.2}s] {:<16} lease_in_jeopardy: {reason}",
                        secs(leasebeat::driver::clock::now_ns()),
                        live.scenario.name,
                    );
                }
            }
            Event::Error { error, .. } => {
                eprintln!("{}: core refused an input: {error}", live.scenario.name);
            }
            // The demo settles nothing; its heartbeat failures are in its
            // decisions already.
            Event::HeartbeatFailure { .. }
            | Event::Settlement { .. }
            | Event::Settled { .. }
            | Event::Journal { .. } => {}
        }
    }
    driver.shutdown();
    // Give the lapse monitors a moment, then read them.
    std::thread::sleep(Duration::from_millis(30));
    let mut out: Vec<(LeaseHandle, Report)> = lives
        .into_iter()
        .map(|(i, mut l)| {
            let lapses = l.server.lapses();
            let stop_ms = l.stop.map(|(_, t)| l.server.ms_at(t));
            let unreported = lapses
                .iter()
                .filter(|x| stop_ms.is_none_or(|s| s > x.expires_at_ms))
                .count();
            l.server.stop();
            let stop = l.stop.map(|(r, _)| r);
            let as_expected = match l.scenario.expect {
                Expect::CancelAfter(n) => stop == Some(StopReason::Cancelled) && l.extensions >= n,
                Expect::Stop(r) => stop == Some(r),
            };
            (
                i,
                Report {
                    scenario: l.scenario,
                    rows: l.rows,
                    extensions: l.extensions,
                    min_lead: l.min_lead,
                    stop,
                    unreported_lapses: unreported,
                    lapses: lapses.len(),
                    as_expected,
                    release: l.release,
                },
            )
        })
        .collect();
    out.sort_by_key(|(i, _)| *i);
    Ok(out.into_iter().map(|(_, r)| r).collect())
}

/// Prints the timelines and the summary table.
pub fn print_reports(reports: &[Report], w: &mut impl Write) -> std::io::Result<()> {
    for r in reports {
        writeln!(w, "== {}: {}", r.scenario.name, r.scenario.about)?;
        writeln!(
            w,
            "   ttl {} ms, request budget {} ms, faults: {}",
            r.scenario.ttl_ms,
            r.scenario.timeout_ms,
            if r.scenario.faults.is_empty() {
                "none".to_owned()
            } else {
                r.scenario.faults.join(" ")
            }
        )?;
        writeln!(
            w,
            "   {:>7}  {:<18} {:<9} {:<24} {:>6}  decision",
            "time s", "attempt", "key", "outcome", "lead"
        )?;
        for row in &r.rows {
            writeln!(
                w,
                "   {:>7.3}  {:<18} {:<9} {:<24} {:>6}  {}",
                row.t,
                row.attempt,
                row.key,
                row.outcome,
                row.lead.map_or("-".into(), |l| l.to_string()),
                row.decision
            )?;
        }
        writeln!(w)?;
    }
    print_summary(reports, w)
}

/// Prints the summary table only.
pub fn print_summary(reports: &[Report], w: &mut impl Write) -> std::io::Result<()> {
    writeln!(w, "== summary")?;
    writeln!(
        w,
        "{:<16} {:>10} {:>14} {:<24} {:>7} {:>8}  result",
        "scenario", "extensions", "min lead ms", "stop reason", "release", "lapses"
    )?;
    for r in reports {
        writeln!(
            w,
            "{:<16} {:>10} {:>14} {:<24} {:>7} {:>8}  {}",
            r.scenario.name,
            r.extensions,
            r.min_lead.map_or("-".into(), |l| l.to_string()),
            r.stop.map_or("(none)", |s| s.as_str()),
            r.release,
            if r.unreported_lapses > 0 {
                format!("{} UNREPORTED", r.unreported_lapses)
            } else {
                r.lapses.to_string()
            },
            if r.as_expected { "ok" } else { "UNEXPECTED" }
        )?;
    }
    Ok(())
}

/// What `leasebeat demo` prints above the timelines.
pub const LEGEND: &str = "\
How to read this (time is scaled down: 4 s leases, 400 ms request budgets):
  #n      the n-th request of that lease (#1 is the create); `new`/`same` says whether
          it used a new idempotency key or replayed the previous one (same-key retry).
  lead    how long the lease is proven to live on the server (ms): after a success,
          the remaining TTL the server reported minus the round trip; after a failure,
          what is left of it. `-` when nothing is proven: the older-server scenario's
          server sends no remaining_ttl_ms, so the core runs its measured-grant
          fallback, which proves no lead.
  lapse   the server's lease expired while still active. It is unreported when the
          client was not told to stop before it; the goal is zero.
  The demo cancels each lease on purpose after a few extensions (stop reason
  `cancelled`, then a release); some scenarios stop by themselves (throttled,
  max_extensions) as they should.
";

/// Options of `leasebeat demo`.
#[derive(Clone, Debug, Default)]
pub struct DemoOptions {
    /// Run only these scenarios (by name; all when empty).
    pub scenarios: Vec<String>,
    /// No progress on stderr, no legend and no timelines: only the summary.
    pub quiet: bool,
}

/// Histories the simulate section at the end of the demo runs.
pub const SIMULATE_SEQUENCES: u64 = 10_000;

/// `leasebeat demo`. Exit status 0 when every scenario ended as expected
/// with no unreported lapse (and, when every scenario ran, the simulate
/// section shows none for `leasebeat`); 1 otherwise; 2 on a usage error.
pub fn run(opts: &DemoOptions) -> ExitCode {
    let all = scenarios();
    let chosen: Vec<Scenario> = if opts.scenarios.is_empty() {
        all.clone()
    } else {
        let mut v = Vec::new();
        for name in &opts.scenarios {
            match all.iter().find(|s| s.name == name) {
                Some(s) => v.push(s.clone()),
                None => {
                    let names: Vec<&str> = all.iter().map(|s| s.name).collect();
                    eprintln!(
                        "leasebeat demo: no scenario named {name:?}; the scenarios are: {}",
                        names.join(", ")
                    );
                    return ExitCode::from(2);
                }
            }
        }
        v
    };
    let whole = opts.scenarios.is_empty();
    if !opts.quiet {
        eprintln!(
            "leasebeat demo: {} scenarios, each against its own reference server on 127.0.0.1 (clock: {})",
            chosen.len(),
            leasebeat::driver::clock::CLOCK_NAME
        );
    }
    let reports = match run_scenarios(chosen, !opts.quiet) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("leasebeat demo: {e}");
            return ExitCode::from(2);
        }
    };
    let mut out = std::io::stdout().lock();
    if opts.quiet {
        let _ = print_summary(&reports, &mut out);
    } else {
        let _ = writeln!(out, "{LEGEND}");
        let _ = print_reports(&reports, &mut out);
    }
    let lapses: usize = reports.iter().map(|r| r.unreported_lapses).sum();
    let unexpected = reports.iter().filter(|r| !r.as_expected).count();
    let _ = writeln!(
        out,
        "\n{} scenarios, {} ended as expected, {} unreported lapses",
        reports.len(),
        reports.len() - unexpected,
        lapses
    );
    let mut simulated_lapses = 0;
    if whole {
        if !opts.quiet {
            eprintln!("leasebeat demo: simulating {SIMULATE_SEQUENCES} histories");
        }
        let summary = crate::simulate::simulate(SIMULATE_SEQUENCES, 1, false);
        simulated_lapses = summary.tallies[0].unreported_lapses;
        if opts.quiet {
            // Only the summary: the section is still checked, and a lapse
            // is said in one line.
            if simulated_lapses > 0 {
                let _ = writeln!(
                    out,
                    "simulate: {simulated_lapses} unreported lapses of leasebeat in {SIMULATE_SEQUENCES} histories"
                );
            }
        } else {
            let _ = writeln!(
                out,
                "\n== simulate: the same question at scale, in virtual time ({SIMULATE_SEQUENCES} seeded histories)\n\
             Each history draws a server regime, faults, a clock and maybe a pause longer than the\n\
             lease; every strategy runs on the same histories. Unreported lapses: the server's lease\n\
             expired before the client stopped or reported jeopardy. For a million histories, the\n\
             plot and every table: leasebeat simulate --sequences 1000000 --plot simulate.svg\n"
            );
            let _ = summary.print_table(&mut out);
        }
    }
    if lapses > 0 || unexpected > 0 || simulated_lapses > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
