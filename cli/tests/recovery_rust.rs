//! The Rust driver's settlement, journal and HP-1 against `leasebeat serve`
//! (started per test on 127.0.0.1:0 with `--log` and the faults it needs),
//! asserted from serve's request log. The `cr_*` tests are the native tests
//! of the Cycles SDK Recovery Conformance Profile's 12 scenarios for runner
//! `rust-driver` (recovery/rust-driver/README.md maps them); each names the
//! catalog's assertion labels in its messages.
//!
//! A restart is a fresh OS process: this test binary re-executes itself
//! running the `child_process` test with `RDRV_CHILD` set (a driver that
//! commits, or replays its journal), and is killed with SIGKILL.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use leasebeat::driver::{
    ApiKey, CancellationToken, Canceller, Disposition, Driver, DriverConfig, DriverError, Event,
    EventBody, FailurePolicy, JournalOptions, LeaseHandle, LeaseOptions, SettleResult, Usage,
};
use leasebeat::journal::{self, Journal, JournalRecord};
use leasebeat::{Config, SettleOutcome, StopReason};
use serde_json::{Value, json};

const KEY: &str = "rdrv-test-key";

static N: AtomicU32 = AtomicU32::new(0);

fn wall_ms() -> u64 {
    journal::now_unix_ms()
}

// ---------------------------------------------------------------- serve

struct Serve {
    child: Child,
    url: String,
    log: PathBuf,
    /// Upper bound of the lag of serve's clock behind the wall clock (ms):
    /// serve maps its start onto `--epoch-ms` (the wall clock at spawn).
    lag_ms: u64,
}

impl Serve {
    fn start(args: &[&str]) -> Serve {
        let n = N.fetch_add(1, Ordering::SeqCst);
        let log = std::env::temp_dir().join(format!(
            "leasebeat-rdrv-test-{}-{n}.jsonl",
            std::process::id()
        ));
        let t0 = Instant::now();
        let epoch = wall_ms();
        let mut child = Command::new(env!("CARGO_BIN_EXE_leasebeat"))
            .arg("serve")
            .arg("--log")
            .arg(&log)
            .arg("--epoch-ms")
            .arg(epoch.to_string())
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn leasebeat serve");
        let mut out = BufReader::new(child.stdout.take().expect("stdout"));
        let mut first = String::new();
        out.read_line(&mut first).expect("read the address line");
        let lag_ms = t0.elapsed().as_millis() as u64 + 2;
        let url = first
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {first:?}"))
            .to_owned();
        std::thread::spawn(move || for _ in out.lines() {});
        Serve {
            child,
            url,
            log,
            lag_ms,
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

    /// Requests to these endpoints (all when empty), in arrival order.
    fn requests(&self, endpoints: &[&str]) -> Vec<Value> {
        self.entries()
            .into_iter()
            .filter(|e| e["event"] == "request")
            .filter(|e| {
                endpoints.is_empty() || endpoints.iter().any(|p| e["endpoint"].as_str() == Some(p))
            })
            .collect()
    }

    /// The settlement requests (commit, events, release).
    fn settlements(&self) -> Vec<Value> {
        self.requests(&["commit", "events", "release"])
    }

    /// A reservation made with a raw create (a process that crashed
    /// after its create, before its commit).
    fn create(&self, ttl_ms: u64) -> String {
        let body = json!({"idempotency_key": format!("c-{}", uuid()), "ttl_ms": ttl_ms,
            "subject": {"tenant": "acme"}, "action": {"kind": "llm", "name": "summarize"},
            "estimate": {"unit": "TOKENS", "amount": 1000}});
        let client = leasebeat::driver::Client::new(&self.url, ApiKey::new(KEY)).unwrap();
        let key = body["idempotency_key"].as_str().unwrap().to_owned();
        let x = client.post(
            "/v1/reservations",
            Some(&key),
            body.to_string().as_bytes(),
            Duration::from_secs(5),
        );
        let r = x.outcome.expect("create answered");
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        let v: Value = serde_json::from_slice(&r.body).unwrap();
        v["reservation_id"].as_str().unwrap().to_owned()
    }

    /// Waits until a request line matching `pred` is logged.
    fn wait_for(&self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let until = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(e) = self.entries().into_iter().find(|e| pred(e)) {
                return e;
            }
            assert!(Instant::now() < until, "no {what} in serve's log");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}

fn uuid() -> String {
    format!("{:x}{:x}", wall_ms(), N.fetch_add(1, Ordering::SeqCst))
}

fn create_body() -> serde_json::Map<String, Value> {
    json!({"subject": {"tenant": "acme"}, "action": {"kind": "llm", "name": "summarize"},
           "estimate": {"unit": "TOKENS", "amount": 1000}})
    .as_object()
    .unwrap()
    .clone()
}

fn usage_json() -> Value {
    json!({"actual": {"unit": "TOKENS", "amount": 900},
           "metrics": {"tokens_input": 600, "tokens_output": 300, "latency_ms": 1200},
           "metadata": {"run": "rdrv", "step": 3}})
}

fn usage() -> Usage {
    Usage::from_json(usage_json().to_string())
}

fn body(e: &Value) -> Value {
    serde_json::from_str(e["body"].as_str().unwrap_or("null")).unwrap_or(Value::Null)
}

/// The same key in the header and the body of every request; returns it.
fn one_key(reqs: &[Value], label: &str) -> String {
    assert!(!reqs.is_empty(), "{label}: no request");
    let key = reqs[0]["header_key"]
        .as_str()
        .expect("a key header")
        .to_owned();
    for r in reqs {
        assert_eq!(
            r["header_key"],
            key.as_str(),
            "{label}: the key changed: {r}"
        );
        assert_eq!(
            body(r)["idempotency_key"],
            key.as_str(),
            "{label}: body key differs from header key: {r}"
        );
    }
    key
}

/// settlement_occurs_at_most_once: at most one applied settlement request.
fn at_most_once(reqs: &[Value]) -> usize {
    let applied = reqs.iter().filter(|r| r["applied"] == true).count();
    assert!(
        applied <= 1,
        "settlement_occurs_at_most_once: {applied} applied: {reqs:?}"
    );
    applied
}

fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().expect("a temporary directory")
}

fn config(url: &str, dir: &Path) -> DriverConfig {
    let mut c = DriverConfig::new(url, ApiKey::new(KEY));
    c.journal = JournalOptions::at(dir);
    c
}

fn lease_config(ttl_ms: u64) -> Config {
    let mut c = Config::new(ttl_ms, Some(1_000));
    c.create_request = create_body();
    c
}

/// Waits for the lease's reservation id.
fn reservation_of(events: &Receiver<Event>, lease: LeaseHandle, seen: &mut Vec<Event>) -> String {
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let e = events
            .recv_timeout(until.saturating_duration_since(Instant::now()))
            .expect("the create's decision");
        let id = match &e {
            Event::Decision {
                lease: l,
                reservation_id: Some(id),
                ..
            } if *l == lease => Some(id.clone()),
            Event::Stopped { .. } => panic!("stopped before its create succeeded: {e:?}"),
            _ => None,
        };
        seen.push(e);
        if let Some(id) = id {
            return id;
        }
    }
}

/// Collects events until `lease`'s `Settled`.
fn settled(events: &Receiver<Event>, lease: LeaseHandle, seen: &mut Vec<Event>) -> SettleResult {
    let until = Instant::now() + Duration::from_secs(40);
    loop {
        let e = events
            .recv_timeout(until.saturating_duration_since(Instant::now()))
            .expect("the settlement's end");
        if let Event::Settled { lease: l, result } = &e {
            if *l == lease {
                let r = (**result).clone();
                seen.push(e);
                return r;
            }
        }
        seen.push(e);
    }
}

fn record_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(parts) = std::fs::read_dir(dir) else {
        return out;
    };
    for p in parts.flatten() {
        if p.path().is_dir() {
            for f in std::fs::read_dir(p.path()).unwrap().flatten() {
                out.push(f.path());
            }
        }
    }
    out.sort();
    out
}

fn json_records(dir: &Path) -> Vec<Value> {
    record_files(dir)
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .filter_map(|p| serde_json::from_slice(&std::fs::read(p).ok()?).ok())
        .collect()
}

// ---------------------------------------------------------------- child processes

/// A driver in a fresh process (this binary, test `child_process`).
struct ChildRun {
    child: Child,
    lines: Arc<Mutex<Vec<Value>>>,
}

impl ChildRun {
    fn spawn(spec: Value) -> ChildRun {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "child_process",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("RDRV_CHILD", spec.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn the child");
        let out = BufReader::new(child.stdout.take().unwrap());
        let lines = Arc::new(Mutex::new(Vec::new()));
        let l = Arc::clone(&lines);
        std::thread::spawn(move || {
            for line in out.lines() {
                let Ok(line) = line else { break };
                if let Some(j) = line.strip_prefix("CHILD ") {
                    l.lock().unwrap().push(serde_json::from_str(j).unwrap());
                }
            }
        });
        ChildRun { child, lines }
    }

    fn lines(&self) -> Vec<Value> {
        self.lines.lock().unwrap().clone()
    }

    fn wait_line(&self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let until = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(v) = self.lines().into_iter().find(|v| pred(v)) {
                return v;
            }
            assert!(
                Instant::now() < until,
                "child: no {what}: {:?}",
                self.lines()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// SIGKILL.
    fn kill(mut self) {
        self.child.kill().expect("SIGKILL");
        let _ = self.child.wait();
    }

    fn wait(mut self) -> Vec<Value> {
        let until = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                assert!(st.success(), "child failed: {st:?}: {:?}", self.lines());
                std::thread::sleep(Duration::from_millis(20));
                return self.lines();
            }
            assert!(
                Instant::now() < until,
                "child did not end: {:?}",
                self.lines()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn child_line(v: &Value) {
    println!("CHILD {v}");
    let _ = std::io::stdout().flush();
}

/// Runs only as a child (`RDRV_CHILD` set): `mode` `commit` (start a lease
/// from a create, commit `usage`) or `replay` (a driver that replays its
/// journal on start, after an optional barrier file appears). Prints every
/// event as `CHILD {json}`.
#[test]
fn child_process() {
    let Ok(spec) = std::env::var("RDRV_CHILD") else {
        return;
    };
    let spec: Value = serde_json::from_str(&spec).unwrap();
    if let Some(b) = spec["barrier"].as_str() {
        while !Path::new(b).exists() {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    let mut c = DriverConfig::new(
        spec["url"].as_str().unwrap(),
        ApiKey::new(spec["api_key"].as_str().unwrap()),
    );
    c.journal = JournalOptions::at(spec["dir"].as_str().unwrap());
    c.journal.tenant = spec["tenant"].as_str().map(str::to_owned);
    let mode = spec["mode"].as_str().unwrap();
    c.journal.replay_on_start = mode == "replay";
    let (driver, raw) = Driver::new(c).unwrap();
    let t0 = leasebeat::driver::clock::now_ns();
    // Every event is printed the moment it arrives (the parent reacts to
    // them), then handed on.
    let (tx, events) = std::sync::mpsc::channel();
    let printer = std::thread::spawn(move || {
        for e in raw.iter() {
            child_line(&leasebeat_cli::run::event_json(&e, t0));
            let _ = tx.send(e);
        }
    });
    if mode == "commit" {
        let lease = driver.start(lease_config(60_000)).unwrap();
        let mut seen = Vec::new();
        let id = reservation_of(&events, lease, &mut seen);
        child_line(&json!({"event": "reservation", "reservation_id": id}));
        let s = driver
            .commit(lease, Usage::from_json(spec["usage"].to_string()))
            .unwrap();
        let r = settled(&events, s.lease(), &mut seen);
        child_line(&json!({"event": "result", "outcome": r.outcome.as_str()}));
    } else {
        let report = driver.flush(Duration::from_secs(30));
        child_line(&json!({"event": "flushed", "settled": report.settled}));
    }
    driver.shutdown();
    // The printer ends when the driver's channel closes.
    let _ = printer.join();
}

// ---------------------------------------------------------------- conformance: core

/// CR-CORE-001 lost commit response reuses the same key: serve applies the
/// first commit and drops the connection; the settlement retries with the
/// original key and the replayed answer ends it.
#[test]
fn cr_core_001_lost_commit_response_reuses_the_same_key() {
    let serve = Serve::start(&["--fault", "commit:1=drop"]);
    let dir = tempdir();
    let (driver, events) = Driver::new(config(&serve.url, dir.path())).unwrap();
    let lease = driver.start(lease_config(60_000)).unwrap();
    let mut seen = Vec::new();
    let id = reservation_of(&events, lease, &mut seen);
    let r = driver.commit(lease, usage()).unwrap().wait().unwrap();
    assert_eq!(r.outcome, SettleOutcome::Committed, "{r:?}");
    assert!(!r.record_kept && r.journaled);
    let commits = serve.requests(&["commit"]);
    assert_eq!(
        commits.len(),
        2,
        "expected_requests: commit, commit_same_key"
    );
    let key = one_key(&commits, "retry_uses_original_idempotency_key");
    assert_eq!(key, r.key);
    assert_eq!(commits[0]["reservation_id"], id.as_str());
    assert_eq!(commits[0]["outcome"], "dropped");
    assert_eq!(at_most_once(&serve.settlements()), 1);
    assert_eq!(
        commits[0]["applied"], true,
        "the dropped commit was applied"
    );
    assert_eq!(
        commits[1]["applied"], false,
        "the retry is a same-key replay"
    );
    assert!(serve.requests(&["events", "release"]).is_empty());
    assert!(json_records(dir.path()).is_empty(), "record removed");
    driver.shutdown();
}

/// CR-CORE-002 expired commit falls back to an event with the original
/// subject, action, actual, metrics and metadata, the same key; the
/// heartbeat stops at the switch (ST-11).
#[test]
fn cr_core_002_expired_commit_falls_back_to_an_event() {
    let serve = Serve::start(&["--fault", "commit:1=410:RESERVATION_EXPIRED"]);
    let dir = tempdir();
    let (driver, events) = Driver::new(config(&serve.url, dir.path())).unwrap();
    let lease = driver.start(lease_config(60_000)).unwrap();
    let mut seen = Vec::new();
    let id = reservation_of(&events, lease, &mut seen);
    let s = driver.commit(lease, usage()).unwrap();
    let r = settled(&events, s.lease(), &mut seen);
    assert_eq!(r.outcome, SettleOutcome::Applied, "{r:?}");
    let reqs = serve.settlements();
    let eps: Vec<&str> = reqs
        .iter()
        .map(|r| r["endpoint"].as_str().unwrap())
        .collect();
    assert_eq!(
        eps,
        ["commit", "events"],
        "expected_requests: commit, event_same_key"
    );
    one_key(&reqs, "event_same_key");
    assert_eq!(at_most_once(&reqs), 1);
    assert_eq!(reqs[1]["applied"], true);
    let ev = body(&reqs[1]);
    let u = usage_json();
    assert_eq!(
        ev["subject"],
        json!({"tenant": "acme"}),
        "event_carries_original_subject_action_actual"
    );
    assert_eq!(
        ev["action"],
        json!({"kind": "llm", "name": "summarize"}),
        "event_carries_original_subject_action_actual"
    );
    assert_eq!(
        ev["actual"], u["actual"],
        "event_carries_original_subject_action_actual"
    );
    assert_eq!(ev["metrics"], u["metrics"]);
    assert_eq!(ev["metadata"]["run"], "rdrv");
    assert_eq!(ev["metadata"]["step"], 3);
    assert_eq!(ev["metadata"]["recovered_reservation_id"], id.as_str());
    // ST-11: the switch decision stops the heartbeat: a `cancelled` stop
    // follows it, no extension after it.
    let switch = seen
        .iter()
        .position(|e| matches!(e, Event::Settlement { decision, .. } if decision.stop_heartbeat))
        .expect("a stop_heartbeat decision");
    let stop = seen
        .iter()
        .position(|e| matches!(e, Event::Stopped { lease: l, reason: StopReason::Cancelled, .. } if *l == lease))
        .expect("the heartbeat stopped");
    assert!(switch < stop, "ST-11: stopped after the switch");
    assert!(json_records(dir.path()).is_empty());
    driver.shutdown();
}

/// CR-CORE-003 a heartbeat transport failure is observable and non-fatal:
/// the failure is reported with the reservation and the disposition (retry
/// with the same key), the work carries on (warn) and the commit is sent.
#[test]
fn cr_core_003_heartbeat_transport_failure_is_observable_and_non_fatal() {
    let serve = Serve::start(&["--fault", "extend:1=drop-before"]);
    let dir = tempdir();
    let (driver, events) = Driver::new(config(&serve.url, dir.path())).unwrap();
    let lease = driver.start(lease_config(3_000)).unwrap();
    let mut seen = Vec::new();
    let id = reservation_of(&events, lease, &mut seen);
    let until = Instant::now() + Duration::from_secs(20);
    let failure = loop {
        let e = events
            .recv_timeout(until.saturating_duration_since(Instant::now()))
            .unwrap();
        if let Event::HeartbeatFailure { failure, .. } = &e {
            break failure.clone();
        }
        assert!(
            !matches!(e, Event::Stopped { .. }),
            "guarded_action_continues_under_warn_policy"
        );
        seen.push(e);
    };
    assert_eq!(
        failure.reservation_id.as_deref(),
        Some(id.as_str()),
        "heartbeat_failure_reports_reservation_and_disposition"
    );
    assert!(
        matches!(failure.disposition, Disposition::Retry { .. }),
        "heartbeat_failure_reports_reservation_and_disposition: {failure:?}"
    );
    // The retry with the same key succeeds; the work (this test) carries on.
    serve.wait_for("a second extend", |e| {
        e["endpoint"] == "extend" && e["call"] == 2
    });
    let r = driver.commit(lease, usage()).unwrap().wait().unwrap();
    assert_eq!(
        r.outcome,
        SettleOutcome::Committed,
        "final_settlement_is_attempted"
    );
    let extends = serve.requests(&["extend"]);
    assert!(extends.len() >= 2);
    one_key(&extends[..2], "extend_same_key");
    let all = serve.requests(&["extend", "commit"]);
    assert_eq!(
        all.last().unwrap()["endpoint"],
        "commit",
        "expected_requests: extend, extend_same_key, commit"
    );
    driver.shutdown();
}

/// CR-CORE-004 a protocol-invalid settlement success stays ambiguous: a
/// truncated 200 is not a success; the retry keeps the key.
#[test]
fn cr_core_004_protocol_invalid_settlement_success_remains_ambiguous() {
    let serve = Serve::start(&["--fault", "commit:1=malformed"]);
    let dir = tempdir();
    let (driver, events) = Driver::new(config(&serve.url, dir.path())).unwrap();
    let lease = driver.start(lease_config(60_000)).unwrap();
    let mut seen = Vec::new();
    reservation_of(&events, lease, &mut seen);
    let r = driver.commit(lease, usage()).unwrap().wait().unwrap();
    let classes: Vec<&str> = r.decisions.iter().map(|d| d.class.as_str()).collect();
    assert!(
        classes.contains(&"ambiguous"),
        "only_schema_valid_expected_status_is_terminal_success: {classes:?}"
    );
    let amb = r
        .decisions
        .iter()
        .find(|d| d.class.as_str() == "ambiguous")
        .unwrap();
    assert!(amb.outcome().is_none(), "the malformed 200 did not end it");
    assert_eq!(r.outcome, SettleOutcome::Committed);
    let commits = serve.requests(&["commit"]);
    assert_eq!(
        commits.len(),
        2,
        "expected_requests: commit, commit_same_key"
    );
    one_key(
        &commits,
        "ambiguous_success_retains_original_idempotency_key",
    );
    at_most_once(&commits);
    driver.shutdown();
}

/// CR-BOUNDARY-001 missing actual is surfaced without settlement: no
/// commit, no event; the outcome `no_actual` comes back.
#[test]
fn cr_boundary_001_missing_actual_is_surfaced_without_settlement() {
    let serve = Serve::start(&[]);
    let dir = tempdir();
    let (driver, events) = Driver::new(config(&serve.url, dir.path())).unwrap();
    let lease = driver.start(lease_config(60_000)).unwrap();
    let mut seen = Vec::new();
    reservation_of(&events, lease, &mut seen);
    let r = driver
        .commit(lease, Usage::unknown())
        .unwrap()
        .wait()
        .unwrap();
    assert_eq!(
        r.outcome,
        SettleOutcome::NoActual,
        "missing_actual_or_guarded_action_failure_is_surfaced"
    );
    assert!(!r.is_success());
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        serve.settlements().is_empty(),
        "no_commit_or_event_without_known_actual"
    );
    assert!(json_records(dir.path()).is_empty(), "nothing journaled");
    driver.shutdown();
}

// ---------------------------------------------------------------- conformance: durable

fn commit_child(serve: &Serve, dir: &Path, api_key: &str, tenant: Option<&str>) -> ChildRun {
    ChildRun::spawn(
        json!({"mode": "commit", "url": serve.url, "api_key": api_key,
        "tenant": tenant, "dir": dir, "usage": usage_json()}),
    )
}

fn replay_child(
    serve: &Serve,
    dir: &Path,
    api_key: &str,
    tenant: Option<&str>,
    barrier: Option<&Path>,
) -> ChildRun {
    ChildRun::spawn(
        json!({"mode": "replay", "url": serve.url, "api_key": api_key,
        "tenant": tenant, "dir": dir, "barrier": barrier}),
    )
}

fn settled_lines(lines: &[Value]) -> Vec<Value> {
    lines
        .iter()
        .filter(|l| l["event"] == "settled")
        .cloned()
        .collect()
}

/// CR-DURABLE-001 the first commit is journaled before it leaves: the
/// process is killed (SIGKILL) while its commit is in flight; a fresh
/// process finds the record and commits with the same key; the record goes.
#[test]
fn cr_durable_001_first_commit_is_journaled_before_it_leaves() {
    let serve = Serve::start(&["--fault", "commit:1=delay=3000"]);
    let dir = tempdir();
    let first = commit_child(&serve, dir.path(), KEY, None);
    first.wait_line("the commit sent", |l| {
        l["event"] == "settlement" && l["endpoint"] == "commit"
    });
    // journal_write_precedes_first_settlement_request: the `persisted`
    // decision came before the attempt was sent, and the record is on disk.
    let lines = first.lines();
    let persisted = lines
        .iter()
        .position(|l| l["decision"]["class"] == "persisted");
    let sent = lines.iter().position(|l| l["endpoint"] == "commit");
    assert!(
        persisted.is_some() && persisted < sent,
        "journal_write_precedes_first_settlement_request: {lines:?}"
    );
    let records = json_records(dir.path());
    assert_eq!(
        records.len(),
        1,
        "journal_write_precedes_first_settlement_request"
    );
    let key = records[0]["commit_body"]["idempotency_key"]
        .as_str()
        .unwrap()
        .to_owned();
    first.kill();
    // The killed process never saw an answer; its record survives.
    assert_eq!(
        json_records(dir.path()).len(),
        1,
        "unresolved_record_survives_restart"
    );
    serve.wait_for("the first commit", |e| e["endpoint"] == "commit");
    let second = replay_child(&serve, dir.path(), KEY, None, None);
    let lines = second.wait();
    let s = settled_lines(&lines);
    assert_eq!(s.len(), 1, "{lines:?}");
    assert_eq!(s[0]["result"]["outcome"], "committed");
    assert_eq!(s[0]["result"]["replayed"], true);
    let commits = serve.requests(&["commit"]);
    assert_eq!(
        commits.len(),
        2,
        "expected_requests: commit, commit_same_key_after_restart"
    );
    assert_eq!(one_key(&commits, "commit_same_key_after_restart"), key);
    assert_eq!(at_most_once(&serve.settlements()), 1);
    assert!(
        json_records(dir.path()).is_empty(),
        "successful_replay_removes_record"
    );
}

/// Writes a commit record as a crashed process would have left it.
fn leave_commit_record(
    serve: &Serve,
    dir: &Path,
    api_key: &str,
    tenant: Option<&str>,
    id: &str,
) -> String {
    let base = journal::base_dir(Some(dir)).unwrap();
    let j = Journal::open(&base, &serve.url, api_key, tenant).unwrap();
    let key = format!("key-{}", uuid());
    let mut commit = usage_json();
    commit["idempotency_key"] = json!(key);
    let mut event =
        json!({"subject": {"tenant": "acme"}, "action": {"kind": "llm", "name": "summarize"}});
    event["idempotency_key"] = json!(key);
    event["actual"] = usage_json()["actual"].clone();
    event["metrics"] = usage_json()["metrics"].clone();
    event["metadata"] = json!({"run": "rdrv", "step": 3, "recovered_reservation_id": id,
        "recovery_reason": "commit_after_reservation_expired"});
    let rec = JournalRecord::from_json(
        json!({"version": 1, "reservation_id": id, "base_url": serve.url, "mode": "commit",
               "commit_body": commit, "event_fallback_body": event,
               "recorded_at_ms": wall_ms(), "not_before_ms": null})
        .to_string()
        .as_bytes(),
    )
    .unwrap();
    j.write(&rec).unwrap();
    key
}

/// CR-DURABLE-002 a replayed commit answered 410 switches durably to event
/// mode: the process is killed after the switch; the next one sends the
/// event with the same key; the record goes.
#[test]
fn cr_durable_002_replayed_expired_commit_switches_durably_to_event_mode() {
    let serve = Serve::start(&[
        "--fault",
        "commit:1=410:RESERVATION_EXPIRED",
        "--fault",
        "events:1-3=drop-before",
    ]);
    let dir = tempdir();
    let id = serve.create(60_000);
    let key = leave_commit_record(&serve, dir.path(), KEY, None, &id);
    let first = replay_child(&serve, dir.path(), KEY, None, None);
    // event_mode_is_persisted_before_event_attempt: the record says event
    // before the first event request is answered.
    let until = Instant::now() + Duration::from_secs(30);
    while json_records(dir.path())
        .first()
        .is_none_or(|r| r["mode"] != "event")
    {
        assert!(
            Instant::now() < until,
            "the record never switched to event mode"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    first.wait_line("the event persisted and sent", |l| {
        l["event"] == "settlement" && l["endpoint"] == "event"
    });
    let lines = first.lines();
    let persisted = lines
        .iter()
        .position(|l| l["decision"]["class"] == "persisted" && l["decision"]["mode"] == "event");
    let sent = lines.iter().position(|l| l["endpoint"] == "event");
    assert!(
        persisted.is_some() && persisted < sent,
        "event_mode_is_persisted_before_event_attempt: {lines:?}"
    );
    first.kill();
    let rec = &json_records(dir.path())[0];
    assert_eq!(
        rec["mode"], "event",
        "event_mode_is_persisted_before_event_attempt"
    );
    let second = replay_child(&serve, dir.path(), KEY, None, None);
    let lines = second.wait();
    let s = settled_lines(&lines);
    // events 1-3 are dropped before applying: the second process may meet
    // the rest of them; it retries with the same key until the event lands.
    assert_eq!(s[0]["result"]["outcome"], "applied", "{lines:?}");
    let reqs = serve.settlements();
    assert_eq!(
        reqs[0]["endpoint"], "commit",
        "commit_same_key_after_restart"
    );
    assert!(
        reqs[1..].iter().all(|r| r["endpoint"] == "events"),
        "event_same_key_after_restart"
    );
    assert_eq!(one_key(&reqs, "event_same_key_after_restart"), key);
    assert_eq!(at_most_once(&reqs), 1);
    assert!(
        json_records(dir.path()).is_empty(),
        "successful_event_removes_record"
    );
}

/// CR-DURABLE-003 a rate-limit floor survives a restart: a 429 with
/// Retry-After persists `not_before_ms`; the process is killed; the next
/// one sends nothing before the floor.
#[test]
fn cr_durable_003_rate_limit_floor_survives_restart() {
    let serve = Serve::start(&["--fault", "commit:1=429,retry-after=2"]);
    let dir = tempdir();
    let first = commit_child(&serve, dir.path(), KEY, None);
    let until = Instant::now() + Duration::from_secs(30);
    let floor = loop {
        if let Some(nb) = json_records(dir.path())
            .first()
            .and_then(|r| r["not_before_ms"].as_u64())
        {
            break nb;
        }
        assert!(Instant::now() < until, "no floor persisted");
        std::thread::sleep(Duration::from_millis(2));
    };
    first.kill();
    let restarted = wall_ms();
    assert!(
        restarted < floor,
        "process_restarted_before_retry_after ({restarted} vs {floor})"
    );
    let second = replay_child(&serve, dir.path(), KEY, None, None);
    let lines = second.wait();
    assert_eq!(
        settled_lines(&lines)[0]["result"]["outcome"],
        "committed",
        "{lines:?}"
    );
    let commits = serve.requests(&["commit"]);
    assert_eq!(
        commits.len(),
        2,
        "expected_requests: commit, commit_same_key_after_retry_after"
    );
    one_key(&commits, "commit_same_key_after_retry_after");
    let arrived = commits[1]["arrived_ms"].as_u64().unwrap();
    assert!(
        arrived + serve.lag_ms >= floor,
        "no_retry_before_persisted_not_before: {arrived} (+{} lag) < {floor}",
        serve.lag_ms
    );
    at_most_once(&commits);
    assert!(
        json_records(dir.path()).is_empty(),
        "successful_replay_removes_record"
    );
}

/// CR-DURABLE-004 a tenant journal survives an API-key rotation: the
/// second process has another key and the same tenant, finds the record;
/// the old key is in no journal file.
#[test]
fn cr_durable_004_tenant_journal_survives_api_key_rotation() {
    let serve = Serve::start(&["--fault", "commit:1-3=drop-before"]);
    let dir = tempdir();
    let old_key = "old-rotated-key-4f2a9c";
    let new_key = "new-key-after-rotation-77b1";
    let first = commit_child(&serve, dir.path(), old_key, Some("acme-tenant"));
    first.wait_line("a failed commit", |l| {
        l["event"] == "settlement" && l["outcome"].is_string()
    });
    first.kill();
    assert_eq!(json_records(dir.path()).len(), 1);
    let second = replay_child(&serve, dir.path(), new_key, Some("acme-tenant"), None);
    let lines = second.wait();
    let s = settled_lines(&lines);
    assert_eq!(s.len(), 1, "new_tenant_credential_finds_record: {lines:?}");
    assert_eq!(s[0]["result"]["outcome"], "committed");
    let commits = serve.requests(&["commit"]);
    one_key(&commits, "commit_same_key_after_restart");
    at_most_once(&commits);
    assert_eq!(commits.last().unwrap()["applied"], true);
    // old_api_key_is_not_stored: no file (name or bytes) holds the old key.
    let first = commit_child(&serve, dir.path(), old_key, Some("acme-tenant"));
    first.wait_line("a record", |l| l["event"] == "settlement");
    first.wait();
    for p in record_files(dir.path()) {
        let bytes = std::fs::read(&p).unwrap_or_default();
        let text = String::from_utf8_lossy(&bytes);
        assert!(
            !text.contains(old_key) && !p.to_string_lossy().contains(old_key),
            "old_api_key_is_not_stored: {p:?}"
        );
    }
}

/// CR-DURABLE-005 corrupt and unsupported records are quarantined and
/// reported by the driver's replay on start; the valid record still settles.
#[test]
fn cr_durable_005_corrupt_or_unsupported_record_is_quarantined() {
    let serve = Serve::start(&[]);
    let dir = tempdir();
    let id = serve.create(60_000);
    leave_commit_record(&serve, dir.path(), KEY, None, &id);
    let part = dir
        .path()
        .join(journal::partition_name(&serve.url, KEY, None));
    let corrupt = part.join(journal::record_file_name("rsv-corrupt"));
    std::fs::write(
        &corrupt,
        br#"{"version":1,"reservation_id":"rsv-corrupt","mode":"com"#,
    )
    .unwrap();
    let future = part.join(journal::record_file_name("rsv-future"));
    std::fs::write(
        &future,
        json!({"version": 2, "reservation_id": "rsv-future", "base_url": serve.url, "mode": "commit",
               "commit_body": {"idempotency_key": "k", "actual": {"unit": "TOKENS", "amount": 1}}})
        .to_string(),
    )
    .unwrap();
    let (driver, events) = Driver::new(config(&serve.url, dir.path())).unwrap();
    let mut seen = Vec::new();
    let report = loop {
        let e = events
            .recv_timeout(Duration::from_secs(20))
            .expect("the replay's report");
        if let Event::Journal { report, .. } = &e {
            break (**report).clone();
        }
        seen.push(e);
    };
    let files: Vec<&str> = report.quarantined.iter().map(|(f, _)| f.as_str()).collect();
    assert!(
        files.contains(&journal::record_file_name("rsv-corrupt").as_str()),
        "corrupt_record_is_quarantined / corruption_is_reported: {report:?}"
    );
    assert!(
        files.contains(&journal::record_file_name("rsv-future").as_str()),
        "unsupported_record_version_is_quarantined: {report:?}"
    );
    assert_eq!(
        report.replayed,
        vec![id.clone()],
        "other_valid_records_still_replay"
    );
    assert!(driver.flush(Duration::from_secs(20)).settled);
    let commits = serve.requests(&["commit"]);
    assert_eq!(commits.len(), 1, "other_valid_records_still_replay");
    assert_eq!(commits[0]["reservation_id"], id.as_str());
    assert!(!corrupt.exists() && !future.exists(), "renamed aside");
    let names: Vec<String> = std::fs::read_dir(&part)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names.iter().filter(|n| n.ends_with(".corrupt")).count(),
        2,
        "{names:?}"
    );
    assert!(
        serve
            .requests(&["commit"])
            .iter()
            .all(|c| c["reservation_id"] != "rsv-corrupt" && c["reservation_id"] != "rsv-future")
    );
    driver.shutdown();
}

/// CR-DURABLE-006 concurrent replay stays exactly once: two processes
/// released at once (a barrier file) replay the same record; one settles
/// it, the other finds it claimed; one applied commit; the record goes.
#[test]
fn cr_durable_006_concurrent_replay_remains_exactly_once() {
    let serve = Serve::start(&["--fault", "commit:1=delay=300"]);
    let dir = tempdir();
    let id = serve.create(60_000);
    let key = leave_commit_record(&serve, dir.path(), KEY, None, &id);
    let barrier = dir.path().join("go");
    let a = replay_child(&serve, dir.path(), KEY, None, Some(&barrier));
    let b = replay_child(&serve, dir.path(), KEY, None, Some(&barrier));
    std::thread::sleep(Duration::from_millis(300));
    std::fs::write(&barrier, b"go").unwrap();
    let (la, lb) = (a.wait(), b.wait());
    let settled: Vec<Value> = settled_lines(&la)
        .into_iter()
        .chain(settled_lines(&lb))
        .collect();
    assert!(!settled.is_empty(), "one of them settled it: {la:?} {lb:?}");
    assert!(
        settled
            .iter()
            .all(|s| s["result"]["outcome"] == "committed")
    );
    let commits = serve.requests(&["commit"]);
    assert_eq!(one_key(&commits, "concurrent_commit_same_key"), key);
    assert_eq!(
        at_most_once(&serve.settlements()),
        1,
        "settlement_occurs_at_most_once"
    );
    assert!(
        json_records(dir.path()).is_empty(),
        "terminal_record_is_removed"
    );
}

fn sha256_hex(s: &str) -> String {
    let mut c = Command::new("sha256sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    c.stdin.take().unwrap().write_all(s.as_bytes()).unwrap();
    let out = c.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned()
}

/// CR-DURABLE-007 journal file names keep distinct identifiers apart:
/// records of ids whose legacy names collide get `v2-<sha256>` names; the
/// driver's replay on start migrates the legacy record whose id matches its
/// name and leaves the colliding one where it is.
#[test]
fn cr_durable_007_journal_filenames_preserve_distinct_identifiers() {
    // Records of another server: the scan migrates them, nothing is sent.
    let serve = Serve::start(&[]);
    let dir = tempdir();
    let other = "http://127.0.0.1:9";
    let base = journal::base_dir(Some(dir.path())).unwrap();
    let j = Journal::open(&base, other, KEY, None).unwrap();
    let part = j.dir().to_path_buf();
    let rec = |id: &str| {
        JournalRecord::from_json(
            json!({"version": 1, "reservation_id": id, "base_url": other, "mode": "commit",
                   "commit_body": {"idempotency_key": format!("k-{id}"),
                                   "actual": {"unit": "TOKENS", "amount": 5}},
                   "recorded_at_ms": 1, "not_before_ms": null})
            .to_string()
            .as_bytes(),
        )
        .unwrap()
    };
    // Two ids whose legacy names are both `rsv_a.json`.
    j.write(&rec("rsv/a")).unwrap();
    // The legacy file of "rsv_a" (its own legacy name: it migrates) and one
    // holding "rsv:b" under the legacy name of "rsv_b" (it does not match
    // its name's id... both map to rsv_b.json, so it does) -- and one under
    // a name that is not its id's legacy name: left alone.
    std::fs::write(part.join("rsv_a.json"), rec("rsv_a").to_json().unwrap()).unwrap();
    std::fs::write(
        part.join("someone_else.json"),
        rec("rsv?c").to_json().unwrap(),
    )
    .unwrap();
    let mut c = DriverConfig::new(other, ApiKey::new(KEY));
    c.journal = JournalOptions::at(dir.path());
    let (driver, events) = Driver::new(c).unwrap();
    let report = loop {
        if let Event::Journal { report, .. } = events.recv_timeout(Duration::from_secs(20)).unwrap()
        {
            break report;
        }
    };
    assert_eq!(
        report.migrated, 1,
        "matching_legacy_record_migrates_without_deleting_collision: {report:?}"
    );
    driver.shutdown();
    let names: Vec<String> = {
        let mut v: Vec<String> = std::fs::read_dir(&part)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    for id in ["rsv/a", "rsv_a"] {
        let want = format!("v2-{}.json", sha256_hex(id));
        assert!(
            names.contains(&want),
            "standard_filename_is_sha256_of_exact_utf8_identifier: {id} {names:?}"
        );
        assert_eq!(journal::record_file_name(id), want);
        let v: Value = serde_json::from_slice(&std::fs::read(part.join(&want)).unwrap()).unwrap();
        assert_eq!(
            v["reservation_id"], id,
            "distinct_identifiers_never_share_a_journal_file"
        );
    }
    assert!(
        names.contains(&"someone_else.json".to_owned()),
        "the non-matching legacy file is left where it is: {names:?}"
    );
    assert!(
        !names.contains(&"rsv_a.json".to_owned()),
        "the matching legacy file moved"
    );
    assert!(serve.settlements().is_empty(), "expected_requests: none");
}

// ---------------------------------------------------------------- driver behaviour

/// ST-11: the heartbeat keeps running while the commit is in flight (the
/// commit is held 3 s; a 4 s lease keeps being extended), and stops at
/// the commit's final outcome.
#[test]
fn the_heartbeat_keeps_running_while_a_commit_is_in_flight() {
    // The commit is held 3 s before serve processes it (the reservation
    // stays active meanwhile); leads are capped at 4 s, so beats go on.
    let serve = Serve::start(&["--fault", "commit:1=hold=3000", "--max-lead-ms", "4000"]);
    let dir = tempdir();
    let (driver, events) = Driver::new(config(&serve.url, dir.path())).unwrap();
    let mut cfg = Config::new(4_000, Some(400));
    cfg.create_request = create_body();
    let lease = driver.start(cfg).unwrap();
    let mut seen = Vec::new();
    let id = reservation_of(&events, lease, &mut seen);
    let s = driver.commit(lease, usage()).unwrap();
    let r = settled(&events, s.lease(), &mut seen);
    assert_eq!(r.outcome, SettleOutcome::Committed);
    let all = serve.requests(&["extend", "commit"]);
    let commit = all.iter().position(|e| e["endpoint"] == "commit").unwrap();
    let commit_t = all[commit]["arrived_ms"].as_u64().unwrap();
    let during = all
        .iter()
        .filter(|e| {
            e["endpoint"] == "extend"
                && e["reservation_id"] == id.as_str()
                && e["arrived_ms"].as_u64().unwrap() > commit_t
        })
        .count();
    assert!(
        during >= 1,
        "no extension while the commit was in flight: {all:?}"
    );
    assert!(
        serve.entries().iter().all(|e| e["event"] != "lapse"),
        "no lapse"
    );
    // After the end: the heartbeat stopped (cancelled) and nothing more goes out.
    assert!(seen.iter().any(|e| matches!(e, Event::Stopped { lease: l, reason: StopReason::Cancelled, .. } if *l == lease)));
    let n = serve.requests(&["extend"]).len();
    std::thread::sleep(Duration::from_millis(1_500));
    assert_eq!(
        serve.requests(&["extend"]).len(),
        n,
        "no extension after the commit's end"
    );
    driver.shutdown();
}

/// SP-3 at the driver: the journal's directory becomes unusable after the
/// driver opened it (the partition replaced by a plain file); the commit's
/// record cannot be written, the decision says so (`persist_failed`), the
/// result reports the journal error, and the commit still goes out, once,
/// and is applied: a broken disk never costs the usage the server can take.
#[test]
fn a_failed_journal_write_still_sends_the_commit() {
    let serve = Serve::start(&[]);
    let dir = tempdir();
    let (driver, events) = Driver::new(config(&serve.url, dir.path())).unwrap();
    let lease = driver.start(lease_config(60_000)).unwrap();
    let mut seen = Vec::new();
    let id = reservation_of(&events, lease, &mut seen);
    let parts: Vec<PathBuf> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    assert_eq!(parts.len(), 1, "one partition: {parts:?}");
    std::fs::remove_dir_all(&parts[0]).unwrap();
    std::fs::write(&parts[0], b"not a directory").unwrap();

    let r = driver.commit(lease, usage()).unwrap().wait().unwrap();
    assert_eq!(r.outcome, SettleOutcome::Committed, "{r:?}");
    assert!(!r.journaled, "nothing could be journaled: {r:?}");
    assert!(
        r.decisions.iter().any(|d| d
            .warnings
            .contains(&leasebeat::SettleWarning::PersistFailed)),
        "the decision carries persist_failed: {:?}",
        r.decisions
    );
    let commits = serve.requests(&["commit"]);
    assert_eq!(commits.len(), 1, "{commits:?}");
    assert_eq!(commits[0]["reservation_id"], id.as_str());
    assert_eq!(commits[0]["applied"], true);
    assert_eq!(
        std::fs::read(&parts[0]).unwrap(),
        b"not a directory",
        "the journal wrote nothing through the file"
    );
    driver.shutdown();
}

/// J-7: flush waits at most its timeout and lists what is unresolved; the
/// record stays on disk; a later flush sees it settled.
#[test]
fn flush_is_bounded_and_leaves_the_unresolved_on_disk() {
    let serve = Serve::start(&["--fault", "commit:1=delay=1500"]);
    let dir = tempdir();
    let (driver, events) = Driver::new(config(&serve.url, dir.path())).unwrap();
    let lease = driver.start(lease_config(60_000)).unwrap();
    let mut seen = Vec::new();
    let id = reservation_of(&events, lease, &mut seen);
    let s = driver.commit(lease, usage()).unwrap();
    let t = Instant::now();
    let f = driver.flush(Duration::from_millis(200));
    assert!(
        t.elapsed() < Duration::from_millis(1_000),
        "bounded: {:?}",
        t.elapsed()
    );
    assert!(!f.settled);
    assert_eq!(f.pending, vec![id]);
    assert_eq!(
        json_records(dir.path()).len(),
        1,
        "the record stays meanwhile"
    );
    let f = driver.flush(Duration::from_secs(20));
    assert!(f.settled && f.pending.is_empty());
    assert_eq!(s.wait().unwrap().outcome, SettleOutcome::Committed);
    assert!(json_records(dir.path()).is_empty());
    driver.shutdown();
}

/// Exhausted retries keep the record (reported), and the next driver's
/// replay on start settles it with the same key.
#[test]
fn exhausted_settlements_keep_the_record_for_the_next_replay() {
    let serve = Serve::start(&["--fault", "commit:1-2=503"]);
    let dir = tempdir();
    let mut c = config(&serve.url, dir.path());
    c.settle_retry = leasebeat::RetryPolicy {
        max_attempts: 2,
        initial_ms: 50,
        max_ms: 100,
    };
    let (driver, events) = Driver::new(c).unwrap();
    let lease = driver.start(lease_config(60_000)).unwrap();
    let mut seen = Vec::new();
    reservation_of(&events, lease, &mut seen);
    let r = driver.commit(lease, usage()).unwrap().wait().unwrap();
    assert_eq!(r.outcome, SettleOutcome::Exhausted);
    assert!(r.record_kept && !r.is_success());
    assert_eq!(json_records(dir.path()).len(), 1);
    driver.shutdown();
    let (driver, events) = Driver::new(config(&serve.url, dir.path())).unwrap();
    let until = Instant::now() + Duration::from_secs(20);
    let result = loop {
        if let Event::Settled { result, .. } = events
            .recv_timeout(until.saturating_duration_since(Instant::now()))
            .unwrap()
        {
            break result;
        }
    };
    assert_eq!(result.outcome, SettleOutcome::Committed);
    assert!(result.replayed);
    let commits = serve.requests(&["commit"]);
    assert_eq!(commits.len(), 3);
    one_key(&commits, "replay keeps the key");
    assert!(json_records(dir.path()).is_empty());
    driver.shutdown();
}

/// HP-1 cancel: when the heartbeat stops (the server forgot the
/// reservation), the lease's token is cancelled with the failure; the
/// settlement still runs and its answer is reported.
#[test]
fn hp1_cancel_policy_cancels_the_work_when_the_heartbeat_stops() {
    let serve = Serve::start(&["--fault", "extend:1=404:NOT_FOUND"]);
    let dir = tempdir();
    let (driver, events) = Driver::new(config(&serve.url, dir.path())).unwrap();
    let id = serve.create(60_000);
    let token = CancellationToken::new();
    let hb = leasebeat::Heartbeat::for_reservation(Config::new(60_000, Some(1_000)), id.clone())
        .unwrap();
    let lease = driver
        .start_heartbeat_with(
            hb,
            LeaseOptions {
                event: Some(EventBody::new(
                    json!({"tenant": "acme"}),
                    json!({"kind": "llm", "name": "x"}),
                )),
                policy: FailurePolicy::Cancel(Canceller::Token(token.clone())),
            },
        )
        .unwrap();
    assert!(
        token.wait_timeout(Duration::from_secs(20)),
        "the token was cancelled"
    );
    let f = token.failure().expect("with the failure");
    assert_eq!(f.reservation_id.as_deref(), Some(id.as_str()));
    assert_eq!(f.disposition, Disposition::Stop(StopReason::NotFound));
    // The work ends; its usage is still committed (the server still has it).
    let r = driver.commit(lease, usage()).unwrap().wait().unwrap();
    assert_eq!(r.outcome, SettleOutcome::Committed, "{r:?}");
    assert!(!r.failed_after_heartbeat, "cancel is not fail_on_finalize");
    drop(events);
    driver.shutdown();
}

/// HP-1 cancel through a callback, and fail_on_finalize: the settlement
/// runs, then the result carries the heartbeat's stop.
#[test]
fn hp1_callback_and_fail_on_finalize() {
    let serve = Serve::start(&["--fault", "extend:*=404:NOT_FOUND"]);
    let dir = tempdir();
    let (driver, events) = Driver::new(config(&serve.url, dir.path())).unwrap();
    let called = Arc::new(Mutex::new(Vec::new()));
    let c2 = Arc::clone(&called);
    let id = serve.create(60_000);
    let hb = leasebeat::Heartbeat::for_reservation(Config::new(60_000, Some(1_000)), id.clone())
        .unwrap();
    let a = driver
        .start_heartbeat_with(
            hb,
            LeaseOptions {
                event: None,
                policy: FailurePolicy::Cancel(Canceller::Callback(Arc::new(move |f| {
                    c2.lock().unwrap().push(f.clone());
                }))),
            },
        )
        .unwrap();
    let id2 = serve.create(60_000);
    let hb = leasebeat::Heartbeat::for_reservation(Config::new(60_000, Some(1_000)), id2.clone())
        .unwrap();
    let b = driver
        .start_heartbeat_with(
            hb,
            LeaseOptions {
                event: None,
                policy: FailurePolicy::FailOnFinalize,
            },
        )
        .unwrap();
    let mut stopped = 0;
    let mut failures = Vec::new();
    while stopped < 2 {
        match events.recv_timeout(Duration::from_secs(20)).unwrap() {
            Event::Stopped { .. } => stopped += 1,
            Event::HeartbeatFailure { failure, .. } => failures.push(failure),
            _ => {}
        }
    }
    assert_eq!(called.lock().unwrap().len(), 1, "the callback, once");
    assert_eq!(
        failures.len(),
        2,
        "reported under every policy: {failures:?}"
    );
    let r = driver.commit(b, usage()).unwrap().wait().unwrap();
    assert_eq!(r.outcome, SettleOutcome::Committed);
    assert!(
        r.failed_after_heartbeat && !r.is_success(),
        "fail_on_finalize: {r:?}"
    );
    assert_eq!(
        r.heartbeat_failure.as_ref().unwrap().disposition,
        Disposition::Stop(StopReason::NotFound)
    );
    let r = driver
        .release(a, Some("work cancelled"))
        .unwrap()
        .wait()
        .unwrap();
    assert_eq!(r.outcome, SettleOutcome::Released);
    assert!(!r.journaled, "a release is not journaled");
    driver.shutdown();
}

/// Waits for `lease`'s `Stopped` event; returns its reason.
fn stopped_of(events: &Receiver<Event>, lease: LeaseHandle, seen: &mut Vec<Event>) -> StopReason {
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let e = events
            .recv_timeout(until.saturating_duration_since(Instant::now()))
            .expect("the lease's stop");
        let reason = match &e {
            Event::Stopped {
                lease: l, reason, ..
            } if *l == lease => Some(*reason),
            _ => None,
        };
        seen.push(e);
        if let Some(r) = reason {
            return r;
        }
    }
}

/// `Driver::forget`: a stopped lease's record is dropped (it can no longer
/// be settled: `UnknownLease`); a running lease is cancelled first; a lease
/// whose settlement is in progress is left alone and settles. Nothing is
/// sent for a forgotten lease (serve's log).
#[test]
fn forget_drops_a_stopped_lease_and_leaves_a_settling_one_alone() {
    let serve = Serve::start(&["--fault", "commit:1=hold=500"]);
    let dir = tempdir();
    let (driver, events) = Driver::new(config(&serve.url, dir.path())).unwrap();
    let mut seen = Vec::new();
    // Stopped (cancelled), then forgotten.
    let a = driver.start(lease_config(60_000)).unwrap();
    reservation_of(&events, a, &mut seen);
    driver.cancel(a).unwrap();
    assert_eq!(stopped_of(&events, a, &mut seen), StopReason::Cancelled);
    driver.forget(a).unwrap();
    driver.forget(a).unwrap(); // twice: accepted
    assert_eq!(
        driver.commit(a, usage()).unwrap_err(),
        DriverError::UnknownLease(a)
    );
    // Running: forget cancels it, then drops it.
    let b = driver.start(lease_config(60_000)).unwrap();
    reservation_of(&events, b, &mut seen);
    driver.forget(b).unwrap();
    assert_eq!(stopped_of(&events, b, &mut seen), StopReason::Cancelled);
    assert_eq!(
        driver.release(b, None).unwrap_err(),
        DriverError::UnknownLease(b)
    );
    // Settling: left alone; the commit (held 500 ms by serve) settles.
    let c = driver.start(lease_config(60_000)).unwrap();
    let c_id = reservation_of(&events, c, &mut seen);
    let s = driver.commit(c, usage()).unwrap();
    driver.forget(c).unwrap();
    let r = s.wait().expect("the settlement's end");
    assert_eq!(r.outcome, SettleOutcome::Committed);
    // Its heartbeat ran until the commit's stop_heartbeat (ST-11), not the forget.
    assert_eq!(stopped_of(&events, c, &mut seen), StopReason::Cancelled);
    let said_stop = seen
        .iter()
        .position(|e| {
            matches!(e, Event::Settlement { lease: l, decision, .. }
                if *l == c && decision.stop_heartbeat)
        })
        .expect("a settlement decision said stop_heartbeat");
    let stopped = seen
        .iter()
        .position(|e| matches!(e, Event::Stopped { lease: l, .. } if *l == c))
        .unwrap();
    assert!(
        said_stop < stopped,
        "stopped by the settlement, not by forget"
    );
    let settled_ids: Vec<String> = serve
        .settlements()
        .iter()
        .map(|e| e["reservation_id"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(
        settled_ids,
        vec![c_id],
        "nothing sent for a forgotten lease"
    );
    assert_eq!(
        driver.commit(LeaseHandle(999), usage()).unwrap_err(),
        DriverError::UnknownLease(LeaseHandle(999))
    );
    driver.forget(LeaseHandle(999)).unwrap(); // unknown: accepted, nothing happens
}

/// Bad input gets typed errors: a body that is not JSON, an amount beyond
/// 2^63, a lease without a reservation, a second settlement, an unknown
/// lease, a journal directory that is a symlink, the journal opt-out.
#[test]
fn settlement_errors_are_typed() {
    let serve = Serve::start(&[]);
    let dir = tempdir();
    let (driver, events) = Driver::new(config(&serve.url, dir.path())).unwrap();
    let lease = driver.start(lease_config(60_000)).unwrap();
    let mut seen = Vec::new();
    reservation_of(&events, lease, &mut seen);
    for bad in [
        "not json".to_owned(),
        json!({"actual": {"unit": "TOKENS", "amount": 9_223_372_036_854_775_808u64}}).to_string(),
        r#"{"actual":{"unit":"TOKENS","amount":1},"idempotency_key":"mine"}"#.to_owned(),
    ] {
        let e = driver
            .commit(lease, Usage::from_json(bad.clone()))
            .unwrap_err();
        assert!(
            matches!(&e, DriverError::Core(c) if c.kind() == leasebeat::ErrorKind::InvalidConfig),
            "{bad}: {e}"
        );
    }
    let s = driver.commit(lease, usage()).unwrap();
    assert_eq!(
        driver.commit(lease, usage()).unwrap_err(),
        DriverError::AlreadySettling(lease)
    );
    assert_eq!(s.wait().unwrap().outcome, SettleOutcome::Committed);
    assert_eq!(
        driver.release(lease, None).unwrap_err(),
        DriverError::UnknownLease(lease)
    );
    assert_eq!(
        driver.commit(LeaseHandle(999), usage()).unwrap_err(),
        DriverError::UnknownLease(LeaseHandle(999))
    );
    // Reservation ids the protocol cannot carry: typed, nothing sent.
    for id in ["a\0b".to_owned(), "x".repeat(10_000), String::new()] {
        let e = driver.commit_reservation(&id, usage(), None).unwrap_err();
        assert!(
            matches!(&e, DriverError::Core(c) if c.kind() == leasebeat::ErrorKind::InvalidConfig),
            "{e}"
        );
    }
    // A slash is fine: percent-encoded into one path segment (serve: 404, a rejection).
    let r = driver
        .commit_reservation("rsv/with slash", usage(), None)
        .unwrap()
        .wait()
        .unwrap();
    assert_eq!(r.outcome, SettleOutcome::Rejected, "{r:?}");
    assert_eq!(r.code.as_deref(), Some("NOT_FOUND"));
    assert!(
        serve
            .requests(&["commit"])
            .iter()
            .any(|c| c["path"] == "/v1/reservations/rsv%2Fwith%20slash/commit")
    );
    driver.hold_sends_for_testing(true).unwrap();
    let held = driver.start(lease_config(60_000)).unwrap();
    assert_eq!(
        driver.commit(held, usage()).unwrap_err(),
        DriverError::NoReservation(held)
    );
    driver.shutdown();
    // A symlinked journal directory is refused, typed.
    let real = tempdir();
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(real.path(), &link).unwrap();
    let e = Driver::new(config(&serve.url, &link))
        .map(|_| ())
        .unwrap_err();
    assert!(
        matches!(
            e,
            DriverError::Journal {
                kind: "symlink",
                ..
            }
        ),
        "{e}"
    );
    // The opt-out: settles, writes nothing.
    let empty = tempdir();
    let mut c = config(&serve.url, empty.path());
    c.journal.enabled = false;
    let (driver, _events) = Driver::new(c).unwrap();
    let id = serve.create(60_000);
    let r = driver
        .commit_reservation(&id, usage(), None)
        .unwrap()
        .wait()
        .unwrap();
    assert_eq!(r.outcome, SettleOutcome::Committed);
    assert!(!r.journaled);
    assert!(
        std::fs::read_dir(empty.path()).unwrap().next().is_none(),
        "nothing written"
    );
    driver.shutdown();
}

/// `leasebeat run --commit` settles through the journal at the end (after
/// Ctrl-C); `leasebeat run --replay` settles a record left behind.
#[test]
fn run_commits_through_the_journal_and_replays() {
    let serve = Serve::start(&[]);
    let dir = tempdir();
    let mut child = Command::new(env!("CARGO_BIN_EXE_leasebeat"))
        .args([
            "run",
            "--url",
            &serve.url,
            "--ttl-ms",
            "4000",
            "--timeout-ms",
            "500",
        ])
        .args([
            "--create",
            &serde_json::Value::Object(create_body()).to_string(),
        ])
        .args(["--commit", &usage_json().to_string()])
        .arg("--journal-dir")
        .arg(dir.path())
        .env("LEASEBEAT_API_KEY", KEY)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    while !line.contains("\"decision\"") {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0);
    }
    Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    let st = child.wait().unwrap();
    assert!(st.success(), "{st:?}: {rest}");
    let commit: Value = rest
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["event"] == "commit")
        .unwrap_or_else(|| panic!("{rest}"));
    assert_eq!(commit["result"]["outcome"], "committed");
    assert_eq!(commit["result"]["journaled"], true);
    assert_eq!(serve.requests(&["commit"]).len(), 1);
    assert!(json_records(dir.path()).is_empty());
    // --replay: a record left by a crashed process.
    let id = serve.create(60_000);
    let key = leave_commit_record(&serve, dir.path(), KEY, None, &id);
    let out = Command::new(env!("CARGO_BIN_EXE_leasebeat"))
        .args([
            "run",
            "--url",
            &serve.url,
            "--replay",
            "--flush-ms",
            "10000",
        ])
        .arg("--journal-dir")
        .arg(dir.path())
        .env("LEASEBEAT_API_KEY", KEY)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let commits = serve.requests(&["commit"]);
    assert_eq!(commits.last().unwrap()["header_key"], key.as_str());
    assert!(json_records(dir.path()).is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains("1 settled"));
}

/// After the heartbeat stops `expired`, the commit is still sent (the server
/// may be within its grace) and its answer reported; the event fallback
/// knows the create's subject and action.
#[test]
fn a_commit_after_an_expired_stop_is_still_sent() {
    let serve = Serve::start(&[
        "--fault",
        "extend:1=410:RESERVATION_EXPIRED",
        "--max-lead-ms",
        "4000",
    ]);
    let dir = tempdir();
    let (driver, events) = Driver::new(config(&serve.url, dir.path())).unwrap();
    let mut cfg = Config::new(4_000, Some(400));
    cfg.create_request = create_body();
    let lease = driver.start(cfg).unwrap();
    let mut seen = Vec::new();
    let id = reservation_of(&events, lease, &mut seen);
    let failure = loop {
        match events.recv_timeout(Duration::from_secs(20)).unwrap() {
            Event::HeartbeatFailure { failure, .. } => break failure,
            e => seen.push(e),
        }
    };
    assert_eq!(failure.disposition, Disposition::Stop(StopReason::Expired));
    // The server still holds it (the 410 was a fault): the commit lands.
    let r = driver.commit(lease, usage()).unwrap().wait().unwrap();
    assert_eq!(r.outcome, SettleOutcome::Committed, "{r:?}");
    let commits = serve.requests(&["commit"]);
    assert_eq!(commits.len(), 1);
    assert_eq!(commits[0]["reservation_id"], id.as_str());
    driver.shutdown();
}
