#!/usr/bin/env bash
# Runs every cargo-fuzz target in fuzz/ for SECONDS each (default 60), each seeded
# from tests/vectors/ (see fuzz/seed.py). Installs cargo-fuzz at a pinned version if it
# is missing; uses the nightly toolchain (cargo-fuzz needs -Z sanitizer flags).
#   scripts/fuzz.sh 600          # ten minutes per target
#   scripts/fuzz.sh 30 schema    # one target
# A crash leaves its input in fuzz/artifacts/<target>/ and fails the script.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${1:-60}
shift || true
CARGO_FUZZ_VERSION=0.13.1
TOOLCHAIN=${FUZZ_TOOLCHAIN:-nightly}

if ! rustup run "$TOOLCHAIN" rustc --version >/dev/null 2>&1; then
  echo "==> fuzz: installing the $TOOLCHAIN toolchain"
  rustup toolchain install "$TOOLCHAIN" --profile minimal
fi
if ! cargo fuzz --version 2>/dev/null | grep -q " $CARGO_FUZZ_VERSION\$"; then
  echo "==> fuzz: installing cargo-fuzz $CARGO_FUZZ_VERSION"
  cargo install cargo-fuzz --version "$CARGO_FUZZ_VERSION" --locked
fi

TARGETS=("$@")
if [ ${#TARGETS[@]} -eq 0 ]; then
  TARGETS=(schema retry_after scenario events leases settlement)
fi

echo "==> fuzz: seed corpora from tests/vectors/"
python3 fuzz/seed.py

for t in "${TARGETS[@]}"; do
  echo "==> fuzz: $t for ${SECONDS_EACH}s"
  # The seeds are read from fuzz/seeds/<t> and new inputs kept in fuzz/corpus/<t>.
  mkdir -p "fuzz/corpus/$t"
  cargo "+$TOOLCHAIN" fuzz run --fuzz-dir fuzz "$t" "fuzz/corpus/$t" "fuzz/seeds/$t" -- \
    -max_total_time="$SECONDS_EACH" -max_len=1048576 -timeout=20 -rss_limit_mb=2048 \
    -print_final_stats=1
done
echo "==> fuzz: ${#TARGETS[@]} targets ran ${SECONDS_EACH}s each without a crash"
