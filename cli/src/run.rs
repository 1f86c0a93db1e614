//! `leasebeat run`: heartbeat one reservation against any Cycles server.

use std::io::Write;
use std::process::ExitCode;
use std::sync::mpsc;

use std::path::PathBuf;
use std::time::Duration;

use leasebeat::driver::{
    ApiKey, Driver, DriverConfig, Event, EventBody, JournalOptions, LeaseOptions, Outcome,
    SettleResult, Usage, clock,
};
use leasebeat::{Config, Heartbeat, StopReason};
use serde_json::{Map, Value};

/// Options of `leasebeat run`.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Base URL of the Cycles server.
    pub url: String,
    /// API key (never printed).
    pub api_key: ApiKey,
    /// Create a reservation, or heartbeat an existing one.
    pub start: Start,
    /// Lease length and extend_by_ms.
    pub ttl_ms: u64,
    /// Request budget.
    pub timeout_ms: u64,
    /// Release the reservation when the heartbeat stops.
    pub release: bool,
    /// Commit this usage (a commit body without key: actual, metrics,
    /// metadata) when the heartbeat stops, instead of releasing.
    pub commit: Option<Vec<u8>>,
    /// Subject and action for the expired-commit fallback of an adopted
    /// reservation (a created one takes its create body's).
    pub event: Option<Vec<u8>>,
    /// The journal (dir, tenant, opt-out); replayed when `run` starts.
    pub journal: JournalOptions,
    /// How long `run` waits at the end for settlements in flight (J-7).
    pub flush_ms: u64,
}

/// Options of `leasebeat run --replay`: settle the journal's records and exit.
#[derive(Clone, Debug)]
pub struct ReplayOptions {
    /// Base URL of the Cycles server.
    pub url: String,
    /// API key (never printed; with no tenant it names the partition).
    pub api_key: ApiKey,
    /// The journal (dir, tenant).
    pub journal: JournalOptions,
    /// How long to wait for the replayed settlements (J-7).
    pub flush_ms: u64,
}

/// How `leasebeat run` gets its reservation.
#[derive(Clone, Debug)]
pub enum Start {
    /// Create one: the create request (subject, action, estimate, ...),
    /// without `idempotency_key` and `ttl_ms`.
    Create(Map<String, Value>),
    /// Heartbeat this existing reservation ([`Heartbeat::for_reservation`]).
    Reservation(String),
}

/// The JSON form of a settlement's end.
pub fn settle_result_json(r: &SettleResult) -> Value {
    serde_json::json!({
        "outcome": r.outcome.as_str(), "status": r.status, "code": r.code,
        "key": r.key, "record_kept": r.record_kept, "journaled": r.journaled,
        "replayed": r.replayed, "failed_after_heartbeat": r.failed_after_heartbeat,
        "journal_error": r.journal_error,
    })
}

/// The JSON line `leasebeat run` prints for an event (`t_ms` from `t0_ns`).
pub fn event_json(event: &Event, t0_ns: u64) -> Value {
    let t = |ns: u64| Value::from(ns.saturating_sub(t0_ns) as f64 / 1e6);
    match event {
        Event::Decision {
            lease: _,
            reservation_id,
            attempt,
            outcome,
            observed_ns,
            decision,
        } => {
            let mut m = Map::new();
            m.insert("event".into(), "decision".into());
            m.insert("t_ms".into(), t(*observed_ns));
            m.insert("reservation_id".into(), reservation_id.clone().into());
            if let Some(a) = attempt {
                m.insert("attempt".into(), a.id.into());
                m.insert("kind".into(), a.kind.as_str().into());
                m.insert("key".into(), a.key.clone().into());
            }
            m.insert("outcome".into(), outcome.to_string().into());
            m.insert("class".into(), decision.outcome.as_str().into());
            if let Some(d) = &decision.detail {
                m.insert("detail".into(), d.clone().into());
            }
            m.insert("decision".into(), Value::Object(decision.to_json()));
            Value::Object(m)
        }
        Event::Stopped {
            reservation_id,
            reason,
            at_ns,
            ..
        } => serde_json::json!({
            "event": "stopped", "t_ms": t(*at_ns),
            "reservation_id": reservation_id, "reason": reason.as_str(),
        }),
        Event::Jeopardy {
            reservation_id,
            reason,
            at_ns,
            due_ns,
            proven_until_ns,
            ..
        } => serde_json::json!({
            "event": "lease_in_jeopardy", "t_ms": t(*at_ns),
            "reservation_id": reservation_id, "reason": reason.as_str(),
            "due_t_ms": due_ns.map(t),
            "proven_until_t_ms": proven_until_ns.filter(|p| *p != u64::MAX).map(t),
        }),
        Event::Error {
            reservation_id,
            error,
            ..
        } => serde_json::json!({
            "event": "error", "reservation_id": reservation_id,
            "code": error.kind().code(), "message": error.message(),
        }),
        Event::HeartbeatFailure { failure, .. } => serde_json::json!({
            "event": "heartbeat_failure", "t_ms": t(failure.at_ns),
            "reservation_id": failure.reservation_id, "outcome": failure.outcome.to_string(),
            "class": failure.class, "disposition": failure.disposition.as_str(),
            "stop_reason": match failure.disposition {
                leasebeat::driver::Disposition::Stop(r) => Some(r.as_str()),
                _ => None,
            },
        }),
        Event::Settlement {
            reservation_id,
            attempt,
            outcome,
            decision,
            ..
        } => {
            let mut m = Map::new();
            m.insert("event".into(), "settlement".into());
            m.insert("t_ms".into(), t(clock::now_ns()));
            m.insert("reservation_id".into(), reservation_id.clone().into());
            if let Some(a) = attempt {
                m.insert("attempt".into(), a.id.into());
                m.insert("endpoint".into(), a.endpoint.as_str().into());
                m.insert("key".into(), a.key.clone().into());
            }
            if let Some(o) = outcome {
                m.insert("outcome".into(), o.to_string().into());
            }
            m.insert("decision".into(), Value::Object(decision.to_json()));
            Value::Object(m)
        }
        Event::Settled { result, .. } => serde_json::json!({
            "event": "settled", "t_ms": t(clock::now_ns()),
            "reservation_id": result.reservation_id, "result": settle_result_json(result),
        }),
        Event::Journal { report, .. } => serde_json::json!({
            "event": "journal",
            "dir": report.dir.as_ref().map(|d| d.display().to_string()),
            "replayed": report.replayed, "busy": report.busy,
            "quarantined": report.quarantined.iter()
                .map(|(f, r)| serde_json::json!({"file": f, "reason": r})).collect::<Vec<_>>(),
            "foreign": report.foreign, "migrated": report.migrated,
            "skipped": report.skipped.iter()
                .map(|(f, r)| serde_json::json!({"file": f, "reason": r})).collect::<Vec<_>>(),
            "error": report.error,
        }),
    }
}

/// Exit status after a cancel (Ctrl-C).
pub const EXIT_CANCELLED: u8 = 0;
/// Exit status after any other stop of the heartbeat.
pub const EXIT_STOPPED: u8 = 1;
/// Exit status on bad arguments.
pub const EXIT_USAGE: u8 = 2;
/// Exit status when no attempt got an HTTP answer (the server is unreachable).
pub const EXIT_UNREACHABLE: u8 = 3;
/// Exit status when the server refused the create.
pub const EXIT_CREATE_REFUSED: u8 = 4;
/// Exit status when the final settlement (commit or release) did not
/// succeed, or a replay left records unresolved.
pub const EXIT_SETTLE_FAILED: u8 = 5;

/// Whether a stop means the server no longer holds the reservation, so a
/// release would only be refused (a 404 or 409). After `expired` the
/// server may still be within its grace: `run` still settles then.
pub fn reservation_is_gone(reason: StopReason) -> bool {
    matches!(reason, StopReason::NotFound | StopReason::Finalized)
}

/// One line of text, safe for a terminal: control characters become spaces.
fn printable(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// What `run` remembers of the events to explain the end in one sentence.
#[derive(Default)]
struct Ending {
    /// Any attempt got an HTTP response.
    answered: bool,
    /// The last transport failure (connect, timeout, reset), if any.
    last_failure: Option<String>,
    /// The detail of the last decision.
    detail: Option<String>,
}

/// The closing sentence on stderr and the exit status for a stop.
fn ending(reason: Option<StopReason>, e: &Ending, url: &str) -> (String, u8) {
    let detail = e
        .detail
        .as_deref()
        .map(|d| format!(": {}", printable(d)))
        .unwrap_or_default();
    match reason {
        Some(StopReason::Cancelled) => ("cancelled".into(), EXIT_CANCELLED),
        Some(_) if !e.answered && e.last_failure.is_some() => (
            format!(
                "cannot reach the server at {url} (every attempt ended in a transport failure, the last: {})",
                e.last_failure.as_deref().unwrap_or("?")
            ),
            EXIT_UNREACHABLE,
        ),
        Some(r @ (StopReason::CreateRejected | StopReason::NoReservation)) => (
            format!(
                "the server refused the create ({r}){detail}; the create needs subject, action and estimate (see leasebeat run --help)"
            ),
            EXIT_CREATE_REFUSED,
        ),
        Some(r) => (format!("the heartbeat stopped ({r}){detail}"), EXIT_STOPPED),
        None => ("the driver ended without a stop event".into(), EXIT_STOPPED),
    }
}

fn print(stdout: &mut std::io::Stdout, v: &Value) {
    let _ = writeln!(stdout, "{v}");
    let _ = stdout.flush();
}

fn driver_config(url: String, api_key: ApiKey, journal: JournalOptions) -> DriverConfig {
    DriverConfig {
        journal,
        ..DriverConfig::new(url, api_key)
    }
}

/// Settles the journal's partition (its replay, J-6) and exits: every
/// record not claimed elsewhere is settled; waits at most `flush_ms`.
/// Exit 0 when every replayed settlement succeeded and nothing is left,
/// [`EXIT_SETTLE_FAILED`] otherwise, [`EXIT_USAGE`] on bad arguments or an
/// unusable journal.
pub fn replay(opts: ReplayOptions) -> ExitCode {
    let mut journal = opts.journal;
    journal.replay_on_start = true;
    if !journal.enabled {
        eprintln!("leasebeat run --replay: the journal is off (--no-journal)");
        return ExitCode::from(EXIT_USAGE);
    }
    let (driver, events) = match Driver::new(driver_config(opts.url, opts.api_key, journal)) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("leasebeat run: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let t0 = clock::now_ns();
    let report = driver.flush(Duration::from_millis(opts.flush_ms));
    let report = {
        let r = driver.shutdown();
        if report.settled { report } else { r }
    };
    let mut stdout = std::io::stdout();
    let (mut ok, mut failed, mut quarantined) = (0, 0, 0);
    for event in events.try_iter() {
        print(&mut stdout, &event_json(&event, t0));
        match &event {
            Event::Settled { result, .. } if result.is_success() => ok += 1,
            Event::Settled { .. } => failed += 1,
            Event::Journal { report, .. } => quarantined += report.quarantined.len(),
            _ => {}
        }
    }
    eprintln!(
        "leasebeat run --replay: {ok} settled, {failed} not settled, {} unresolved, {quarantined} quarantined",
        report.pending.len()
    );
    if failed == 0 && report.settled {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_SETTLE_FAILED)
    }
}

/// Runs until the heartbeat stops or Ctrl-C (SIGINT/SIGTERM) cancels it;
/// then settles the reservation through the driver's settlement (journaled
/// unless the journal is off): commits `--commit`'s usage, or else releases
/// it unless told not to or the server said it is gone (not_found,
/// finalized; after `expired` the server may still be within its grace, so
/// it still settles). Replays the journal's partition when it starts, and
/// waits at most `flush_ms` at the end. Prints why it ended as one
/// sentence on stderr. Exit status: [`EXIT_CANCELLED`] after a cancel,
/// [`EXIT_UNREACHABLE`] when no attempt got an HTTP answer,
/// [`EXIT_CREATE_REFUSED`] when the server refused the create,
/// [`EXIT_STOPPED`] after any other stop, [`EXIT_SETTLE_FAILED`] when the
/// final settlement did not succeed (after a cancel), [`EXIT_USAGE`] on bad
/// arguments.
pub fn run(opts: RunOptions) -> ExitCode {
    let mut config = Config::new(opts.ttl_ms, Some(opts.timeout_ms));
    let mut reservation: Option<String> = None;
    let hb = match opts.start {
        Start::Create(create) => {
            config.create_request = create;
            Heartbeat::new(config)
        }
        Start::Reservation(id) => {
            reservation = Some(id.clone());
            Heartbeat::for_reservation(config, id)
        }
    };
    let hb = match hb {
        Ok(hb) => hb,
        Err(e) => {
            eprintln!("leasebeat run: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let url = opts.url.clone();
    let (driver, events) = match Driver::new(driver_config(opts.url, opts.api_key, opts.journal)) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("leasebeat run: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let options = LeaseOptions {
        event: opts.event.map(EventBody::from_json),
        ..LeaseOptions::default()
    };
    let lease = match driver.start_heartbeat_with(hb, options) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("leasebeat run: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let (sig_tx, sig_rx) = mpsc::channel::<()>();
    if let Err(e) = ctrlc::set_handler(move || {
        let _ = sig_tx.send(());
    }) {
        eprintln!(
            "leasebeat run: cannot install the Ctrl-C handler ({e}); run until the heartbeat stops"
        );
    }
    let t0 = clock::now_ns();
    let mut stdout = std::io::stdout();
    let mut cancelled = false;
    let mut end = Ending::default();
    let reason = loop {
        if sig_rx.try_recv().is_ok() && !cancelled {
            cancelled = true;
            eprintln!("leasebeat run: interrupted; cancelling");
            let _ = driver.cancel(lease);
        }
        let event = match events.recv_timeout(std::time::Duration::from_millis(100)) {
            Ok(e) => e,
            Err(mpsc::RecvTimeoutError::Timeout) => continue,
            Err(mpsc::RecvTimeoutError::Disconnected) => break None,
        };
        print(&mut stdout, &event_json(&event, t0));
        match event {
            Event::Decision {
                lease: l,
                reservation_id,
                outcome,
                decision,
                ..
            } if l == lease => {
                if reservation_id.is_some() {
                    reservation = reservation_id;
                }
                match outcome {
                    Outcome::Status(_) => end.answered = true,
                    Outcome::Failure(f) => end.last_failure = Some(f.as_str().to_owned()),
                    Outcome::Cancelled => {}
                }
                end.detail = decision.detail.clone();
            }
            Event::Stopped {
                lease: l, reason, ..
            } if l == lease => break Some(reason),
            _ => {}
        }
    };
    let (mut sentence, mut status) = ending(reason, &end, &url);
    let gone = reason.is_some_and(reservation_is_gone);
    let verb = if opts.commit.is_some() {
        "commit"
    } else {
        "release"
    };
    let settling = match (&reservation, opts.commit) {
        (None, _) => None,
        (Some(id), _) if gone => {
            eprintln!("leasebeat run: not settling {id}: the server says it no longer holds it");
            None
        }
        (Some(_), Some(body)) => Some(driver.commit(lease, Usage::from_json(body))),
        (Some(_), None) if opts.release => {
            Some(driver.release(lease, Some("leasebeat run: heartbeat stopped")))
        }
        (Some(_), None) => None,
    };
    if let (Some(settling), Some(id)) = (settling, &reservation) {
        match settling {
            Err(e) => {
                sentence.push_str(&format!("; {verb} of {id} refused: {e}"));
                if status == EXIT_CANCELLED {
                    status = EXIT_SETTLE_FAILED;
                }
            }
            Ok(settling) => {
                // Print the settlement's events while it runs.
                let result = loop {
                    match events.recv_timeout(Duration::from_millis(100)) {
                        Ok(event) => {
                            print(&mut stdout, &event_json(&event, t0));
                            if let Event::Settled { lease: l, result } = event {
                                if l == settling.lease() {
                                    break Some(*result);
                                }
                            }
                        }
                        Err(mpsc::RecvTimeoutError::Timeout) => {
                            if sig_rx.try_recv().is_ok() {
                                eprintln!(
                                    "leasebeat run: interrupted again; leaving the settlement to the journal"
                                );
                                break None;
                            }
                        }
                        Err(mpsc::RecvTimeoutError::Disconnected) => break None,
                    }
                };
                match result {
                    Some(r) => {
                        sentence.push_str(&format!(
                            "; {verb} of {id}: {}{}",
                            r.outcome,
                            r.status.map(|s| format!(" ({s})")).unwrap_or_default()
                        ));
                        if r.record_kept {
                            sentence.push_str(" (its record stays in the journal)");
                        }
                        let mut result = settle_result_json(&r);
                        if let Some(o) = result.as_object_mut() {
                            // Compatibility with earlier `run` output.
                            o.insert("status".into(), r.status.into());
                        }
                        print(
                            &mut stdout,
                            &serde_json::json!({"event": verb, "reservation_id": id, "result": result}),
                        );
                        if !r.is_success() && status == EXIT_CANCELLED {
                            status = EXIT_SETTLE_FAILED;
                        }
                    }
                    None => {
                        sentence.push_str(&format!("; {verb} of {id} unresolved"));
                        if status == EXIT_CANCELLED {
                            status = EXIT_SETTLE_FAILED;
                        }
                    }
                }
            }
        }
    }
    let flush = driver.flush(Duration::from_millis(opts.flush_ms));
    if !flush.settled {
        sentence.push_str(&format!(
            "; {} settlement(s) unresolved, left in the journal",
            flush.pending.len()
        ));
    }
    driver.shutdown();
    for event in events.try_iter() {
        print(&mut stdout, &event_json(&event, t0));
    }
    eprintln!("leasebeat run: {sentence}");
    ExitCode::from(status)
}

/// The journal options from `run`'s flags.
pub fn journal_options(
    dir: Option<PathBuf>,
    tenant: Option<String>,
    no_journal: bool,
) -> JournalOptions {
    JournalOptions {
        enabled: !no_journal,
        dir,
        tenant,
        replay_on_start: true,
    }
}
