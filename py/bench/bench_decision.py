"""Benchmark: raw 200 extend body -> decision, leasebeat vs runcycles 0.5.3.

Not a test. Run by scripts/bench-python.sh (which installs the leasebeat wheel
and runcycles==0.5.3 in its own venv). Prints a human table, then one
``BENCH {...}`` line per figure (unit ns, medians over repeats).

Timed regions (see notes/hotpy.md):
- py.decision: ``hb.handle_response(id, now_ns, 200, None, body)`` then
  ``hb.poll_action()`` on a heartbeat whose create succeeded and whose first
  extend is in flight (rebuilt outside the timed region), default UUIDv4 keys.
- py.runcycles: what runcycles 0.5.3 does with the same 200 body in its
  heartbeat loop: ``json.loads`` (httpx's ``Response.json()``), the
  ``CyclesResponse.success`` wrapper, ``_schema_valid_extend`` (key set, null
  scan, integer checks, pydantic strict model), ``observe_rtt`` and
  ``_AuthoritativeScheduler.on_valid_success``.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from typing import Callable

import leasebeat
from leasebeat import _leasebeat as native

MS = 1_000_000
CREATE = (
    b'{"decision":"ALLOW","reservation_id":"r-1","affected_scopes":["tenant:acme"],'
    b'"expires_at_ms":1785585660000,"remaining_ttl_ms":61500}'
)
EXTEND = b'{"status":"ACTIVE","expires_at_ms":1785585720000,"remaining_ttl_ms":60000}'


def in_flight(key_prefix: str | None) -> tuple[leasebeat.Heartbeat, int]:
    """The core bench fixture: create ok at 1.5 s, first extend sent at 38.5 s."""
    hb = leasebeat.Heartbeat(60_000, 10_000, key_prefix=key_prefix)
    a = hb.poll_action()
    assert a.attempt_id is not None
    hb.handle_sent(a.attempt_id, 0)
    d = hb.handle_response(a.attempt_id, 1_500 * MS, 200, None, CREATE)
    assert d.next == leasebeat.Next.EXTEND, d
    a = hb.poll_action()
    assert a.attempt_id is not None
    hb.handle_sent(a.attempt_id, 38_500 * MS)
    return hb, a.attempt_id


def batched(make: Callable[[], object], op: Callable[[object], object], batch: int, repeats: int) -> list[float]:
    """ns per op: each repeat builds `batch` fresh states (untimed), then times op over them."""
    out = []
    for _ in range(repeats):
        states = [make() for _ in range(batch)]
        gc.disable()
        t0 = time.perf_counter_ns()
        for s in states:
            op(s)
        t1 = time.perf_counter_ns()
        gc.enable()
        out.append((t1 - t0) / batch)
    return out


def leasebeat_decision(key_prefix: str | None, batch: int, repeats: int) -> list[float]:
    now = 38_600 * MS
    body = EXTEND
    out = []
    for _ in range(repeats):
        states = [in_flight(key_prefix) for _ in range(batch)]
        gc.disable()
        t0 = time.perf_counter_ns()
        for hb, aid in states:
            hb.handle_response(aid, now, 200, None, body)
            hb.poll_action()
        t1 = time.perf_counter_ns()
        gc.enable()
        out.append((t1 - t0) / batch)
        for hb, _ in states:  # the decision is the fixture's (outside the timed region)
            assert hb.poll_action().is_send
    return out


def leasebeat_decision_read(key_prefix: str | None, batch: int, repeats: int) -> list[float]:
    """As leasebeat_decision, plus what a loop reads: decision.next/at_ns, action.attempt_id."""
    now = 38_600 * MS
    body = EXTEND
    out = []
    for _ in range(repeats):
        states = [in_flight(key_prefix) for _ in range(batch)]
        gc.disable()
        t0 = time.perf_counter_ns()
        for hb, aid in states:
            d = hb.handle_response(aid, now, 200, None, body)
            d.is_stop
            d.at_ns
            a = hb.poll_action()
            a.attempt_id
        t1 = time.perf_counter_ns()
        gc.enable()
        out.append((t1 - t0) / batch)
    return out


def leasebeat_steady(key_prefix: str | None, beats: int, repeats: int) -> list[float]:
    """A full beat per op (poll_action, handle_sent, handle_response, poll_action), one lease."""
    hb, aid = in_flight(key_prefix)
    now = 38_600 * MS
    hb.handle_response(aid, now, 200, None, EXTEND)
    body = EXTEND
    out = []
    for _ in range(repeats):
        gc.disable()
        t0 = time.perf_counter_ns()
        for _ in range(beats):
            a = hb.poll_action()
            aid = a.attempt_id
            now = a.due_ns
            hb.handle_sent(aid, now)
            now += 100 * MS
            hb.handle_response(aid, now, 200, None, body)
        t1 = time.perf_counter_ns()
        gc.enable()
        out.append((t1 - t0) / beats)
    assert hb.poll_action().is_send
    return out


def core_only(uuid: bool, batch: int, repeats: int) -> list[float]:
    return [native._bench_core_decision(batch, uuid) for _ in range(repeats)]


def runcycles_decision(batch: int, repeats: int, build_next_body: bool) -> list[float]:
    from runcycles import lifecycle
    from runcycles.response import CyclesResponse

    sched_cls = lifecycle._AuthoritativeScheduler
    schema_valid_extend = lifecycle._schema_valid_extend
    build_extend_body = lifecycle._build_extend_body
    loads = json.loads
    success = CyclesResponse.success
    # the fixture: create at rtt 1500 ms received at 1500 ms, extend sent at 38500, received 38600
    sent_ms, recv_ms = 38_500.0, 38_600.0
    body = EXTEND

    def make() -> object:
        s = sched_cls(10_000.0)
        s.observe_rtt(1_500.0)
        s.on_valid_success(61_500, 1_500.0, 1_500.0)
        return s

    out = []
    for _ in range(repeats):
        states = [make() for _ in range(batch)]
        gc.disable()
        t0 = time.perf_counter_ns()
        for sched in states:
            response = success(200, loads(body) or {}, headers={})
            parsed = schema_valid_extend(response)
            rtt_ms = recv_ms - sent_ms
            sched.observe_rtt(rtt_ms)
            nxt = sched.on_valid_success(parsed.remaining_ttl_ms, rtt_ms, recv_ms)
            if build_next_body:
                build_extend_body(60_000)
        t1 = time.perf_counter_ns()
        gc.enable()
        out.append((t1 - t0) / batch)
        assert nxt is not None and nxt > 0, nxt
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=2000)
    p.add_argument("--repeats", type=int, default=25)
    p.add_argument("--only", default="")
    args = p.parse_args()
    b, r = args.batch, args.repeats

    rows: list[tuple[str, str, float]] = []

    def run(id_: str, what: str, f: Callable[[], list[float]]) -> float:
        if args.only and args.only not in id_:
            return float("nan")
        f()  # warm-up
        med = statistics.median(f())
        rows.append((id_, what, med))
        return med

    dec = run("py.decision", "leasebeat (Python) raw 200 extend body -> decision: handle_response + poll_action, UUIDv4 keys",
              lambda: leasebeat_decision(None, b, r))
    seq = run("py.decision_seq", "leasebeat (Python) same, sequential keys (key_prefix)",
              lambda: leasebeat_decision("k", b, r))
    run("py.decision_read", "leasebeat (Python) same + read d.is_stop, d.at_ns, a.attempt_id, UUIDv4",
        lambda: leasebeat_decision_read(None, b, r))
    core = run("py.core", "core alone in the same process (Rust loop, no Python), UUIDv4 keys",
               lambda: core_only(True, b, r))
    core_seq = run("py.core_seq", "core alone in the same process, sequential keys",
                   lambda: core_only(False, b, r))
    run("py.beat", "leasebeat (Python) full beat: poll_action, handle_sent, handle_response, poll_action, UUIDv4",
        lambda: leasebeat_steady(None, b, r))
    rc = run("py.runcycles", "runcycles 0.5.3: json.loads + CyclesResponse + _schema_valid_extend + _AuthoritativeScheduler",
             lambda: runcycles_decision(b, r, False))
    run("py.runcycles_nextbody", "runcycles 0.5.3: same + _build_extend_body (the next key, uuid4)",
        lambda: runcycles_decision(b, r, True))

    print(f"python {sys.version.split()[0]}, batch {b}, repeats {r} (median ns per op)")
    w = max(len(x[0]) for x in rows)
    for id_, what, v in rows:
        print(f"  {id_:<{w}}  {v:9.0f} ns  {what}")
    if dec == dec and core == core:
        print(f"  binding overhead above the core (UUID): {dec - core:.0f} ns; sequential keys: {seq - core_seq:.0f} ns")
    if dec == dec and rc == rc:
        print(f"  runcycles / leasebeat: {rc / dec:.1f}x (target >= 10x)")
    for id_, what, v in rows:
        if id_ in ("py.decision", "py.runcycles"):
            print("BENCH " + json.dumps({"id": id_, "what": what, "value": round(v, 1), "unit": "ns"}))


if __name__ == "__main__":
    main()
