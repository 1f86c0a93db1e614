"""A heartbeat as an asyncio task, with httpx.AsyncClient (example only; not run in CI).

Every leasebeat call is fast and non-blocking, so the task calls it directly
from the event loop; only the HTTP request is awaited. Cancelling the task
cancels the heartbeat (the core then decides stop "cancelled")::

    python heartbeat_asyncio.py http://127.0.0.1:7878 my-api-key
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

import httpx

import leasebeat


async def heartbeat(client: httpx.AsyncClient, base_url: str, api_key: str,
                    hb: leasebeat.Heartbeat) -> leasebeat.StopReason:
    """Drives ``hb`` until it stops; on task cancellation, cancels the heartbeat."""
    timeout = None if hb.request_timeout_ms is None else hb.request_timeout_ms / 1000
    try:
        while True:
            action = hb.poll_action()
            if action.is_stop:
                assert action.reason is not None
                return action.reason
            assert action.attempt is not None and action.attempt_id is not None
            if action.due_ns is None:
                await asyncio.Event().wait()  # never due: wait for cancellation
            else:
                await asyncio.sleep(max(0, action.due_ns - time.monotonic_ns()) / 1e9)
            if action.kind is leasebeat.AttemptKind.CREATE:
                url = f"{base_url}/v1/reservations"
            else:
                url = f"{base_url}/v1/reservations/{hb.reservation_id}/extend"
            headers = {"Content-Type": "application/json", "X-Cycles-API-Key": api_key,
                       "X-Idempotency-Key": action.attempt.key}
            hb.handle_sent(action.attempt_id, time.monotonic_ns())
            try:
                r = await client.post(url, content=action.attempt.body, headers=headers,
                                      timeout=timeout)
                body = await r.aread()
                decision = hb.handle_response(action.attempt_id, time.monotonic_ns(),
                                              r.status_code, r.headers.multi_items(), body)
            except httpx.TimeoutException:
                decision = hb.handle_failure(action.attempt_id, time.monotonic_ns(), "timeout")
            except httpx.ConnectError:
                decision = hb.handle_failure(action.attempt_id, time.monotonic_ns(), "connect")
            except httpx.TransportError:
                decision = hb.handle_failure(action.attempt_id, time.monotonic_ns(), "reset")
            print(json.dumps({"reservation_id": decision.reservation_id, **decision.to_json()}))
    except asyncio.CancelledError:
        if not hb.is_stopped:
            d = hb.cancel(time.monotonic_ns())
            print(json.dumps({"reservation_id": d.reservation_id, **d.to_json()}))
        raise


async def main() -> None:
    base_url, api_key = sys.argv[1], sys.argv[2]
    hb = leasebeat.Heartbeat(ttl_ms=60000, request_timeout_ms=10000, create_request={
        "subject": {"tenant": "acme"},
        "action": {"kind": "llm.completion", "name": "example"},
        "estimate": {"unit": "USD_MICROCENTS", "amount": 1000},
    })
    async with httpx.AsyncClient() as client:
        task = asyncio.create_task(heartbeat(client, base_url, api_key, hb))
        await asyncio.sleep(120)  # the long-running work
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
    print("stopped:", hb.stop_reason)


if __name__ == "__main__":
    asyncio.run(main())
