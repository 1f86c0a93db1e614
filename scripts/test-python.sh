#!/usr/bin/env bash
# Python binding: build the abi3 wheel with maturin, install it in a fresh
# virtual environment with pinned pytest, mypy and httpx, then run
# mypy.stubtest, `mypy --strict` on the typed heartbeat loop
# (py/tests/test_typed_loop.py), a help(leasebeat) check and the pytest suite
# (every tests/vectors/*.json, the API
# tests, and the tests against `leasebeat serve`, built here in release mode)
# against the INSTALLED wheel, from a directory where the source tree is not
# importable. The same wheel is then tested on every other
# CPython >= 3.10 found (pyenv versions, or LEASEBEAT_EXTRA_PYTHONS="py1 py2").
# Last, scripts/test-journal-interop.sh (the settlement journal against runcycles 0.5.3's).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
export PYTHONDONTWRITEBYTECODE=1  # keep py/tests free of __pycache__
PY=${PYTHON:-python3}
MATURIN_PIN=maturin==1.16.0
PYTEST_PIN=pytest==9.2.0
MYPY_PIN=mypy==2.4.1
HTTPX_PIN=httpx==0.28.1  # the optional extra leasebeat[httpx]; tested here

TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
case "$TARGET" in /*) ;; *) TARGET="$ROOT/$TARGET" ;; esac
WORK=$ROOT/target/python-ci
rm -rf "$WORK"
mkdir -p "$WORK/wheels" "$WORK/run"

echo "==> python: cargo build --release -p leasebeat-cli (the reference server)"
cargo build --release --locked -p leasebeat-cli
export LEASEBEAT_BIN=$TARGET/release/leasebeat

echo "==> python: build venv with $MATURIN_PIN"
"$PY" -m venv "$WORK/build-venv"
"$WORK/build-venv/bin/python" -m pip install -q --disable-pip-version-check "$MATURIN_PIN"

echo "==> python: maturin build --release (abi3 wheel)"
(cd py && "$WORK/build-venv/bin/maturin" build --release --locked --out "$WORK/wheels")
WHEEL=$(ls "$WORK"/wheels/leasebeat-*-cp310-abi3-*.whl)
echo "wheel: $WHEEL"

run_suite() { # $1 = interpreter, $2 = venv dir, $3 = "full" for stubtest + help too
  local py=$1 venv=$2 mode=$3
  "$py" -m venv "$venv"
  local vpy=$venv/bin/python
  "$vpy" -m pip install -q --disable-pip-version-check "$WHEEL" "$PYTEST_PIN" "$MYPY_PIN" "$HTTPX_PIN"
  echo "==> python: $("$vpy" --version) in a fresh venv"
  (
    cd "$WORK/run"
    export LEASEBEAT_REQUIRE_INSTALLED=1 LEASEBEAT_VECTORS_DIR="$ROOT/tests/vectors"
    "$vpy" -c 'import leasebeat, sys; assert "site-packages" in leasebeat.__file__, leasebeat.__file__'
    if [ "$mode" = full ]; then
      echo "==> python: mypy.stubtest leasebeat"
      "$vpy" -m mypy.stubtest leasebeat
      echo "==> python: mypy --strict on the typed heartbeat loop"
      "$vpy" -m mypy --strict --cache-dir "$WORK/mypy-cache" "$ROOT/py/tests/test_typed_loop.py"
      echo "==> python: help(leasebeat)"
      "$vpy" -c 'import leasebeat; help(leasebeat)' >"$WORK/help.txt"
      for name in Heartbeat Decision Numbers Action Attempt StopReason LeaseError primary_schedule; do
        grep -q "$name" "$WORK/help.txt" || { echo "help(leasebeat) lacks $name" >&2; exit 1; }
      done
      echo "help(leasebeat): $(wc -l <"$WORK/help.txt") lines"
    fi
    echo "==> python: pytest (installed wheel)"
    "$vpy" -m pytest -p no:cacheprovider --import-mode=importlib \
      --rootdir "$ROOT/py/tests" -q -ra "$ROOT/py/tests"
  )
}

run_suite "$PY" "$WORK/venv" full

primary=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
extras=${LEASEBEAT_EXTRA_PYTHONS-}
if [ -z "${LEASEBEAT_EXTRA_PYTHONS+x}" ] && command -v pyenv >/dev/null 2>&1; then
  for p in "$(pyenv root)"/versions/3.*/bin/python3; do
    [ -x "$p" ] && extras="$extras $p"
  done
fi
declare -A seen=(["$primary"]=1)
n=0
for p in $extras; do
  v=$("$p" -c 'import sys; print("%d.%d" % sys.version_info[:2]) if sys.version_info >= (3, 10) else None' 2>/dev/null || true)
  [ -n "$v" ] && [ "$v" != None ] && [ -z "${seen[$v]-}" ] || continue
  seen[$v]=1
  n=$((n + 1))
  run_suite "$p" "$WORK/venv-$v" tests-only
done
echo "==> python: wheel tested on $((n + 1)) CPython version(s)"

# The settlement journal against runcycles Python 0.5.3's (both directions; its own venv).
echo "==> python: journal interop with runcycles 0.5.3 (scripts/test-journal-interop.sh)"
scripts/test-journal-interop.sh
