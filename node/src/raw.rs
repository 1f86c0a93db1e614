//! Raw Node-API callbacks for the per-beat calls (`fast.js`).
//!
//! A `#[napi]` method pays, per call, napi-rs 3's receiver machinery: a
//! `napi_unwrap` plus a type-tag check (both V8 private-symbol lookups) and
//! the native-borrow registry (a global mutex-guarded hash map insert and
//! remove). Profiled on the beat loop, that was about a quarter of the time
//! of handleSent + handleResponse + pollAction. These callbacks instead take
//! the heartbeat's state from an external value (one strong count of its
//! `Arc`, made once per heartbeat by the hidden `__handle` method) and its
//! arguments with one `napi_get_cb_info`; the argument checks, messages and
//! errors are the same functions the `#[napi]` methods use. `install` puts
//! them on the exports under `__lb*` names; `fast.js` takes them off before
//! anything is exported, so user code never reaches them.

use std::cell::Cell;
use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr;
use std::sync::{Arc, Mutex};

use napi::bindgen_prelude::*;
use napi::sys;

use crate::errors::{Class, ErrorCode, Fail, R, run};
use crate::{State, conv, fast, with_state};
use leasebeat as lb;

/// The state a `Heartbeat` shares with its handles.
pub type Shared = Mutex<State>;

fn check(status: sys::napi_status) -> Result<()> {
    if status == sys::Status::napi_ok {
        Ok(())
    } else {
        Err(Error::from_status(Status::from(status)))
    }
}

/// A new handle on `state`: an external owning one strong count.
pub fn handle<'e>(env: &'e Env, state: &Arc<Shared>) -> Result<Unknown<'e>> {
    let data = Arc::into_raw(Arc::clone(state)).cast_mut().cast::<c_void>();
    let mut out = ptr::null_mut();
    // SAFETY: `data` is a strong count given to the external; `finalize`
    // takes it back exactly once, when the external is collected.
    let status = unsafe {
        sys::napi_create_external(env.raw(), data, Some(finalize), ptr::null_mut(), &mut out)
    };
    if let Err(e) = check(status) {
        // SAFETY: the external was not created: the count is still ours.
        drop(unsafe { Arc::from_raw(data.cast_const().cast::<Shared>()) });
        return Err(e);
    }
    // SAFETY: `out` is a live value of this env.
    Ok(unsafe { Unknown::from_raw_unchecked(env.raw(), out) })
}

unsafe extern "C" fn finalize(_env: sys::napi_env, data: *mut c_void, _hint: *mut c_void) {
    // SAFETY: `data` came from `Arc::into_raw` in `handle`, once per external.
    drop(unsafe { Arc::from_raw(data.cast_const().cast::<Shared>()) });
}

/// The callback's arguments; absent ones are `undefined`.
///
/// # Safety
/// `env` and `info` are those of the running callback.
unsafe fn args<const N: usize>(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> Result<[sys::napi_value; N]> {
    let mut argc = N;
    let mut argv = [ptr::null_mut(); N];
    // SAFETY: `argv` has room for `argc` values.
    check(unsafe {
        sys::napi_get_cb_info(
            env,
            info,
            &mut argc,
            argv.as_mut_ptr(),
            ptr::null_mut(),
            ptr::null_mut(),
        )
    })?;
    Ok(argv)
}

/// The state behind a handle.
///
/// # Safety
/// `v` is a value of the running callback; only `fast.js` calls these
/// callbacks, always with a handle made by [`handle`] (kept alive by the
/// argument list for the whole call).
unsafe fn shared<'a>(env: sys::napi_env, v: sys::napi_value) -> Result<&'a Shared> {
    let mut data = ptr::null_mut();
    // SAFETY: see above.
    check(unsafe { sys::napi_get_value_external(env, v, &mut data) })?;
    if data.is_null() {
        return Err(Error::from_status(Status::InvalidArg));
    }
    // SAFETY: the external holds a strong count of this `Arc`.
    Ok(unsafe { &*data.cast_const().cast::<Shared>() })
}

thread_local! {
    /// The scratch of `fast.js` on this thread's environment (each worker
    /// thread has its own), registered once by `__lbScratch`: its address
    /// and length, or null when none is registered.
    static SCRATCH: Cell<(*mut u8, usize)> = const { Cell::new((ptr::null_mut(), 0)) };
}

/// The bytes of a `Uint8Array`.
///
/// # Safety
/// `v` is a value of the running callback.
unsafe fn uint8_array(env: sys::napi_env, v: sys::napi_value) -> Result<(*mut u8, usize)> {
    let mut kind = 0;
    let mut len = 0;
    let mut data = ptr::null_mut();
    let mut buffer = ptr::null_mut();
    let mut offset = 0;
    // SAFETY: see above.
    check(unsafe {
        sys::napi_get_typedarray_info(
            env,
            v,
            &mut kind,
            &mut len,
            &mut data,
            &mut buffer,
            &mut offset,
        )
    })?;
    if kind != sys::TypedarrayType::uint8_array || data.is_null() {
        return Err(Error::from_status(Status::InvalidArg));
    }
    Ok((data.cast::<u8>(), len))
}

/// The registered scratch, taken once the arguments are converted (the
/// conversion may run user code, e.g. a getter of a header array, which
/// may call another heartbeat's method and use the scratch itself).
///
/// # Safety
/// Called from a callback, at most once, and the bytes are only used
/// during it, without running JavaScript: nothing else refers to them then.
/// The registered array buffer is kept alive by a reference for the
/// environment's life (and unregistered by its cleanup hook) and is never
/// detached (`fast.js` keeps it private).
unsafe fn scratch<'a>() -> R<&'a mut [u8]> {
    let (data, len) = SCRATCH.with(Cell::get);
    if data.is_null() {
        return Err(Fail::new(
            Class::Error,
            ErrorCode::Poisoned,
            "the native code of leasebeat is not initialized on this thread",
        ));
    }
    // SAFETY: see above.
    Ok(unsafe { std::slice::from_raw_parts_mut(data, len) })
}

unsafe extern "C" fn forget_scratch(_arg: *mut c_void) {
    SCRATCH.with(|c| c.set((ptr::null_mut(), 0)));
}

/// `__lbScratch(bytes)`: registers the scratch of `fast.js` (a `Uint8Array`
/// over its own `ArrayBuffer`), once per environment.
unsafe extern "C" fn register(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> sys::napi_value {
    guard(env, |e| {
        // SAFETY: `env` and `info` are this callback's.
        let [s] = unsafe { args::<1>(env, info)? };
        if !SCRATCH.with(Cell::get).0.is_null() {
            return Err(Error::new(Status::GenericFailure, "already registered"));
        }
        // SAFETY: a value of this callback.
        let (data, len) = unsafe { uint8_array(env, s)? };
        let mut keep = ptr::null_mut();
        // SAFETY: a strong reference, never deleted: Node-API frees it with
        // the environment, after the cleanup hook below ran.
        check(unsafe { sys::napi_create_reference(env, s, 1, &mut keep) })?;
        // SAFETY: a static hook without data, added once per environment
        // (guarded by the check above; the hook resets it).
        check(unsafe {
            sys::napi_add_env_cleanup_hook(env, Some(forget_scratch), ptr::null_mut())
        })?;
        SCRATCH.with(|c| c.set((data, len)));
        undefined(e)
    })
}

/// Runs a callback body: a failure is thrown (it already is, for a `Fail`),
/// a panic becomes an `Error`, and `null` is returned to Node-API then.
fn guard(
    env: sys::napi_env,
    body: impl FnOnce(&Env) -> Result<sys::napi_value>,
) -> sys::napi_value {
    let e = Env::from_raw(env);
    match catch_unwind(AssertUnwindSafe(|| body(&e))) {
        Ok(Ok(v)) => v,
        Ok(Err(err)) => {
            if err.status != Status::PendingException {
                let _ = e.throw_error(&err.reason, None);
            }
            ptr::null_mut()
        }
        Err(_) => {
            let _ = Fail::new(
                Class::Error,
                ErrorCode::Poisoned,
                "the native code of leasebeat panicked; please report it",
            )
            .throw(&e);
            ptr::null_mut()
        }
    }
}

fn boolean(env: &Env, b: bool) -> Result<sys::napi_value> {
    let mut out = ptr::null_mut();
    // SAFETY: a plain value creation.
    check(unsafe { sys::napi_get_boolean(env.raw(), b, &mut out) })?;
    Ok(out)
}

fn undefined(env: &Env) -> Result<sys::napi_value> {
    let mut out = ptr::null_mut();
    // SAFETY: a plain value creation.
    check(unsafe { sys::napi_get_undefined(env.raw(), &mut out) })?;
    Ok(out)
}

/// A JavaScript string of `len` bytes at `data`: Latin-1 when `ascii`
/// (which V8 copies without decoding), else UTF-8.
///
/// # Safety
/// `data` points to `len` bytes of valid UTF-8 (ASCII when `ascii`).
unsafe fn js_string(
    env: &Env,
    data: *const u8,
    len: usize,
    ascii: bool,
) -> Result<sys::napi_value> {
    let mut out = ptr::null_mut();
    let len = isize::try_from(len).map_err(|_| Error::from_status(Status::InvalidArg))?;
    // SAFETY: see above.
    check(unsafe {
        if ascii {
            sys::napi_create_string_latin1(env.raw(), data.cast(), len, &mut out)
        } else {
            sys::napi_create_string_utf8(env.raw(), data.cast(), len, &mut out)
        }
    })?;
    Ok(out)
}

/// The text `fast::write_action` returned, or `null`.
fn text_or_null(env: &Env, t: Option<fast::Text>) -> Result<sys::napi_value> {
    match t {
        Some(fast::Text::Owned(s)) => {
            // SAFETY: a `String` is UTF-8.
            unsafe { js_string(env, s.as_ptr(), s.len(), s.is_ascii()) }
        }
        Some(fast::Text::Scratch(start, len, ascii)) => {
            // SAFETY: still in the callback that wrote the text, and no
            // JavaScript ran since.
            let scratch =
                unsafe { scratch() }.map_err(|_| Error::from_status(Status::GenericFailure))?;
            let bytes = scratch
                .get(start..start.saturating_add(len))
                .ok_or_else(|| Error::from_status(Status::GenericFailure))?;
            // SAFETY: `write_action` wrote valid UTF-8 there (ASCII when `ascii`).
            unsafe { js_string(env, bytes.as_ptr(), bytes.len(), ascii) }
        }
        None => {
            let mut out = ptr::null_mut();
            // SAFETY: a plain value creation.
            check(unsafe { sys::napi_get_null(env.raw(), &mut out) })?;
            Ok(out)
        }
    }
}

/// # Safety
/// `v` is a value of the running callback.
unsafe fn unknown<'e>(env: sys::napi_env, v: sys::napi_value) -> Unknown<'e> {
    // SAFETY: see above.
    unsafe { Unknown::from_raw_unchecked(env, v) }
}

fn thrown<T>(env: &Env, r: R<T>) -> Result<T> {
    run(env, || r)
}

/// `__lbRespond(handle, attemptId, status, headers, body, timingUnknown,
/// now, knownId)`: `handleResponse` with the response's properties as
/// arguments. Writes the decision and the action `pollAction()` returns
/// next into the scratch (see `fast::write_decided`) and returns the
/// action's key and body text as `__lbPoll` does.
unsafe extern "C" fn respond(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
    guard(env, |e| {
        // SAFETY: `env` and `info` are this callback's.
        let [h, attempt_id, status, headers, body, timing, now, known] =
            unsafe { args::<8>(env, info)? };
        // SAFETY: the arguments of this callback (see `shared`); fast.js
        // passes a number as `known`.
        let (state, known) = unsafe { (shared(env, h)?, f64::from_napi_value(env, known)?) };
        let text = thrown(
            e,
            (|| {
                // SAFETY: values of this callback.
                let (attempt_id, status, headers, body, timing, now) = unsafe {
                    (
                        unknown(env, attempt_id),
                        unknown(env, status),
                        unknown(env, headers),
                        unknown(env, body),
                        unknown(env, timing),
                        unknown(env, now),
                    )
                };
                let id = conv::integer_u64(&attempt_id, "attemptId")?;
                let response = conv::response_args(e, status, headers, body, timing, "response")?;
                let now = conv::time_ns(&now, "now")?;
                decide(state, id, response, now, known)
            })(),
        )?;
        text_or_null(e, text)
    })
}

/// The core's decision on a response, written with the next action.
fn decide(
    state: &Shared,
    id: u64,
    response: lb::Response,
    now: u64,
    known: f64,
) -> R<Option<fast::Text>> {
    with_state(state, |hb| {
        let d = hb
            .handle_response(id, response, now)
            .map_err(|err| Fail::core(&err))?;
        // SAFETY: after the conversions, no JavaScript runs until the end of
        // the callback.
        let scratch = unsafe { scratch()? };
        Ok(fast::write_decided(hb, &d, known, scratch))
    })
}

/// `__lbRespondBody` and `__lbRespondText`: `__lbRespond` for a response
/// without `headers` and `timingUnknown`, as `(handle, attemptId, status,
/// body, now, knownId)`; `wellFormed` when fast.js checked the body is a
/// string without lone surrogates (`isWellFormed()`), which may then be
/// read as UTF-8.
///
/// # Safety
/// `env` and `info` are those of the running callback.
unsafe fn respond_status_body(
    env: sys::napi_env,
    info: sys::napi_callback_info,
    well_formed: bool,
) -> sys::napi_value {
    guard(env, |e| {
        // SAFETY: `env` and `info` are this callback's.
        let [h, attempt_id, status, body, now, known] = unsafe { args::<6>(env, info)? };
        // SAFETY: the arguments of this callback (see `shared`); fast.js
        // passes a number as `known`.
        let (state, known) = unsafe { (shared(env, h)?, f64::from_napi_value(env, known)?) };
        let text = thrown(
            e,
            (|| {
                // SAFETY: values of this callback.
                let (attempt_id, status, body, now) = unsafe {
                    (
                        unknown(env, attempt_id),
                        unknown(env, status),
                        unknown(env, body),
                        unknown(env, now),
                    )
                };
                let id = conv::integer_u64(&attempt_id, "attemptId")?;
                let response =
                    conv::response_status_body(e, status, body, "response", well_formed)?;
                let now = conv::time_ns(&now, "now")?;
                decide(state, id, response, now, known)
            })(),
        )?;
        text_or_null(e, text)
    })
}

/// `__lbRespondIn` and `__lbRespondInText`: `__lbRespondBody` and
/// `__lbRespondText` as `(handle, body)`, with `attemptId`, `status`, `now`
/// and `knownId` written by `fast.js` into the scratch's input slots (see
/// [`fast::inputs`]) when all are numbers: four Node-API reads less.
///
/// # Safety
/// `env` and `info` are those of the running callback.
unsafe fn respond_inputs(
    env: sys::napi_env,
    info: sys::napi_callback_info,
    well_formed: bool,
) -> sys::napi_value {
    guard(env, |e| {
        // SAFETY: `env` and `info` are this callback's.
        let [h, body] = unsafe { args::<2>(env, info)? };
        // SAFETY: an argument of this callback (see `shared`).
        let state = unsafe { shared(env, h)? };
        let text = thrown(
            e,
            (|| {
                // SAFETY: a copy out of the scratch before any conversion
                // (the borrow ends here; `decide` takes it again after them).
                let [id, status, now, known] = fast::inputs(unsafe { scratch()? });
                // SAFETY: a value of this callback.
                let body = unsafe { unknown(env, body) };
                let id = conv::safe_u64(id, "attemptId")?;
                let response =
                    conv::response_number_status_body(e, status, body, "response", well_formed)?;
                let now = conv::ms_to_ns(now, "now")?;
                decide(state, id, response, now, known)
            })(),
        )?;
        text_or_null(e, text)
    })
}

unsafe extern "C" fn respond_in(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> sys::napi_value {
    // SAFETY: this callback's `env` and `info`.
    unsafe { respond_inputs(env, info, false) }
}

unsafe extern "C" fn respond_in_text(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> sys::napi_value {
    // SAFETY: this callback's `env` and `info`.
    unsafe { respond_inputs(env, info, true) }
}

unsafe extern "C" fn respond_body(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> sys::napi_value {
    // SAFETY: this callback's `env` and `info`.
    unsafe { respond_status_body(env, info, false) }
}

unsafe extern "C" fn respond_text(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> sys::napi_value {
    // SAFETY: this callback's `env` and `info`.
    unsafe { respond_status_body(env, info, true) }
}

/// `__lbPoll(handle, knownId, attemptOnly)`: as the hidden `__poll` method.
unsafe extern "C" fn poll(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
    guard(env, |e| {
        // SAFETY: `env` and `info` are this callback's.
        let [h, known, only] = unsafe { args::<3>(env, info)? };
        // SAFETY: the arguments of this callback; fast.js passes a number
        // and a boolean.
        let (state, known, only) = unsafe {
            (
                shared(env, h)?,
                f64::from_napi_value(env, known)?,
                bool::from_napi_value(env, only)?,
            )
        };
        let text = thrown(
            e,
            with_state(state, |hb| {
                let polled = if only {
                    fast::Polled::attempt(hb.attempt())
                } else {
                    fast::Polled::action(hb.poll_action())
                };
                // SAFETY: no JavaScript runs during this callback.
                let scratch = unsafe { scratch()? };
                Ok(fast::write_action(&polled, known, scratch)
                    .unwrap_or_else(|()| fast::mark_slow(scratch)))
            }),
        )?;
        text_or_null(e, text)
    })
}

/// `__lbSent(handle, attemptId, now)`: `handleSent`.
unsafe extern "C" fn sent(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
    guard(env, |e| {
        // SAFETY: `env` and `info` are this callback's.
        let [h, attempt_id, now] = unsafe { args::<3>(env, info)? };
        // SAFETY: the arguments of this callback.
        let state = unsafe { shared(env, h)? };
        thrown(
            e,
            (|| {
                // SAFETY: values of this callback.
                let (attempt_id, now) = unsafe { (unknown(env, attempt_id), unknown(env, now)) };
                let id = conv::integer_u64(&attempt_id, "attemptId")?;
                let now = conv::time_ns(&now, "now")?;
                with_state(state, |hb| {
                    hb.handle_sent(id, now).map_err(|err| Fail::core(&err))
                })
            })(),
        )?;
        undefined(e)
    })
}

/// `__lbFail(handle, attemptId, failure, now)`: `handleFailure`; true when
/// the decision was written into the scratch.
unsafe extern "C" fn fail(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
    guard(env, |e| {
        // SAFETY: `env` and `info` are this callback's.
        let [h, attempt_id, failure, now] = unsafe { args::<4>(env, info)? };
        // SAFETY: the arguments of this callback.
        let state = unsafe { shared(env, h)? };
        let written = thrown(
            e,
            (|| {
                // SAFETY: values of this callback.
                let (attempt_id, failure, now) = unsafe {
                    (
                        unknown(env, attempt_id),
                        unknown(env, failure),
                        unknown(env, now),
                    )
                };
                let id = conv::integer_u64(&attempt_id, "attemptId")?;
                let failure = conv::transport_failure(&failure, "failure")?;
                let now = conv::time_ns(&now, "now")?;
                with_state(state, |hb| {
                    let d = hb
                        .handle_failure(id, failure, now)
                        .map_err(|err| Fail::core(&err))?;
                    // SAFETY: no JavaScript runs from here on.
                    Ok(fast::write_decision(&d, unsafe { scratch()? }))
                })
            })(),
        )?;
        boolean(e, written)
    })
}

/// `__lbCancel(handle, now)`: `cancel`; true when the decision was written
/// into the scratch.
unsafe extern "C" fn cancel(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
    guard(env, |e| {
        // SAFETY: `env` and `info` are this callback's.
        let [h, now] = unsafe { args::<2>(env, info)? };
        // SAFETY: the arguments of this callback.
        let state = unsafe { shared(env, h)? };
        let written = thrown(
            e,
            (|| {
                // SAFETY: a value of this callback.
                let now = conv::time_ns(&unsafe { unknown(env, now) }, "now")?;
                with_state(state, |hb| {
                    let d = hb.cancel(now).map_err(|err| Fail::core(&err))?;
                    // SAFETY: no JavaScript runs from here on.
                    Ok(fast::write_decision(&d, unsafe { scratch()? }))
                })
            })(),
        )?;
        boolean(e, written)
    })
}

/// `__lbLast(handle)`: the last decision written into the scratch (true),
/// or false when `fast.js` must build it the regular way, or `null` before
/// the first decision.
unsafe extern "C" fn last(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
    guard(env, |e| {
        // SAFETY: `env` and `info` are this callback's.
        let [h] = unsafe { args::<1>(env, info)? };
        // SAFETY: the arguments of this callback.
        let state = unsafe { shared(env, h)? };
        let written = thrown(
            e,
            with_state(state, |hb| match hb.last_decision() {
                // SAFETY: no JavaScript runs during this callback.
                Some(d) => Ok(Some(fast::write_decision(d, unsafe { scratch()? }))),
                None => Ok(None),
            }),
        )?;
        match written {
            Some(w) => boolean(e, w),
            None => {
                let mut out = ptr::null_mut();
                // SAFETY: a plain value creation.
                check(unsafe { sys::napi_get_null(env, &mut out) })?;
                Ok(out)
            }
        }
    })
}

/// `__lbGet`'s code of the `closed` getter.
const CLOSED: u32 = 8;

/// `__lbGet(handle, which)`: the value of a getter (or `pollTimeout()`),
/// by the codes of [`crate::Got::of`], or `closed` ([`CLOSED`]).
unsafe extern "C" fn get(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
    guard(env, |e| {
        // SAFETY: `env` and `info` are this callback's.
        let [h, which] = unsafe { args::<2>(env, info)? };
        // SAFETY: the arguments of this callback; fast.js passes a number.
        let (state, which) = unsafe { (shared(env, h)?, u32::from_napi_value(env, which)?) };
        if which == CLOSED {
            // Never throws, closed or not (as the `closed` getter).
            return boolean(e, crate::is_closed(state));
        }
        let got = thrown(e, with_state(state, |hb| Ok(crate::Got::of(which, hb))))?
            .ok_or_else(|| Error::from_status(Status::InvalidArg))?;
        // SAFETY: a value creation in this callback's env.
        unsafe { crate::Got::to_napi_value(env, got) }
    })
}

/// Puts the callbacks on the exports (`fast.js` takes them off again).
pub fn install(env: &Env, exports: &mut Object<'_>) -> Result<()> {
    let callbacks: [(&str, sys::napi_callback); 12] = [
        ("__lbGet", Some(get)),
        ("__lbRespondIn", Some(respond_in)),
        ("__lbRespondInText", Some(respond_in_text)),
        ("__lbScratch", Some(register)),
        ("__lbRespond", Some(respond)),
        ("__lbRespondBody", Some(respond_body)),
        ("__lbRespondText", Some(respond_text)),
        ("__lbPoll", Some(poll)),
        ("__lbSent", Some(sent)),
        ("__lbFail", Some(fail)),
        ("__lbCancel", Some(cancel)),
        ("__lbLast", Some(last)),
    ];
    for (name, cb) in callbacks {
        let mut f = ptr::null_mut();
        // SAFETY: a function creation with a static callback and no data.
        check(unsafe {
            sys::napi_create_function(
                env.raw(),
                name.as_ptr().cast(),
                name.len() as isize,
                cb,
                ptr::null_mut(),
                &mut f,
            )
        })?;
        // SAFETY: `f` is a live function value of this env.
        exports.set_named_property(name, unsafe { Unknown::from_raw_unchecked(env.raw(), f) })?;
    }
    Ok(())
}
