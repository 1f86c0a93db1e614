//! `leasebeat probe`: checks a live Cycles server's side of the heartbeat
//! contract from the outside, and reports what cadence it allows.
//!
//! The probe makes its own small test reservations (the caller's `--create`
//! subject, action and estimate, `ttl_ms` = `--ttl-ms`), runs a fixed
//! sequence of requests against them, and judges the recorded exchanges
//! ([`checks`]): `remaining_ttl_ms` present, consistent with the client's
//! monotonic clock, recomputed on same-key replays (0 once released), every
//! other replayed field verbatim, 409 `IDEMPOTENCY_MISMATCH` for a reused
//! key with another payload, delta-seconds `Retry-After` on any 429, the
//! extension regime and (with `--exhaust`) the extension limit. It then
//! runs the core itself against a model of the server it measured
//! ([`report`]) to say what leasebeat will do there.
//!
//! The sequence (every request a fresh idempotency key unless a replay):
//!
//! 1. create A; wait; extend A (key E1); wait; extend A (key E2);
//! 2. replay E1 and the create (same key, same bytes);
//! 3. E1 and the create's key again with another payload (409 expected);
//! 4. with `--exhaust`: create B and extend it with fresh keys until 409
//!    `MAX_EXTENSIONS_EXCEEDED` (or the given maximum), then release B;
//! 5. release A; replay E2 and the create (remaining 0 expected);
//! 6. release anything else it reserved; whatever it could not release is
//!    reported by id (or by idempotency key when a create's outcome is
//!    unknown).
//!
//! Transient answers (a timeout or reset: once more; 5xx: twice more after
//! 500 ms; 429: up to three more times after its `Retry-After`, capped at
//! 10 s, or 1 s when unusable) are retried with the same key and body.
//! Unreachable servers, refused keys, HTML answers and a server that does
//! not answer within `--timeout-ms` end the probe (exit 2) after the
//! cleanup.

pub mod checks;
mod output;
pub mod report;
#[cfg(test)]
mod tests;

use std::cell::Cell;
use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use leasebeat::TransportFailure;
use leasebeat::UuidV4Keys;
use leasebeat::driver::{ApiKey, Client, Exchange};
use leasebeat::{KeySource, Response};
use serde_json::{Map, Value};

pub use checks::{Finding, Level, Status};

/// The create members used when `--create` is not given (`leasebeat serve`
/// accepts them; a real server needs the API key's tenant as
/// `subject.tenant`).
pub const DEFAULT_CREATE: &str = r#"{"subject":{"tenant":"leasebeat-probe"},"action":{"kind":"leasebeat.probe","name":"probe"},"estimate":{"unit":"TOKENS","amount":1}}"#;

/// Options of `leasebeat probe`.
#[derive(Clone, Debug)]
pub struct ProbeOptions {
    /// Base URL of the server.
    pub url: String,
    /// API key (never printed).
    pub api_key: ApiKey,
    /// Create members: subject, action, estimate (no `idempotency_key`,
    /// no `ttl_ms`).
    pub create: Map<String, Value>,
    /// The lease length leasebeat would ask for (create `ttl_ms` and
    /// `extend_by_ms`).
    pub ttl_ms: u64,
    /// The per-request timeout leasebeat would enforce (and the probe's
    /// own per-request bound).
    pub timeout_ms: u64,
    /// Wait between the steps whose spacing is measured (ms).
    pub wait_ms: u64,
    /// Exhaust a test reservation's extensions, trying at most this many.
    pub exhaust: Option<u32>,
    /// Print one JSON object instead of the table.
    pub json: bool,
    /// Progress lines on stderr.
    pub progress: bool,
}

impl ProbeOptions {
    /// Options with the defaults (ttl 60000 ms, timeout 10000 ms, wait 1500
    /// ms, no `--exhaust`, the table, progress on).
    pub fn new(url: impl Into<String>, api_key: ApiKey) -> ProbeOptions {
        let create = match serde_json::from_str(DEFAULT_CREATE) {
            Ok(Value::Object(m)) => m,
            _ => Map::new(),
        };
        ProbeOptions {
            url: url.into(),
            api_key,
            create,
            ttl_ms: leasebeat::DEFAULT_TTL_MS,
            timeout_ms: 10_000,
            wait_ms: 1_500,
            exhaust: None,
            json: false,
            progress: true,
        }
    }

    /// Checks the options the way `leasebeat run` checks its own.
    pub fn validate(&self) -> Result<(), String> {
        if !(leasebeat::MIN_TTL_MS..=leasebeat::MAX_TTL_MS).contains(&self.ttl_ms) {
            return Err(format!(
                "--ttl-ms must be {}..={}",
                leasebeat::MIN_TTL_MS,
                leasebeat::MAX_TTL_MS
            ));
        }
        if self.timeout_ms == 0 {
            return Err("--timeout-ms must be at least 1".into());
        }
        for k in ["idempotency_key", "ttl_ms"] {
            if self.create.contains_key(k) {
                return Err(format!("--create may not contain {k}: the probe sets it"));
            }
        }
        self.api_key.check().map_err(|e| e.to_string())?;
        Ok(())
    }
}

/// How the probe reaches the server and waits: HTTP for real, a model in
/// the unit tests.
pub trait Transport {
    /// Monotonic now (ns).
    fn now_ns(&self) -> u64;
    /// Waits `ms` milliseconds.
    fn sleep_ms(&self, ms: u64);
    /// One POST, bounded by `timeout_ms`.
    fn post(&self, path: &str, key: Option<&str>, body: &[u8], timeout_ms: u64) -> Exchange;
}

/// The real transport: the driver's HTTP client.
pub struct HttpTransport(pub Client);

impl Transport for HttpTransport {
    fn now_ns(&self) -> u64 {
        leasebeat::driver::clock::now_ns()
    }
    fn sleep_ms(&self, ms: u64) {
        std::thread::sleep(Duration::from_millis(ms));
    }
    fn post(&self, path: &str, key: Option<&str>, body: &[u8], timeout_ms: u64) -> Exchange {
        self.0
            .post(path, key, body, Duration::from_millis(timeout_ms))
    }
}

/// One recorded request and what came back (the evidence).
#[derive(Clone, Debug)]
pub struct Record {
    /// 1-based number, as findings cite it.
    pub n: usize,
    /// What the probe meant by it (`create A`, `extend A E1`, `replay E1`, ...).
    pub step: String,
    /// Request path.
    pub path: String,
    /// The idempotency key sent (header and body).
    pub key: Option<String>,
    /// The request body.
    pub request: Vec<u8>,
    /// Monotonic instants relative to the probe's start (ns).
    pub sent_ns: u64,
    /// When the complete response (or failure) was observed.
    pub received_ns: u64,
    /// The response, or the transport failure.
    pub outcome: Result<Response, TransportFailure>,
}

impl Record {
    /// The status, when a response came back.
    pub fn status(&self) -> Option<u16> {
        self.outcome.as_ref().ok().map(|r| r.status)
    }

    /// The response body as a JSON object, if it is one.
    pub fn json(&self) -> Option<Map<String, Value>> {
        match self.outcome.as_ref().ok() {
            Some(r) => match serde_json::from_slice(&r.body) {
                Ok(Value::Object(m)) => Some(m),
                _ => None,
            },
            None => None,
        }
    }

    /// An integer member of a 200 body.
    pub fn int(&self, name: &str) -> Option<u64> {
        if self.status() != Some(200) {
            return None;
        }
        self.json()
            .and_then(|m| m.get(name).and_then(Value::as_u64))
    }

    /// The error code of an error body.
    pub fn error_code(&self) -> Option<String> {
        self.outcome
            .as_ref()
            .ok()
            .and_then(|r| leasebeat::schema::error_code(&r.body))
    }

    /// Every value of a response header (case-insensitive name).
    pub fn header_values(&self, name: &str) -> Vec<String> {
        match &self.outcome {
            Ok(r) => r
                .headers
                .iter()
                .filter(|(n, _)| n.eq_ignore_ascii_case(name.as_bytes()))
                .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
                .collect(),
            Err(_) => Vec::new(),
        }
    }

    /// Round trip in ms (fractional).
    pub fn rtt_ms(&self) -> f64 {
        self.received_ns.saturating_sub(self.sent_ns) as f64 / 1e6
    }

    /// `status CODE` or the failure, for texts.
    pub fn summary(&self) -> String {
        match &self.outcome {
            Ok(r) => match self.error_code() {
                Some(c) if r.status != 200 => format!("{} {c}", r.status),
                _ => r.status.to_string(),
            },
            Err(f) => f.as_str().to_owned(),
        }
    }
}

/// A reservation the probe made.
#[derive(Clone, Debug)]
pub struct Reservation {
    /// Its id.
    pub id: String,
    /// Which test reservation (`A`, `B`, `extra`).
    pub role: String,
    /// `None` until a release was tried; then whether it answered 200
    /// (or the reservation was already finalized or gone), and how.
    pub released: Option<(bool, String)>,
}

/// Why the probe could not probe.
#[derive(Clone, Debug)]
pub struct Fatal(pub String);

/// Everything one probe run found.
#[derive(Clone, Debug)]
pub struct ProbeResult {
    /// The requests and responses.
    pub records: Vec<Record>,
    /// The findings (empty when the probe could not probe).
    pub findings: Vec<Finding>,
    /// The extension regime measured.
    pub regime: Option<checks::Regime>,
    /// Extensions accepted before `MAX_EXTENSIONS_EXCEEDED` (`--exhaust`):
    /// `Some(Ok(n))`, or `Some(Err(why))` when no limit was found.
    pub limit: Option<Result<u32, String>>,
    /// What leasebeat will do on this server.
    pub report: Option<report::Report>,
    /// Test reservations and their release.
    pub reservations: Vec<Reservation>,
    /// Creates whose outcome is unknown (idempotency keys): a reservation
    /// may exist under them.
    pub unknown_creates: Vec<String>,
    /// Why the probe could not probe (exit 2).
    pub fatal: Option<String>,
    /// Steps that did not happen, and why.
    pub notes: Vec<String>,
}

impl ProbeResult {
    /// 0: every MUST holds; 1: a MUST fails; 2: could not probe.
    pub fn exit_code(&self) -> u8 {
        if self.fatal.is_some() {
            2
        } else if self
            .findings
            .iter()
            .any(|f| f.level == Level::Must && f.status == Status::Fail)
        {
            1
        } else {
            0
        }
    }

    /// Reservations not released (ids), and unknown creates (keys).
    pub fn left_behind(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .reservations
            .iter()
            .filter(|r| !r.released.as_ref().is_some_and(|(ok, _)| *ok))
            .map(|r| format!("reservation {}", r.id))
            .collect();
        v.extend(
            self.unknown_creates
                .iter()
                .map(|k| format!("a reservation possibly created under idempotency key {k}")),
        );
        v
    }
}

/// What the sequence measured (indices into the records).
#[derive(Default, Debug, Clone)]
pub(crate) struct Steps {
    pub create: Option<usize>,
    pub e1: Option<usize>,
    pub e2: Option<usize>,
    pub replay_e1: Option<usize>,
    pub replay_create: Option<usize>,
    pub mismatch_extend: Option<usize>,
    pub mismatch_create: Option<usize>,
    pub release_a: Option<usize>,
    pub final_replay_e2: Option<usize>,
    pub final_replay_create: Option<usize>,
    /// Why a step did not happen.
    pub notes: Vec<String>,
    /// Why the release of A failed (no answer, or 5xx throughout).
    pub release_failure: Option<String>,
}

struct Prober<'a, T: Transport> {
    t: &'a T,
    opts: &'a ProbeOptions,
    t0: u64,
    records: Vec<Record>,
    reservations: Vec<Reservation>,
    unknown_creates: Vec<String>,
    keys: UuidV4Keys,
    progress: Cell<bool>,
}

fn html(r: &Response) -> bool {
    let ct = r
        .headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(b"content-type"))
        .map(|(_, v)| String::from_utf8_lossy(v).to_ascii_lowercase());
    if ct.as_deref().is_some_and(|c| c.contains("html")) {
        return true;
    }
    let start = r.body.iter().position(|b| !b.is_ascii_whitespace());
    start.is_some_and(|i| r.body[i] == b'<')
}

fn message_of(r: &Response) -> String {
    match serde_json::from_slice::<Value>(&r.body) {
        Ok(Value::Object(m)) => {
            let code = m.get("error").and_then(Value::as_str).unwrap_or("?");
            let msg = m.get("message").and_then(Value::as_str).unwrap_or("");
            format!("{code}: {msg}")
        }
        _ => {
            let text = String::from_utf8_lossy(&r.body);
            let text: String = text.chars().take(200).collect();
            format!("body {text:?}")
        }
    }
}

/// A path segment: everything but RFC 3986's unreserved characters
/// percent-encoded (as the driver does).
const SEGMENT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

fn encode(id: &str) -> String {
    percent_encoding::utf8_percent_encode(id, SEGMENT).to_string()
}

impl<'a, T: Transport> Prober<'a, T> {
    fn note(&self, line: impl FnOnce() -> String) {
        if self.progress.get() {
            eprintln!("leasebeat probe: {}", line());
        }
    }

    fn key(&mut self) -> String {
        format!("probe-{}", self.keys.next_key())
    }

    fn body(members: &Map<String, Value>) -> Vec<u8> {
        serde_json::to_vec(&Value::Object(members.clone())).expect("JSON serializes")
    }

    /// Sends one request, retrying transient answers with the same key and
    /// bytes; returns the index of the last record. Fatal: unreachable,
    /// auth refused, HTML, no answer within the budget, persistent 5xx or
    /// 429.
    fn call(
        &mut self,
        step: &str,
        path: &str,
        key: Option<&str>,
        body: &[u8],
    ) -> Result<usize, Fatal> {
        let mut attempt = 0u32;
        let mut throttled = 0u32;
        let mut server_errors = 0u32;
        loop {
            attempt += 1;
            let x = self.t.post(path, key, body, self.opts.timeout_ms);
            let n = self.records.len() + 1;
            let step_name = if attempt > 1 {
                format!("{step} (retry {})", attempt - 1)
            } else {
                step.to_owned()
            };
            self.records.push(Record {
                n,
                step: step_name,
                path: path.to_owned(),
                key: key.map(str::to_owned),
                request: body.to_vec(),
                sent_ns: x.sent_ns.saturating_sub(self.t0),
                received_ns: x.received_ns.saturating_sub(self.t0),
                outcome: x.outcome,
            });
            let rec = &self.records[n - 1];
            self.note(|| {
                format!(
                    "#{n} {} -> {} in {:.1} ms",
                    rec.step,
                    rec.summary(),
                    rec.rtt_ms()
                )
            });
            let url = format!("{}{path}", self.opts.url.trim_end_matches('/'));
            match &rec.outcome {
                Err(TransportFailure::Connect) => {
                    return Err(Fatal(format!(
                        "cannot connect to {url}: connection refused, host unreachable or name not found"
                    )));
                }
                Err(f) => {
                    if attempt < 2 {
                        continue;
                    }
                    let what = match f {
                        TransportFailure::Timeout => format!(
                            "no complete answer within --timeout-ms {} ms",
                            self.opts.timeout_ms
                        ),
                        _ => "the connection was reset or the answer was not HTTP/1.1 (an https server addressed as http://, or the reverse?)".to_owned(),
                    };
                    return Err(Fatal(format!("{what}: POST {url} (twice, same key)")));
                }
                Ok(r) => {
                    if html(r) {
                        return Err(Fatal(format!(
                            "the server answered HTML (status {}) to POST {url}: not a Cycles API (a web page, a proxy's or a login page?); check --url",
                            r.status
                        )));
                    }
                    match r.status {
                        401 => {
                            return Err(Fatal(format!(
                                "authentication refused (401 {}); check --api-key or LEASEBEAT_API_KEY",
                                message_of(r)
                            )));
                        }
                        403 => {
                            return Err(Fatal(format!(
                                "forbidden (403 {}); the API key's tenant must be --create's subject.tenant",
                                message_of(r)
                            )));
                        }
                        429 => {
                            throttled += 1;
                            if throttled > 3 {
                                return Err(Fatal(format!(
                                    "throttled: 429 four times in a row on POST {url}"
                                )));
                            }
                            let wait = r.retry_after_ms().ok().map(|w| w.min(10_000));
                            self.t.sleep_ms(wait.unwrap_or(1_000));
                            continue;
                        }
                        s if s >= 500 => {
                            server_errors += 1;
                            if server_errors > 2 {
                                return Err(Fatal(format!(
                                    "the server failed three times ({s} {}) on POST {url}",
                                    message_of(r)
                                )));
                            }
                            self.t.sleep_ms(500);
                            continue;
                        }
                        _ => return Ok(n - 1),
                    }
                }
            }
        }
    }

    fn create(&mut self, role: &str, key: &str, ttl_ms: u64) -> Result<(usize, String), Fatal> {
        let mut members = self.opts.create.clone();
        members.insert("idempotency_key".into(), Value::from(key));
        members.insert("ttl_ms".into(), Value::from(ttl_ms));
        let body = Self::body(&members);
        let result = self.call(
            &format!("create {role}"),
            "/v1/reservations",
            Some(key),
            &body,
        );
        let i = match result {
            Ok(i) => i,
            Err(e) => {
                // A create without a complete answer may have reserved.
                if self.records.last().is_some_and(|r| r.outcome.is_err()) {
                    self.unknown_creates.push(key.to_owned());
                }
                return Err(e);
            }
        };
        let rec = &self.records[i];
        let r = rec.outcome.as_ref().expect("call returns responses only");
        if r.status != 200 {
            return Err(Fatal(format!(
                "create refused ({} {}); --create must hold a subject, action and estimate this server accepts",
                r.status,
                message_of(r)
            )));
        }
        let id = rec.json().and_then(|m| {
            m.get("reservation_id")
                .and_then(Value::as_str)
                .map(str::to_owned)
        });
        let decision = rec
            .json()
            .and_then(|m| m.get("decision").and_then(Value::as_str).map(str::to_owned));
        match id {
            Some(id) => {
                self.reservations.push(Reservation {
                    id: id.clone(),
                    role: role.to_owned(),
                    released: None,
                });
                Ok((i, id))
            }
            None => Err(Fatal(format!(
                "create answered 200 without a reservation_id (decision {}): nothing to probe",
                decision.as_deref().unwrap_or("absent")
            ))),
        }
    }

    fn extend_body(key: &str, extend_by_ms: u64) -> Vec<u8> {
        let mut m = Map::new();
        m.insert("extend_by_ms".into(), Value::from(extend_by_ms));
        m.insert("idempotency_key".into(), Value::from(key));
        Self::body(&m)
    }

    fn extend(
        &mut self,
        step: &str,
        id: &str,
        key: &str,
        extend_by_ms: u64,
    ) -> Result<usize, Fatal> {
        let body = Self::extend_body(key, extend_by_ms);
        self.call(
            step,
            &format!("/v1/reservations/{}/extend", encode(id)),
            Some(key),
            &body,
        )
    }

    /// Replays record `i` exactly (same path, key and bytes).
    fn replay(&mut self, step: &str, i: usize) -> Result<usize, Fatal> {
        let rec = &self.records[i];
        let (path, key, body) = (rec.path.clone(), rec.key.clone(), rec.request.clone());
        self.call(step, &path, key.as_deref(), &body)
    }

    fn release(&mut self, id: &str) -> Result<usize, Fatal> {
        let key = self.key();
        let mut m = Map::new();
        m.insert("idempotency_key".into(), Value::from(key.as_str()));
        m.insert(
            "reason".into(),
            Value::from("leasebeat probe: test reservation"),
        );
        let body = Self::body(&m);
        let role = self
            .reservations
            .iter()
            .find(|r| r.id == id)
            .map_or_else(String::new, |r| r.role.clone());
        let result = self.call(
            &format!("release {role}"),
            &format!("/v1/reservations/{}/release", encode(id)),
            Some(&key),
            &body,
        );
        let outcome = match &result {
            Ok(i) => {
                let rec = &self.records[*i];
                let code = rec.error_code();
                let ok = rec.status() == Some(200)
                    || matches!(
                        code.as_deref(),
                        Some("RESERVATION_FINALIZED" | "RESERVATION_EXPIRED" | "NOT_FOUND")
                    );
                (ok, format!("#{} {}", rec.n, rec.summary()))
            }
            Err(Fatal(why)) => (false, why.clone()),
        };
        if let Some(r) = self.reservations.iter_mut().find(|r| r.id == id) {
            r.released = Some(outcome);
        }
        result
    }

    /// The probe sequence on reservation A; `Err` ends it (cleanup follows).
    fn sequence(
        &mut self,
        steps: &mut Steps,
        limit: &mut Option<Result<u32, String>>,
    ) -> Result<(), Fatal> {
        let ttl = self.opts.ttl_ms;
        let kc = self.key();
        let (ic, a) = self.create("A", &kc, ttl)?;
        steps.create = Some(ic);
        self.t.sleep_ms(self.opts.wait_ms);
        let k1 = self.key();
        let i1 = self.extend("extend A (E1)", &a, &k1, ttl)?;
        if self.records[i1].status() == Some(200) {
            steps.e1 = Some(i1);
        } else {
            steps
                .notes
                .push(format!("extend E1 answered {}", self.records[i1].summary()));
        }
        self.t.sleep_ms(self.opts.wait_ms);
        let k2 = self.key();
        let i2 = self.extend("extend A (E2)", &a, &k2, ttl)?;
        if self.records[i2].status() == Some(200) {
            steps.e2 = Some(i2);
        } else {
            steps
                .notes
                .push(format!("extend E2 answered {}", self.records[i2].summary()));
        }
        if let Some(i1) = steps.e1 {
            steps.replay_e1 = Some(self.replay("replay E1", i1)?);
        }
        steps.replay_create = Some(self.replay("replay create A", ic)?);
        if steps.e1.is_some() {
            let other = if ttl < leasebeat::MAX_TTL_MS {
                ttl + 1_000
            } else {
                ttl - 1_000
            };
            let body = Self::extend_body(&k1, other);
            let path = format!("/v1/reservations/{}/extend", encode(&a));
            steps.mismatch_extend =
                Some(self.call("E1's key, another extend_by_ms", &path, Some(&k1), &body)?);
        }
        {
            let other = if ttl >= 2_000 {
                ttl - 1_000
            } else {
                ttl + 1_000
            };
            let mut members = self.opts.create.clone();
            members.insert("idempotency_key".into(), Value::from(kc.as_str()));
            members.insert("ttl_ms".into(), Value::from(other));
            let body = Self::body(&members);
            let i = self.call(
                "create A's key, another ttl_ms",
                "/v1/reservations",
                Some(&kc),
                &body,
            )?;
            steps.mismatch_create = Some(i);
            // A server that created another reservation: release it too.
            if let Some(id) = self.records[i]
                .json()
                .filter(|_| self.records[i].status() == Some(200))
                .and_then(|m| {
                    m.get("reservation_id")
                        .and_then(Value::as_str)
                        .map(str::to_owned)
                })
            {
                if !self.reservations.iter().any(|r| r.id == id) {
                    self.reservations.push(Reservation {
                        id,
                        role: "extra".into(),
                        released: None,
                    });
                }
            }
        }
        if let Some(max) = self.opts.exhaust {
            *limit = Some(self.exhaust(max)?);
        }
        // A release that fails is reported (cleanup.released), not fatal:
        // the other findings stand.
        let rel = match self.release(&a) {
            Ok(i) => i,
            Err(Fatal(why)) => {
                steps.release_failure = Some(format!("release of A failed: {why}"));
                return Ok(());
            }
        };
        steps.release_a = Some(rel);
        if self.records[rel].status() == Some(200) {
            if let Some(i2) = steps.e2 {
                steps.final_replay_e2 = Some(self.replay("replay E2 after release", i2)?);
            }
            steps.final_replay_create = Some(self.replay("replay create A after release", ic)?);
        } else {
            steps.notes.push(format!(
                "release of A answered {}",
                self.records[rel].summary()
            ));
        }
        Ok(())
    }

    /// Creates B and extends it with fresh keys (extend_by 1000 ms) until
    /// the server refuses; B is released by the cleanup.
    fn exhaust(&mut self, max: u32) -> Result<Result<u32, String>, Fatal> {
        let kb = self.key();
        let b = match self.create("B", &kb, self.opts.ttl_ms) {
            Ok((_, b)) => b,
            // E.g. a budget that holds one test reservation only.
            Err(Fatal(why)) => return Ok(Err(format!("could not create B: {why}"))),
        };
        let progress = self.progress.get();
        let mut n = 0u32;
        let outcome = loop {
            if n >= max {
                break Err(format!("no limit within {max} extensions"));
            }
            let k = self.key();
            if n >= 2 {
                self.progress.set(false);
            }
            let i = self.extend(&format!("extend B #{}", n + 1), &b, &k, 1_000);
            self.progress.set(progress);
            let i = i?;
            let rec = &self.records[i];
            match rec.status() {
                Some(200) => n += 1,
                _ if rec.error_code().as_deref() == Some("MAX_EXTENSIONS_EXCEEDED") => {
                    self.note(|| format!("#{} extend B #{} -> {}", rec.n, n + 1, rec.summary()));
                    break Ok(n);
                }
                _ => {
                    break Err(format!(
                        "extension {} answered {} (#{}), not MAX_EXTENSIONS_EXCEEDED",
                        n + 1,
                        rec.summary(),
                        rec.n
                    ));
                }
            }
        };
        self.note(|| format!("extensions of B: {outcome:?}"));
        // A failed release is reported by the cleanup finding.
        let _ = self.release(&b);
        Ok(outcome)
    }

    /// Releases everything not yet released.
    fn cleanup(&mut self) {
        let pending: Vec<String> = self
            .reservations
            .iter()
            .filter(|r| r.released.is_none())
            .map(|r| r.id.clone())
            .collect();
        for id in pending {
            let _ = self.release(&id);
        }
    }
}

fn cleanup_finding(result: &ProbeResult) -> Finding {
    let left = result.left_behind();
    let evidence = result
        .records
        .iter()
        .filter(|r| r.path.ends_with("/release"))
        .map(|r| r.n)
        .collect();
    Finding {
        id: "cleanup.released",
        title: "test reservations released",
        level: Level::Info,
        status: if left.is_empty() {
            Status::Pass
        } else {
            Status::Warn
        },
        detail: if left.is_empty() {
            format!("{} released", result.reservations.len())
        } else {
            format!("not released: {}", left.join(", "))
        },
        evidence,
    }
}

/// Runs the whole probe over `t`.
pub fn probe<T: Transport>(t: &T, opts: &ProbeOptions) -> ProbeResult {
    let mut p = Prober {
        t,
        opts,
        t0: t.now_ns(),
        records: Vec::new(),
        reservations: Vec::new(),
        unknown_creates: Vec::new(),
        keys: UuidV4Keys,
        progress: Cell::new(opts.progress),
    };
    let mut steps = Steps::default();
    let mut limit = None;
    let fatal = p.sequence(&mut steps, &mut limit).err();
    if let Some(Fatal(why)) = &fatal {
        p.note(|| format!("cannot probe: {why}; releasing what was reserved"));
    }
    p.cleanup();
    let mut result = ProbeResult {
        records: p.records,
        findings: Vec::new(),
        regime: None,
        limit,
        report: None,
        reservations: p.reservations,
        unknown_creates: p.unknown_creates,
        fatal: fatal.map(|Fatal(w)| w),
        notes: steps.notes.clone(),
    };
    result.notes.extend(steps.release_failure.clone());
    if result.fatal.is_none() {
        let (findings, regime) =
            checks::evaluate(&result.records, &steps, opts, result.limit.as_ref());
        result.findings = findings;
        result.findings.push(cleanup_finding(&result));
        result.regime = Some(regime);
        result.report = Some(report::from_probe(&result, opts));
    }
    result
}

/// `leasebeat probe`: probes, prints the table (or JSON), returns the exit
/// status (0 every MUST holds, 1 a MUST fails, 2 could not probe).
pub fn run(opts: ProbeOptions) -> ExitCode {
    if let Err(e) = opts.validate() {
        eprintln!("leasebeat probe: {e}");
        return ExitCode::from(2);
    }
    let client = match Client::new(&opts.url, opts.api_key.clone()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("leasebeat probe: {e}");
            return ExitCode::from(2);
        }
    };
    let result = probe(&HttpTransport(client), &opts);
    let mut out = std::io::stdout().lock();
    let written = if opts.json {
        serde_json::to_writer_pretty(&mut out, &output::to_json(&result, &opts))
            .map_err(std::io::Error::other)
            .and_then(|()| writeln!(out))
    } else {
        output::table(&result, &opts, &mut out)
    };
    let _ = out.flush();
    if let Some(why) = &result.fatal {
        eprintln!("leasebeat probe: cannot probe {}: {why}", opts.url);
    }
    for l in result.left_behind() {
        eprintln!("leasebeat probe: NOT RELEASED: {l}");
    }
    if let Err(e) = written {
        eprintln!("leasebeat probe: cannot write the output: {e}");
        return ExitCode::from(2);
    }
    ExitCode::from(result.exit_code())
}
