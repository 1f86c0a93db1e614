"""Settlement through both runners (issue 27): the heartbeat kept during the
commit until stop_heartbeat (ST-11), release, journal opt-out, flush leaving
the unresolved on disk (J-7), and the HP-1 policies cancel and
fail_on_finalize; each for ``[thread]`` and ``[asyncio]`` against serve."""

from __future__ import annotations

import asyncio
import json
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import leasebeat
from leasebeat import HeartbeatFailed, Heartbeat, SettleOutcome
from leasebeat.transports import AsyncUrllibTransport, UrllibTransport

RUNNERS = ["thread", "asyncio"]
CREATE = {
    "subject": {"tenant": "acme"},
    "action": {"kind": "llm.completion", "name": "t"},
    "estimate": {"unit": "TOKENS", "amount": 100},
}
ACTUAL = {"unit": "TOKENS", "amount": 7}


def until(cond: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


async def auntil(cond: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


def reqs(server: Any, endpoint: str, rid: str | None = None) -> list[dict[str, Any]]:
    return [e for e in server.log() if e.get("event") == "request" and e.get("endpoint") == endpoint
            and (rid is None or e.get("reservation_id") == rid)]


@pytest.mark.parametrize("runner", RUNNERS)
def test_heartbeat_runs_during_the_commit_until_stop_heartbeat(runner: str, serve: Any, tmp_path: Path) -> None:
    server = serve("--fault", "commit:1=429,retry-after=2")
    hb = Heartbeat(60000, 2000, create_request=CREATE)
    seen: list[tuple[Any, bool, bool]] = []

    class L(leasebeat.Listener):
        def on_settlement(self, rid: str, d: Any) -> None:
            seen.append((d.status, d.stop_heartbeat, hb.is_stopped))

    if runner == "thread":
        r = leasebeat.run(hb, UrllibTransport(server.url, server.api_key), journal_dir=tmp_path / "j",
                          listener=L())
        until(lambda: hb.reservation_id)
        res = r.commit(ACTUAL)
        r.join(10)
    else:
        async def main() -> Any:
            lease = leasebeat.aio.start(hb, AsyncUrllibTransport(server.url, server.api_key),
                                        journal_dir=tmp_path / "j", listener=L())
            async with lease:
                await auntil(lambda: hb.reservation_id)
                return await lease.commit(ACTUAL)
        res = asyncio.run(main())
    assert res.outcome is SettleOutcome.COMMITTED
    commits = reqs(server, "commit", res.reservation_id)
    assert [c["status"] for c in commits] == [429, 200]
    assert commits[1]["arrived_ms"] - commits[0]["t_ms"] >= 1950  # Retry-After honoured
    # ST-11: the heartbeat kept running while the commit waited out its Retry-After (every
    # decision before the final one found it alive), and stopped with the final decision.
    assert all(not stopped for (_, stop, stopped) in seen[:-1])
    assert seen[-1][:2] == (200, True)
    until(lambda: hb.is_stopped, 5)
    assert hb.stop_reason is not None and hb.stop_reason.value == "cancelled"
    assert server.lapses() == []


@pytest.mark.parametrize("runner", RUNNERS)
def test_release_and_journal_off(runner: str, serve: Any, tmp_path: Path) -> None:
    server = serve("--fault", "release:1=503")
    jdir = tmp_path / "j"
    hb = Heartbeat(60000, 2000, create_request=CREATE)
    if runner == "thread":
        r = leasebeat.run(hb, UrllibTransport(server.url, server.api_key), journal=False)
        until(lambda: hb.reservation_id)
        assert r.journal is None
        res = r.release("nothing used")
        with pytest.raises(leasebeat.Stopped):
            r.commit(ACTUAL)  # one settlement per lease
        r.join(10)
    else:
        async def main() -> Any:
            lease = leasebeat.aio.start(hb, AsyncUrllibTransport(server.url, server.api_key), journal=False)
            assert lease.journal is None
            async with lease:
                await auntil(lambda: hb.reservation_id)
                out = await lease.release("nothing used")
                with pytest.raises(leasebeat.Stopped):
                    await lease.commit(ACTUAL)  # one settlement per lease
                return out
        res = asyncio.run(main())
    assert res.outcome is SettleOutcome.RELEASED and res.ok and not res.record_kept
    rel = reqs(server, "release", res.reservation_id)
    assert [e["status"] for e in rel] == [503, 200]
    assert len({e["header_key"] for e in rel}) == 1 and json.loads(rel[1]["body"])["reason"] == "nothing used"
    assert not jdir.exists() and not list(tmp_path.rglob("v2-*.json"))


@pytest.mark.parametrize("runner", RUNNERS)
def test_flush_leaves_the_unresolved_on_disk(runner: str, serve: Any, tmp_path: Path) -> None:
    server = serve("--fault", "commit:*=503")
    jdir = tmp_path / "j"
    hb = Heartbeat(60000, 2000, create_request=CREATE)
    t0 = time.monotonic()
    if runner == "thread":
        r = leasebeat.run(hb, UrllibTransport(server.url, server.api_key), journal_dir=jdir)
        until(lambda: hb.reservation_id)
        box: list[Any] = []
        th = threading.Thread(target=lambda: box.append(r.commit(ACTUAL)))
        th.start()
        until(lambda: reqs(server, "commit"))
        assert r.flush(0.3) is False
        th.join(10)
        res = box[0]
        r.join(10)
    else:
        async def main() -> Any:
            lease = leasebeat.aio.start(hb, AsyncUrllibTransport(server.url, server.api_key), journal_dir=jdir)
            async with lease:
                await auntil(lambda: hb.reservation_id)
                task = asyncio.ensure_future(lease.commit(ACTUAL))
                await auntil(lambda: reqs(server, "commit"))
                assert await lease.flush(0.3) is False
                return await task
        res = asyncio.run(main())
    assert time.monotonic() - t0 < 10
    assert res.outcome is None and res.record_kept  # J-7: unresolved, kept
    j = leasebeat.Journal.open(server.url, server.api_key, dir=jdir)
    rec = json.loads(j.load(res.reservation_id) or "{}")
    assert rec["commit_body"]["idempotency_key"] == res.key
    assert not j.holds_claim(res.reservation_id)
    assert leasebeat.flush(1) is True  # nothing left in flight


def _break_partition(journal: Any) -> Path:
    """Replaces the journal's partition directory by a plain file: every later
    write fails while the journal object stays open."""
    part = Path(journal.dir)
    shutil.rmtree(part)
    part.write_bytes(b"not a directory")
    return part


@pytest.mark.parametrize("runner", RUNNERS)
def test_a_failed_journal_write_still_sends_and_keeps_nothing(runner: str, serve: Any, tmp_path: Path) -> None:
    # SP-3: the record cannot be written; the commit goes anyway (with its one key), the
    # decision says persist_failed, and when the flush abandons it unresolved the result
    # does not pretend the record is kept: nothing is on disk.
    server = serve("--fault", "commit:*=503")
    jdir = tmp_path / "j"
    hb = Heartbeat(60000, 2000, create_request=CREATE)
    warned: list[Any] = []

    class L(leasebeat.Listener):
        def on_settlement(self, rid: str, d: Any) -> None:
            if leasebeat.SettleWarning.PERSIST_FAILED in d.warnings:
                warned.append(d.detail)

    if runner == "thread":
        r = leasebeat.run(hb, UrllibTransport(server.url, server.api_key), journal_dir=jdir, listener=L())
        until(lambda: hb.reservation_id)
        part = _break_partition(r.journal)
        box: list[Any] = []
        th = threading.Thread(target=lambda: box.append(r.commit(ACTUAL)))
        th.start()
        until(lambda: len(reqs(server, "commit")) >= 2)
        assert r.flush(0.3) is False
        th.join(10)
        res = box[0]
        r.join(10)
    else:
        async def main() -> Any:
            lease = leasebeat.aio.start(hb, AsyncUrllibTransport(server.url, server.api_key), journal_dir=jdir,
                                        listener=L())
            async with lease:
                await auntil(lambda: hb.reservation_id)
                brk = _break_partition(lease.journal)
                task = asyncio.ensure_future(lease.commit(ACTUAL))
                await auntil(lambda: len(reqs(server, "commit")) >= 2)
                assert await lease.flush(0.3) is False
                return brk, await task
        part, res = asyncio.run(main())
    assert len(warned) == 1 and "journal " in (warned[0] or ""), warned
    commits = reqs(server, "commit", res.reservation_id)
    assert len(commits) >= 2 and len({c["header_key"] for c in commits}) == 1
    assert res.outcome is None and not res.record_kept  # nothing was ever written
    assert part.read_bytes() == b"not a directory"


@pytest.mark.parametrize("runner", RUNNERS)
def test_cancel_policy(runner: str, serve: Any, tmp_path: Path) -> None:
    server = serve("--fault", "extend:1=404:NOT_FOUND", "--max-lead-ms", "1000")
    hb = Heartbeat(3000, 1000, create_request=CREATE)
    failures: list[leasebeat.HeartbeatFailure] = []

    class L(leasebeat.Listener):
        def on_heartbeat_failure(self, f: leasebeat.HeartbeatFailure) -> None:
            failures.append(f)

    if runner == "thread":
        r = leasebeat.run(hb, UrllibTransport(server.url, server.api_key), journal_dir=tmp_path / "j",
                          policy="cancel", listener=L())
        assert r.cancelled.wait(20), "the work is asked to stop (threading.Event)"
        res = r.commit(ACTUAL)  # the work settles what it used
        r.join(10)
    else:
        async def main() -> Any:
            lease = leasebeat.aio.start(hb, AsyncUrllibTransport(server.url, server.api_key),
                                        journal_dir=tmp_path / "j", policy="cancel", listener=L())
            out: list[Any] = []
            with pytest.raises(HeartbeatFailed) as e:
                async with lease:
                    try:
                        await asyncio.sleep(30)  # the work, cancelled by the lease
                    finally:
                        out.append(await lease.commit(ACTUAL))
            assert lease.cancelled.is_set()
            assert e.value.failure.reason == "not_found"
            return out[0]
        res = asyncio.run(main())
    assert failures and failures[0].disposition == "stop" and failures[0].reason == "not_found"
    assert failures[0].reservation_id == res.reservation_id
    # The settlement still ran (the server says the reservation is gone: rejected).
    assert reqs(server, "commit", res.reservation_id)
    assert res.outcome is not None


@pytest.mark.parametrize("runner", RUNNERS)
def test_fail_on_finalize_policy(runner: str, serve: Any, tmp_path: Path) -> None:
    server = serve("--fault", "extend:1=404:NOT_FOUND", "--max-lead-ms", "1000")
    hb = Heartbeat(3000, 1000, create_request=CREATE)
    if runner == "thread":
        r = leasebeat.run(hb, UrllibTransport(server.url, server.api_key), journal_dir=tmp_path / "j",
                          policy="fail_on_finalize")
        until(lambda: hb.is_stopped)
        assert not r.cancelled.is_set()  # the work was not interrupted
        with pytest.raises(HeartbeatFailed) as e:
            r.commit(ACTUAL)
        r.join(10)
    else:
        async def main() -> Any:
            lease = leasebeat.aio.start(hb, AsyncUrllibTransport(server.url, server.api_key),
                                        journal_dir=tmp_path / "j", policy="fail_on_finalize")
            async with lease:
                await auntil(lambda: hb.is_stopped)
                with pytest.raises(HeartbeatFailed) as e:
                    await lease.commit(ACTUAL)
            return e
        e = asyncio.run(main())
    assert e.value.failure.reason == "not_found" and e.value.result is not None
    rid = e.value.result.reservation_id
    assert reqs(server, "commit", rid), "the settlement ran before the failure was raised"


def test_policy_and_journal_arguments_are_checked(serve: Any, tmp_path: Path) -> None:
    server = serve()
    t = UrllibTransport(server.url, server.api_key)
    with pytest.raises(ValueError):
        leasebeat.run(Heartbeat(60000, 2000, create_request=CREATE), t, policy="ignore")
    with pytest.raises(TypeError):
        leasebeat.run(Heartbeat(60000, 2000, create_request=CREATE), t, journal="yes")  # type: ignore[arg-type]
    assert [p.value for p in leasebeat.HeartbeatPolicy] == ["warn", "cancel", "fail_on_finalize"]
