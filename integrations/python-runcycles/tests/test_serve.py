"""runcycles (patched with leasebeat) through its public API against
``leasebeat serve``: a ``@cycles``-decorated function (sync and async) runs
longer than its lease while the server loses an extension's response
(``extend:1=drop``) or answers a 5xx burst (``extend:1-2=503``). The lease
survives (the function's commit is accepted), the retry reuses the same
idempotency key, and the server's log holds no lapse.

The server binary is $LEASEBEAT_BIN; it listens on 127.0.0.1, port 0.
Nothing asserts on wall time.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runcycles import AsyncCyclesClient, CyclesClient, CyclesConfig, cycles

TTL = 14_000  # > the SDK's retry reserve (2 x 5300 + 1000) with these timeouts
WORK_S = 17.0  # the guarded function outlives its lease


class Serve:
    def __init__(self, log: Path, *args: str) -> None:
        exe = os.environ.get("LEASEBEAT_BIN")
        if not exe:
            pytest.skip("LEASEBEAT_BIN not set (run.sh builds leasebeat serve)")
        self.log_path = log
        self.proc = subprocess.Popen(
            [exe, "serve", "--bind", "127.0.0.1:0", "--log", str(log), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        assert line.startswith("listening on "), line
        self.url = line.removeprefix("listening on ")

    def log(self) -> list[dict[str, Any]]:
        return [json.loads(x) for x in self.log_path.read_text().splitlines() if x.strip()]

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()
        assert self.proc.stdout is not None
        self.proc.stdout.close()


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Any]:
    started: list[Serve] = []

    def start(*args: str) -> Serve:
        s = Serve(tmp_path / f"serve-{len(started)}.log", *args)
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()


def config(url: str) -> CyclesConfig:
    return CyclesConfig(
        base_url=url,
        api_key="test-key",
        tenant="acme",
        connect_timeout=0.1,
        read_timeout=0.2,  # whole-attempt budget 0.1 + 0.2 + 5 s = 5300 ms
        retry_enabled=False,
        journal_enabled=False,
    )


def check(server: Serve, fault: str) -> None:
    log = server.log()
    requests = [e for e in log if e.get("event") == "request"]
    creates = [e for e in requests if e.get("endpoint") == "create"]
    extends = [e for e in requests if e.get("endpoint") == "extend"]
    commits = [e for e in requests if e.get("endpoint") == "commit"]
    lapses = [e for e in log if e.get("event") == "lapse"]
    detail = json.dumps(log, indent=None)[:4000]
    assert len(creates) == 1, detail
    assert lapses == [], f"unreported lapse: {detail}"
    assert len(commits) == 1 and commits[0].get("status") == 200, f"the lease did not survive: {detail}"
    keys = [e.get("header_key") for e in extends]
    # the faulted extension(s) and their same-key retry
    n_faulted = 1 if fault == "drop" else 2
    assert len(keys) >= n_faulted + 1, detail
    assert len(set(keys[: n_faulted + 1])) == 1, f"retry did not reuse the key: {keys}"
    # beats after the recovered one use fresh keys (one logical extension each)
    assert len(set(keys)) == len(keys) - n_faulted, keys
    # the create was adopted: the first extension was not an immediate priming beat
    assert extends[0]["t_ms"] - creates[0]["t_ms"] >= 1000, detail


def check_logged(caplog: pytest.LogCaptureFixture, server: Serve) -> None:
    """Every decision is logged with the reservation id and its disposition;
    "Heartbeat extend ok" only for extensions the server answered 200 (the
    adopted create is logged as adopted, not as an extension: issue 25)."""
    messages = [r.getMessage() for r in caplog.records]
    lines = [x for x in messages if x.startswith("Heartbeat decision: ")]
    assert lines, "no decision logged"
    assert all("id=rsv-" in x and "disposition=" in x for x in lines), lines
    assert any("disposition=retry" in x for x in lines), lines  # the faulted beat was retried
    answered = [
        e
        for e in server.log()
        if e.get("event") == "request" and e.get("endpoint") == "extend"
        and e.get("status") == 200 and e.get("outcome") == "responded"
    ]
    ok = [x for x in messages if x.startswith("Heartbeat extend ok: ")]
    adopted = [x for x in messages if x.startswith("Heartbeat create adopted: ")]
    assert len(adopted) == 1, messages
    assert 1 <= len(ok) <= len(answered), (ok, len(answered))
    assert messages.index(adopted[0]) < messages.index(ok[0]), messages


FAULTS = {"drop": "extend:1=drop", "5xx": "extend:1-2=503"}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_sync_decorated_function_outlives_its_lease(
    serve: Any, fault: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="runcycles.lifecycle")
    server = serve("--fault", FAULTS[fault])
    client = CyclesClient(config(server.url))

    @cycles(estimate=100, action_kind="llm.completion", action_name="test", ttl_ms=TTL, client=client)
    def long_work() -> str:
        time.sleep(WORK_S)
        return "done"

    assert long_work() == "done"
    check(server, fault)
    check_logged(caplog, server)


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_async_decorated_function_outlives_its_lease(
    serve: Any, fault: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="runcycles.lifecycle")
    server = serve("--fault", FAULTS[fault])

    async def main() -> str:
        client = AsyncCyclesClient(config(server.url))

        @cycles(estimate=100, action_kind="llm.completion", action_name="test", ttl_ms=TTL, client=client)
        async def long_work() -> str:
            await asyncio.sleep(WORK_S)
            return "done"

        return await long_work()

    assert asyncio.run(main()) == "done"
    check(server, fault)
    check_logged(caplog, server)


def test_fallback_server_is_reported_in_jeopardy_once(serve: Any, caplog: pytest.LogCaptureFixture) -> None:
    """An older server (no ``remaining_ttl_ms``): the fallback schedule proves
    no lead, so the heartbeat logs ``lease_in_jeopardy`` once, right after the
    first success (D-15, as leasebeat's own runners do), and keeps the lease
    alive."""
    caplog.set_level(logging.DEBUG, logger="runcycles.lifecycle")
    server = serve("--omit-remaining")
    client = CyclesClient(config(server.url))

    @cycles(estimate=100, action_kind="llm.completion", action_name="test", ttl_ms=TTL, client=client)
    def long_work() -> str:
        time.sleep(WORK_S)
        return "done"

    assert long_work() == "done"
    log = server.log()
    detail = json.dumps(log, indent=None)[:4000]
    assert [e for e in log if e.get("event") == "lapse"] == [], f"lapse: {detail}"
    commits = [e for e in log if e.get("event") == "request" and e.get("endpoint") == "commit"]
    assert len(commits) == 1 and commits[0].get("status") == 200, f"the lease did not survive: {detail}"
    extends = [e for e in log if e.get("event") == "request" and e.get("endpoint") == "extend"]
    assert extends, detail
    jeopardy = [r.getMessage() for r in caplog.records if "lease_in_jeopardy" in r.getMessage()]
    assert len(jeopardy) == 1, jeopardy
    assert "prove no lead" in jeopardy[0] and "id=rsv-" in jeopardy[0], jeopardy
