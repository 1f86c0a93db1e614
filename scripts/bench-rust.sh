#!/usr/bin/env bash
# Benchmarks of the core (criterion), then ratios measured in this same run against the
# floor every decision pays anyway: parsing the response body with serde_json. Absolute
# times vary with the machine; the ratios are what to compare across changes.
# Not part of the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
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
