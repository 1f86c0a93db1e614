"""Replays every settlement vector (tests/vectors/settlement/*.json) through the
public Python API (``leasebeat.Settlement``), plus API tests of the binding.

The format is settlement.md's "Vectors" (with the project's extensions in
docs/settlement-vectors.md). Like the Rust harness
(core/src/scenario/settlement.rs), the replay checks the rules on every step
besides the expectations: every request carries the settlement's first key
in its header and its body (ST-1, across restarts too), no request goes
before its due time, before the acknowledged record's ``not_before_ms`` on
the wall clock (ST-4) or while a persist is unacknowledged (SP-3), and at
most one terminal success per scenario. Bodies are passed as the exact JSON
text the file gives (as the Rust harness does); the dict form is tested
below. Every attribute of each SettlementDecision is checked against its
``to_json()``.
"""

from __future__ import annotations

import json
import os
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

import pytest

import leasebeat
from leasebeat import (
    LeaseError,
    Settlement,
    SettleActionKind,
    SettleMode,
    SettleNext,
    SettleOutcome,
    SettlementDecision,
)

VECTORS_DIR = Path(
    os.environ.get("LEASEBEAT_VECTORS_DIR")
    or Path(__file__).resolve().parents[2] / "tests" / "vectors"
) / "settlement"
FILES = sorted(VECTORS_DIR.glob("*.json"))
WALL_BASE_MS = 1_785_585_600_000


class RawFloat(str):
    """A JSON number that is not an integer literal, kept as its exact text."""


def load(text: str) -> Any:
    return json.loads(text, parse_float=RawFloat)


def dump(v: Any) -> str:
    """Compact JSON text, number literals unchanged (members in file order)."""
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, RawFloat):
        return str(v)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, list):
        return "[" + ",".join(dump(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ",".join(dump(k) + ":" + dump(x) for k, x in v.items()) + "}"
    raise TypeError(f"unexpected JSON value {v!r}")


def norm(v: Any) -> Any:
    """A file value as plain JSON values (exact numbers parsed again)."""
    return json.loads(dump(v))


def given_bytes(v: Any) -> str:
    """A body in a file: an object (its exact text) or a string of raw text."""
    return v if isinstance(v, str) else dump(v)


def ms_to_ns(v: Any) -> int:
    d = Decimal(str(v))
    return int((d * 1000).to_integral_value(rounding=ROUND_HALF_UP)) * 1000


class Mismatch(AssertionError):
    pass


def check_consistency(sid: str, i: int, d: SettlementDecision) -> dict[str, Any]:
    """The decision's attributes agree with its to_json() and str(); returns to_json()."""
    js = d.to_json()
    assert json.loads(str(d)) == js == json.loads(d.to_json_str()), (sid, i)
    same = [
        ("next", d.next.value, js["next"]),
        ("outcome", None if d.outcome is None else d.outcome.value, js.get("outcome")),
        ("mode", d.mode.value, js["mode"]),
        ("class", d.event_class.value, js["class"]),
        ("key", d.key, js.get("key")),
        ("attempt", d.attempt, js.get("attempt")),
        ("code", d.code, js.get("code")),
        ("status", d.status, js.get("status")),
        ("delay_ms", d.delay_ms, js.get("delay_ms")),
        ("not_before_ms", d.not_before_ms, js.get("not_before_ms")),
        ("detail", d.detail, js.get("detail")),
        ("warnings", [w.value for w in d.warnings], js.get("warnings", [])),
        ("heartbeat", "stop" if d.stop_heartbeat else None, js.get("heartbeat")),
        ("is_done", d.is_done, d.next == SettleNext.DONE),
    ]
    rec = js.get("record")
    if isinstance(rec, dict):
        same.append(("record", d.record, "write"))
        same.append(("record.mode", d.record_mode, rec["mode"]))
        same.append(("record.not_before_ms", d.record_not_before_ms, rec["not_before_ms"]))
    else:
        same.append(("record", d.record, rec))
    if d.at_ns is not None:
        same.append(("at", Decimal(d.at_ns) / 1_000_000, Decimal(str(js["at"]))))
    for field, attr, want in same:
        if attr != want:
            raise Mismatch(f"{sid} step {i}: consistency of {field}: {attr!r} != {want!r}")
    return js


def replay(scenario: dict[str, Any]) -> list[dict[str, Any]]:
    sid = scenario["id"]
    cfg = scenario["config"]
    retry = cfg.get("retry", {})
    policy = {k: retry[k] for k in ("max_attempts", "initial_ms", "max_ms") if k in retry}
    s: Settlement | None = None
    store: str | None = None  # the durable record: the last acknowledged, until removed
    writing: str | None = None  # the record of the outstanding persist
    first_key: str | None = None
    successes = 0
    wall_offset = WALL_BASE_MS
    emitted_lines: list[dict[str, Any]] = []
    for i, step in enumerate(scenario["steps"]):
        at = ms_to_ns(step["at"])
        at_ms = at // 1_000_000
        if "wall" in step:
            wall_offset = step["wall"] - at_ms
        wall = max(0, wall_offset + at_ms)
        expect = step.get("expect")
        decision: SettlementDecision | None = None
        error: LeaseError | None = None
        restart = "restart" in step
        try:
            if "start" in step:
                assert step["start"] == ("release" if cfg.get("release") else "commit"), sid
                common: dict[str, Any] = dict(
                    now_ns=at, wall_ms=wall, base_url=cfg.get("base_url"), key_prefix="key-", **policy
                )
                if cfg.get("release"):
                    s = Settlement.release(
                        cfg["reservation_id"], reason=cfg.get("release_reason"), **common
                    )
                else:
                    commit = cfg.get("commit")
                    event = cfg.get("event")
                    s = Settlement.commit(
                        cfg["reservation_id"],
                        None if commit is None else given_bytes(commit),
                        event=None if event is None else given_bytes(event),
                        **common,
                    )
                decision = s.last_decision
            elif restart:
                s = None
                writing = None
                record = step.get("record")
                text = given_bytes(record) if record is not None else store
                if text is None:
                    raise Mismatch(f"{sid} step {i}: restart without an acknowledged record")
                s = Settlement.from_record(text, now_ns=at, wall_ms=wall, **policy)
                store = s.record_json
                decision = s.last_decision
            else:
                if s is None:
                    raise Mismatch(f"{sid} step {i}: no settlement (refused or never built)")
                action = s.poll_action()
                if "persisted" in step:
                    decision = s.handle_persisted(at)
                    store, writing = writing, None
                elif "persist_failed" in step:
                    decision = s.handle_persist_failed(step["persist_failed"], at)
                    writing = None
                elif "send" in step:
                    if action.kind != SettleActionKind.SEND or action.endpoint != step["send"]:
                        raise Mismatch(f"{sid} step {i}: send {step['send']}: got {action!r}")
                    assert action.due_ns is not None and action.key is not None
                    assert action.body is not None and action.attempt_id is not None
                    if at < action.due_ns:
                        raise Mismatch(f"{sid} step {i}: sent before its due time")
                    floor = None if store is None else json.loads(store)["not_before_ms"]
                    if floor is not None and action.endpoint != SettleMode.RELEASE and wall < floor:
                        raise Mismatch(f"{sid} step {i}: sent before not_before_ms {floor}")
                    body_key = json.loads(action.body).get("idempotency_key")
                    if body_key != action.key or (first_key not in (None, action.key)):
                        raise Mismatch(f"{sid} step {i}: key {action.key!r} breaks ST-1")
                    first_key = action.key
                    decision = s.handle_sent(action.attempt_id, at)
                elif "recv" in step or "fail" in step:
                    if action.kind != SettleActionKind.WAIT or action.attempt_id is None:
                        raise Mismatch(f"{sid} step {i}: no attempt in flight: {action!r}")
                    if "recv" in step:
                        r = step["recv"]
                        headers = [
                            (name, v)
                            for name, vals in sorted(r.get("headers", {}).items())
                            for v in (vals if isinstance(vals, list) else [vals])
                        ]
                        body = dump(r["body"]) if "body" in r else r.get("raw", "")
                        decision = s.handle_response(
                            action.attempt_id, at, wall, r["status"], headers, body.encode()
                        )
                    else:
                        decision = s.handle_failure(action.attempt_id, step["fail"], at)
                else:
                    raise Mismatch(f"{sid} step {i}: no event")
        except LeaseError as e:
            error = e
            if restart:
                s = None
        if decision is not None:
            assert s is not None
            emitted = check_consistency(sid, i, decision)
            if decision.next == SettleNext.PERSIST:
                writing = s.record_json
            if decision.record == "remove":
                store = None
            if decision.outcome in (
                SettleOutcome.COMMITTED,
                SettleOutcome.APPLIED,
                SettleOutcome.RELEASED,
            ):
                successes += 1
                if successes > 1:
                    raise Mismatch(f"{sid} step {i}: a second terminal success")
        else:
            assert error is not None
            emitted = {"error": type(error).code, "detail": str(error)}
            if restart:
                emitted.update(next="done", record="quarantine")
        emitted_lines.append(emitted)
        if expect is None:
            if error is not None:
                raise Mismatch(f"{sid} step {i}: unexpected error {error!r}")
            continue
        if error is not None and "error" not in expect:
            raise Mismatch(f"{sid} step {i}: unexpected error {error!r}")
        for field, want in expect.items():
            if field == "at":
                got: Any = None if decision is None else decision.at_ns
                ok = got == ms_to_ns(want)
            elif field == "record" and isinstance(want, dict):
                full = json.loads(s.record_json) if s is not None and s.record_json else {}
                got = {k: full.get(k) for k in want}
                ok = decision is not None and decision.record == "write" and got == norm(want)
            elif field == "body":
                a = s.poll_action() if s is not None else None
                got = None if a is None or a.body is None else json.loads(a.body)
                ok = got == norm(want)
            elif field == "warnings":
                got = emitted.get("warnings", [])
                ok = got == want
            else:
                got = emitted.get(field)
                ok = got == norm(want)
            if not ok:
                raise Mismatch(f"{sid} step {i}: {field}: expected {want!r}, got {got!r}")
    return emitted_lines


def test_there_are_settlement_vectors() -> None:
    assert len(FILES) >= 40, VECTORS_DIR


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_settlement_vector(path: Path) -> None:
    replay(load(path.read_text(encoding="utf-8")))


def test_a_wrong_expectation_fails() -> None:
    """The replay can fail: a changed outcome is caught."""
    scenario = load((VECTORS_DIR / "settle-commit-success.json").read_text(encoding="utf-8"))
    scenario["steps"][-1]["expect"]["outcome"] = "applied"
    with pytest.raises(Mismatch, match="outcome"):
        replay(scenario)


# ------------------------------------------------------------------ API tests

T0 = WALL_BASE_MS
COMMIT = {"actual": {"unit": "TOKENS", "amount": 900}}
EVENT = {"subject": {"tenant": "acme"}, "action": {"kind": "llm", "name": "m"}}
OK = b'{"status":"COMMITTED","charged":{"unit":"TOKENS","amount":900}}'


def test_commit_round_trip_with_a_dict_body() -> None:
    s = Settlement.commit("r/1", COMMIT, event=EVENT, now_ns=0, wall_ms=T0, key_prefix="k-")
    assert s.reservation_id == "r/1" and s.key == "k-1" and s.mode == SettleMode.COMMIT
    a = s.poll_action()
    assert a.kind == SettleActionKind.PERSIST and a.attempt_id is None
    assert a.record_json == s.record_json
    record = json.loads(a.record_json or "")
    assert record["commit_body"] == {**COMMIT, "idempotency_key": "k-1"}
    assert record["event_fallback_body"]["idempotency_key"] == "k-1"
    d = s.handle_persisted(5)
    assert d.next == SettleNext.COMMIT and d.at_ns == 5 and d.key == 1 and d.attempt == 1
    a = s.poll_action()
    assert a.kind == "send" and a.endpoint == SettleMode.COMMIT and a.key == "k-1"
    assert json.loads(a.body or b"") == {**COMMIT, "idempotency_key": "k-1"}
    assert a.attempt_id is not None
    s.handle_sent(a.attempt_id, 6)
    d = s.handle_response(a.attempt_id, 7, T0 + 7, 200, None, OK)
    assert d.outcome == SettleOutcome.COMMITTED and d.record == "remove" and d.stop_heartbeat
    assert s.outcome == SettleOutcome.COMMITTED and s.poll_action().outcome == "committed"
    assert d == s.last_decision and hash(d) == hash(s.last_decision)
    with pytest.raises(leasebeat.Stopped):
        s.handle_sent(a.attempt_id, 8)


def test_expired_commit_switches_to_event_and_a_restart_keeps_the_key() -> None:
    s = Settlement.commit("r-1", COMMIT, event=EVENT, now_ns=0, wall_ms=T0)
    key = s.key
    s.handle_persisted(0)
    a = s.poll_action()
    assert a.attempt_id is not None
    s.handle_sent(a.attempt_id, 0)
    d = s.handle_response(
        a.attempt_id, 10, T0 + 10, 410, [("Content-Type", "application/json")],
        b'{"error":"RESERVATION_EXPIRED","message":"m","request_id":"q"}',
    )
    assert d.next == SettleNext.PERSIST and d.record_mode == SettleMode.EVENT
    assert d.stop_heartbeat and d.code == "RESERVATION_EXPIRED"
    record = s.record_json
    assert record is not None
    r = Settlement.from_record(record.encode(), now_ns=100, wall_ms=T0 + 50)
    assert r.key == key and r.mode == SettleMode.EVENT
    a = r.poll_action()
    assert a.kind == "send" and a.endpoint == "event" and a.due_ns == 100 and a.key == key


def test_429_floor_then_a_failed_persist_still_sends() -> None:
    s = Settlement.commit("r-1", COMMIT, now_ns=0, wall_ms=T0, max_attempts=3)
    s.handle_persisted(0)
    a = s.poll_action()
    assert a.attempt_id is not None
    s.handle_sent(a.attempt_id, 0)
    d = s.handle_response(a.attempt_id, 2_000_000, T0 + 2, 429, {"Retry-After": "3"})
    assert d.next == "persist" and d.not_before_ms == T0 + 3002 and d.record_not_before_ms == T0 + 3002
    assert d.delay_ms == 3000 and d.event_class == "throttled"
    d = s.handle_persist_failed("disk full", 3_000_000)
    assert d.next == "commit" and d.warnings == (leasebeat.SettleWarning.PERSIST_FAILED,)
    assert d.at_ns == 3_002_000_000 and "disk full" in (d.detail or "")


def test_no_actual_and_release() -> None:
    s = Settlement.commit("r-1", None, now_ns=0, wall_ms=T0)
    assert s.outcome == SettleOutcome.NO_ACTUAL and s.record_json is None and s.key == ""
    assert s.poll_action().kind == SettleActionKind.DONE
    with pytest.raises(leasebeat.Stopped):
        s.handle_persisted(1)
    r = Settlement.release("r-1", reason="unused", now_ns=7, wall_ms=T0)
    a = r.poll_action()
    assert a.kind == "send" and a.endpoint == SettleMode.RELEASE and a.due_ns == 7
    assert json.loads(a.body or b"") == {"idempotency_key": r.key, "reason": "unused"}
    assert r.record_json is None


@pytest.mark.parametrize(
    "rid",
    ["", "r\x001", "x" * 10_000, "r\n1"],
    ids=["empty", "nul", "10000-chars", "newline"],
)
def test_bad_reservation_ids_are_invalid_config(rid: str) -> None:
    with pytest.raises(leasebeat.InvalidConfig) as e:
        Settlement.commit(rid, COMMIT, now_ns=0, wall_ms=T0)
    assert isinstance(e.value, ValueError) and e.value.code == "invalid_config"


def test_bad_bodies() -> None:
    with pytest.raises(leasebeat.InvalidConfig):
        Settlement.commit("r-1", "not json", now_ns=0, wall_ms=T0)
    with pytest.raises(leasebeat.InvalidConfig):
        Settlement.commit("r-1", b"\xff", now_ns=0, wall_ms=T0)
    with pytest.raises(leasebeat.InvalidConfig, match="2\\^63"):
        Settlement.commit(
            "r-1", {"actual": {"unit": "TOKENS", "amount": 2**63}}, now_ns=0, wall_ms=T0
        )
    with pytest.raises(ValueError):  # beyond 64 bits: InvalidArgument, also a ValueError
        Settlement.commit(
            "r-1", {"actual": {"unit": "TOKENS", "amount": 2**70}}, now_ns=0, wall_ms=T0
        )
    with pytest.raises(leasebeat.InvalidConfig):
        Settlement.commit("r-1", {**COMMIT, "idempotency_key": "x"}, now_ns=0, wall_ms=T0)
    with pytest.raises(leasebeat.InvalidConfig):
        Settlement.commit("r-1", COMMIT, event={"subject": {}}, now_ns=0, wall_ms=T0)
    with pytest.raises(leasebeat.InvalidConfig):
        Settlement.commit("r-1", COMMIT, now_ns=0, wall_ms=T0, max_attempts=0)
    with pytest.raises(TypeError):
        Settlement.commit("r-1", [1], now_ns=0, wall_ms=T0)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Settlement.commit(1, COMMIT, now_ns=0, wall_ms=T0)  # type: ignore[arg-type]
    with pytest.raises(leasebeat.InvalidArgument):
        Settlement.commit("r-1", COMMIT, now_ns=-1, wall_ms=T0)


def test_bad_records_are_invalid_argument() -> None:
    records: list[str | bytes] = [
        '{"version":1,"reservation_id":"r-1","mode":"comm',
        b"\xff\xfe",
        "[]",
        '{"version":2}',
    ]
    for record in records:
        with pytest.raises(leasebeat.InvalidArgument):
            Settlement.from_record(record, now_ns=0, wall_ms=T0)


def test_calls_out_of_turn() -> None:
    s = Settlement.commit("r-1", COMMIT, now_ns=1000, wall_ms=T0)
    with pytest.raises(leasebeat.NotOutstanding):
        s.handle_sent(1, 1000)
    with pytest.raises(leasebeat.TimeWentBackwards):
        s.handle_persisted(999)
    s.handle_persisted(1000)
    with pytest.raises(leasebeat.NotOutstanding):
        s.handle_persisted(1000)
    with pytest.raises(leasebeat.NotSent):
        s.handle_response(1, 1000, T0, 200, None, OK)
    with pytest.raises(leasebeat.NotOutstanding):
        s.handle_sent(2, 1000)
    s.handle_sent(1, 1000)
    with pytest.raises(leasebeat.AlreadySent):
        s.handle_sent(1, 1000)
    with pytest.raises(leasebeat.InvalidArgument):
        s.handle_response(1, 2000, T0, 1000)
    with pytest.raises(leasebeat.InvalidArgument):
        s.handle_failure(1, "boom", 2000)
    d = s.handle_failure(1, leasebeat.TransportFailure.RESET, 2000)
    assert d.next == "commit" and d.delay_ms == 500 and d.attempt == 2
    assert s.failures == 1
