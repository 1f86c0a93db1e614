"""The Cycles SDK Recovery Conformance Profile 0.3 (catalog scenarios.yaml),
all 12 scenarios, for both Python runners: ``[thread]`` (``leasebeat.run``) and
``[asyncio]`` (``leasebeat.aio.start``).

Every test performs the scenario's choreography against ``leasebeat serve``
(127.0.0.1:0, ``--log``, the ``--fault`` rules it needs) and asserts it from
serve's request log: endpoints in order, the same key in header and body, the
ledger changed at most once (``applied``), the event body, no request before a
persisted ``not_before_ms``. Each assertion label of the catalog is named in
the assertion's message. A restart is a fresh OS process (tests/recovery_child.py)
started after the first was killed with SIGKILL, from the journal alone; a
concurrent replay is two processes released at once by a barrier file.
recovery/python-{thread,asyncio}/adapter map scenario ids to these tests.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import leasebeat
from leasebeat import Heartbeat, Journal, SettleOutcome
from leasebeat.transports import AsyncUrllibTransport, UrllibTransport

CHILD = Path(__file__).with_name("recovery_child.py")
RUNNERS = ["thread", "asyncio"]
CREATE = {
    "subject": {"tenant": "acme", "app": "recovery"},
    "action": {"kind": "llm.completion", "name": "gpt-test"},
    "estimate": {"unit": "TOKENS", "amount": 100},
}
ACTUAL = {"unit": "TOKENS", "amount": 42}
METRICS = {"tokens_input": 30, "tokens_output": 12}
METADATA = {"run": "recovery-test"}


# ------------------------------------------------------------------ helpers


def settle_requests(server: Any, rid: str) -> list[dict[str, Any]]:
    """The settlement requests of ``rid`` in arrival order (commit, release, and
    events whose body names the reservation)."""
    out = []
    for e in server.log():
        if e.get("event") != "request":
            continue
        ep = e.get("endpoint")
        if ep in ("commit", "release") and e.get("reservation_id") == rid:
            out.append(e)
        elif ep == "events":
            body = json.loads(e["body"] or "{}")
            if body.get("metadata", {}).get("recovered_reservation_id") == rid:
                out.append(e)
    return sorted(out, key=lambda e: e["seq"])


def body_key(e: dict[str, Any]) -> Any:
    return json.loads(e["body"]).get("idempotency_key")


def assert_one_key(reqs: list[dict[str, Any]], key: str | None = None) -> str:
    """retry_uses_original_idempotency_key: one key, in header and body, in every request."""
    keys = {e["header_key"] for e in reqs} | {body_key(e) for e in reqs}
    assert len(keys) == 1, f"retry_uses_original_idempotency_key: keys {keys}"
    k = keys.pop()
    if key is not None:
        assert k == key, "retry_uses_original_idempotency_key: not the journaled key"
    return str(k)


def assert_at_most_once(reqs: list[dict[str, Any]]) -> None:
    """settlement_occurs_at_most_once: serve's log says which request changed the ledger."""
    applied = [e for e in reqs if e.get("applied") is True]
    assert len(applied) <= 1, f"settlement_occurs_at_most_once: applied {len(applied)} times"
    if reqs and "applied" in reqs[0]:
        assert len(applied) == 1, "settlement_occurs_at_most_once: the settlement never applied"


def wait_for(cond: Callable[[], Any], timeout: float = 20.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


def record_path(journal: Journal, rid: str) -> Path:
    return Path(journal.dir) / Journal.record_file_name(rid)


def read_record(journal: Journal, rid: str) -> dict[str, Any] | None:
    p = record_path(journal, rid)
    try:
        return dict(json.loads(p.read_text(encoding="utf-8")))
    except (FileNotFoundError, json.JSONDecodeError):
        return None


class Child:
    """One worker process (tests/recovery_child.py) and its JSON lines."""

    def __init__(self, runner: str, action: str, server: Any, jdir: Path, *, api_key: str | None = None,
                 tenant: str | None = None, env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(CHILD), runner, action, server.url, api_key or server.api_key, str(jdir),
             tenant or ""],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, **(env or {})},
        )
        self.lines: list[dict[str, Any]] = []

    def next_event(self, name: str, timeout: float = 30.0) -> dict[str, Any]:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            e: dict[str, Any] = json.loads(line)
            self.lines.append(e)
            if e["event"] == name:
                return e
        err = self.proc.stderr.read() if self.proc.stderr and self.proc.poll() is not None else ""
        raise AssertionError(f"child never printed {name!r}; got {self.lines}; stderr {err[-3000:]}")

    def kill9(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        assert self.proc.returncode == -signal.SIGKILL

    def finish(self, timeout: float = 60.0) -> list[dict[str, Any]]:
        out, err = self.proc.communicate(timeout=timeout)
        self.lines += [json.loads(x) for x in out.splitlines() if x.strip()]
        assert self.proc.returncode == 0, f"child failed: {err[-3000:]}"
        return self.lines

    def events(self, name: str) -> list[dict[str, Any]]:
        return [e for e in self.lines if e["event"] == name]


def journal_for(server: Any, jdir: Path, api_key: str | None = None, tenant: str | None = None) -> Journal:
    return Journal.open(server.url, api_key or server.api_key, dir=jdir, tenant=tenant)


class Recorder(leasebeat.Listener):
    def __init__(self) -> None:
        self.failures: list[leasebeat.HeartbeatFailure] = []
        self.decisions: list[Any] = []

    def on_heartbeat_failure(self, f: leasebeat.HeartbeatFailure) -> None:
        self.failures.append(f)

    def on_decision(self, d: Any) -> None:
        self.decisions.append(d)


def run_lease(runner: str, server: Any, jdir: Path, work: Callable[[Any, Heartbeat], Any], *,
              ttl_ms: int = 60000, timeout_ms: int = 3000, listener: Any = None, policy: str = "warn") -> Any:
    """Runs one lease in-process with the runner under test; ``work(handle, hb)``
    is called once the reservation exists and returns the settle result."""
    hb = Heartbeat(ttl_ms, timeout_ms, create_request=CREATE)
    if runner == "thread":
        r = leasebeat.run(hb, UrllibTransport(server.url, server.api_key), journal_dir=jdir, listener=listener,
                          policy=policy)
        wait_for(lambda: hb.reservation_id, what="the create")
        try:
            return work(r, hb)
        finally:
            r.stop()
            r.join(10)

    async def amain() -> Any:
        lease = leasebeat.aio.start(hb, AsyncUrllibTransport(server.url, server.api_key), journal_dir=jdir,
                                    listener=listener, policy=policy)
        async with lease:
            while hb.reservation_id is None:
                await asyncio.sleep(0.005)
            res = work(lease, hb)
            if asyncio.iscoroutine(res):
                res = await res
            return res

    return asyncio.run(amain())


def commit(handle: Any, *args: Any) -> Any:
    """handle.commit(...) for either runner (a coroutine for asyncio)."""
    return handle.commit(*args)


# --------------------------------------------------------------- core level


@pytest.mark.parametrize("runner", RUNNERS)
def test_cr_core_001_lost_commit_response_reuses_the_same_key(runner: str, serve: Any, tmp_path: Path) -> None:
    """CR-CORE-001: commit -> commit_same_key."""
    server = serve("--fault", "commit:1=drop")
    res = run_lease(runner, server, tmp_path / "j", lambda h, hb: commit(h, ACTUAL, METRICS, METADATA))
    assert res.outcome is SettleOutcome.COMMITTED and not res.record_kept
    reqs = settle_requests(server, res.reservation_id)
    assert [e["endpoint"] for e in reqs] == ["commit", "commit"], "expected commit, commit_same_key"
    assert reqs[0]["outcome"] == "dropped" and reqs[1]["status"] == 200
    assert assert_one_key(reqs) == res.key  # retry_uses_original_idempotency_key
    assert_at_most_once(reqs)  # settlement_occurs_at_most_once
    assert json.loads(reqs[1]["body"])["actual"] == ACTUAL


@pytest.mark.parametrize("runner", RUNNERS)
def test_cr_core_002_expired_commit_falls_back_to_an_event(runner: str, serve: Any, tmp_path: Path) -> None:
    """CR-CORE-002: commit (410 RESERVATION_EXPIRED) -> event_same_key."""
    server = serve("--fault", "commit:1=410:RESERVATION_EXPIRED")
    res = run_lease(runner, server, tmp_path / "j", lambda h, hb: commit(h, ACTUAL, METRICS, METADATA))
    assert res.outcome is SettleOutcome.APPLIED and not res.record_kept
    reqs = settle_requests(server, res.reservation_id)
    assert [e["endpoint"] for e in reqs] == ["commit", "events"], "expected commit, event_same_key"
    assert reqs[0]["status"] == 410 and reqs[1]["status"] == 201
    assert_one_key(reqs, res.key)
    ev = json.loads(reqs[1]["body"])
    # event_carries_original_subject_action_actual (and metrics, metadata)
    assert ev["subject"] == CREATE["subject"], "event_carries_original_subject_action_actual: subject"
    assert ev["action"] == CREATE["action"], "event_carries_original_subject_action_actual: action"
    assert ev["actual"] == ACTUAL, "event_carries_original_subject_action_actual: actual"
    assert ev["metrics"] == METRICS
    assert ev["metadata"]["run"] == METADATA["run"]
    assert ev["metadata"]["recovered_reservation_id"] == res.reservation_id
    assert_at_most_once(reqs)  # settlement_occurs_at_most_once


@pytest.mark.parametrize("runner", RUNNERS)
def test_cr_core_003_heartbeat_transport_failure_is_observable_and_non_fatal(
    runner: str, serve: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """CR-CORE-003: extend (transport error) -> extend_same_key -> commit, under warn."""
    server = serve("--fault", "extend:1=drop-before", "--max-lead-ms", "2000")
    rec = Recorder()
    caplog.set_level(logging.WARNING, logger="leasebeat.runner")

    def retried(rid: str | None) -> bool:
        return len([e for e in server.requests("extend", rid) if e.get("status") == 200]) >= 1

    def work(h: Any, hb: Heartbeat) -> Any:
        rid = hb.reservation_id
        if runner == "thread":
            # The guarded action keeps going while the heartbeat fails and retries.
            wait_for(lambda: retried(rid), timeout=30, what="the extension retry")
            assert not h.cancelled.is_set(), "guarded_action_continues_under_warn_policy"
            return commit(h, ACTUAL)

        async def awork() -> Any:
            deadline = time.monotonic() + 30
            while not retried(rid):
                assert time.monotonic() < deadline, "the extension retry"
                await asyncio.sleep(0.02)
            assert not h.cancelled.is_set(), "guarded_action_continues_under_warn_policy"
            return await commit(h, ACTUAL)

        return awork()

    res = run_lease(runner, server, tmp_path / "j", work, ttl_ms=4000, timeout_ms=1000, listener=rec)
    rid = res.reservation_id
    extends = server.requests("extend", rid)
    assert extends[0]["outcome"] == "dropped" and extends[1]["status"] == 200
    assert extends[0]["header_key"] == extends[1]["header_key"], "expected extend, extend_same_key"
    # heartbeat_failure_reports_reservation_and_disposition
    assert rec.failures, "heartbeat_failure_reports_reservation_and_disposition: nothing reported"
    f = rec.failures[0]
    assert f.reservation_id == rid and f.disposition == "retry_same_key" and f.outcome == "transport_failure"
    assert any(rid in r.getMessage() and "retry_same_key" in r.getMessage() for r in caplog.records), \
        "heartbeat_failure_reports_reservation_and_disposition: not in the log"
    # final_settlement_is_attempted
    reqs = settle_requests(server, rid)
    assert [e["endpoint"] for e in reqs] == ["commit"] and reqs[0]["status"] == 200, "final_settlement_is_attempted"
    assert res.outcome is SettleOutcome.COMMITTED
    log = server.log()
    seq_commit = reqs[0]["seq"]
    assert all(e["seq"] < seq_commit for e in extends[:2]), "expected extend, extend_same_key, then commit"
    assert not [e for e in log if e.get("event") == "request" and e.get("endpoint") == "release"]


@pytest.mark.parametrize("runner", RUNNERS)
def test_cr_core_004_protocol_invalid_success_remains_ambiguous(runner: str, serve: Any, tmp_path: Path) -> None:
    """CR-CORE-004: commit (malformed 2xx) -> commit_same_key."""
    server = serve("--fault", "commit:1=malformed")
    res = run_lease(runner, server, tmp_path / "j", lambda h, hb: commit(h, ACTUAL))
    reqs = settle_requests(server, res.reservation_id)
    assert [e["endpoint"] for e in reqs] == ["commit", "commit"], "expected commit, commit_same_key"
    assert reqs[0]["status"] == 200 and reqs[1]["status"] == 200
    # only_schema_valid_expected_status_is_terminal_success: the truncated 200 decided a retry
    after_first = [d for d in res.decisions if d.status == 200]
    assert after_first[0].outcome is None and after_first[0].next.value == "commit", \
        "only_schema_valid_expected_status_is_terminal_success"
    assert after_first[-1].outcome is SettleOutcome.COMMITTED
    assert_one_key(reqs, res.key)  # ambiguous_success_retains_original_idempotency_key
    assert_at_most_once(reqs)


# ------------------------------------------------------------ durable level


@pytest.mark.parametrize("runner", RUNNERS)
def test_cr_durable_001_first_commit_is_journaled_before_it_leaves(runner: str, serve: Any, tmp_path: Path) -> None:
    """CR-DURABLE-001: commit (process killed in flight) -> commit_same_key_after_restart."""
    server = serve("--fault", "commit:1=delay=30000")  # applied, answered never (in this test)
    jdir = tmp_path / "j"
    a = Child(runner, "commit", server, jdir)
    rid = a.next_event("reserved")["reservation_id"]
    sent = a.next_event("send")
    # journal_write_precedes_first_settlement_request: on disk, with its key, when it left
    assert sent["record"] is not None, "journal_write_precedes_first_settlement_request"
    rec = json.loads(sent["record"])
    key = rec["commit_body"]["idempotency_key"]
    assert sent["key"] == key and rec["mode"] == "commit"
    time.sleep(0.5)  # the commit is in flight (serve holds its answer)
    a.kill9()
    j = journal_for(server, jdir)
    assert read_record(j, rid) is not None, "unresolved_record_survives_restart"
    b = Child(runner, "replay", server, jdir)
    out = b.finish()
    settled = [e for e in out if e["event"] == "settled" and e["reservation_id"] == rid]
    assert settled and settled[0]["outcome"] == "committed" and settled[0]["key"] == key
    reqs = wait_for(lambda: [e for e in settle_requests(server, rid) if e.get("status") == 200], what="replay")
    assert reqs and assert_one_key(reqs, key)  # commit_same_key_after_restart
    assert read_record(j, rid) is None and not record_path(j, rid).exists(), "successful_replay_removes_record"
    all_reqs = settle_requests(server, rid)
    assert [e["endpoint"] for e in all_reqs] == ["commit"] * len(all_reqs)
    assert_one_key(all_reqs, key)
    # settlement_occurs_at_most_once: the first commit was applied (serve logs it only once it
    # answers, after this test); the replay's is a same-key replay that changed nothing.
    assert [e.get("applied") for e in all_reqs] == [False], "settlement_occurs_at_most_once"


@pytest.mark.parametrize("runner", RUNNERS)
def test_cr_durable_002_replayed_expired_commit_switches_durably_to_event(
    runner: str, serve: Any, tmp_path: Path
) -> None:
    """CR-DURABLE-002: restart -> commit_same_key (410) -> killed after the mode
    switch -> restart -> event_same_key_after_restart."""
    server = serve("--fault", "commit:1=hold=60000", "--fault", "commit:2=410:RESERVATION_EXPIRED",
                   "--fault", "events:1=hold=60000")
    jdir = tmp_path / "j"
    j = journal_for(server, jdir)
    a = Child(runner, "commit", server, jdir)  # precondition: journal_contains_commit
    rid = a.next_event("reserved")["reservation_id"]
    a.next_event("send")
    time.sleep(0.5)  # printed just before it left: let it reach serve (which holds it)
    a.kill9()
    key = (read_record(j, rid) or {})["commit_body"]["idempotency_key"]
    b = Child(runner, "replay", server, jdir)
    sends: list[dict[str, Any]] = []
    while len(sends) < 2:
        sends.append(b.next_event("send"))
    assert sends[0]["endpoint"] == "commit" and sends[0]["key"] == key  # commit_same_key_after_restart
    assert sends[1]["endpoint"] == "event" and sends[1]["key"] == key, b.lines
    # event_mode_is_persisted_before_event_attempt: the record on disk said event when it left
    on_disk = json.loads(sends[1]["record"])
    assert on_disk["mode"] == "event", "event_mode_is_persisted_before_event_attempt"
    assert on_disk["event_fallback_body"]["idempotency_key"] == key
    time.sleep(0.5)  # the event reaches serve, which holds it unanswered
    b.kill9()  # process_terminated_after_mode_switch (the event is held, unanswered)
    assert (read_record(j, rid) or {}).get("mode") == "event", "event_mode_is_persisted_before_event_attempt"
    c = Child(runner, "replay", server, jdir)
    out = c.finish()
    first_send = [e for e in out if e["event"] == "send"][0]
    assert first_send["endpoint"] == "event" and first_send["key"] == key, out  # event_same_key_after_restart
    ev = first_send["body"]
    assert ev["subject"] == CREATE["subject"] and ev["action"] == CREATE["action"] and ev["actual"] == ACTUAL
    assert [e["outcome"] for e in out if e["event"] == "settled"] == ["applied"]
    assert not record_path(j, rid).exists(), "successful_event_removes_record"
    reqs = settle_requests(server, rid)
    logged = [e for e in reqs if e.get("status") is not None]
    assert [(e["endpoint"], e["status"]) for e in logged] == [("commit", 410), ("events", 201)]
    assert_one_key(reqs, key)
    assert_at_most_once(reqs)  # settlement_occurs_at_most_once


@pytest.mark.parametrize("runner", RUNNERS)
def test_cr_durable_003_rate_limit_floor_survives_restart(runner: str, serve: Any, tmp_path: Path) -> None:
    """CR-DURABLE-003: commit (429, Retry-After) -> killed after the journal
    write -> restarted before Retry-After -> commit_same_key_after_retry_after."""
    server = serve("--fault", "commit:1=429,retry-after=2")
    jdir = tmp_path / "j"
    j = journal_for(server, jdir)
    a = Child(runner, "commit", server, jdir)
    rid = a.next_event("reserved")["reservation_id"]
    rec = wait_for(lambda: (r := read_record(j, rid)) and r.get("not_before_ms") and r, what="the floor")
    a.kill9()  # process_terminated_after_journal_write
    not_before = rec["not_before_ms"]
    key = rec["commit_body"]["idempotency_key"]
    b = Child(runner, "replay", server, jdir)
    started = b.next_event("started")
    assert started["wall_ms"] < not_before, "process_restarted_before_retry_after (test setup)"
    out = b.finish()
    sends = [e for e in out if e["event"] == "send"]
    assert sends and sends[0]["key"] == key
    assert sends[0]["wall_ms"] >= not_before, "no_retry_before_persisted_not_before"
    reqs = settle_requests(server, rid)
    assert [(e["endpoint"], e["status"]) for e in reqs] == [("commit", 429), ("commit", 200)]
    assert_one_key(reqs, key)  # commit_same_key_after_retry_after
    # Server side too: the retry came at least Retry-After after the 429 (its own clock).
    assert reqs[1]["arrived_ms"] - reqs[0]["t_ms"] >= 2000 - 50, "no_retry_before_persisted_not_before"
    assert not record_path(j, rid).exists(), "successful_replay_removes_record"
    assert_at_most_once(reqs)


@pytest.mark.parametrize("runner", RUNNERS)
def test_cr_durable_004_tenant_journal_survives_api_key_rotation(runner: str, serve: Any, tmp_path: Path) -> None:
    """CR-DURABLE-004: api key rotated -> restart -> commit_same_key_after_restart."""
    server = serve("--fault", "commit:1=hold=60000")
    jdir = tmp_path / "j"
    old_key, new_key = "old-api-key-0f1e2d", "new-api-key-9a8b7c"
    a = Child(runner, "commit", server, jdir, api_key=old_key, tenant="acme")
    rid = a.next_event("reserved")["reservation_id"]
    a.next_event("send")
    time.sleep(0.5)  # printed just before it left: let it reach serve (which holds it)
    a.kill9()
    j_new = journal_for(server, jdir, api_key=new_key, tenant="acme")
    rec = read_record(j_new, rid)
    assert rec is not None, "new_tenant_credential_finds_record (same partition)"
    key = rec["commit_body"]["idempotency_key"]
    for p in jdir.rglob("*"):
        assert old_key not in p.name, "old_api_key_is_not_stored"
        if p.is_file():
            assert old_key.encode() not in p.read_bytes(), "old_api_key_is_not_stored"
    b = Child(runner, "replay", server, jdir, api_key=new_key, tenant="acme")
    out = b.finish()
    settled = [e for e in out if e["event"] == "settled"]
    assert [(e["reservation_id"], e["outcome"]) for e in settled] == [(rid, "committed")], \
        "new_tenant_credential_finds_record"
    reqs = [e for e in settle_requests(server, rid) if e.get("status") is not None]
    assert [(e["endpoint"], e["status"]) for e in reqs] == [("commit", 200)]
    assert_one_key(reqs, key)  # commit_same_key_after_restart
    assert not record_path(j_new, rid).exists()
    for p in jdir.rglob("*"):
        if p.is_file():
            assert old_key.encode() not in p.read_bytes(), "old_api_key_is_not_stored"
            assert new_key.encode() not in p.read_bytes(), "old_api_key_is_not_stored (nor the new one)"


@pytest.mark.parametrize("runner", RUNNERS)
def test_cr_durable_005_corrupt_or_unsupported_record_is_quarantined(runner: str, serve: Any, tmp_path: Path) -> None:
    """CR-DURABLE-005: restart with a corrupt, an unsupported and a valid record:
    no request for the first two, the valid one replays."""
    server = serve()
    jdir = tmp_path / "j"
    j = journal_for(server, jdir)
    # A valid record left by an earlier process (a real reservation, committed never).
    _, _, status, _, body = server.create(60000)
    assert status == 200
    valid = json.loads(body)["reservation_id"]
    s = leasebeat.Settlement.commit(valid, {"actual": ACTUAL}, now_ns=time.monotonic_ns(),
                                    wall_ms=time.time_ns() // 10**6, base_url=server.url)
    j.persist(s, time.monotonic_ns())
    j.release_claim(valid)
    text = s.record_json
    assert text is not None
    corrupt, unsupported = "rsv-corrupt-1", "rsv-unsupported-1"
    (Path(j.dir) / Journal.record_file_name(corrupt)).write_text(
        text.replace(valid, corrupt)[: len(text) // 2])  # truncated
    (Path(j.dir) / Journal.record_file_name(unsupported)).write_text(
        text.replace(valid, unsupported).replace('"version":1', '"version":2'))
    b = Child(runner, "replay", server, jdir)
    out = b.finish()
    q = {e["file"]: e for e in out if e["event"] == "quarantined"}
    for rid, label in ((corrupt, "corrupt_record_is_quarantined"),
                       (unsupported, "unsupported_record_version_is_quarantined")):
        name = Journal.record_file_name(rid)
        assert name in q and q[name]["reason"], f"corruption_is_reported: {label}"
        assert not (Path(j.dir) / name).exists(), label
        assert q[name]["moved_to"] and (Path(j.dir) / q[name]["moved_to"]).exists(), f"{label} (renamed aside)"
        assert settle_requests(server, rid) == [], f"{label}: no request"
    assert [(e["reservation_id"], e["outcome"]) for e in out if e["event"] == "settled"] == \
        [(valid, "committed")], "other_valid_records_still_replay"
    reqs = settle_requests(server, valid)
    assert [(e["endpoint"], e["status"]) for e in reqs] == [("commit", 200)], "other_valid_records_still_replay"
    assert not record_path(j, valid).exists()


@pytest.mark.parametrize("runner", RUNNERS)
def test_cr_durable_006_concurrent_replay_remains_exactly_once(runner: str, serve: Any, tmp_path: Path) -> None:
    """CR-DURABLE-006: two independent worker processes replay the same record,
    released at once -> concurrent_commit_same_key, applied once."""
    server = serve("--fault", "commit:1=hold=60000", "--fault", "commit:2-=hold=300")
    jdir = tmp_path / "j"
    j = journal_for(server, jdir)
    a = Child(runner, "commit", server, jdir)  # precondition: journal_contains_commit
    rid = a.next_event("reserved")["reservation_id"]
    a.next_event("send")
    time.sleep(0.5)  # printed just before it left: let it reach serve (which holds it)
    a.kill9()
    key = (read_record(j, rid) or {})["commit_body"]["idempotency_key"]
    barrier = tmp_path / "go"
    workers = [Child(runner, "replay", server, jdir, env={"BARRIER": str(barrier)}) for _ in range(2)]
    for w in workers:
        w.next_event("ready")
    barrier.touch()  # two_independent_workers_replay_same_record
    outs = [w.finish() for w in workers]
    settled = [e for out in outs for e in out if e["event"] == "settled"]
    busy = [b for out in outs for e in out if e["event"] == "replay" for b in e["busy"]]
    assert [e["outcome"] for e in settled] == ["committed"], f"settlement_occurs_at_most_once: {settled}"
    assert busy == [rid] or len(settled) == 1
    reqs = [e for e in settle_requests(server, rid) if e.get("status") is not None]
    assert reqs and all(e["endpoint"] == "commit" for e in reqs)
    assert_one_key(reqs, key)  # concurrent_commit_same_key
    assert_at_most_once(reqs)  # settlement_occurs_at_most_once
    assert not record_path(j, rid).exists(), "terminal_record_is_removed"


@pytest.mark.parametrize("runner", RUNNERS)
def test_cr_durable_007_filenames_preserve_distinct_identifiers(runner: str, serve: Any, tmp_path: Path) -> None:
    """CR-DURABLE-007: records whose ids collide under the legacy name scheme;
    the runner's replay on start migrates the matching legacy record and
    deletes nothing else. The records carry a floor an hour ahead, so the
    replay sends nothing (expected requests: none) and flush leaves them."""
    server = serve()
    jdir = tmp_path / "j"
    j = journal_for(server, jdir)
    a, b = "rsv/x:1", "rsv?x:1"  # legacy name of both: rsv_x_1.json
    wall = time.time_ns() // 10**6

    def record(rid: str) -> str:
        s = leasebeat.Settlement.commit(rid, {"actual": ACTUAL}, now_ns=time.monotonic_ns(), wall_ms=wall,
                                        base_url=server.url)
        text = s.record_json
        assert text is not None
        r = json.loads(text)
        r["not_before_ms"] = wall + 3_600_000
        return json.dumps(r)

    j.write(record(b))  # the standard record of b
    legacy = Path(j.dir) / "rsv_x_1.json"
    legacy.write_text(record(a))  # a legacy-named record of a
    std_a = "v2-" + hashlib.sha256(a.encode("utf-8")).hexdigest() + ".json"
    std_b = "v2-" + hashlib.sha256(b.encode("utf-8")).hexdigest() + ".json"
    assert Journal.record_file_name(b) == std_b, "standard_filename_is_sha256_of_exact_utf8_identifier"
    w = Child(runner, "replay", server, jdir, env={"FLUSH_S": "1"})
    out = w.finish()
    migrated = [e for e in out if e["event"] == "migrated"]
    assert [(e["from_file"], e["to_file"], e["reservation_id"]) for e in migrated] == [("rsv_x_1.json", std_a, a)], \
        "matching_legacy_record_migrates_without_deleting_collision"
    names = sorted(p.name for p in Path(j.dir).glob("*.json"))
    assert names == sorted([std_a, std_b]), "distinct_identifiers_never_share_a_journal_file"
    assert json.loads((Path(j.dir) / std_a).read_text())["reservation_id"] == a, \
        "standard_filename_is_sha256_of_exact_utf8_identifier"
    assert json.loads((Path(j.dir) / std_b).read_text())["reservation_id"] == b, \
        "matching_legacy_record_migrates_without_deleting_collision (the collision is intact)"
    assert [e for e in out if e["event"] == "flushed"] == [{"event": "flushed", "ok": False}]
    assert settle_requests(server, a) == [] and settle_requests(server, b) == [], "expected requests: none"


# ----------------------------------------------------------- boundary level


@pytest.mark.parametrize("runner", RUNNERS)
def test_cr_boundary_001_missing_actual_is_surfaced_without_settlement(
    runner: str, serve: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """CR-BOUNDARY-001: the guarded action returns no actual: nothing is sent."""
    server = serve()
    caplog.set_level(logging.WARNING, logger="leasebeat.runner")
    jdir = tmp_path / "j"

    def work(h: Any, hb: Heartbeat) -> Any:
        try:
            raise RuntimeError("the provider call failed before it returned usage")
        except RuntimeError:
            return commit(h, None)  # actual unknown

    res = run_lease(runner, server, jdir, work)
    assert res.outcome is SettleOutcome.NO_ACTUAL, "missing_actual_or_guarded_action_failure_is_surfaced"
    assert not res.ok and not res.record_kept
    assert any("no_actual" in r.getMessage() for r in caplog.records), \
        "missing_actual_or_guarded_action_failure_is_surfaced (log)"
    assert settle_requests(server, res.reservation_id) == [], "no_commit_or_event_without_known_actual"
    assert [e for e in server.log() if e.get("endpoint") == "events"] == [], "no_commit_or_event_without_known_actual"
    assert not list(jdir.rglob("v2-*.json")), "no record for an unknown actual"
