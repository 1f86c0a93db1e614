"""The runner examples in py/examples/ run against `leasebeat serve` (CI)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.mark.parametrize("name", ["heartbeat_thread.py", "heartbeat_asyncio.py"])
def test_example_runs(serve: Any, name: str) -> None:
    server = serve("--max-lead-ms", "4000")
    out = subprocess.run(
        [sys.executable, str(EXAMPLES / name), server.url, server.api_key, "--beats", "2"],
        capture_output=True, text=True, timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "final:" in out.stdout and "cancelled" in out.stdout, out.stdout
    finals = [e for e in server.requests() if e["endpoint"] in ("commit", "release")]
    assert len(finals) == 1 and finals[0]["status"] == 200, finals  # never left to lapse
    assert len(server.requests("extend")) >= 2
    assert server.lapses() == []
