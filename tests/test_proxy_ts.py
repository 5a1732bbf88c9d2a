"""The proxy in front of a TypeScript SDK server (``@modelcontextprotocol/server`` 2.4.0, no
requestState codec) run by Node, driven by the official Python SDK client."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import mrtr_state as ms
from mrtr_state.proxy.app import ProxyApp
from mrtr_state.proxy.rewrite import StateGuard

from .servers import serving
from .test_proxy_sdk import sdk_client_round_trip
from .test_ts_sdk import sdk_folder

__all__ = ["sdk_folder"]  # the fixture, shared with the codec tests

HERE = Path(__file__).resolve().parent


def test_a_typescript_sdk_server_behind_the_proxy(sdk_folder: Path, tmp_path: Path) -> None:
    script = sdk_folder / "naive_server.mjs"
    shutil.copyfile(HERE / "ts" / "naive_server.mjs", script)
    node = subprocess.Popen(
        ["node", str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert node.stdout is not None
        port = json.loads(node.stdout.readline())["port"]
        keyset_path = tmp_path / "keyset.json"
        ms.Keyset.generate(("A256GCM",)).save(keyset_path)
        lines: list[dict[str, Any]] = []
        guard = StateGuard(ms.Keyset.load(keyset_path), ttl=60, log=lines.append)
        proxy = ProxyApp(guard, upstream=f"http://127.0.0.1:{port}/mcp")
        with serving(proxy) as proxy_url:
            token, text = sdk_client_round_trip(proxy_url + "/mcp")
    finally:
        node.terminate()
        node.communicate(timeout=10)
    assert token.startswith("ms1.")  # the client never saw the server's plain state
    assert text == "deployed prod"
    # two first rounds (ours, then the one call_tool makes before it retries) and one retry
    assert [line["event"] for line in lines] == ["sealed", "sealed", "opened"]
