//! Settlement journal throughput (issue 26): durable records per second, bytes per pending
//! record. Not a test; `cargo bench -p leasebeat --bench journal` (feature `journal`).
//!
//! Every `write` is one fsync of the record's temporary file plus one of the directory
//! (J-1), so the figures are the file system's fsync rate on this machine. Cases:
//!
//! * `write`: one record written per commit (the state change before the first request),
//!   1 thread;
//! * `commit_cycle`: write, then remove (a settled commit: J-1 then J-5), 1 thread;
//! * `commit_cycle_xT`: the same from T threads at once (a runner settling many leases:
//!   the file system's journal groups their fsyncs);
//! * `commit_cycle_batchB`: batches of B records through `write_batch` (group commit: the
//!   same fsync per record, one directory fsync per batch), then each removed, 1 thread;
//! * `commit_cycle_x4_batch64`: 4 threads, each with batches of 64;
//! * bytes per pending record: the file's size for a typical record, and the disk blocks
//!   it takes.
//!
//! `JOURNAL_BENCH_DIR` (default: a temporary directory under `target/`) picks the file
//! system; `JOURNAL_BENCH_N` the records per case (default 2000; at most 256 for the two
//! single-record cases, which are bound by one fsync's latency).

use std::path::PathBuf;
use std::time::Instant;

use leasebeat::journal::{Journal, JournalRecord, record_file_name};

const URL: &str = "https://cycles.example.com";

fn body(i: usize) -> String {
    format!(
        concat!(
            r#"{{"idempotency_key":"7f0c1f9e-2b1a-4c55-9d7e-{:012x}","#,
            r#""actual":{{"unit":"USD_MICROCENTS","amount":{}}},"#,
            r#""metrics":{{"tokens_input":1200,"tokens_output":380,"latency_ms":2210,"model_version":"gpt-x-2026-11"}},"#,
            r#""metadata":{{"run":"nightly-eval"}}}}"#
        ),
        i,
        1_000_000 + i
    )
}

fn event_body(i: usize) -> String {
    format!(
        concat!(
            r#"{{"idempotency_key":"7f0c1f9e-2b1a-4c55-9d7e-{:012x}","#,
            r#""subject":{{"tenant":"acme","workspace":"prod","app":"agent"}},"#,
            r#""action":{{"kind":"llm.completion","name":"gpt-x"}},"#,
            r#""actual":{{"unit":"USD_MICROCENTS","amount":{}}}}}"#
        ),
        i,
        1_000_000 + i
    )
}

fn record(i: usize) -> JournalRecord {
    JournalRecord::commit(
        format!("rsv_01JD{i:020}"),
        URL,
        body(i),
        Some(event_body(i)),
        1_785_585_600_000,
    )
}

fn main() {
    let n: usize = std::env::var("JOURNAL_BENCH_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    let root = std::env::var_os("JOURNAL_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"));
    std::fs::create_dir_all(&root).unwrap();
    let tmp = tempfile::tempdir_in(&root).unwrap();
    let j = Journal::open(tmp.path(), URL, "bench-key", Some("acme")).unwrap();
    let records: Vec<_> = (0..n).map(record).collect();

    // Bytes per pending record.
    j.write(&records[0]).unwrap();
    let path = j.dir().join(record_file_name(&records[0].reservation_id));
    let meta = std::fs::metadata(&path).unwrap();
    let blocks = {
        use std::os::unix::fs::MetadataExt;
        meta.blocks() * 512
    };
    println!(
        "journal.bytes_per_record {} (file size; {} B of disk blocks; id {} chars, commit body {} B, event body {} B)",
        meta.len(),
        blocks,
        records[0].reservation_id.len(),
        records[0].commit_body.as_ref().unwrap().len(),
        records[0].event_fallback_body.as_ref().unwrap().len()
    );
    j.remove(&records[0].reservation_id).unwrap();

    // One thread, one record at a time: fsync-latency bound and steady, so fewer records.
    let single = &records[..n.min(256)];
    let t = Instant::now();
    for r in single {
        j.write(r).unwrap();
    }
    report("write", single.len(), t);
    for r in single {
        j.remove(&r.reservation_id).unwrap();
    }

    let t = Instant::now();
    for r in single {
        j.write(r).unwrap();
        j.remove(&r.reservation_id).unwrap();
    }
    report("commit_cycle", single.len(), t);

    // Group commit: batches through write_batch (one fsync per record, one of the
    // directory per batch), then each removed.
    for batch in [16usize, 64, 256] {
        let t = Instant::now();
        for chunk in records.chunks(batch) {
            for r in j.write_batch(chunk) {
                r.unwrap();
            }
            for r in chunk {
                j.remove(&r.reservation_id).unwrap();
            }
        }
        report(&format!("commit_cycle_batch{batch}"), n, t);
    }

    for threads in [4usize, 16] {
        let t = Instant::now();
        std::thread::scope(|s| {
            for k in 0..threads {
                let j = j.clone();
                let records = &records;
                s.spawn(move || {
                    for r in records.iter().skip(k).step_by(threads) {
                        j.write(r).unwrap();
                        j.remove(&r.reservation_id).unwrap();
                    }
                });
            }
        });
        report(&format!("commit_cycle_x{threads}"), n, t);
    }
    // Both: 4 threads, each settling batches of 64.
    let t = Instant::now();
    std::thread::scope(|s| {
        for k in 0..4 {
            let j = j.clone();
            let mine: Vec<JournalRecord> = records.iter().skip(k).step_by(4).cloned().collect();
            s.spawn(move || {
                for chunk in mine.chunks(64) {
                    for r in j.write_batch(chunk) {
                        r.unwrap();
                    }
                    for r in chunk {
                        j.remove(&r.reservation_id).unwrap();
                    }
                }
            });
        }
    });
    report("commit_cycle_x4_batch64", n, t);
    println!(
        "journal: {} ({})",
        j.dir().display(),
        std::env::var("JOURNAL_BENCH_DIR").unwrap_or_else(|_| "target/".into())
    );
}

fn report(case: &str, n: usize, t: Instant) {
    let s = t.elapsed().as_secs_f64();
    println!(
        "journal.{case} {:.0} records/s ({n} records in {:.3} s, {:.1} us each)",
        n as f64 / s,
        s,
        s * 1e6 / n as f64
    );
}
