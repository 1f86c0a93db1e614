#!/usr/bin/env bash
# Recovery conformance (issue 27): the official SDK Recovery Conformance Profile 0.3 runner,
# `--claim durable`, over every leasebeat runner that settles leases:
#
#   rust-driver  c-driver  python-thread  python-asyncio  node  java
#
# Each runner R has recovery/R/build.sh (prepares its test binaries, idempotent) and
# recovery/R/adapter (runs exactly the native tests bound to one scenario, against
# `leasebeat serve`, and prints the runner's one JSON result). The profile's runner and
# catalog are vendored in recovery/profile/ (copied unchanged from the Cycles protocol
# repository's `scripts/` and `client-recovery/`; when ../shared/reference is present the
# copies are checked against it). One evidence report per runner is written to
# target/recovery/<runner>.json.
#
# Closing line: `recovery: N passed, M failed` over runners x scenarios.
# LEASEBEAT_RECOVERY_RUNNERS="node java" runs only those.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
PROFILE="$ROOT/recovery/profile"
OUT="$ROOT/target/recovery"
mkdir -p "$OUT"

runners=(${LEASEBEAT_RECOVERY_RUNNERS:-rust-driver c-driver python-thread python-asyncio node java})

# The vendored profile must be the one the protocol repository ships (when it is here).
SHARED_REF="${LEASEBEAT_PEERS_DIR:-$ROOT/../shared/peers}/../reference"
if [ -d "$SHARED_REF/client-recovery" ]; then
  for f in client-recovery/scenarios.yaml client-recovery/PROFILE.md \
    client-recovery/report.schema.json scripts/run_client_recovery_conformance.py; do
    if ! cmp -s "$PROFILE/$f" "$SHARED_REF/$f"; then
      echo "recovery: recovery/profile/$f differs from $SHARED_REF/$f (re-vendor it)" >&2
      echo "recovery: 0 passed, 1 failed"
      exit 1
    fi
  done
  echo "==> recovery: vendored profile matches $SHARED_REF"
fi

# The runner needs PyYAML: a venv of its own, pinned.
VENV="$ROOT/target/recovery-venv"
if ! "$VENV/bin/python" -c 'import yaml' >/dev/null 2>&1; then
  echo "==> recovery: venv with PyYAML"
  python3 -m venv "$VENV" || { echo "recovery: 0 passed, 1 failed"; exit 1; }
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check "pyyaml==6.0.3" ||
    { echo "recovery: 0 passed, 1 failed"; exit 1; }
fi

total_scenarios=$("$VENV/bin/python" -c '
import yaml, sys
print(len(yaml.safe_load(open(sys.argv[1]))["scenarios"]))' "$PROFILE/client-recovery/scenarios.yaml")

passed=0
failed=0
table=()
commit=$(git rev-parse HEAD 2>/dev/null || echo unknown)
for r in "${runners[@]}"; do
  dir="$ROOT/recovery/$r"
  echo "==> recovery: $r"
  t0=$SECONDS
  if [ ! -x "$dir/build.sh" ] || [ ! -x "$dir/adapter" ]; then
    echo "recovery: $r has no recovery/$r/build.sh and adapter" >&2
    failed=$((failed + total_scenarios))
    table+=("$r 0/$total_scenarios 0 no-adapter")
    continue
  fi
  if ! "$dir/build.sh" >"$OUT/$r.build.log" 2>&1; then
    tail -40 "$OUT/$r.build.log" >&2
    echo "recovery: $r: build.sh failed (log: target/recovery/$r.build.log)" >&2
    failed=$((failed + total_scenarios))
    table+=("$r 0/$total_scenarios $((SECONDS - t0)) build-failed")
    continue
  fi
  rm -f "$OUT/$r.json"
  "$VENV/bin/python" "$PROFILE/scripts/run_client_recovery_conformance.py" \
    --claim durable \
    --timeout 180 \
    --report-json "$OUT/$r.json" \
    --implementation "leasebeat/$r" \
    --implementation-commit "$commit" \
    --adapter "$dir/adapter"
  rc=$?
  if [ -f "$OUT/$r.json" ]; then
    read -r p f < <("$VENV/bin/python" -c '
import json, sys
s = json.load(open(sys.argv[1]))["summary"]
print(s["passed"], s["failed"])' "$OUT/$r.json")
  else
    p=0
    f=$total_scenarios
  fi
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
  passed=$((passed + p))
  failed=$((failed + f))
  table+=("$r $p/$((p + f)) $((SECONDS - t0))")
done

echo "==> recovery conformance (claim durable, profile $(sed -n 's/^version: *//p' "$PROFILE/client-recovery/scenarios.yaml" | tr -d '"'))"
printf '%-16s %10s %7s %s\n' runner passed "time s" ""
for row in "${table[@]}"; do
  # shellcheck disable=SC2086
  set -- $row
  printf '%-16s %10s %7s %s\n' "$1" "$2" "$3" "${4:-}"
done
echo "reports: target/recovery/<runner>.json"
echo "recovery: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
