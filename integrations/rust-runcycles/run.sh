#!/usr/bin/env bash
# The Rust `runcycles` SDK as released on crates.io, with its heartbeat
# scheduling replaced by leasebeat (runcycles-leasebeat.patch), proven by the
# SDK's own test suite plus leasebeat_serve_test.rs (the SDK's public API
# against `leasebeat serve`).
#
#   integrations/rust-runcycles/run.sh [--with-baseline]
#
# --with-baseline  first run the suite on the crate exactly as released and
#                  print its counts (the "before" figure).
# RUST_RUNCYCLES_TARGET_DIR  cargo target dir for the SDK build (default:
#                  target/rust-runcycles in this repository, kept between runs).
#
# Last line: `rust-runcycles: N passed, M failed` (the SDK's tests and ours).
# Exit status 0 when every failure is listed in expected-failures.txt (see
# README.md: each one pins the SDK's own divergent arithmetic), else 1.
set -euo pipefail

VERSION=0.3.2
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
# shellcheck source=../lib.sh
. "$HERE/../lib.sh"
BASELINE=0
for arg in "$@"; do
    case "$arg" in
        --with-baseline) BASELINE=1 ;;
        *) echo "usage: $0 [--with-baseline]" >&2; exit 2 ;;
    esac
done

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
SDK_TARGET="${RUST_RUNCYCLES_TARGET_DIR:-$REPO/target/rust-runcycles}"

# 1. The crate as released: from LEASEBEAT_PEERS_DIR/runcycles-rust-$VERSION
#    when present, else cargo fetches (and checksums) it from crates.io
#    through a scratch project and we unpack the .crate file itself; when
#    neither is reachable the SDK is reported skipped at once.
PEER="$(peers_dir "$REPO")/runcycles-rust-$VERSION"
if [ -f "$PEER/Cargo.toml" ] && [ -d "$PEER/tests" ]; then
    cp -R "$PEER" "$WORK/runcycles-$VERSION"
    chmod -R u+w "$WORK/runcycles-$VERSION"
    CRATE_FILE="$PEER (the peers folder)"
else
mkdir -p "$WORK/fetch/src"
cat > "$WORK/fetch/Cargo.toml" <<EOF
[package]
name = "fetch-runcycles"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
runcycles = "=$VERSION"

[workspace]
EOF
: > "$WORK/fetch/src/lib.rs"
if ! cargo fetch -q --manifest-path "$WORK/fetch/Cargo.toml" 2>"$WORK/fetch.log"; then
    tail -n 3 "$WORK/fetch.log" >&2
    skip rust-runcycles "runcycles $VERSION is not in $PEER and crates.io is not reachable"
fi
CRATE_FILE="$(ls -1 "${CARGO_HOME:-$HOME/.cargo}"/registry/cache/*/runcycles-$VERSION.crate | head -n 1)"
tar -xzf "$CRATE_FILE" -C "$WORK"
fi
SDK="$WORK/runcycles-$VERSION"
echo "rust-runcycles: SDK source: runcycles $VERSION from $CRATE_FILE"

# Runs `cargo test --all-features` in $1, writes the log to $2 and prints
# "N M" (passed, failed) summed over every test binary and the doc-tests.
run_suite() {
    local dir="$1" log="$2"
    # The SDK journals under $USERPROFILE (else $HOME)/.runcycles when a test builds its
    # config without a journal directory (CYCLES_JOURNAL_DIR is read only by
    # CyclesConfig::from_env): USERPROFILE points at a scratch home, which cargo and
    # rustup ignore on Linux, so that nothing lands in the tester's home.
    mkdir -p "$WORK/home"
    (cd "$dir" && USERPROFILE="$WORK/home" CARGO_TARGET_DIR="$SDK_TARGET" cargo test --all-features --no-fail-fast) \
        >"$log" 2>&1 || true
    if ! grep -q '^test result:' "$log"; then
        tail -n 40 "$log" >&2
        echo "rust-runcycles: the suite did not run (build failure, log above)" >&2
        echo "0 1"
        return
    fi
    awk '/^test result:/ {
            for (i = 1; i <= NF; i++) {
                if ($(i+1) ~ /^passed/) p += $i
                if ($(i+1) ~ /^failed/) f += $i
            }
         } END { print p + 0, f + 0 }' "$log"
}

if [ "$BASELINE" = 1 ]; then
    cp -r "$SDK" "$WORK/as-released"
    read -r BP BF < <(run_suite "$WORK/as-released" "$WORK/as-released.log")
    echo "rust-runcycles (as released, no adapter): $BP passed, $BF failed"
fi

# 2. The adapter: the patch, then the path to leasebeat's core crate.
(cd "$SDK" && patch -p1 --quiet --no-backup-if-mismatch < "$HERE/runcycles-leasebeat.patch")
sed -i "s#@LEASEBEAT_CORE@#$REPO/core#" "$SDK/Cargo.toml"

# 3. Our end-to-end test against `leasebeat serve`, run and counted with the suite.
cp "$HERE/leasebeat_serve_test.rs" "$SDK/tests/"
cat >> "$SDK/Cargo.toml" <<'EOF'

[[test]]
name = "leasebeat_serve_test"
path = "tests/leasebeat_serve_test.rs"
EOF

# 4. leasebeat's server for that test.
(cd "$REPO" && cargo build -q --locked -p leasebeat-cli)
LEASEBEAT_BIN="$(cd "$REPO" && cargo metadata --format-version 1 --no-deps \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/debug/leasebeat"
export LEASEBEAT_BIN

# 5. The whole suite with the adapter.
LOG="$WORK/adapted.log"
read -r P F < <(run_suite "$SDK" "$LOG")
# A binary with failures says FAILED here; each failure is named below, as an
# expected one (listed in expected-failures.txt) or not.
grep -E '^test result:|Running |Doc-tests' "$LOG" | sed -E 's/^/  /; s/test result: FAILED\./test result: with failures (each marked below)./'

# Failures, each checked against the list of expected ones.
UNEXPECTED=0
mapfile -t FAILED < <(grep -E '^test .* \.\.\. FAILED$' "$LOG" | sed -E 's/^test (.*) \.\.\. FAILED$/\1/' | sort -u)
for t in "${FAILED[@]}"; do
    [ -n "$t" ] || continue
    if grep -qxF "$t" <(grep -vE '^\s*(#|$)' "$HERE/expected-failures.txt" | awk '{print $1}'); then
        echo "  expected failure (README.md): $t"
    else
        echo "  UNEXPECTED failure: $t"
        UNEXPECTED=$((UNEXPECTED + 1))
    fi
done
if [ "$UNEXPECTED" -gt 0 ] || [ "$F" -gt "${#FAILED[@]}" ]; then
    # Show the failing tests' output for diagnosis.
    sed -n '/^failures:$/,/^test result:/p' "$LOG" | head -n 300
fi
echo "rust-runcycles: $P passed, $F failed"
if [ "$UNEXPECTED" -gt 0 ] || [ "$F" -gt "${#FAILED[@]}" ]; then
    exit 1
fi
