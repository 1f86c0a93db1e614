#!/usr/bin/env bash
# What the JVM stage needs: a JDK 17+ (javac) and Maven 3.8+. Maven fetches the pinned plugins
# and test libraries from Maven Central itself. unzip lists the jar's contents in the test.
set -euo pipefail
need=()
command -v javac >/dev/null 2>&1 || need+=(openjdk-17-jdk-headless)
command -v mvn >/dev/null 2>&1 || need+=(maven)
command -v unzip >/dev/null 2>&1 || need+=(unzip)
if [ "${#need[@]}" -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  SUDO=""; if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update
  $SUDO apt-get install -y --no-install-recommends "${need[@]}"
fi
javac -version
mvn -B -Dstyle.color=never --version
