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
# Separate processes land on different cores, caches and clock speeds (single runs of the
# C program alone read 147 to 207 ns within a minute), so the C figure is compared with the
# Rust one taken in alternation with it: REPS times a C run and a Rust run (the ratios
# harness, primary decision only), each median of its rounds; the reported figures are the
# medians over the repetitions.
rust_bin="$(cargo bench --locked -q -p leasebeat --bench ratios --no-run --message-format=json 2>/dev/null \
  | python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "ratios":
        print(m["executable"])')"
# Both run pinned to the same CPU when taskset exists (the two vCPUs here differ by up to
# 40 % for the same binary; BENCH_CPU picks one, default 0).
pin=()
if command -v taskset >/dev/null; then pin=(taskset -c "${BENCH_CPU:-0}"); fi
reps="${BENCH_REPS:-7}"
rounds="${BENCH_ROUNDS:-15}"
: > "$tmp/c.txt"
: > "$tmp/rust.txt"
for _ in $(seq "$reps"); do
  "${pin[@]}" "$tmp/bench_primary" "$rounds" | sed -n 's/^BENCH .*"value": \([0-9.]*\).*/\1/p' >> "$tmp/c.txt"
  BENCH_ROUNDS="$rounds" "${pin[@]}" "$rust_bin" --bench 2>/dev/null \
    | sed -n 's/^BENCH {"id": "rust.primary".*"value": \([0-9.]*\).*/\1/p' >> "$tmp/rust.txt"
done
python3 - "$tmp/c.txt" "$tmp/rust.txt" <<'PY'
import statistics, sys
c = [float(x) for x in open(sys.argv[1]) if x.strip()]
r = [float(x) for x in open(sys.argv[2]) if x.strip()]
if not c or not r:
    sys.exit("bench-c: a run printed no figure")
print(f"c.primary runs (ns): {c}; rust.primary runs alternating with them: {r}")
for id_, what, v in (
    ("c.primary", "lb_heartbeat_handle_response(200 extend body) + lb_heartbeat_poll_action, sequential keys, from C; median of runs alternating with the Rust ones", statistics.median(c)),
    ("c.rust_primary", "rust.primary in runs alternating with the C ones (the C figure's reference)", statistics.median(r)),
):
    print(f'BENCH {{"id": "{id_}", "what": "{what}", "value": {v:.1f}, "unit": "ns"}}')
PY
