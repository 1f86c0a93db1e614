//! `leasebeat serve`: a reference Cycles server for create, extend, commit,
//! release and events (`POST /v1/events`), wrapping [`leasebeat::sim::SimServer`] behind one lock, with
//! policy regimes, injectable faults, a JSON-lines request log and lapse
//! detection. All protocol behaviour (validation, idempotency, response
//! bodies, status codes) lives in `SimServer`; this module only routes,
//! checks the API key, injects faults and logs.
//!
//! HTTP: hyper 1.x (`http1` server) on a small current-thread tokio runtime,
//! one task per connection, `Connection: close` on every response. Why not
//! tiny_http 0.12 (the first candidate): it cannot close a connection
//! unanswered, which the `drop` and `drop-before` faults need. Dropping a
//! `tiny_http::Request` sends an automatic 500, and dropping the raw writer
//! from `Request::into_writer()` writes nothing but leaves the socket open
//! (the connection's reader keeps its half and waits for a next request), so
//! the client hangs until its own timeout instead of seeing the connection
//! close (checked: the client only sees EOF when it itself sent
//! `Connection: close`). With hyper, a service that returns an error makes
//! hyper close the connection without writing any response, and delays are
//! `tokio::time::sleep` in the request's own task, so a slow response never
//! blocks another connection.
//!
//! Server time is its own monotonic clock (`Instant`) in milliseconds, added
//! to a fixed epoch (`--epoch-ms`, default 1700000000000), so every
//! `expires_at_ms` looks like a wall-clock time.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::header::HeaderMap;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use leasebeat::sim::{Policy, ServerBugs, SimResponse, SimServer, StoreLimits};
use serde_json::{Value, json};

/// The grace after expiry during which commit and release are accepted when
/// a create gives no `grace_period_ms` (the protocol's default; the real
/// Cycles server's too).
pub const DEFAULT_GRACE_MS: u64 = 5_000;

/// The default epoch the server clock is mapped onto.
pub const DEFAULT_EPOCH_MS: u64 = 1_700_000_000_000;

/// The `--fault` grammar, shown in `leasebeat serve --help`.
pub const FAULT_HELP: &str = "\
Inject a fault: ENDPOINT:WHEN=ACTION[,ACTION...] (repeatable; the first matching rule wins).
  ENDPOINT  create | extend | commit | release | events | any
  WHEN      N (the N-th call to that endpoint, counted from 1 over the whole server,
            retries included) | N-M | N- (N and later) | * (every call) |
            pP (each call with probability P, e.g. p0.2, drawn from --seed)
  ACTION    STATUS            answer STATUS (e.g. 503, 429, 500) without applying the request;
                              an error body {error,message,request_id} with a default code
            STATUS:CODE       the same with this error code (e.g. 409:TENANT_CLOSED)
            retry-after=V     add a Retry-After header with V verbatim (implies 429 if no STATUS);
                              V = http-date sends an IMF-fixdate one second ahead (a server bug:
                              the protocol allows only delta-seconds)
            hold=MS           wait MS before processing the request
            delay=MS          process (apply) the request, then wait MS before answering
            drop              process (apply) the request, then close the connection unanswered
            drop-before       close the connection unanswered without applying the request
            malformed         process (apply) the request, then answer its 2xx with a truncated body
                              (a non-conformant success)
Examples: --fault extend:3=503  --fault extend:2-3=503  --fault extend:2=429,retry-after=1
          --fault extend:2=drop  --fault extend:2=delay=1500  --fault extend:p0.3=503 --seed 7
          --fault commit:1=drop  --fault commit:1=410:RESERVATION_EXPIRED  --fault events:1=503";

/// Which endpoint a request addressed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Endpoint {
    /// `POST /v1/reservations`
    Create,
    /// `POST /v1/reservations/{id}/extend`
    Extend,
    /// `POST /v1/reservations/{id}/commit`
    Commit,
    /// `POST /v1/reservations/{id}/release`
    Release,
    /// `POST /v1/events`
    Events,
}

impl Endpoint {
    /// Lowercase name.
    pub fn as_str(self) -> &'static str {
        match self {
            Endpoint::Create => "create",
            Endpoint::Extend => "extend",
            Endpoint::Commit => "commit",
            Endpoint::Release => "release",
            Endpoint::Events => "events",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
enum When {
    Range(u64, Option<u64>),
    Probability(f64),
}

/// One `--fault` rule.
#[derive(Clone, Debug, PartialEq)]
pub struct FaultRule {
    text: String,
    endpoint: Option<Endpoint>,
    when: When,
    status: Option<(u16, Option<String>)>,
    retry_after: Option<String>,
    hold_ms: u64,
    delay_ms: u64,
    drop: bool,
    drop_before: bool,
    malformed: bool,
}

impl FaultRule {
    /// Parses `ENDPOINT:WHEN=ACTION[,ACTION...]` (see [`FAULT_HELP`]).
    pub fn parse(text: &str) -> Result<FaultRule, String> {
        let bad = |why: &str| format!("bad --fault {text:?}: {why}");
        let (head, actions) = text.split_once('=').ok_or_else(|| bad("missing '='"))?;
        let (ep, when) = head
            .split_once(':')
            .ok_or_else(|| bad("missing ':' between ENDPOINT and WHEN"))?;
        let endpoint = match ep {
            "create" => Some(Endpoint::Create),
            "extend" => Some(Endpoint::Extend),
            "commit" => Some(Endpoint::Commit),
            "release" => Some(Endpoint::Release),
            "events" => Some(Endpoint::Events),
            "any" => None,
            _ => {
                return Err(bad(
                    "ENDPOINT must be create, extend, commit, release or any",
                ));
            }
        };
        let num = |s: &str| -> Result<u64, String> {
            s.parse::<u64>()
                .ok()
                .filter(|n| *n >= 1)
                .ok_or_else(|| bad("call numbers count from 1"))
        };
        let when = if when == "*" {
            When::Range(1, None)
        } else if let Some(p) = when.strip_prefix('p') {
            let p: f64 = p.parse().map_err(|_| bad("bad probability"))?;
            if !(0.0..=1.0).contains(&p) {
                return Err(bad("probability must be within 0..=1"));
            }
            When::Probability(p)
        } else if let Some((a, b)) = when.split_once('-') {
            let a = num(a)?;
            let b = if b.is_empty() { None } else { Some(num(b)?) };
            if b.is_some_and(|b| b < a) {
                return Err(bad("empty range"));
            }
            When::Range(a, b)
        } else {
            let n = num(when)?;
            When::Range(n, Some(n))
        };
        let mut rule = FaultRule {
            text: text.to_owned(),
            endpoint,
            when,
            status: None,
            retry_after: None,
            hold_ms: 0,
            delay_ms: 0,
            drop: false,
            drop_before: false,
            malformed: false,
        };
        for action in actions.split(',') {
            let ms = |v: &str| v.parse::<u64>().map_err(|_| bad("bad milliseconds"));
            if let Some(v) = action.strip_prefix("retry-after=") {
                rule.retry_after = Some(v.to_owned());
            } else if let Some(v) = action.strip_prefix("hold=") {
                rule.hold_ms = ms(v)?;
            } else if let Some(v) = action.strip_prefix("delay=") {
                rule.delay_ms = ms(v)?;
            } else if action == "drop" {
                rule.drop = true;
            } else if action == "drop-before" {
                rule.drop_before = true;
            } else if action == "malformed" {
                rule.malformed = true;
            } else {
                let (s, code) = match action.split_once(':') {
                    Some((s, c)) => (s, Some(c.to_owned())),
                    None => (action, None),
                };
                let status: u16 = s
                    .parse()
                    .ok()
                    .filter(|s| (100..=599).contains(s))
                    .ok_or_else(|| bad(&format!("unknown action {action:?}")))?;
                rule.status = Some((status, code));
            }
        }
        if rule.retry_after.is_some() && rule.status.is_none() {
            rule.status = Some((429, None));
        }
        Ok(rule)
    }

    fn matches(&self, endpoint: Endpoint, n: u64, rng: &mut u64) -> bool {
        if self.endpoint.is_some_and(|e| e != endpoint) {
            return false;
        }
        match self.when {
            When::Range(a, b) => n >= a && b.is_none_or(|b| n <= b),
            When::Probability(p) => {
                let draw = (splitmix64(rng) >> 11) as f64 / (1u64 << 53) as f64;
                draw < p
            }
        }
    }
}

fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// How to run the server.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// Address to bind (default 127.0.0.1:0, an ephemeral port).
    pub bind: SocketAddr,
    /// Policy regime.
    pub policy: Policy,
    /// Fault rules.
    pub faults: Vec<FaultRule>,
    /// Seed of the fault probabilities.
    pub seed: u64,
    /// JSON-lines request log file.
    pub log: Option<PathBuf>,
    /// The only API key accepted; `None` accepts any non-empty key.
    pub api_key: Option<String>,
    /// The epoch the server's monotonic milliseconds are added to.
    pub epoch_ms: u64,
    /// Print `LAPSE ...` lines on stdout.
    pub print_lapses: bool,
    /// Most connections served at once; a connection beyond the cap is
    /// answered `503` and closed at once (default 2048).
    pub max_connections: usize,
    /// Most request-body bytes buffered at once over all connections; a
    /// request whose body would go beyond is answered `503` (default 64 MiB).
    pub max_buffered_bytes: usize,
    /// Keep every log entry in memory for [`Server::log_entries`] (tests;
    /// the CLI turns it off so that memory stays bounded).
    pub keep_entries: bool,
    /// How long a lapsed or finalized reservation is remembered after its
    /// expiry (ms; default 600000).
    pub retention_ms: u64,
    /// Deliberate protocol bugs (none by default), to prove that
    /// `leasebeat probe` catches each.
    pub bugs: ServerBugs,
    /// Most idempotency records held (default [`DEFAULT_MAX_STORE_RECORDS`]);
    /// a request that would store one more is answered `503` (see
    /// [`leasebeat::sim::StoreLimits`]).
    pub max_store_records: usize,
    /// Most bytes the idempotency store holds (default
    /// [`DEFAULT_MAX_STORE_BYTES`]); beyond, `503` as above.
    pub max_store_bytes: usize,
}

/// The default `--max-idempotency-records`.
pub const DEFAULT_MAX_STORE_RECORDS: usize = 1_000_000;
/// The default `--max-idempotency-bytes` (512 MiB).
pub const DEFAULT_MAX_STORE_BYTES: usize = 512 * 1024 * 1024;

impl Default for ServeOptions {
    fn default() -> ServeOptions {
        ServeOptions {
            bind: SocketAddr::from(([127, 0, 0, 1], 0)),
            policy: Policy {
                grace_ms: DEFAULT_GRACE_MS,
                ..Policy::additive()
            },
            faults: Vec::new(),
            seed: 1,
            log: None,
            api_key: None,
            epoch_ms: DEFAULT_EPOCH_MS,
            print_lapses: false,
            max_connections: 2048,
            max_buffered_bytes: 64 * 1024 * 1024,
            keep_entries: true,
            retention_ms: 600_000,
            bugs: ServerBugs::default(),
            max_store_records: DEFAULT_MAX_STORE_RECORDS,
            max_store_bytes: DEFAULT_MAX_STORE_BYTES,
        }
    }
}

/// A lease that expired while still ACTIVE (never committed nor released).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lapse {
    /// The reservation.
    pub reservation_id: String,
    /// Its expiry (server clock).
    pub expires_at_ms: u64,
    /// When the server noticed (server clock).
    pub detected_at_ms: u64,
    /// Extensions it had received.
    pub extensions: u32,
}

struct State {
    sim: SimServer,
    counters: HashMap<Endpoint, u64>,
    rng: u64,
    seq: u64,
}

struct Shared {
    state: Mutex<State>,
    start: Instant,
    opts: ServeOptions,
    stop: AtomicBool,
    /// Request tasks not yet finished.
    in_flight: AtomicUsize,
    /// Connections open now.
    connections: AtomicUsize,
    /// Request-body bytes buffered now.
    buffered: AtomicUsize,
    /// Connections and requests refused by the caps.
    refused: AtomicUsize,
    log_file: Mutex<Option<BufWriter<File>>>,
    entries: Mutex<Vec<Value>>,
    lapses: Mutex<Vec<Lapse>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

impl Shared {
    fn now_ms(&self) -> u64 {
        self.opts.epoch_ms + self.start.elapsed().as_millis() as u64
    }

    fn log(&self, entry: Value) {
        if let Some(f) = lock(&self.log_file).as_mut() {
            let _ = writeln!(f, "{entry}");
            let _ = f.flush();
        }
        if self.opts.keep_entries {
            lock(&self.entries).push(entry);
        }
    }

    fn logging(&self) -> bool {
        self.opts.keep_entries || self.opts.log.is_some()
    }
}

/// A running server.
pub struct Server {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept_done: Option<mpsc::Receiver<()>>,
    monitor: Option<JoinHandle<()>>,
}

impl Server {
    /// Binds and starts serving on background threads.
    pub fn start(opts: ServeOptions) -> io::Result<Server> {
        let listener = TcpListener::bind(opts.bind)?;
        let addr = listener.local_addr()?;
        listener.set_nonblocking(true)?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let log_file = match &opts.log {
            Some(p) => Some(BufWriter::new(File::create(p)?)),
            None => None,
        };
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                sim: {
                    let mut sim = SimServer::new(opts.policy.clone());
                    sim.bugs = opts.bugs.clone();
                    sim.limits = StoreLimits {
                        max_records: opts.max_store_records,
                        max_bytes: opts.max_store_bytes,
                    };
                    sim
                },
                counters: HashMap::new(),
                rng: opts.seed,
                seq: 0,
            }),
            start: Instant::now(),
            opts,
            stop: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            connections: AtomicUsize::new(0),
            buffered: AtomicUsize::new(0),
            refused: AtomicUsize::new(0),
            log_file: Mutex::new(log_file),
            entries: Mutex::new(Vec::new()),
            lapses: Mutex::new(Vec::new()),
        });
        let s = Arc::clone(&shared);
        let (done_tx, accept_done) = mpsc::channel();
        std::thread::Builder::new()
            .name("serve-http".into())
            .spawn(move || runtime.block_on(accept_loop(s, listener, done_tx)))?;
        let s = Arc::clone(&shared);
        let monitor = std::thread::Builder::new()
            .name("serve-lapses".into())
            .spawn(move || {
                while !s.stop.load(Ordering::SeqCst) {
                    check_lapses(&s);
                    std::thread::sleep(Duration::from_millis(5));
                }
            })?;
        Ok(Server {
            addr,
            shared,
            accept_done: Some(accept_done),
            monitor: Some(monitor),
        })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://ADDR`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The server clock now (ms).
    pub fn now_ms(&self) -> u64 {
        self.shared.now_ms()
    }

    /// The server clock at `t` (ms; `t` before the start maps to the epoch).
    pub fn ms_at(&self, t: Instant) -> u64 {
        self.shared.opts.epoch_ms
            + t.saturating_duration_since(self.shared.start).as_millis() as u64
    }

    /// Lapses seen so far.
    pub fn lapses(&self) -> Vec<Lapse> {
        check_lapses(&self.shared);
        lock(&self.shared.lapses).clone()
    }

    /// `(leases held, extensions applied, lapses detected, requests and
    /// connections refused by the caps)` (the idempotency store's caps
    /// included).
    pub fn counts(&self) -> (usize, u64, u64, usize) {
        check_lapses(&self.shared);
        let st = lock(&self.shared.state);
        (
            st.sim.lease_count(),
            st.sim.extensions_total(),
            st.sim.lapses_total(),
            self.shared.refused.load(Ordering::SeqCst) + st.sim.refused_full() as usize,
        )
    }

    /// Idempotency records and bytes the store holds now.
    pub fn store_held(&self) -> (usize, usize) {
        lock(&self.shared.state).sim.store_held()
    }

    /// The summary line printed on exit:
    /// `summary leases=.. extensions=.. lapses=.. refused=..`.
    pub fn summary(&self) -> String {
        let (leases, extensions, lapses, refused) = self.counts();
        format!("summary leases={leases} extensions={extensions} lapses={lapses} refused={refused}")
    }

    /// Every log entry so far (the same objects as the log file's lines).
    pub fn log_entries(&self) -> Vec<Value> {
        lock(&self.shared.entries).clone()
    }

    /// Stops accepting connections and joins the lapse monitor (requests
    /// in flight finish on their own, on the server's thread).
    pub fn stop(&mut self) {
        if self.shared.stop.swap(true, Ordering::SeqCst) {
            return;
        }
        // Wake the accept loop so that it sees the stop flag.
        let _ = TcpStream::connect(self.addr);
        if let Some(done) = self.accept_done.take() {
            let _ = done.recv();
        }
        if let Some(h) = self.monitor.take() {
            let _ = h.join();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Accepts connections until the stop flag is set (then closes the
/// listener and signals `done`), and serves each on its own task; returns
/// once every connection and request task has finished.
async fn accept_loop(s: Arc<Shared>, listener: TcpListener, done: mpsc::Sender<()>) {
    let mut connections = tokio::task::JoinSet::new();
    if let Ok(listener) = tokio::net::TcpListener::from_std(listener) {
        loop {
            let accepted = listener.accept().await;
            if s.stop.load(Ordering::SeqCst) {
                break;
            }
            while connections.try_join_next().is_some() {}
            match accepted {
                Ok((stream, _)) => {
                    if s.connections.load(Ordering::SeqCst) >= s.opts.max_connections {
                        s.refused.fetch_add(1, Ordering::SeqCst);
                        connections.spawn(refuse_connection(stream));
                    } else {
                        s.connections.fetch_add(1, Ordering::SeqCst);
                        connections.spawn(serve_connection(Arc::clone(&s), stream));
                    }
                }
                // E.g. out of file descriptors: do not spin.
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
    }
    let _ = done.send(());
    while connections.join_next().await.is_some() {}
    while s.in_flight.load(Ordering::SeqCst) > 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// How long a client may take to send a request's head, then its body. In
/// hyper 1.x the head timer also runs while a keep-alive connection is idle,
/// so this is the idle timeout too: it must exceed the gap between two beats
/// of a lease (clients such as Java's HttpClient reuse a pooled connection
/// without noticing the server closed it, and a POST on it fails as a reset).
const READ_TIMEOUT: Duration = Duration::from_secs(30);
const MAX_BODY: usize = 1024 * 1024;

/// Over the connection cap: a `503` with `Connection: close`, written
/// without reading the request, then the connection is closed.
async fn refuse_connection(stream: tokio::net::TcpStream) {
    let body = br#"{"error":"INTERNAL_ERROR","message":"too many connections","request_id":"req-refused"}"#;
    let head = format!(
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let mut bytes = head.into_bytes();
    bytes.extend_from_slice(body);
    // A few hundred bytes: one write into an empty socket buffer.
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        if stream.writable().await.is_ok() {
            let _ = stream.try_write(&bytes);
        }
    })
    .await;
}

/// Decrements the open-connection count when a connection ends.
struct ConnGuard(Arc<Shared>);

impl Drop for ConnGuard {
    fn drop(&mut self) {
        self.0.connections.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Releases buffered-body bytes when a request is done with them.
struct BufGuard(Arc<Shared>, usize);

impl Drop for BufGuard {
    fn drop(&mut self) {
        self.0.buffered.fetch_sub(self.1, Ordering::SeqCst);
    }
}

async fn serve_connection(s: Arc<Shared>, stream: tokio::net::TcpStream) {
    let _conn = ConnGuard(Arc::clone(&s));
    if s.stop.load(Ordering::SeqCst) {
        return;
    }
    let _ = stream.set_nodelay(true);
    let service = service_fn(move |req| handle(Arc::clone(&s), req));
    // Errors here are client errors (hyper answers a malformed request
    // head itself) or a `Dropped` fault: both end this connection only.
    let _ = http1::Builder::new()
        .keep_alive(true)
        .title_case_headers(true)
        .timer(TokioTimer::new())
        .header_read_timeout(READ_TIMEOUT)
        .serve_connection(TokioIo::new(stream), service)
        .await;
}

/// A `drop` / `drop-before` fault: returned as the service's error, it
/// makes hyper close the connection without writing a response.
#[derive(Debug)]
struct Dropped;

impl std::fmt::Display for Dropped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("connection dropped by an injected fault")
    }
}

impl std::error::Error for Dropped {}

/// Lapse detection: the model's expiry heap, `O(log n)` per expiry that
/// passed (never a scan of every lease).
fn check_lapses(s: &Shared) {
    let now = s.now_ms();
    let found: Vec<Lapse> = {
        let mut st = lock(&s.state);
        st.sim
            .take_lapses(now, s.opts.retention_ms)
            .into_iter()
            .map(|l| Lapse {
                reservation_id: l.id,
                expires_at_ms: l.expires_at_ms,
                detected_at_ms: now,
                extensions: l.extensions,
            })
            .collect()
    };
    for l in found {
        if s.opts.print_lapses {
            println!(
                "LAPSE reservation_id={} expires_at_ms={} detected_at_ms={} extensions={}",
                l.reservation_id, l.expires_at_ms, l.detected_at_ms, l.extensions
            );
        }
        s.log(json!({
            "event": "lapse",
            "reservation_id": l.reservation_id,
            "expires_at_ms": l.expires_at_ms,
            "detected_at_ms": l.detected_at_ms,
            "extensions": l.extensions,
        }));
        if s.opts.keep_entries {
            lock(&s.lapses).push(l);
        }
    }
}

/// A request with its body read.
struct HttpRequest {
    method: String,
    /// The request target as sent (path and query).
    target: String,
    headers: HeaderMap,
    body: Bytes,
}

impl HttpRequest {
    /// A header's value (names are case-insensitive; a value that is not
    /// visible ASCII counts as absent).
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

fn http_response(r: &SimResponse, request_id: &str) -> Response<Full<Bytes>> {
    let mut builder = Response::builder().status(r.status);
    for (n, v) in &r.headers {
        builder = builder.header(n.as_str(), v.as_str());
    }
    builder
        .header("X-Request-Id", request_id)
        .body(Full::new(Bytes::from(r.body.clone())))
        .unwrap_or_else(|e| {
            // Only an unusable injected header (e.g. a `retry-after=` value
            // with control characters) gets here.
            let mut resp = Response::new(Full::new(Bytes::from(e.to_string())));
            *resp.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
            resp
        })
}

fn error_response(status: u16, code: &str, message: &str, request_id: &str) -> SimResponse {
    SimResponse {
        status,
        headers: vec![("Content-Type".into(), "application/json".into())],
        body: serde_json::to_vec(&json!({
            "error": code, "message": message, "request_id": request_id,
        }))
        .expect("JSON serializes"),
    }
}

fn default_code(status: u16) -> &'static str {
    match status {
        400 => "INVALID_REQUEST",
        401 => "UNAUTHORIZED",
        403 => "FORBIDDEN",
        404 => "NOT_FOUND",
        409 => "RESERVATION_FINALIZED",
        410 => "RESERVATION_EXPIRED",
        429 => "LIMIT_EXCEEDED",
        _ => "INTERNAL_ERROR",
    }
}

fn route(path: &str) -> Option<(Endpoint, Option<String>)> {
    let path = path.split('?').next().unwrap_or_default();
    if path == "/v1/reservations" {
        return Some((Endpoint::Create, None));
    }
    if path == "/v1/events" {
        return Some((Endpoint::Events, None));
    }
    let rest = path.strip_prefix("/v1/reservations/")?;
    let (id, verb) = rest.split_once('/')?;
    let endpoint = match verb {
        "extend" => Endpoint::Extend,
        "commit" => Endpoint::Commit,
        "release" => Endpoint::Release,
        _ => return None,
    };
    if id.is_empty() || id.contains('/') {
        return None;
    }
    let id = percent_encoding::percent_decode_str(id).decode_utf8_lossy();
    Some((endpoint, Some(id.into_owned())))
}

/// One request: read the body, count and match faults, answer (or drop),
/// log.
async fn handle(
    s: Arc<Shared>,
    req: hyper::Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Dropped> {
    let arrived_ms = s.now_ms();
    let (parts, body) = req.into_parts();
    // Reserve the declared length (or the most a body may be) against the
    // global buffered-bytes cap before reading anything.
    let declared = parts
        .headers
        .get(hyper::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
        .map_or(MAX_BODY, |n| n.min(MAX_BODY));
    let before = s.buffered.fetch_add(declared, Ordering::SeqCst);
    let _buf = BufGuard(Arc::clone(&s), declared);
    if before.saturating_add(declared) > s.opts.max_buffered_bytes {
        s.refused.fetch_add(1, Ordering::SeqCst);
        let r = error_response(
            503,
            "INTERNAL_ERROR",
            "server busy: too many bytes buffered",
            "req-refused",
        );
        let mut resp = http_response(&r, "req-refused");
        resp.headers_mut().insert(
            hyper::header::CONNECTION,
            hyper::header::HeaderValue::from_static("close"),
        );
        return Ok(resp);
    }
    let body =
        match tokio::time::timeout(READ_TIMEOUT, Limited::new(body, MAX_BODY).collect()).await {
            Ok(Ok(collected)) => collected.to_bytes(),
            Ok(Err(e)) => {
                let why = format!("cannot read the request body: {e}");
                let r = error_response(400, "INVALID_REQUEST", &why, "req-bad");
                return Ok(http_response(&r, "req-bad"));
            }
            Err(_) => {
                let r = error_response(400, "INVALID_REQUEST", "request body timed out", "req-bad");
                return Ok(http_response(&r, "req-bad"));
            }
        };
    let req = HttpRequest {
        method: parts.method.as_str().to_owned(),
        target: parts
            .uri
            .path_and_query()
            .map_or_else(|| parts.uri.path().to_owned(), |p| p.as_str().to_owned()),
        headers: parts.headers,
        body,
    };
    // Processed on its own task: hyper drops this future when the client
    // goes away (e.g. after its timeout), but the request must still be
    // applied, answered into the void and logged, as a real server would.
    let guard = InFlight::new(&s);
    let task = tokio::spawn(async move {
        let _guard = guard;
        process(&s, arrived_ms, req).await
    });
    match task.await {
        Ok(Some((r, request_id))) => Ok(http_response(&r, &request_id)),
        Ok(None) | Err(_) => Err(Dropped),
    }
}

/// Counts a request task until it ends (see [`accept_loop`]).
struct InFlight(Arc<Shared>);

impl InFlight {
    fn new(s: &Arc<Shared>) -> InFlight {
        s.in_flight.fetch_add(1, Ordering::SeqCst);
        InFlight(Arc::clone(s))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Counts the call, matches faults, answers (or not) and logs; returns the
/// response and its request id, or `None` to drop the connection.
async fn process(s: &Shared, arrived_ms: u64, req: HttpRequest) -> Option<(SimResponse, String)> {
    let (seq, endpoint, n, fault) = {
        let mut st = lock(&s.state);
        st.seq += 1;
        let seq = st.seq;
        let routed = route(&req.target).filter(|_| req.method == "POST");
        let (n, fault) = match routed.as_ref() {
            Some((ep, _)) => {
                let n = {
                    let c = st.counters.entry(*ep).or_insert(0);
                    *c += 1;
                    *c
                };
                let mut rng = st.rng;
                let fault = s
                    .opts
                    .faults
                    .iter()
                    .find(|f| f.matches(*ep, n, &mut rng))
                    .cloned();
                st.rng = rng;
                (n, fault)
            }
            None => (0, None),
        };
        (seq, routed, n, fault)
    };
    let request_id = format!("req-{seq}");
    if !s.logging() {
        let response = respond(s, &req, endpoint, fault.as_ref(), &request_id, &mut None).await;
        return response.map(|r| (r, request_id));
    }
    let mut entry = json!({
        "event": "request",
        "seq": seq,
        "arrived_ms": arrived_ms,
        "method": req.method,
        "path": req.target,
        "endpoint": endpoint.as_ref().map(|(e, _)| e.as_str()),
        "call": n,
        "reservation_id": endpoint.as_ref().and_then(|(_, id)| id.clone()),
        "header_key": req.header("x-idempotency-key"),
        "api_key_present": req.header("x-cycles-api-key").is_some_and(|k| !k.is_empty()),
        "body": String::from_utf8_lossy(&req.body),
        "fault": fault.as_ref().map(|f| f.text.clone()),
    });
    let mut applied = None;
    let settling = matches!(
        endpoint.as_ref().map(|(e, _)| *e),
        Some(Endpoint::Commit | Endpoint::Release | Endpoint::Events)
    );
    let response = respond(s, &req, endpoint, fault.as_ref(), &request_id, &mut applied).await;
    let obj = entry.as_object_mut().expect("object");
    if let Some(a) = applied {
        obj.insert("applied".into(), Value::from(a));
    } else if settling {
        // Answered by a fault (or refused before the model): nothing applied.
        obj.insert("applied".into(), Value::from(false));
    }
    obj.insert("t_ms".into(), Value::from(s.now_ms()));
    match &response {
        Some(r) => {
            obj.insert("status".into(), Value::from(r.status));
            obj.insert(
                "response".into(),
                Value::from(String::from_utf8_lossy(&r.body).into_owned()),
            );
            obj.insert("outcome".into(), "responded".into());
        }
        None => {
            obj.insert("status".into(), Value::Null);
            obj.insert("outcome".into(), "dropped".into());
        }
    }
    s.log(entry);
    response.map(|r| (r, request_id))
}

/// Processes one request; returns the response to send, or `None` to drop
/// the connection unanswered.
async fn respond(
    s: &Shared,
    req: &HttpRequest,
    routed: Option<(Endpoint, Option<String>)>,
    fault: Option<&FaultRule>,
    request_id: &str,
    applied: &mut Option<bool>,
) -> Option<SimResponse> {
    let Some((endpoint, id)) = routed else {
        return Some(if req.method != "POST" && route(&req.target).is_some() {
            error_response(405, "INVALID_REQUEST", "method not allowed", request_id)
        } else {
            error_response(404, "NOT_FOUND", "no such endpoint", request_id)
        });
    };
    let api_key = req.header("x-cycles-api-key").unwrap_or_default();
    let authorized = !api_key.is_empty()
        && s.opts.api_key.as_deref().is_none_or(|k| {
            // Constant time in the key's contents (the length may leak).
            bool::from(subtle::ConstantTimeEq::ct_eq(
                k.as_bytes(),
                api_key.as_bytes(),
            ))
        });
    if !authorized {
        return Some(error_response(
            401,
            "UNAUTHORIZED",
            "missing or invalid X-Cycles-API-Key",
            request_id,
        ));
    }
    if let Some(f) = fault {
        if f.hold_ms > 0 {
            if s.logging() {
                // The request's own line comes when it is answered (or
                // dropped); this one shows it at once, so that a client
                // killed during the hold still left a trace.
                s.log(json!({
                    "event": "held",
                    "request_id": request_id,
                    "endpoint": endpoint.as_str(),
                    "reservation_id": id.clone(),
                    "header_key": req.header("x-idempotency-key"),
                    "hold_ms": f.hold_ms,
                    "t_ms": s.now_ms(),
                }));
            }
            tokio::time::sleep(Duration::from_millis(f.hold_ms)).await;
        }
        if f.drop_before {
            return None;
        }
    }
    let mut response = match fault.and_then(|f| f.status.clone()) {
        Some((status, code)) => {
            let code = code.unwrap_or_else(|| default_code(status).to_owned());
            let mut r = error_response(status, &code, "injected fault", request_id);
            if let Some(ra) = fault.and_then(|f| f.retry_after.clone()) {
                let ra = if ra == "http-date" {
                    http_date(std::time::SystemTime::now() + Duration::from_secs(1))
                } else {
                    ra
                };
                r.headers.push(("Retry-After".into(), ra));
            }
            r
        }
        None => {
            let (r, a) = apply(s, req, endpoint, id.as_deref().unwrap_or_default());
            *applied = a;
            r
        }
    };
    if let Some(f) = fault {
        if f.malformed && (200..300).contains(&response.status) {
            let cut = response.body.len() / 2;
            response.body.truncate(cut);
        }
        if f.delay_ms > 0 {
            tokio::time::sleep(Duration::from_millis(f.delay_ms)).await;
        }
        if f.drop {
            return None;
        }
    }
    Some(response)
}

/// An IMF-fixdate (RFC 9110 5.6.7), e.g. `Sun, 06 Nov 1994 08:49:37 GMT`.
pub fn http_date(t: std::time::SystemTime) -> String {
    let secs = t
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    const WEEKDAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    format!(
        "{}, {day:02} {} {year} {:02}:{:02}:{:02} GMT",
        WEEKDAYS[days.rem_euclid(7) as usize],
        MONTHS[(month - 1) as usize],
        rem / 3_600,
        rem / 60 % 60,
        rem % 60
    )
}

/// Applies a request to the model at the server clock's now. Also says whether a commit,
/// release or event changed the ledger (applied for the first time; `false` for a replay or
/// a refusal) — for the request log's `applied`; `None` for creates and extensions.
fn apply(
    s: &Shared,
    req: &HttpRequest,
    endpoint: Endpoint,
    id: &str,
) -> (SimResponse, Option<bool>) {
    let header_key = req.header("x-idempotency-key");
    let mut st = lock(&s.state);
    let now = s.now_ms();
    let settled = |sim: &SimServer| sim.commits_total() + sim.releases_total() + sim.events_total();
    let before = settled(&st.sim);
    let response = match endpoint {
        Endpoint::Create => st.sim.create(now, header_key, &req.body),
        Endpoint::Extend => st.sim.extend(now, id, header_key, &req.body),
        Endpoint::Commit => st.sim.commit(now, id, header_key, &req.body),
        Endpoint::Release => st.sim.release(now, id, header_key, &req.body),
        Endpoint::Events => st.sim.event(now, header_key, &req.body),
    };
    let applied = match endpoint {
        Endpoint::Create | Endpoint::Extend => None,
        Endpoint::Commit | Endpoint::Release | Endpoint::Events => Some(settled(&st.sim) > before),
    };
    (response, applied)
}

/// `leasebeat serve`: prints `listening on http://ADDR` first, then runs
/// until killed, printing `LAPSE ...` lines.
pub fn run(opts: ServeOptions) -> std::process::ExitCode {
    let mut opts = opts;
    opts.print_lapses = true;
    let server = match Server::start(opts) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("leasebeat serve: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    println!("listening on {}", server.url());
    let _ = io::stdout().flush();
    // SIGINT/SIGTERM: print the summary line and exit.
    let (tx, rx) = mpsc::channel::<()>();
    if let Err(e) = ctrlc::set_handler(move || {
        let _ = tx.send(());
    }) {
        eprintln!("leasebeat serve: cannot install the signal handler ({e})");
    }
    let _ = rx.recv();
    let mut server = server;
    println!("{}", server.summary());
    let _ = io::stdout().flush();
    server.stop();
    std::process::ExitCode::SUCCESS
}
