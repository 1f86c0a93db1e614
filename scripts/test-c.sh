#!/usr/bin/env bash
# The C stage: the C ABI (ffi-c) and include/leasebeat.h.
#  1. cargo build --release -p leasebeat-ffi (libleasebeat.so and .a); the
#     SONAME of libleasebeat.so is checked (libleasebeat.so.0.1 for 0.1.x)
#  2. the Rust tests of ffi-c, among them the header drift and version test
#  3. tests/c under ASan+UBSan against the static library
#  4. tests/c under valgrind against the shared library
#     (both replay every tests/vectors/*.json and tests/vectors/settlement/*.json
#     and compare every decision with the Rust replay's `leasebeat replay --emit`,
#     plus the API's negative tests, the adopt tests and the journal tests,
#     tests/c/journal.c: each in a temporary directory; its tmpfs cases need
#     mount(2), i.e. root, and print a note when they cannot run)
#  5. tests/c/recovery.c (the 12 recovery scenarios through the C driver
#     against `leasebeat serve`, ASan+UBSan), then the header compiled as C++17
#  6. ffi-c/install.sh into a temporary prefix (the real file, its SONAME link
#     and the dev link are checked), then a consumer built through pkg-config
#     (no rpath: it runs with LD_LIBRARY_PATH=PREFIX/lib, so the SONAME link
#     must resolve) and through CMake find_package(leasebeat), shared and static
#  7. the example agent (examples/c-agent) under valgrind against a live
#     `leasebeat serve`; then against a URL where nothing listens and against
#     a server killed mid-run (it must report a stop, never hang)
# Steps 3 and 4 include the driver tests (tests/c/driver.c) against a live
# `leasebeat serve` (127.0.0.1, port 0), started here and killed on exit, and
# the driver's fallback-path jeopardy test against a second one run with
# --omit-remaining (an older server).
# Programs linked against target/release/libleasebeat.so (steps 4 and 7) record
# its SONAME (libleasebeat.so.0.1), a name cargo does not create: they are
# linked with -L target/release and an rpath to $tmp/lib, which holds only the
# link libleasebeat.so.0.1 -> target/release/libleasebeat.so (removed on exit).
# Set-up: scripts/setup/c.sh (gcc, g++, libcjson-dev, valgrind, pkg-config, cmake).
set -euo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
case "$target" in /*) ;; *) target="$root/$target" ;; esac
CC="${CC:-cc}"
CXX="${CXX:-g++}"

tmp="$(mktemp -d)"
server_pids=()
cleanup() {
  for pid in "${server_pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${server_pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
# The driver's journal is on by default (at $CYCLES_JOURNAL_DIR, else
# ~/.runcycles/commit-journal): every program of this stage journals into the
# stage's temporary directory, never into the home directory.
export CYCLES_JOURNAL_DIR="$tmp/journal"

# start_server NAME [serve options...]: starts `leasebeat serve` on 127.0.0.1
# port 0 in the background; sets $server_url and $server_pid.
start_server() {
  local name="$1"
  shift
  "$target/release/leasebeat" serve --bind 127.0.0.1:0 "$@" > "$tmp/$name.out" 2> "$tmp/$name.err" &
  server_pid=$!
  server_pids+=("$server_pid")
  server_url=""
  for _ in $(seq 200); do
    server_url="$(sed -n '1s/^listening on //p' "$tmp/$name.out")"
    if [ -n "$server_url" ]; then return 0; fi
    if ! kill -0 "$server_pid" 2>/dev/null; then break; fi
    sleep 0.1
  done
  cat "$tmp/$name.err" >&2
  echo "leasebeat serve ($name) did not print its URL" >&2
  exit 1
}

echo "==> [c] cargo build --release -p leasebeat-ffi"
cargo build --release --locked -p leasebeat-ffi

echo "==> [c] the SONAME of libleasebeat.so"
# needed FILE: the DT_NEEDED entries of FILE, one a line.
needed() { LC_ALL=C readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]$/\1/p'; }
version="$(sed -n 's/^#define LEASEBEAT_VERSION "\(.*\)"$/\1/p' include/leasebeat.h)"
IFS=. read -r v_major v_minor _ <<< "$version"
if [ "$v_major" = 0 ]; then want_soname="libleasebeat.so.0.$v_minor"; else want_soname="libleasebeat.so.$v_major"; fi
soname="$(LC_ALL=C readelf -d "$target/release/libleasebeat.so" | sed -n 's/.*(SONAME).*\[\(.*\)\]$/\1/p')"
if [ "$soname" != "$want_soname" ]; then
  echo "libleasebeat.so: SONAME '$soname', want '$want_soname' (version $version; ffi-c/build.rs)" >&2
  exit 1
fi
echo "SONAME: $soname"
mkdir -p "$tmp/lib"
ln -s "$target/release/libleasebeat.so" "$tmp/lib/$soname"

echo "==> [c] cargo build --release -p leasebeat-cli (the reference server)"
cargo build --release --locked -p leasebeat-cli

# --max-lead-ms 4000: each extension brings the lead back to 4 s, so a lease
# with ttl 4000 beats about once a second.
# --log: the adopt test (tests/c/adopt.c) reads the server's request log to
# show that adopting a create costs no extra extension.
start_server serve --max-lead-ms 4000 --log "$tmp/serve.log"
url="$server_url"
echo "leasebeat serve: $url"
# --omit-remaining: an older server (no remaining_ttl_ms), for the driver's
# fallback-path jeopardy test (D-15).
start_server fallback --max-lead-ms 4000 --omit-remaining
fallback_url="$server_url"
echo "leasebeat serve --omit-remaining: $fallback_url"

echo "==> [c] header drift and version (cargo test -p leasebeat-ffi)"
cargo test --release --locked -p leasebeat-ffi

shopt -s nullglob
vectors=(tests/vectors/*.json tests/vectors/settlement/*.json)
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
sources=(tests/c/replay.c tests/c/negative.c tests/c/driver.c tests/c/adopt.c tests/c/settle.c tests/c/journal.c tests/c/driver_settle.c)
syslibs=(-lpthread -ldl -lm)

echo "==> [c] ASan+UBSan, static library"
"$CC" "${cflags[@]}" "${cjson_cflags[@]}" -fsanitize=address,undefined -fno-sanitize-recover=all \
  -fno-omit-frame-pointer "${sources[@]}" "$target/release/libleasebeat.a" "${cjson_libs[@]}" "${syslibs[@]}" \
  -o "$tmp/lb_test_asan"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1 \
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  timeout 600 "$tmp/lb_test_asan" --server "$url" --fallback-server "$fallback_url" --server-log "$tmp/serve.log" "${emit_args[@]}" "${vectors[@]}" > "$tmp/asan.log" 2>&1 || {
    cat "$tmp/asan.log"; echo "ASan+UBSan run failed" >&2; exit 1; }
grep -v '^ok [^ ]*$' "$tmp/asan.log" || true

echo "==> [c] valgrind, shared library"
"$CC" "${cflags[@]}" "${cjson_cflags[@]}" "${sources[@]}" -L"$target/release" -lleasebeat \
  -Wl,-rpath,"$tmp/lib" "${cjson_libs[@]}" "${syslibs[@]}" -o "$tmp/lb_test_shared"
if ! needed "$tmp/lb_test_shared" | grep -xF "$soname" >/dev/null; then
  echo "lb_test_shared does not need $soname: $(needed "$tmp/lb_test_shared" | tr '\n' ' ')" >&2
  exit 1
fi
timeout 900 valgrind -q --suppressions=tests/c/valgrind.supp --leak-check=full --errors-for-leak-kinds=definite,indirect,possible --error-exitcode=1 \
  "$tmp/lb_test_shared" --server "$url" --fallback-server "$fallback_url" --server-log "$tmp/serve.log" "${emit_args[@]}" "${vectors[@]}" > "$tmp/valgrind.log" 2>&1 || {
    cat "$tmp/valgrind.log"; echo "valgrind run failed" >&2; exit 1; }
grep -v '^ok [^ ]*$' "$tmp/valgrind.log" || true

echo "==> [c] the recovery scenarios through the C driver (tests/c/recovery.c, ASan+UBSan)"
# Each test starts its own `leasebeat serve` with the faults it needs and
# re-executes this program for restarts (SIGKILL) and the concurrent replay.
"$CC" "${cflags[@]}" "${cjson_cflags[@]}" -fsanitize=address,undefined -fno-sanitize-recover=all \
  -fno-omit-frame-pointer tests/c/recovery.c "$target/release/libleasebeat.a" "${cjson_libs[@]}" "${syslibs[@]}" \
  -o "$tmp/recovery_c"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
LEASEBEAT_BIN="$target/release/leasebeat" timeout 300 "$tmp/recovery_c" > "$tmp/recovery.log" 2> "$tmp/recovery.err" || {
  cat "$tmp/recovery.err" "$tmp/recovery.log"; echo "recovery scenarios failed" >&2; exit 1; }
cat "$tmp/recovery.log"

echo "==> [c] the header as C++17"
"$CXX" -std=c++17 -Wall -Wextra -Werror -pedantic -fsyntax-only -Iinclude tests/c/header_check.cpp
echo "header compiles as C++17"

echo "==> [c] install into a fresh prefix; pkg-config and CMake consumers"
prefix="$tmp/prefix"
ffi-c/install.sh "$prefix"
realname="libleasebeat.so.$version"
if [ ! -f "$prefix/lib/$realname" ] || [ -L "$prefix/lib/$realname" ] \
  || [ "$(readlink "$prefix/lib/libleasebeat.so")" != "$soname" ] \
  || { [ "$soname" != "$realname" ] && [ "$(readlink "$prefix/lib/$soname")" != "$realname" ]; }; then
  ls -l "$prefix/lib" >&2
  echo "install: want the file $realname, $soname -> $realname and libleasebeat.so -> $soname" >&2
  exit 1
fi
if grep -q 'IMPORTED_NO_SONAME' "$prefix/lib/cmake/leasebeat/leasebeatConfig.cmake" \
  || ! grep -qF "IMPORTED_SONAME \"$soname\"" "$prefix/lib/cmake/leasebeat/leasebeatConfig.cmake"; then
  echo "leasebeatConfig.cmake: want IMPORTED_SONAME \"$soname\" and no IMPORTED_NO_SONAME" >&2
  exit 1
fi
echo "installed: lib/$realname, lib/$soname -> $realname, lib/libleasebeat.so -> $soname"
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
pkg-config --exists --print-errors leasebeat
echo "pkg-config --cflags --libs leasebeat: $(pkg-config --cflags --libs leasebeat)"
read -r -a lb_flags <<< "$(pkg-config --cflags --libs leasebeat)"
# No rpath: the loader must find $soname through LD_LIBRARY_PATH, in the prefix.
"$CC" -std=c11 -Wall -Wextra -Werror -pedantic tests/c/consumer/consumer.c "${lb_flags[@]}" \
  -o "$tmp/consumer_pkgconfig"
# check_shared_consumer FILE: FILE needs $soname (not the dev link
# libleasebeat.so), the loader resolves it to the prefix, and FILE runs.
check_shared_consumer() {
  if [ "$(needed "$1" | grep '^libleasebeat')" != "$soname" ]; then
    echo "$1 needs $(needed "$1" | grep '^libleasebeat' | tr '\n' ' '), want $soname" >&2
    exit 1
  fi
  local resolved
  resolved="$(LD_LIBRARY_PATH="$prefix/lib" ldd "$1" | awk -v n="$soname" '$1 == n { print $3 }')"
  if [ "$resolved" != "$prefix/lib/$soname" ]; then
    echo "$1: $soname resolves to '$resolved', want $prefix/lib/$soname" >&2
    exit 1
  fi
  LD_LIBRARY_PATH="$prefix/lib" "$1"
}
check_shared_consumer "$tmp/consumer_pkgconfig"
cmake -S tests/c/consumer -B "$tmp/cmake-build" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release > "$tmp/cmake.log" 2>&1 || {
  cat "$tmp/cmake.log"; exit 1; }
cmake --build "$tmp/cmake-build" > "$tmp/cmake-build.log" 2>&1 || { cat "$tmp/cmake-build.log"; exit 1; }
check_shared_consumer "$tmp/cmake-build/consumer_shared"
if needed "$tmp/cmake-build/consumer_static" | grep '^libleasebeat' >/dev/null; then
  echo "consumer_static needs a libleasebeat shared library" >&2
  exit 1
fi
"$tmp/cmake-build/consumer_static"
echo "find_package(leasebeat): leasebeat::leasebeat and leasebeat::leasebeat_static work"
# The root README's C commands, as written, against a tarball of this prefix.
scripts/check-docs.sh c "$prefix"

echo "==> [c] the example agent (examples/c-agent) under valgrind against $url"
"$CC" -std=c11 -Wall -Wextra -Werror -pedantic -g -O1 -Iinclude examples/c-agent/agent.c \
  -L"$target/release" -lleasebeat -Wl,-rpath,"$tmp/lib" -lpthread -o "$tmp/agent"
# A 1000 ms request timeout instead of the example's 400: under valgrind the
# first connection can take longer than 400 ms (the schedule is the same:
# the attempt budget is at least 1000 ms either way).
agent_rc=0
timeout 300 valgrind -q --suppressions=tests/c/valgrind.supp --leak-check=full --errors-for-leak-kinds=definite,indirect,possible --error-exitcode=1 \
  "$tmp/agent" "$url" agent-key 1000 > "$tmp/agent.log" 2>&1 || agent_rc=$?
cat "$tmp/agent.log"
if [ "$agent_rc" -ne 0 ] || grep -q '^==[0-9]*==' "$tmp/agent.log" || ! grep -q '^ok: ' "$tmp/agent.log"; then
  echo "the example agent failed under valgrind (exit $agent_rc)" >&2
  exit 1
fi
agent_summary="$(grep '^ok: ' "$tmp/agent.log")"

echo "==> [c] the agent against a URL where nothing listens"
start_server dead
dead_url="$server_url"
kill "$server_pid"
wait "$server_pid" 2>/dev/null || true
dead_rc=0
timeout 60 "$tmp/agent" "$dead_url" > "$tmp/agent-dead.log" 2>&1 || dead_rc=$?
cat "$tmp/agent-dead.log"
if [ "$dead_rc" -ne 1 ] || ! grep -q '^stopped lease=1 .*reason=create_failed$' "$tmp/agent-dead.log"; then
  echo "nothing listening: want exit 1 and a create_failed stop, got exit $dead_rc" >&2
  exit 1
fi

echo "==> [c] the agent against a server killed mid-run"
start_server doomed --max-lead-ms 4000
doomed_rc=0
timeout 60 "$tmp/agent" "$server_url" > "$tmp/agent-killed.log" 2>&1 &
agent_pid=$!
for _ in $(seq 300); do
  if grep -q 'attempt=extend outcome=200' "$tmp/agent-killed.log" || ! kill -0 "$agent_pid" 2>/dev/null; then break; fi
  sleep 0.1
done
kill "$server_pid"
wait "$server_pid" 2>/dev/null || true
wait "$agent_pid" || doomed_rc=$?
cat "$tmp/agent-killed.log"
if [ "$doomed_rc" -ne 1 ] || ! grep -q '^stopped lease=1 ' "$tmp/agent-killed.log" \
  || ! grep -q 'attempt=extend outcome=200' "$tmp/agent-killed.log"; then
  echo "killed server: want an extension, then a stop and exit 1 (no hang: 124), got exit $doomed_rc" >&2
  exit 1
fi
killed_stop="$(sed -n 's/^stopped lease=1 .*reason=//p' "$tmp/agent-killed.log")"

echo "==> [c] results"
echo "example agent (valgrind, live server): $agent_summary"
echo "example agent, nothing listening: stopped create_failed"
echo "example agent, server killed mid-run: stopped $killed_stop"
echo "SONAME: $soname; installed consumers (pkg-config, CMake shared/static) run"
echo "ASan+UBSan (static): $(tail -n 1 "$tmp/asan.log")"
echo "valgrind (shared):   $(tail -n 1 "$tmp/valgrind.log")"
echo "recovery (ASan+UBSan): $(tail -n 1 "$tmp/recovery.log")"
