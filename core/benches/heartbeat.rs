//! Benchmarks of the core's per-outcome work. Not tests: nothing here asserts
//! on time. `scripts/bench-rust.sh` runs them and prints ratios measured in the
//! same run, against the floor every decision pays anyway: parsing the
//! response body with serde_json.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use leasebeat::{Config, Heartbeat, Response, SequentialKeys, TransportFailure, arith};

const MS: u64 = 1_000_000;
const CREATE: &[u8] = br#"{"decision":"ALLOW","reservation_id":"r-1","affected_scopes":["tenant:acme"],"expires_at_ms":1785585660000,"remaining_ttl_ms":61500}"#;
const EXTEND: &[u8] =
    br#"{"status":"ACTIVE","expires_at_ms":1785585720000,"remaining_ttl_ms":60000}"#;
const EXTEND_FALLBACK: &[u8] = br#"{"status":"ACTIVE","expires_at_ms":1785585720000}"#;

/// A heartbeat whose create succeeded and whose first extend is in flight.
fn in_flight() -> (Heartbeat, u64) {
    let mut hb = Heartbeat::with_key_source(
        Config::new(60_000, Some(10_000)),
        Box::new(SequentialKeys::new("k")),
    )
    .expect("valid config");
    let id = hb.attempt().expect("create").id;
    hb.handle_sent(id, 0).expect("sent");
    hb.handle_response(id, Response::new(200).body(CREATE), 1_500 * MS)
        .expect("create ok");
    let id = hb.attempt().expect("extend").id;
    hb.handle_sent(id, 38_500 * MS).expect("sent");
    (hb, id)
}

fn benches(c: &mut Criterion) {
    c.bench_function("floor/serde_json_parse_extend_body", |b| {
        b.iter(|| serde_json::from_slice::<serde_json::Value>(black_box(EXTEND)).expect("json"))
    });
    c.bench_function("schema/extend_response", |b| {
        b.iter(|| leasebeat::schema::extend_response(black_box(EXTEND)).expect("valid"))
    });
    c.bench_function("arith/primary_schedule", |b| {
        b.iter(|| arith::primary_schedule(black_box(61_500), Some(1_500), Some(10_000), 1_500))
    });
    c.bench_function("heartbeat/primary_success", |b| {
        b.iter_batched(
            in_flight,
            |(mut hb, id)| {
                hb.handle_response(id, Response::new(200).body(EXTEND), 38_600 * MS)
                    .expect("decided")
            },
            criterion::BatchSize::SmallInput,
        )
    });
    c.bench_function("heartbeat/fallback_success", |b| {
        b.iter_batched(
            in_flight,
            |(mut hb, id)| {
                hb.handle_response(id, Response::new(200).body(EXTEND_FALLBACK), 38_600 * MS)
                    .expect("decided")
            },
            criterion::BatchSize::SmallInput,
        )
    });
    c.bench_function("heartbeat/transient_failure", |b| {
        b.iter_batched(
            in_flight,
            |(mut hb, id)| {
                hb.handle_failure(id, TransportFailure::Timeout, 48_500 * MS)
                    .expect("decided")
            },
            criterion::BatchSize::SmallInput,
        )
    });
}

criterion_group!(core_benches, benches);
criterion_main!(core_benches);
