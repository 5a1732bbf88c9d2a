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
from mrtr_state.keys.keyset import Key

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


def test_a_secret_echoed_into_a_file_is_the_key_the_ts_sdk_uses(
    sdk_folder: Path, tmp_path: Path
) -> None:
    """`key: process.env.X` is UTF-8 text: the file `echo` wrote imports as that text (its
    newline dropped, with a note), the SDK's codec given the same string verifies what the CLI
    mints and the CLI verifies what it mints, with docs/polyglot.md's bind example as written."""
    import secrets

    from .helpers import documented_example, run
    from .test_mcp import echoed

    secret = secrets.token_hex(32)
    ks = tmp_path / "keyset.json"
    imported = run(
        *("--keyset", str(ks), "keys", "import", "--alg", "mcp-ts-v1"),
        *("--secret-file", str(echoed(tmp_path, secret))),
    )
    assert imported.stderr.startswith("note: dropped the line break (LF) that ends ")
    bind = "tools/call\0deploy-bot"  # the SDK's own example: method, NUL, the OAuth client id
    heading = "TypeScript (`mcp-ts`)"
    printf, _ = documented_example("polyglot.md", heading, "printf")
    assert printf[-2:] == [">", "bind.bin"]  # as the page writes the bind file
    written = subprocess.run(printf[:-2], capture_output=True, check=True).stdout
    assert written == bind.encode()
    bind_file = tmp_path / "bind.bin"
    bind_file.write_bytes(written)
    token = run(
        *("--keyset", str(ks), "mint", "--format", "mcp-ts", "--bind-file", str(bind_file)),
        *("--state", '{"step":2}'),
    ).stdout.strip()
    assert node(sdk_folder, key=secret, mode="verify", token=token, bind=bind) == {
        "payload": {"step": 2}
    }
    assert node(sdk_folder, key=secret + "\n", mode="verify", token=token, bind=bind) == {
        "error": "mac"
    }
    minted = node(sdk_folder, key=secret, mode="mint", payload={"step": 2}, bind=bind)["token"]
    argv, shown = documented_example("polyglot.md", heading, "mrtr-state verify")
    assert argv == ["mrtr-state", "verify", "--bind-file", "bind.bin", "$CAPTURED"]
    out = run("--keyset", str(ks), "verify", "--bind-file", str(bind_file), minted)
    assert out.stdout.splitlines() == shown == ['{"step":2}']
    refused = run("--keyset", str(ks), "verify", "--bind", "tools/call", minted, code=4)
    assert refused.stderr.startswith("error: bind mismatch")
