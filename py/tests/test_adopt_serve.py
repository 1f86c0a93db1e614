"""Adoption against the reference server: an SDK's own create is taken over
with no extra extension (issue 10).

The test performs the create itself with urllib (as an SDK does with its own
HTTP client), hands the outcome to ``Heartbeat.adopt_create`` and runs a few
beats with a plain sans-IO loop. The server's log then shows exactly one
create, exactly as many extensions as beats the core scheduled, the first of
them a new key sent only when the schedule said (not at once), and no lapse.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any

import leasebeat
from leasebeat import AttemptKind, Heartbeat, KeyUse, Next, OutcomeClass

NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def post(url: str, api_key: str, key: str, body: bytes, timeout_s: float) -> tuple[int, Any, bytes]:
    req = urllib.request.Request(
        url,
        data=body,
        method="POST",
        headers={"Content-Type": "application/json", "X-Cycles-API-Key": api_key, "X-Idempotency-Key": key},
    )
    try:
        with NO_PROXY.open(req, timeout=timeout_s) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        with e:
            return e.code, e.headers, e.read()


def test_adopted_create_costs_no_extra_extension(serve: Any) -> None:
    ttl_ms, timeout_ms, beats = 4000, 1000, 3
    # Maximum-lead policy: every beat comes about a second after the last.
    server = serve("--max-lead-ms", str(ttl_ms))
    sent_ns = time.monotonic_ns()
    key, request_body, status, headers, body = server.create(ttl_ms)
    received_ns = time.monotonic_ns()
    assert status == 200, body
    hb, first = Heartbeat.adopt_create(
        ttl_ms,
        timeout_ms,
        key=key,
        sent_ns=sent_ns,
        received_ns=received_ns,
        status=status,
        headers=headers,  # a plain dict of the response headers, any case
        body=body,
        request_body=request_body,
    )
    rid = json.loads(body)["reservation_id"]
    assert hb.reservation_id == rid == first.reservation_id
    assert first.outcome is OutcomeClass.SUCCESS and first.next is Next.EXTEND
    assert first.key_use is KeyUse.NEW and first.key_index == 2
    # Anchored on the create: the first beat waits next_delay, no priming extension.
    assert first.numbers.next_delay is not None and first.numbers.next_delay > 0
    assert first.at_ns is not None and first.at_ns > received_ns
    assert first.proven_until_ns is not None and first.proven_until_ns > first.at_ns
    assert first.remaining_ttl_ms is not None and 0 < first.remaining_ttl_ms <= ttl_ms
    assert first.expires_at_ms is not None

    decisions = [first]
    sent_keys: list[str] = []
    while len(sent_keys) < beats:
        action = hb.poll_action()
        assert action.is_send and action.kind is AttemptKind.EXTEND and action.due_ns is not None
        assert action.attempt is not None and action.attempt_id is not None
        wait_ns = action.due_ns - time.monotonic_ns()
        if wait_ns > 0:
            time.sleep(wait_ns / 1e9)
        hb.handle_sent(action.attempt_id, time.monotonic_ns())
        status, headers, body = post(
            f"{server.url}/v1/reservations/{rid}/extend", server.api_key, action.attempt.key, action.attempt.body, 1.0
        )
        # http.client.HTTPMessage: passed as is (it has items()).
        d = hb.handle_response(action.attempt_id, time.monotonic_ns(), status, headers, body)
        sent_keys.append(action.attempt.key)
        decisions.append(d)
        assert d.outcome is OutcomeClass.SUCCESS and d.next is Next.EXTEND, d
        assert d.proven_until_ns is not None and d.expires_at_ms is not None
    hb.cancel(time.monotonic_ns())
    status, _, _ = post(
        f"{server.url}/v1/reservations/{rid}/release",
        server.api_key,
        "release-1",
        json.dumps({"idempotency_key": "release-1"}).encode(),
        5.0,
    )
    assert status == 200

    creates = server.requests("create")
    extends = server.requests("extend", rid)
    assert [e["header_key"] for e in creates] == [key]
    assert len(extends) == beats, "an extension the core did not schedule"
    assert [e["header_key"] for e in extends] == sent_keys
    assert key not in sent_keys and len(set(sent_keys)) == beats
    # The first extension came when scheduled (next_delay after the create),
    # not at once: a lower bound on the server's clock, which cannot flake.
    assert extends[0]["arrived_ms"] - creates[0]["t_ms"] >= (first.numbers.next_delay or 0) // 2
    assert server.lapses() == []


def test_adopt_forms_and_errors() -> None:
    ok_body = b'{"decision":"ALLOW","reservation_id":"r-1","affected_scopes":["t:a"],"expires_at_ms":1785585661500,"remaining_ttl_ms":61500}'
    for body in (ok_body, ok_body.decode(), bytearray(ok_body), memoryview(ok_body)):
        hb, d = Heartbeat.adopt_create(60000, 10000, key="k", sent_ns=0, received_ns=1_500_000_000, status=200, body=body)
        assert d.at_ns == 38_500_000_000 and d.proven_until_ns == 61_500_000_000
    assert leasebeat.INFINITE_NS == 2**64 - 1
