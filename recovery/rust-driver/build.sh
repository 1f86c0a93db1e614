#!/usr/bin/env bash
# Builds what recovery/rust-driver/adapter runs: the release test binary of
# cli/tests/recovery_rust.rs (and the `leasebeat` binary it starts as
# `leasebeat serve`), and records the test binary's path. Idempotent; quick
# when already built. Needs only cargo (no setup script).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
out="$ROOT/target/recovery/rust-driver"
mkdir -p "$out"
bin=$(cargo test --release --locked -p leasebeat-cli --test recovery_rust --no-run \
        --message-format=json 2>/dev/null \
      | python3 -c '
import json, sys
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") \
            and m["target"]["name"] == "recovery_rust" and m["profile"]["test"]:
        print(m["executable"])
')
if [ -z "$bin" ] || [ ! -x "$bin" ]; then
    echo "rust-driver build: the recovery_rust test binary was not built" >&2
    cargo test --release --locked -p leasebeat-cli --test recovery_rust --no-run >&2
    exit 1
fi
printf '%s\n' "$bin" > "$out/test-binary"
echo "rust-driver build: $bin" >&2
