//! `leasebeat probe` against `leasebeat serve` (both subprocesses, on
//! 127.0.0.1): it passes a correct server, each server bug fails exactly
//! its checks, and bad input ends with a clear error and exit status 2,
//! nothing left reserved.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

use serde_json::Value;

const KEY: &str = "probe-test-key";

static N: AtomicU32 = AtomicU32::new(0);

struct Serve {
    child: Child,
    url: String,
    log: PathBuf,
}

impl Serve {
    fn start(args: &[&str]) -> Serve {
        let n = N.fetch_add(1, Ordering::SeqCst);
        let log = std::env::temp_dir().join(format!(
            "leasebeat-probe-test-{}-{n}.jsonl",
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
        std::thread::spawn(move || for _ in out.lines() {});
        Serve { child, url, log }
    }

    fn entries(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        text.lines()
            .map(|l| serde_json::from_str(l).expect("log line is JSON"))
            .collect()
    }

    /// Every reservation the server created was released (or finalized).
    fn assert_nothing_reserved(&self) {
        let entries = self.entries();
        let created: Vec<String> = entries
            .iter()
            .filter(|e| e["endpoint"] == "create" && e["status"] == 200)
            .filter_map(|e| {
                let body: Value = serde_json::from_str(e["response"].as_str()?).ok()?;
                body["reservation_id"].as_str().map(str::to_owned)
            })
            .collect();
        for id in created {
            let released = entries.iter().any(|e| {
                e["endpoint"] == "release"
                    && e["reservation_id"] == id.as_str()
                    && e["status"] == 200
            });
            assert!(released, "{id} was not released");
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

fn probe(url: &str, key: Option<&str>, args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_leasebeat"));
    cmd.arg("probe")
        .arg("--url")
        .arg(url)
        .args(["--wait-ms", "300"])
        .args(args)
        .env_remove("LEASEBEAT_API_KEY");
    if !args.contains(&"--timeout-ms") {
        cmd.args(["--timeout-ms", "2000"]);
    }
    if let Some(k) = key {
        cmd.env("LEASEBEAT_API_KEY", k);
    }
    cmd.output().expect("run leasebeat probe")
}

fn json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn failing(v: &Value) -> Vec<String> {
    v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["status"] == "FAIL")
        .map(|f| f["id"].as_str().unwrap().to_owned())
        .collect()
}

fn finding<'a>(v: &'a Value, id: &str) -> &'a Value {
    v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == id)
        .unwrap_or_else(|| panic!("no finding {id}"))
}

#[test]
fn a_correct_server_passes_and_everything_is_released() {
    let serve = Serve::start(&[]);
    // The key from the environment, as `leasebeat run` takes it; the table.
    let out = probe(&serve.url, Some(KEY), &[]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    for id in [
        "responses.schema",
        "remaining_ttl_ms.present",
        "remaining_ttl_ms.consistent",
        "replay.extend.remaining",
        "idempotency.mismatch.create",
        "retry_after.delta_seconds",
        "steady cadence",
        "extensions / hour",
        "longest outage",
        "result: every MUST holds (exit 0)",
    ] {
        assert!(text.contains(id), "{id} missing from\n{text}");
    }
    // Progress on stderr only.
    assert!(String::from_utf8_lossy(&out.stderr).contains("#1 create A -> 200"));
    serve.assert_nothing_reserved();
}

#[test]
fn json_output_with_a_ten_extension_limit() {
    let serve = Serve::start(&["--max-extensions", "10"]);
    let out = probe(
        &serve.url,
        None,
        &["--api-key", KEY, "--json", "--quiet", "--exhaust"],
    );
    assert_eq!(out.status.code(), Some(0));
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = json(&out);
    assert_eq!(v["exit_code"], 0);
    assert_eq!(v["extension_limit"]["extensions"], 10);
    assert_eq!(v["report"]["extension_limit"], 10);
    assert_eq!(v["report"]["extension_limit_measured"], true);
    assert!(v["report"]["limit_stops_work_after_ms"].as_u64().unwrap() > 0);
    assert_eq!(v["regime"]["kind"], "additive");
    assert_eq!(v["not_released"].as_array().unwrap().len(), 0);
    // Every exchange carries its instants; the create carried its key in the body.
    let first = &v["exchanges"][0];
    assert!(first["sent_ms"].is_number() && first["received_ms"].is_number());
    let request: Value = serde_json::from_str(first["request"].as_str().unwrap()).unwrap();
    assert_eq!(request["idempotency_key"], first["key"]);
    assert_eq!(request["ttl_ms"], 60_000);
    serve.assert_nothing_reserved();
}

#[test]
fn each_server_bug_fails_exactly_its_checks() {
    let cases: [(&[&str], &[&str]); 5] = [
        (
            &["--replay-stale-remaining"],
            &[
                "replay.extend.remaining",
                "replay.extend.released",
                "replay.create.remaining",
                "replay.create.released",
            ],
        ),
        (
            &["--remaining-clock-permille", "2000"],
            &["remaining_ttl_ms.consistent"],
        ),
        (
            &["--replay-changed-body"],
            &["replay.extend.verbatim", "replay.create.verbatim"],
        ),
        (
            &["--no-idempotency-mismatch"],
            &["idempotency.mismatch.extend", "idempotency.mismatch.create"],
        ),
        (
            &["--fault", "extend:1=429,retry-after=http-date"],
            &["retry_after.delta_seconds"],
        ),
    ];
    for (args, expected) in cases {
        let serve = Serve::start(args);
        let out = probe(&serve.url, Some(KEY), &["--json", "--quiet"]);
        let v = json(&out);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {v:#}");
        assert_eq!(failing(&v), expected.to_vec(), "{args:?}");
        serve.assert_nothing_reserved();
    }
}

#[test]
fn a_delta_seconds_retry_after_passes() {
    let serve = Serve::start(&["--fault", "extend:1=429,retry-after=1"]);
    let out = probe(&serve.url, Some(KEY), &["--json", "--quiet"]);
    let v = json(&out);
    assert_eq!(out.status.code(), Some(0), "{v:#}");
    assert_eq!(finding(&v, "retry_after.delta_seconds")["status"], "PASS");
    serve.assert_nothing_reserved();
}

fn assert_exit_2(out: &Output, needle: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains(needle), "{needle:?} not in {err}");
}

#[test]
fn bad_input_is_a_clear_error_with_exit_2() {
    // No key at all.
    assert_exit_2(
        &probe("http://127.0.0.1:9", None, &[]),
        "give --api-key or set LEASEBEAT_API_KEY",
    );
    // Not a URL, not a JSON object, a create that sets the key itself.
    assert_exit_2(&probe("ftp://x", Some(KEY), &[]), "http://");
    assert_exit_2(
        &probe("http://127.0.0.1:9", Some(KEY), &["--create", "[1]"]),
        "--create must be a JSON object",
    );
    assert_exit_2(
        &probe(
            "http://127.0.0.1:9",
            Some(KEY),
            &["--create", r#"{"idempotency_key":"x"}"#],
        ),
        "may not contain idempotency_key",
    );
    // Unreachable: a port nobody listens on.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = probe(&format!("http://127.0.0.1:{port}"), Some(KEY), &["--json"]);
    assert_exit_2(&out, "cannot connect");
    assert_eq!(json(&out)["exit_code"], 2);
}

#[test]
fn a_wrong_key_is_refused_and_nothing_is_reserved() {
    let serve = Serve::start(&[]);
    let out = probe(&serve.url, Some("not-the-key"), &[]);
    assert_exit_2(&out, "authentication refused (401 UNAUTHORIZED");
    serve.assert_nothing_reserved();
}

#[test]
fn an_html_answer_is_not_a_cycles_api() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { break };
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let body = "<!doctype html><html><body>Welcome to nginx!</body></html>";
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    assert_exit_2(&probe(&url, Some(KEY), &[]), "answered HTML");
}

#[test]
fn a_slow_server_ends_within_the_budget_and_releases_what_it_made() {
    // Creates never answer (and are never applied): the key is reported.
    let serve = Serve::start(&["--fault", "create:*=hold=5000,drop-before"]);
    let out = probe(&serve.url, Some(KEY), &["--timeout-ms", "300"]);
    assert_exit_2(&out, "no complete answer within --timeout-ms 300 ms");
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("NOT RELEASED: a reservation possibly created under idempotency key probe-")
    );
    drop(serve);
    // Extensions answer too late: the reservation it made is released.
    let serve = Serve::start(&["--fault", "extend:*=delay=1500"]);
    let out = probe(&serve.url, Some(KEY), &["--timeout-ms", "300"]);
    assert_exit_2(&out, "no complete answer within --timeout-ms 300 ms");
    assert!(!String::from_utf8_lossy(&out.stderr).contains("NOT RELEASED"));
    serve.assert_nothing_reserved();
}

#[test]
fn a_server_that_never_releases_is_reported_by_id() {
    let serve = Serve::start(&["--fault", "release:*=503"]);
    let out = probe(&serve.url, Some(KEY), &["--json", "--quiet"]);
    let v = json(&out);
    assert_eq!(finding(&v, "cleanup.released")["status"], "WARN");
    assert_eq!(finding(&v, "replay.extend.released")["status"], "SKIP");
    let left = v["not_released"].as_array().unwrap();
    assert_eq!(left.len(), 1, "{left:?}");
    assert!(left[0].as_str().unwrap().starts_with("reservation rsv-"));
    assert!(String::from_utf8_lossy(&out.stderr).contains("NOT RELEASED: reservation rsv-"));
}

#[test]
fn probe_help_names_its_checks_and_exit_codes() {
    let out = Command::new(env!("CARGO_BIN_EXE_leasebeat"))
        .args(["probe", "--help"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    for needle in [
        "--exhaust",
        "--json",
        "IDEMPOTENCY_MISMATCH",
        "Exit status: 0",
        "dead zone",
    ] {
        assert!(text.contains(needle), "{needle}");
    }
}
