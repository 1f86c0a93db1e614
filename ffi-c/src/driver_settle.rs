//! The driver's settlement API in the C ABI (issue 27): a driver
//! configuration with the journal (on by default), leases started with
//! options (the expired fallback's subject and action, the HP-1 heartbeat
//! failure policy with a C callback or a pollable cancellation flag), commit
//! and release through the core's `Settlement` and journal (retries with one
//! key, the event fallback, `Retry-After`, J-1 before the first request),
//! replay on start, a bounded flush, and the settlement events delivered
//! through the existing event callback.
//!
//! Thin: every rule is the core driver's (`leasebeat::driver`): this module
//! converts pointers and values.

use std::ffi::{c_char, c_void};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use leasebeat::driver::{
    ApiKey, CancellationToken, Canceller, Disposition, DriverConfig, EventBody, FailurePolicy,
    HeartbeatFailure, JournalOptions, JournalReport, LeaseHandle, LeaseOptions, Outcome,
    SettleAttemptReport, SettleResult, Settling, Usage,
};
use leasebeat::journal::JournalErrorKind;
use leasebeat::{RetryPolicy, SettlementDecision};
use serde_json::{Value, json};

use crate::buf::{check_out, copy_text, try_mut, try_ref, try_str, try_str_len, write_out};
use crate::driver::{
    driver_error, lb_driver, lb_event, lb_event_callback, lb_event_kind, lb_hb_disposition,
    lb_lease_id, new_driver,
};
use crate::error::{Fail, guard, lb_status};
use crate::settlement::{lb_settle_mode, lb_settle_outcome, lb_settlement_decision};
use crate::types::lb_stop_reason;

// ----- events -----

fn outcome_json(o: &Outcome) -> Value {
    match o {
        Outcome::Status(s) => json!({"status": s}),
        Outcome::Failure(f) => json!({"failure": f.as_str()}),
        Outcome::Cancelled => json!("cancelled"),
    }
}

fn failure_json(f: &HeartbeatFailure) -> Value {
    let mut v = json!({
        "kind": "heartbeat_failure",
        "lease": f.lease.0,
        "reservation_id": f.reservation_id,
        "outcome": outcome_json(&f.outcome),
        "class": f.class,
        "disposition": f.disposition.as_str(),
        "detail": f.detail,
        "at_ns": f.at_ns,
    });
    match f.disposition {
        Disposition::Retry { at_ns } | Disposition::Continue { at_ns } => {
            v["due_ns"] = json!(at_ns);
        }
        Disposition::Stop(r) => v["stop_reason"] = json!(r.to_string()),
    }
    v
}

/// An `LB_EVENT_KIND_HEARTBEAT_FAILURE` event.
pub(crate) fn failure_event(f: &HeartbeatFailure) -> lb_event {
    let mut e = lb_event::blank(
        lb_event_kind::HeartbeatFailure,
        f.lease.0,
        f.reservation_id.clone(),
    );
    e.set_outcome(&f.outcome);
    e.info.time_ns = f.at_ns;
    match f.disposition {
        Disposition::Retry { at_ns } => {
            e.info.disposition = lb_hb_disposition::RetrySameKey;
            e.info.due_ns = at_ns;
        }
        Disposition::Continue { at_ns } => {
            e.info.disposition = lb_hb_disposition::Continue;
            e.info.due_ns = at_ns;
        }
        Disposition::Stop(r) => {
            e.info.disposition = lb_hb_disposition::Stop;
            e.info.stop_reason = lb_stop_reason::from_core(r);
        }
    }
    e.json = Some(failure_json(f).to_string());
    e
}

/// An `LB_EVENT_KIND_SETTLEMENT` event.
pub(crate) fn settlement_event(
    lease: u64,
    reservation_id: String,
    attempt: Option<SettleAttemptReport>,
    outcome: Option<Outcome>,
    decision: SettlementDecision,
) -> lb_event {
    let mut e = lb_event::blank(
        lb_event_kind::Settlement,
        lease,
        Some(reservation_id.clone()),
    );
    e.info.settle_mode = lb_settle_mode::from_core(decision.mode);
    e.info.settle_outcome = lb_settle_outcome::from_option(decision.outcome());
    let mut v = json!({
        "kind": "settlement",
        "lease": lease,
        "reservation_id": reservation_id,
        "decision": Value::Object(decision.to_json()),
    });
    if let Some(a) = &attempt {
        e.info.has_attempt = true;
        e.info.attempt_id = a.id;
        e.info.settle_mode = lb_settle_mode::from_endpoint(a.endpoint);
        e.info.settle_attempt_number = a.number;
        e.info.due_ns = a.due_ns;
        e.info.attempt_sent_ns = a.sent_ns;
        v["attempt"] = json!({
            "id": a.id, "endpoint": a.endpoint.as_str(), "key": a.key,
            "number": a.number, "due_ns": a.due_ns, "sent_ns": a.sent_ns,
        });
    }
    if let Some(o) = outcome {
        e.set_outcome(&o);
        v["outcome"] = outcome_json(&o);
    }
    e.settle_decision = Some(lb_settlement_decision { inner: decision });
    e.json = Some(v.to_string());
    e
}

/// An `LB_EVENT_KIND_SETTLED` event.
pub(crate) fn settled_event(lease: u64, result: SettleResult) -> lb_event {
    let mut e = lb_event::blank(
        lb_event_kind::Settled,
        lease,
        Some(result.reservation_id.clone()),
    );
    e.info.settle_outcome = lb_settle_outcome::from_core(result.outcome);
    if let Some(d) = result.last_decision() {
        e.info.settle_mode = lb_settle_mode::from_core(d.mode);
    }
    e.info.record_kept = result.record_kept;
    if let Some(s) = result.status {
        e.info.http_status = u32::from(s);
    }
    e.json = Some(result_json(&result).to_string());
    e.settle_result = Some(lb_settle_result { inner: result });
    e
}

/// An `LB_EVENT_KIND_JOURNAL` event.
pub(crate) fn journal_event(lease: u64, r: &JournalReport) -> lb_event {
    let mut e = lb_event::blank(lb_event_kind::Journal, lease, None);
    let pairs = |v: &[(String, String)]| -> Vec<Value> {
        v.iter()
            .map(|(file, reason)| json!({"file": file, "reason": reason}))
            .collect()
    };
    e.json = Some(
        json!({
            "kind": "journal",
            "dir": r.dir.as_ref().map(|d| d.to_string_lossy().into_owned()),
            "replayed": r.replayed,
            "busy": r.busy,
            "quarantined": pairs(&r.quarantined),
            "foreign": r.foreign,
            "migrated": r.migrated,
            "skipped": pairs(&r.skipped),
            "error": r.error,
        })
        .to_string(),
    );
    if let Some(err) = &r.error {
        e.info.error_status = lb_status::JournalIo;
        e.error_message = Some(err.clone());
    }
    e
}

fn result_json(r: &SettleResult) -> Value {
    json!({
        "kind": "settled",
        "lease": r.lease.0,
        "reservation_id": r.reservation_id,
        "outcome": r.outcome.as_str(),
        "code": r.code,
        "status": r.status,
        "key": r.key,
        "record_kept": r.record_kept,
        "journaled": r.journaled,
        "replayed": r.replayed,
        "failed_after_heartbeat": r.failed_after_heartbeat,
        "heartbeat_failure": r.heartbeat_failure.as_ref().map(failure_json),
        "journal_error": r.journal_error,
        "decisions": r.decisions.iter().map(|d| Value::Object(d.to_json())).collect::<Vec<_>>(),
    })
}

/// The status of a driver journal error's kind name.
pub(crate) fn journal_kind_status(kind: &str) -> lb_status {
    JournalErrorKind::from_name(kind).map_or(lb_status::InvalidConfig, lb_status::from_journal_kind)
}

fn with_event(event: *const lb_event, f: impl FnOnce(&lb_event) -> Result<(), Fail>) -> lb_status {
    guard(|| {
        // SAFETY: `event` is NULL or the event lent to a running callback.
        let e = unsafe { try_ref(event, "event") }?;
        f(e)
    })
}

/// Copies the event as one JSON object (NUL-terminated) into `buf`, with the
/// caller-buffer convention, for `LB_EVENT_KIND_HEARTBEAT_FAILURE`
/// (`reservation_id`, `outcome`, `class`, `disposition`, `due_ns` or
/// `stop_reason`, `detail`, `at_ns`), `LB_EVENT_KIND_SETTLEMENT` (`decision`:
/// the settlement decision's JSON; `attempt`: `id`, `endpoint`, `key`,
/// `number`, `due_ns`, `sent_ns`; `outcome`), `LB_EVENT_KIND_SETTLED` (the
/// result: `outcome`, `code`, `status`, `key`, `record_kept`, `journaled`,
/// `replayed`, `failed_after_heartbeat`, `heartbeat_failure`,
/// `journal_error`, `decisions`) and `LB_EVENT_KIND_JOURNAL` (`dir`,
/// `replayed`, `busy`, `quarantined`, `foreign`, `migrated`, `skipped`,
/// `error`). `"{}"` for the other kinds.
#[unsafe(no_mangle)]
pub extern "C" fn lb_event_json(
    event: *const lb_event,
    buf: *mut c_char,
    buf_len: usize,
    out_needed: *mut usize,
) -> lb_status {
    with_event(event, |e| {
        let text = e.json.as_deref().unwrap_or("{}");
        // SAFETY: `buf` NULL or writable for `buf_len`; `out_needed` checked inside.
        unsafe { copy_text(text.as_bytes(), buf, buf_len, out_needed) }
    })
}

/// Writes a settlement event's decision into `*out` (NULL for other
/// kinds): lent, valid while the callback runs; read it with the
/// `lb_settlement_decision_*` functions, keep a copy with
/// lb_settlement_decision_clone().
#[unsafe(no_mangle)]
pub extern "C" fn lb_event_settlement_decision(
    event: *const lb_event,
    out: *mut *const lb_settlement_decision,
) -> lb_status {
    with_event(event, |e| {
        check_out(out, "out")?;
        let d = e
            .settle_decision
            .as_ref()
            .map_or(std::ptr::null(), |d| d as *const lb_settlement_decision);
        // SAFETY: checked non-NULL; writable by the caller's promise.
        unsafe { write_out(out, d) };
        Ok(())
    })
}

/// Writes a settled event's result into `*out` (NULL for other kinds):
/// lent, valid while the callback runs (do not free it).
#[unsafe(no_mangle)]
pub extern "C" fn lb_event_settle_result(
    event: *const lb_event,
    out: *mut *const lb_settle_result,
) -> lb_status {
    with_event(event, |e| {
        check_out(out, "out")?;
        let r = e
            .settle_result
            .as_ref()
            .map_or(std::ptr::null(), |r| r as *const lb_settle_result);
        // SAFETY: checked non-NULL; writable by the caller's promise.
        unsafe { write_out(out, r) };
        Ok(())
    })
}

/// The stable string of a heartbeat failure's disposition: `"none"`,
/// `"retry_same_key"`, `"continue"`, `"stop"`; `"unknown"` otherwise.
#[unsafe(no_mangle)]
pub extern "C" fn lb_hb_disposition_str(disposition: i32) -> *const c_char {
    crate::error::guard_str(
        || match disposition {
            0 => b"none\0",
            1 => b"retry_same_key\0",
            2 => b"continue\0",
            3 => b"stop\0",
            _ => b"unknown\0",
        },
        b"unknown\0",
    )
}

// ----- driver configuration -----

/// A driver configuration under construction (opaque), for
/// lb_driver_new_with(): the server, the API key, the workers, the
/// settlements' retry policy and attempt budget, the shutdown flush bound
/// and the journal. Made by lb_driver_config_new() with the defaults (16
/// workers, one settlement attempt at most 5000 ms, 5 attempts per mode from
/// 500 ms doubling to 30 s, a 5000 ms flush at shutdown, the journal ON at
/// `$CYCLES_JOURNAL_DIR` or `~/.runcycles/commit-journal`, partitioned by
/// the API key, replayed at start), freed by lb_driver_config_free().
pub struct lb_driver_config {
    config: DriverConfig,
}

fn with_driver_config(
    cfg: *mut lb_driver_config,
    f: impl FnOnce(&mut DriverConfig) -> Result<(), Fail>,
) -> lb_status {
    guard(|| {
        // SAFETY: `cfg` is NULL or a live configuration used by this thread only.
        let cfg = unsafe { try_mut(cfg, "cfg") }?;
        f(&mut cfg.config)
    })
}

/// Makes a driver configuration for `base_url` and `api_key` (NUL-terminated
/// UTF-8; checked by lb_driver_new_with()) with the defaults above. On
/// success `*out` owns it.
#[unsafe(no_mangle)]
pub extern "C" fn lb_driver_config_new(
    base_url: *const c_char,
    api_key: *const c_char,
    out: *mut *mut lb_driver_config,
) -> lb_status {
    guard(|| {
        // SAFETY: NULL or NUL-terminated, by the caller's promise.
        let base_url = unsafe { try_str(base_url, "base_url") }?;
        // SAFETY: as above.
        let api_key = unsafe { try_str(api_key, "api_key") }?;
        check_out(out, "out")?;
        let c = Box::new(lb_driver_config {
            config: DriverConfig::new(base_url, ApiKey::new(api_key)),
        });
        // SAFETY: checked non-NULL; writable by the caller's promise.
        unsafe { write_out(out, Box::into_raw(c)) };
        Ok(())
    })
}

/// Frees a driver configuration. NULL is a no-op.
#[unsafe(no_mangle)]
pub extern "C" fn lb_driver_config_free(cfg: *mut lb_driver_config) {
    let _ = guard(|| {
        if !cfg.is_null() {
            // SAFETY: from lb_driver_config_new(), freed once.
            drop(unsafe { Box::from_raw(cfg) });
        }
        Ok(())
    });
}

/// Sets the largest number of HTTP worker threads (at least 1, checked by
/// lb_driver_new_with()).
#[unsafe(no_mangle)]
pub extern "C" fn lb_driver_config_set_max_workers(
    cfg: *mut lb_driver_config,
    max_workers: usize,
) -> lb_status {
    with_driver_config(cfg, |c| {
        c.max_workers = max_workers;
        Ok(())
    })
}

/// Sets the budget of one settlement attempt (commit, event or release), ms.
#[unsafe(no_mangle)]
pub extern "C" fn lb_driver_config_set_settle_timeout_ms(
    cfg: *mut lb_driver_config,
    timeout_ms: u64,
) -> lb_status {
    with_driver_config(cfg, |c| {
        c.finalize_timeout_ms = timeout_ms;
        Ok(())
    })
}

/// Sets the settlements' retry policy (ST-3, SP-1): at most `max_attempts`
/// per mode in one run, the first delay `initial_ms`, doubling, at most
/// `max_ms`. Checked now (`LB_STATUS_INVALID_CONFIG`).
#[unsafe(no_mangle)]
pub extern "C" fn lb_driver_config_set_settle_retry(
    cfg: *mut lb_driver_config,
    max_attempts: u32,
    initial_ms: u64,
    max_ms: u64,
) -> lb_status {
    with_driver_config(cfg, |c| {
        let retry = RetryPolicy {
            max_attempts,
            initial_ms,
            max_ms,
        };
        retry.validate()?;
        c.settle_retry = retry;
        Ok(())
    })
}

/// Sets how long lb_driver_shutdown() / lb_driver_free() wait for
/// settlements in flight (J-7), ms; what is unresolved then stays in the
/// journal.
#[unsafe(no_mangle)]
pub extern "C" fn lb_driver_config_set_shutdown_flush_ms(
    cfg: *mut lb_driver_config,
    flush_ms: u64,
) -> lb_status {
    with_driver_config(cfg, |c| {
        c.shutdown_flush_ms = flush_ms;
        Ok(())
    })
}

/// Turns the journal on (the default) or off (`false`: the explicit
/// opt-out; settlements still retry and fall back, nothing is durable).
#[unsafe(no_mangle)]
pub extern "C" fn lb_driver_config_set_journal_enabled(
    cfg: *mut lb_driver_config,
    enabled: bool,
) -> lb_status {
    with_driver_config(cfg, |c| {
        if enabled {
            c.journal.enabled = true;
        } else {
            c.journal = JournalOptions {
                dir: c.journal.dir.take(),
                tenant: c.journal.tenant.take(),
                ..JournalOptions::disabled()
            };
        }
        Ok(())
    })
}

/// Sets the journal's base directory (NUL-terminated UTF-8); NULL: back to
/// `$CYCLES_JOURNAL_DIR`, else `~/.runcycles/commit-journal`. Tests always
/// give a temporary directory.
#[unsafe(no_mangle)]
pub extern "C" fn lb_driver_config_set_journal_dir(
    cfg: *mut lb_driver_config,
    dir: *const c_char,
) -> lb_status {
    with_driver_config(cfg, |c| {
        c.journal.dir = if dir.is_null() {
            None
        } else {
            // SAFETY: non-NULL, NUL-terminated by the caller's promise.
            Some(PathBuf::from(unsafe { try_str(dir, "dir") }?))
        };
        Ok(())
    })
}

/// Partitions the journal by `tenant` (NUL-terminated UTF-8; the records
/// survive an API-key rotation) instead of the API key; NULL: by the key.
#[unsafe(no_mangle)]
pub extern "C" fn lb_driver_config_set_journal_tenant(
    cfg: *mut lb_driver_config,
    tenant: *const c_char,
) -> lb_status {
    with_driver_config(cfg, |c| {
        c.journal.tenant = if tenant.is_null() {
            None
        } else {
            // SAFETY: non-NULL, NUL-terminated by the caller's promise.
            Some(unsafe { try_str(tenant, "tenant") }?.to_owned())
        };
        Ok(())
    })
}

/// Whether lb_driver_new_with() replays the journal's partition in the
/// background (default true): every record not claimed elsewhere is
/// settled, reported like any settlement (fresh lease ids, no heartbeat).
#[unsafe(no_mangle)]
pub extern "C" fn lb_driver_config_set_replay_on_start(
    cfg: *mut lb_driver_config,
    replay: bool,
) -> lb_status {
    with_driver_config(cfg, |c| {
        c.journal.replay_on_start = replay;
        Ok(())
    })
}

/// Makes a driver from `cfg` (only read) as lb_driver_new() does, with the
/// settlement settings and the journal of `cfg`. With the journal on, the
/// partition is opened here (errors below) and, unless turned off, replayed
/// in the background: its events (`LB_EVENT_KIND_JOURNAL`, then each
/// replayed settlement's) go to the callback.
///
/// Errors: those of lb_driver_new(), the journal's
/// (`LB_STATUS_JOURNAL_NOT_WRITABLE`, `LB_STATUS_JOURNAL_SYMLINK`,
/// `LB_STATUS_JOURNAL_NO_SPACE`, `LB_STATUS_JOURNAL_NOT_A_DIRECTORY`,
/// `LB_STATUS_JOURNAL_NO_DIRECTORY`, `LB_STATUS_JOURNAL_IO`).
#[unsafe(no_mangle)]
pub extern "C" fn lb_driver_new_with(
    cfg: *const lb_driver_config,
    callback: lb_event_callback,
    user_data: *mut c_void,
    out: *mut *mut lb_driver,
) -> lb_status {
    guard(|| {
        // SAFETY: `cfg` is NULL or a live configuration not mutated during the call.
        let cfg = unsafe { try_ref(cfg, "cfg") }?;
        new_driver(cfg.config.clone(), callback, user_data, out)
    })
}

/// Copies the driver's journal partition directory (NUL-terminated) into
/// `buf`; empty when the journal is off. Caller-buffer convention.
#[unsafe(no_mangle)]
pub extern "C" fn lb_driver_journal_dir(
    driver: *const lb_driver,
    buf: *mut c_char,
    buf_len: usize,
    out_needed: *mut usize,
) -> lb_status {
    guard(|| {
        // SAFETY: `driver` is NULL or a live driver.
        let d = unsafe { try_ref(driver, "driver") }?;
        let dir = d.with(|driver| {
            Ok(driver
                .journal_dir()
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_default())
        })?;
        // SAFETY: `buf` NULL or writable for `buf_len`; `out_needed` checked inside.
        unsafe { copy_text(dir.as_bytes(), buf, buf_len, out_needed) }
    })
}

// ----- lease options, HP-1 -----

/// The heartbeat failure policy of a lease (HP-1), one of
/// `LB_FAILURE_POLICY_WARN`, `LB_FAILURE_POLICY_CANCEL`,
/// `LB_FAILURE_POLICY_FAIL_ON_FINALIZE`. A plain integer (not a C enum) so
/// that an out-of-range value from C is refused, never undefined behaviour.
/// Under every policy each failed heartbeat attempt and each stop that is
/// not a cancel is reported (`LB_EVENT_KIND_HEARTBEAT_FAILURE`) and the
/// final settlement runs.
pub type lb_failure_policy = u32;
/// Report and carry on (the default).
pub const LB_FAILURE_POLICY_WARN: lb_failure_policy = 0;
/// Also ask the work to stop, once, when the heartbeat stops for any reason
/// but a cancel: through the lease's cancellation flag
/// (lb_lease_options_set_cancel_flag()) or callback
/// (lb_lease_options_set_cancel_callback()).
pub const LB_FAILURE_POLICY_CANCEL: lb_failure_policy = 1;
/// The settlement runs; its result then carries the heartbeat's failure
/// (`failed_after_heartbeat`).
pub const LB_FAILURE_POLICY_FAIL_ON_FINALIZE: lb_failure_policy = 2;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Policy {
    Warn,
    Cancel,
    FailOnFinalize,
}

/// A cancellation flag (opaque) shared between the driver and the work:
/// the driver sets it under `LB_FAILURE_POLICY_CANCEL`; the work polls it
/// (lb_cancel_flag_is_cancelled()) or waits on it (lb_cancel_flag_wait()).
/// Thread-safe. Free with lb_cancel_flag_free() (the driver keeps its own
/// reference while the lease runs).
pub struct lb_cancel_flag {
    token: CancellationToken,
}

/// Makes a flag, not set. On success `*out` owns it.
#[unsafe(no_mangle)]
pub extern "C" fn lb_cancel_flag_new(out: *mut *mut lb_cancel_flag) -> lb_status {
    guard(|| {
        check_out(out, "out")?;
        let f = Box::new(lb_cancel_flag {
            token: CancellationToken::new(),
        });
        // SAFETY: checked non-NULL; writable by the caller's promise.
        unsafe { write_out(out, Box::into_raw(f)) };
        Ok(())
    })
}

/// Frees a flag. NULL is a no-op.
#[unsafe(no_mangle)]
pub extern "C" fn lb_cancel_flag_free(flag: *mut lb_cancel_flag) {
    let _ = guard(|| {
        if !flag.is_null() {
            // SAFETY: from lb_cancel_flag_new(), freed once.
            drop(unsafe { Box::from_raw(flag) });
        }
        Ok(())
    });
}

/// Sets the flag (idempotent): the work may cancel itself too.
#[unsafe(no_mangle)]
pub extern "C" fn lb_cancel_flag_cancel(flag: *const lb_cancel_flag) -> lb_status {
    guard(|| {
        // SAFETY: `flag` is NULL or a live flag.
        unsafe { try_ref(flag, "flag") }?.token.cancel();
        Ok(())
    })
}

/// Writes whether the flag is set into `*out`.
#[unsafe(no_mangle)]
pub extern "C" fn lb_cancel_flag_is_cancelled(
    flag: *const lb_cancel_flag,
    out: *mut bool,
) -> lb_status {
    guard(|| {
        // SAFETY: `flag` is NULL or a live flag.
        let f = unsafe { try_ref(flag, "flag") }?;
        check_out(out, "out")?;
        // SAFETY: checked non-NULL; writable by the caller's promise.
        unsafe { write_out(out, f.token.is_cancelled()) };
        Ok(())
    })
}

/// Waits at most `timeout_ms` for the flag; `*out` says whether it is set.
#[unsafe(no_mangle)]
pub extern "C" fn lb_cancel_flag_wait(
    flag: *const lb_cancel_flag,
    timeout_ms: u64,
    out: *mut bool,
) -> lb_status {
    guard(|| {
        // SAFETY: `flag` is NULL or a live flag.
        let f = unsafe { try_ref(flag, "flag") }?;
        check_out(out, "out")?;
        let set = f.token.wait_timeout(Duration::from_millis(timeout_ms));
        // SAFETY: checked non-NULL; writable by the caller's promise.
        unsafe { write_out(out, set) };
        Ok(())
    })
}

/// Copies the heartbeat failure that set the flag as JSON (as
/// lb_event_json() of a heartbeat failure event) into `buf`; `"null"` if
/// the flag is not set or was set by the work.
#[unsafe(no_mangle)]
pub extern "C" fn lb_cancel_flag_failure_json(
    flag: *const lb_cancel_flag,
    buf: *mut c_char,
    buf_len: usize,
    out_needed: *mut usize,
) -> lb_status {
    guard(|| {
        // SAFETY: `flag` is NULL or a live flag.
        let f = unsafe { try_ref(flag, "flag") }?;
        let text = f
            .token
            .failure()
            .map_or_else(|| "null".to_owned(), |x| failure_json(&x).to_string());
        // SAFETY: `buf` NULL or writable for `buf_len`; `out_needed` checked inside.
        unsafe { copy_text(text.as_bytes(), buf, buf_len, out_needed) }
    })
}

struct CallbackData(*mut c_void);
// SAFETY: the caller of lb_lease_options_set_cancel_callback() promises that
// `user_data` may be used from the driver's timer thread.
unsafe impl Send for CallbackData {}
// SAFETY: as above (the callback is called once, from one thread).
unsafe impl Sync for CallbackData {}

#[derive(Clone)]
enum CancelWith {
    None,
    Flag(CancellationToken),
    Callback(
        unsafe extern "C" fn(*mut c_void, *const lb_event),
        Arc<CallbackData>,
    ),
}

/// How a lease is run (opaque), for lb_driver_start_with() and
/// lb_driver_start_for_reservation_with(): the expired-commit fallback's
/// subject and action, the HP-1 policy and how a cancel reaches the work.
/// Made by lb_lease_options_new() (warn, no event body: a created lease
/// takes its create body's subject and action), freed by
/// lb_lease_options_free(); only read when a lease starts.
pub struct lb_lease_options {
    event: Option<Vec<u8>>,
    policy: Policy,
    cancel: CancelWith,
}

impl lb_lease_options {
    pub(crate) fn to_core(&self) -> LeaseOptions {
        let policy = match (self.policy, &self.cancel) {
            (Policy::Warn, _) => FailurePolicy::Warn,
            (Policy::FailOnFinalize, _) => FailurePolicy::FailOnFinalize,
            (Policy::Cancel, CancelWith::Flag(t)) => {
                FailurePolicy::Cancel(Canceller::Token(t.clone()))
            }
            (Policy::Cancel, CancelWith::Callback(f, data)) => {
                let (f, data) = (*f, Arc::clone(data));
                FailurePolicy::Cancel(Canceller::Callback(Arc::new(move |failure| {
                    let event = failure_event(failure);
                    // SAFETY: the caller's callback, with its user data and an
                    // event valid for the call.
                    unsafe { f(data.0, &event) };
                })))
            }
            // Refused when set; unreachable.
            (Policy::Cancel, CancelWith::None) => FailurePolicy::Warn,
        };
        LeaseOptions {
            event: self.event.clone().map(EventBody::from_json),
            policy,
        }
    }
}

fn with_options(
    opts: *mut lb_lease_options,
    f: impl FnOnce(&mut lb_lease_options) -> Result<(), Fail>,
) -> lb_status {
    guard(|| {
        // SAFETY: `opts` is NULL or live options used by this thread only.
        let o = unsafe { try_mut(opts, "opts") }?;
        f(o)
    })
}

/// Makes lease options with the defaults. On success `*out` owns them.
#[unsafe(no_mangle)]
pub extern "C" fn lb_lease_options_new(out: *mut *mut lb_lease_options) -> lb_status {
    guard(|| {
        check_out(out, "out")?;
        let o = Box::new(lb_lease_options {
            event: None,
            policy: Policy::Warn,
            cancel: CancelWith::None,
        });
        // SAFETY: checked non-NULL; writable by the caller's promise.
        unsafe { write_out(out, Box::into_raw(o)) };
        Ok(())
    })
}

/// Frees lease options. NULL is a no-op. Leases started with them keep
/// what they need.
#[unsafe(no_mangle)]
pub extern "C" fn lb_lease_options_free(opts: *mut lb_lease_options) {
    let _ = guard(|| {
        if !opts.is_null() {
            // SAFETY: from lb_lease_options_new(), freed once.
            drop(unsafe { Box::from_raw(opts) });
        }
        Ok(())
    });
}

/// Sets the expired-commit fallback's subject and action (ST-5): `json` is a
/// NUL-terminated JSON object with `subject` and `action` (checked at
/// commit). Needed for an adopted reservation
/// (lb_driver_start_for_reservation_with()); a created lease takes its
/// create body's by default.
#[unsafe(no_mangle)]
pub extern "C" fn lb_lease_options_set_event(
    opts: *mut lb_lease_options,
    json: *const c_char,
) -> lb_status {
    with_options(opts, |o| {
        // SAFETY: NULL or NUL-terminated, by the caller's promise.
        o.event = Some(unsafe { try_str(json, "json") }?.as_bytes().to_vec());
        Ok(())
    })
}

/// Sets the HP-1 policy to `LB_FAILURE_POLICY_WARN` or
/// `LB_FAILURE_POLICY_FAIL_ON_FINALIZE`. `LB_FAILURE_POLICY_CANCEL` is set
/// with lb_lease_options_set_cancel_flag() or
/// lb_lease_options_set_cancel_callback() (here it needs one of them set
/// before: `LB_STATUS_INVALID_ARGUMENT` otherwise).
#[unsafe(no_mangle)]
pub extern "C" fn lb_lease_options_set_policy(
    opts: *mut lb_lease_options,
    policy: lb_failure_policy,
) -> lb_status {
    with_options(opts, |o| {
        let p = match policy {
            LB_FAILURE_POLICY_WARN => Policy::Warn,
            LB_FAILURE_POLICY_CANCEL => Policy::Cancel,
            LB_FAILURE_POLICY_FAIL_ON_FINALIZE => Policy::FailOnFinalize,
            v => {
                return Err(Fail::invalid(format!(
                    "unknown lb_failure_policy value {v}"
                )));
            }
        };
        if p == Policy::Cancel && matches!(o.cancel, CancelWith::None) {
            return Err(Fail::invalid(
                "LB_FAILURE_POLICY_CANCEL needs a cancellation flag or callback \
                 (lb_lease_options_set_cancel_flag / _set_cancel_callback)",
            ));
        }
        o.policy = p;
        Ok(())
    })
}

/// Sets the policy to `LB_FAILURE_POLICY_CANCEL` with `flag` (shared: the
/// caller may free its handle; the lease keeps the flag).
#[unsafe(no_mangle)]
pub extern "C" fn lb_lease_options_set_cancel_flag(
    opts: *mut lb_lease_options,
    flag: *const lb_cancel_flag,
) -> lb_status {
    with_options(opts, |o| {
        // SAFETY: `flag` is NULL or a live flag.
        let f = unsafe { try_ref(flag, "flag") }?;
        o.cancel = CancelWith::Flag(f.token.clone());
        o.policy = Policy::Cancel;
        Ok(())
    })
}

/// Sets the policy to `LB_FAILURE_POLICY_CANCEL` with a callback: called
/// once, on the driver's timer thread, with `user_data` and the heartbeat
/// failure event (`LB_EVENT_KIND_HEARTBEAT_FAILURE`, lent for the call)
/// when the lease's heartbeat stops for a reason other than a cancel. Keep
/// it short (it delays every lease's timer) and do not call the driver from
/// it: every `lb_driver_*` call that waits for the timer thread (start,
/// commit, release, flush, shutdown, free) would wait for itself. Set a flag
/// or signal your own thread instead. It must not unwind.
#[unsafe(no_mangle)]
pub extern "C" fn lb_lease_options_set_cancel_callback(
    opts: *mut lb_lease_options,
    callback: lb_event_callback,
    user_data: *mut c_void,
) -> lb_status {
    with_options(opts, |o| {
        let Some(cb) = callback else {
            return Err(Fail::null("callback"));
        };
        o.cancel = CancelWith::Callback(cb, Arc::new(CallbackData(user_data)));
        o.policy = Policy::Cancel;
        Ok(())
    })
}

/// lb_driver_start() with options (`opts` NULL: the defaults).
#[unsafe(no_mangle)]
pub extern "C" fn lb_driver_start_with(
    driver: *const lb_driver,
    cfg: *const crate::heartbeat::lb_config,
    opts: *const lb_lease_options,
    out: *mut lb_lease_id,
) -> lb_status {
    crate::driver::start(driver, cfg, None, opts, out)
}

/// lb_driver_start_for_reservation() with options (`opts` NULL: the
/// defaults; give the event body there for the expired fallback).
#[unsafe(no_mangle)]
pub extern "C" fn lb_driver_start_for_reservation_with(
    driver: *const lb_driver,
    cfg: *const crate::heartbeat::lb_config,
    reservation_id: *const c_char,
    opts: *const lb_lease_options,
    out: *mut lb_lease_id,
) -> lb_status {
    crate::driver::start(driver, cfg, Some(reservation_id), opts, out)
}

// ----- settling -----

/// A settlement under way (opaque), from lb_driver_commit_lease() and
/// friends: wait for its end with lb_settling_wait(). Its decisions and its
/// end are also delivered as events. Free with lb_settling_free() (the
/// settlement goes on).
pub struct lb_settling {
    inner: Settling,
    result: Option<SettleResult>,
}

/// The end of a settlement (opaque): from lb_settling_wait() (owned: free
/// with lb_settle_result_free()) or lb_event_settle_result() (lent).
pub struct lb_settle_result {
    inner: SettleResult,
}

fn settling_out(d: &lb_driver, s: Settling, out: *mut *mut lb_settling) {
    d.max_lease.fetch_max(s.lease().0, Ordering::SeqCst);
    let b = Box::new(lb_settling {
        inner: s,
        result: None,
    });
    // SAFETY: `out` was checked non-NULL by the caller; writable by its promise.
    unsafe { write_out(out, Box::into_raw(b)) };
}

fn usage(usage_json: *const c_char) -> Result<Usage, Fail> {
    if usage_json.is_null() {
        return Ok(Usage::unknown());
    }
    // SAFETY: non-NULL, NUL-terminated by the caller's promise.
    let text = unsafe { try_str(usage_json, "usage_json") }?;
    Ok(Usage::from_json(text.as_bytes().to_vec()))
}

/// Commits the lease's usage through a settlement (ST-1..ST-11):
/// `usage_json` is the commit body without its key, a NUL-terminated JSON
/// object with `actual` (`{"unit", "amount": 0..=2^63-1}`) and optional
/// `metrics` and `metadata`; NULL means no actual is known (ST-10: nothing
/// is sent, outcome `LB_SETTLE_OUTCOME_NO_ACTUAL`). The record is journaled
/// before the first commit leaves (J-1); the commit is retried with its one
/// key as the settlement decides (delays, `Retry-After`, the event fallback
/// after a 410 `RESERVATION_EXPIRED` with the lease's subject and action);
/// the record is removed or kept at the end (J-5). The lease's heartbeat
/// keeps running until a decision says `stop_heartbeat` (ST-11). Works after
/// the heartbeat stopped too (after `expired` the server may be within its
/// grace: the answer is reported).
///
/// Returns at once: on success `*out` owns the settling handle.
///
/// Errors: `LB_STATUS_INVALID_CONFIG` (a bad body: not JSON, an amount
/// beyond 2^63-1, ...), `LB_STATUS_INVALID_ARGUMENT` (unknown lease, no
/// reservation yet, already settling), `LB_STATUS_SHUT_DOWN`,
/// `LB_STATUS_INVALID_UTF8`, `LB_STATUS_NULL_ARGUMENT`.
#[unsafe(no_mangle)]
pub extern "C" fn lb_driver_commit_lease(
    driver: *const lb_driver,
    lease_id: lb_lease_id,
    usage_json: *const c_char,
    out: *mut *mut lb_settling,
) -> lb_status {
    guard(|| {
        // SAFETY: `driver` is NULL or a live driver.
        let d = unsafe { try_ref(driver, "driver") }?;
        let usage = usage(usage_json)?;
        check_out(out, "out")?;
        let s = d.with(|driver| {
            driver
                .commit(LeaseHandle(lease_id), usage)
                .map_err(driver_error)
        })?;
        settling_out(d, s, out);
        Ok(())
    })
}

/// Releases the lease's reservation through a settlement (work that used
/// nothing): one key, retried, not journaled; stops the heartbeat at its
/// end. `reason` NULL or NUL-terminated UTF-8 (at most 256 characters).
///
/// Errors: as lb_driver_commit_lease().
#[unsafe(no_mangle)]
pub extern "C" fn lb_driver_release_lease(
    driver: *const lb_driver,
    lease_id: lb_lease_id,
    reason: *const c_char,
    out: *mut *mut lb_settling,
) -> lb_status {
    guard(|| {
        // SAFETY: `driver` is NULL or a live driver.
        let d = unsafe { try_ref(driver, "driver") }?;
        let reason = if reason.is_null() {
            None
        } else {
            // SAFETY: non-NULL, NUL-terminated by the caller's promise.
            Some(unsafe { try_str(reason, "reason") }?.to_owned())
        };
        check_out(out, "out")?;
        let s = d.with(|driver| {
            driver
                .release(LeaseHandle(lease_id), reason.as_deref())
                .map_err(driver_error)
        })?;
        settling_out(d, s, out);
        Ok(())
    })
}

/// Commits a reservation this driver does not heartbeat (held elsewhere),
/// as lb_driver_commit_lease() does: `reservation_id` is
/// `reservation_id_len` bytes of UTF-8 (not NUL-terminated: the core refuses
/// a NUL, control characters and more than 128 characters); `event_json`
/// (NULL: none) the fallback's subject and action. The settlement gets a
/// fresh lease id.
///
/// Errors: as lb_driver_commit_lease().
#[unsafe(no_mangle)]
pub extern "C" fn lb_driver_commit_reservation(
    driver: *const lb_driver,
    reservation_id: *const c_char,
    reservation_id_len: usize,
    usage_json: *const c_char,
    event_json: *const c_char,
    out: *mut *mut lb_settling,
) -> lb_status {
    guard(|| {
        // SAFETY: `driver` is NULL or a live driver.
        let d = unsafe { try_ref(driver, "driver") }?;
        // SAFETY: NULL (with 0) or valid for the length.
        let id = unsafe { try_str_len(reservation_id, reservation_id_len, "reservation_id") }?;
        let usage = usage(usage_json)?;
        let event = if event_json.is_null() {
            None
        } else {
            // SAFETY: non-NULL, NUL-terminated by the caller's promise.
            let t = unsafe { try_str(event_json, "event_json") }?;
            Some(EventBody::from_json(t.as_bytes().to_vec()))
        };
        check_out(out, "out")?;
        let s = d.with(|driver| {
            driver
                .commit_reservation(id, usage, event)
                .map_err(driver_error)
        })?;
        settling_out(d, s, out);
        Ok(())
    })
}

/// Releases a reservation this driver does not heartbeat
/// (`reservation_id_len` bytes of UTF-8), as lb_driver_release_lease().
///
/// Errors: as lb_driver_commit_lease().
#[unsafe(no_mangle)]
pub extern "C" fn lb_driver_release_reservation(
    driver: *const lb_driver,
    reservation_id: *const c_char,
    reservation_id_len: usize,
    reason: *const c_char,
    out: *mut *mut lb_settling,
) -> lb_status {
    guard(|| {
        // SAFETY: `driver` is NULL or a live driver.
        let d = unsafe { try_ref(driver, "driver") }?;
        // SAFETY: NULL (with 0) or valid for the length.
        let id = unsafe { try_str_len(reservation_id, reservation_id_len, "reservation_id") }?;
        let reason = if reason.is_null() {
            None
        } else {
            // SAFETY: non-NULL, NUL-terminated by the caller's promise.
            Some(unsafe { try_str(reason, "reason") }?.to_owned())
        };
        check_out(out, "out")?;
        let s = d.with(|driver| {
            driver
                .release_reservation(id, reason.as_deref())
                .map_err(driver_error)
        })?;
        settling_out(d, s, out);
        Ok(())
    })
}

/// Writes the settlement's lease id into `*out`.
#[unsafe(no_mangle)]
pub extern "C" fn lb_settling_lease(s: *const lb_settling, out: *mut lb_lease_id) -> lb_status {
    guard(|| {
        // SAFETY: `s` is NULL or a live settling handle.
        let s = unsafe { try_ref(s, "settling") }?;
        check_out(out, "out")?;
        // SAFETY: checked non-NULL; writable by the caller's promise.
        unsafe { write_out(out, s.inner.lease().0) };
        Ok(())
    })
}

/// Waits at most `timeout_ms` for the settlement's end; on success `*out`
/// owns a copy of the result (free it with lb_settle_result_free()). May be
/// called again (the same result).
///
/// Errors: `LB_STATUS_TIMED_OUT` (not ended within the wait, or the driver
/// shut down first: its record, if any, stays in the journal).
#[unsafe(no_mangle)]
pub extern "C" fn lb_settling_wait(
    s: *mut lb_settling,
    timeout_ms: u64,
    out: *mut *mut lb_settle_result,
) -> lb_status {
    guard(|| {
        // SAFETY: `s` is NULL or a live settling handle used by this thread only.
        let s = unsafe { try_mut(s, "settling") }?;
        check_out(out, "out")?;
        if s.result.is_none() {
            s.result = s.inner.wait_timeout(Duration::from_millis(timeout_ms));
        }
        let Some(r) = &s.result else {
            return Err(Fail::new(
                lb_status::TimedOut,
                format!("the settlement did not end within {timeout_ms} ms"),
            ));
        };
        let b = Box::new(lb_settle_result { inner: r.clone() });
        // SAFETY: checked non-NULL; writable by the caller's promise.
        unsafe { write_out(out, Box::into_raw(b)) };
        Ok(())
    })
}

/// Frees a settling handle (the settlement goes on). NULL is a no-op.
#[unsafe(no_mangle)]
pub extern "C" fn lb_settling_free(s: *mut lb_settling) {
    let _ = guard(|| {
        if !s.is_null() {
            // SAFETY: from an `lb_driver_*` settle call, freed once.
            drop(unsafe { Box::from_raw(s) });
        }
        Ok(())
    });
}

/// The plain fields of a settlement's end, copied out by
/// lb_settle_result_get().
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct lb_settle_result_info {
    /// The lease (a fresh id for a replayed record or a reservation not
    /// heartbeaten here).
    pub lease_id: lb_lease_id,
    /// How it ended.
    pub outcome: lb_settle_outcome,
    /// The usage is recorded (or the release done) and no policy failure is
    /// attached.
    pub success: bool,
    /// The HTTP status that decided; 0 when none.
    pub status: u32,
    /// The server's error code that decided (lb_settle_result_code()).
    pub has_code: bool,
    /// The record stays in the journal (a later replay settles it).
    pub record_kept: bool,
    /// A record of the settlement reached the disk (false: journal off, a release,
    /// or every write failed and the requests went anyway, SP-3).
    pub journaled: bool,
    /// Started from a journal record (replay).
    pub replayed: bool,
    /// `LB_FAILURE_POLICY_FAIL_ON_FINALIZE` and the heartbeat failed.
    pub failed_after_heartbeat: bool,
    /// The journal could not apply the final record update (J-5): see
    /// lb_settle_result_json().
    pub has_journal_error: bool,
    /// How many decisions (lb_settle_result_decision()).
    pub decision_count: usize,
}

fn with_result(
    r: *const lb_settle_result,
    f: impl FnOnce(&SettleResult) -> Result<(), Fail>,
) -> lb_status {
    guard(|| {
        // SAFETY: `r` is NULL or a live result.
        let r = unsafe { try_ref(r, "result") }?;
        f(&r.inner)
    })
}

/// Copies the plain fields into `*out`.
#[unsafe(no_mangle)]
pub extern "C" fn lb_settle_result_get(
    r: *const lb_settle_result,
    out: *mut lb_settle_result_info,
) -> lb_status {
    with_result(r, |r| {
        check_out(out, "out")?;
        let info = lb_settle_result_info {
            lease_id: r.lease.0,
            outcome: lb_settle_outcome::from_core(r.outcome),
            success: r.is_success(),
            status: r.status.map_or(0, u32::from),
            has_code: r.code.is_some(),
            record_kept: r.record_kept,
            journaled: r.journaled,
            replayed: r.replayed,
            failed_after_heartbeat: r.failed_after_heartbeat,
            has_journal_error: r.journal_error.is_some(),
            decision_count: r.decisions.len(),
        };
        // SAFETY: checked non-NULL; writable by the caller's promise.
        unsafe { write_out(out, info) };
        Ok(())
    })
}

/// Copies the server's error code (empty when none) into `buf`.
#[unsafe(no_mangle)]
pub extern "C" fn lb_settle_result_code(
    r: *const lb_settle_result,
    buf: *mut c_char,
    buf_len: usize,
    out_needed: *mut usize,
) -> lb_status {
    with_result(r, |r| {
        let t = r.code.as_deref().unwrap_or("");
        // SAFETY: `buf` NULL or writable for `buf_len`; `out_needed` checked inside.
        unsafe { copy_text(t.as_bytes(), buf, buf_len, out_needed) }
    })
}

/// Copies the settlement's one idempotency key (empty for `no_actual`).
#[unsafe(no_mangle)]
pub extern "C" fn lb_settle_result_key(
    r: *const lb_settle_result,
    buf: *mut c_char,
    buf_len: usize,
    out_needed: *mut usize,
) -> lb_status {
    with_result(r, |r| {
        // SAFETY: as above.
        unsafe { copy_text(r.key.as_bytes(), buf, buf_len, out_needed) }
    })
}

/// Copies the reservation id.
#[unsafe(no_mangle)]
pub extern "C" fn lb_settle_result_reservation_id(
    r: *const lb_settle_result,
    buf: *mut c_char,
    buf_len: usize,
    out_needed: *mut usize,
) -> lb_status {
    with_result(r, |r| {
        // SAFETY: as above.
        unsafe { copy_text(r.reservation_id.as_bytes(), buf, buf_len, out_needed) }
    })
}

/// Copies the whole result as one JSON object (as lb_event_json() of a
/// settled event).
#[unsafe(no_mangle)]
pub extern "C" fn lb_settle_result_json(
    r: *const lb_settle_result,
    buf: *mut c_char,
    buf_len: usize,
    out_needed: *mut usize,
) -> lb_status {
    with_result(r, |r| {
        let t = result_json(r).to_string();
        // SAFETY: as above.
        unsafe { copy_text(t.as_bytes(), buf, buf_len, out_needed) }
    })
}

/// Writes a new handle to the `i`-th decision into `*out` (free it with
/// lb_settlement_decision_free()).
///
/// Errors: `LB_STATUS_INVALID_ARGUMENT` (`i` out of range).
#[unsafe(no_mangle)]
pub extern "C" fn lb_settle_result_decision(
    r: *const lb_settle_result,
    i: usize,
    out: *mut *mut lb_settlement_decision,
) -> lb_status {
    with_result(r, |r| {
        check_out(out, "out")?;
        let d = r.decisions.get(i).ok_or_else(|| {
            Fail::invalid(format!(
                "index {i} is out of range (count {})",
                r.decisions.len()
            ))
        })?;
        let b = Box::new(lb_settlement_decision { inner: d.clone() });
        // SAFETY: checked non-NULL; writable by the caller's promise.
        unsafe { write_out(out, Box::into_raw(b)) };
        Ok(())
    })
}

/// Frees a result from lb_settling_wait(). NULL is a no-op. (A result lent
/// by lb_event_settle_result() is never freed.)
#[unsafe(no_mangle)]
pub extern "C" fn lb_settle_result_free(r: *mut lb_settle_result) {
    let _ = guard(|| {
        if !r.is_null() {
            // SAFETY: from lb_settling_wait(), freed once.
            drop(unsafe { Box::from_raw(r) });
        }
        Ok(())
    });
}

// ----- flush, replay -----

/// What lb_driver_flush() found.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct lb_flush_report {
    /// Every settlement ended (and the start replay, if any, is done).
    pub settled: bool,
    /// How many settlements were still unresolved when the wait ended
    /// (their records stay in the journal, J-7).
    pub pending: usize,
}

/// Waits at most `timeout_ms` until every settlement in progress has ended
/// (and a replay under way is done) (J-7); what is unresolved then stays in
/// the journal. Writes what it found into `*out`.
///
/// Errors: `LB_STATUS_SHUT_DOWN`, `LB_STATUS_NULL_ARGUMENT`.
#[unsafe(no_mangle)]
pub extern "C" fn lb_driver_flush(
    driver: *const lb_driver,
    timeout_ms: u64,
    out: *mut lb_flush_report,
) -> lb_status {
    guard(|| {
        // SAFETY: `driver` is NULL or a live driver.
        let d = unsafe { try_ref(driver, "driver") }?;
        check_out(out, "out")?;
        let r = d.with(|driver| Ok(driver.flush(Duration::from_millis(timeout_ms))))?;
        let report = lb_flush_report {
            settled: r.settled,
            pending: r.pending.len(),
        };
        // SAFETY: checked non-NULL; writable by the caller's promise.
        unsafe { write_out(out, report) };
        Ok(())
    })
}

/// Replays the journal's partition now (as at start): every record not
/// claimed elsewhere is settled in the background, reported by events.
///
/// Errors: `LB_STATUS_INVALID_CONFIG` (the journal is off),
/// `LB_STATUS_SHUT_DOWN`.
#[unsafe(no_mangle)]
pub extern "C" fn lb_driver_replay(driver: *const lb_driver) -> lb_status {
    guard(|| {
        // SAFETY: `driver` is NULL or a live driver.
        let d = unsafe { try_ref(driver, "driver") }?;
        d.with(|driver| driver.replay().map_err(driver_error))
    })
}
