"""The ready heartbeat loop for asyncio: ``await leasebeat.aio.run(...)``.

The coroutine runs one lease until it stops and returns the final stop
Decision. Cancel its task to stop it (any number of times): the heartbeat is
cancelled, the stop is reported, the optional release/commit is sent, and
CancelledError propagates. An attempt in flight is cancelled and its late
outcome ignored. Same waiting, deadline and jeopardy rules as
``leasebeat.run`` (thread runner); every heartbeat call is non-blocking, so
nothing here blocks the event loop.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Mapping
from typing import Any, Protocol

from ._leasebeat import Decision, Heartbeat, TransportFailure
from ._runner import (
    MS,
    NOTHING_TO_FINALIZE,
    HttpResponse,
    Listener,
    Request,
    TransportError,
    _Jeopardy,
    _Slack,
    attempt_deadline_ns,
    call_listener,
    due_of,
    finalize_request,
    log,
    on_wake,
    request_for,
    wake_target,
)

__all__ = ["AsyncTransport", "run"]


class AsyncTransport(Protocol):
    """``await transport(request, deadline_ns)`` -> HttpResponse, or raises TransportError."""

    def __call__(self, request: Request, deadline_ns: int | None, /) -> Awaitable[HttpResponse]: ...


async def _sleep_until(target_ns: int | None) -> None:
    if target_ns is None:
        await asyncio.Event().wait()  # until cancelled
        return
    left = target_ns - time.monotonic_ns()
    if left > 0:
        await asyncio.sleep(left / 1e9)


async def run(
    heartbeat: Heartbeat,
    transport: AsyncTransport,
    *,
    listener: Listener | None = None,
    release_on_stop: bool = False,
    commit: Mapping[str, Any] | None = None,
    first_decision: Decision | None = None,
) -> Decision:
    """Runs ``heartbeat`` until it stops (or the task is cancelled); returns the stop.

    ``release_on_stop=True`` releases the reservation when the run ends
    (``commit={"unit": ..., "amount": ...}`` commits with that actual
    instead). ``first_decision`` is the decision ``Heartbeat.adopt_create``
    returned, reported first.
    """
    hb = heartbeat
    slack = _Slack()
    jeop = _Jeopardy(listener)
    task: asyncio.Future[HttpResponse] | None = None
    final: Decision | None = None
    try:
        if first_decision is not None:
            call_listener(listener, "on_decision", first_decision)
        while True:
            action = hb.poll_action()
            if action.is_stop:
                final = hb.last_decision
                break
            attempt = action.attempt
            assert attempt is not None
            due = due_of(hb, action.due_ns)
            while True:
                target, fire = wake_target(hb, jeop, slack, due)
                await _sleep_until(target)
                if on_wake(hb, jeop, slack, due, target, fire):
                    break
            now = time.monotonic_ns()
            if due is not None:
                jeop.late(hb, now, due)
            hb.handle_sent(attempt.id, now)
            sent = now
            deadline = attempt_deadline_ns(hb, sent)
            request = request_for(hb, attempt)
            task = asyncio.ensure_future(transport(request, deadline))
            outcome: HttpResponse | TransportError | None = None
            while outcome is None:
                now = time.monotonic_ns()
                pu = jeop.proven_until(hb)
                targets = [t for t in (deadline, pu) if t is not None]
                timeout = None if not targets else max(min(targets) - now, 0) / 1e9
                done, _ = await asyncio.wait({task}, timeout=timeout)
                if done:
                    try:
                        outcome = task.result()
                    except TransportError as e:
                        outcome = e
                    except Exception as e:
                        log.warning("leasebeat transport raised %r; reported as reset", e)
                        outcome = TransportError(TransportFailure.RESET, repr(e))
                    break
                now = time.monotonic_ns()
                if deadline is not None and now >= deadline:
                    task.cancel()
                    outcome = TransportError(TransportFailure.TIMEOUT, "attempt deadline")
                    break
                jeop.check(hb, now, attempt.due_ns)
            task = None
            now = max(time.monotonic_ns(), sent)
            if isinstance(outcome, TransportError):
                decision = hb.handle_failure(attempt.id, now, outcome.kind)
            else:
                decision = hb.handle_response(attempt.id, now, outcome.status, outcome.headers, outcome.body)
            call_listener(listener, "on_decision", decision)
            if decision.is_stop:
                final = decision
                break
    except asyncio.CancelledError:
        if task is not None:
            task.cancel()  # its late outcome is ignored
        if not hb.is_stopped:
            final = hb.cancel(max(time.monotonic_ns(), hb.last_event_ns))
            call_listener(listener, "on_decision", final)
        else:
            final = hb.last_decision
        await _end(hb, transport, listener, final, release_on_stop, commit)
        raise
    assert final is not None
    await _end(hb, transport, listener, final, release_on_stop, commit)
    return final


async def _end(
    hb: Heartbeat,
    transport: AsyncTransport,
    listener: Listener | None,
    final: Decision | None,
    release_on_stop: bool,
    commit: Mapping[str, Any] | None,
) -> None:
    if final is not None:
        call_listener(listener, "on_stop", final)
    rid = hb.reservation_id
    if not (release_on_stop or commit is not None) or rid is None:
        return
    reason = hb.stop_reason
    if reason is not None and reason.value in NOTHING_TO_FINALIZE:
        return  # nothing left to release (after `expired` the server decides)
    request = finalize_request(rid, commit)
    budget = hb.request_timeout_ms or 10_000
    try:
        r = await asyncio.shield(asyncio.ensure_future(transport(request, time.monotonic_ns() + budget * MS)))
    except (Exception, asyncio.CancelledError) as e:
        call_listener(listener, "on_finalize", request.endpoint, None, e)
        return
    call_listener(listener, "on_finalize", request.endpoint, r, None)
