"""Issue 10 in the Python API: adopt_create, the lease's instants on every
decision, the natural input forms and the stable enum strings."""

from __future__ import annotations

import email.message
import http.client
import io

import pytest

import leasebeat
from leasebeat import (
    AttemptKind,
    Heartbeat,
    InvalidArgument,
    InvalidKey,
    KeyUse,
    Mode,
    Next,
    OutcomeClass,
    StopReason,
    TransportFailure,
)

CREATED = (
    b'{"decision":"ALLOW","reservation_id":"r-1","affected_scopes":["tenant:a"],'
    b'"expires_at_ms":1785585661500,"remaining_ttl_ms":61500}'
)
REQUEST = b'{"idempotency_key":"sdk-1","ttl_ms":60000,"subject":{"tenant":"a"}}'
MS = 1_000_000


def adopt(**kw: object) -> tuple[Heartbeat, leasebeat.Decision]:
    args: dict[str, object] = {"key": "sdk-1", "sent_ns": 0, "received_ns": 1500 * MS}
    args.update(kw)
    return Heartbeat.adopt_create(60000, 10000, **args)  # type: ignore[arg-type]


def test_adopt_timing_unknown_with_a_known_send_instant() -> None:
    """``timing_unknown=True`` (issue 25): the round trip is unknown although
    ``sent_ns`` is given, as with ``sent_ns=None`` (HB-12)."""
    _, unknown = adopt(sent_ns=None, status=200, headers={}, body=CREATED)
    _, marked = adopt(status=200, headers={}, body=CREATED, timing_unknown=True)
    _, timed = adopt(status=200, headers={}, body=CREATED)
    assert marked.to_json_str() == unknown.to_json_str()
    assert (marked.at_ns, marked.proven_until_ns, marked.numbers.max_rtt) == (1500 * MS, 1500 * MS, 0)
    assert timed.at_ns == 38500 * MS
    with pytest.raises(TypeError, match="with status"):
        adopt(failure="timeout", timing_unknown=True)


def test_adopt_success_is_anchored_like_the_worked_example() -> None:
    hb, d = adopt(status=200, headers={}, body=CREATED)
    assert (d.next, d.at_ns, d.key_use, d.key_index, d.mode) == (Next.EXTEND, 38500 * MS, KeyUse.NEW, 2, Mode.PRIMARY)
    assert d.proven_until_ns == 61500 * MS
    assert (d.expires_at_ms, d.remaining_ttl_ms) == (1785585661500, 61500)
    assert hb.reservation_id == "r-1" and hb.last_decision == d
    a = hb.poll_action()
    assert a.is_send and a.kind is AttemptKind.EXTEND and a.attempt_id == 2 and a.key != "sdk-1"
    js = d.to_json()
    assert (js["proven_until"], js["expires_at_ms"], js["remaining_ttl_ms"]) == (61500, 1785585661500, 61500)
    assert "proven_until_ns=61500000000" in repr(d)


def test_adopt_failure_retries_the_same_key_and_body() -> None:
    hb, d = adopt(failure=TransportFailure.TIMEOUT, received_ns=10000 * MS, request_body=REQUEST)
    assert (d.next, d.key_use, d.key_index, d.at_ns) == (Next.CREATE, KeyUse.SAME, 1, 10000 * MS)
    assert d.proven_until_ns is None and d.expires_at_ms is None
    a = hb.poll_action()
    assert a.attempt is not None
    assert (a.attempt.key, a.attempt.body, a.attempt.id) == ("sdk-1", REQUEST, 2)
    hb2, d2 = adopt(failure="reset", request_body=REQUEST.decode())
    assert d2.next is Next.CREATE


def test_adopt_timing_unknown_and_rejections() -> None:
    _, d = adopt(sent_ns=None, status=200, body=CREATED)
    assert d.at_ns == 1500 * MS and d.proven_until_ns == 1500 * MS
    _, d = adopt(status=409, body=b'{"error":"BUDGET_EXCEEDED","message":"no","request_id":"x"}')
    assert d.is_stop and d.reason is StopReason.CREATE_REJECTED


def test_adopt_bad_input_is_a_clear_python_error() -> None:
    with pytest.raises(TypeError, match="exactly one of status"):
        adopt()
    with pytest.raises(TypeError, match="exactly one of status"):
        adopt(status=200, failure="timeout")
    with pytest.raises(TypeError, match="with status"):
        adopt(failure="timeout", body=b"x")
    with pytest.raises(TypeError, match="key must be a str"):
        adopt(key=b"sdk-1", status=200)
    with pytest.raises(TypeError, match="sent_ns must be an int"):
        adopt(sent_ns=0.5, status=200)
    with pytest.raises(InvalidKey):
        adopt(key="", status=200)
    # A key that cannot be a header value: refused up front (issue 25).
    for bad in ("k\r\nX-Evil: 1", "k\n", "\rk", "k\x00"):
        with pytest.raises(InvalidKey, match="header value"):
            adopt(key=bad, status=200)
    with pytest.raises(InvalidArgument) as e:
        adopt(sent_ns=2000 * MS, status=200)
    assert isinstance(e.value, ValueError)
    with pytest.raises(InvalidArgument):
        adopt(status=1000)
    with pytest.raises(InvalidArgument):
        adopt(failure="teapot")
    with pytest.raises(InvalidArgument):
        adopt(failure="timeout", request_body=b'{"idempotency_key":"other"}')
    with pytest.raises(TypeError, match="body must be bytes"):
        adopt(status=200, body=123)
    with pytest.raises(TypeError, match="headers must be"):
        adopt(status=200, body=CREATED, headers="Retry-After: 1")
    with pytest.raises(TypeError, match="pair"):
        adopt(status=200, body=CREATED, headers=[("a", "b", "c")])
    for bad in ("inf", "Rust", "Option", "u64", "panicked"):
        try:
            adopt(sent_ns=-1, status=200)
        except InvalidArgument as err:
            assert bad not in str(err)


def _throttled_decision(headers: object) -> leasebeat.Decision:
    hb, _ = adopt(status=200, body=CREATED)
    a = hb.poll_action()
    assert a.attempt_id is not None and a.due_ns is not None
    hb.handle_sent(a.attempt_id, a.due_ns)
    return hb.handle_response(
        a.attempt_id, a.due_ns + 100 * MS, 429, headers,
        b'{"error":"RATE_LIMITED","message":"slow","request_id":"x"}',
    )


def test_headers_in_their_natural_forms() -> None:
    # One Retry-After: 2 in every form, any case: a same-key retry 2000 ms later.
    message = email.message.Message()
    message["RETRY-after"] = "2"
    raw = http.client.parse_headers(io.BytesIO(b"Retry-After: 2\r\nX-Other: y\r\n\r\n"))
    forms: list[object] = [
        {"retry-after": "2"},
        {"Retry-After": "2"},
        {"RETRY-AFTER": b"2"},
        [("Retry-After", "2")],
        (("retry-after", b"2"),),
        message,
        raw,  # http.client.HTTPMessage, as urllib returns it
    ]
    try:
        import httpx
    except ImportError:
        pass
    else:
        forms.append(httpx.Headers({"Retry-After": "2"}))
    for headers in forms:
        d = _throttled_decision(headers)
        assert d.next is Next.EXTEND and d.key_use is KeyUse.SAME, (headers, d)
        assert d.numbers.retry_delay == 2000, (headers, d)


def test_repeated_headers_stay_repeated() -> None:
    # Two Retry-After values are "multiple" (D-11): a stop, whatever the container.
    forms: list[object] = [
        {"Retry-After": ["1", "2"]},
        [("Retry-After", "1"), ("retry-after", "2")],
        http.client.parse_headers(io.BytesIO(b"Retry-After: 1\r\nRetry-After: 2\r\n\r\n")),
    ]
    try:
        import httpx
    except ImportError:
        pass
    else:
        forms.append(httpx.Headers([("Retry-After", "1"), ("Retry-After", "2")]))
    for headers in forms:
        d = _throttled_decision(headers)
        assert d.is_stop and d.reason is StopReason.THROTTLED, (headers, d)
        assert d.detail is not None and "multiple" in d.detail.lower(), d.detail


def test_enums_print_their_stable_strings() -> None:
    assert str(OutcomeClass.SUCCESS) == "success"
    assert f"{StopReason.CANCELLED}" == "cancelled"
    assert "{}".format(Mode.PRIMARY) == "primary"
    for cls in (StopReason, Mode, KeyUse, AttemptKind, Next, OutcomeClass, TransportFailure, leasebeat.ActionKind):
        for m in cls:
            assert str(m) == m.value and m == m.value


def test_infinite_proven_until_is_the_documented_sentinel() -> None:
    big = 2**63 - 1
    huge = (
        b'{"decision":"ALLOW","reservation_id":"r-1","affected_scopes":["t:a"],'
        b'"expires_at_ms":%d,"remaining_ttl_ms":%d}' % (big, big)
    )
    _, d = Heartbeat.adopt_create(60000, 10000, key="k", sent_ns=0, received_ns=0, status=200, body=huge)
    assert d.proven_until_ns == leasebeat.INFINITE_NS == 2**64 - 1
    assert d.at_ns is None  # the next beat is due at +infinity ("never")
    assert d.to_json()["proven_until"] == "inf"
    assert (d.expires_at_ms, d.remaining_ttl_ms) == (big, big)
