#!/usr/bin/env bash
# Builds the release library and installs it under PREFIX:
#   PREFIX/include/leasebeat.h
#   PREFIX/lib/libleasebeat.so.<version>       the shared library (e.g. .so.0.1.0)
#   PREFIX/lib/libleasebeat.so.<soname suffix>  -> libleasebeat.so.<version> (the
#       SONAME, set by ffi-c/build.rs: libleasebeat.so.0.1 for 0.1.x; what programs load)
#   PREFIX/lib/libleasebeat.so                 -> the SONAME link (for -lleasebeat)
#   PREFIX/lib/libleasebeat.a
#   PREFIX/lib/pkgconfig/leasebeat.pc
#   PREFIX/lib/cmake/leasebeat/leasebeatConfig.cmake (+ leasebeatConfigVersion.cmake)
# Usage (from anywhere): ffi-c/install.sh PREFIX
# With LEASEBEAT_LIB_DIR=DIR the libraries are taken from DIR as they are (no
# cargo build): scripts/package.sh uses it for cross-compiled targets.
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

libdir="${LEASEBEAT_LIB_DIR:-}"
if [ -z "$libdir" ]; then
  (cd "$root" && cargo build --release --locked -p leasebeat-ffi)
  libdir="$target/release"
fi

version="$(sed -n 's/^#define LEASEBEAT_VERSION "\(.*\)"$/\1/p' "$root/include/leasebeat.h")"
if [ -z "$version" ]; then
  echo "cannot read LEASEBEAT_VERSION from include/leasebeat.h" >&2
  exit 1
fi
# The SONAME comes from the built library itself (ffi-c/build.rs sets it), so
# the links made here always match what linked programs will ask for.
lib="$libdir/libleasebeat.so"
if command -v readelf >/dev/null 2>&1; then
  soname="$(LC_ALL=C readelf -d "$lib" | sed -n 's/.*(SONAME).*\[\(.*\)\]$/\1/p')"
else
  soname="$(LC_ALL=C objdump -p "$lib" | awk '$1 == "SONAME" { print $2 }')"
fi
case "$soname" in
  libleasebeat.so.*) ;;
  *) echo "$lib has no libleasebeat.so.* SONAME (got '$soname'); see ffi-c/build.rs" >&2; exit 1 ;;
esac
case "libleasebeat.so.$version" in
  "$soname" | "$soname".*) ;;
  *) echo "SONAME $soname does not match version $version" >&2; exit 1 ;;
esac
realname="libleasebeat.so.$version"

# What a static link of a Rust library needs on Linux (rustc --print native-static-libs).
private_libs="-lpthread -ldl -lm -lrt -lutil -lgcc_s -lc"

install -d "$prefix/include" "$prefix/lib/pkgconfig" "$prefix/lib/cmake/leasebeat"
install -m 0644 "$root/include/leasebeat.h" "$prefix/include/leasebeat.h"
install -m 0755 "$lib" "$prefix/lib/$realname"
if [ "$soname" != "$realname" ]; then
  ln -sfn "$realname" "$prefix/lib/$soname"
fi
ln -sfn "$soname" "$prefix/lib/libleasebeat.so"
install -m 0644 "$libdir/libleasebeat.a" "$prefix/lib/libleasebeat.a"
for f in leasebeat.pc:lib/pkgconfig/leasebeat.pc \
         leasebeatConfig.cmake:lib/cmake/leasebeat/leasebeatConfig.cmake \
         leasebeatConfigVersion.cmake:lib/cmake/leasebeat/leasebeatConfigVersion.cmake; do
  src="${f%%:*}"
  dst="${f#*:}"
  sed -e "s|@VERSION@|$version|g" -e "s|@SONAME@|$soname|g" -e "s|@REALNAME@|$realname|g" -e "s|@PRIVATE_LIBS@|$private_libs|g" \
    "$root/ffi-c/packaging/$src.in" > "$prefix/$dst"
  chmod 0644 "$prefix/$dst"
done
echo "installed leasebeat $version under $prefix (SONAME $soname)"
