"""Heartbeat scheduling delegated to leasebeat (the audited core shared by
every Cycles SDK).

Before this module, ``lifecycle.py`` and ``streaming.py`` each carried their
own copy of the heartbeat loop (sync and async lifecycles, sync and async
streams) with the scheduling arithmetic inlined. All four now call
``run_sync`` / ``run_async`` below, which hold **no rule**: when to beat,
which idempotency key to use, when to retry with the same key and when to
stop are decided by ``leasebeat.Heartbeat``. This module only

* adopts the SDK's own create (``Heartbeat.adopt_create``: its response,
  send and receive instants), so no extra extension is spent;
* waits for each due time on the SDK's clock (``lifecycle._now_mono_ms``)
  and the caller's stop primitive (``threading.Event.wait`` /
  ``asyncio.sleep`` + cancellation);
* sends each extension through the SDK's own client
  (``client.extend_reservation``) under the SDK's whole-attempt deadline
  (``_run_sync_attempt`` / ``_run_async_attempt``);
* feeds the outcome back and logs every decision with the reservation id
  and its disposition, and writes ``expires_at_ms`` into the context;
* logs ``lease_in_jeopardy`` (D-15) when a wake-up or an outcome comes at or
  after the last decision's ``proven_until_ns``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx
import leasebeat

from runcycles.response import CyclesResponse

try:  # the binding's runner policy (budget minus detection slack)
    from leasebeat._runner import attempt_deadline_ns as _attempt_deadline_ns
except ImportError:  # pragma: no cover - an older binding: the whole budget

    def _attempt_deadline_ns(hb: leasebeat.Heartbeat, sent_ns: int) -> int | None:
        budget = leasebeat.attempt_budget(hb.request_timeout_ms, hb.max_rtt_ms)
        return None if budget == math.inf else sent_ns + int(budget) * NS_PER_MS


logger = logging.getLogger("runcycles.lifecycle")

NS_PER_MS = 1_000_000

_PERMANENT = {
    leasebeat.StopReason.EXPIRED: "RESERVATION_EXPIRED",
    leasebeat.StopReason.FINALIZED: "RESERVATION_FINALIZED",
    leasebeat.StopReason.MAX_EXTENSIONS: "MAX_EXTENSIONS_EXCEEDED",
    leasebeat.StopReason.TENANT_CLOSED: "TENANT_CLOSED",
    leasebeat.StopReason.NOT_FOUND: "NOT_FOUND",
}

_NOT_STARTED = {
    leasebeat.StopReason.NO_RESERVATION,
    leasebeat.StopReason.CREATE_FAILED,
    leasebeat.StopReason.CREATE_REJECTED,
}


@dataclass(frozen=True)
class AdoptedCreate:
    """The SDK's own create, as its client saw it."""

    key: str
    response: CyclesResponse
    sent_ms: float
    received_ms: float


def request_timeout_ms(timeout_budget_ms: float) -> int | None:
    """The SDK's enforced whole-attempt deadline as leasebeat's config."""
    if not math.isfinite(timeout_budget_ms):
        return None
    return max(1, math.ceil(timeout_budget_ms))


def _ns(ms: float) -> int:
    return max(0, int(round(ms * NS_PER_MS)))


def _body_bytes(response: CyclesResponse) -> bytes:
    if response.body is None:
        return b""
    return json.dumps(response.body).encode()


def _failure_kind(exc: BaseException | None) -> str:
    if isinstance(exc, (TimeoutError, asyncio.TimeoutError, httpx.TimeoutException)):
        return "timeout"
    if isinstance(exc, httpx.ConnectError):
        return "connect"
    return "reset"


def adopt(
    reservation_id: str,
    ttl_ms: int,
    timeout_budget_ms: float,
    now_ms: float,
    *,
    create: AdoptedCreate | None = None,
    expires_at_ms: int | None = None,
    initial_remaining_ms: int | None = None,
    initial_rtt_ms: float | None = None,
    initial_received_ms: float | None = None,
) -> tuple[leasebeat.Heartbeat, leasebeat.Decision | None]:
    """A heartbeat for this reservation, taking over the SDK's create.

    With ``create`` (the production path) the create's raw outcome is
    adopted as is. The private ``_start_heartbeat`` signature only carries
    the create's numbers: then the create's schema-valid answer is rebuilt
    from them (an unknown rtt counts as 0 and an unknown receipt as now, as
    the SDK always did). With neither ``remaining_ttl_ms`` nor
    ``expires_at_ms`` nothing anchors the lease: the core stops
    ``no_reservation`` and the heartbeat does not start.
    """
    timeout = request_timeout_ms(timeout_budget_ms)
    ttl = min(max(ttl_ms, 1000), 86_400_000)
    if create is not None:
        r = create.response
        return leasebeat.Heartbeat.adopt_create(
            ttl,
            timeout,
            key=create.key,
            sent_ns=_ns(create.sent_ms),
            received_ns=_ns(create.received_ms),
            status=r.status,
            headers=r.headers,
            body=_body_bytes(r),
        )
    received = now_ms if initial_received_ms is None else initial_received_ms
    rtt = initial_rtt_ms if initial_rtt_ms is not None and math.isfinite(initial_rtt_ms) else 0.0
    body: dict[str, Any] = {"decision": "ALLOW", "reservation_id": reservation_id, "affected_scopes": []}
    if expires_at_ms is not None:
        body["expires_at_ms"] = expires_at_ms
    if initial_remaining_ms is not None:
        body["remaining_ttl_ms"] = initial_remaining_ms
    return leasebeat.Heartbeat.adopt_create(
        ttl,
        timeout,
        key=f"adopted-{reservation_id}"[:256],
        sent_ns=_ns(max(0.0, received - rtt)),
        received_ns=_ns(received),
        status=200,
        body=json.dumps(body).encode(),
    )


class _Reporter:
    """Logs every decision with the reservation id and its disposition, in
    the SDK's established wording, and keeps the context's expiry."""

    def __init__(self, reservation_id: str, ctx: Any) -> None:
        self.rid = reservation_id
        self.ctx = ctx
        self.clamp_warned = False
        self.proven_until_ns: int | None = None
        self.reported_proven: int | None = None
        self.succeeded = False

    def jeopardy(self, hb: leasebeat.Heartbeat | None, now_ns: int) -> None:
        """D-15: report ``lease_in_jeopardy`` once per proven instant the
        heartbeat reaches without a newer success (checked at every wake-up
        and every outcome; it never changes the schedule)."""
        proven = self.proven_until_ns
        if proven is not None and now_ns >= proven and proven != self.reported_proven:
            self.reported_proven = proven
            if proven == 0:
                logger.warning(
                    "Heartbeat lease_in_jeopardy: id=%s, the server's answers prove no lead "
                    "(no remaining_ttl_ms: fallback schedule)",
                    self.rid,
                )
            else:
                logger.warning(
                    "Heartbeat lease_in_jeopardy: id=%s, proven lead ran out %.0fms ago",
                    self.rid,
                    (now_ns - proven) / NS_PER_MS,
                )

    def decision(self, d: leasebeat.Decision, response: CyclesResponse | None, exc: BaseException | None) -> None:
        if d.outcome is not None and d.outcome.value == "success":
            self.succeeded = True
        if d.proven_until_ns is not None:
            self.proven_until_ns = d.proven_until_ns
        elif self.succeeded:
            # The fallback path (an older server, no remaining_ttl_ms) proves
            # nothing: in jeopardy at once, reported once (as leasebeat's own
            # runners do), re-armed by a primary success's proven instant.
            self.proven_until_ns = 0
            self.jeopardy(None, 0)
        rid = self.rid
        if d.is_stop:
            disposition = d.reason.value if d.reason is not None else "stop"
        elif d.key_use == leasebeat.KeyUse.SAME:
            disposition = "retry"  # the same idempotency key and body
        else:
            disposition = d.next.value  # "extend": a new logical extension
        logger.debug("Heartbeat decision: id=%s, disposition=%s, %s", rid, disposition, d.to_json_str())
        if d.expires_at_ms is not None and self.ctx is not None and response is not None:
            self.ctx.update_expires_at_ms(d.expires_at_ms)
        outcome = d.outcome.value if d.outcome is not None else None
        if outcome == "success" and response is None and exc is None:
            # The adopted create's decision: no extension was sent yet.
            logger.debug("Heartbeat create adopted: id=%s", rid)
        elif outcome == "success":
            logger.debug("Heartbeat extend ok: id=%s", rid)
        elif response is not None and response.is_success and outcome == "ambiguous":
            logger.warning("Heartbeat ambiguous response (status=%d): id=%s", response.status, rid)
        elif response is not None and not response.is_transport_error and outcome not in (None, "success"):
            logger.warning("Heartbeat extend failed: id=%s, status=%d", rid, response.status)
        if any(str(w) == "extension_budget_depleting" for w in d.warnings) and not self.clamp_warned:
            self.clamp_warned = True
            logger.warning("Server appears to clamp lease lead; extension budget will deplete: id=%s", rid)
        if not d.is_stop:
            if exc is not None or (response is not None and response.is_transport_error):
                delay_ms = d.numbers.retry_delay if d.numbers.retry_delay is not None else 0
                logger.warning(
                    "Heartbeat extend transport error; retrying with the same idempotency key in %.0fms: id=%s",
                    float(delay_ms),
                    rid,
                    exc_info=exc,
                )
            return
        self.stop(d, response, exc)

    def stop(self, d: leasebeat.Decision, response: CyclesResponse | None, exc: BaseException | None) -> None:
        rid = self.rid
        reason = d.reason
        status = response.status if response is not None else -1
        if reason == leasebeat.StopReason.CANCELLED:
            logger.debug("Heartbeat stopped: id=%s, disposition=%s", rid, reason.value)
        elif reason in _NOT_STARTED:
            logger.warning(
                "Heartbeat not started: the create response does not anchor a lease: id=%s, disposition=%s",
                rid,
                reason.value,
            )
        elif reason == leasebeat.StopReason.LEASE_TOO_SHORT:
            logger.warning("Heartbeat stopping: lease shorter than the retry-safety budget: id=%s", rid)
        elif reason in _PERMANENT:
            logger.warning("Heartbeat stopping permanently (%s, status=%d): id=%s", _PERMANENT[reason], status, rid)
        elif reason == leasebeat.StopReason.REJECTED:
            code = _error_code(response)
            logger.warning("Heartbeat stopping on client error (%s, status=%d): id=%s", code, status, rid)
        elif reason == leasebeat.StopReason.UNEXPECTED_STATUS:
            logger.warning("Heartbeat stopping on unexpected HTTP status %d: id=%s", status, rid)
        elif exc is not None or (response is not None and response.is_transport_error):
            logger.warning(
                "Heartbeat extend transport error; stopping because no safe recovery window remains: id=%s "
                "(disposition=%s)",
                rid,
                reason.value if reason is not None else None,
                exc_info=exc,
            )
        else:
            logger.warning(
                "Heartbeat stopping: no safe recovery window remains: id=%s (disposition=%s)",
                rid,
                reason.value if reason is not None else None,
            )


def _error_code(response: CyclesResponse | None) -> str | None:
    if response is None or not isinstance(response.body, dict):
        return None
    code = response.body.get("error")
    return code if isinstance(code, str) else None


def _feed(
    hb: leasebeat.Heartbeat,
    attempt_id: int,
    now_ns: int,
    response: CyclesResponse | None,
    exc: BaseException | None,
) -> leasebeat.Decision:
    now_ns = max(now_ns, hb.last_event_ns)
    if exc is not None:
        return hb.handle_failure(attempt_id, now_ns, _failure_kind(exc))
    assert response is not None
    if response.is_transport_error:
        return hb.handle_failure(attempt_id, now_ns, _failure_kind(response.transport_exception))
    return hb.handle_response(attempt_id, now_ns, response.status, response.headers, _body_bytes(response))


def _attempt_budget_ms(hb: leasebeat.Heartbeat, sent_ns: int) -> float:
    """The whole-attempt deadline for this attempt, as leasebeat's runner
    computes it: the core's ``attempt_budget(request_timeout_ms, max_rtt_ms)``
    minus the runner's detection slack, so that a timed-out attempt is
    observed no later than ``sent + attempt_budget``."""
    deadline_ns = _attempt_deadline_ns(hb, sent_ns)
    return math.inf if deadline_ns is None else (deadline_ns - sent_ns) / NS_PER_MS


def _next_wait_s(hb: leasebeat.Heartbeat, now_ns: int) -> tuple[leasebeat.Attempt | None, float | None]:
    action = hb.poll_action()
    if action.is_stop or action.attempt is None:
        return None, None
    if action.attempt.kind == leasebeat.AttemptKind.CREATE:
        # The SDK performs (and recovers) its own create: a create the core
        # would resend means the adopted answer was not a lease.
        logger.warning("Heartbeat not started: the create response does not anchor a lease: id=%s", hb.reservation_id)
        return None, None
    due = action.attempt.due_ns
    if due is None:
        return action.attempt, None
    return action.attempt, max(0, due - now_ns) / 1e9


def run_sync(
    hb: leasebeat.Heartbeat,
    first: leasebeat.Decision | None,
    *,
    reservation_id: str,
    ctx: Any,
    stop_event: threading.Event,
    extend: Callable[[str, dict[str, Any]], CyclesResponse],
    run_attempt: Callable[[Callable[[], CyclesResponse], float], CyclesResponse],
    now_ms: Callable[[], float],
) -> None:
    """The thread body of every synchronous heartbeat."""
    report = _Reporter(reservation_id, ctx)
    if first is not None:
        report.decision(first, None, None)
    while not hb.is_stopped:
        attempt, wait_s = _next_wait_s(hb, _ns(now_ms()))
        if attempt is None:
            return
        if stop_event.wait(timeout=wait_s):
            report.stop(hb.cancel(max(_ns(now_ms()), hb.last_event_ns)), None, None)
            return
        sent_ns = max(_ns(now_ms()), hb.last_event_ns)
        report.jeopardy(hb, sent_ns)
        hb.handle_sent(attempt.id, sent_ns)
        body = json.loads(attempt.body)
        response: CyclesResponse | None = None
        exc: BaseException | None = None
        try:
            response = run_attempt(lambda: extend(reservation_id, body), _attempt_budget_ms(hb, sent_ns))
        except Exception as e:  # the SDK's client or the deadline: no response
            exc = e
        observed_ns = _ns(now_ms())
        report.jeopardy(hb, observed_ns)
        report.decision(_feed(hb, attempt.id, observed_ns, response, exc), response, exc)


async def run_async(
    hb: leasebeat.Heartbeat,
    first: leasebeat.Decision | None,
    *,
    reservation_id: str,
    ctx: Any,
    extend: Callable[[str, dict[str, Any]], Awaitable[CyclesResponse]],
    run_attempt: Callable[[Callable[[], Awaitable[CyclesResponse]], float], Awaitable[CyclesResponse]],
    now_ms: Callable[[], float],
) -> None:
    """The task body of every asynchronous heartbeat; cancel the task to stop."""
    report = _Reporter(reservation_id, ctx)
    if first is not None:
        report.decision(first, None, None)
    try:
        while not hb.is_stopped:
            attempt, wait_s = _next_wait_s(hb, _ns(now_ms()))
            if attempt is None:
                return
            if wait_s is None:
                await asyncio.Event().wait()  # never due: until cancelled
            else:
                await asyncio.sleep(wait_s)
            sent_ns = max(_ns(now_ms()), hb.last_event_ns)
            report.jeopardy(hb, sent_ns)
            hb.handle_sent(attempt.id, sent_ns)
            body = json.loads(attempt.body)
            response: CyclesResponse | None = None
            exc: BaseException | None = None
            try:
                response = await run_attempt(lambda: extend(reservation_id, body), _attempt_budget_ms(hb, sent_ns))
            except asyncio.CancelledError:
                raise
            except Exception as e:
                exc = e
            observed_ns = _ns(now_ms())
            report.jeopardy(hb, observed_ns)
            report.decision(_feed(hb, attempt.id, observed_ns, response, exc), response, exc)
    except asyncio.CancelledError:
        if not hb.is_stopped:
            report.stop(hb.cancel(max(_ns(now_ms()), hb.last_event_ns)), None, None)
        return
