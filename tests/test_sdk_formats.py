"""The official SDKs' wire formats: tokens captured from mcp 2.3.0 and @modelcontextprotocol/server
2.4.0, through the library and the CLI, and our own mcp-py/mcp-ts tokens checked by the recipe."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import mrtr_state as ms

from .helpers import keys_import, run
from .sdk_vectors import (
    CAPTURE_ENV,
    captured,
    sdk_keyset,
)

# --- Python SDK (mcp-py) -------------------------------------------------------------------


# --- TypeScript SDK (mcp-ts) ---------------------------------------------------------------


# --- through the CLI -----------------------------------------------------------------------


def test_captured_tokens_through_the_cli(tmp_path: Path) -> None:
    path = tmp_path / "keyset.json"
    data = captured()
    for n, secret in enumerate(data["python_sdk"][1]["secrets"]):  # py-c's ring: k2 then k1
        # the SDK's secret is text: a file's final newline is the file's, dropped with a note
        written = keys_import(path, "mcp-py-v1", secret + "\n" * n, name=f"py-{n}")
        assert ("note: dropped the line break (LF)" in written.stderr) is bool(n)
    keys_import(path, "mcp-ts-v1", data["typescript_sdk"][0]["key"])
    for entry in data["python_sdk"]:
        flags = [
            "--method",
            entry["method"],
            "--target",
            entry["tool"],
            "--arguments",
            json.dumps(entry["arguments"]),
            "--audience",
            entry["audience"],
        ]
        if entry["ttl"] <= 2:
            run("--keyset", str(path), "verify", *flags, entry["token"], code=3, env=CAPTURE_ENV)
            continue
        over_cap = run("--keyset", str(path), "verify", *flags, entry["token"], code=1)
        assert "exceeds this verifier's ttl_cap of 3600 s" in over_cap.stderr
        out = run("--keyset", str(path), "verify", *flags, entry["token"], env=CAPTURE_ENV)
        assert out.stdout == json.dumps(entry["state"]) + "\n"
        run(
            *("--keyset", str(path), "verify", *flags[:-1], "elsewhere", entry["token"]),
            code=4,
            env=CAPTURE_ENV,
        )
        inspected = run("--keyset", str(path), "inspect", "--json", entry["token"], env=CAPTURE_ENV)
        view = json.loads(inspected.stdout)
        assert view["format"] == "mcp-py" and view["verified"] is True
        assert view["claims"]["s"] == entry["state"]
    for entry in data["typescript_sdk"]:
        bind = ["--bind", entry["bind"]] if entry["bind"] else []
        expected_code = 3 if entry["ttlSeconds"] <= 2 else 0
        out = run(
            *("--keyset", str(path), "verify", "--json", *bind, entry["token"]),
            code=expected_code,
            env=CAPTURE_ENV,
        )
        if expected_code == 0:
            assert json.loads(out.stdout)["claims"]["p"] == entry["verified_payload"]
    minted = run(
        "--keyset",
        str(path),
        "mint",
        "--format",
        "mcp-py",
        "--method",
        "tools/call",
        "--target",
        "deploy",
        "--arguments",
        '{"env":"prod"}',
        "--audience",
        "fleet",
        "--state",
        '"from-cli"',
    ).stdout.strip()
    assert (
        run(
            "--keyset",
            str(path),
            "verify",
            "--method",
            "tools/call",
            "--target",
            "deploy",
            "--arguments",
            '{"env":"prod"}',
            "--audience",
            "fleet",
            minted,
        ).stdout
        == '"from-cli"\n'
    )
    short = run(
        "--keyset",
        str(path),
        "keys",
        "import",
        "--alg",
        "mcp-py-v1",
        "--secret-file",
        "-",
        input="too-short",
        code=2,
    )
    assert "32..4096" in short.stderr


def test_sdk_tokens_refuse_bindings_they_cannot_carry() -> None:
    ts = sdk_keyset(["k1-" + "a" * 61], "mcp-ts-v1")
    token = ms.mint(ts, {"x": 1}, format="mcp-ts", ttl=60)
    refusals: list[tuple[dict[str, Any], type[ms.InvalidToken]]] = [
        ({"principal": "alice"}, ms.PrincipalMismatch),
        ({"audience": "fleet"}, ms.AudienceMismatch),
        ({"request_id": "r"}, ms.RequestMismatch),
        ({"method": "tools/call", "target": "t"}, ms.RequestMismatch),
    ]
    for extra, error in refusals:
        with pytest.raises(error, match="mcp-ts tokens"):
            ms.verify(ts, token, **extra)
    py = sdk_keyset(["p" * 40], "mcp-py-v1")
    py_token = ms.mint(py, "s", format="mcp-py", method="tools/call", target="t")
    with pytest.raises(ms.RequestMismatch, match="mcp-py tokens carry no request id"):
        ms.verify(py, py_token, request_id="r")
    # a token chosen by the client never turns a verifier's binding into a crash
    with pytest.raises(ms.RequestMismatch, match="mcp-py tokens carry no bind value"):
        ms.verify(py, py_token, method="tools/call", target="t", bind="b")
