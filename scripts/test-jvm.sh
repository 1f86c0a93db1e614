#!/usr/bin/env bash
# JVM binding (jvm/): builds libleasebeat_jni.so with cargo, then `mvn verify`:
#  - Surefire: API, bad-input, concurrency tests, every tests/vectors/*.json
#    replayed through the Java API, and the adoption and runner tests against
#    `leasebeat serve` (target/release/leasebeat), with the library loaded from
#    java.library.path (cargo's output directory);
#  - Javadoc with doclint (a missing comment fails the build) and the jars;
#  - Failsafe (*IT): the same vectors against the packaged jar, with no java.library.path, so
#    the library is extracted from the jar's resources.
# Finally a single-file program runs with only the jar on the class path.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build --release --locked -p leasebeat-jni
# `leasebeat serve`, which the adoption and runner tests start on 127.0.0.1.
cargo build --release --locked -p leasebeat-cli
native_dir="$(cd "${CARGO_TARGET_DIR:-target}/release" && pwd)"
test -f "$native_dir/libleasebeat_jni.so"

cd jvm
mvn -B --no-transfer-progress -Dstyle.color=never \
  -Dleasebeat.native.dir="$native_dir" \
  verify

jar="target/leasebeat-0.1.0.jar"
unzip -l "$jar" native/linux-x86_64/libleasebeat_jni.so >/dev/null
java -Djava.library.path=/nonexistent -cp "$jar" examples/JarSmoke.java
