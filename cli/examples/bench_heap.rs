//! `leasebeat bench-driver` with a counting global allocator, so the line
//! also carries `heap_bytes_per_lease`: the live heap (bytes requested from
//! the allocator and not yet freed) grown from before the first start to the
//! end of the ramp-up, per lease. `scripts/bench-driver.sh` runs this instead
//! of the `leasebeat` binary when `BENCH_HEAP=1`. A measuring tool: the
//! counter is one relaxed atomic add per allocation and per free.
//!
//! Usage: bench_heap URL LEASES TTL_MS BUDGET_MS SECONDS WORKERS [LAPSE_FILE]

#[path = "../../core/benches/common/counting_alloc.rs"]
mod counting_alloc;

fn live() -> u64 {
    counting_alloc::live_bytes().max(0) as u64
}

/// The core's share: size_of + live heap of one `Heartbeat` with the
/// benchmark's configuration after a create and two beats answered the way
/// `leasebeat serve` answers (averaged over 1,000 heartbeats).
fn core_share(ttl_ms: u64, budget_ms: u64) {
    use leasebeat::{Heartbeat, Response};
    const N: usize = 1_000;
    let config = leasebeat_cli::bench::lease_config(ttl_ms, budget_ms);
    let mut v: Vec<Heartbeat> = Vec::with_capacity(N);
    let before = live();
    for i in 0..N {
        let mut hb = Heartbeat::new(config.clone()).expect("valid config");
        let id = hb.attempt().expect("create").id;
        hb.handle_sent(id, 1).expect("sent");
        let create = format!(
            r#"{{"affected_scopes":["tenant:sim"],"decision":"ALLOW","expires_at_ms":1700000005537,"remaining_ttl_ms":{ttl_ms},"reservation_id":"rsv-{i}","reserved":{{"amount":1,"unit":"TOKENS"}}}}"#
        );
        hb.handle_response(id, Response::new(200).body(create.as_bytes()), 2_000_000)
            .expect("decided");
        for b in 0..2u64 {
            let a = hb.attempt().expect("extend");
            let (id, due) = (a.id, a.due_ns.expect("due"));
            hb.handle_sent(id, due).expect("sent");
            let body = format!(
                r#"{{"expires_at_ms":{},"remaining_ttl_ms":{ttl_ms},"reservation_id":"rsv-{i}","status":"ACTIVE"}}"#,
                1_700_000_010_000 + b * ttl_ms
            );
            hb.handle_response(
                id,
                Response::new(200).body(body.as_bytes()),
                due + 1_000_000,
            )
            .expect("decided");
        }
        v.push(hb);
    }
    let heap = (live() - before) as usize / N;
    let inline = std::mem::size_of::<Heartbeat>();
    println!(
        "core_heartbeat_bytes={} (size_of {inline} + heap {heap})",
        inline + heap
    );
}

fn main() -> std::process::ExitCode {
    let a: Vec<String> = std::env::args().skip(1).collect();
    if a.len() < 6 {
        eprintln!("usage: bench_heap URL LEASES TTL_MS BUDGET_MS SECONDS WORKERS [LAPSE_FILE]");
        return std::process::ExitCode::from(2);
    }
    let n = |i: usize| a[i].parse::<u64>().expect("a number");
    core_share(n(2), n(3));
    leasebeat_cli::bench::run(leasebeat_cli::bench::BenchOptions {
        url: a[0].clone(),
        leases: n(1) as usize,
        ttl_ms: n(2),
        budget_ms: n(3),
        seconds: n(4),
        workers: n(5) as usize,
        lapse_file: a.get(6).map(Into::into),
        heap_live: Some(live),
    })
}
