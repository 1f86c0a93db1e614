//! `leasebeat`: the command-line face of the leasebeat scheduler.
#![forbid(unsafe_code)]

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use leasebeat::driver::ApiKey;
use leasebeat::sim::Policy;
use leasebeat_cli::{bench, demo, probe, run, serve, simulate};

mod journal;
mod replay;

/// The end of `leasebeat run --help`: the create request and the exit statuses.
const RUN_AFTER_HELP: &str = "\
The create request (--create) is a JSON object with the members the Cycles
protocol requires besides idempotency_key and ttl_ms (leasebeat adds those):
  subject   at least one of tenant, workspace, app, workflow, agent, toolset
  action    kind and name
  estimate  unit (USD_MICROCENTS, TOKENS, CREDITS, RISK_POINTS) and amount
optional: grace_period_ms, overage_policy, metadata. For example:
  --create '{\"subject\":{\"tenant\":\"acme\"},\"action\":{\"kind\":\"llm.completion\",\"name\":\"summarize\"},\"estimate\":{\"unit\":\"TOKENS\",\"amount\":1000}}'

Exit status:
  0  cancelled with Ctrl-C (the reservation was then released)
  1  the heartbeat stopped by itself: the lease is gone or can no longer be
     kept safely (the stop reason is on stderr)
  2  bad arguments
  3  the server could not be reached (no attempt got an HTTP answer)
  4  the server refused the create (its code and message are on stderr)
  5  the final commit/release did not succeed (after Ctrl-C), or --replay
     left records unsettled

Settlement: the end of the lease (--commit's usage, else a release) goes
through leasebeat's settlement: one idempotency key, retries as the
settlement decides, the event fallback after a 410 (subject and action from
--create, or --event for --reservation), and a journal record written
before the first commit leaves (J-1). The journal is on by default under
$CYCLES_JOURNAL_DIR or ~/.runcycles/commit-journal (--journal-dir,
--tenant, --no-journal); run replays its partition when it starts, and
--replay settles the partition's records and exits.";

/// Lease-heartbeat scheduling for Cycles reservations.
#[derive(Parser, Debug)]
#[command(name = "leasebeat", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Inspect or edit the settlement journal (runcycles-compatible pending records).
    ///
    /// `path`, `list` (a replay's scan: one JSON line per record and finding, then a
    /// summary), `show ID`, `write ID --commit-body JSON ...`, `remove ID`. The partition
    /// is `--partition DIR`, or the one of `--base-url` and `--tenant` / `--api-key` under
    /// `--dir` (default $CYCLES_JOURNAL_DIR, else ~/.runcycles/commit-journal).
    Journal(journal::JournalArgs),
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
    /// then prints `summary leases=N extensions=N lapses=N refused=N`:
    /// `leases` is the number of reservations the server still holds at
    /// exit (live ones, and lapsed, committed or released ones not yet
    /// forgotten, see --retention-ms), not the number created; `extensions`
    /// counts extensions applied, `lapses` the LAPSE lines, `refused` the
    /// requests and connections refused by --max-connections and
    /// --max-buffered-bytes. Default policy: additive extensions, no limits.
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
        /// Grace (ms) after expiry during which commit and release are still
        /// accepted, for a create that gives no grace_period_ms (the protocol's
        /// default, and the real server's, is 5000). Extensions get no grace.
        #[arg(long, default_value_t = serve::DEFAULT_GRACE_MS)]
        grace_ms: u64,
        #[arg(long = "fault", value_name = "RULE", long_help = serve::FAULT_HELP)]
        /// Inject a fault (see --help for the grammar).
        faults: Vec<String>,
        /// Seed for probabilistic faults.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Append every request (and lapse) as one JSON line to this file: endpoint, call
        /// number, reservation id, `header_key`, body, fault, status, response and outcome
        /// (`responded` | `dropped`); commit, release and events lines also carry `applied`
        /// (true only when that request changed the ledger for the first time: false for a
        /// same-key replay, a refusal or a fault that answered without applying). A request
        /// held by a `hold=MS` fault also logs an `"event":"held"` line when the hold begins
        /// (request id, endpoint, reservation id, `header_key`, `hold_ms`), so a request whose
        /// client was killed meanwhile is visible at once.
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
        /// Server bug: a create or extend replay copies the stored
        /// remaining_ttl_ms instead of recomputing it (for `leasebeat probe`).
        #[arg(long)]
        replay_stale_remaining: bool,
        /// Server bug: a replay answers the reservation's current
        /// expires_at_ms instead of the original one.
        #[arg(long)]
        replay_changed_body: bool,
        /// Server bug: a reused key with another payload is answered as a
        /// replay instead of 409 IDEMPOTENCY_MISMATCH.
        #[arg(long)]
        no_idempotency_mismatch: bool,
        /// Server bug: remaining_ttl_ms comes from a clock running at N
        /// thousandths of the expiry clock's rate (e.g. 1500: 50 % fast).
        #[arg(long, value_name = "N")]
        remaining_clock_permille: Option<u32>,
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
    /// --no-release, or the server said the reservation is gone:
    /// not_found, expired, finalized). Decisions go to stdout as JSON lines;
    /// why it ended goes to stderr as one sentence.
    #[command(after_help = RUN_AFTER_HELP)]
    #[command(group(
        clap::ArgGroup::new("start").required(true).args(["create", "reservation", "replay"])
    ))]
    Run {
        /// Base URL of the server, e.g. http://127.0.0.1:8080.
        #[arg(long)]
        url: String,
        /// API key; defaults to the LEASEBEAT_API_KEY environment variable.
        #[arg(long)]
        api_key: Option<String>,
        /// Create a reservation and heartbeat it: the create request as JSON
        /// (subject, action, estimate, ...), without idempotency_key and ttl_ms.
        #[arg(long, value_name = "JSON")]
        create: Option<String>,
        /// Heartbeat an existing reservation (its first beat is an immediate extension).
        #[arg(long, value_name = "ID")]
        reservation: Option<String>,
        /// Requested lease length and extend_by_ms (ms), 1000..=86400000.
        #[arg(long, default_value_t = leasebeat::DEFAULT_TTL_MS,
              allow_negative_numbers = true, value_parser = parse_ttl_ms)]
        ttl_ms: u64,
        /// Per-attempt budget (ms), enforced: at least 1.
        #[arg(long, default_value_t = 10_000,
              allow_negative_numbers = true, value_parser = parse_timeout_ms)]
        timeout_ms: u64,
        /// Do not release the reservation when the heartbeat stops.
        #[arg(long)]
        no_release: bool,
        /// Commit this usage when the heartbeat stops (Ctrl-C), instead of
        /// releasing: a commit body without key, e.g.
        /// '{"actual":{"unit":"TOKENS","amount":42},"metrics":{...},"metadata":{...}}'.
        #[arg(long, value_name = "JSON")]
        commit: Option<String>,
        /// Subject and action for the expired-commit event fallback of a
        /// --reservation: '{"subject":{...},"action":{"kind":..,"name":..}}'.
        #[arg(long, value_name = "JSON")]
        event: Option<String>,
        /// The journal's base directory (default $CYCLES_JOURNAL_DIR, else
        /// ~/.runcycles/commit-journal).
        #[arg(long, value_name = "DIR")]
        journal_dir: Option<std::path::PathBuf>,
        /// Partition the journal by this tenant (survives API-key rotation);
        /// defaults to $CYCLES_TENANT, else the partition is the API key's.
        #[arg(long)]
        tenant: Option<String>,
        /// Do not journal the settlement (nothing durable; no replay).
        #[arg(long, conflicts_with = "replay")]
        no_journal: bool,
        /// Settle the journal's records for this server and principal, then
        /// exit (no heartbeat).
        #[arg(long)]
        replay: bool,
        /// How long to wait at the end for settlements in flight (ms); what
        /// is unresolved then stays in the journal.
        #[arg(long, default_value_t = 30_000)]
        flush_ms: u64,
    },
    /// Check a live Cycles server's side of the heartbeat contract, and
    /// report the cadence leasebeat gets there.
    ///
    /// Makes its own small test reservations (--create's subject, action
    /// and estimate, ttl_ms = --ttl-ms), every request with a fresh
    /// idempotency key unless it is a replay, and releases them at the end
    /// (whatever it cannot release is reported by id). Checks, each a named
    /// finding PASS / FAIL / WARN / SKIP with its evidence (the exchanges,
    /// numbered, with monotonic send and receive instants):
    /// response schema; remaining_ttl_ms present; remaining_ttl_ms and
    /// expires_at_ms from one clock at the client's rate; same-key replays
    /// of an extend and of the create (every other field verbatim,
    /// remaining_ttl_ms recomputed, 0 after release); 409
    /// IDEMPOTENCY_MISMATCH for a reused key with another payload;
    /// delta-seconds Retry-After on any 429; the extension regime
    /// (additive, grant cap, maximum lead) and, with --exhaust, the
    /// extension limit. Then runs the core against a model of what it
    /// measured and reports the steady cadence, extensions per hour, when
    /// the extension limit stops work, the longest outage survived, and a
    /// warning with a fix when no positive cadence exists (the dead zone).
    /// Takes about 3 s plus 12 round trips (more with --exhaust).
    ///
    /// Progress on stderr; the table (or --json) on stdout. Exit status: 0
    /// when every MUST holds, 1 when one fails, 2 when the server could not
    /// be probed (unreachable, auth refused, HTML answer, no answer within
    /// --timeout-ms, create refused) or on bad arguments.
    Probe {
        /// Base URL of the server (http:// or https://).
        #[arg(long)]
        url: String,
        /// API key; defaults to the LEASEBEAT_API_KEY environment variable.
        #[arg(long)]
        api_key: Option<String>,
        /// The create request's members as JSON: subject, action and the
        /// smallest estimate to reserve with (no idempotency_key, no
        /// ttl_ms). A real server needs the API key's tenant as
        /// subject.tenant.
        #[arg(long, default_value = probe::DEFAULT_CREATE)]
        create: String,
        /// The lease length leasebeat will ask for (ttl_ms, extend_by_ms).
        #[arg(long, default_value_t = leasebeat::DEFAULT_TTL_MS)]
        ttl_ms: u64,
        /// The per-request timeout leasebeat will enforce; also bounds each
        /// of the probe's requests.
        #[arg(long, default_value_t = 10_000)]
        timeout_ms: u64,
        /// Wait between the steps whose spacing is measured (ms).
        #[arg(long, default_value_t = 1_500)]
        wait_ms: u64,
        /// Also measure the extension limit: extend a second test
        /// reservation until 409 MAX_EXTENSIONS_EXCEEDED, at most MAX
        /// times (default 200). It costs that reservation's extensions.
        #[arg(long, value_name = "MAX", num_args = 0..=1, default_missing_value = "200")]
        exhaust: Option<u32>,
        /// Print one JSON object (findings, regime, report, reservations,
        /// every exchange) instead of the table.
        #[arg(long)]
        json: bool,
        /// No progress lines on stderr.
        #[arg(long)]
        quiet: bool,
    },
    /// Real heartbeats against in-process reference servers: a set of short
    /// scenarios (policies and faults), their timelines and a summary.
    ///
    /// Exit status 0 when every scenario ended as expected and no lease
    /// lapsed without its client being told to stop; 1 otherwise; 2 on bad
    /// arguments. When every scenario runs, it ends with a short
    /// `leasebeat simulate` comparison (10,000 histories; not printed with
    /// --quiet, but still checked).
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
    /// stops and lead percentiles. Deterministic for a seed. Exit status 0
    /// when `leasebeat` never lapsed unreported; 1 when it has an unreported
    /// lapse or the core refused an input; 2 on bad arguments or when the
    /// output cannot be written.
    Simulate {
        /// Number of histories (at least 1).
        #[arg(long, default_value_t = 100_000,
              allow_negative_numbers = true, value_parser = parse_sequences)]
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
        .with_ansi(colour_on_stderr())
        .try_init();
    match cli.command {
        Command::Replay { emit, files } => replay::run(&files, emit),
        Command::Journal(args) => journal::run(args),
        Command::Serve {
            bind,
            grant_cap_ms,
            max_lead_ms,
            initial_ttl_cap_ms,
            max_extensions,
            omit_remaining,
            grace_ms,
            faults,
            seed,
            log,
            api_key,
            epoch_ms,
            max_connections,
            max_buffered_bytes,
            retention_ms,
            replay_stale_remaining,
            replay_changed_body,
            no_idempotency_mismatch,
            remaining_clock_permille,
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
                    grace_ms,
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
                bugs: leasebeat::sim::ServerBugs {
                    replay_stale_remaining,
                    remaining_clock_permille,
                    replay_changed_body,
                    no_idempotency_mismatch,
                },
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
            commit,
            event,
            journal_dir,
            tenant,
            no_journal,
            replay,
            flush_ms,
        } => {
            let Some(api_key) = api_key.or_else(|| std::env::var("LEASEBEAT_API_KEY").ok()) else {
                eprintln!("leasebeat run: give --api-key or set LEASEBEAT_API_KEY");
                return ExitCode::from(2);
            };
            let tenant = tenant.or_else(|| std::env::var("CYCLES_TENANT").ok());
            let journal = run::journal_options(journal_dir, tenant, no_journal);
            if replay {
                return run::replay(run::ReplayOptions {
                    url,
                    api_key: ApiKey::new(api_key),
                    journal,
                    flush_ms,
                });
            }
            let start = match (create, reservation) {
                (_, Some(id)) => run::Start::Reservation(id),
                (Some(create), None) => match serde_json::from_str::<serde_json::Value>(&create) {
                    Ok(serde_json::Value::Object(m)) => run::Start::Create(m),
                    _ => {
                        eprintln!(
                            "leasebeat run: --create must be a JSON object such as \
                             '{{\"subject\":{{\"tenant\":\"acme\"}},\"action\":{{\"kind\":\"llm.completion\",\"name\":\"x\"}},\"estimate\":{{\"unit\":\"TOKENS\",\"amount\":1000}}}}' \
                             (see leasebeat run --help)"
                        );
                        return ExitCode::from(2);
                    }
                },
                (None, None) => {
                    eprintln!("leasebeat run: give --create JSON or --reservation ID");
                    return ExitCode::from(2);
                }
            };
            run::run(run::RunOptions {
                url,
                api_key: ApiKey::new(api_key),
                start,
                ttl_ms,
                timeout_ms,
                release: !no_release,
                commit: commit.map(String::into_bytes),
                event: event.map(String::into_bytes),
                journal,
                flush_ms,
            })
        }
        Command::Probe {
            url,
            api_key,
            create,
            ttl_ms,
            timeout_ms,
            wait_ms,
            exhaust,
            json,
            quiet,
        } => {
            let Some(api_key) = api_key.or_else(|| std::env::var("LEASEBEAT_API_KEY").ok()) else {
                eprintln!("leasebeat probe: give --api-key or set LEASEBEAT_API_KEY");
                return ExitCode::from(2);
            };
            let create = match serde_json::from_str::<serde_json::Value>(&create) {
                Ok(serde_json::Value::Object(m)) => m,
                _ => {
                    eprintln!("leasebeat probe: --create must be a JSON object");
                    return ExitCode::from(2);
                }
            };
            let mut opts = probe::ProbeOptions::new(url, ApiKey::new(api_key));
            opts.create = create;
            opts.ttl_ms = ttl_ms;
            opts.timeout_ms = timeout_ms;
            opts.wait_ms = wait_ms;
            opts.exhaust = exhaust;
            opts.json = json;
            opts.progress = !quiet;
            probe::run(opts)
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

/// Colours on stderr (the log lines) only when stderr is a terminal and
/// `NO_COLOR` is unset or empty (https://no-color.org), as clap does for its
/// own messages.
fn colour_on_stderr() -> bool {
    use std::io::IsTerminal;
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// `--ttl-ms`: the lease length the server is asked for (the core's range).
fn parse_ttl_ms(text: &str) -> Result<u64, String> {
    match text.trim().parse::<i128>() {
        Ok(v) if (1_000..=86_400_000).contains(&v) => Ok(v as u64),
        Ok(_) => Err("the lease length must be from 1000 to 86400000 ms (1 s to 24 h)".into()),
        Err(_) => Err("the lease length must be a whole number of milliseconds".into()),
    }
}

/// `--timeout-ms`: the per-attempt budget the driver enforces.
fn parse_timeout_ms(text: &str) -> Result<u64, String> {
    match text.trim().parse::<i128>() {
        Ok(v) if (1..=i128::from(u64::MAX)).contains(&v) => Ok(v as u64),
        Ok(_) => Err(
            "the per-attempt budget must be at least 1 ms: the driver enforces a finite timeout on every request"
                .into(),
        ),
        Err(_) => Err("the per-attempt budget must be a whole number of milliseconds".into()),
    }
}

/// `simulate --sequences`: at least one history.
fn parse_sequences(text: &str) -> Result<u64, String> {
    match text.trim().parse::<i128>() {
        Ok(v) if (1..=i128::from(u64::MAX)).contains(&v) => Ok(v as u64),
        Ok(_) => Err("the number of histories must be at least 1".into()),
        Err(_) => Err("the number of histories must be a whole number".into()),
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
        "leasebeat simulate: {sequences} histories on {} in {:.1} s",
        match pool.current_num_threads() {
            1 => "1 thread".to_owned(),
            n => format!("{n} threads"),
        },
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
