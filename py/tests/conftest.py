"""Shared fixtures: the reference server (`leasebeat serve`) as a subprocess.

The binary is ``$LEASEBEAT_BIN`` (scripts/test-python.sh builds it with
``cargo build --release -p leasebeat-cli``), else the first of
``<repo>/target/{release,debug}/leasebeat`` that exists; tests that need it
are skipped with a clear reason when none does. Every server listens on
127.0.0.1, port 0, and writes its JSON-lines log into the test's tmp_path;
tests read that log (keys used, calls per endpoint, lapses).
"""

from __future__ import annotations

import json
import os
import subprocess
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def leasebeat_bin() -> Path | None:
    env = os.environ.get("LEASEBEAT_BIN")
    if env:
        return Path(env)
    for kind in ("release", "debug"):
        p = ROOT / "target" / kind / "leasebeat"
        if p.exists():
            return p
    return None


class Server:
    """One `leasebeat serve` process and its log."""

    def __init__(self, log_path: Path, *args: str) -> None:
        exe = leasebeat_bin()
        if exe is None:
            pytest.skip("leasebeat serve not built (cargo build -p leasebeat-cli, or set LEASEBEAT_BIN)")
        self.log_path = log_path
        self.proc = subprocess.Popen(
            [str(exe), "serve", "--bind", "127.0.0.1:0", "--log", str(log_path), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        if not line.startswith("listening on "):
            self.kill()
            raise RuntimeError(f"leasebeat serve did not start: {line!r}")
        self.url = line.removeprefix("listening on ").strip()
        self.api_key = "test-key"

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()

    def log(self) -> list[dict[str, Any]]:
        if not self.log_path.exists():
            return []
        return [json.loads(x) for x in self.log_path.read_text(encoding="utf-8").splitlines() if x.strip()]

    def requests(self, endpoint: str | None = None, reservation_id: str | None = None) -> list[dict[str, Any]]:
        return [
            e
            for e in self.log()
            if e.get("event") == "request"
            and (endpoint is None or e.get("endpoint") == endpoint)
            and (reservation_id is None or e.get("reservation_id") == reservation_id)
        ]

    def lapses(self) -> list[dict[str, Any]]:
        return [e for e in self.log() if e.get("event") == "lapse"]

    def create(self, ttl_ms: int, key: str | None = None) -> tuple[str, bytes, int, dict[str, str], bytes]:
        """POSTs a create with urllib, as an SDK would: returns (key, request
        body, status, headers, response body)."""
        key = key or f"sdk-{uuid.uuid4()}"
        body = json.dumps(CREATE_REQUEST | {"idempotency_key": key, "ttl_ms": ttl_ms}).encode()
        req = urllib.request.Request(
            self.url + "/v1/reservations",
            data=body,
            method="POST",
            headers={"Content-Type": "application/json", "X-Cycles-API-Key": self.api_key, "X-Idempotency-Key": key},
        )
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # no proxy from the env
        with opener.open(req, timeout=10) as r:
            return key, body, r.status, dict(r.headers.items()), r.read()


#: The create members the reference server requires (besides key and ttl).
CREATE_REQUEST: dict[str, Any] = {
    "subject": {"tenant": "acme"},
    "action": {"kind": "llm.completion", "name": "test"},
    "estimate": {"unit": "TOKENS", "amount": 100},
}


@pytest.fixture(autouse=True)
def _journal_in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests never touch ~/.runcycles: every runner's default journal lives in the test's tmp_path."""
    monkeypatch.setenv("CYCLES_JOURNAL_DIR", str(tmp_path / "journal"))


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Any]:
    """``serve(*args)`` starts a server (killed after the test)."""
    started: list[Server] = []

    def start(*args: str) -> Server:
        s = Server(tmp_path / f"serve-{len(started)}.log", *args)
        started.append(s)
        return s

    yield start
    for s in started:
        s.kill()
