"""runcycles (Python SDK 0.5.3) with leasebeat's adapter, through its public API, against a
Cycles server (the real-server stage): a ``@cycles``-decorated function (sync or async) that
outlives its lease, as integrations/python-runcycles/tests/test_serve.py does against
``leasebeat serve``. Runs in scripts/realserver/sdk-live.sh's venv (the patched SDK).

usage: run_sdk_python.py sync|async URL API_KEY TENANT TTL_MS WORK_S

Prints one JSON line per adapter log record of the ``runcycles.lifecycle`` logger with the
wall-clock time `t` (ms): ``Heartbeat decision/stopped/lease_in_jeopardy`` lines carry the
reservation id (``id=...``), then the function's result (a commit the server accepted).
"""

import asyncio
import json
import logging
import re
import sys
import time

from runcycles import AsyncCyclesClient, CyclesClient, CyclesConfig, cycles


class Emit(logging.Handler):
    def emit(self, record):
        msg = record.getMessage()
        m = re.search(r"id=([0-9a-fA-F-]{8,})", msg)
        ev = "log"
        if "lease_in_jeopardy" in msg:
            ev = "jeopardy"
        elif msg.startswith("Heartbeat stopp"):
            ev = "stop"
        elif "disposition=stop" in msg:
            ev = "decision_stop"
        print(json.dumps({"t": record.created * 1000.0, "ev": ev, "rid": m.group(1) if m else None,
                          "msg": msg[:300]}), flush=True)


def main():
    mode, url, key, tenant, ttl, work_s = sys.argv[1:7]
    log = logging.getLogger("runcycles.lifecycle")
    log.setLevel(logging.DEBUG)
    log.addHandler(Emit())
    config = CyclesConfig(base_url=url, api_key=key, tenant=tenant, connect_timeout=1.0, read_timeout=2.0,
                          retry_enabled=False, journal_enabled=False)
    if mode == "sync":
        client = CyclesClient(config)

        @cycles(estimate=100, action_kind="llm.completion", action_name="realserver", ttl_ms=int(ttl), client=client)
        def long_work():
            time.sleep(float(work_s))
            return "done"

        result = long_work()
    else:
        async def go():
            client = AsyncCyclesClient(config)

            @cycles(estimate=100, action_kind="llm.completion", action_name="realserver", ttl_ms=int(ttl),
                    client=client)
            async def long_work():
                await asyncio.sleep(float(work_s))
                return "done"

            return await long_work()

        result = asyncio.run(go())
    print(json.dumps({"t": time.time() * 1000.0, "ev": "exit", "result": result}), flush=True)


if __name__ == "__main__":
    main()
