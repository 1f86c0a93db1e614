//! The SDK's public API (`with_cycles`) against leasebeat's reference server
//! (`leasebeat serve`, started here on 127.0.0.1): a guarded function that
//! runs well past its lease, once with a lost extend response and once with
//! a 5xx burst. The lease must survive (the commit succeeds and the server
//! never sees the reservation lapse), and the retry after the fault must
//! reuse the faulted attempt's idempotency key and body.
//!
//! Added by leasebeat's integration (integrations/rust-runcycles/run.sh),
//! which builds the server and passes its path in `LEASEBEAT_BIN`.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use runcycles::models::*;
use runcycles::{with_cycles, CyclesClient, WithCyclesConfig};
use serde_json::Value;

/// Requested lease. With the client's 1 s attempt timeout the retry reserve
/// is 2 x 1000 + 1000 = 3000 ms, so the first beat comes about 3 s after the
/// create, and the guarded function below outlives the lease twice over.
const TTL_MS: u64 = 6_000;
/// How long the guarded function works.
const WORK: Duration = Duration::from_millis(12_000);

struct Server {
    child: Child,
    url: String,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(faults: &[&str]) -> Server {
    let bin = std::env::var("LEASEBEAT_BIN").expect(
        "LEASEBEAT_BIN must name the `leasebeat` binary (integrations/rust-runcycles/run.sh sets it)",
    );
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("serve.jsonl");
    let mut cmd = Command::new(bin);
    cmd.args(["serve", "--bind", "127.0.0.1:0", "--log"])
        .arg(&log)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    for f in faults {
        cmd.args(["--fault", f]);
    }
    let mut child = cmd.spawn().expect("start leasebeat serve");
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let url = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("unexpected first line from leasebeat serve: {line:?}"))
        .to_string();
    // Keep reading stdout (LAPSE lines) so the server never blocks on it;
    // the log file is what the assertions read.
    std::thread::spawn(move || for _ in out.lines() {});
    Server {
        child,
        url,
        log,
        _dir: dir,
    }
}

fn log_entries(server: &Server) -> Vec<Value> {
    std::fs::read_to_string(&server.log)
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Runs a guarded function of `WORK` against a server with these faults and
/// returns the server's log.
async fn guarded_run(faults: &[&str]) -> (Server, Vec<Value>) {
    let server = serve(faults);
    let client = CyclesClient::builder("test-key", server.url.clone())
        .connect_timeout(Duration::from_millis(500))
        .read_timeout(Duration::from_millis(500))
        .build();
    let config = WithCyclesConfig::new(Amount::tokens(1000))
        .action("llm.completion", "gpt-4o")
        .subject(Subject {
            tenant: Some("acme".into()),
            ..Default::default()
        })
        .ttl_ms(TTL_MS);
    let reply = with_cycles(&client, config, |_ctx| async move {
        tokio::time::sleep(WORK).await;
        Ok(("done", Amount::tokens(700)))
    })
    .await
    .expect("the guarded function commits: the lease survived");
    assert_eq!(reply, "done");
    // Let the lapse monitor look once more after the commit.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let entries = log_entries(&server);
    (server, entries)
}

fn requests<'a>(entries: &'a [Value], endpoint: &str) -> Vec<&'a Value> {
    entries
        .iter()
        .filter(|e| e["event"] == "request" && e["endpoint"] == endpoint)
        .collect()
}

/// Every faulted extend is followed by an extend with the same key and
/// byte-identical body; no lapse was logged; the commit was applied.
fn check(entries: &[Value], expected_faults: usize) {
    let lapses: Vec<&Value> = entries.iter().filter(|e| e["event"] == "lapse").collect();
    assert!(lapses.is_empty(), "unreported lapses: {lapses:?}");
    let extends = requests(entries, "extend");
    let faulted: Vec<usize> = (0..extends.len())
        .filter(|&i| !extends[i]["fault"].is_null())
        .collect();
    assert_eq!(faulted.len(), expected_faults, "extends: {extends:#?}");
    for &i in &faulted {
        let retry = extends
            .get(i + 1)
            .unwrap_or_else(|| panic!("no retry after faulted extend {i}: {extends:#?}"));
        assert_eq!(
            retry["header_key"], extends[i]["header_key"],
            "the retry reuses the idempotency key"
        );
        assert_eq!(
            retry["body"], extends[i]["body"],
            "the retry resends the same body"
        );
    }
    let last = extends.last().unwrap();
    assert!(last["fault"].is_null() && last["status"] == 200, "{last:?}");
    // Several beats: the lease was renewed past the fault, for the whole run.
    assert!(
        extends.len() > expected_faults + 1,
        "the heartbeat kept extending after the recovery: {extends:#?}"
    );
    // A key is reused only for the retry of a faulted attempt; every new beat
    // after a success has a fresh key (HB-35).
    for i in 1..extends.len() {
        if extends[i]["header_key"] == extends[i - 1]["header_key"] {
            assert!(
                !extends[i - 1]["fault"].is_null(),
                "key reused after a success: {extends:#?}"
            );
        }
    }
    let keys: std::collections::HashSet<String> = extends
        .iter()
        .map(|e| e["header_key"].to_string())
        .collect();
    assert_eq!(keys.len(), extends.len() - expected_faults, "{extends:#?}");
    let commits = requests(entries, "commit");
    assert_eq!(commits.len(), 1, "{commits:#?}");
    assert_eq!(commits[0]["status"], 200, "{:?}", commits[0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_survives_a_lost_extend_response_with_the_same_key() {
    // The first extend is applied, then the connection closes unanswered.
    let (_server, entries) = guarded_run(&["extend:1=drop"]).await;
    check(&entries, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_survives_a_5xx_burst_with_the_same_key() {
    // Two consecutive server errors on the first extend and its retry.
    let (_server, entries) = guarded_run(&["extend:1=503", "extend:2=500"]).await;
    check(&entries, 2);
}
