//! Replays every settlement vector in `tests/vectors/settlement/` through the public API.

use std::path::PathBuf;

use leasebeat::scenario::settlement;

/// Every `tests/vectors/settlement/*.json`.
fn vector_files() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/vectors/settlement");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    files
}

fn all_text() -> String {
    let mut text = String::new();
    for path in vector_files() {
        text.push_str(&std::fs::read_to_string(path).expect("readable vector"));
    }
    text
}

#[test]
fn every_settlement_vector_replays() {
    let files = vector_files();
    assert!(files.len() >= 40, "only {} settlement vectors", files.len());
    let mut failures = Vec::new();
    for path in &files {
        let text = std::fs::read_to_string(path).expect("readable vector");
        assert!(
            settlement::is_settlement(&text),
            "{} is not recognised as a settlement vector",
            path.display()
        );
        let s = match settlement::parse(&text) {
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
        if !s.steps.iter().any(|st| st.expect.is_some()) {
            failures.push(format!("{}: expects nothing", s.id));
        }
        if let Some(m) = settlement::replay(&s).mismatch {
            failures.push(format!("{}: {m}", s.id));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} settlement vectors failed:\n{}",
        failures.len(),
        files.len(),
        failures.join("\n")
    );
}

/// Every outcome, every rule id and every catalog scenario is named by some vector.
#[test]
fn every_rule_outcome_and_catalog_scenario_has_a_vector() {
    let text = all_text();
    for outcome in leasebeat::SettleOutcome::ALL {
        let needle = format!("\"outcome\": \"{}\"", outcome.as_str());
        assert!(
            text.contains(&needle),
            "no vector expects the outcome {outcome}"
        );
    }
    for rule in (1..=11)
        .map(|n| format!("ST-{n}"))
        .chain((1..=4).map(|n| format!("SP-{n}")))
    {
        assert!(
            text.contains(&format!("{rule}:"))
                || text.contains(&format!("{rule},"))
                || text.contains(&format!("{rule} ")),
            "no vector cites {rule}"
        );
    }
    for id in [
        "CR-CORE-001",
        "CR-CORE-002",
        "CR-CORE-003",
        "CR-CORE-004",
        "CR-DURABLE-001",
        "CR-DURABLE-002",
        "CR-DURABLE-003",
        "CR-DURABLE-004",
        "CR-DURABLE-005",
        "CR-DURABLE-006",
        "CR-DURABLE-007",
        "CR-BOUNDARY-001",
    ] {
        assert!(text.contains(id), "no vector covers {id}");
    }
}

/// A vector whose expectation is wrong fails (the harness really checks).
#[test]
fn a_wrong_expectation_fails() {
    let path = vector_files()
        .into_iter()
        .find(|p| p.ends_with("settle-lost-commit-response.json"))
        .expect("the spec's example vector");
    let text = std::fs::read_to_string(path).expect("readable");
    let wrong = text.replacen("\"outcome\": \"committed\"", "\"outcome\": \"applied\"", 1);
    assert_ne!(wrong, text);
    let s = settlement::parse(&wrong).expect("still valid");
    assert!(settlement::replay(&s).mismatch.is_some());
    let late = text.replacen("\"at\": 1501, \"send\"", "\"at\": 1500, \"send\"", 1);
    assert_ne!(late, text, "the vector sends at 1501");
    let s = settlement::parse(&late).expect("still valid");
    let m = settlement::replay(&s)
        .mismatch
        .expect("a send before due is caught");
    assert_eq!(m.field, "send");
}
