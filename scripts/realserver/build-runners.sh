#!/usr/bin/env bash
# Builds what scripts/realserver/stage.py runs against the real server, into WORK
# (target/realserver): the leasebeat CLI (cargo), the C library in a prefix and the
# example agent linked to it, a venv with the Python wheel and httpx, the Node addon,
# the JVM binding's classes. Cargo and Maven reuse the other stages' outputs.
set -euo pipefail
WORK="$1"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
target="${CARGO_TARGET_DIR:-$ROOT/target}"
case "$target" in /*) ;; *) target="$ROOT/$target" ;; esac

echo "== leasebeat CLI"
cargo build --release --locked -p leasebeat-cli

echo "== C library + example agent"
ffi-c/install.sh "$WORK/prefix"
cc -std=c11 -O2 -Wall -Wextra -Werror examples/c-agent/agent.c \
  $(PKG_CONFIG_PATH="$WORK/prefix/lib/pkgconfig" pkg-config --cflags --libs leasebeat) \
  -Wl,-rpath,"$WORK/prefix/lib" -o "$WORK/c-agent"

echo "== Python wheel + venv (httpx pinned as scripts/test-python.sh does)"
HTTPX_PIN="$(sed -n 's/^HTTPX_PIN=\([^ ]*\).*/\1/p' scripts/test-python.sh)"
MATURIN_PIN="$(sed -n 's/^MATURIN_PIN=\([^ ]*\).*/\1/p' scripts/test-python.sh)"
if [ ! -x "$WORK/build-venv/bin/maturin" ]; then
  python3 -m venv "$WORK/build-venv"
  "$WORK/build-venv/bin/python" -m pip install -q --disable-pip-version-check "$MATURIN_PIN"
fi
rm -rf "$WORK/wheels"
(cd py && "$WORK/build-venv/bin/maturin" build --release --locked --out "$WORK/wheels")
[ -x "$WORK/venv/bin/python" ] || python3 -m venv "$WORK/venv"
"$WORK/venv/bin/python" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps \
  "$WORK"/wheels/*.whl
"$WORK/venv/bin/python" -m pip install -q --disable-pip-version-check "$HTTPX_PIN"

echo "== Node addon"
[ -d node/node_modules ] || (cd node && npm ci --no-audit --no-fund --loglevel=error)
(cd node && npx --no-install napi build --platform --release --no-const-enum \
  --output-dir "$WORK/node-gen" --js index.js --dts index.d.ts)
ls "$WORK"/node-gen/*.node

echo "== JVM binding"
cargo build --release --locked -p leasebeat-jni
(cd jvm && mvn -B -q --no-transfer-progress -Dstyle.color=never compile)
ls jvm/target/classes/io/leasebeat/HeartbeatRunner.class
