//! Plain value types shared by the heartbeat, decision and arithmetic
//! functions, with their exhaustive conversions from the core's enums.

use std::ffi::c_char;

use leasebeat::{AttemptKind, KeyUse, Mode, Next, Num, OutcomeClass, StopReason, Warning};

use crate::error::guard_str;

/// +infinity for a millisecond duration (`UINT64_MAX`): pass it as
/// `request_timeout_ms` for an unknown or unbounded timeout; arithmetic
/// results use it for +infinity.
pub const LB_INFINITE_MS: u64 = u64::MAX;

/// How many numbers a decision can carry (the fields of ::lb_numbers).
pub const LB_NUMBERS_COUNT: usize = 14;

/// A transport failure kind, an input of lb_heartbeat_handle_failure(): one of
/// `LB_FAILURE_TIMEOUT`, `LB_FAILURE_CONNECT`, `LB_FAILURE_RESET`. A plain
/// integer type so that any value the caller passes can be checked.
pub type lb_failure = u32;
/// The enforced per-attempt timeout fired.
pub const LB_FAILURE_TIMEOUT: lb_failure = 0;
/// The connection could not be established.
pub const LB_FAILURE_CONNECT: lb_failure = 1;
/// The connection was reset or closed before a complete response.
pub const LB_FAILURE_RESET: lb_failure = 2;

/// Why a heartbeat stopped. The strings of lb_stop_reason_str() are stable and
/// the same in every language. `LB_STOP_REASON_NONE` means "not stopped".
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum lb_stop_reason {
    /// Not stopped (no reason).
    None = 0,
    /// Two consecutive successes left no room for a positive delay (HB-33).
    LeaseTooShort = 1,
    /// No complete retry plus margin fits in the proven lead (HB-22, HB-27).
    RetryWindowExhausted = 2,
    /// Consecutive failures without elapsed time advancing (HB-28).
    NoProgress = 3,
    /// A 429 whose Retry-After is missing, invalid or beyond the window.
    Throttled = 4,
    /// `RESERVATION_EXPIRED`, or a bodyless 410.
    Expired = 5,
    /// `RESERVATION_FINALIZED`.
    Finalized = 6,
    /// `MAX_EXTENSIONS_EXCEEDED`.
    MaxExtensions = 7,
    /// `TENANT_CLOSED`.
    TenantClosed = 8,
    /// `NOT_FOUND`, or a bodyless 404.
    NotFound = 9,
    /// Any other 4xx (408 included, D-8).
    Rejected = 10,
    /// A 1xx or 3xx (or unknown class) status.
    UnexpectedStatus = 11,
    /// The create and its one same-key retry both failed transiently.
    CreateFailed = 12,
    /// A 4xx on a create (429 included, D-9).
    CreateRejected = 13,
    /// The create did not yield a live reservation with an anchor.
    NoReservation = 14,
    /// The caller cancelled.
    Cancelled = 15,
}

impl lb_stop_reason {
    /// The C value of a core reason (exhaustive: a new reason must be mapped).
    pub fn from_core(r: StopReason) -> lb_stop_reason {
        match r {
            StopReason::LeaseTooShort => lb_stop_reason::LeaseTooShort,
            StopReason::RetryWindowExhausted => lb_stop_reason::RetryWindowExhausted,
            StopReason::NoProgress => lb_stop_reason::NoProgress,
            StopReason::Throttled => lb_stop_reason::Throttled,
            StopReason::Expired => lb_stop_reason::Expired,
            StopReason::Finalized => lb_stop_reason::Finalized,
            StopReason::MaxExtensions => lb_stop_reason::MaxExtensions,
            StopReason::TenantClosed => lb_stop_reason::TenantClosed,
            StopReason::NotFound => lb_stop_reason::NotFound,
            StopReason::Rejected => lb_stop_reason::Rejected,
            StopReason::UnexpectedStatus => lb_stop_reason::UnexpectedStatus,
            StopReason::CreateFailed => lb_stop_reason::CreateFailed,
            StopReason::CreateRejected => lb_stop_reason::CreateRejected,
            StopReason::NoReservation => lb_stop_reason::NoReservation,
            StopReason::Cancelled => lb_stop_reason::Cancelled,
        }
    }

    /// `from_core` for an optional reason.
    pub fn from_option(r: Option<StopReason>) -> lb_stop_reason {
        r.map_or(lb_stop_reason::None, lb_stop_reason::from_core)
    }
}

/// What a decision asks for next: the vocabulary of the scenario format's
/// `next` (`"extend"`, `"create"`, `"stop"`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum lb_next {
    /// Send a create attempt (`POST /v1/reservations`), e.g. the create retry.
    Create = 0,
    /// Send an extend attempt (`POST /v1/reservations/{id}/extend`).
    Extend = 1,
    /// Stop for good (see the stop reason).
    Stop = 2,
}

impl lb_next {
    /// The C value of a core `Next`.
    pub fn from_core(n: Next) -> lb_next {
        match n {
            Next::Send(kind) => lb_next::from_kind(kind),
            Next::Stop(_) => lb_next::Stop,
        }
    }

    /// The C value of an attempt kind.
    pub fn from_kind(kind: AttemptKind) -> lb_next {
        match kind {
            AttemptKind::Create => lb_next::Create,
            AttemptKind::Extend => lb_next::Extend,
        }
    }
}

/// Whether an attempt uses a new idempotency key or the previous attempt's.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum lb_key_use {
    /// Not applicable (a stop).
    None = 0,
    /// A key never used before on this lease (a new logical request, HB-35).
    New = 1,
    /// Exactly the previous attempt's key and byte-identical body (a retry, HB-34).
    Same = 2,
}

impl lb_key_use {
    /// The C value of an optional core key use.
    pub fn from_option(k: Option<KeyUse>) -> lb_key_use {
        match k {
            None => lb_key_use::None,
            Some(KeyUse::New) => lb_key_use::New,
            Some(KeyUse::Same) => lb_key_use::Same,
        }
    }
}

/// Which algorithm decided (D-4: chosen per response).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum lb_mode {
    /// No mode applies (e.g. before the first success).
    None = 0,
    /// The response carried `remaining_ttl_ms`: the normative algorithm.
    Primary = 1,
    /// The response lacked it: the non-normative measured-grant fallback.
    Fallback = 2,
}

impl lb_mode {
    /// The C value of an optional core mode.
    pub fn from_option(m: Option<Mode>) -> lb_mode {
        match m {
            None => lb_mode::None,
            Some(Mode::Primary) => lb_mode::Primary,
            Some(Mode::Fallback) => lb_mode::Fallback,
        }
    }
}

/// How the outcome that led to a decision was classified.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum lb_outcome {
    /// HTTP 200 with a schema-valid body.
    Success = 0,
    /// Another 2xx, or a 200 whose body is not schema-valid (HB-18).
    Ambiguous = 1,
    /// A transport failure: timeout, connect error or reset.
    TransportFailure = 2,
    /// A 5xx without a permanent error code.
    ServerError = 3,
    /// A 429 without a permanent error code.
    Throttled = 4,
    /// A permanent condition (P-3).
    Permanent = 5,
    /// Any other 4xx.
    Rejected = 6,
    /// A 1xx or 3xx.
    Unexpected = 7,
    /// The caller cancelled.
    Cancelled = 8,
}

impl lb_outcome {
    /// The C value of a core outcome class (exhaustive).
    pub fn from_core(o: OutcomeClass) -> lb_outcome {
        match o {
            OutcomeClass::Success => lb_outcome::Success,
            OutcomeClass::Ambiguous => lb_outcome::Ambiguous,
            OutcomeClass::TransportFailure => lb_outcome::TransportFailure,
            OutcomeClass::ServerError => lb_outcome::ServerError,
            OutcomeClass::Throttled => lb_outcome::Throttled,
            OutcomeClass::Permanent => lb_outcome::Permanent,
            OutcomeClass::Rejected => lb_outcome::Rejected,
            OutcomeClass::Unexpected => lb_outcome::Unexpected,
            OutcomeClass::Cancelled => lb_outcome::Cancelled,
        }
    }
}

/// A warning attached to a decision. Stable strings via lb_warning_str().
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum lb_warning {
    /// The fallback holds a fixed cadence because the grants look like
    /// maximum-lead clamping; the server's extension budget will deplete.
    ExtensionBudgetDepleting = 0,
}

impl lb_warning {
    /// The C value of a core warning (exhaustive).
    pub fn from_core(w: Warning) -> lb_warning {
        match w {
            Warning::ExtensionBudgetDepleting => lb_warning::ExtensionBudgetDepleting,
        }
    }
}

/// The kind of an ::lb_num.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum lb_num_kind {
    /// The number does not apply to this decision (not present).
    Absent = 0,
    /// -infinity (the retry window when the budget is unbounded).
    NegInf = 1,
    /// A finite number of milliseconds: `negative` and `magnitude` hold it.
    Finite = 2,
    /// +infinity (an unbounded budget, an overflowing due time).
    PosInf = 3,
}

/// A millisecond quantity that may be absent or infinite, without loss.
///
/// Finite values lie strictly between -2^64 and 2^64 (a retry window can be
/// below `INT64_MIN`), so a finite value is stored as a sign and a `uint64_t`
/// magnitude: the value is `negative ? -magnitude : magnitude`. Zero is never
/// negative. It fits an `int64_t` exactly when `!negative && magnitude <=
/// INT64_MAX` or `negative && magnitude <= (uint64_t)INT64_MAX + 1`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct lb_num {
    /// Absent, -infinity, finite or +infinity.
    pub kind: lb_num_kind,
    /// For a finite value: true when it is below zero.
    pub negative: bool,
    /// For a finite value: its absolute value. 0 otherwise.
    pub magnitude: u64,
}

impl lb_num {
    /// The absent number.
    pub(crate) const ABSENT: lb_num = lb_num {
        kind: lb_num_kind::Absent,
        negative: false,
        magnitude: 0,
    };

    /// The C form of a core number. Finite core values lie strictly between
    /// -2^64 and 2^64, so the magnitude always fits; should one not, this
    /// panics (caught at the boundary) instead of losing it.
    pub fn from_num(n: Num) -> lb_num {
        match n {
            Num::NegInf => lb_num {
                kind: lb_num_kind::NegInf,
                negative: false,
                magnitude: 0,
            },
            Num::Inf => lb_num {
                kind: lb_num_kind::PosInf,
                negative: false,
                magnitude: 0,
            },
            Num::Int(v) => lb_num {
                kind: lb_num_kind::Finite,
                negative: v < 0,
                magnitude: u64::try_from(v.unsigned_abs())
                    .expect("core numbers lie strictly between -2^64 and 2^64"),
            },
        }
    }

    /// `from_num` for an optional number.
    pub fn from_option(n: Option<Num>) -> lb_num {
        n.map_or(lb_num::ABSENT, lb_num::from_num)
    }

    /// A duration where `u64::MAX` is +infinity.
    pub fn from_ms(ms: u64) -> lb_num {
        lb_num::from_num(Num::from_ms(ms))
    }
}

/// A due time in caller nanoseconds that may be +infinity (never).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct lb_time {
    /// True for +infinity; `ns` is then 0.
    pub infinite: bool,
    /// The time in monotonic nanoseconds when not infinite.
    pub ns: u64,
}

impl lb_time {
    /// `None` (the core's +infinity) becomes `infinite`.
    pub fn from_option(t: Option<u64>) -> lb_time {
        match t {
            Some(ns) => lb_time {
                infinite: false,
                ns,
            },
            None => lb_time {
                infinite: true,
                ns: 0,
            },
        }
    }
}

/// The NUL-terminated static copy of one of the core's stable strings, from a
/// fixed table (a unit test checks that every core string is in it).
fn nul(s: &'static str) -> &'static [u8] {
    const TABLE: &[&[u8]] = &[
        b"lease_too_short\0",
        b"retry_window_exhausted\0",
        b"no_progress\0",
        b"throttled\0",
        b"expired\0",
        b"finalized\0",
        b"max_extensions\0",
        b"tenant_closed\0",
        b"not_found\0",
        b"rejected\0",
        b"unexpected_status\0",
        b"create_failed\0",
        b"create_rejected\0",
        b"no_reservation\0",
        b"cancelled\0",
        b"create\0",
        b"extend\0",
        b"stop\0",
        b"new\0",
        b"same\0",
        b"primary\0",
        b"fallback\0",
        b"success\0",
        b"ambiguous\0",
        b"transport_failure\0",
        b"server_error\0",
        b"permanent\0",
        b"unexpected\0",
        b"extension_budget_depleting\0",
        b"timeout\0",
        b"connect\0",
        b"reset\0",
        b"none\0",
    ];
    TABLE
        .iter()
        .copied()
        .find(|t| &t[..t.len() - 1] == s.as_bytes())
        .unwrap_or(b"unknown\0")
}

fn find<T: Copy>(all: &[T], value: i32, code: impl Fn(T) -> i32) -> Option<T> {
    all.iter().copied().find(|v| code(*v) == value)
}

/// The stable string of a stop reason value (`"retry_window_exhausted"`, ...;
/// `"none"` for `LB_STOP_REASON_NONE`), the same in every language. Never
/// NULL: an unknown value gives `"unknown"`. Static; do not free.
#[unsafe(no_mangle)]
pub extern "C" fn lb_stop_reason_str(reason: i32) -> *const c_char {
    guard_str(
        || match find(&StopReason::ALL, reason, |r| {
            lb_stop_reason::from_core(r) as i32
        }) {
            Some(r) => nul(r.as_str()),
            None if reason == lb_stop_reason::None as i32 => b"none\0",
            None => b"unknown\0",
        },
        b"unknown\0",
    )
}

/// The stable string of an ::lb_next value: `"create"`, `"extend"` or
/// `"stop"`. Never NULL (`"unknown"` for other values). Static.
#[unsafe(no_mangle)]
pub extern "C" fn lb_next_str(next: i32) -> *const c_char {
    guard_str(
        || match next {
            n if n == lb_next::Create as i32 => nul(AttemptKind::Create.as_str()),
            n if n == lb_next::Extend as i32 => nul(AttemptKind::Extend.as_str()),
            n if n == lb_next::Stop as i32 => b"stop\0",
            _ => b"unknown\0",
        },
        b"unknown\0",
    )
}

/// The stable string of an ::lb_key_use value: `"new"`, `"same"` or `"none"`.
/// Never NULL (`"unknown"` for other values). Static.
#[unsafe(no_mangle)]
pub extern "C" fn lb_key_use_str(key_use: i32) -> *const c_char {
    guard_str(
        || match find(&[KeyUse::New, KeyUse::Same], key_use, |k| {
            lb_key_use::from_option(Some(k)) as i32
        }) {
            Some(k) => nul(k.as_str()),
            None if key_use == lb_key_use::None as i32 => b"none\0",
            None => b"unknown\0",
        },
        b"unknown\0",
    )
}

/// The stable string of an ::lb_mode value: `"primary"`, `"fallback"` or
/// `"none"`. Never NULL (`"unknown"` for other values). Static.
#[unsafe(no_mangle)]
pub extern "C" fn lb_mode_str(mode: i32) -> *const c_char {
    guard_str(
        || match find(&[Mode::Primary, Mode::Fallback], mode, |m| {
            lb_mode::from_option(Some(m)) as i32
        }) {
            Some(m) => nul(m.as_str()),
            None if mode == lb_mode::None as i32 => b"none\0",
            None => b"unknown\0",
        },
        b"unknown\0",
    )
}

/// The stable string of an ::lb_outcome value (`"success"`, `"ambiguous"`,
/// `"transport_failure"`, ...). Never NULL (`"unknown"` for other values).
#[unsafe(no_mangle)]
pub extern "C" fn lb_outcome_str(outcome: i32) -> *const c_char {
    const ALL: [OutcomeClass; 9] = [
        OutcomeClass::Success,
        OutcomeClass::Ambiguous,
        OutcomeClass::TransportFailure,
        OutcomeClass::ServerError,
        OutcomeClass::Throttled,
        OutcomeClass::Permanent,
        OutcomeClass::Rejected,
        OutcomeClass::Unexpected,
        OutcomeClass::Cancelled,
    ];
    guard_str(
        || {
            find(&ALL, outcome, |o| lb_outcome::from_core(o) as i32)
                .map_or(&b"unknown\0"[..], |o| nul(o.as_str()))
        },
        b"unknown\0",
    )
}

/// The stable string of an ::lb_warning value
/// (`"extension_budget_depleting"`). Never NULL (`"unknown"` otherwise).
#[unsafe(no_mangle)]
pub extern "C" fn lb_warning_str(warning: i32) -> *const c_char {
    guard_str(
        || {
            find(&[Warning::ExtensionBudgetDepleting], warning, |w| {
                lb_warning::from_core(w) as i32
            })
            .map_or(&b"unknown\0"[..], |w| nul(w.as_str()))
        },
        b"unknown\0",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_core_string_has_a_c_copy() {
        for r in StopReason::ALL {
            assert_ne!(nul(r.as_str()), b"unknown\0", "{r}");
        }
        let others = [
            AttemptKind::Create.as_str(),
            AttemptKind::Extend.as_str(),
            KeyUse::New.as_str(),
            KeyUse::Same.as_str(),
            Mode::Primary.as_str(),
            Mode::Fallback.as_str(),
            Warning::ExtensionBudgetDepleting.as_str(),
        ];
        for s in others {
            assert_ne!(nul(s), b"unknown\0", "{s}");
        }
    }

    #[test]
    fn numbers_keep_their_value() {
        let n = lb_num::from_num(Num::Int(-(1i128 << 64) + 1));
        assert_eq!((n.negative, n.magnitude), (true, u64::MAX));
        let n = lb_num::from_num(Num::Int(0));
        assert!(!n.negative);
        assert_eq!(lb_num::from_ms(u64::MAX).kind, lb_num_kind::PosInf);
    }
}
