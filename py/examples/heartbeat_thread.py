"""A heartbeat in a background thread, with httpx (example only; not run in CI).

Shows how an SDK feeds real responses into leasebeat and reports every
decision. Run against the reference server::

    leasebeat serve --port 7878 &        # from the leasebeat CLI
    pip install httpx leasebeat
    python heartbeat_thread.py http://127.0.0.1:7878 my-api-key

Every rule (when to beat, when to retry with the same key, when to stop) is the
core's: this loop only sends what poll_action() asks for, at the time it asks,
and reports what happened.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from collections.abc import Callable

import httpx

import leasebeat

log = logging.getLogger("heartbeat")


def run_heartbeat(
    client: httpx.Client,
    base_url: str,
    api_key: str,
    hb: leasebeat.Heartbeat,
    stop: threading.Event,
    on_decision: Callable[[leasebeat.Decision], None],
) -> leasebeat.StopReason:
    """Drives ``hb`` until it stops (or ``stop`` is set); returns the stop reason."""
    # The enforced per-attempt timeout must match the configured budget.
    timeout = None if hb.request_timeout_ms is None else hb.request_timeout_ms / 1000
    while True:
        action = hb.poll_action()
        if action.is_stop:
            assert action.reason is not None
            return action.reason
        assert action.attempt is not None and action.attempt_id is not None
        if action.due_ns is None:  # due at +infinity: nothing will ever be sent
            stop.wait()
        else:
            delay_s = max(0, action.due_ns - time.monotonic_ns()) / 1e9
            stop.wait(delay_s)  # fire on time (a real driver fires slightly early)
        if stop.is_set():
            decision = hb.cancel(time.monotonic_ns())
            on_decision(decision)
            assert decision.reason is not None
            return decision.reason

        if action.kind is leasebeat.AttemptKind.CREATE:
            url = f"{base_url}/v1/reservations"
        else:
            url = f"{base_url}/v1/reservations/{hb.reservation_id}/extend"
        headers = {
            "Content-Type": "application/json",
            "X-Cycles-API-Key": api_key,
            "X-Idempotency-Key": action.attempt.key,  # equal to the body's key
        }
        hb.handle_sent(action.attempt_id, time.monotonic_ns())
        try:
            r = client.post(url, content=action.attempt.body, headers=headers, timeout=timeout)
            body = r.read()
            decision = hb.handle_response(
                action.attempt_id,
                time.monotonic_ns(),  # after the complete body arrived
                r.status_code,
                r.headers.multi_items(),  # every header, repeated ones repeated
                body,
            )
        except httpx.TimeoutException:
            decision = hb.handle_failure(action.attempt_id, time.monotonic_ns(), "timeout")
        except httpx.ConnectError:
            decision = hb.handle_failure(action.attempt_id, time.monotonic_ns(), "connect")
        except httpx.TransportError:
            decision = hb.handle_failure(action.attempt_id, time.monotonic_ns(), "reset")
        on_decision(decision)


def report(decision: leasebeat.Decision) -> None:
    """Every decision is observable, with the reservation id and its numbers (HB-44)."""
    event = {"reservation_id": decision.reservation_id, **decision.to_json()}
    if decision.is_stop:
        log.warning("heartbeat stopped: %s", json.dumps(event))
    else:
        log.info("heartbeat: %s", json.dumps(event))


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    base_url, api_key = sys.argv[1], sys.argv[2]
    hb = leasebeat.Heartbeat(
        ttl_ms=60000,
        request_timeout_ms=10000,
        create_request={
            "subject": {"tenant": "acme"},
            "action": {"kind": "llm.completion", "name": "example"},
            "estimate": {"unit": "USD_MICROCENTS", "amount": 1000},
        },
    )
    stop = threading.Event()
    result: list[leasebeat.StopReason] = []
    with httpx.Client() as client:
        t = threading.Thread(
            target=lambda: result.append(run_heartbeat(client, base_url, api_key, hb, stop, report)),
            name="leasebeat-heartbeat",
            daemon=True,
        )
        t.start()
        try:
            time.sleep(120)  # the long-running work the reservation protects
        finally:
            stop.set()
            t.join()
    print("stopped:", result[0].value if result else "?")


if __name__ == "__main__":
    main()
