//! `rust.lease_bytes`: the memory one lease keeps, `size_of::<Heartbeat>()`
//! plus its heap, after the create and 1,000 extensions (UUIDv4 keys, the
//! default). A counting global allocator measures the heap: live bytes after
//! minus live bytes before (the thread's random generator is warmed first,
//! it is per thread, not per lease). Not a test; `scripts/bench-rust.sh`
//! prints its BENCH line.

use leasebeat::{Action, Config, Heartbeat, KeySource, Response, UuidV4Keys};

mod common {
    pub mod counting_alloc;
}
use common::counting_alloc::live_bytes as live;

const MS: u64 = 1_000_000;
const CREATE: &[u8] = br#"{"decision":"ALLOW","reservation_id":"r-1","affected_scopes":["tenant:acme"],"expires_at_ms":1785585660000,"remaining_ttl_ms":61500}"#;
const EXTEND: &[u8] =
    br#"{"status":"ACTIVE","expires_at_ms":1785585720000,"remaining_ttl_ms":60000}"#;

/// Heap bytes of one lease after the create and `beats` extensions.
/// (The configuration is made after the first reading: its create request
/// counts as the lease's.)
fn lease_heap(config: impl FnOnce() -> Config, beats: u32) -> (isize, isize) {
    let base = live();
    let mut hb = Heartbeat::new(config()).expect("config");
    let id = hb.attempt().expect("create").id;
    hb.handle_sent(id, 0).expect("sent");
    drop(
        hb.handle_response(id, Response::new(200).body(CREATE), 1_500 * MS)
            .expect("create ok"),
    );
    let after_create = live() - base;
    for _ in 0..beats {
        let (id, due) = match hb.poll_action() {
            Action::Send(a) => (a.id, a.due_ns.expect("finite")),
            other => panic!("unexpected {other:?}"),
        };
        hb.handle_sent(id, due).expect("sent");
        drop(
            hb.handle_response(id, Response::new(200).body(EXTEND), due + 100 * MS)
                .expect("decided"),
        );
    }
    let after = live() - base;
    drop(hb);
    (after_create, after)
}

fn main() {
    // Warm the per-thread generator (not per lease).
    let _ = UuidV4Keys.next_key();
    let size = std::mem::size_of::<Heartbeat>();
    let (after_create, after) = lease_heap(|| Config::new(60_000, Some(10_000)), 1_000);
    // The same with a 2.5 KB create request (the issue's measurement had one).
    let big = || {
        let mut c = Config::new(60_000, Some(10_000));
        c.create_request.insert(
            "subject".into(),
            serde_json::json!({"tenant": "acme", "pad": "x".repeat(2_500)}),
        );
        c
    };
    let (big_create, big_after) = lease_heap(big, 1_000);
    println!(
        "with a 2.5 KB create_request: heap {big_create} after the create, {big_after} after 1,000 beats (size_of {size})"
    );
    let total = size as isize + after;
    println!(
        "lease bytes: size_of::<Heartbeat>() {size} + heap {after} after create and 1,000 beats = {total} (heap after the create alone: {after_create}; size_of::<leasebeat::Decision>() {})",
        std::mem::size_of::<leasebeat::Decision>()
    );
    println!(
        "BENCH {{\"id\": \"rust.lease_bytes\", \"what\": \"one lease: size_of::<Heartbeat>() + heap after create + 1,000 beats\", \"value\": {total}, \"unit\": \"bytes\"}}"
    );
}
