//! `leasebeat journal`: inspect and edit a settlement journal partition (the operator's
//! view, and the interop tests' handle on the journal).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use leasebeat::journal::{self, Journal, JournalRecord, RecordMode};

/// Which partition: `--partition DIR`, or `--base-url` with the principal under `--dir`
/// (else `CYCLES_JOURNAL_DIR`, else `~/.runcycles/commit-journal`).
#[derive(Args, Debug)]
pub struct JournalArgs {
    /// The journal's base directory (default: $CYCLES_JOURNAL_DIR, else
    /// ~/.runcycles/commit-journal).
    #[arg(long, global = true)]
    dir: Option<PathBuf>,
    /// The partition directory itself (instead of --dir with the principal).
    #[arg(long, global = true)]
    partition: Option<PathBuf>,
    /// The server's base URL (part of the partition name; replay skips other servers).
    #[arg(long, global = true, default_value = "")]
    base_url: String,
    /// The API key (names the partition when no tenant is given; never stored). Default:
    /// $CYCLES_API_KEY.
    #[arg(long, global = true)]
    api_key: Option<String>,
    /// The tenant (names the partition when given). Default: $CYCLES_TENANT.
    #[arg(long, global = true)]
    tenant: Option<String>,
    /// The reservation id argument is a JSON string literal (e.g. "\"a\\u0000b\""), for
    /// ids no command line can carry (NUL).
    #[arg(long, global = true)]
    id_json: bool,
    #[command(subcommand)]
    command: JournalCommand,
}

#[derive(Subcommand, Debug)]
enum JournalCommand {
    /// Print the partition directory.
    Path,
    /// Scan the partition as a replay would (quarantining, migrating legacy names) and
    /// print one JSON line per record and per finding, then a summary line.
    List,
    /// Print the record of a reservation id as stored (exit 1 if there is none).
    Show {
        /// The exact reservation id.
        reservation_id: String,
    },
    /// Write (or replace) a record.
    Write {
        /// The exact reservation id.
        reservation_id: String,
        /// The commit body (a JSON object).
        #[arg(long)]
        commit_body: Option<String>,
        /// The event fallback body (a JSON object).
        #[arg(long)]
        event_body: Option<String>,
        /// `commit` or `event`.
        #[arg(long, default_value = "commit")]
        mode: String,
        /// Absolute wall-clock floor (Unix ms) for the next attempt.
        #[arg(long)]
        not_before_ms: Option<u64>,
        /// Unix ms of the write (default: now).
        #[arg(long)]
        recorded_at_ms: Option<u64>,
    },
    /// Remove a record (and its legacy-named file if that holds exactly this id).
    Remove {
        /// The exact reservation id.
        reservation_id: String,
    },
}

fn json_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

/// Runs `leasebeat journal ...`. Exit status: 0, 1 (`show`: no record), 2 (an error).
pub fn run(args: JournalArgs) -> ExitCode {
    match run_inner(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("leasebeat journal: {e}");
            ExitCode::from(2)
        }
    }
}

fn open(args: &JournalArgs) -> Result<Journal, journal::JournalError> {
    if let Some(p) = &args.partition {
        return Journal::open_partition(p, &args.base_url);
    }
    let base = journal::base_dir(args.dir.as_deref())?;
    let api_key = args
        .api_key
        .clone()
        .or_else(|| std::env::var("CYCLES_API_KEY").ok())
        .unwrap_or_default();
    let tenant = args
        .tenant
        .clone()
        .or_else(|| std::env::var("CYCLES_TENANT").ok());
    Journal::open(&base, &args.base_url, &api_key, tenant.as_deref())
}

fn run_inner(args: JournalArgs) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let j = open(&args)?;
    let id_json = args.id_json;
    let id = |raw: String| -> Result<String, Box<dyn std::error::Error>> {
        if id_json {
            serde_json::from_str::<String>(&raw)
                .map_err(|e| format!("--id-json: the id is not a JSON string: {e}").into())
        } else {
            Ok(raw)
        }
    };
    match args.command {
        JournalCommand::Path => println!("{}", j.dir().display()),
        JournalCommand::List => {
            let scan = j.scan()?;
            for r in &scan.records {
                println!(
                    "{{\"event\":\"record\",\"file\":{},\"record\":{}}}",
                    json_str(&journal::record_file_name(&r.reservation_id)),
                    r.to_json()?
                );
            }
            for r in &scan.foreign {
                println!(
                    "{{\"event\":\"other_server\",\"file\":{},\"record\":{}}}",
                    json_str(&journal::record_file_name(&r.reservation_id)),
                    r.to_json()?
                );
            }
            for q in &scan.quarantined {
                println!(
                    "{}",
                    serde_json::json!({"event": "quarantined", "file": q.file,
                        "moved_to": q.moved_to, "reason": q.reason})
                );
            }
            for m in &scan.migrated {
                println!(
                    "{}",
                    serde_json::json!({"event": "migrated", "file": m.from, "to": m.to,
                        "reservation_id": m.reservation_id,
                        "duplicate_removed": m.duplicate_removed})
                );
            }
            for s in &scan.skipped {
                println!(
                    "{}",
                    serde_json::json!({"event": "skipped", "file": s.file, "reason": s.reason})
                );
            }
            println!(
                "journal: {} records, {} other server, {} quarantined, {} migrated, {} skipped, \
                 {} stale temporary files removed ({})",
                scan.records.len(),
                scan.foreign.len(),
                scan.quarantined.len(),
                scan.migrated.len(),
                scan.skipped.len(),
                scan.reaped_temp_files,
                j.dir().display()
            );
        }
        JournalCommand::Show { reservation_id } => match j.load(&id(reservation_id.clone())?)? {
            Some(r) => println!("{}", r.to_json()?),
            None => {
                eprintln!(
                    "leasebeat journal: no record for {}",
                    json_str(&reservation_id)
                );
                return Ok(ExitCode::from(1));
            }
        },
        JournalCommand::Write {
            reservation_id,
            commit_body,
            event_body,
            mode,
            not_before_ms,
            recorded_at_ms,
        } => {
            let mode = match mode.as_str() {
                "commit" => RecordMode::Commit,
                "event" => RecordMode::Event,
                other => return Err(format!("--mode must be commit or event, not {other}").into()),
            };
            let record = JournalRecord {
                reservation_id: id(reservation_id)?,
                base_url: j.base_url().to_owned(),
                mode,
                commit_body,
                event_fallback_body: event_body,
                recorded_at_ms: recorded_at_ms.unwrap_or_else(journal::now_unix_ms),
                not_before_ms,
            };
            j.write(&record)?;
            println!(
                "{}",
                j.dir()
                    .join(journal::record_file_name(&record.reservation_id))
                    .display()
            );
        }
        JournalCommand::Remove { reservation_id } => {
            let removed = j.remove(&id(reservation_id)?)?;
            println!("{}", if removed { "removed" } else { "absent" });
        }
    }
    Ok(ExitCode::SUCCESS)
}
