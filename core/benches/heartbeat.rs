//! Benchmarks of the core's per-outcome work. Not tests: nothing here asserts
//! on time. `scripts/bench-rust.sh` runs them and prints ratios measured in the
//! same run, against the floor every decision pays anyway: parsing the
//! response body with serde_json.
//!
//! The ids of issue 15 (see `scripts/bench-rust.sh`):
//! * `floor/serde_json_parse_extend_body` -> `rust.floor_value`
//! * `beat/primary_decision` -> `rust.primary`: `handle_response_ref` of the 200
//!   extend body, then `poll_action`, SequentialKeys, in a lease that keeps
//!   extending (each iteration also marks the attempt sent, a few ns).
//! * `beat/full_uuid` -> `rust.beat_uuid`: poll, handle_sent,
//!   handle_response_ref, poll with real UUIDv4 keys.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use leasebeat::{
    Action, Config, Heartbeat, KeySource, Response, ResponseRef, SequentialKeys, TransportFailure,
    UuidV4Keys, arith,
};

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

/// A lease that keeps extending: created, its first extension waiting to be sent.
struct Lease {
    hb: Heartbeat,
    now: u64,
}

impl Lease {
    fn new(keys: Box<dyn KeySource>) -> Lease {
        let mut hb =
            Heartbeat::with_key_source(Config::new(60_000, Some(10_000)), keys).expect("config");
        let id = hb.attempt().expect("create").id;
        hb.handle_sent(id, 0).expect("sent");
        hb.handle_response(id, Response::new(200).body(CREATE), 1_500 * MS)
            .expect("create ok");
        Lease {
            hb,
            now: 1_500 * MS,
        }
    }

    /// The attempt to send now (restarting the lease long before time overflows).
    fn due(&mut self) -> (u64, u64) {
        match self.hb.poll_action() {
            Action::Send(a) => (a.id, a.due_ns.expect("finite")),
            other => panic!("unexpected {other:?}"),
        }
    }
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
    c.bench_function("keys/uuid_v4", |b| {
        let mut k = UuidV4Keys;
        b.iter(|| k.next_key())
    });
    // rust.primary: handle_response_ref + poll_action in a lease that keeps extending.
    c.bench_function("beat/primary_decision", |b| {
        let mut l = Lease::new(Box::new(SequentialKeys::new("k")));
        let (mut id, mut due) = l.due();
        b.iter(|| {
            if due > u64::MAX / 4 {
                l = Lease::new(Box::new(SequentialKeys::new("k")));
                (id, due) = l.due();
            }
            l.hb.handle_sent(id, due).expect("sent");
            l.now = due + 100 * MS;
            let d =
                l.hb.handle_response_ref(id, ResponseRef::new(200, black_box(EXTEND)), l.now)
                    .expect("decided");
            black_box(d);
            match l.hb.poll_action() {
                Action::Send(a) => {
                    id = a.id;
                    due = a.due_ns.expect("finite");
                }
                other => panic!("unexpected {other:?}"),
            }
        })
    });
    // rust.beat_uuid: poll, handle_sent, handle_response_ref, poll; UUIDv4 keys.
    c.bench_function("beat/full_uuid", |b| {
        let mut l = Lease::new(Box::new(UuidV4Keys));
        b.iter(|| {
            let (id, due) = l.due();
            if due > u64::MAX / 4 {
                l = Lease::new(Box::new(UuidV4Keys));
                return;
            }
            l.hb.handle_sent(id, due).expect("sent");
            l.now = due + 100 * MS;
            let d =
                l.hb.handle_response_ref(id, ResponseRef::new(200, black_box(EXTEND)), l.now)
                    .expect("decided");
            black_box(d);
            black_box(l.hb.poll_action());
        })
    });
    c.bench_function("heartbeat/primary_success", |b| {
        b.iter_batched(
            in_flight,
            |(mut hb, id)| {
                let d = hb
                    .handle_response(id, Response::new(200).body(EXTEND), 38_600 * MS)
                    .expect("decided");
                (hb, d)
            },
            criterion::BatchSize::SmallInput,
        )
    });
    c.bench_function("heartbeat/fallback_success", |b| {
        b.iter_batched(
            in_flight,
            |(mut hb, id)| {
                let d = hb
                    .handle_response(id, Response::new(200).body(EXTEND_FALLBACK), 38_600 * MS)
                    .expect("decided");
                (hb, d)
            },
            criterion::BatchSize::SmallInput,
        )
    });
    c.bench_function("heartbeat/transient_failure", |b| {
        b.iter_batched(
            in_flight,
            |(mut hb, id)| {
                let d = hb
                    .handle_failure(id, TransportFailure::Timeout, 48_500 * MS)
                    .expect("decided");
                (hb, d)
            },
            criterion::BatchSize::SmallInput,
        )
    });
}

criterion_group!(core_benches, benches);
criterion_main!(core_benches);
