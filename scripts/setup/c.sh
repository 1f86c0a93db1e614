#!/usr/bin/env bash
# Installs what the C stage (scripts/test-c.sh) needs on a fresh Debian machine:
# a C/C++ compiler, cJSON (the test harness's JSON parser), valgrind, pkg-config
# and CMake. Idempotent: installs only the packages that are missing.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
packages=(gcc g++ make libc6-dev libcjson-dev valgrind pkg-config cmake)
missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "installing: ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  echo "C stage packages already installed"
fi
