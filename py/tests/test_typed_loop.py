"""A plain, fully typed heartbeat loop: scripts/test-python.sh checks this file
with ``mypy --strict`` (no ``# type: ignore``, no casts, no ``!``-style
asserts beyond what narrowing needs), and pytest runs it against an in-memory
server so the loop is also known to work.

It is the loop an SDK writes around the sans-IO API: poll, wait until due,
mark sent, post, feed the outcome back, log every decision.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import leasebeat
from leasebeat import Decision, Heartbeat, StopReason, TransportFailure

MS = 1_000_000


@dataclass
class Reply:
    status: int
    headers: Mapping[str, str]
    body: bytes


# A transport for the typed loop: (url, idempotency key, body) -> a reply, or
# a TransportFailure when no response came.
Post = Callable[[str, str, bytes], "Reply | TransportFailure"]


@dataclass
class Clock:
    now_ns: int = 0

    def sleep_until(self, due_ns: int) -> None:
        self.now_ns = max(self.now_ns, due_ns)


@dataclass
class Log:
    decisions: list[Decision] = field(default_factory=list)

    def __call__(self, d: Decision) -> None:
        self.decisions.append(d)


def heartbeat_loop(hb: Heartbeat, post: Post, clock: Clock, log: Log, base_url: str, beats: int) -> StopReason:
    """Runs ``hb`` for ``beats`` sends, then cancels; returns the stop reason."""
    sent = 0
    while True:
        action = hb.poll_action()
        if action.is_stop or sent == beats:
            if not hb.is_stopped:
                log(hb.cancel(clock.now_ns))
            reason = hb.stop_reason
            assert reason is not None
            return reason
        attempt = action.attempt
        if attempt is None or action.due_ns is None:  # due at +infinity: never
            log(hb.cancel(clock.now_ns))
            continue
        clock.sleep_until(action.due_ns)
        hb.handle_sent(attempt.id, clock.now_ns)
        sent += 1
        if attempt.kind is leasebeat.AttemptKind.CREATE:
            url = f"{base_url}/v1/reservations"
        else:
            url = f"{base_url}/v1/reservations/{hb.reservation_id}/extend"
        outcome = post(url, attempt.key, attempt.body)
        clock.now_ns += 100 * MS
        decision: Decision
        if isinstance(outcome, TransportFailure):
            decision = hb.handle_failure(attempt.id, clock.now_ns, outcome)
        else:
            decision = hb.handle_response(attempt.id, clock.now_ns, outcome.status, outcome.headers, outcome.body)
        log(decision)
        until: int | None = decision.proven_until_ns
        if until is not None and until != leasebeat.INFINITE_NS:
            assert until >= clock.now_ns
        expires: int | None = decision.expires_at_ms
        if expires is not None:
            assert decision.remaining_ttl_ms is not None


def fake_server() -> Post:
    calls: list[str] = []

    def post(url: str, key: str, body: bytes) -> Reply | TransportFailure:
        calls.append(key)
        assert json.loads(body)["idempotency_key"] == key
        if len(calls) == 2:
            return TransportFailure.TIMEOUT
        if url.endswith("/v1/reservations"):
            created = {
                "decision": "ALLOW",
                "reservation_id": "r-1",
                "affected_scopes": ["tenant:a"],
                "expires_at_ms": 1785585660000 + 60000,
                "remaining_ttl_ms": 60000,
            }
            return Reply(200, {"content-type": "application/json"}, json.dumps(created).encode())
        extended = {"status": "ACTIVE", "expires_at_ms": 1785585720000, "remaining_ttl_ms": 60000}
        return Reply(200, {"Content-Type": "application/json"}, json.dumps(extended).encode())

    return post


def test_typed_loop_runs() -> None:
    hb = Heartbeat(60000, 10000, create_request={"subject": {"tenant": "a"}})
    log = Log()
    reason = heartbeat_loop(hb, fake_server(), Clock(), log, "http://127.0.0.1:1", beats=4)
    assert reason is StopReason.CANCELLED and str(reason) == "cancelled"
    assert [str(d.outcome) for d in log.decisions] == ["success", "transport_failure", "success", "success", "cancelled"]
    assert all(d.proven_until_ns is not None for d in log.decisions)
