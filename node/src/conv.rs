//! Validation and conversion of JavaScript arguments.
//!
//! Every argument arrives as an untyped JavaScript value and is checked here,
//! so that a wrong type is a `TypeError` and an out-of-range value a
//! `RangeError`, both with code `ERR_LEASEBEAT_INVALID_ARGUMENT` and a message
//! naming the argument. Nothing is coerced silently.

use std::borrow::Cow;

use leasebeat as lb;
use napi::bindgen_prelude::*;
use napi::{JsString, JsValue, ValueType};
use serde_json::{Map, Value};

use crate::errors::{Fail, R};

/// `Number.MAX_SAFE_INTEGER` (2^53 - 1).
pub const MAX_SAFE: u64 = (1 << 53) - 1;

/// 2^64 as an `f64`: the first number of nanoseconds that does not fit `u64`.
const TWO_POW_64: f64 = 18_446_744_073_709_551_616.0;

/// How deep a `createRequest` value may nest.
const MAX_JSON_DEPTH: usize = 64;

fn napi_fail(what: &str, e: &Error) -> Fail {
    Fail::ty(format!("{what}: cannot read the value ({e})"))
}

fn type_of(v: &Unknown<'_>, what: &str) -> R<ValueType> {
    v.get_type().map_err(|e| napi_fail(what, &e))
}

/// A short description of a value's type for error messages.
fn describe(t: ValueType) -> &'static str {
    match t {
        ValueType::Undefined => "undefined",
        ValueType::Null => "null",
        ValueType::Boolean => "a boolean",
        ValueType::Number => "a number",
        ValueType::String => "a string",
        ValueType::Symbol => "a symbol",
        ValueType::Object => "an object",
        ValueType::Function => "a function",
        ValueType::External => "an external",
        ValueType::BigInt => "a bigint",
        ValueType::Unknown => "an unknown value",
    }
}

/// Reads a value whose JavaScript type was checked to be `t`.
fn read<T: FromNapiValue>(v: &Unknown<'_>, what: &str) -> R<T> {
    // SAFETY: every caller checked the value's type first, and `T`'s
    // conversion validates again where napi can fail.
    unsafe { v.cast::<T>() }.map_err(|e| napi_fail(what, &e))
}

/// A string (type already checked), read as UTF-16 so that a lone surrogate
/// is refused with a `TypeError` instead of becoming U+FFFD (napi's UTF-8
/// conversion would silently turn it into a different string, e.g. another
/// reservation id).
fn text(v: &Unknown<'_>, what: &str) -> R<String> {
    let s = read::<JsString<'_>>(v, what)?;
    let units = s.into_utf16().map_err(|e| napi_fail(what, &e))?;
    // napi's buffer ends with the NUL terminator it wrote.
    let units = units
        .as_slice()
        .split_last()
        .map_or(&[][..], |(_, text)| text);
    String::from_utf16(units).map_err(|_| {
        Fail::ty(format!(
            "{what} holds a lone surrogate (an unpaired UTF-16 code unit): it is not valid Unicode text"
        ))
    })
}

/// The value of a number with one Node-API call; `None` for anything else
/// (which the caller then reads the general way).
fn try_number(v: &Unknown<'_>) -> Option<f64> {
    let raw = v.value();
    let mut n = 0.0;
    // SAFETY: `napi_get_value_double` checks the type itself and fails
    // (without throwing, and here without building an error) for a
    // non-number.
    let status = unsafe { napi::sys::napi_get_value_double(raw.env, raw.value, &mut n) };
    (status == napi::sys::Status::napi_ok).then_some(n)
}

/// The bytes of a `Buffer`/`Uint8Array` with one Node-API call; `None` for
/// anything else (which the caller then reads the general way).
fn uint8_bytes(v: &Unknown<'_>) -> Option<Vec<u8>> {
    let raw = v.value();
    let mut kind = 0;
    let mut len = 0;
    let mut data = std::ptr::null_mut();
    let mut buffer = std::ptr::null_mut();
    let mut offset = 0;
    // SAFETY: `napi_get_typedarray_info` checks the type itself and fails
    // (without throwing) for anything but a typed array.
    let status = unsafe {
        napi::sys::napi_get_typedarray_info(
            raw.env,
            raw.value,
            &mut kind,
            &mut len,
            &mut data,
            &mut buffer,
            &mut offset,
        )
    };
    if status != napi::sys::Status::napi_ok || kind != napi::sys::TypedarrayType::uint8_array {
        return None;
    }
    if len == 0 || data.is_null() {
        return Some(Vec::new());
    }
    // SAFETY: `data` points to the array's `len` bytes, alive during the call.
    Some(unsafe { std::slice::from_raw_parts(data.cast::<u8>(), len) }.to_vec())
}

/// A string's UTF-8 bytes, read in one Node-API call when it fits 1 KiB;
/// `None` for a non-string. Only for a string JavaScript found well formed
/// (`isWellFormed()`): Node-API's UTF-8 conversion would replace a lone
/// surrogate silently.
fn utf8_text(v: &Unknown<'_>) -> Option<Vec<u8>> {
    const FIRST: usize = 1024;
    let raw = v.value();
    let mut out = Vec::<u8>::with_capacity(FIRST);
    let mut len = 0;
    // SAFETY: `out` has room for `FIRST` bytes; Node-API writes at most
    // `FIRST - 1` of them plus a NUL, and fails for a non-string.
    let status = unsafe {
        napi::sys::napi_get_value_string_utf8(
            raw.env,
            raw.value,
            out.as_mut_ptr().cast(),
            FIRST,
            &mut len,
        )
    };
    if status != napi::sys::Status::napi_ok {
        return None;
    }
    // Node-API writes whole characters only (at most 4 bytes each): with 4
    // bytes of room left, it stopped at the end of the string.
    if len + 4 < FIRST {
        // SAFETY: Node-API initialized the first `len` bytes.
        unsafe { out.set_len(len) };
        return Some(out);
    }
    // Possibly cut: its full length, then all of it.
    // SAFETY: as above; a null buffer asks for the length only.
    let status = unsafe {
        napi::sys::napi_get_value_string_utf8(raw.env, raw.value, std::ptr::null_mut(), 0, &mut len)
    };
    if status != napi::sys::Status::napi_ok {
        return None;
    }
    let mut out = Vec::<u8>::with_capacity(len + 1);
    let mut written = 0;
    // SAFETY: `out` has room for `len + 1` bytes.
    let status = unsafe {
        napi::sys::napi_get_value_string_utf8(
            raw.env,
            raw.value,
            out.as_mut_ptr().cast(),
            len + 1,
            &mut written,
        )
    };
    if status != napi::sys::Status::napi_ok {
        return None;
    }
    // SAFETY: Node-API initialized the first `written` (<= len) bytes.
    unsafe { out.set_len(written.min(len)) };
    Some(out)
}

/// A number as `f64` (type already checked).
fn number(v: &Unknown<'_>, what: &str) -> R<f64> {
    read::<f64>(v, what)
}

/// A bigint as a sign and its magnitude, or a `RangeError` beyond 128 bits.
fn bigint_parts(v: &Unknown<'_>, what: &str) -> R<(bool, u128)> {
    let b = read::<BigInt>(v, what)?;
    let (negative, magnitude, lossless) = b.get_u128();
    let high_zero = b.words.iter().skip(2).all(|w| *w == 0);
    if !(lossless || high_zero) {
        return Err(Fail::range(format!("{what} is out of range")));
    }
    Ok((negative && magnitude != 0, magnitude))
}

fn bigint_u64(v: &Unknown<'_>, what: &str) -> R<u64> {
    let (negative, magnitude) = bigint_parts(v, what)?;
    if negative {
        return Err(Fail::range(format!("{what} must not be negative")));
    }
    u64::try_from(magnitude)
        .map_err(|_| Fail::range(format!("{what} must be at most 2^64-1, got {magnitude}n")))
}

fn bigint_i128(v: &Unknown<'_>, what: &str) -> R<i128> {
    let (negative, magnitude) = bigint_parts(v, what)?;
    let value =
        i128::try_from(magnitude).map_err(|_| Fail::range(format!("{what} is out of range")))?;
    Ok(if negative { -value } else { value })
}

/// A finite, non-negative, integral number at most 2^53-1.
pub fn safe_u64(n: f64, what: &str) -> R<u64> {
    // The usual case without `fract()` (a libm call here): within
    // 0..=2^53-1 the truncating cast is exact, so it round-trips exactly
    // when `n` is integral (NaN fails the range test; -0 gives 0, as below).
    if (0.0..=MAX_SAFE as f64).contains(&n) && (n as u64) as f64 == n {
        return Ok(n as u64);
    }
    safe_u64_checked(n, what)
}

/// [`safe_u64`]'s checks, in order, with their messages.
#[cold]
fn safe_u64_checked(n: f64, what: &str) -> R<u64> {
    if n.is_nan() {
        return Err(Fail::range(format!("{what} must not be NaN")));
    }
    if !n.is_finite() {
        return Err(Fail::range(format!("{what} must be finite, got {n}")));
    }
    if n < 0.0 {
        return Err(Fail::range(format!("{what} must not be negative, got {n}")));
    }
    if n.fract() != 0.0 {
        return Err(Fail::range(format!("{what} must be an integer, got {n}")));
    }
    if n > MAX_SAFE as f64 {
        return Err(Fail::range(format!(
            "{what} must be at most 2^53-1 as a number (pass a bigint for larger values), got {n}"
        )));
    }
    Ok(n as u64)
}

/// Monotonic milliseconds (fractions allowed) to nanoseconds:
/// `round(ms * 1e6)`, rejecting NaN, infinities, negatives and values whose
/// nanoseconds do not fit `u64`.
pub fn ms_to_ns(ms: f64, what: &str) -> R<u64> {
    if ms.is_nan() {
        return Err(Fail::range(format!("{what} must not be NaN")));
    }
    if !ms.is_finite() {
        return Err(Fail::range(format!("{what} must be finite, got {ms}")));
    }
    if ms < 0.0 {
        return Err(Fail::range(format!(
            "{what} must not be negative, got {ms}"
        )));
    }
    let ns = (ms * 1e6).round();
    if ns >= TWO_POW_64 {
        return Err(Fail::range(format!(
            "{what} = {ms} ms overflows 64-bit nanoseconds"
        )));
    }
    // 0 <= ns < 2^64 and integral: the cast is exact.
    Ok(ns as u64)
}

/// A time: monotonic milliseconds as a number (fractions allowed, e.g.
/// `performance.now()`), or nanoseconds as a bigint (e.g.
/// `process.hrtime.bigint()`).
pub fn time_ns(v: &Unknown<'_>, what: &str) -> R<u64> {
    if let Some(ms) = try_number(v) {
        return ms_to_ns(ms, what);
    }
    match type_of(v, what)? {
        ValueType::Number => ms_to_ns(number(v, what)?, what),
        ValueType::BigInt => bigint_u64(v, what),
        t => Err(Fail::ty(format!(
            "{what} must be a number (milliseconds) or a bigint (nanoseconds), got {}",
            describe(t)
        ))),
    }
}

/// A non-negative integer: a safe-integer number or a bigint up to 2^64-1.
pub fn integer_u64(v: &Unknown<'_>, what: &str) -> R<u64> {
    // The usual case first, with one Node-API call instead of two.
    if let Some(n) = try_number(v) {
        return safe_u64(n, what);
    }
    match type_of(v, what)? {
        ValueType::Number => safe_u64(number(v, what)?, what),
        ValueType::BigInt => bigint_u64(v, what),
        t => Err(Fail::ty(format!(
            "{what} must be a number or a bigint, got {}",
            describe(t)
        ))),
    }
}

/// A duration in milliseconds: a non-negative safe-integer number, a bigint
/// up to 2^64-1, or `Infinity`; `Infinity` and `2n**64n-1n` both mean
/// +infinity.
pub fn duration_ms(v: &Unknown<'_>, what: &str) -> R<u64> {
    if type_of(v, what)? == ValueType::Number {
        let n = number(v, what)?;
        if n == f64::INFINITY {
            return Ok(lb::arith::INFINITE);
        }
    }
    integer_u64(v, what)
}

/// A duration that may be `null` (unknown or unbounded).
pub fn opt_duration_ms(v: &Unknown<'_>, what: &str) -> R<Option<u64>> {
    match type_of(v, what)? {
        ValueType::Null => Ok(None),
        ValueType::Number | ValueType::BigInt => duration_ms(v, what).map(Some),
        t => Err(Fail::ty(format!(
            "{what} must be a number, a bigint or null, got {}",
            describe(t)
        ))),
    }
}

/// A signed integer of milliseconds: a safe-integer number (negative
/// allowed) or a bigint within 128 bits.
pub fn signed_ms(v: &Unknown<'_>, what: &str) -> R<i128> {
    match type_of(v, what)? {
        ValueType::Number => {
            let n = number(v, what)?;
            let magnitude = safe_u64(n.abs(), what)?;
            Ok(if n < 0.0 {
                -i128::from(magnitude)
            } else {
                i128::from(magnitude)
            })
        }
        ValueType::BigInt => bigint_i128(v, what),
        t => Err(Fail::ty(format!(
            "{what} must be a number or a bigint, got {}",
            describe(t)
        ))),
    }
}

/// A string.
pub fn string(v: &Unknown<'_>, what: &str) -> R<String> {
    match type_of(v, what)? {
        ValueType::String => text(v, what),
        t => Err(Fail::ty(format!(
            "{what} must be a string, got {}",
            describe(t)
        ))),
    }
}

/// A transport failure name.
pub fn transport_failure(v: &Unknown<'_>, what: &str) -> R<lb::TransportFailure> {
    let s = string(v, what)?;
    lb::TransportFailure::parse(&s).ok_or_else(|| {
        Fail::range(format!(
            "{what} must be 'timeout', 'connect' or 'reset', got {s:?}"
        ))
    })
}

/// A plain object (not null, not an array, not a function).
fn object<'e>(v: &Unknown<'e>, what: &str) -> R<Object<'e>> {
    let t = type_of(v, what)?;
    let is_array = t == ValueType::Object && v.is_array().map_err(|e| napi_fail(what, &e))?;
    if t != ValueType::Object || is_array {
        let got = if is_array { "an array" } else { describe(t) };
        return Err(Fail::ty(format!("{what} must be an object, got {got}")));
    }
    read::<Object<'e>>(v, what)
}

fn keys(o: &Object<'_>, what: &str) -> R<Vec<String>> {
    Object::keys(o).map_err(|e| napi_fail(what, &e))
}

/// The property `name`, `None` when it is `undefined`.
fn prop<'e>(o: &Object<'e>, name: &str, what: &str) -> R<Option<Unknown<'e>>> {
    o.get::<Unknown<'e>>(name)
        .map_err(|e| napi_fail(&format!("{what}.{name}"), &e))
}

fn only_keys(o: &Object<'_>, what: &str, allowed: &[&str]) -> R<()> {
    for k in keys(o, what)? {
        if !allowed.contains(&k.as_str()) {
            return Err(Fail::ty(format!(
                "{what} has an unknown property {k:?} (allowed: {})",
                allowed.join(", ")
            )));
        }
    }
    Ok(())
}

/// Heartbeat options: the configuration and the optional key prefix.
pub fn options(v: &Unknown<'_>) -> R<(lb::Config, Option<String>)> {
    options_with(
        v,
        &["ttlMs", "requestTimeoutMs", "createRequest", "keyPrefix"],
    )
}

/// `Heartbeat.forReservation` options: as [`options`], without
/// `createRequest` (nothing is created).
pub fn reservation_options(v: &Unknown<'_>) -> R<(lb::Config, Option<String>)> {
    options_with(v, &["ttlMs", "requestTimeoutMs", "keyPrefix"])
}

fn options_with(v: &Unknown<'_>, allowed: &[&str]) -> R<(lb::Config, Option<String>)> {
    let what = "options";
    let o = object(v, what)?;
    only_keys(&o, what, allowed)?;
    let mut config = lb::Config::default();
    match prop(&o, "ttlMs", what)? {
        Some(t) => config.ttl_ms = integer_u64(&t, "options.ttlMs")?,
        None => return Err(Fail::ty("options.ttlMs is required (e.g. 60000)")),
    }
    match prop(&o, "requestTimeoutMs", what)? {
        Some(t) => config.request_timeout_ms = opt_duration_ms(&t, "options.requestTimeoutMs")?,
        None => {
            return Err(Fail::ty(
                "options.requestTimeoutMs is required: the enforced per-attempt timeout in ms, or null when unbounded",
            ));
        }
    }
    if let Some(c) = prop(&o, "createRequest", what)? {
        let what = "options.createRequest";
        match json(&c, what, 0)? {
            Value::Object(m) => config.create_request = m,
            _ => return Err(Fail::ty(format!("{what} must be an object"))),
        }
    }
    let prefix = match prop(&o, "keyPrefix", what)? {
        Some(p) => Some(string(&p, "options.keyPrefix")?),
        None => None,
    };
    Ok((config, prefix))
}

/// A JSON value: null, booleans, finite numbers, bigints within 64 bits,
/// strings, arrays and plain objects; anything else is a `TypeError`.
pub fn json(v: &Unknown<'_>, what: &str, depth: usize) -> R<Value> {
    if depth > MAX_JSON_DEPTH {
        return Err(Fail::range(format!(
            "{what} nests deeper than {MAX_JSON_DEPTH} levels"
        )));
    }
    match type_of(v, what)? {
        ValueType::Null => Ok(Value::Null),
        ValueType::Boolean => read::<bool>(v, what).map(Value::Bool),
        ValueType::String => text(v, what).map(Value::String),
        ValueType::Number => {
            let n = number(v, what)?;
            if !n.is_finite() {
                return Err(Fail::range(format!("{what} must be finite, got {n}")));
            }
            if n.fract() == 0.0 && n.abs() <= MAX_SAFE as f64 {
                Ok(Value::from(n as i64))
            } else {
                serde_json::Number::from_f64(n)
                    .map(Value::Number)
                    .ok_or_else(|| Fail::range(format!("{what} is not a JSON number")))
            }
        }
        ValueType::BigInt => {
            let i = bigint_i128(v, what)?;
            if let Ok(u) = u64::try_from(i) {
                Ok(Value::from(u))
            } else if let Ok(s) = i64::try_from(i) {
                Ok(Value::from(s))
            } else {
                Err(Fail::range(format!("{what} = {i}n does not fit 64 bits")))
            }
        }
        ValueType::Object if v.is_array().map_err(|e| napi_fail(what, &e))? => {
            let a = read::<Array<'_>>(v, what)?;
            let mut out = Vec::with_capacity(a.len() as usize);
            for i in 0..a.len() {
                let w = format!("{what}[{i}]");
                match a.get::<Unknown<'_>>(i).map_err(|e| napi_fail(&w, &e))? {
                    Some(item) => out.push(json(&item, &w, depth + 1)?),
                    None => return Err(Fail::ty(format!("{w} must not be undefined"))),
                }
            }
            Ok(Value::Array(out))
        }
        ValueType::Object => {
            let o = object(v, what)?;
            let mut out = Map::new();
            for k in keys(&o, what)? {
                let w = format!("{what}.{k}");
                match prop(&o, &k, what)? {
                    Some(item) => {
                        out.insert(k, json(&item, &w, depth + 1)?);
                    }
                    None => return Err(Fail::ty(format!("{w} must not be undefined"))),
                }
            }
            Ok(Value::Object(out))
        }
        t => Err(Fail::ty(format!(
            "{what} must be JSON data, got {}",
            describe(t)
        ))),
    }
}

/// Bytes of a body: a string (UTF-8), a `Buffer`/`Uint8Array`, or an
/// `ArrayBuffer`.
fn body_bytes(v: &Unknown<'_>, what: &str) -> R<Vec<u8>> {
    body_bytes_of(v, type_of(v, what)?, what)
}

/// As [`body_bytes`], for a value of type `t`.
fn body_bytes_of(v: &Unknown<'_>, t: ValueType, what: &str) -> R<Vec<u8>> {
    let err = |e: Error| napi_fail(what, &e);
    if t == ValueType::String {
        return Ok(text(v, what)?.into_bytes());
    }
    if t == ValueType::Object {
        // The usual case first, with one Node-API call: a Buffer or Uint8Array.
        if let Ok(bytes) = read::<Uint8ArraySlice<'_>>(v, what) {
            return Ok(bytes.to_vec());
        }
        if v.is_typedarray().map_err(err)? {
            let ta = read::<TypedArray<'_>>(v, what)?;
            if ta.typed_array_type != TypedArrayType::Uint8 {
                return Err(Fail::ty(format!(
                    "{what} must be a Buffer or Uint8Array, got another typed array"
                )));
            }
            return Ok(read::<Uint8ArraySlice<'_>>(v, what)?.to_vec());
        }
        if v.is_arraybuffer().map_err(err)? {
            return Ok(read::<ArrayBuffer<'_>>(v, what)?.to_vec());
        }
    }
    Err(Fail::ty(format!(
        "{what} must be a string, a Buffer, a Uint8Array or an ArrayBuffer, got {}",
        describe(t)
    )))
}

/// One header value: a string (anything else is a `TypeError`).
fn header_value(v: &Unknown<'_>, what: &str) -> R<Vec<u8>> {
    Ok(string(v, what)?.into_bytes())
}

/// `[name, value]` pairs: a JavaScript array of two-string arrays.
fn header_entries(v: &Unknown<'_>, what: &str) -> R<Vec<(Vec<u8>, Vec<u8>)>> {
    let a = read::<Array<'_>>(v, what)?;
    let mut out = Vec::with_capacity(a.len() as usize);
    for i in 0..a.len() {
        let wi = format!("{what}[{i}]");
        let item = a.get::<Unknown<'_>>(i).map_err(|e| napi_fail(&wi, &e))?;
        let pair = match item {
            Some(p)
                if type_of(&p, &wi)? == ValueType::Object
                    && p.is_array().map_err(|e| napi_fail(&wi, &e))? =>
            {
                read::<Array<'_>>(&p, &wi)?
            }
            _ => {
                return Err(Fail::ty(format!(
                    "{wi} must be a [name, value] pair of strings"
                )));
            }
        };
        if pair.len() != 2 {
            return Err(Fail::ty(format!(
                "{wi} must be a [name, value] pair of strings, got {} elements",
                pair.len()
            )));
        }
        let get = |k: u32| -> R<Vec<u8>> {
            let wk = format!("{wi}[{k}]");
            let x = pair
                .get::<Unknown<'_>>(k)
                .map_err(|e| napi_fail(&wk, &e))?
                .ok_or_else(|| Fail::ty(format!("{wk} must be a string")))?;
            header_value(&x, &wk)
        };
        let name = get(0)?;
        let value = get(1)?;
        out.push((name, value));
    }
    Ok(out)
}

/// The value's `[Symbol.iterator]` method, if it has one.
fn is_iterable(env: &Env, o: &Object<'_>, what: &str) -> R<bool> {
    let err = |e: Error| napi_fail(what, &e);
    let global = env.get_global().map_err(err)?;
    // `Symbol` is a function: read it as the object it also is.
    let symbol: Unknown<'_> = global.get_named_property("Symbol").map_err(err)?;
    let symbol = read::<Object<'_>>(&symbol, what)?;
    let iterator: Unknown<'_> = symbol.get_named_property("iterator").map_err(err)?;
    let method: Unknown<'_> = o.get_property(iterator).map_err(err)?;
    Ok(method.get_type().map_err(err)? == ValueType::Function)
}

/// `Array.from(value)`.
fn array_from<'e>(env: &'e Env, v: &Unknown<'_>, what: &str) -> R<Unknown<'e>> {
    let err = |e: Error| napi_fail(what, &e);
    let global = env.get_global().map_err(err)?;
    // `Array` is a function: read it as the object it also is.
    let array: Unknown<'_> = global.get_named_property("Array").map_err(err)?;
    let array = read::<Object<'_>>(&array, what)?;
    let from: Function<'_, Unknown<'_>, Unknown<'e>> =
        array.get_named_property("from").map_err(err)?;
    // SAFETY: `v` is a live value of this call's scope.
    let arg = unsafe { Unknown::from_raw_unchecked(env.raw(), v.raw()) };
    from.apply(array, arg).map_err(err)
}

/// Headers in the forms JavaScript code has them: a fetch `Headers`, a
/// `Map` or any iterable of `[name, value]` pairs, an array of such pairs, or
/// a plain object mapping each name to a string or an array of strings (a
/// repeated header). Names compare case-insensitively in the core.
fn headers(env: &Env, v: &Unknown<'_>, what: &str) -> R<Vec<(Vec<u8>, Vec<u8>)>> {
    let t = type_of(v, what)?;
    let expected =
        "a Headers, a Map, an array of [name, value] pairs or a plain object of name to value(s)";
    if t != ValueType::Object {
        return Err(Fail::ty(format!(
            "{what} must be {expected}, got {}",
            describe(t)
        )));
    }
    if v.is_array().map_err(|e| napi_fail(what, &e))? {
        return header_entries(v, what);
    }
    let o = read::<Object<'_>>(v, what)?;
    if is_iterable(env, &o, what)? {
        let entries = array_from(env, v, what)?;
        return header_entries(&entries, what);
    }
    let mut out = Vec::new();
    for name in keys(&o, what)? {
        let w = format!("{what}[{name:?}]");
        let value = prop(&o, &name, what)?
            .ok_or_else(|| Fail::ty(format!("{w} must be a string or an array of strings")))?;
        let t = type_of(&value, &w)?;
        if t == ValueType::String {
            out.push((name.clone().into_bytes(), header_value(&value, &w)?));
        } else if t == ValueType::Object && value.is_array().map_err(|e| napi_fail(&w, &e))? {
            let a = read::<Array<'_>>(&value, &w)?;
            for i in 0..a.len() {
                let wi = format!("{w}[{i}]");
                let item = a
                    .get::<Unknown<'_>>(i)
                    .map_err(|e| napi_fail(&wi, &e))?
                    .ok_or_else(|| Fail::ty(format!("{wi} must be a string")))?;
                out.push((name.clone().into_bytes(), header_value(&item, &wi)?));
            }
        } else {
            return Err(Fail::ty(format!(
                "{w} must be a string or an array of strings, got {}",
                describe(t)
            )));
        }
    }
    Ok(out)
}

/// A response: `{ status, headers?, body?, timingUnknown? }`.
pub fn response(env: &Env, v: &Unknown<'_>, what: &str) -> R<lb::Response> {
    let o = object(v, what)?;
    only_keys(&o, what, &["status", "headers", "body", "timingUnknown"])?;
    response_parts(
        env,
        prop(&o, "status", what)?,
        prop(&o, "headers", what)?,
        prop(&o, "body", what)?,
        prop(&o, "timingUnknown", what)?,
        what,
    )
}

/// The name of a member of a response for messages: static for the
/// per-beat `response`, so that no name is formatted unless it is needed.
fn member(what: &str, name: &'static str) -> Cow<'static, str> {
    match (what, name) {
        ("response", "status") => Cow::Borrowed("response.status"),
        ("response", "headers") => Cow::Borrowed("response.headers"),
        ("response", "body") => Cow::Borrowed("response.body"),
        ("response", "timingUnknown") => Cow::Borrowed("response.timingUnknown"),
        _ => Cow::Owned(format!("{what}.{name}")),
    }
}

/// A response from its properties as `handleResponse` passes them
/// (`undefined` = absent): the usual shape, a valid numeric status with a
/// Buffer/Uint8Array or string body and no headers or timing flag, is read
/// with one or two Node-API calls per property; anything else is read by
/// [`response_parts`],
/// which checks in the same order with the same messages.
pub fn response_args(
    env: &Env,
    status: Unknown<'_>,
    headers_v: Unknown<'_>,
    body: Unknown<'_>,
    timing_unknown: Unknown<'_>,
    what: &str,
) -> R<lb::Response> {
    if type_of(&headers_v, what)? == ValueType::Undefined
        && type_of(&timing_unknown, what)? == ValueType::Undefined
    {
        return response_status_body(env, status, body, what, false);
    }
    response_parts(
        env,
        present(status, what)?,
        present(headers_v, what)?,
        present(body, what)?,
        present(timing_unknown, what)?,
        what,
    )
}

/// As [`response_args`] for a response without `headers` and
/// `timingUnknown` (both `undefined`).
pub fn response_status_body(
    env: &Env,
    status: Unknown<'_>,
    body: Unknown<'_>,
    what: &str,
    well_formed: bool,
) -> R<lb::Response> {
    // Checked in the order of `response_parts`: status, then body.
    if let Some(n) = try_number(&status) {
        if let Some(r) = number_status_body(n, &body, what, well_formed)? {
            return Ok(r);
        }
    }
    response_parts(
        env,
        present(status, what)?,
        None,
        present(body, what)?,
        None,
        what,
    )
}

/// As [`response_status_body`] with the status given as a number (which
/// `fast.js` passes through the scratch).
pub fn response_number_status_body(
    env: &Env,
    status: f64,
    body: Unknown<'_>,
    what: &str,
    well_formed: bool,
) -> R<lb::Response> {
    if let Some(r) = number_status_body(status, &body, what, well_formed)? {
        return Ok(r);
    }
    // The general way, with the same number as a JavaScript value.
    // SAFETY: a value creation in this env.
    let raw = unsafe { f64::to_napi_value(env.raw(), status) }.map_err(|e| napi_fail(what, &e))?;
    // SAFETY: `raw` is a live value of this env.
    let status = unsafe { Unknown::from_raw_unchecked(env.raw(), raw) };
    response_parts(env, Some(status), None, present(body, what)?, None, what)
}

/// The usual response: a valid status and a `Buffer`/`Uint8Array` body, or
/// a string the caller found well formed; `None` for anything else (which
/// the caller reads the general way, for the documented errors).
fn number_status_body(
    status: f64,
    body: &Unknown<'_>,
    what: &str,
    well_formed: bool,
) -> R<Option<lb::Response>> {
    let code = safe_u64(status, what)
        .ok()
        .and_then(|n| u16::try_from(n).ok());
    let Some(code) = code else {
        return Ok(None);
    };
    // One Node-API call for the usual bodies.
    let fast = if well_formed {
        utf8_text(body)
    } else {
        uint8_bytes(body)
    };
    let bytes = match fast {
        Some(b) => Some(b),
        None => match type_of(body, what)? {
            ValueType::Object => read::<Uint8ArraySlice<'_>>(body, what)
                .ok()
                .map(|b| b.to_vec()),
            ValueType::String => Some(text(body, &member(what, "body"))?.into_bytes()),
            _ => None,
        },
    };
    Ok(bytes.map(|bytes| {
        let mut r = lb::Response::new(code);
        r.body = bytes;
        r
    }))
}

/// `Some` unless the value is `undefined` (an absent property).
pub fn present<'e>(v: Unknown<'e>, what: &str) -> R<Option<Unknown<'e>>> {
    Ok((type_of(&v, what)? != ValueType::Undefined).then_some(v))
}

/// A response from its properties (`None` = absent or `undefined`), read and
/// checked in the order `response` reads them, with the same messages.
pub fn response_parts(
    env: &Env,
    status: Option<Unknown<'_>>,
    headers_v: Option<Unknown<'_>>,
    body: Option<Unknown<'_>>,
    timing_unknown: Option<Unknown<'_>>,
    what: &str,
) -> R<lb::Response> {
    let status_v = status.ok_or_else(|| Fail::ty(format!("{what}.status is required")))?;
    let status = integer_u64(&status_v, &member(what, "status"))?;
    let status = u16::try_from(status).map_err(|_| {
        Fail::range(format!(
            "{what}.status must be an HTTP status within 100..=999, got {status}"
        ))
    })?;
    let mut r = lb::Response::new(status);
    if let Some(h) = headers_v {
        if type_of(&h, what)? != ValueType::Null {
            r.headers = headers(env, &h, &member(what, "headers"))?;
        }
    }
    if let Some(b) = body {
        let t = type_of(&b, what)?;
        if t != ValueType::Null {
            r.body = body_bytes_of(&b, t, &member(what, "body"))?;
        }
    }
    if let Some(t) = timing_unknown {
        match type_of(&t, what)? {
            ValueType::Boolean => {
                if read::<bool>(&t, &member(what, "timingUnknown"))? {
                    r.timing = lb::Timing::Unknown;
                }
            }
            other => {
                return Err(Fail::ty(format!(
                    "{what}.timingUnknown must be a boolean, got {}",
                    describe(other)
                )));
            }
        }
    }
    Ok(r)
}

/// Retry-After header values: a string, an array of strings, or
/// `null`/`undefined` for none.
pub fn header_values(v: Option<&Unknown<'_>>, what: &str) -> R<Vec<String>> {
    let Some(v) = v else { return Ok(Vec::new()) };
    let t = type_of(v, what)?;
    match t {
        ValueType::Undefined | ValueType::Null => Ok(Vec::new()),
        ValueType::String => Ok(vec![text(v, what)?]),
        ValueType::Object if v.is_array().map_err(|e| napi_fail(what, &e))? => {
            let a = read::<Array<'_>>(v, what)?;
            let mut out = Vec::with_capacity(a.len() as usize);
            for i in 0..a.len() {
                let wi = format!("{what}[{i}]");
                let item = a
                    .get::<Unknown<'_>>(i)
                    .map_err(|e| napi_fail(&wi, &e))?
                    .ok_or_else(|| Fail::ty(format!("{wi} must be a string")))?;
                out.push(string(&item, &wi)?);
            }
            Ok(out)
        }
        _ => Err(Fail::ty(format!(
            "{what} must be a string, an array of strings or null, got {}",
            describe(t)
        ))),
    }
}

/// An adopted create: `{ key, sentAt?, receivedAt, response | failure,
/// requestBody? }`.
pub fn adopted_create(env: &Env, v: &Unknown<'_>) -> R<lb::AdoptedCreate> {
    let what = "create";
    let o = object(v, what)?;
    only_keys(
        &o,
        what,
        &[
            "key",
            "sentAt",
            "receivedAt",
            "response",
            "failure",
            "requestBody",
        ],
    )?;
    let key = match prop(&o, "key", what)? {
        Some(k) => string(&k, "create.key")?,
        None => {
            return Err(Fail::ty(
                "create.key is required: the idempotency key the create used",
            ));
        }
    };
    let sent_ns = match prop(&o, "sentAt", what)? {
        Some(t) if type_of(&t, "create.sentAt")? != ValueType::Null => {
            Some(time_ns(&t, "create.sentAt")?)
        }
        _ => None,
    };
    let received_ns = match prop(&o, "receivedAt", what)? {
        Some(t) => time_ns(&t, "create.receivedAt")?,
        None => {
            return Err(Fail::ty(
                "create.receivedAt is required: when the create's outcome was observed",
            ));
        }
    };
    if let Some(sent) = sent_ns {
        if sent > received_ns {
            return Err(Fail::range(format!(
                "create.sentAt ({sent} ns) must not be after create.receivedAt ({received_ns} ns)"
            )));
        }
    }
    let response_v = prop(&o, "response", what)?;
    let failure = prop(&o, "failure", what)?;
    let outcome = match (response_v, failure) {
        (Some(r), None) => lb::CreateOutcome::Response(response(env, &r, "create.response")?),
        (None, Some(f)) => lb::CreateOutcome::Failure(transport_failure(&f, "create.failure")?),
        (Some(_), Some(_)) => {
            return Err(Fail::ty(
                "create has both response and failure: give exactly one",
            ));
        }
        (None, None) => {
            return Err(Fail::ty(
                "create needs a response ({ status, headers, body }) or a failure ('timeout', 'connect' or 'reset')",
            ));
        }
    };
    let body = match prop(&o, "requestBody", what)? {
        Some(b) if type_of(&b, "create.requestBody")? != ValueType::Null => {
            Some(body_bytes(&b, "create.requestBody")?)
        }
        _ => None,
    };
    Ok(lb::AdoptedCreate {
        key,
        body,
        sent_ns,
        received_ns,
        outcome,
    })
}

// ----- settlement -----

/// A settlement's options, checked: the core configuration and the optional
/// key prefix.
pub struct SettlementOptions {
    /// The core configuration.
    pub config: lb::SettlementConfig,
    /// Deterministic keys (`"<prefix>1"`) instead of UUIDv4 keys.
    pub key_prefix: Option<String>,
}

/// A JSON document given either as JSON data (a plain object, with bigints
/// written as exact integers) or as its raw text (a string, a `Buffer`, a
/// `Uint8Array` or an `ArrayBuffer`, passed to the core byte for byte). The
/// core checks what the document must contain.
pub fn json_document(v: &Unknown<'_>, what: &str) -> R<Vec<u8>> {
    let t = type_of(v, what)?;
    if t == ValueType::Object
        && !v.is_array().map_err(|e| napi_fail(what, &e))?
        && !v.is_typedarray().map_err(|e| napi_fail(what, &e))?
        && !v.is_arraybuffer().map_err(|e| napi_fail(what, &e))?
    {
        let value = json(v, what, 0)?;
        return serde_json::to_vec(&value)
            .map_err(|e| Fail::range(format!("{what} cannot be written as JSON: {e}")));
    }
    match t {
        ValueType::String | ValueType::Object => body_bytes_of(v, t, what),
        t => Err(Fail::ty(format!(
            "{what} must be an object (JSON data) or its JSON text (a string or bytes), got {}",
            describe(t)
        ))),
    }
}

/// A wall-clock instant in Unix milliseconds: a non-negative safe-integer
/// number (e.g. `Date.now()`) or a bigint up to 2^64-1.
pub fn wall_ms(v: &Unknown<'_>, what: &str) -> R<u64> {
    integer_u64(v, what)
}

/// The optional `retry` member: `{ maxAttempts?, initialMs?, maxMs? }`, each
/// absent one at its default.
fn retry_policy(o: &Object<'_>, what: &str) -> R<lb::RetryPolicy> {
    let mut retry = lb::RetryPolicy::default();
    let Some(r) = prop(o, "retry", what)? else {
        return Ok(retry);
    };
    let what = format!("{what}.retry");
    let r = object(&r, &what)?;
    only_keys(&r, &what, &["maxAttempts", "initialMs", "maxMs"])?;
    if let Some(v) = prop(&r, "maxAttempts", &what)? {
        let w = format!("{what}.maxAttempts");
        let n = integer_u64(&v, &w)?;
        retry.max_attempts = u32::try_from(n)
            .map_err(|_| Fail::range(format!("{w} must be at most 2^32-1, got {n}")))?;
    }
    if let Some(v) = prop(&r, "initialMs", &what)? {
        retry.initial_ms = integer_u64(&v, &format!("{what}.initialMs"))?;
    }
    if let Some(v) = prop(&r, "maxMs", &what)? {
        retry.max_ms = integer_u64(&v, &format!("{what}.maxMs"))?;
    }
    Ok(retry)
}

/// The options of `new Settlement(options, now, wallMs)`.
pub fn settlement_options(v: &Unknown<'_>) -> R<SettlementOptions> {
    let what = "options";
    let o = object(v, what)?;
    only_keys(
        &o,
        what,
        &[
            "reservationId",
            "baseUrl",
            "commit",
            "event",
            "release",
            "releaseReason",
            "retry",
            "keyPrefix",
        ],
    )?;
    let reservation_id = match prop(&o, "reservationId", what)? {
        Some(r) => string(&r, "options.reservationId")?,
        None => return Err(Fail::ty("options.reservationId is required (a string)")),
    };
    let base_url = match prop(&o, "baseUrl", what)? {
        Some(b) => string(&b, "options.baseUrl")?,
        None => String::new(),
    };
    let release = match prop(&o, "release", what)? {
        None => false,
        Some(b) => match type_of(&b, "options.release")? {
            ValueType::Boolean => read::<bool>(&b, "options.release")?,
            t => {
                return Err(Fail::ty(format!(
                    "options.release must be a boolean, got {}",
                    describe(t)
                )));
            }
        },
    };
    let nullable_doc = |name: &str| -> R<Option<Vec<u8>>> {
        let w = format!("options.{name}");
        match prop(&o, name, what)? {
            None => Ok(None),
            Some(d) if type_of(&d, &w)? == ValueType::Null => Ok(None),
            Some(d) => json_document(&d, &w).map(Some),
        }
    };
    let commit = if !release && prop(&o, "commit", what)?.is_none() {
        return Err(Fail::ty(
            "options.commit is required for a commit: the commit body without its key ({ actual, metrics?, metadata? }), or null when no actual amount is known (ST-10)",
        ));
    } else {
        nullable_doc("commit")?
    };
    let event = nullable_doc("event")?;
    let release_reason = match prop(&o, "releaseReason", what)? {
        None => None,
        Some(r) if type_of(&r, "options.releaseReason")? == ValueType::Null => None,
        Some(r) => Some(string(&r, "options.releaseReason")?),
    };
    let retry = retry_policy(&o, what)?;
    let key_prefix = match prop(&o, "keyPrefix", what)? {
        Some(p) => Some(string(&p, "options.keyPrefix")?),
        None => None,
    };
    Ok(SettlementOptions {
        config: lb::SettlementConfig {
            reservation_id,
            base_url,
            commit,
            event,
            release,
            release_reason,
            retry,
        },
        key_prefix,
    })
}

/// The options of `Settlement.fromRecord(record, now, wallMs, options?)`:
/// `{ retry? }` (absent or `undefined`: the defaults).
pub fn restart_options(v: Option<&Unknown<'_>>) -> R<lb::RetryPolicy> {
    let what = "options";
    let Some(v) = v else {
        return Ok(lb::RetryPolicy::default());
    };
    if type_of(v, what)? == ValueType::Undefined {
        return Ok(lb::RetryPolicy::default());
    }
    let o = object(v, what)?;
    only_keys(&o, what, &["retry"])?;
    retry_policy(&o, what)
}

/// A record file's bytes: a string or bytes (`Buffer`, `Uint8Array`,
/// `ArrayBuffer`).
pub fn record_bytes(v: &Unknown<'_>, what: &str) -> R<Vec<u8>> {
    body_bytes(v, what)
}

/// The options of `Journal.open(options)`: `{ dir?, baseUrl, apiKey, tenant? }`.
pub struct JournalOpenOptions {
    /// The base directory given, if any (else `CYCLES_JOURNAL_DIR` or the default).
    pub dir: Option<String>,
    /// The server the partition is for.
    pub base_url: String,
    /// The API key (only hashed into the partition name when no tenant is given).
    pub api_key: String,
    /// The tenant (partitions by tenant when non-blank).
    pub tenant: Option<String>,
}

/// An optional string member: absent, `undefined` and `null` are `None`.
fn opt_string(o: &Object<'_>, name: &str, what: &str) -> R<Option<String>> {
    let w = format!("{what}.{name}");
    match prop(o, name, what)? {
        None => Ok(None),
        Some(v) if type_of(&v, &w)? == ValueType::Null => Ok(None),
        Some(v) => string(&v, &w).map(Some),
    }
}

/// The options of `Journal.open`.
pub fn journal_open_options(v: &Unknown<'_>) -> R<JournalOpenOptions> {
    let what = "options";
    let o = object(v, what)?;
    only_keys(&o, what, &["dir", "baseUrl", "apiKey", "tenant"])?;
    let base_url = opt_string(&o, "baseUrl", what)?
        .ok_or_else(|| Fail::ty("options.baseUrl is required (a string)"))?;
    let api_key = opt_string(&o, "apiKey", what)?
        .ok_or_else(|| Fail::ty("options.apiKey is required (a string)"))?;
    let dir = opt_string(&o, "dir", what)?;
    if dir
        .as_deref()
        .is_some_and(|d| d.is_empty() || d.contains('\0'))
    {
        return Err(Fail::range(
            "options.dir must be a non-empty path without NUL",
        ));
    }
    Ok(JournalOpenOptions {
        dir,
        base_url,
        api_key,
        tenant: opt_string(&o, "tenant", what)?,
    })
}

/// The options of `journal.replay(options)`: `{ now, wallMs, retry? }`.
pub fn replay_options(v: &Unknown<'_>) -> R<(lb::Now, lb::RetryPolicy)> {
    let what = "options";
    let o = object(v, what)?;
    only_keys(&o, what, &["now", "wallMs", "retry"])?;
    let now = prop(&o, "now", what)?
        .ok_or_else(|| Fail::ty("options.now is required (a number of ms or a bigint of ns)"))?;
    let wall = prop(&o, "wallMs", what)?
        .ok_or_else(|| Fail::ty("options.wallMs is required (Unix ms)"))?;
    let now = lb::Now::new(
        time_ns(&now, "options.now")?,
        wall_ms(&wall, "options.wallMs")?,
    );
    Ok((now, retry_policy(&o, what)?))
}
