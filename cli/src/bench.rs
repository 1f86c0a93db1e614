//! `leasebeat bench-driver` (hidden): one driver process heartbeating many
//! leases against a running `leasebeat serve`, measuring beat lateness,
//! throughput, memory per lease and unreported lapses. A benchmark, not a
//! test: `scripts/bench-driver.sh` starts the server and this.

use std::collections::HashMap;
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use leasebeat::driver::{ApiKey, Driver, DriverConfig, Event};
use leasebeat::{AttemptKind, Config, OutcomeClass};
use serde_json::json;

/// Options of the benchmark.
#[derive(Clone, Debug)]
pub struct BenchOptions {
    /// Base URL of the server.
    pub url: String,
    /// Leases to run.
    pub leases: usize,
    /// TTL (ms).
    pub ttl_ms: u64,
    /// Request budget (ms).
    pub budget_ms: u64,
    /// Length of the run (s), ramp-up included.
    pub seconds: u64,
    /// Worker threads of the driver.
    pub workers: usize,
    /// The server's stdout (its `LAPSE ...` lines), read at the end. The
    /// server must map its clock onto the wall clock (`--epoch-ms` = Unix
    /// ms at its start) so that expiries compare with this process's
    /// wall-clock times. Without it (or when the file is not a `leasebeat
    /// serve` stdout) the line says `lapses=not_measured
    /// unreported=not_measured`.
    pub lapse_file: Option<std::path::PathBuf>,
    /// Live heap bytes, when the process counts its allocations
    /// (`cli/examples/bench_heap.rs`): adds `heap_bytes_per_lease`.
    pub heap_live: Option<fn() -> u64>,
}

fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn rss_bytes() -> u64 {
    // /proc/self/statm: size resident ... (pages)
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

fn pct(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)] as f64 / 1e6
}

/// CPU seconds (user + system) used so far by this process's threads, by
/// thread kind: (`leasebeat-timer`, `leasebeat-worker-*`, every other thread).
fn thread_cpu_s() -> (f64, f64, f64) {
    // /proc/self/task/<tid>/stat fields 14 and 15 (utime, stime) in clock
    // ticks; USER_HZ is 100 on Linux.
    const TICKS: f64 = 100.0;
    let (mut timer, mut workers, mut other) = (0.0, 0.0, 0.0);
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return (0.0, 0.0, 0.0);
    };
    for entry in dir.flatten() {
        let path = entry.path();
        let comm = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
        let stat = std::fs::read_to_string(path.join("stat")).unwrap_or_default();
        // Fields after the ")" that closes the command name.
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
            continue;
        };
        let f: Vec<&str> = rest.split_whitespace().collect();
        // rest starts at field 3 (state): utime is field 14, stime 15.
        let ticks = |i: usize| {
            f.get(i - 3)
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        let s = (ticks(14) + ticks(15)) / TICKS;
        let comm = comm.trim();
        if comm == "leasebeat-timer" {
            timer += s;
        } else if comm.starts_with("leasebeat-worke") {
            workers += s;
        } else {
            other += s;
        }
    }
    (timer, workers, other)
}

/// The configuration of every lease of the benchmark.
pub fn lease_config(ttl_ms: u64, budget_ms: u64) -> Config {
    let mut config = Config::new(ttl_ms, Some(budget_ms));
    config.create_request = json!({
        "subject": {"tenant": "bench"},
        "action": {"kind": "job", "name": "bench"},
        "estimate": {"unit": "TOKENS", "amount": 1}
    })
    .as_object()
    .cloned()
    .unwrap_or_default();
    config
}

/// Runs the benchmark and prints its line. Exit status 0.
pub fn run(opts: BenchOptions) -> std::process::ExitCode {
    let mut dc = DriverConfig::new(opts.url.clone(), ApiKey::new("bench-key"));
    // The bench settles nothing: no journal.
    dc.journal = leasebeat::driver::JournalOptions::disabled();
    dc.max_workers = opts.workers.max(1);
    let (driver, events) = match Driver::new(dc) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("bench-driver: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let config = lease_config(opts.ttl_ms, opts.budget_ms);
    let t0 = Instant::now();
    let end = t0 + Duration::from_secs(opts.seconds);
    let rss0 = rss_bytes();
    let heap = |f: Option<fn() -> u64>| f.map_or(0, |f| f());
    let heap0 = heap(opts.heap_live);
    let mut heap_after_ramp = 0u64;
    // First jeopardy or stop of each reservation (wall ms when seen here;
    // every such event after the create carries the reservation id).
    let mut reported: HashMap<String, u64> = HashMap::new();
    for _ in 0..opts.leases {
        if let Err(e) = driver.start(config.clone()) {
            eprintln!("bench-driver: {e}");
            return std::process::ExitCode::from(2);
        }
    }
    let mut created = 0usize;
    let mut create_failed = 0usize;
    let mut ramp_done: Option<Instant> = None;
    let mut rss_after_ramp = 0u64;
    let mut late_ns: Vec<u64> = Vec::new();
    // How early beats went out (the timer sends ahead by its slack).
    let mut early_ns: Vec<u64> = Vec::new();
    let mut beats_after_ramp = 0u64;
    let mut jeopardies = 0u64;
    let mut stops = 0u64;
    let mut stop_reasons: std::collections::BTreeMap<&'static str, u64> = Default::default();
    let mut jeopardy_reasons: std::collections::BTreeMap<&'static str, u64> = Default::default();
    loop {
        let now = Instant::now();
        if now >= end {
            break;
        }
        let event = match events.recv_timeout((end - now).min(Duration::from_millis(100))) {
            Ok(e) => e,
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => break,
        };
        match event {
            Event::Decision {
                attempt, decision, ..
            } => {
                let Some(a) = attempt else { continue };
                match a.kind {
                    AttemptKind::Create => {
                        if decision.outcome == OutcomeClass::Success {
                            created += 1;
                        } else if decision.stop_reason().is_some() {
                            create_failed += 1;
                        }
                        if created + create_failed == opts.leases && ramp_done.is_none() {
                            ramp_done = Some(Instant::now());
                            rss_after_ramp = rss_bytes();
                            heap_after_ramp = heap(opts.heap_live);
                        }
                    }
                    AttemptKind::Extend => {
                        if ramp_done.is_some() {
                            beats_after_ramp += 1;
                            if let Some(due) = a.due_ns {
                                late_ns.push(a.sent_ns.saturating_sub(due));
                                early_ns.push(due.saturating_sub(a.sent_ns));
                            }
                        }
                    }
                }
            }
            Event::Jeopardy {
                reservation_id,
                reason,
                ..
            } => {
                jeopardies += 1;
                *jeopardy_reasons.entry(reason.as_str()).or_insert(0) += 1;
                if let Some(id) = reservation_id {
                    reported.entry(id).or_insert_with(wall_ms);
                }
            }
            Event::Stopped {
                reservation_id,
                reason,
                ..
            } => {
                stops += 1;
                *stop_reasons.entry(reason.as_str()).or_insert(0) += 1;
                if let Some(id) = reservation_id {
                    reported.entry(id).or_insert_with(wall_ms);
                }
            }
            Event::Error { .. }
            | Event::HeartbeatFailure { .. }
            | Event::Settlement { .. }
            | Event::Settled { .. }
            | Event::Journal { .. } => {}
        }
    }
    let (cpu_timer, cpu_workers, cpu_other) = thread_cpu_s();
    let run_s = t0.elapsed().as_secs_f64().max(1e-9);
    let rss_end = if rss_after_ramp > 0 {
        rss_after_ramp
    } else {
        rss_bytes()
    };
    let ramp_s = ramp_done.map(|r| r.duration_since(t0).as_secs_f64());
    let after_ramp_s = ramp_done.map_or(0.0, |r| end.saturating_duration_since(r).as_secs_f64());
    let end_wall = wall_ms();
    // Give the server's lapse monitor a moment, then read its lapses.
    std::thread::sleep(Duration::from_millis(200));
    // Lapses are measured only from a lapse log: the stdout of a `leasebeat
    // serve` (its first line `listening on ...`, then one `LAPSE ...` line
    // per lapse), or a file of `LAPSE` lines that says it is one (a line
    // `# lapse log ...`: the real-server stage's Redis poller). Without one (another server, e.g. the real Cycles server,
    // which keeps no such log) nothing was measured: say so, never 0.
    let lapse_log = opts
        .lapse_file
        .as_ref()
        .map(|path| std::fs::read_to_string(path).unwrap_or_default())
        .filter(|text| {
            text.lines()
                .any(|l| l.starts_with("listening on ") || l.starts_with("# lapse log"))
        });
    let mut lapses = 0u64;
    let mut unreported = 0u64;
    // How long before its expiry each lapsed lease was reported (ms; reported ones only).
    let mut report_lead_ms: Vec<u64> = Vec::new();
    if let Some(text) = &lapse_log {
        for line in text.lines().filter(|l| l.starts_with("LAPSE ")) {
            let field = |name: &str| {
                line.split_whitespace()
                    .find_map(|kv| kv.strip_prefix(name))
                    .map(str::to_owned)
            };
            let (Some(id), Some(exp)) = (
                field("reservation_id="),
                field("expires_at_ms=").and_then(|e| e.parse::<u64>().ok()),
            ) else {
                continue;
            };
            if exp > end_wall {
                continue;
            }
            lapses += 1;
            match reported.get(&id) {
                Some(t) if *t <= exp => report_lead_ms.push(exp - *t),
                _ => unreported += 1,
            }
        }
    }
    late_ns.sort_unstable();
    early_ns.sort_unstable();
    let per_lease = rss_end.saturating_sub(rss0) / opts.leases.max(1) as u64;
    let (lapses, unreported) = match lapse_log {
        Some(_) => (lapses.to_string(), unreported.to_string()),
        None => ("not_measured".to_owned(), "not_measured".to_owned()),
    };
    println!(
        "leases={} beats_per_s={:.0} late_p50_ms={:.3} late_p99_ms={:.3} rss_bytes_per_lease={} lapses={} unreported={} created={} create_failed={} ramp_s={} jeopardy={} stops={} cpu_timer_pct={:.1} cpu_workers_pct={:.1} cpu_other_pct={:.1}",
        opts.leases,
        if after_ramp_s > 0.0 {
            beats_after_ramp as f64 / after_ramp_s
        } else {
            0.0
        },
        pct(&late_ns, 0.5),
        pct(&late_ns, 0.99),
        per_lease,
        lapses,
        unreported,
        created,
        create_failed,
        ramp_s.map_or("never".into(), |r| format!("{r:.1}")),
        jeopardies,
        stops,
        100.0 * cpu_timer / run_s,
        100.0 * cpu_workers / run_s,
        100.0 * cpu_other / run_s,
    );
    println!(
        "late_p999_ms={:.3} late_max_ms={:.3} early_p50_ms={:.3} early_p99_ms={:.3} early_max_ms={:.3}",
        pct(&late_ns, 0.999),
        pct(&late_ns, 1.0),
        pct(&early_ns, 0.5),
        pct(&early_ns, 0.99),
        pct(&early_ns, 1.0),
    );
    if opts.heap_live.is_some() {
        let heap_end = heap(opts.heap_live);
        println!(
            "heap_bytes_per_lease={} heap_bytes_per_lease_at_end={}",
            heap_after_ramp.saturating_sub(heap0) / opts.leases.max(1) as u64,
            heap_end.saturating_sub(heap0) / opts.leases.max(1) as u64,
        );
    }
    if !report_lead_ms.is_empty() {
        report_lead_ms.sort_unstable();
        let q = |p: f64| report_lead_ms[((report_lead_ms.len() - 1) as f64 * p).round() as usize];
        println!(
            "reported_lapses={} report_lead_ms_min={} report_lead_ms_p50={} report_lead_ms_max={}",
            report_lead_ms.len(),
            q(0.0),
            q(0.5),
            q(1.0),
        );
    }
    if !stop_reasons.is_empty() || !jeopardy_reasons.is_empty() {
        println!("stop_reasons={stop_reasons:?} jeopardy_reasons={jeopardy_reasons:?}");
    }
    // Cancels every lease (each reports a stop) and joins the threads.
    drop(events);
    driver.shutdown();
    std::process::ExitCode::SUCCESS
}
