//! The scheduling arithmetic alone, as pure functions.
//!
//! Rule ids are those of the [heartbeat contract](https://github.com/leasebeat/leasebeat/blob/main/docs/heartbeat-contract.md).
//!
//! Everything here works in integer milliseconds. A duration is a `u64` in which
//! [`INFINITE`] (`u64::MAX`) stands for +infinity (P-2): any sum or product that
//! would overflow saturates to it, and it never wraps. Rounding is always
//! conservative (rtt and elapsed times round *up*, so leads round down; `/4`
//! floors; budgets and margins round up).
//!
//! The state machine in [`crate::Heartbeat`] uses exactly these functions, so a
//! binding or a test can check one number without driving a whole lease.

use crate::decision::Num;

/// +infinity for a millisecond duration (`u64::MAX`, P-2).
pub const INFINITE: u64 = u64::MAX;

/// The floor of the attempt budget and of the safety margin: 1000 ms.
pub const MIN_BUDGET_MS: u64 = 1000;

/// The cap on a retry delay after a transient failure: 30000 ms.
pub const MAX_RETRY_DELAY_MS: u64 = 30_000;

const NS_PER_MS: u64 = 1_000_000;

/// Saturating addition where [`INFINITE`] absorbs everything.
#[inline]
pub fn add(a: u64, b: u64) -> u64 {
    a.saturating_add(b)
}

/// Saturating doubling where [`INFINITE`] stays infinite.
#[inline]
pub fn double(a: u64) -> u64 {
    a.saturating_mul(2)
}

/// A nanosecond interval rounded *up* to whole milliseconds (HB-05/06, P-4).
///
/// ```
/// assert_eq!(leasebeat::arith::ceil_ms(1_500_000_001), 1501);
/// assert_eq!(leasebeat::arith::ceil_ms(1_500_000_000), 1500);
/// assert_eq!(leasebeat::arith::ceil_ms(0), 0);
/// ```
#[inline]
pub fn ceil_ms(nanos: u64) -> u64 {
    nanos.div_ceil(NS_PER_MS)
}

/// `at + delay_ms` in nanoseconds, or `None` when the sum overflows `u64`
/// nanoseconds (a due time of +infinity, P-2). An infinite delay is an infinite
/// due time.
#[inline]
pub fn due_after(at_ns: u64, delay_ms: u64) -> Option<u64> {
    if delay_ms == INFINITE {
        return None;
    }
    delay_ms
        .checked_mul(NS_PER_MS)
        .and_then(|d| at_ns.checked_add(d))
}

/// `attempt_budget = max(request_timeout_ms, 1000, 2 x max_rtt)`.
///
/// `None` (an unknown or unbounded timeout, HB-12/13) and `u64::MAX` both give
/// +infinity.
///
/// ```
/// use leasebeat::arith::{attempt_budget, INFINITE};
/// assert_eq!(attempt_budget(Some(10_000), 1_500), 10_000);
/// assert_eq!(attempt_budget(Some(200), 300), 1_000);
/// assert_eq!(attempt_budget(Some(2_000), 1_500), 3_000);
/// assert_eq!(attempt_budget(None, 0), INFINITE);
/// ```
#[inline]
pub fn attempt_budget(request_timeout_ms: Option<u64>, max_rtt_ms: u64) -> u64 {
    let timeout = request_timeout_ms.unwrap_or(INFINITE);
    timeout.max(MIN_BUDGET_MS).max(double(max_rtt_ms))
}

/// `safety_margin = max(1000, 2 x max_rtt)`.
///
/// ```
/// assert_eq!(leasebeat::arith::safety_margin(1_500), 3_000);
/// assert_eq!(leasebeat::arith::safety_margin(20), 1_000);
/// ```
#[inline]
pub fn safety_margin(max_rtt_ms: u64) -> u64 {
    MIN_BUDGET_MS.max(double(max_rtt_ms))
}

/// `retry_reserve = 2 x attempt_budget + safety_margin`, saturating.
#[inline]
pub fn retry_reserve(attempt_budget_ms: u64, safety_margin_ms: u64) -> u64 {
    add(double(attempt_budget_ms), safety_margin_ms)
}

/// The numbers of the primary algorithm for one schema-valid success.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PrimarySchedule {
    /// `max(0, remaining_ttl_ms - rtt)`; 0 when timing is unknown (HB-12).
    pub lead_floor: u64,
    /// `max(request_timeout_ms, 1000, 2 x max_rtt)`.
    pub attempt_budget: u64,
    /// `max(1000, 2 x max_rtt)`.
    pub safety_margin: u64,
    /// `2 x attempt_budget + safety_margin`.
    pub retry_reserve: u64,
    /// `max(0, lead_floor - retry_reserve)`; the next beat is due this long
    /// after the response was received.
    pub next_delay: u64,
}

/// The primary schedule from one success (HB-03): `remaining_ttl_ms` from the
/// response, the rounded-up `rtt_ms` of the attempt that produced it (`None`
/// when its timing is unknown), the enforced timeout (`None` = unbounded) and
/// the largest rtt observed over this lease's successes, this one included.
///
/// The protocol's worked examples:
///
/// ```
/// use leasebeat::arith::primary_schedule;
/// // 10 s timeout, 1.5 s rtt, 61.5 s remaining: next beat 37 s after receipt.
/// let s = primary_schedule(61_500, Some(1_500), Some(10_000), 1_500);
/// assert_eq!((s.lead_floor, s.attempt_budget, s.safety_margin), (60_000, 10_000, 3_000));
/// assert_eq!((s.retry_reserve, s.next_delay), (23_000, 37_000));
///
/// // A 30 s timeout with a 60 s lead leaves no room: beat at once.
/// let s = primary_schedule(60_000, Some(0), Some(30_000), 0);
/// assert_eq!(s.retry_reserve, 61_000);
/// assert_eq!(s.next_delay, 0);
/// ```
#[inline]
pub fn primary_schedule(
    remaining_ttl_ms: u64,
    rtt_ms: Option<u64>,
    request_timeout_ms: Option<u64>,
    max_rtt_ms: u64,
) -> PrimarySchedule {
    let attempt_budget = attempt_budget(request_timeout_ms, max_rtt_ms);
    let safety_margin = safety_margin(max_rtt_ms);
    let retry_reserve = retry_reserve(attempt_budget, safety_margin);
    let (lead_floor, next_delay) = match rtt_ms {
        // HB-12: unknown timing is never zero elapsed time.
        None => (0, 0),
        Some(rtt) => {
            let lead_floor = remaining_ttl_ms.saturating_sub(rtt);
            let next_delay = if retry_reserve == INFINITE {
                0
            } else {
                lead_floor.saturating_sub(retry_reserve)
            };
            (lead_floor, next_delay)
        }
    };
    PrimarySchedule {
        lead_floor,
        attempt_budget,
        safety_margin,
        retry_reserve,
        next_delay,
    }
}

/// What the primary path may do after a transient failure (HB-21/22).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryWindow {
    /// `max(0, last lead_floor - elapsed)`: the current lead estimate.
    pub lead: u64,
    /// `lead - attempt_budget - safety_margin`, not clamped; `NegInf` when the
    /// budget plus margin is infinite.
    pub window: Num,
    /// `min(30000, lead / 4, window)` when `window >= 0`, else `None` (stop).
    pub delay: Option<u64>,
}

/// The retry window after a transient failure observed `elapsed_ms` (rounded
/// up) after the receipt of the success that set `lead_floor_ms`.
///
/// ```
/// use leasebeat::arith::retry_window;
/// use leasebeat::Num;
/// // The repeated-503 sequence: remaining 60000, timeout 7000, first failure at 45000.
/// let r = retry_window(60_000, 45_000, 7_000, 1_000);
/// assert_eq!((r.lead, r.window, r.delay), (15_000, Num::Int(7_000), Some(3_750)));
/// let r = retry_window(60_000, 52_000, 7_000, 1_000);
/// assert_eq!((r.window, r.delay), (Num::Int(0), Some(0)));
/// let r = retry_window(60_000, 52_001, 7_000, 1_000);
/// assert_eq!((r.window, r.delay), (Num::Int(-1), None));
/// ```
pub fn retry_window(
    lead_floor_ms: u64,
    elapsed_ms: u64,
    attempt_budget_ms: u64,
    safety_margin_ms: u64,
) -> RetryWindow {
    let lead = lead_floor_ms.saturating_sub(elapsed_ms);
    let reserve = add(attempt_budget_ms, safety_margin_ms);
    let window = if reserve == INFINITE {
        Num::NegInf
    } else {
        Num::Int(i128::from(lead) - i128::from(reserve))
    };
    let delay = match window {
        Num::Int(w) if w >= 0 => {
            // 0 <= w <= lead <= u64::MAX, so the cast is exact.
            let w = w as u64;
            Some(MAX_RETRY_DELAY_MS.min(lead / 4).min(w))
        }
        _ => None,
    };
    RetryWindow {
        lead,
        window,
        delay,
    }
}

/// Why a `Retry-After` value cannot be used (D-11, P-5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetryAfterError {
    /// No `Retry-After` header at all.
    Missing,
    /// More than one value: a repeated header or a comma-separated list.
    Multiple,
    /// Not one delta-seconds value: empty, a sign, a fraction, an HTTP-date, ...
    Invalid,
    /// The seconds, or the seconds x 1000, overflow `u64`.
    Overflow,
}

impl RetryAfterError {
    /// A stable lowercase name for logs and bindings.
    pub fn as_str(self) -> &'static str {
        match self {
            RetryAfterError::Missing => "missing",
            RetryAfterError::Multiple => "multiple",
            RetryAfterError::Invalid => "invalid",
            RetryAfterError::Overflow => "overflow",
        }
    }
}

/// Parses the `Retry-After` values of one response into milliseconds.
///
/// `values` holds every value of every header whose name is `Retry-After`
/// (compare names case-insensitively before calling, or use
/// [`crate::Response::retry_after_ms`]). Exactly one value is accepted, made of
/// ASCII digits with optional surrounding SP/HTAB; no sign, fraction, list or
/// HTTP-date (the protocol allows only delta-seconds).
///
/// ```
/// use leasebeat::arith::{parse_retry_after, RetryAfterError};
/// assert_eq!(parse_retry_after(&[b" 2 "]), Ok(2_000));
/// assert_eq!(parse_retry_after(&[b"0"]), Ok(0));
/// assert_eq!(parse_retry_after(&[b"+3"]), Err(RetryAfterError::Invalid));
/// assert_eq!(parse_retry_after(&[b"2, 3"]), Err(RetryAfterError::Multiple));
/// assert_eq!(parse_retry_after(&[b"18446744073709552"]), Err(RetryAfterError::Overflow));
/// let none: [&[u8]; 0] = [];
/// assert_eq!(parse_retry_after(&none), Err(RetryAfterError::Missing));
/// ```
pub fn parse_retry_after<V: AsRef<[u8]>>(values: &[V]) -> Result<u64, RetryAfterError> {
    let value = match values {
        [] => return Err(RetryAfterError::Missing),
        [one] => one.as_ref(),
        _ => return Err(RetryAfterError::Multiple),
    };
    let trimmed = trim_ows(value);
    if trimmed.contains(&b',') {
        return Err(RetryAfterError::Multiple);
    }
    if trimmed.is_empty() || !trimmed.iter().all(u8::is_ascii_digit) {
        return Err(RetryAfterError::Invalid);
    }
    let mut seconds: u64 = 0;
    for digit in trimmed {
        seconds = seconds
            .checked_mul(10)
            .and_then(|s| s.checked_add(u64::from(digit - b'0')))
            .ok_or(RetryAfterError::Overflow)?;
    }
    seconds.checked_mul(1000).ok_or(RetryAfterError::Overflow)
}

fn trim_ows(mut v: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = v {
        v = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = v {
        v = rest;
    }
    v
}

/// The fallback's "hold" cadence: `max(1000, min(ttl / 2, 30000))` (FB-03).
///
/// ```
/// assert_eq!(leasebeat::arith::hold_cadence(60_000), 30_000);
/// assert_eq!(leasebeat::arith::hold_cadence(4_000), 2_000);
/// assert_eq!(leasebeat::arith::hold_cadence(1_000), 1_000);
/// ```
pub fn hold_cadence(ttl_ms: u64) -> u64 {
    MIN_BUDGET_MS.max((ttl_ms / 2).min(MAX_RETRY_DELAY_MS))
}

/// The fallback cadence chosen after an extension success (FB-03).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FallbackCadence {
    /// The delay between beats, never below 1000 ms.
    pub cadence: u64,
    /// True when the "hold" branch was taken (grant <= 0, or grant inside the
    /// band around elapsed): the extension budget will deplete.
    pub hold: bool,
}

/// FB-03, first match wins: (1) `grant <= 0`: hold; (2) `grant >= 0.9 x ttl`:
/// `clamp(grant / 2, 1000, ttl / 2)`; (3) `0.75 x elapsed <= grant <= 1.25 x
/// elapsed`: hold; (4) otherwise `clamp(grant / 2, 1000, ttl / 2)`. Halves
/// floor; the comparisons are exact (integer cross-multiplication).
///
/// ```
/// use leasebeat::arith::fallback_cadence;
/// // Normal regime: a full grant of 60 s beats every 30 s.
/// assert_eq!(fallback_cadence(60_000, 30_000, 60_000).cadence, 30_000);
/// // Maximum-lead clamp: the grant echoes the 30 s spacing; hold and warn.
/// assert!(fallback_cadence(30_000, 30_000, 60_000).hold);
/// // Per-extension cap of 10 s against 30 s spacing: beat every 5 s.
/// assert_eq!(fallback_cadence(10_000, 30_000, 60_000).cadence, 5_000);
/// ```
pub fn fallback_cadence(grant_ms: i128, elapsed_ms: u64, ttl_ms: u64) -> FallbackCadence {
    let hold = FallbackCadence {
        cadence: hold_cadence(ttl_ms),
        hold: true,
    };
    if grant_ms <= 0 {
        return hold;
    }
    let ttl = i128::from(ttl_ms);
    let elapsed = i128::from(elapsed_ms);
    let half = FallbackCadence {
        cadence: clamp_half(grant_ms, ttl_ms),
        hold: false,
    };
    if grant_ms.saturating_mul(10) >= ttl * 9 {
        return half;
    }
    let g4 = grant_ms.saturating_mul(4);
    if g4 >= elapsed * 3 && g4 <= elapsed * 5 {
        return hold;
    }
    half
}

fn clamp_half(grant_ms: i128, ttl_ms: u64) -> u64 {
    let half = u64::try_from(grant_ms / 2).unwrap_or(INFINITE);
    MIN_BUDGET_MS.max(half.min(ttl_ms / 2))
}

/// FB-04: how many whole cadences to skip after an extension success with a
/// positive grant.
///
/// `lead_min_ms` is the lead lower bound at the observation time; the first
/// candidate due time is one cadence later, where the bound is `lead_min -
/// cadence`. The due time is pushed one more cadence while the bound at it is
/// still `>= 1.5 x grant`. Returns the number of pushes.
///
/// ```
/// use leasebeat::arith::fallback_skips;
/// // lead_min 100 s, grant 20 s, cadence 10 s: bounds at the candidates are
/// // 90, 80, ..., 30 (>= 30 skips), 20 (stop): 7 skips.
/// assert_eq!(fallback_skips(100_000, 20_000, 10_000), 7);
/// assert_eq!(fallback_skips(10_000, 20_000, 10_000), 0);
/// ```
pub fn fallback_skips(lead_min_ms: i128, grant_ms: i128, cadence_ms: u64) -> u64 {
    if grant_ms <= 0 || cadence_ms == 0 {
        return 0;
    }
    // Largest k >= 0 with 2 x (lead_min - (k + 1) x cadence) >= 3 x grant.
    let c = i128::from(cadence_ms);
    let numerator = lead_min_ms
        .saturating_mul(2)
        .saturating_sub(grant_ms.saturating_mul(3))
        .saturating_sub(c * 2);
    if numerator < 0 {
        return 0;
    }
    u64::try_from(numerator / (2 * c) + 1).unwrap_or(INFINITE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skips_match_the_loop_definition() {
        for lead in [-5_000i128, 0, 999, 30_000, 45_000, 46_000, 100_000, 123_457] {
            for grant in [-1i128, 0, 1, 1_000, 10_000, 20_000, 30_000] {
                for cadence in [1_000u64, 1_500, 10_000, 30_000] {
                    let mut k = 0u64;
                    if grant > 0 {
                        while 2 * (lead - i128::from(k + 1) * i128::from(cadence)) >= 3 * grant {
                            k += 1;
                        }
                    }
                    assert_eq!(
                        fallback_skips(lead, grant, cadence),
                        k,
                        "{lead} {grant} {cadence}"
                    );
                }
            }
        }
    }

    #[test]
    fn extreme_inputs_saturate() {
        let s = primary_schedule(i64::MAX as u64, Some(0), Some(u64::MAX - 1), u64::MAX);
        assert_eq!(s.attempt_budget, INFINITE);
        assert_eq!(s.retry_reserve, INFINITE);
        assert_eq!(s.next_delay, 0);
        let r = retry_window(u64::MAX, 0, INFINITE, 1000);
        assert_eq!(r.window, Num::NegInf);
        assert_eq!(due_after(u64::MAX - 5, 1), None);
        assert_eq!(fallback_skips(i128::MAX, 1, 1000), u64::MAX);
        let _ = fallback_cadence(i128::MAX, u64::MAX, u64::MAX);
        let _ = fallback_cadence(i128::MIN, 0, 0);
    }
}
