#!/usr/bin/env bash
# Recovery conformance, runner `java` (HeartbeatRunner): prepares what ./adapter needs, once.
#  - libleasebeat_jni.so and `leasebeat serve` (cargo, release);
#  - the JVM binding's classes and test classes (`mvn test-compile`), the test class path
#    (`dependency:build-classpath`) and the JUnit Platform console launcher
#    (junit-platform-console-standalone, the JUnit version of jvm/pom.xml) in
#    jvm/target/recovery/.
# Idempotent; quick when already built (cargo and Maven only redo what changed). Works on a
# fresh clone with or without scripts/test-jvm.sh having run.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT="$PWD"

cargo build --release --locked -p leasebeat-jni -p leasebeat-cli
native_dir="$(cd "${CARGO_TARGET_DIR:-target}/release" && pwd)"
test -f "$native_dir/libleasebeat_jni.so"
test -x "$native_dir/leasebeat"

cd jvm
out="target/recovery"
mkdir -p "$out"
mvn_q=(mvn -q -B --no-transfer-progress -Dstyle.color=never)
"${mvn_q[@]}" -Dleasebeat.native.dir="$native_dir" test-compile
"${mvn_q[@]}" dependency:build-classpath -Dmdep.includeScope=test \
  -Dmdep.outputFile="$out/classpath.txt"
# The platform version that goes with junit.version 5.x is 1.x (same minor and patch).
junit="$(sed -n 's:.*<junit.version>\(5\.[0-9.]*\)</junit.version>.*:\1:p' pom.xml | head -1)"
platform="1.${junit#5.}"
launcher="$out/junit-platform-console-standalone-$platform.jar"
if [ ! -f "$launcher" ]; then
  "${mvn_q[@]}" dependency:copy \
    -Dartifact="org.junit.platform:junit-platform-console-standalone:$platform" \
    -DoutputDirectory="$out"
fi
test -f "$launcher"
ln -sf "$(basename "$launcher")" "$out/console-launcher.jar"
{
  echo "native_dir=$native_dir"
  echo "cli=$native_dir/leasebeat"
  echo "root=$ROOT"
} >"$out/env.txt"
echo "recovery/java: ready ($launcher)"
