//! The per-reservation state machine.

use std::collections::VecDeque;
use std::fmt;
use std::num::NonZeroU64;
use std::sync::Arc;

use serde_json::{Map, Value};

use crate::arith::{self, RetryAfterError};
use crate::decision::{
    AttemptKind, Decision, KeyUse, Mode, Next, Num, Numbers, OutcomeClass, StopReason, Warning,
    Warnings, slot,
};
use crate::error::{Error, ErrorKind};
use crate::keys::{KeySource, UuidV4Keys};
use crate::{json, schema};

/// The `ttl_ms` used when the caller gives none (D-10).
pub const DEFAULT_TTL_MS: u64 = 60_000;
/// The smallest `ttl_ms` a create request may carry.
pub const MIN_TTL_MS: u64 = 1_000;
/// The largest `ttl_ms` / `extend_by_ms` the protocol allows (24 h).
pub const MAX_TTL_MS: u64 = 86_400_000;
/// The longest idempotency key the protocol allows.
pub const MAX_KEY_CHARS: usize = 256;
/// The longest [`Decision::detail`] in bytes: a longer text (a huge error
/// code or header value) is cut at a character boundary and ends with
/// [`DETAIL_CUT_MARKER`].
pub const MAX_DETAIL_BYTES: usize = 1024;
/// What a cut [`Decision::detail`] ends with.
pub const DETAIL_CUT_MARKER: &str = " [detail cut]";
/// How many keys a heartbeat remembers from a key source that does not say
/// its keys are unique by construction (a custom source): the most recent
/// ones, so that memory stays bounded over a long lease. A new key equal to
/// one of them (or to an adopted create's key, always remembered) is
/// refused; an older repeat is not detected.
pub const MAX_REMEMBERED_KEYS: usize = 64;

/// Reused key and body buffers larger than this are dropped, not kept.
const MAX_SPARE_BYTES: usize = 512;

/// How a heartbeat is configured.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// Requested lease length: the create's `ttl_ms` and every extension's
    /// `extend_by_ms` (HB-16, D-10). 1000..=86400000.
    pub ttl_ms: u64,
    /// The enforced upper bound of one complete attempt (connect, write, read,
    /// failure detection). `None` or `u64::MAX`: unknown or unbounded, which
    /// makes the attempt budget +infinity (HB-13).
    pub request_timeout_ms: Option<u64>,
    /// Further members of the create request body (`subject`, `action`,
    /// `estimate`, ...). The core adds `idempotency_key` and `ttl_ms` itself,
    /// so this map must not contain either. A heartbeat drops it once its
    /// create succeeded (see [`Heartbeat::config`]).
    pub create_request: Map<String, Value>,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            ttl_ms: DEFAULT_TTL_MS,
            request_timeout_ms: None,
            create_request: Map::new(),
        }
    }
}

impl Config {
    /// A configuration with this ttl and timeout and an empty create request.
    pub fn new(ttl_ms: u64, request_timeout_ms: Option<u64>) -> Config {
        Config {
            ttl_ms,
            request_timeout_ms,
            create_request: Map::new(),
        }
    }

    /// Checks the ranges; the error says which value is wrong.
    pub fn validate(&self) -> Result<(), Error> {
        if !(MIN_TTL_MS..=MAX_TTL_MS).contains(&self.ttl_ms) {
            return Err(Error::new(
                ErrorKind::InvalidConfig,
                format!(
                    "ttl_ms must be within {MIN_TTL_MS}..={MAX_TTL_MS}, got {}",
                    self.ttl_ms
                ),
            ));
        }
        for reserved in ["idempotency_key", "ttl_ms"] {
            if self.create_request.contains_key(reserved) {
                return Err(Error::new(
                    ErrorKind::InvalidConfig,
                    format!("create_request must not contain {reserved:?}: the core sets it"),
                ));
            }
        }
        Ok(())
    }

    #[inline]
    fn timeout(&self) -> Option<u64> {
        self.request_timeout_ms.filter(|t| *t != u64::MAX)
    }
}

/// A transport failure of one attempt: no HTTP response was observed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TransportFailure {
    /// The enforced per-attempt timeout fired.
    Timeout,
    /// The connection could not be established.
    Connect,
    /// The connection was reset or closed before a complete response.
    Reset,
}

impl TransportFailure {
    /// `"timeout"`, `"connect"` or `"reset"`.
    pub fn as_str(self) -> &'static str {
        match self {
            TransportFailure::Timeout => "timeout",
            TransportFailure::Connect => "connect",
            TransportFailure::Reset => "reset",
        }
    }

    /// The failure with this name.
    pub fn parse(s: &str) -> Option<TransportFailure> {
        match s {
            "timeout" => Some(TransportFailure::Timeout),
            "connect" => Some(TransportFailure::Connect),
            "reset" => Some(TransportFailure::Reset),
            _ => None,
        }
    }
}

/// Whether an attempt's round trip could be measured (HB-12, P-6).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Timing {
    /// Sent and received times are reliable monotonic readings.
    #[default]
    Measured,
    /// The round trip is unknown: the success gives lead_floor 0 and
    /// next_delay 0, and does not update max_rtt.
    Unknown,
}

/// An HTTP response to the outstanding attempt, as raw as it arrived.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Response {
    /// The status code, 100..=999.
    pub status: u16,
    /// Header name/value pairs in arrival order; repeated headers repeat.
    pub headers: Vec<(Vec<u8>, Vec<u8>)>,
    /// The raw body bytes (possibly empty).
    pub body: Vec<u8>,
    /// Whether the round trip was measured.
    pub timing: Timing,
}

impl Response {
    /// A response with this status, no headers and an empty body.
    pub fn new(status: u16) -> Response {
        Response {
            status,
            ..Response::default()
        }
    }

    /// Adds a header.
    pub fn header(mut self, name: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) -> Response {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Sets the body.
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Response {
        self.body = body.into();
        self
    }

    /// Marks the round trip as unknown.
    pub fn timing_unknown(mut self) -> Response {
        self.timing = Timing::Unknown;
        self
    }

    /// The `Retry-After` value in milliseconds (P-5, D-11): header names
    /// compare case-insensitively, exactly one value is allowed.
    pub fn retry_after_ms(&self) -> Result<u64, RetryAfterError> {
        self.view().retry_after_ms()
    }

    /// A borrowed view of this response (see [`Heartbeat::handle_response_ref`]).
    pub fn view(&self) -> ResponseRef<'_, Vec<u8>, Vec<u8>> {
        ResponseRef {
            status: self.status,
            headers: &self.headers,
            body: &self.body,
            timing: self.timing,
        }
    }
}

/// An HTTP response to the outstanding attempt, borrowed from the caller
/// (see [`Heartbeat::handle_response_ref`]): the status, the header
/// name/value pairs in arrival order (any byte-slice-like types, e.g.
/// `(&[u8], &[u8])` or `(Vec<u8>, Vec<u8>)`), the raw body and the timing.
///
/// ```
/// use leasebeat::{ResponseRef, Timing};
/// let headers = [("Retry-After", "2")];
/// let r = ResponseRef::new(429, b"").headers(&headers);
/// assert_eq!(r.retry_after_ms(), Ok(2_000));
/// assert_eq!(r.timing, Timing::Measured);
/// ```
#[derive(Debug)]
pub struct ResponseRef<'a, N = &'a [u8], V = &'a [u8]> {
    /// The status code, 100..=999.
    pub status: u16,
    /// Header name/value pairs in arrival order; repeated headers repeat.
    pub headers: &'a [(N, V)],
    /// The raw body bytes (possibly empty).
    pub body: &'a [u8],
    /// Whether the round trip was measured.
    pub timing: Timing,
}

impl<N, V> Clone for ResponseRef<'_, N, V> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<N, V> Copy for ResponseRef<'_, N, V> {}

impl<'a> ResponseRef<'a> {
    /// A response with this status and body, no headers, a measured round
    /// trip.
    pub fn new(status: u16, body: &'a [u8]) -> ResponseRef<'a> {
        ResponseRef {
            status,
            headers: &[],
            body,
            timing: Timing::Measured,
        }
    }
}

impl<'a, N: AsRef<[u8]>, V: AsRef<[u8]>> ResponseRef<'a, N, V> {
    /// The same response with these headers.
    pub fn headers<N2, V2>(self, headers: &'a [(N2, V2)]) -> ResponseRef<'a, N2, V2> {
        ResponseRef {
            status: self.status,
            headers,
            body: self.body,
            timing: self.timing,
        }
    }

    /// Marks the round trip as unknown.
    pub fn timing_unknown(mut self) -> Self {
        self.timing = Timing::Unknown;
        self
    }

    /// The `Retry-After` value in milliseconds (P-5, D-11): header names
    /// compare case-insensitively, exactly one value is allowed.
    pub fn retry_after_ms(&self) -> Result<u64, RetryAfterError> {
        let values: Vec<&[u8]> = self
            .headers
            .iter()
            .filter(|(n, _)| n.as_ref().eq_ignore_ascii_case(b"retry-after"))
            .map(|(_, v)| v.as_ref())
            .collect();
        arith::parse_retry_after(&values)
    }
}

/// The outcome of a create the caller performed itself (see
/// [`Heartbeat::adopt_create`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CreateOutcome {
    /// An HTTP response (status, headers, raw body), as it arrived.
    Response(Response),
    /// No response: the attempt timed out, could not connect, or was reset.
    Failure(TransportFailure),
}

/// A create the caller already performed: what [`Heartbeat::adopt_create`]
/// takes over.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdoptedCreate {
    /// The idempotency key the create used (header and body); a create retry
    /// reuses it.
    pub key: String,
    /// The exact request body sent, if the caller has it; a create retry
    /// resends it byte for byte.
    pub body: Option<Vec<u8>>,
    /// When the create was sent (monotonic ns, the clock of every later
    /// event); `None` if unknown, which makes the round trip unknown (HB-12).
    pub sent_ns: Option<u64>,
    /// When its outcome was observed (after the complete body), monotonic ns.
    pub received_ns: u64,
    /// The outcome.
    pub outcome: CreateOutcome,
}

/// One attempt the caller must send.
#[derive(Clone, PartialEq, Eq)]
pub struct Attempt {
    /// Identifies this attempt in `handle_sent`, `handle_response` and
    /// `handle_failure`; 1 for the first attempt of a heartbeat.
    pub id: u64,
    /// Create or extend.
    pub kind: AttemptKind,
    /// When to send it, in caller nanoseconds; `None` = +infinity (never).
    pub due_ns: Option<u64>,
    /// The idempotency key: both the `X-Idempotency-Key` header and the body's
    /// `idempotency_key`.
    pub key: String,
    /// 1 for the first key of the lease, 2 for the next new one, ...
    pub key_index: u32,
    /// Whether the key is new or the previous attempt's.
    pub key_use: KeyUse,
    /// The exact JSON request body; byte-identical on a same-key retry.
    pub body: Vec<u8>,
    /// When the caller reported sending it.
    pub sent_ns: Option<u64>,
    zero_window_retry: bool,
}

impl fmt::Debug for Attempt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Attempt")
            .field("id", &self.id)
            .field("kind", &self.kind)
            .field("due_ns", &self.due_ns)
            .field("key", &self.key)
            .field("key_index", &self.key_index)
            .field("key_use", &self.key_use)
            .field("body", &String::from_utf8_lossy(&self.body))
            .field("sent_ns", &self.sent_ns)
            .finish()
    }
}

impl Attempt {
    /// True for the single immediate retry a zero retry window allows (HB-27).
    pub fn is_zero_window_retry(&self) -> bool {
        self.zero_window_retry
    }
}

/// What the caller must do now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action<'a> {
    /// Send this attempt at `attempt.due_ns`, then call
    /// [`Heartbeat::handle_sent`].
    Send(&'a Attempt),
    /// The attempt is in flight: report its outcome.
    AwaitOutcome(&'a Attempt),
    /// The heartbeat stopped for good.
    Stop(StopReason),
}

#[derive(Clone, Copy, Debug)]
struct Anchor {
    received_ns: u64,
    lead_floor: u64,
    mode: Mode,
    /// Current fallback cadence; `None` before any fallback extension success.
    /// (Never 0: a cadence is at least 1000 ms.)
    cadence: Option<NonZeroU64>,
}

#[derive(Clone, Copy, Debug)]
struct FailureMark {
    elapsed: u64,
    window: Option<SmallNum>,
}

/// A [`Num`] in 16 bytes, without `i128`'s 16-byte alignment (finite values
/// lie strictly between -2^64 and 2^64).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SmallNum {
    NegInf,
    Neg(u64),
    Pos(u64),
    Inf,
}

impl SmallNum {
    fn of(n: Num) -> SmallNum {
        match n {
            Num::NegInf => SmallNum::NegInf,
            Num::Inf => SmallNum::Inf,
            Num::Int(v) if v >= 0 => SmallNum::Pos(u64::try_from(v).unwrap_or(u64::MAX)),
            Num::Int(v) => SmallNum::Neg(u64::try_from(v.unsigned_abs()).unwrap_or(u64::MAX)),
        }
    }

    fn get(self) -> Num {
        match self {
            SmallNum::NegInf => Num::NegInf,
            SmallNum::Inf => Num::Inf,
            SmallNum::Pos(m) => Num::Int(i128::from(m)),
            SmallNum::Neg(m) => Num::Int(-i128::from(m)),
        }
    }
}

/// An `i128` as two words (8-byte aligned, like everything else in a
/// heartbeat).
#[derive(Clone, Copy, Debug, Default)]
struct Split128 {
    hi: i64,
    lo: u64,
}

impl Split128 {
    fn of(v: i128) -> Split128 {
        Split128 {
            hi: (v >> 64) as i64,
            lo: v as u64,
        }
    }

    fn get(self) -> i128 {
        (i128::from(self.hi) << 64) | i128::from(self.lo)
    }
}

/// `v + 1` (`v` is an `expires_at_ms`, at most `i64::MAX`).
#[inline]
fn plus_1(v: Option<u64>) -> Option<NonZeroU64> {
    v.and_then(|v| NonZeroU64::new(v.wrapping_add(1)))
}

/// The keys a heartbeat remembers (see [`Heartbeat::fresh_key`]).
#[derive(Default)]
struct KeyMemory {
    /// The most recent keys of a source not unique by construction, at most
    /// [`MAX_REMEMBERED_KEYS`].
    used_keys: VecDeque<String>,
    /// An adopted create's key: remembered for the lease's life.
    adopted_key: Option<String>,
}

#[derive(Clone, Copy, Debug, Default)]
struct GrantBook {
    create_received_ns: u64,
    sum_grants: Split128,
    /// The last `expires_at_ms` plus one (which cannot overflow: it is at
    /// most `i64::MAX`), so that it fits in one word.
    last_expires_at_plus_1: Option<NonZeroU64>,
}

enum Class {
    Success {
        remaining: Option<u64>,
        expires_at: Option<u64>,
    },
    Transient(OutcomeClass, String),
    Throttled(Result<u64, RetryAfterError>),
    Stop(StopReason, OutcomeClass, String),
}

/// The heartbeat of one reservation: a sans-IO state machine.
///
/// It starts with a create attempt. The caller sends what [`poll_action`]
/// asks for, reports it with [`handle_sent`], then reports the outcome with
/// [`handle_response`] or [`handle_failure`] (or ends it with [`cancel`]), each
/// with a monotonic time in nanoseconds that never goes backwards. Each
/// outcome yields a [`Decision`]. A call that returns an error changes
/// nothing.
///
/// ```
/// use leasebeat::{Config, Heartbeat, Response, Action, StopReason};
/// let mut hb = Heartbeat::new(Config::new(60_000, Some(10_000))).unwrap();
/// let Action::Send(create) = hb.poll_action() else { unreachable!() };
/// let id = create.id;
/// hb.handle_sent(id, 0).unwrap();
/// let body = br#"{"decision":"ALLOW","reservation_id":"r-1","affected_scopes":["tenant:a"],"remaining_ttl_ms":61500}"#;
/// let d = hb.handle_response(id, Response::new(200).body(&body[..]), 1_500_000_000).unwrap();
/// assert_eq!(d.at_ns, Some(38_500_000_000)); // 37 s after receipt
/// assert_eq!(d.numbers.next_delay(), Some(leasebeat::Num::Int(37_000)));
/// let d = hb.cancel(2_000_000_000).unwrap();
/// assert_eq!(d.stop_reason(), Some(StopReason::Cancelled));
/// ```
///
/// [`poll_action`]: Heartbeat::poll_action
/// [`handle_sent`]: Heartbeat::handle_sent
/// [`handle_response`]: Heartbeat::handle_response
/// [`handle_failure`]: Heartbeat::handle_failure
/// [`cancel`]: Heartbeat::cancel
pub struct Heartbeat {
    config: Config,
    keys: Box<dyn KeySource>,
    /// The keys this lease remembers, if any (most leases remember none:
    /// boxed, so that they cost one word).
    memory: Option<Box<KeyMemory>>,
    /// The previous attempt's key buffer, reused for the next key.
    spare_key: String,
    /// The key source's [`KeySource::plain_keys`], asked once.
    plain_keys: bool,
    key_index: u32,
    next_attempt_id: u64,
    last_event_ns: u64,
    attempt: Option<Attempt>,
    stopped: Option<StopReason>,
    reservation_id: Option<Arc<str>>,
    create_failed_once: bool,
    max_rtt: u64,
    anchor: Option<Anchor>,
    last_failure: Option<FailureMark>,
    zero_streak: u8,
    grants: GrantBook,
    /// The most recent decision.
    last: Option<Decision>,
}

impl fmt::Debug for Heartbeat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Heartbeat")
            .field("reservation_id", &self.reservation_id)
            .field("attempt", &self.attempt)
            .field("stopped", &self.stopped)
            .field("max_rtt", &self.max_rtt)
            .field("anchor", &self.anchor)
            .field("zero_streak", &self.zero_streak)
            .field("key_index", &self.key_index)
            .field("next_attempt_id", &self.next_attempt_id)
            .field("last_event_ns", &self.last_event_ns)
            .field("create_failed_once", &self.create_failed_once)
            .field("last_failure", &self.last_failure)
            .field("grants", &self.grants)
            .field(
                "used_keys",
                &self.memory.as_ref().map_or(0, |m| m.used_keys.len()),
            )
            .finish_non_exhaustive()
    }
}

impl Heartbeat {
    /// A heartbeat with random UUIDv4 keys, starting with a create attempt.
    pub fn new(config: Config) -> Result<Heartbeat, Error> {
        Heartbeat::with_key_source(config, Box::new(UuidV4Keys))
    }

    /// A heartbeat taking new keys from `keys` (D-12), e.g. a
    /// [`crate::SequentialKeys`] for deterministic tests.
    pub fn with_key_source(config: Config, keys: Box<dyn KeySource>) -> Result<Heartbeat, Error> {
        let mut hb = Heartbeat::blank(config, keys)?;
        let key = hb.fresh_key()?;
        let body = hb.create_body(&key);
        hb.install_attempt(AttemptKind::Create, Some(0), key, KeyUse::New, body, false);
        Ok(hb)
    }

    /// A validated heartbeat with no attempt installed yet.
    fn blank(config: Config, keys: Box<dyn KeySource>) -> Result<Heartbeat, Error> {
        config.validate()?;
        Ok(Heartbeat {
            config,
            plain_keys: keys.plain_keys(),
            keys,
            memory: None,
            spare_key: String::new(),
            key_index: 0,
            next_attempt_id: 1,
            last_event_ns: 0,
            attempt: None,
            stopped: None,
            reservation_id: None,
            create_failed_once: false,
            max_rtt: 0,
            anchor: None,
            last_failure: None,
            zero_streak: 0,
            grants: GrantBook::default(),
            last: None,
        })
    }

    /// Takes over a lease whose create the caller performed itself (an SDK's
    /// own HTTP client), with random UUIDv4 keys for the extensions. See
    /// [`Heartbeat::adopt_create_with_key_source`].
    pub fn adopt_create(
        config: Config,
        create: AdoptedCreate,
    ) -> Result<(Heartbeat, Decision), Error> {
        Heartbeat::adopt_create_with_key_source(config, create, Box::new(UuidV4Keys))
    }

    /// Takes over a lease whose create the caller performed itself: the
    /// create's key, its send and receive instants and its raw outcome are
    /// classified exactly as if this heartbeat had sent the create (HB-15: a
    /// success anchors the schedule and the fallback bookkeeping, with no
    /// priming extension; an ambiguous or transient outcome asks for the one
    /// same-key create retry, with the caller's key and body; a 4xx stops
    /// `create_rejected`; ...). Returns the heartbeat and its first decision.
    ///
    /// The create counts as attempt 1 and its key as key 1 of the lease.
    /// `create.body`, when given, must be the exact request body sent (a JSON
    /// object whose `idempotency_key`, if present, is `create.key`); a create
    /// retry resends it byte for byte. When `None`, a retry sends the body
    /// this heartbeat would have built from `config` (`create_request` plus
    /// `idempotency_key` and `ttl_ms`). `create.sent_ns` `None` means the
    /// round trip is unknown (HB-12). Errors: [`ErrorKind::InvalidConfig`]
    /// for `config`, [`ErrorKind::InvalidKey`] for a key of 0 or more than
    /// 256 characters or with a CR, LF or other control character (it
    /// could not be a header value), [`ErrorKind::InvalidArgument`] for a body that does
    /// not match, a status outside 100..=999, or `sent_ns` after
    /// `received_ns`.
    ///
    /// ```
    /// use leasebeat::{AdoptedCreate, Config, CreateOutcome, Heartbeat, Response, Num};
    /// let body = br#"{"decision":"ALLOW","reservation_id":"r-1","affected_scopes":["tenant:a"],"expires_at_ms":1785585661500,"remaining_ttl_ms":61500}"#;
    /// let (hb, first) = Heartbeat::adopt_create(
    ///     Config::new(60_000, Some(10_000)),
    ///     AdoptedCreate {
    ///         key: "sdk-create-key".into(),
    ///         body: None,
    ///         sent_ns: Some(0),
    ///         received_ns: 1_500_000_000,
    ///         outcome: CreateOutcome::Response(Response::new(200).body(&body[..])),
    ///     },
    /// )
    /// .unwrap();
    /// assert_eq!(first.at_ns, Some(38_500_000_000)); // no priming extension
    /// assert_eq!(first.proven_until_ns, Some(61_500_000_000));
    /// assert_eq!(first.expires_at_ms, Some(1_785_585_661_500));
    /// assert_eq!(hb.reservation_id(), Some("r-1"));
    /// ```
    pub fn adopt_create_with_key_source(
        config: Config,
        create: AdoptedCreate,
        keys: Box<dyn KeySource>,
    ) -> Result<(Heartbeat, Decision), Error> {
        let AdoptedCreate {
            key,
            body,
            sent_ns,
            received_ns,
            outcome,
        } = create;
        let mut hb = Heartbeat::blank(config, keys)?;
        let chars = key.chars().count();
        if chars == 0 || chars > MAX_KEY_CHARS {
            return Err(Error::new(
                ErrorKind::InvalidKey,
                format!(
                    "the adopted create's key has {chars} characters (must be 1..={MAX_KEY_CHARS})"
                ),
            ));
        }
        if let Some(why) = header_unsafe_key(&key) {
            return Err(Error::new(
                ErrorKind::InvalidKey,
                format!("the adopted create's key {why}"),
            ));
        }
        if let Some(sent) = sent_ns {
            if sent > received_ns {
                return Err(Error::new(
                    ErrorKind::InvalidArgument,
                    format!(
                        "the adopted create was sent at {sent} ns, after its outcome at {received_ns} ns"
                    ),
                ));
            }
        }
        let body = match body {
            Some(bytes) => {
                check_adopted_body(&bytes, &key)?;
                bytes
            }
            None => hb.create_body(&key),
        };
        hb.config.create_request = Map::new();
        let sent = sent_ns.unwrap_or(received_ns);
        // The caller chose this key: remember it, so no key source reuses it.
        hb.memory_mut().adopted_key = Some(key.clone());
        hb.install_attempt(
            AttemptKind::Create,
            Some(sent),
            key,
            KeyUse::New,
            body,
            false,
        );
        let id = hb.attempt.as_ref().map(|a| a.id).unwrap_or(1);
        hb.handle_sent(id, sent)?;
        let decision = match outcome {
            CreateOutcome::Response(mut response) => {
                if sent_ns.is_none() {
                    response.timing = Timing::Unknown;
                }
                hb.handle_response(id, response, received_ns)?
            }
            CreateOutcome::Failure(failure) => hb.handle_failure(id, failure, received_ns)?,
        };
        Ok((hb, decision))
    }

    /// A heartbeat for a reservation created elsewhere, with random UUIDv4
    /// keys. See [`Heartbeat::for_reservation_with_key_source`].
    pub fn for_reservation(
        config: Config,
        reservation_id: impl Into<String>,
    ) -> Result<Heartbeat, Error> {
        Heartbeat::for_reservation_with_key_source(config, reservation_id, Box::new(UuidV4Keys))
    }

    /// A heartbeat for a reservation created elsewhere: its first action is an
    /// immediate extension (due at 0) with a new key, instead of a create.
    ///
    /// Nothing proves any lead before that extension succeeds, so it counts
    /// as the create does: its success anchors the schedule (and the
    /// fallback's grant bookkeeping, FB-01/02) and counts toward the
    /// zero-delay streak; a transient failure before it has a lead floor of 0
    /// and so stops with `retry_window_exhausted` (primary rule HB-22 with no
    /// proven lead). Permanent and other 4xx outcomes stop as on any extend.
    /// `reservation_id` must be 1..=128 characters (the protocol's path
    /// parameter).
    pub fn for_reservation_with_key_source(
        config: Config,
        reservation_id: impl Into<String>,
        keys: Box<dyn KeySource>,
    ) -> Result<Heartbeat, Error> {
        let reservation_id = reservation_id.into();
        let chars = reservation_id.chars().count();
        if !(1..=128).contains(&chars) {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("reservation_id must be 1..=128 characters, got {chars}"),
            ));
        }
        let mut hb = Heartbeat::with_key_source(config, keys)?;
        hb.reservation_id = Some(reservation_id.into());
        // The create key was never sent: give it and its place to the first
        // extension (it stays remembered when its source needs that).
        hb.key_index = 0;
        hb.next_attempt_id = 1;
        let key = hb
            .attempt
            .take()
            .map(|a| a.key)
            .expect("a new heartbeat has an attempt");
        let body = hb.extend_body(&key, false);
        hb.install_attempt(AttemptKind::Extend, Some(0), key, KeyUse::New, body, false);
        Ok(hb)
    }

    // ----- getters -----

    /// The configuration, except its `create_request`, which is always
    /// empty here: the heartbeat turns it into the create attempt's body
    /// when it is built and keeps only those bytes (a retry resends them
    /// unchanged), and not even those once the create succeeded. A
    /// `serde_json::Map` costs several hundred bytes per member object, and
    /// a driver may hold 100,000 leases waiting for their creates. See
    /// [`Heartbeat::create_request`] for the members while the create is
    /// pending.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The create request's configured members (without `idempotency_key`
    /// and `ttl_ms`), read back from the create attempt's body while that
    /// create is outstanding; `None` once it succeeded, for an adopted
    /// create, and for a heartbeat made by [`Heartbeat::for_reservation`].
    pub fn create_request(&self) -> Option<Map<String, Value>> {
        let attempt = self.attempt.as_ref()?;
        if attempt.kind != AttemptKind::Create || self.adopted_key().is_some() {
            return None;
        }
        let mut members: Map<String, Value> = serde_json::from_slice(&attempt.body).ok()?;
        members.remove("idempotency_key");
        members.remove("ttl_ms");
        Some(members)
    }

    /// The reservation id, once a create succeeded.
    pub fn reservation_id(&self) -> Option<&str> {
        self.reservation_id.as_deref()
    }

    /// The stop reason, once stopped.
    pub fn stop_reason(&self) -> Option<StopReason> {
        self.stopped
    }

    /// The mode of the last success, if any.
    pub fn mode(&self) -> Option<Mode> {
        self.anchor.map(|a| a.mode)
    }

    /// Largest rtt (ms) over this lease's schema-valid measured successes; 0
    /// before the first.
    pub fn max_rtt_ms(&self) -> u64 {
        self.max_rtt
    }

    /// The most recent decision.
    pub fn last_decision(&self) -> Option<&Decision> {
        self.last.as_ref()
    }

    /// The outstanding attempt (to send, or in flight), unless stopped.
    pub fn attempt(&self) -> Option<&Attempt> {
        self.attempt.as_ref()
    }

    /// The time of the latest event accepted, in nanoseconds.
    pub fn last_event_ns(&self) -> u64 {
        self.last_event_ns
    }

    // ----- polls -----

    /// What the caller must do now.
    #[inline]
    pub fn poll_action(&self) -> Action<'_> {
        match (&self.attempt, self.stopped) {
            (_, Some(reason)) => Action::Stop(reason),
            (Some(a), None) if a.sent_ns.is_none() => Action::Send(a),
            (Some(a), None) => Action::AwaitOutcome(a),
            (None, None) => Action::Stop(StopReason::Cancelled), // unreachable by construction
        }
    }

    /// When the next attempt is due (nanoseconds), if one waits to be sent.
    /// `None` when stopped, in flight, or due at +infinity.
    pub fn poll_timeout(&self) -> Option<u64> {
        match self.poll_action() {
            Action::Send(a) => a.due_ns,
            _ => None,
        }
    }

    // ----- handlers -----

    /// The caller sent attempt `attempt_id` at `now_ns`. Sending later than
    /// due (a late timer) or earlier (a stalled clock) is accepted.
    #[inline]
    pub fn handle_sent(&mut self, attempt_id: u64, now_ns: u64) -> Result<(), Error> {
        self.check_event(attempt_id, now_ns, false)?;
        self.last_event_ns = now_ns;
        if let Some(a) = self.attempt.as_mut() {
            a.sent_ns = Some(now_ns);
        }
        Ok(())
    }

    /// The HTTP response to attempt `attempt_id`, observed at `now_ns` (after
    /// its complete body was received). Same as
    /// [`Heartbeat::handle_response_ref`] with `response.view()`, the
    /// decision cloned.
    pub fn handle_response(
        &mut self,
        attempt_id: u64,
        response: Response,
        now_ns: u64,
    ) -> Result<Decision, Error> {
        self.handle_response_ref(attempt_id, response.view(), now_ns)
            .cloned()
    }

    /// The HTTP response to attempt `attempt_id`, observed at `now_ns` (after
    /// its complete body was received), borrowed: nothing is copied, so a
    /// caller can pass the bytes of its own receive buffer. The decision is
    /// the same as [`Heartbeat::handle_response`]'s for the same response,
    /// borrowed too: it is the heartbeat's [`Heartbeat::last_decision`]
    /// (clone it to keep it past the next call).
    ///
    /// ```
    /// use leasebeat::{Config, Heartbeat, ResponseRef};
    /// let mut hb = Heartbeat::new(Config::new(60_000, Some(10_000))).unwrap();
    /// let id = hb.attempt().unwrap().id;
    /// hb.handle_sent(id, 0).unwrap();
    /// let body = br#"{"decision":"ALLOW","reservation_id":"r-1","affected_scopes":["tenant:a"],"remaining_ttl_ms":61500}"#;
    /// let headers: [(&[u8], &[u8]); 1] = [(b"content-type", b"application/json")];
    /// let d = hb
    ///     .handle_response_ref(id, ResponseRef::new(200, body).headers(&headers), 1_500_000_000)
    ///     .unwrap();
    /// assert_eq!(d.at_ns, Some(38_500_000_000));
    /// ```
    pub fn handle_response_ref<N: AsRef<[u8]>, V: AsRef<[u8]>>(
        &mut self,
        attempt_id: u64,
        response: ResponseRef<'_, N, V>,
        now_ns: u64,
    ) -> Result<&Decision, Error> {
        self.check_outcome(attempt_id, now_ns)?;
        if !(100..=999).contains(&response.status) {
            return Err(status_error(response.status));
        }
        let attempt = self.attempt.as_ref().expect("checked outstanding");
        let sent_ns = attempt.sent_ns.expect("checked sent");
        let rtt = match response.timing {
            Timing::Measured => Some(arith::ceil_ms(now_ns - sent_ns)),
            Timing::Unknown => None,
        };
        match attempt.kind {
            AttemptKind::Create => self.on_create_response(response, rtt, now_ns),
            AttemptKind::Extend => {
                let class = classify_extend(response);
                self.on_extend_outcome(class, rtt, now_ns)
            }
        }
    }

    /// A transport failure of attempt `attempt_id`, observed at `now_ns`.
    pub fn handle_failure(
        &mut self,
        attempt_id: u64,
        failure: TransportFailure,
        now_ns: u64,
    ) -> Result<Decision, Error> {
        self.check_outcome(attempt_id, now_ns)?;
        let detail = format!("transport failure: {}", failure.as_str());
        let outcome = OutcomeClass::TransportFailure;
        match self.attempt.as_ref().expect("checked outstanding").kind {
            AttemptKind::Create => {
                self.last_event_ns = now_ns;
                Ok(self.on_create_transient(outcome, now_ns, detail).clone())
            }
            AttemptKind::Extend => self
                .on_extend_outcome(Class::Transient(outcome, detail), None, now_ns)
                .cloned(),
        }
    }

    /// The caller ends the heartbeat at `now_ns`: stop `cancelled`.
    pub fn cancel(&mut self, now_ns: u64) -> Result<Decision, Error> {
        self.check_live(now_ns)?;
        self.last_event_ns = now_ns;
        Ok(self
            .stop(
                StopReason::Cancelled,
                OutcomeClass::Cancelled,
                self.anchor.map(|a| a.mode),
                Numbers::default(),
                Some("cancelled by the caller".into()),
            )
            .clone())
    }

    // ----- internals -----

    #[inline]
    fn check_live(&self, now_ns: u64) -> Result<(), Error> {
        if let Some(reason) = self.stopped {
            return Err(Error::new(
                ErrorKind::Stopped,
                format!("the heartbeat has stopped ({reason}); a stop is final"),
            ));
        }
        if now_ns < self.last_event_ns {
            return Err(Error::new(
                ErrorKind::TimeWentBackwards,
                format!(
                    "time went backwards: {now_ns} ns is before the previous event at {} ns",
                    self.last_event_ns
                ),
            ));
        }
        Ok(())
    }

    #[inline]
    fn outstanding(&self, attempt_id: u64) -> Result<&Attempt, Error> {
        match &self.attempt {
            Some(a) if a.id == attempt_id => Ok(a),
            Some(a) => Err(Error::new(
                ErrorKind::NotOutstanding,
                format!(
                    "attempt {attempt_id} is not the outstanding attempt (that is attempt {})",
                    a.id
                ),
            )),
            None => Err(Error::new(
                ErrorKind::NotOutstanding,
                format!("attempt {attempt_id} is not outstanding"),
            )),
        }
    }

    #[inline]
    fn check_outcome(&self, attempt_id: u64, now_ns: u64) -> Result<(), Error> {
        self.check_event(attempt_id, now_ns, true)
    }

    /// The checks of an event about attempt `attempt_id` at `now_ns`: live,
    /// time not going backwards, the outstanding attempt, marked sent
    /// exactly when `sent` (an outcome) or not (`handle_sent`). The error
    /// is built out of line (see [`Heartbeat::event_error`]).
    #[inline]
    fn check_event(&self, attempt_id: u64, now_ns: u64, sent: bool) -> Result<(), Error> {
        let fine = self.stopped.is_none()
            && now_ns >= self.last_event_ns
            && matches!(&self.attempt, Some(a) if a.id == attempt_id && a.sent_ns.is_some() == sent);
        if fine {
            Ok(())
        } else {
            Err(self.event_error(attempt_id, now_ns, sent))
        }
    }

    /// The error [`Heartbeat::check_event`] found, from the first failing
    /// check in its order.
    #[cold]
    #[inline(never)]
    fn event_error(&self, attempt_id: u64, now_ns: u64, sent: bool) -> Error {
        if let Err(e) = self.check_live(now_ns) {
            return e;
        }
        if let Err(e) = self.outstanding(attempt_id) {
            return e;
        }
        if sent {
            Error::new(
                ErrorKind::NotSent,
                format!("attempt {attempt_id} was never marked sent; call handle_sent first"),
            )
        } else {
            Error::new(
                ErrorKind::AlreadySent,
                format!("attempt {attempt_id} was already marked sent"),
            )
        }
    }

    fn adopted_key(&self) -> Option<&String> {
        self.memory.as_ref()?.adopted_key.as_ref()
    }

    fn memory_mut(&mut self) -> &mut KeyMemory {
        self.memory.get_or_insert_with(Box::default)
    }

    /// A new key, validated but not yet recorded as used.
    #[inline(always)]
    fn fresh_key(&mut self) -> Result<String, Error> {
        let mut key = std::mem::take(&mut self.spare_key);
        self.keys.write_key(&mut key);
        // At most MAX_KEY_CHARS bytes is at most that many characters.
        if key.is_empty() || (key.len() > MAX_KEY_CHARS && key.chars().count() > MAX_KEY_CHARS) {
            let chars = key.chars().count();
            return Err(Error::new(
                ErrorKind::InvalidKey,
                format!(
                    "the key source returned a key of {chars} characters (must be 1..={MAX_KEY_CHARS})"
                ),
            ));
        }
        // A source that says its keys are plain has no control character
        // in them (see `KeySource::plain_keys`); any other key is looked at.
        if !self.plain_keys {
            if let Some(why) = header_unsafe_key(&key) {
                return Err(Error::new(
                    ErrorKind::InvalidKey,
                    format!("the key source returned a key that {why}"),
                ));
            }
        }
        // (`VecDeque::contains` is not free on an empty deque.)
        if self
            .memory
            .as_ref()
            .is_some_and(|m| m.adopted_key.as_ref() == Some(&key) || m.used_keys.contains(&key))
        {
            return Err(Error::new(
                ErrorKind::InvalidKey,
                format!("the key source returned {key:?}, which this lease already used"),
            ));
        }
        Ok(key)
    }

    /// The create request body; takes the configured members out of the
    /// config (see [`Heartbeat::config`]).
    fn create_body(&mut self, key: &str) -> Vec<u8> {
        let mut body = std::mem::take(&mut self.config.create_request);
        body.insert("idempotency_key".into(), Value::from(key));
        body.insert("ttl_ms".into(), Value::from(self.config.ttl_ms));
        serde_json::to_vec(&body).expect("a JSON map always serializes")
    }

    /// `{"extend_by_ms":N,"idempotency_key":"..."}` (members in
    /// lexicographic order). With `reuse`, written into the finished
    /// attempt's body buffer.
    #[inline(always)]
    fn extend_body(&mut self, key: &str, reuse: bool) -> Vec<u8> {
        // `{"extend_by_ms":` + the ttl's digits + `,"idempotency_key":`
        let ttl = self.config.ttl_ms;
        // (ttl_ms is 1000..=86400000: 4 to 8 digits.)
        let digits = match ttl {
            0..=9_999 => 4,
            10_000..=99_999 => 5,
            100_000..=999_999 => 6,
            1_000_000..=9_999_999 => 7,
            _ => 8,
        };
        debug_assert_eq!(digits, itoa::Buffer::new().format(ttl).len());
        let prefix_len = 16 + digits + 19;
        let mut body = match self.attempt.as_mut() {
            // An extend body built here with the same ttl: the prefix is
            // there. (A create body's buffer is not reused: it would grow.)
            Some(a)
                if reuse
                    && a.kind == AttemptKind::Extend
                    && a.body.capacity() <= MAX_SPARE_BYTES
                    && a.body.len() > prefix_len =>
            {
                let mut body = std::mem::take(&mut a.body);
                body.truncate(prefix_len);
                body
            }
            _ => Vec::new(),
        };
        if body.is_empty() {
            body.reserve_exact(prefix_len + key.len() + 3);
            body.extend_from_slice(b"{\"extend_by_ms\":");
            body.extend_from_slice(itoa::Buffer::new().format(ttl).as_bytes());
            body.extend_from_slice(b",\"idempotency_key\":");
        }
        debug_assert_eq!(body.len(), prefix_len);
        debug_assert!(!self.plain_keys || json::is_plain(key.as_bytes()));
        if self.plain_keys || json::is_plain(key.as_bytes()) {
            // Nothing to escape: exactly what serde_json writes.
            body.reserve(key.len() + 3);
            body.push(b'"');
            body.extend_from_slice(key.as_bytes());
            body.push(b'"');
        } else {
            serde_json::to_writer(&mut body, key).expect("a string always serializes");
        }
        body.push(b'}');
        body
    }

    /// Keeps a finished attempt's key buffer for the next key.
    #[inline(always)]
    fn recycle(&mut self, kind: AttemptKind, key: String) {
        // Not a create's key: it was made on the thread that built the
        // heartbeat, which in a driver is not the one that runs it. Kept for
        // the lease's life, 100,000 such keys pinned the memory of the
        // freed create bodies around them in that thread's malloc arena
        // (about 330 bytes of resident memory per lease).
        if kind == AttemptKind::Extend && key.capacity() <= MAX_SPARE_BYTES {
            self.spare_key = key;
        }
    }

    /// Makes this the outstanding attempt (written over the finished one,
    /// whose key buffer is kept for the next key).
    #[inline(always)]
    fn install_attempt(
        &mut self,
        kind: AttemptKind,
        due_ns: Option<u64>,
        key: String,
        key_use: KeyUse,
        body: Vec<u8>,
        zero_window_retry: bool,
    ) {
        if key_use == KeyUse::New {
            self.key_index = self.key_index.saturating_add(1);
            // Keys unique by construction need no memory: the set stays
            // bounded over a long lease (see `KeySource::unique_by_construction`).
            if !self.keys.unique_by_construction() {
                let used = &mut self.memory_mut().used_keys;
                if used.len() >= MAX_REMEMBERED_KEYS {
                    used.pop_front();
                }
                used.push_back(key.clone());
            }
        }
        let id = self.next_attempt_id;
        self.next_attempt_id = self.next_attempt_id.saturating_add(1);
        let key_index = self.key_index;
        match self.attempt.as_mut() {
            Some(a) => {
                let old_kind = a.kind;
                let old_key = std::mem::replace(&mut a.key, key);
                a.id = id;
                a.kind = kind;
                a.due_ns = due_ns;
                a.key_index = key_index;
                a.key_use = key_use;
                a.body = body;
                a.sent_ns = None;
                a.zero_window_retry = zero_window_retry;
                self.recycle(old_kind, old_key);
            }
            None => {
                self.attempt = Some(Attempt {
                    id,
                    kind,
                    due_ns,
                    key,
                    key_index,
                    key_use,
                    body,
                    sent_ns: None,
                    zero_window_retry,
                });
            }
        }
    }

    fn retry_same(&mut self, due_ns: Option<u64>, zero_window_retry: bool) -> (u32, AttemptKind) {
        let prev = self
            .attempt
            .take()
            .expect("a failed attempt is outstanding");
        let kind = prev.kind;
        let id = self.next_attempt_id;
        self.next_attempt_id = self.next_attempt_id.saturating_add(1);
        let key_index = prev.key_index;
        self.attempt = Some(Attempt {
            id,
            kind,
            due_ns,
            key: prev.key,
            key_index,
            key_use: KeyUse::Same,
            body: prev.body,
            sent_ns: None,
            zero_window_retry,
        });
        (key_index, kind)
    }

    /// Makes this the last decision and returns it. Written into the stored
    /// decision field by field (no 240-byte decision built and moved), and
    /// the reservation id's reference count is left alone while it stays
    /// the same (no atomic operation per decision). `numbers` `None`: they
    /// are in place already (see [`Heartbeat::numbers_in_place`]).
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn record(
        &mut self,
        next: Next,
        at_ns: Option<u64>,
        key: Option<(KeyUse, u32)>,
        mode: Option<Mode>,
        numbers: Option<Numbers>,
        warnings: Warnings,
        outcome: OutcomeClass,
        mut detail: Option<String>,
        instants: (Option<u64>, Option<u64>),
    ) -> &Decision {
        if let Some(text) = detail.as_mut() {
            cap_detail(text);
        }
        let proven_until_ns = self.proven_until_ns();
        let d = self.last.get_or_insert_with(Decision::blank);
        let same_id = match (&d.reservation_id, &self.reservation_id) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        };
        if !same_id {
            d.reservation_id.clone_from(&self.reservation_id);
        }
        d.next = next;
        d.at_ns = at_ns;
        d.key = key.map(|k| k.0);
        d.key_index = key.map(|k| k.1);
        d.mode = mode;
        if let Some(numbers) = numbers {
            d.numbers = numbers;
        }
        d.warnings = warnings;
        d.outcome = outcome;
        d.detail = detail;
        d.proven_until_ns = proven_until_ns;
        d.expires_at_ms = instants.0;
        d.remaining_ttl_ms = instants.1;
        d
    }

    /// The numbers of the decision about to be recorded, written straight
    /// into the stored decision (no 120-byte copy): the caller then records
    /// with `numbers` `None`, and nothing may fail in between.
    #[inline(always)]
    fn numbers_in_place(last: &mut Option<Decision>) -> &mut Numbers {
        let numbers = &mut last.get_or_insert_with(Decision::blank).numbers;
        *numbers = Numbers::default();
        numbers
    }

    fn stop(
        &mut self,
        reason: StopReason,
        outcome: OutcomeClass,
        mode: Option<Mode>,
        numbers: Numbers,
        detail: Option<String>,
    ) -> &Decision {
        self.stop_with(reason, outcome, mode, Some(numbers), detail, (None, None))
    }

    /// A stop; `instants` are the deciding success's `expires_at_ms` and
    /// `remaining_ttl_ms`, if a success decided it.
    fn stop_with(
        &mut self,
        reason: StopReason,
        outcome: OutcomeClass,
        mode: Option<Mode>,
        numbers: Option<Numbers>,
        detail: Option<String>,
        instants: (Option<u64>, Option<u64>),
    ) -> &Decision {
        self.stopped = Some(reason);
        self.attempt = None;
        self.record(
            Next::Stop(reason),
            None,
            None,
            mode,
            numbers,
            Warnings::new(),
            outcome,
            detail,
            instants,
        )
    }

    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn send_decision(
        &mut self,
        kind: AttemptKind,
        due_ns: Option<u64>,
        key_use: KeyUse,
        key_index: u32,
        mode: Option<Mode>,
        numbers: Option<Numbers>,
        warnings: Warnings,
        outcome: OutcomeClass,
        detail: Option<String>,
        instants: (Option<u64>, Option<u64>),
    ) -> &Decision {
        self.record(
            Next::Send(kind),
            due_ns,
            Some((key_use, key_index)),
            mode,
            numbers,
            warnings,
            outcome,
            detail,
            instants,
        )
    }

    /// D-15: receipt of the last primary success plus its lead floor.
    #[inline]
    fn proven_until_ns(&self) -> Option<u64> {
        self.anchor
            .filter(|a| a.mode == Mode::Primary)
            .map(|a| arith::due_after(a.received_ns, a.lead_floor).unwrap_or(u64::MAX))
    }

    // ----- create -----

    fn on_create_response<N: AsRef<[u8]>, V: AsRef<[u8]>>(
        &mut self,
        response: ResponseRef<'_, N, V>,
        rtt: Option<u64>,
        now_ns: u64,
    ) -> Result<&Decision, Error> {
        let status = response.status;
        match status {
            200 => match schema::create_response(response.body) {
                Ok(body) => {
                    let no_reservation = if body.decision == "DENY" {
                        Some("the create was denied (decision DENY)".to_owned())
                    } else if body.reservation_id.is_none() {
                        Some("the create returned no reservation_id (a dry run?)".to_owned())
                    } else if body.remaining_ttl_ms.is_none() && body.expires_at_ms.is_none() {
                        Some(
                            "the create returned neither remaining_ttl_ms nor expires_at_ms"
                                .to_owned(),
                        )
                    } else {
                        None
                    };
                    if let Some(detail) = no_reservation {
                        self.last_event_ns = now_ns;
                        return Ok(self.stop(
                            StopReason::NoReservation,
                            OutcomeClass::Success,
                            None,
                            Numbers::default(),
                            Some(detail),
                        ));
                    }
                    let key = self.fresh_key()?;
                    self.last_event_ns = now_ns;
                    self.reservation_id = body.reservation_id.map(Arc::from);
                    self.grants = GrantBook {
                        create_received_ns: now_ns,
                        sum_grants: Split128::default(),
                        last_expires_at_plus_1: plus_1(body.expires_at_ms),
                    };
                    Ok(self.on_success(
                        key,
                        body.remaining_ttl_ms,
                        body.expires_at_ms,
                        None,
                        rtt,
                        now_ns,
                    ))
                }
                Err(why) => {
                    self.last_event_ns = now_ns;
                    Ok(self.on_create_transient(
                        OutcomeClass::Ambiguous,
                        now_ns,
                        format!("ambiguous 200: {why}"),
                    ))
                }
            },
            201..=299 => {
                self.last_event_ns = now_ns;
                Ok(self.on_create_transient(
                    OutcomeClass::Ambiguous,
                    now_ns,
                    format!("ambiguous {status}: only 200 with a valid body is a success"),
                ))
            }
            500..=599 => {
                self.last_event_ns = now_ns;
                Ok(self.on_create_transient(
                    OutcomeClass::ServerError,
                    now_ns,
                    format!("server error {status}"),
                ))
            }
            400..=499 => {
                self.last_event_ns = now_ns;
                // The server's code and message, for the one reading the
                // detail (a create the server refuses is usually a request
                // the caller can fix: "subject is required").
                let code = match (
                    schema::error_code(response.body),
                    schema::error_message(response.body),
                ) {
                    (Some(c), Some(m)) => format!(" ({c}: {m})"),
                    (Some(c), None) => format!(" ({c})"),
                    (None, Some(m)) => format!(" ({m})"),
                    (None, None) => String::new(),
                };
                Ok(self.stop(
                    StopReason::CreateRejected,
                    OutcomeClass::Rejected,
                    None,
                    Numbers::default(),
                    Some(format!("the create was rejected with {status}{code}")),
                ))
            }
            _ => {
                self.last_event_ns = now_ns;
                Ok(self.stop(
                    StopReason::UnexpectedStatus,
                    OutcomeClass::Unexpected,
                    None,
                    Numbers::default(),
                    Some(format!("unexpected status {status} on the create")),
                ))
            }
        }
    }

    fn on_create_transient(
        &mut self,
        outcome: OutcomeClass,
        now_ns: u64,
        detail: String,
    ) -> &Decision {
        if self.create_failed_once {
            return self.stop(
                StopReason::CreateFailed,
                outcome,
                None,
                Numbers::default(),
                Some(format!("the create retry failed too: {detail}")),
            );
        }
        self.create_failed_once = true;
        let (key_index, kind) = self.retry_same(Some(now_ns), false);
        self.send_decision(
            kind,
            Some(now_ns),
            KeyUse::Same,
            key_index,
            None,
            Some(Numbers::default()),
            Warnings::new(),
            outcome,
            Some(format!("{detail}; one immediate same-key create retry")),
            (None, None),
        )
    }

    // ----- success (create or extend) -----

    /// A schema-valid success observed at `now_ns`. `grant` is `None` for the
    /// create (which contributes 0) and the measured grant for an extension.
    #[inline(always)]
    fn on_success(
        &mut self,
        new_key: String,
        remaining: Option<u64>,
        expires_at: Option<u64>,
        grant: Option<i128>,
        rtt: Option<u64>,
        now_ns: u64,
    ) -> &Decision {
        if let Some(r) = rtt {
            self.max_rtt = self.max_rtt.max(r);
        }
        let previous = self.anchor;
        self.last_failure = None;
        let lead_min = match remaining {
            Some(_) => 0,
            None => self.lead_min(now_ns),
        };
        let numbers = Heartbeat::numbers_in_place(&mut self.last);
        if let Some(rtt) = rtt {
            numbers.put_ms(slot::rtt, rtt);
        }
        numbers.put_ms(slot::max_rtt, self.max_rtt);
        let mut warnings = Warnings::new();
        let (mode, delay, lead_floor, cadence) = match remaining {
            Some(remaining) => {
                let s =
                    arith::primary_schedule(remaining, rtt, self.config.timeout(), self.max_rtt);
                numbers.put_ms(slot::lead_floor, s.lead_floor);
                numbers.put_ms(slot::attempt_budget, s.attempt_budget);
                numbers.put_ms(slot::safety_margin, s.safety_margin);
                numbers.put_ms(slot::retry_reserve, s.retry_reserve);
                numbers.put_ms(slot::next_delay, s.next_delay);
                // HB-33 / D-13: only primary successes count toward the streak.
                if s.next_delay == 0 {
                    self.zero_streak = self.zero_streak.saturating_add(1);
                } else {
                    self.zero_streak = 0;
                }
                (
                    Mode::Primary,
                    s.next_delay,
                    s.lead_floor,
                    previous.and_then(|a| a.cadence),
                )
            }
            None => {
                numbers.set_lead_min(Some(Num::Int(lead_min)));
                match grant {
                    // FB-02: the first beat right after the create.
                    None => {
                        numbers.put_ms(slot::next_delay, 0);
                        (Mode::Fallback, 0, 0, None)
                    }
                    Some(grant) => {
                        let since_previous = previous
                            .map(|a| arith::ceil_ms(now_ns - a.received_ns))
                            .unwrap_or(0);
                        let c = arith::fallback_cadence(grant, since_previous, self.config.ttl_ms);
                        let skips = arith::fallback_skips(lead_min, grant, c.cadence);
                        let delay = c.cadence.saturating_mul(skips.saturating_add(1));
                        numbers.set_grant(Some(Num::Int(grant)));
                        numbers.put_ms(slot::cadence, c.cadence);
                        numbers.put_ms(slot::skips, skips);
                        numbers.put_ms(slot::next_delay, delay);
                        if c.hold {
                            warnings.insert(Warning::ExtensionBudgetDepleting);
                        }
                        // D-13: a positive-delay success in either mode resets.
                        if delay > 0 {
                            self.zero_streak = 0;
                        }
                        (Mode::Fallback, delay, 0, NonZeroU64::new(c.cadence))
                    }
                }
            }
        };
        self.anchor = Some(Anchor {
            received_ns: now_ns,
            lead_floor,
            mode,
            cadence,
        });
        if mode == Mode::Primary && self.zero_streak >= 2 {
            return self.stop_with(
                StopReason::LeaseTooShort,
                OutcomeClass::Success,
                Some(mode),
                None,
                Some("two consecutive successes gave next_delay 0: the lease is shorter than its retry-safety budget".into()),
                (expires_at, remaining),
            );
        }
        let due = arith::due_after(now_ns, delay);
        // The success is certain here: the finished attempt's buffer is free.
        let body = self.extend_body(&new_key, true);
        self.install_attempt(AttemptKind::Extend, due, new_key, KeyUse::New, body, false);
        let key_index = self.key_index;
        self.send_decision(
            AttemptKind::Extend,
            due,
            KeyUse::New,
            key_index,
            Some(mode),
            None,
            warnings,
            OutcomeClass::Success,
            None,
            (expires_at, remaining),
        )
    }

    /// The current fallback cadence: that of the last fallback extension
    /// success, else the hold cadence.
    fn fallback_cadence(&self, anchor: Anchor) -> u64 {
        anchor
            .cadence
            .map(NonZeroU64::get)
            .unwrap_or_else(|| arith::hold_cadence(self.config.ttl_ms))
    }

    /// FB-01: sum of grants minus the rounded-up elapsed time since the create
    /// receipt.
    fn lead_min(&self, now_ns: u64) -> i128 {
        let elapsed = arith::ceil_ms(now_ns.saturating_sub(self.grants.create_received_ns));
        self.grants
            .sum_grants
            .get()
            .saturating_sub(i128::from(elapsed))
    }

    // ----- extend outcomes -----

    #[inline]
    fn on_extend_outcome(
        &mut self,
        class: Class,
        rtt: Option<u64>,
        now_ns: u64,
    ) -> Result<&Decision, Error> {
        // Only a heartbeat started with `for_reservation` extends before any
        // success; nothing proves a lead then: primary mode, lead floor 0.
        let anchor = self.anchor.unwrap_or(Anchor {
            received_ns: self.last_event_ns,
            lead_floor: 0,
            mode: Mode::Primary,
            cadence: None,
        });
        match class {
            Class::Success {
                remaining,
                expires_at,
            } => {
                let key = self.fresh_key()?;
                self.last_event_ns = now_ns;
                let expires_at = expires_at.expect("extend bodies carry expires_at_ms");
                let grant = if self.anchor.is_none() {
                    // The first success of an existing reservation anchors
                    // the grant bookkeeping as a create would (FB-01/02).
                    self.grants = GrantBook {
                        create_received_ns: now_ns,
                        sum_grants: Split128::default(),
                        last_expires_at_plus_1: plus_1(Some(expires_at)),
                    };
                    None
                } else {
                    let grant = match self.grants.last_expires_at_plus_1 {
                        Some(prev) => i128::from(expires_at) - (i128::from(prev.get()) - 1),
                        None => 0,
                    };
                    self.grants.sum_grants =
                        Split128::of(self.grants.sum_grants.get().saturating_add(grant));
                    self.grants.last_expires_at_plus_1 = plus_1(Some(expires_at));
                    Some(grant)
                };
                Ok(self.on_success(key, remaining, Some(expires_at), grant, rtt, now_ns))
            }
            Class::Stop(reason, outcome, detail) => {
                self.last_event_ns = now_ns;
                Ok(self.stop(
                    reason,
                    outcome,
                    Some(anchor.mode),
                    Numbers::default(),
                    Some(detail),
                ))
            }
            Class::Transient(outcome, detail) => {
                self.last_event_ns = now_ns;
                Ok(self.on_extend_failure(anchor, outcome, None, detail, now_ns))
            }
            Class::Throttled(retry_after) => {
                self.last_event_ns = now_ns;
                let detail = match retry_after {
                    Ok(ms) => format!("429 with Retry-After {ms} ms"),
                    Err(e) => format!("429 with Retry-After {}", e.as_str()),
                };
                Ok(self.on_extend_failure(
                    anchor,
                    OutcomeClass::Throttled,
                    Some(retry_after),
                    detail,
                    now_ns,
                ))
            }
        }
    }

    /// Checks 2-6 of the single check order (D-5) after a transient failure.
    fn on_extend_failure(
        &mut self,
        anchor: Anchor,
        outcome: OutcomeClass,
        throttle: Option<Result<u64, RetryAfterError>>,
        detail: String,
        now_ns: u64,
    ) -> &Decision {
        let was_zero_window_retry = self.attempt.as_ref().is_some_and(|a| a.zero_window_retry);
        let elapsed = arith::ceil_ms(now_ns - anchor.received_ns);
        let mode = Some(anchor.mode);
        let mut numbers = Numbers::default();
        let window = match anchor.mode {
            Mode::Primary => {
                let budget = arith::attempt_budget(self.config.timeout(), self.max_rtt);
                let margin = arith::safety_margin(self.max_rtt);
                let r = arith::retry_window(anchor.lead_floor, elapsed, budget, margin);
                numbers.put_ms(slot::max_rtt, self.max_rtt);
                numbers.put_ms(slot::lead_floor, anchor.lead_floor);
                numbers.put_ms(slot::lead, r.lead);
                numbers.put_ms(slot::attempt_budget, budget);
                numbers.put_ms(slot::safety_margin, margin);
                numbers.set_retry_window(Some(r.window));
                Some(r)
            }
            Mode::Fallback => {
                numbers.set_lead_min(Some(Num::Int(self.lead_min(now_ns))));
                numbers.put_ms(slot::cadence, self.fallback_cadence(anchor));
                None
            }
        };
        // Check 2 (HB-27): the zero-window retry failed too.
        if was_zero_window_retry {
            return self.stop(
                StopReason::RetryWindowExhausted,
                outcome,
                mode,
                numbers,
                Some(format!("{detail}; the single zero-window retry failed")),
            );
        }
        // Check 3: no complete retry plus margin fits.
        if let Some(r) = window {
            if r.delay.is_none() {
                return self.stop(
                    StopReason::RetryWindowExhausted,
                    outcome,
                    mode,
                    numbers,
                    Some(format!("{detail}; retry window {} < 0", r.window)),
                );
            }
        }
        // Check 4 (HB-28, D-6, P-4): a consecutive failure must show progress.
        let mark = FailureMark {
            elapsed,
            window: window.map(|r| SmallNum::of(r.window)),
        };
        if let Some(prev) = self.last_failure {
            let advanced = elapsed > prev.elapsed;
            let shrank = match (
                mark.window.map(SmallNum::get),
                prev.window.map(SmallNum::get),
            ) {
                (Some(now), Some(before)) => now < before,
                _ => false,
            };
            if !advanced && !shrank {
                return self.stop(
                    StopReason::NoProgress,
                    outcome,
                    mode,
                    numbers,
                    Some(format!(
                        "{detail}; elapsed {elapsed} ms did not advance since the previous failure"
                    )),
                );
            }
        }
        self.last_failure = Some(mark);
        let (delay, zero_window) = match window {
            Some(r) => {
                let delay = match throttle {
                    // Check 5: honour Retry-After only inside the window.
                    Some(Ok(ms)) if Num::Int(i128::from(ms)) <= r.window => ms,
                    Some(Ok(ms)) => {
                        return self.stop(
                            StopReason::Throttled,
                            outcome,
                            mode,
                            numbers,
                            Some(format!(
                                "Retry-After {ms} ms exceeds the retry window {}",
                                r.window
                            )),
                        );
                    }
                    Some(Err(e)) => {
                        return self.stop(
                            StopReason::Throttled,
                            outcome,
                            mode,
                            numbers,
                            Some(format!("429 without a usable Retry-After ({})", e.as_str())),
                        );
                    }
                    // Check 6.
                    None => r.delay.expect("window >= 0 here"),
                };
                (delay, r.window == Num::Int(0))
            }
            None => {
                let cadence = self.fallback_cadence(anchor);
                let delay = match throttle {
                    Some(Ok(ms)) => cadence.max(ms),
                    Some(Err(e)) => {
                        return self.stop(
                            StopReason::Throttled,
                            outcome,
                            mode,
                            numbers,
                            Some(format!("429 without a usable Retry-After ({})", e.as_str())),
                        );
                    }
                    None => cadence,
                };
                (delay, false)
            }
        };
        numbers.put_ms(slot::retry_delay, delay);
        let due = arith::due_after(now_ns, delay);
        let (key_index, kind) = self.retry_same(due, zero_window);
        self.send_decision(
            kind,
            due,
            KeyUse::Same,
            key_index,
            mode,
            Some(numbers),
            Warnings::new(),
            outcome,
            Some(detail),
            (None, None),
        )
    }
}

/// Why `key` cannot be sent as the `X-Idempotency-Key` header value, if it
/// cannot: a CR or LF (a header injection or a request the HTTP client
/// refuses locally, which a runner would see as a `reset`), or any other
/// control character (below U+0020, or U+007F). The reason never contains
/// the key itself.
fn header_unsafe_key(key: &str) -> Option<&'static str> {
    let b = key.as_bytes();
    if b.iter().any(|c| *c == b'\r' || *c == b'\n') {
        Some("contains CR or LF: it cannot be an HTTP header value")
    } else if b.iter().any(|c| *c < 0x20 || *c == 0x7f) {
        Some("contains a control character: it cannot be an HTTP header value")
    } else {
        None
    }
}

/// An adopted create's body must be a JSON object whose `idempotency_key`,
/// if present, is the create's key (HB-16: the header key is the body key).
fn check_adopted_body(body: &[u8], key: &str) -> Result<(), Error> {
    let value: Value = serde_json::from_slice(body).map_err(|e| {
        Error::new(
            ErrorKind::InvalidArgument,
            format!("the adopted create's body is not JSON: {e}"),
        )
    })?;
    let Value::Object(map) = value else {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            "the adopted create's body must be a JSON object",
        ));
    };
    match map.get("idempotency_key") {
        None => Ok(()),
        Some(Value::String(k)) if k == key => Ok(()),
        Some(_) => Err(Error::new(
            ErrorKind::InvalidArgument,
            "the adopted create's body carries an idempotency_key different from its key",
        )),
    }
}

#[cold]
#[inline(never)]
fn status_error(status: u16) -> Error {
    Error::new(
        ErrorKind::InvalidArgument,
        format!("HTTP status must be within 100..=999, got {status}"),
    )
}

/// Cuts a detail text to [`MAX_DETAIL_BYTES`], marker included.
pub(crate) fn cap_detail(text: &mut String) {
    if text.len() <= MAX_DETAIL_BYTES {
        return;
    }
    let mut end = MAX_DETAIL_BYTES - DETAIL_CUT_MARKER.len();
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text.push_str(DETAIL_CUT_MARKER);
}

/// Classifies an extend response (HB-18, P-3), first match wins.
#[inline]
fn classify_extend<N: AsRef<[u8]>, V: AsRef<[u8]>>(response: ResponseRef<'_, N, V>) -> Class {
    let status = response.status;
    if (200..=299).contains(&status) {
        if status == 200 {
            return match schema::extend_response(response.body) {
                Ok(b) => Class::Success {
                    remaining: b.remaining_ttl_ms,
                    expires_at: Some(b.expires_at_ms),
                },
                Err(why) => {
                    Class::Transient(OutcomeClass::Ambiguous, format!("ambiguous 200: {why}"))
                }
            };
        }
        return Class::Transient(
            OutcomeClass::Ambiguous,
            format!("ambiguous {status}: only 200 with a valid body is a success"),
        );
    }
    let code = schema::error_code(response.body);
    if let Some(reason) = code.as_deref().and_then(permanent_reason) {
        return Class::Stop(
            reason,
            OutcomeClass::Permanent,
            format!(
                "{status} {}: the reservation is gone",
                code.as_deref().unwrap_or("")
            ),
        );
    }
    match status {
        500..=599 => Class::Transient(OutcomeClass::ServerError, format!("server error {status}")),
        429 => Class::Throttled(response.retry_after_ms()),
        404 if code.is_none() => Class::Stop(
            StopReason::NotFound,
            OutcomeClass::Permanent,
            "404 without a usable error body".into(),
        ),
        410 if code.is_none() => Class::Stop(
            StopReason::Expired,
            OutcomeClass::Permanent,
            "410 without a usable error body".into(),
        ),
        400..=499 => Class::Stop(
            StopReason::Rejected,
            OutcomeClass::Rejected,
            format!(
                "rejected with {status}{}",
                code.map(|c| format!(" ({c})")).unwrap_or_default()
            ),
        ),
        _ => Class::Stop(
            StopReason::UnexpectedStatus,
            OutcomeClass::Unexpected,
            format!("unexpected status {status}"),
        ),
    }
}

/// The stop reason for one of the five permanent error codes.
pub fn permanent_reason(code: &str) -> Option<StopReason> {
    match code {
        "RESERVATION_EXPIRED" => Some(StopReason::Expired),
        "RESERVATION_FINALIZED" => Some(StopReason::Finalized),
        "MAX_EXTENSIONS_EXCEEDED" => Some(StopReason::MaxExtensions),
        "TENANT_CLOSED" => Some(StopReason::TenantClosed),
        "NOT_FOUND" => Some(StopReason::NotFound),
        _ => None,
    }
}

#[cfg(test)]
mod detail_tests {
    use super::*;

    #[test]
    fn long_details_are_cut_with_a_marker() {
        let mut t = "é".repeat(MAX_DETAIL_BYTES);
        cap_detail(&mut t);
        assert!(t.len() <= MAX_DETAIL_BYTES && t.ends_with(DETAIL_CUT_MARKER));
        let mut short = "x".repeat(MAX_DETAIL_BYTES);
        cap_detail(&mut short);
        assert_eq!(short.len(), MAX_DETAIL_BYTES);
    }
}
