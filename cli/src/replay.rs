//! `leasebeat replay`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use leasebeat::scenario::{self, Scenario};
use serde_json::Value;

fn load(path: &Path) -> Result<Scenario, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read: {e}"))?;
    scenario::parse(&text).map_err(|e| e.to_string())
}

/// Replays `files`; with `emit`, prints decisions instead of checking them.
pub fn run(files: &[PathBuf], emit: bool) -> ExitCode {
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
        let replay = scenario::replay_with(&scenario, !emit);
        if emit {
            for d in &replay.decisions {
                println!("{}", Value::Object(d.clone()));
            }
            if let Some(m) = &replay.mismatch {
                eprintln!("{}: replay stopped at {m}", scenario.id);
                failed += 1;
            }
            continue;
        }
        match replay.mismatch {
            None => {
                passed += 1;
                println!("pass {}", scenario.id);
            }
            Some(m) => {
                failed += 1;
                println!("FAIL {} ({}): {m}", scenario.id, path.display());
            }
        }
    }
    if !emit {
        println!("{passed} passed, {} failed", failed + malformed);
    }
    if malformed > 0 {
        ExitCode::from(2)
    } else if failed > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
