#!/usr/bin/env bash
# Stage script: a short run (about 20 s) of every cargo-fuzz target, seeded from
# tests/vectors/. Long runs: scripts/fuzz.sh SECONDS.
set -euo pipefail
cd "$(dirname "$0")/.."
exec scripts/fuzz.sh "${FUZZ_SECONDS:-20}"
