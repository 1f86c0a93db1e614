//! Cold-memory footprint of one primary decision (issue 15, the JVM target):
//! not a test and not part of `scripts/bench-rust.sh`. It builds `COLD_N`
//! heartbeats (default 50,000: more than any last-level cache holds) in the
//! state of `core/benches/heartbeat.rs`'s primary decision (create answered
//! 200, first extend in flight, SequentialKeys("k")), then runs
//! `handle_response_ref(200 extend body)` + `poll_action` once on each, in
//! creation order, inside `decide_all`. Run it under
//! `valgrind --tool=callgrind --cache-sim=yes --toggle-collect=*decide_all*`
//! (or cachegrind): the D1 / LL read and write misses of `decide_all`
//! divided by `COLD_N` are the cache lines one decision on a cold heartbeat
//! touches, deterministically. Without valgrind it prints ns per decision
//! (thread CPU time, the caches flushed first).
//!
//! `COLD_MODE`:
//! * `vec` (default): the heartbeats side by side in one `Vec`, made one
//!   after the other (as `nativeBenchPrepare` / the criterion bench);
//! * `boxed`: each in its own `Box<Mutex<Heartbeat>>` right after it is made
//!   (a binding's handle), the create answered through the box;
//! * `uuid`: as `boxed`, with the default UUIDv4 keys (production).
//!
//! `COLD_OWNED=1`: the owned `handle_response(Response)` (clones the
//! decision) instead of `handle_response_ref`.
//!
//! `COLD_SCATTER=1`: the heap is fragmented first (small blocks allocated,
//! every other one freed, in a shuffled order), as in a process that has
//! been running for a while (a JVM, a driver with leases coming and going):
//! a heartbeat's small blocks then lie apart from each other, each on its
//! own cache line. `COLD_SHUFFLE=1`: the decisions visit the heartbeats in a
//! shuffled order (a driver's timer order) instead of creation order, which
//! a hardware prefetcher can follow.

use std::hint::black_box;
use std::sync::Mutex;
use std::time::Instant;

use leasebeat::{Config, Heartbeat, KeySource, Response, ResponseRef, SequentialKeys, UuidV4Keys};

const MS: u64 = 1_000_000;
const CREATE: &[u8] = br#"{"decision":"ALLOW","reservation_id":"r-1","affected_scopes":["tenant:acme"],"expires_at_ms":1785585660000,"remaining_ttl_ms":61500}"#;
const EXTEND: &[u8] =
    br#"{"status":"ACTIVE","expires_at_ms":1785585720000,"remaining_ttl_ms":60000}"#;

fn keys(uuid: bool) -> Box<dyn KeySource> {
    if uuid {
        Box::new(UuidV4Keys)
    } else {
        Box::new(SequentialKeys::new("k"))
    }
}

/// Created, the create answered 200, the first extend sent; its id.
fn to_in_flight(hb: &mut Heartbeat) -> u64 {
    let id = hb.attempt().expect("create").id;
    hb.handle_sent(id, 0).expect("sent");
    hb.handle_response_ref(id, ResponseRef::new(200, CREATE), 1_500 * MS)
        .expect("create ok");
    let id = hb.attempt().expect("extend").id;
    hb.handle_sent(id, 38_500 * MS).expect("sent");
    id
}

fn new_hb(uuid: bool) -> Heartbeat {
    Heartbeat::with_key_source(Config::new(60_000, Some(10_000)), keys(uuid)).expect("config")
}

#[inline(always)]
fn decide(hb: &mut Heartbeat, id: u64, owned: bool) {
    if owned {
        let d = hb.handle_response(id, Response::new(200).body(EXTEND), 38_600 * MS);
        black_box(&d);
    } else {
        let d = hb
            .handle_response_ref(id, ResponseRef::new(200, EXTEND), 38_600 * MS)
            .map(|_| ());
        black_box(&d);
    }
    black_box(hb.poll_action());
}

#[inline(never)]
fn decide_all(hbs: &mut [(Heartbeat, u64)], order: &[usize], owned: bool) {
    for &i in order {
        let (hb, id) = &mut hbs[i];
        decide(hb, *id, owned);
    }
}

#[inline(never)]
fn decide_all_boxed(hbs: &[(Box<Mutex<Heartbeat>>, u64)], order: &[usize], owned: bool) {
    for &i in order {
        let (h, id) = &hbs[i];
        let mut hb = h.lock().expect("lock");
        decide(&mut hb, *id, owned);
    }
}

/// A small deterministic generator (xorshift64*).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, below: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) as usize % below
    }

    fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            v.swap(i, self.next(i + 1));
        }
    }
}

/// Fragments the heap: `n * 8` small blocks of 16..=160 bytes, every other
/// one (in a shuffled order) freed; the rest are returned to be kept alive.
fn scatter(n: usize, rng: &mut Lcg) -> Vec<Vec<u8>> {
    let mut blocks: Vec<Vec<u8>> = (0..n * 8)
        .map(|_| vec![1u8; 16 * (1 + rng.next(10))])
        .collect();
    rng.shuffle(&mut blocks);
    blocks.truncate(n * 4);
    blocks
}

fn flush() {
    let mut junk = vec![0u8; 64 << 20];
    for (i, b) in junk.iter_mut().enumerate().step_by(64) {
        *b = i as u8;
    }
    black_box(&junk);
}

fn main() {
    let n: usize = std::env::var("COLD_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50_000);
    let mode = std::env::var("COLD_MODE").unwrap_or_else(|_| "vec".into());
    let flag = |name: &str| std::env::var(name).is_ok_and(|v| v == "1");
    let owned = flag("COLD_OWNED");
    let mut rng = Lcg(0x9e37_79b9_7f4a_7c15);
    let kept = if flag("COLD_SCATTER") {
        scatter(n, &mut rng)
    } else {
        Vec::new()
    };
    let mut order: Vec<usize> = (0..n).collect();
    if flag("COLD_SHUFFLE") {
        rng.shuffle(&mut order);
    }
    let t = match mode.as_str() {
        "vec" => {
            let mut hbs: Vec<(Heartbeat, u64)> = Vec::with_capacity(n);
            for _ in 0..n {
                let mut hb = new_hb(false);
                let id = to_in_flight(&mut hb);
                hbs.push((hb, id));
            }
            flush();
            let t0 = Instant::now();
            decide_all(&mut hbs, &order, owned);
            t0.elapsed()
        }
        "boxed" | "uuid" => {
            let hbs: Vec<(Box<Mutex<Heartbeat>>, u64)> = (0..n)
                .map(|_| {
                    let h = Box::new(Mutex::new(new_hb(mode == "uuid")));
                    let id = to_in_flight(&mut h.lock().expect("lock"));
                    (h, id)
                })
                .collect();
            flush();
            let t0 = Instant::now();
            decide_all_boxed(&hbs, &order, owned);
            t0.elapsed()
        }
        other => panic!("unknown COLD_MODE {other}"),
    };
    black_box(&kept);
    println!(
        "cold mode={mode} owned={owned} scatter={} shuffle={} n={n}: {:.1} ns per decision",
        !kept.is_empty(),
        flag("COLD_SHUFFLE"),
        t.as_nanos() as f64 / n as f64
    );
}
