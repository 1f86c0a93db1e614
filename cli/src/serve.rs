//! `leasebeat serve`: a reference Cycles server for create, extend, commit
//! and release, wrapping [`leasebeat::sim::SimServer`] behind one lock, with
//! policy regimes, injectable faults, a JSON-lines request log and lapse
//! detection.
//!
//! The HTTP layer is a deliberately small HTTP/1.1 implementation on
//! `std::net` (one thread per connection, `Content-Length` request bodies,
//! `Connection: close` on every response) so that a fault can drop a
//! connection at exactly the chosen moment.
//!
//! Server time is its own monotonic clock (`Instant`) in milliseconds, added
//! to a fixed epoch (`--epoch-ms`, default 1700000000000), so every
//! `expires_at_ms` looks like a wall-clock time.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{self, BufWriter, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use leasebeat::sim::{LeaseState, Policy, SimResponse, SimServer};
use serde_json::{Value, json};

/// The default epoch the server clock is mapped onto.
pub const DEFAULT_EPOCH_MS: u64 = 1_700_000_000_000;

/// The `--fault` grammar, shown in `leasebeat serve --help`.
pub const FAULT_HELP: &str = "\
Inject a fault: ENDPOINT:WHEN=ACTION[,ACTION...] (repeatable; the first matching rule wins).
  ENDPOINT  create | extend | commit | release | any
  WHEN      N (the N-th call to that endpoint, counted from 1 over the whole server,
            retries included) | N-M | N- (N and later) | * (every call) |
            pP (each call with probability P, e.g. p0.2, drawn from --seed)
  ACTION    STATUS            answer STATUS (e.g. 503, 429, 500) without applying the request;
                              an error body {error,message,request_id} with a default code
            STATUS:CODE       the same with this error code (e.g. 409:TENANT_CLOSED)
            retry-after=V     add a Retry-After header with V verbatim (implies 429 if no STATUS)
            hold=MS           wait MS before processing the request
            delay=MS          process (apply) the request, then wait MS before answering
            drop              process (apply) the request, then close the connection unanswered
            drop-before       close the connection unanswered without applying the request
            malformed         process (apply) the request, then answer 200 with a truncated body
Examples: --fault extend:3=503  --fault extend:2-3=503  --fault extend:2=429,retry-after=1
          --fault extend:2=drop  --fault extend:2=delay=1500  --fault extend:p0.3=503 --seed 7";

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
}

impl Endpoint {
    /// Lowercase name.
    pub fn as_str(self) -> &'static str {
        match self {
            Endpoint::Create => "create",
            Endpoint::Extend => "extend",
            Endpoint::Commit => "commit",
            Endpoint::Release => "release",
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
}

impl Default for ServeOptions {
    fn default() -> ServeOptions {
        ServeOptions {
            bind: SocketAddr::from(([127, 0, 0, 1], 0)),
            policy: Policy::additive(),
            faults: Vec::new(),
            seed: 1,
            log: None,
            api_key: None,
            epoch_ms: DEFAULT_EPOCH_MS,
            print_lapses: false,
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
    finals: HashMap<(String, Endpoint, String), (Value, SimResponse)>,
    reserved: HashMap<String, Value>,
    lapsed: HashSet<String>,
    seq: u64,
}

struct Shared {
    state: Mutex<State>,
    start: Instant,
    opts: ServeOptions,
    stop: AtomicBool,
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
        lock(&self.entries).push(entry);
    }
}

/// A running server.
pub struct Server {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
    monitor: Option<JoinHandle<()>>,
}

impl Server {
    /// Binds and starts serving on background threads.
    pub fn start(opts: ServeOptions) -> io::Result<Server> {
        let listener = TcpListener::bind(opts.bind)?;
        let addr = listener.local_addr()?;
        let log_file = match &opts.log {
            Some(p) => Some(BufWriter::new(File::create(p)?)),
            None => None,
        };
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                sim: SimServer::new(opts.policy.clone()),
                counters: HashMap::new(),
                rng: opts.seed,
                finals: HashMap::new(),
                reserved: HashMap::new(),
                lapsed: HashSet::new(),
                seq: 0,
            }),
            start: Instant::now(),
            opts,
            stop: AtomicBool::new(false),
            log_file: Mutex::new(log_file),
            entries: Mutex::new(Vec::new()),
            lapses: Mutex::new(Vec::new()),
        });
        let s = Arc::clone(&shared);
        let accept = std::thread::Builder::new()
            .name("serve-accept".into())
            .spawn(move || {
                for stream in listener.incoming() {
                    if s.stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(stream) = stream else { continue };
                    let s = Arc::clone(&s);
                    let _ = std::thread::Builder::new()
                        .name("serve-conn".into())
                        .spawn(move || handle_connection(&s, stream));
                }
            })?;
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
            accept: Some(accept),
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

    /// Every log entry so far (the same objects as the log file's lines).
    pub fn log_entries(&self) -> Vec<Value> {
        lock(&self.shared.entries).clone()
    }

    /// Stops accepting connections and joins the server's own threads
    /// (connection threads finish on their own).
    pub fn stop(&mut self) {
        if self.shared.stop.swap(true, Ordering::SeqCst) {
            return;
        }
        let _ = TcpStream::connect(self.addr);
        if let Some(h) = self.accept.take() {
            let _ = h.join();
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

fn check_lapses(s: &Shared) {
    let now = s.now_ms();
    let mut found = Vec::new();
    {
        let mut st = lock(&s.state);
        let State { sim, lapsed, .. } = &mut *st;
        for lease in sim.leases() {
            if lease.state == LeaseState::Active
                && now > lease.expires_at_ms
                && lapsed.insert(lease.id.clone())
            {
                found.push(Lapse {
                    reservation_id: lease.id.clone(),
                    expires_at_ms: lease.expires_at_ms,
                    detected_at_ms: now,
                    extensions: lease.extensions,
                });
            }
        }
    }
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
        lock(&s.lapses).push(l);
    }
}

struct HttpRequest {
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl HttpRequest {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

const MAX_HEAD: usize = 64 * 1024;
const MAX_BODY: usize = 1024 * 1024;

fn read_request(stream: &mut TcpStream) -> Result<HttpRequest, String> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        if buf.len() > MAX_HEAD {
            return Err("request head too large".into());
        }
        let n = stream.read(&mut chunk).map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("connection closed before a complete request".into());
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = std::str::from_utf8(&buf[..head_end]).map_err(|_| "request head is not UTF-8")?;
    let mut lines = head.split("\r\n");
    let request_line = lines.next().unwrap_or_default();
    let mut parts = request_line.split(' ');
    let method = parts.next().unwrap_or_default().to_owned();
    let path = parts.next().unwrap_or_default().to_owned();
    let mut headers = Vec::new();
    for line in lines {
        let (n, v) = line.split_once(':').ok_or("malformed header line")?;
        headers.push((n.trim().to_owned(), v.trim().to_owned()));
    }
    let mut req = HttpRequest {
        method,
        path,
        headers,
        body: Vec::new(),
    };
    if req.header("transfer-encoding").is_some() {
        return Err("chunked request bodies are not supported; send Content-Length".into());
    }
    let len: usize = match req.header("content-length") {
        None => 0,
        Some(v) => v.parse().map_err(|_| "bad Content-Length")?,
    };
    if len > MAX_BODY {
        return Err("request body too large".into());
    }
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < len {
        let n = stream.read(&mut chunk).map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("connection closed before the complete body".into());
        }
        body.extend_from_slice(&chunk[..n]);
    }
    body.truncate(len);
    req.body = body;
    Ok(req)
}

fn reason_phrase(status: u16) -> &'static str {
    match status {
        200 => "OK",
        201 => "Created",
        204 => "No Content",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        409 => "Conflict",
        410 => "Gone",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Status",
    }
}

fn write_response(stream: &mut TcpStream, r: &SimResponse, request_id: &str) -> io::Result<()> {
    let mut out = format!("HTTP/1.1 {} {}\r\n", r.status, reason_phrase(r.status));
    for (n, v) in &r.headers {
        out.push_str(&format!("{n}: {v}\r\n"));
    }
    out.push_str(&format!(
        "X-Request-Id: {request_id}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        r.body.len()
    ));
    let mut bytes = out.into_bytes();
    bytes.extend_from_slice(&r.body);
    stream.write_all(&bytes)?;
    stream.flush()
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
    Some((endpoint, Some(percent_decode(id))))
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            let hex = |c: u8| char::from(c).to_digit(16);
            if let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn handle_connection(s: &Shared, mut stream: TcpStream) {
    if s.stop.load(Ordering::SeqCst) {
        return;
    }
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let _ = stream.set_nodelay(true);
    let arrived_ms = s.now_ms();
    let req = match read_request(&mut stream) {
        Ok(r) => r,
        Err(why) => {
            let r = error_response(400, "INVALID_REQUEST", &why, "req-bad");
            let _ = write_response(&mut stream, &r, "req-bad");
            return;
        }
    };
    let (seq, endpoint, n, fault) = {
        let mut st = lock(&s.state);
        st.seq += 1;
        let seq = st.seq;
        let routed = route(&req.path).filter(|_| req.method == "POST");
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
    let header_key = req.header("x-idempotency-key").map(str::to_owned);
    let mut entry = json!({
        "event": "request",
        "seq": seq,
        "arrived_ms": arrived_ms,
        "method": req.method,
        "path": req.path,
        "endpoint": endpoint.as_ref().map(|(e, _)| e.as_str()),
        "call": n,
        "reservation_id": endpoint.as_ref().and_then(|(_, id)| id.clone()),
        "header_key": header_key,
        "api_key_present": req.header("x-cycles-api-key").is_some_and(|k| !k.is_empty()),
        "body": String::from_utf8_lossy(&req.body),
        "fault": fault.as_ref().map(|f| f.text.clone()),
    });
    let response = respond(s, &req, endpoint, fault.as_ref(), &request_id, &mut stream);
    let obj = entry.as_object_mut().expect("object");
    obj.insert("t_ms".into(), Value::from(s.now_ms()));
    match response {
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
}

/// Processes one request; returns the response written, or `None` when
/// the connection was dropped unanswered.
fn respond(
    s: &Shared,
    req: &HttpRequest,
    routed: Option<(Endpoint, Option<String>)>,
    fault: Option<&FaultRule>,
    request_id: &str,
    stream: &mut TcpStream,
) -> Option<SimResponse> {
    let drop_conn = |stream: &mut TcpStream| {
        let _ = stream.shutdown(Shutdown::Both);
    };
    let Some((endpoint, id)) = routed else {
        let r = if req.method != "POST" && route(&req.path).is_some() {
            error_response(405, "INVALID_REQUEST", "method not allowed", request_id)
        } else {
            error_response(404, "NOT_FOUND", "no such endpoint", request_id)
        };
        let _ = write_response(stream, &r, request_id);
        return Some(r);
    };
    let api_key = req.header("x-cycles-api-key").unwrap_or_default();
    let authorized = !api_key.is_empty() && s.opts.api_key.as_deref().is_none_or(|k| k == api_key);
    if !authorized {
        let r = error_response(
            401,
            "UNAUTHORIZED",
            "missing or invalid X-Cycles-API-Key",
            request_id,
        );
        let _ = write_response(stream, &r, request_id);
        return Some(r);
    }
    if let Some(f) = fault {
        if f.hold_ms > 0 {
            std::thread::sleep(Duration::from_millis(f.hold_ms));
        }
        if f.drop_before {
            drop_conn(stream);
            return None;
        }
    }
    let mut response = match fault.and_then(|f| f.status.clone()) {
        Some((status, code)) => {
            let code = code.unwrap_or_else(|| default_code(status).to_owned());
            let mut r = error_response(status, &code, "injected fault", request_id);
            if let Some(ra) = fault.and_then(|f| f.retry_after.clone()) {
                r.headers.push(("Retry-After".into(), ra));
            }
            r
        }
        None => apply(s, req, endpoint, id.as_deref()),
    };
    if let Some(f) = fault {
        if f.malformed && response.status == 200 {
            let cut = response.body.len() / 2;
            response.body.truncate(cut);
        }
        if f.delay_ms > 0 {
            std::thread::sleep(Duration::from_millis(f.delay_ms));
        }
        if f.drop {
            drop_conn(stream);
            return None;
        }
    }
    let _ = write_response(stream, &response, request_id);
    Some(response)
}

fn apply(s: &Shared, req: &HttpRequest, endpoint: Endpoint, id: Option<&str>) -> SimResponse {
    let header_key = req.header("x-idempotency-key");
    let mut st = lock(&s.state);
    let now = s.now_ms();
    match endpoint {
        Endpoint::Create => {
            let r = st.sim.create(now, header_key, &req.body);
            if r.status == 200 {
                if let Ok(v) = serde_json::from_slice::<Value>(&r.body) {
                    if let (Some(id), Some(reserved)) =
                        (v["reservation_id"].as_str(), v.get("reserved"))
                    {
                        st.reserved.insert(id.to_owned(), reserved.clone());
                    }
                }
            }
            r
        }
        Endpoint::Extend => st
            .sim
            .extend(now, id.unwrap_or_default(), header_key, &req.body),
        Endpoint::Commit | Endpoint::Release => finalize(
            &mut st,
            now,
            endpoint,
            id.unwrap_or_default(),
            header_key,
            &req.body,
        ),
    }
}

fn finalize(
    st: &mut State,
    now: u64,
    endpoint: Endpoint,
    id: &str,
    header_key: Option<&str>,
    body: &[u8],
) -> SimResponse {
    st.seq += 1;
    let request_id = format!("req-f{}", st.seq);
    let bad = |m: &str| error_response(400, "INVALID_REQUEST", m, &request_id);
    let request: Value = match serde_json::from_slice(body) {
        Ok(v @ Value::Object(_)) => v,
        _ => return bad("body must be a JSON object"),
    };
    let key = match request["idempotency_key"].as_str() {
        Some(k) if (1..=256).contains(&k.chars().count()) => k.to_owned(),
        _ => return bad("idempotency_key must be a string of 1..=256 characters"),
    };
    if header_key.is_some_and(|h| h != key) {
        return bad("X-Idempotency-Key must match the body idempotency_key");
    }
    let commit = endpoint == Endpoint::Commit;
    if commit && !request["actual"].is_object() {
        return bad("actual is required");
    }
    let slot = (id.to_owned(), endpoint, key);
    if let Some((stored_request, stored)) = st.finals.get(&slot) {
        if *stored_request != request {
            return error_response(
                409,
                "IDEMPOTENCY_MISMATCH",
                "same key, different request",
                &request_id,
            );
        }
        return stored.clone();
    }
    let r = st.sim.finalize(now, id, commit);
    if r.status != 200 {
        return r;
    }
    let reserved = st.reserved.get(id).cloned().unwrap_or_else(|| json!({}));
    let body = if commit {
        json!({"status": "COMMITTED", "charged": request["actual"].clone()})
    } else {
        json!({"status": "RELEASED", "released": reserved})
    };
    let r = SimResponse {
        status: 200,
        headers: vec![("Content-Type".into(), "application/json".into())],
        body: serde_json::to_vec(&body).expect("JSON serializes"),
    };
    st.finals.insert(slot, (request, r.clone()));
    r
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
    loop {
        std::thread::park();
    }
}
