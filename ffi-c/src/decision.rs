//! One decision of the scheduler, as an owned opaque handle.

use std::ffi::c_char;

use leasebeat::{Decision, Next, Numbers};

use crate::buf::{check_out, copy_text, try_ref, try_str, write_out};
use crate::error::{Fail, guard};
use crate::types::{
    lb_key_use, lb_mode, lb_next, lb_num, lb_outcome, lb_stop_reason, lb_time, lb_warning,
};

/// One decision of the scheduler (opaque): the answer to an outcome or a
/// cancel, with the numbers behind it (HB-44). Obtained from
/// lb_heartbeat_last_decision() or lb_decision_clone(), owned by the caller,
/// freed with lb_decision_free(); or lent by a driver event
/// (lb_event_decision(), valid only during the callback: never free that
/// one). Immutable: a `const lb_decision *` may be read from several threads
/// at once.
pub struct lb_decision {
    inner: Decision,
}

impl lb_decision {
    pub(crate) fn new_raw(inner: Decision) -> *mut lb_decision {
        Box::into_raw(Box::new(lb_decision { inner }))
    }

    /// An unboxed decision, e.g. one a driver event lends to its callback.
    #[cfg_attr(not(feature = "driver"), allow(dead_code))]
    pub(crate) fn from_core(inner: Decision) -> lb_decision {
        lb_decision { inner }
    }
}

/// The numbers behind a decision, one field per name of the scenario format.
/// A field's kind is `LB_NUM_KIND_ABSENT` when the number does not apply.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct lb_numbers {
    /// Round trip of the attempt that produced this success, rounded up (HB-05/06).
    pub rtt: lb_num,
    /// Largest rtt over this lease's schema-valid successes (HB-07, D-3).
    pub max_rtt: lb_num,
    /// `max(0, remaining_ttl_ms - rtt)`; on a failure, that of the anchoring success.
    pub lead_floor: lb_num,
    /// `max(request_timeout_ms, 1000, 2 x max_rtt)`.
    pub attempt_budget: lb_num,
    /// `max(1000, 2 x max_rtt)`.
    pub safety_margin: lb_num,
    /// `2 x attempt_budget + safety_margin`.
    pub retry_reserve: lb_num,
    /// Delay from the observation to the next beat.
    pub next_delay: lb_num,
    /// Current lead estimate after a failure (HB-21).
    pub lead: lb_num,
    /// `lead - attempt_budget - safety_margin`, unclamped (HB-22).
    pub retry_window: lb_num,
    /// Delay from the failure's observation to the same-key retry.
    pub retry_delay: lb_num,
    /// Fallback lead lower bound at the observation (FB-01).
    pub lead_min: lb_num,
    /// Fallback grant: difference of successive `expires_at_ms` values.
    pub grant: lb_num,
    /// Fallback cadence (FB-03).
    pub cadence: lb_num,
    /// Fallback cadences skipped (FB-04).
    pub skips: lb_num,
}

impl lb_numbers {
    fn from_core(n: &Numbers) -> lb_numbers {
        // Destructured in `Numbers::NAMES` order, so that a new core number
        // fails to compile here.
        let [
            rtt,
            max_rtt,
            lead_floor,
            attempt_budget,
            safety_margin,
            retry_reserve,
            next_delay,
            lead,
            retry_window,
            retry_delay,
            lead_min,
            grant,
            cadence,
            skips,
        ] = n.to_array();
        lb_numbers {
            rtt: lb_num::from_option(rtt),
            max_rtt: lb_num::from_option(max_rtt),
            lead_floor: lb_num::from_option(lead_floor),
            attempt_budget: lb_num::from_option(attempt_budget),
            safety_margin: lb_num::from_option(safety_margin),
            retry_reserve: lb_num::from_option(retry_reserve),
            next_delay: lb_num::from_option(next_delay),
            lead: lb_num::from_option(lead),
            retry_window: lb_num::from_option(retry_window),
            retry_delay: lb_num::from_option(retry_delay),
            lead_min: lb_num::from_option(lead_min),
            grant: lb_num::from_option(grant),
            cadence: lb_num::from_option(cadence),
            skips: lb_num::from_option(skips),
        }
    }
}

/// The plain fields of a decision, copied out by lb_decision_get().
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct lb_decision_info {
    /// Send a create, send an extend, or stop.
    pub next: lb_next,
    /// The stop reason when `next` is `LB_NEXT_STOP`; `LB_STOP_REASON_NONE`
    /// otherwise.
    pub stop_reason: lb_stop_reason,
    /// Due time of the next attempt (may be +infinity); zero for a stop.
    pub at: lb_time,
    /// New or same key for a send; `LB_KEY_USE_NONE` for a stop.
    pub key_use: lb_key_use,
    /// 1 for the first key of the lease, 2 for the next new one, ...; 0 when
    /// absent (a stop).
    pub key_index: u32,
    /// The algorithm that decided; `LB_MODE_NONE` when none applies.
    pub mode: lb_mode,
    /// How the deciding outcome was classified.
    pub outcome: lb_outcome,
    /// How many warnings the decision carries (read them with
    /// lb_decision_warning()).
    pub warning_count: usize,
    /// True when the decision names a reservation (a create succeeded); read
    /// it with lb_decision_reservation_id().
    pub has_reservation_id: bool,
    /// True when the decision carries a human-readable detail; read it with
    /// lb_decision_detail().
    pub has_detail: bool,
    /// The numbers behind the decision.
    pub numbers: lb_numbers,
}

/// Frees a decision. NULL is a no-op.
#[unsafe(no_mangle)]
pub extern "C" fn lb_decision_free(decision: *mut lb_decision) {
    let _ = guard(|| {
        if !decision.is_null() {
            // SAFETY: a non-NULL `decision` came from lb_heartbeat_last_decision()
            // and is freed once, by the caller's promise.
            drop(unsafe { Box::from_raw(decision) });
        }
        Ok(())
    });
}

/// Writes a new handle to a copy of `decision` into `*out`: e.g. to keep a
/// decision lent by a driver event beyond its callback. The caller owns the
/// copy and frees it with lb_decision_free().
#[unsafe(no_mangle)]
pub extern "C" fn lb_decision_clone(
    decision: *const lb_decision,
    out: *mut *mut lb_decision,
) -> crate::error::lb_status {
    with_decision(decision, |d| {
        check_out(out, "out")?;
        // SAFETY: `out` was checked non-NULL; the caller promises it is writable.
        unsafe { write_out(out, lb_decision::new_raw(d.clone())) };
        Ok(())
    })
}

fn with_decision(
    decision: *const lb_decision,
    f: impl FnOnce(&Decision) -> Result<(), Fail>,
) -> crate::error::lb_status {
    guard(|| {
        // SAFETY: `decision` is NULL or a live decision (never mutated).
        let d = unsafe { try_ref(decision, "decision") }?;
        f(&d.inner)
    })
}

/// Copies the plain fields of a decision into `*out`.
#[unsafe(no_mangle)]
pub extern "C" fn lb_decision_get(
    decision: *const lb_decision,
    out: *mut lb_decision_info,
) -> crate::error::lb_status {
    with_decision(decision, |d| {
        check_out(out, "out")?;
        let is_stop = matches!(d.next, Next::Stop(_));
        let info = lb_decision_info {
            next: lb_next::from_core(d.next),
            stop_reason: lb_stop_reason::from_option(d.stop_reason()),
            at: if is_stop {
                lb_time {
                    infinite: false,
                    ns: 0,
                }
            } else {
                lb_time::from_option(d.at_ns)
            },
            key_use: lb_key_use::from_option(d.key),
            key_index: d.key_index.unwrap_or(0),
            mode: lb_mode::from_option(d.mode),
            outcome: lb_outcome::from_core(d.outcome),
            warning_count: d.warnings.len(),
            has_reservation_id: d.reservation_id.is_some(),
            has_detail: d.detail.is_some(),
            numbers: lb_numbers::from_core(&d.numbers),
        };
        // SAFETY: `out` was checked non-NULL; the caller promises it is writable.
        unsafe { write_out(out, info) };
        Ok(())
    })
}

/// The lease's instants a decision carries, copied out by
/// lb_decision_get_instants(): an addition beside ::lb_decision_info, which
/// keeps its layout.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct lb_decision_instants {
    /// True when the decision carries D-15's `proven_until`: on every
    /// primary-path decision after the first success (retries and stops
    /// included); false before the first success and on the fallback path,
    /// which proves nothing.
    pub has_proven_until: bool,
    /// The instant (caller monotonic ns, the clock of `at`) until which the
    /// lease is proven alive: the receipt of the last primary success plus
    /// its lead floor. `infinite` is +infinity (the sum overflowed; `ns` is
    /// then 0). Reaching it without a newer success puts the lease in
    /// jeopardy. All zero when `has_proven_until` is false.
    pub proven_until: lb_time,
    /// True when the decision answers a success that carried `expires_at_ms`.
    pub has_expires_at_ms: bool,
    /// The deciding success's `expires_at_ms` (server clock, ms since the
    /// Unix epoch); 0 when absent.
    pub expires_at_ms: u64,
    /// True when the decision answers a success that carried
    /// `remaining_ttl_ms`.
    pub has_remaining_ttl_ms: bool,
    /// The deciding success's `remaining_ttl_ms`; 0 when absent.
    pub remaining_ttl_ms: u64,
}

/// Copies the lease's instants of a decision (`proven_until`,
/// `expires_at_ms`, `remaining_ttl_ms`) into `*out`, e.g. to update an SDK's
/// context on every beat.
#[unsafe(no_mangle)]
pub extern "C" fn lb_decision_get_instants(
    decision: *const lb_decision,
    out: *mut lb_decision_instants,
) -> crate::error::lb_status {
    with_decision(decision, |d| {
        check_out(out, "out")?;
        let info = lb_decision_instants {
            has_proven_until: d.proven_until_ns.is_some(),
            proven_until: match d.proven_until_ns {
                None => lb_time {
                    infinite: false,
                    ns: 0,
                },
                Some(u64::MAX) => lb_time {
                    infinite: true,
                    ns: 0,
                },
                Some(ns) => lb_time {
                    infinite: false,
                    ns,
                },
            },
            has_expires_at_ms: d.expires_at_ms.is_some(),
            expires_at_ms: d.expires_at_ms.unwrap_or(0),
            has_remaining_ttl_ms: d.remaining_ttl_ms.is_some(),
            remaining_ttl_ms: d.remaining_ttl_ms.unwrap_or(0),
        };
        // SAFETY: `out` was checked non-NULL; the caller promises it is writable.
        unsafe { write_out(out, info) };
        Ok(())
    })
}

/// Writes the number called `name` (NUL-terminated, one of the scenario
/// format's names: `"rtt"`, `"max_rtt"`, `"lead_floor"`, `"attempt_budget"`,
/// `"safety_margin"`, `"retry_reserve"`, `"next_delay"`, `"lead"`,
/// `"retry_window"`, `"retry_delay"`, `"lead_min"`, `"grant"`, `"cadence"`,
/// `"skips"`) into `*out`; its kind is `LB_NUM_KIND_ABSENT` when it does not
/// apply to this decision.
///
/// Errors: `LB_STATUS_INVALID_ARGUMENT` for an unknown name,
/// `LB_STATUS_INVALID_UTF8`.
#[unsafe(no_mangle)]
pub extern "C" fn lb_decision_number(
    decision: *const lb_decision,
    name: *const c_char,
    out: *mut lb_num,
) -> crate::error::lb_status {
    with_decision(decision, |d| {
        // SAFETY: `name` is NULL or a NUL-terminated string, by the caller's promise.
        let name = unsafe { try_str(name, "name") }?;
        check_out(out, "out")?;
        if !Numbers::NAMES.contains(&name) {
            return Err(Fail::invalid(format!(
                "unknown number name {name:?} (known: {})",
                Numbers::NAMES.join(", ")
            )));
        }
        // SAFETY: `out` was checked non-NULL; the caller promises it is writable.
        unsafe { write_out(out, lb_num::from_option(d.numbers.get(name))) };
        Ok(())
    })
}

/// Writes warning number `index` (0-based, below `warning_count`) into `*out`.
///
/// Errors: `LB_STATUS_INVALID_ARGUMENT` for an index out of range.
#[unsafe(no_mangle)]
pub extern "C" fn lb_decision_warning(
    decision: *const lb_decision,
    index: usize,
    out: *mut lb_warning,
) -> crate::error::lb_status {
    with_decision(decision, |d| {
        check_out(out, "out")?;
        let w = d.warnings.get(index).ok_or_else(|| {
            Fail::invalid(format!(
                "warning index {index} is out of range (the decision has {})",
                d.warnings.len()
            ))
        })?;
        // SAFETY: `out` was checked non-NULL; the caller promises it is writable.
        unsafe { write_out(out, lb_warning::from_core(w)) };
        Ok(())
    })
}

/// Copies the reservation id into `buf` as a NUL-terminated string (empty when
/// `has_reservation_id` is false). Buffer convention of
/// lb_heartbeat_attempt_key(). An id from the server could in theory contain
/// a NUL byte: `*out_needed` - 1 is always its exact length.
#[unsafe(no_mangle)]
pub extern "C" fn lb_decision_reservation_id(
    decision: *const lb_decision,
    buf: *mut c_char,
    buf_len: usize,
    out_needed: *mut usize,
) -> crate::error::lb_status {
    with_decision(decision, |d| {
        let text = d.reservation_id.as_deref().unwrap_or("");
        // SAFETY: `buf` is NULL or writable for `buf_len` bytes; `out_needed`
        // is NULL (checked inside) or writable.
        unsafe { copy_text(text.as_bytes(), buf, buf_len, out_needed) }
    })
}

/// Copies the human-readable detail (e.g. the Retry-After problem, the error
/// code) into `buf` as a NUL-terminated string (empty when `has_detail` is
/// false). Buffer convention of lb_heartbeat_attempt_key().
#[unsafe(no_mangle)]
pub extern "C" fn lb_decision_detail(
    decision: *const lb_decision,
    buf: *mut c_char,
    buf_len: usize,
    out_needed: *mut usize,
) -> crate::error::lb_status {
    with_decision(decision, |d| {
        let text = d.detail.as_deref().unwrap_or("");
        // SAFETY: as in lb_decision_reservation_id().
        unsafe { copy_text(text.as_bytes(), buf, buf_len, out_needed) }
    })
}

/// Copies the decision as the scenario format's emitted-decision JSON object
/// (`next`, `at` in ms, `key`, `key_index`, `reason`, `mode`, `numbers`,
/// `warnings`, and where they apply `proven_until` in ms or `"inf"`,
/// `expires_at_ms`, `remaining_ttl_ms`; without `id` and `step`, which only a
/// replay knows) into `buf`
/// as NUL-terminated compact UTF-8 JSON. Buffer convention of
/// lb_heartbeat_attempt_key(). Integers are exact (they may exceed 2^53).
#[unsafe(no_mangle)]
pub extern "C" fn lb_decision_json(
    decision: *const lb_decision,
    buf: *mut c_char,
    buf_len: usize,
    out_needed: *mut usize,
) -> crate::error::lb_status {
    with_decision(decision, |d| {
        check_out(out_needed, "out_needed")?;
        let text = d.to_json_string();
        // SAFETY: as in lb_decision_reservation_id().
        unsafe { copy_text(text.as_bytes(), buf, buf_len, out_needed) }
    })
}
