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
import os
import sys
import time
from collections.abc import Awaitable, Generator, Mapping
from types import TracebackType
from typing import Any, Protocol, TypeVar

from ._leasebeat import Decision, Heartbeat, Journal, Settlement, Stopped, TransportFailure
from ._runner import (
    INFLIGHT,
    NOTHING_TO_FINALIZE,
    HeartbeatFailed,
    HeartbeatFailure,
    HeartbeatPolicy,
    HttpResponse,
    Listener,
    NoReservation,
    Request,
    SettleResult,
    TransportError,
    _Blocking,
    _Hp1,
    _Jeopardy,
    _PolicyListener,
    _Send,
    _Slack,
    _Sleep,
    _wall_ms,
    attempt_deadline_ns,
    call_listener,
    claim_replay,
    commit_body,
    due_of,
    event_of,
    log,
    on_wake,
    open_journal,
    replay_steps,
    request_for,
    settle_steps,
    wake_target,
)

__all__ = ["AsyncTransport", "Lease", "flush", "replay", "run", "start"]

_T = TypeVar("_T")


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
    event = event_of(hb, None) if commit is not None else None
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
        await _end(hb, transport, listener, final, release_on_stop, commit, event)
        raise
    assert final is not None
    await _end(hb, transport, listener, final, release_on_stop, commit, event)
    return final


async def _end(
    hb: Heartbeat,
    transport: AsyncTransport,
    listener: Listener | None,
    final: Decision | None,
    release_on_stop: bool,
    commit: Mapping[str, Any] | None,
    event: Mapping[str, Any] | None,
) -> None:
    if final is not None:
        call_listener(listener, "on_stop", final)
    rid = hb.reservation_id
    if not (release_on_stop or commit is not None) or rid is None:
        return
    reason = hb.stop_reason
    if reason is not None and reason.value in NOTHING_TO_FINALIZE:
        return  # nothing left to release (after `expired` the server decides)
    budget = hb.request_timeout_ms or 10_000
    endpoint = "commit" if commit is not None else "release"
    try:
        if commit is not None:
            j = open_journal(None, transport, None, None)
            st = Settlement.commit(rid, {"actual": dict(commit)}, now_ns=time.monotonic_ns(), wall_ms=_wall_ms(),
                                   event=event, base_url=j.base_url if j is not None else None)
            steps = settle_steps(st, j, kind="commit", listener=listener, budget_ms=budget, stop_heartbeat=None)
        else:
            st = Settlement.release(rid, now_ns=time.monotonic_ns(), wall_ms=_wall_ms())
            steps = settle_steps(st, None, kind="release", listener=listener, budget_ms=budget, stop_heartbeat=None)
        # Shielded: a cancellation of the caller does not cut the settlement short.
        result = await asyncio.shield(asyncio.ensure_future(drive(steps, transport)))
    except (Exception, asyncio.CancelledError) as e:
        call_listener(listener, "on_finalize", endpoint, None, e)
        return
    if result.response is None:
        err = TransportError(TransportFailure.RESET, f"{endpoint} ended {result.outcome} without a response")
        call_listener(listener, "on_finalize", endpoint, None, err)
    else:
        call_listener(listener, "on_finalize", endpoint, result.response, None)


# ---------------------------------------------------------------- settlement


async def _wait_until(target_ns: int) -> bool:
    """Sleeps until ``target_ns``; False when a flush deadline passed."""
    while not INFLIGHT.abandon:
        left = target_ns - time.monotonic_ns()
        if left <= 0:
            return True
        await asyncio.sleep(min(left / 1e9, 0.05))
    return False


async def _send(transport: AsyncTransport, request: Request, deadline_ns: int | None) -> HttpResponse | TransportError:
    task = asyncio.ensure_future(transport(request, deadline_ns))
    timeout = None if deadline_ns is None else max(deadline_ns - time.monotonic_ns(), 0) / 1e9
    done, _ = await asyncio.wait({task}, timeout=timeout)
    if not done:
        task.cancel()
        return TransportError(TransportFailure.TIMEOUT, "attempt deadline")
    try:
        r: HttpResponse = task.result()
        return r
    except TransportError as e:
        return e
    except Exception as e:
        log.warning("leasebeat transport raised %r; reported as reset", e)
        return TransportError(TransportFailure.RESET, repr(e))


async def drive(steps: Generator[Any, Any, _T], transport: AsyncTransport) -> _T:
    """Runs the shared settle (or replay) loop on the event loop: sleeps as
    tasks, journal calls in a worker thread, requests as tasks bounded by
    their deadline."""
    INFLIGHT.enter()
    try:
        value: Any = None
        while True:
            try:
                effect = steps.send(value)
            except StopIteration as stop:
                result: _T = stop.value
                return result
            if isinstance(effect, _Sleep):
                value = await _wait_until(effect.until_ns)
            elif isinstance(effect, _Blocking):
                value = await asyncio.to_thread(effect.fn)
            else:
                assert isinstance(effect, _Send)
                value = await _send(transport, effect.request, effect.deadline_ns)
    finally:
        INFLIGHT.leave()


async def replay(
    journal: Journal, transport: AsyncTransport, *, listener: Listener | None = None, request_timeout_ms: int = 10_000
) -> list[SettleResult]:
    """``leasebeat.replay`` on the event loop: settles every record of
    ``journal``'s server (J-6); returns one SettleResult per record settled."""
    return await drive(replay_steps(journal, listener=listener, budget_ms=request_timeout_ms), transport)


async def flush(timeout: float | None = None) -> bool:
    """``leasebeat.flush`` without blocking the event loop (J-7)."""
    return await asyncio.to_thread(INFLIGHT.flush, timeout)


_BACKGROUND: set[asyncio.Task[Any]] = set()


class Lease:
    """A lease whose heartbeat runs as a task (``leasebeat.aio.start``), with
    its settlement: ``await lease.commit(actual, metrics, metadata)`` or
    ``await lease.release(reason)``.

    ``async with leasebeat.aio.start(...) as lease:`` binds the current task
    as the guarded work: under the ``cancel`` policy (HP-1) a heartbeat stop
    cancels it (asyncio cancellation) and ``async with`` raises
    HeartbeatFailed; ``lease.cancelled`` is the same signal as a thread-safe
    ``threading.Event`` for work running in threads. Leaving the block stops
    the heartbeat (a lease left without commit or release is logged: its
    reservation expires on the server)."""

    def __init__(
        self,
        heartbeat: Heartbeat,
        transport: AsyncTransport,
        *,
        listener: Listener | None,
        journal: Journal | None,
        policy: HeartbeatPolicy | str,
        event: Mapping[str, Any] | None,
        first_decision: Decision | None,
    ) -> None:
        self.heartbeat = heartbeat
        self.journal = journal
        self._transport = transport
        self._hp1 = _Hp1(policy, listener)
        self._listener = _PolicyListener(listener, self._hp1)
        self._event = event_of(heartbeat, event)
        self.cancelled = self._hp1.cancelled
        self._loop = asyncio.get_running_loop()
        self._work: asyncio.Task[Any] | None = None
        self._cancelled_work = False
        self._settled = False
        self._hp1.on_cancel = self._request_cancel
        self.task: asyncio.Task[Decision] = asyncio.ensure_future(
            run(heartbeat, transport, listener=self._listener, first_decision=first_decision)
        )

    def _request_cancel(self) -> None:
        self._loop.call_soon_threadsafe(self._cancel_work)

    def _cancel_work(self) -> None:
        w = self._work
        if w is not None and not w.done() and not self._hp1.settling:
            self._cancelled_work = True
            w.cancel()

    @property
    def heartbeat_failure(self) -> HeartbeatFailure | None:
        """The first heartbeat stop that was a failure (HP-1), or None."""
        return self._hp1.failure

    def _budget_ms(self) -> int:
        return self.heartbeat.request_timeout_ms or 10_000

    def _stop_heartbeat(self) -> None:
        if not self.task.done():
            self.task.cancel()

    async def _reservation(self) -> str:
        hb = self.heartbeat
        while hb.reservation_id is None and not self.task.done() and not hb.is_stopped:
            await asyncio.sleep(0.01)
        rid = hb.reservation_id
        if rid is None:
            raise NoReservation("the lease has no reservation (its create did not succeed)")
        if self._settled:
            raise Stopped(f"the lease {rid} is already settled (commit or release was sent)")
        self._settled = True
        self._hp1.settling = True
        return rid

    async def _settle(self, steps: Generator[Any, Any, SettleResult]) -> SettleResult:
        # Its own task, shielded: cancelling the caller does not cut the
        # settlement short (flush() still waits for it).
        task = asyncio.ensure_future(drive(steps, self._transport))
        _BACKGROUND.add(task)
        task.add_done_callback(_BACKGROUND.discard)
        result = await asyncio.shield(task)
        return self._hp1.after_settlement(result)

    async def commit(
        self,
        actual: Mapping[str, Any] | None,
        metrics: Mapping[str, Any] | None = None,
        metadata: Mapping[str, Any] | None = None,
        *,
        event: Mapping[str, Any] | None = None,
    ) -> SettleResult:
        """As ``Runner.commit`` (thread runner): journaled, retried with one
        key, event fallback, heartbeat kept until ``stop_heartbeat``."""
        rid = await self._reservation()
        j = self.journal
        base_url = j.base_url if j is not None else getattr(self._transport, "base_url", None)
        body = commit_body(actual, metrics, metadata)
        s = Settlement.commit(
            rid, body, now_ns=time.monotonic_ns(), wall_ms=_wall_ms(),
            event=event_of(self.heartbeat, event) if event is not None else self._event, base_url=base_url,
        )
        return await self._settle(
            settle_steps(s, j, kind="commit", listener=self._listener, budget_ms=self._budget_ms(),
                         stop_heartbeat=self._stop_heartbeat)
        )

    async def release(self, reason: str | None = None) -> SettleResult:
        """As ``Runner.release``: retried with one key, not journaled."""
        rid = await self._reservation()
        s = Settlement.release(rid, now_ns=time.monotonic_ns(), wall_ms=_wall_ms(), reason=reason)
        return await self._settle(
            settle_steps(s, None, kind="release", listener=self._listener, budget_ms=self._budget_ms(),
                         stop_heartbeat=self._stop_heartbeat)
        )

    async def stop(self) -> Decision | None:
        """Stops the heartbeat (no release) and returns its final decision."""
        self._stop_heartbeat()
        try:
            await asyncio.shield(self.task)
        except asyncio.CancelledError:
            if not self.task.done():
                raise
        except Exception:
            log.exception("leasebeat heartbeat task failed")
        return self.heartbeat.last_decision

    async def flush(self, timeout: float | None = None) -> bool:
        """J-7 (``leasebeat.aio.flush``)."""
        return await flush(timeout)

    async def __aenter__(self) -> Lease:
        self._work = asyncio.current_task()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._work = None
        if not self._settled:
            log.warning("leasebeat: lease %s left without commit or release", self.heartbeat.reservation_id)
        await self.stop()
        if self._cancelled_work and isinstance(exc, asyncio.CancelledError) and self._hp1.failure is not None:
            task = asyncio.current_task()
            if task is not None and sys.version_info >= (3, 11):
                task.uncancel()
            raise HeartbeatFailed(self._hp1.failure, None) from exc


def start(
    heartbeat: Heartbeat,
    transport: AsyncTransport,
    *,
    listener: Listener | None = None,
    journal: Journal | bool | None = None,
    journal_dir: str | os.PathLike[str] | None = None,
    tenant: str | None = None,
    policy: HeartbeatPolicy | str = "warn",
    event: Mapping[str, Any] | None = None,
    first_decision: Decision | None = None,
    replay_on_start: bool = True,
) -> Lease:
    """Starts ``heartbeat`` as a task of the running loop and returns its Lease.
    Journal, policy, event and replay as for ``leasebeat.run``: the first
    lease of a process on a partition replays it as a background task."""
    j = open_journal(journal, transport, journal_dir, tenant)
    lease = Lease(heartbeat, transport, listener=listener, journal=j, policy=policy, event=event,
                  first_decision=first_decision)
    if replay_on_start and j is not None and claim_replay(j):
        INFLIGHT.enter()  # counted from now: a flush right after start waits for it
        task = asyncio.ensure_future(
            drive(replay_steps(j, listener=lease._listener, budget_ms=lease._budget_ms()), transport)
        )
        _BACKGROUND.add(task)

        def done(t: asyncio.Task[Any]) -> None:
            _BACKGROUND.discard(t)
            INFLIGHT.leave()
            if not t.cancelled() and t.exception() is not None:
                log.error("leasebeat journal replay failed: %r", t.exception())

        task.add_done_callback(done)
    return lease
