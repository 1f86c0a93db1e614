"""`leasebeat bench-driver --url` against the real Cycles server, lapses judged from Redis.

Run by `LEASEBEAT_REALSERVER_BENCH="LEASES TTL_MS BUDGET_MS SECONDS[,...]"
scripts/test-realserver.sh` (a measurement, not part of the stage's checks), which builds,
starts and seeds the server, then calls this instead of stage.py.

bench-driver authenticates as `bench-key` for tenant `bench`: both are seeded here (a $2a$
hash, as for the stage's key). Its own lapse counts need the server's LAPSE lines, which the
real server does not print: a poller reads Redis every 100 ms (reservation:ttl, the server's
expiry index, then each candidate's state and expires_at) and appends
`LAPSE reservation_id=.. expires_at_ms=..` for every ACTIVE reservation whose expires_at has
passed, to the file given as --lapse-file; the driver reads it at the end of its run and counts
a lapse `unreported` when it saw no stop or jeopardy for that reservation at or before its
expiry. After the run, the totals come from Redis too: reservations by state and the sum of
their extension_count (extensions the server applied).
"""

import os
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stage import Redis, warm_up  # noqa: E402


def seed(redis, java, jbcrypt, here):
    h = subprocess.run([java, "-cp", jbcrypt, os.path.join(here, "BcryptHash.java"), "bench-key"],
                       capture_output=True, text=True, check=True).stdout.strip()
    redis.cmd("SET", "apikey:lookup:bench-key", "key-bench")
    redis.cmd("SET", "apikey:key-bench",
              '{"key_id":"key-bench","tenant_id":"bench","key_prefix":"bench-key","key_hash":"%s",'
              '"name":"bench","status":"ACTIVE","permissions":[],"created_at":"2026-01-01T00:00:00Z"}' % h)
    redis.cmd("HSET", "budget:tenant:bench:TOKENS", "scope", "tenant:bench", "unit", "TOKENS",
              "allocated", 10**15, "remaining", 10**15, "reserved", 0, "spent", 0, "debt", 0,
              "overdraft_limit", 0, "is_over_limit", "false")


def poll_lapses(port, path, stop):
    r = Redis(port)
    seen = set()
    with open(path, "a") as f:
        # bench-driver counts lapses only from a file that says it is a lapse log.
        f.write("# lapse log: ACTIVE reservations of tenant bench past expires_at, read from Redis\n")
        f.flush()
        while not stop.is_set():
            now = r.now_ms()
            ids = r.cmd("ZRANGEBYSCORE", "reservation:ttl", "-inf", now - 1) or []
            for rid in ids:
                if rid in seen:
                    continue
                h = r.cmd("HMGET", "reservation:res_" + rid, "state", "expires_at", "tenant")
                if h[0] == "ACTIVE" and h[2] == "bench" and h[1] and int(h[1]) < now:
                    seen.add(rid)
                    f.write("LAPSE reservation_id=%s expires_at_ms=%s\n" % (rid, h[1]))
                    f.flush()
            time.sleep(0.1)


def scan_bench(r, since_ms):
    states, ext, n = {}, 0, 0
    cursor = "0"
    while True:
        cursor, keys = r.cmd("SCAN", cursor, "MATCH", "reservation:res_*", "COUNT", 1000)
        for k in keys:
            h = r.cmd("HMGET", k, "state", "tenant", "extension_count", "created_at")
            if h[1] != "bench" or not h[3] or int(h[3]) < since_ms:
                continue
            n += 1
            states[h[0]] = states.get(h[0], 0) + 1
            ext += int(h[2] or 0)
        if cursor == "0":
            break
    return n, states, ext


def main():
    url, port, runs, leasebeat, logs = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
    java, jbcrypt = sys.argv[6], sys.argv[7]
    here = os.path.dirname(os.path.abspath(__file__))
    r = Redis(port)
    seed(r, java, jbcrypt, here)

    class A:  # what stage.warm_up needs
        pass
    a = A()
    a.url, a.api_key, a.tenant = url, "bench-key", "bench"
    warm_up(a, rounds=300)
    for i, spec in enumerate(filter(None, runs.split(","))):
        leases, ttl, budget, seconds = spec.split()
        lapse_file = os.path.join(logs, "bench-%d-lapses.txt" % i)
        open(lapse_file, "w").close()
        stop = threading.Event()
        poller = threading.Thread(target=poll_lapses, args=(port, lapse_file, stop), daemon=True)
        poller.start()
        since = r.now_ms()
        print("== bench %d: leases=%s ttl_ms=%s budget_ms=%s seconds=%s" % (i, leases, ttl, budget, seconds),
              flush=True)
        t0 = time.time()
        out = subprocess.run([leasebeat, "bench-driver", "--url", url, "--leases", leases, "--ttl-ms", ttl,
                              "--budget-ms", budget, "--seconds", seconds, "--lapse-file", lapse_file],
                             capture_output=True, text=True)
        run_s = time.time() - t0
        stop.set()
        poller.join()
        print(out.stdout.strip(), flush=True)
        with open(os.path.join(logs, "bench-%d.err" % i), "w") as f:
            f.write(out.stderr)
        if out.stderr.strip():
            print("   (driver stderr: %d lines, e.g. %s)" % (len(out.stderr.splitlines()),
                                                        out.stderr.splitlines()[0][:200]), flush=True)
        n, states, ext = scan_bench(r, since)
        lapses = sum(1 for _ in open(lapse_file))
        print("redis: reservations=%d states=%s extensions_applied=%d extensions_per_s=%.0f "
              "(over the %.1f s run) lapses_seen_by_poller=%d"
              % (n, states, ext, ext / max(run_s, 1e-9), run_s, lapses), flush=True)
        time.sleep(2)


if __name__ == "__main__":
    main()
