"""The ready heartbeat loop on a thread: ``leasebeat.run``.

Thin: every rule (when to beat, which key, when to stop) is the core's. The
runner only waits for the due time on ``time.monotonic_ns()``, calls the
transport, enforces the whole-attempt deadline, feeds outcomes back, delivers
decisions, stops and jeopardy (D-15) to the listener, and optionally releases
or commits the reservation when it ends.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from ._leasebeat import (
    INFINITE_NS,
    Attempt,
    AttemptKind,
    Decision,
    Heartbeat,
    OutcomeClass,
    TransportFailure,
    attempt_budget,
    safety_margin,
)

log = logging.getLogger("leasebeat.runner")

MS = 1_000_000
#: Timer slack bounds (ns): beats are sent early by the measured oversleep of
#: the runner's waits, kept within 0.2 ms .. 20 ms (starting at 1 ms) and
#: decaying by 1/8 per wake-up, as the Rust driver does.
MIN_TIMER_SLACK_NS = 200_000
MAX_TIMER_SLACK_NS = 20 * MS
INITIAL_TIMER_SLACK_NS = 1 * MS
#: Time allowed, within the budget, for a timeout to be noticed (ms).
WAKEUP_ALLOWANCE_MS = 30


def detection_slack_ms(budget_ms: int) -> int:
    """The part of the attempt budget kept back so that a timed-out attempt is
    observed no later than ``sent + budget`` (the Rust driver's formula:
    the enforced part is ``(budget - 30) x 8/9``, at least 1 ms)."""
    enforced = max((max(budget_ms - WAKEUP_ALLOWANCE_MS, 0)) // 9 * 8, 1)
    return max(budget_ms - enforced, 0)


class TransportError(Exception):
    """No HTTP response: ``kind`` is a TransportFailure (timeout, connect, reset)."""

    def __init__(self, kind: TransportFailure | str, message: str = "") -> None:
        self.kind = TransportFailure(kind)
        super().__init__(message or str(self.kind))


class HttpResponse(NamedTuple):
    """A complete HTTP response as a transport returns it (any status)."""

    status: int
    headers: Any
    body: bytes | str


@dataclass(frozen=True)
class Request:
    """One request the runner asks a transport to send.

    ``endpoint`` is "create", "extend", "release" or "commit"; ``path`` the
    URL path (``/v1/reservations``, ``/v1/reservations/{id}/extend``, ...);
    ``key`` the idempotency key (send it as ``X-Idempotency-Key``; the body
    carries it too); ``body`` the exact JSON body; ``attempt`` the core's
    Attempt (None for release/commit).
    """

    endpoint: str
    path: str
    key: str
    body: bytes
    reservation_id: str | None
    attempt: Attempt | None


class Transport(Protocol):
    """Sends one request and returns its complete response, or raises
    TransportError, no later than ``deadline_ns`` (``time.monotonic_ns()``
    clock; None = unbounded)."""

    def __call__(self, request: Request, deadline_ns: int | None, /) -> HttpResponse: ...


@dataclass(frozen=True)
class Jeopardy:
    """D-15 ``lease_in_jeopardy``: reported at once, before the server says anything.

    ``cause`` is "proven_until_reached" (the lease reached ``proven_until_ns``
    without a newer success; also at once, with ``proven_until_ns`` None, on
    the fallback path after the first success: an older server's answers prove
    nothing) or "late_beat" (a beat went out later than due by more than the
    safety margin).
    """

    event: str
    reservation_id: str | None
    cause: str
    now_ns: int
    proven_until_ns: int | None
    due_ns: int | None


class Listener:
    """Receives a runner's events; override what you need (all are no-ops).

    Called on the runner's thread (or task); an exception raised here is
    logged and otherwise ignored.
    """

    def on_decision(self, decision: Decision) -> None:
        """Every decision, the final stop included (``decision.reservation_id``)."""

    def on_jeopardy(self, event: Jeopardy) -> None:
        """``lease_in_jeopardy`` (D-15)."""

    def on_stop(self, decision: Decision) -> None:
        """The final decision (a stop), after on_decision."""

    def on_finalize(self, endpoint: str, response: HttpResponse | None, error: Exception | None) -> None:
        """The release/commit sent when the runner ended, if asked for."""


def extend_path(reservation_id: str | None) -> str:
    from urllib.parse import quote

    return f"/v1/reservations/{quote(reservation_id or '', safe='')}/extend"


def request_for(hb: Heartbeat, attempt: Attempt) -> Request:
    rid = hb.reservation_id
    if attempt.kind is AttemptKind.CREATE:
        endpoint, path = "create", "/v1/reservations"
    else:
        endpoint, path = "extend", extend_path(rid)
    return Request(endpoint, path, attempt.key, attempt.body, rid, attempt)


#: Stops after which nothing is left to release or commit: the server ended
#: the reservation (``finalized``: already committed or released;
#: ``not_found``: it has none; ``tenant_closed``). After ``expired`` the
#: release or commit is sent all the same: a server may accept it for a grace
#: period after expiry (the Cycles server does, for 5 s); its answer is
#: reported.
NOTHING_TO_FINALIZE = frozenset(("finalized", "not_found", "tenant_closed"))


def finalize_request(reservation_id: str, commit: Mapping[str, Any] | None) -> Request:
    from urllib.parse import quote

    key = f"leasebeat-{uuid.uuid4()}"
    rid = quote(reservation_id, safe="")
    if commit is not None:
        body = json.dumps({"idempotency_key": key, "actual": dict(commit)}, separators=(",", ":")).encode()
        return Request("commit", f"/v1/reservations/{rid}/commit", key, body, reservation_id, None)
    body = json.dumps({"idempotency_key": key}, separators=(",", ":")).encode()
    return Request("release", f"/v1/reservations/{rid}/release", key, body, reservation_id, None)


def attempt_deadline_ns(hb: Heartbeat, sent_ns: int) -> int | None:
    """``sent + attempt_budget - detection slack`` (None when the budget is
    unbounded); the budget is the core's ``attempt_budget(request_timeout_ms,
    max_rtt_ms)``."""
    budget = attempt_budget(hb.request_timeout_ms, hb.max_rtt_ms)
    if budget == float("inf"):
        return None
    b = int(budget)
    return sent_ns + (b - detection_slack_ms(b)) * MS


def safety_margin_ns(hb: Heartbeat) -> int:
    """The core's ``safety_margin(max_rtt_ms)`` in ns (the late-beat threshold of D-15)."""
    m = safety_margin(hb.max_rtt_ms)
    return INFINITE_NS if m == float("inf") else int(m) * MS


def call_listener(listener: Listener | None, name: str, *args: Any) -> None:
    if listener is None:
        return
    fn: Callable[..., Any] | None = getattr(listener, name, None)
    if fn is None:
        return
    try:
        fn(*args)
    except Exception:  # a listener never breaks the runner
        log.exception("leasebeat listener %s raised", name)


class _Slack:
    """Measured timer slack (see MIN/MAX_TIMER_SLACK_NS)."""

    def __init__(self) -> None:
        self.ns = INITIAL_TIMER_SLACK_NS

    def observe(self, target_ns: int, woke_ns: int) -> None:
        over = max(woke_ns - target_ns, 0)
        self.ns = min(max(self.ns - self.ns // 8, over, MIN_TIMER_SLACK_NS), MAX_TIMER_SLACK_NS)


class _Jeopardy:
    """Reports jeopardy once per proven_until instant and per late beat.

    After the lease's first success, a decision without ``proven_until_ns``
    (the fallback path: an older server, nothing proven) counts as proven
    until 0: reported at once, once, and re-armed when a later decision
    carries a different instant (a primary success)."""

    def __init__(self, listener: Listener | None) -> None:
        self.listener = listener
        self.succeeded = False
        self.armed_for: int | None = None
        self.reported = False

    def proven_until(self, hb: Heartbeat) -> int | None:
        d = hb.last_decision
        pu = d.proven_until_ns if d is not None else None
        if d is not None and d.outcome is OutcomeClass.SUCCESS:
            self.succeeded = True
        if pu is None and self.succeeded:
            pu = 0  # the fallback path proves nothing: the lead is reached
        if pu != self.armed_for:
            self.armed_for, self.reported = pu, False
        if pu is None or pu == INFINITE_NS or self.reported:
            return None
        return pu

    def check(self, hb: Heartbeat, now_ns: int, due_ns: int | None) -> None:
        pu = self.proven_until(hb)
        if pu is not None and now_ns >= pu:
            self.reported = True
            d = hb.last_decision
            call_listener(
                self.listener,
                "on_jeopardy",
                Jeopardy(
                    "lease_in_jeopardy",
                    hb.reservation_id,
                    "proven_until_reached",
                    now_ns,
                    d.proven_until_ns if d is not None else None,
                    due_ns,
                ),
            )

    def late(self, hb: Heartbeat, now_ns: int, due_ns: int) -> None:
        # Only a beat whose due time a decision set can be late (D-15): a
        # create, or the first extension of an adopted reservation, is due
        # at once.
        if hb.reservation_id is None or hb.last_decision is None:
            return
        if now_ns - due_ns > safety_margin_ns(hb):
            d = hb.last_decision
            pu = d.proven_until_ns if d is not None else None
            call_listener(
                self.listener,
                "on_jeopardy",
                Jeopardy("lease_in_jeopardy", hb.reservation_id, "late_beat", now_ns, pu, due_ns),
            )


def wake_target(hb: Heartbeat, jeop: _Jeopardy, slack: _Slack, due: int | None) -> tuple[int | None, int | None]:
    """The wait before a send, shared by both runners: ``(target, fire)``.
    ``fire`` is the due time early by the measured timer slack (None = never);
    ``target`` is the earlier of ``fire`` and the jeopardy instant
    (``proven_until``, to report it at once), None = no wake-up."""
    pu = jeop.proven_until(hb)
    fire = None if due is None else due - slack.ns
    target = fire if pu is None else (pu if fire is None else min(fire, pu))
    return target, fire


def due_of(hb: Heartbeat, due_ns: int | None) -> int | None:
    """The due time of the next send on this runner's clock. A heartbeat
    that has not decided yet (a create, or the first extension of an adopted
    reservation) asks for it "at 0", i.e. at once: that is now, not instant 0
    of the monotonic clock (which would make an on-time beat look late and
    inflate the timer slack)."""
    if hb.last_decision is None:
        return time.monotonic_ns()
    return due_ns


def on_wake(
    hb: Heartbeat, jeop: _Jeopardy, slack: _Slack, due: int | None, target: int | None, fire: int | None
) -> bool:
    """After a wake-up at ``target`` (from ``wake_target``): measures the timer
    slack, reports jeopardy if reached; True when the send is due."""
    now = time.monotonic_ns()
    if target is not None:
        slack.observe(target, now)
    jeop.check(hb, now, due)
    return fire is not None and now >= fire


class Runner:
    """A heartbeat running on a daemon thread (see ``leasebeat.run``)."""

    def __init__(
        self,
        heartbeat: Heartbeat,
        transport: Transport,
        listener: Listener | None,
        release_on_stop: bool,
        first: Decision | None,
    ) -> None:
        self.heartbeat = heartbeat
        self._transport = transport
        self._listener = listener
        self._release_on_stop = release_on_stop
        self._commit: Mapping[str, Any] | None = None
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._stop_requested = False
        self._result: Decision | None = None
        self._done = threading.Event()
        self._first = first
        # Set once the runner thread has taken the release/commit decision
        # (under the lock); `_finalize_sent` once a release or commit went out
        # (or is going out).
        self._finalize_taken = False
        self._finalize_sent = False
        self._late_finalize: threading.Thread | None = None
        self._thread = threading.Thread(target=self._main, name="leasebeat-runner", daemon=True)

    # -- public -----------------------------------------------------------

    @property
    def result(self) -> Decision | None:
        """The final stop decision once the runner ended, else None."""
        return self._result

    @property
    def done(self) -> bool:
        """True once the runner has ended (its stop reported, release/commit sent)."""
        return self._done.is_set()

    def stop(self, *, release: bool | None = None, commit: Mapping[str, Any] | None = None) -> None:
        """Asks the runner to stop (cancel the heartbeat), from any thread, any
        number of times; returns at once (``join()`` waits). ``release=True``
        releases the reservation on the way out; ``commit={"unit": ...,
        "amount": ...}`` commits it with that actual instead. An attempt in
        flight is abandoned and its late outcome ignored.

        After the runner stopped by itself (``expired``, ``max_extensions``,
        ...) without sending a release or commit, ``stop(release=True)`` or
        ``stop(commit=...)`` sends it now, on a helper thread (``join()``
        waits for it; its result goes to ``Listener.on_finalize``). Where
        there is nothing to release (no reservation, or the server ended it:
        see ``NOTHING_TO_FINALIZE``) nothing is sent and a warning is logged.
        A release or commit is sent at most once per runner: the first
        request wins."""
        late = False
        with self._wake:
            if not self._stop_requested:
                if commit is not None:
                    self._commit = commit
                if release is not None:
                    self._release_on_stop = release or commit is not None
                elif commit is not None:
                    self._release_on_stop = True
                # The runner already took its release/commit decision (it
                # stopped by itself) and sent nothing: finalize here.
                late = self._finalize_taken and not self._finalize_sent and self._release_on_stop
                if late:
                    self._finalize_sent = self._can_finalize()
                    late = self._finalize_sent
                    if late:
                        # Started under the lock: join() never sees it unstarted.
                        self._late_finalize = threading.Thread(
                            target=self._send_finalize, name="leasebeat-finalize", daemon=True
                        )
                        self._late_finalize.start()
            self._stop_requested = True
            self._wake.notify_all()

    def join(self, timeout: float | None = None) -> Decision | None:
        """Waits for the runner to end (at most ``timeout`` seconds), and for a
        release or commit asked for after it ended; returns ``result``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        self._done.wait(timeout)
        late = self._late_finalize
        if late is not None:
            late.join(None if deadline is None else max(deadline - time.monotonic(), 0.0))
        return self._result

    # -- loop -------------------------------------------------------------

    def _wait_until(self, target_ns: int | None) -> bool:
        """Sleeps until ``target_ns`` (None = until woken); False when a stop was requested."""
        with self._wake:
            while not self._stop_requested:
                now = time.monotonic_ns()
                if target_ns is not None and now >= target_ns:
                    return True
                self._wake.wait(None if target_ns is None else (target_ns - now) / 1e9)
            return False

    def _main(self) -> None:
        hb = self.heartbeat
        slack = _Slack()
        jeop = _Jeopardy(self._listener)
        final: Decision | None = None
        try:
            if self._first is not None:
                call_listener(self._listener, "on_decision", self._first)
                if self._first.is_stop:
                    final = self._first
            while final is None:
                action = hb.poll_action()
                if action.is_stop:
                    final = hb.last_decision
                    break
                attempt = action.attempt
                assert attempt is not None
                due = due_of(hb, action.due_ns)
                # Wait for the due time (early by the timer slack), waking at
                # proven_until to report jeopardy at once.
                while True:
                    target, fire = wake_target(hb, jeop, slack, due)
                    if not self._wait_until(target):
                        break
                    if on_wake(hb, jeop, slack, due, target, fire):
                        break
                if self._stop_requested:
                    break
                now = time.monotonic_ns()
                if due is not None:
                    jeop.late(hb, now, due)
                hb.handle_sent(attempt.id, now)
                decision = self._attempt(hb, attempt, now, jeop)
                if decision is None:  # stop requested while in flight
                    break
                call_listener(self._listener, "on_decision", decision)
                if decision.is_stop:
                    final = decision
            if final is None and not hb.is_stopped:
                final = hb.cancel(max(time.monotonic_ns(), hb.last_event_ns))
                call_listener(self._listener, "on_decision", final)
            if final is None:
                final = hb.last_decision
        except Exception:
            log.exception("leasebeat runner failed")
            if not hb.is_stopped:
                final = hb.cancel(max(time.monotonic_ns(), hb.last_event_ns))
        finally:
            self._result = final
            if final is not None:
                call_listener(self._listener, "on_stop", final)
            self._finalize()
            self._done.set()

    def _attempt(self, hb: Heartbeat, attempt: Attempt, sent_ns: int, jeop: _Jeopardy) -> Decision | None:
        """Runs the transport on a worker thread; enforces the deadline; None if stopped."""
        request = request_for(hb, attempt)
        deadline = attempt_deadline_ns(hb, sent_ns)
        box: list[Any] = []

        def work() -> None:
            try:
                r: Any = self._transport(request, deadline)
            except TransportError as e:
                r = e
            except Exception as e:  # an unknown failure of the transport: no response
                log.warning("leasebeat transport raised %r; reported as reset", e)
                r = TransportError(TransportFailure.RESET, repr(e))
            with self._wake:
                box.append(r)
                self._wake.notify_all()

        threading.Thread(target=work, name="leasebeat-attempt", daemon=True).start()
        with self._wake:
            while not box and not self._stop_requested:
                now = time.monotonic_ns()
                if deadline is not None and now >= deadline:
                    break
                pu = jeop.proven_until(hb)
                if pu is not None and now >= pu:
                    self._wake.release()
                    try:
                        jeop.check(hb, now, attempt.due_ns)
                    finally:
                        self._wake.acquire()
                    continue
                target = min(t for t in (deadline, pu, now + 3600 * 10**9) if t is not None)
                self._wake.wait((target - now) / 1e9)
            if self._stop_requested:
                return None  # the late outcome, if any, is ignored
            outcome = box[0] if box else TransportError(TransportFailure.TIMEOUT, "attempt deadline")
        now = max(time.monotonic_ns(), sent_ns)
        if isinstance(outcome, TransportError):
            return hb.handle_failure(attempt.id, now, outcome.kind)
        return hb.handle_response(attempt.id, now, outcome.status, outcome.headers, outcome.body)

    def _can_finalize(self) -> bool:
        """Whether there is a reservation left to release or commit (else
        logs why not, when a release or commit was asked for)."""
        rid = self.heartbeat.reservation_id
        reason = self.heartbeat.stop_reason
        if rid is None:
            log.warning("leasebeat: no release or commit sent: the lease has no reservation (stop %s)",
                        reason.value if reason is not None else None)
            return False
        if reason is not None and reason.value in NOTHING_TO_FINALIZE:
            log.warning("leasebeat: no release or commit sent for %s: the server ended it (%s)", rid, reason.value)
            return False
        return True

    def _finalize(self) -> None:
        with self._wake:
            self._finalize_taken = True
            if not self._release_on_stop or self._finalize_sent:
                return
            self._finalize_sent = self._can_finalize()
            if not self._finalize_sent:
                return
        self._send_finalize()

    def _send_finalize(self) -> None:
        """Sends the release (or commit) and reports the server's answer."""
        rid = self.heartbeat.reservation_id
        assert rid is not None
        with self._wake:
            commit = self._commit
        request = finalize_request(rid, commit)
        budget = self.heartbeat.request_timeout_ms or 10_000
        try:
            r = self._transport(request, time.monotonic_ns() + budget * MS)
        except Exception as e:
            call_listener(self._listener, "on_finalize", request.endpoint, None, e)
            return
        call_listener(self._listener, "on_finalize", request.endpoint, r, None)


def run(
    heartbeat: Heartbeat,
    transport: Transport,
    *,
    listener: Listener | None = None,
    release_on_stop: bool = False,
    first_decision: Decision | None = None,
) -> Runner:
    """Runs ``heartbeat`` on a daemon thread until it stops or ``Runner.stop()``.

    ``transport(request, deadline_ns)`` sends one Request and returns an
    HttpResponse or raises TransportError (see ``leasebeat.transports``).
    ``listener`` gets every decision, jeopardy and the stop.
    ``release_on_stop=True`` releases the reservation when the runner ends
    (``Runner.stop(commit=...)`` commits instead). ``first_decision`` is the
    decision ``Heartbeat.adopt_create`` returned, reported first.
    """
    r = Runner(heartbeat, transport, listener, release_on_stop, first_decision)
    r._thread.start()
    return r
