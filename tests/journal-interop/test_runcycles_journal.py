"""leasebeat's settlement journal and runcycles Python 0.5.3's pending-commit journal read
each other's records (J-2 of docs/settlement-contract.md), in both directions.

runcycles' side is its own `runcycles.journal` module (CommitJournal, PendingCommitRecord,
auth_fingerprint) from PyPI; leasebeat's side is `leasebeat journal ...` ($LEASEBEAT_BIN).
Run by scripts/test-journal-interop.sh in a venv of its own.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest
from runcycles import journal as rc

URL = "http://127.0.0.1:7878"
BIN = os.environ["LEASEBEAT_BIN"]

LONG_ID = "r" * 10_000
IDS = ["r-1", "a/b", "a.b", "é-ü-🙂", "nul\x00inside", "../../etc/passwd", LONG_ID]


def commit_body(rid: str, amount: int = 900) -> dict:
    return {
        "idempotency_key": f"key-{len(rid)}-{amount}",
        "actual": {"unit": "TOKENS", "amount": amount},
        "metrics": {"latency_ms": 12},
        "metadata": {"note": "π", "nested": [1, 2.5, None, True]},
    }


def event_body(rid: str) -> dict:
    return {
        "idempotency_key": f"key-{len(rid)}-900",
        "subject": {"tenant": "acme"},
        "action": {"kind": "llm", "name": "x"},
        "actual": {"unit": "TOKENS", "amount": 900},
    }


def lb(base: Path, *args: str, tenant: str | None = "acme", key: str = "k-1", check: bool = True):
    cmd = [BIN, "journal", "--id-json", "--dir", str(base), "--base-url", URL, "--api-key", key]
    if tenant is not None:
        cmd += ["--tenant", tenant]
    # Reservation ids go as JSON strings (--id-json): argv cannot carry NUL.
    if args and args[0] in ("show", "write", "remove"):
        args = (args[0], json.dumps(args[1]), *args[2:])
    out = subprocess.run(cmd + list(args), capture_output=True, text=True, env={**os.environ, "CYCLES_TENANT": ""})
    if check:
        assert out.returncode == 0, out.stderr
    return out


def lb_list(base: Path, **kw) -> tuple[dict, list[dict]]:
    lines = lb(base, "list", **kw).stdout.splitlines()
    assert lines[-1].startswith("journal: "), lines[-1]
    events = [json.loads(line) for line in lines[:-1]]
    records = {e["record"]["reservation_id"]: e for e in events if e["event"] == "record"}
    return records, events


def py_journal(base: Path, tenant: str | None = "acme", key: str = "k-1") -> rc.CommitJournal:
    return rc.CommitJournal(base / rc.auth_fingerprint(URL, key, tenant))


def as_dict(rec: rc.PendingCommitRecord) -> dict:
    return json.loads(rec.to_json())


def test_partition_names_agree(tmp_path: Path) -> None:
    for tenant, key in [("acme", "k-1"), ("acme", "rotated"), (None, "k-1"), (None, "k-2"), ("  ", "k-3")]:
        out = lb(tmp_path, "path", tenant=tenant, key=key).stdout.strip()
        assert out == str(tmp_path / rc.auth_fingerprint(URL, key, tenant))


def test_python_writes_leasebeat_reads(tmp_path: Path) -> None:
    j = py_journal(tmp_path)
    written = {}
    for i, rid in enumerate(IDS):
        rec = rc.PendingCommitRecord(
            reservation_id=rid,
            base_url=URL,
            mode="event" if i % 2 else "commit",
            commit_body=commit_body(rid, 2**64 + i),  # beyond u64: kept exactly
            event_fallback_body=event_body(rid),
            not_before_ms=1_785_585_600_000 + i if i % 3 == 0 else None,
        )
        j.record(rec)
        written[rid] = as_dict(rec)
    # The file names are the same: sha256 of the exact UTF-8 id.
    names = sorted(p.name for p in j.directory.iterdir())
    assert names == sorted(rc._safe_filename(rid) for rid in IDS)

    records, events = lb_list(tmp_path)
    assert [e for e in events if e["event"] != "record"] == []
    assert set(records) == set(IDS)
    for rid, rec in written.items():
        assert records[rid]["record"] == rec
        assert records[rid]["file"] == rc._safe_filename(rid)
        shown = lb(tmp_path, "show", rid).stdout
        assert json.loads(shown) == rec
    # leasebeat's remove is runcycles' discard.
    assert lb(tmp_path, "remove", "a/b").stdout.strip() == "removed"
    assert {e.reservation_id for e in j.load_pending(URL)} == set(IDS) - {"a/b"}


def test_leasebeat_writes_python_reads(tmp_path: Path) -> None:
    for i, rid in enumerate(IDS):
        args = ["write", rid, "--commit-body", json.dumps(commit_body(rid, 2**63 + i)),
                "--event-body", json.dumps(event_body(rid)), "--recorded-at-ms", str(1_785_585_000_000 + i)]
        if i % 2:
            args += ["--mode", "event"]
        if i % 3 == 0:
            args += ["--not-before-ms", str(1_785_585_600_000 + i)]
        lb(tmp_path, *args)
    j = py_journal(tmp_path)
    # J-3: 0700 directory, 0600 records.
    assert stat.S_IMODE(j.directory.stat().st_mode) == 0o700
    for p in j.directory.iterdir():
        assert stat.S_IMODE(p.stat().st_mode) == 0o600, p
    loaded = {e.reservation_id: e for e in j.load_pending(URL)}
    assert set(loaded) == set(IDS)
    for i, rid in enumerate(IDS):
        e = loaded[rid]
        assert e.base_url == URL
        assert e.mode == ("event" if i % 2 else "commit")
        assert e.commit_body == commit_body(rid, 2**63 + i)
        assert e.event_fallback_body == event_body(rid)
        assert e.recorded_at_ms == 1_785_585_000_000 + i
        assert e.not_before_ms == (1_785_585_600_000 + i if i % 3 == 0 else None)
    # Python's mode switch (a rewrite) reads back through leasebeat; its discard removes.
    e = loaded["r-1"]
    e.mode = "event"
    e.not_before_ms = 1_785_599_999_999
    j.record(e)
    shown = json.loads(lb(tmp_path, "show", "r-1").stdout)
    assert shown["mode"] == "event" and shown["not_before_ms"] == 1_785_599_999_999
    j.discard("r-1")
    assert lb(tmp_path, "show", "r-1", check=False).returncode == 1


def test_tenant_partition_survives_key_rotation(tmp_path: Path) -> None:
    py_journal(tmp_path, key="old-key").record(
        rc.PendingCommitRecord(reservation_id="r-9", base_url=URL, commit_body=commit_body("r-9"))
    )
    out = json.loads(lb(tmp_path, "show", "r-9", key="new-key").stdout)
    assert out["commit_body"] == commit_body("r-9")
    for p in tmp_path.rglob("*"):
        assert "old-key" not in p.name
        if p.is_file():
            assert "old-key" not in p.read_text()


def test_quarantine_is_compatible(tmp_path: Path) -> None:
    j = py_journal(tmp_path)
    j.record(rc.PendingCommitRecord(reservation_id="good", base_url=URL, commit_body=commit_body("good")))
    j.record(rc.PendingCommitRecord(reservation_id="bad", base_url=URL, commit_body=commit_body("bad")))
    bad = j.directory / rc._safe_filename("bad")
    bad.write_text(bad.read_text()[:25])
    future = j.directory / rc._safe_filename("future")
    future.write_text(json.dumps({"version": 2, "reservation_id": "future", "commit_body": {}}))
    records, events = lb_list(tmp_path)
    assert set(records) == {"good"}
    q = sorted(e["moved_to"] for e in events if e["event"] == "quarantined")
    assert q == sorted([bad.with_suffix(".corrupt").name, future.with_suffix(".corrupt").name])
    # runcycles neither replays nor trips over leasebeat's quarantine.
    assert [e.reservation_id for e in j.load_pending(URL)] == ["good"]
    assert bad.with_suffix(".corrupt").exists()


def test_legacy_names_migrate_like_runcycles(tmp_path: Path) -> None:
    j = py_journal(tmp_path)
    j.directory.mkdir(parents=True)
    # "a/b" and "a.b" collide on the legacy name; the file holds "a/b".
    legacy = j.directory / rc._legacy_filename("a/b")
    legacy.write_text(rc.PendingCommitRecord(reservation_id="a/b", base_url=URL, commit_body=commit_body("a/b")).to_json())
    assert lb(tmp_path, "show", "a.b", check=False).returncode == 1
    assert legacy.exists(), "never migrated or deleted for another id (CR-DURABLE-007)"
    assert json.loads(lb(tmp_path, "show", "a/b").stdout)["reservation_id"] == "a/b"
    assert not legacy.exists()
    assert (j.directory / rc._safe_filename("a/b")).exists()
    assert [e.reservation_id for e in j.load_pending(URL)] == ["a/b"]


def test_other_server_records_are_not_replayed(tmp_path: Path) -> None:
    j = py_journal(tmp_path)
    j.record(rc.PendingCommitRecord(reservation_id="mine", base_url=URL, commit_body=commit_body("mine")))
    j.record(rc.PendingCommitRecord(reservation_id="theirs", base_url="http://other", commit_body=commit_body("x")))
    records, events = lb_list(tmp_path)
    assert set(records) == {"mine"}
    assert [e["record"]["reservation_id"] for e in events if e["event"] == "other_server"] == ["theirs"]


@pytest.mark.parametrize("raw", ['{"version":1,"reservation_id":"x","commit_body":{}}'])
def test_minimal_python_shape_reads(tmp_path: Path, raw: str) -> None:
    # journal.py's defaults for absent members (mode commit, base_url "", recorded_at_ms 0).
    j = py_journal(tmp_path)
    j.directory.mkdir(parents=True)
    (j.directory / rc._safe_filename("x")).write_text(raw)
    shown = json.loads(lb(tmp_path, "show", "x").stdout)
    py = as_dict(rc.PendingCommitRecord.from_json(raw))
    assert shown == py
