"""The ready heartbeat loop on a thread: ``leasebeat.run``.

Thin: every rule (when to beat, which key, when to stop) is the core's. The
runner only waits for the due time on ``time.monotonic_ns()``, calls the
transport, enforces the whole-attempt deadline, feeds outcomes back, delivers
decisions, stops and jeopardy (D-15) to the listener, and optionally releases
or commits the reservation when it ends.
"""

from __future__ import annotations

import enum
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol, TypeVar

from ._leasebeat import (
    INFINITE_NS,
    Attempt,
    AttemptKind,
    Decision,
    Heartbeat,
    Journal,
    KeyUse,
    OutcomeClass,
    Replay,
    Settlement,
    SettlementAction,
    Stopped,
    SettlementDecision,
    SettleActionKind,
    SettleMode,
    SettleOutcome,
    SettleWarning,
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

    def on_heartbeat_failure(self, failure: HeartbeatFailure) -> None:
        """HP-1: a heartbeat failure or stop (reservation id, disposition), under every policy."""

    def on_settlement(self, reservation_id: str, decision: SettlementDecision) -> None:
        """Every decision of a settlement (commit, event fallback, release, replay)."""

    def on_settled(self, result: SettleResult) -> None:
        """A settlement ended (or was abandoned at a flush deadline)."""

    def on_replay(self, replay: Replay | None, error: Exception | None) -> None:
        """A journal replay listed its records (quarantines, migrations, busy), or failed."""


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
        journal: Journal | None = None,
        policy: HeartbeatPolicy | str = "warn",
        event: Mapping[str, Any] | None = None,
    ) -> None:
        self.heartbeat = heartbeat
        self._transport = transport
        self._hp1 = _Hp1(policy, listener)
        self._user_listener = listener
        self._listener: Listener | None = _PolicyListener(listener, self._hp1)
        #: The journal settlements go through (None: off).
        self.journal = journal
        # The event fallback's subject and action, from the create body now
        # (the heartbeat forgets it once the create succeeded).
        self._event = event_of(heartbeat, event)
        #: HP-1 ``cancel``: set (thread-safe) when the heartbeat stopped by
        #: itself; the work polls it (or waits on it) and stops.
        self.cancelled = self._hp1.cancelled
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
        """Sends the release (or commit) through the settle loop and reports
        the server's last answer to ``Listener.on_finalize``."""
        rid = self.heartbeat.reservation_id
        assert rid is not None
        with self._wake:
            commit = self._commit
        endpoint = "commit" if commit is not None else "release"
        try:
            if commit is not None:
                result = self._settle_commit({"actual": dict(commit)}, None)
            else:
                result = self._settle_release(None)
        except Exception as e:
            log.exception("leasebeat: the %s of %s failed", endpoint, rid)
            call_listener(self._listener, "on_finalize", endpoint, None, e)
            return
        if result.response is None:
            err = TransportError(TransportFailure.RESET, f"{endpoint} ended {result.outcome} without a response")
            call_listener(self._listener, "on_finalize", endpoint, None, err)
        else:
            call_listener(self._listener, "on_finalize", endpoint, result.response, None)

    # -- settlement -------------------------------------------------------

    def _budget_ms(self) -> int:
        return self.heartbeat.request_timeout_ms or 10_000

    def _stop_heartbeat(self) -> None:
        """ST-11: the heartbeat stops now (no release: the settlement is the end)."""
        with self._wake:
            self._stop_requested = True
            self._wake.notify_all()

    def _take_settlement(self) -> str:
        """The reservation to settle (waits for the create's outcome); marks
        the lease as settled so that stop() sends nothing more."""
        hb = self.heartbeat
        with self._wake:
            while hb.reservation_id is None and not self._done.is_set() and not hb.is_stopped:
                self._wake.wait(0.05)
            rid = hb.reservation_id
            if rid is None:
                raise NoReservation("the lease has no reservation (its create did not succeed)")
            if self._finalize_sent:
                raise Stopped(f"the lease {rid} is already settled (commit or release was sent)")
            self._finalize_sent = True
            return rid

    def _settle_commit(self, body: Mapping[str, Any] | None, event: Mapping[str, Any] | None) -> SettleResult:
        rid = self.heartbeat.reservation_id
        assert rid is not None
        j = self.journal
        base_url = j.base_url if j is not None else getattr(self._transport, "base_url", None)
        s = Settlement.commit(
            rid, None if body is None else dict(body), now_ns=time.monotonic_ns(), wall_ms=_wall_ms(),
            event=event_of(self.heartbeat, event) if event is not None else self._event, base_url=base_url,
        )
        steps = settle_steps(s, j, kind="commit", listener=self._listener, budget_ms=self._budget_ms(),
                             stop_heartbeat=self._stop_heartbeat)
        return drive(steps, self._transport)

    def _settle_release(self, reason: str | None) -> SettleResult:
        rid = self.heartbeat.reservation_id
        assert rid is not None
        s = Settlement.release(rid, now_ns=time.monotonic_ns(), wall_ms=_wall_ms(), reason=reason)
        steps = settle_steps(s, None, kind="release", listener=self._listener, budget_ms=self._budget_ms(),
                             stop_heartbeat=self._stop_heartbeat)
        return drive(steps, self._transport)

    def commit(
        self,
        actual: Mapping[str, Any] | None,
        metrics: Mapping[str, Any] | None = None,
        metadata: Mapping[str, Any] | None = None,
        *,
        event: Mapping[str, Any] | None = None,
    ) -> SettleResult:
        """Commits the reservation with ``actual`` (``{"unit": ..., "amount":
        ...}``) and optional ``metrics`` / ``metadata``, on this thread, until
        the outcome is final (ST-1..ST-11): the record is journaled before the
        first commit leaves (J-1), retries keep the one key (with backoff and
        Retry-After), a 410 / RESERVATION_EXPIRED switches durably to
        ``POST /v1/events`` with the subject and action of the create (or
        ``event={"subject": ..., "action": ...}`` for an adopted reservation).
        The heartbeat keeps running until a decision says ``stop_heartbeat``.
        ``actual=None`` (no actual known, ST-10) sends nothing: outcome
        ``no_actual``. Returns a SettleResult; under ``fail_on_finalize``
        raises HeartbeatFailed after the settlement if the heartbeat failed.
        Raises NoReservation when the create did not succeed, Stopped when
        the lease was already committed or released (one settlement per
        lease)."""
        self._take_settlement()
        self._hp1.settling = True
        result = self._settle_commit(commit_body(actual, metrics, metadata), event)
        return self._hp1.after_settlement(result)

    def release(self, reason: str | None = None) -> SettleResult:
        """Releases the reservation (work that used nothing): retried with one
        key until final, not journaled (ST-9). After a heartbeat stop
        (``expired`` included: the server may be within its grace) it is sent
        all the same and the answer reported. Returns a SettleResult (HP-1 as
        for ``commit``)."""
        self._take_settlement()
        self._hp1.settling = True
        result = self._settle_release(reason)
        return self._hp1.after_settlement(result)

    def flush(self, timeout: float | None = None) -> bool:
        """J-7: waits at most ``timeout`` s for every settlement in flight in
        this process (this runner's, others', the journal replay); True when
        none is left, else the unresolved stay on disk (``leasebeat.flush``)."""
        return flush(timeout)

    @property
    def heartbeat_failure(self) -> HeartbeatFailure | None:
        """The first heartbeat stop that was a failure (HP-1), or None."""
        return self._hp1.failure


class NoReservation(Exception):
    """commit()/release() on a lease whose create did not succeed: there is
    nothing to settle (and no usage should have been incurred)."""


def start_replay(journal: Journal | None, transport: Transport, listener: Listener | None, budget_ms: int) -> None:
    """Replays ``journal`` on a daemon thread, once per process and partition."""
    if journal is None or not claim_replay(journal):
        return
    INFLIGHT.enter()  # counted from now: a flush right after start waits for it

    def work() -> None:
        try:
            drive(replay_steps(journal, listener=listener, budget_ms=budget_ms), transport)
        except Exception:
            log.exception("leasebeat journal replay failed")
        finally:
            INFLIGHT.leave()

    threading.Thread(target=work, name="leasebeat-replay", daemon=True).start()


def run(
    heartbeat: Heartbeat,
    transport: Transport,
    *,
    listener: Listener | None = None,
    release_on_stop: bool = False,
    first_decision: Decision | None = None,
    journal: Journal | bool | None = None,
    journal_dir: str | os.PathLike[str] | None = None,
    tenant: str | None = None,
    policy: HeartbeatPolicy | str = "warn",
    event: Mapping[str, Any] | None = None,
    replay_on_start: bool = True,
) -> Runner:
    """Runs ``heartbeat`` on a daemon thread until it stops or ``Runner.stop()``.

    ``transport(request, deadline_ns)`` sends one Request and returns an
    HttpResponse or raises TransportError (see ``leasebeat.transports``).
    ``listener`` gets every decision, jeopardy and the stop.
    ``release_on_stop=True`` releases the reservation when the runner ends
    (``Runner.stop(commit=...)`` commits instead). ``first_decision`` is the
    decision ``Heartbeat.adopt_create`` returned, reported first.

    Settlement: ``Runner.commit(actual, metrics, metadata)`` /
    ``Runner.release(reason)`` (see there) go through the core's Settlement
    and the journal: ``journal=None`` opens the default partition from the
    transport's ``base_url``/``api_key`` (under ``journal_dir``, else
    ``$CYCLES_JOURNAL_DIR``, else ``~/.runcycles/commit-journal``; ``tenant``
    keeps it across API-key rotation), ``journal=False`` turns it off, or
    pass a ``Journal``. The first runner of a process on a partition replays
    it in the background (``replay_on_start``); ``Runner.flush(timeout)``
    / ``leasebeat.flush`` drain. ``policy`` is the HP-1 heartbeat failure
    policy (``"warn"``, ``"cancel"``, ``"fail_on_finalize"``). ``event``
    (``{"subject": ..., "action": ...}``) is the expired-commit fallback's
    for an adopted reservation (a create's own body gives it otherwise).
    """
    j = open_journal(journal, transport, journal_dir, tenant)
    r = Runner(heartbeat, transport, listener, release_on_stop, first_decision, j, policy, event)
    if replay_on_start:
        start_replay(j, transport, r._listener, r._budget_ms())
    r._thread.start()
    return r


# ---------------------------------------------------------------------------
# Settlement: commit / event fallback / release through the core's Settlement
# and the journal, and the heartbeat failure policy (HP-1). Written once and
# driven by both runners: the settle loop is a generator of effects (sleep
# until, a blocking journal call, an HTTP request) that the thread runner
# executes with threads and the asyncio runner with tasks.
# ---------------------------------------------------------------------------


class HeartbeatPolicy(enum.Enum):
    """HP-1: what a heartbeat failure does to the guarded work.

    Every policy reports every failure and stop (``Listener.on_heartbeat_failure``
    and a ``leasebeat.runner`` warning, with the reservation id and the
    disposition); none swallows one, and the final settlement runs under all.
    ``WARN`` (default): the work goes on. ``CANCEL``: when the heartbeat stops
    by itself (the lease is lost or in doubt) the runner asks the work to stop:
    ``cancelled`` (a thread-safe ``threading.Event``) is set, and the asyncio
    lease cancels the task inside ``async with``. ``FAIL_ON_FINALIZE``: the
    settlement runs, then ``commit``/``release`` raise ``HeartbeatFailed``
    (carrying the settlement's result)."""

    WARN = "warn"
    CANCEL = "cancel"
    FAIL_ON_FINALIZE = "fail_on_finalize"


@dataclass(frozen=True)
class HeartbeatFailure:
    """One heartbeat failure or stop (HP-1), as reported.

    ``disposition`` is ``"retry_same_key"`` (the same attempt is retried with
    its key), ``"retry"`` (a retry with a new key) or ``"stop"`` (the
    heartbeat stopped: ``reason``). ``outcome`` is how the deciding outcome was
    classified (OutcomeClass value)."""

    reservation_id: str | None
    disposition: str
    reason: str | None
    outcome: str | None
    decision: Decision


def heartbeat_failure_of(d: Decision) -> HeartbeatFailure | None:
    """The HP-1 report of a heartbeat decision, or None (a success, or the
    runner's own cancel)."""
    outcome = d.outcome
    reason = d.reason
    if d.is_stop:
        if reason is not None and reason.value == "cancelled":
            return None
        return HeartbeatFailure(
            d.reservation_id, "stop", reason.value if reason is not None else None,
            outcome.value if outcome is not None else None, d,
        )
    if outcome is None or outcome in (OutcomeClass.SUCCESS, OutcomeClass.CANCELLED):
        return None
    disposition = "retry_same_key" if d.key_use is KeyUse.SAME else "retry"
    return HeartbeatFailure(d.reservation_id, disposition, None, outcome.value, d)


class HeartbeatFailed(Exception):
    """``fail_on_finalize`` (HP-1): the heartbeat failed during the work. The
    settlement has run: ``result`` is its SettleResult; ``failure`` the first
    heartbeat stop. Under ``cancel``, the asyncio lease raises it from
    ``async with`` when it cancelled the work (``result`` None)."""

    def __init__(self, failure: HeartbeatFailure, result: SettleResult | None) -> None:
        self.failure = failure
        self.result = result
        super().__init__(
            f"heartbeat of {failure.reservation_id} failed: {failure.disposition}"
            + (f" ({failure.reason})" if failure.reason else "")
        )


class _Hp1:
    """The HP-1 policy of one lease, shared by both runners."""

    def __init__(self, policy: HeartbeatPolicy | str, listener: Listener | None) -> None:
        self.policy = HeartbeatPolicy(policy)
        self.listener = listener
        self.cancelled = threading.Event()
        self.failure: HeartbeatFailure | None = None
        self.on_cancel: Callable[[], None] | None = None
        #: Set once the work settles (commit/release began): the work is
        #: over, a later stop is reported but cancels nothing.
        self.settling = False

    def observe(self, d: Decision) -> None:
        f = heartbeat_failure_of(d)
        if f is None:
            return
        log.warning(
            "leasebeat heartbeat failure: reservation %s, %s%s (outcome %s)",
            f.reservation_id, f.disposition, f" {f.reason}" if f.reason else "", f.outcome,
        )
        call_listener(self.listener, "on_heartbeat_failure", f)
        if f.disposition != "stop":
            return
        if self.failure is None:
            self.failure = f
        if self.policy is HeartbeatPolicy.CANCEL and not self.settling and not self.cancelled.is_set():
            self.cancelled.set()
            cb = self.on_cancel
            if cb is not None:
                try:
                    cb()
                except Exception:
                    log.exception("leasebeat cancel callback raised")

    def after_settlement(self, result: SettleResult) -> SettleResult:
        if self.policy is HeartbeatPolicy.FAIL_ON_FINALIZE and self.failure is not None:
            raise HeartbeatFailed(self.failure, result)
        return result


class _PolicyListener(Listener):
    """Forwards every event to the user's listener and heartbeat decisions to HP-1."""

    def __init__(self, inner: Listener | None, hp1: _Hp1) -> None:
        self.inner = inner
        self.hp1 = hp1

    def on_decision(self, decision: Decision) -> None:
        # HP-1 first (its report may log): the user's on_decision and on_stop then follow
        # each other as they did before the policy existed.
        self.hp1.observe(decision)
        call_listener(self.inner, "on_decision", decision)

    def on_jeopardy(self, event: Jeopardy) -> None:
        call_listener(self.inner, "on_jeopardy", event)

    def on_stop(self, decision: Decision) -> None:
        call_listener(self.inner, "on_stop", decision)

    def on_finalize(self, endpoint: str, response: HttpResponse | None, error: Exception | None) -> None:
        call_listener(self.inner, "on_finalize", endpoint, response, error)

    def on_heartbeat_failure(self, failure: HeartbeatFailure) -> None:
        call_listener(self.inner, "on_heartbeat_failure", failure)

    def on_settlement(self, reservation_id: str, decision: SettlementDecision) -> None:
        call_listener(self.inner, "on_settlement", reservation_id, decision)

    def on_settled(self, result: SettleResult) -> None:
        call_listener(self.inner, "on_settled", result)

    def on_replay(self, replay: Replay | None, error: Exception | None) -> None:
        call_listener(self.inner, "on_replay", replay, error)


_SUCCESS = frozenset((SettleOutcome.COMMITTED, SettleOutcome.APPLIED, SettleOutcome.RELEASED))


@dataclass(frozen=True)
class SettleResult:
    """How a commit or release ended.

    ``outcome`` is the core's SettleOutcome (``committed``, ``applied`` (the
    event fallback), ``released``, ``rejected``, ``auth_failed``,
    ``unclassified``, ``exhausted``, ``expired_unrecorded``, ``no_actual``),
    or None when a flush deadline abandoned the settlement before it ended
    (J-7: its record stays on disk for the next replay). ``record_kept``:
    the journal still holds its record (a later replay settles it).
    ``decisions``: every settlement decision, the first included; ``code``
    the last decision's server error code; ``response`` the last HTTP
    response; ``journal_error`` a failure of the journal at the end (the
    removal), if any (persist failures are in the decisions' warnings)."""

    reservation_id: str
    kind: str
    key: str
    outcome: SettleOutcome | None
    record_kept: bool
    decisions: tuple[SettlementDecision, ...]
    response: HttpResponse | None
    journal_error: Exception | None

    @property
    def ok(self) -> bool:
        """True for a terminal success (committed, applied, released)."""
        return self.outcome in _SUCCESS

    @property
    def code(self) -> str | None:
        """The last decision's server error code, or None."""
        return self.decisions[-1].code if self.decisions else None

    @property
    def last_decision(self) -> SettlementDecision | None:
        """The final (or, abandoned, the latest) settlement decision."""
        return self.decisions[-1] if self.decisions else None


class _Sleep(NamedTuple):
    until_ns: int


class _Blocking(NamedTuple):
    fn: Callable[[], Any]


class _Send(NamedTuple):
    request: Request
    deadline_ns: int | None


SettleSteps = Generator["_Sleep | _Blocking | _Send", Any, SettleResult]


def _wall_ms() -> int:
    return time.time_ns() // MS


def _try(fn: Callable[[], Any]) -> Callable[[], Any]:
    def call() -> Any:
        try:
            return fn()
        except Exception as e:
            return e

    return call


def settle_request(reservation_id: str, action: SettlementAction) -> Request:
    from urllib.parse import quote

    endpoint = action.endpoint
    assert endpoint is not None and action.key is not None and action.body is not None
    if endpoint is SettleMode.EVENT:
        path = "/v1/events"
        name = "event"
    else:
        name = endpoint.value
        path = f"/v1/reservations/{quote(reservation_id, safe='')}/{name}"
    return Request(name, path, action.key, action.body, reservation_id, None)


def settle_steps(
    s: Settlement,
    journal: Journal | None,
    *,
    kind: str,
    listener: Listener | None,
    budget_ms: int,
    stop_heartbeat: Callable[[], None] | None,
) -> SettleSteps:
    """The settle loop, once for both runners: persist (J-1) before a request
    can leave, send at the due time with the one key, feed every outcome to
    the core, stop the heartbeat when a decision says so (ST-11), and end
    the record (J-5) through ``journal.finish``. A ``_Sleep`` answered False
    means a flush deadline passed: the settlement is abandoned (claim
    released, record left for the next replay)."""
    rid = s.reservation_id
    decisions: list[SettlementDecision] = []
    stopped = False
    response: HttpResponse | None = None
    # A record of it is on disk: replayed from one, or a write succeeded
    # (SP-3: a failed write still sends; nothing is then reported kept).
    written = kind == "replay"

    def report(d: SettlementDecision) -> None:
        nonlocal stopped
        decisions.append(d)
        if SettleWarning.PERSIST_FAILED in d.warnings:
            log.warning("leasebeat journal write failed for %s: %s (the request goes anyway, SP-3)", rid, d.detail)
        call_listener(listener, "on_settlement", rid, d)
        if d.stop_heartbeat and not stopped and stop_heartbeat is not None:
            stopped = True
            stop_heartbeat()

    report(s.last_decision)
    abandoned = False
    while True:
        a = s.poll_action()
        if a.kind is SettleActionKind.DONE:
            break
        if a.kind is SettleActionKind.PERSIST:
            if journal is None:
                report(s.handle_persisted(time.monotonic_ns()))
            else:
                j = journal
                d = yield _Blocking(lambda: j.persist(s, time.monotonic_ns()))
                if SettleWarning.PERSIST_FAILED not in d.warnings:
                    written = True
                report(d)
            continue
        assert a.attempt_id is not None and a.due_ns is not None
        if a.kind is SettleActionKind.SEND and a.due_ns > time.monotonic_ns():
            if not (yield _Sleep(a.due_ns)):
                abandoned = True
                break
        now = time.monotonic_ns()
        s.handle_sent(a.attempt_id, now)
        outcome = yield _Send(settle_request(rid, a), now + budget_ms * MS)
        now = max(time.monotonic_ns(), now)
        if isinstance(outcome, TransportError):
            report(s.handle_failure(a.attempt_id, outcome.kind, now))
        else:
            response = outcome
            report(s.handle_response(a.attempt_id, now, _wall_ms(), outcome.status, outcome.headers, outcome.body))
    journal_error: Exception | None = None
    has_record = s.record_json is not None
    if abandoned:
        if journal is not None:
            j = journal
            yield _Blocking(_try(lambda: j.release_claim(rid)))
        kept = journal is not None and has_record and written
        log.warning("leasebeat: settlement of %s left unresolved at the flush deadline (%s)", rid,
                    "record kept" if kept else "no record on disk: nothing will replay it")
    else:
        if journal is not None and has_record:
            j = journal
            r = yield _Blocking(_try(lambda: j.finish(s)))
            if isinstance(r, Exception):
                journal_error = r
                log.warning("leasebeat journal: ending the record of %s failed: %s", rid, r)
        last = decisions[-1]
        kept = journal is not None and has_record and written and (
            last.record != "remove" or journal_error is not None
        )
    if not stopped and stop_heartbeat is not None:
        stop_heartbeat()  # the settlement ended (or was abandoned at shutdown): so does the lease
    result = SettleResult(
        rid, kind, s.key, None if abandoned else s.outcome, kept, tuple(decisions), response, journal_error
    )
    if result.outcome is not None and result.outcome not in _SUCCESS:
        log.warning("leasebeat: %s of %s ended %s (code %s, record %s)", kind, rid, result.outcome.value,
                    result.code, "kept" if kept else "not kept")
    call_listener(listener, "on_settled", result)
    return result


# -- flush (J-7): one process-wide account of settlements in flight ----------


class _Inflight:
    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.count = 0
        self.abandon = False

    def enter(self) -> None:
        with self.cond:
            self.count += 1

    def leave(self) -> None:
        with self.cond:
            self.count -= 1
            if self.count == 0:
                self.abandon = False
            self.cond.notify_all()

    def wait_until(self, target_ns: int) -> bool:
        """Sleeps until ``target_ns``; False when a flush deadline passed."""
        with self.cond:
            while not self.abandon:
                left = target_ns - time.monotonic_ns()
                if left <= 0:
                    return True
                self.cond.wait(left / 1e9)
            return False

    def flush(self, timeout: float | None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.cond:
            while self.count > 0:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    self.abandon = True
                    self.cond.notify_all()
                    return False
                self.cond.wait(left)
            return True


INFLIGHT = _Inflight()


def flush(timeout: float | None = None) -> bool:
    """J-7: waits at most ``timeout`` seconds (None = until done) for every
    settlement in flight in this process (commits, releases, journal
    replays, thread or asyncio); True when none is left. At the deadline the
    unresolved ones are abandoned at their next wait: their records stay on
    disk (claims released) for the next replay."""
    return INFLIGHT.flush(timeout)


def call_transport(transport: Transport, request: Request, deadline_ns: int | None) -> HttpResponse | TransportError:
    """One request on a helper thread, abandoned at ``deadline_ns``."""
    box: list[Any] = []
    done = threading.Event()

    def work() -> None:
        try:
            r: Any = transport(request, deadline_ns)
        except TransportError as e:
            r = e
        except Exception as e:
            log.warning("leasebeat transport raised %r; reported as reset", e)
            r = TransportError(TransportFailure.RESET, repr(e))
        box.append(r)
        done.set()

    threading.Thread(target=work, name="leasebeat-settle", daemon=True).start()
    done.wait(None if deadline_ns is None else max(deadline_ns - time.monotonic_ns(), 0) / 1e9)
    if box:
        out: HttpResponse | TransportError = box[0]
        return out
    return TransportError(TransportFailure.TIMEOUT, "attempt deadline")


_T = TypeVar("_T")


def drive(steps: Generator[Any, Any, _T], transport: Transport) -> _T:
    """Runs a settle (or replay) loop on this thread: sleeps on the flush
    account, journal calls inline, requests on a helper thread bounded by
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
                value = INFLIGHT.wait_until(effect.until_ns)
            elif isinstance(effect, _Blocking):
                value = effect.fn()
            else:
                value = call_transport(transport, effect.request, effect.deadline_ns)
    finally:
        INFLIGHT.leave()


# -- the journal of a runner -------------------------------------------------

_JOURNALS: dict[tuple[str, str, str, str | None], Journal] = {}
_REPLAYED: set[str] = set()
_JOURNAL_LOCK = threading.Lock()

#: ``journal=OFF``: no journal (nothing durable; documented opt-out).
OFF = False


def open_journal(
    journal: Journal | bool | None,
    transport: Any,
    journal_dir: str | os.PathLike[str] | None,
    tenant: str | None,
) -> Journal | None:
    """The runner's journal: the one given, None for ``journal=False``, else
    the default partition (``Journal.open(transport.base_url,
    transport.api_key, dir=journal_dir or $CYCLES_JOURNAL_DIR or
    ~/.runcycles/commit-journal, tenant=tenant)``), one per process and
    partition. A transport without ``base_url``/``api_key`` needs
    ``journal=`` (else the journal is off, with a warning)."""
    if journal is False:
        return None
    if isinstance(journal, Journal):
        return journal
    if journal is not None and journal is not True:
        raise TypeError("journal must be a leasebeat.Journal, None (default) or False (off)")
    base_url = getattr(transport, "base_url", None)
    api_key = getattr(transport, "api_key", None)
    if not isinstance(base_url, str) or not isinstance(api_key, str):
        log.warning("leasebeat: the transport has no base_url/api_key: journal off (pass journal=Journal.open(...))")
        return None
    base = Journal.base_dir(journal_dir)
    k = (base, base_url, api_key, tenant)
    with _JOURNAL_LOCK:
        j = _JOURNALS.get(k)
        if j is None:
            j = Journal.open(base_url, api_key, dir=base, tenant=tenant)
            _JOURNALS[k] = j
        return j


def claim_replay(journal: Journal) -> bool:
    """True for the first runner of this process to start on this partition
    (it replays the journal in the background); later ones do not."""
    with _JOURNAL_LOCK:
        if journal.dir in _REPLAYED:
            return False
        _REPLAYED.add(journal.dir)
        return True


def replay_steps(
    journal: Journal, *, listener: Listener | None, budget_ms: int
) -> Generator[Any, Any, list[SettleResult]]:
    """The replay (J-6, SP-4) as a generator of the same effects: every
    record of the partition under claims, settled one after another."""
    rp = yield _Blocking(_try(lambda: journal.replay(time.monotonic_ns(), _wall_ms())))
    if isinstance(rp, Exception):
        log.warning("leasebeat journal replay failed: %s", rp)
        call_listener(listener, "on_replay", None, rp)
        return []
    for q in rp.quarantined:
        log.warning("leasebeat journal: record %s quarantined to %s: %s", q.file, q.moved_to, q.reason)
    for b in rp.busy:
        log.info("leasebeat journal: record of %s is being settled by another worker", b)
    call_listener(listener, "on_replay", rp, None)
    results = []
    for s in rp.settlements:
        r = yield from settle_steps(s, journal, kind="replay", listener=listener, budget_ms=budget_ms,
                                    stop_heartbeat=None)
        results.append(r)
    return results


def replay(
    journal: Journal, transport: Transport, *, listener: Listener | None = None, request_timeout_ms: int = 10_000
) -> list[SettleResult]:
    """Replays ``journal`` now on this thread (J-6): every record of its
    server is settled (same key, its persisted floor honoured) through
    ``transport``; returns one SettleResult per record settled (records held
    by another worker are skipped; quarantines go to the log and
    ``Listener.on_replay``). Runners do this in the background on start."""
    return drive(replay_steps(journal, listener=listener, budget_ms=request_timeout_ms), transport)


def commit_body(
    actual: Mapping[str, Any] | None, metrics: Mapping[str, Any] | None, metadata: Mapping[str, Any] | None
) -> dict[str, Any] | None:
    if actual is None:
        return None
    body: dict[str, Any] = {"actual": dict(actual)}
    if metrics is not None:
        body["metrics"] = dict(metrics)
    if metadata is not None:
        body["metadata"] = dict(metadata)
    return body


def event_of(hb: Heartbeat, event: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The event fallback's subject and action: given, else from the create
    body (known only until the create succeeded: take it at start)."""
    if event is not None:
        return {"subject": event["subject"], "action": event["action"]}
    cr = hb.create_request
    if "subject" in cr and "action" in cr:
        return {"subject": cr["subject"], "action": cr["action"]}
    return None
