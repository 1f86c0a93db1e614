"""leasebeat: the one audited lease-heartbeat scheduler for Cycles reservations.

A Cycles reservation holds budget or action authority until a
server-authoritative expiry; long work keeps it alive with
``POST /v1/reservations/{id}/extend``. This package decides *when* to extend,
when to retry with the same idempotency key and when to stop. It is sans-IO:
it never reads a clock, opens a socket or starts a thread. You feed it
``time.monotonic_ns()`` readings and raw HTTP outcomes; it answers with the
next Action and a Decision carrying the numbers behind it. Every rule lives
in the Rust core (crate ``leasebeat``); this package is a thin binding.

Quick start::

    import time, leasebeat

    hb = leasebeat.Heartbeat(ttl_ms=60000, request_timeout_ms=10000,
                             create_request={"subject": {...}, "action": {...},
                                             "estimate": {...}})
    while True:
        action = hb.poll_action()
        if action.is_stop:
            break                                # action.reason says why
        # wait until action.due_ns (time.monotonic_ns() clock; None = never)
        hb.handle_sent(action.attempt_id, time.monotonic_ns())
        # POST action.body with header X-Idempotency-Key: action.key ...
        decision = hb.handle_response(action.attempt_id, time.monotonic_ns(),
                                      status, headers, body)
        log(decision.to_json())                  # every decision is observable

The ready loop: ``runner = leasebeat.run(hb, leasebeat.transports.UrllibTransport(url,
api_key), listener=...)`` runs the lease on a daemon thread (``runner.stop()``,
``runner.join()``, ``runner.result``); ``await leasebeat.aio.run(...)`` is the
asyncio coroutine. They wait, send, enforce each attempt's whole deadline,
report decisions and ``lease_in_jeopardy`` and hold no rule.

A reservation created elsewhere starts with an immediate extension instead
of a create: ``leasebeat.Heartbeat.for_reservation("rsv-9", ttl_ms=60000,
request_timeout_ms=10000)``; the loop is the same.

Settlement (commit, the expired-commit event fallback, release; rules
ST-1..ST-11 of settlement.md) is the same kind of sans-IO machine::

    s = leasebeat.Settlement.commit("rsv-9", {"actual": {"unit": "TOKENS", "amount": 900}},
                                    event={"subject": {...}, "action": {...}},
                                    now_ns=time.monotonic_ns(), wall_ms=time.time_ns() // 10**6)
    while (a := s.poll_action()).kind != leasebeat.SettleActionKind.DONE:
        if a.kind == "persist":                  # write a.record_json durably first
            s.handle_persisted(time.monotonic_ns())
        elif a.kind == "send":                   # at a.due_ns: POST to a.endpoint
            s.handle_sent(a.attempt_id, time.monotonic_ns())
            s.handle_response(a.attempt_id, time.monotonic_ns(), wall_ms, status, headers, body)
    a.outcome                                    # SettleOutcome.COMMITTED, ...

``Settlement.from_record(text, now_ns=..., wall_ms=...)`` resumes from the durable
record alone (same key). ``leasebeat.Journal`` is the durable journal (J-1..J-8):
``persist``/``finish`` around a settlement, ``replay`` after a restart.

The runners settle through both: ``runner.commit(actual, metrics, metadata)`` /
``runner.release(reason)`` (thread) and ``await lease.commit(...)`` (asyncio,
``leasebeat.aio.start``); the journal is on by default, replayed on start;
``leasebeat.flush(timeout)`` drains; ``policy=`` is the heartbeat failure policy.

Numbers: every millisecond quantity is an ``int``, or ``float('inf')`` for
+infinity (an unbounded budget, an overflowing value) and ``float('-inf')``
for -infinity (the retry window when the budget is unbounded). Times are
integer nanoseconds; a due time of +infinity is ``None`` ("never").

Errors: every error of the core is a ``LeaseError`` subclass with a stable
``code`` (``TimeWentBackwards``, ``NotOutstanding``, ``NotSent``,
``AlreadySent``, ``Stopped``, ``InvalidKey``, ``InvalidConfig``,
``InvalidArgument``). Bad values (negative or too large integers, a status
outside 100..=999, an unknown failure name, a non-finite float) raise
``InvalidArgument``; ``InvalidArgument``, ``InvalidConfig`` and
``TimeWentBackwards`` are also ``ValueError``. A wrong type (a ``float`` or
``bool`` where an ``int`` is needed, ...) raises a plain ``TypeError``. A call
that raises changes nothing.

Threads and asyncio: a Heartbeat may be shared between threads (calls
serialize on an internal lock and never deadlock); every call is fast and
non-blocking, so it can be called directly from a coroutine.
"""

from __future__ import annotations

import os as _os

from . import _leasebeat as _leasebeat
from ._leasebeat import (
    DEFAULT_TTL_MS,
    INFINITE_NS,
    MAX_KEY_CHARS,
    MAX_TTL_MS,
    MIN_TTL_MS,
    Action,
    ActionKind,
    AlreadySent,
    Attempt,
    AttemptKind,
    Decision,
    DecisionWarning,
    FallbackCadence,
    Heartbeat,
    Journal,
    JournalCorrupt,
    JournalError,
    JournalInvalidRecord,
    JournalIOError,
    JournalNotFinished,
    JournalMisplaced,
    JournalNoDirectory,
    JournalNoSpace,
    JournalNotADirectory,
    JournalNotWritable,
    JournalScan,
    JournalSymlink,
    MigratedRecord,
    QuarantinedRecord,
    Replay,
    SkippedFile,
    Settlement,
    SettlementAction,
    SettlementDecision,
    SettleActionKind,
    SettleClass,
    SettleMode,
    SettleNext,
    SettleOutcome,
    SettleWarning,
    InvalidArgument,
    InvalidConfig,
    InvalidKey,
    KeyUse,
    LeaseError,
    Mode,
    Next,
    NotOutstanding,
    NotSent,
    Numbers,
    OutcomeClass,
    PrimarySchedule,
    RetryAfterError,
    RetryWindow,
    Stopped,
    StopReason,
    TimeWentBackwards,
    TransportFailure,
    __version__,
    attempt_budget,
    ceil_ms,
    fallback_cadence,
    fallback_skips,
    hold_cadence,
    parse_retry_after,
    primary_schedule,
    retry_reserve,
    retry_window,
    safety_margin,
)

# Random keys come from a per-thread CSPRNG that fork() does not reseed: a
# forked child (multiprocessing's "fork" start method, os.fork) would draw its
# parent's idempotency keys. Reseed it in every child.
if hasattr(_os, "register_at_fork"):
    _os.register_at_fork(after_in_child=_leasebeat._reseed_after_fork)

from . import aio, transports
from ._runner import (
    HeartbeatFailed,
    HeartbeatFailure,
    HeartbeatPolicy,
    HttpResponse,
    Jeopardy,
    Listener,
    NoReservation,
    Request,
    Runner,
    SettleResult,
    Transport,
    TransportError,
    flush,
    replay,
    run,
)

#: Every LeaseError subclass by its stable ``code``.
ERRORS_BY_CODE: dict[str, type[LeaseError]] = {
    cls.code: cls
    for cls in (
        InvalidConfig,
        InvalidArgument,
        TimeWentBackwards,
        NotOutstanding,
        NotSent,
        AlreadySent,
        Stopped,
        InvalidKey,
    )
}

__all__ = [
    "transports",
    "run",
    "flush",
    "replay",
    "HeartbeatFailed",
    "HeartbeatFailure",
    "HeartbeatPolicy",
    "NoReservation",
    "SettleResult",
    "Journal",
    "JournalCorrupt",
    "JournalError",
    "JournalInvalidRecord",
    "JournalIOError",
    "JournalNotFinished",
    "JournalMisplaced",
    "JournalNoDirectory",
    "JournalNoSpace",
    "JournalNotADirectory",
    "JournalNotWritable",
    "JournalScan",
    "JournalSymlink",
    "MigratedRecord",
    "QuarantinedRecord",
    "Replay",
    "SkippedFile",
    "aio",
    "TransportError",
    "Transport",
    "Runner",
    "Request",
    "Listener",
    "Jeopardy",
    "HttpResponse",
    "DEFAULT_TTL_MS",
    "ERRORS_BY_CODE",
    "INFINITE_NS",
    "MAX_KEY_CHARS",
    "MAX_TTL_MS",
    "MIN_TTL_MS",
    "Action",
    "ActionKind",
    "AlreadySent",
    "Attempt",
    "AttemptKind",
    "Decision",
    "DecisionWarning",
    "FallbackCadence",
    "Heartbeat",
    "Settlement",
    "SettlementAction",
    "SettlementDecision",
    "SettleActionKind",
    "SettleClass",
    "SettleMode",
    "SettleNext",
    "SettleOutcome",
    "SettleWarning",
    "InvalidArgument",
    "InvalidConfig",
    "InvalidKey",
    "KeyUse",
    "LeaseError",
    "Mode",
    "Next",
    "NotOutstanding",
    "NotSent",
    "Numbers",
    "OutcomeClass",
    "PrimarySchedule",
    "RetryAfterError",
    "RetryWindow",
    "StopReason",
    "Stopped",
    "TimeWentBackwards",
    "TransportFailure",
    "__version__",
    "attempt_budget",
    "ceil_ms",
    "fallback_cadence",
    "fallback_skips",
    "hold_cadence",
    "parse_retry_after",
    "primary_schedule",
    "retry_reserve",
    "retry_window",
    "safety_margin",
]

