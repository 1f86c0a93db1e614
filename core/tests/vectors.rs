//! Replays every scenario file in `tests/vectors/` through the public API.

use std::path::PathBuf;

use leasebeat::scenario;

/// Every `tests/vectors/*.json`.
fn vector_files() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/vectors");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    files
}

#[test]
fn every_vector_replays() {
    let files = vector_files();
    assert!(!files.is_empty(), "no vectors found");
    let mut failures = Vec::new();
    for path in &files {
        let text = std::fs::read_to_string(path).expect("readable vector");
        let s = match scenario::parse(&text) {
            Ok(s) => s,
            Err(e) => {
                failures.push(format!("{}: malformed: {e}", path.display()));
                continue;
            }
        };
        let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
        if s.id != stem {
            failures.push(format!(
                "{}: id {:?} differs from the file name",
                path.display(),
                s.id
            ));
        }
        if let Some(m) = scenario::replay(&s).mismatch {
            failures.push(format!("{}: {m}", s.id));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} vectors failed:\n{}",
        failures.len(),
        files.len(),
        failures.join("\n")
    );
}

#[test]
fn every_stop_reason_has_a_vector() {
    let mut text = String::new();
    for path in vector_files() {
        text.push_str(&std::fs::read_to_string(path).expect("readable vector"));
    }
    for reason in leasebeat::StopReason::ALL {
        let needle = format!("\"reason\": \"{}\"", reason.as_str());
        let compact = format!("\"reason\":\"{}\"", reason.as_str());
        assert!(
            text.contains(&needle) || text.contains(&compact),
            "no vector expects the stop reason {reason}"
        );
    }
}

/// P-9: `leasebeat replay --emit` lines carry every number exactly, and a
/// scenario whose expectations are those exact numbers replays.
#[test]
fn emitted_numbers_are_exact_both_ways() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/vectors");
    let text = std::fs::read_to_string(root.join("overflow-retry-window-below-i64.json"))
        .expect("readable vector");
    let s = scenario::parse(&text).expect("valid vector");
    let r = scenario::replay(&s);
    assert_eq!(r.mismatch, None);
    let last = r.lines.last().expect("decisions");
    assert!(
        last.contains(r#""retry_window":-9999999999999941300"#),
        "{last}"
    );
    // The emitted numbers read back as an expectation, exactly.
    let edited = text.replace("-9999999999999941300", "-9999999999999941301");
    let r = scenario::replay(&scenario::parse(&edited).expect("valid vector"));
    assert!(r.mismatch.is_some(), "a one-off window must not match");
}
