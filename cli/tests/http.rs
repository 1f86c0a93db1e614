//! Real heartbeats over HTTP on 127.0.0.1: the driver against
//! `leasebeat serve` (started as a subprocess), asserting from the server's
//! own request log.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use leasebeat::driver::{
    ApiKey, Driver, DriverConfig, DriverError, Event, JeopardyReason, LeaseHandle, Outcome,
};
use leasebeat::{Config, KeyUse, Mode, Num, OutcomeClass, StopReason, TransportFailure};
use serde_json::{Value, json};

const KEY: &str = "test-key";

static N: AtomicU32 = AtomicU32::new(0);

struct Serve {
    child: Child,
    url: String,
    log: PathBuf,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Serve {
    fn start(args: &[&str]) -> Serve {
        let n = N.fetch_add(1, Ordering::SeqCst);
        let log = std::env::temp_dir().join(format!(
            "leasebeat-http-test-{}-{n}.jsonl",
            std::process::id()
        ));
        let mut child = Command::new(env!("CARGO_BIN_EXE_leasebeat"))
            .arg("serve")
            .arg("--log")
            .arg(&log)
            .arg("--api-key")
            .arg(KEY)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn leasebeat serve");
        let mut out = BufReader::new(child.stdout.take().expect("stdout"));
        let mut first = String::new();
        out.read_line(&mut first).expect("read the address line");
        let url = first
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {first:?}"))
            .to_owned();
        assert!(url.starts_with("http://127.0.0.1:"), "{url}");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let l = Arc::clone(&lines);
        std::thread::spawn(move || {
            for line in out.lines() {
                let Ok(line) = line else { break };
                l.lock().unwrap().push(line);
            }
        });
        Serve {
            child,
            url,
            log,
            lines,
        }
    }

    fn entries(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let mut v: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).expect("log line is JSON"))
            .collect();
        v.sort_by_key(|e| e["seq"].as_u64().unwrap_or(u64::MAX));
        v
    }

    fn requests(&self, endpoint: &str, reservation: Option<&str>) -> Vec<Value> {
        self.entries()
            .into_iter()
            .filter(|e| e["event"] == "request" && e["endpoint"] == endpoint)
            .filter(|e| reservation.is_none_or(|r| e["reservation_id"] == r))
            .collect()
    }

    fn lapses(&self) -> Vec<Value> {
        self.entries()
            .into_iter()
            .filter(|e| e["event"] == "lapse")
            .collect()
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_file(&self.log);
    }
}

/// A driver configuration without a journal (these tests settle nothing;
/// the settlement tests use a temporary journal).
fn test_config(url: impl Into<String>, key: ApiKey) -> DriverConfig {
    let mut c = DriverConfig::new(url, key);
    c.journal = leasebeat::driver::JournalOptions::disabled();
    c
}

fn config(ttl_ms: u64, timeout_ms: u64) -> Config {
    let mut c = Config::new(ttl_ms, Some(timeout_ms));
    c.create_request = json!({
        "subject": {"tenant": "t"},
        "action": {"kind": "k", "name": "n"},
        "estimate": {"unit": "TOKENS", "amount": 7}
    })
    .as_object()
    .cloned()
    .unwrap();
    c
}

/// Everything one lease did.
#[derive(Default)]
struct Run {
    events: Vec<Event>,
    stop: Option<StopReason>,
    reservation_id: Option<String>,
    extensions: u32,
}

impl Run {
    fn decisions(
        &self,
    ) -> Vec<(
        &Option<leasebeat::driver::AttemptReport>,
        &Outcome,
        &leasebeat::Decision,
    )> {
        self.events
            .iter()
            .filter_map(|e| match e {
                Event::Decision {
                    attempt,
                    outcome,
                    decision,
                    ..
                } => Some((attempt, outcome, decision.as_ref())),
                _ => None,
            })
            .collect()
    }
}

/// Collects the events of `lease` until it stops, cancelling it after
/// `cancel_after` successful extensions; then releases the reservation.
fn drive(
    driver: &Driver,
    events: &Receiver<Event>,
    lease: LeaseHandle,
    cancel_after: Option<u32>,
) -> Run {
    let mut run = Run::default();
    let deadline = Instant::now() + Duration::from_secs(40);
    let mut cancelled = false;
    while run.stop.is_none() {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(
            !left.is_zero(),
            "lease did not stop in time: {:?}",
            run.events
        );
        let Ok(event) = events.recv_timeout(left) else {
            continue;
        };
        assert_eq!(event.lease(), lease);
        match &event {
            Event::Decision {
                reservation_id,
                attempt,
                decision,
                ..
            } => {
                if reservation_id.is_some() {
                    run.reservation_id.clone_from(reservation_id);
                }
                if decision.outcome == OutcomeClass::Success
                    && attempt
                        .as_ref()
                        .is_some_and(|a| a.kind == leasebeat::AttemptKind::Extend)
                {
                    run.extensions += 1;
                }
                if cancel_after.is_some_and(|n| run.extensions >= n) && !cancelled {
                    cancelled = true;
                    driver.cancel(lease).unwrap();
                }
            }
            Event::Stopped { reason, .. } => run.stop = Some(*reason),
            Event::Error { error, .. } => panic!("core refused an input: {error}"),
            _ => {}
        }
        run.events.push(event);
    }
    if run.reservation_id.is_some() {
        let r = driver
            .release(lease, Some("test done"))
            .expect("release")
            .wait()
            .expect("a result");
        assert!(
            matches!(r.status, Some(200 | 410 | 409)),
            "release: {:?}",
            r.status
        );
    }
    run
}

fn one_lease(serve: &Serve, cfg: Config, cancel_after: Option<u32>) -> Run {
    let (driver, events) = Driver::new(test_config(&serve.url, ApiKey::new(KEY))).unwrap();
    let lease = driver.start(cfg).unwrap();
    let run = drive(&driver, &events, lease, cancel_after);
    driver.shutdown();
    run
}

fn body_key(e: &Value) -> String {
    let body: Value = serde_json::from_str(e["body"].as_str().unwrap()).expect("body is JSON");
    body["idempotency_key"].as_str().unwrap().to_owned()
}

/// The log's invariants for one reservation: every request carries the API
/// key and a header key equal to the body key; a repeated key repeats the
/// previous request byte for byte; every other key is fresh. Returns the
/// extend entries.
fn check_log(serve: &Serve, reservation_id: &str) -> Vec<Value> {
    let creates = serve.requests("create", None);
    for e in &creates {
        assert_eq!(e["header_key"].as_str().unwrap(), body_key(e));
    }
    let extends = serve.requests("extend", Some(reservation_id));
    let mut seen = std::collections::HashSet::new();
    let mut prev: Option<&Value> = None;
    for e in &extends {
        assert_eq!(e["api_key_present"], true);
        let key = body_key(e);
        assert_eq!(
            e["header_key"].as_str().unwrap(),
            key,
            "header key = body key"
        );
        match prev {
            Some(p) if body_key(p) == key => {
                assert_eq!(
                    p["body"], e["body"],
                    "a retry repeats the body byte for byte"
                );
            }
            _ => assert!(
                seen.insert(key.clone()),
                "a new beat uses a fresh key: {key}"
            ),
        }
        prev = Some(e);
    }
    extends
}

/// The driver's events agree with the log: a same-key attempt repeats the
/// previous attempt's key; a new one uses a key never used before.
fn check_events(run: &Run) {
    let mut keys = std::collections::HashSet::new();
    let mut last: Option<String> = None;
    for (attempt, _, _) in run.decisions() {
        let Some(a) = attempt else { continue };
        match a.key_use {
            KeyUse::Same => assert_eq!(last.as_deref(), Some(a.key.as_str())),
            KeyUse::New => assert!(keys.insert(a.key.clone())),
        }
        last = Some(a.key.clone());
    }
}

fn statuses(extends: &[Value]) -> Vec<Option<u64>> {
    extends.iter().map(|e| e["status"].as_u64()).collect()
}

fn assert_no_lapse(serve: &Serve) {
    std::thread::sleep(Duration::from_millis(50));
    assert!(serve.lapses().is_empty(), "lapses: {:?}", serve.lapses());
    let lines = serve.lines.lock().unwrap();
    assert!(!lines.iter().any(|l| l.starts_with("LAPSE")), "{lines:?}");
}

#[test]
fn additive_beats_use_fresh_keys() {
    let serve = Serve::start(&[]);
    let run = one_lease(&serve, config(4_000, 400), Some(3));
    assert_eq!(run.stop, Some(StopReason::Cancelled));
    check_events(&run);
    let id = run.reservation_id.clone().unwrap();
    let extends = check_log(&serve, &id);
    let ok: Vec<_> = extends.iter().filter(|e| e["status"] == 200).collect();
    assert_eq!(ok.len(), 3, "{:?}", statuses(&extends));
    for e in &extends {
        let body: Value = serde_json::from_str(e["body"].as_str().unwrap()).unwrap();
        assert_eq!(body["extend_by_ms"], 4_000);
        assert_eq!(e["path"], format!("/v1/reservations/{id}/extend"));
    }
    let releases = serve.requests("release", Some(&id));
    assert_eq!(releases.len(), 1);
    assert_eq!(releases[0]["status"], 200);
    assert_no_lapse(&serve);
}

fn policy_run(args: &[&str], beats: u32) -> (Serve, Run, Vec<Value>) {
    let serve = Serve::start(args);
    let run = one_lease(&serve, config(4_000, 400), Some(beats));
    assert_eq!(run.stop, Some(StopReason::Cancelled), "{:?}", run.events);
    check_events(&run);
    let extends = check_log(&serve, run.reservation_id.as_deref().unwrap());
    assert_eq!(
        extends.iter().filter(|e| e["status"] == 200).count() as u32,
        beats
    );
    assert_no_lapse(&serve);
    (serve, run, extends)
}

#[test]
fn max_lead_policy() {
    let (_s, run, extends) = policy_run(&["--max-lead-ms", "4000"], 4);
    // Every grant is clamped: remaining never exceeds the lead.
    for e in extends.iter().filter(|e| e["status"] == 200) {
        let r: Value = serde_json::from_str(e["response"].as_str().unwrap()).unwrap();
        assert!(r["remaining_ttl_ms"].as_u64().unwrap() <= 4_000);
    }
    assert!(
        run.decisions()
            .iter()
            .all(|(_, _, d)| d.mode != Some(Mode::Fallback))
    );
}

#[test]
fn grant_cap_policy() {
    let (_s, _run, extends) = policy_run(&["--grant-cap-ms", "1500"], 3);
    let exp: Vec<u64> = extends
        .iter()
        .filter(|e| e["status"] == 200)
        .map(|e| {
            let r: Value = serde_json::from_str(e["response"].as_str().unwrap()).unwrap();
            r["expires_at_ms"].as_u64().unwrap()
        })
        .collect();
    for w in exp.windows(2) {
        assert_eq!(w[1] - w[0], 1_500, "each extension adds the cap");
    }
}

#[test]
fn initial_ttl_cap_policy() {
    let (serve, run, _) = policy_run(&["--initial-ttl-cap-ms", "3000"], 2);
    let create = &serve.requests("create", None)[0];
    let r: Value = serde_json::from_str(create["response"].as_str().unwrap()).unwrap();
    assert!(r["remaining_ttl_ms"].as_u64().unwrap() <= 3_000);
    // 3000 ms of lead cannot hold a 3000 ms retry reserve: extend at once.
    let (_, _, first) = run.decisions()[0];
    assert_eq!(first.numbers.next_delay(), Some(Num::Int(0)));
}

#[test]
fn older_server_uses_fallback() {
    let (serve, run, _) = policy_run(&["--omit-remaining"], 3);
    assert!(
        run.decisions()
            .iter()
            .any(|(_, _, d)| d.mode == Some(Mode::Fallback))
    );
    for e in serve.requests("extend", None) {
        assert!(!e["response"].as_str().unwrap().contains("remaining_ttl_ms"));
    }
    // D-15: the fallback path proves nothing, so the proven lead is reached
    // at once: one `proven_until_reached` jeopardy right after the first
    // success, and only that one (later fallback successes do not re-arm).
    let first = run
        .events
        .iter()
        .position(|e| {
            matches!(e, Event::Decision { decision, .. }
                if decision.outcome == OutcomeClass::Success)
        })
        .expect("a success");
    let jeopardy: Vec<usize> = run
        .events
        .iter()
        .enumerate()
        .filter(|(_, e)| matches!(e, Event::Jeopardy { .. }))
        .map(|(i, _)| i)
        .collect();
    assert_eq!(jeopardy, [first + 1], "{:?}", run.events);
    let Event::Jeopardy {
        reason,
        reservation_id,
        proven_until_ns,
        ..
    } = &run.events[first + 1]
    else {
        unreachable!()
    };
    assert_eq!(*reason, JeopardyReason::ProvenUntilReached);
    assert_eq!(reservation_id, &run.reservation_id);
    assert_eq!(*proven_until_ns, None);
}

#[test]
fn extension_limit_stops_permanently() {
    let serve = Serve::start(&["--max-lead-ms", "4000", "--max-extensions", "2"]);
    let run = one_lease(&serve, config(4_000, 400), None);
    assert_eq!(run.stop, Some(StopReason::MaxExtensions));
    let extends = check_log(&serve, run.reservation_id.as_deref().unwrap());
    assert_eq!(statuses(&extends), vec![Some(200), Some(200), Some(409)]);
    assert!(
        extends[2]["response"]
            .as_str()
            .unwrap()
            .contains("MAX_EXTENSIONS_EXCEEDED")
    );
    assert_no_lapse(&serve);
}

/// The faulted extend and the next extend share key and body; returns them.
fn faulted_then_retry(extends: &[Value]) -> (Value, Value) {
    let i = extends
        .iter()
        .position(|e| !e["fault"].is_null())
        .expect("a faulted request");
    let (f, r) = (&extends[i], &extends[i + 1]);
    assert_eq!(body_key(f), body_key(r), "the retry reuses the key");
    assert_eq!(f["body"], r["body"], "the retry reuses the body");
    (f.clone(), r.clone())
}

#[test]
fn server_errors_are_retried_with_the_same_key() {
    let serve = Serve::start(&["--max-lead-ms", "4000", "--fault", "extend:2-3=503"]);
    let run = one_lease(&serve, config(4_000, 400), Some(3));
    assert_eq!(run.stop, Some(StopReason::Cancelled));
    check_events(&run);
    let extends = check_log(&serve, run.reservation_id.as_deref().unwrap());
    let st = statuses(&extends);
    assert_eq!(
        &st[..4],
        &[Some(200), Some(503), Some(503), Some(200)],
        "{st:?}"
    );
    assert_eq!(body_key(&extends[1]), body_key(&extends[2]));
    assert_eq!(body_key(&extends[2]), body_key(&extends[3]));
    assert_eq!(extends[1]["body"], extends[3]["body"]);
    assert_no_lapse(&serve);
}

#[test]
fn throttled_inside_the_window_waits_then_retries() {
    let serve = Serve::start(&[
        "--max-lead-ms",
        "7000",
        "--fault",
        "extend:2=429,retry-after=1",
    ]);
    let run = one_lease(&serve, config(8_000, 2_500), Some(2));
    assert_eq!(run.stop, Some(StopReason::Cancelled), "{:?}", run.events);
    let extends = check_log(&serve, run.reservation_id.as_deref().unwrap());
    let (f, r) = faulted_then_retry(&extends);
    assert_eq!(f["status"], 429);
    assert_eq!(r["status"], 200);
    // Server clock: the retry came no sooner than Retry-After (generous slack).
    let gap = r["arrived_ms"].as_u64().unwrap() - f["t_ms"].as_u64().unwrap();
    assert!(gap >= 950, "retry after {gap} ms");
    assert_no_lapse(&serve);
}

#[test]
fn throttled_beyond_the_window_stops() {
    let serve = Serve::start(&[
        "--max-lead-ms",
        "4000",
        "--fault",
        "extend:2=429,retry-after=30",
    ]);
    let run = one_lease(&serve, config(4_000, 400), None);
    assert_eq!(run.stop, Some(StopReason::Throttled));
    let extends = check_log(&serve, run.reservation_id.as_deref().unwrap());
    assert_eq!(statuses(&extends), vec![Some(200), Some(429)]);
    assert_no_lapse(&serve);
}

#[test]
fn lost_response_is_recovered_by_same_key_replay() {
    let serve = Serve::start(&["--max-lead-ms", "4000", "--fault", "extend:2=drop"]);
    let run = one_lease(&serve, config(4_000, 400), Some(3));
    assert_eq!(run.stop, Some(StopReason::Cancelled));
    check_events(&run);
    assert!(
        run.decisions()
            .iter()
            .any(|(_, o, _)| **o == Outcome::Failure(TransportFailure::Reset))
    );
    let extends = check_log(&serve, run.reservation_id.as_deref().unwrap());
    let (f, r) = faulted_then_retry(&extends);
    assert_eq!(f["outcome"], "dropped");
    assert_eq!(r["status"], 200);
    assert_no_lapse(&serve);
}

#[test]
fn slow_response_times_out_within_budget_and_replays() {
    // A 2.5 s budget (308 ms detection slack); the server answers after 4 s.
    let serve = Serve::start(&["--max-lead-ms", "7000", "--fault", "extend:2=delay=4000"]);
    let run = one_lease(&serve, config(8_000, 2_500), Some(3));
    assert_eq!(
        run.stop,
        Some(StopReason::Cancelled),
        "{:#?}",
        run.decisions()
    );
    check_events(&run);
    let timeout = run
        .events
        .iter()
        .find_map(|e| match e {
            Event::Decision {
                attempt: Some(a),
                outcome: Outcome::Failure(TransportFailure::Timeout),
                observed_ns,
                ..
            } => Some(observed_ns - a.sent_ns),
            _ => None,
        })
        .expect("a timeout");
    assert!(timeout <= 2_500_000_000, "observed {timeout} ns after sent");
    // The server logs the delayed request once it has answered it.
    let until = Instant::now() + Duration::from_secs(10);
    while !serve
        .requests("extend", None)
        .iter()
        .any(|e| !e["fault"].is_null())
    {
        assert!(
            Instant::now() < until,
            "the delayed request was never logged"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let extends = check_log(&serve, run.reservation_id.as_deref().unwrap());
    let (f, r) = faulted_then_retry(&extends);
    // The server applied the first one; the replay returns its expiry verbatim.
    let fr: Value = serde_json::from_str(f["response"].as_str().unwrap()).unwrap();
    let rr: Value = serde_json::from_str(r["response"].as_str().unwrap()).unwrap();
    assert_eq!(fr["expires_at_ms"], rr["expires_at_ms"]);
    assert_no_lapse(&serve);
}

#[test]
fn malformed_success_is_ambiguous_and_retried() {
    let serve = Serve::start(&["--max-lead-ms", "4000", "--fault", "extend:2=malformed"]);
    let run = one_lease(&serve, config(4_000, 400), Some(3));
    assert_eq!(run.stop, Some(StopReason::Cancelled));
    assert!(
        run.decisions()
            .iter()
            .any(|(_, _, d)| d.outcome == OutcomeClass::Ambiguous)
    );
    let extends = check_log(&serve, run.reservation_id.as_deref().unwrap());
    let (f, r) = faulted_then_retry(&extends);
    assert_eq!(f["status"], 200);
    assert_eq!(r["status"], 200);
    assert_no_lapse(&serve);
}

/// (successful extends, proven expiry on the driver clock, stop)
type KillState = (u32, u64, Option<(StopReason, u64)>);

#[test]
fn killing_the_server_stops_every_lease_before_its_lead_runs_out() {
    let mut serve = Serve::start(&["--max-lead-ms", "4000"]);
    let (driver, events) = Driver::new(test_config(&serve.url, ApiKey::new(KEY))).unwrap();
    let leases: Vec<LeaseHandle> = (0..3)
        .map(|_| driver.start(config(4_000, 400)).unwrap())
        .collect();
    // Per lease: (successful extends, proven expiry on the driver clock, stop).
    let mut state: std::collections::HashMap<LeaseHandle, KillState> =
        leases.iter().map(|l| (*l, (0, 0, None))).collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut killed = false;
    while state.values().any(|s| s.2.is_none()) {
        assert!(Instant::now() < deadline, "leases did not all stop");
        if !killed && state.values().all(|s| s.0 >= 1) {
            serve.kill();
            killed = true;
        }
        let Ok(event) = events.recv_timeout(Duration::from_millis(100)) else {
            continue;
        };
        let s = state.get_mut(&event.lease()).unwrap();
        match event {
            Event::Decision {
                decision,
                observed_ns,
                attempt,
                ..
            } if decision.outcome == OutcomeClass::Success => {
                if attempt.is_some_and(|a| a.kind == leasebeat::AttemptKind::Extend) {
                    s.0 += 1;
                }
                if let Some(Num::Int(lead)) = decision.numbers.lead_floor() {
                    s.1 = observed_ns + lead as u64 * 1_000_000;
                }
            }
            Event::Stopped { reason, at_ns, .. } => s.2 = Some((reason, at_ns)),
            Event::Error { error, .. } => panic!("{error}"),
            _ => {}
        }
    }
    assert!(killed);
    for (lease, (_, expiry, stop)) in state {
        let (reason, at) = stop.unwrap();
        assert_ne!(reason, StopReason::Cancelled, "{lease}");
        assert!(
            at <= expiry,
            "{lease} stopped {reason} after its proven lead ran out"
        );
    }
    driver.shutdown();
}

#[test]
fn cancel_while_in_flight_ignores_the_late_response() {
    // The first extend is held 2 s by the server; cancel while it hangs.
    let serve = Serve::start(&["--max-lead-ms", "7000", "--fault", "extend:1=hold=2000"]);
    let (driver, events) = Driver::new(test_config(&serve.url, ApiKey::new(KEY))).unwrap();
    let lease = driver.start(config(8_000, 2_500)).unwrap();
    // A second lease on the same driver (another server) keeps beating.
    let serve2 = Serve::start(&[]);
    let other = driver
        .start_heartbeat_at(
            &serve2.url,
            leasebeat::Heartbeat::new(config(4_000, 400)).unwrap(),
        )
        .unwrap();
    let mut create_seen = false;
    let mut stopped = false;
    let mut after_stop = Vec::new();
    let mut other_beats = 0;
    let until = Instant::now() + Duration::from_secs(8);
    while Instant::now() < until {
        let Ok(event) = events.recv_timeout(Duration::from_millis(50)) else {
            continue;
        };
        if event.lease() == other {
            if let Event::Decision { decision, .. } = &event {
                if decision.outcome == OutcomeClass::Success {
                    other_beats += 1;
                }
            }
            continue;
        }
        if stopped {
            after_stop.push(event);
            continue;
        }
        match &event {
            Event::Decision { decision, .. } if !create_seen => {
                create_seen = true;
                // The extend is due after this delay; cancel mid-flight.
                let delay = decision.at_ns.unwrap()
                    - leasebeat::driver::clock::now_ns().min(decision.at_ns.unwrap());
                std::thread::sleep(Duration::from_nanos(delay) + Duration::from_millis(500));
                driver.cancel(lease).unwrap();
            }
            Event::Stopped { reason, .. } => {
                assert_eq!(*reason, StopReason::Cancelled);
                stopped = true;
            }
            _ => {}
        }
    }
    assert!(stopped);
    assert!(
        after_stop.is_empty(),
        "events after the stop: {after_stop:?}"
    );
    assert!(
        other_beats >= 2,
        "the other lease kept beating: {other_beats}"
    );
    // The held extend was answered (late) by the server.
    let held: Vec<Value> = serve
        .requests("extend", None)
        .into_iter()
        .filter(|e| !e["fault"].is_null())
        .collect();
    assert_eq!(held.len(), 1);
    driver.shutdown();
}

fn raw(url: &str, path: &str, headers: &[(&str, &str)], body: &str) -> (u16, Value) {
    let addr = url.strip_prefix("http://").unwrap();
    let mut s = TcpStream::connect(addr).unwrap();
    let mut req = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (n, v) in headers {
        req.push_str(&format!("{n}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let status = out[9..12].parse().unwrap();
    let body = out.split("\r\n\r\n").nth(1).unwrap_or_default();
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

#[test]
fn reference_server_follows_the_protocol() {
    let serve = Serve::start(&[]);
    let u = &serve.url;
    let create = r#"{"idempotency_key":"c1","ttl_ms":5000,"subject":{"tenant":"t"},"action":{"kind":"k","name":"n"},"estimate":{"unit":"TOKENS","amount":3}}"#;
    let auth = ("X-Cycles-API-Key", KEY);
    assert_eq!(raw(u, "/v1/reservations", &[], create).0, 401);
    assert_eq!(
        raw(
            u,
            "/v1/reservations",
            &[("X-Cycles-API-Key", "wrong")],
            create
        )
        .0,
        401
    );
    let (st, r) = raw(
        u,
        "/v1/reservations",
        &[auth, ("X-Idempotency-Key", "c1")],
        create,
    );
    assert_eq!(st, 200);
    let id = r["reservation_id"].as_str().unwrap().to_owned();
    assert_eq!(r["decision"], "ALLOW");
    // Same-key replay: same reservation.
    let (_, r2) = raw(u, "/v1/reservations", &[auth], create);
    assert_eq!(r2["reservation_id"], id.as_str());
    let ext = |k: &str| format!(r#"{{"extend_by_ms":5000,"idempotency_key":"{k}"}}"#);
    let path = format!("/v1/reservations/{id}/extend");
    let (st, r) = raw(
        u,
        &path,
        &[auth, ("X-Idempotency-Key", "other")],
        &ext("e1"),
    );
    assert_eq!((st, r["error"].as_str()), (400, Some("INVALID_REQUEST")));
    let (st, e1) = raw(u, &path, &[auth, ("X-Idempotency-Key", "e1")], &ext("e1"));
    assert_eq!(st, 200);
    assert_eq!(e1["status"], "ACTIVE");
    let (_, again) = raw(u, &path, &[auth], &ext("e1"));
    assert_eq!(again["expires_at_ms"], e1["expires_at_ms"]);
    let (st, r) = raw(
        u,
        &path,
        &[auth],
        r#"{"extend_by_ms":1,"idempotency_key":"e1"}"#,
    );
    assert_eq!(
        (st, r["error"].as_str()),
        (409, Some("IDEMPOTENCY_MISMATCH"))
    );
    let (st, r) = raw(u, "/v1/reservations/nope/extend", &[auth], &ext("e2"));
    assert_eq!((st, r["error"].as_str()), (404, Some("NOT_FOUND")));
    let rel = format!("/v1/reservations/{id}/release");
    let (st, r) = raw(u, &rel, &[auth], r#"{"idempotency_key":"r1"}"#);
    assert_eq!((st, r["status"].as_str()), (200, Some("RELEASED")));
    assert_eq!(r["released"]["amount"], 3);
    let (st, _) = raw(u, &rel, &[auth], r#"{"idempotency_key":"r1"}"#);
    assert_eq!(st, 200, "release replay");
    let (st, r) = raw(u, &path, &[auth], &ext("e3"));
    assert_eq!(
        (st, r["error"].as_str()),
        (409, Some("RESERVATION_FINALIZED"))
    );
    let (st, r) = raw(u, &rel, &[auth], r#"{"idempotency_key":"r2"}"#);
    assert_eq!(
        (st, r["error"].as_str()),
        (409, Some("RESERVATION_FINALIZED"))
    );
    assert_no_lapse(&serve);
}

#[test]
fn an_unattended_lease_is_reported_as_a_lapse() {
    let serve = Serve::start(&[]);
    let create = r#"{"idempotency_key":"c1","ttl_ms":1000,"subject":{"tenant":"t"},"action":{"kind":"k","name":"n"},"estimate":{"unit":"TOKENS","amount":3}}"#;
    let (st, _) = raw(
        &serve.url,
        "/v1/reservations",
        &[("X-Cycles-API-Key", KEY)],
        create,
    );
    assert_eq!(st, 200);
    let until = Instant::now() + Duration::from_secs(10);
    while serve.lapses().is_empty() {
        assert!(Instant::now() < until, "no LAPSE reported");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        serve
            .lines
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.starts_with("LAPSE reservation_id=rsv-1"))
    );
}

#[test]
fn run_command_heartbeats_until_interrupted_then_releases() {
    let serve = Serve::start(&["--max-lead-ms", "4000"]);
    // `leasebeat run` journals by default: never under the tester's home.
    let journal = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_leasebeat"))
        .args(["run", "--url", &serve.url, "--ttl-ms", "4000", "--timeout-ms", "400"])
        .env("CYCLES_JOURNAL_DIR", journal.path())
        .args(["--create", r#"{"subject":{"tenant":"t"},"action":{"kind":"k","name":"n"},"estimate":{"unit":"TOKENS","amount":1}}"#])
        .env("LEASEBEAT_API_KEY", KEY)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut lines = Vec::new();
    let mut decisions = 0;
    while decisions < 3 {
        let mut line = String::new();
        assert!(
            out.read_line(&mut line).unwrap() > 0,
            "run ended early: {lines:?}"
        );
        let v: Value = serde_json::from_str(&line).unwrap();
        assert!(!line.contains(KEY), "the API key is never printed");
        if v["event"] == "decision" {
            decisions += 1;
        }
        lines.push(v);
    }
    let ok = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(ok.success());
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}: {rest}");
    let rest: Vec<Value> = rest
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(
        rest.iter()
            .any(|v| v["event"] == "stopped" && v["reason"] == "cancelled"),
        "{rest:?}"
    );
    let release = rest
        .iter()
        .find(|v| v["event"] == "release")
        .expect("release line");
    assert_eq!(release["result"]["status"], 200);
    assert_no_lapse(&serve);
}

#[test]
fn demo_runs_clean() {
    let out = Command::new(env!("CARGO_BIN_EXE_leasebeat"))
        .arg("demo")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("== summary"));
    assert!(stdout.contains(" 0 unreported lapses"), "{stdout}");
    // The legend first, the simulate section last.
    assert!(stdout.starts_with("How to read this"), "{stdout}");
    let sim = stdout.find("== simulate").expect("a simulate section");
    assert!(sim > stdout.find("== summary").unwrap());
    let table = &stdout[sim..];
    for name in ["leasebeat", "historical", "alternate-beat", "python-sdk"] {
        assert!(table.contains(name), "{table}");
    }
}

#[test]
fn demo_runs_chosen_scenarios_quietly() {
    let out = Command::new(env!("CARGO_BIN_EXE_leasebeat"))
        .args([
            "demo",
            "--scenario",
            "older-server",
            "--scenario",
            "additive",
            "--quiet",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stderr.is_empty(), "{stderr}");
    assert!(stdout.starts_with("== summary"), "{stdout}");
    assert!(!stdout.contains("How to read"), "{stdout}");
    assert!(!stdout.contains("== simulate"), "{stdout}");
    assert!(stdout.contains("2 scenarios, 2 ended as expected, 0 unreported lapses"));
    // The fallback path proves no lead: no number in the lead column.
    let row = stdout
        .lines()
        .find(|l| l.starts_with("older-server"))
        .expect("an older-server row");
    let cols: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cols[2], "-", "{row}");

    let out = Command::new(env!("CARGO_BIN_EXE_leasebeat"))
        .args(["demo", "--scenario", "no-such-scenario"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("no-such-scenario") && stderr.contains("429-beyond"),
        "{stderr}"
    );
}

/// Sends one raw request and returns everything the server wrote before
/// closing (empty when it closed unanswered).
fn raw_bytes(url: &str, path: &str, body: &str) -> Vec<u8> {
    let addr = url.strip_prefix("http://").unwrap();
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let req = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nX-Cycles-API-Key: {KEY}\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).unwrap();
    let mut out = Vec::new();
    match s.read_to_end(&mut out) {
        Ok(_) => {}
        Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset, "{e}"),
    }
    out
}

#[test]
fn drop_faults_close_the_connection_without_any_response() {
    let serve = Serve::start(&[
        "--fault",
        "create:1=drop-before",
        "--fault",
        "create:2=drop",
    ]);
    let create = |k: &str| {
        format!(
            r#"{{"idempotency_key":"{k}","subject":{{"tenant":"t"}},"action":{{"kind":"k","name":"n"}},"estimate":{{"unit":"TOKENS","amount":3}}}}"#
        )
    };
    // Closed unanswered: not a byte (in particular no 500), and not a hang.
    assert!(raw_bytes(&serve.url, "/v1/reservations", &create("c1")).is_empty());
    assert!(raw_bytes(&serve.url, "/v1/reservations", &create("c2")).is_empty());
    let auth = [("X-Cycles-API-Key", KEY)];
    // `drop` applied the create (the replay finds it); `drop-before` did not.
    let (st, r) = raw(&serve.url, "/v1/reservations", &auth, &create("c2"));
    assert_eq!((st, r["reservation_id"].as_str()), (200, Some("rsv-1")));
    let (st, r) = raw(&serve.url, "/v1/reservations", &auth, &create("c1"));
    assert_eq!((st, r["reservation_id"].as_str()), (200, Some("rsv-2")));
    let creates = serve.requests("create", None);
    let outcomes: Vec<_> = creates
        .iter()
        .map(|e| (e["outcome"].as_str().unwrap(), e["status"].as_u64()))
        .collect();
    assert_eq!(
        outcomes,
        vec![
            ("dropped", None),
            ("dropped", None),
            ("responded", Some(200)),
            ("responded", Some(200))
        ]
    );
}

#[test]
fn a_held_request_does_not_hold_up_others() {
    let serve = Serve::start(&["--fault", "extend:1=hold=3000"]);
    let url = serve.url.clone();
    let held = std::thread::spawn(move || {
        raw_bytes(
            &url,
            "/v1/reservations/nope/extend",
            r#"{"idempotency_key":"e1","extend_by_ms":1000}"#,
        )
    });
    // The held request is logged (`held`) as soon as its hold begins.
    let until = std::time::Instant::now() + Duration::from_secs(20);
    let lines = loop {
        let lines: Vec<Value> = std::fs::read_to_string(&serve.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok()) // a line being written is skipped
            .collect();
        if !lines.is_empty() {
            break lines;
        }
        assert!(std::time::Instant::now() < until, "no held line");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["event"], "held");
    assert_eq!(lines[0]["endpoint"], "extend");
    assert_eq!(lines[0]["reservation_id"], "nope");
    assert_eq!(lines[0]["hold_ms"], 3000);
    let (st, _) = raw(
        &serve.url,
        "/v1/reservations/nope/extend",
        &[("X-Cycles-API-Key", KEY)],
        r#"{"idempotency_key":"e2","extend_by_ms":1000}"#,
    );
    assert_eq!(st, 404);
    let answered = String::from_utf8(held.join().unwrap()).unwrap();
    assert!(answered.starts_with("HTTP/1.1 404"), "{answered}");
    // Request lines are written in answer order: the second request first.
    let calls: Vec<u64> = std::fs::read_to_string(&serve.log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["event"] == "request")
        .map(|e| e["call"].as_u64().unwrap())
        .collect();
    assert_eq!(calls, vec![2, 1]);
}

#[test]
fn commit_and_release_answer_the_protocol_bodies() {
    let serve = Serve::start(&[]);
    let u = &serve.url;
    let auth = ("X-Cycles-API-Key", KEY);
    let create = |k: &str| {
        format!(
            r#"{{"idempotency_key":"{k}","subject":{{"tenant":"t"}},"action":{{"kind":"k","name":"n"}},"estimate":{{"unit":"TOKENS","amount":10}}}}"#
        )
    };
    let (_, r) = raw(u, "/v1/reservations", &[auth], &create("c1"));
    let id = r["reservation_id"].as_str().unwrap().to_owned();
    let commit = format!("/v1/reservations/{id}/commit");
    let body = r#"{"idempotency_key":"k1","actual":{"unit":"TOKENS","amount":4}}"#;
    let (st, r) = raw(u, &commit, &[auth, ("X-Idempotency-Key", "other")], body);
    assert_eq!((st, r["error"].as_str()), (400, Some("INVALID_REQUEST")));
    let (st, r) = raw(u, &commit, &[auth], r#"{"idempotency_key":"k1"}"#);
    assert_eq!((st, r["error"].as_str()), (400, Some("INVALID_REQUEST")));
    let (st, r) = raw(u, &commit, &[auth, ("X-Idempotency-Key", "k1")], body);
    assert_eq!(st, 200);
    assert_eq!(
        r,
        json!({"status": "COMMITTED", "charged": {"unit": "TOKENS", "amount": 4},
               "released": {"unit": "TOKENS", "amount": 6}})
    );
    assert_eq!(raw(u, &commit, &[auth], body), (200, r));
    let (st, r) = raw(
        u,
        &commit,
        &[auth],
        r#"{"idempotency_key":"k1","actual":{"unit":"TOKENS","amount":5}}"#,
    );
    assert_eq!(
        (st, r["error"].as_str()),
        (409, Some("IDEMPOTENCY_MISMATCH"))
    );
    let (st, r) = raw(
        u,
        &format!("/v1/reservations/{id}/release"),
        &[auth],
        r#"{"idempotency_key":"r1"}"#,
    );
    assert_eq!(
        (st, r["error"].as_str()),
        (409, Some("RESERVATION_FINALIZED"))
    );
    let (st, r) = raw(u, "/v1/reservations/nope/commit", &[auth], body);
    assert_eq!((st, r["error"].as_str()), (404, Some("NOT_FOUND")));
    // An expired reservation past its grace (none asked here): 410.
    let short = r#"{"idempotency_key":"c2","ttl_ms":1000,"grace_period_ms":0,"subject":{"tenant":"t"},"action":{"kind":"k","name":"n"},"estimate":{"unit":"TOKENS","amount":10}}"#;
    let (_, r) = raw(u, "/v1/reservations", &[auth], short);
    let id2 = r["reservation_id"].as_str().unwrap().to_owned();
    let until = Instant::now() + Duration::from_secs(10);
    while serve.lapses().is_empty() {
        assert!(Instant::now() < until, "no lapse");
        std::thread::sleep(Duration::from_millis(50));
    }
    let (st, r) = raw(
        u,
        &format!("/v1/reservations/{id2}/release"),
        &[auth],
        r#"{"idempotency_key":"r1"}"#,
    );
    assert_eq!(
        (st, r["error"].as_str()),
        (410, Some("RESERVATION_EXPIRED"))
    );
}

#[test]
fn demo_help_names_every_scenario() {
    let out = Command::new(env!("CARGO_BIN_EXE_leasebeat"))
        .args(["demo", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout).replace(char::is_whitespace, "");
    for s in leasebeat_cli::demo::scenarios() {
        assert!(help.contains(s.name), "{} missing from demo --help", s.name);
    }
}

/// D-15: a driver whose timer is stalled (test hook: nothing is sent) still
/// reports `late_beat` and then `proven_until_reached` jeopardy for the
/// lease, and the second comes while the reservation is still alive on the
/// server: the lapse that follows is not silent. The create is held 300 ms
/// before the server applies it, so the proven lead ends about 300 ms
/// before the true expiry.
#[test]
fn jeopardy_is_reported_before_the_lapse_when_the_timer_stalls() {
    let serve = Serve::start(&["--fault", "create:1=hold=300"]);
    let (driver, events) = Driver::new(test_config(serve.url.clone(), ApiKey::new(KEY))).unwrap();
    let lease = driver.start(config(6_000, 1_000)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut seen: Vec<String> = Vec::new();
    let mut reservation: Option<String> = None;
    let mut lapsed_at_proven: Option<bool> = None;
    let reason = loop {
        assert!(Instant::now() < deadline, "no stop: {seen:?}");
        let Ok(event) = events.recv_timeout(Duration::from_millis(50)) else {
            continue;
        };
        assert_eq!(event.lease(), lease);
        match event {
            Event::Decision {
                reservation_id,
                decision,
                ..
            } => {
                seen.push(format!("decision:{}", decision.outcome.as_str()));
                if reservation.is_none() && reservation_id.is_some() {
                    reservation = reservation_id;
                    // The create succeeded: stall every send from now on.
                    driver.hold_sends_for_testing(true).unwrap();
                }
            }
            Event::Jeopardy {
                reason,
                reservation_id,
                proven_until_ns,
                due_ns,
                at_ns,
                ..
            } => {
                assert_eq!(reservation_id, reservation);
                seen.push(format!("jeopardy:{reason}"));
                match reason {
                    JeopardyReason::CreateUnresolved => panic!("the create was answered"),
                    JeopardyReason::LateBeat => {
                        assert!(at_ns > due_ns.unwrap());
                    }
                    JeopardyReason::ProvenUntilReached => {
                        assert!(at_ns >= proven_until_ns.unwrap());
                        let id = reservation.clone().unwrap();
                        let lapsed = serve
                            .lines
                            .lock()
                            .unwrap()
                            .iter()
                            .any(|l| l.starts_with(&format!("LAPSE reservation_id={id} ")));
                        lapsed_at_proven = Some(lapsed);
                        // Wait for the lapse, then let the held beat go.
                        let until = Instant::now() + Duration::from_secs(10);
                        while !serve
                            .lines
                            .lock()
                            .unwrap()
                            .iter()
                            .any(|l| l.starts_with(&format!("LAPSE reservation_id={id} ")))
                        {
                            assert!(Instant::now() < until, "no LAPSE reported");
                            std::thread::sleep(Duration::from_millis(20));
                        }
                        driver.hold_sends_for_testing(false).unwrap();
                    }
                }
            }
            Event::Stopped { reason, .. } => break reason,
            Event::Error { error, .. } => panic!("{error}"),
            _ => {}
        }
    };
    assert_eq!(
        lapsed_at_proven,
        Some(false),
        "jeopardy came after the lapse"
    );
    assert_eq!(
        seen,
        [
            "decision:success",
            "jeopardy:late_beat",
            "jeopardy:proven_until_reached",
            "decision:permanent",
        ]
    );
    // The held beat was sent after the jeopardy and found the lease gone.
    assert_eq!(reason, StopReason::Expired);
    driver.shutdown();
}

/// An API key that cannot be a header value is refused up front, without
/// echoing it (Rust API and `leasebeat run`).
#[test]
fn api_keys_with_cr_or_lf_are_refused_up_front() {
    for key in ["se\r\ncret", "secret\n", "sec\0ret", ""] {
        let err = Driver::new(test_config("http://127.0.0.1:1", ApiKey::new(key)))
            .map(|_| ())
            .unwrap_err();
        assert!(matches!(err, DriverError::BadApiKey(_)), "{err:?}");
        if !key.is_empty() {
            assert!(!err.to_string().contains("cret"), "{err}");
        }
    }
    let out = Command::new(env!("CARGO_BIN_EXE_leasebeat"))
        .args([
            "run",
            "--url",
            "http://127.0.0.1:1",
            "--reservation",
            "rsv-1",
        ])
        .args(["--api-key", "top\r\nsecret-value"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("CR or LF"), "{stderr}");
    assert!(!stderr.contains("secret-value"), "{stderr}");
}

/// A 404 whose body is over the driver's 1 MiB limit is a complete response
/// with no usable body: the lease stops `not_found`, it is not retried as a
/// transport failure.
#[test]
fn an_oversized_404_body_stops_not_found() {
    use std::net::TcpListener;
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        // One connection: read the request head and body, answer 404 with
        // a 2 MiB HTML page.
        let (mut s, _) = listener.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            let n = s.read(&mut chunk).unwrap();
            buf.extend_from_slice(&chunk[..n]);
            let text = String::from_utf8_lossy(&buf).to_string();
            if let Some(head_end) = text.find("\r\n\r\n") {
                let len: usize = text
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("content-length:")
                            .map(|v| v.trim().parse().unwrap())
                    })
                    .unwrap_or(0);
                if buf.len() >= head_end + 4 + len {
                    break;
                }
            }
            assert!(n > 0, "client closed early");
        }
        let page = format!("<html><body>{}</body></html>", "x".repeat(2 << 20));
        let head = format!(
            "HTTP/1.1 404 Not Found\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            page.len()
        );
        let _ = s.write_all(head.as_bytes());
        let _ = s.write_all(page.as_bytes());
    });
    let (driver, events) =
        Driver::new(test_config(format!("http://{addr}"), ApiKey::new(KEY))).unwrap();
    let hb = leasebeat::Heartbeat::for_reservation(config(60_000, 2_000), "rsv-big").unwrap();
    driver.start_heartbeat(hb).unwrap();
    let mut outcomes = Vec::new();
    let reason = loop {
        match events
            .recv_timeout(Duration::from_secs(20))
            .expect("an event")
        {
            Event::Decision { outcome, .. } => outcomes.push(outcome),
            Event::Stopped { reason, .. } => break reason,
            Event::Error { error, .. } => panic!("{error}"),
            _ => {}
        }
    };
    assert_eq!(outcomes, vec![Outcome::Status(404)]);
    assert_eq!(reason, StopReason::NotFound);
    driver.shutdown();
    server.join().unwrap();
}

/// `leasebeat serve --max-connections 2`: a third concurrent connection is
/// answered 503 and closed; the summary line on SIGTERM counts it.
#[test]
fn serve_caps_connections_and_prints_a_summary() {
    let mut serve = Serve::start(&["--max-connections", "2"]);
    let addr = serve.url.strip_prefix("http://").unwrap().to_owned();
    // Two idle connections hold the cap.
    let a = TcpStream::connect(&addr).unwrap();
    let b = TcpStream::connect(&addr).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let mut c = TcpStream::connect(&addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut out = String::new();
    let _ = c.read_to_string(&mut out);
    assert!(out.starts_with("HTTP/1.1 503"), "{out:?}");
    drop((a, b));
    // SIGTERM: the summary line, then exit 0.
    let pid = serve.child.id().to_string();
    let status = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(status.success());
    let exit = serve.child.wait().unwrap();
    assert!(exit.success(), "{exit:?}");
    std::thread::sleep(Duration::from_millis(100));
    let lines = serve.lines.lock().unwrap().clone();
    let summary = lines
        .iter()
        .find(|l| l.starts_with("summary "))
        .unwrap_or_else(|| panic!("{lines:?}"));
    assert_eq!(summary, "summary leases=0 extensions=0 lapses=0 refused=1");
    serve.kill();
}

/// The server refuses request bodies over the model's size cap (nothing is
/// stored), and bounds each reservation's extension records.
#[test]
fn serve_refuses_oversized_requests() {
    let serve = Serve::start(&[]);
    let big = "x".repeat(64 * 1024);
    let create = format!(
        r#"{{"idempotency_key":"c1","subject":{{"tenant":"{big}"}},"action":{{"kind":"k","name":"n"}},"estimate":{{"unit":"TOKENS","amount":3}}}}"#
    );
    let (status, body) = raw(
        &serve.url,
        "/v1/reservations",
        &[("X-Cycles-API-Key", KEY)],
        &create,
    );
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"], "INVALID_REQUEST");
}

/// Issue 25 (2): the first extension of an adopted reservation
/// (`Heartbeat::for_reservation`) is due at once, "at 0": the driver sends it
/// on time and reports no `late_beat` for it (before the fix every adoption
/// reported one, the driver clock being far past its instant 0).
#[test]
fn an_adopted_reservation_s_on_time_first_beat_is_not_late() {
    let serve = Serve::start(&[]);
    let (_, r) = raw(
        &serve.url,
        "/v1/reservations",
        &[("X-Cycles-API-Key", KEY), ("X-Idempotency-Key", "adopt-1")],
        r#"{"idempotency_key":"adopt-1","subject":{"tenant":"t"},"action":{"kind":"k","name":"n"},"estimate":{"unit":"TOKENS","amount":1},"ttl_ms":4000}"#,
    );
    let id = r["reservation_id"].as_str().expect("created").to_owned();
    let (driver, events) = Driver::new(test_config(&serve.url, ApiKey::new(KEY))).unwrap();
    let hb = leasebeat::Heartbeat::for_reservation(config(4_000, 500), &id).unwrap();
    let lease = driver.start_heartbeat(hb).unwrap();
    let run = drive(&driver, &events, lease, Some(2));
    driver.shutdown();
    assert_eq!(run.stop, Some(StopReason::Cancelled));
    assert_eq!(run.extensions, 2);
    let jeopardy: Vec<String> = run
        .events
        .iter()
        .filter_map(|e| match e {
            Event::Jeopardy { reason, .. } => Some(reason.to_string()),
            _ => None,
        })
        .collect();
    assert!(jeopardy.is_empty(), "false jeopardy: {jeopardy:?}");
    check_log(&serve, &id);
    assert_no_lapse(&serve);
}

/// Issue 25 (1): the same-key retry of a timed-out create is not new work:
/// it goes ahead of the creates queued behind it (the contract's one
/// immediate retry), or a reservation the server already made expires there
/// while its retry waits. Two workers, one lease whose create is answered
/// past its budget, then twenty more leases whose creates the server holds
/// 300 ms each: the retry reaches the server among the first few creates,
/// not after the twenty.
#[test]
fn a_create_retry_goes_ahead_of_queued_creates() {
    let serve = Serve::start(&[
        "--fault",
        "create:1=delay=1500",
        "--fault",
        "create:2-=hold=300",
    ]);
    let mut dc = test_config(&serve.url, ApiKey::new(KEY));
    dc.max_workers = 2;
    let (driver, events) = Driver::new(dc).unwrap();
    let first = driver.start(config(3_000, 1_000)).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let others: Vec<LeaseHandle> = (0..20)
        .map(|_| driver.start(config(3_000, 1_000)).unwrap())
        .collect();
    // Until the first lease's create has been retried and every other lease
    // created (or stopped).
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut first_key: Option<String> = None;
    let mut retried = false;
    let mut settled = std::collections::HashSet::new();
    while !(retried && settled.len() == others.len()) {
        assert!(Instant::now() < deadline, "timed out");
        let Ok(event) = events.recv_timeout(Duration::from_millis(100)) else {
            continue;
        };
        match event {
            Event::Decision {
                lease,
                attempt: Some(a),
                decision,
                ..
            } if a.kind == leasebeat::AttemptKind::Create => {
                if lease == first {
                    if a.key_use == KeyUse::New {
                        first_key = Some(a.key.clone());
                    } else {
                        retried = true;
                    }
                } else if decision.outcome == OutcomeClass::Success
                    || decision.stop_reason().is_some()
                {
                    settled.insert(lease);
                }
            }
            Event::Stopped { lease, .. } if lease != first => {
                settled.insert(lease);
            }
            Event::Error { error, .. } => panic!("{error}"),
            _ => {}
        }
    }
    driver.shutdown();
    let key = first_key.expect("the first create was decided");
    let creates = serve.requests("create", None);
    assert_eq!(creates.len(), 22, "20 creates, one create and its retry");
    let position = creates
        .iter()
        .enumerate()
        .filter(|(_, e)| e["header_key"].as_str() == Some(key.as_str()))
        .map(|(i, _)| i)
        .nth(1)
        .expect("the retry reached the server");
    assert!(
        position < 8,
        "the retry was create request {} of {}: queued behind new creates",
        position + 1,
        creates.len()
    );
}

/// Issue 25 (1): a lease whose create is still unresolved when its first
/// attempt's send instant plus the TTL (less the safety margin) has passed
/// reports `create_unresolved` before the server's reservation expires:
/// here the create is applied but answered past its budget and the retry is
/// held past its own, so the client never learns of the reservation.
#[test]
fn an_unresolved_create_reports_jeopardy_before_the_server_expiry() {
    let serve = Serve::start(&[
        "--fault",
        "create:1=delay=2500",
        "--fault",
        "create:2=hold=5000",
    ]);
    let (driver, events) = Driver::new(test_config(&serve.url, ApiKey::new(KEY))).unwrap();
    let lease = driver.start(config(3_000, 1_500)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut seen = Vec::new();
    let mut lapsed_at_jeopardy = None;
    let reason = loop {
        assert!(Instant::now() < deadline, "no stop: {seen:?}");
        let Ok(event) = events.recv_timeout(Duration::from_millis(50)) else {
            continue;
        };
        assert_eq!(event.lease(), lease);
        match event {
            Event::Decision { decision, .. } => {
                seen.push(format!("decision:{}", decision.outcome.as_str()));
            }
            Event::Jeopardy {
                reason,
                reservation_id,
                ..
            } => {
                assert_eq!(reservation_id, None);
                seen.push(format!("jeopardy:{reason}"));
                let lines = serve.lines.lock().unwrap();
                lapsed_at_jeopardy = Some(lines.iter().any(|l| l.starts_with("LAPSE")));
            }
            Event::Stopped { reason, .. } => break reason,
            Event::Error { error, .. } => panic!("{error}"),
            _ => {}
        }
    };
    driver.shutdown();
    assert_eq!(reason, StopReason::CreateFailed);
    assert_eq!(
        seen,
        [
            "decision:transport_failure",
            "jeopardy:create_unresolved",
            "decision:transport_failure",
        ]
    );
    assert_eq!(
        lapsed_at_jeopardy,
        Some(false),
        "jeopardy came after the lapse"
    );
    // The server did hold a reservation, and it lapsed: the report was real.
    let until = Instant::now() + Duration::from_secs(10);
    while !serve
        .lines
        .lock()
        .unwrap()
        .iter()
        .any(|l| l.starts_with("LAPSE"))
    {
        assert!(Instant::now() < until, "the server reported no lapse");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Issue 26 (5): `POST /v1/events` (201 + EventCreateResponse, idempotent),
/// commit and release within the grace after expiry (5 s by default, as
/// the real server), and the settlement faults on commit and events, each
/// visible in the request log with endpoint, key and outcome.
#[test]
fn events_grace_and_settlement_faults() {
    let serve = Serve::start(&[
        "--fault",
        "events:1=drop",
        "--fault",
        "events:3=429,retry-after=2",
        "--fault",
        "events:4=malformed",
        "--fault",
        "commit:1=410:RESERVATION_EXPIRED",
    ]);
    let u = &serve.url;
    let auth = ("X-Cycles-API-Key", KEY);
    let event = r#"{"idempotency_key":"ev-1","subject":{"tenant":"t"},"action":{"kind":"k","name":"n"},"actual":{"unit":"TOKENS","amount":7},"metrics":{"latency_ms":3}}"#;
    let with_key = [auth, ("X-Idempotency-Key", "ev-1")];
    // 1: applied, then the connection dropped (the response is lost).
    let addr = u.strip_prefix("http://").unwrap();
    let mut s = TcpStream::connect(addr).unwrap();
    let req = format!(
        "POST /v1/events HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nX-Cycles-API-Key: {KEY}\r\nX-Idempotency-Key: ev-1\r\nContent-Length: {}\r\n\r\n{event}",
        event.len()
    );
    s.write_all(req.as_bytes()).unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    assert_eq!(out, "", "dropped unanswered");
    // 2: the same key replays the applied event.
    let (st, r) = raw(u, "/v1/events", &with_key, event);
    assert_eq!(
        (st, r),
        (201, json!({"status": "APPLIED", "event_id": "evt-1"}))
    );
    // 3: throttled with a delta-seconds Retry-After; 4: a non-conformant 201.
    let (st, r) = raw(u, "/v1/events", &with_key, event);
    assert_eq!((st, r["error"].as_str()), (429, Some("LIMIT_EXCEEDED")));
    let bytes = raw_bytes(u, "/v1/events", event);
    let text = String::from_utf8_lossy(&bytes).into_owned();
    assert!(text.starts_with("HTTP/1.1 201"), "{text}");
    assert!(serde_json::from_str::<Value>(text.split("\r\n\r\n").nth(1).unwrap()).is_err());
    // Another request under the same key: 409.
    let other = event.replace("\"amount\":7", "\"amount\":8");
    let (st, r) = raw(u, "/v1/events", &with_key, &other);
    assert_eq!(
        (st, r["error"].as_str()),
        (409, Some("IDEMPOTENCY_MISMATCH"))
    );
    let (st, r) = raw(u, "/v1/events", &[auth], r#"{"idempotency_key":"ev-2"}"#);
    assert_eq!((st, r["error"].as_str()), (400, Some("INVALID_REQUEST")));
    // Commit 1 is answered 410 by the fault; within the grace after a real
    // expiry a commit is accepted; past it, 410.
    let create = r#"{"idempotency_key":"c1","ttl_ms":1000,"subject":{"tenant":"t"},"action":{"kind":"k","name":"n"},"estimate":{"unit":"TOKENS","amount":10}}"#;
    let (_, r) = raw(u, "/v1/reservations", &[auth], create);
    let id = r["reservation_id"].as_str().unwrap().to_owned();
    let commit = format!("/v1/reservations/{id}/commit");
    let body = r#"{"idempotency_key":"k1","actual":{"unit":"TOKENS","amount":4}}"#;
    let (st, r) = raw(u, &commit, &[auth], body);
    assert_eq!(
        (st, r["error"].as_str()),
        (410, Some("RESERVATION_EXPIRED"))
    );
    let until = Instant::now() + Duration::from_secs(10);
    while serve.lapses().is_empty() {
        assert!(Instant::now() < until, "no lapse");
        std::thread::sleep(Duration::from_millis(50));
    }
    let (st, r) = raw(u, &commit, &[auth], body);
    assert_eq!((st, r["status"].as_str()), (200, Some("COMMITTED")));
    // The request log: endpoint, key and outcome of every settlement call.
    let events: Vec<(Option<u64>, String, String)> = serve
        .requests("events", None)
        .iter()
        .map(|e| {
            (
                e["status"].as_u64(),
                e["header_key"].as_str().unwrap_or("").to_owned(),
                e["outcome"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        events,
        [
            (None, "ev-1".into(), "dropped".into()),
            (Some(201), "ev-1".into(), "responded".into()),
            (Some(429), "ev-1".into(), "responded".into()),
            (Some(201), "".into(), "responded".into()),
            (Some(409), "ev-1".into(), "responded".into()),
            (Some(400), "".into(), "responded".into()),
        ]
    );
    let commits: Vec<Option<u64>> = serve
        .requests("commit", Some(&id))
        .iter()
        .map(|e| e["status"].as_u64())
        .collect();
    assert_eq!(commits, [Some(410), Some(200)]);
    // `applied`: whether the request changed the ledger for the first time (the dropped
    // event was applied; its replays (the malformed 201 is one: body key ev-1), the fault
    // answers and the refusals were not).
    let applied = |endpoint: &str, id: Option<&str>| -> Vec<Option<bool>> {
        serve
            .requests(endpoint, id)
            .iter()
            .map(|e| e["applied"].as_bool())
            .collect()
    };
    assert_eq!(
        applied("events", None),
        [
            Some(true),
            Some(false),
            Some(false),
            Some(false),
            Some(false),
            Some(false)
        ]
    );
    assert_eq!(applied("commit", Some(&id)), [Some(false), Some(true)]);
    let (st, _) = raw(u, &commit, &[auth], body);
    assert_eq!(st, 200, "a same-key replay");
    assert_eq!(
        applied("commit", Some(&id)),
        [Some(false), Some(true), Some(false)]
    );
    assert!(applied("create", None).iter().all(Option::is_none));
}

/// Issue 25, defect 6: the idempotency store is capped by count and bytes;
/// beyond, a request that would store a new record gets 503 with an
/// ErrorResponse body and changes nothing, while replays are still answered
/// and an extension replacing a reservation's oldest record still fits.
#[test]
fn the_idempotency_store_is_capped() {
    let create = |k: &str| {
        format!(
            r#"{{"idempotency_key":"{k}","ttl_ms":60000,"subject":{{"tenant":"t"}},"action":{{"kind":"k","name":"n"}},"estimate":{{"unit":"TOKENS","amount":3}}}}"#
        )
    };
    let ext = |k: &str| format!(r#"{{"extend_by_ms":5000,"idempotency_key":"{k}"}}"#);
    let auth = ("X-Cycles-API-Key", KEY);
    let full = |(st, r): (u16, Value)| {
        assert_eq!(st, 503, "{r}");
        assert_eq!(r["error"], "INTERNAL_ERROR", "{r}");
        assert!(
            r["message"]
                .as_str()
                .unwrap()
                .contains("idempotency store is full"),
            "{r}"
        );
        assert!(r["request_id"].is_string(), "{r}");
    };

    // By count: a create and 4 extension records (EXTEND_KEYS_KEPT) fill 5.
    let serve = Serve::start(&["--max-idempotency-records", "5"]);
    let u = &serve.url;
    let (st, r) = raw(u, "/v1/reservations", &[auth], &create("c1"));
    assert_eq!(st, 200, "{r}");
    let id = r["reservation_id"].as_str().unwrap().to_owned();
    let path = format!("/v1/reservations/{id}/extend");
    for k in ["e1", "e2", "e3", "e4"] {
        assert_eq!(raw(u, &path, &[auth], &ext(k)).0, 200);
    }
    full(raw(u, "/v1/reservations", &[auth], &create("c2")));
    // Nothing was created: the next id is still free, the refused key too.
    assert_eq!(
        serve.requests("create", None).len(),
        2,
        "both creates reached the server"
    );
    // A replay is answered; an extension replacing the oldest record fits.
    let (st, r) = raw(u, "/v1/reservations", &[auth], &create("c1"));
    assert_eq!((st, r["reservation_id"].as_str()), (200, Some(id.as_str())));
    assert_eq!(raw(u, &path, &[auth], &ext("e4")).0, 200);
    assert_eq!(raw(u, &path, &[auth], &ext("e5")).0, 200);
    // A release would add a record: refused while full.
    let rel = format!("/v1/reservations/{id}/release");
    full(raw(u, &rel, &[auth], r#"{"idempotency_key":"r1"}"#));
    drop(serve);

    // By bytes: a few creates fit in 2,000 bytes, then 503.
    let serve = Serve::start(&["--max-idempotency-bytes", "2000"]);
    let mut statuses = Vec::new();
    for i in 0..20 {
        statuses.push(
            raw(
                &serve.url,
                "/v1/reservations",
                &[auth],
                &create(&format!("b{i}")),
            )
            .0,
        );
    }
    let ok = statuses.iter().take_while(|s| **s == 200).count();
    assert!((1..20).contains(&ok), "{statuses:?}");
    assert!(statuses[ok..].iter().all(|s| *s == 503), "{statuses:?}");
    full(raw(
        &serve.url,
        "/v1/reservations",
        &[auth],
        &create("b-last"),
    ));
    drop(serve);

    // Documented in --help, with the defaults.
    let help = Command::new(env!("CARGO_BIN_EXE_leasebeat"))
        .args(["serve", "--help"])
        .output()
        .expect("leasebeat serve --help");
    let help = String::from_utf8_lossy(&help.stdout);
    for want in [
        "--max-idempotency-records <N>",
        "--max-idempotency-bytes <BYTES>",
        "[default: 1000000]",
        "[default: 536870912]",
        "503",
    ] {
        assert!(help.contains(want), "--help lacks {want:?}:\n{help}");
    }
}

/// Issue 25, defect 4: `bench-driver` measures lapses only from a lapse log
/// (a `leasebeat serve`'s stdout); without one it says `not_measured`,
/// never `lapses=0 unreported=0`.
#[test]
fn bench_driver_says_lapses_were_not_measured_without_a_lapse_log() {
    let serve = Serve::start(&[]);
    let bench = |extra: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_leasebeat"))
            .args(["bench-driver", "--url", &serve.url, "--leases", "2"])
            .args(["--ttl-ms", "4000", "--budget-ms", "1000", "--seconds", "1"])
            .args(["--workers", "2"])
            .args(extra)
            .output()
            .expect("leasebeat bench-driver");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let line = bench(&[]);
    assert!(
        line.contains(" lapses=not_measured unreported=not_measured "),
        "{line}"
    );
    // A file that is not a `leasebeat serve` stdout measures nothing either.
    let other =
        std::env::temp_dir().join(format!("leasebeat-not-a-lapse-log-{}", std::process::id()));
    std::fs::write(&other, "some server's output\n").unwrap();
    let line = bench(&["--lapse-file", other.to_str().unwrap()]);
    let _ = std::fs::remove_file(&other);
    assert!(line.contains(" lapses=not_measured "), "{line}");
    // A lapse log (the server's stdout): measured.
    let log = std::env::temp_dir().join(format!("leasebeat-lapse-log-{}", std::process::id()));
    std::fs::write(&log, format!("listening on {}\n", serve.url)).unwrap();
    let line = bench(&["--lapse-file", log.to_str().unwrap()]);
    let _ = std::fs::remove_file(&log);
    assert!(line.contains(" lapses=0 unreported=0 "), "{line}");
}
