#!/usr/bin/env bash
# Builds the release artifacts of every language into target/dist/ and checks
# each one against the platform it claims.
#
#   scripts/package.sh            build everything (Linux x86_64 host; see below)
#   scripts/package.sh --check    smoke check only: tools present, the release
#                                 workflow valid (actionlint), manifests consistent
#
# Linux targets, cross-compiled with zig (ziglang from PyPI, through maturin
# --zig and cargo-zigbuild): x86_64 and aarch64, glibc 2.17 (manylinux2014)
# and musl (musllinux_1_2).
#   python: 4 abi3 wheels (manylinux2014 / musllinux_1_2 x x86_64 / aarch64)
#           + the sdist; tags confirmed with `auditwheel show`; the x86_64
#           manylinux wheel installed in a fresh venv and the pytest suite run
#   node:   leasebeat-<v>.tgz (optionalDependencies on the four
#           @leasebeat/linux-* packages) + one tarball per platform; the
#           main tarball and the x64-gnu one installed into a fresh project
#           and the node --test suite run
#   jvm:    leasebeat-<v>.jar with native/linux-x86_64 and native/linux-aarch64,
#           -sources.jar, -javadoc.jar, the POM; the jar runs examples/JarSmoke.java
#   c:      leasebeat-<v>-<arch>-linux-gnu.tar.gz (ffi-c/install.sh layout);
#           the x86_64 one is unpacked and a pkg-config consumer built and run
#   rust:   cargo package -p leasebeat (the .crate)
# Every ELF file shipped is checked: e_machine, and the highest GLIBC_x.y
# symbol version (<= 2.17) or the musl loader it needs.
# Other hosts (macOS, Windows) are built by .github/workflows/release.yml.
#
# Installs (idempotent): rustup targets x86_64-unknown-linux-musl,
# aarch64-unknown-linux-gnu, aarch64-unknown-linux-musl; a tools venv at
# target/packaging/tools with maturin, ziglang, cargo-zigbuild, auditwheel; the
# actionlint binary through `go install` into target/packaging/gobin.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
case "$target" in /*) ;; *) target="$root/$target" ;; esac

mode=build
# --only rust,c,jvm,python,node: build (and check) only those parts, e.g. to
# redo one after a fix; the default is all of them.
only="rust,c,jvm,python,node"
while [ $# -gt 0 ]; do
  case "$1" in
    --check) mode=check ;;
    --host) mode=host ;;
    --only) [ $# -ge 2 ] || { echo "usage: $0 [--check | --host] [--only rust,c,jvm,python,node]" >&2; exit 2; }
      only="$2"; shift ;;
    *) echo "usage: $0 [--check | --host] [--only rust,c,jvm,python,node]" >&2; exit 2 ;;
  esac
  shift
done
wanted() { case ",$only," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }

MATURIN_PIN=maturin==1.16.0
ZIG_PIN=ziglang==0.17.0
ZIGBUILD_PIN=cargo-zigbuild==0.24.0
AUDITWHEEL_PIN=auditwheel==6.8.2
PYTEST_PIN=pytest==9.2.0
HTTPX_PIN=httpx==0.28.1  # the leasebeat[httpx] extra, as scripts/test-python.sh
ACTIONLINT_MODULE=github.com/rhysd/actionlint/cmd/actionlint@v1.7.12
RUST_TARGETS=(x86_64-unknown-linux-gnu x86_64-unknown-linux-musl aarch64-unknown-linux-gnu aarch64-unknown-linux-musl)
GLIBC_BASELINE=2.17

tools="$target/packaging/tools"
gobin="$target/packaging/gobin"
dist="$target/dist"

fail() { echo "package.sh: $*" >&2; exit 1; }

install_tools() {
  if [ "$mode" = host ]; then
    # --host: only maturin; cargo, node/npm (and napi from node/'s devDependencies) are given.
    local py=python3
    command -v python3 >/dev/null 2>&1 && python3 -c 'import sys' >/dev/null 2>&1 || py=python
    "$py" -m pip install -q --disable-pip-version-check "$MATURIN_PIN"
    return 0
  fi
  if command -v rustup >/dev/null 2>&1; then
    local have
    have="$(rustup target list --installed)"
    for t in "${RUST_TARGETS[@]}"; do
      grep -qx "$t" <<<"$have" || rustup target add "$t"
    done
  fi
  if [ ! -x "$tools/bin/python" ]; then
    python3 -m venv "$tools"
  fi
  "$tools/bin/python" -m pip install -q --disable-pip-version-check \
    "$MATURIN_PIN" "$ZIG_PIN" "$ZIGBUILD_PIN" "$AUDITWHEEL_PIN"
  if [ ! -x "$gobin/actionlint" ]; then
    command -v go >/dev/null 2>&1 || fail "go is needed to install actionlint ($ACTIONLINT_MODULE)"
    GOBIN="$gobin" go install "$ACTIONLINT_MODULE"
  fi
  export PATH="$tools/bin:$gobin:$PATH"
}

# json FILE EXPR: prints a field of a JSON file (EXPR is JavaScript over `j`).
json() { node -e 'const j = require(process.argv[1]); console.log(eval(process.argv[2]))' "$(cd "$(dirname "$1")" && pwd)/$(basename "$1")" "$2"; }

check_tools_and_manifests() {
  for t in "${RUST_TARGETS[@]}"; do
    rustup target list --installed | grep -x "$t" >/dev/null || fail "rust target $t missing"
  done
  for b in maturin cargo-zigbuild auditwheel python-zig actionlint readelf objdump node npm mvn; do
    command -v "$b" >/dev/null 2>&1 || fail "tool missing: $b"
  done
  echo "tools: $(maturin --version), cargo-zigbuild $(cargo-zigbuild --version | awk "{print \$2}"), zig $(python-zig version), auditwheel present, actionlint $(actionlint -version | head -n 1)"

  actionlint .github/workflows/*.yml
  echo "workflows: actionlint clean ($(ls .github/workflows/*.yml | tr '\n' ' '))"

  version="$(cargo metadata --no-deps --format-version 1 --locked \
    | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{const m=JSON.parse(s);console.log(m.packages.find(p=>p.name==="leasebeat").version)})')"
  [ -n "$version" ] || fail "cannot read the crate version"
  local v
  v="$(json node/package.json 'j.version')"; [ "$v" = "$version" ] || fail "node/package.json version $v, crate $version"
  v="$(sed -n 's|^  <version>\(.*\)</version>$|\1|p' jvm/pom.xml | head -n 1)"; [ "$v" = "$version" ] || fail "jvm/pom.xml version $v, crate $version"
  v="$(sed -n 's/^#define LEASEBEAT_VERSION "\(.*\)"$/\1/p' include/leasebeat.h)"; [ "$v" = "$version" ] || fail "include/leasebeat.h version $v, crate $version"
  grep -q '^dynamic = \["version"\]' py/pyproject.toml || fail "py/pyproject.toml must take its version from Cargo (dynamic)"
  # The napi targets, the npm/<platform> packages and the loader agree.
  # NODE_PLATFORMS: the Linux ones, built here; ALL_NODE_PLATFORMS also those
  # the release workflow builds on macOS and Windows (scripts/package.sh --host).
  local targets platforms all
  targets="$(json node/package.json 'j.napi.targets.join(" ")')"
  platforms="" all=""
  for t in $targets; do
    case "$t" in
      x86_64-unknown-linux-gnu) p=linux-x64-gnu ;;
      x86_64-unknown-linux-musl) p=linux-x64-musl ;;
      aarch64-unknown-linux-gnu) p=linux-arm64-gnu ;;
      aarch64-unknown-linux-musl) p=linux-arm64-musl ;;
      x86_64-apple-darwin) p=darwin-x64 ;;
      aarch64-apple-darwin) p=darwin-arm64 ;;
      x86_64-pc-windows-msvc) p=win32-x64-msvc ;;
      *) fail "node/package.json: napi target $t has no platform mapping in package.sh" ;;
    esac
    all="$all $p"
    case "$p" in linux-*) platforms="$platforms $p" ;; esac
    local pj="node/npm/$p/package.json"
    [ -f "$pj" ] || fail "$pj missing (napi create-npm-dirs)"
    [ "$(json "$pj" 'j.name')" = "@leasebeat/$p" ] || fail "$pj: name is not @leasebeat/$p"
    [ "$(json "$pj" 'j.version')" = "$version" ] || fail "$pj: version is not $version"
    [ "$(json "$pj" 'j.main')" = "leasebeat.$p.node" ] || fail "$pj: main is not leasebeat.$p.node"
    grep -qF "require('@leasebeat/$p')" node/index.js || fail "node/index.js does not load @leasebeat/$p"
  done
  NODE_PLATFORMS="$platforms"
  ALL_NODE_PLATFORMS="$all"
  echo "manifests: version $version everywhere; npm platforms:$all (built here:$platforms)"
}

# check_elf FILE ARCH LIBC: ARCH x86_64|aarch64, LIBC gnu|musl. Fails unless the
# ELF header's machine is ARCH and, for gnu, no symbol needs a glibc newer than
# $GLIBC_BASELINE; for musl, it needs no glibc symbol and links the musl loader.
checked_elves=0
check_elf() {
  local f=$1 arch=$2 libc=$3 machine want maxg
  machine="$(LC_ALL=C readelf -h "$f" | sed -n 's/^ *Machine: *//p')"
  case "$arch" in
    x86_64) want="Advanced Micro Devices X86-64" ;;
    aarch64) want="AArch64" ;;
  esac
  [ "$machine" = "$want" ] || fail "$f: ELF machine '$machine', claims $arch"
  maxg="$(LC_ALL=C objdump -T "$f" | { grep -o 'GLIBC_[0-9][0-9.]*' || true; } | sed 's/GLIBC_//' | sort -uV | tail -n 1)"
  if [ "$libc" = gnu ]; then
    [ -n "$maxg" ] || fail "$f: no GLIBC symbol versions (not a glibc build?)"
    [ "$(printf '%s\n%s\n' "$maxg" "$GLIBC_BASELINE" | sort -V | tail -n 1)" = "$GLIBC_BASELINE" ] \
      || fail "$f: needs GLIBC_$maxg, newer than the $GLIBC_BASELINE baseline"
    echo "  elf ok: $(basename "$f"): $arch, max GLIBC_$maxg"
  else
    [ -z "$maxg" ] || fail "$f: claims musl but needs GLIBC_$maxg"
    LC_ALL=C readelf -d "$f" | grep 'NEEDED.*\[libc\.so\]\|NEEDED.*libc\.musl' >/dev/null \
      || fail "$f: claims musl but does not link musl's libc"
    echo "  elf ok: $(basename "$f"): $arch, musl"
  fi
  checked_elves=$((checked_elves + 1))
}

# musl_link_check FILE HOST_SYMBOLS: no musl Python or Node.js can be had here,
# so an x86_64 musl extension is at least linked by musl's own dynamic loader
# (Debian's `musl` package): every symbol must resolve in musl's libc except
# those the host program provides (HOST_SYMBOLS, an extended regex).
musl_link_check() {
  local f=$1 host=$2 ld=/lib/ld-musl-x86_64.so.1 report bad unresolved
  if [ ! -x "$ld" ]; then
    echo "  musl loader check: skipped ($ld missing: apt-get install musl)"
    return 0
  fi
  report="$("$ld" --list "$f" 2>&1 || true)"
  unresolved="$(grep -c 'symbol not found' <<<"$report" || true)"
  bad="$(grep -iE 'error|not found' <<<"$report" | grep -vE ": ($host): symbol not found$" || true)"
  [ -z "$bad" ] || { echo "$report" | head -40; fail "$f: musl's loader cannot link it: $bad"; }
  grep -q 'libc' <<<"$report" || { echo "$report"; fail "$f: musl's loader did not map libc"; }
  echo "  musl loader: $(basename "$f"): links against musl $("$ld" 2>&1 | sed -n 's/^Version //p'), $unresolved symbols left to the host program"
}

# triple_of ARCH LIBC
triple_of() { echo "$1-unknown-linux-$2"; }

# cdylib CRATE ARCH LIBC: cross-builds CRATE (release) and prints its output directory.
cdylib() {
  local crate=$1 arch=$2 libc=$3 t
  t="$(triple_of "$arch" "$libc")"
  local zt=$t
  [ "$libc" = gnu ] && zt="$t.$GLIBC_BASELINE"
  # musl: a dynamically linked cdylib (rustc defaults musl to static crt).
  local rf=""
  [ "$libc" = musl ] && rf="-C target-feature=-crt-static"
  RUSTFLAGS="$rf" cargo zigbuild --release --locked -q -p "$crate" --target "$zt" >&2
  echo "$target/$t/release"
}

build_python() {
  echo "==> python: wheels (maturin --zig) and sdist"
  # maturin sets its own flags for the zig builds: a target dir of its own, so
  # it and cargo-zigbuild (C, JNI, Node) do not rebuild each other's crates.
  local pytarget="$target/packaging/py-target"
  local out="$dist/python"
  rm -rf "$out"; mkdir -p "$out"
  for arch in x86_64 aarch64; do
    (cd py && CARGO_TARGET_DIR="$pytarget" maturin build --release --locked --zig --target "$(triple_of "$arch" gnu)" \
      --compatibility manylinux2014 --out "$out")
    (cd py && CARGO_TARGET_DIR="$pytarget" maturin build --release --locked --zig --target "$(triple_of "$arch" musl)" \
      --compatibility musllinux_1_2 --out "$out")
  done
  (cd py && maturin sdist --out "$out")
  local want
  for arch in x86_64 aarch64; do
    for tag in manylinux_2_17 musllinux_1_2; do
      local whl
      whl="$(ls "$out"/leasebeat-"$version"-cp310-abi3-*"${tag}_$arch"*.whl 2>/dev/null | head -n 1)"
      [ -n "$whl" ] || fail "no $tag $arch wheel in $out: $(ls "$out")"
      want="${tag}_$arch"
      if [ "$tag" = manylinux_2_17 ]; then
        auditwheel show "$whl" >"$out/auditwheel.txt" 2>&1 || { cat "$out/auditwheel.txt"; fail "auditwheel show $whl"; }
        tr -s '\n' ' ' <"$out/auditwheel.txt" | grep -F "consistent with the following platform tag: \"$want\"" >/dev/null \
          || { cat "$out/auditwheel.txt"; fail "$whl: auditwheel does not confirm $want"; }
        echo "  auditwheel: $(basename "$whl"): $want"
      elif [ "$arch" = x86_64 ] && [ -f /lib/x86_64-linux-musl/libc.so ]; then
        # zig links musl's libc by its link name: NEEDED `libc.so`, which musl's
        # loader maps to itself (musl_link_check below proves it) but which is not
        # in auditwheel's musllinux list (it knows `libc.musl-x86_64.so.1`). So
        # auditwheel (pointed at Debian's musl, else it parses glibc's libc.so
        # linker script and crashes) must find no versioned symbol and no
        # library but that one.
        LD_LIBRARY_PATH=/lib/x86_64-linux-musl auditwheel show "$whl" >"$out/auditwheel.txt" 2>&1 \
          || { cat "$out/auditwheel.txt"; fail "auditwheel show $whl"; }
        local aw; aw="$(tr -s ' \n' '  ' <"$out/auditwheel.txt")"
        grep -qF 'references no external versioned symbols' <<<"$aw" \
          && grep -qF '{ "libc.so": "/lib/x86_64-linux-musl/libc.so" }' <<<"$aw" \
          && grep -qE "the following shared library dependencies will need to be eliminated: libc.so ?$" <<<"$aw" \
          || { cat "$out/auditwheel.txt"; fail "$whl: auditwheel finds more than musl's libc.so"; }
        echo "  auditwheel: $(basename "$whl"): no versioned symbol, only musl's libc.so (NEEDED as libc.so)"
      else
        echo "  musllinux: $(basename "$whl"): checked by ELF only (no $arch musl libc here for auditwheel)"
      fi
      local x="$out/x-$want"
      rm -rf "$x"; mkdir -p "$x"
      (cd "$x" && python3 -m zipfile -e "$whl" .)
      local so
      so="$(ls "$x"/leasebeat/_leasebeat*.so)"
      case "$tag" in manylinux*) check_elf "$so" "$arch" gnu ;; *) check_elf "$so" "$arch" musl ;; esac
      if [ "$tag" = musllinux_1_2 ] && [ "$arch" = x86_64 ]; then musl_link_check "$so" '_?Py[A-Za-z0-9_]*'; fi
      rm -rf "$x"
    done
  done
  rm -f "$out/auditwheel.txt"

  echo "==> python: the sdist builds from source (pip install of the sdist in a fresh venv)"
  local sd sdvenv="$target/packaging/py-sdist-venv"
  sd="$(ls "$out"/leasebeat-"$version".tar.gz)"
  tar -tzf "$sd" | grep "^leasebeat-$version/pyproject.toml$" >/dev/null || fail "$sd: no pyproject.toml"
  rm -rf "$sdvenv"
  python3 -m venv "$sdvenv"
  # pip builds it in an isolated environment (maturin from build-system.requires,
  # then cargo on the sources in the sdist). CARGO_TARGET_DIR only keeps the
  # compiled crates between runs of this script.
  CARGO_TARGET_DIR="$target/packaging/py-sdist-target" "$sdvenv/bin/python" -m pip install -q \
    --disable-pip-version-check --no-binary leasebeat "$sd"
  (cd "$target/packaging" && "$sdvenv/bin/python" -c '
import leasebeat, sys
assert "site-packages" in leasebeat.__file__, leasebeat.__file__
h = leasebeat.Heartbeat
print("  sdist build imports:", leasebeat.__file__)
')

  echo "==> python: the manylinux2014 x86_64 wheel installed in a fresh venv, pytest"
  local venv="$target/packaging/py-venv"
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check \
    "$(ls "$out"/leasebeat-*manylinux_2_17_x86_64*.whl)" "$PYTEST_PIN" "$HTTPX_PIN"
  rm -rf "$target/packaging/py-run"; mkdir -p "$target/packaging/py-run"
  local log="$target/packaging/py-pytest.log"
  if ! (cd "$target/packaging/py-run" && LEASEBEAT_REQUIRE_INSTALLED=1 LEASEBEAT_VECTORS_DIR="$root/tests/vectors" \
    LEASEBEAT_BIN="$CLI_BIN" PYTHONDONTWRITEBYTECODE=1 "$venv/bin/python" -m pytest -p no:cacheprovider \
    --import-mode=importlib --rootdir "$root/py/tests" -q -ra "$root/py/tests") >"$log" 2>&1; then
    tail -n 60 "$log"; fail "pytest against the installed manylinux x86_64 wheel failed"
  fi
  tail -n 3 "$log"
  echo "  musllinux wheels: no musl CPython can be had from the registries here; the x86_64 one"
  echo "  was linked by musl's own loader instead (musl_link_check above)"
}

build_node() {
  echo "==> node: per-platform packages and the main package"
  local out="$dist/node" stage="$target/packaging/node-stage"
  rm -rf "$out" "$stage"; mkdir -p "$out" "$stage"
  (cd node && npm ci --no-audit --no-fund --loglevel=error)
  for p in $NODE_PLATFORMS; do
    local arch libc
    case "$p" in
      linux-x64-gnu) arch=x86_64 libc=gnu ;;
      linux-x64-musl) arch=x86_64 libc=musl ;;
      linux-arm64-gnu) arch=aarch64 libc=gnu ;;
      linux-arm64-musl) arch=aarch64 libc=musl ;;
    esac
    local dir
    dir="$(cdylib leasebeat-node "$arch" "$libc")"
    mkdir -p "$stage/$p"
    cp "node/npm/$p/package.json" "node/npm/$p/README.md" "$stage/$p/"
    cp "$dir/libleasebeat_node.so" "$stage/$p/leasebeat.$p.node"
    check_elf "$stage/$p/leasebeat.$p.node" "$arch" "$libc"
    if [ "$p" = linux-x64-musl ]; then musl_link_check "$stage/$p/leasebeat.$p.node" 'napi_[a-z0-9_]+|node_api_[a-z0-9_]+'; fi
    (cd "$stage/$p" && npm pack --silent --pack-destination "$out" >/dev/null)
  done
  # The main package: the loader, the runner and the types, no binary;
  # optionalDependencies on every platform package at the same version (what
  # `napi prepublish` adds). The file list is package.json's own "files".
  mkdir -p "$stage/main"
  cp node/package.json "$stage/main/"
  local f
  for f in $(json node/package.json 'j.files.filter(f => !f.includes("*")).join(" ")'); do
    cp "node/$f" "$stage/main/"
  done
  (cd "$stage/main" && npm pkg delete devDependencies scripts \
    && for p in $ALL_NODE_PLATFORMS; do npm pkg set "optionalDependencies.@leasebeat/$p=$version"; done \
    && npm pack --silent --pack-destination "$out" >/dev/null)
  ls -l "$out"
  if tar -tzf "$out/leasebeat-$version.tgz" | grep '\.node$' >/dev/null; then fail "the main tarball must not contain a .node"; fi
  for p in $NODE_PLATFORMS; do
    tar -tzf "$out/leasebeat-$p-$version.tgz" | grep -x "package/leasebeat.$p.node" >/dev/null \
      || fail "leasebeat-$p-$version.tgz lacks leasebeat.$p.node"
  done

  echo "==> node: install leasebeat + @leasebeat/linux-x64-gnu from the tarballs, node --test"
  local proj="$target/packaging/node-project"
  rm -rf "$proj"; mkdir -p "$proj"
  cat >"$proj/package.json" <<'JSON'
{ "name": "leasebeat-consumer", "version": "0.0.0", "private": true }
JSON
  local lossless
  lossless="$(json node/package.json "j.devDependencies['lossless-json']")"
  # The other platforms' optional packages are not published: npm skips them
  # (wrong os/cpu/libc, or not found, which is allowed for an optional dependency).
  (cd "$proj" && npm install --no-audit --no-fund --loglevel=error --save-exact \
    "$out/leasebeat-linux-x64-gnu-$version.tgz" "$out/leasebeat-$version.tgz" "lossless-json@$lossless")
  ls "$proj/node_modules/@leasebeat/linux-x64-gnu/leasebeat.linux-x64-gnu.node" >/dev/null
  if ls "$proj"/node_modules/leasebeat/*.node >/dev/null 2>&1; then fail "installed leasebeat holds a .node"; fi
  cp -R node/__test__ "$proj/__test__"
  # The loader must have taken the addon from @leasebeat/linux-x64-gnu.
  (cd "$proj" && node -e '
const lb = require("leasebeat")
const addon = require.resolve("@leasebeat/linux-x64-gnu")
const loaded = Object.keys(require.cache).filter(k => k.endsWith(".node"))
if (!loaded.includes(addon)) { console.error("loaded", loaded, "not", addon); process.exit(1) }
if (typeof lb.Heartbeat !== "function" || typeof lb.runHeartbeat !== "function") process.exit(1)
console.log("  require(\"leasebeat\") loaded", addon)
')
  # The loader's pick on musl (no musl Node.js here): with /usr/bin/ldd made to
  # read "musl" (the loader's first test), it must ask for @leasebeat/linux-x64-musl
  # and nothing else (loading it then fails on this glibc Node, as it should).
  cat >"$target/packaging/fake-musl.cjs" <<'JS'
const fs = require('fs')
const readFileSync = fs.readFileSync
fs.readFileSync = function (p, ...rest) { return p === '/usr/bin/ldd' ? 'musl libc (x86_64)' : readFileSync.call(this, p, ...rest) }
JS
  local pick='const M = require("module"); const tried = []; const load = M._load
M._load = function (r, ...a) { if (r.startsWith("@leasebeat/") && !r.endsWith("/package.json")) tried.push(r); return load.call(this, r, ...a) }
try { require("leasebeat") } catch {}
console.log(tried.join(" "))'
  local picked
  picked="$(cd "$proj" && node -e "$pick")"
  [ "$picked" = "@leasebeat/linux-x64-gnu" ] || fail "on glibc the loader asked for: $picked"
  picked="$(cd "$proj" && node -r "$target/packaging/fake-musl.cjs" -e "$pick")"
  [ "$picked" = "@leasebeat/linux-x64-musl" ] || fail "on musl the loader asked for: $picked"
  echo "  loader pick: glibc -> @leasebeat/linux-x64-gnu, musl -> @leasebeat/linux-x64-musl"
  (cd "$proj" && node --input-type=module -e 'import { Heartbeat, runHeartbeat } from "leasebeat"; if (!Heartbeat || !runHeartbeat) process.exit(1); console.log("  import \"leasebeat\": ok")')
  local log="$target/packaging/node-test.tap"
  if ! (cd "$proj" && LEASEBEAT_VECTORS_DIR="$root/tests/vectors" LEASEBEAT_EXPECT_INSTALLED=1 \
    LEASEBEAT_BIN="$CLI_BIN" node --test --test-timeout=300000 __test__/*.test.mjs __test__/*.test.cjs) >"$log" 2>&1; then
    grep -n -A30 '^not ok\|^    not ok' "$log" | head -100; fail "node --test failed"
  fi
  tail -n 8 "$log"
  echo "  linux-x64-musl: no musl Node.js can be had from the registries here; the addon was"
  echo "  linked by musl's own loader instead (musl_link_check above)"
}

build_jvm() {
  echo "==> jvm: libleasebeat_jni.so for linux-x86_64 and linux-aarch64 (glibc $GLIBC_BASELINE)"
  local x64 arm out="$dist/jvm"
  x64="$(cdylib leasebeat-jni x86_64 gnu)"
  arm="$(cdylib leasebeat-jni aarch64 gnu)"
  check_elf "$x64/libleasebeat_jni.so" x86_64 gnu
  check_elf "$arm/libleasebeat_jni.so" aarch64 gnu
  # verify: Surefire runs the tests with the cross-built x86_64 library from
  # java.library.path, Failsafe runs them all again against the packaged jar.
  local log="$target/packaging/mvn.log"
  if ! (cd jvm && mvn -B --no-transfer-progress -Dstyle.color=never \
    -Dleasebeat.native.dir="$x64" -Dleasebeat.native.aarch64.dir="$arm" -Dleasebeat.cli="$CLI_BIN" \
    -Dleasebeat.jar.tests.skip=false clean verify) >"$log" 2>&1; then
    grep -n 'ERROR\|FAIL' "$log" | head -60; fail "mvn verify failed (log: $log)"
  fi
  grep -E '^\[(INFO|WARNING)\] Tests run:|maven-(surefire|failsafe)-plugin' "$log" | grep -v 'Time elapsed' | tail -n 8
  rm -rf "$out"; mkdir -p "$out"
  cp jvm/target/leasebeat-"$version".jar jvm/target/leasebeat-"$version"-sources.jar \
    jvm/target/leasebeat-"$version"-javadoc.jar "$out/"
  cp jvm/pom.xml "$out/leasebeat-$version.pom"
  local jar="$out/leasebeat-$version.jar" x="$target/packaging/jar-x"
  rm -rf "$x"; mkdir -p "$x"
  (cd "$x" && unzip -q "$jar" 'native/*' META-INF/MANIFEST.MF)
  check_elf "$x/native/linux-x86_64/libleasebeat_jni.so" x86_64 gnu
  check_elf "$x/native/linux-aarch64/libleasebeat_jni.so" aarch64 gnu
  grep -q '^Automatic-Module-Name: io.leasebeat' "$x/META-INF/MANIFEST.MF" || fail "$jar: no Automatic-Module-Name"
  for tag in licenses scm developers; do grep -q "<$tag>" "$out/leasebeat-$version.pom" || fail "POM lacks <$tag>"; done
  for f in "$out"/leasebeat-"$version"-sources.jar "$out"/leasebeat-"$version"-javadoc.jar; do
    [ "$(unzip -l "$f" | grep -c 'io/leasebeat/Heartbeat\.\(java\|html\)')" -ge 1 ] || fail "$f lacks Heartbeat"
  done
  java -Djava.library.path=/nonexistent -cp "$jar" jvm/examples/JarSmoke.java
  ls -l "$out"
}

build_c() {
  echo "==> c: release tarballs (header, versioned .so, .a, pkg-config, CMake)"
  local out="$dist/c"
  rm -rf "$out"; mkdir -p "$out"
  for arch in x86_64 aarch64; do
    local dir name prefix
    dir="$(cdylib leasebeat-ffi "$arch" gnu)"
    name="leasebeat-$version-$arch-linux-gnu"
    prefix="$target/packaging/c-stage/$name"
    rm -rf "$prefix"
    LEASEBEAT_LIB_DIR="$dir" ffi-c/install.sh "$prefix" >/dev/null
    check_elf "$prefix/lib/libleasebeat.so.$version" "$arch" gnu
    LC_ALL=C readelf -h "$prefix/lib/libleasebeat.a" 2>/dev/null | sed -n 's/^ *Machine: *//p' | sort -u \
      | grep -x "$( [ "$arch" = x86_64 ] && echo 'Advanced Micro Devices X86-64' || echo AArch64)" >/dev/null \
      || fail "$prefix/lib/libleasebeat.a: wrong machine"
    tar -C "$target/packaging/c-stage" -czf "$out/$name.tar.gz" "$name"
    echo "  $name.tar.gz: $(tar -tzf "$out/$name.tar.gz" | grep -v '/$' | sed "s|^$name/||" | tr '\n' ' ')"
  done
  echo "==> c: the x86_64 tarball, unpacked elsewhere, serves a pkg-config consumer"
  local u="$target/packaging/c-unpacked"
  rm -rf "$u"; mkdir -p "$u"
  tar -xzf "$out/leasebeat-$version-x86_64-linux-gnu.tar.gz" -C "$u"
  local pfx="$u/leasebeat-$version-x86_64-linux-gnu"
  read -r -a flags <<<"$(PKG_CONFIG_PATH="$pfx/lib/pkgconfig" pkg-config --cflags --libs leasebeat)"
  cc -std=c11 -Wall -Wextra -Werror tests/c/consumer/consumer.c "${flags[@]}" -o "$u/consumer"
  LD_LIBRARY_PATH="$pfx/lib" "$u/consumer" >/dev/null
  echo "  pkg-config consumer: built against the unpacked tarball and run"
  cmake -S tests/c/consumer -B "$u/cmake-build" -DCMAKE_PREFIX_PATH="$pfx" -DCMAKE_BUILD_TYPE=Release \
    >"$u/cmake.log" 2>&1 || { cat "$u/cmake.log"; fail "cmake configure of the consumer"; }
  cmake --build "$u/cmake-build" >"$u/cmake-build.log" 2>&1 || { cat "$u/cmake-build.log"; fail "cmake build of the consumer"; }
  LD_LIBRARY_PATH="$pfx/lib" "$u/cmake-build/consumer_shared" >/dev/null
  "$u/cmake-build/consumer_static" >/dev/null
  if LC_ALL=C readelf -d "$u/cmake-build/consumer_static" | grep 'NEEDED.*libleasebeat' >/dev/null; then
    fail "consumer_static needs a libleasebeat shared library"
  fi
  echo "  CMake consumer: find_package(leasebeat) -> leasebeat::leasebeat and leasebeat::leasebeat_static built and run"
}

build_rust() {
  echo "==> rust: cargo package -p leasebeat"
  local out="$dist/rust"
  rm -rf "$out"; mkdir -p "$out"
  cargo package --locked -p leasebeat
  cp "$target/package/leasebeat-$version.crate" "$out/"
  ls -l "$out"
}


# --host: the artifacts of the machine it runs on, built with the plain tools
# (cargo, maturin, napi), for the release workflow's macOS and Windows runners
# (it also runs on Linux, where it makes the host's linux-gnu artifacts). Into
# target/dist/host-<triple>/: python/ the abi3 wheel; node/ the @leasebeat/<platform>
# tarball; jvm/native/<os>-<arch>/ the JNI library (the release job adds it to the
# jar); c/leasebeat-<v>-<triple>.tar.gz (include/, lib/ with the shared and the
# static library). No ELF checks: those are the Linux build's.
build_host() {
  local t np jp out
  t="$(rustc -vV | sed -n 's/^host: //p')"
  case "$t" in
    x86_64-apple-darwin) np=darwin-x64 jp=macos-x86_64 ;;
    aarch64-apple-darwin) np=darwin-arm64 jp=macos-aarch64 ;;
    x86_64-pc-windows-msvc) np=win32-x64-msvc jp=windows-x86_64 ;;
    x86_64-unknown-linux-gnu) np=linux-x64-gnu jp=linux-x86_64 ;;
    aarch64-unknown-linux-gnu) np=linux-arm64-gnu jp=linux-aarch64 ;;
    *) fail "--host: no package names for host $t" ;;
  esac
  out="$dist/host-$t"
  # On Linux, target/<triple>/ holds the zig builds (glibc 2.17): build for the
  # host without --target there (target/release/, as the test stages do).
  local targs=(--target "$t") rel="$target/$t/release"
  case "$t" in *-linux-*) targs=() rel="$target/release" ;; esac
  rm -rf "$out"; mkdir -p "$out/python" "$out/node" "$out/jvm/native/$jp" "$out/c"
  echo "==> host $t: python wheel"
  (cd py && maturin build --release --locked "${targs[@]}" --out "$out/python")
  echo "==> host $t: node @leasebeat/$np"
  local stage="$target/packaging/host-node/$np"
  rm -rf "$stage"; mkdir -p "$stage"
  [ -f "node/npm/$np/package.json" ] || fail "node/npm/$np/package.json missing"
  (cd node && npm ci --no-audit --no-fund --loglevel=error \
    && npx --no-install napi build --platform --release --no-const-enum "${targs[@]}" --output-dir "$stage" --no-js)
  cp "node/npm/$np/package.json" "node/npm/$np/README.md" "$stage/"
  [ -f "$stage/leasebeat.$np.node" ] || fail "napi build made no leasebeat.$np.node"
  rm -f "$stage"/*.d.ts
  (cd "$stage" && npm pack --silent --pack-destination "$out/node" >/dev/null)
  echo "==> host $t: JNI and C libraries"
  cargo build --release --locked -p leasebeat-jni -p leasebeat-ffi "${targs[@]}"
  local f n=0
  for f in libleasebeat_jni.so libleasebeat_jni.dylib leasebeat_jni.dll; do
    if [ -f "$rel/$f" ]; then cp "$rel/$f" "$out/jvm/native/$jp/"; n=$((n + 1)); fi
  done
  [ "$n" = 1 ] || fail "no JNI library in $rel"
  local name="leasebeat-$version-$t" c="$target/packaging/host-c"
  rm -rf "$c"; mkdir -p "$c/$name/include" "$c/$name/lib"
  cp include/leasebeat.h "$c/$name/include/"
  n=0
  for f in libleasebeat.so libleasebeat.dylib leasebeat.dll leasebeat.dll.lib libleasebeat.a leasebeat.lib; do
    if [ -f "$rel/$f" ]; then cp "$rel/$f" "$c/$name/lib/"; n=$((n + 1)); fi
  done
  [ "$n" -ge 2 ] || fail "the C libraries are missing from $rel"
  tar -C "$c" -czf "$out/c/$name.tar.gz" "$name"
  (cd "$out" && find . -type f | sort)
}

start=$(date +%s)
install_tools
if [ "$mode" = host ]; then
  version="$(cargo metadata --no-deps --format-version 1 --locked \
    | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{const m=JSON.parse(s);console.log(m.packages.find(p=>p.name==="leasebeat").version)})')"
  build_host
  echo "package.sh --host: done in $(( $(date +%s) - start )) s"
  exit 0
fi
check_tools_and_manifests
if [ "$mode" = check ]; then
  echo "package.sh --check: ok ($(( $(date +%s) - start )) s)"
  exit 0
fi
mkdir -p "$dist"
# `leasebeat serve`, which the Python, Node and Java server-backed tests start.
CLI_BIN="$target/release/leasebeat"
if wanted python || wanted node || wanted jvm; then
  cargo build --release --locked -q -p leasebeat-cli
fi
if [ ! -x /lib/ld-musl-x86_64.so.1 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  apt-get install -y -q musl >/dev/null || echo "package.sh: could not install musl (Debian); the musl loader checks are skipped"
fi
for part in rust c jvm python node; do
  if wanted "$part"; then
    t0=$(date +%s)
    "build_$part"
    echo "==> $part: $(( $(date +%s) - t0 )) s"
  fi
done
echo "==> artifacts in $dist"
(cd "$dist" && find . -type f | sort)
echo "package.sh: $checked_elves ELF files checked; done in $(( $(date +%s) - start )) s"
