//! The probe against the server model in virtual time: every check passes
//! on a correct server, and each deliberate bug fails exactly its checks.

use std::cell::{Cell, RefCell};

use leasebeat::Response;
use leasebeat::driver::{ApiKey, Exchange};
use leasebeat::sim::{Policy, ServerBugs, SimServer};

use super::report::{self, OutageKind};
use super::*;

const MS: u64 = 1_000_000;

struct SimTransport {
    server: RefCell<SimServer>,
    now: Cell<u64>,
    rtt_ns: u64,
    /// Answer the first extend 429 with this Retry-After.
    throttle_first_extend: Option<&'static str>,
    extends: Cell<u32>,
}

impl SimTransport {
    fn new(policy: Policy, bugs: ServerBugs) -> SimTransport {
        let mut server = SimServer::new(policy);
        server.bugs = bugs;
        SimTransport {
            server: RefCell::new(server),
            now: Cell::new(5 * MS),
            rtt_ns: 3 * MS,
            throttle_first_extend: None,
            extends: Cell::new(0),
        }
    }
}

impl Transport for SimTransport {
    fn now_ns(&self) -> u64 {
        self.now.get()
    }
    fn sleep_ms(&self, ms: u64) {
        self.now.set(self.now.get() + ms * MS);
    }
    fn post(&self, path: &str, key: Option<&str>, body: &[u8], _timeout_ms: u64) -> Exchange {
        let sent = self.now.get();
        let at = 1_700_000_000_000 + (sent + self.rtt_ns / 2) / MS;
        let mut s = self.server.borrow_mut();
        let r = if path == "/v1/reservations" {
            s.create(at, key, body)
        } else {
            let rest = path.strip_prefix("/v1/reservations/").unwrap();
            let (id, verb) = rest.split_once('/').unwrap();
            match verb {
                "extend" => {
                    self.extends.set(self.extends.get() + 1);
                    if self.extends.get() == 1 {
                        if let Some(ra) = self.throttle_first_extend {
                            self.now.set(sent + self.rtt_ns);
                            return Exchange {
                                sent_ns: sent,
                                received_ns: sent + self.rtt_ns,
                                outcome: Ok(Response::new(429)
                                    .header("Retry-After", ra)
                                    .body(&br#"{"error":"LIMIT_EXCEEDED","message":"slow down","request_id":"r"}"#[..])),
                            };
                        }
                    }
                    s.extend(at, id, key, body)
                }
                "release" => s.release(at, id, key, body),
                "commit" => s.commit(at, id, key, body),
                _ => panic!("{path}"),
            }
        };
        self.now.set(sent + self.rtt_ns);
        let mut resp = Response::new(r.status).body(r.body);
        for (n, v) in r.headers {
            resp = resp.header(n, v);
        }
        Exchange {
            sent_ns: sent,
            received_ns: sent + self.rtt_ns,
            outcome: Ok(resp),
        }
    }
}

fn opts() -> ProbeOptions {
    let mut o = ProbeOptions::new("http://model", ApiKey::new("k"));
    o.progress = false;
    o
}

fn run(policy: Policy, bugs: ServerBugs) -> ProbeResult {
    probe(&SimTransport::new(policy, bugs), &opts())
}

fn failing(r: &ProbeResult) -> Vec<&'static str> {
    r.findings
        .iter()
        .filter(|f| f.status == Status::Fail)
        .map(|f| f.id)
        .collect()
}

fn status(r: &ProbeResult, id: &str) -> Status {
    r.findings
        .iter()
        .find(|f| f.id == id)
        .unwrap_or_else(|| panic!("{id}"))
        .status
}

fn all_released(r: &ProbeResult) {
    assert!(r.left_behind().is_empty(), "{:?}", r.left_behind());
    let s = r.reservations.len();
    assert!(s >= 1);
}

#[test]
fn a_correct_server_passes_every_check() {
    let r = run(Policy::default(), ServerBugs::default());
    assert_eq!(r.fatal, None);
    assert_eq!(failing(&r), Vec::<&str>::new(), "{:#?}", r.findings);
    for f in &r.findings {
        if f.level == Level::Must && f.id != "retry_after.delta_seconds" {
            assert_eq!(f.status, Status::Pass, "{f:?}");
        }
    }
    assert_eq!(status(&r, "retry_after.delta_seconds"), Status::Skip);
    assert_eq!(status(&r, "remaining_ttl_ms.present"), Status::Pass);
    assert_eq!(status(&r, "extension.limit"), Status::Skip);
    assert_eq!(status(&r, "cleanup.released"), Status::Pass);
    assert_eq!(r.regime.as_ref().unwrap().kind, "additive");
    assert_eq!(r.exit_code(), 0);
    all_released(&r);
    // Every request but the replays and mismatches used a fresh key.
    let mut keys: Vec<&str> = r
        .records
        .iter()
        .filter(|x| !x.step.starts_with("replay") && !x.step.contains("another"))
        .filter_map(|x| x.key.as_deref())
        .collect();
    let n = keys.len();
    keys.sort_unstable();
    keys.dedup();
    assert_eq!(keys.len(), n);
}

#[test]
fn each_bug_fails_exactly_its_checks() {
    let cases: [(ServerBugs, &[&str]); 4] = [
        (
            ServerBugs {
                replay_stale_remaining: true,
                ..ServerBugs::default()
            },
            &[
                "replay.extend.remaining",
                "replay.extend.released",
                "replay.create.remaining",
                "replay.create.released",
            ],
        ),
        (
            ServerBugs {
                remaining_clock_permille: Some(1_500),
                ..ServerBugs::default()
            },
            &["remaining_ttl_ms.consistent"],
        ),
        (
            ServerBugs {
                replay_changed_body: true,
                ..ServerBugs::default()
            },
            &["replay.extend.verbatim", "replay.create.verbatim"],
        ),
        (
            ServerBugs {
                no_idempotency_mismatch: true,
                ..ServerBugs::default()
            },
            &["idempotency.mismatch.extend", "idempotency.mismatch.create"],
        ),
    ];
    for (bugs, expected) in cases {
        let r = run(Policy::default(), bugs.clone());
        assert_eq!(r.fatal, None);
        assert_eq!(
            failing(&r),
            expected.to_vec(),
            "{bugs:?}: {:#?}",
            r.findings
        );
        assert_eq!(r.exit_code(), 1);
        all_released(&r);
    }
}

#[test]
fn a_small_clock_discrepancy_is_a_warning() {
    // 1 % fast: 15 ms over each 1.5 s step, inside the safety margin.
    let r = run(
        Policy::default(),
        ServerBugs {
            remaining_clock_permille: Some(1_010),
            ..ServerBugs::default()
        },
    );
    assert_eq!(failing(&r), Vec::<&str>::new(), "{:#?}", r.findings);
    assert_eq!(status(&r, "remaining_ttl_ms.consistent"), Status::Warn);
    assert_eq!(r.exit_code(), 0);
}

#[test]
fn retry_after_on_a_429_must_be_delta_seconds() {
    for (value, expected) in [
        ("2", Status::Pass),
        ("Wed, 21 Oct 2026 07:28:00 GMT", Status::Fail),
    ] {
        let mut t = SimTransport::new(Policy::default(), ServerBugs::default());
        t.throttle_first_extend = Some(value);
        let r = probe(&t, &opts());
        assert_eq!(r.fatal, None);
        assert_eq!(status(&r, "retry_after.delta_seconds"), expected, "{value}");
        let fails = failing(&r);
        assert!(
            fails.iter().all(|f| *f == "retry_after.delta_seconds"),
            "{fails:?}"
        );
        all_released(&r);
    }
}

#[test]
fn regimes_are_told_apart() {
    let r = run(
        Policy {
            max_lead_ms: Some(60_000),
            ..Policy::default()
        },
        ServerBugs::default(),
    );
    let g = r.regime.clone().unwrap();
    assert_eq!(g.kind, "maximum lead", "{g:?}");
    assert_eq!(g.max_lead_ms, Some(60_000));
    assert_eq!(failing(&r), Vec::<&str>::new());
    let r = run(
        Policy {
            grant_cap_ms: Some(20_000),
            ..Policy::default()
        },
        ServerBugs::default(),
    );
    let g = r.regime.clone().unwrap();
    assert_eq!(
        (g.kind.as_str(), g.grant_cap_ms),
        ("additive, grant cap", Some(20_000))
    );
    let r = run(
        Policy {
            initial_ttl_cap_ms: Some(30_000),
            ..Policy::default()
        },
        ServerBugs::default(),
    );
    let g = r.regime.clone().unwrap();
    assert_eq!(
        (g.kind.as_str(), g.initial_cap_ms),
        ("additive", Some(30_000))
    );
    // An older server: presence is a WARN, the remaining checks SKIP.
    let r = run(
        Policy {
            omit_remaining: true,
            ..Policy::default()
        },
        ServerBugs::default(),
    );
    assert_eq!(status(&r, "remaining_ttl_ms.present"), Status::Warn);
    assert_eq!(status(&r, "remaining_ttl_ms.consistent"), Status::Skip);
    assert_eq!(status(&r, "replay.extend.remaining"), Status::Skip);
    assert_eq!(r.exit_code(), 0);
    let rep = r.report.as_ref().unwrap();
    assert_eq!(rep.path, "fallback");
    // The fallback never stops on its own in an outage: bounded by the lease.
    assert!(rep.outage_lapses_silently);
    assert!(rep.outage_hanging_ms.unwrap() <= 120_000, "{rep:?}");
}

#[test]
fn exhaust_measures_the_extension_limit_and_releases_both() {
    let mut o = opts();
    o.exhaust = Some(50);
    let t = SimTransport::new(
        Policy {
            max_extensions: Some(10),
            ..Policy::default()
        },
        ServerBugs::default(),
    );
    let r = probe(&t, &o);
    assert_eq!(r.fatal, None);
    assert!(matches!(r.limit, Some(Ok(10))), "{:?}", r.limit);
    assert_eq!(status(&r, "extension.limit"), Status::Pass);
    assert_eq!(r.reservations.len(), 2);
    all_released(&r);
    let rep = r.report.unwrap();
    assert!(rep.limit_measured);
    assert_eq!(rep.limit, Some(10));
    assert!(rep.limit_stop_ms.is_some());
    // No limit within the maximum.
    o.exhaust = Some(5);
    let r = probe(
        &SimTransport::new(Policy::default(), ServerBugs::default()),
        &o,
    );
    assert!(
        matches!(&r.limit, Some(Err(w)) if w.starts_with("no limit")),
        "{:?}",
        r.limit
    );
    all_released(&r);
}

#[test]
fn fatal_answers_are_reported_and_nothing_is_left_reserved() {
    // A server that answers the first extend 401 after the create worked.
    struct Refusing(SimTransport);
    impl Transport for Refusing {
        fn now_ns(&self) -> u64 {
            self.0.now_ns()
        }
        fn sleep_ms(&self, ms: u64) {
            self.0.sleep_ms(ms)
        }
        fn post(&self, path: &str, key: Option<&str>, body: &[u8], t: u64) -> Exchange {
            if path.ends_with("/extend") {
                let sent = self.0.now_ns();
                return Exchange {
                    sent_ns: sent,
                    received_ns: sent + MS,
                    outcome: Ok(Response::new(401).body(&b"<html>no</html>"[..])),
                };
            }
            self.0.post(path, key, body, t)
        }
    }
    let r = probe(
        &Refusing(SimTransport::new(Policy::default(), ServerBugs::default())),
        &opts(),
    );
    assert_eq!(r.exit_code(), 2);
    assert!(
        r.fatal.as_deref().unwrap().contains("HTML"),
        "{:?}",
        r.fatal
    );
    all_released(&r);
}

#[test]
fn the_report_comes_from_the_core() {
    let members = opts().create;
    // The protocol's worked example, additive server: 10 s timeout, 1.5 s rtt.
    let rep = report::compute(&Policy::default(), &members, 60_000, 10_000, 1_500, None);
    let s = leasebeat::arith::primary_schedule(60_000, Some(1_500), Some(10_000), 1_500);
    assert_eq!(rep.retry_reserve_ms, Some(s.retry_reserve));
    assert_eq!(rep.first_beat_ms, Some(s.next_delay));
    assert_eq!(rep.dead_zone, None);
    assert!(rep.steady_cadence_ms.is_some());
    assert!(rep.outage_hanging_ms.unwrap() > 10_000);
    // With a limit of 10: the 10th extension is allowed, the 11th refused.
    let rep = report::compute(
        &Policy::default(),
        &members,
        60_000,
        10_000,
        1_500,
        Some((10, true)),
    );
    let cadence = rep.steady_cadence_ms.unwrap();
    let stop = rep.limit_stop_ms.unwrap();
    assert!(
        stop > 9 * cadence && stop < 12 * cadence,
        "{stop} {cadence}"
    );
    // A 60 s maximum lead with a 30 s timeout: the dead zone; a timeout of
    // at most (60000 - rtt - 1000 - 1) / 2 fixes it; no TTL does.
    let lead = Policy {
        max_lead_ms: Some(60_000),
        ..Policy::default()
    };
    let rep = report::compute(&lead, &members, 60_000, 30_000, 2, Some((10, false)));
    assert!(rep.dead_zone.is_some(), "{rep:?}");
    assert_eq!(rep.extensions_per_hour, None);
    assert_eq!(rep.limit_stop_ms, None);
    assert!(
        rep.limit_not_reached
            .as_deref()
            .unwrap()
            .contains("lease_too_short")
    );
    assert_eq!(rep.fix_timeout_ms, Some((60_000 - 2 - 1_000 - 1) / 2));
    assert_eq!(rep.fix_ttl_ms, None);
    // The same timeout on an additive server: the immediate extension
    // establishes a positive lead.
    let rep = report::compute(&Policy::default(), &members, 60_000, 30_000, 2, None);
    assert_eq!(rep.dead_zone, None);
    assert_eq!(rep.first_beat_ms, Some(0));
    // An outage of refused connections: the last retry still fits.
    let r = report::simulate(
        &Policy::default(),
        &members,
        60_000,
        10_000,
        2,
        Some((2, OutageKind::Refused)),
        None,
        u64::MAX / MS,
    );
    assert!(r.last_outage_attempt.unwrap() > r.outage_start.unwrap());
    assert_eq!(
        r.stop.map(|(s, _)| s),
        Some(leasebeat::StopReason::RetryWindowExhausted)
    );
    assert!(!r.lapsed);
}

#[test]
fn a_limit_of_one_extension_skips_what_needs_the_second() {
    let r = run(
        Policy {
            max_extensions: Some(1),
            ..Policy::default()
        },
        ServerBugs::default(),
    );
    assert_eq!(r.fatal, None);
    assert_eq!(failing(&r), Vec::<&str>::new(), "{:#?}", r.findings);
    assert!(
        r.notes
            .iter()
            .any(|n| n.contains("E2 answered 409 MAX_EXTENSIONS_EXCEEDED")),
        "{:?}",
        r.notes
    );
    assert_eq!(status(&r, "replay.extend.remaining"), Status::Pass);
    assert_eq!(status(&r, "replay.extend.released"), Status::Skip);
    assert_eq!(status(&r, "extension.regime"), Status::Warn);
    all_released(&r);
}

#[test]
fn a_very_short_cadence_is_extrapolated_to_an_hour() {
    // Lead 21010 ms, reserve 21000 ms: a beat every ~10 ms.
    let lead = Policy {
        max_lead_ms: Some(21_010),
        ..Policy::default()
    };
    let rep = report::compute(&lead, &opts().create, 21_010, 10_000, 2, None);
    assert_eq!(rep.dead_zone, None, "{rep:?}");
    assert!(rep.extensions_per_hour.unwrap() > 200_000, "{rep:?}");
}
