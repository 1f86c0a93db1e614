#!/usr/bin/env bash
# Rust unit, doc, property and vector tests, the CLI replay of every vector, then the
# checks that the `leasebeat` crate works as a published library.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
cargo test --workspace --locked --release
cargo run --release --locked -q -p leasebeat-cli -- replay tests/vectors/*.json tests/vectors/settlement/*.json

echo "==> rust: cargo publish --dry-run -p leasebeat (package, then build it from the packaged sources)"
cargo publish --dry-run --locked --allow-dirty -p leasebeat

# A downstream project that already pins older neighbours must resolve and build: the
# published crate's dependencies are caret ranges with low minimums (core/Cargo.toml).
echo "==> rust: a downstream crate pinning serde 1.0.100 / serde_json 1.0.60 / uuid 1.1.0 builds"
DS=$(mktemp -d)
trap 'rm -rf "$DS"' EXIT
mkdir -p "$DS/src"
cat > "$DS/Cargo.toml" <<TOML
[package]
name = "downstream"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
leasebeat = { path = "$ROOT/core" }
serde = "=1.0.100"
serde_json = "=1.0.60"
uuid = "=1.1.0"

[workspace]
TOML
cat > "$DS/src/main.rs" <<'RS'
fn main() {
    let hb = leasebeat::Heartbeat::new(leasebeat::Config::new(60_000, Some(10_000)))
        .expect("a valid config");
    match hb.poll_action() {
        leasebeat::Action::Send(a) => println!("downstream: first attempt {:?}", a.kind),
        other => panic!("unexpected first action {other:?}"),
    }
}
RS
CARGO_TARGET_DIR="$ROOT/target/downstream" cargo run -q --manifest-path "$DS/Cargo.toml"
