"""One lease through a Python runner against a Cycles server (the real-server stage).

usage: run_python.py thread|asyncio urllib|httpx URL API_KEY TTL_MS TIMEOUT_MS EXTENDS release|commit

With LEASEBEAT_ADOPT_RESERVATION=ID it heartbeats that existing reservation
(Heartbeat.for_reservation) instead of creating one. Runs leasebeat.run (a thread) or leasebeat.aio.run (a task) over the named transport, the
same entry points py/tests/test_runner.py drives against `leasebeat serve`. With EXTENDS > 0
it stops after that many successful extensions (releasing or committing); with 0 it runs
until the heartbeat stops by itself (the server's extension limit) and then releases
(the asyncio runner commits instead when asked). Prints one JSON line per event with the wall-clock time `t` (ms since the epoch):
decisions, jeopardy, the stop and the finalize answer.
"""

import asyncio
import json
import os
import sys
import threading
import time

import leasebeat
import leasebeat.aio
from leasebeat.transports import AsyncHttpxTransport, AsyncUrllibTransport, HttpxTransport, UrllibTransport

CREATE = {
    "subject": {"tenant": "demo"},
    "action": {"kind": "llm.completion", "name": "leasebeat-realserver"},
    "estimate": {"unit": "TOKENS", "amount": 1000},
}
ACTUAL = {"unit": "TOKENS", "amount": 500}
_lock = threading.Lock()


def emit(**fields):
    fields["t"] = time.time() * 1000.0
    with _lock:
        print(json.dumps(fields), flush=True)


class Log(leasebeat.Listener):
    def __init__(self, extends, on_enough):
        self.extends = extends
        self.seen = 0
        self.on_enough = on_enough
        self.adopt = bool(os.environ.get("LEASEBEAT_ADOPT_RESERVATION"))

    def on_decision(self, d):
        emit(ev="decision", rid=d.reservation_id, outcome=str(d.outcome), next=str(d.next),
             reason=str(d.reason) if d.reason is not None else None, remaining_ttl_ms=d.remaining_ttl_ms)
        if str(d.outcome).endswith("success"):
            self.seen += 1
            if self.extends and self.seen == self.extends + (0 if self.adopt else 1):  # (the create), EXTENDS
                self.on_enough()

    def on_jeopardy(self, e):
        emit(ev="jeopardy", rid=e.reservation_id, cause=e.cause)

    def on_stop(self, d):
        emit(ev="stop", rid=d.reservation_id, reason=str(d.reason))

    def on_finalize(self, endpoint, response, error):
        emit(ev="finalize", endpoint=endpoint, status=response.status if response else None,
             error=repr(error) if error else None)


def main():
    mode, transport, url, key, ttl, timeout, extends, fin = sys.argv[1:9]
    ttl, timeout, extends = int(ttl), int(timeout), int(extends)
    adopt = os.environ.get("LEASEBEAT_ADOPT_RESERVATION")
    if adopt:  # an existing reservation: its first beat is an immediate extension
        hb = leasebeat.Heartbeat.for_reservation(adopt, ttl, timeout)
    else:
        hb = leasebeat.Heartbeat(ttl, timeout, create_request=CREATE)
    finalize = {"commit": ACTUAL} if fin == "commit" else {"release": True}
    if mode == "thread":
        if transport == "httpx":
            import httpx

            tr = HttpxTransport(httpx.Client(), url, key)
        else:
            tr = UrllibTransport(url, key)
        holder = {}
        log = Log(extends, lambda: holder["r"].stop(**finalize))
        holder["r"] = r = leasebeat.run(hb, tr, listener=log, release_on_stop=True)
        r.join()
    else:
        async def go():
            if transport == "httpx":
                import httpx

                client = httpx.AsyncClient()
                tr = AsyncHttpxTransport(client, url, key)
            else:
                tr = AsyncUrllibTransport(url, key)
            task_box = {}
            log = Log(extends, lambda: task_box["t"].cancel())
            commit = ACTUAL if fin == "commit" else None
            task_box["t"] = asyncio.ensure_future(
                leasebeat.aio.run(hb, tr, listener=log, release_on_stop=True, commit=commit))
            try:
                await task_box["t"]
            except asyncio.CancelledError:
                pass
        asyncio.run(go())
    emit(ev="exit")


if __name__ == "__main__":
    main()
