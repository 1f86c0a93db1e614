//! The scheduling arithmetic alone, as pure functions over `uint64_t`
//! milliseconds where `LB_INFINITE_MS` (`UINT64_MAX`) is +infinity. Each one
//! calls the core's function of the same name; none re-implements a rule.

use leasebeat::arith;

use crate::buf::{check_out, try_slice, write_out};
use crate::error::{guard, lb_status};
use crate::types::lb_num;

fn put<T>(out: *mut T, value: impl FnOnce() -> T) -> lb_status {
    guard(|| {
        check_out(out, "out")?;
        let v = value();
        // SAFETY: `out` was checked non-NULL; the caller promises it is writable.
        unsafe { write_out(out, v) };
        Ok(())
    })
}

/// The numbers of the primary algorithm for one schema-valid success.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct lb_schedule {
    /// `max(0, remaining_ttl_ms - rtt)`; 0 when timing is unknown (HB-12).
    pub lead_floor: u64,
    /// `max(request_timeout_ms, 1000, 2 x max_rtt)`; `LB_INFINITE_MS` = +infinity.
    pub attempt_budget: u64,
    /// `max(1000, 2 x max_rtt)`.
    pub safety_margin: u64,
    /// `2 x attempt_budget + safety_margin`, saturating.
    pub retry_reserve: u64,
    /// `max(0, lead_floor - retry_reserve)`: the next beat is due this long
    /// after the response was received.
    pub next_delay: u64,
}

/// The primary schedule from one success (HB-03): `remaining_ttl_ms` from the
/// response; the rounded-up `rtt_ms` of the attempt that produced it when
/// `rtt_known` (otherwise timing is unknown and `rtt_ms` is ignored); the
/// enforced `request_timeout_ms` (`LB_INFINITE_MS` = unbounded); and the
/// largest rtt of this lease's successes, this one included. Worked example:
/// (61500, true, 1500, 10000, 1500) gives next_delay 37000.
#[unsafe(no_mangle)]
pub extern "C" fn lb_primary_schedule(
    remaining_ttl_ms: u64,
    rtt_known: bool,
    rtt_ms: u64,
    request_timeout_ms: u64,
    max_rtt_ms: u64,
    out: *mut lb_schedule,
) -> lb_status {
    put(out, || {
        let rtt = rtt_known.then_some(rtt_ms);
        let s =
            arith::primary_schedule(remaining_ttl_ms, rtt, Some(request_timeout_ms), max_rtt_ms);
        lb_schedule {
            lead_floor: s.lead_floor,
            attempt_budget: s.attempt_budget,
            safety_margin: s.safety_margin,
            retry_reserve: s.retry_reserve,
            next_delay: s.next_delay,
        }
    })
}

/// What the primary path may do after a transient failure (HB-21/22).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct lb_window {
    /// `max(0, lead_floor - elapsed)`: the current lead estimate.
    pub lead: u64,
    /// `lead - attempt_budget - safety_margin`, not clamped: finite (possibly
    /// negative) or -infinity when the budget plus margin is infinite.
    pub window: lb_num,
    /// True when a retry fits (`window >= 0`); false means stop.
    pub has_delay: bool,
    /// `min(30000, lead / 4, window)` when `has_delay`; 0 otherwise.
    pub delay: u64,
}

/// The retry window after a transient failure observed `elapsed_ms` (rounded
/// up) after the receipt of the success that set `lead_floor_ms`. Example:
/// (60000, 45000, 7000, 1000) gives lead 15000, window 7000, delay 3750.
#[unsafe(no_mangle)]
pub extern "C" fn lb_retry_window(
    lead_floor_ms: u64,
    elapsed_ms: u64,
    attempt_budget_ms: u64,
    safety_margin_ms: u64,
    out: *mut lb_window,
) -> lb_status {
    put(out, || {
        let r = arith::retry_window(
            lead_floor_ms,
            elapsed_ms,
            attempt_budget_ms,
            safety_margin_ms,
        );
        lb_window {
            lead: r.lead,
            window: lb_num::from_num(r.window),
            has_delay: r.delay.is_some(),
            delay: r.delay.unwrap_or(0),
        }
    })
}

/// A byte string (not NUL-terminated); `data` may be NULL only when `len` is 0.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct lb_bytes {
    /// The bytes.
    pub data: *const u8,
    /// Their length.
    pub len: usize,
}

/// Why a `Retry-After` value cannot be used (D-11, P-5), or that it can.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum lb_retry_after_status {
    /// One valid delta-seconds value: `ms` holds it in milliseconds.
    Ok = 0,
    /// No `Retry-After` header at all.
    Missing = 1,
    /// More than one value: a repeated header or a comma-separated list.
    Multiple = 2,
    /// Not one delta-seconds value: empty, a sign, a fraction, an HTTP-date, ...
    Invalid = 3,
    /// The seconds, or the seconds x 1000, overflow 64 bits.
    Overflow = 4,
}

/// The result of lb_parse_retry_after().
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct lb_retry_after {
    /// `LB_RETRY_AFTER_STATUS_OK` or why the value is unusable.
    pub status: lb_retry_after_status,
    /// The delay in milliseconds when the status is OK; 0 otherwise.
    pub ms: u64,
}

/// Parses the `Retry-After` values of one response into milliseconds.
/// `values` holds `count` values: every value of every header named
/// `Retry-After` (names compare case-insensitively). Exactly one value made of
/// ASCII digits with optional surrounding SP/HTAB is usable. An unusable value
/// is not a call failure: the call returns `LB_STATUS_OK` with the reason in
/// `out->status`. `values` may be NULL only when `count` is 0.
#[unsafe(no_mangle)]
pub extern "C" fn lb_parse_retry_after(
    values: *const lb_bytes,
    count: usize,
    out: *mut lb_retry_after,
) -> lb_status {
    guard(|| {
        // SAFETY: `values` is NULL (with 0) or valid for `count` elements.
        let raw = unsafe { try_slice(values, count, "values") }?;
        check_out(out, "out")?;
        let mut slices: Vec<&[u8]> = Vec::with_capacity(raw.len());
        for (i, v) in raw.iter().enumerate() {
            // SAFETY: each `data` is NULL (with 0) or valid for `len` bytes.
            slices.push(unsafe { try_slice(v.data, v.len, &format!("values[{i}].data")) }?);
        }
        let result = match arith::parse_retry_after(&slices) {
            Ok(ms) => lb_retry_after {
                status: lb_retry_after_status::Ok,
                ms,
            },
            Err(e) => lb_retry_after {
                status: match e {
                    arith::RetryAfterError::Missing => lb_retry_after_status::Missing,
                    arith::RetryAfterError::Multiple => lb_retry_after_status::Multiple,
                    arith::RetryAfterError::Invalid => lb_retry_after_status::Invalid,
                    arith::RetryAfterError::Overflow => lb_retry_after_status::Overflow,
                },
                ms: 0,
            },
        };
        // SAFETY: `out` was checked non-NULL; the caller promises it is writable.
        unsafe { write_out(out, result) };
        Ok(())
    })
}

/// `attempt_budget = max(request_timeout_ms, 1000, 2 x max_rtt)` into `*out`;
/// `request_timeout_ms` `LB_INFINITE_MS` (unbounded) gives `LB_INFINITE_MS`.
#[unsafe(no_mangle)]
pub extern "C" fn lb_attempt_budget(
    request_timeout_ms: u64,
    max_rtt_ms: u64,
    out: *mut u64,
) -> lb_status {
    put(out, || {
        arith::attempt_budget(Some(request_timeout_ms), max_rtt_ms)
    })
}

/// `safety_margin = max(1000, 2 x max_rtt)` into `*out`.
#[unsafe(no_mangle)]
pub extern "C" fn lb_safety_margin(max_rtt_ms: u64, out: *mut u64) -> lb_status {
    put(out, || arith::safety_margin(max_rtt_ms))
}

/// `retry_reserve = 2 x attempt_budget + safety_margin`, saturating, into `*out`.
#[unsafe(no_mangle)]
pub extern "C" fn lb_retry_reserve(
    attempt_budget_ms: u64,
    safety_margin_ms: u64,
    out: *mut u64,
) -> lb_status {
    put(out, || {
        arith::retry_reserve(attempt_budget_ms, safety_margin_ms)
    })
}

/// A nanosecond interval rounded up to whole milliseconds (HB-05/06) into `*out`.
#[unsafe(no_mangle)]
pub extern "C" fn lb_ceil_ms(nanos: u64, out: *mut u64) -> lb_status {
    put(out, || arith::ceil_ms(nanos))
}

/// The fallback's "hold" cadence `max(1000, min(ttl / 2, 30000))` (FB-03) into `*out`.
#[unsafe(no_mangle)]
pub extern "C" fn lb_hold_cadence(ttl_ms: u64, out: *mut u64) -> lb_status {
    put(out, || arith::hold_cadence(ttl_ms))
}

/// The fallback cadence chosen after an extension success (FB-03).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct lb_cadence {
    /// The delay between beats, never below 1000 ms.
    pub cadence: u64,
    /// True when the "hold" branch was taken: the extension budget will deplete.
    pub hold: bool,
}

/// FB-03, first match wins: (1) `grant <= 0`: hold; (2) `grant >= 0.9 x ttl`:
/// `clamp(grant / 2, 1000, ttl / 2)`; (3) `0.75 x elapsed <= grant <= 1.25 x
/// elapsed`: hold; (4) otherwise `clamp(grant / 2, 1000, ttl / 2)`.
#[unsafe(no_mangle)]
pub extern "C" fn lb_fallback_cadence(
    grant_ms: i64,
    elapsed_ms: u64,
    ttl_ms: u64,
    out: *mut lb_cadence,
) -> lb_status {
    put(out, || {
        let c = arith::fallback_cadence(i128::from(grant_ms), elapsed_ms, ttl_ms);
        lb_cadence {
            cadence: c.cadence,
            hold: c.hold,
        }
    })
}

/// FB-04: how many whole cadences to skip after an extension success with a
/// positive grant, given the lead lower bound at the observation, into `*out`.
#[unsafe(no_mangle)]
pub extern "C" fn lb_fallback_skips(
    lead_min_ms: i64,
    grant_ms: i64,
    cadence_ms: u64,
    out: *mut u64,
) -> lb_status {
    put(out, || {
        arith::fallback_skips(i128::from(lead_min_ms), i128::from(grant_ms), cadence_ms)
    })
}
