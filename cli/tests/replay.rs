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
