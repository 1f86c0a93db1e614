#!/usr/bin/env bash
# The real Cycles server stage (issue 25): every runner of leasebeat against runcycles'
# cycles-server (Spring Boot, Redis + Lua), directly and through a fault proxy of our own,
# with the outcome checked on the server's side, from Redis.
#
#  1. copies the server's source out of ../shared/peers/ (read-only; override the location
#     with LEASEBEAT_REALSERVER_SRC) into target/realserver/src and builds its jar with
#     JDK >= 21 (LEASEBEAT_REALSERVER_JAVA_HOME, default the machine's temurin 25) and Maven
#     (-DskipTests: its tests need Docker; -Dmaven.compiler.proc=full: Lombok on JDK 23+).
#     The jar is kept in target/realserver and rebuilt only when the copied source changes;
#  2. builds what the runners need (leasebeat CLI, the C library and example agent, the
#     Python wheel in a venv with httpx, the Node addon, the JVM jar), reusing the other
#     stages' cargo/maven outputs when they are there;
#  3. starts Debian's redis-server and the server on free 127.0.0.1 ports, seeds a tenant,
#     an API key (a $2a$ bcrypt hash, as jBCrypt wants) and a budget as the server's
#     BaseIntegrationTest does, and stops both by PID at the end, also on failure;
#  4. runs scripts/realserver/stage.py: the scenarios and their checks, one PASS/FAIL line
#     each, closing line `realserver: N passed, M failed`.
# LEASEBEAT_REALSERVER_ONLY=limit,faults,pause,sdk,redisdown runs only those scenarios.
# LEASEBEAT_REALSERVER_BENCH="LEASES TTL_MS BUDGET_MS SECONDS[,...]" measures instead
# (`leasebeat bench-driver --url`, lapses judged from Redis: scripts/realserver/bench.py).
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
T0=$SECONDS
# shellcheck source=../integrations/lib.sh
. "$ROOT/integrations/lib.sh"
SRC="${LEASEBEAT_REALSERVER_SRC:-$(peers_dir "$ROOT")/cycles-server-0.1.25.59}"
# A JDK >= 21 for the server (it targets Java 21): LEASEBEAT_REALSERVER_JAVA_HOME, else the
# first one under /usr/lib/jvm.
java_major() { "$1/bin/java" -version 2>&1 | sed -nE '1s/.*version "([0-9]+).*/\1/p'; }
JAVA_HOME_RS="${LEASEBEAT_REALSERVER_JAVA_HOME:-}"
if [ -z "$JAVA_HOME_RS" ]; then
  for c in /usr/lib/jvm/temurin-25-jdk-amd64 /usr/lib/jvm/*; do
    [ -x "$c/bin/javac" ] || continue
    m="$(java_major "$c")"
    if [ -n "$m" ] && [ "$m" -ge 21 ]; then JAVA_HOME_RS="$c"; break; fi
  done
fi
# Without the server's released source or a JDK 21+ the stage cannot run here (a clone of the
# public repository has no ../shared/peers): it says so at once and counts as skipped.
[ -d "$SRC/cycles-protocol-service" ] ||
  skip realserver "no cycles-server 0.1.25.59 source at $SRC (set LEASEBEAT_PEERS_DIR or LEASEBEAT_REALSERVER_SRC)"
[ -n "$JAVA_HOME_RS" ] && [ -x "$JAVA_HOME_RS/bin/java" ] ||
  skip realserver "no JDK 21+ found (set LEASEBEAT_REALSERVER_JAVA_HOME)"
echo "realserver: server source: $SRC, JDK $JAVA_HOME_RS"
WORK="$ROOT/target/realserver"
mkdir -p "$WORK"
LOGS="$WORK/logs"
rm -rf "$LOGS"
mkdir -p "$LOGS"

fail_early() {
  echo "realserver: $1" >&2
  echo "realserver: 0 passed, 1 failed"
  exit 1
}

# ---------------------------------------------------------------- 1. the server's jar
src_sum="$(cd "$SRC" && find . -type f -not -path './.git/*' -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)"
JAR="$WORK/cycles-server-$src_sum.jar"
if [ ! -f "$JAR" ]; then
  echo "==> realserver: building the server (copy of $SRC, JDK $JAVA_HOME_RS)"
  rm -rf "$WORK/src" "$WORK"/cycles-server-*.jar
  cp -r "$SRC" "$WORK/src"
  chmod -R u+w "$WORK/src"
  t=$SECONDS
  if ! (cd "$WORK/src/cycles-protocol-service" &&
    JAVA_HOME="$JAVA_HOME_RS" mvn -B -q --no-transfer-progress -Dstyle.color=never \
      -DskipTests -Dmaven.compiler.proc=full package >"$LOGS/mvn.log" 2>&1); then
    tail -40 "$LOGS/mvn.log" >&2
    fail_early "the server's build failed (log: $LOGS/mvn.log)"
  fi
  built="$(ls "$WORK"/src/cycles-protocol-service/cycles-protocol-service-api/target/cycles-protocol-service-api-*.jar | grep -v original | head -1)"
  cp "$built" "$JAR"
  echo "==> realserver: server built in $((SECONDS - t)) s"
else
  echo "==> realserver: server jar up to date ($JAR)"
fi

# ---------------------------------------------------------------- 2. the runners
t=$SECONDS
bash "$ROOT/scripts/realserver/build-runners.sh" "$WORK" >"$LOGS/build-runners.log" 2>&1 ||
  { tail -40 "$LOGS/build-runners.log" >&2; fail_early "building the runners failed (log: $LOGS/build-runners.log)"; }
echo "==> realserver: runners built in $((SECONDS - t)) s"

# ---------------------------------------------------------------- 3. redis + server
command -v redis-server >/dev/null || fail_early "no redis-server (scripts/setup/realserver.sh installs it)"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
REDIS_PORT="$(free_port)"
SERVER_PORT="$(free_port)"
while [ "$SERVER_PORT" = "$REDIS_PORT" ]; do SERVER_PORT="$(free_port)"; done
REDIS_PID=""
SERVER_PID=""
cleanup() {
  [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null
  [ -n "$REDIS_PID" ] && kill -CONT "$REDIS_PID" 2>/dev/null
  [ -n "$REDIS_PID" ] && kill "$REDIS_PID" 2>/dev/null && wait "$REDIS_PID" 2>/dev/null
  SERVER_PID=""
  REDIS_PID=""
}
trap cleanup EXIT
trap 'cleanup; exit 130' INT TERM

redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no \
  --dir "$WORK" --logfile "$LOGS/redis.log" &
REDIS_PID=$!
export LEASEBEAT_REDIS_PORT="$REDIS_PORT" LEASEBEAT_REDIS_PID="$REDIS_PID"
for _ in $(seq 1 50); do
  redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break
  sleep 0.1
done
redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 || fail_early "redis-server did not start"

# Seeding, as BaseIntegrationTest#seedTestData: apikey:lookup:<14-char prefix> -> key id,
# apikey:<key id> -> the ApiKey JSON with a bcrypt hash of the secret, and a tenant budget.
API_KEY="cyc_leasebeat_realserver_key"
API_KEY_HASH=""
TENANT=demo
JBCRYPT="$(find ~/.m2/repository/org/mindrot/jbcrypt -name 'jbcrypt-*.jar' | head -1)"
"$JAVA_HOME_RS/bin/java" -cp "$JBCRYPT" \
  "$ROOT/scripts/realserver/BcryptHash.java" "$API_KEY" >"$WORK/hash" 2>"$LOGS/hash.log" &&
  API_KEY_HASH="$(cat "$WORK/hash")"
case "$API_KEY_HASH" in \$2a\$*) ;; *) fail_early "no \$2a\$ hash of the API key" ;; esac
prefix="${API_KEY:0:14}"
now_iso="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
rc() { redis-cli -p "$REDIS_PORT" "$@" >/dev/null; }
rc FLUSHALL
rc SET "apikey:lookup:$prefix" key-leasebeat
rc SET apikey:key-leasebeat "{\"key_id\":\"key-leasebeat\",\"tenant_id\":\"$TENANT\",\"key_prefix\":\"$prefix\",\"key_hash\":\"$API_KEY_HASH\",\"name\":\"leasebeat realserver stage\",\"status\":\"ACTIVE\",\"permissions\":[],\"created_at\":\"$now_iso\"}"
for unit in TOKENS USD_MICROCENTS; do # the SDKs' live tests reserve USD_MICROCENTS
  rc HSET "budget:tenant:$TENANT:$unit" scope "tenant:$TENANT" unit "$unit" allocated 1000000000000 \
    remaining 1000000000000 reserved 0 spent 0 debt 0 overdraft_limit 0 is_over_limit false
done

"$JAVA_HOME_RS/bin/java" -Xms256m -Xmx768m -jar "$JAR" \
  --server.port="$SERVER_PORT" --server.address=127.0.0.1 \
  --redis.host=127.0.0.1 --redis.port="$REDIS_PORT" --redis.password= \
  --cycles.expiry.interval-ms=1000 --logging.level.root=WARN \
  >"$LOGS/server.log" 2>&1 &
SERVER_PID=$!
URL="http://127.0.0.1:$SERVER_PORT"
t=$SECONDS
up=0
for _ in $(seq 1 240); do
  kill -0 "$SERVER_PID" 2>/dev/null || break
  if curl -fsS -o /dev/null "$URL/actuator/health/readiness" 2>/dev/null; then up=1; break; fi
  sleep 0.5
done
[ "$up" = 1 ] || { tail -30 "$LOGS/server.log" >&2; fail_early "the server did not become ready (log: $LOGS/server.log)"; }
echo "==> realserver: server ready at $URL in $((SECONDS - t)) s (redis 127.0.0.1:$REDIS_PORT)"

# ---------------------------------------------------------------- 4. scenarios + checks
if [ -n "${LEASEBEAT_REALSERVER_BENCH:-}" ]; then
  # A measurement instead of the stage (scripts/realserver/bench.py):
  # LEASEBEAT_REALSERVER_BENCH="LEASES TTL_MS BUDGET_MS SECONDS[,LEASES TTL_MS BUDGET_MS SECONDS...]"
  python3 "$ROOT/scripts/realserver/bench.py" "$URL" "$REDIS_PORT" "$LEASEBEAT_REALSERVER_BENCH" \
    "${CARGO_TARGET_DIR:-$ROOT/target}/release/leasebeat" "$LOGS" "$JAVA_HOME_RS/bin/java" "$JBCRYPT"
  status=$?
  cleanup
  exit "$status"
fi
python3 "$ROOT/scripts/realserver/stage.py" --url "$URL" --api-key "$API_KEY" --tenant "$TENANT" \
  --redis-port "$REDIS_PORT" --redis-pid "$REDIS_PID" --work "$WORK" --logs "$LOGS" \
  ${LEASEBEAT_REALSERVER_ONLY:+--only "$LEASEBEAT_REALSERVER_ONLY"}
status=$?
cleanup
echo "==> realserver: stage took $((SECONDS - T0)) s"
tail -1 "$LOGS/closing" 2>/dev/null || echo "realserver: 0 passed, 1 failed"
exit "$status"
