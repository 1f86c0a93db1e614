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

use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr;
use std::sync::{Arc, Mutex};

use napi::bindgen_prelude::*;
use napi::sys;

use crate::errors::{Class, ErrorCode, Fail, R, run};
use crate::{State, conv, fast, with_state};

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

/// The bytes of a `Uint8Array` (the scratch of `fast.js`).
///
/// # Safety
/// As for [`shared`]; the bytes are only used during the callback, while
/// JavaScript is suspended and nothing else refers to them.
unsafe fn scratch<'a>(env: sys::napi_env, v: sys::napi_value) -> Result<&'a mut [u8]> {
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
    // SAFETY: `data` points to `len` bytes that live as long as the array.
    Ok(unsafe { std::slice::from_raw_parts_mut(data.cast::<u8>(), len) })
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

fn text_or_null(env: &Env, s: Option<String>) -> Result<sys::napi_value> {
    let mut out = ptr::null_mut();
    // SAFETY: plain value creations; the string's bytes are valid UTF-8 (and
    // Latin-1 when ASCII) of the given length.
    check(unsafe {
        match &s {
            // ASCII (keys and bodies almost always are) is Latin-1 too,
            // which V8 copies without decoding.
            Some(s) if s.is_ascii() => sys::napi_create_string_latin1(
                env.raw(),
                s.as_ptr().cast(),
                s.len() as isize,
                &mut out,
            ),
            Some(s) => sys::napi_create_string_utf8(
                env.raw(),
                s.as_ptr().cast(),
                s.len() as isize,
                &mut out,
            ),
            None => sys::napi_get_null(env.raw(), &mut out),
        }
    })?;
    Ok(out)
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
/// now, scratch, knownId)`: `handleResponse` with the response's properties
/// as arguments. Writes the decision and the action `pollAction()` returns
/// next into the scratch (see `fast::write_decided`) and returns the
/// action's key and body text as `__lbPoll` does.
unsafe extern "C" fn respond(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
    guard(env, |e| {
        // SAFETY: `env` and `info` are this callback's.
        let [h, attempt_id, status, headers, body, timing, now, s, known] =
            unsafe { args::<9>(env, info)? };
        // SAFETY: the arguments of this callback (see `shared`, `scratch`);
        // fast.js passes a number as `known`.
        let (state, scratch, known) = unsafe {
            (
                shared(env, h)?,
                scratch(env, s)?,
                f64::from_napi_value(env, known)?,
            )
        };
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
                with_state(state, |hb| {
                    let d = hb
                        .handle_response(id, response, now)
                        .map_err(|err| Fail::core(&err))?;
                    Ok(fast::write_decided(hb, &d, known, scratch))
                })
            })(),
        )?;
        text_or_null(e, text)
    })
}

/// `__lbRespondBody(handle, attemptId, status, body, now, scratch,
/// knownId)`: `__lbRespond` for a response without `headers` and
/// `timingUnknown`.
unsafe extern "C" fn respond_body(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> sys::napi_value {
    guard(env, |e| {
        // SAFETY: `env` and `info` are this callback's.
        let [h, attempt_id, status, body, now, s, known] = unsafe { args::<7>(env, info)? };
        // SAFETY: the arguments of this callback (see `shared`, `scratch`);
        // fast.js passes a number as `known`.
        let (state, scratch, known) = unsafe {
            (
                shared(env, h)?,
                scratch(env, s)?,
                f64::from_napi_value(env, known)?,
            )
        };
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
                let response = conv::response_status_body(e, status, body, "response")?;
                let now = conv::time_ns(&now, "now")?;
                with_state(state, |hb| {
                    let d = hb
                        .handle_response(id, response, now)
                        .map_err(|err| Fail::core(&err))?;
                    Ok(fast::write_decided(hb, &d, known, scratch))
                })
            })(),
        )?;
        text_or_null(e, text)
    })
}

/// `__lbPoll(handle, scratch, knownId, attemptOnly)`: as the hidden
/// `__poll` method.
unsafe extern "C" fn poll(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
    guard(env, |e| {
        // SAFETY: `env` and `info` are this callback's.
        let [h, s, known, only] = unsafe { args::<4>(env, info)? };
        // SAFETY: the arguments of this callback.
        let (state, scratch) = unsafe { (shared(env, h)?, scratch(env, s)?) };
        // SAFETY: values of this callback; fast.js passes a number and a boolean.
        let (known, only) = unsafe {
            (
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

/// `__lbFail(handle, attemptId, failure, now, scratch)`: `handleFailure`;
/// true when the decision was written into the scratch.
unsafe extern "C" fn fail(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
    guard(env, |e| {
        // SAFETY: `env` and `info` are this callback's.
        let [h, attempt_id, failure, now, s] = unsafe { args::<5>(env, info)? };
        // SAFETY: the arguments of this callback.
        let (state, scratch) = unsafe { (shared(env, h)?, scratch(env, s)?) };
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
                    hb.handle_failure(id, failure, now)
                        .map(|d| fast::write_decision(&d, scratch))
                        .map_err(|err| Fail::core(&err))
                })
            })(),
        )?;
        boolean(e, written)
    })
}

/// `__lbCancel(handle, now, scratch)`: `cancel`; true when the decision was
/// written into the scratch.
unsafe extern "C" fn cancel(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
    guard(env, |e| {
        // SAFETY: `env` and `info` are this callback's.
        let [h, now, s] = unsafe { args::<3>(env, info)? };
        // SAFETY: the arguments of this callback.
        let (state, scratch) = unsafe { (shared(env, h)?, scratch(env, s)?) };
        let written = thrown(
            e,
            (|| {
                // SAFETY: a value of this callback.
                let now = conv::time_ns(&unsafe { unknown(env, now) }, "now")?;
                with_state(state, |hb| {
                    hb.cancel(now)
                        .map(|d| fast::write_decision(&d, scratch))
                        .map_err(|err| Fail::core(&err))
                })
            })(),
        )?;
        boolean(e, written)
    })
}

/// `__lbLast(handle, scratch)`: the last decision written into the scratch
/// (true), or false when `fast.js` must build it the regular way, or `null`
/// before the first decision.
unsafe extern "C" fn last(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
    guard(env, |e| {
        // SAFETY: `env` and `info` are this callback's.
        let [h, s] = unsafe { args::<2>(env, info)? };
        // SAFETY: the arguments of this callback.
        let (state, scratch) = unsafe { (shared(env, h)?, scratch(env, s)?) };
        let written = thrown(
            e,
            with_state(state, |hb| {
                Ok(hb.last_decision().map(|d| fast::write_decision(d, scratch)))
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

/// Puts the callbacks on the exports (`fast.js` takes them off again).
pub fn install(env: &Env, exports: &mut Object<'_>) -> Result<()> {
    let callbacks: [(&str, sys::napi_callback); 7] = [
        ("__lbRespond", Some(respond)),
        ("__lbRespondBody", Some(respond_body)),
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
