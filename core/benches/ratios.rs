//! The issue-15 figures, measured interleaved so that a shared machine's
//! load drifts over all of them alike: each round times a block of every
//! operation in turn (the order rotating), and each figure is the median of
//! its per-round ns/op. Prints the BENCH lines `rust.floor_value`,
//! `rust.primary`, `rust.beat_uuid` (see `scripts/bench-rust.sh`). Not a test.

use std::hint::black_box;
use std::time::Instant;

use leasebeat::{
    Action, Config, Heartbeat, KeySource, Response, ResponseRef, SequentialKeys, UuidV4Keys,
};

const MS: u64 = 1_000_000;
const CREATE: &[u8] = br#"{"decision":"ALLOW","reservation_id":"r-1","affected_scopes":["tenant:acme"],"expires_at_ms":1785585660000,"remaining_ttl_ms":61500}"#;
const EXTEND: &[u8] =
    br#"{"status":"ACTIVE","expires_at_ms":1785585720000,"remaining_ttl_ms":60000}"#;

/// A lease that keeps extending (the fixture of `heartbeat.rs`).
struct Lease {
    hb: Heartbeat,
    make: fn() -> Box<dyn KeySource>,
}

impl Lease {
    fn new(make: fn() -> Box<dyn KeySource>) -> Lease {
        let mut hb =
            Heartbeat::with_key_source(Config::new(60_000, Some(10_000)), make()).expect("config");
        let id = hb.attempt().expect("create").id;
        hb.handle_sent(id, 0).expect("sent");
        hb.handle_response(id, Response::new(200).body(CREATE), 1_500 * MS)
            .expect("create ok");
        Lease { hb, make }
    }

    /// The attempt waiting to be sent (poll_action), restarting the lease
    /// long before its clock could overflow.
    fn poll(&mut self) -> (u64, u64) {
        loop {
            match self.hb.poll_action() {
                Action::Send(a) if a.due_ns.is_some_and(|d| d < u64::MAX / 4) => {
                    return (a.id, a.due_ns.expect("finite"));
                }
                Action::Send(_) => *self = Lease::new(self.make),
                other => panic!("unexpected {other:?}"),
            }
        }
    }
}

fn seq() -> Box<dyn KeySource> {
    Box::new(SequentialKeys::new("k"))
}
fn uuid() -> Box<dyn KeySource> {
    Box::new(UuidV4Keys)
}

fn floor(n: u32) {
    for _ in 0..n {
        black_box(serde_json::from_slice::<serde_json::Value>(black_box(EXTEND)).expect("json"));
    }
}

/// handle_sent + handle_response_ref(200 extend body, borrowed) +
/// poll_action; the mark-sent of the
/// attempt is outside the timed part only in spirit: it is a few ns, and
/// timing it separately would cost more than it does.
fn primary(l: &mut Lease, n: u32) {
    let (mut id, mut due) = l.poll();
    for _ in 0..n {
        l.hb.handle_sent(id, due).expect("sent");
        let d =
            l.hb.handle_response_ref(id, ResponseRef::new(200, black_box(EXTEND)), due + 100 * MS)
                .expect("decided");
        black_box(d);
        (id, due) = l.poll();
    }
}

/// [`primary`] through the owned `handle_response(Response)` (the body
/// copied into a `Vec` per decision), for comparison (`BENCH_ONLY` only).
fn primary_owned(l: &mut Lease, n: u32) {
    let (mut id, mut due) = l.poll();
    for _ in 0..n {
        l.hb.handle_sent(id, due).expect("sent");
        let d =
            l.hb.handle_response(
                id,
                Response::new(200).body(black_box(EXTEND)),
                due + 100 * MS,
            )
            .expect("decided");
        black_box(&d);
        drop(d);
        (id, due) = l.poll();
    }
}

/// A full beat: poll, handle_sent, handle_response_ref, poll.
fn beat(l: &mut Lease, n: u32) {
    for _ in 0..n {
        let (id, due) = l.poll();
        l.hb.handle_sent(id, due).expect("sent");
        let d =
            l.hb.handle_response_ref(id, ResponseRef::new(200, black_box(EXTEND)), due + 100 * MS)
                .expect("decided");
        black_box(d);
        black_box(l.hb.poll_action());
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let rounds: usize = std::env::var("BENCH_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(41);
    let n: u32 = std::env::var("BENCH_N")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(20_000);
    // BENCH_ONLY=floor|primary|beat runs one operation n times (for a
    // profiler or callgrind) and prints nothing else.
    if let Ok(only) = std::env::var("BENCH_ONLY") {
        match only.as_str() {
            "floor" => floor(n),
            "primary" => primary(&mut Lease::new(seq), n),
            "primary_owned" => primary_owned(&mut Lease::new(seq), n),
            "beat" => beat(&mut Lease::new(uuid), n),
            other => panic!("BENCH_ONLY={other}: floor, primary, primary_owned or beat"),
        }
        return;
    }
    let mut seq_lease = Lease::new(seq);
    let mut uuid_lease = Lease::new(uuid);
    // Warm up.
    floor(n);
    primary(&mut seq_lease, n);
    beat(&mut uuid_lease, n);
    let mut times: [Vec<f64>; 3] = Default::default();
    for r in 0..rounds {
        for k in 0..3 {
            let which = (r + k) % 3;
            let t = Instant::now();
            match which {
                0 => floor(n),
                1 => primary(&mut seq_lease, n),
                _ => beat(&mut uuid_lease, n),
            }
            times[which].push(t.elapsed().as_nanos() as f64 / f64::from(n));
        }
    }
    let [f, p, b] = times.map(median);
    println!(
        "interleaved medians over {rounds} rounds of {n} ops: floor {f:.1} ns, primary {p:.1} ns ({:.3}x), beat_uuid {b:.1} ns ({:.3}x)",
        p / f,
        b / f
    );
    for (id, what, v) in [
        (
            "rust.floor_value",
            "serde_json::Value parse of the extend body",
            f,
        ),
        (
            "rust.primary",
            "handle_sent + handle_response_ref(200 extend body) + poll_action, SequentialKeys",
            p,
        ),
        (
            "rust.beat_uuid",
            "poll + handle_sent + handle_response_ref + poll, UUIDv4 keys",
            b,
        ),
    ] {
        println!(
            "BENCH {{\"id\": \"{id}\", \"what\": \"{what}\", \"value\": {v:.1}, \"unit\": \"ns\"}}"
        );
    }
}
