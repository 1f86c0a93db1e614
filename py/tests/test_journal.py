"""leasebeat.Journal: the core's settlement journal (J-1..J-8) through the
binding. Record layout, names, atomic writes, claims and quarantine are the
core's (tested there and against runcycles 0.5.3 by
scripts/test-journal-interop.sh); these tests check the binding: the round
trip of a settlement, a restart honouring a 429 floor, quarantine, odd ids,
typed errors (a symlinked directory, not writable, a full disk) and bad
argument types. Every journal lives in the test's tmp_path.
"""

from __future__ import annotations

import gc
import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import leasebeat
from leasebeat import (
    Journal,
    JournalError,
    JournalInvalidRecord,
    JournalNoSpace,
    JournalNotFinished,
    JournalNotWritable,
    JournalSymlink,
    LeaseError,
    Settlement,
    SettleActionKind,
    SettleOutcome,
    SettleWarning,
)

URL = "http://127.0.0.1:1"
COMMIT = {"actual": {"unit": "TOKENS", "amount": 42}}
EVENT = {"subject": {"tenant": "acme"}, "action": {"kind": "llm.completion", "name": "x"}}
OK = b'{"status":"COMMITTED","charged":{"unit":"TOKENS","amount":42}}'


def wall() -> int:
    return time.time_ns() // 1_000_000


def new_commit(rid: str = "rsv/1") -> Settlement:
    return Settlement.commit(rid, COMMIT, now_ns=time.monotonic_ns(), wall_ms=wall(), event=EVENT, base_url=URL)


def journal(tmp_path: Path, **kw: Any) -> Journal:
    return Journal.open(URL, "key-1", dir=tmp_path / "journal", **kw)


def send(s: Settlement, status: int, headers: Any = None, body: bytes = b"") -> Any:
    a = s.poll_action()
    assert a.kind is SettleActionKind.SEND and a.attempt_id is not None
    now = max(time.monotonic_ns(), a.due_ns or 0)
    s.handle_sent(a.attempt_id, now)
    return s.handle_response(a.attempt_id, now + 1, wall(), status, headers or {}, body)


def test_round_trip(tmp_path: Path) -> None:
    j = journal(tmp_path)
    assert Path(j.dir).parent == tmp_path / "journal" and j.base_url == URL
    assert stat.S_IMODE(os.stat(j.dir).st_mode) == 0o700
    s = new_commit()
    assert s.poll_action().kind is SettleActionKind.PERSIST
    d = j.persist(s, time.monotonic_ns())
    assert d.next.value == "commit" and not d.warnings
    p = Path(j.dir) / Journal.record_file_name("rsv/1")
    assert p.exists() and stat.S_IMODE(p.stat().st_mode) == 0o600
    on_disk = json.loads(p.read_text())
    assert on_disk["reservation_id"] == "rsv/1" and on_disk["commit_body"]["idempotency_key"] == s.key
    assert on_disk["base_url"] == URL
    assert j.load("rsv/1") is not None and json.loads(j.load("rsv/1") or "")["mode"] == "commit"
    assert j.holds_claim("rsv/1")
    with pytest.raises(JournalNotFinished) as e:
        j.finish(s)  # not done: nothing touched
    assert e.value.kind == "not_finished" and p.exists()
    d = send(s, 200, body=OK)
    assert d.outcome is SettleOutcome.COMMITTED and d.record == "remove"
    j.finish(s)
    assert not p.exists() and not j.holds_claim("rsv/1")
    assert j.load("rsv/1") is None and j.scan().records == []
    # A persist when none is asked for: the settlement's own error, nothing written.
    with pytest.raises(leasebeat.Stopped):
        j.persist(s, time.monotonic_ns())


def test_the_api_key_is_in_no_file_and_the_tenant_partition_survives_rotation(tmp_path: Path) -> None:
    j1 = Journal.open(URL, "secret-key-A", dir=tmp_path, tenant="acme")
    j2 = Journal.open(URL, "secret-key-B", dir=tmp_path, tenant="acme")
    j3 = Journal.open(URL, "secret-key-B", dir=tmp_path)
    assert j1.dir == j2.dir != j3.dir
    assert Path(j1.dir).name == Journal.partition_name(URL, "whatever", "acme")
    s = new_commit()
    j1.persist(s, time.monotonic_ns())
    for p in tmp_path.rglob("*"):
        assert "secret-key" not in p.name
        if p.is_file():
            assert b"secret-key" not in p.read_bytes()


def test_429_floor_across_a_restart(tmp_path: Path) -> None:
    j1 = journal(tmp_path)
    s = new_commit()
    j1.persist(s, time.monotonic_ns())
    d = send(s, 429, {"Retry-After": "2"}, b'{"error":"LIMIT_EXCEEDED","message":"slow down","request_id":"r1"}')
    assert d.next.value == "persist" and d.not_before_ms is not None
    floor = d.not_before_ms
    j1.persist(s, time.monotonic_ns())
    assert json.loads(j1.load("rsv/1") or "")["not_before_ms"] == floor
    # Another journal (another worker, or a restarted process) sees the claim while j1 lives.
    j2 = journal(tmp_path)
    assert j2.replay(time.monotonic_ns(), wall()).busy == ["rsv/1"]
    j1.release_claim("rsv/1")
    del j1, s  # "the process is gone": only the record remains
    now, w = time.monotonic_ns(), wall()
    rp = j2.replay(now, w)
    assert rp.busy == [] and len(rp.settlements) == 1
    r = rp.settlements[0]
    a = r.poll_action()
    assert a.kind is SettleActionKind.SEND and a.due_ns is not None
    # No request before the persisted floor (ST-4, SP-4): due at now + (floor - wall).
    assert a.due_ns >= now + (floor - w) * 1_000_000
    assert 1_000 <= (a.due_ns - now) / 1e6 <= 2_000
    assert j2.holds_claim("rsv/1")
    d = send(r, 200, body=OK)
    assert d.outcome is SettleOutcome.COMMITTED
    j2.finish(r)
    assert j2.load("rsv/1") is None


@pytest.mark.parametrize("damage", ["truncated", "edited_mode", "edited_version", "no_key"])
def test_quarantine_of_a_damaged_record(tmp_path: Path, damage: str) -> None:
    j = journal(tmp_path)
    good, bad = new_commit("rsv-good"), new_commit("rsv-bad")
    for s in (good, bad):
        j.persist(s, time.monotonic_ns())
        j.release_claim(s.reservation_id)
    p = Path(j.dir) / Journal.record_file_name("rsv-bad")
    text = p.read_text()
    rec = json.loads(text)
    if damage == "truncated":
        p.write_text(text[: len(text) // 3])
    elif damage == "edited_mode":
        p.write_text(text.replace('"mode":"commit"', '"mode":"bogus"'))
    elif damage == "edited_version":
        p.write_text(text.replace('"version":1', '"version":7'))
    else:  # valid for journal.py, refused by the settlement (no key): quarantined too
        del rec["commit_body"]["idempotency_key"]
        del rec["event_fallback_body"]
        p.write_text(json.dumps(rec))
    rp = j.replay(time.monotonic_ns(), wall())
    assert [s.reservation_id for s in rp.settlements] == ["rsv-good"]  # the others still replay
    assert [q.file for q in rp.quarantined] == [p.name] and rp.quarantined[0].reason
    moved = rp.quarantined[0].moved_to
    assert moved is not None and moved.endswith(".corrupt") and (Path(j.dir) / moved).exists()
    assert not p.exists()


def test_odd_ids(tmp_path: Path) -> None:
    j = journal(tmp_path)
    # '/' is fine all the way (the file name is the sha256 of the exact id).
    s = new_commit("tenant/a/../b")
    j.persist(s, time.monotonic_ns())
    assert Journal.record_file_name("tenant/a/../b").startswith("v2-")
    assert json.loads(j.load("tenant/a/../b") or "")["reservation_id"] == "tenant/a/../b"
    # NUL and 10,000 characters: refused by the settlement (typed, a ValueError)...
    for bad in ("a\x00b", "x" * 10_000):
        with pytest.raises(leasebeat.InvalidConfig):
            new_commit(bad)
    # ...but a journal written by another SDK may hold them: distinct files, read back, and
    # quarantined at replay (the settlement refuses them), never sent, never deleted.
    base = json.loads(s.record_json or "")
    names = set()
    for rid in ("a\x00b", "a\x00c", "x" * 10_000):
        rec = dict(base, reservation_id=rid)
        j.write(json.dumps(rec))
        names.add(Journal.record_file_name(rid))
        assert json.loads(j.load(rid) or "")["reservation_id"] == rid
    assert len(names) == 3
    j.release_claim("tenant/a/../b")
    rp = j.replay(time.monotonic_ns(), wall())
    assert [x.reservation_id for x in rp.settlements] == ["tenant/a/../b"]
    assert sorted(q.file for q in rp.quarantined) == sorted(names)
    assert j.remove("tenant/a/../b") and not j.remove("tenant/a/../b")


def test_a_symlinked_directory_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    with pytest.raises(JournalSymlink) as e:
        Journal.open(URL, "k", dir=link)
    assert e.value.kind == "symlink" and isinstance(e.value, JournalError)
    assert isinstance(e.value, LeaseError) and isinstance(e.value, OSError)
    assert e.value.path is not None and "link" in e.value.path
    # A partition that is a symlink too.
    j = Journal.open(URL, "k", dir=real)
    part = Path(j.dir)
    del j
    os.rename(part, tmp_path / "elsewhere")
    part.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(JournalSymlink):
        Journal.open(URL, "k", dir=real)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere: permissions cannot refuse it")
def test_not_writable(tmp_path: Path) -> None:
    base = tmp_path / "ro"
    base.mkdir(mode=0o500)
    try:
        with pytest.raises(JournalNotWritable) as e:
            Journal.open(URL, "k", dir=base)
        assert e.value.kind == "not_writable"
    finally:
        base.chmod(0o700)


def test_not_writable_read_only_mount(tmp_path: Path) -> None:
    """As root: a read-only tmpfs refuses even root."""
    mnt = tmp_path / "ro"
    mnt.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,ro", "tmpfs", str(mnt)],
                                           capture_output=True).returncode != 0:
        pytest.skip("cannot mount a read-only tmpfs here")
    try:
        with pytest.raises(JournalNotWritable) as e:
            Journal.open(URL, "k", dir=mnt)
        assert e.value.kind == "not_writable"
        del e
    finally:
        _umount(mnt)


def test_a_full_disk(tmp_path: Path) -> None:
    """A 64 KiB tmpfs filled up: write raises JournalNoSpace; persist reports it
    on the decision (SP-3: warning persist_failed, the request still goes)."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)],
                                           capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        _fill_and_write(mnt)
    finally:
        _umount(mnt)


def _umount(mnt: Path) -> None:
    gc.collect()  # a Journal holds its directory open: let it go first
    if subprocess.run(["umount", str(mnt)], check=False).returncode != 0:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def _fill_and_write(mnt: Path) -> None:
    if True:  # a scope of its own: the Journal is dropped before the umount
        j = Journal.open(URL, "k", dir=mnt)
        s = new_commit()
        j.persist(s, time.monotonic_ns())
        before = j.load("rsv/1")
        filler = mnt / "filler"
        try:
            with open(filler, "wb") as f:
                while True:
                    f.write(b"\0" * 4096)
                    f.flush()
        except OSError:
            pass  # full
        rec = json.loads(s.record_json or "")
        rec["commit_body"]["metadata"] = {"pad": "y" * 8192}
        with pytest.raises(JournalNoSpace) as e:
            j.write(json.dumps(rec))
        assert e.value.kind == "no_space" and isinstance(e.value, OSError)
        assert j.load("rsv/1") == before  # the previous record is intact
        big = Settlement.commit("rsv-2", {"actual": COMMIT["actual"], "metadata": {"pad": "z" * 8192}},
                                now_ns=time.monotonic_ns(), wall_ms=wall(), base_url=URL)
        d = j.persist(big, time.monotonic_ns())
        assert SettleWarning.PERSIST_FAILED in d.warnings and "no_space" in (d.detail or "")
        assert d.next.value == "commit"  # SP-3: the request still goes
        assert not [p for p in Path(j.dir).iterdir() if p.name.endswith(".tmp")]


def test_a_file_size_limit_in_a_subprocess(tmp_path: Path) -> None:
    """RLIMIT_FSIZE (no mount needed): the write fails typed, nothing is replaced."""
    code = r"""
import json, resource, signal, sys, time
import leasebeat
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
j = leasebeat.Journal.open("http://h", "k", dir=sys.argv[1])
resource.setrlimit(resource.RLIMIT_FSIZE, (256, 256))
s = leasebeat.Settlement.commit("r1", {"actual": {"unit": "TOKENS", "amount": 1}, "metadata": {"p": "x" * 2000}},
                                now_ns=time.monotonic_ns(), wall_ms=1, base_url="http://h")
d = j.persist(s, time.monotonic_ns())
try:
    j.write(s.record_json)
    print(json.dumps({"raised": None}))
except leasebeat.JournalError as e:
    print(json.dumps({"raised": type(e).__name__, "kind": e.kind, "warnings": [w.value for w in d.warnings],
                      "left": j.load("r1")}))
"""
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    assert r["raised"] is not None and r["kind"] in ("no_space", "io"), r
    assert r["warnings"] == ["persist_failed"] and r["left"] is None


def test_bad_input_types(tmp_path: Path) -> None:
    j = journal(tmp_path)
    with pytest.raises(TypeError):
        Journal.open(123, "k", dir=tmp_path)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Journal.open(URL, None, dir=tmp_path)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Journal.open(URL, "k", dir=3.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        j.persist("not a settlement", 1)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        j.finish(object())  # type: ignore[arg-type]
    with pytest.raises(leasebeat.InvalidArgument):
        j.persist(new_commit(), -1)
    with pytest.raises(TypeError):
        j.persist(new_commit(), 1.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        j.replay("now", 1)  # type: ignore[arg-type]
    with pytest.raises(leasebeat.InvalidConfig):
        j.replay(1, 1, max_attempts=0)
    with pytest.raises(JournalInvalidRecord) as e:
        j.write("{not json")
    assert e.value.kind == "invalid_record"
    with pytest.raises(JournalInvalidRecord):
        j.write(json.dumps({"version": 1, "reservation_id": "", "mode": "commit", "commit_body": {}}))
    with pytest.raises(TypeError):
        j.remove(b"rsv")  # type: ignore[arg-type]
    # An amount beyond 2^63 and a body that is not JSON: refused before anything is journaled.
    with pytest.raises(leasebeat.InvalidConfig):
        Settlement.commit("r", {"actual": {"unit": "TOKENS", "amount": 2**63}}, now_ns=1, wall_ms=1)
    with pytest.raises(leasebeat.InvalidConfig):
        Settlement.commit("r", "{not json", now_ns=1, wall_ms=1)
    assert j.scan().records == []
    # os.PathLike and str both work for dir.
    assert Journal.open(URL, "key-1", dir=str(tmp_path / "journal")).dir == j.dir


def test_errors_are_in_the_hierarchy() -> None:
    for cls in (leasebeat.JournalNotWritable, leasebeat.JournalSymlink, leasebeat.JournalNoSpace,
                leasebeat.JournalInvalidRecord, leasebeat.JournalCorrupt, leasebeat.JournalMisplaced,
                leasebeat.JournalNotADirectory, leasebeat.JournalNoDirectory, leasebeat.JournalNotFinished,
                leasebeat.JournalIOError):
        assert issubclass(cls, JournalError) and issubclass(cls, LeaseError) and issubclass(cls, OSError)
        assert cls.code == "journal" and cls.kind and cls.__doc__
