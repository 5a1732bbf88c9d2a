"""``mrtr-state probe`` against real servers on loopback: each check has a server it catches and
one it passes (docs/probe.md lists them). The CLI runs as a user runs it; the servers are the
official Python SDK's (mcp 2.3.0, protection on and off), the TypeScript SDK's (2.4.0,
createRequestStateCodec with and without bind), the naive base64-JSON server alone and behind
``mrtr-state proxy`` (with and without --once), and a stdio server."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the official SDK (mcp==2.3.0) is a test dependency")

import mrtr_state as ms

from .helpers import ROOT, ProxyProcess, run
from .probe_servers import ALICE, BOB, LeakyServer, sdk_server, ts_server
from .servers import NaiveServer, serving
from .test_ts_sdk import sdk_folder

__all__ = ["sdk_folder"]  # the fixture, shared with the codec tests

DEPLOY = ("--tool", "deploy", "--arguments", '{"env":"prod"}')
HIGH = {"tamper-accepted", "forged-accepted", "cross-request-accepted", "cross-principal-accepted"}


def probe(*args: str, code: int) -> dict[str, Any]:
    """The probe's --json answer, after checking its exit code and that it is one object."""
    done = run("probe", *args, "--json", code=code)
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def results(report: dict[str, Any]) -> dict[str, str]:
    return {check["id"]: check["result"] for check in report["checks"]}


def found(report: dict[str, Any]) -> set[str]:
    return {finding["id"] for finding in report["findings"]}


@pytest.mark.parametrize("mode", ["json", "sse"])
def test_the_naive_server_shows_every_high_finding(mode: str) -> None:
    server = NaiveServer(mode)
    with serving(server) as url:
        report = probe(url + "/mcp", *DEPLOY, "--header", "X-User: alice", "--other",
                       "X-User: bob", code=1)  # fmt: skip
    assert set(report) == {"target", "server", "format", "checks", "findings", "requests"}
    assert report["server"] == {"name": "naive", "version": "0.0.1", "protocol": "2025-11-25"}
    assert report["format"] is None  # base64 JSON is no token format
    assert HIGH | {"replay-accepted", "state-readable"} <= found(report)
    assert results(report)["state-long-lived"] == "skipped"  # no --wait: never a pass
    # every message sent was counted, and the DELETE that ends the session the server opened
    assert report["requests"] == len(server.received) + 1
    for finding in report["findings"]:
        assert set(finding) == {"id", "severity", "title", "evidence", "remedy"}
        assert finding["evidence"] and finding["remedy"]
    tamper = next(f for f in report["findings"] if f["id"] == "tamper-accepted")
    assert any(line.startswith("answer: result") for line in tamper["evidence"])
    # the attacks reached the server: a retry carried a state it never issued
    issued = {json.dumps(m) for m in server.received}
    assert len([m for m in server.retries() if m["params"]["requestState"]]) >= 6
    assert issued


@pytest.mark.parametrize("json_response", [True, False], ids=["json", "sse"])
def test_the_python_sdk_with_its_protection_is_clean_at_high(json_response: bool) -> None:
    with serving(sdk_server(True, json_response=json_response)) as url:
        report = probe(url + "/mcp", *DEPLOY, *ALICE, *BOB, code=0)
        assert probe(url + "/mcp", *DEPLOY, *ALICE, *BOB, "--fail-on", "low", code=1)
    assert report["server"] == {"name": "fleet-py", "version": "2.3.0", "protocol": "2026-07-28"}
    assert report["format"] == "mcp-py or mcp-rb"  # the shape two SDKs share; no key to tell
    checks = results(report)
    assert all(checks[check] == "pass" for check in HIGH), checks
    assert checks["state-readable"] == checks["state-oversized"] == "pass"
    assert checks["error-leaks"] == "pass"  # the SDK's one uniform -32602
    assert found(report) == {"replay-accepted"}  # the SDK leaves single use to the server


def test_the_python_sdk_without_its_protection_has_findings() -> None:
    with serving(sdk_server(False)) as url:
        report = probe(url + "/mcp", *DEPLOY, *ALICE, *BOB, code=1)
    assert "tamper-accepted" in found(report)  # its plain envelope's state string, edited
    assert "cross-principal-accepted" in found(report)  # bound to no principal
    assert "state-readable" in found(report)
    assert results(report)["cross-request-accepted"] == "pass"  # the envelope still binds it


def test_the_typescript_sdk_codec_with_and_without_bind(sdk_folder: Path) -> None:
    users = ("--header", "X-User: alice", "--other", "X-User: bob")
    with ts_server(sdk_folder, "plain") as url:
        plain = probe(url, *DEPLOY, *users, code=1)
    with ts_server(sdk_folder, "bind") as url:
        bound = probe(url, *DEPLOY, *users, code=1)
    for report in (plain, bound):
        assert report["format"] == "mcp-ts"
        assert report["server"]["protocol"] == "2026-07-28"
        checks = results(report)
        assert checks["tamper-accepted"] == checks["forged-accepted"] == "pass"  # its HMAC
        assert checks["state-readable"] == "fail"  # signed, not encrypted
        assert checks["error-leaks"] == "pass"
    assert results(plain)["cross-principal-accepted"] == "fail"
    assert results(bound)["cross-principal-accepted"] == "pass"  # bind names the caller
    # the bind value names the method and the caller, not the arguments
    assert results(bound)["cross-request-accepted"] == "fail"


def test_the_naive_server_behind_the_proxy_is_clean_at_high(tmp_path: Path) -> None:
    keyset = tmp_path / "keyset.json"
    ms.Keyset.generate(("A256GCM",)).save(keyset)
    users = ("--header", "X-Forwarded-User: alice", "--other", "X-Forwarded-User: bob")
    with serving(NaiveServer()) as upstream:
        proxy = ProxyProcess(keyset, upstream)
        once = ProxyProcess(keyset, upstream, "--once", "--replay-store",
                            f"sqlite:///{tmp_path / 'replay.db'}")  # fmt: skip
        try:
            sealed = probe(f"http://127.0.0.1:{proxy.port}/mcp", *DEPLOY, *users, code=0)
            single = probe(f"http://127.0.0.1:{once.port}/mcp", *DEPLOY, *users, code=0)
        finally:
            assert proxy.stop() == 0 and once.stop() == 0
    for report in (sealed, single):
        assert report["format"] == "aead"
        checks = results(report)
        assert all(checks[check] == "pass" for check in HIGH), checks
        assert checks["state-readable"] == "pass"
    assert found(sealed) == {"replay-accepted"}
    assert found(single) == set() and results(single)["replay-accepted"] == "pass"


def test_a_stdio_server(tmp_path: Path) -> None:
    """The MCP SDK example (examples/github_login_server.py): KeysetCodec, single use."""
    keyset = tmp_path / "keyset.json"
    ms.Keyset.generate(("A256GCM",)).save(keyset)
    # the child's environment names its keyset; the test process's own is left alone
    command = shlex.join(
        [
            "env",
            f"MRTR_STATE_KEYSET={keyset}",
            f"PYTHONPATH={ROOT}",
            sys.executable,
            str(ROOT / "examples" / "github_login_server.py"),
        ]
    )
    report = probe("--stdio", command, "--tool", "star_repository", "--arguments",
                   '{"repo":"octo/cat"}', code=0)  # fmt: skip
    assert report["target"].startswith("stdio:")
    assert report["server"]["name"] == "github-helper"
    assert report["format"] == "aead"
    checks = results(report)
    assert checks["cross-principal-accepted"] == "skipped"
    assert all(checks[check] == "pass" for check in HIGH - {"cross-principal-accepted"}), checks
    assert checks["replay-accepted"] == "pass"  # its codec redeems each state once
    assert report["findings"] == []


def test_a_state_still_accepted_after_wait_is_found() -> None:
    with serving(NaiveServer()) as naive:
        aged = probe(naive + "/mcp", *DEPLOY, "--wait", "2s", code=1)
    with serving(sdk_server(True, ttl=1)) as url:
        fresh = probe(url + "/mcp", *DEPLOY, *ALICE, "--wait", "2s", code=0)
    assert results(aged)["state-long-lived"] == "fail"
    finding = next(f for f in aged["findings"] if f["id"] == "state-long-lived")
    assert "sent back after 2s" in finding["evidence"]
    assert results(fresh)["state-long-lived"] == "pass"


def test_an_oversized_state_is_low_over_8_kib_and_medium_over_64_kib() -> None:
    with serving(sdk_server(True)) as url:
        for size, severity in ((9000, "low"), (70000, "medium")):
            arguments = json.dumps({"env": "x" * size})
            args = (url + "/mcp", "--tool", "deploy", "--arguments", arguments, *ALICE)
            report = probe(*args, "--max-requests", "12", code=0)
            (finding,) = [f for f in report["findings"] if f["id"] == "state-oversized"]
            assert finding["severity"] == severity
            probe(*args, "--max-requests", "12", "--fail-on", "medium", code=1 if severity ==
                  "medium" else 0)  # fmt: skip


def test_a_refusal_that_leaks_a_traceback_is_found() -> None:
    with serving(LeakyServer()) as url:
        report = probe(url + "/mcp", *DEPLOY, code=1)
    (finding,) = [f for f in report["findings"] if f["id"] == "error-leaks"]
    assert any("a Python stack trace" in line for line in finding["evidence"])
    assert any("an exception class name" in line for line in finding["evidence"])
