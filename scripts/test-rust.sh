#!/usr/bin/env bash
# Rust unit, doc, property and vector tests, then the CLI replay of every vector.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --workspace --locked --release
cargo run --release --locked -q -p leasebeat-cli -- replay tests/vectors/*.json tests/vectors/pending-bindings/*.json
