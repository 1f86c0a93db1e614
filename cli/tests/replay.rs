//! `leasebeat replay` as a shell user runs it.

use std::io::Read;
use std::process::{Command, Stdio};

fn vectors() -> Vec<std::path::PathBuf> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/vectors");
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    files
}

/// `leasebeat replay --emit ... | head -1`: the reader goes away after one line; the command
/// ends quietly (no panic message, success) instead of panicking on the broken pipe.
#[test]
fn emit_into_a_closed_pipe_ends_quietly() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_leasebeat"))
        .arg("replay")
        .arg("--emit")
        .args(vectors())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut first = [0u8; 1];
    stdout.read_exact(&mut first).unwrap();
    drop(stdout);
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "stderr: {stderr}");
    assert!(
        out.status.success(),
        "status {:?}, stderr: {stderr}",
        out.status
    );
}

#[test]
fn check_mode_prints_the_closing_line() {
    let out = Command::new(env!("CARGO_BIN_EXE_leasebeat"))
        .arg("replay")
        .args(vectors())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let n = vectors().len();
    assert!(
        stdout.ends_with(&format!("{n} passed, 0 failed\n")),
        "{stdout}"
    );
    assert!(out.status.success());
}

fn settlement_vectors() -> Vec<std::path::PathBuf> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/vectors/settlement");
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    files
}

/// `leasebeat replay tests/vectors/*.json tests/vectors/settlement/*.json`: both kinds in one
/// run, each recognised by its content.
#[test]
fn settlement_vectors_replay_beside_heartbeat_vectors() {
    let files: Vec<_> = vectors().into_iter().chain(settlement_vectors()).collect();
    assert!(settlement_vectors().len() >= 40);
    let out = Command::new(env!("CARGO_BIN_EXE_leasebeat"))
        .arg("replay")
        .args(&files)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.ends_with(&format!("{} passed, 0 failed\n", files.len())),
        "{stdout}"
    );
    assert!(stdout.contains("pass settle-lost-commit-response\n"));
    assert!(out.status.success());
}

/// A settlement vector whose expectation is wrong fails with exit status 1.
#[test]
fn a_failing_settlement_vector_fails_the_command() {
    let src = settlement_vectors()
        .into_iter()
        .find(|p| p.ends_with("settle-expired-410-event.json"))
        .unwrap();
    let text = std::fs::read_to_string(src).unwrap();
    let wrong = text.replacen("\"outcome\": \"applied\"", "\"outcome\": \"committed\"", 1);
    assert_ne!(wrong, text);
    let dir = std::env::temp_dir().join(format!("leasebeat-settle-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("settle-expired-410-event.json");
    std::fs::write(&path, wrong).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_leasebeat"))
        .arg("replay")
        .arg(&path)
        .output()
        .unwrap();
    std::fs::remove_dir_all(&dir).ok();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("FAIL settle-expired-410-event"), "{stdout}");
    assert_eq!(out.status.code(), Some(1));
}
