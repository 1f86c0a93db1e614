#!/usr/bin/env bash
# Installs what the Node.js stage (scripts/test-node.sh) needs on a fresh
# Debian machine: Node.js >= 20.17 with npm (N-API 9; @napi-rs/cli needs it),
# then the package's exact-pinned dev dependencies from node/package-lock.json
# (@napi-rs/cli, typescript, lossless-json). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/../.."
export DEBIAN_FRONTEND=noninteractive

node_ok() {
  command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 &&
    node -e 'const [a,b]=process.versions.node.split(".").map(Number); process.exit(a>20||(a===20&&b>=17)?0:1)'
}

if ! node_ok; then
  echo "installing Node.js and npm from Debian"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends nodejs npm
fi
if ! node_ok; then
  echo "Node.js >= 20.17 with npm is required, found: $(node --version 2>/dev/null || echo none)" >&2
  exit 1
fi
echo "node $(node --version), npm $(npm --version)"

(cd node && npm ci --no-audit --no-fund --loglevel=error)
