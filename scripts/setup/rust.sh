#!/usr/bin/env bash
# Rust toolchain components the lint stage needs.
set -euo pipefail
if command -v rustup >/dev/null 2>&1; then
  rustup component add rustfmt clippy >/dev/null 2>&1 || true
fi
cargo --version
