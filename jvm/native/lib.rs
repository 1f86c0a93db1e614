//! JNI library of leasebeat: the native half of the Java binding
//! (`io.leasebeat.NativeBridge`).
//!
//! The interface is deliberately narrow. Every entry point takes only Java
//! primitives and `byte[]` (strings travel as UTF-8 bytes) and returns one
//! `byte[]`: an *envelope* that the Java side decodes with a `ByteBuffer`.
//! Nothing here constructs Java objects or throws, except through jni's
//! `ThrowRuntimeExAndDefault` policy when JNI itself fails, so the surface
//! of the JNI API in use stays tiny.
//!
//! Envelope (big-endian): one status byte, then
//! * `0` OK: the payload of the call;
//! * `1` ERROR: the Java `Code` constant name, the stable code string and the
//!   message (core errors);
//! * `2` PANIC: the panic message. Every entry point runs its body inside
//!   `catch_unwind` (and `EnvUnowned::with_env` adds a second one), so a
//!   panic becomes a Java `LeaseException` with `Code.PANIC`, never an abort.
//!
//! Encodings used in payloads: `str` = u32 length + UTF-8; `opt<T>` = u8 0/1
//! then T; `num` = u8 tag (0 = -inf, 1 = finite, 2 = +inf) then, if finite,
//! the i128 as 16 bytes; `u64` = 8 bytes, read as an unsigned value in Java.
//!
//! The handle is a `Box<Handle>` turned into a `jlong`. The Java side
//! guarantees it is freed once, never while another call is inside, and
//! never used after it was freed (a read/write lock plus a `Cleaner`).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Mutex;

use jni::errors::ThrowRuntimeExAndDefault;
use jni::objects::{JByteArray, JClass};
use jni::refs::Reference;
use jni::sys::{jboolean, jint, jlong};
use jni::{Env, EnvUnowned};
use leasebeat::arith;
use leasebeat::{
    Action, AdoptedCreate, Attempt, Config, CreateOutcome, Decision, ErrorKind, Heartbeat, Next,
    Num, Response, SequentialKeys, StopReason, TransportFailure,
};
use serde_json::Value;

const OK: u8 = 0;
const ERROR: u8 = 1;
const PANIC: u8 = 2;

/// One heartbeat behind a lock: Java may call from many threads at once.
struct Handle {
    hb: Mutex<Heartbeat>,
}

/// A payload writer.
#[derive(Default)]
struct W(Vec<u8>);

impl W {
    fn ok() -> W {
        W(vec![OK])
    }
    fn u8(&mut self, v: u8) -> &mut W {
        self.0.push(v);
        self
    }
    fn bool(&mut self, v: bool) -> &mut W {
        self.u8(u8::from(v))
    }
    fn u32(&mut self, v: u32) -> &mut W {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    fn u64(&mut self, v: u64) -> &mut W {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    fn bytes(&mut self, v: &[u8]) -> &mut W {
        // Lengths above u32::MAX cannot occur: Java arrays are shorter.
        self.u32(u32::try_from(v.len()).unwrap_or(u32::MAX));
        self.0.extend_from_slice(v);
        self
    }
    fn str(&mut self, v: &str) -> &mut W {
        self.bytes(v.as_bytes())
    }
    fn opt_str(&mut self, v: Option<&str>) -> &mut W {
        match v {
            None => self.u8(0),
            Some(s) => self.u8(1).str(s),
        }
    }
    fn opt_u64(&mut self, v: Option<u64>) -> &mut W {
        match v {
            None => self.u8(0),
            Some(x) => self.u8(1).u64(x),
        }
    }
    fn num(&mut self, n: Num) -> &mut W {
        match n {
            Num::NegInf => self.u8(0),
            Num::Int(v) => {
                self.u8(1);
                self.0.extend_from_slice(&v.to_be_bytes());
                self
            }
            Num::Inf => self.u8(2),
        }
    }
    /// A u64 duration where `u64::MAX` is +infinity (P-2).
    fn ms(&mut self, v: u64) -> &mut W {
        self.num(Num::from_ms(v))
    }
    /// A plain u64 count or value (never infinite).
    fn count(&mut self, v: u64) -> &mut W {
        self.num(Num::Int(i128::from(v)))
    }
}

/// The Java `Code` constant for a core error kind. Exhaustive on purpose: a
/// new kind is a compile error here until the Java enum has it too.
fn java_code(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::InvalidConfig => "INVALID_CONFIG",
        ErrorKind::InvalidArgument => "INVALID_ARGUMENT",
        ErrorKind::TimeWentBackwards => "TIME_WENT_BACKWARDS",
        ErrorKind::NotOutstanding => "NOT_OUTSTANDING",
        ErrorKind::NotSent => "NOT_SENT",
        ErrorKind::AlreadySent => "ALREADY_SENT",
        ErrorKind::Stopped => "STOPPED",
        ErrorKind::InvalidKey => "INVALID_KEY",
    }
}

/// The Java `StopReason` constant for a core stop reason. Exhaustive on
/// purpose, like [`java_code`].
fn java_reason(reason: StopReason) -> &'static str {
    match reason {
        StopReason::LeaseTooShort => "LEASE_TOO_SHORT",
        StopReason::RetryWindowExhausted => "RETRY_WINDOW_EXHAUSTED",
        StopReason::NoProgress => "NO_PROGRESS",
        StopReason::Throttled => "THROTTLED",
        StopReason::Expired => "EXPIRED",
        StopReason::Finalized => "FINALIZED",
        StopReason::MaxExtensions => "MAX_EXTENSIONS",
        StopReason::TenantClosed => "TENANT_CLOSED",
        StopReason::NotFound => "NOT_FOUND",
        StopReason::Rejected => "REJECTED",
        StopReason::UnexpectedStatus => "UNEXPECTED_STATUS",
        StopReason::CreateFailed => "CREATE_FAILED",
        StopReason::CreateRejected => "CREATE_REJECTED",
        StopReason::NoReservation => "NO_RESERVATION",
        StopReason::Cancelled => "CANCELLED",
    }
}

fn error_envelope(e: &leasebeat::Error) -> Vec<u8> {
    let mut w = W::default();
    w.u8(ERROR)
        .str(java_code(e.kind()))
        .str(e.kind().code())
        .str(e.message());
    w.0
}

fn arg_error(message: &str) -> Vec<u8> {
    error_envelope(&leasebeat::Error::new(ErrorKind::InvalidArgument, message))
}

fn panic_envelope(payload: Box<dyn std::any::Any + Send>) -> Vec<u8> {
    let message = if let Some(s) = payload.downcast_ref::<&'static str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_owned()
    };
    // Dropping a payload may itself panic; leak it instead.
    std::mem::forget(payload);
    let mut w = W::default();
    w.u8(PANIC).str(&format!("Rust panic: {message}"));
    w.0
}

fn envelope(r: Result<W, leasebeat::Error>) -> Vec<u8> {
    match r {
        Ok(w) => w.0,
        Err(e) => error_envelope(&e),
    }
}

/// Runs one entry point: `f` builds the envelope; a panic inside it becomes a
/// PANIC envelope; a JNI failure becomes a pending `RuntimeException`.
fn run<'c, F>(mut unowned: EnvUnowned<'c>, f: F) -> JByteArray<'c>
where
    F: FnOnce(&mut Env<'c>) -> jni::errors::Result<Vec<u8>>,
{
    unowned
        .with_env(|env| -> jni::errors::Result<JByteArray<'c>> {
            let bytes = match catch_unwind(AssertUnwindSafe(|| f(env))) {
                Ok(r) => r?,
                Err(payload) => panic_envelope(payload),
            };
            env.byte_array_from_slice(&bytes)
        })
        .resolve::<ThrowRuntimeExAndDefault>()
}

/// A nullable `byte[]` argument.
fn opt_bytes(env: &Env<'_>, a: &JByteArray<'_>) -> jni::errors::Result<Option<Vec<u8>>> {
    if a.is_null() {
        Ok(None)
    } else {
        env.convert_byte_array(a).map(Some)
    }
}

/// Runs `f` on the heartbeat behind `handle`.
fn with_hb(handle: jlong, f: impl FnOnce(&mut Heartbeat) -> Vec<u8>) -> Vec<u8> {
    if handle == 0 {
        return arg_error("null heartbeat handle");
    }
    // SAFETY: a non-zero handle comes from `nativeNew` (Box::into_raw) and the
    // Java side never passes it after `nativeFree` nor concurrently with it.
    let h = unsafe { &*(handle as usize as *const Handle) };
    match h.hb.lock() {
        Ok(mut hb) => f(&mut hb),
        Err(_) => {
            let mut w = W::default();
            w.u8(PANIC)
                .str("Rust panic: the heartbeat is unusable after an earlier panic");
            w.0
        }
    }
}

/// A Java long carrying a u64 bit pattern.
fn u64_of(v: jlong) -> u64 {
    v as u64
}

// ----- payload encoders -----

fn put_decision(w: &mut W, d: &Decision) {
    w.opt_str(d.reservation_id.as_deref());
    match d.next {
        Next::Send(kind) => {
            w.u8(0).str(kind.as_str());
        }
        Next::Stop(reason) => {
            w.u8(1).str(java_reason(reason)).str(reason.as_str());
        }
    }
    w.opt_u64(d.at_ns);
    w.opt_str(d.key.map(|k| k.as_str()));
    w.opt_u64(d.key_index.map(u64::from));
    w.opt_str(d.mode.map(|m| m.as_str()));
    let numbers: Vec<(&str, Num)> = d.numbers.iter().collect();
    w.u32(numbers.len() as u32);
    for (name, value) in numbers {
        w.str(name).num(value);
    }
    w.u32(d.warnings.len() as u32);
    for warning in &d.warnings {
        w.str(warning.as_str());
    }
    w.str(d.outcome.as_str());
    w.opt_str(d.detail.as_deref());
    // D-15 and the deciding success's instants (u64::MAX proven_until = +infinity).
    w.opt_u64(d.proven_until_ns)
        .opt_u64(d.expires_at_ms)
        .opt_u64(d.remaining_ttl_ms);
    w.str(&d.to_json_string());
}

fn put_attempt(w: &mut W, a: &Attempt) {
    w.u64(a.id)
        .str(a.kind.as_str())
        .opt_u64(a.due_ns)
        .str(&a.key)
        .u64(u64::from(a.key_index))
        .str(a.key_use.as_str())
        .bytes(&a.body)
        .opt_u64(a.sent_ns)
        .bool(a.is_zero_window_retry());
}

fn decision_result(r: Result<Decision, leasebeat::Error>) -> Vec<u8> {
    envelope(r.map(|d| {
        let mut w = W::ok();
        put_decision(&mut w, &d);
        w
    }))
}

fn parse_failure(code: jint) -> Option<TransportFailure> {
    match code {
        0 => Some(TransportFailure::Timeout),
        1 => Some(TransportFailure::Connect),
        2 => Some(TransportFailure::Reset),
        _ => None,
    }
}

/// Headers as encoded by Java: u32 count, then per header u32 + name bytes,
/// u32 + value bytes.
fn parse_headers(b: &[u8]) -> Option<Vec<(Vec<u8>, Vec<u8>)>> {
    fn take<'a>(b: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
        if b.len() < n {
            return None;
        }
        let (head, tail) = b.split_at(n);
        *b = tail;
        Some(head)
    }
    fn len(b: &mut &[u8]) -> Option<usize> {
        let four: [u8; 4] = take(b, 4)?.try_into().ok()?;
        usize::try_from(u32::from_be_bytes(four)).ok()
    }
    let mut b = b;
    let count = len(&mut b)?;
    let mut out = Vec::with_capacity(count.min(1024));
    for _ in 0..count {
        let n = len(&mut b)?;
        let name = take(&mut b, n)?.to_vec();
        let n = len(&mut b)?;
        let value = take(&mut b, n)?.to_vec();
        out.push((name, value));
    }
    b.is_empty().then_some(out)
}

// ----- entry points: lifecycle -----

/// `static native byte[] nativeNew(long ttlMs, long timeoutBits, boolean
/// timeoutUnbounded, byte[] createRequestJson, byte[] keyPrefix)`: OK payload
/// is the handle (u64).
#[unsafe(no_mangle)]
pub extern "system" fn Java_io_leasebeat_NativeBridge_nativeNew<'c>(
    env: EnvUnowned<'c>,
    _class: JClass<'c>,
    ttl_ms: jlong,
    timeout_bits: jlong,
    timeout_unbounded: jboolean,
    create_request: JByteArray<'c>,
    key_prefix: JByteArray<'c>,
) -> JByteArray<'c> {
    run(env, |env| {
        let create_request = opt_bytes(env, &create_request)?;
        let key_prefix = opt_bytes(env, &key_prefix)?;
        let config = match config_of(ttl_ms, timeout_bits, timeout_unbounded, create_request) {
            Ok(c) => c,
            Err(e) => return Ok(error_envelope(&e)),
        };
        let hb = match key_prefix {
            None => Heartbeat::new(config),
            Some(prefix) => match String::from_utf8(prefix) {
                Ok(prefix) => {
                    Heartbeat::with_key_source(config, Box::new(SequentialKeys::new(prefix)))
                }
                Err(_) => return Ok(arg_error("keyPrefix is not valid UTF-8")),
            },
        };
        Ok(handle_envelope(hb))
    })
}

/// The envelope of a new heartbeat: OK with the handle (u64), or the error.
fn handle_envelope(hb: Result<Heartbeat, leasebeat::Error>) -> Vec<u8> {
    envelope(hb.map(|hb| {
        let raw = Box::into_raw(Box::new(Handle { hb: Mutex::new(hb) }));
        let mut w = W::ok();
        w.u64(raw as usize as u64);
        w
    }))
}

/// `static native byte[] nativeForReservation(long ttlMs, long timeoutBits,
/// boolean timeoutUnbounded, byte[] reservationId, byte[] keyPrefix)`: a
/// heartbeat for an existing reservation (`Heartbeat::for_reservation`),
/// whose first action is an immediate extension. OK payload is the handle
/// (u64).
#[unsafe(no_mangle)]
pub extern "system" fn Java_io_leasebeat_NativeBridge_nativeForReservation<'c>(
    env: EnvUnowned<'c>,
    _class: JClass<'c>,
    ttl_ms: jlong,
    timeout_bits: jlong,
    timeout_unbounded: jboolean,
    reservation_id: JByteArray<'c>,
    key_prefix: JByteArray<'c>,
) -> JByteArray<'c> {
    run(env, |env| {
        let Some(reservation_id) = opt_bytes(env, &reservation_id)? else {
            return Ok(arg_error("reservationId is null"));
        };
        let Ok(reservation_id) = String::from_utf8(reservation_id) else {
            return Ok(arg_error("reservationId is not valid UTF-8"));
        };
        let key_prefix = opt_bytes(env, &key_prefix)?;
        let config = Config::new(
            u64_of(ttl_ms),
            (!timeout_unbounded).then(|| u64_of(timeout_bits)),
        );
        let hb = match key_prefix {
            None => Heartbeat::for_reservation(config, reservation_id),
            Some(prefix) => match String::from_utf8(prefix) {
                Ok(prefix) => Heartbeat::for_reservation_with_key_source(
                    config,
                    reservation_id,
                    Box::new(SequentialKeys::new(prefix)),
                ),
                Err(_) => return Ok(arg_error("keyPrefix is not valid UTF-8")),
            },
        };
        Ok(handle_envelope(hb))
    })
}

/// `static native byte[] nativeAdopt(long ttlMs, long timeoutBits, boolean
/// timeoutUnbounded, byte[] createRequestJson, byte[] keyPrefix, byte[] key,
/// byte[] requestBody, boolean sentKnown, long sentNs, long receivedNs, int
/// failure, int status, byte[] headers, byte[] body, boolean timingUnknown)`:
/// `Heartbeat::adopt_create` (failure -1 = a response, else the transport
/// failure code). OK payload: the handle (u64), then the first decision.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub extern "system" fn Java_io_leasebeat_NativeBridge_nativeAdopt<'c>(
    env: EnvUnowned<'c>,
    _class: JClass<'c>,
    ttl_ms: jlong,
    timeout_bits: jlong,
    timeout_unbounded: jboolean,
    create_request: JByteArray<'c>,
    key_prefix: JByteArray<'c>,
    key: JByteArray<'c>,
    request_body: JByteArray<'c>,
    sent_known: jboolean,
    sent_ns: jlong,
    received_ns: jlong,
    failure: jint,
    status: jint,
    headers: JByteArray<'c>,
    body: JByteArray<'c>,
    timing_unknown: jboolean,
) -> JByteArray<'c> {
    run(env, |env| {
        let create_request = opt_bytes(env, &create_request)?;
        let key_prefix = opt_bytes(env, &key_prefix)?;
        let key = opt_bytes(env, &key)?;
        let request_body = opt_bytes(env, &request_body)?;
        let headers = opt_bytes(env, &headers)?.unwrap_or_default();
        let body = opt_bytes(env, &body)?.unwrap_or_default();
        let config = match config_of(ttl_ms, timeout_bits, timeout_unbounded, create_request) {
            Ok(c) => c,
            Err(e) => return Ok(error_envelope(&e)),
        };
        let Some(key) = key else {
            return Ok(arg_error("the adopted create's key is null"));
        };
        let Ok(key) = String::from_utf8(key) else {
            return Ok(arg_error("the adopted create's key is not valid UTF-8"));
        };
        let outcome = if failure < 0 {
            let Some(headers) = parse_headers(&headers) else {
                return Ok(arg_error("malformed header encoding"));
            };
            let Ok(status) = u16::try_from(status) else {
                return Ok(arg_error(&format!(
                    "HTTP status must be within 100..=999, got {status}"
                )));
            };
            let mut response = Response::new(status).body(body);
            response.headers = headers;
            if timing_unknown {
                response = response.timing_unknown();
            }
            CreateOutcome::Response(response)
        } else {
            let Some(f) = parse_failure(failure) else {
                return Ok(arg_error(&format!("unknown transport failure {failure}")));
            };
            CreateOutcome::Failure(f)
        };
        let create = AdoptedCreate {
            key,
            body: request_body,
            sent_ns: sent_known.then(|| u64_of(sent_ns)),
            received_ns: u64_of(received_ns),
            outcome,
        };
        let adopted = match key_prefix {
            None => Heartbeat::adopt_create(config, create),
            Some(prefix) => match String::from_utf8(prefix) {
                Ok(prefix) => Heartbeat::adopt_create_with_key_source(
                    config,
                    create,
                    Box::new(SequentialKeys::new(prefix)),
                ),
                Err(_) => return Ok(arg_error("keyPrefix is not valid UTF-8")),
            },
        };
        Ok(envelope(adopted.map(|(hb, first)| {
            let raw = Box::into_raw(Box::new(Handle { hb: Mutex::new(hb) }));
            let mut w = W::ok();
            w.u64(raw as usize as u64);
            put_decision(&mut w, &first);
            w
        })))
    })
}

/// The core configuration from the Java builder's values.
fn config_of(
    ttl_ms: jlong,
    timeout_bits: jlong,
    timeout_unbounded: jboolean,
    create_request: Option<Vec<u8>>,
) -> Result<Config, leasebeat::Error> {
    let mut config = Config::new(
        u64_of(ttl_ms),
        (!timeout_unbounded).then(|| u64_of(timeout_bits)),
    );
    if let Some(json) = create_request {
        match serde_json::from_slice::<Value>(&json) {
            Ok(Value::Object(map)) => config.create_request = map,
            Ok(_) => {
                return Err(leasebeat::Error::new(
                    ErrorKind::InvalidConfig,
                    "createRequestJson must be a JSON object",
                ));
            }
            Err(e) => {
                return Err(leasebeat::Error::new(
                    ErrorKind::InvalidConfig,
                    format!("createRequestJson is not valid JSON: {e}"),
                ));
            }
        }
    }
    Ok(config)
}

/// `static native void nativeFree(long handle)`: frees a handle; 0 is a no-op.
#[unsafe(no_mangle)]
pub extern "system" fn Java_io_leasebeat_NativeBridge_nativeFree<'c>(
    _env: EnvUnowned<'c>,
    _class: JClass<'c>,
    handle: jlong,
) {
    if handle == 0 {
        return;
    }
    let _ = catch_unwind(|| {
        // SAFETY: see `with_hb`; the Java side frees each handle exactly once.
        drop(unsafe { Box::from_raw(handle as usize as *mut Handle) });
    });
}

// ----- entry points: events -----

/// `static native byte[] nativeSent(long handle, long attemptId, long nowNs)`.
#[unsafe(no_mangle)]
pub extern "system" fn Java_io_leasebeat_NativeBridge_nativeSent<'c>(
    env: EnvUnowned<'c>,
    _class: JClass<'c>,
    handle: jlong,
    attempt_id: jlong,
    now_ns: jlong,
) -> JByteArray<'c> {
    run(env, |_| {
        Ok(with_hb(handle, |hb| {
            envelope(
                hb.handle_sent(u64_of(attempt_id), u64_of(now_ns))
                    .map(|()| W::ok()),
            )
        }))
    })
}

/// `static native byte[] nativeResponse(long handle, long attemptId, int
/// status, byte[] headers, byte[] body, boolean timingUnknown, long nowNs)`.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub extern "system" fn Java_io_leasebeat_NativeBridge_nativeResponse<'c>(
    env: EnvUnowned<'c>,
    _class: JClass<'c>,
    handle: jlong,
    attempt_id: jlong,
    status: jint,
    headers: JByteArray<'c>,
    body: JByteArray<'c>,
    timing_unknown: jboolean,
    now_ns: jlong,
) -> JByteArray<'c> {
    run(env, |env| {
        let headers = opt_bytes(env, &headers)?.unwrap_or_default();
        let body = opt_bytes(env, &body)?.unwrap_or_default();
        let Some(headers) = parse_headers(&headers) else {
            return Ok(arg_error("malformed header encoding"));
        };
        let Ok(status) = u16::try_from(status) else {
            return Ok(arg_error(&format!(
                "HTTP status must be within 100..=999, got {status}"
            )));
        };
        let mut response = Response::new(status).body(body);
        response.headers = headers;
        if timing_unknown {
            response = response.timing_unknown();
        }
        Ok(with_hb(handle, |hb| {
            decision_result(hb.handle_response(u64_of(attempt_id), response, u64_of(now_ns)))
        }))
    })
}

/// `static native byte[] nativeFailure(long handle, long attemptId, int
/// failure, long nowNs)`: failure 0 = timeout, 1 = connect, 2 = reset.
#[unsafe(no_mangle)]
pub extern "system" fn Java_io_leasebeat_NativeBridge_nativeFailure<'c>(
    env: EnvUnowned<'c>,
    _class: JClass<'c>,
    handle: jlong,
    attempt_id: jlong,
    failure: jint,
    now_ns: jlong,
) -> JByteArray<'c> {
    run(env, |_| {
        let Some(failure) = parse_failure(failure) else {
            return Ok(arg_error(&format!("unknown transport failure {failure}")));
        };
        Ok(with_hb(handle, |hb| {
            decision_result(hb.handle_failure(u64_of(attempt_id), failure, u64_of(now_ns)))
        }))
    })
}

/// `static native byte[] nativeCancel(long handle, long nowNs)`.
#[unsafe(no_mangle)]
pub extern "system" fn Java_io_leasebeat_NativeBridge_nativeCancel<'c>(
    env: EnvUnowned<'c>,
    _class: JClass<'c>,
    handle: jlong,
    now_ns: jlong,
) -> JByteArray<'c> {
    run(env, |_| {
        Ok(with_hb(handle, |hb| {
            decision_result(hb.cancel(u64_of(now_ns)))
        }))
    })
}

/// `static native byte[] nativeState(long handle)`: OK payload is the action
/// tag (0 send, 1 await outcome, 2 stop) with the attempt or reason, then
/// opt reservation id, opt mode, u64 max rtt, u64 last event, opt decision.
#[unsafe(no_mangle)]
pub extern "system" fn Java_io_leasebeat_NativeBridge_nativeState<'c>(
    env: EnvUnowned<'c>,
    _class: JClass<'c>,
    handle: jlong,
) -> JByteArray<'c> {
    run(env, |_| {
        Ok(with_hb(handle, |hb| {
            let mut w = W::ok();
            match hb.poll_action() {
                Action::Send(a) => {
                    w.u8(0);
                    put_attempt(&mut w, a);
                }
                Action::AwaitOutcome(a) => {
                    w.u8(1);
                    put_attempt(&mut w, a);
                }
                Action::Stop(r) => {
                    w.u8(2).str(java_reason(r)).str(r.as_str());
                }
            }
            w.opt_str(hb.reservation_id())
                .opt_str(hb.mode().map(|m| m.as_str()))
                .u64(hb.max_rtt_ms())
                .u64(hb.last_event_ns());
            match hb.last_decision() {
                None => {
                    w.u8(0);
                }
                Some(d) => {
                    w.u8(1);
                    put_decision(&mut w, d);
                }
            }
            w.0
        }))
    })
}

// ----- entry points: catalog and test hooks -----

/// `static native byte[] nativeCatalog()`: the core's error kinds and stop
/// reasons as (Java constant, stable string) pairs, and the core version.
#[unsafe(no_mangle)]
pub extern "system" fn Java_io_leasebeat_NativeBridge_nativeCatalog<'c>(
    env: EnvUnowned<'c>,
    _class: JClass<'c>,
) -> JByteArray<'c> {
    run(env, |_| {
        let mut w = W::ok();
        w.u32(ErrorKind::ALL.len() as u32);
        for kind in ErrorKind::ALL {
            w.str(java_code(kind)).str(kind.code());
        }
        w.u32(StopReason::ALL.len() as u32);
        for reason in StopReason::ALL {
            w.str(java_reason(reason)).str(reason.as_str());
        }
        w.str(env!("CARGO_PKG_VERSION"));
        Ok(w.0)
    })
}

/// `static native byte[] nativePanic()`: panics on purpose, so tests can see
/// a panic arrive as `LeaseException(Code.PANIC)`.
#[unsafe(no_mangle)]
pub extern "system" fn Java_io_leasebeat_NativeBridge_nativePanic<'c>(
    env: EnvUnowned<'c>,
    _class: JClass<'c>,
) -> JByteArray<'c> {
    run(env, |_| -> jni::errors::Result<Vec<u8>> {
        panic!("deliberate panic for the binding's tests")
    })
}

// ----- entry points: pure arithmetic -----

/// `static native byte[] nativeMath(int op, long a, long b, long c, long d,
/// boolean flagA, boolean flagB)`: the pure functions of `leasebeat::arith`.
/// Arguments are u64 bit patterns (or i64 for the signed fallback inputs);
/// the Java side validates them first. Ops:
/// 0 ceil_ms(a); 1 attempt_budget(b ? None : a, c); 2 safety_margin(a);
/// 3 retry_reserve(a, b); 4 primary_schedule(a, flagA ? None : b, flagB ?
/// None : c, d); 5 retry_window(a, b, c, d); 6 hold_cadence(a);
/// 7 fallback_cadence(a as i64, b, c); 8 fallback_skips(a as i64, b as i64, c).
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub extern "system" fn Java_io_leasebeat_NativeBridge_nativeMath<'c>(
    env: EnvUnowned<'c>,
    _class: JClass<'c>,
    op: jint,
    a: jlong,
    b: jlong,
    c: jlong,
    d: jlong,
    flag_a: jboolean,
    flag_b: jboolean,
) -> JByteArray<'c> {
    run(env, |_| {
        let (ua, ub, uc, ud) = (u64_of(a), u64_of(b), u64_of(c), u64_of(d));
        let mut w = W::ok();
        match op {
            0 => {
                w.count(arith::ceil_ms(ua));
            }
            1 => {
                w.ms(arith::attempt_budget((!flag_b).then_some(ua), uc));
            }
            2 => {
                w.ms(arith::safety_margin(ua));
            }
            3 => {
                w.ms(arith::retry_reserve(ua, ub));
            }
            4 => {
                let s = arith::primary_schedule(
                    ua,
                    (!flag_a).then_some(ub),
                    (!flag_b).then_some(uc),
                    ud,
                );
                w.ms(s.lead_floor)
                    .ms(s.attempt_budget)
                    .ms(s.safety_margin)
                    .ms(s.retry_reserve)
                    .ms(s.next_delay);
            }
            5 => {
                let r = arith::retry_window(ua, ub, uc, ud);
                w.ms(r.lead).num(r.window);
                match r.delay {
                    None => w.u8(0),
                    Some(delay) => w.u8(1).ms(delay),
                };
            }
            6 => {
                w.ms(arith::hold_cadence(ua));
            }
            7 => {
                let f = arith::fallback_cadence(i128::from(a), ub, uc);
                w.ms(f.cadence).bool(f.hold);
            }
            8 => {
                w.count(arith::fallback_skips(i128::from(a), i128::from(b), uc));
            }
            _ => return Ok(arg_error(&format!("unknown arithmetic operation {op}"))),
        }
        Ok(w.0)
    })
}

/// `static native byte[] nativeRetryAfter(byte[] values)`: values encoded like
/// headers' values (u32 count, then u32 length + bytes each). OK payload: u8 0
/// then the milliseconds as a num, or u8 1 then the problem's stable string.
#[unsafe(no_mangle)]
pub extern "system" fn Java_io_leasebeat_NativeBridge_nativeRetryAfter<'c>(
    env: EnvUnowned<'c>,
    _class: JClass<'c>,
    values: JByteArray<'c>,
) -> JByteArray<'c> {
    run(env, |env| {
        let raw = opt_bytes(env, &values)?.unwrap_or_default();
        // Reuse the header decoder: values are encoded as (value, empty) pairs.
        let Some(pairs) = parse_headers(&raw) else {
            return Ok(arg_error("malformed Retry-After value encoding"));
        };
        let values: Vec<&[u8]> = pairs.iter().map(|(v, _)| v.as_slice()).collect();
        let mut w = W::ok();
        match arith::parse_retry_after(&values) {
            Ok(ms) => {
                w.u8(0).count(ms);
            }
            Err(e) => {
                w.u8(1).str(e.as_str());
            }
        }
        Ok(w.0)
    })
}
