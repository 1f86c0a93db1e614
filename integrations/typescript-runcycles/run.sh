#!/usr/bin/env bash
# runcycles (TypeScript) 0.4.3 on leasebeat: copies the SDK as released
# (../shared/peers/runcycles-typescript-0.4.3/, read-only) into a `mktemp -d`,
# installs its locked dev dependencies (`npm ci`), applies the adapter
# (runcycles-0.4.3.patch), builds leasebeat's Node addon (release), packs it
# with `npm pack` and installs the tarball into the SDK copy, type-checks and
# builds the patched SDK (tsc, tsup; loads both bundles), then runs the
# SDK's whole suite (`npx vitest run --exclude 'tests/integration/**'`) and
# our tests: the SDK's public API against `leasebeat serve`
# (tests/leasebeat-serve.test.ts) and the adapter's loop (tests/leasebeat-adapter.test.ts).
#
# Last line: `typescript-runcycles: N passed, M failed` over the SDK's own
# tests plus ours. Expected failures (README.md, "Expected
# failures") are counted as failed, never hidden. Exit status 0 when every
# failure is an expected one and the serve test passed.
#
#   RUNCYCLES_TS_BASELINE=1  also runs the unpatched suite first (the "before" count)
#   RUNCYCLES_TS_SRC=DIR     the SDK as released, with its tests (default:
#                            LEASEBEAT_PEERS_DIR/runcycles-typescript-0.4.3, see
#                            integrations/lib.sh; or a checkout of the upstream
#                            tag v0.4.3). The npm package holds no tests: without
#                            either, the SDK is reported skipped at once.
#   LEASEBEAT_BIN=PATH       a built `leasebeat` (default: cargo build --release -p leasebeat-cli)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
VERSION=0.4.3
NAME=typescript-runcycles

# shellcheck source=../lib.sh
. "$HERE/../lib.sh"
SRC=${RUNCYCLES_TS_SRC:-$(peers_dir "$ROOT")/runcycles-typescript-$VERSION}
if [ ! -f "$SRC/package.json" ]; then
  skip "$NAME" "the SDK's sources with tests are not in $SRC (the npm package has no tests); set RUNCYCLES_TS_SRC to a checkout of the upstream tag v$VERSION"
fi
echo "$NAME: SDK source: $SRC"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/typescript-runcycles.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

strip() { sed 's/\x1b\[[0-9;]*m//g'; }
count() { # $1 = vitest output (colour stripped) -> "passed failed"
  local line p f
  line=$(grep -E '^ +Tests +' "$1" | tail -1 || true)
  p=$(grep -oE '[0-9]+ passed' <<<"$line" | grep -oE '[0-9]+' || echo 0)
  f=$(grep -oE '[0-9]+ failed' <<<"$line" | grep -oE '[0-9]+' || echo 0)
  echo "$p $f"
}

echo "==> $NAME: copy the SDK as released ($SRC)"
cp -R "$SRC" "$WORK/sdk"
chmod -R u+w "$WORK/sdk"
SDK=$WORK/sdk
(cd "$SDK" && npm ci --no-audit --no-fund --loglevel=error)

if [ "${RUNCYCLES_TS_BASELINE:-0}" = 1 ]; then
  echo "==> $NAME: baseline (as released)"
  (cd "$SDK" && npx vitest run --exclude 'tests/integration/**') 2>&1 | strip >"$WORK/baseline.out" || true
  read -r bp bf < <(count "$WORK/baseline.out")
  echo "$NAME baseline (as released): $bp passed, $bf failed"
fi

echo "==> $NAME: apply the adapter (runcycles-$VERSION.patch)"
(cd "$SDK" && patch -p1 -s --no-backup-if-mismatch <"$HERE/runcycles-$VERSION.patch")

echo "==> $NAME: build leasebeat's Node addon (release) and pack it"
(cd "$ROOT/node" && npm ci --no-audit --no-fund --loglevel=error)
(cd "$ROOT/node" && npx --no-install napi build --platform --release --no-const-enum \
  --output-dir "$WORK/gen" --js index.js --dts index.d.ts) >"$WORK/napi.log" 2>&1 || {
  tail -n 40 "$WORK/napi.log"; echo "$NAME: 0 passed, 1 failed"; exit 1; }
mkdir -p "$WORK/stage"
# The package's own file list (package.json "files", globs left to the .node copy below).
mapfile -t PKG_FILES < <(cd "$ROOT/node" && node -e 'for (const f of require("./package.json").files) if (!f.includes("*")) console.log(f)')
(cd "$ROOT/node" && cp package.json "${PKG_FILES[@]}" "$WORK/stage/")
cp "$WORK"/gen/leasebeat.*.node "$WORK/stage/"
(cd "$WORK/stage" && npm pack --silent --pack-destination "$WORK" >/dev/null)
TARBALL=$(ls "$WORK"/leasebeat-*.tgz)

echo "==> $NAME: install $(basename "$TARBALL") into the SDK"
(cd "$SDK" && npm install --no-save --no-audit --no-fund --prefer-offline --loglevel=error "$TARBALL")
(cd "$SDK" && node -e 'import("leasebeat").then((m) => { if (typeof m.Heartbeat.adoptCreate !== "function") process.exit(1) })')

echo "==> $NAME: type-check and build the patched SDK (tsc --noEmit, tsup: ESM + CJS)"
(cd "$SDK" && npx tsc --noEmit -p tsconfig.typecheck.json)
(cd "$SDK" && npx tsup >"$WORK/tsup.log" 2>&1) || { tail -n 30 "$WORK/tsup.log"; echo "$NAME: 0 passed, 1 failed"; exit 1; }
(cd "$SDK" && node -e 'const m = require("./dist/index.cjs"); if (typeof m.withCycles !== "function") process.exit(1)' \
  && node --input-type=module -e 'const m = await import(process.cwd() + "/dist/index.js"); if (typeof m.reserveForStream !== "function") process.exit(1)')

if [ -z "${LEASEBEAT_BIN:-}" ]; then
  echo "==> $NAME: cargo build --release -p leasebeat-cli (leasebeat serve)"
  (cd "$ROOT" && cargo build --release --locked -q -p leasebeat-cli)
  TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
  case "$TARGET" in /*) ;; *) TARGET="$ROOT/$TARGET" ;; esac
  export LEASEBEAT_BIN=$TARGET/release/leasebeat
fi

echo "==> $NAME: the SDK's own suite (npx vitest run --exclude 'tests/integration/**')"
(cd "$SDK" && npx vitest run --exclude 'tests/integration/**') 2>&1 | strip >"$WORK/sdk.out" || true
# Each failure, marked expected when README.md lists it (with its contract rule and vector):
# README lines of the form `- tests/<file>.test.ts > <describe> > <test name>`.
expected=$(grep -E '^- tests/[a-zA-Z_.-]+\.test\.ts > ' "$HERE/README.md" | sed -E 's/^- //' | sort -u)
failed=$(grep -E '^ FAIL +tests/' "$WORK/sdk.out" | sed -E 's/^ FAIL +//; s/ +\[[^]]*\]$//; s/ [0-9]+ms$//' | sort -u || true)
while IFS= read -r t; do
  [ -n "$t" ] || continue
  if grep -qxF -- "$t" <<<"$expected"; then echo "  expected failure (README.md): $t"
  else echo "  UNEXPECTED FAIL: $t"; fi
done <<<"$failed"
grep -E '^ +(Test Files|Tests) +' "$WORK/sdk.out" || true
read -r sp sf < <(count "$WORK/sdk.out")

echo "==> $NAME: ours: public API against leasebeat serve, the adapter's loop (tests/leasebeat-*.test.ts)"
cp "$HERE"/tests/leasebeat-*.test.ts "$SDK/tests/"
(cd "$SDK" && NODE_DEBUG=runcycles npx vitest run tests/leasebeat-serve.test.ts tests/leasebeat-adapter.test.ts) 2>&1 | strip >"$WORK/serve.out" || true
grep -E '^ (FAIL|×|✓) ' "$WORK/serve.out" | sort -u || true
grep -E '^ +Tests +' "$WORK/serve.out" || true
read -r vp vf < <(count "$WORK/serve.out")
if [ "$vf" != 0 ] || [ "$vp" = 0 ]; then
  awk '/Failed Tests/,0' "$WORK/serve.out" | head -n 120
fi

# The failures not listed as expected.
unexpected=$(comm -23 <(printf '%s\n' "$failed" | sed '/^$/d') <(printf '%s\n' "$expected") || true)
nfailed=$(printf '%s\n' "$failed" | sed '/^$/d' | wc -l)
if [ -n "$unexpected" ]; then
  echo "$NAME: UNEXPECTED failures (not in README.md):"
  printf '%s\n' "$unexpected"
  awk '/Failed Tests/,0' "$WORK/sdk.out" | head -n 200
fi
echo "$NAME: SDK suite $sp passed, $sf failed; ours (serve + adapter) $vp passed, $vf failed"
echo "$NAME: $((sp + vp)) passed, $((sf + vf)) failed"
[ -z "$unexpected" ] && [ "$nfailed" = "$sf" ] && [ "$sp" -gt 0 ] && [ "$vf" = 0 ] && [ "$vp" -gt 0 ]
