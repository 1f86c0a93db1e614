#!/usr/bin/env bash
# The Cycles Spring Boot starter 0.3.3 as released (a copy of
# ../shared/peers/cycles-spring-boot-starter-0.3.3, never edited), with its
# heartbeat scheduling replaced by leasebeat's JVM binding
# (cycles-spring-boot-starter-leasebeat.patch), proven by the starter's own
# JUnit suite plus LeasebeatServeTest.java (@Cycles against `leasebeat serve`).
#
#   integrations/spring-starter/run.sh [--with-baseline]
#
# --with-baseline   first run the suite on the starter exactly as released.
# SPRING_STARTER_SRC  the released starter with its tests (default:
#                   LEASEBEAT_PEERS_DIR/cycles-spring-boot-starter-0.3.3, see
#                   integrations/lib.sh; or a checkout of the upstream tag
#                   v0.3.3). Maven Central's jars hold no tests: without either,
#                   or without a JDK >= 21, the starter is reported skipped at once.
# SPRING_STARTER_M2   Maven local repository for the starter's build and the
#                   leasebeat jar (default: target/spring-starter-m2 in this
#                   repository, kept between runs; Spring Boot's artifacts come
#                   from Maven Central into it).
#
# Needs a JDK >= 21 for the starter (it targets Java 21); JDK 17 (the default
# here) builds leasebeat's jar. Last line: `spring-starter: N passed, M failed`
# over the starter's tests and ours. Exit 0 when every failure is listed in
# expected-failures.txt (README.md), else 1.
set -euo pipefail

VERSION=0.3.3
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
BASELINE=0
for arg in "$@"; do
    case "$arg" in
        --with-baseline) BASELINE=1 ;;
        *) echo "usage: $0 [--with-baseline]" >&2; exit 2 ;;
    esac
done

# shellcheck source=../lib.sh
. "$HERE/../lib.sh"
SRC="${SPRING_STARTER_SRC:-$(peers_dir "$REPO")/cycles-spring-boot-starter-$VERSION}"
if [ ! -f "$SRC/cycles-client-java-spring/pom.xml" ]; then
    skip spring-starter "the starter's sources with tests are not in $SRC (Maven Central's jars have no tests); set SPRING_STARTER_SRC to a checkout of the upstream tag v$VERSION"
fi
SRC="$(cd "$SRC" && pwd)"
echo "spring-starter: SDK source: $SRC"

# 1. A JDK >= 21 for the starter's build only (JAVA_HOME is set for its mvn
#    runs, nothing else). Debian bookworm's suites offer only openjdk-17; a
#    newer Debian suite's openjdk-25/21 package is used when apt has one.
java_major() { "$1/bin/java" -version 2>&1 | sed -nE '1s/.*version "([0-9]+).*/\1/p'; }
STARTER_JDK=""
for c in "${STARTER_JAVA_HOME:-}" /usr/lib/jvm/temurin-25-jdk-amd64 /usr/lib/jvm/*; do
    [ -n "$c" ] && [ -x "$c/bin/javac" ] || continue
    m="$(java_major "$c")"
    if [ -n "$m" ] && [ "$m" -ge 21 ]; then STARTER_JDK="$c"; break; fi
done
if [ -z "$STARTER_JDK" ]; then
    for pkg in openjdk-25-jdk-headless openjdk-21-jdk-headless; do
        if apt-cache policy "$pkg" 2>/dev/null | grep -q 'Candidate: [0-9]'; then
            echo "spring-starter: installing $pkg (a JDK >= 21 for the starter)"
            if [ "$(id -u)" = 0 ]; then apt-get install -y -q "$pkg" >/dev/null
            else sudo apt-get install -y -q "$pkg" >/dev/null; fi
            break
        fi
    done
    for c in /usr/lib/jvm/*; do
        [ -x "$c/bin/javac" ] || continue
        m="$(java_major "$c")"
        if [ -n "$m" ] && [ "$m" -ge 21 ]; then STARTER_JDK="$c"; break; fi
    done
fi
if [ -z "$STARTER_JDK" ]; then
    echo "spring-starter: no JDK >= 21 on this machine, and apt offers none (Debian bookworm has" >&2
    echo "  only openjdk-17). The starter targets Java 21: install a JDK 21+ (e.g. Temurin 25 in" >&2
    echo "  /usr/lib/jvm/temurin-25-jdk-amd64) or set STARTER_JAVA_HOME, then rerun." >&2
    skip spring-starter "no JDK >= 21 (the starter targets Java 21; set STARTER_JAVA_HOME)"
fi
echo "spring-starter: starter $VERSION from $SRC, JDK $(java_major "$STARTER_JDK") at $STARTER_JDK"

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
M2="${SPRING_STARTER_M2:-$REPO/target/spring-starter-m2}"
mkdir -p "$M2"
MVN=(mvn -B -q --no-transfer-progress -Dstyle.color=never "-Dmaven.repo.local=$M2")
# Maven 3.8 binds Surefire 2.12.4, which runs no JUnit 5 test: run Surefire 3 explicitly.
SUITE=(-Drevision=$VERSION test-compile org.apache.maven.plugins:maven-surefire-plugin:3.5.2:test
       -Dsurefire.failIfNoSpecifiedTests=false -Dmaven.test.failure.ignore=true)

# Runs the suite in $1 (the module dir), log to $2; prints "N M" (passed, failed
# + errors) from Surefire's XML reports; "0 1" if nothing ran.
run_suite() {
    local dir="$1" log="$2"
    (cd "$dir" && JAVA_HOME="$STARTER_JDK" PATH="$STARTER_JDK/bin:$PATH" "${MVN[@]}" "${SUITE[@]}") \
        >"$log" 2>&1 || true
    python3 - "$dir/target/surefire-reports" <<'PY'
import glob, sys, xml.etree.ElementTree as ET
p = f = 0
files = glob.glob(sys.argv[1] + "/TEST-*.xml")
for path in files:
    for case in ET.parse(path).getroot().iter("testcase"):
        if case.find("skipped") is not None:
            continue
        if case.find("failure") is not None or case.find("error") is not None:
            f += 1
        else:
            p += 1
print(p, f if files else 1)
PY
}

# Names of failed tests ("Class$Nested#method") from the reports in $1.
failed_tests() {
    python3 - "$1/target/surefire-reports" <<'PY'
import glob, sys, xml.etree.ElementTree as ET
for path in sorted(glob.glob(sys.argv[1] + "/TEST-*.xml")):
    for case in ET.parse(path).getroot().iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            print(case.get("classname").rsplit(".", 1)[-1] + "#" + case.get("name").split("(")[0])
PY
}

if [ "$BASELINE" = 1 ]; then
    cp -r "$SRC" "$WORK/as-released"
    read -r BP BF < <(run_suite "$WORK/as-released/cycles-client-java-spring" "$WORK/as-released.log")
    echo "spring-starter (as released, no adapter): $BP passed, $BF failed"
fi

# 2. leasebeat: the JNI library, the server for the serve test, and the jar
#    (built with the default JDK, installed into the scratch local repository).
(cd "$REPO" && cargo build -q --release --locked -p leasebeat-jni -p leasebeat-cli)
TARGET_DIR="$(cd "$REPO" && cargo metadata --format-version 1 --no-deps \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"
export LEASEBEAT_BIN="$TARGET_DIR/release/leasebeat"
mkdir -p "$WORK/leasebeat-jvm"
cp -r "$REPO/jvm/pom.xml" "$REPO/jvm/src" "$WORK/leasebeat-jvm/"
(cd "$WORK/leasebeat-jvm" && mvn -B -q --no-transfer-progress -Dstyle.color=never "-Dmaven.repo.local=$M2" \
    "-Dleasebeat.native.dir=$TARGET_DIR/release" -DskipTests -DskipITs -Dmaven.javadoc.skip=true install) >"$WORK/leasebeat-jvm.log" 2>&1 || {
    tail -n 40 "$WORK/leasebeat-jvm.log" >&2
    echo "spring-starter: building leasebeat's jar failed (log above)" >&2
    echo "spring-starter: 0 passed, 1 failed"
    exit 1
}

# 3. The starter as released, the adapter, our serve test.
cp -r "$SRC" "$WORK/starter"
MOD="$WORK/starter/cycles-client-java-spring"
(cd "$WORK/starter" && patch -p1 --quiet --no-backup-if-mismatch < "$HERE/cycles-spring-boot-starter-leasebeat.patch")
cp "$HERE/LeasebeatServeTest.java" "$MOD/src/test/java/io/runcycles/client/java/spring/"
cp "$HERE/LeasebeatHeartbeatJeopardyTest.java" "$MOD/src/test/java/io/runcycles/client/java/spring/context/"

# 4. The whole suite with the adapter.
LOG="$WORK/adapted.log"
read -r P F < <(run_suite "$MOD" "$LOG")
mapfile -t FAILED < <(failed_tests "$MOD")
UNEXPECTED=0
for t in "${FAILED[@]}"; do
    [ -n "$t" ] || continue
    if grep -qxF "$t" <(grep -vE '^\s*(#|$)' "$HERE/expected-failures.txt" | awk '{print $1}'); then
        echo "  expected failure (README.md): $t"
    else
        echo "  UNEXPECTED failure: $t"
        UNEXPECTED=$((UNEXPECTED + 1))
    fi
done
if [ "$UNEXPECTED" -gt 0 ] || [ "$F" -gt "${#FAILED[@]}" ]; then
    grep -E 'Tests run:|FAIL|ERROR|expected|but was' "$LOG" | head -n 200
fi
echo "spring-starter: $P passed, $F failed"
if [ "$UNEXPECTED" -gt 0 ] || [ "$F" -gt "${#FAILED[@]}" ]; then
    exit 1
fi
