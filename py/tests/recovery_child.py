"""One worker process of the recovery tests (tests/test_recovery.py).

Usage: python recovery_child.py RUNNER ACTION URL API_KEY JOURNAL_DIR [TENANT]

RUNNER is "thread" (``leasebeat.run``) or "asyncio" (``leasebeat.aio.start``).
ACTION:
  commit  create a lease through the runner (journal on, in JOURNAL_DIR), print
          {"event": "reserved", "reservation_id": ...}, then commit
          {"unit": "TOKENS", "amount": 42} with metrics and metadata and print
          {"event": "result", ...}. The parent usually kills it (SIGKILL) first.
  replay  the restart: start a runner (a fresh lease: replay on start is the
          public path), wait for the replay with flush($FLUSH_S, default 30),
          print every settled replay as {"event": "settled", ...} and every
          quarantine as {"event": "quarantined", ...}, release the fresh lease.
If $BARRIER is set, the process prints {"event": "ready"} and waits for that file
to exist before it starts (two replays released at once).

Every request that leaves goes through a transport wrapper that prints
{"event": "send", "endpoint", "key", "wall_ms", "record": <the journal record
text on disk at that instant, or null>}: the parent checks from outside that the
record was durable before the request left (J-1).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import leasebeat
from leasebeat import Heartbeat, Journal, Listener, Request
from leasebeat.transports import AsyncUrllibTransport, UrllibTransport

CREATE = {
    "subject": {"tenant": "acme", "app": "recovery"},
    "action": {"kind": "llm.completion", "name": "gpt-test"},
    "estimate": {"unit": "TOKENS", "amount": 100},
}
ACTUAL = {"unit": "TOKENS", "amount": 42}
METRICS = {"tokens_input": 30, "tokens_output": 12}
METADATA = {"run": "recovery-test"}


def emit(**kw: Any) -> None:
    sys.stdout.write(json.dumps(kw) + "\n")
    sys.stdout.flush()


class Watch:
    """Reads the journal record of a request's reservation at send time."""

    def __init__(self, journal: Journal) -> None:
        self.journal = journal

    def record(self, request: Request) -> str | None:
        rid = request.reservation_id
        if rid is None:
            return None
        p = Path(self.journal.dir) / Journal.record_file_name(rid)
        try:
            return p.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None

    def sent(self, request: Request) -> None:
        if request.endpoint in ("commit", "event", "release"):
            emit(event="send", endpoint=request.endpoint, key=request.key, reservation_id=request.reservation_id,
                 wall_ms=time.time_ns() // 1_000_000, record=self.record(request),
                 body=json.loads(request.body))


class SyncT:
    def __init__(self, inner: UrllibTransport, watch: Watch) -> None:
        self.inner, self.watch = inner, watch
        self.base_url, self.api_key = inner.base_url, inner.api_key

    def __call__(self, request: Request, deadline_ns: int | None, /) -> Any:
        self.watch.sent(request)
        return self.inner(request, deadline_ns)


class AsyncT:
    def __init__(self, inner: AsyncUrllibTransport, watch: Watch) -> None:
        self.inner, self.watch = inner, watch
        self.base_url, self.api_key = inner.base_url, inner.api_key

    async def __call__(self, request: Request, deadline_ns: int | None, /) -> Any:
        self.watch.sent(request)
        return await self.inner(request, deadline_ns)


class Report(Listener):
    def on_settled(self, result: Any) -> None:
        if result.kind == "replay":
            emit(event="settled", reservation_id=result.reservation_id, key=result.key,
                 outcome=None if result.outcome is None else result.outcome.value, record_kept=result.record_kept)

    def on_replay(self, rp: Any, error: Any) -> None:
        if rp is None:
            emit(event="replay_error", error=str(error))
            return
        for q in rp.quarantined:
            emit(event="quarantined", file=q.file, moved_to=q.moved_to, reason=q.reason)
        for m in rp.migrated:
            emit(event="migrated", from_file=m.from_file, to_file=m.to_file, reservation_id=m.reservation_id)
        emit(event="replay", settlements=len(rp.settlements), busy=list(rp.busy))


def result_json(r: Any) -> dict[str, Any]:
    return {
        "event": "result",
        "reservation_id": r.reservation_id,
        "key": r.key,
        "outcome": None if r.outcome is None else r.outcome.value,
        "record_kept": r.record_kept,
        "decisions": [d.to_json() for d in r.decisions],
    }


def barrier() -> None:
    b = os.environ.get("BARRIER")
    if not b:
        return
    emit(event="ready")
    while not os.path.exists(b):
        time.sleep(0.002)


def main() -> None:
    runner, action, url, api_key, jdir = sys.argv[1:6]
    tenant = sys.argv[6] if len(sys.argv) > 6 and sys.argv[6] else None
    journal = Journal.open(url, api_key, dir=jdir, tenant=tenant)
    watch = Watch(journal)
    flush_s = float(os.environ.get("FLUSH_S", "30"))
    barrier()
    emit(event="started", wall_ms=time.time_ns() // 1_000_000)
    hb = Heartbeat(60000, 3000, create_request=CREATE)
    if runner == "thread":
        t = SyncT(UrllibTransport(url, api_key), watch)
        r = leasebeat.run(hb, t, journal=journal, listener=Report())
        if action == "commit":
            rid = wait_rid(hb)
            emit(event="reserved", reservation_id=rid)
            emit(**result_json(r.commit(ACTUAL, METRICS, METADATA)))
        else:
            ok = r.flush(flush_s)
            emit(event="flushed", ok=ok)
            r.stop(release=True)
            r.join(10)
        return

    async def amain() -> None:
        t = AsyncT(AsyncUrllibTransport(url, api_key), watch)
        lease = leasebeat.aio.start(hb, t, journal=journal, listener=Report())
        if action == "commit":
            while hb.reservation_id is None:
                await asyncio.sleep(0.005)
            emit(event="reserved", reservation_id=hb.reservation_id)
            emit(**result_json(await lease.commit(ACTUAL, METRICS, METADATA)))
        else:
            ok = await lease.flush(flush_s)
            emit(event="flushed", ok=ok)
            await lease.release()
        await lease.stop()

    asyncio.run(amain())


def wait_rid(hb: Heartbeat) -> str:
    while hb.reservation_id is None:
        time.sleep(0.005)
    return hb.reservation_id


if __name__ == "__main__":
    main()
