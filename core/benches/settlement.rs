//! The CPU cost of a settlement decision beside a heartbeat decision (issue 26's
//! figure), measured in the same run. Not a test: nothing asserts on time.
//!
//! * `beat/primary_decision`: as in `heartbeat.rs` (handle_sent, handle_response_ref of
//!   the 200 extend body, poll_action), the reference.
//! * `settle/commit_success_decision`: `handle_response` of the exact 200 CommitResponse
//!   for a commit in flight (the common terminal decision; setup not timed).
//! * `schema/commit_response`: the strict CommitResponse check alone.
//! * `settle/transient_retry_decision`: handle_sent, a 503, poll_action, in a settlement
//!   that keeps retrying (the repeating decision, like the heartbeat's).
//! * `settle/full_commit_uuid`: the whole settlement of one commit: build it from its
//!   configuration (JSON bodies parsed and checked, a UUIDv4 key, the record and the event
//!   fallback body), acknowledge the persist, send, the 200, poll.

use std::hint::black_box;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use leasebeat::{
    Action, Config, Heartbeat, Now, Response, ResponseRef, RetryPolicy, SequentialKeys, Settlement,
    SettlementAction, SettlementConfig,
};

const MS: u64 = 1_000_000;
const WALL: u64 = 1_785_585_600_000;
const CREATE: &[u8] = br#"{"decision":"ALLOW","reservation_id":"r-1","affected_scopes":["tenant:acme"],"expires_at_ms":1785585660000,"remaining_ttl_ms":61500}"#;
const EXTEND: &[u8] =
    br#"{"status":"ACTIVE","expires_at_ms":1785585720000,"remaining_ttl_ms":60000}"#;
const COMMIT_OK: &[u8] = br#"{"status":"COMMITTED","charged":{"unit":"TOKENS","amount":900}}"#;
const ACTUAL: &[u8] = br#"{"actual":{"unit":"TOKENS","amount":900},"metrics":{"tokens_input":1200,"tokens_output":300,"latency_ms":2340}}"#;
const EVENT: &[u8] =
    br#"{"subject":{"tenant":"acme","app":"bot"},"action":{"kind":"llm.completion","name":"m"}}"#;

fn config(retry: RetryPolicy) -> SettlementConfig {
    SettlementConfig {
        reservation_id: "rsv_01J9Z6Q0M7W3".into(),
        base_url: "https://cycles.example".into(),
        commit: Some(ACTUAL.to_vec()),
        event: Some(EVENT.to_vec()),
        release: false,
        release_reason: None,
        retry,
    }
}

/// A commit settlement whose first attempt is in flight.
fn commit_in_flight(retry: RetryPolicy) -> (Settlement, u64) {
    let mut s = Settlement::with_key_source(
        config(retry),
        Now::new(0, WALL),
        &mut SequentialKeys::new("k"),
    )
    .expect("valid");
    s.handle_persisted(MS).expect("persisted");
    let id = s.attempt().expect("attempt").id;
    s.handle_sent(id, MS).expect("sent");
    (s, id)
}

fn benches(c: &mut Criterion) {
    c.bench_function("beat/primary_decision", |b| {
        let fresh = || {
            let mut hb = Heartbeat::with_key_source(
                Config::new(60_000, Some(10_000)),
                Box::new(SequentialKeys::new("k")),
            )
            .expect("config");
            let id = hb.attempt().expect("create").id;
            hb.handle_sent(id, 0).expect("sent");
            hb.handle_response(id, Response::new(200).body(CREATE), 1_500 * MS)
                .expect("create ok");
            hb
        };
        let due = |hb: &Heartbeat| match hb.poll_action() {
            Action::Send(a) => (a.id, a.due_ns.expect("finite")),
            other => panic!("unexpected {other:?}"),
        };
        let mut hb = fresh();
        let (mut id, mut at) = due(&hb);
        b.iter(|| {
            if at > u64::MAX / 4 {
                hb = fresh();
                (id, at) = due(&hb);
            }
            hb.handle_sent(id, at).expect("sent");
            let now = at + 100 * MS;
            let d = hb
                .handle_response_ref(id, ResponseRef::new(200, black_box(EXTEND)), now)
                .expect("decided");
            black_box(d);
            (id, at) = due(&hb);
        })
    });
    c.bench_function("schema/commit_response", |b| {
        b.iter(|| leasebeat::schema::commit_response(black_box(COMMIT_OK)).expect("valid"))
    });
    c.bench_function("settle/commit_success_decision", |b| {
        b.iter_batched(
            || commit_in_flight(RetryPolicy::default()),
            |(mut s, id)| {
                let d = s
                    .handle_response(
                        id,
                        ResponseRef::new(200, black_box(COMMIT_OK)),
                        Now::new(40 * MS, WALL + 40),
                    )
                    .expect("decided");
                black_box((d, s))
            },
            BatchSize::SmallInput,
        )
    });
    c.bench_function("settle/transient_retry_decision", |b| {
        let retry = RetryPolicy {
            max_attempts: u32::MAX,
            initial_ms: 500,
            max_ms: 30_000,
        };
        let (mut s, mut id) = commit_in_flight(retry);
        let mut now = MS;
        let mut first = true;
        b.iter(|| {
            if s.failures() > u32::MAX / 2 {
                (s, id) = commit_in_flight(retry);
                now = MS;
                first = true;
            }
            if !first {
                s.handle_sent(id, now).expect("sent");
            }
            first = false;
            now += 50 * MS;
            let d = s
                .handle_response(
                    id,
                    ResponseRef::new(503, black_box(b"")),
                    Now::new(now, WALL),
                )
                .expect("decided");
            black_box(&d);
            match s.poll_action() {
                SettlementAction::Send(a) => {
                    id = a.id;
                    now = a.due_ns;
                }
                other => panic!("unexpected {other:?}"),
            }
        })
    });
    c.bench_function("settle/full_commit_uuid", |b| {
        b.iter(|| {
            let mut s =
                Settlement::new(config(RetryPolicy::default()), Now::new(0, WALL)).expect("valid");
            if let SettlementAction::Persist(r) = s.poll_action() {
                black_box(r);
            }
            s.handle_persisted(MS).expect("persisted");
            let id = s.attempt().expect("attempt").id;
            s.handle_sent(id, MS).expect("sent");
            let d = s
                .handle_response(
                    id,
                    ResponseRef::new(200, black_box(COMMIT_OK)),
                    Now::new(40 * MS, WALL + 40),
                )
                .expect("decided");
            black_box((d, s.poll_action()));
        })
    });
}

criterion_group!(group, benches);
criterion_main!(group);
