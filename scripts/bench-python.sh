#!/usr/bin/env bash
# Python benchmark (issue 15; not a test, never run by scripts/test-all.sh):
# builds leasebeat's abi3 wheel in release mode with the private `bench`
# feature (adds leasebeat._leasebeat._bench_core_decision, the core's decision
# timed in a Rust loop in the same process), installs it and runcycles==0.5.3
# (PyPI) in a fresh venv, and runs py/bench/bench_decision.py: leasebeat's raw
# 200 extend body -> decision (handle_response + poll_action) against
# runcycles' path for the same body (json.loads, CyclesResponse,
# _schema_valid_extend, _AuthoritativeScheduler), in one process.
# Prints a table and the lines `BENCH {"id": "py.decision", ...}` and
# `BENCH {"id": "py.runcycles", ...}` (unit ns, medians).
# Env: PYTHON (interpreter, default python3), BENCH_ARGS (e.g. "--repeats 50").
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
export PYTHONDONTWRITEBYTECODE=1
PY=${PYTHON:-python3}
MATURIN_PIN=maturin==1.16.0
RUNCYCLES_PIN=runcycles==0.5.3

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

echo "==> bench-python: venv with $MATURIN_PIN and $RUNCYCLES_PIN"
"$PY" -m venv "$WORK/venv"
VPY=$WORK/venv/bin/python
"$VPY" -m pip install -q --disable-pip-version-check "$MATURIN_PIN" "$RUNCYCLES_PIN"

echo "==> bench-python: maturin build --release -F bench (abi3 wheel)"
(cd py && "$WORK/venv/bin/maturin" build --release --locked -F bench --out "$WORK/wheels")
"$VPY" -m pip install -q --disable-pip-version-check --no-deps "$WORK"/wheels/leasebeat-*.whl

echo "==> bench-python: $("$VPY" --version), load average: $(cut -d' ' -f1-3 /proc/loadavg)"
# From a directory where the source tree is not importable.
(cd "$WORK" && "$VPY" "$ROOT/py/bench/bench_decision.py" ${BENCH_ARGS-})
