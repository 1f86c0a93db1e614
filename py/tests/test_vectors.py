"""Replays every scenario vector in tests/vectors/ through the Python API.

The files are discovered at run time (one test per file). The directory is
``<repo>/tests/vectors`` (found from this file's location), or the one named by
the environment variable ``LEASEBEAT_VECTORS_DIR``.

Like the Rust replay (core/src/scenario.rs), the harness checks more than the
core claims about itself: it remembers every key and body it sent, so
``"key": "new"`` means "never used before on this lease" and ``"key": "same"``
means "exactly the previous attempt's key, with a byte-identical body". It also
checks that every attribute of each Decision agrees with ``to_json()``.

Numbers are read exactly: integers by Python's json (any size), and decimals
as their literal text (``parse_float``), converted with ``decimal.Decimal``:
ns = round(ms x 1000) x 1000.
"""

from __future__ import annotations

import json
import math
import os
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

import pytest

import leasebeat
from leasebeat import ActionKind, Heartbeat, KeyUse, Next

VECTORS_DIR = Path(
    os.environ.get("LEASEBEAT_VECTORS_DIR")
    or Path(__file__).resolve().parents[2] / "tests" / "vectors"
)
FILES = sorted(VECTORS_DIR.glob("*.json"))


class RawFloat(str):
    """A JSON number that is not an integer literal, kept as its exact text."""


def _no_constants(name: str) -> Any:
    raise ValueError(f"non-standard JSON constant {name}")


def load(text: str) -> Any:
    return json.loads(text, parse_float=RawFloat, parse_constant=_no_constants)


def dump(v: Any) -> str:
    """Serializes parsed JSON back to compact text, number literals unchanged."""
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


def ms_to_ns(v: Any) -> int:
    """Scenario milliseconds (integer, or up to 3 decimals) to nanoseconds."""
    if isinstance(v, bool) or not isinstance(v, (int, RawFloat)):
        raise ValueError(f"time {v!r} is not a number")
    d = Decimal(str(v))
    if not d.is_finite() or d < 0:
        raise ValueError(f"time {v!r} must be a non-negative number of ms")
    micros = (d * 1000).to_integral_value(rounding=ROUND_HALF_UP)
    return int(micros) * 1000


def expected_num(v: Any) -> int | float:
    if v == "inf":
        return math.inf
    if v == "-inf":
        return -math.inf
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    raise ValueError(f"{v!r} must be an integer, 'inf' or '-inf'")


def json_num(v: int | float) -> int | str:
    if v == math.inf:
        return "inf"
    if v == -math.inf:
        return "-inf"
    assert isinstance(v, int) and not isinstance(v, bool), v
    return v


class Mismatch(AssertionError):
    pass


def fail(sid: str, step: int, field: str, expected: Any, got: Any) -> Mismatch:
    return Mismatch(f"{sid} step {step}: {field}: expected {expected!r}, got {got!r}")


def check_consistency(
    sid: str, i: int, hb: Heartbeat, d: leasebeat.Decision, emitted: dict[str, Any]
) -> None:
    """Every attribute of the Decision agrees with its to_json() and the heartbeat."""

    def same(field: str, attr: Any, js: Any) -> None:
        if attr != js:
            raise fail(sid, i, f"consistency of {field}", js, attr)

    same("next", d.next.value, emitted["next"])
    assert isinstance(d.next, Next)
    same("reason", None if d.reason is None else d.reason.value, emitted.get("reason"))
    same("mode", None if d.mode is None else d.mode.value, emitted.get("mode"))
    same("warnings", [w.value for w in d.warnings], emitted["warnings"])
    nums = d.numbers.to_dict()
    same("numbers", {k: json_num(v) for k, v in nums.items()}, emitted["numbers"])
    for name in leasebeat.Numbers.NAMES:
        same(f"numbers.{name}", getattr(d.numbers, name), nums.get(name))
    same("is_stop", d.is_stop, d.next == Next.STOP)
    pu = emitted.get("proven_until")
    if d.proven_until_ns is None:
        same("proven_until", None, pu)
    elif d.proven_until_ns == leasebeat.INFINITE_NS:
        same("proven_until", "inf", pu)
    elif d.proven_until_ns % 1_000_000 == 0:
        same("proven_until", d.proven_until_ns // 1_000_000, pu)
    else:
        same("proven_until (fractional)", True, isinstance(pu, float) and ms_to_ns(RawFloat(repr(pu))) == d.proven_until_ns)
    same("expires_at_ms", d.expires_at_ms, emitted.get("expires_at_ms"))
    same("remaining_ttl_ms", d.remaining_ttl_ms, emitted.get("remaining_ttl_ms"))
    same("last_decision", hb.last_decision, d)
    same("to_json_str", json.loads(d.to_json_str()), d.to_json())
    if hash(d) != hash(hb.last_decision):
        raise fail(sid, i, "hash", hash(hb.last_decision), hash(d))
    action = hb.poll_action()
    if d.is_stop:
        same("reason vs heartbeat", hb.stop_reason, d.reason)
        same("action", action.action, ActionKind.STOP)
        same("action.reason", action.reason, d.reason)
        same("key_use", d.key_use, None)
        same("at_ns", d.at_ns, None)
        return
    same("key", None if d.key_use is None else d.key_use.value, emitted.get("key"))
    same("key_index", d.key_index, emitted.get("key_index"))
    at = emitted["at"]
    if d.at_ns is None:
        same("at", "inf", at)
    elif d.at_ns % 1_000_000 == 0:
        same("at", d.at_ns // 1_000_000, at)
    else:
        same("at (fractional)", True, isinstance(at, float) and ms_to_ns(RawFloat(repr(at))) == d.at_ns)
    same("action", action.action, ActionKind.SEND)
    same("action.kind", action.kind.value if action.kind else None, d.next.value)
    same("action.due_ns", action.due_ns, d.at_ns)
    same("action.key_index", action.key_index, d.key_index)
    same("action.key_use", action.key_use, d.key_use)
    same("poll_timeout", hb.poll_timeout(), d.at_ns)


def compare(sid: str, i: int, expect: dict[str, Any], d: leasebeat.Decision, emitted: dict[str, Any]) -> None:
    for field, want in expect.items():
        if field == "at":
            if d.is_stop:
                raise fail(sid, i, "at", want, "absent (a stop)")
            want_ns = None if want == "inf" else ms_to_ns(want)
            if d.at_ns != want_ns:
                raise fail(sid, i, "at", want, emitted.get("at"))
        elif field == "proven_until":
            want_ns = leasebeat.INFINITE_NS if want == "inf" else ms_to_ns(want)
            if d.proven_until_ns != want_ns:
                raise fail(sid, i, "proven_until", want, emitted.get("proven_until", "absent"))
        elif field in ("expires_at_ms", "remaining_ttl_ms"):
            got = getattr(d, field)
            if got != want or type(got) is not type(want):
                raise fail(sid, i, field, want, "absent" if got is None else got)
        elif field == "numbers":
            for name, v in want.items():
                w = expected_num(v)
                got = getattr(d.numbers, name)
                if got is None:
                    raise fail(sid, i, f"numbers.{name}", v, "absent")
                if type(got) is not type(w) or got != w:
                    raise fail(sid, i, f"numbers.{name}", v, got)
        elif field == "warnings":
            got = emitted.get("warnings", [])
            if got != want:
                raise fail(sid, i, "warnings", want, got)
        else:
            got = emitted.get(field)
            if got != want or type(got) is not type(want):
                raise fail(sid, i, field, want, "absent" if got is None else got)


def recv_body(r: dict[str, Any]) -> bytes | str | None:
    """The raw body of a ``recv`` object: ``body`` serialized, or ``raw`` as given."""
    if "body" in r:
        return dump(r["body"]).encode("utf-8")
    if "raw" in r:
        return str(r["raw"])  # str: the binding encodes it as UTF-8
    return None


def replay(path: Path) -> list[dict[str, Any]]:
    s = load(path.read_text(encoding="utf-8"))
    sid = s["id"]
    cfg = s["config"]
    ttl_ms = cfg.get("ttl_ms", leasebeat.DEFAULT_TTL_MS)
    create_request = cfg.get("create_request")
    used_keys: set[str] = set()
    current: tuple[str, bytes] | None = None
    decisions: list[dict[str, Any]] = []
    adopted: leasebeat.Decision | None = None
    first = s["steps"][0] if s["steps"] else {}
    if "adopt" in first:
        a = first["adopt"]
        request = a.get("request")
        request_body = None if request is None else dump(request).encode("utf-8")
        outcome: dict[str, Any]
        if "recv" in a:
            r = a["recv"]
            outcome = {
                "status": r["status"],
                "headers": r.get("headers", {}),
                "body": recv_body(r),
                "timing_unknown": r.get("timing") == "unknown",
            }
        else:
            outcome = {"failure": a["fail"]}
        hb, adopted = Heartbeat.adopt_create(
            ttl_ms,
            cfg.get("request_timeout_ms"),
            key=a["key"],
            sent_ns=None if "sent" not in a else ms_to_ns(a["sent"]),
            received_ns=ms_to_ns(first["at"]),
            request_body=request_body,
            create_request=create_request,
            key_prefix="key-",
            **outcome,
        )
        if request_body is None:
            # The body the core builds from the config (serde_json: members sorted).
            default = {**(create_request or {}), "idempotency_key": a["key"], "ttl_ms": ttl_ms}
            request_body = json.dumps(default, sort_keys=True, separators=(",", ":")).encode()
        used_keys.add(a["key"])
        current = (a["key"], request_body)
    else:
        hb = Heartbeat(
            ttl_ms,
            cfg.get("request_timeout_ms"),
            create_request=create_request,
            key_prefix="key-",
        )
    for i, step in enumerate(s["steps"]):
        at_ns = ms_to_ns(step["at"])
        if "adopt" in step:
            if i != 0 or adopted is None:
                raise ValueError(f"step {i}: adopt is only allowed as the first step")
            d = adopted
        elif "send" in step:
            action = hb.poll_action()
            if action.action != ActionKind.SEND:
                raise fail(sid, i, "send", f"send {step['send']}", repr(action))
            assert action.attempt is not None and action.attempt_id is not None
            if action.kind != step["send"]:
                raise fail(sid, i, "send", step["send"], action.kind)
            hb.handle_sent(action.attempt_id, at_ns)
            current = (action.attempt.key, action.attempt.body)
            used_keys.add(action.attempt.key)
            continue
        elif "cancel" in step:
            d = hb.cancel(at_ns)
        else:
            action = hb.poll_action()
            if action.action != ActionKind.AWAIT_OUTCOME or action.attempt_id is None:
                raise fail(sid, i, "outcome", "an attempt in flight", repr(action))
            if "recv" in step:
                r = step["recv"]
                d = hb.handle_response(
                    action.attempt_id,
                    at_ns,
                    r["status"],
                    r.get("headers", {}),
                    recv_body(r),
                    timing_unknown=r.get("timing") == "unknown",
                )
            elif "fail" in step:
                d = hb.handle_failure(action.attempt_id, at_ns, step["fail"])
            else:
                raise ValueError(f"step {i}: no event")
        emitted = {"id": sid, "step": i, **d.to_json()}
        # The harness's own check of S-4: what the key claim means in bytes.
        attempt = hb.attempt
        if d.key_use is not None:
            assert attempt is not None
            if d.key_use == KeyUse.NEW:
                ok = attempt.key not in used_keys
            else:
                ok = current is not None and current == (attempt.key, attempt.body)
            if not ok:
                raise fail(sid, i, "key", f"a {d.key_use.value} key really {d.key_use.value}", attempt.key)
        check_consistency(sid, i, hb, d, emitted)
        decisions.append(emitted)
        if "expect" in step:
            compare(sid, i, step["expect"], d, emitted)
    return decisions


def test_vectors_found() -> None:
    assert FILES, f"no scenario vectors found in {VECTORS_DIR}"


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_vector(path: Path) -> None:
    replay(path)


def test_ms_to_ns_is_exact() -> None:
    assert ms_to_ns(load("0.001")) == 1_000
    assert ms_to_ns(load("38500.5")) == 38_500_500_000
    assert ms_to_ns(load("1785585660000.123")) == 1_785_585_660_000_123_000
    assert ms_to_ns(load("18446744073709")) == 18_446_744_073_709_000_000
    assert ms_to_ns(load("0.0005")) == 1_000  # rounds half up, like Rust's f64::round
    with pytest.raises(ValueError):
        ms_to_ns(load("-1"))


def test_dump_keeps_number_literals() -> None:
    text = '{"a":60000.0,"b":6e4,"c":[1,-2,null,true,"x\\u00e9"],"d":18446744073709551617}'
    assert dump(load(text)) == '{"a":60000.0,"b":6e4,"c":[1,-2,null,true,"xé"],"d":18446744073709551617}'
