#!/usr/bin/env bash
# The C stage: the C ABI (ffi-c) and include/leasebeat.h.
#  1. cargo build --release -p leasebeat-ffi (libleasebeat.so and .a)
#  2. the Rust tests of ffi-c, among them the header drift and version test
#  3. tests/c under ASan+UBSan against the static library
#  4. tests/c under valgrind against the shared library
#     (both replay every tests/vectors/*.json and compare every decision with
#     the Rust replay's `leasebeat replay --emit`, plus the API's negative tests)
#  5. the header compiled as C++17
#  6. ffi-c/install.sh into a temporary prefix, then a consumer built through
#     pkg-config and through CMake find_package(leasebeat)
# Set-up: scripts/setup/c.sh (gcc, g++, libcjson-dev, valgrind, pkg-config, cmake).
set -euo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
case "$target" in /*) ;; *) target="$root/$target" ;; esac
CC="${CC:-cc}"
CXX="${CXX:-g++}"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

echo "==> [c] cargo build --release -p leasebeat-ffi"
cargo build --release --locked -p leasebeat-ffi

echo "==> [c] header drift and version (cargo test -p leasebeat-ffi)"
cargo test --release --locked -p leasebeat-ffi

shopt -s nullglob
vectors=(tests/vectors/*.json)
shopt -u nullglob
echo "==> [c] ${#vectors[@]} vectors; the Rust replay's decisions for comparison"
emit_args=()
if [ "${#vectors[@]}" -gt 0 ]; then
  cargo run --release --locked -q -p leasebeat-cli -- replay --emit "${vectors[@]}" > "$tmp/rust-emit.jsonl"
  emit_args=(--compare-emitted "$tmp/rust-emit.jsonl")
fi

cflags=(-std=c11 -Wall -Wextra -Werror -pedantic -g -O1 -Iinclude)
read -r -a cjson_cflags <<< "$(pkg-config --cflags libcjson)"
read -r -a cjson_libs <<< "$(pkg-config --libs libcjson)"
sources=(tests/c/replay.c tests/c/negative.c)
syslibs=(-lpthread -ldl -lm)

echo "==> [c] ASan+UBSan, static library"
"$CC" "${cflags[@]}" "${cjson_cflags[@]}" -fsanitize=address,undefined -fno-sanitize-recover=all \
  -fno-omit-frame-pointer "${sources[@]}" "$target/release/libleasebeat.a" "${cjson_libs[@]}" "${syslibs[@]}" \
  -o "$tmp/lb_test_asan"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1 \
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  "$tmp/lb_test_asan" "${emit_args[@]}" "${vectors[@]}" > "$tmp/asan.log" 2>&1 || {
    cat "$tmp/asan.log"; echo "ASan+UBSan run failed" >&2; exit 1; }
grep -v '^ok [^ ]*$' "$tmp/asan.log" || true

echo "==> [c] valgrind, shared library"
"$CC" "${cflags[@]}" "${cjson_cflags[@]}" "${sources[@]}" -L"$target/release" -lleasebeat \
  -Wl,-rpath,"$target/release" "${cjson_libs[@]}" "${syslibs[@]}" -o "$tmp/lb_test_shared"
valgrind -q --leak-check=full --errors-for-leak-kinds=definite,indirect,possible --error-exitcode=1 \
  "$tmp/lb_test_shared" "${emit_args[@]}" "${vectors[@]}" > "$tmp/valgrind.log" 2>&1 || {
    cat "$tmp/valgrind.log"; echo "valgrind run failed" >&2; exit 1; }
grep -v '^ok [^ ]*$' "$tmp/valgrind.log" || true

echo "==> [c] the header as C++17"
"$CXX" -std=c++17 -Wall -Wextra -Werror -pedantic -fsyntax-only -Iinclude tests/c/header_check.cpp
echo "header compiles as C++17"

echo "==> [c] install into a fresh prefix; pkg-config and CMake consumers"
prefix="$tmp/prefix"
ffi-c/install.sh "$prefix"
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
pkg-config --exists --print-errors leasebeat
echo "pkg-config --cflags --libs leasebeat: $(pkg-config --cflags --libs leasebeat)"
read -r -a lb_flags <<< "$(pkg-config --cflags --libs leasebeat)"
"$CC" -std=c11 -Wall -Wextra -Werror -pedantic tests/c/consumer/consumer.c "${lb_flags[@]}" \
  -Wl,-rpath,"$prefix/lib" -o "$tmp/consumer_pkgconfig"
"$tmp/consumer_pkgconfig"
cmake -S tests/c/consumer -B "$tmp/cmake-build" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release > "$tmp/cmake.log" 2>&1 || {
  cat "$tmp/cmake.log"; exit 1; }
cmake --build "$tmp/cmake-build" > "$tmp/cmake-build.log" 2>&1 || { cat "$tmp/cmake-build.log"; exit 1; }
LD_LIBRARY_PATH="$prefix/lib" "$tmp/cmake-build/consumer_shared"
"$tmp/cmake-build/consumer_static"
echo "find_package(leasebeat): leasebeat::leasebeat and leasebeat::leasebeat_static work"

echo "==> [c] results"
echo "ASan+UBSan (static): $(tail -n 1 "$tmp/asan.log")"
echo "valgrind (shared):   $(tail -n 1 "$tmp/valgrind.log")"
