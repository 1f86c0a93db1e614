#!/usr/bin/env bash
# JVM benchmark (issue 15; not a test, never run by test-all): one primary decision through the
# Java API, in a warmed loop (jvm/bench/io/leasebeat/DecisionBench.java).
#  - builds libleasebeat_jni.so (release) and the jar (as scripts/test-jvm.sh, tests skipped);
#  - compiles the bench class against the jar (it is in package io.leasebeat to reach the
#    package-private hook that runs the same calls in Rust inside the same process);
#  - timed region, per prepared heartbeat (create answered, first extend in flight, as in
#    core/benches/heartbeat.rs): Heartbeat.handleResponse(id, 200 + extend body, 38.6 s) then
#    Heartbeat.pollAction(); median over batches of 1000, then median over rounds. A full GC
#    after each batch's setup (not timed) compacts the heartbeats' Java objects, as in a running
#    service; without it (BENCH_JAVA_OPTS=-Dbench.gc=false) the Java figure varies 2-5x.
# Clock: the thread's CPU time in the Java loops and the Rust hooks alike (time the thread waited
# while other processes ran is not counted; -Dbench.clock=wall for nanoTime in the Java loops).
# Prints a small table and the BENCH lines jvm.decision, plus, from the same run:
# jvm.core_same_process (the same calls in one Rust loop on heartbeats made in Rust, side by side
# in a Vec as in the core's criterion bench) and jvm.overhead (the difference);
# jvm.core_same_heartbeats (the same calls in one Rust loop, no JNI per operation, on batches of
# heartbeats made through the Java API exactly as the Java loop's: same count, same order, same
# memory placement) and jvm.overhead_same_heartbeats (the difference: JNI and Java alone);
# jvm.decision_shuffled, jvm.core_shuffled and jvm.overhead_shuffled: the Java loop and the Rust
# one visiting their heartbeats in one fixed shuffled order (as timers do in a service) instead
# of creation order, where the hardware prefetcher cannot run ahead of either.
# Env: BENCH_ROUNDS (default 7), BENCH_BATCHES (default 40), BENCH_JAVA_OPTS (default
# -XX:+UseParallelGC; e.g. -XX:+UseG1GC for the JDK's default collector).
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build --release --locked -p leasebeat-jni >&2
native_dir="$(cd "${CARGO_TARGET_DIR:-target}/release" && pwd)"
test -f "$native_dir/libleasebeat_jni.so"

(cd jvm && mvn -B -q --no-transfer-progress -Dstyle.color=never \
  -Dleasebeat.native.dir="$native_dir" -DskipTests -Dmaven.javadoc.skip=true \
  package >&2)
jar="$(pwd)/jvm/target/leasebeat-0.1.0.jar"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
javac -d "$work" -cp "$jar" jvm/bench/io/leasebeat/DecisionBench.java
# shellcheck disable=SC2086 # BENCH_JAVA_OPTS is a list of options
java -Xms256m -Xmx256m -XX:+AlwaysPreTouch ${BENCH_JAVA_OPTS:--XX:+UseParallelGC} \
  -Dbench.rounds="${BENCH_ROUNDS:-7}" -Dbench.batches="${BENCH_BATCHES:-40}" \
  -Djava.library.path="$native_dir" -cp "$work:$jar" io.leasebeat.DecisionBench
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
