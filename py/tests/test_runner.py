"""The runners (issue 11) against `leasebeat serve`: thread runner
(``leasebeat.run``) and asyncio runner (``leasebeat.aio.run``) with the
bundled transports. Each test reads the server's log: the keys used, and zero
unreported lapses (a lapse with no stop and no jeopardy reported before it).
Waits are bounded (generous) safety nets; nothing asserts on wall time.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

import pytest

import leasebeat
from leasebeat import Decision, Heartbeat, Next, OutcomeClass, StopReason
from leasebeat.transports import AsyncHttpxTransport, AsyncUrllibTransport, HttpxTransport, UrllibTransport

from conftest import CREATE_REQUEST

TTL, TIMEOUT = 4000, 1000  # a beat about every second under --max-lead-ms 4000
LIMIT_S = 60.0  # safety net only


class Collector(leasebeat.Listener):
    def __init__(self) -> None:
        self.lock = threading.Condition()
        self.decisions: list[Decision] = []
        self.jeopardy: list[leasebeat.Jeopardy] = []
        self.stops: list[Decision] = []
        self.finalized: list[tuple[str, Any, Any]] = []
        self.create_keys: set[str] = set()

    def keyed(self, transport: Any) -> Any:
        """Wraps a transport to record this lease's create keys."""

        def t(request: leasebeat.Request, deadline_ns: int | None) -> Any:
            if request.endpoint == "create":
                self.create_keys.add(request.key)
            return transport(request, deadline_ns)

        return t

    def on_decision(self, decision: Decision) -> None:
        with self.lock:
            self.decisions.append(decision)
            self.lock.notify_all()

    def on_jeopardy(self, event: leasebeat.Jeopardy) -> None:
        with self.lock:
            self.jeopardy.append(event)

    def on_stop(self, decision: Decision) -> None:
        with self.lock:
            self.stops.append(decision)
            self.lock.notify_all()  # wait_for(stops) must wake here, not only on a decision

    def on_finalize(self, endpoint: str, response: Any, error: Any) -> None:
        with self.lock:
            self.finalized.append((endpoint, response, error))
            self.lock.notify_all()

    def successes(self, next_: Next = Next.EXTEND) -> int:
        return sum(1 for d in self.decisions if d.outcome is OutcomeClass.SUCCESS)

    def wait_for(self, pred: Any, limit: float = LIMIT_S) -> None:
        with self.lock:
            assert self.lock.wait_for(lambda: pred(self), limit), f"not reached: {self.decisions}"


def hb() -> Heartbeat:
    return Heartbeat(TTL, TIMEOUT, create_request=CREATE_REQUEST)


def no_unreported_lapse(server: Any, collectors: list[Collector]) -> None:
    """Every lapse in the server's log belongs to a lease that reported a stop
    or jeopardy. A create that timed out may exist on the server although the
    runner never learned its id (it reported a stop, create_failed): such a
    lease is found through its create's idempotency key."""
    reported_ids = {d.reservation_id for c in collectors for d in c.stops} | {
        j.reservation_id for c in collectors for j in c.jeopardy
    }
    reported_keys = {k for c in collectors if c.stops or c.jeopardy for k in c.create_keys}
    key_of = {}
    for e in server.requests("create"):
        try:
            key_of[json.loads(e.get("response") or "{}").get("reservation_id")] = e["header_key"]
        except ValueError:
            pass
    for lapse in server.lapses():
        rid = lapse["reservation_id"]
        assert rid in reported_ids or key_of.get(rid) in reported_keys, f"unreported lapse {lapse}"


def extend_keys(server: Any) -> list[str]:
    return [e["header_key"] for e in sorted(server.requests("extend"), key=lambda e: e["seq"])]


def run_until(server: Any, extra: int, *, transport: Any = None) -> tuple[leasebeat.Runner, Collector]:
    c = Collector()
    r = leasebeat.run(hb(), transport or UrllibTransport(server.url, server.api_key), listener=c, release_on_stop=True)
    c.wait_for(lambda c: c.successes() >= extra or bool(c.stops))
    return r, c


def finish(r: leasebeat.Runner) -> Decision:
    r.stop()
    r.stop()  # twice is fine
    d = r.join(LIMIT_S)
    assert d is not None and d.is_stop
    return d


def test_normal_lease_thread(serve: Any) -> None:
    server = serve("--max-lead-ms", str(TTL))
    r, c = run_until(server, 4)
    d = finish(r)
    assert d.reason is StopReason.CANCELLED and r.result is d and c.stops == [d]
    assert [e["header_key"] for e in server.requests("create")] == [c.decisions[0].reservation_id and server.requests("create")[0]["header_key"]]
    keys = extend_keys(server)
    assert len(keys) >= 3 and len(set(keys)) == len(keys), keys  # a new key per beat
    assert [f[0] for f in c.finalized] == ["release"] and c.finalized[0][1].status == 200
    assert all(x.outcome is OutcomeClass.SUCCESS for x in c.decisions[:-1])
    assert server.lapses() == [] and c.jeopardy == []


def test_normal_lease_httpx_thread(serve: Any) -> None:
    httpx = pytest.importorskip("httpx")
    server = serve("--max-lead-ms", str(TTL))
    with httpx.Client(trust_env=False) as client:
        r, c = run_until(server, 3, transport=HttpxTransport(client, server.url, server.api_key))
        finish(r)
    assert len(set(extend_keys(server))) == len(extend_keys(server)) >= 2
    assert server.lapses() == []


def test_lost_response_replays_the_same_key(serve: Any) -> None:
    server = serve("--max-lead-ms", str(TTL), "--fault", "extend:1=drop")
    r, c = run_until(server, 3)
    finish(r)
    keys = extend_keys(server)
    assert keys[0] == keys[1] and keys[2] != keys[1], keys  # same-key replay, then a new key
    assert any(d.outcome is OutcomeClass.TRANSPORT_FAILURE for d in c.decisions)
    no_unreported_lapse(server, [c])


def test_5xx_burst(serve: Any) -> None:
    server = serve("--max-lead-ms", str(TTL), "--fault", "extend:1-2=503")
    r, c = run_until(server, 2)
    finish(r)
    keys = extend_keys(server)
    assert keys[0] == keys[1] == keys[2], keys
    assert [d.outcome for d in c.decisions[1:3]] == [OutcomeClass.SERVER_ERROR] * 2
    no_unreported_lapse(server, [c])


def test_429_inside_the_window(serve: Any) -> None:
    server = serve("--max-lead-ms", str(TTL), "--fault", "extend:1=retry-after=0")
    r, c = run_until(server, 3)
    finish(r)
    keys = extend_keys(server)
    assert keys[0] == keys[1] != keys[2], keys
    assert c.decisions[1].outcome is OutcomeClass.THROTTLED and c.decisions[1].key_use is leasebeat.KeyUse.SAME
    no_unreported_lapse(server, [c])


def test_slow_response_past_the_budget(serve: Any) -> None:
    server = serve("--max-lead-ms", str(TTL), "--fault", "extend:1=delay=3000")
    c = Collector()
    r = leasebeat.run(hb(), UrllibTransport(server.url, server.api_key), listener=c, release_on_stop=True)
    c.wait_for(lambda c: len(c.decisions) >= 3 or bool(c.stops))
    finish(r)
    slow = c.decisions[1]
    assert slow.outcome is OutcomeClass.TRANSPORT_FAILURE, slow  # observed at the deadline, not at 3 s
    assert slow.key_use is leasebeat.KeyUse.SAME and c.decisions[2].outcome is OutcomeClass.SUCCESS
    # The same-key retry reached the server while the slow call was still held there.
    retry = [e for e in server.requests("extend") if e["call"] == 2]
    assert retry and retry[0]["status"] == 200
    no_unreported_lapse(server, [c])


def test_server_killed_mid_run(serve: Any) -> None:
    server = serve("--max-lead-ms", str(TTL))
    c = Collector()
    r = leasebeat.run(hb(), UrllibTransport(server.url, server.api_key), listener=c)
    c.wait_for(lambda c: c.successes() >= 2)
    server.kill()
    d = r.join(LIMIT_S)  # it stops by itself: never hangs, never lapses silently
    assert d is not None and d.is_stop and d.reason is not StopReason.CANCELLED, d
    after = c.decisions[2:]
    assert after and all(x.outcome is OutcomeClass.TRANSPORT_FAILURE for x in after)
    assert c.stops == [d]


def test_stop_while_an_attempt_is_in_flight(serve: Any) -> None:
    server = serve("--max-lead-ms", "20000", "--fault", "extend:1=hold=8000")
    inflight = threading.Event()
    base = UrllibTransport(server.url, server.api_key)

    def transport(request: leasebeat.Request, deadline_ns: int | None) -> leasebeat.HttpResponse:
        if request.endpoint == "extend":
            inflight.set()
        return base(request, deadline_ns)

    c = Collector()
    r = leasebeat.run(Heartbeat(20000, 10000, create_request=CREATE_REQUEST), transport, listener=c, release_on_stop=True)
    assert inflight.wait(LIMIT_S)
    stoppers = [threading.Thread(target=r.stop) for _ in range(3)]
    for t in stoppers:
        t.start()
    d = r.join(7.0)  # well before the held response (8 s) could arrive
    assert d is not None and d.reason is StopReason.CANCELLED
    n = len(c.decisions)
    assert c.decisions[-1] == d and r.heartbeat.last_decision == d
    time.sleep(0)  # the late outcome, when it comes, changes nothing
    assert len(c.decisions) == n
    no_unreported_lapse(server, [c])


def test_normal_lease_asyncio(serve: Any) -> None:
    server = serve("--max-lead-ms", str(TTL))
    c = Collector()

    async def main() -> Decision:
        task = asyncio.ensure_future(
            leasebeat.aio.run(hb(), AsyncUrllibTransport(server.url, server.api_key), listener=c, release_on_stop=True)
        )
        while c.successes() < 3 and not task.done():
            await asyncio.sleep(0.05)
        task.cancel()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return c.stops[-1]

    d = asyncio.run(main())
    assert d.reason is StopReason.CANCELLED
    assert [f[0] for f in c.finalized] == ["release"]
    assert len(set(extend_keys(server))) == len(extend_keys(server)) >= 2
    assert server.lapses() == []


N = 1000
MANY_TTL, MANY_TIMEOUT = 24000, 6000  # room for 1,000 creates at once on 2 cores


def test_1000_leases_threads(serve: Any) -> None:
    server = serve("--max-lead-ms", str(MANY_TTL))
    collectors = [Collector() for _ in range(N)]
    runners = [
        leasebeat.run(
            Heartbeat(MANY_TTL, MANY_TIMEOUT, create_request=CREATE_REQUEST),
            c.keyed(UrllibTransport(server.url, server.api_key)),
            listener=c,
            release_on_stop=True,
        )
        for c in collectors
    ]
    for c in collectors:
        c.wait_for(lambda c: c.successes() >= 2 or bool(c.stops), 120)
    for r in runners:
        r.stop()
    for r in runners:
        assert r.join(120) is not None
    # Under this load (1,000 creates at once on 2 cores) some creates may
    # time out twice and stop create_failed: every lease must either have
    # beaten or reported its stop, and no lease may lapse unreported.
    assert server.requests("create")
    print("leases that beat:", sum(1 for c in collectors if c.successes() >= 2), "of", N)
    assert all(c.successes() >= 2 or c.stops for c in collectors)
    assert all(c.stops for c in collectors)  # every runner reported its end
    no_unreported_lapse(server, collectors)


def test_1000_leases_asyncio(serve: Any) -> None:
    server = serve("--max-lead-ms", str(MANY_TTL))
    collectors = [Collector() for _ in range(N)]

    async def main() -> None:
        t = AsyncUrllibTransport(server.url, server.api_key)
        tasks = [
            asyncio.ensure_future(
                leasebeat.aio.run(
                    Heartbeat(MANY_TTL, MANY_TIMEOUT, create_request=CREATE_REQUEST), c.keyed(t), listener=c,
                    release_on_stop=True,
                )
            )
            for c in collectors
        ]
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not all(c.successes() >= 2 or c.stops for c in collectors):
            await asyncio.sleep(0.1)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    asyncio.run(main())
    # Under this load (1,000 creates at once on 2 cores) some creates may
    # time out twice and stop create_failed: every lease must either have
    # beaten or reported its stop, and no lease may lapse unreported.
    assert server.requests("create")
    print("leases that beat:", sum(1 for c in collectors if c.successes() >= 2), "of", N)
    assert all(c.successes() >= 2 or c.stops for c in collectors)
    assert all(c.stops for c in collectors)  # every runner reported its end
    no_unreported_lapse(server, collectors)


def test_normal_lease_asyncio_httpx(serve: Any) -> None:
    httpx = pytest.importorskip("httpx")
    server = serve("--max-lead-ms", str(TTL))
    c = Collector()

    async def main() -> None:
        async with httpx.AsyncClient(trust_env=False) as client:
            t = AsyncHttpxTransport(client, server.url, server.api_key)
            task = asyncio.ensure_future(leasebeat.aio.run(hb(), t, listener=c, release_on_stop=True))
            while c.successes() < 3 and not task.done():
                await asyncio.sleep(0.05)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    asyncio.run(main())
    assert c.stops and c.stops[-1].reason is StopReason.CANCELLED
    assert [f[0] for f in c.finalized] == ["release"]
    assert server.lapses() == []


def test_runner_takes_over_an_adopted_create(serve: Any) -> None:
    server = serve("--max-lead-ms", str(TTL))
    sent_ns = time.monotonic_ns()
    key, request_body, status, headers, body = server.create(TTL)
    hb, first = Heartbeat.adopt_create(
        TTL, TIMEOUT, key=key, sent_ns=sent_ns, received_ns=time.monotonic_ns(),
        status=status, headers=headers, body=body, request_body=request_body,
    )
    c = Collector()
    r = leasebeat.run(hb, UrllibTransport(server.url, server.api_key), listener=c, first_decision=first)
    c.wait_for(lambda c: c.successes() >= 3 or bool(c.stops))
    r.stop(release=True)
    d = r.join(LIMIT_S)
    assert d is not None and d.reason is StopReason.CANCELLED and c.decisions[0] == first
    extends = server.requests("extend")
    # Every extension is one the core scheduled: no priming extension.
    assert len(extends) == sum(1 for x in c.decisions[1:] if x.outcome is OutcomeClass.SUCCESS)
    assert [e["header_key"] for e in server.requests("create")] == [key]
    assert server.lapses() == []


def test_transport_errors_are_typed() -> None:
    with pytest.raises(ValueError):
        leasebeat.TransportError("teapot")
    e = leasebeat.TransportError("connect", "refused")
    assert e.kind is leasebeat.TransportFailure.CONNECT and str(e) == "refused"
    req = leasebeat.Request("create", "/v1/reservations", "k", b"{}", None, None)
    with socket_closed_port() as port:
        with pytest.raises(leasebeat.TransportError) as err:
            UrllibTransport(f"http://127.0.0.1:{port}", "x")(req, time.monotonic_ns() + 2_000_000_000)
    assert err.value.kind is leasebeat.TransportFailure.CONNECT
    with pytest.raises(leasebeat.TransportError) as err:
        UrllibTransport("http://127.0.0.1:1", "x")(req, time.monotonic_ns() - 1)
    assert err.value.kind is leasebeat.TransportFailure.TIMEOUT


class socket_closed_port:
    """A 127.0.0.1 port with nothing listening."""

    def __enter__(self) -> int:
        import socket

        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        self.port: int = s.getsockname()[1]
        s.close()
        return self.port

    def __exit__(self, *exc: object) -> None:
        pass


def test_jeopardy_is_reported_before_a_lapse(serve: Any) -> None:
    """A listener that blocks the runner's thread past proven_until (as an
    overloaded process would): as soon as it runs again the runner reports
    lease_in_jeopardy, both for proven_until reached and for the late beat,
    before sending that beat; the lease's lapse is thus a reported one. (Here
    proven_until is about the true expiry, so the server sees the lapse while
    the listener still blocks: a blocking listener delays the report.)"""
    server = serve("--max-lead-ms", str(TTL))

    class Slow(Collector):
        def on_decision(self, decision: Decision) -> None:
            super().on_decision(decision)
            if decision.outcome is OutcomeClass.SUCCESS and len(self.decisions) == 2:
                time.sleep(TTL / 1000 + 0.5)  # the runner's thread is stuck here

    c = Slow()
    r = leasebeat.run(hb(), UrllibTransport(server.url, server.api_key), listener=c)
    c.wait_for(lambda c: bool(c.stops) or len(c.decisions) >= 4)
    finish(r)
    causes = [j.cause for j in c.jeopardy]
    assert "proven_until_reached" in causes and "late_beat" in causes, c.jeopardy
    assert all(j.event == "lease_in_jeopardy" and j.reservation_id == c.decisions[0].reservation_id for j in c.jeopardy)
    no_unreported_lapse(server, [c])


class Ordered(Collector):
    """Records decisions and jeopardy in one sequence."""

    def __init__(self) -> None:
        super().__init__()
        self.seq: list[str] = []

    def on_decision(self, decision: Decision) -> None:
        self.seq.append("decision:" + decision.outcome.value)
        super().on_decision(decision)

    def on_jeopardy(self, event: leasebeat.Jeopardy) -> None:
        self.seq.append("jeopardy:" + event.cause)
        super().on_jeopardy(event)


def check_fallback_jeopardy(c: Ordered) -> None:
    """D-15 on the fallback path (an older server, --omit-remaining): nothing
    is proven, so the lead is reached at once: one proven_until_reached right
    after the first success, and only that one (later fallback successes do
    not re-arm it)."""
    assert c.successes() >= 3
    first = c.seq.index("decision:success")
    jeop = [i for i, s in enumerate(c.seq) if s.startswith("jeopardy:")]
    assert jeop == [first + 1], c.seq
    (j,) = c.jeopardy
    assert j.cause == "proven_until_reached" and j.event == "lease_in_jeopardy"
    assert j.proven_until_ns is None and j.reservation_id == c.decisions[0].reservation_id


def test_fallback_reports_jeopardy_at_once_thread(serve: Any) -> None:
    server = serve("--max-lead-ms", str(TTL), "--omit-remaining")
    c = Ordered()
    r = leasebeat.run(hb(), UrllibTransport(server.url, server.api_key), listener=c, release_on_stop=True)
    c.wait_for(lambda c: c.successes() >= 3 or bool(c.stops))
    finish(r)
    check_fallback_jeopardy(c)


def test_fallback_reports_jeopardy_at_once_asyncio(serve: Any) -> None:
    server = serve("--max-lead-ms", str(TTL), "--omit-remaining")
    c = Ordered()

    async def main() -> None:
        task = asyncio.ensure_future(
            leasebeat.aio.run(hb(), AsyncUrllibTransport(server.url, server.api_key), listener=c, release_on_stop=True)
        )
        while c.successes() < 3 and not task.done():
            await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    check_fallback_jeopardy(c)


def _adopted(server: Any) -> Heartbeat:
    """A heartbeat for a reservation made outside the runner (issue 25, 2)."""
    _key, _request_body, status, _headers, body = server.create(TTL)
    assert status == 200
    return Heartbeat.for_reservation(json.loads(body)["reservation_id"], TTL, TIMEOUT)


def test_adopted_reservation_first_beat_is_not_late_thread(serve: Any) -> None:
    # Its first extension is due "at 0", i.e. at once: sent on time, it is
    # no late beat (before the fix every adoption reported late_beat).
    server = serve("--max-lead-ms", str(TTL))
    c = Collector()
    r = leasebeat.run(_adopted(server), UrllibTransport(server.url, server.api_key), listener=c, release_on_stop=True)
    c.wait_for(lambda c: c.successes() >= 2 or bool(c.stops))
    finish(r)
    assert c.successes() >= 2, c.decisions
    assert c.jeopardy == [], c.jeopardy
    assert server.lapses() == []


def test_adopted_reservation_first_beat_is_not_late_asyncio(serve: Any) -> None:
    server = serve("--max-lead-ms", str(TTL))
    c = Collector()

    async def main() -> None:
        task = asyncio.ensure_future(
            leasebeat.aio.run(_adopted(server), AsyncUrllibTransport(server.url, server.api_key), listener=c, release_on_stop=True)
        )
        while c.successes() < 2 and not task.done():
            await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert c.successes() >= 2, c.decisions
    assert c.jeopardy == [], c.jeopardy
    assert server.lapses() == []


# ------------------------------------------- finalization after a stop (#25)


@pytest.mark.parametrize("mode", ["thread", "asyncio"])
def test_a_release_is_sent_after_expired_and_the_answer_reported(serve: Any, mode: str) -> None:
    """After `expired` the release goes out all the same: a server may accept
    it for a grace period after expiry; its answer is reported."""
    server = serve("--max-lead-ms", str(TTL), "--fault", "extend:2=410:RESERVATION_EXPIRED")
    c = Collector()
    if mode == "thread":
        r = leasebeat.run(hb(), UrllibTransport(server.url, server.api_key), listener=c, release_on_stop=True)
        d = r.join(LIMIT_S)
    else:
        d = asyncio.run(
            leasebeat.aio.run(hb(), AsyncUrllibTransport(server.url, server.api_key), listener=c, release_on_stop=True)
        )
    assert d is not None and d.reason is StopReason.EXPIRED
    rid = c.decisions[0].reservation_id
    assert [e["reservation_id"] for e in server.requests("release")] == [rid]
    assert [f[0] for f in c.finalized] == ["release"]
    assert c.finalized[0][1] is not None and c.finalized[0][1].status == 200  # the server's answer


def test_stop_release_after_the_runner_stopped_by_itself_sends_it(serve: Any) -> None:
    server = serve("--max-lead-ms", str(TTL), "--max-extensions", "2")
    c = Collector()
    r = leasebeat.run(hb(), UrllibTransport(server.url, server.api_key), listener=c)
    c.wait_for(lambda c: bool(c.stops))
    assert r.join(LIMIT_S) is not None and r.done
    assert c.stops[0].reason is StopReason.MAX_EXTENSIONS
    assert server.requests("release") == [] and c.finalized == []
    r.stop(release=True)
    d = r.join(LIMIT_S)
    assert d is c.stops[0]  # the stop is unchanged
    rid = c.decisions[0].reservation_id
    assert [e["reservation_id"] for e in server.requests("release")] == [rid]
    assert [f[0] for f in c.finalized] == ["release"] and c.finalized[0][1].status == 200
    # At most once: a second request sends nothing more.
    r.stop(release=True)
    r.stop(commit={"unit": "TOKENS", "amount": 1})
    r.join(LIMIT_S)
    assert len(server.requests("release")) == 1 and server.requests("commit") == []
    assert len(c.finalized) == 1


def test_stop_release_after_not_found_sends_nothing(serve: Any, caplog: Any) -> None:
    server = serve("--max-lead-ms", str(TTL), "--fault", "extend:2=404:NOT_FOUND")
    c = Collector()
    r = leasebeat.run(hb(), UrllibTransport(server.url, server.api_key), listener=c, release_on_stop=True)
    d = r.join(LIMIT_S)
    assert d is not None and d.reason is StopReason.NOT_FOUND
    with caplog.at_level("WARNING", logger="leasebeat.runner"):
        r.stop(release=True)
        r.join(LIMIT_S)
    assert server.requests("release") == [] and c.finalized == []
    assert any("not_found" in m for m in caplog.messages), caplog.messages
