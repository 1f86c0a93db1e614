//! The configuration builder and the heartbeat handle.

use std::ffi::c_char;
use std::panic::{AssertUnwindSafe, catch_unwind};

use leasebeat::{
    Action, AdoptedCreate, Config, CreateOutcome, Heartbeat, KeySource, Response, ResponseRef,
    SequentialKeys, Timing, TransportFailure, UuidV4Keys,
};
use serde_json::Value;

use crate::buf::{
    check_out, copy_bytes, copy_text, try_mut, try_ref, try_slice, try_slice_named, try_str,
    write_out,
};
use crate::decision::lb_decision;
use crate::error::{Fail, guard, lb_status};
use crate::types::{
    LB_FAILURE_CONNECT, LB_FAILURE_RESET, LB_FAILURE_TIMEOUT, lb_failure, lb_key_use, lb_next,
    lb_stop_reason, lb_time,
};

/// A heartbeat configuration under construction (opaque).
///
/// Made by lb_config_new() with the defaults (`ttl_ms` 60000, an unbounded
/// request timeout, an empty create request, random UUIDv4 keys), changed by
/// the `lb_config_set_*` functions, read by lb_heartbeat_new(), freed by
/// lb_config_free(). One configuration can create any number of heartbeats.
pub struct lb_config {
    config: Config,
    key_prefix: Option<String>,
}

/// The heartbeat of one reservation (opaque): the sans-IO state machine that
/// decides when to extend, when to retry with the same idempotency key and when
/// to stop.
///
/// Feed it what happened (lb_heartbeat_handle_sent(),
/// lb_heartbeat_handle_response(), lb_heartbeat_handle_failure(),
/// lb_heartbeat_cancel()) with monotonic nanosecond times that never go
/// backwards, then ask what to do (lb_heartbeat_poll_action()). A call that
/// fails changes nothing.
pub struct lb_heartbeat {
    inner: Heartbeat,
    /// Set when a call panicked: the state may be inconsistent, so every
    /// further call is refused with `LB_STATUS_PANIC`.
    poisoned: bool,
}

impl lb_heartbeat {
    fn live(&self) -> Result<&Heartbeat, Fail> {
        if self.poisoned {
            return Err(poisoned());
        }
        Ok(&self.inner)
    }
}

fn poisoned() -> Fail {
    Fail::new(
        lb_status::Panic,
        "this heartbeat panicked earlier (a bug) and can no longer be used; free it",
    )
}

/// Runs a mutating call; a panic inside poisons the heartbeat.
fn mutate(hb: *mut lb_heartbeat, f: impl FnOnce(&mut Heartbeat) -> Result<(), Fail>) -> lb_status {
    guard(|| {
        // SAFETY: the caller promises `hb` is NULL or a live heartbeat from
        // lb_heartbeat_new() that no other thread uses during this call.
        let hb = unsafe { try_mut(hb, "hb") }?;
        if hb.poisoned {
            return Err(poisoned());
        }
        match catch_unwind(AssertUnwindSafe(|| f(&mut hb.inner))) {
            Ok(result) => result,
            Err(payload) => {
                hb.poisoned = true;
                std::panic::resume_unwind(payload)
            }
        }
    })
}

/// Makes a configuration with the defaults: `ttl_ms` 60000, an unbounded
/// request timeout, no extra create-request members and random UUIDv4
/// idempotency keys. On success `*out` owns it: free it with lb_config_free().
#[unsafe(no_mangle)]
pub extern "C" fn lb_config_new(out: *mut *mut lb_config) -> lb_status {
    guard(|| {
        check_out(out, "out")?;
        let cfg = Box::new(lb_config {
            config: Config::default(),
            key_prefix: None,
        });
        // SAFETY: `out` was checked non-NULL; the caller promises it is writable.
        unsafe { write_out(out, Box::into_raw(cfg)) };
        Ok(())
    })
}

/// Frees a configuration. NULL is a no-op. Heartbeats made from it are
/// independent of it and stay valid.
#[unsafe(no_mangle)]
pub extern "C" fn lb_config_free(cfg: *mut lb_config) {
    let _ = guard(|| {
        if !cfg.is_null() {
            // SAFETY: a non-NULL `cfg` came from lb_config_new() and is freed
            // once, by the caller's promise.
            drop(unsafe { Box::from_raw(cfg) });
        }
        Ok(())
    });
}

impl lb_config {
    /// The key source of heartbeats made from this configuration.
    fn keys(&self) -> Box<dyn KeySource> {
        match &self.key_prefix {
            Some(prefix) => Box::new(SequentialKeys::new(prefix.clone())),
            None => {
                crate::fork::reseed_random_keys_after_fork();
                Box::new(UuidV4Keys)
            }
        }
    }

    /// The configuration alone, when a heartbeat made from it would be a
    /// plain create with random keys: the driver then builds the heartbeat
    /// on its own thread when the create goes out (see `Driver::start`).
    pub(crate) fn plain_create(&self, reservation_id: Option<&str>) -> Option<Config> {
        (reservation_id.is_none() && self.key_prefix.is_none()).then(|| self.config.clone())
    }

    /// A heartbeat from this configuration: a create first, or (with a
    /// reservation id) an immediate extension of an existing reservation.
    pub(crate) fn heartbeat(&self, reservation_id: Option<&str>) -> Result<Heartbeat, Fail> {
        let keys = self.keys();
        let config = self.config.clone();
        Ok(match reservation_id {
            None => Heartbeat::with_key_source(config, keys)?,
            Some(id) => Heartbeat::for_reservation_with_key_source(config, id, keys)?,
        })
    }
}

fn with_config(
    cfg: *mut lb_config,
    f: impl FnOnce(&mut lb_config) -> Result<(), Fail>,
) -> lb_status {
    guard(|| {
        // SAFETY: `cfg` is NULL or a live configuration used by this thread only.
        let cfg = unsafe { try_mut(cfg, "cfg") }?;
        f(cfg)
    })
}

/// Sets the requested lease length `ttl_ms`: the create's `ttl_ms` and every
/// extension's `extend_by_ms`. The range 1000..=86400000 is checked by
/// lb_heartbeat_new() (`LB_STATUS_INVALID_CONFIG`).
#[unsafe(no_mangle)]
pub extern "C" fn lb_config_set_ttl_ms(cfg: *mut lb_config, ttl_ms: u64) -> lb_status {
    with_config(cfg, |c| {
        c.config.ttl_ms = ttl_ms;
        Ok(())
    })
}

/// Sets the enforced upper bound of one complete attempt (connect, write,
/// read, failure detection) in milliseconds. `LB_INFINITE_MS` (`UINT64_MAX`,
/// the default) means unknown or unbounded: the attempt budget is then
/// +infinity (HB-13).
#[unsafe(no_mangle)]
pub extern "C" fn lb_config_set_request_timeout_ms(
    cfg: *mut lb_config,
    request_timeout_ms: u64,
) -> lb_status {
    with_config(cfg, |c| {
        c.config.request_timeout_ms = Some(request_timeout_ms).filter(|t| *t != u64::MAX);
        Ok(())
    })
}

/// Sets the further members of the create request body (`subject`, `action`,
/// `estimate`, ...) from `json`, a NUL-terminated UTF-8 JSON object text. The
/// core adds `idempotency_key` and `ttl_ms` itself; a configuration that sets
/// either is refused by lb_heartbeat_new(). `"{}"` clears it.
///
/// Errors: `LB_STATUS_INVALID_UTF8`, `LB_STATUS_INVALID_CONFIG` when the text
/// is not a JSON object.
#[unsafe(no_mangle)]
pub extern "C" fn lb_config_set_create_request(
    cfg: *mut lb_config,
    json: *const c_char,
) -> lb_status {
    with_config(cfg, |c| {
        // SAFETY: `json` is NULL or a NUL-terminated string, by the caller's promise.
        let text = unsafe { try_str(json, "json") }?;
        let value: Value = serde_json::from_str(text).map_err(|e| {
            Fail::new(
                lb_status::InvalidConfig,
                format!("create_request is not valid JSON: {e}"),
            )
        })?;
        let Value::Object(map) = value else {
            return Err(Fail::new(
                lb_status::InvalidConfig,
                "create_request must be a JSON object",
            ));
        };
        c.config.create_request = map;
        Ok(())
    })
}

/// Makes heartbeats created from this configuration take deterministic keys
/// `"<prefix>1"`, `"<prefix>2"`, ... instead of random UUIDv4 keys: for tests
/// and replays only. `prefix` is NUL-terminated UTF-8 (may be empty).
///
/// Errors: `LB_STATUS_INVALID_UTF8`.
#[unsafe(no_mangle)]
pub extern "C" fn lb_config_set_key_prefix(
    cfg: *mut lb_config,
    prefix: *const c_char,
) -> lb_status {
    with_config(cfg, |c| {
        // SAFETY: `prefix` is NULL or a NUL-terminated string, by the caller's promise.
        let prefix = unsafe { try_str(prefix, "prefix") }?;
        c.key_prefix = Some(prefix.to_owned());
        Ok(())
    })
}

/// Makes a heartbeat from a configuration; it starts with a create attempt
/// (attempt id 1, due at time 0). On success `*out` owns it: free it with
/// lb_heartbeat_free(). `cfg` is only read and may be freed afterwards.
///
/// Errors: `LB_STATUS_INVALID_CONFIG` (the core's message says which value is
/// wrong), `LB_STATUS_INVALID_KEY`.
#[unsafe(no_mangle)]
pub extern "C" fn lb_heartbeat_new(
    cfg: *const lb_config,
    out: *mut *mut lb_heartbeat,
) -> lb_status {
    guard(|| {
        // SAFETY: `cfg` is NULL or a live configuration not mutated during the call.
        let cfg = unsafe { try_ref(cfg, "cfg") }?;
        check_out(out, "out")?;
        let inner = cfg.heartbeat(None)?;
        let hb = Box::new(lb_heartbeat {
            inner,
            poisoned: false,
        });
        // SAFETY: `out` was checked non-NULL; the caller promises it is writable.
        unsafe { write_out(out, Box::into_raw(hb)) };
        Ok(())
    })
}

/// Makes a heartbeat for a reservation created elsewhere (e.g. by another
/// process): its first action is an immediate extend attempt (attempt id 1,
/// due at time 0, a new key) instead of a create. `reservation_id` is
/// NUL-terminated UTF-8 of 1..=128 characters. Nothing proves a lead before
/// that first extension succeeds: a transient failure of it stops the
/// heartbeat (`retry_window_exhausted`); its success anchors the schedule as a
/// create's would. On success `*out` owns the heartbeat: free it with
/// lb_heartbeat_free(). `cfg` is only read (its `create_request` is unused).
///
/// Errors: `LB_STATUS_INVALID_CONFIG`, `LB_STATUS_INVALID_ARGUMENT` (the
/// reservation id's length), `LB_STATUS_INVALID_UTF8`,
/// `LB_STATUS_INVALID_KEY`.
#[unsafe(no_mangle)]
pub extern "C" fn lb_heartbeat_new_for_reservation(
    cfg: *const lb_config,
    reservation_id: *const c_char,
    out: *mut *mut lb_heartbeat,
) -> lb_status {
    guard(|| {
        // SAFETY: `cfg` is NULL or a live configuration not mutated during the call.
        let cfg = unsafe { try_ref(cfg, "cfg") }?;
        // SAFETY: `reservation_id` is NULL or a NUL-terminated string, by the caller's promise.
        let id = unsafe { try_str(reservation_id, "reservation_id") }?;
        check_out(out, "out")?;
        let inner = cfg.heartbeat(Some(id))?;
        let hb = Box::new(lb_heartbeat {
            inner,
            poisoned: false,
        });
        // SAFETY: `out` was checked non-NULL; the caller promises it is writable.
        unsafe { write_out(out, Box::into_raw(hb)) };
        Ok(())
    })
}

/// How an adopted create ended, the `outcome` of an ::lb_adopted_create: one
/// of `LB_ADOPTED_RESPONSE`, `LB_ADOPTED_FAILURE`. A plain integer type so
/// that any value the caller passes can be checked.
pub type lb_adopted_outcome = u32;
/// The create got an HTTP response (`status`, `headers`, `body`).
pub const LB_ADOPTED_RESPONSE: lb_adopted_outcome = 0;
/// The create failed in transport (`failure`).
pub const LB_ADOPTED_FAILURE: lb_adopted_outcome = 1;

/// A create the caller performed itself (e.g. with an SDK's own HTTP
/// client), handed over to lb_heartbeat_adopt_create(). Zero-initialize it
/// (`lb_adopted_create c = {0};`) and fill in what applies; only read during
/// the call.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct lb_adopted_create {
    /// The idempotency key the create used (header and body), NUL-terminated
    /// UTF-8 of 1..=256 characters. A same-key create retry reuses it.
    pub key: *const c_char,
    /// The exact create request body sent (a JSON object whose
    /// `idempotency_key`, if present, equals `key`), `request_body_len`
    /// bytes; a create retry resends it byte for byte. NULL (with length 0)
    /// when the caller does not have it: a retry then sends the body the
    /// configuration builds (`create_request` plus `idempotency_key` and
    /// `ttl_ms`).
    pub request_body: *const u8,
    /// The length of `request_body` in bytes.
    pub request_body_len: usize,
    /// True when `sent_ns` holds when the create was sent; false when that
    /// is unknown, which makes the round trip unknown (HB-12: lead floor 0,
    /// an immediate first beat).
    pub sent_known: bool,
    /// When the create was sent (monotonic ns, the clock of every later call).
    pub sent_ns: u64,
    /// When its outcome was observed (after the complete body), monotonic ns;
    /// not before `sent_ns`.
    pub received_ns: u64,
    /// `LB_ADOPTED_RESPONSE` or `LB_ADOPTED_FAILURE`.
    pub outcome: lb_adopted_outcome,
    /// For a response: the HTTP status (100..=999).
    pub status: u32,
    /// For a response: `header_count` name/value pairs in arrival order
    /// (repeated headers repeat); NULL only with a count of 0.
    pub headers: *const lb_header,
    /// The number of `headers`.
    pub header_count: usize,
    /// For a response: the raw body bytes; NULL only with a length of 0.
    pub body: *const u8,
    /// The length of `body` in bytes.
    pub body_len: usize,
    /// For a response: true when its round trip could not be measured
    /// (HB-12), even though `sent_ns` is known.
    pub timing_unknown: bool,
    /// For a failure: `LB_FAILURE_TIMEOUT`, `LB_FAILURE_CONNECT` or
    /// `LB_FAILURE_RESET`.
    pub failure: lb_failure,
}

/// Takes over a lease whose create the caller performed itself: the create's
/// key, send and receive instants and raw outcome are classified exactly as
/// if the heartbeat had sent the create (HB-15: a success anchors the
/// schedule with no priming extension; a timeout, reset, 5xx or ambiguous 2xx
/// asks for the one same-key create retry with the caller's key; a 4xx stops
/// `create_rejected`; and so on). The create counts as attempt 1 and its key
/// as key 1. Extensions take keys from the configuration (random UUIDv4, or
/// lb_config_set_key_prefix()).
///
/// On success `*out` owns the heartbeat (free it with lb_heartbeat_free());
/// its first decision is lb_heartbeat_last_decision()'s, and its next action
/// lb_heartbeat_poll_action()'s. `cfg` and `create` are only read.
///
/// Errors: `LB_STATUS_INVALID_CONFIG`, `LB_STATUS_INVALID_KEY` (a key of 0
/// or more than 256 characters), `LB_STATUS_INVALID_ARGUMENT` (an unknown
/// `outcome` or `failure`, a status outside 100..=999, `sent_ns` after
/// `received_ns`, a `request_body` that is not a JSON object or whose
/// `idempotency_key` differs from `key`), `LB_STATUS_INVALID_UTF8` (`key`).
#[unsafe(no_mangle)]
pub extern "C" fn lb_heartbeat_adopt_create(
    cfg: *const lb_config,
    create: *const lb_adopted_create,
    out: *mut *mut lb_heartbeat,
) -> lb_status {
    guard(|| {
        // SAFETY: `cfg` is NULL or a live configuration not mutated during the call.
        let cfg = unsafe { try_ref(cfg, "cfg") }?;
        // SAFETY: `create` is NULL or a readable lb_adopted_create.
        let c = unsafe { try_ref(create, "create") }?;
        check_out(out, "out")?;
        // SAFETY: `key` is NULL or a NUL-terminated string, by the caller's promise.
        let key = unsafe { try_str(c.key, "create->key") }?;
        let body = if c.request_body.is_null() && c.request_body_len == 0 {
            None
        } else {
            // SAFETY: `request_body` is valid for `request_body_len` bytes
            // (a NULL pointer with a length is refused inside).
            Some(
                unsafe { try_slice(c.request_body, c.request_body_len, "create->request_body") }?
                    .to_vec(),
            )
        };
        let outcome = match c.outcome {
            LB_ADOPTED_RESPONSE => CreateOutcome::Response(
                // SAFETY: the response pointers are NULL (with 0) or valid for
                // their lengths, by the caller's promise.
                unsafe {
                    response_from_c(
                        c.status,
                        c.headers,
                        c.header_count,
                        c.body,
                        c.body_len,
                        c.timing_unknown,
                        "create->",
                    )
                }?,
            ),
            LB_ADOPTED_FAILURE => CreateOutcome::Failure(failure_from_c(c.failure)?),
            other => {
                return Err(Fail::invalid(format!(
                    "unknown lb_adopted_outcome value {other} (LB_ADOPTED_RESPONSE or LB_ADOPTED_FAILURE)"
                )));
            }
        };
        let adopted = AdoptedCreate {
            key: key.to_owned(),
            body,
            sent_ns: c.sent_known.then_some(c.sent_ns),
            received_ns: c.received_ns,
            outcome,
        };
        let (inner, _first) =
            Heartbeat::adopt_create_with_key_source(cfg.config.clone(), adopted, cfg.keys())?;
        let hb = Box::new(lb_heartbeat {
            inner,
            poisoned: false,
        });
        // SAFETY: `out` was checked non-NULL; the caller promises it is writable.
        unsafe { write_out(out, Box::into_raw(hb)) };
        Ok(())
    })
}

/// Frees a heartbeat. NULL is a no-op. Decisions obtained from it stay valid.
#[unsafe(no_mangle)]
pub extern "C" fn lb_heartbeat_free(hb: *mut lb_heartbeat) {
    let _ = guard(|| {
        if !hb.is_null() {
            // SAFETY: a non-NULL `hb` came from lb_heartbeat_new() and is freed
            // once, with no call on it in flight, by the caller's promise.
            drop(unsafe { Box::from_raw(hb) });
        }
        Ok(())
    });
}

/// What the caller must do now: a value copy, valid after later calls.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct lb_action {
    /// Send an attempt, await its outcome, or stop.
    pub kind: lb_action_kind,
    /// The attempt to send or awaited (pass it to the `handle_*` functions);
    /// 0 for a stop.
    pub attempt_id: u64,
    /// `LB_NEXT_CREATE` or `LB_NEXT_EXTEND` for an attempt; `LB_NEXT_STOP`
    /// for a stop.
    pub attempt_kind: lb_next,
    /// When to send the attempt; may be +infinity (never). For an attempt
    /// already sent, the time it was due. Zero for a stop.
    pub due: lb_time,
    /// Whether the attempt's key is new or the previous attempt's.
    pub key_use: lb_key_use,
    /// 1 for the first key of the lease, 2 for the next new one, ...; 0 for a
    /// stop.
    pub key_index: u32,
    /// True for the single immediate retry a zero retry window allows (HB-27).
    pub zero_window_retry: bool,
    /// True once the attempt was reported sent (then `sent_ns` holds when).
    pub sent: bool,
    /// When the attempt was reported sent; 0 if not sent.
    pub sent_ns: u64,
    /// The stop reason for `LB_ACTION_STOP`; `LB_STOP_REASON_NONE` otherwise.
    pub stop_reason: lb_stop_reason,
}

/// The kind of an ::lb_action.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum lb_action_kind {
    /// Send the attempt at `due`, then call lb_heartbeat_handle_sent(). Its
    /// key and body come from lb_heartbeat_attempt_key() and
    /// lb_heartbeat_attempt_body().
    Send = 0,
    /// The attempt is in flight: report its outcome.
    AwaitOutcome = 1,
    /// The heartbeat stopped for good.
    Stop = 2,
}

/// Writes what the caller must do now into `*out`.
#[unsafe(no_mangle)]
pub extern "C" fn lb_heartbeat_poll_action(
    hb: *const lb_heartbeat,
    out: *mut lb_action,
) -> lb_status {
    guard(|| {
        // SAFETY: `hb` is NULL or a live heartbeat not mutated during the call.
        let hb = unsafe { try_ref(hb, "hb") }?.live()?;
        check_out(out, "out")?;
        let (kind, attempt) = match hb.poll_action() {
            Action::Send(a) => (lb_action_kind::Send, Some(a)),
            Action::AwaitOutcome(a) => (lb_action_kind::AwaitOutcome, Some(a)),
            Action::Stop(_) => (lb_action_kind::Stop, None),
        };
        let action = match attempt {
            Some(a) => lb_action {
                kind,
                attempt_id: a.id,
                attempt_kind: lb_next::from_kind(a.kind),
                due: lb_time::from_option(a.due_ns),
                key_use: lb_key_use::from_option(Some(a.key_use)),
                key_index: a.key_index,
                zero_window_retry: a.is_zero_window_retry(),
                sent: a.sent_ns.is_some(),
                sent_ns: a.sent_ns.unwrap_or(0),
                stop_reason: lb_stop_reason::None,
            },
            None => lb_action {
                kind,
                attempt_id: 0,
                attempt_kind: lb_next::Stop,
                due: lb_time {
                    infinite: false,
                    ns: 0,
                },
                key_use: lb_key_use::None,
                key_index: 0,
                zero_window_retry: false,
                sent: false,
                sent_ns: 0,
                stop_reason: lb_stop_reason::from_option(hb.stop_reason()),
            },
        };
        // SAFETY: `out` was checked non-NULL; the caller promises it is writable.
        unsafe { write_out(out, action) };
        Ok(())
    })
}

fn attempt(hb: &Heartbeat) -> Result<&leasebeat::Attempt, Fail> {
    hb.attempt().ok_or_else(|| {
        Fail::new(
            lb_status::Stopped,
            "the heartbeat has stopped: there is no outstanding attempt",
        )
    })
}

/// Copies the outstanding attempt's idempotency key (both the
/// `X-Idempotency-Key` header and the body's `idempotency_key`) into `buf` as
/// a NUL-terminated string.
///
/// Buffer convention (the same for every copy-out function): `*out_needed`
/// receives the size needed, NUL included; a NULL `buf` or a `buf_len` of 0
/// is a size query (`LB_STATUS_OK`); a smaller `buf_len` gives
/// `LB_STATUS_BUFFER_TOO_SMALL` with `*out_needed` written and `buf`
/// untouched. Errors: `LB_STATUS_STOPPED` when there is no attempt.
#[unsafe(no_mangle)]
pub extern "C" fn lb_heartbeat_attempt_key(
    hb: *const lb_heartbeat,
    buf: *mut c_char,
    buf_len: usize,
    out_needed: *mut usize,
) -> lb_status {
    guard(|| {
        // SAFETY: `hb` is NULL or a live heartbeat not mutated during the call.
        let hb = unsafe { try_ref(hb, "hb") }?.live()?;
        check_out(out_needed, "out_needed")?;
        let a = attempt(hb)?;
        // SAFETY: `buf` is NULL or writable for `buf_len` bytes, `out_needed` writable.
        unsafe { copy_text(a.key.as_bytes(), buf, buf_len, out_needed) }
    })
}

/// Copies the outstanding attempt's exact JSON request body (byte-identical on
/// a same-key retry) into `buf`. Not NUL-terminated: `*out_needed` receives
/// its exact length. Same buffer convention as lb_heartbeat_attempt_key().
#[unsafe(no_mangle)]
pub extern "C" fn lb_heartbeat_attempt_body(
    hb: *const lb_heartbeat,
    buf: *mut u8,
    buf_len: usize,
    out_needed: *mut usize,
) -> lb_status {
    guard(|| {
        // SAFETY: `hb` is NULL or a live heartbeat not mutated during the call.
        let hb = unsafe { try_ref(hb, "hb") }?.live()?;
        check_out(out_needed, "out_needed")?;
        let a = attempt(hb)?;
        // SAFETY: `buf` is NULL or writable for `buf_len` bytes, `out_needed` writable.
        unsafe { copy_bytes(&a.body, buf, buf_len, out_needed) }
    })
}

/// Writes the stop reason into `*out`: `LB_STOP_REASON_NONE` while running.
#[unsafe(no_mangle)]
pub extern "C" fn lb_heartbeat_stop_reason(
    hb: *const lb_heartbeat,
    out: *mut lb_stop_reason,
) -> lb_status {
    guard(|| {
        // SAFETY: `hb` is NULL or a live heartbeat not mutated during the call.
        let hb = unsafe { try_ref(hb, "hb") }?.live()?;
        check_out(out, "out")?;
        // SAFETY: `out` was checked non-NULL; the caller promises it is writable.
        unsafe { write_out(out, lb_stop_reason::from_option(hb.stop_reason())) };
        Ok(())
    })
}

/// Writes a new handle to the most recent decision into `*out`, or NULL when
/// no decision was made yet. The caller owns a non-NULL result and frees it
/// with lb_decision_free(); it is a copy, unaffected by later calls.
#[unsafe(no_mangle)]
pub extern "C" fn lb_heartbeat_last_decision(
    hb: *const lb_heartbeat,
    out: *mut *mut lb_decision,
) -> lb_status {
    guard(|| {
        // SAFETY: `hb` is NULL or a live heartbeat not mutated during the call.
        let hb = unsafe { try_ref(hb, "hb") }?.live()?;
        check_out(out, "out")?;
        let d = hb
            .last_decision()
            .map_or(std::ptr::null_mut(), |d| lb_decision::new_raw(d.clone()));
        // SAFETY: `out` was checked non-NULL; the caller promises it is writable.
        unsafe { write_out(out, d) };
        Ok(())
    })
}

/// Reports that attempt `attempt_id` was sent at `now_ns` (monotonic
/// nanoseconds). Sending later than due (a late timer) or earlier (a stalled
/// clock) is accepted.
///
/// Errors: `LB_STATUS_TIME_WENT_BACKWARDS`, `LB_STATUS_NOT_OUTSTANDING`,
/// `LB_STATUS_ALREADY_SENT`, `LB_STATUS_STOPPED`.
#[unsafe(no_mangle)]
pub extern "C" fn lb_heartbeat_handle_sent(
    hb: *mut lb_heartbeat,
    attempt_id: u64,
    now_ns: u64,
) -> lb_status {
    mutate(hb, |hb| Ok(hb.handle_sent(attempt_id, now_ns)?))
}

/// One response header: name and value as byte strings (not NUL-terminated).
/// A pointer may be NULL only when its length is 0.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct lb_header {
    /// The header name bytes (compared case-insensitively by the core).
    pub name: *const u8,
    /// The length of `name` in bytes.
    pub name_len: usize,
    /// The header value bytes.
    pub value: *const u8,
    /// The length of `value` in bytes.
    pub value_len: usize,
}

/// Reports the HTTP response to attempt `attempt_id`, observed at `now_ns`
/// (after its complete body was received). The core classifies it (schema
/// check, error codes, Retry-After) and decides; read the decision with
/// lb_heartbeat_last_decision() and the next action with
/// lb_heartbeat_poll_action().
///
/// `status` is the HTTP status (100..=999); `headers` holds `header_count`
/// name/value pairs in arrival order (repeated headers repeat); `body` holds
/// `body_len` raw bytes. `headers`/`body` may be NULL only with a count/length
/// of 0. `timing_unknown` marks an attempt whose round trip could not be
/// measured (HB-12).
///
/// Errors: `LB_STATUS_INVALID_ARGUMENT` (status), `LB_STATUS_NOT_OUTSTANDING`,
/// `LB_STATUS_NOT_SENT`, `LB_STATUS_TIME_WENT_BACKWARDS`, `LB_STATUS_STOPPED`.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn lb_heartbeat_handle_response(
    hb: *mut lb_heartbeat,
    attempt_id: u64,
    status: u32,
    headers: *const lb_header,
    header_count: usize,
    body: *const u8,
    body_len: usize,
    timing_unknown: bool,
    now_ns: u64,
) -> lb_status {
    mutate(hb, |hb| {
        // SAFETY: the pointers are NULL (with 0) or valid for their lengths,
        // by the caller's promise.
        // Borrowed, not copied: the core reads the caller's bytes in place.
        let parts = unsafe {
            response_parts_from_c(
                status,
                headers,
                header_count,
                body,
                body_len,
                timing_unknown,
                "",
            )
        }?;
        hb.handle_response_ref(attempt_id, parts.as_ref(), now_ns)?;
        Ok(())
    })
}

/// A response given as C pointers, borrowed (see [`response_parts_from_c`]).
struct ResponseParts<'a> {
    status: u16,
    headers: Vec<(&'a [u8], &'a [u8])>,
    body: &'a [u8],
    timing: Timing,
}

impl ResponseParts<'_> {
    fn as_ref(&self) -> ResponseRef<'_> {
        ResponseRef {
            status: self.status,
            headers: &self.headers,
            body: self.body,
            timing: self.timing,
        }
    }
}

/// The core's owned form of a response given as C pointers (see
/// [`response_parts_from_c`]).
///
/// # Safety
/// As [`response_parts_from_c`].
unsafe fn response_from_c(
    status: u32,
    headers: *const lb_header,
    header_count: usize,
    body: *const u8,
    body_len: usize,
    timing_unknown: bool,
    prefix: &str,
) -> Result<Response, Fail> {
    // SAFETY: forwarded unchanged under the same contract.
    let p = unsafe {
        response_parts_from_c(
            status,
            headers,
            header_count,
            body,
            body_len,
            timing_unknown,
            prefix,
        )
    }?;
    Ok(Response {
        status: p.status,
        headers: p
            .headers
            .iter()
            .map(|(n, v)| (n.to_vec(), v.to_vec()))
            .collect(),
        body: p.body.to_vec(),
        timing: p.timing,
    })
}

/// A response given as C pointers, borrowing the caller's bytes (a vector
/// of header slices only when there are headers). `prefix` names the struct
/// the fields came from in error messages (e.g. `"create->"`).
///
/// # Safety
/// `headers` is NULL (with a count of 0) or valid for `header_count`
/// elements whose pointers are NULL (with 0) or valid for their lengths;
/// `body` is NULL (with 0) or valid for `body_len` bytes; all of them stay
/// unchanged while the result is in use.
#[inline]
unsafe fn response_parts_from_c<'a>(
    status: u32,
    headers: *const lb_header,
    header_count: usize,
    body: *const u8,
    body_len: usize,
    timing_unknown: bool,
    prefix: &str,
) -> Result<ResponseParts<'a>, Fail> {
    // (Argument names are formatted only for an error message.)
    // SAFETY: `headers` is NULL (with 0) or valid for `header_count` elements.
    let raw_headers: &'a [lb_header] =
        unsafe { try_slice_named(headers, header_count, || format!("{prefix}headers")) }?;
    let mut pairs = Vec::with_capacity(raw_headers.len());
    for (i, h) in raw_headers.iter().enumerate() {
        // SAFETY: each pointer is NULL (with 0) or valid for its length.
        let name = unsafe {
            try_slice_named(h.name, h.name_len, || format!("{prefix}headers[{i}].name"))
        }?;
        // SAFETY: as above.
        let value = unsafe {
            try_slice_named(h.value, h.value_len, || {
                format!("{prefix}headers[{i}].value")
            })
        }?;
        pairs.push((name, value));
    }
    // SAFETY: `body` is NULL (with 0) or valid for `body_len` bytes.
    let body = unsafe { try_slice_named(body, body_len, || format!("{prefix}body")) }?;
    let status = u16::try_from(status).map_err(|_| {
        Fail::invalid(format!(
            "HTTP status must be within 100..=999, got {status}"
        ))
    })?;
    Ok(ResponseParts {
        status,
        headers: pairs,
        body,
        timing: if timing_unknown {
            Timing::Unknown
        } else {
            Timing::Measured
        },
    })
}

fn failure_from_c(failure: lb_failure) -> Result<TransportFailure, Fail> {
    match failure {
        LB_FAILURE_TIMEOUT => Ok(TransportFailure::Timeout),
        LB_FAILURE_CONNECT => Ok(TransportFailure::Connect),
        LB_FAILURE_RESET => Ok(TransportFailure::Reset),
        other => Err(Fail::invalid(format!("unknown lb_failure value {other}"))),
    }
}

/// Reports a transport failure (`LB_FAILURE_TIMEOUT`, `LB_FAILURE_CONNECT` or
/// `LB_FAILURE_RESET`) of attempt `attempt_id`, observed at `now_ns`.
///
/// Errors: `LB_STATUS_INVALID_ARGUMENT` (unknown failure value),
/// `LB_STATUS_NOT_OUTSTANDING`, `LB_STATUS_NOT_SENT`,
/// `LB_STATUS_TIME_WENT_BACKWARDS`, `LB_STATUS_STOPPED`.
#[unsafe(no_mangle)]
pub extern "C" fn lb_heartbeat_handle_failure(
    hb: *mut lb_heartbeat,
    attempt_id: u64,
    failure: lb_failure,
    now_ns: u64,
) -> lb_status {
    mutate(hb, |hb| {
        let failure = failure_from_c(failure)?;
        hb.handle_failure(attempt_id, failure, now_ns)?;
        Ok(())
    })
}

/// Ends the heartbeat from the caller's side at `now_ns`: stop `cancelled`.
///
/// Errors: `LB_STATUS_STOPPED` (a stop is final),
/// `LB_STATUS_TIME_WENT_BACKWARDS`.
#[unsafe(no_mangle)]
pub extern "C" fn lb_heartbeat_cancel(hb: *mut lb_heartbeat, now_ns: u64) -> lb_status {
    mutate(hb, |hb| {
        hb.cancel(now_ns)?;
        Ok(())
    })
}
