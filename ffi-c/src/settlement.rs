//! The settlement of one reservation (commit, the expired-commit event
//! fallback, release): the core's sans-IO `Settlement` (rules ST-1..ST-11,
//! SP-1..SP-4 of `settlement.md`) behind opaque handles.
//!
//! Thin on purpose: every rule (classification, backoff, `Retry-After`,
//! the record's layout and checks, keys) lives in the core. The durable
//! journal (file I/O, J-1..J-8) is not part of this module: the caller
//! writes the record text of lb_settlement_record_json() wherever it keeps
//! records and acknowledges the write with lb_settlement_handle_persisted().
//! When the core's journal module lands, it gets its own `lb_journal_*`
//! functions beside these, taking the same record text.

use std::ffi::c_char;
use std::panic::{AssertUnwindSafe, catch_unwind};

use leasebeat::{
    Now, RecordMode, RecordUpdate, ResponseRef, RetryPolicy, SequentialKeys, SettleClass,
    SettleMode, SettleNext, SettleOutcome, SettleWarning, Settlement, SettlementAction,
    SettlementConfig, SettlementDecision, UuidV4Keys,
};

use crate::buf::{
    check_out, copy_bytes, copy_text, try_mut, try_ref, try_slice, try_slice_named, try_str,
    try_str_len, write_out,
};
use crate::error::{Fail, guard, guard_str, lb_status};
use crate::heartbeat::lb_header;
use crate::types::{LB_FAILURE_CONNECT, LB_FAILURE_RESET, LB_FAILURE_TIMEOUT, lb_failure};

/// A settlement configuration under construction (opaque): the retry
/// policy, the event fallback, the base URL, the release reason and the key
/// source of settlements made from it.
///
/// Made by lb_settlement_config_new() with the defaults (5 attempts per
/// mode, 500 ms doubling up to 30000 ms, no event fallback, an empty base
/// URL, no release reason, random UUIDv4 keys), changed by the
/// `lb_settlement_config_set_*` functions, read by lb_settlement_new_commit(),
/// lb_settlement_new_release() and lb_settlement_from_record(), freed by
/// lb_settlement_config_free(). Values are checked when a settlement is made.
pub struct lb_settlement_config {
    pub(crate) retry: RetryPolicy,
    event: Option<Vec<u8>>,
    base_url: String,
    release_reason: Option<String>,
    key_prefix: Option<String>,
}

/// The settlement of one reservation (opaque): the sans-IO state machine
/// that says when to persist the record, when to send the commit, the event
/// fallback or the release (always with the one key, ST-1), and how it
/// ended.
///
/// Ask what to do with lb_settlement_poll_action(); report what happened
/// with the `lb_settlement_handle_*` functions, with monotonic nanosecond
/// times that never go backwards (and, where a response may set a
/// `Retry-After` floor, the wall clock in Unix ms). A call that fails
/// changes nothing. A `const lb_settlement *` may be read from several
/// threads at once; an `lb_settlement *` call needs exclusive access.
pub struct lb_settlement {
    pub(crate) inner: Settlement,
    /// Set when a call panicked: every further call is refused with
    /// `LB_STATUS_PANIC`.
    pub(crate) poisoned: bool,
}

/// One decision of a settlement (opaque), from
/// lb_settlement_last_decision() or lb_settlement_decision_clone(); freed
/// with lb_settlement_decision_free(). Immutable: a
/// `const lb_settlement_decision *` may be read from several threads.
pub struct lb_settlement_decision {
    pub(crate) inner: SettlementDecision,
}

/// A settlement's mode, also the endpoint of an attempt.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum lb_settle_mode {
    /// Commit: `POST /v1/reservations/{reservation_id}/commit`.
    Commit = 0,
    /// The expired-commit fallback: `POST /v1/events` (ST-5).
    Event = 1,
    /// Release: `POST /v1/reservations/{reservation_id}/release` (not journaled).
    Release = 2,
}

impl lb_settle_mode {
    pub(crate) fn from_core(m: SettleMode) -> lb_settle_mode {
        match m {
            SettleMode::Commit => lb_settle_mode::Commit,
            SettleMode::Event => lb_settle_mode::Event,
            SettleMode::Release => lb_settle_mode::Release,
        }
    }

    pub(crate) fn from_endpoint(e: leasebeat::Endpoint) -> lb_settle_mode {
        match e {
            leasebeat::Endpoint::Commit => lb_settle_mode::Commit,
            leasebeat::Endpoint::Event => lb_settle_mode::Event,
            leasebeat::Endpoint::Release => lb_settle_mode::Release,
        }
    }

    fn from_record(m: RecordMode) -> lb_settle_mode {
        match m {
            RecordMode::Commit => lb_settle_mode::Commit,
            RecordMode::Event => lb_settle_mode::Event,
        }
    }
}

/// How a settlement ended (`LB_SETTLE_OUTCOME_NONE`: it has not).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum lb_settle_outcome {
    /// Not ended.
    None = 0,
    /// ST-2: the commit succeeded; remove the record.
    Committed = 1,
    /// ST-2: the event fallback succeeded; remove the record.
    Applied = 2,
    /// ST-2: the release succeeded.
    Released = 3,
    /// ST-7: the server understood and refused (the code is in the
    /// decision); remove the record.
    Rejected = 4,
    /// ST-6: 401 or 403; the record stays, never a release.
    AuthFailed = 5,
    /// ST-8: a 4xx without a usable code; the record stays.
    Unclassified = 6,
    /// ST-3: this run's attempts are used up; the record stays for replay.
    Exhausted = 7,
    /// ST-5: expired and no event body known: the usage is NOT recorded; the
    /// record stays.
    ExpiredUnrecorded = 8,
    /// ST-10: no actual amount was known; nothing was sent.
    NoActual = 9,
}

impl lb_settle_outcome {
    pub(crate) fn from_core(o: SettleOutcome) -> lb_settle_outcome {
        match o {
            SettleOutcome::Committed => lb_settle_outcome::Committed,
            SettleOutcome::Applied => lb_settle_outcome::Applied,
            SettleOutcome::Released => lb_settle_outcome::Released,
            SettleOutcome::Rejected => lb_settle_outcome::Rejected,
            SettleOutcome::AuthFailed => lb_settle_outcome::AuthFailed,
            SettleOutcome::Unclassified => lb_settle_outcome::Unclassified,
            SettleOutcome::Exhausted => lb_settle_outcome::Exhausted,
            SettleOutcome::ExpiredUnrecorded => lb_settle_outcome::ExpiredUnrecorded,
            SettleOutcome::NoActual => lb_settle_outcome::NoActual,
        }
    }

    pub(crate) fn from_option(o: Option<SettleOutcome>) -> lb_settle_outcome {
        o.map_or(lb_settle_outcome::None, lb_settle_outcome::from_core)
    }
}

/// What a settlement decision asks for next: the vectors' `next`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum lb_settle_next {
    /// Persist the record (lb_settlement_record_json()), then report it.
    Persist = 0,
    /// Send the commit.
    Commit = 1,
    /// Send the event (the expired-commit fallback).
    Event = 2,
    /// Send the release.
    Release = 3,
    /// The attempt is in flight: report its outcome.
    Wait = 4,
    /// The settlement ended (see the outcome).
    Done = 5,
}

impl lb_settle_next {
    fn from_core(n: SettleNext) -> lb_settle_next {
        match n {
            SettleNext::Persist => lb_settle_next::Persist,
            SettleNext::Send(leasebeat::Endpoint::Commit) => lb_settle_next::Commit,
            SettleNext::Send(leasebeat::Endpoint::Event) => lb_settle_next::Event,
            SettleNext::Send(leasebeat::Endpoint::Release) => lb_settle_next::Release,
            SettleNext::Wait => lb_settle_next::Wait,
            SettleNext::Done(_) => lb_settle_next::Done,
        }
    }
}

/// What a decision says about the durable record.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum lb_record_update {
    /// Nothing changes (or there is no record: a release).
    None = 0,
    /// Write the record (`next` is persist): lb_settlement_record_json().
    Write = 1,
    /// Remove it (J-5: only after ST-2 success or an ST-7 rejection).
    Remove = 2,
    /// Keep it for a later replay.
    Keep = 3,
}

/// How the event behind a settlement decision was classified.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum lb_settle_class {
    /// Built from a configuration.
    Start = 0,
    /// Built from a record (SP-4).
    Restart = 1,
    /// The persist was acknowledged.
    Persisted = 2,
    /// The persist failed (SP-3).
    PersistFailed = 3,
    /// The attempt was sent.
    Sent = 4,
    /// ST-2 success.
    Success = 5,
    /// A 2xx that is not the exact success.
    Ambiguous = 6,
    /// Timeout, connection failure, reset.
    Transport = 7,
    /// 5xx, 1xx, 3xx, 600 and above.
    ServerError = 8,
    /// 429 or `LIMIT_EXCEEDED` (ST-4).
    Throttled = 9,
    /// 410 or `RESERVATION_EXPIRED` on a commit (ST-5).
    Expired = 10,
    /// 401 or 403 (ST-6).
    Auth = 11,
    /// An understood rejection (ST-7).
    Rejected = 12,
    /// Any other 4xx (ST-8).
    Unclassified = 13,
}

impl lb_settle_class {
    fn from_core(c: SettleClass) -> lb_settle_class {
        match c {
            SettleClass::Start => lb_settle_class::Start,
            SettleClass::Restart => lb_settle_class::Restart,
            SettleClass::Persisted => lb_settle_class::Persisted,
            SettleClass::PersistFailed => lb_settle_class::PersistFailed,
            SettleClass::Sent => lb_settle_class::Sent,
            SettleClass::Success => lb_settle_class::Success,
            SettleClass::Ambiguous => lb_settle_class::Ambiguous,
            SettleClass::Transport => lb_settle_class::Transport,
            SettleClass::ServerError => lb_settle_class::ServerError,
            SettleClass::Throttled => lb_settle_class::Throttled,
            SettleClass::Expired => lb_settle_class::Expired,
            SettleClass::Auth => lb_settle_class::Auth,
            SettleClass::Rejected => lb_settle_class::Rejected,
            SettleClass::Unclassified => lb_settle_class::Unclassified,
        }
    }
}

/// A warning carried by a settlement decision.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum lb_settle_warning {
    /// SP-3: the persist failed; the request goes anyway.
    PersistFailed = 0,
    /// ST-4: a 429 without a usable `Retry-After`: the backoff decides.
    RetryAfterUnusable = 1,
    /// ST-4: the `Retry-After` exceeded 3600 s and was capped.
    RetryAfterCapped = 2,
}

impl lb_settle_warning {
    fn from_core(w: SettleWarning) -> lb_settle_warning {
        match w {
            SettleWarning::PersistFailed => lb_settle_warning::PersistFailed,
            SettleWarning::RetryAfterUnusable => lb_settle_warning::RetryAfterUnusable,
            SettleWarning::RetryAfterCapped => lb_settle_warning::RetryAfterCapped,
        }
    }
}

// ----- configuration -----

fn with_config(
    cfg: *mut lb_settlement_config,
    f: impl FnOnce(&mut lb_settlement_config) -> Result<(), Fail>,
) -> lb_status {
    guard(|| {
        // SAFETY: `cfg` is NULL or a live configuration used by this thread only.
        let cfg = unsafe { try_mut(cfg, "cfg") }?;
        f(cfg)
    })
}

/// Makes a settlement configuration with the defaults (see
/// ::lb_settlement_config). On success `*out` owns it: free it with
/// lb_settlement_config_free().
#[unsafe(no_mangle)]
pub extern "C" fn lb_settlement_config_new(out: *mut *mut lb_settlement_config) -> lb_status {
    guard(|| {
        check_out(out, "out")?;
        let cfg = Box::new(lb_settlement_config {
            retry: RetryPolicy::default(),
            event: None,
            base_url: String::new(),
            release_reason: None,
            key_prefix: None,
        });
        // SAFETY: `out` was checked non-NULL; the caller promises it is writable.
        unsafe { write_out(out, Box::into_raw(cfg)) };
        Ok(())
    })
}

/// Frees a settlement configuration. NULL is a no-op. Settlements made from
/// it stay valid.
#[unsafe(no_mangle)]
pub extern "C" fn lb_settlement_config_free(cfg: *mut lb_settlement_config) {
    let _ = guard(|| {
        if !cfg.is_null() {
            // SAFETY: a non-NULL `cfg` came from lb_settlement_config_new()
            // and is freed once, by the caller's promise.
            drop(unsafe { Box::from_raw(cfg) });
        }
        Ok(())
    });
}

/// Sets the retry policy (ST-3, SP-1): at most `max_attempts` requests per
/// mode in one run (1 or more), the delay after the first failure
/// `initial_ms`, doubling, at most `max_ms`. Checked by the `lb_settlement_new*`
/// functions (`LB_STATUS_INVALID_CONFIG`).
#[unsafe(no_mangle)]
pub extern "C" fn lb_settlement_config_set_retry(
    cfg: *mut lb_settlement_config,
    max_attempts: u32,
    initial_ms: u64,
    max_ms: u64,
) -> lb_status {
    with_config(cfg, |c| {
        c.retry = RetryPolicy {
            max_attempts,
            initial_ms,
            max_ms,
        };
        Ok(())
    })
}

/// Sets what the expired-commit fallback adds (ST-5): `json` is a
/// NUL-terminated UTF-8 JSON object with `subject` (a non-empty object) and
/// `action` (an object with string `kind` and `name`). Without it a commit
/// answered 410 ends `expired_unrecorded`. Checked by
/// lb_settlement_new_commit() (`LB_STATUS_INVALID_CONFIG`).
///
/// Errors: `LB_STATUS_INVALID_UTF8`.
#[unsafe(no_mangle)]
pub extern "C" fn lb_settlement_config_set_event(
    cfg: *mut lb_settlement_config,
    json: *const c_char,
) -> lb_status {
    with_config(cfg, |c| {
        // SAFETY: `json` is NULL or a NUL-terminated string, by the caller's promise.
        let text = unsafe { try_str(json, "json") }?;
        c.event = Some(text.as_bytes().to_vec());
        Ok(())
    })
}

/// Sets the server's base URL stored in the record (at most 4096 bytes;
/// `""`, the default, when unknown). NUL-terminated UTF-8.
///
/// Errors: `LB_STATUS_INVALID_UTF8`.
#[unsafe(no_mangle)]
pub extern "C" fn lb_settlement_config_set_base_url(
    cfg: *mut lb_settlement_config,
    base_url: *const c_char,
) -> lb_status {
    with_config(cfg, |c| {
        // SAFETY: `base_url` is NULL or a NUL-terminated string, by the caller's promise.
        c.base_url = unsafe { try_str(base_url, "base_url") }?.to_owned();
        Ok(())
    })
}

/// Sets the `reason` of a release (at most 256 characters), NUL-terminated
/// UTF-8. Used by lb_settlement_new_release() only; a commit made from a
/// configuration with a reason is refused (`LB_STATUS_INVALID_CONFIG`).
///
/// Errors: `LB_STATUS_INVALID_UTF8`.
#[unsafe(no_mangle)]
pub extern "C" fn lb_settlement_config_set_release_reason(
    cfg: *mut lb_settlement_config,
    reason: *const c_char,
) -> lb_status {
    with_config(cfg, |c| {
        // SAFETY: `reason` is NULL or a NUL-terminated string, by the caller's promise.
        c.release_reason = Some(unsafe { try_str(reason, "reason") }?.to_owned());
        Ok(())
    })
}

/// Makes settlements from this configuration take the deterministic key
/// `"<prefix>1"` instead of a random UUIDv4 key: for tests and replays only.
///
/// Errors: `LB_STATUS_INVALID_UTF8`.
#[unsafe(no_mangle)]
pub extern "C" fn lb_settlement_config_set_key_prefix(
    cfg: *mut lb_settlement_config,
    prefix: *const c_char,
) -> lb_status {
    with_config(cfg, |c| {
        // SAFETY: `prefix` is NULL or a NUL-terminated string, by the caller's promise.
        c.key_prefix = Some(unsafe { try_str(prefix, "prefix") }?.to_owned());
        Ok(())
    })
}

impl lb_settlement_config {
    fn build(&self, config: SettlementConfig, now: Now) -> Result<Settlement, Fail> {
        Ok(match &self.key_prefix {
            Some(p) => {
                Settlement::with_key_source(config, now, &mut SequentialKeys::new(p.clone()))?
            }
            None => {
                crate::fork::reseed_random_keys_after_fork();
                Settlement::with_key_source(config, now, &mut UuidV4Keys)?
            }
        })
    }
}

pub(crate) fn boxed(out: *mut *mut lb_settlement, inner: Settlement) {
    let s = Box::new(lb_settlement {
        inner,
        poisoned: false,
    });
    // SAFETY: `out` was checked non-NULL by the caller of this function; the
    // C caller promises it is writable.
    unsafe { write_out(out, Box::into_raw(s)) };
}

/// Makes the settlement of a commit of `reservation_id` at `now_ns`
/// (monotonic) and `wall_ms` (Unix ms, stamped into the record).
///
/// `reservation_id` is `reservation_id_len` bytes of UTF-8 (not
/// NUL-terminated: an id from a server may contain any character, and a C
/// string would silently cut it at a NUL and settle another reservation);
/// the core accepts 1..=128 characters without a control character, slashes
/// included (the caller percent-encodes the id into the request path).
///
/// `commit_json` is the commit body without its key, a NUL-terminated UTF-8
/// JSON object with `actual` (`{"unit": ..., "amount": 0..=2^63-1}`) and
/// optional `metrics` and `metadata`. NULL means no actual amount is known
/// (ST-10): the settlement is done at once with `LB_SETTLE_OUTCOME_NO_ACTUAL`
/// and nothing is ever sent. Otherwise the first action is
/// `LB_SETTLEMENT_ACTION_PERSIST` of a commit-mode record, and the commit
/// goes once that is reported (lb_settlement_handle_persisted() or
/// lb_settlement_handle_persist_failed()).
///
/// On success `*out` owns the settlement: free it with lb_settlement_free().
/// `cfg` is only read.
///
/// Errors: `LB_STATUS_INVALID_CONFIG` (a bad reservation id, commit body,
/// event body, retry policy, base URL, or a release reason on a commit; the
/// message says which), `LB_STATUS_INVALID_KEY`, `LB_STATUS_INVALID_UTF8`.
#[unsafe(no_mangle)]
pub extern "C" fn lb_settlement_new_commit(
    cfg: *const lb_settlement_config,
    reservation_id: *const c_char,
    reservation_id_len: usize,
    commit_json: *const c_char,
    now_ns: u64,
    wall_ms: u64,
    out: *mut *mut lb_settlement,
) -> lb_status {
    guard(|| {
        // SAFETY: `cfg` is NULL or a live configuration not mutated during the call.
        let cfg = unsafe { try_ref(cfg, "cfg") }?;
        // SAFETY: NULL (with 0) or valid for `reservation_id_len` bytes.
        let id = unsafe { try_str_len(reservation_id, reservation_id_len, "reservation_id") }?;
        let commit = if commit_json.is_null() {
            None
        } else {
            // SAFETY: non-NULL, NUL-terminated by the caller's promise.
            Some(
                unsafe { try_str(commit_json, "commit_json") }?
                    .as_bytes()
                    .to_vec(),
            )
        };
        check_out(out, "out")?;
        let config = SettlementConfig {
            reservation_id: id.to_owned(),
            base_url: cfg.base_url.clone(),
            commit,
            event: cfg.event.clone(),
            release: false,
            release_reason: cfg.release_reason.clone(),
            retry: cfg.retry,
        };
        boxed(out, cfg.build(config, Now::new(now_ns, wall_ms))?);
        Ok(())
    })
}

/// Makes the settlement of a release of `reservation_id`
/// (`reservation_id_len` bytes, as for lb_settlement_new_commit(); work that used
/// nothing; not journaled, ST-9) at `now_ns`: the release is due at once.
/// The configuration's release reason goes in the body; its event body must
/// not be set. On success `*out` owns the settlement.
///
/// Errors: `LB_STATUS_INVALID_CONFIG`, `LB_STATUS_INVALID_KEY`,
/// `LB_STATUS_INVALID_UTF8`.
#[unsafe(no_mangle)]
pub extern "C" fn lb_settlement_new_release(
    cfg: *const lb_settlement_config,
    reservation_id: *const c_char,
    reservation_id_len: usize,
    now_ns: u64,
    wall_ms: u64,
    out: *mut *mut lb_settlement,
) -> lb_status {
    guard(|| {
        // SAFETY: `cfg` is NULL or a live configuration not mutated during the call.
        let cfg = unsafe { try_ref(cfg, "cfg") }?;
        // SAFETY: NULL (with 0) or valid for `reservation_id_len` bytes.
        let id = unsafe { try_str_len(reservation_id, reservation_id_len, "reservation_id") }?;
        check_out(out, "out")?;
        let config = SettlementConfig {
            reservation_id: id.to_owned(),
            base_url: cfg.base_url.clone(),
            commit: None,
            event: cfg.event.clone(),
            release: true,
            release_reason: cfg.release_reason.clone(),
            retry: cfg.retry,
        };
        boxed(out, cfg.build(config, Now::new(now_ns, wall_ms))?);
        Ok(())
    })
}

/// Rebuilds a settlement from its durable record alone (SP-4, J-6): the
/// record file's bytes `record` (`record_len` bytes, e.g. what
/// lb_settlement_record_json() gave, or a record runcycles Python 0.5.3
/// wrote), at `now_ns` / `wall_ms`. It keeps the record's key and mode,
/// starts a fresh attempt count, and sends first at
/// `max(0, not_before_ms - wall_ms)` after `now_ns` (at most 3600 s); it
/// persists nothing until the record changes. Only the configuration's retry
/// policy is used.
///
/// Errors: `LB_STATUS_INVALID_ARGUMENT` for a record the core refuses (not
/// JSON, unsupported version, a missing body, keys that differ, ...: the
/// caller quarantines it, J-4), `LB_STATUS_INVALID_CONFIG` (retry policy).
#[unsafe(no_mangle)]
pub extern "C" fn lb_settlement_from_record(
    cfg: *const lb_settlement_config,
    record: *const u8,
    record_len: usize,
    now_ns: u64,
    wall_ms: u64,
    out: *mut *mut lb_settlement,
) -> lb_status {
    guard(|| {
        // SAFETY: `cfg` is NULL or a live configuration not mutated during the call.
        let cfg = unsafe { try_ref(cfg, "cfg") }?;
        // SAFETY: `record` is NULL (with 0) or valid for `record_len` bytes.
        let bytes = unsafe { try_slice(record, record_len, "record") }?;
        check_out(out, "out")?;
        let inner = Settlement::from_record_json(bytes, cfg.retry, Now::new(now_ns, wall_ms))?;
        boxed(out, inner);
        Ok(())
    })
}

/// Frees a settlement. NULL is a no-op. Decisions obtained from it stay valid.
#[unsafe(no_mangle)]
pub extern "C" fn lb_settlement_free(s: *mut lb_settlement) {
    let _ = guard(|| {
        if !s.is_null() {
            // SAFETY: a non-NULL `s` came from an `lb_settlement_new*`
            // function and is freed once, by the caller's promise.
            drop(unsafe { Box::from_raw(s) });
        }
        Ok(())
    });
}

// ----- reading -----

fn poisoned() -> Fail {
    Fail::new(
        lb_status::Panic,
        "this settlement panicked earlier (a bug) and can no longer be used; free it",
    )
}

pub(crate) fn read(
    s: *const lb_settlement,
    f: impl FnOnce(&Settlement) -> Result<(), Fail>,
) -> lb_status {
    guard(|| {
        // SAFETY: `s` is NULL or a live settlement not mutated during the call.
        let s = unsafe { try_ref(s, "s") }?;
        if s.poisoned {
            return Err(poisoned());
        }
        f(&s.inner)
    })
}

/// Runs a mutating call; a panic inside poisons the settlement.
pub(crate) fn mutate(
    s: *mut lb_settlement,
    f: impl FnOnce(&mut Settlement) -> Result<(), Fail>,
) -> lb_status {
    guard(|| {
        // SAFETY: `s` is NULL or a live settlement that no other thread uses
        // during this call.
        let s = unsafe { try_mut(s, "s") }?;
        if s.poisoned {
            return Err(poisoned());
        }
        match catch_unwind(AssertUnwindSafe(|| f(&mut s.inner))) {
            Ok(result) => result,
            Err(payload) => {
                s.poisoned = true;
                std::panic::resume_unwind(payload)
            }
        }
    })
}

/// The kind of an ::lb_settlement_action.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum lb_settlement_action_kind {
    /// Make the record (lb_settlement_record_json()) durable, then call
    /// lb_settlement_handle_persisted() or
    /// lb_settlement_handle_persist_failed(). Nothing is sent before.
    Persist = 0,
    /// Send the attempt at `due_ns` to `endpoint` with the key and body of
    /// lb_settlement_attempt_key() and lb_settlement_attempt_body(), then
    /// call lb_settlement_handle_sent().
    Send = 1,
    /// The attempt is in flight: report its outcome.
    Wait = 2,
    /// The settlement ended (`outcome`).
    Done = 3,
}

/// What the caller must do now: a value copy, valid after later calls.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct lb_settlement_action {
    /// Persist, send, wait or done.
    pub kind: lb_settlement_action_kind,
    /// The attempt to send or awaited (pass it to the `handle_*`
    /// functions); 0 for a persist or done.
    pub attempt_id: u64,
    /// Where the attempt goes; the current mode for a persist or done.
    pub endpoint: lb_settle_mode,
    /// When to send the attempt (caller monotonic ns); 0 for a persist or done.
    pub due_ns: u64,
    /// The attempt's ordinal within its mode, 1-based (SP-1); 0 otherwise.
    pub attempt_number: u32,
    /// True once the attempt was reported sent (then `sent_ns` holds when).
    pub sent: bool,
    /// When the attempt was reported sent; 0 if not sent.
    pub sent_ns: u64,
    /// The outcome for `LB_SETTLEMENT_ACTION_KIND_DONE`;
    /// `LB_SETTLE_OUTCOME_NONE` otherwise.
    pub outcome: lb_settle_outcome,
}

/// Writes what the caller must do now into `*out`.
#[unsafe(no_mangle)]
pub extern "C" fn lb_settlement_poll_action(
    s: *const lb_settlement,
    out: *mut lb_settlement_action,
) -> lb_status {
    read(s, |s| {
        check_out(out, "out")?;
        let mut action = lb_settlement_action {
            kind: lb_settlement_action_kind::Done,
            attempt_id: 0,
            endpoint: lb_settle_mode::from_core(s.mode()),
            due_ns: 0,
            attempt_number: 0,
            sent: false,
            sent_ns: 0,
            outcome: lb_settle_outcome::None,
        };
        match s.poll_action() {
            SettlementAction::Persist(_) => action.kind = lb_settlement_action_kind::Persist,
            SettlementAction::Send(a) | SettlementAction::Wait(a) => {
                action.kind = if a.sent_ns.is_some() {
                    lb_settlement_action_kind::Wait
                } else {
                    lb_settlement_action_kind::Send
                };
                action.attempt_id = a.id;
                action.endpoint = lb_settle_mode::from_endpoint(a.endpoint);
                action.due_ns = a.due_ns;
                action.attempt_number = a.number;
                action.sent = a.sent_ns.is_some();
                action.sent_ns = a.sent_ns.unwrap_or(0);
            }
            SettlementAction::Done(o) => action.outcome = lb_settle_outcome::from_core(o),
        }
        // SAFETY: `out` was checked non-NULL; the caller promises it is writable.
        unsafe { write_out(out, action) };
        Ok(())
    })
}

fn attempt(s: &Settlement) -> Result<&leasebeat::SettleAttempt, Fail> {
    s.attempt().ok_or_else(|| {
        Fail::new(
            lb_status::NotOutstanding,
            "no attempt is outstanding (a persist is, or the settlement has ended)",
        )
    })
}

/// Copies the outstanding attempt's idempotency key (the `X-Idempotency-Key`
/// header and the body's `idempotency_key`; the same for every attempt,
/// ST-1) into `buf`. Buffer convention of lb_heartbeat_attempt_key().
///
/// Errors: `LB_STATUS_NOT_OUTSTANDING` when no attempt is outstanding.
#[unsafe(no_mangle)]
pub extern "C" fn lb_settlement_attempt_key(
    s: *const lb_settlement,
    buf: *mut c_char,
    buf_len: usize,
    out_needed: *mut usize,
) -> lb_status {
    read(s, |s| {
        check_out(out_needed, "out_needed")?;
        let a = attempt(s)?;
        // SAFETY: `buf` is NULL or writable for `buf_len` bytes, `out_needed` writable.
        unsafe { copy_text(a.key.as_bytes(), buf, buf_len, out_needed) }
    })
}

/// Copies the outstanding attempt's exact JSON request body into `buf`
/// (not NUL-terminated; `*out_needed` is its exact length).
/// Buffer convention of lb_heartbeat_attempt_key().
///
/// Errors: `LB_STATUS_NOT_OUTSTANDING` when no attempt is outstanding.
#[unsafe(no_mangle)]
pub extern "C" fn lb_settlement_attempt_body(
    s: *const lb_settlement,
    buf: *mut u8,
    buf_len: usize,
    out_needed: *mut usize,
) -> lb_status {
    read(s, |s| {
        check_out(out_needed, "out_needed")?;
        let a = attempt(s)?;
        // SAFETY: `buf` is NULL or writable for `buf_len` bytes, `out_needed` writable.
        unsafe { copy_bytes(&a.body, buf, buf_len, out_needed) }
    })
}

/// Copies the settlement's one idempotency key (empty for `no_actual`) into
/// `buf`. Buffer convention of lb_heartbeat_attempt_key().
#[unsafe(no_mangle)]
pub extern "C" fn lb_settlement_key(
    s: *const lb_settlement,
    buf: *mut c_char,
    buf_len: usize,
    out_needed: *mut usize,
) -> lb_status {
    read(s, |s| {
        check_out(out_needed, "out_needed")?;
        // SAFETY: `buf` is NULL or writable for `buf_len` bytes, `out_needed` writable.
        unsafe { copy_text(s.key().as_bytes(), buf, buf_len, out_needed) }
    })
}

/// Copies the record as it is (or is to be) persisted, the exact text of
/// the record file (runcycles Python 0.5.3's layout, version 1), into `buf`
/// as NUL-terminated UTF-8. Buffer convention of lb_heartbeat_attempt_key().
///
/// Errors: `LB_STATUS_NOT_OUTSTANDING` when the settlement has no record (a
/// release, or `no_actual`).
#[unsafe(no_mangle)]
pub extern "C" fn lb_settlement_record_json(
    s: *const lb_settlement,
    buf: *mut c_char,
    buf_len: usize,
    out_needed: *mut usize,
) -> lb_status {
    read(s, |s| {
        check_out(out_needed, "out_needed")?;
        let r = s.record().ok_or_else(|| {
            Fail::new(
                lb_status::NotOutstanding,
                "this settlement has no record (a release, or no actual amount)",
            )
        })?;
        let text = r.to_json();
        // SAFETY: `buf` is NULL or writable for `buf_len` bytes, `out_needed` writable.
        unsafe { copy_text(text.as_bytes(), buf, buf_len, out_needed) }
    })
}

/// Writes the settlement's outcome into `*out`: `LB_SETTLE_OUTCOME_NONE`
/// while it runs.
#[unsafe(no_mangle)]
pub extern "C" fn lb_settlement_outcome(
    s: *const lb_settlement,
    out: *mut lb_settle_outcome,
) -> lb_status {
    read(s, |s| {
        check_out(out, "out")?;
        // SAFETY: `out` was checked non-NULL; the caller promises it is writable.
        unsafe { write_out(out, lb_settle_outcome::from_option(s.outcome())) };
        Ok(())
    })
}

/// Writes a new handle to the most recent decision into `*out` (a settlement
/// always has one: the first is made when it is built). The caller owns it
/// and frees it with lb_settlement_decision_free().
#[unsafe(no_mangle)]
pub extern "C" fn lb_settlement_last_decision(
    s: *const lb_settlement,
    out: *mut *mut lb_settlement_decision,
) -> lb_status {
    read(s, |s| {
        check_out(out, "out")?;
        let d = Box::into_raw(Box::new(lb_settlement_decision {
            inner: s.last_decision().clone(),
        }));
        // SAFETY: `out` was checked non-NULL; the caller promises it is writable.
        unsafe { write_out(out, d) };
        Ok(())
    })
}

// ----- handlers -----

/// Reports that the record of the outstanding persist is durable, at `now_ns`.
///
/// Errors: `LB_STATUS_NOT_OUTSTANDING` (no persist is outstanding),
/// `LB_STATUS_TIME_WENT_BACKWARDS`, `LB_STATUS_STOPPED` (ended).
#[unsafe(no_mangle)]
pub extern "C" fn lb_settlement_handle_persisted(s: *mut lb_settlement, now_ns: u64) -> lb_status {
    mutate(s, |s| {
        s.handle_persisted(now_ns)?;
        Ok(())
    })
}

/// Reports that the write of the outstanding persist failed, at `now_ns`;
/// `message` (NUL-terminated UTF-8) says why. SP-3: the request goes anyway
/// at the same due time; the decision carries the warning `persist_failed`.
///
/// Errors: as lb_settlement_handle_persisted(), `LB_STATUS_INVALID_UTF8`.
#[unsafe(no_mangle)]
pub extern "C" fn lb_settlement_handle_persist_failed(
    s: *mut lb_settlement,
    message: *const c_char,
    now_ns: u64,
) -> lb_status {
    mutate(s, |s| {
        // SAFETY: `message` is NULL or a NUL-terminated string, by the caller's promise.
        let message = unsafe { try_str(message, "message") }?;
        s.handle_persist_failed(message, now_ns)?;
        Ok(())
    })
}

/// Reports that attempt `attempt_id` was sent at `now_ns`.
///
/// Errors: `LB_STATUS_NOT_OUTSTANDING`, `LB_STATUS_ALREADY_SENT`,
/// `LB_STATUS_TIME_WENT_BACKWARDS`, `LB_STATUS_STOPPED`.
#[unsafe(no_mangle)]
pub extern "C" fn lb_settlement_handle_sent(
    s: *mut lb_settlement,
    attempt_id: u64,
    now_ns: u64,
) -> lb_status {
    mutate(s, |s| {
        s.handle_sent(attempt_id, now_ns)?;
        Ok(())
    })
}

/// Reports the HTTP response to attempt `attempt_id`, observed at `now_ns`
/// (monotonic, after the complete body) and `wall_ms` (Unix ms: a
/// `Retry-After` floor is persisted on the wall clock, ST-4). The core
/// classifies it (ST-2..ST-8); read the decision with
/// lb_settlement_last_decision(). `headers`/`body` as for
/// lb_heartbeat_handle_response() (NULL only with a count/length of 0).
///
/// Errors: `LB_STATUS_INVALID_ARGUMENT` (status outside 100..=999),
/// `LB_STATUS_NOT_OUTSTANDING`, `LB_STATUS_NOT_SENT`,
/// `LB_STATUS_TIME_WENT_BACKWARDS`, `LB_STATUS_STOPPED`.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn lb_settlement_handle_response(
    s: *mut lb_settlement,
    attempt_id: u64,
    status: u32,
    headers: *const lb_header,
    header_count: usize,
    body: *const u8,
    body_len: usize,
    now_ns: u64,
    wall_ms: u64,
) -> lb_status {
    mutate(s, |s| {
        // SAFETY: `headers` is NULL (with 0) or valid for `header_count` elements.
        let raw: &[lb_header] = unsafe { try_slice(headers, header_count, "headers") }?;
        let mut pairs: Vec<(&[u8], &[u8])> = Vec::with_capacity(raw.len());
        for (i, h) in raw.iter().enumerate() {
            // SAFETY: each pointer is NULL (with 0) or valid for its length.
            let name =
                unsafe { try_slice_named(h.name, h.name_len, || format!("headers[{i}].name")) }?;
            // SAFETY: as above.
            let value =
                unsafe { try_slice_named(h.value, h.value_len, || format!("headers[{i}].value")) }?;
            pairs.push((name, value));
        }
        // SAFETY: `body` is NULL (with 0) or valid for `body_len` bytes.
        let body = unsafe { try_slice(body, body_len, "body") }?;
        let status = u16::try_from(status).map_err(|_| {
            Fail::invalid(format!(
                "HTTP status must be within 100..=999, got {status}"
            ))
        })?;
        let response = ResponseRef::new(status, body).headers(&pairs);
        s.handle_response(attempt_id, response, Now::new(now_ns, wall_ms))?;
        Ok(())
    })
}

/// Reports a transport failure (`LB_FAILURE_TIMEOUT`, `LB_FAILURE_CONNECT`
/// or `LB_FAILURE_RESET`) of attempt `attempt_id`, observed at `now_ns`:
/// transient (ST-3).
///
/// Errors: `LB_STATUS_INVALID_ARGUMENT` (unknown failure value),
/// `LB_STATUS_NOT_OUTSTANDING`, `LB_STATUS_NOT_SENT`,
/// `LB_STATUS_TIME_WENT_BACKWARDS`, `LB_STATUS_STOPPED`.
#[unsafe(no_mangle)]
pub extern "C" fn lb_settlement_handle_failure(
    s: *mut lb_settlement,
    attempt_id: u64,
    failure: lb_failure,
    now_ns: u64,
) -> lb_status {
    mutate(s, |s| {
        let failure = match failure {
            LB_FAILURE_TIMEOUT => leasebeat::TransportFailure::Timeout,
            LB_FAILURE_CONNECT => leasebeat::TransportFailure::Connect,
            LB_FAILURE_RESET => leasebeat::TransportFailure::Reset,
            other => return Err(Fail::invalid(format!("unknown lb_failure value {other}"))),
        };
        s.handle_failure(attempt_id, failure, now_ns)?;
        Ok(())
    })
}

// ----- decisions -----

/// The plain fields of a settlement decision, copied out by
/// lb_settlement_decision_get().
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct lb_settlement_decision_info {
    /// Persist, send (commit, event, release), wait, or done.
    pub next: lb_settle_next,
    /// The outcome when `next` is done; `LB_SETTLE_OUTCOME_NONE` otherwise.
    pub outcome: lb_settle_outcome,
    /// True for a send: `due_ns` holds its due time.
    pub has_due: bool,
    /// The send's due time, caller monotonic ns; 0 otherwise.
    pub due_ns: u64,
    /// The key's ordinal for a send or a wait: always 1 (ST-1, one key); 0
    /// otherwise.
    pub key_index: u32,
    /// The next request's ordinal within its mode (a send or a wait); 0 when
    /// absent.
    pub attempt: u32,
    /// The mode after this decision.
    pub mode: lb_settle_mode,
    /// What happens to the durable record.
    pub record: lb_record_update,
    /// For `LB_RECORD_UPDATE_WRITE`: the record's mode (commit or event).
    pub record_mode: lb_settle_mode,
    /// For `LB_RECORD_UPDATE_WRITE`: true when the record has a
    /// `not_before_ms` (then in `record_not_before_ms`).
    pub record_has_not_before: bool,
    /// The record's `not_before_ms` (Unix ms); 0 when absent.
    pub record_not_before_ms: u64,
    /// How the deciding event was classified.
    pub event_class: lb_settle_class,
    /// The HTTP status of the deciding response; 0 when absent.
    pub status: u32,
    /// True when `delay_ms` holds the delay chosen after a failure.
    pub has_delay: bool,
    /// The delay after a failure, ms (SP-1, ST-4); 0 when absent.
    pub delay_ms: u64,
    /// True when this decision set a wall-clock floor (ST-4).
    pub has_not_before: bool,
    /// That floor, Unix ms; 0 when absent.
    pub not_before_ms: u64,
    /// ST-11: stop the heartbeat now.
    pub stop_heartbeat: bool,
    /// How many warnings (lb_settlement_decision_warning()).
    pub warning_count: usize,
    /// True when the decision carries the server's error code
    /// (lb_settlement_decision_code()).
    pub has_code: bool,
    /// True when the decision carries a detail (lb_settlement_decision_detail()).
    pub has_detail: bool,
}

fn with_decision(
    d: *const lb_settlement_decision,
    f: impl FnOnce(&SettlementDecision) -> Result<(), Fail>,
) -> lb_status {
    guard(|| {
        // SAFETY: `d` is NULL or a live decision (never mutated).
        let d = unsafe { try_ref(d, "decision") }?;
        f(&d.inner)
    })
}

/// Frees a settlement decision. NULL is a no-op.
#[unsafe(no_mangle)]
pub extern "C" fn lb_settlement_decision_free(decision: *mut lb_settlement_decision) {
    let _ = guard(|| {
        if !decision.is_null() {
            // SAFETY: a non-NULL `decision` came from this library and is
            // freed once, by the caller's promise.
            drop(unsafe { Box::from_raw(decision) });
        }
        Ok(())
    });
}

/// Writes a new handle to a copy of `decision` into `*out` (free it with
/// lb_settlement_decision_free()).
#[unsafe(no_mangle)]
pub extern "C" fn lb_settlement_decision_clone(
    decision: *const lb_settlement_decision,
    out: *mut *mut lb_settlement_decision,
) -> lb_status {
    with_decision(decision, |d| {
        check_out(out, "out")?;
        let copy = Box::into_raw(Box::new(lb_settlement_decision { inner: d.clone() }));
        // SAFETY: `out` was checked non-NULL; the caller promises it is writable.
        unsafe { write_out(out, copy) };
        Ok(())
    })
}

/// Copies the plain fields of a settlement decision into `*out`.
#[unsafe(no_mangle)]
pub extern "C" fn lb_settlement_decision_get(
    decision: *const lb_settlement_decision,
    out: *mut lb_settlement_decision_info,
) -> lb_status {
    with_decision(decision, |d| {
        check_out(out, "out")?;
        let is_send = matches!(d.next, SettleNext::Send(_));
        let (record, record_mode, nb) = match d.record {
            None => (
                lb_record_update::None,
                lb_settle_mode::from_core(d.mode),
                None,
            ),
            Some(RecordUpdate::Write {
                mode,
                not_before_ms,
            }) => (
                lb_record_update::Write,
                lb_settle_mode::from_record(mode),
                not_before_ms,
            ),
            Some(RecordUpdate::Remove) => (
                lb_record_update::Remove,
                lb_settle_mode::from_core(d.mode),
                None,
            ),
            Some(RecordUpdate::Keep) => (
                lb_record_update::Keep,
                lb_settle_mode::from_core(d.mode),
                None,
            ),
        };
        let info = lb_settlement_decision_info {
            next: lb_settle_next::from_core(d.next),
            outcome: lb_settle_outcome::from_option(d.outcome()),
            has_due: is_send && d.at_ns.is_some(),
            due_ns: if is_send { d.at_ns.unwrap_or(0) } else { 0 },
            key_index: u32::from(matches!(d.next, SettleNext::Send(_) | SettleNext::Wait)),
            attempt: d.attempt.unwrap_or(0),
            mode: lb_settle_mode::from_core(d.mode),
            record,
            record_mode,
            record_has_not_before: nb.is_some(),
            record_not_before_ms: nb.unwrap_or(0),
            event_class: lb_settle_class::from_core(d.class),
            status: d.status.map_or(0, u32::from),
            has_delay: d.delay_ms.is_some(),
            delay_ms: d.delay_ms.unwrap_or(0),
            has_not_before: d.not_before_ms.is_some(),
            not_before_ms: d.not_before_ms.unwrap_or(0),
            stop_heartbeat: d.stop_heartbeat,
            warning_count: d.warnings.len(),
            has_code: d.code.is_some(),
            has_detail: d.detail.is_some(),
        };
        // SAFETY: `out` was checked non-NULL; the caller promises it is writable.
        unsafe { write_out(out, info) };
        Ok(())
    })
}

/// Writes warning number `index` (0-based, below `warning_count`) into `*out`.
///
/// Errors: `LB_STATUS_INVALID_ARGUMENT` for an index out of range.
#[unsafe(no_mangle)]
pub extern "C" fn lb_settlement_decision_warning(
    decision: *const lb_settlement_decision,
    index: usize,
    out: *mut lb_settle_warning,
) -> lb_status {
    with_decision(decision, |d| {
        check_out(out, "out")?;
        let w = d.warnings.get(index).ok_or_else(|| {
            Fail::invalid(format!(
                "warning index {index} is out of range (the decision has {})",
                d.warnings.len()
            ))
        })?;
        // SAFETY: `out` was checked non-NULL; the caller promises it is writable.
        unsafe { write_out(out, lb_settle_warning::from_core(*w)) };
        Ok(())
    })
}

/// Copies the server's error code that decided (empty when `has_code` is
/// false) into `buf`. Buffer convention of lb_heartbeat_attempt_key().
#[unsafe(no_mangle)]
pub extern "C" fn lb_settlement_decision_code(
    decision: *const lb_settlement_decision,
    buf: *mut c_char,
    buf_len: usize,
    out_needed: *mut usize,
) -> lb_status {
    with_decision(decision, |d| {
        let text = d.code.as_deref().unwrap_or("");
        // SAFETY: `buf` is NULL or writable for `buf_len` bytes; `out_needed`
        // is NULL (checked inside) or writable.
        unsafe { copy_text(text.as_bytes(), buf, buf_len, out_needed) }
    })
}

/// Copies the human-readable detail (empty when `has_detail` is false) into
/// `buf`. Buffer convention of lb_heartbeat_attempt_key().
#[unsafe(no_mangle)]
pub extern "C" fn lb_settlement_decision_detail(
    decision: *const lb_settlement_decision,
    buf: *mut c_char,
    buf_len: usize,
    out_needed: *mut usize,
) -> lb_status {
    with_decision(decision, |d| {
        let text = d.detail.as_deref().unwrap_or("");
        // SAFETY: as in lb_settlement_decision_code().
        unsafe { copy_text(text.as_bytes(), buf, buf_len, out_needed) }
    })
}

/// Copies the decision as one JSON line (the vectors' `expect` vocabulary:
/// `at` in ms, `attempt`, `class`, `code`, `delay_ms`, `detail`,
/// `heartbeat`, `key`, `mode`, `next`, `not_before_ms`, `outcome`, `record`,
/// `status`, `warnings`; members sorted) into `buf` as NUL-terminated UTF-8.
/// Buffer convention of lb_heartbeat_attempt_key().
#[unsafe(no_mangle)]
pub extern "C" fn lb_settlement_decision_json(
    decision: *const lb_settlement_decision,
    buf: *mut c_char,
    buf_len: usize,
    out_needed: *mut usize,
) -> lb_status {
    with_decision(decision, |d| {
        check_out(out_needed, "out_needed")?;
        let text = d.to_string();
        // SAFETY: as in lb_settlement_decision_code().
        unsafe { copy_text(text.as_bytes(), buf, buf_len, out_needed) }
    })
}

// ----- stable strings -----

fn pick(table: &[&'static [u8]], value: i32) -> &'static [u8] {
    usize::try_from(value)
        .ok()
        .and_then(|i| table.get(i).copied())
        .unwrap_or(b"unknown\0")
}

/// The stable string of an ::lb_settle_outcome value (`"committed"`, ...,
/// `"none"`). Never NULL (`"unknown"` for other values). Static.
#[unsafe(no_mangle)]
pub extern "C" fn lb_settle_outcome_str(outcome: i32) -> *const c_char {
    guard_str(
        || {
            pick(
                &[
                    b"none\0",
                    b"committed\0",
                    b"applied\0",
                    b"released\0",
                    b"rejected\0",
                    b"auth_failed\0",
                    b"unclassified\0",
                    b"exhausted\0",
                    b"expired_unrecorded\0",
                    b"no_actual\0",
                ],
                outcome,
            )
        },
        b"unknown\0",
    )
}

/// The stable string of an ::lb_settle_next value (`"persist"`, `"commit"`,
/// `"event"`, `"release"`, `"wait"`, `"done"`). Never NULL. Static.
#[unsafe(no_mangle)]
pub extern "C" fn lb_settle_next_str(next: i32) -> *const c_char {
    guard_str(
        || {
            pick(
                &[
                    b"persist\0",
                    b"commit\0",
                    b"event\0",
                    b"release\0",
                    b"wait\0",
                    b"done\0",
                ],
                next,
            )
        },
        b"unknown\0",
    )
}

/// The stable string of an ::lb_settle_mode value (`"commit"`, `"event"`,
/// `"release"`). Never NULL. Static.
#[unsafe(no_mangle)]
pub extern "C" fn lb_settle_mode_str(mode: i32) -> *const c_char {
    guard_str(
        || pick(&[b"commit\0", b"event\0", b"release\0"], mode),
        b"unknown\0",
    )
}

/// The stable string of an ::lb_record_update value (`"none"`, `"write"`,
/// `"remove"`, `"keep"`). Never NULL. Static.
#[unsafe(no_mangle)]
pub extern "C" fn lb_record_update_str(update: i32) -> *const c_char {
    guard_str(
        || pick(&[b"none\0", b"write\0", b"remove\0", b"keep\0"], update),
        b"unknown\0",
    )
}

/// The stable string of an ::lb_settle_class value (`"start"`, `"success"`,
/// `"throttled"`, ...). Never NULL. Static.
#[unsafe(no_mangle)]
pub extern "C" fn lb_settle_class_str(class: i32) -> *const c_char {
    guard_str(
        || {
            pick(
                &[
                    b"start\0",
                    b"restart\0",
                    b"persisted\0",
                    b"persist_failed\0",
                    b"sent\0",
                    b"success\0",
                    b"ambiguous\0",
                    b"transport\0",
                    b"server_error\0",
                    b"throttled\0",
                    b"expired\0",
                    b"auth\0",
                    b"rejected\0",
                    b"unclassified\0",
                ],
                class,
            )
        },
        b"unknown\0",
    )
}

/// The stable string of an ::lb_settle_warning value (`"persist_failed"`,
/// `"retry_after_unusable"`, `"retry_after_capped"`). Never NULL. Static.
#[unsafe(no_mangle)]
pub extern "C" fn lb_settle_warning_str(warning: i32) -> *const c_char {
    guard_str(
        || {
            pick(
                &[
                    b"persist_failed\0",
                    b"retry_after_unusable\0",
                    b"retry_after_capped\0",
                ],
                warning,
            )
        },
        b"unknown\0",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    fn s(p: *const c_char) -> &'static str {
        // SAFETY: the string functions return static NUL-terminated strings.
        unsafe { CStr::from_ptr(p) }.to_str().unwrap()
    }

    #[test]
    fn the_c_strings_are_the_core_strings() {
        for o in SettleOutcome::ALL {
            assert_eq!(
                s(lb_settle_outcome_str(lb_settle_outcome::from_core(o) as i32)),
                o.as_str()
            );
        }
        for m in [SettleMode::Commit, SettleMode::Event, SettleMode::Release] {
            assert_eq!(
                s(lb_settle_mode_str(lb_settle_mode::from_core(m) as i32)),
                m.as_str()
            );
        }
        let classes = [
            SettleClass::Start,
            SettleClass::Restart,
            SettleClass::Persisted,
            SettleClass::PersistFailed,
            SettleClass::Sent,
            SettleClass::Success,
            SettleClass::Ambiguous,
            SettleClass::Transport,
            SettleClass::ServerError,
            SettleClass::Throttled,
            SettleClass::Expired,
            SettleClass::Auth,
            SettleClass::Rejected,
            SettleClass::Unclassified,
        ];
        for c in classes {
            assert_eq!(
                s(lb_settle_class_str(lb_settle_class::from_core(c) as i32)),
                c.as_str()
            );
        }
        for w in [
            SettleWarning::PersistFailed,
            SettleWarning::RetryAfterUnusable,
            SettleWarning::RetryAfterCapped,
        ] {
            assert_eq!(
                s(lb_settle_warning_str(lb_settle_warning::from_core(w) as i32)),
                w.as_str()
            );
        }
        assert_eq!(s(lb_settle_outcome_str(99)), "unknown");
        assert_eq!(s(lb_settle_next_str(-1)), "unknown");
    }
}
