"""Keep a Cycles reservation alive from asyncio with the runner.

    leasebeat serve &                     # prints "listening on http://127.0.0.1:PORT"
    python heartbeat_asyncio.py http://127.0.0.1:PORT my-api-key [--beats 3]

``leasebeat.aio.run`` is a coroutine: run it as a task next to your work and
cancel the task when the work is done; it cancels the heartbeat, reports the
stop and (``release_on_stop=True``) releases the reservation. It uses
httpx.AsyncClient when httpx is installed (``pip install leasebeat[httpx]``),
else urllib on helper threads. CI runs this file against ``leasebeat serve``
(py/tests/test_examples.py).
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

import leasebeat
from leasebeat.transports import AsyncHttpxTransport, AsyncUrllibTransport


class PrintListener(leasebeat.Listener):
    def __init__(self) -> None:
        self.successes = 0

    def on_decision(self, decision: leasebeat.Decision) -> None:
        print(decision.reservation_id, decision.to_json_str(), flush=True)
        if decision.outcome is leasebeat.OutcomeClass.SUCCESS:
            self.successes += 1

    def on_jeopardy(self, event: leasebeat.Jeopardy) -> None:
        print("lease_in_jeopardy", event, flush=True)


async def work(listener: PrintListener, beats: int, lease: asyncio.Task[Any]) -> None:
    while listener.successes <= beats and not lease.done():  # stands for the real work
        await asyncio.sleep(0.05)


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("base_url")
    p.add_argument("api_key")
    p.add_argument("--beats", type=int, default=3)
    args = p.parse_args()
    hb = leasebeat.Heartbeat(
        4000,
        1000,
        create_request={
            "subject": {"tenant": "acme"},
            "action": {"kind": "llm.completion", "name": "example"},
            "estimate": {"unit": "TOKENS", "amount": 100},
        },
    )
    listener = PrintListener()
    try:
        import httpx
    except ImportError:
        transport: Any = AsyncUrllibTransport(args.base_url, args.api_key)
        client = None
    else:
        client = httpx.AsyncClient(trust_env=False)
        transport = AsyncHttpxTransport(client, args.base_url, args.api_key)
    lease = asyncio.create_task(leasebeat.aio.run(hb, transport, listener=listener, release_on_stop=True))
    try:
        await work(listener, args.beats, lease)
    finally:
        lease.cancel()
        final = (await asyncio.gather(lease, return_exceptions=True))[0]
        if client is not None:
            await client.aclose()
    print("final:", hb.last_decision, "task:", type(final).__name__, flush=True)


if __name__ == "__main__":
    asyncio.run(main())
