"""The runnable example: a real stdio MCP server and client, as `make example` runs them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import mrtr_state as ms

ROOT = Path(__file__).resolve().parents[1]


def test_the_github_login_example_completes_its_round_trip(tmp_path: Path) -> None:
    pytest.importorskip("mcp", reason="the example needs the official SDK")
    keyset = tmp_path / "keyset.json"
    ms.Keyset.generate(("A256GCM",)).save(keyset)
    environment = {**os.environ, "MRTR_STATE_KEYSET": str(keyset), "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "client.py")],
        capture_output=True,
        text=True,
        timeout=120,
        env=environment,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "requestState: aead token" in done.stdout
    assert "result: octocat starred octo/hello (state 'star:octo/hello' verified)" in done.stdout
