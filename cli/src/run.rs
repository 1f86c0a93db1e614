//! `leasebeat run`: heartbeat one reservation against any Cycles server.

use std::io::Write;
use std::process::ExitCode;
use std::sync::mpsc;

use leasebeat::driver::{ApiKey, Driver, DriverConfig, Event, Outcome, clock};
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

/// Whether a stop means the server no longer holds the reservation, so a
/// release would only be refused (a 404 or 410).
pub fn reservation_is_gone(reason: StopReason) -> bool {
    matches!(
        reason,
        StopReason::NotFound | StopReason::Expired | StopReason::Finalized
    )
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

/// Runs until the heartbeat stops or Ctrl-C (SIGINT/SIGTERM) cancels it;
/// then releases the reservation unless told not to or the server said it
/// is gone. Prints why it ended as one sentence on stderr. Exit status:
/// [`EXIT_CANCELLED`] after a cancel, [`EXIT_UNREACHABLE`] when no attempt
/// got an HTTP answer, [`EXIT_CREATE_REFUSED`] when the server refused the
/// create, [`EXIT_STOPPED`] after any other stop, [`EXIT_USAGE`] on bad
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
    let (driver, events) = match Driver::new(DriverConfig::new(opts.url, opts.api_key)) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("leasebeat run: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let lease = match driver.start_heartbeat(hb) {
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
        let _ = writeln!(stdout, "{}", event_json(&event, t0));
        let _ = stdout.flush();
        match event {
            Event::Decision {
                reservation_id,
                outcome,
                decision,
                ..
            } => {
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
            Event::Stopped { reason, .. } => break Some(reason),
            Event::Jeopardy { .. } | Event::Error { .. } => {}
        }
    };
    let (mut sentence, status) = ending(reason, &end, &url);
    let gone = reason.is_some_and(reservation_is_gone);
    if opts.release && gone {
        if let Some(id) = &reservation {
            eprintln!("leasebeat run: not releasing {id}: the server says it no longer holds it");
        }
    } else if opts.release {
        if let Some(id) = &reservation {
            let outcome = match driver.release(id, Some("leasebeat run: heartbeat stopped")) {
                Ok(r) => {
                    sentence.push_str(&format!("; release of {id}: {}", r.status));
                    serde_json::json!({"status": r.status, "body": String::from_utf8_lossy(&r.body)})
                }
                Err(f) => {
                    sentence.push_str(&format!("; release of {id} failed: {}", f.as_str()));
                    serde_json::json!({"failure": f.as_str()})
                }
            };
            let _ = writeln!(
                stdout,
                "{}",
                serde_json::json!({"event": "release", "reservation_id": id, "result": outcome})
            );
        }
    }
    driver.shutdown();
    eprintln!("leasebeat run: {sentence}");
    ExitCode::from(status)
}
