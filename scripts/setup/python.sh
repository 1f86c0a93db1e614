#!/usr/bin/env bash
# What the Python stage (scripts/test-python.sh) needs on a fresh Debian machine:
# a CPython >= 3.10 with the venv module and pip. maturin, pytest and mypy are
# installed by the test script itself, at exact pins, into virtual environments
# (maturin==1.16.0, pytest==9.2.0, mypy==2.4.1): nothing is installed globally.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive

have_python() {
  command -v python3 >/dev/null 2>&1 &&
    python3 -c 'import sys, venv, ensurepip; sys.exit(0 if sys.version_info >= (3, 10) else 1)' \
      >/dev/null 2>&1
}

if ! have_python; then
  if command -v apt-get >/dev/null 2>&1; then
    SUDO=""; if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
    $SUDO apt-get update
    $SUDO apt-get install -y --no-install-recommends python3 python3-venv python3-pip
  fi
fi
have_python || { echo "setup/python.sh: need CPython >= 3.10 with venv and ensurepip" >&2; exit 1; }
python3 --version
# Warm pip's cache with the pinned build tool (harmless if offline later).
python3 -m pip download -q --no-deps -d "${TMPDIR:-/tmp}/leasebeat-pip-warm" maturin==1.16.0 \
  >/dev/null 2>&1 || true
