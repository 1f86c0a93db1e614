#!/usr/bin/env bash
# The SDKs' own live-server tests against the real server (run by stage.py).
# usage: sdk-live.sh python|python-setup|typescript WORK   with CYCLES_BASE_URL, CYCLES_API_KEY and
# CYCLES_TENANT set (the variables the SDKs' nightly workflows pass).
#
#  python      runcycles 0.5.3's sdist (pip download, as integrations/python-runcycles/run.sh
#              does), with leasebeat's adapter applied, installed with leasebeat's wheel
#              (built by build-runners.sh) into a venv of its own; `pytest tests/integration` (tests/integration/
#              test_live_server.py, skipped by the SDK unless CYCLES_BASE_URL is set).
#  typescript  runcycles-typescript 0.4.3 (../shared/peers, as the integration's run.sh finds
#              it) copied into WORK; `vitest run tests/integration` (live-server.test.ts). Its
#              leasebeat adapter is not applied: these tests call the server with fetch only.
# python-setup only installs (stage.py's SDK runners use that venv).
# Last line: `sdk-<name>-live: N passed, M failed`.
set -uo pipefail
which="$1"
WORK="$2"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
case "$which" in
python | python-setup)
  VERSION=0.5.3
  SDK="$WORK/sdk-python/runcycles-$VERSION"
  if [ ! -f "$SDK/.installed-in-venv" ]; then
    rm -rf "$WORK/sdk-python"
    mkdir -p "$WORK/sdk-python"
    python3 -m venv "$WORK/sdk-python/venv"
    "$WORK/sdk-python/venv/bin/python" -m pip install -q --disable-pip-version-check "$WORK"/wheels/leasebeat-*.whl
    "$WORK/sdk-python/venv/bin/python" -m pip download -q --disable-pip-version-check --no-deps --no-binary :all: \
      "runcycles==$VERSION" -d "$WORK/sdk-python/dl" || { echo "sdk-python-live: 0 passed, 1 failed"; exit 1; }
    tar -xzf "$WORK/sdk-python/dl/runcycles-$VERSION.tar.gz" -C "$WORK/sdk-python"
    (cd "$SDK" && patch -p1 -s <"$ROOT/integrations/python-runcycles/runcycles-$VERSION.patch")
    cp "$ROOT/integrations/python-runcycles/runcycles/_leasebeat.py" "$SDK/runcycles/_leasebeat.py"
    (cd "$SDK" && "$WORK/sdk-python/venv/bin/python" -m pip install -q --disable-pip-version-check -e '.[dev]' requests) &&
      touch "$SDK/.installed-in-venv"
  fi
  [ -f "$SDK/.installed-in-venv" ] || { echo "sdk-python-live: 0 passed, 1 failed"; exit 1; }
  [ "$which" = python-setup ] && exit 0
  out="$(cd "$SDK" && "$WORK/sdk-python/venv/bin/python" -m pytest -p no:cacheprovider -q -rA tests/integration 2>&1)"
  echo "$out"
  p=$(grep -cE '^PASSED ' <<<"$out")
  f=$(grep -cE '^(FAILED|ERROR) ' <<<"$out")
  s=$(grep -cE '^SKIPPED ' <<<"$out")
  echo "sdk-python-live: $p passed, $((f + s)) failed"
  ;;
typescript)
  VERSION=0.4.3
  SRC=""
  for d in "$ROOT/../shared/peers/runcycles-typescript-$VERSION" "/work/shared/peers/runcycles-typescript-$VERSION"; do
    if [ -f "$d/package.json" ]; then SRC=$d; break; fi
  done
  [ -n "$SRC" ] || { echo "sdk-typescript-live: the SDK was not found"; echo "sdk-typescript-live: 0 passed, 1 failed"; exit 1; }
  SDK="$WORK/sdk-typescript"
  if [ ! -f "$SDK/.installed" ]; then
    rm -rf "$SDK"
    cp -r "$SRC" "$SDK"
    chmod -R u+w "$SDK"
    (cd "$SDK" && npm ci --no-audit --no-fund --loglevel=error) && touch "$SDK/.installed"
  fi
  out="$(cd "$SDK" && NO_COLOR=1 FORCE_COLOR=0 npx --no-install vitest run --reporter=verbose tests/integration 2>&1 |
    sed -E 's/\x1b\[[0-9;]*m//g')"
  echo "$out"
  p=$(grep -cE '^\s*✓ ' <<<"$out")
  f=$(grep -cE '^\s*(×|✗|↓) ' <<<"$out")
  echo "sdk-typescript-live: $p passed, $f failed"
  ;;
esac
