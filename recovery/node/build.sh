#!/usr/bin/env bash
# recovery/node/build.sh: prepares what recovery/node/adapter needs, idempotent and quick
# when already built: node/node_modules (npm ci), the reference server
# (target/release/leasebeat, `cargo build --release -p leasebeat-cli`) and the Node addon
# (node/leasebeat.<platform>.node, built like scripts/test-node.sh builds it, release, into
# a scratch directory; only the .node file is copied into node/, so the committed
# index.js/index.d.ts are never touched). The addon is rebuilt only when a Rust source,
# manifest or the lock file is newer than it.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo="$(pwd)"

if [ ! -d node/node_modules/@napi-rs/cli ]; then
  echo "==> npm ci (node/)" >&2
  (cd node && npm ci --no-audit --no-fund --loglevel=error) >&2
fi

echo "==> cargo build --release --locked -p leasebeat-cli" >&2
cargo build --release --locked -p leasebeat-cli >&2

addon="$(ls node/leasebeat.*.node 2>/dev/null | head -n 1 || true)"
stale=1
if [ -n "$addon" ]; then
  newer="$(find node/src core/src node/Cargo.toml core/Cargo.toml Cargo.toml Cargo.lock node/build.rs \
    -newer "$addon" -print -quit 2>/dev/null || true)"
  [ -z "$newer" ] && stale=0
fi
if [ "$stale" -eq 1 ]; then
  echo "==> building the Node addon (release)" >&2
  work="$(mktemp -d "${TMPDIR:-/tmp}/leasebeat-recovery-node.XXXXXX")"
  trap 'rm -rf "$work"' EXIT
  (cd node && npx --no-install napi build --platform --release --no-const-enum \
    --output-dir "$work" --js index.js --dts index.d.ts) >&2
  cp "$work"/leasebeat.*.node node/
else
  echo "==> the Node addon is fresh: $addon" >&2
fi
echo "recovery/node: ready ($repo)" >&2
