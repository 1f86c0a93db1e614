#!/usr/bin/env bash
# Node.js benchmark (issue 15; not a test, never run by test-all): builds the
# addon in release mode, stages the package (as scripts/test-node.sh packs
# it) and runs node/bench/decision.mjs on the shared fixture of
# core/benches/heartbeat.rs (create with ttl 60000 ms and request timeout
# 10000 ms answered 200 at 1500 ms, first extend sent at 38500 ms and
# answered 200 at 38600 ms with the extend body). Timed regions (medians of
# 1001 rounds of 64 operations after 100 warm-up rounds, ns per operation):
#   node.decision   hb.handleResponse(2, { status: 200, body: <Uint8Array> }, 38600)
#                   + hb.pollAction(): response conversion, the core's work,
#                   the Decision and the send Action with its Attempt (key,
#                   body Buffer, bodyText, bigints), all as JavaScript objects
#   node.json_parse JSON.parse of the same extend body as a string
# The heartbeats are prepared outside the timed loop. Then, for the
# addon's overhead above the core, it runs the core's own criterion bench
# of the same primary decision (the first benchmark of core/benches/heartbeat.rs
# matching "heartbeat/primary"), skipped with LEASEBEAT_BENCH_NO_CORE=1.
# Prints a human table and the BENCH lines node.decision and node.json_parse.
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd)"

work="$(mktemp -d "${TMPDIR:-/tmp}/leasebeat-bench-node.XXXXXX")"
trap 'rm -rf "$work"' EXIT

echo "==> node $(node --version); load: $(uptime | sed 's/.*load average/load average/')"
if [ ! -x node/node_modules/.bin/napi ]; then
  (cd node && npm ci --no-audit --no-fund --loglevel=error)
fi

echo "==> building the addon (release)"
(cd node && npx --no-install napi build --platform --release --no-const-enum \
  --output-dir "$work/gen" --js index.js --dts index.d.ts) >"$work/build.log" 2>&1 \
  || { cat "$work/build.log" >&2; exit 1; }

pkg="$work/pkg"
mkdir -p "$pkg"
cp node/package.json node/index.js node/index.mjs node/main.js node/runner.js node/fast.js "$pkg/"
cp "$work"/gen/leasebeat.*.node "$pkg/"

echo "==> node/bench/decision.mjs"
out="$work/node.txt"
LEASEBEAT_ENTRY="$pkg/main.js" node node/bench/decision.mjs | tee "$out"

core_ns=""
if [ "${LEASEBEAT_BENCH_NO_CORE:-0}" != 1 ]; then
  echo "==> the core alone: cargo bench -p leasebeat --bench heartbeat -- heartbeat/primary"
  if cargo bench -p leasebeat --bench heartbeat -- "heartbeat/primary" --warm-up-time 1 --measurement-time 3 \
      >"$work/core.txt" 2>"$work/core.err"; then
    # criterion: "<name>  time:   [low mid high]"; mid is its estimate.
    core_ns="$(awk '/time:/ { for (i = 1; i <= NF; i++) if ($i ~ /^\[/) { v = $(i + 2); u = $(i + 3);
        if (u == "ns") print v; else if (u ~ /^(µs|us)$/) print v * 1000; else if (u == "ms") print v * 1e6; exit } }' "$work/core.txt")"
    grep -B1 'time:' "$work/core.txt" | head -4 | sed 's/^/    /'
  else
    echo "    (the core bench did not run; see below)"; tail -5 "$work/core.err" | sed 's/^/    /'
  fi
fi

decision="$(sed -n 's/^BENCH {"id": *"node.decision".*"value": *\([0-9.]*\).*/\1/p' "$out")"
parse="$(sed -n 's/^BENCH {"id": *"node.json_parse".*"value": *\([0-9.]*\).*/\1/p' "$out")"
echo
echo "summary (ns per operation, medians; load: $(uptime | sed 's/.*load average: //'))"
printf '  %-46s %10s\n' "node.decision (handleResponse + pollAction)" "$decision"
printf '  %-46s %10s\n' "node.json_parse (JSON.parse of the body)" "$parse"
if [ -n "$core_ns" ]; then
  printf '  %-46s %10s\n' "core alone (criterion, primary decision)" "$core_ns"
  printf '  %-46s %10s\n' "addon overhead above the core" "$(awk -v a="$decision" -v b="$core_ns" 'BEGIN { printf "%.0f", a - b }')"
fi
printf '  %-46s %10s\n' "target: node.decision at most" "1000"
