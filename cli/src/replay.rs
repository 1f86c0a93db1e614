//! `leasebeat replay`.

use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use leasebeat::scenario::{self, Replay, Scenario, settlement};

/// A heartbeat vector or a settlement vector (`tests/vectors/settlement/`).
enum Loaded {
    Heartbeat(Scenario),
    Settlement(settlement::SettleScenario),
}

impl Loaded {
    fn id(&self) -> &str {
        match self {
            Loaded::Heartbeat(s) => &s.id,
            Loaded::Settlement(s) => &s.id,
        }
    }

    fn replay(&self, check: bool) -> Replay {
        match self {
            Loaded::Heartbeat(s) => scenario::replay_with(s, check),
            Loaded::Settlement(s) => settlement::replay_with(s, check),
        }
    }
}

fn load(path: &Path) -> Result<Loaded, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read: {e}"))?;
    if settlement::is_settlement(&text) {
        settlement::parse(&text)
            .map(Loaded::Settlement)
            .map_err(|e| e.to_string())
    } else {
        scenario::parse(&text)
            .map(Loaded::Heartbeat)
            .map_err(|e| e.to_string())
    }
}

/// Writes one line to stdout. `Err(code)` ends the command: quietly with success when the
/// reader went away (`leasebeat replay --emit ... | head`), with 74 (EX_IOERR) otherwise.
fn line(text: std::fmt::Arguments<'_>) -> Result<(), ExitCode> {
    let mut out = std::io::stdout().lock();
    match out.write_fmt(text).and_then(|()| out.write_all(b"\n")) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == ErrorKind::BrokenPipe => Err(ExitCode::SUCCESS),
        Err(e) => {
            eprintln!("leasebeat replay: cannot write to stdout: {e}");
            Err(ExitCode::from(74))
        }
    }
}

/// Replays `files`; with `emit`, prints decisions instead of checking them.
pub fn run(files: &[PathBuf], emit: bool) -> ExitCode {
    run_inner(files, emit).unwrap_or_else(|code| code)
}

fn run_inner(files: &[PathBuf], emit: bool) -> Result<ExitCode, ExitCode> {
    let (mut passed, mut failed, mut malformed) = (0usize, 0usize, 0usize);
    for path in files {
        let scenario = match load(path) {
            Ok(s) => s,
            Err(why) => {
                eprintln!("ERROR {}: {why}", path.display());
                malformed += 1;
                continue;
            }
        };
        let replay = scenario.replay(!emit);
        if emit {
            for d in &replay.lines {
                line(format_args!("{d}"))?;
            }
            if let Some(m) = &replay.mismatch {
                eprintln!("{}: replay stopped at {m}", scenario.id());
                failed += 1;
            }
            continue;
        }
        match replay.mismatch {
            None => {
                passed += 1;
                line(format_args!("pass {}", scenario.id()))?;
            }
            Some(m) => {
                failed += 1;
                line(format_args!(
                    "FAIL {} ({}): {m}",
                    scenario.id(),
                    path.display()
                ))?;
            }
        }
    }
    if !emit {
        line(format_args!(
            "{passed} passed, {} failed",
            failed + malformed
        ))?;
    }
    Ok(if malformed > 0 {
        ExitCode::from(2)
    } else if failed > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
