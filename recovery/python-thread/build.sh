#!/usr/bin/env bash
# Prepares what recovery/python-{thread,asyncio}/adapter need: the reference
# server (target/release/leasebeat) and a venv under target/recovery-python/
# with the leasebeat wheel (maturin, as scripts/test-python.sh builds it) and
# pinned pytest. Idempotent: the wheel is rebuilt and reinstalled only when a
# file under py/ or core/ is newer than the installed stamp. Works on a fresh
# clone (needs cargo and python3 >= 3.10 with venv).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
PY=${PYTHON:-python3}
MATURIN_PIN=maturin==1.16.0
PYTEST_PIN=pytest==9.2.0
WORK=$ROOT/target/recovery-python
VENV=$WORK/venv
STAMP=$WORK/installed.stamp
mkdir -p "$WORK"

echo "recovery/python: cargo build --release -p leasebeat-cli" >&2
cargo build --release --locked -q -p leasebeat-cli >&2

if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV" >&2
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check "$MATURIN_PIN" "$PYTEST_PIN" >&2
  rm -f "$STAMP"
fi
if [ -f "$STAMP" ] && [ -z "$(find py core Cargo.toml Cargo.lock -newer "$STAMP" \
     \( -name '*.rs' -o -name '*.py' -o -name '*.pyi' -o -name '*.toml' -o -name Cargo.lock \) \
     -not -path 'py/tests/*' -print -quit)" ]; then
  echo "recovery/python: wheel up to date ($VENV)" >&2
  exit 0
fi
echo "recovery/python: maturin build --release" >&2
rm -rf "$WORK/wheels"
(cd py && "$VENV/bin/maturin" build --release --locked --out "$WORK/wheels" >&2)
"$VENV/bin/python" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps "$WORK"/wheels/leasebeat-*.whl >&2
touch "$STAMP"
echo "recovery/python: installed $(ls "$WORK"/wheels/) into $VENV" >&2
