#!/usr/bin/env bash
# Benchmarks of the core (issue 15). Not part of the test suite.
#  1. core/benches/ratios.rs: rust.floor_value (serde_json Value parse of the extend body),
#     rust.primary (handle_sent + handle_response_ref of the 200 extend body, borrowed,
#     + poll_action, SequentialKeys) and rust.beat_uuid (poll, handle_sent,
#     handle_response_ref, poll with UUIDv4 keys),
#     measured interleaved (rounds of each in turn, medians), so that the load of a shared
#     machine drifts over all three alike and the ratios stay comparable.
#  2. core/benches/lease_bytes.rs: rust.lease_bytes, size_of::<Heartbeat>() + heap after
#     the create and 1,000 beats (a counting global allocator).
#  3. with --criterion: the criterion benches (core/benches/heartbeat.rs) and their ratios
#     to the floor, for a closer look (slower; absolute times vary with the machine).
# Every figure prints one line `BENCH {"id": ..., "value": ..., "unit": ...}` on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
criterion=0
if [ "${1:-}" = "--criterion" ]; then
  criterion=1
  shift
fi
cargo bench --locked -q -p leasebeat --bench ratios
cargo bench --locked -q -p leasebeat --bench lease_bytes
if [ "$criterion" = 1 ]; then
  cargo bench --locked -p leasebeat --bench heartbeat -- --noplot "$@"
  python3 - "${CARGO_TARGET_DIR:-target}/criterion" <<'PY'
import json, pathlib, sys
root = pathlib.Path(sys.argv[1])
est = {}
for f in root.glob("**/new/estimates.json"):
    name = json.loads((f.parent / "benchmark.json").read_text())["full_id"]
    est[name] = json.loads(f.read_text())["median"]["point_estimate"]
floor = est.get("floor/serde_json_parse_extend_body")
if not floor:
    sys.exit("no floor measurement found")
print(f"\nratios to floor/serde_json_parse_extend_body ({floor:.0f} ns median, this run):")
for name in sorted(est):
    print(f"  {name:40s} {est[name] / floor:6.2f}x")
PY
fi
