"""Unit tests of the Python API surface: values, errors, bad input, threads, asyncio, docs."""

from __future__ import annotations

import asyncio
import enum
import io
import json
import math
import os
import pydoc
import threading
from typing import Any

import pytest

import leasebeat
from leasebeat import (
    ActionKind,
    AttemptKind,
    Heartbeat,
    KeyUse,
    LeaseError,
    Mode,
    Next,
    OutcomeClass,
    StopReason,
    TransportFailure,
)

MS = 1_000_000
CREATE_OK = (
    b'{"decision":"ALLOW","reservation_id":"r-1","affected_scopes":["tenant:a"],'
    b'"expires_at_ms":1785585660000,"remaining_ttl_ms":61500}'
)


def extend_ok(remaining: int, expires: int = 1785585720000) -> bytes:
    return json.dumps(
        {"status": "ACTIVE", "expires_at_ms": expires, "remaining_ttl_ms": remaining}
    ).encode()


def started(timeout: int | None = 10000) -> tuple[Heartbeat, leasebeat.Decision]:
    """A heartbeat whose create succeeded: the worked example (next beat at 38.5 s)."""
    hb = Heartbeat(60000, timeout, key_prefix="key-")
    a = hb.poll_action()
    assert a.attempt_id is not None
    hb.handle_sent(a.attempt_id, 0)
    d = hb.handle_response(a.attempt_id, 1500 * MS, 200, {}, CREATE_OK)
    return hb, d


# ----------------------------------------------------------------- packaging


def test_installed_wheel_not_source_tree() -> None:
    if os.environ.get("LEASEBEAT_REQUIRE_INSTALLED") == "1":
        assert "site-packages" in (leasebeat.__file__ or ""), leasebeat.__file__
    assert leasebeat._leasebeat.__name__ == "leasebeat._leasebeat"


def test_version_and_constants() -> None:
    assert isinstance(leasebeat.__version__, str) and leasebeat.__version__
    assert leasebeat.DEFAULT_TTL_MS == 60000
    assert (leasebeat.MIN_TTL_MS, leasebeat.MAX_TTL_MS) == (1000, 86_400_000)
    assert leasebeat.MAX_KEY_CHARS == 256


def test_every_public_name_is_documented_and_in_help() -> None:
    out = io.StringIO()
    pydoc.Helper(output=out).help(leasebeat)
    text = out.getvalue()
    for name in leasebeat.__all__:
        obj = getattr(leasebeat, name)
        assert name in text or name == "__version__", name
        if callable(obj) or isinstance(obj, type):
            assert (obj.__doc__ or "").strip(), f"{name} has no docstring"
        if isinstance(obj, type) and not issubclass(obj, (enum.Enum, BaseException)):
            for attr, member in vars(obj).items():
                if attr.startswith("_") or attr == "NAMES":
                    continue
                assert (getattr(member, "__doc__", None) or "").strip(), f"{name}.{attr}"


# ------------------------------------------------------------------- enums


def test_enums_are_str_enums_with_stable_values() -> None:
    assert [r.value for r in StopReason] == [
        "lease_too_short", "retry_window_exhausted", "no_progress", "throttled", "expired",
        "finalized", "max_extensions", "tenant_closed", "not_found", "rejected",
        "unexpected_status", "create_failed", "create_rejected", "no_reservation", "cancelled",
    ]  # fmt: skip
    for cls in (StopReason, Mode, KeyUse, AttemptKind, Next, OutcomeClass, TransportFailure,
                ActionKind, leasebeat.DecisionWarning):  # fmt: skip
        assert issubclass(cls, str) and issubclass(cls, enum.Enum)
        for m in cls:
            assert m == m.value and cls(m.value) is m and m.name == m.value.upper()
    assert StopReason("cancelled") is StopReason.CANCELLED


# ------------------------------------------------------------ worked example


def test_worked_example_and_decision_values() -> None:
    hb, d = started()
    assert d.next is Next.EXTEND and d.next == "extend"  # type: ignore[comparison-overlap]
    assert d.at_ns == 38_500 * MS
    assert d.key_use is KeyUse.NEW and d.key_index == 2
    assert d.mode is Mode.PRIMARY and d.reason is None and not d.is_stop
    assert d.outcome is OutcomeClass.SUCCESS
    assert d.reservation_id == "r-1" == hb.reservation_id
    n = d.numbers
    assert (n.rtt, n.max_rtt, n.lead_floor, n.attempt_budget) == (1500, 1500, 60000, 10000)
    assert (n.safety_margin, n.retry_reserve, n.next_delay) == (3000, 23000, 37000)
    assert n.lead is None and n.retry_window is None
    assert d.to_json() == {
        "next": "extend", "at": 38500, "key": "new", "key_index": 2, "mode": "primary",
        "numbers": {"rtt": 1500, "max_rtt": 1500, "lead_floor": 60000, "attempt_budget": 10000,
                    "safety_margin": 3000, "retry_reserve": 23000, "next_delay": 37000},
        "warnings": [],
        "proven_until": 61500, "expires_at_ms": 1785585660000, "remaining_ttl_ms": 61500,
    }  # fmt: skip
    assert json.loads(d.to_json_str()) == d.to_json()
    r = repr(d)
    assert r.startswith("Decision(next='extend', at_ns=38500000000") and "reservation_id='r-1'" in r
    assert "next_delay=37000" in repr(n)
    a = hb.poll_action()
    assert a.action is ActionKind.SEND and a.is_send and not a.is_stop
    assert a.kind is AttemptKind.EXTEND and a.attempt_id == 2 and a.due_ns == 38_500 * MS
    assert a.key == "key-2" and a.key_use is KeyUse.NEW and a.key_index == 2
    assert a.body == b'{"extend_by_ms":60000,"idempotency_key":"key-2"}'
    assert a.attempt == hb.attempt and a.attempt is not None and a.attempt.sent_ns is None
    assert hb.poll_timeout() == 38_500 * MS
    assert hb.max_rtt_ms == 1500 and hb.mode is Mode.PRIMARY and hb.last_event_ns == 1500 * MS


def test_values_are_frozen_and_hashable() -> None:
    hb, d = started()
    action = hb.poll_action()
    for obj, attr in ((d, "at_ns"), (d.numbers, "rtt"), (action, "key"), (hb, "ttl_ms")):
        with pytest.raises(AttributeError):
            setattr(obj, attr, 1)
    assert len({d, hb.last_decision}) == 1 and d == hb.last_decision
    assert len({action, hb.poll_action()}) == 1
    assert hb.last_decision is not None and hash(d.numbers) == hash(hb.last_decision.numbers)
    assert d != "not a decision"


def test_retry_same_key_and_infinities() -> None:
    hb, _ = started(timeout=None)  # unbounded: budget inf, window -inf
    a = hb.poll_action()
    assert a.attempt_id is not None
    hb.handle_sent(a.attempt_id, 38_500 * MS)
    d = hb.handle_failure(a.attempt_id, 38_600 * MS, TransportFailure.TIMEOUT)
    assert d.is_stop and d.reason is StopReason.RETRY_WINDOW_EXHAUSTED
    assert d.numbers.attempt_budget == math.inf and d.numbers.retry_window == -math.inf
    assert d.to_json()["numbers"]["retry_window"] == "-inf"
    assert hb.is_stopped and hb.poll_action().reason is StopReason.RETRY_WINDOW_EXHAUSTED
    assert hb.attempt is None and hb.poll_timeout() is None


def test_429_retry_after_with_pairs_and_bytes() -> None:
    hb, _ = started()
    a = hb.poll_action()
    assert a.attempt_id is not None
    hb.handle_sent(a.attempt_id, 38_500 * MS)
    d = hb.handle_response(a.attempt_id, 38_600 * MS, 429, [(b"Retry-After", b" 2 ")], "")
    assert d.next is Next.EXTEND and d.key_use is KeyUse.SAME
    assert d.numbers.retry_delay == 2000 and d.at_ns == 40_600 * MS
    retry = hb.poll_action()
    assert retry.key == a.key and retry.body == a.body


def test_repeated_retry_after_in_mapping_stops_throttled() -> None:
    hb, _ = started()
    a = hb.poll_action()
    assert a.attempt_id is not None
    hb.handle_sent(a.attempt_id, 38_500 * MS)
    d = hb.handle_response(a.attempt_id, 38_600 * MS, 429, {"retry-after": ["1", "2"]})
    assert d.reason is StopReason.THROTTLED and d.detail


def test_timing_unknown_gives_zero_lead() -> None:
    hb = Heartbeat(key_prefix="k")
    a = hb.poll_action()
    assert a.attempt_id is not None
    hb.handle_sent(a.attempt_id, 0)
    d = hb.handle_response(a.attempt_id, 5 * MS, 200, None, memoryview(CREATE_OK), timing_unknown=True)
    assert d.numbers.lead_floor == 0 and d.numbers.next_delay == 0 and d.at_ns == 5 * MS


def test_cancel_and_stop_is_final() -> None:
    hb, _ = started()
    d = hb.cancel(2000 * MS)
    assert d.reason is StopReason.CANCELLED and d.outcome is OutcomeClass.CANCELLED
    assert d.at_ns is None and d.key_use is None and hb.stop_reason is StopReason.CANCELLED
    with pytest.raises(leasebeat.Stopped) as e:
        hb.cancel(3000 * MS)
    assert e.value.code == "stopped"


def test_create_request_and_keys() -> None:
    req = {"subject": {"tenant": "acme"}, "estimate": {"amount": 5, "unit": "USD_MICROCENTS"},
           "n": None, "f": 1.5, "t": (True, False), "big": 2**64 - 1, "neg": -(2**63)}  # fmt: skip
    hb = Heartbeat(30000, 5000, create_request=req, key_prefix="p-")
    body = json.loads(hb.poll_action().body or b"")
    assert body["idempotency_key"] == "p-1" and body["ttl_ms"] == 30000
    assert body["subject"] == {"tenant": "acme"} and body["big"] == 2**64 - 1
    assert hb.create_request["t"] == [True, False] and hb.ttl_ms == 30000
    assert hb.request_timeout_ms == 5000
    random_key = Heartbeat().poll_action().key
    assert random_key is not None and len(random_key) == 36  # UUIDv4
    assert "Heartbeat" in repr(hb)


# ------------------------------------------------------- existing reservation


def test_an_existing_reservation_starts_with_an_extension() -> None:
    ok = b'{"status":"ACTIVE","expires_at_ms":90000,"remaining_ttl_ms":60000}'
    hb = Heartbeat.for_reservation("rsv-9", 60000, 10000, key_prefix="k")
    a = hb.poll_action()
    assert a.action is ActionKind.SEND and a.kind is AttemptKind.EXTEND
    assert (a.attempt_id, a.key, a.key_index, a.key_use, a.due_ns) == (1, "k1", 1, KeyUse.NEW, 0)
    assert a.body == b'{"extend_by_ms":60000,"idempotency_key":"k1"}'
    assert hb.reservation_id == "rsv-9" and hb.poll_timeout() == 0
    assert (hb.ttl_ms, hb.request_timeout_ms, hb.create_request) == (60000, 10000, {})
    assert isinstance(hb, Heartbeat) and 'reservation_id="rsv-9"' in repr(hb)
    hb.handle_sent(1, 0)
    d = hb.handle_response(1, 1000 * MS, 200, None, ok)
    assert d.numbers.next_delay == 59_000 - 22_000 and d.key_index == 2
    assert d.next is Next.EXTEND and d.reservation_id == "rsv-9"

    # Before any success nothing proves a lead: a transient failure stops.
    hb = Heartbeat.for_reservation("rsv-9", ttl_ms=60000, request_timeout_ms=10000)
    key = hb.poll_action().key
    assert key is not None and len(key) == 36  # UUIDv4 by default
    hb.handle_sent(1, 0)
    d = hb.handle_failure(1, 10_000 * MS, TransportFailure.TIMEOUT)
    assert d.reason is StopReason.RETRY_WINDOW_EXHAUSTED and d.is_stop

    # Without remaining_ttl_ms, the first success is the fallback's anchor.
    hb = Heartbeat.for_reservation("rsv-9", 60000, 10000)
    hb.handle_sent(1, 0)
    d = hb.handle_response(1, MS, 200, None, b'{"status":"ACTIVE","expires_at_ms":90000}')
    assert (d.mode, d.at_ns) == (Mode.FALLBACK, MS)


def test_for_reservation_defaults_and_character_count() -> None:
    hb = Heartbeat.for_reservation("r")
    assert (hb.ttl_ms, hb.request_timeout_ms) == (leasebeat.DEFAULT_TTL_MS, None)
    # 1..=128 characters, not bytes: 128 two-byte characters are fine.
    assert Heartbeat.for_reservation("\u00e9" * 128).reservation_id == "\u00e9" * 128
    assert Heartbeat.for_reservation("x" * 128).poll_action().kind is AttemptKind.EXTEND


@pytest.mark.parametrize("bad", ["", "x" * 129, "\u00e9" * 129])
def test_for_reservation_bad_id_length(bad: str) -> None:
    with pytest.raises(leasebeat.InvalidArgument) as e:
        Heartbeat.for_reservation(bad)
    assert isinstance(e.value, ValueError) and e.value.code == "invalid_argument"
    assert "reservation_id" in str(e.value)


@pytest.mark.parametrize("bad", [None, 5, b"rsv-9", ["rsv-9"], True])
def test_for_reservation_bad_id_type(bad: Any) -> None:
    with pytest.raises(TypeError, match="reservation_id"):
        Heartbeat.for_reservation(bad)


def test_for_reservation_bad_config_and_options() -> None:
    with pytest.raises(TypeError):
        Heartbeat.for_reservation()  # type: ignore[call-arg]
    with pytest.raises(leasebeat.InvalidConfig):
        Heartbeat.for_reservation("rsv-9", ttl_ms=999)
    with pytest.raises(leasebeat.InvalidArgument):
        Heartbeat.for_reservation("rsv-9", request_timeout_ms=-1)
    with pytest.raises(TypeError):
        Heartbeat.for_reservation("rsv-9", ttl_ms=1.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Heartbeat.for_reservation("rsv-9", key_prefix=5)  # type: ignore[arg-type]
    with pytest.raises(TypeError):  # nothing is created: no create_request
        Heartbeat.for_reservation("rsv-9", create_request={})  # type: ignore[call-arg]
    with pytest.raises(leasebeat.InvalidKey):
        Heartbeat.for_reservation("rsv-9", key_prefix="x" * 256)
    with pytest.raises(leasebeat.InvalidKey, match="header value"):
        Heartbeat.for_reservation("rsv-9", key_prefix="p\r\n")


# ------------------------------------------------------------------- errors

ALL_ERRORS = {
    "invalid_config": (leasebeat.InvalidConfig, True),
    "invalid_argument": (leasebeat.InvalidArgument, True),
    "time_went_backwards": (leasebeat.TimeWentBackwards, True),
    "not_outstanding": (leasebeat.NotOutstanding, False),
    "not_sent": (leasebeat.NotSent, False),
    "already_sent": (leasebeat.AlreadySent, False),
    "stopped": (leasebeat.Stopped, False),
    "invalid_key": (leasebeat.InvalidKey, False),
}


def test_error_hierarchy_and_codes() -> None:
    assert issubclass(LeaseError, Exception)
    assert leasebeat.ERRORS_BY_CODE == {c: cls for c, (cls, _) in ALL_ERRORS.items()}
    for code, (cls, is_value_error) in ALL_ERRORS.items():
        assert cls.code == code and issubclass(cls, LeaseError)
        assert issubclass(cls, ValueError) is is_value_error
        assert cls.__module__ == "leasebeat" and cls.__doc__


def test_state_errors_change_nothing() -> None:
    hb = Heartbeat(key_prefix="k")
    a = hb.poll_action()
    with pytest.raises(leasebeat.NotSent):
        hb.handle_failure(1, 0, "timeout")
    with pytest.raises(leasebeat.NotOutstanding) as e:
        hb.handle_sent(7, 0)
    assert e.value.code == "not_outstanding" and "7" in str(e.value)
    hb.handle_sent(1, 10)
    with pytest.raises(leasebeat.AlreadySent):
        hb.handle_sent(1, 10)
    with pytest.raises(leasebeat.TimeWentBackwards) as tb:
        hb.handle_failure(1, 9, "reset")
    assert isinstance(tb.value, ValueError) and tb.value.code == "time_went_backwards"
    assert hb.poll_action().action is ActionKind.AWAIT_OUTCOME and hb.last_event_ns == 10
    assert hb.poll_action().attempt_id == a.attempt_id


@pytest.mark.parametrize(
    "kwargs",
    [{"ttl_ms": 999}, {"ttl_ms": 86_400_001}, {"ttl_ms": 0},
     {"create_request": {"ttl_ms": 5}}, {"create_request": {"idempotency_key": "x"}}],
)  # fmt: skip
def test_invalid_config(kwargs: dict[str, Any]) -> None:
    with pytest.raises(leasebeat.InvalidConfig) as e:
        Heartbeat(**kwargs)
    assert isinstance(e.value, ValueError) and e.value.code == "invalid_config"


def test_invalid_key() -> None:
    with pytest.raises(leasebeat.InvalidKey):
        Heartbeat(key_prefix="x" * 256)  # "x"*256 + "1" is 257 characters
    # A prefix with CR or LF could not be a header value (issue 25).
    for bad in ("p\r\nX-Evil: 1\r\n", "p\n", "\r"):
        with pytest.raises(leasebeat.InvalidKey, match="header value"):
            Heartbeat(key_prefix=bad)
    assert Heartbeat(key_prefix="").poll_action().key == "1"


BAD_INTS: list[tuple[Any, type[BaseException]]] = [
    (True, TypeError), (1.0, TypeError), (float("nan"), TypeError), ("1", TypeError),
    (None, TypeError), (b"1", TypeError), (-1, leasebeat.InvalidArgument),
    (2**64, leasebeat.InvalidArgument), (-(2**70), leasebeat.InvalidArgument),
]  # fmt: skip


@pytest.mark.parametrize(("value", "exc"), BAD_INTS)
def test_bad_times_and_ids(value: Any, exc: type[BaseException]) -> None:
    hb = Heartbeat(key_prefix="k")
    with pytest.raises(exc):
        hb.handle_sent(1, value)
    with pytest.raises(exc):
        hb.handle_sent(value, 0)
    with pytest.raises(exc):
        hb.cancel(value)
    with pytest.raises(exc):
        Heartbeat(value if value is not None else "x")  # type: ignore[arg-type]
    if value is not None:
        with pytest.raises(exc):
            Heartbeat(60000, value)
    assert hb.poll_action().action is ActionKind.SEND  # nothing changed


def test_bad_value_errors_are_value_errors() -> None:
    with pytest.raises(ValueError):
        Heartbeat(key_prefix="k").cancel(-5)


@pytest.mark.parametrize(
    ("status", "exc"),
    [(99, leasebeat.InvalidArgument), (1000, leasebeat.InvalidArgument),
     (70000, leasebeat.InvalidArgument), (-1, leasebeat.InvalidArgument),
     (True, TypeError), (200.0, TypeError), ("200", TypeError)],
)  # fmt: skip
def test_bad_status(status: Any, exc: type[BaseException]) -> None:
    hb = Heartbeat(key_prefix="k")
    hb.handle_sent(1, 0)
    with pytest.raises(exc):
        hb.handle_response(1, 1, status)
    assert hb.poll_action().action is ActionKind.AWAIT_OUTCOME


@pytest.mark.parametrize(
    ("headers", "body"),
    [("Retry-After: 1", None), (b"x", None), (5, None), ([("a",)], None), ([("a", 1)], None),
     ({"a": 1}, None), ({1: "x"}, None), (None, 5), (None, ["x"]), (None, {"a": 1})],
)  # fmt: skip
def test_bad_headers_and_body(headers: Any, body: Any) -> None:
    hb = Heartbeat(key_prefix="k")
    hb.handle_sent(1, 0)
    with pytest.raises(TypeError):
        hb.handle_response(1, 1, 200, headers, body)
    assert hb.poll_action().action is ActionKind.AWAIT_OUTCOME


def test_bad_failure_names() -> None:
    hb = Heartbeat(key_prefix="k")
    hb.handle_sent(1, 0)
    with pytest.raises(leasebeat.InvalidArgument):
        hb.handle_failure(1, 1, "TIMEOUT")
    with pytest.raises(TypeError):
        hb.handle_failure(1, 1, 3)  # type: ignore[arg-type]
    assert hb.handle_failure(1, 1, "connect").next is Next.CREATE


@pytest.mark.parametrize(
    ("req", "exc"),
    [([], TypeError), ("x", TypeError), ({1: 2}, TypeError), ({"a": object()}, TypeError),
     ({"a": float("nan")}, leasebeat.InvalidArgument), ({"a": math.inf}, leasebeat.InvalidArgument),
     ({"a": 2**64}, leasebeat.InvalidArgument), ({"a": {1, 2}}, TypeError)],
)  # fmt: skip
def test_bad_create_request(req: Any, exc: type[BaseException]) -> None:
    with pytest.raises(exc):
        Heartbeat(create_request=req)


def test_create_request_too_deep_or_cyclic() -> None:
    deep: dict[str, Any] = {}
    d = deep
    for _ in range(100):
        d["a"] = {}
        d = d["a"]
    with pytest.raises(leasebeat.InvalidArgument):
        Heartbeat(create_request=deep)
    cyc: list[Any] = []
    cyc.append(cyc)
    with pytest.raises(leasebeat.InvalidArgument):
        Heartbeat(create_request={"c": cyc})


def test_bad_key_prefix() -> None:
    with pytest.raises(TypeError):
        Heartbeat(key_prefix=5)  # type: ignore[arg-type]


# --------------------------------------------------------------- arithmetic


def test_pure_arithmetic() -> None:
    s = leasebeat.primary_schedule(61500, 1500, 10000, 1500)
    assert (s.lead_floor, s.attempt_budget, s.safety_margin) == (60000, 10000, 3000)
    assert (s.retry_reserve, s.next_delay) == (23000, 37000)
    assert leasebeat.primary_schedule(60000, 0, 30000, 0).next_delay == 0
    u = leasebeat.primary_schedule(60000, None, None, 0)
    assert u.attempt_budget == math.inf and u.lead_floor == 0 and "inf" in repr(u)
    r = leasebeat.retry_window(60000, 45000, 7000, 1000)
    assert (r.lead, r.window, r.delay) == (15000, 7000, 3750)
    assert leasebeat.retry_window(60000, 52001, 7000, 1000).window == -1
    assert leasebeat.retry_window(60000, 52001, 7000, 1000).delay is None
    assert leasebeat.retry_window(10**6, 0, math.inf, 1000).window == -math.inf
    assert leasebeat.attempt_budget(10000, 1500) == 10000
    assert leasebeat.attempt_budget(None, 0) == math.inf
    assert leasebeat.attempt_budget(2000, 1500) == 3000
    assert leasebeat.safety_margin(1500) == 3000 and leasebeat.safety_margin(2**64 - 2) == math.inf
    assert leasebeat.retry_reserve(10000, 3000) == 23000
    assert leasebeat.retry_reserve(math.inf, 1000) == math.inf
    assert leasebeat.hold_cadence(60000) == 30000 and leasebeat.hold_cadence(1000) == 1000
    c = leasebeat.fallback_cadence(10000, 30000, 60000)
    assert (c.cadence, c.hold) == (5000, False) and repr(c) == "FallbackCadence(cadence=5000, hold=False)"
    assert leasebeat.fallback_cadence(30000, 30000, 60000).hold
    assert leasebeat.fallback_cadence(-(2**100), 0, 60000).hold
    assert leasebeat.fallback_skips(100000, 20000, 10000) == 7
    assert leasebeat.fallback_skips(2**126, 1, 1000) == 2**64 - 1
    assert leasebeat.ceil_ms(1_500_000_001) == 1501 and leasebeat.ceil_ms(0) == 0


def test_parse_retry_after() -> None:
    assert leasebeat.parse_retry_after([" 2 "]) == 2000
    assert leasebeat.parse_retry_after("0") == 0
    assert leasebeat.parse_retry_after([b"\t7"]) == 7000
    for values, reason in (([], "missing"), (["1", "2"], "multiple"), ("2, 3", "multiple"),
                           ("+3", "invalid"), ("1.5", "invalid"), ("", "invalid"),
                           ("18446744073709552", "overflow")):  # fmt: skip
        with pytest.raises(leasebeat.RetryAfterError) as e:
            leasebeat.parse_retry_after(values)
        assert e.value.reason == reason and isinstance(e.value, ValueError)
    with pytest.raises(TypeError):
        leasebeat.parse_retry_after(5)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [1.5, True, "1", -1, 2**64, None])
def test_arithmetic_bad_arguments(bad: Any) -> None:
    with pytest.raises((TypeError, ValueError)):
        leasebeat.safety_margin(bad)
    with pytest.raises((TypeError, ValueError)):
        leasebeat.ceil_ms(bad)
    with pytest.raises((TypeError, ValueError)):
        leasebeat.fallback_cadence(0, bad, 1000)


# ------------------------------------------------------- threads and asyncio


def drive(hb: Heartbeat, clock: list[int], lock: threading.Lock, rounds: int) -> None:
    """One thread of a crowd: each call races the others; only LeaseErrors may result."""
    for _ in range(rounds):
        with lock:
            clock[0] += MS
            now = clock[0]
        action = hb.poll_action()
        try:
            if action.is_stop:
                return
            assert action.attempt_id is not None
            if action.action is ActionKind.SEND:
                hb.handle_sent(action.attempt_id, now)
            elif action.kind is AttemptKind.CREATE:
                hb.handle_response(action.attempt_id, now, 200, {}, CREATE_OK)
            else:
                hb.handle_response(action.attempt_id, now, 200, {}, extend_ok(61500))
        except (leasebeat.NotOutstanding, leasebeat.NotSent, leasebeat.AlreadySent,
                leasebeat.TimeWentBackwards, leasebeat.Stopped):  # fmt: skip
            pass


def test_threads_share_one_heartbeat() -> None:
    hb = Heartbeat(60000, 1000, key_prefix="t-")
    clock, lock = [0], threading.Lock()
    threads = [threading.Thread(target=drive, args=(hb, clock, lock, 300)) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads)
    assert hb.last_decision is not None and hb.max_rtt_ms >= 0
    d = hb.cancel(clock[0] + MS)
    assert d.reason is StopReason.CANCELLED


def test_asyncio_loop_with_simulated_server() -> None:
    async def server(action: leasebeat.Action) -> tuple[int, bytes]:
        await asyncio.sleep(0)
        return (200, CREATE_OK) if action.kind is AttemptKind.CREATE else (200, extend_ok(61500))

    async def run(hb: Heartbeat) -> list[dict[str, Any]]:
        now = 0
        log: list[dict[str, Any]] = []
        while len(log) < 20:
            action = hb.poll_action()
            assert action.attempt_id is not None and action.due_ns is not None
            now = max(now, action.due_ns)  # a simulated clock: jump to the due time
            hb.handle_sent(action.attempt_id, now)
            status, body = await server(action)
            now += 1500 * MS
            log.append(hb.handle_response(action.attempt_id, now, status, {}, body).to_json())
        log.append(hb.cancel(now).to_json())
        return log

    async def main() -> list[list[dict[str, Any]]]:
        return await asyncio.gather(*(run(Heartbeat(60000, 10000, key_prefix="a-")) for _ in range(5)))

    logs = asyncio.run(main())
    assert all(log == logs[0] for log in logs)
    assert logs[0][0]["numbers"]["next_delay"] == 37000 and logs[0][-1]["reason"] == "cancelled"
    assert [d["key_index"] for d in logs[0][:3]] == [2, 3, 4]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no os.fork on this platform")
@pytest.mark.filterwarnings("ignore:.*fork.*:DeprecationWarning")  # 3.12+: other tests' threads
def test_a_forked_child_never_draws_its_parents_keys() -> None:
    # Random keys come from a per-thread CSPRNG that fork() copies; the package
    # reseeds it in every child (os.register_at_fork). Without that, the first
    # key made after the fork would be the same in parent and child.
    before = Heartbeat().poll_action().key  # the generator is in use before the fork
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its key and leave without running pytest's exit
        try:
            os.write(write_fd, (Heartbeat().poll_action().key or "").encode())
        finally:
            os._exit(0)
    os.close(write_fd)
    parent = Heartbeat().poll_action().key
    with os.fdopen(read_fd, "rb") as f:
        child = f.read().decode()
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert parent is not None and len(child) == 36 == len(parent)
    assert child != parent, "the forked child drew its parent's key"
    assert before != parent
