#!/usr/bin/env bash
# Runs every test suite, fail-fast, in the order: fmt+clippy, Rust, C, Python, Node, JVM,
# fuzzing (about 20 s per cargo-fuzz target) and the SDK integrations (each SDK's own suite
# on leasebeat, integrations/*/run.sh).
# Each stage is its own script under scripts/ so it can also be run alone.
#
# First it installs what the stages need (scripts/setup/*.sh: apt packages when missing,
# rustfmt/clippy, node/ dev dependencies); each setup script is idempotent and quick when
# everything is present. LEASEBEAT_SKIP_SETUP=1 skips that step.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${LEASEBEAT_SKIP_SETUP:-0}" != 1 ]; then
  for setup in scripts/setup/*.sh; do
    echo "==> setup $setup"
    bash "$setup"
  done
fi
stages=(lint rust c python node jvm fuzz integrations realserver)
for stage in "${stages[@]}"; do
  script="scripts/test-$stage.sh"
  if [ -x "$script" ]; then
    echo "==> stage $stage ($script)"
    t0=$SECONDS
    "$script"
    echo "==> stage $stage passed in $((SECONDS - t0)) s"
  fi
done
echo "==> all stages passed"
