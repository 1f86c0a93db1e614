//! Strict argument conversion (Python -> Rust) and JSON conversion.
//!
//! Integers must be `int` (a `bool` or a `float` is a `TypeError`); a value
//! out of range is `InvalidArgument` (a `LeaseError` and a `ValueError`).

use leasebeat::Num;
use pyo3::prelude::*;
use pyo3::types::{
    PyBool, PyByteArray, PyBytes, PyDict, PyFloat, PyInt, PyList, PyMapping, PyString, PyTuple,
};
use serde_json::{Map, Number, Value};

use crate::errors::{invalid_argument, type_error};

fn type_name(v: &Bound<'_, PyAny>) -> String {
    v.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into())
}

fn as_int<'a, 'py>(v: &'a Bound<'py, PyAny>, what: &str) -> PyResult<&'a Bound<'py, PyInt>> {
    if v.is_instance_of::<PyBool>() {
        return Err(type_error(format!("{what} must be an int, not bool")));
    }
    v.cast::<PyInt>()
        .map_err(|_| type_error(format!("{what} must be an int, not {}", type_name(v))))
}

/// A non-negative `int` that fits in 64 bits.
pub fn to_u64(v: &Bound<'_, PyAny>, what: &str) -> PyResult<u64> {
    let i = as_int(v, what)?;
    // Fast path: an i64 goes through PyLong_AsLong (64-bit c_long), which
    // CPython converts digit by digit; u64 goes through
    // PyLong_AsUnsignedLongLong and its generic byte-array conversion
    // (~3x slower for a nanosecond timestamp).
    if let Ok(s) = i.extract::<i64>()
        && s >= 0
    {
        return Ok(s as u64);
    }
    match i.extract::<u64>() {
        Ok(u) => Ok(u),
        Err(_) => {
            if i.lt(0)? {
                Err(invalid_argument(
                    v.py(),
                    format!("{what} must be >= 0, got {i}"),
                ))
            } else {
                Err(invalid_argument(
                    v.py(),
                    format!("{what} must be <= 2**64-1, got {i}"),
                ))
            }
        }
    }
}

/// A duration in ms: a non-negative 64-bit `int`, or `float('inf')` for
/// +infinity (the core's `u64::MAX`).
pub fn to_duration(v: &Bound<'_, PyAny>, what: &str) -> PyResult<u64> {
    if let Ok(f) = v.cast::<PyFloat>() {
        let x = f.value();
        if x == f64::INFINITY {
            return Ok(u64::MAX);
        }
        return Err(type_error(format!(
            "{what} must be an int or float('inf'), got the float {x}"
        )));
    }
    to_u64(v, what)
}

/// Any `int` that fits in 128 signed bits.
pub fn to_i128(v: &Bound<'_, PyAny>, what: &str) -> PyResult<i128> {
    let i = as_int(v, what)?;
    i.extract::<i128>()
        .map_err(|_| invalid_argument(v.py(), format!("{what} does not fit in 128 bits: {i}")))
}

/// A 32-bit attempt id / key index etc.
pub fn to_u16_status(v: &Bound<'_, PyAny>) -> PyResult<u16> {
    let i = as_int(v, "status")?;
    i.extract::<u16>().map_err(|_| {
        invalid_argument(
            v.py(),
            format!("HTTP status must be within 100..=999, got {i}"),
        )
    })
}

/// Bytes from `bytes`, `bytearray`, `memoryview` (via the buffer protocol) or
/// `str` (UTF-8 encoded).
pub fn to_bytes(v: &Bound<'_, PyAny>, what: &str) -> PyResult<Vec<u8>> {
    if let Ok(b) = v.cast::<PyBytes>() {
        return Ok(b.as_bytes().to_vec());
    }
    if let Ok(b) = v.cast::<PyByteArray>() {
        return Ok(b.to_vec());
    }
    if let Ok(s) = v.cast::<PyString>() {
        return Ok(s.to_str()?.as_bytes().to_vec());
    }
    if v.get_type().name()?.to_str()? == "memoryview" {
        let b = v.py().get_type::<PyBytes>().call1((v,))?;
        return Ok(b
            .cast::<PyBytes>()
            .map_err(PyErr::from)?
            .as_bytes()
            .to_vec());
    }
    Err(type_error(format!(
        "{what} must be bytes, bytearray, memoryview or str, not {}",
        type_name(v)
    )))
}

/// Response headers: `None`, an object with `multi_items()` (httpx.Headers),
/// a mapping (name -> value, or name -> list of values for repeated headers),
/// an object with `items()` (http.client.HTTPMessage, multidict) or an
/// iterable of `(name, value)` pairs.
/// Names and values are `str` (UTF-8) or bytes.
pub fn to_headers(v: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<(Vec<u8>, Vec<u8>)>> {
    let mut out = Vec::new();
    let Some(v) = v else { return Ok(out) };
    if v.is_none() {
        return Ok(out);
    }
    if v.is_instance_of::<PyString>() || v.is_instance_of::<PyBytes>() {
        return Err(type_error(
            "headers must be a mapping or an iterable of (name, value) pairs, not a string",
        ));
    }
    let multi = if v.is_instance_of::<PyDict>() {
        None
    } else {
        v.getattr("multi_items").ok().filter(|m| m.is_callable())
    };
    let pairs = if let Some(multi) = multi {
        // httpx.Headers (and look-alikes): every header, repeated ones
        // repeated (``items()`` would join them with ", ").
        let items = multi.call0()?;
        let iter = items.try_iter().map_err(|_| {
            type_error("headers.multi_items() must return an iterable of (name, value) pairs")
        })?;
        let mut pairs = Vec::new();
        for item in iter {
            let item = item?;
            pairs.push(pair_of(&item)?);
        }
        pairs
    } else if v.is_instance_of::<PyDict>()
        || v.cast::<PyMapping>().is_ok()
        || v.getattr("items").is_ok_and(|m| m.is_callable())
    {
        // A mapping, or a header container with ``items()`` yielding every
        // (name, value) pair (http.client.HTTPMessage, multidict, ...).
        let items = v.call_method0("items")?;
        let mut pairs = Vec::new();
        for item in items.try_iter()? {
            let item = item?;
            let (name, value) = pair_of(&item)?;
            if value.is_instance_of::<PyList>() || value.is_instance_of::<PyTuple>() {
                for one in value.try_iter()? {
                    pairs.push((name.clone(), one?));
                }
            } else {
                pairs.push((name, value));
            }
        }
        pairs
    } else {
        let iter = v.try_iter().map_err(|_| {
            type_error(format!(
                "headers must be a mapping or an iterable of (name, value) pairs, not {}",
                type_name(v)
            ))
        })?;
        let mut pairs = Vec::new();
        for item in iter {
            let item = item?;
            pairs.push(pair_of(&item)?);
        }
        pairs
    };
    for (name, value) in pairs {
        out.push((
            to_bytes(&name, "a header name")?,
            to_bytes(&value, "a header value")?,
        ));
    }
    Ok(out)
}

fn pair_of<'py>(item: &Bound<'py, PyAny>) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>)> {
    item.extract().map_err(|_| {
        type_error(format!(
            "each header must be a (name, value) pair, not {}",
            type_name(item)
        ))
    })
}

const MAX_DEPTH: usize = 64;

/// A Python value as JSON: `None`, `bool`, `int` (64-bit), finite `float`,
/// `str`, `list`/`tuple`, `dict` with `str` keys.
pub fn to_json_value(v: &Bound<'_, PyAny>, path: &str, depth: usize) -> PyResult<Value> {
    let py = v.py();
    if depth > MAX_DEPTH {
        return Err(invalid_argument(
            py,
            format!("{path}: nested deeper than {MAX_DEPTH} levels"),
        ));
    }
    if v.is_none() {
        return Ok(Value::Null);
    }
    if let Ok(b) = v.cast::<PyBool>() {
        return Ok(Value::Bool(b.is_true()));
    }
    if let Ok(i) = v.cast::<PyInt>() {
        if let Ok(u) = i.extract::<u64>() {
            return Ok(Value::from(u));
        }
        if let Ok(s) = i.extract::<i64>() {
            return Ok(Value::from(s));
        }
        return Err(invalid_argument(
            py,
            format!("{path}: the integer {i} does not fit in 64 bits"),
        ));
    }
    if let Ok(f) = v.cast::<PyFloat>() {
        return Number::from_f64(f.value())
            .map(Value::Number)
            .ok_or_else(|| invalid_argument(py, format!("{path}: {} is not finite", f.value())));
    }
    if let Ok(s) = v.cast::<PyString>() {
        return Ok(Value::String(s.to_str()?.to_owned()));
    }
    if v.is_instance_of::<PyList>() || v.is_instance_of::<PyTuple>() {
        let mut items = Vec::new();
        for (i, item) in v.try_iter()?.enumerate() {
            items.push(to_json_value(&item?, &format!("{path}[{i}]"), depth + 1)?);
        }
        return Ok(Value::Array(items));
    }
    if let Ok(d) = v.cast::<PyDict>() {
        return Ok(Value::Object(to_json_object(d, path, depth + 1)?));
    }
    Err(type_error(format!(
        "{path}: {} is not JSON (use None, bool, int, float, str, list, tuple or dict)",
        type_name(v)
    )))
}

/// A `dict` with `str` keys as a JSON object.
pub fn to_json_object(
    d: &Bound<'_, PyDict>,
    path: &str,
    depth: usize,
) -> PyResult<Map<String, Value>> {
    let mut m = Map::new();
    for (k, v) in d.iter() {
        let key = k
            .cast::<PyString>()
            .map_err(|_| type_error(format!("{path}: keys must be str, not {}", type_name(&k))))?
            .to_str()?
            .to_owned();
        let child = format!("{path}[{key:?}]");
        m.insert(key, to_json_value(&v, &child, depth)?);
    }
    Ok(m)
}

/// A JSON value as Python objects (integers exact).
pub fn from_json<'py>(py: Python<'py>, v: &Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match v {
        Value::Null => py.None().into_bound(py),
        Value::Bool(b) => PyBool::new(py, *b).to_owned().into_any(),
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                u.into_pyobject(py)?.into_any()
            } else if let Some(i) = n.as_i64() {
                i.into_pyobject(py)?.into_any()
            } else {
                n.as_f64().unwrap_or(f64::NAN).into_pyobject(py)?.into_any()
            }
        }
        Value::String(s) => PyString::new(py, s).into_any(),
        Value::Array(a) => {
            let list = PyList::empty(py);
            for item in a {
                list.append(from_json(py, item)?)?;
            }
            list.into_any()
        }
        Value::Object(o) => from_json_object(py, o)?.into_any(),
    })
}

/// A JSON object as a `dict`.
pub fn from_json_object<'py>(
    py: Python<'py>,
    o: &Map<String, Value>,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for (k, v) in o {
        d.set_item(k, from_json(py, v)?)?;
    }
    Ok(d)
}

/// A core number: `int`, or `float('inf')` / `float('-inf')`.
pub fn num<'py>(py: Python<'py>, n: Num) -> PyResult<Bound<'py, PyAny>> {
    Ok(match n {
        Num::NegInf => f64::NEG_INFINITY.into_pyobject(py)?.into_any(),
        Num::Inf => f64::INFINITY.into_pyobject(py)?.into_any(),
        Num::Int(i) => i.into_pyobject(py)?.into_any(),
    })
}

/// A duration in ms where `u64::MAX` is +infinity.
pub fn duration<'py>(py: Python<'py>, ms: u64) -> PyResult<Bound<'py, PyAny>> {
    num(py, Num::from_ms(ms))
}
