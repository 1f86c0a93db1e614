//! The CLI on bad input (issue 29): every mistake a newcomer makes gets one
//! clear sentence on stderr and its own exit status, and nothing on stderr
//! carries colour codes when stderr is not a terminal.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const KEY: &str = "test-key";
const CREATE: &str = r#"{"subject":{"tenant":"t"},"action":{"kind":"k","name":"n"},"estimate":{"unit":"TOKENS","amount":1}}"#;

struct Serve {
    child: Child,
    url: String,
    log: PathBuf,
}

impl Serve {
    fn start(name: &str) -> Serve {
        let log = std::env::temp_dir().join(format!(
            "leasebeat-cli-errors-{}-{name}.jsonl",
            std::process::id()
        ));
        let _ = std::fs::remove_file(&log);
        let mut child = Command::new(env!("CARGO_BIN_EXE_leasebeat"))
            .args(["serve", "--api-key", KEY, "--log"])
            .arg(&log)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn leasebeat serve");
        let mut out = BufReader::new(child.stdout.take().expect("stdout"));
        let mut first = String::new();
        out.read_line(&mut first).expect("the address line");
        let url = first
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {first:?}"))
            .to_owned();
        // Keep reading so the server never blocks on a full pipe.
        std::thread::spawn(move || for _ in out.lines() {});
        Serve { child, url, log }
    }

    fn endpoints(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter_map(|e| e["endpoint"].as_str().map(str::to_owned))
            .collect()
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}

fn leasebeat(args: &[&str]) -> Output {
    // `leasebeat run` journals by default: never under the tester's home.
    let journal = tempfile::tempdir().expect("a temporary directory");
    Command::new(env!("CARGO_BIN_EXE_leasebeat"))
        .args(args)
        .env("LEASEBEAT_API_KEY", KEY)
        .env("CYCLES_JOURNAL_DIR", journal.path())
        .env_remove("NO_COLOR")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .output()
        .expect("run leasebeat")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// stderr is a pipe here: no ANSI escape may appear in it.
fn assert_plain(text: &str) {
    assert!(!text.contains('\u{1b}'), "colour codes on a pipe: {text:?}");
}

/// The last stderr line, which must be `leasebeat run: ...`.
fn last_run_line(out: &Output) -> String {
    let err = stderr(out);
    assert_plain(&err);
    let last = err.lines().last().unwrap_or_default().to_owned();
    assert!(last.starts_with("leasebeat run: "), "{err}");
    last
}

#[test]
fn a_refused_create_shows_the_servers_message_and_exits_4() {
    let serve = Serve::start("create");
    let out = leasebeat(&["run", "--url", &serve.url, "--create", "{}"]);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    let line = last_run_line(&out);
    assert!(line.contains("refused the create"), "{line}");
    assert!(line.contains("subject is required"), "{line}");
    assert!(line.contains("subject, action and estimate"), "{line}");
}

#[test]
fn the_help_documents_the_create_fields_and_the_exit_statuses() {
    let out = leasebeat(&["run", "--help"]);
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for needle in [
        "subject",
        "action",
        "estimate",
        "Exit status:",
        "  3  ",
        "  4  ",
    ] {
        assert!(help.contains(needle), "{needle:?} missing from {help}");
    }
}

#[test]
fn a_negative_ttl_is_explained() {
    let out = leasebeat(&[
        "run",
        "--url",
        "http://127.0.0.1:9",
        "--create",
        CREATE,
        "--ttl-ms",
        "-5",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert_plain(&err);
    assert!(!err.contains("unexpected argument"), "{err}");
    assert!(
        err.contains("--ttl-ms") && err.contains("1000 to 86400000"),
        "{err}"
    );
}

#[test]
fn a_zero_timeout_is_explained() {
    let out = leasebeat(&[
        "run",
        "--url",
        "http://127.0.0.1:9",
        "--create",
        CREATE,
        "--timeout-ms",
        "0",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("--timeout-ms") && err.contains("at least 1 ms"),
        "{err}"
    );
    assert!(!err.contains("request_timeout_ms"), "{err}");
}

#[test]
fn the_missing_argument_error_names_both_ways_to_start() {
    let out = leasebeat(&["run", "--url", "http://127.0.0.1:9"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("--create") && err.contains("--reservation"),
        "{err}"
    );
}

#[test]
fn an_unreachable_server_gets_a_readable_line_and_exits_3() {
    // A port nothing listens on: bind one, note it, close it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let out = leasebeat(&[
        "run",
        "--url",
        &url,
        "--create",
        CREATE,
        "--timeout-ms",
        "500",
    ]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let line = last_run_line(&out);
    assert!(
        line.contains("cannot reach the server") && line.contains(&url),
        "{line}"
    );
}

#[test]
fn no_release_after_the_server_said_not_found() {
    let serve = Serve::start("not-found");
    let out = leasebeat(&[
        "run",
        "--url",
        &serve.url,
        "--reservation",
        "no-such-reservation",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let line = last_run_line(&out);
    assert!(line.contains("not_found"), "{line}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains(r#""event":"release""#), "{stdout}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !serve.endpoints().iter().any(|e| e == "extend") {
        assert!(Instant::now() < deadline, "no extend in the server's log");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        !serve.endpoints().iter().any(|e| e == "release"),
        "{:?}",
        serve.endpoints()
    );
}

#[test]
fn simulate_refuses_zero_sequences_and_counts_one_thread() {
    let out = leasebeat(&["simulate", "--sequences", "0"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("at least 1"), "{}", stderr(&out));
    assert!(out.stdout.is_empty());

    let out = leasebeat(&["simulate", "--sequences", "3", "--threads", "1"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("on 1 thread in"), "{err}");
}

#[test]
fn demo_quiet_prints_the_summary_only() {
    let out = leasebeat(&["demo", "--quiet"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let err = stderr(&out);
    assert!(out.status.success(), "{stdout}\n{err}");
    assert!(stdout.starts_with("== summary"), "{stdout}");
    assert!(!stdout.contains("== simulate"), "{stdout}");
    assert!(!stdout.contains("ext/lease-h"), "{stdout}");
    assert_plain(&err);
}

#[test]
fn demo_logs_carry_no_colour_on_a_pipe() {
    // older-server is in jeopardy by design: the warning goes to stderr.
    let out = leasebeat(&["demo", "--scenario", "older-server"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("lease_in_jeopardy"), "{err}");
    assert_plain(&err);
}
