#!/usr/bin/env bash
# c.primary: the primary decision through the C ABI (ffi-c/bench/primary.c against the
# release static library), the same operation as scripts/bench-rust.sh's rust.primary.
# Prints one BENCH line. Not part of the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
case "$target" in /*) ;; *) target="$root/$target" ;; esac
CC="${CC:-cc}"
cargo build --release --locked -q -p leasebeat-ffi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$CC" -std=c11 -O2 -Wall -Wextra -Werror -Iinclude ffi-c/bench/primary.c \
  "$target/release/libleasebeat.a" -lpthread -ldl -lm -o "$tmp/bench_primary"
"$tmp/bench_primary" "${BENCH_ROUNDS:-41}"
