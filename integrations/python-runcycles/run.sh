#!/usr/bin/env bash
# runcycles 0.5.3 (PyPI) on leasebeat: downloads the SDK's sdist (it carries
# tests/) into a `mktemp -d`, applies the adapter (runcycles-0.5.3.patch +
# runcycles/_leasebeat.py), builds leasebeat's abi3 wheel with maturin,
# installs both in a fresh venv (`pip install -e .[dev]`), runs the SDK's own
# suite (`pytest --ignore=tests/integration`) and then our test of the SDK's
# public API against `leasebeat serve` (tests/test_serve.py).
#
# Last line: `python-runcycles: N passed, M failed` over the SDK's own tests
# plus the serve test. Expected failures (README.md, "Expected failures") are
# counted as failed, never hidden. Exit status 0 when every failure is an
# expected one and the serve test passed.
#
# RUNCYCLES_BASELINE=1 also runs the unpatched suite first (the "before" count).
# The SDK comes from LEASEBEAT_PEERS_DIR/runcycles-python-0.5.3 (an unpacked
# sdist) when present, else from PyPI; when neither is reachable the SDK is
# reported skipped at once (integrations/lib.sh).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
# shellcheck source=../lib.sh
. "$HERE/../lib.sh"
NAME=python-runcycles
PY=${PYTHON:-python3}
VERSION=0.5.3
MATURIN_PIN=maturin==1.16.0

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

"$PY" -m venv "$WORK/venv" || skip "$NAME" "no Python venv: install python3-venv"
VPY=$WORK/venv/bin/python
# A current pip first (the venv's own may build an sdist's build deps from source to
# download it); offline, the download below says so.
"$VPY" -m pip install -q --disable-pip-version-check --retries 1 --timeout 20 --upgrade pip \
  >/dev/null 2>&1 || true
PEER=$(peers_dir "$ROOT")/runcycles-python-$VERSION
if [ -f "$PEER/pyproject.toml" ] && [ -d "$PEER/tests" ]; then
  echo "$NAME: SDK source: $PEER (the peers folder)"
  cp -R "$PEER" "$WORK/runcycles-$VERSION"
  chmod -R u+w "$WORK/runcycles-$VERSION"
else
  echo "==> $NAME: pip download runcycles==$VERSION (sdist)"
  if ! "$VPY" -m pip download -q --disable-pip-version-check --retries 1 --timeout 20 \
    --no-deps --no-binary :all: "runcycles==$VERSION" -d "$WORK/dl" >"$WORK/dl.log" 2>&1; then
    tail -n 3 "$WORK/dl.log" >&2
    skip "$NAME" "runcycles $VERSION is not in $PEER and PyPI is not reachable"
  fi
  echo "$NAME: SDK source: the runcycles $VERSION sdist from PyPI (it carries the SDK's tests)"
  tar -xzf "$WORK"/dl/runcycles-"$VERSION".tar.gz -C "$WORK"
fi
SDK=$WORK/runcycles-$VERSION

TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
case "$TARGET" in /*) ;; *) TARGET="$ROOT/$TARGET" ;; esac
if [ -z "${LEASEBEAT_BIN:-}" ]; then
  echo "==> python-runcycles: cargo build --release -p leasebeat-cli (leasebeat serve)"
  (cd "$ROOT" && cargo build --release --locked -q -p leasebeat-cli)
  export LEASEBEAT_BIN=$TARGET/release/leasebeat
fi

count() { # $1 = pytest output file -> "passed failed"
  local line p f e
  line=$(grep -E '^(=+ )?[0-9]+ (passed|failed)|^(=+ )?[0-9]+ failed' "$1" | tail -1 || true)
  p=$(grep -oE '[0-9]+ passed' <<<"$line" | grep -oE '[0-9]+' || echo 0)
  f=$(grep -oE '[0-9]+ failed' <<<"$line" | grep -oE '[0-9]+' || echo 0)
  e=$(grep -oE '[0-9]+ errors?' <<<"$line" | grep -oE '[0-9]+' || echo 0)
  echo "$p $((f + e))"
}

if [ "${RUNCYCLES_BASELINE:-0}" = 1 ]; then
  echo "==> python-runcycles: baseline (as released)"
  cp -r "$SDK" "$WORK/baseline"
  "$PY" -m venv "$WORK/venv-base"
  (cd "$WORK/baseline" && "$WORK/venv-base/bin/python" -m pip install -q --disable-pip-version-check -e '.[dev]')
  mkdir -p "$WORK/home"
  (cd "$WORK/baseline" && HOME="$WORK/home" "$WORK/venv-base/bin/python" -m pytest -p no:cacheprovider -q \
    --ignore=tests/integration) >"$WORK/baseline.out" 2>&1 || true
  tail -1 "$WORK/baseline.out"
  read -r bp bf < <(count "$WORK/baseline.out")
  echo "python-runcycles baseline (as released): $bp passed, $bf failed"
fi

echo "==> python-runcycles: apply the adapter"
(cd "$SDK" && patch -p1 -s <"$HERE/runcycles-$VERSION.patch")
cp "$HERE/runcycles/_leasebeat.py" "$SDK/runcycles/_leasebeat.py"

echo "==> python-runcycles: build leasebeat's wheel ($MATURIN_PIN)"
"$PY" -m venv "$WORK/build-venv"
"$WORK/build-venv/bin/python" -m pip install -q --disable-pip-version-check "$MATURIN_PIN"
(cd "$ROOT/py" && "$WORK/build-venv/bin/maturin" build --release --locked -q --out "$WORK/wheels" 2>&1 | tail -1)

echo "==> python-runcycles: install leasebeat + patched runcycles[dev]"
"$VPY" -m pip install -q --disable-pip-version-check "$WORK"/wheels/leasebeat-*.whl
(cd "$SDK" && "$VPY" -m pip install -q --disable-pip-version-check -e '.[dev]')

# The SDK journals to Path.home()/.runcycles when a test builds its config without a
# journal directory (CYCLES_JOURNAL_DIR is read only by CyclesConfig.from_env): the suites
# run with a scratch HOME so that nothing lands in the tester's home.
mkdir -p "$WORK/home"
echo "==> python-runcycles: the SDK's own suite (pytest --ignore=tests/integration)"
(cd "$SDK" && HOME="$WORK/home" "$VPY" -m pytest -p no:cacheprovider -q -rf --ignore=tests/integration) >"$WORK/sdk.out" 2>&1 || true
# Each failure, marked expected when README.md lists it (with its contract rule and vector).
grep -oE 'tests/test_[a-z_]+\.py::[A-Za-z_]+::[a-z_0-9]+' "$HERE/README.md" | sort -u >"$WORK/expected.txt"
grep -E '^FAILED|^ERROR' "$WORK/sdk.out" | while IFS= read -r l; do
  t=$(sed -E 's/^FAILED ([^ ]+).*/\1/' <<<"$l")
  if [[ "$l" == FAILED* ]] && grep -qxF "$t" "$WORK/expected.txt"; then
    echo "  expected failure (README.md): $t"
  else
    echo "  UNEXPECTED: $l"
  fi
done
tail -1 "$WORK/sdk.out"
read -r sp sf < <(count "$WORK/sdk.out")

echo "==> python-runcycles: public API against leasebeat serve (tests/test_serve.py)"
(cd "$SDK" && HOME="$WORK/home" "$VPY" -m pytest -p no:cacheprovider -q -rf --rootdir "$HERE/tests" \
  "$HERE/tests/test_serve.py") >"$WORK/serve.out" 2>&1 || true
grep -E '^FAILED|^ERROR' "$WORK/serve.out" || true
tail -1 "$WORK/serve.out"
read -r vp vf < <(count "$WORK/serve.out")

# The failures README.md lists as expected (each with its contract rule and vector).
unexpected=$(grep -E '^FAILED' "$WORK/sdk.out" | sed -E 's/^FAILED ([^ ]+).*/\1/' \
  | grep -vxF -f "$WORK/expected.txt" || true)
if [ -n "$unexpected" ]; then
  echo "python-runcycles: UNEXPECTED failures (not in README.md):"
  echo "$unexpected"
fi
echo "python-runcycles: SDK suite $sp passed, $sf failed; serve test $vp passed, $vf failed"
echo "python-runcycles: $((sp + vp)) passed, $((sf + vf)) failed"
[ -z "$unexpected" ] && [ "$vf" = 0 ] && [ "$vp" -gt 0 ] && ! grep -qE '^ERROR' "$WORK/sdk.out"
