#!/usr/bin/env bash
# Node.js stage: builds the addon (release), checks the committed generated
# index.js/index.d.ts for drift, packs the package with `npm pack`, installs
# the tarball into a fresh temporary project and runs the `node --test` suite
# there against the installed package (every tests/vectors/*.json and
# API and bad-input tests, and the
# integration tests against `leasebeat serve`, built here), then type-checks
# TypeScript consumers with tsc 6.0 and 5.9 (one calls fetch with an
# attempt's body under the DOM library's types).
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd)"

work="$(mktemp -d "${TMPDIR:-/tmp}/leasebeat-node.XXXXXX")"
trap 'rm -rf "$work"' EXIT

echo "==> node $(node --version), npm $(npm --version)"
(cd node && npm ci --no-audit --no-fund --loglevel=error)

echo "==> building the addon (release) into a scratch directory"
(cd node && npx --no-install napi build --platform --release --no-const-enum \
  --output-dir "$work/gen" --js index.js --dts index.d.ts)
# The committed loader names the per-platform packages @leasebeat/<platform>
# (node/npm/<platform>/), as `npm run build` leaves it.
node node/npm/scope-loader.cjs "$work/gen/index.js"

echo "==> checking the committed index.js and index.d.ts for drift"
drift=0
for f in index.js index.d.ts; do
  if ! diff -u "node/$f" "$work/gen/$f"; then
    echo "node/$f differs from the generated file: run 'npm run build' in node/ and commit it" >&2
    drift=1
  fi
done
[ "$drift" -eq 0 ]

echo "==> cargo build --release --locked -p leasebeat-cli (the reference server the tests start)"
cargo build --release --locked -p leasebeat-cli
target="${CARGO_TARGET_DIR:-$repo/target}"
case "$target" in /*) ;; *) target="$repo/$target" ;; esac
server_bin="$target/release/leasebeat"
[ -x "$server_bin" ]

echo "==> packing the package"
stage="$work/stage"
mkdir -p "$stage"
cp node/package.json node/index.js node/index.mjs node/index.d.ts node/main.js node/main.d.ts node/runner.js node/runner.d.ts node/fast.js node/README.md "$stage/"
cp "$work"/gen/leasebeat.*.node "$stage/"
(cd "$stage" && npm pack --silent --pack-destination "$work" >/dev/null)
tarball="$(ls "$work"/leasebeat-*.tgz)"
tar -tzf "$tarball" | sed 's/^/    /'

echo "==> installing the tarball into a fresh project"
proj="$work/project"
mkdir -p "$proj"
cat > "$proj/package.json" <<'JSON'
{ "name": "leasebeat-consumer", "version": "0.0.0", "private": true }
JSON
lossless="$(node -p "require('./node/package.json').devDependencies['lossless-json']")"
(cd "$proj" && npm install --no-audit --no-fund --prefer-offline --loglevel=error \
  --save-exact "$tarball" "lossless-json@$lossless")
cp -R node/__test__ "$proj/__test__"

echo "==> node --test against the installed package"
log="$work/node-test.tap"
# --test-timeout: a test that hangs (e.g. a runner awaiting an outcome that never comes)
# fails after 5 minutes instead of holding CI until its own limit.
status=0
(cd "$proj" && LEASEBEAT_VECTORS_DIR="$repo/tests/vectors" LEASEBEAT_EXPECT_INSTALLED=1 \
  LEASEBEAT_BIN="$server_bin" node --test --test-timeout=300000 __test__/*.test.mjs __test__/*.test.cjs) \
  >"$log" 2>&1 || status=$?
if [ "$status" -ne 0 ]; then
  grep -n -A30 '^not ok\|^    not ok' "$log" | head -200 || true
fi
tail -n 8 "$log"
[ "$status" -eq 0 ]

echo "==> node/README's runner example, as written, against leasebeat serve"
scripts/check-docs.sh node "$proj" "$server_bin"

echo "==> tsc --noEmit: the TypeScript consumers against the installed declarations"
# Both compilers are pinned in node/package.json (typescript, typescript-5.9).
for ts in typescript typescript-5.9; do
  tsc="node/node_modules/$ts/bin/tsc"
  node "$tsc" --version
  node "$tsc" -p "$proj/__test__/tsconfig.json"
  node "$tsc" -p "$proj/__test__/tsconfig.fetch.json"
done
echo "tsc: ok"
