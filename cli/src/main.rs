//! `leasebeat`: the command-line face of the leasebeat scheduler.
#![forbid(unsafe_code)]

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use leasebeat::driver::ApiKey;
use leasebeat::sim::Policy;
use leasebeat_cli::{bench, demo, run, serve, simulate};

mod replay;

/// Lease-heartbeat scheduling for Cycles reservations.
#[derive(Parser, Debug)]
#[command(name = "leasebeat", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Replay scenario vectors through the public API and check every expectation.
    ///
    /// Prints one line per scenario (pass, or the first mismatch), then
    /// `N passed, M failed`. Exit status: 0 when all pass, 1 when one fails,
    /// 2 when a file cannot be read or parsed.
    Replay {
        /// Print every decision as one JSON line instead of checking.
        #[arg(long)]
        emit: bool,
        /// Scenario files (JSON).
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Run a reference Cycles server (create, extend, commit, release).
    ///
    /// Prints `listening on http://ADDR` on stdout first, then one
    /// `LAPSE ...` line for every reservation that expires while still
    /// ACTIVE (neither committed nor released). Runs until SIGINT/SIGTERM,
    /// then prints `summary leases=N extensions=N lapses=N refused=N`.
    /// Default policy: additive extensions, no limits.
    Serve {
        /// Address to bind.
        #[arg(long, default_value = "127.0.0.1:0")]
        bind: std::net::SocketAddr,
        /// Per-extension grant cap (ms): each extension adds at most this.
        #[arg(long)]
        grant_cap_ms: Option<u64>,
        /// Maximum lead (ms): an extension never moves expiry beyond now + this.
        #[arg(long)]
        max_lead_ms: Option<u64>,
        /// Cap on the initial TTL (ms): a create's ttl_ms is reduced to this.
        #[arg(long)]
        initial_ttl_cap_ms: Option<u64>,
        /// Maximum extensions per reservation (then 409 MAX_EXTENSIONS_EXCEEDED).
        #[arg(long)]
        max_extensions: Option<u32>,
        /// Omit remaining_ttl_ms from responses (an older server).
        #[arg(long)]
        omit_remaining: bool,
        #[arg(long = "fault", value_name = "RULE", long_help = serve::FAULT_HELP)]
        /// Inject a fault (see --help for the grammar).
        faults: Vec<String>,
        /// Seed for probabilistic faults.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Append every request (and lapse) as one JSON line to this file.
        #[arg(long)]
        log: Option<PathBuf>,
        /// Accept only this X-Cycles-API-Key (default: any non-empty key).
        #[arg(long)]
        api_key: Option<String>,
        /// Epoch (ms) onto which the server's monotonic clock is mapped.
        #[arg(long, default_value_t = serve::DEFAULT_EPOCH_MS)]
        epoch_ms: u64,
        /// Most connections at once; beyond, a connection gets 503 and is closed.
        #[arg(long, default_value_t = 2048)]
        max_connections: usize,
        /// Most request-body bytes buffered at once; beyond, a request gets 503.
        #[arg(long, default_value_t = 64 * 1024 * 1024)]
        max_buffered_bytes: usize,
        /// How long (ms) a lapsed or finalized reservation is remembered after expiry.
        #[arg(long, default_value_t = 600_000)]
        retention_ms: u64,
        /// Most idempotency records held (creates, extensions, commits,
        /// releases; with their reservations, until --retention-ms after
        /// expiry).
        ///
        /// A request that would store one more is refused with 503 and an
        /// ErrorResponse body (error INTERNAL_ERROR, "server busy: the
        /// idempotency store is full ...") and changes nothing; a same-key
        /// replay of a stored record is still answered. 503, not 429: a
        /// client retries a 5xx create once with the same key, while a 429
        /// on create stops it at once.
        #[arg(long = "max-idempotency-records", value_name = "N", default_value_t = serve::DEFAULT_MAX_STORE_RECORDS)]
        max_store_records: usize,
        /// Most bytes the idempotency store holds (records' keys, requests,
        /// responses and a fixed overhead per record and reservation);
        /// beyond, 503 as for --max-idempotency-records.
        #[arg(long = "max-idempotency-bytes", value_name = "BYTES", default_value_t = serve::DEFAULT_MAX_STORE_BYTES)]
        max_store_bytes: usize,
    },
    /// Heartbeat one reservation against a Cycles server, printing each
    /// decision as one JSON line, until the heartbeat stops or Ctrl-C.
    ///
    /// On Ctrl-C (SIGINT or SIGTERM) it cancels the heartbeat; when the
    /// heartbeat has stopped it releases the reservation (unless
    /// --no-release). Exit status: 0 after a cancel, 1 after any other stop,
    /// 2 on bad arguments.
    Run {
        /// Base URL of the server, e.g. http://127.0.0.1:8080.
        #[arg(long)]
        url: String,
        /// API key; defaults to the LEASEBEAT_API_KEY environment variable.
        #[arg(long)]
        api_key: Option<String>,
        /// Create a reservation and heartbeat it: the create request as JSON
        /// (subject, action, estimate, ...), without idempotency_key and ttl_ms.
        #[arg(
            long,
            required_unless_present = "reservation",
            conflicts_with = "reservation"
        )]
        create: Option<String>,
        /// Heartbeat an existing reservation (its first beat is an immediate extension).
        #[arg(long)]
        reservation: Option<String>,
        /// Requested lease length and extend_by_ms (ms).
        #[arg(long, default_value_t = leasebeat::DEFAULT_TTL_MS)]
        ttl_ms: u64,
        /// Per-attempt budget (ms), enforced.
        #[arg(long, default_value_t = 10_000)]
        timeout_ms: u64,
        /// Do not release the reservation when the heartbeat stops.
        #[arg(long)]
        no_release: bool,
    },
    /// Real heartbeats against in-process reference servers: a set of short
    /// scenarios (policies and faults), their timelines and a summary.
    ///
    /// Exit status 0 when every scenario ended as expected and no lease
    /// lapsed without its client being told to stop; 1 otherwise. When every
    /// scenario runs, it ends with a short `leasebeat simulate` comparison
    /// (10,000 histories).
    Demo {
        /// Run only this scenario (repeatable): additive, max-lead,
        /// grant-cap, initial-ttl-cap, older-server, 5xx-burst, 429-inside,
        /// 429-beyond, lost-response, slow-response, malformed-200,
        /// permanent-stop. No simulate section then.
        #[arg(long, value_name = "NAME")]
        scenario: Vec<String>,
        /// Print only the summary (no legend, no timelines, no progress on
        /// stderr; diagnostics on stderr only for errors unless RUST_LOG says
        /// otherwise).
        #[arg(long)]
        quiet: bool,
    },
    /// Compare heartbeat strategies on seeded virtual-time histories.
    ///
    /// Every strategy (the core `leasebeat`, the historical SDK schedule,
    /// alternate-beat, etcd-like TTL/3, Vault-like 2/3, the Python SDK's
    /// variant) runs on the same histories against the server model: server
    /// regimes, faults, late timers, coarse and stalled clocks, client
    /// pauses. Prints extensions per lease-hour, unreported lapses, reports,
    /// stops and lead percentiles. Deterministic for a seed. Exit status 1
    /// when `leasebeat` has an unreported lapse or the core refused an input.
    Simulate {
        /// Number of histories.
        #[arg(long, default_value_t = 100_000)]
        sequences: u64,
        /// Seed of the histories.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Worker threads (default: one per core).
        #[arg(long)]
        threads: Option<usize>,
        /// Print one JSON object instead of the tables.
        #[arg(long)]
        json: bool,
        /// Also draw the comparison to this SVG file.
        #[arg(long, value_name = "FILE.svg")]
        plot: Option<PathBuf>,
        /// Instead of a run, print history INDEX of the seed and every
        /// event of each strategy's run on it.
        #[arg(long, value_name = "INDEX", conflicts_with_all = ["json", "plot", "sequences"])]
        explain: Option<u64>,
    },
    /// Benchmark (see scripts/bench-driver.sh): many leases from one driver.
    #[command(hide = true)]
    BenchDriver {
        /// Base URL of a running `leasebeat serve`.
        #[arg(long)]
        url: String,
        #[arg(long)]
        leases: usize,
        #[arg(long)]
        ttl_ms: u64,
        #[arg(long)]
        budget_ms: u64,
        #[arg(long)]
        seconds: u64,
        #[arg(long, default_value_t = 16)]
        workers: usize,
        /// The server's stdout, with its LAPSE lines (a `leasebeat serve`'s);
        /// without it, lapses are `not_measured`.
        #[arg(long)]
        lapse_file: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Diagnostics (the driver's, ureq's) on stderr, filtered by RUST_LOG
    // (default: warnings and errors; errors only for `demo --quiet`, whose
    // older-server scenario is in jeopardy by design: its fallback path
    // proves nothing, D-15).
    let quiet = matches!(cli.command, Command::Demo { quiet: true, .. });
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new(if quiet { "error" } else { "warn" })
    });
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
    match cli.command {
        Command::Replay { emit, files } => replay::run(&files, emit),
        Command::Serve {
            bind,
            grant_cap_ms,
            max_lead_ms,
            initial_ttl_cap_ms,
            max_extensions,
            omit_remaining,
            faults,
            seed,
            log,
            api_key,
            epoch_ms,
            max_connections,
            max_buffered_bytes,
            retention_ms,
            max_store_records,
            max_store_bytes,
        } => {
            let faults = match faults
                .iter()
                .map(|f| serve::FaultRule::parse(f))
                .collect::<Result<Vec<_>, _>>()
            {
                Ok(f) => f,
                Err(e) => {
                    eprintln!("leasebeat serve: {e}");
                    return ExitCode::from(2);
                }
            };
            serve::run(serve::ServeOptions {
                bind,
                policy: Policy {
                    initial_ttl_cap_ms,
                    grant_cap_ms,
                    max_lead_ms,
                    max_extensions,
                    omit_remaining,
                },
                faults,
                seed,
                log,
                api_key,
                epoch_ms,
                print_lapses: true,
                max_connections: max_connections.max(1),
                max_buffered_bytes,
                keep_entries: false,
                retention_ms,
                max_store_records,
                max_store_bytes,
            })
        }
        Command::Run {
            url,
            api_key,
            create,
            reservation,
            ttl_ms,
            timeout_ms,
            no_release,
        } => {
            let Some(api_key) = api_key.or_else(|| std::env::var("LEASEBEAT_API_KEY").ok()) else {
                eprintln!("leasebeat run: give --api-key or set LEASEBEAT_API_KEY");
                return ExitCode::from(2);
            };
            let start = match (create, reservation) {
                (_, Some(id)) => run::Start::Reservation(id),
                (Some(create), None) => match serde_json::from_str::<serde_json::Value>(&create) {
                    Ok(serde_json::Value::Object(m)) => run::Start::Create(m),
                    _ => {
                        eprintln!("leasebeat run: --create must be a JSON object");
                        return ExitCode::from(2);
                    }
                },
                (None, None) => unreachable!("clap requires --create or --reservation"),
            };
            run::run(run::RunOptions {
                url,
                api_key: ApiKey::new(api_key),
                start,
                ttl_ms,
                timeout_ms,
                release: !no_release,
            })
        }
        Command::Demo { scenario, quiet } => demo::run(&demo::DemoOptions {
            scenarios: scenario,
            quiet,
        }),
        Command::Simulate {
            sequences,
            seed,
            threads,
            json,
            plot,
            explain,
        } => match explain {
            Some(index) => {
                let mut out = std::io::stdout().lock();
                match simulate::explain(seed, index, &mut out) {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(e) => {
                        eprintln!("leasebeat simulate: cannot write the output: {e}");
                        ExitCode::from(2)
                    }
                }
            }
            None => simulate_command(sequences, seed, threads, json, plot),
        },
        Command::BenchDriver {
            url,
            leases,
            ttl_ms,
            budget_ms,
            seconds,
            workers,
            lapse_file,
        } => bench::run(bench::BenchOptions {
            url,
            leases,
            ttl_ms,
            budget_ms,
            seconds,
            workers,
            lapse_file,
            heap_live: None,
        }),
    }
}

fn simulate_command(
    sequences: u64,
    seed: u64,
    threads: Option<usize>,
    json: bool,
    plot: Option<PathBuf>,
) -> ExitCode {
    let mut builder = rayon::ThreadPoolBuilder::new();
    if let Some(n) = threads {
        if n == 0 {
            eprintln!("leasebeat simulate: --threads must be at least 1");
            return ExitCode::from(2);
        }
        builder = builder.num_threads(n);
    }
    let pool = match builder.build() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("leasebeat simulate: cannot start worker threads: {e}");
            return ExitCode::from(2);
        }
    };
    let start = std::time::Instant::now();
    let summary = pool.install(|| simulate::simulate(sequences, seed, true));
    eprintln!(
        "leasebeat simulate: {sequences} histories on {} threads in {:.1} s",
        pool.current_num_threads(),
        start.elapsed().as_secs_f64()
    );
    let mut out = std::io::stdout().lock();
    let written = if json {
        serde_json::to_writer(&mut out, &summary.to_json())
            .map_err(std::io::Error::other)
            .and_then(|()| writeln!(out))
    } else {
        summary.print(&mut out)
    };
    if let Err(e) = written {
        eprintln!("leasebeat simulate: cannot write the output: {e}");
        return ExitCode::from(2);
    }
    if let Some(path) = plot {
        if let Err(e) = summary.plot(&path) {
            eprintln!("leasebeat simulate: {e}");
            return ExitCode::from(2);
        }
        eprintln!("leasebeat simulate: plot written to {}", path.display());
    }
    let core = &summary.tallies[0];
    if core.unreported_lapses > 0 || summary.tallies.iter().any(|t| t.core_errors > 0) {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
