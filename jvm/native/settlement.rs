//! The native half of `io.leasebeat.Settlement`: the core's sans-IO
//! `Settlement` (rules ST-1..ST-11, SP-1..SP-4) behind plain JNI calls.
//!
//! Settlement decisions are rare (a handful per lease), so none of the
//! heartbeat's hot-path machinery (slots, scratch buffers, the pool) is used:
//! every entry point is a *cold* call returning one envelope (see the crate
//! documentation and `Wire.java`), and the handle is a plain
//! `Box<Mutex<Settlement>>` turned into a `jlong`. The Java side frees each
//! handle once (`nativeSettleFree`), never while a call on it is inside and
//! never uses it afterwards (its monitor plus a `Cleaner`).
//!
//! Payloads (big-endian, `str` = u32 length + UTF-8, `opt X` = a bool then X
//! if true, `u64` as 8 bytes):
//!
//! * decision: `str next`, `opt u64 at_ns` (a send), `opt u32 attempt`,
//!   `str mode`, `u8 record` (0 none, 1 write + `str mode` + `opt u64
//!   not_before_ms`, 2 remove, 3 keep), `str class`, `opt str code`, `opt
//!   u32 status`, `opt u64 delay_ms`, `opt u64 not_before_ms`, `u32 n` + n
//!   `str` warnings, `opt str detail`, `opt str outcome`, `bool
//!   stop_heartbeat`, `str json` (the decision's one JSON line);
//! * attempt: `u64 id`, `str endpoint`, `str key`, `str body`, `u64 due_ns`,
//!   `u32 number`, `opt u64 sent_ns`;
//! * record: `str reservation_id`, `str base_url`, `str mode`, `str key`,
//!   `u64 recorded_at_ms`, `opt u64 not_before_ms`, `str json` (the file
//!   text);
//! * action: `u8` 0 persist + record, 1 send + attempt, 2 wait + attempt, 3
//!   done + `str outcome`.
//!
//! Extension point: the durable journal (J-1..J-8) is a separate Rust module
//! not bound yet; the record's file text goes out with every `persist` and
//! comes back through `nativeSettleFromRecord`, so a journal binding can sit
//! beside this one without changing it.

use std::sync::Mutex;

use jni::objects::{JByteArray, JClass};
use jni::sys::{jboolean, jint, jlong};
use jni::{Env, EnvUnowned};
use leasebeat::{
    Now, RecordUpdate, RetryPolicy, SequentialKeys, SettleAttempt, SettleNext, Settlement,
    SettlementAction, SettlementConfig, SettlementDecision, SettlementRecord,
};

use super::{
    Fail, W, arg_fail, cold, headers_of, opt_bytes, opt_text, parse_failure, status_of, u64_of,
};

type Handle = Mutex<Settlement>;

pub(super) fn into_handle(s: Settlement) -> u64 {
    Box::into_raw(Box::new(Mutex::new(s))) as usize as u64
}

pub(super) fn with_settlement<T>(
    handle: jlong,
    f: impl FnOnce(&mut Settlement) -> Result<T, Fail>,
) -> Result<T, Fail> {
    if handle == 0 {
        return Err(arg_fail("null settlement handle"));
    }
    // SAFETY: a non-zero handle comes from `into_handle` and the Java side
    // never passes it after `nativeSettleFree` nor concurrently with it.
    let h = unsafe { &*(handle as usize as *const Handle) };
    match h.lock() {
        Ok(mut s) => f(&mut s),
        Err(_) => panic!("the settlement is unusable after an earlier panic"),
    }
}

impl W {
    pub(super) fn opt_u64(&mut self, v: Option<u64>) -> &mut W {
        match v {
            Some(v) => self.bool(true).u64(v),
            None => self.bool(false),
        }
    }
    fn opt_u32(&mut self, v: Option<u32>) -> &mut W {
        match v {
            Some(v) => self.bool(true).u32(v),
            None => self.bool(false),
        }
    }
    pub(super) fn opt_str(&mut self, v: Option<&str>) -> &mut W {
        match v {
            Some(v) => self.bool(true).str(v),
            None => self.bool(false),
        }
    }
}

pub(super) fn put_decision(w: &mut W, d: &SettlementDecision) {
    let sending = matches!(d.next, SettleNext::Send(_));
    w.str(d.next_str())
        .opt_u64(d.at_ns.filter(|_| sending))
        .opt_u32(d.attempt)
        .str(d.mode.as_str());
    match &d.record {
        None => w.u8(0),
        Some(RecordUpdate::Write {
            mode,
            not_before_ms,
        }) => w.u8(1).str(mode.as_str()).opt_u64(*not_before_ms),
        Some(RecordUpdate::Remove) => w.u8(2),
        Some(RecordUpdate::Keep) => w.u8(3),
    };
    w.str(d.class.as_str())
        .opt_str(d.code.as_deref())
        .opt_u32(d.status.map(u32::from))
        .opt_u64(d.delay_ms)
        .opt_u64(d.not_before_ms)
        .u32(d.warnings.len() as u32);
    for warning in &d.warnings {
        w.str(warning.as_str());
    }
    w.opt_str(d.detail.as_deref())
        .opt_str(d.outcome().map(|o| o.as_str()))
        .bool(d.stop_heartbeat)
        .str(&d.to_string());
}

fn put_attempt(w: &mut W, a: &SettleAttempt) {
    w.u64(a.id)
        .str(a.endpoint.as_str())
        .str(&a.key)
        .str(&String::from_utf8_lossy(&a.body))
        .u64(a.due_ns)
        .u32(a.number)
        .opt_u64(a.sent_ns);
}

fn put_record(w: &mut W, r: &SettlementRecord) {
    w.str(&r.reservation_id)
        .str(&r.base_url)
        .str(r.mode.as_str())
        .str(r.key())
        .u64(r.recorded_at_ms)
        .opt_u64(r.not_before_ms)
        .str(&r.to_json());
}

fn put_action(w: &mut W, a: SettlementAction<'_>) {
    match a {
        SettlementAction::Persist(r) => put_record(w.u8(0), r),
        SettlementAction::Send(a) => put_attempt(w.u8(1), a),
        SettlementAction::Wait(a) => put_attempt(w.u8(2), a),
        SettlementAction::Done(o) => {
            w.u8(3).str(o.as_str());
        }
    }
}

fn decision_envelope(d: Result<SettlementDecision, leasebeat::Error>) -> Result<W, Fail> {
    let mut w = W::ok();
    put_decision(&mut w, &d?);
    Ok(w)
}

pub(super) fn retry_of(
    max_attempts: jint,
    initial_ms: jlong,
    max_ms: jlong,
) -> Result<RetryPolicy, Fail> {
    // The Java side refuses negatives first; checked again here.
    let max_attempts = u32::try_from(max_attempts)
        .map_err(|_| arg_fail("retry maxAttempts must not be negative"))?;
    if initial_ms < 0 || max_ms < 0 {
        return Err(arg_fail("retry delays must not be negative"));
    }
    Ok(RetryPolicy {
        max_attempts,
        initial_ms: u64_of(initial_ms),
        max_ms: u64_of(max_ms),
    })
}

pub(super) fn now_of(now_ns: jlong, wall_ms: jlong) -> Result<Now, Fail> {
    if wall_ms < 0 {
        return Err(arg_fail("wallMillis must not be negative"));
    }
    Ok(Now::new(u64_of(now_ns), u64_of(wall_ms)))
}

pub(super) fn text_arg(env: &Env<'_>, a: &JByteArray<'_>, what: &str) -> Result<String, Fail> {
    opt_text(env, a, what)?.ok_or_else(|| arg_fail(&format!("{what} is null")))
}

// ----- entry points -----

/// `static native byte[] nativeSettleNew(byte[] reservationId, byte[]
/// baseUrl, byte[] commitJson, byte[] eventJson, boolean release, byte[]
/// releaseReason, int maxAttempts, long initialMs, long maxMs, byte[]
/// keyPrefix, long nowNs, long wallMs)`: `Settlement::new` (a null
/// `commitJson` with `release` false: no actual, ST-10). OK payload: the
/// handle (u64), then the first decision.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub extern "system" fn Java_io_leasebeat_NativeBridge_nativeSettleNew<'c>(
    env: EnvUnowned<'c>,
    _class: JClass<'c>,
    reservation_id: JByteArray<'c>,
    base_url: JByteArray<'c>,
    commit: JByteArray<'c>,
    event: JByteArray<'c>,
    release: jboolean,
    release_reason: JByteArray<'c>,
    max_attempts: jint,
    initial_ms: jlong,
    max_ms: jlong,
    key_prefix: JByteArray<'c>,
    now_ns: jlong,
    wall_ms: jlong,
) -> JByteArray<'c> {
    cold(env, |env| {
        let config = SettlementConfig {
            reservation_id: text_arg(env, &reservation_id, "reservationId")?,
            base_url: opt_text(env, &base_url, "baseUrl")?.unwrap_or_default(),
            commit: opt_bytes(env, &commit)?,
            event: opt_bytes(env, &event)?,
            release,
            release_reason: opt_text(env, &release_reason, "releaseReason")?,
            retry: retry_of(max_attempts, initial_ms, max_ms)?,
        };
        let prefix = opt_text(env, &key_prefix, "keyPrefix")?;
        let now = now_of(now_ns, wall_ms)?;
        let s = match prefix {
            Some(p) => Settlement::with_key_source(config, now, &mut SequentialKeys::new(p)),
            None => Settlement::new(config, now),
        }?;
        let first = s.last_decision().clone();
        let mut w = W::ok();
        w.u64(into_handle(s));
        put_decision(&mut w, &first);
        Ok(w)
    })
}

/// `static native byte[] nativeSettleFromRecord(byte[] record, int
/// maxAttempts, long initialMs, long maxMs, long nowNs, long wallMs)`:
/// `Settlement::from_record_json` (a restart, SP-4). OK payload: the handle
/// (u64), then the first decision.
#[unsafe(no_mangle)]
pub extern "system" fn Java_io_leasebeat_NativeBridge_nativeSettleFromRecord<'c>(
    env: EnvUnowned<'c>,
    _class: JClass<'c>,
    record: JByteArray<'c>,
    max_attempts: jint,
    initial_ms: jlong,
    max_ms: jlong,
    now_ns: jlong,
    wall_ms: jlong,
) -> JByteArray<'c> {
    cold(env, |env| {
        let bytes = opt_bytes(env, &record)?.ok_or_else(|| arg_fail("record is null"))?;
        let retry = retry_of(max_attempts, initial_ms, max_ms)?;
        let s = Settlement::from_record_json(&bytes, retry, now_of(now_ns, wall_ms)?)?;
        let first = s.last_decision().clone();
        let mut w = W::ok();
        w.u64(into_handle(s));
        put_decision(&mut w, &first);
        Ok(w)
    })
}

/// `static native void nativeSettleFree(long handle)`: frees a handle; 0 is
/// a no-op.
#[unsafe(no_mangle)]
pub extern "system" fn Java_io_leasebeat_NativeBridge_nativeSettleFree<'c>(
    _env: EnvUnowned<'c>,
    _class: JClass<'c>,
    handle: jlong,
) {
    if handle == 0 {
        return;
    }
    let _ = std::panic::catch_unwind(|| {
        // SAFETY: see `with_settlement`; the Java side frees each handle
        // exactly once, with no call inside.
        drop(unsafe { Box::from_raw(handle as usize as *mut Handle) });
    });
}

/// `static native byte[] nativeSettleGet(long handle, int what)`: 0 the
/// state (`str reservation_id`, `str key`, `str mode`, `opt str outcome`,
/// `u32 failures`), 1 `opt record`, 2 `opt attempt`, 3 the last decision, 4
/// the poll timeout (`opt u64`), 5 the action.
#[unsafe(no_mangle)]
pub extern "system" fn Java_io_leasebeat_NativeBridge_nativeSettleGet<'c>(
    env: EnvUnowned<'c>,
    _class: JClass<'c>,
    handle: jlong,
    what: jint,
) -> JByteArray<'c> {
    cold(env, |_| {
        with_settlement(handle, |s| {
            let mut w = W::ok();
            match what {
                0 => {
                    w.str(s.reservation_id())
                        .str(s.key())
                        .str(s.mode().as_str())
                        .opt_str(s.outcome().map(|o| o.as_str()))
                        .u32(s.failures());
                }
                1 => match s.record() {
                    Some(r) => put_record(w.bool(true), r),
                    None => {
                        w.bool(false);
                    }
                },
                2 => match s.attempt() {
                    Some(a) => put_attempt(w.bool(true), a),
                    None => {
                        w.bool(false);
                    }
                },
                3 => put_decision(&mut w, s.last_decision()),
                4 => {
                    w.opt_u64(s.poll_timeout());
                }
                5 => put_action(&mut w, s.poll_action()),
                _ => return Err(arg_fail(&format!("unknown settlement getter {what}"))),
            }
            Ok(w)
        })
    })
}

/// `static native byte[] nativeSettlePersisted(long handle, long nowNs)`:
/// the decision.
#[unsafe(no_mangle)]
pub extern "system" fn Java_io_leasebeat_NativeBridge_nativeSettlePersisted<'c>(
    env: EnvUnowned<'c>,
    _class: JClass<'c>,
    handle: jlong,
    now_ns: jlong,
) -> JByteArray<'c> {
    cold(env, |_| {
        with_settlement(handle, |s| {
            decision_envelope(s.handle_persisted(u64_of(now_ns)))
        })
    })
}

/// `static native byte[] nativeSettlePersistFailed(long handle, byte[]
/// message, long nowNs)`: the decision.
#[unsafe(no_mangle)]
pub extern "system" fn Java_io_leasebeat_NativeBridge_nativeSettlePersistFailed<'c>(
    env: EnvUnowned<'c>,
    _class: JClass<'c>,
    handle: jlong,
    message: JByteArray<'c>,
    now_ns: jlong,
) -> JByteArray<'c> {
    cold(env, |env| {
        let message = text_arg(env, &message, "message")?;
        with_settlement(handle, |s| {
            decision_envelope(s.handle_persist_failed(&message, u64_of(now_ns)))
        })
    })
}

/// `static native byte[] nativeSettleSent(long handle, long attemptId, long
/// nowNs)`: the decision.
#[unsafe(no_mangle)]
pub extern "system" fn Java_io_leasebeat_NativeBridge_nativeSettleSent<'c>(
    env: EnvUnowned<'c>,
    _class: JClass<'c>,
    handle: jlong,
    attempt_id: jlong,
    now_ns: jlong,
) -> JByteArray<'c> {
    cold(env, |_| {
        with_settlement(handle, |s| {
            decision_envelope(s.handle_sent(u64_of(attempt_id), u64_of(now_ns)))
        })
    })
}

/// `static native byte[] nativeSettleResponse(long handle, long attemptId,
/// int status, byte[] headers, byte[] body, long nowNs, long wallMs)`: the
/// decision.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub extern "system" fn Java_io_leasebeat_NativeBridge_nativeSettleResponse<'c>(
    env: EnvUnowned<'c>,
    _class: JClass<'c>,
    handle: jlong,
    attempt_id: jlong,
    status: jint,
    headers: JByteArray<'c>,
    body: JByteArray<'c>,
    now_ns: jlong,
    wall_ms: jlong,
) -> JByteArray<'c> {
    cold(env, |env| {
        let mut response = leasebeat::Response::new(status_of(status)?);
        response.headers = headers_of(opt_bytes(env, &headers)?)?;
        response.body = opt_bytes(env, &body)?.unwrap_or_default();
        let now = now_of(now_ns, wall_ms)?;
        with_settlement(handle, |s| {
            decision_envelope(s.handle_response(u64_of(attempt_id), response.view(), now))
        })
    })
}

/// `static native byte[] nativeSettleFailure(long handle, long attemptId,
/// int failure, long nowNs)`: the decision (failure 0 timeout, 1 connect, 2
/// reset).
#[unsafe(no_mangle)]
pub extern "system" fn Java_io_leasebeat_NativeBridge_nativeSettleFailure<'c>(
    env: EnvUnowned<'c>,
    _class: JClass<'c>,
    handle: jlong,
    attempt_id: jlong,
    failure: jint,
    now_ns: jlong,
) -> JByteArray<'c> {
    cold(env, |_| {
        let failure = parse_failure(failure)?;
        with_settlement(handle, |s| {
            decision_envelope(s.handle_failure(u64_of(attempt_id), failure, u64_of(now_ns)))
        })
    })
}

/// `static native byte[] nativeEventOfCreate(byte[] createJson)`: what a
/// runner started from a create passes as the expired-commit fallback's
/// `event` (`{"subject":...,"action":...}`, both members copied from the
/// create request as they are), when the request has both. OK payload: `opt
/// str`. The settlement checks the result like any caller's event.
#[unsafe(no_mangle)]
pub extern "system" fn Java_io_leasebeat_NativeBridge_nativeEventOfCreate<'c>(
    env: EnvUnowned<'c>,
    _class: JClass<'c>,
    create: JByteArray<'c>,
) -> JByteArray<'c> {
    cold(env, |env| {
        let bytes = opt_bytes(env, &create)?.unwrap_or_default();
        let event = serde_json::from_slice::<serde_json::Value>(&bytes)
            .ok()
            .and_then(|v| {
                let subject = v.get("subject")?.clone();
                let action = v.get("action")?.clone();
                Some(serde_json::json!({ "subject": subject, "action": action }).to_string())
            });
        let mut w = W::ok();
        w.opt_str(event.as_deref());
        Ok(w)
    })
}
