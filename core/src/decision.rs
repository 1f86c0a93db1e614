//! What the scheduler decides, as plain values that serialize to the
//! "emitted decision" JSON of the scenario format.

use std::fmt;
use std::sync::Arc;

use serde_json::{Map, Value, json};

/// A millisecond quantity that may be infinite: durations use `Int` and `Inf`,
/// the retry window may also be negative or `NegInf`.
///
/// Finite values always lie strictly between `-2^64` and `2^64`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Num {
    /// -infinity (the retry window when the budget is unbounded).
    NegInf,
    /// A finite number of milliseconds.
    Int(i128),
    /// +infinity (an unbounded budget, an overflowing due time).
    Inf,
}

impl Num {
    /// A duration where `u64::MAX` means +infinity (P-2).
    pub fn from_ms(ms: u64) -> Num {
        if ms == u64::MAX {
            Num::Inf
        } else {
            Num::Int(i128::from(ms))
        }
    }

    /// The JSON form used by scenario files: an integer, `"inf"` or `"-inf"`.
    pub fn to_json(self) -> Value {
        match self {
            Num::NegInf => Value::from("-inf"),
            Num::Inf => Value::from("inf"),
            Num::Int(v) => {
                if let Ok(u) = u64::try_from(v) {
                    Value::from(u)
                } else if let Ok(i) = i64::try_from(v) {
                    Value::from(i)
                } else {
                    // Outside i64/u64 (only a retry window below -2^63):
                    // `serde_json::Value` cannot hold it exactly; see
                    // `Decision::to_json_string` for the exact text (P-9).
                    serde_json::from_str(&v.to_string()).unwrap_or(Value::Null)
                }
            }
        }
    }

    /// Like [`Num::to_json`], but a value outside `i64`/`u64` is a marked
    /// exact text (see [`write_exact`]).
    fn to_json_marked(self) -> Value {
        match self {
            Num::Int(v) if u64::try_from(v).is_err() && i64::try_from(v).is_err() => {
                marked(v.to_string())
            }
            other => other.to_json(),
        }
    }

    /// The finite value, if any.
    pub fn finite(self) -> Option<i128> {
        match self {
            Num::Int(v) => Some(v),
            _ => None,
        }
    }
}

impl fmt::Display for Num {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Num::NegInf => f.write_str("-inf"),
            Num::Inf => f.write_str("inf"),
            Num::Int(v) => write!(f, "{v}"),
        }
    }
}

macro_rules! numbers {
    ($( $(#[$doc:meta])* $name:ident / $set:ident = $idx:expr ),* $(,)?) => {
        /// Slot indexes, in [`Numbers::NAMES`] order.
        #[allow(non_upper_case_globals, dead_code)]
        pub(crate) mod slot {
            $( pub(crate) const $name: usize = $idx; )*
        }

        impl Numbers {
            /// Every name a number can have, in a fixed order (that of
            /// [`Numbers::to_array`]).
            pub const NAMES: [&'static str; 14] = [$(stringify!($name)),*];

            $(
                $(#[$doc])*
                #[inline]
                pub fn $name(&self) -> Option<Num> {
                    self.at(slot::$name)
                }

                #[doc = concat!("Sets `", stringify!($name), "` (see [`Numbers::set_at`]).")]
                #[inline]
                pub fn $set(&mut self, value: Option<Num>) {
                    self.set_at(slot::$name, value);
                }
            )*
        }

        impl fmt::Debug for Numbers {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_struct("Numbers")
                    $( .field(stringify!($name), &self.$name()) )*
                    .finish()
            }
        }
    };
}

/// The numbers behind one decision (HB-44): 14 named slots, each absent or a
/// [`Num`]. A slot is present exactly when it applies to that decision.
///
/// Stored compactly (120 bytes: a tag per slot and a 64-bit magnitude), yet
/// exact for every value a decision can carry: every finite value strictly
/// between `-2^64` and `2^64`, and both infinities. Read a slot with its
/// accessor (`numbers.next_delay()`), by name with [`Numbers::get`], by
/// index with [`Numbers::at`], all at once with [`Numbers::to_array`] or the
/// present ones with [`Numbers::iter`].
///
/// ```
/// use leasebeat::{Num, Numbers};
/// let mut n = Numbers::default();
/// n.set_next_delay(Some(Num::Int(37_000)));
/// n.set_retry_window(Some(Num::NegInf));
/// assert_eq!(n.next_delay(), Some(Num::Int(37_000)));
/// assert_eq!(n.get("retry_window"), Some(Num::NegInf));
/// assert_eq!(n.iter().count(), 2);
/// assert_eq!(Numbers::from_array(n.to_array()), n);
/// ```
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Numbers {
    /// Three bits per slot: 0 absent, 1 finite >= 0, 2 finite < 0, 3 +inf,
    /// 4 -inf.
    tags: u64,
    /// The finite values' magnitudes (0 for any other tag).
    mags: [u64; 14],
}

const TAG_BITS: u32 = 3;
const TAG_MASK: u64 = 0b111;

impl Numbers {
    /// The number in slot `index` (the position of its name in
    /// [`Numbers::NAMES`]); `None` if absent or `index >= 14`.
    #[inline]
    pub fn at(&self, index: usize) -> Option<Num> {
        let mag = *self.mags.get(index)?;
        match (self.tags >> (TAG_BITS * index as u32)) & TAG_MASK {
            1 => Some(Num::Int(i128::from(mag))),
            2 => Some(Num::Int(-i128::from(mag))),
            3 => Some(Num::Inf),
            4 => Some(Num::NegInf),
            _ => None,
        }
    }

    /// Sets slot `index` (see [`Numbers::at`]); an `index >= 14` is ignored.
    /// A finite value outside `(-2^64, 2^64)` (which no decision carries) is
    /// clamped to the nearest end of that range.
    #[inline]
    pub fn set_at(&mut self, index: usize, value: Option<Num>) {
        let (tag, mag) = match value {
            None => (0, 0),
            Some(Num::Int(v)) if v >= 0 => (1, u64::try_from(v).unwrap_or(u64::MAX)),
            Some(Num::Int(v)) => (2, u64::try_from(v.unsigned_abs()).unwrap_or(u64::MAX)),
            Some(Num::Inf) => (3, 0),
            Some(Num::NegInf) => (4, 0),
        };
        self.put(index, tag, mag);
    }

    #[inline]
    fn put(&mut self, index: usize, tag: u64, mag: u64) {
        if let Some(m) = self.mags.get_mut(index) {
            *m = mag;
            let shift = TAG_BITS * index as u32;
            self.tags = (self.tags & !(TAG_MASK << shift)) | (tag << shift);
        }
    }

    /// A duration in ms, `u64::MAX` meaning +infinity (as [`Num::from_ms`]).
    #[inline]
    pub(crate) fn put_ms(&mut self, index: usize, ms: u64) {
        if ms == u64::MAX {
            self.put(index, 3, 0);
        } else {
            self.put(index, 1, ms);
        }
    }

    /// The number called `name`, if it applies (`None` for an unknown name).
    pub fn get(&self, name: &str) -> Option<Num> {
        self.at(Numbers::NAMES.iter().position(|n| *n == name)?)
    }

    /// Sets the number called `name`; returns `false` (and changes nothing)
    /// for an unknown name.
    pub fn set(&mut self, name: &str, value: Option<Num>) -> bool {
        match Numbers::NAMES.iter().position(|n| *n == name) {
            Some(i) => {
                self.set_at(i, value);
                true
            }
            None => false,
        }
    }

    /// The numbers that apply, as `(name, value)` pairs in [`Numbers::NAMES`]
    /// order.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, Num)> + '_ {
        (0..Numbers::NAMES.len()).filter_map(|i| self.at(i).map(|v| (Numbers::NAMES[i], v)))
    }

    /// Every slot, in [`Numbers::NAMES`] order.
    pub fn to_array(&self) -> [Option<Num>; 14] {
        std::array::from_fn(|i| self.at(i))
    }

    /// The packed form, for bindings that copy the numbers across a language
    /// boundary without building a [`Num`] per slot: three tag bits per slot
    /// from bit 0 (slot `i` at bit `3 * i`): 0 absent, 1 the finite value
    /// `mags[i]`, 2 the finite value `-mags[i]`, 3 +inf, 4 -inf; and the 14
    /// magnitudes (0 for any tag but 1 and 2).
    ///
    /// ```
    /// use leasebeat::{Num, Numbers};
    /// let mut n = Numbers::default();
    /// n.set_at(1, Some(Num::Int(-5)));
    /// let (tags, mags) = n.packed();
    /// assert_eq!((tags >> 3) & 7, 2);
    /// assert_eq!(mags[1], 5);
    /// assert_eq!(Numbers::from_packed(tags, *mags), Some(n));
    /// ```
    #[inline]
    pub fn packed(&self) -> (u64, &[u64; 14]) {
        (self.tags, &self.mags)
    }

    /// The inverse of [`Numbers::packed`]; `None` for a tag above 4, a tag
    /// bit beyond the 14 slots, a magnitude under a tag that carries none, or
    /// a negative zero (so equal numbers have one packed form).
    pub fn from_packed(tags: u64, mags: [u64; 14]) -> Option<Numbers> {
        if tags >> (TAG_BITS * 14) != 0 {
            return None;
        }
        for (i, &mag) in mags.iter().enumerate() {
            let ok = match (tags >> (TAG_BITS * i as u32)) & TAG_MASK {
                1 => true,
                2 => mag != 0,
                0 | 3 | 4 => mag == 0,
                _ => false,
            };
            if !ok {
                return None;
            }
        }
        Some(Numbers { tags, mags })
    }

    /// The inverse of [`Numbers::to_array`] (values clamped as by
    /// [`Numbers::set_at`]).
    pub fn from_array(a: [Option<Num>; 14]) -> Numbers {
        let mut n = Numbers::default();
        for (i, v) in a.into_iter().enumerate() {
            n.set_at(i, v);
        }
        n
    }
}

numbers! {
    /// Round trip of the attempt that produced this success, rounded up (HB-05/06).
    rtt / set_rtt = 0,
    /// Largest rtt over this lease's schema-valid successes (HB-07, D-3).
    max_rtt / set_max_rtt = 1,
    /// `max(0, remaining_ttl_ms - rtt)`; on a failure, that of the anchoring success.
    lead_floor / set_lead_floor = 2,
    /// `max(request_timeout_ms, 1000, 2 x max_rtt)`.
    attempt_budget / set_attempt_budget = 3,
    /// `max(1000, 2 x max_rtt)`.
    safety_margin / set_safety_margin = 4,
    /// `2 x attempt_budget + safety_margin`.
    retry_reserve / set_retry_reserve = 5,
    /// Delay from the observation to the next beat.
    next_delay / set_next_delay = 6,
    /// Current lead estimate after a failure (HB-21).
    lead / set_lead = 7,
    /// `lead - attempt_budget - safety_margin`, unclamped (HB-22).
    retry_window / set_retry_window = 8,
    /// Delay from the failure's observation to the same-key retry.
    retry_delay / set_retry_delay = 9,
    /// Fallback lead lower bound at the observation (FB-01).
    lead_min / set_lead_min = 10,
    /// Fallback grant: difference of successive `expires_at_ms` values.
    grant / set_grant = 11,
    /// Fallback cadence (FB-03).
    cadence / set_cadence = 12,
    /// Fallback cadences skipped (FB-04).
    skips / set_skips = 13,
}

/// Why a heartbeat stopped. The strings are stable and the same in every
/// language.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StopReason {
    /// Two consecutive successes left no room for a positive delay (HB-33).
    LeaseTooShort,
    /// No complete retry plus margin fits in the proven lead (HB-22, HB-27).
    RetryWindowExhausted,
    /// Consecutive failures without elapsed time advancing (HB-28).
    NoProgress,
    /// A 429 whose Retry-After is missing, invalid or beyond the window.
    Throttled,
    /// `RESERVATION_EXPIRED`, or a bodyless 410.
    Expired,
    /// `RESERVATION_FINALIZED`.
    Finalized,
    /// `MAX_EXTENSIONS_EXCEEDED`.
    MaxExtensions,
    /// `TENANT_CLOSED`.
    TenantClosed,
    /// `NOT_FOUND`, or a bodyless 404.
    NotFound,
    /// Any other 4xx (408 included, D-8).
    Rejected,
    /// A 1xx or 3xx (or unknown class) status.
    UnexpectedStatus,
    /// The create and its one same-key retry both failed transiently.
    CreateFailed,
    /// A 4xx on a create (429 included, D-9).
    CreateRejected,
    /// The create did not yield a live reservation with an anchor.
    NoReservation,
    /// The caller cancelled.
    Cancelled,
}

impl StopReason {
    /// Every reason, in a fixed order.
    pub const ALL: [StopReason; 15] = [
        StopReason::LeaseTooShort,
        StopReason::RetryWindowExhausted,
        StopReason::NoProgress,
        StopReason::Throttled,
        StopReason::Expired,
        StopReason::Finalized,
        StopReason::MaxExtensions,
        StopReason::TenantClosed,
        StopReason::NotFound,
        StopReason::Rejected,
        StopReason::UnexpectedStatus,
        StopReason::CreateFailed,
        StopReason::CreateRejected,
        StopReason::NoReservation,
        StopReason::Cancelled,
    ];

    /// The stable string, e.g. `"retry_window_exhausted"`.
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::LeaseTooShort => "lease_too_short",
            StopReason::RetryWindowExhausted => "retry_window_exhausted",
            StopReason::NoProgress => "no_progress",
            StopReason::Throttled => "throttled",
            StopReason::Expired => "expired",
            StopReason::Finalized => "finalized",
            StopReason::MaxExtensions => "max_extensions",
            StopReason::TenantClosed => "tenant_closed",
            StopReason::NotFound => "not_found",
            StopReason::Rejected => "rejected",
            StopReason::UnexpectedStatus => "unexpected_status",
            StopReason::CreateFailed => "create_failed",
            StopReason::CreateRejected => "create_rejected",
            StopReason::NoReservation => "no_reservation",
            StopReason::Cancelled => "cancelled",
        }
    }

    /// The reason with this stable string.
    pub fn parse(s: &str) -> Option<StopReason> {
        StopReason::ALL.into_iter().find(|r| r.as_str() == s)
    }
}

impl fmt::Display for StopReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which algorithm scheduled a decision (D-4: chosen per response).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    /// The response carried `remaining_ttl_ms`: the normative algorithm.
    Primary,
    /// The response lacked it: the non-normative measured-grant fallback.
    Fallback,
}

impl Mode {
    /// `"primary"` or `"fallback"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Primary => "primary",
            Mode::Fallback => "fallback",
        }
    }
}

/// A warning attached to a decision. Stable strings.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Warning {
    /// The fallback holds a fixed cadence because the grants look like
    /// maximum-lead clamping; the server's extension budget will deplete.
    ExtensionBudgetDepleting,
}

impl Warning {
    /// Every warning, in a fixed order (that of [`Warnings::iter`]).
    pub const ALL: [Warning; 1] = [Warning::ExtensionBudgetDepleting];

    /// `"extension_budget_depleting"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Warning::ExtensionBudgetDepleting => "extension_budget_depleting",
        }
    }

    fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

/// The warnings of one decision: a set of [`Warning`]s (one byte, no
/// allocation), iterated in [`Warning::ALL`] order.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Warnings(u8);

impl Warnings {
    /// No warning.
    pub const fn new() -> Warnings {
        Warnings(0)
    }

    /// Adds `w` (a set: adding it twice keeps one).
    pub fn insert(&mut self, w: Warning) {
        self.0 |= w.bit();
    }

    /// Whether `w` is in the set.
    pub fn contains(self, w: Warning) -> bool {
        self.0 & w.bit() != 0
    }

    /// Whether there is no warning.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// How many warnings there are.
    pub fn len(self) -> usize {
        self.0.count_ones() as usize
    }

    /// The `index`-th warning in [`Warnings::iter`] order.
    pub fn get(self, index: usize) -> Option<Warning> {
        self.iter().nth(index)
    }

    /// The warnings, in [`Warning::ALL`] order.
    pub fn iter(self) -> impl Iterator<Item = Warning> {
        Warning::ALL.into_iter().filter(move |w| self.contains(*w))
    }
}

impl FromIterator<Warning> for Warnings {
    fn from_iter<I: IntoIterator<Item = Warning>>(iter: I) -> Warnings {
        let mut set = Warnings::new();
        iter.into_iter().for_each(|w| set.insert(w));
        set
    }
}

impl fmt::Debug for Warnings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// The request an attempt makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AttemptKind {
    /// `POST /v1/reservations`.
    Create,
    /// `POST /v1/reservations/{id}/extend`.
    Extend,
}

impl AttemptKind {
    /// `"create"` or `"extend"`.
    pub fn as_str(self) -> &'static str {
        match self {
            AttemptKind::Create => "create",
            AttemptKind::Extend => "extend",
        }
    }
}

/// Whether an attempt reuses the previous attempt's idempotency key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KeyUse {
    /// A key never used before (a new logical request, HB-35).
    New,
    /// Exactly the previous attempt's key and body (a retry, HB-34).
    Same,
}

impl KeyUse {
    /// `"new"` or `"same"`.
    pub fn as_str(self) -> &'static str {
        match self {
            KeyUse::New => "new",
            KeyUse::Same => "same",
        }
    }
}

/// How the outcome that led to a decision was classified.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OutcomeClass {
    /// HTTP 200 with a schema-valid body.
    Success,
    /// Another 2xx, or a 200 whose body is not schema-valid (HB-18).
    Ambiguous,
    /// A transport failure: timeout, connect error or reset.
    TransportFailure,
    /// A 5xx without a permanent error code.
    ServerError,
    /// A 429 without a permanent error code.
    Throttled,
    /// A permanent condition (P-3).
    Permanent,
    /// Any other 4xx.
    Rejected,
    /// A 1xx or 3xx.
    Unexpected,
    /// The caller cancelled.
    Cancelled,
}

impl OutcomeClass {
    /// A stable lowercase name.
    pub fn as_str(self) -> &'static str {
        match self {
            OutcomeClass::Success => "success",
            OutcomeClass::Ambiguous => "ambiguous",
            OutcomeClass::TransportFailure => "transport_failure",
            OutcomeClass::ServerError => "server_error",
            OutcomeClass::Throttled => "throttled",
            OutcomeClass::Permanent => "permanent",
            OutcomeClass::Rejected => "rejected",
            OutcomeClass::Unexpected => "unexpected",
            OutcomeClass::Cancelled => "cancelled",
        }
    }
}

/// What to do next.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Next {
    /// Send an attempt of this kind.
    Send(AttemptKind),
    /// Stop for good, for this reason.
    Stop(StopReason),
}

/// One decision of the scheduler: the answer to an outcome or a cancel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// The reservation, once a create succeeded (shared with the heartbeat:
    /// no copy per decision).
    pub reservation_id: Option<Arc<str>>,
    /// Send an attempt, or stop.
    pub next: Next,
    /// Due time of the next attempt in caller nanoseconds; `None` = +infinity.
    /// Meaningless for a stop.
    pub at_ns: Option<u64>,
    /// New or same key, for a send.
    pub key: Option<KeyUse>,
    /// 1 for the first key of this lease, 2 for the next new one, ... (a send).
    pub key_index: Option<u32>,
    /// The algorithm that decided, where one applies.
    pub mode: Option<Mode>,
    /// The numbers behind the decision.
    pub numbers: Numbers,
    /// Warnings (only `extension_budget_depleting` exists).
    pub warnings: Warnings,
    /// How the deciding outcome was classified.
    pub outcome: OutcomeClass,
    /// A human-readable detail (e.g. the Retry-After problem, the error code).
    pub detail: Option<String>,
    /// D-15: the instant (caller nanoseconds, like `at_ns`) until which the
    /// lease is proven alive: the receipt of the last primary-path success
    /// plus its lead floor. `Some(u64::MAX)` is +infinity (the sum
    /// overflowed). `None` before the first success and on the fallback
    /// path, which proves nothing. Carried by every primary decision,
    /// retries and stops included. Reaching it without a newer success puts
    /// the lease in jeopardy.
    pub proven_until_ns: Option<u64>,
    /// The deciding success's `expires_at_ms` (server clock), when this
    /// decision answers a success that carried it.
    pub expires_at_ms: Option<u64>,
    /// The deciding success's `remaining_ttl_ms`, when this decision answers
    /// a success that carried it.
    pub remaining_ttl_ms: Option<u64>,
}

impl fmt::Display for Decision {
    /// The emitted-decision JSON line ([`Decision::to_json_string`]): members
    /// in lexicographic order, every number exact (P-9).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_json_string())
    }
}

/// Marks a string member that stands for an exact JSON number text which
/// `serde_json::Value` (without its `arbitrary_precision` feature) cannot
/// hold: a retry window below -2^63, a due time with a fraction of a ms.
/// Only [`write_exact`] gives it meaning, and only at the positions a
/// decision puts numbers (`at`, `proven_until`, `numbers.*`).
pub(crate) const NUM_MARK: &str = "\u{0}#";

fn marked(text: String) -> Value {
    Value::String(format!("{NUM_MARK}{text}"))
}

/// The lossy `serde_json` number for a marked text (what [`Decision::to_json`]
/// gives, as it always did).
fn unmark(v: &mut Value) {
    if let Some(t) = v.as_str().and_then(|s| s.strip_prefix(NUM_MARK)) {
        *v = serde_json::from_str(t).unwrap_or(Value::Null);
    }
}

/// Writes an emitted-decision object as one JSON line, turning the marked
/// strings at `at`, `proven_until` and `numbers.*` into their exact number
/// text; everything else is written by `serde_json`.
pub(crate) fn write_exact(m: &Map<String, Value>) -> String {
    fn raw(v: &Value) -> String {
        match v.as_str().and_then(|s| s.strip_prefix(NUM_MARK)) {
            Some(t) => t.to_owned(),
            None => v.to_string(),
        }
    }
    let mut out = String::from("{");
    for (i, (k, v)) in m.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&Value::from(k.as_str()).to_string());
        out.push(':');
        match (k.as_str(), v) {
            ("at" | "proven_until", _) => out.push_str(&raw(v)),
            ("numbers", Value::Object(n)) => {
                out.push('{');
                for (j, (nk, nv)) in n.iter().enumerate() {
                    if j > 0 {
                        out.push(',');
                    }
                    out.push_str(&Value::from(nk.as_str()).to_string());
                    out.push(':');
                    out.push_str(&raw(nv));
                }
                out.push('}');
            }
            _ => out.push_str(&v.to_string()),
        }
    }
    out.push('}');
    out
}

impl Decision {
    /// A placeholder, overwritten before anyone sees it.
    pub(crate) fn blank() -> Decision {
        Decision {
            reservation_id: None,
            next: Next::Stop(StopReason::Cancelled),
            at_ns: None,
            key: None,
            key_index: None,
            mode: None,
            numbers: Numbers::default(),
            warnings: Warnings::new(),
            outcome: OutcomeClass::Cancelled,
            detail: None,
            proven_until_ns: None,
            expires_at_ms: None,
            remaining_ttl_ms: None,
        }
    }

    /// The stop reason, if this decision stops the heartbeat.
    pub fn stop_reason(&self) -> Option<StopReason> {
        match self.next {
            Next::Stop(r) => Some(r),
            Next::Send(_) => None,
        }
    }

    /// The emitted-decision JSON object of the scenario format (without `id`
    /// and `step`, which only a replay knows): `next`, `at` (ms), `key`,
    /// `key_index`, `reason`, `mode`, `numbers`, `warnings`, and where they
    /// apply `proven_until` (ms, `"inf"` when it overflowed), `expires_at_ms`
    /// and `remaining_ttl_ms`.
    ///
    /// `serde_json::Value` holds integers only within `i64`/`u64` and other
    /// numbers as `f64`: a retry window below -2^63, and an `at` or
    /// `proven_until` with a fraction of a millisecond on a very large clock,
    /// come out rounded here. [`Decision::to_json_string`] (and `Display`)
    /// write every number exactly (P-9); use them to print or send a decision.
    pub fn to_json(&self) -> Map<String, Value> {
        let mut m = self.to_json_marked();
        for k in ["at", "proven_until"] {
            if let Some(v) = m.get_mut(k) {
                unmark(v);
            }
        }
        if let Some(Value::Object(n)) = m.get_mut("numbers") {
            n.values_mut().for_each(unmark);
        }
        m
    }

    /// The emitted-decision JSON line, every number exact (P-9): the same
    /// members as [`Decision::to_json`], in lexicographic order.
    pub fn to_json_string(&self) -> String {
        write_exact(&self.to_json_marked())
    }

    /// [`Decision::to_json`] with exact numbers as marked strings.
    pub(crate) fn to_json_marked(&self) -> Map<String, Value> {
        let mut m = Map::new();
        match self.next {
            Next::Send(kind) => {
                m.insert("next".into(), kind.as_str().into());
                m.insert("at".into(), ns_to_ms_marked(self.at_ns));
                if let Some(k) = self.key {
                    m.insert("key".into(), k.as_str().into());
                }
                if let Some(i) = self.key_index {
                    m.insert("key_index".into(), i.into());
                }
            }
            Next::Stop(reason) => {
                m.insert("next".into(), "stop".into());
                m.insert("reason".into(), reason.as_str().into());
            }
        }
        if let Some(mode) = self.mode {
            m.insert("mode".into(), mode.as_str().into());
        }
        let numbers: Map<String, Value> = self
            .numbers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_json_marked()))
            .collect();
        m.insert("numbers".into(), Value::Object(numbers));
        m.insert(
            "warnings".into(),
            json!(self.warnings.iter().map(|w| w.as_str()).collect::<Vec<_>>()),
        );
        if let Some(p) = self.proven_until_ns {
            m.insert(
                "proven_until".into(),
                ns_to_ms_marked(Some(p).filter(|p| *p != u64::MAX)),
            );
        }
        if let Some(e) = self.expires_at_ms {
            m.insert("expires_at_ms".into(), e.into());
        }
        if let Some(r) = self.remaining_ttl_ms {
            m.insert("remaining_ttl_ms".into(), r.into());
        }
        m
    }
}

/// A nanosecond due time as scenario milliseconds: an integer when whole, else
/// a number with up to six decimals; `"inf"` for `None`.
pub fn ns_to_ms_json(at_ns: Option<u64>) -> Value {
    match at_ns {
        None => Value::from("inf"),
        Some(ns) => {
            if ns % 1_000_000 == 0 {
                Value::from(ns / 1_000_000)
            } else {
                let text = format!("{}.{:06}", ns / 1_000_000, ns % 1_000_000);
                let text = text.trim_end_matches('0');
                serde_json::from_str(text).unwrap_or(Value::Null)
            }
        }
    }
}

/// [`ns_to_ms_json`] with a fraction of a millisecond as a marked exact text.
pub(crate) fn ns_to_ms_marked(at_ns: Option<u64>) -> Value {
    match at_ns {
        Some(ns) if ns % 1_000_000 != 0 => {
            let text = format!("{}.{:06}", ns / 1_000_000, ns % 1_000_000);
            marked(text.trim_end_matches('0').to_owned())
        }
        other => ns_to_ms_json(other),
    }
}

#[cfg(test)]
mod numbers_tests {
    use super::*;

    #[test]
    fn numbers_round_trip_every_kind_of_value() {
        let edge = (1i128 << 64) - 1;
        let values = [
            None,
            Some(Num::Int(0)),
            Some(Num::Int(5)),
            Some(Num::Int(-7)),
            Some(Num::Int(edge)),
            Some(Num::Int(-edge)),
            Some(Num::Int(i128::from(i64::MIN) - 1)),
            Some(Num::Inf),
            Some(Num::NegInf),
        ];
        for (k, v) in values.iter().enumerate() {
            let mut a = [None; 14];
            for (i, slot) in a.iter_mut().enumerate() {
                *slot = values[(i + k) % values.len()];
            }
            let n = Numbers::from_array(a);
            assert_eq!(n.to_array(), a);
            for (i, name) in Numbers::NAMES.iter().enumerate() {
                assert_eq!(n.get(name), a[i]);
                assert_eq!(n.at(i), a[i]);
            }
            let mut m = n;
            m.set_at(3, *v);
            assert_eq!(m.attempt_budget(), *v);
        }
        let mut n = Numbers::default();
        n.set_next_delay(Some(Num::Int(1)));
        n.set_next_delay(None);
        assert_eq!(n, Numbers::default());
        assert!(!n.set("nope", Some(Num::Inf)));
        n.set_at(2, Some(Num::Int(1 << 70)));
        assert_eq!(n.lead_floor(), Some(Num::Int(edge)));
        assert_eq!(n.at(14), None);
    }

    #[test]
    fn warnings_are_a_set() {
        let mut w = Warnings::new();
        assert!(w.is_empty());
        w.insert(Warning::ExtensionBudgetDepleting);
        w.insert(Warning::ExtensionBudgetDepleting);
        assert_eq!(w.len(), 1);
        assert_eq!(w.get(0), Some(Warning::ExtensionBudgetDepleting));
        assert_eq!(w.get(1), None);
        assert_eq!(w.iter().collect::<Vec<_>>(), Warning::ALL);
        assert_eq!(format!("{w:?}"), "[ExtensionBudgetDepleting]");
    }
}
