"""mcp-ts against the real TypeScript SDK (`@modelcontextprotocol/server` 2.4.0) run by Node."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

import mrtr_state as ms
from mrtr_state.keyset import Key

from .helpers import program

HERE = Path(__file__).resolve().parent
KEY = "ts-" + "k" * 45


@pytest.fixture(scope="module")
def sdk_folder() -> Path:
    """Where @modelcontextprotocol/server is installed: .ci/run's, or one npm installs here."""
    program("node", "nodejs")  # every test of the SDK runs it
    given = os.environ.get("MRTR_STATE_TEST_TS_SDK")
    if given:
        return Path(given)
    npm = program("npm", "npm")
    folder = Path.home() / ".cache" / "mrtr-state-tests" / "ts-sdk-2.4.0"
    if not (folder / "node_modules" / "@modelcontextprotocol" / "server").exists():
        folder.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            [
                npm,
                "install",
                "--silent",
                "--no-audit",
                "--no-fund",
                "@modelcontextprotocol/server@2.4.0",
            ],
            cwd=folder,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if done.returncode != 0:
            pytest.skip(f"npm could not install the TypeScript SDK: {done.stderr[-300:]}")
    return folder


def node(sdk_folder: Path, **request: Any) -> dict[str, Any]:
    script = sdk_folder / "codec.mjs"
    shutil.copyfile(HERE / "ts" / "codec.mjs", script)
    done = subprocess.run(
        ["node", str(script)],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer


def keyset(secret: str = KEY) -> ms.Keyset:
    raw = secret.encode()
    return ms.Keyset([Key.from_secret("mcp-ts-v1", raw)])


def test_the_ts_sdk_verifies_what_we_mint(sdk_folder: Path) -> None:
    payload = {"step": 2, "city": "Zürich"}
    bound = ms.mint(keyset(), payload, format="mcp-ts", bind="tools/call", ttl=120)
    assert node(sdk_folder, key=KEY, mode="verify", token=bound, bind="tools/call") == {
        "payload": payload
    }
    assert node(sdk_folder, key=KEY, mode="verify", token=bound, bind="other") == {"error": "bind"}
    plain = ms.mint(keyset(), payload, format="mcp-ts", ttl=120)
    assert node(sdk_folder, key=KEY, mode="verify", token=plain) == {"payload": payload}
    assert node(sdk_folder, key="z" * 40, mode="verify", token=plain) == {"error": "mac"}


def test_we_verify_what_the_ts_sdk_mints(sdk_folder: Path) -> None:
    payload = {"step": 3, "list": [1, None, True]}
    token = node(sdk_folder, key=KEY, mode="mint", payload=payload, bind="tools/call")["token"]
    assert ms.verify(keyset(), token, bind="tools/call").state == payload
    with pytest.raises(ms.RequestMismatch):
        ms.verify(keyset(), token)
    with pytest.raises(ms.BadSignature):
        ms.verify(keyset("w" * 40), token, bind="tools/call")
    assert ms.inspect(token).format == "mcp-ts"
