#!/usr/bin/env bash
# recovery/c-driver/build.sh: prepares what the c-driver adapter needs, on a
# fresh clone or an already built tree (idempotent, quick when up to date):
#  - the C library (cargo build --release -p leasebeat-ffi: libleasebeat.a)
#    and the reference server (cargo build --release -p leasebeat-cli);
#  - the recovery test program tests/c/recovery.c, compiled with the flags of
#    scripts/test-c.sh (C11, -Wall -Wextra -Werror -pedantic, ASan+UBSan,
#    against the static library) into $target/recovery-c/recovery_c.
# Needs a C compiler, pkg-config and libcjson (scripts/setup/c.sh installs
# them; run here when libcjson is missing).
set -euo pipefail
cd "$(dirname "$0")/../.."
root="$(pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
case "$target" in /*) ;; *) target="$root/$target" ;; esac
CC="${CC:-cc}"

if ! pkg-config --exists libcjson 2>/dev/null; then
  echo "recovery/c-driver: libcjson missing: scripts/setup/c.sh" >&2
  scripts/setup/c.sh >&2
fi
cargo build --release --locked -p leasebeat-ffi -p leasebeat-cli >&2

out="$target/recovery-c"
bin="$out/recovery_c"
mkdir -p "$out"
if [ -x "$bin" ] && [ "$bin" -nt tests/c/recovery.c ] && [ "$bin" -nt include/leasebeat.h ] \
  && [ "$bin" -nt "$target/release/libleasebeat.a" ]; then
  echo "recovery/c-driver: $bin is up to date" >&2
  exit 0
fi
read -r -a cjson_cflags <<< "$(pkg-config --cflags libcjson)"
read -r -a cjson_libs <<< "$(pkg-config --libs libcjson)"
"$CC" -std=c11 -Wall -Wextra -Werror -pedantic -g -O1 -Iinclude "${cjson_cflags[@]}" \
  -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer \
  tests/c/recovery.c "$target/release/libleasebeat.a" "${cjson_libs[@]}" -lpthread -ldl -lm -o "$bin.tmp"
mv "$bin.tmp" "$bin"
echo "recovery/c-driver: built $bin" >&2
