#!/usr/bin/env bash
# A benchmark, not a test: one `leasebeat serve` and one driver process on
# 127.0.0.1, LEASES leases with TTL_MS and a BUDGET_MS request budget for
# SECONDS seconds (ramp-up included). Prints the driver's line
#   leases=.. beats_per_s=.. late_p50_ms=.. late_p99_ms=.. rss_bytes_per_lease=.. lapses=.. unreported=.. ...
# (lateness = observed send minus due time, after the ramp-up; lapses counted
# by the server up to the end of the run; unreported = lapses with no stop or
# jeopardy event seen by the driver before the expiry) and the server's
# summary line. Usage: scripts/bench-driver.sh LEASES TTL_MS BUDGET_MS SECONDS
# (BENCH_WORKERS=N sets the driver's worker threads; default 16. BENCH_HEAP=1
# runs the driver under a counting allocator, cli/examples/bench_heap.rs, which
# adds a heap_bytes_per_lease line: live heap growth per lease.
# LEASEBEAT_BIN=path runs another build of leasebeat, for before/after runs.
# BENCH_URL=URL drives that server instead of a local `leasebeat serve`, e.g.
# the real Cycles server (bench-driver's API key is `bench-key`): such a server
# keeps no lapse log, so the line says lapses=not_measured
# unreported=not_measured; judge lapses on the server's side.)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$#" -ne 4 ]; then
  echo "usage: $0 LEASES TTL_MS BUDGET_MS SECONDS" >&2
  exit 2
fi
leases="$1" ttl="$2" budget="$3" seconds="$4"
cargo build --release -q -p leasebeat-cli
if [ -n "${BENCH_HEAP:-}" ]; then cargo build --release -q -p leasebeat-cli --example bench_heap; fi
bin="${LEASEBEAT_BIN:-${CARGO_TARGET_DIR:-target}/release/leasebeat}"
tmp="$(mktemp -d)"
serve_pid=""
cleanup() {
  if [ -n "$serve_pid" ]; then kill "$serve_pid" 2>/dev/null || true; wait "$serve_pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
# The server's clock is mapped onto Unix ms, so its expiries compare with the
# driver's wall-clock observations (the server starts after `date`: its clock
# runs behind the wall clock by its start-up time, the strict direction).
if [ -n "${BENCH_URL:-}" ]; then
  # Another server: no lapse log to read (bench-driver says not_measured).
  url="$BENCH_URL"
  "$bin" bench-driver --url "$url" --leases "$leases" --ttl-ms "$ttl" --budget-ms "$budget" \
    --seconds "$seconds" ${BENCH_WORKERS:+--workers "$BENCH_WORKERS"}
  echo "lapses: not measured (BENCH_URL keeps no lapse log; judge lapses on the server's side)"
  exit 0
fi
"$bin" serve --epoch-ms "$(date +%s%3N)" --max-connections 1024 --retention-ms 60000 >"$tmp/serve.out" 2>"$tmp/serve.err" &
serve_pid=$!
for _ in $(seq 100); do grep -q '^listening on ' "$tmp/serve.out" 2>/dev/null && break; sleep 0.05; done
url="$(sed -n 's/^listening on //p' "$tmp/serve.out" | head -n1)"
[ -n "$url" ] || { echo "serve did not start" >&2; cat "$tmp/serve.err" >&2; exit 1; }
if [ -n "${BENCH_HEAP:-}" ]; then
  "${CARGO_TARGET_DIR:-target}/release/examples/bench_heap" "$url" "$leases" "$ttl" "$budget" \
    "$seconds" "${BENCH_WORKERS:-16}" "$tmp/serve.out"
else
  "$bin" bench-driver --url "$url" --leases "$leases" --ttl-ms "$ttl" --budget-ms "$budget" \
    --seconds "$seconds" --lapse-file "$tmp/serve.out" ${BENCH_WORKERS:+--workers "$BENCH_WORKERS"}
fi
serve_rss_kb="$(awk '/VmRSS/ {print $2}' "/proc/$serve_pid/status" 2>/dev/null || echo 0)"
# The server's CPU (user + system, all threads) over its life, in % of one core.
serve_cpu_pct="$(awk -v hz="$(getconf CLK_TCK)" -v up="$(cut -d' ' -f1 /proc/uptime)" '{
  sub(/^.*\) /, ""); printf "%.1f", 100 * (($12 + $13) / hz) / (up - $20 / hz) }' "/proc/$serve_pid/stat" 2>/dev/null || echo 0)"
kill -INT "$serve_pid"
wait "$serve_pid" || true
serve_pid=""
echo "$(grep '^summary ' "$tmp/serve.out" || echo 'summary missing') serve_rss_kb=$serve_rss_kb serve_cpu_pct=$serve_cpu_pct"
