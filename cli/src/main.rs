//! `leasebeat`: the command-line face of the leasebeat scheduler.
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

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
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Replay { emit, files } => replay::run(&files, emit),
    }
}
