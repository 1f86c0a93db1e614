#!/usr/bin/env bash
# Formatting and lints for the whole workspace.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo fmt --all --check
cargo clippy --workspace --all-targets --locked -- -D warnings
# The published crate's docs (as docs.rs builds them, minus nightly's doc(cfg) badges).
RUSTDOCFLAGS="-D warnings" cargo doc -p leasebeat --no-deps --features http,journal --locked
# Packaging smoke check (issue 16): the release tools install, the release workflow passes
# actionlint, and the versions/napi targets/npm platform packages agree. The full build
# (scripts/package.sh without --check) is its own command, not part of the tests.
scripts/package.sh --check
# Docs that must work when pasted: links, URLs, rule ids, commands (issue 29).
scripts/check-docs.sh
