#!/usr/bin/env bash
# Installs what the real-server stage (scripts/test-realserver.sh) needs on a fresh Debian
# machine: Debian's redis-server (the real Cycles server keeps its state in Redis with Lua
# scripts), Maven and curl. The server itself is built with a JDK >= 21 (JDK 25 expected at
# /usr/lib/jvm/temurin-25-jdk-amd64, or LEASEBEAT_REALSERVER_JAVA_HOME); Maven downloads its
# dependencies into ~/.m2 from Maven Central. Idempotent: installs only what is missing.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
packages=(redis-server maven curl)
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
  echo "real-server stage packages already installed"
fi
