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
# This thread's CPU time by default (--clock cpu): on a shared, loaded machine
# the time this process waits for a core is not the code's cost.
CLOCK: Callable[[], int] = time.thread_time_ns
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


def leasebeat_decision(key_prefix: str | None, batch: int, repeats: int) -> list[float]:
    now = 38_600 * MS
    body = EXTEND
    out = []
    for _ in range(repeats):
        states = [in_flight(key_prefix) for _ in range(batch)]
        gc.disable()
        t0 = CLOCK()
        for hb, aid in states:
            hb.handle_response(aid, now, 200, None, body)
            hb.poll_action()
        t1 = CLOCK()
        gc.enable()
        out.append((t1 - t0) / batch)
        for hb, _ in states:  # the decision is the fixture's (outside the timed region)
            assert hb.poll_action().is_send
    return out


def leasebeat_decision_read(key_prefix: str | None, batch: int, repeats: int) -> list[float]:
    """As leasebeat_decision, plus what a loop reads: d.next, d.at_ns, a.attempt_id."""
    now = 38_600 * MS
    body = EXTEND
    out = []
    for _ in range(repeats):
        states = [in_flight(key_prefix) for _ in range(batch)]
        gc.disable()
        t0 = CLOCK()
        for hb, aid in states:
            d = hb.handle_response(aid, now, 200, None, body)
            d.next
            d.at_ns
            a = hb.poll_action()
            a.attempt_id
        t1 = CLOCK()
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
        t0 = CLOCK()
        for _ in range(beats):
            a = hb.poll_action()
            aid = a.attempt_id
            now = a.due_ns  # after now: next_delay > 0
            hb.handle_sent(aid, now)
            now += 100 * MS
            hb.handle_response(aid, now, 200, None, body)
        t1 = CLOCK()
        gc.enable()
        out.append((t1 - t0) / beats)
    assert hb.poll_action().is_send
    return out


def core_only(uuid: bool, batch: int, repeats: int) -> list[float]:
    return [native._bench_core_decision(batch, uuid, CLOCK) for _ in range(repeats)]


def core_on_python_states(key_prefix: str | None, batch: int, repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        states = [in_flight(key_prefix) for _ in range(batch)]
        gc.disable()
        out.append(native._bench_core_on(states, CLOCK))
        gc.enable()
    return out


def core_beat(uuid: bool, beats: int, repeats: int) -> list[float]:
    return [native._bench_core_beat(beats, uuid, CLOCK) for _ in range(repeats)]


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
        t0 = CLOCK()
        for sched in states:
            response = success(200, loads(body) or {}, headers={})
            parsed = schema_valid_extend(response)
            rtt_ms = recv_ms - sent_ms
            sched.observe_rtt(rtt_ms)
            nxt = sched.on_valid_success(parsed.remaining_ttl_ms, rtt_ms, recv_ms)
            if build_next_body:
                build_extend_body(60_000)
        t1 = CLOCK()
        gc.enable()
        out.append((t1 - t0) / batch)
        assert nxt is not None and nxt > 0, nxt
    return out


CASES: list[tuple[str, str, Callable[[int, int], list[float]]]] = [
    ("py.decision", "leasebeat raw 200 extend body -> decision (handle_response + poll_action), UUIDv4 keys",
     lambda b, r: leasebeat_decision(None, b, r)),
    ("py.core", "  the core alone, same process (Rust loop), UUIDv4 keys",
     lambda b, r: core_only(True, b, r)),
    ("py.core_same", "  the core alone on the same Python-built states (Rust loop under each lock), UUIDv4",
     lambda b, r: core_on_python_states(None, b, r)),
    ("py.decision_seq", "leasebeat the same, sequential keys (key_prefix)",
     lambda b, r: leasebeat_decision("k", b, r)),
    ("py.core_seq", "  the core alone, same process, sequential keys",
     lambda b, r: core_only(False, b, r)),
    ("py.core_same_seq", "  the core alone on the same Python-built states, sequential keys",
     lambda b, r: core_on_python_states("k", b, r)),
    ("py.decision_read", "leasebeat the same + d.next, d.at_ns, a.attempt_id, UUIDv4",
     lambda b, r: leasebeat_decision_read(None, b, r)),
    ("py.beat", "leasebeat full beat (poll_action, handle_sent, handle_response, poll_action), one lease, UUIDv4",
     lambda b, r: leasebeat_steady(None, b, r)),
    ("py.core_beat", "  the core alone, the same beat loop, UUIDv4",
     lambda b, r: core_beat(True, b, r)),
    ("py.runcycles", "runcycles 0.5.3: json.loads + CyclesResponse + _schema_valid_extend + _AuthoritativeScheduler",
     lambda b, r: runcycles_decision(b, r, False)),
    ("py.runcycles_nextbody", "runcycles 0.5.3 the same + _build_extend_body (next key, uuid4)",
     lambda b, r: runcycles_decision(b, r, True)),
]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=1000, help="fresh states (or beats) per timed sample")
    p.add_argument("--rounds", type=int, default=31, help="samples per case, interleaved round by round")
    p.add_argument("--only", default="", help="run only the cases whose id contains this")
    p.add_argument("--clock", choices=["cpu", "wall"], default="cpu",
                   help="cpu: time.thread_time_ns (default); wall: time.perf_counter_ns")
    args = p.parse_args()
    global CLOCK
    CLOCK = time.thread_time_ns if args.clock == "cpu" else time.perf_counter_ns
    cases = [c for c in CASES if args.only in c[0]]
    # Rounds interleave every case (one sample each) so that the load of this
    # shared machine hits them alike; ratios are taken within each round.
    for _, _, f in cases:
        f(args.batch, 2)  # warm-up
    samples: dict[str, list[float]] = {c[0]: [] for c in cases}
    for _ in range(args.rounds):
        for id_, _, f in cases:
            samples[id_] += f(args.batch, 1)
    med = {k: statistics.median(v) for k, v in samples.items()}

    def ratio(a: str, b: str) -> float:
        return statistics.median(x / y for x, y in zip(samples[a], samples[b]))

    print(f"python {sys.version.split()[0]}, {args.rounds} interleaved rounds of {args.batch} ops, "
          f"{args.clock} clock; median ns per op")
    w = max(len(c[0]) for c in cases)
    for id_, what, _ in cases:
        lo, hi = min(samples[id_]), max(samples[id_])
        print(f"  {id_:<{w}}  {med[id_]:7.0f} ns  (min {lo:6.0f})  {what}")
    have = set(med)
    if {"py.decision", "py.core"} <= have:
        print(f"  binding overhead above the core, UUIDv4: {med['py.decision'] - med['py.core']:.0f} ns")
    if {"py.decision", "py.core_same"} <= have:
        print(f"  binding overhead above the core on the same states, UUIDv4: {med['py.decision'] - med['py.core_same']:.0f} ns")
    if {"py.decision_seq", "py.core_same_seq"} <= have:
        print(f"  binding overhead above the core on the same states, sequential: "
              f"{med['py.decision_seq'] - med['py.core_same_seq']:.0f} ns")
    if {"py.decision_seq", "py.core_seq"} <= have:
        print(f"  binding overhead above the core, sequential: {med['py.decision_seq'] - med['py.core_seq']:.0f} ns")
    if {"py.beat", "py.core_beat"} <= have:
        print(f"  binding overhead per full beat (4 calls): {med['py.beat'] - med['py.core_beat']:.0f} ns")
    if {"py.decision", "py.runcycles"} <= have:
        print(f"  runcycles / leasebeat: {ratio('py.runcycles', 'py.decision'):.1f}x (median of per-round ratios; target >= 10x)")
    if {"py.decision_seq", "py.runcycles"} <= have:
        print(f"  runcycles / leasebeat (sequential keys): {ratio('py.runcycles', 'py.decision_seq'):.1f}x")
    for id_, what, _ in cases:
        if id_ in ("py.decision", "py.runcycles"):
            print("BENCH " + json.dumps({"id": id_, "what": what.strip(), "value": round(med[id_], 1), "unit": "ns"}))


if __name__ == "__main__":
    main()
