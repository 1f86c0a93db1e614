#!/usr/bin/env bash
# Builds the release library and installs it under PREFIX:
#   PREFIX/include/leasebeat.h
#   PREFIX/lib/libleasebeat.so, PREFIX/lib/libleasebeat.a
#   PREFIX/lib/pkgconfig/leasebeat.pc
#   PREFIX/lib/cmake/leasebeat/leasebeatConfig.cmake (+ leasebeatConfigVersion.cmake)
# Usage (from anywhere): ffi-c/install.sh PREFIX
# The installed files are relocatable: the .pc and CMake files locate the
# prefix relative to themselves, so the tree may be moved or packaged.
set -euo pipefail
if [ $# -ne 1 ]; then
  echo "usage: $0 PREFIX" >&2
  exit 2
fi
root="$(cd "$(dirname "$0")/.." && pwd)"
mkdir -p "$1"
prefix="$(cd "$1" && pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
case "$target" in /*) ;; *) target="$root/$target" ;; esac

(cd "$root" && cargo build --release --locked -p leasebeat-ffi)

version="$(sed -n 's/^#define LEASEBEAT_VERSION "\(.*\)"$/\1/p' "$root/include/leasebeat.h")"
if [ -z "$version" ]; then
  echo "cannot read LEASEBEAT_VERSION from include/leasebeat.h" >&2
  exit 1
fi
# What a static link of a Rust library needs on Linux (rustc --print native-static-libs).
private_libs="-lpthread -ldl -lm -lrt -lutil -lgcc_s -lc"

install -d "$prefix/include" "$prefix/lib/pkgconfig" "$prefix/lib/cmake/leasebeat"
install -m 0644 "$root/include/leasebeat.h" "$prefix/include/leasebeat.h"
install -m 0755 "$target/release/libleasebeat.so" "$prefix/lib/libleasebeat.so"
install -m 0644 "$target/release/libleasebeat.a" "$prefix/lib/libleasebeat.a"
for f in leasebeat.pc:lib/pkgconfig/leasebeat.pc \
         leasebeatConfig.cmake:lib/cmake/leasebeat/leasebeatConfig.cmake \
         leasebeatConfigVersion.cmake:lib/cmake/leasebeat/leasebeatConfigVersion.cmake; do
  src="${f%%:*}"
  dst="${f#*:}"
  sed -e "s|@VERSION@|$version|g" -e "s|@PRIVATE_LIBS@|$private_libs|g" \
    "$root/ffi-c/packaging/$src.in" > "$prefix/$dst"
  chmod 0644 "$prefix/$dst"
done
echo "installed leasebeat $version under $prefix"
