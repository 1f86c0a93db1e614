//! `leasebeat journal` as an operator runs it.

use std::process::{Command, Output};

fn lb(base: &std::path::Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_leasebeat"))
        .args(["journal", "--dir"])
        .arg(base)
        .args(["--base-url", "http://127.0.0.1:7878", "--tenant", "acme"])
        .args(args)
        .env_remove("CYCLES_JOURNAL_DIR")
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn write_list_show_remove() {
    let tmp = tempfile::tempdir().unwrap();
    let body =
        r#"{"idempotency_key":"k","actual":{"unit":"TOKENS","amount":18446744073709551617}}"#;
    let out = lb(
        tmp.path(),
        &[
            "--id-json",
            "write",
            r#""a/b\u0000c""#,
            "--commit-body",
            body,
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = lb(tmp.path(), &["list"]);
    let stdout = text(&out.stdout);
    let lines: Vec<_> = stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{stdout}");
    assert!(
        lines[0].contains(r#""reservation_id":"a/b\u0000c""#),
        "{stdout}"
    );
    assert!(
        lines[0].contains("18446744073709551617"),
        "bodies verbatim: {stdout}"
    );
    assert!(lines[1].starts_with("journal: 1 records, 0 other server, 0 quarantined"));
    let out = lb(tmp.path(), &["--id-json", "show", r#""a/b\u0000c""#]);
    assert!(out.status.success());
    assert!(text(&out.stdout).starts_with(r#"{"version":1,"reservation_id":"a/b\u0000c""#));
    let out = lb(tmp.path(), &["--id-json", "remove", r#""a/b\u0000c""#]);
    assert_eq!(text(&out.stdout).trim(), "removed");
    let out = lb(tmp.path(), &["--id-json", "show", r#""a/b\u0000c""#]);
    assert_eq!(out.status.code(), Some(1), "none: exit 1");
}

#[test]
fn errors_are_typed_and_exit_2() {
    let tmp = tempfile::tempdir().unwrap();
    let out = lb(tmp.path(), &["write", "r-1", "--commit-body", "[1]"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("journal invalid_record"),
        "{}",
        text(&out.stderr)
    );
    let link = tmp.path().join("link");
    std::os::unix::fs::symlink(tmp.path(), &link).unwrap();
    let out = lb(&link, &["list"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("journal symlink"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn list_reports_quarantine() {
    let tmp = tempfile::tempdir().unwrap();
    let out = lb(tmp.path(), &["write", "r-1", "--commit-body", "{}"]);
    let path = text(&out.stdout).trim().to_owned();
    std::fs::write(&path, "{\"version\":1,").unwrap();
    let out = lb(tmp.path(), &["list"]);
    let stdout = text(&out.stdout);
    assert!(stdout.contains(r#""event":"quarantined""#), "{stdout}");
    assert!(
        stdout.contains("0 records, 0 other server, 1 quarantined"),
        "{stdout}"
    );
    assert!(std::path::Path::new(&path.replace(".json", ".corrupt")).is_file());
}
