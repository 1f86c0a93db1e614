#!/usr/bin/env bash
# The settlement journal's interchangeability with runcycles Python 0.5.3 (J-2), both
# directions: a venv of its own gets runcycles==0.5.3 from PyPI and pytest; the test
# writes records with runcycles' journal and reads them with `leasebeat journal`, and the
# reverse (tests/journal-interop/). Closing line: `journal-interop: N passed`.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY=${PYTHON:-python3}
RUNCYCLES_PIN=runcycles==0.5.3
PYTEST_PIN=pytest==9.2.0
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
case "$TARGET" in /*) ;; *) TARGET="$ROOT/$TARGET" ;; esac
WORK=$ROOT/target/journal-interop
rm -rf "$WORK"
mkdir -p "$WORK"

echo "==> journal-interop: cargo build --release -p leasebeat-cli"
cargo build --release --locked -q -p leasebeat-cli
export LEASEBEAT_BIN=$TARGET/release/leasebeat

echo "==> journal-interop: venv with $RUNCYCLES_PIN $PYTEST_PIN"
"$PY" -m venv "$WORK/venv"
"$WORK/venv/bin/python" -m pip install -q --disable-pip-version-check "$RUNCYCLES_PIN" "$PYTEST_PIN"

echo "==> journal-interop: pytest tests/journal-interop"
export PYTHONDONTWRITEBYTECODE=1
status=0
"$WORK/venv/bin/python" -m pytest -p no:cacheprovider -q -ra \
  --rootdir "$ROOT/tests/journal-interop" "$ROOT/tests/journal-interop" >"$WORK/pytest.log" 2>&1 || status=$?
cat "$WORK/pytest.log"
n=$(grep -Eo '[0-9]+ passed' "$WORK/pytest.log" | tail -1 | cut -d' ' -f1 || true)
f=$(grep -Eo '[0-9]+ failed' "$WORK/pytest.log" | tail -1 | cut -d' ' -f1 || true)
echo "journal-interop: ${n:-0} passed, ${f:-0} failed (runcycles 0.5.3 <-> leasebeat journal)"
exit "$status"
