//! include/leasebeat.h is generated from this crate and committed; this test
//! fails when the committed header differs from what the code generates.
//!
//! Rewrite it with: `LEASEBEAT_BLESS=1 cargo test -p leasebeat-ffi --test header`

use std::path::PathBuf;

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn header_path() -> PathBuf {
    crate_dir().join("../include/leasebeat.h")
}

/// The version macros, taken from the crate version at generation time.
fn version_macros() -> String {
    format!(
        r#"/** Major version of the header (the crate version `{v}`). */
#define LEASEBEAT_VERSION_MAJOR {major}
/** Minor version of the header. */
#define LEASEBEAT_VERSION_MINOR {minor}
/** Patch version of the header. */
#define LEASEBEAT_VERSION_PATCH {patch}
/** The header's version as a string; compare with lb_version() at run time. */
#define LEASEBEAT_VERSION "{v}"
"#,
        v = env!("CARGO_PKG_VERSION"),
        major = env!("CARGO_PKG_VERSION_MAJOR"),
        minor = env!("CARGO_PKG_VERSION_MINOR"),
        patch = env!("CARGO_PKG_VERSION_PATCH"),
    )
}

fn generate() -> String {
    let mut config = cbindgen::Config::from_file(crate_dir().join("cbindgen.toml"))
        .expect("ffi-c/cbindgen.toml is readable");
    config.after_includes = Some(version_macros());
    let bindings = cbindgen::Builder::new()
        .with_crate(crate_dir())
        .with_config(config)
        .generate()
        .expect("cbindgen generates the header");
    let mut out = Vec::new();
    bindings.write(&mut out);
    String::from_utf8(out).expect("the header is UTF-8")
}

#[test]
fn header_is_up_to_date() {
    let generated = generate();
    let path = header_path();
    if std::env::var_os("LEASEBEAT_BLESS").is_some_and(|v| v != "0") {
        std::fs::write(&path, &generated).expect("include/leasebeat.h is writable");
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    if committed != generated {
        let line = committed
            .lines()
            .zip(generated.lines())
            .position(|(a, b)| a != b)
            .map_or_else(|| "the length".to_owned(), |i| format!("line {}", i + 1));
        panic!(
            "include/leasebeat.h is out of date (first difference at {line}); regenerate it with \
             `LEASEBEAT_BLESS=1 cargo test -p leasebeat-ffi --test header` and commit it"
        );
    }
}

#[test]
fn version_matches_the_crate() {
    // lb_version() returns `concat!(env!("CARGO_PKG_VERSION"), "\0")`; the C
    // suite (tests/c) checks at run time that it equals LEASEBEAT_VERSION.
    // (This test cannot link the library itself: its rlib and the core's are
    // both named `leasebeat`.)
    let lib = std::fs::read_to_string(crate_dir().join("src/lib.rs")).unwrap();
    assert!(lib.contains(r#"concat!(env!("CARGO_PKG_VERSION"), "\0")"#));
    let header = std::fs::read_to_string(header_path()).expect("include/leasebeat.h exists");
    let want = [
        format!(
            "#define LEASEBEAT_VERSION_MAJOR {}",
            env!("CARGO_PKG_VERSION_MAJOR")
        ),
        format!(
            "#define LEASEBEAT_VERSION_MINOR {}",
            env!("CARGO_PKG_VERSION_MINOR")
        ),
        format!(
            "#define LEASEBEAT_VERSION_PATCH {}",
            env!("CARGO_PKG_VERSION_PATCH")
        ),
        format!(
            "#define LEASEBEAT_VERSION \"{}\"",
            env!("CARGO_PKG_VERSION")
        ),
    ];
    for line in want {
        assert!(header.contains(&line), "include/leasebeat.h lacks {line:?}");
    }
}
