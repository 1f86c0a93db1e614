#!/usr/bin/env bash
# Runs every test suite, fail-fast, in the order: fmt+clippy, Rust, C, Python, Node, JVM.
# Each stage is its own script under scripts/ so it can also be run alone.
set -euo pipefail
cd "$(dirname "$0")/.."
stages=(lint rust c python node jvm)
for stage in "${stages[@]}"; do
  script="scripts/test-$stage.sh"
  if [ -x "$script" ]; then
    echo "==> stage $stage ($script)"
    "$script"
  fi
done
echo "==> all stages passed"
