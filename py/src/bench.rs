//! Benchmark support (cargo feature `bench`, built only by
//! `scripts/bench-python.sh`; never in the published wheel): the core's
//! primary decision timed in a Rust loop inside the same process, so the
//! Python figure and the core figure come from the same build and run.

use std::hint::black_box;

use leasebeat::{Config, Heartbeat, Response, SequentialKeys};
use pyo3::prelude::*;

use crate::heartbeat::PyHeartbeat;

const MS: u64 = 1_000_000;
const CREATE: &[u8] = br#"{"decision":"ALLOW","reservation_id":"r-1","affected_scopes":["tenant:acme"],"expires_at_ms":1785585660000,"remaining_ttl_ms":61500}"#;
const EXTEND: &[u8] =
    br#"{"status":"ACTIVE","expires_at_ms":1785585720000,"remaining_ttl_ms":60000}"#;

/// `core/benches/heartbeat.rs`'s fixture: create ok, first extend in flight.
fn in_flight(uuid: bool) -> Option<(Heartbeat, u64)> {
    let config = Config::new(60_000, Some(10_000));
    let mut hb = if uuid {
        Heartbeat::new(config)
    } else {
        Heartbeat::with_key_source(config, Box::new(SequentialKeys::new("k")))
    }
    .ok()?;
    let id = hb.attempt()?.id;
    hb.handle_sent(id, 0).ok()?;
    hb.handle_response(id, Response::new(200).body(CREATE), 1_500 * MS)
        .ok()?;
    let id = hb.attempt()?.id;
    hb.handle_sent(id, 38_500 * MS).ok()?;
    Some((hb, id))
}

/// Reads `clock` (a Python callable returning ns, e.g. `time.thread_time_ns`).
fn read(clock: &Bound<'_, PyAny>) -> PyResult<u64> {
    clock.call0()?.extract()
}

/// ns per core decision (handle_response of the 200 extend body, then
/// poll_action) over `n` fresh in-flight heartbeats built before the clock
/// starts; `clock` is read once before and once after the loop.
#[pyfunction]
#[pyo3(name = "_bench_core_decision")]
pub fn bench_core_decision(n: usize, uuid: bool, clock: &Bound<'_, PyAny>) -> PyResult<f64> {
    let mut states = Vec::with_capacity(n);
    for _ in 0..n.max(1) {
        states
            .push(in_flight(uuid).ok_or_else(|| {
                pyo3::exceptions::PyRuntimeError::new_err("bench fixture failed")
            })?);
    }
    let t0 = read(clock)?;
    for (hb, id) in &mut states {
        let d = hb.handle_response(*id, Response::new(200).body(black_box(EXTEND)), 38_600 * MS);
        black_box(&d);
        black_box(hb.poll_action());
    }
    let ns = read(clock)?.saturating_sub(t0) as f64;
    drop(states);
    Ok(ns / n.max(1) as f64)
}

/// ns per core decision, as `bench_core_decision`, but on heartbeats built
/// by Python (`[(Heartbeat, attempt_id), ...]`, the very states the Python
/// figure uses, so memory layout and cache state are alike): the core called
/// from Rust under each heartbeat's lock, no Python per operation.
#[pyfunction]
#[pyo3(name = "_bench_core_on")]
pub fn bench_core_on(
    states: Vec<(Bound<'_, PyHeartbeat>, u64)>,
    clock: &Bound<'_, PyAny>,
) -> PyResult<f64> {
    let fail = || pyo3::exceptions::PyRuntimeError::new_err("bench state unusable");
    let n = states.len().max(1);
    let t0 = read(clock)?;
    for (hb, id) in &states {
        let mut hb = hb.get().inner.lock().map_err(|_| fail())?;
        let d = hb.handle_response(*id, Response::new(200).body(black_box(EXTEND)), 38_600 * MS);
        black_box(&d);
        black_box(hb.poll_action());
    }
    Ok(read(clock)?.saturating_sub(t0) as f64 / n as f64)
}

/// ns per full core beat (poll_action, handle_sent, handle_response of the
/// 200 extend body, poll_action) over `n` beats of one lease.
#[pyfunction]
#[pyo3(name = "_bench_core_beat")]
pub fn bench_core_beat(n: usize, uuid: bool, clock: &Bound<'_, PyAny>) -> PyResult<f64> {
    let fail = || pyo3::exceptions::PyRuntimeError::new_err("bench beat failed");
    let (mut hb, id) = in_flight(uuid).ok_or_else(fail)?;
    let mut now = 38_600 * MS;
    hb.handle_response(id, Response::new(200).body(EXTEND), now)
        .map_err(|_| fail())?;
    let t0 = read(clock)?;
    for _ in 0..n.max(1) {
        let (id, due) = match hb.poll_action() {
            leasebeat::Action::Send(a) => (a.id, a.due_ns.unwrap_or(now)),
            _ => return Err(fail()),
        };
        now = now.max(due);
        hb.handle_sent(id, now).map_err(|_| fail())?;
        now += 100 * MS;
        let d = hb.handle_response(id, Response::new(200).body(black_box(EXTEND)), now);
        black_box(&d);
        black_box(hb.poll_action());
    }
    Ok(read(clock)?.saturating_sub(t0) as f64 / n.max(1) as f64)
}

/// Sizes in bytes: (Heartbeat, Decision, Attempt, Response).
#[pyfunction]
#[pyo3(name = "_bench_sizes")]
pub fn bench_sizes() -> (usize, usize, usize, usize) {
    (
        std::mem::size_of::<Heartbeat>(),
        std::mem::size_of::<leasebeat::Decision>(),
        std::mem::size_of::<leasebeat::Attempt>(),
        std::mem::size_of::<Response>(),
    )
}
