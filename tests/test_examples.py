"""The runnable example: a real stdio MCP server and client, as `make example` runs them."""

from __future__ import annotations

import json
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


def test_make_demo_runs_the_main_job_on_a_fresh_keyset(tmp_path: Path) -> None:
    """scripts/demo.sh, as `make demo` runs it: keys, mint, verify, inspect, rotate."""
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("MRTR_STATE_")},
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        "NO_COLOR": "1",
        "PYTHONPATH": str(ROOT),
    }
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "demo.sh")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "\x1b" not in done.stdout  # NO_COLOR honoured by the script and the CLI
    assert "exit code 4" in done.stdout and "exit code 1" in done.stdout
    assert "added pending" in done.stdout or "add " in done.stdout
    listed = ms.Keyset.load(tmp_path / "keys" / "keyset.json")
    assert sorted(k.status for k in listed if k.alg == "A256GCM") == ["pending", "primary"]


def test_make_demo_uses_its_own_keyset_whatever_the_environment_says(tmp_path: Path) -> None:
    """`MRTR_STATE_KEYSET=/srv/prod/keyset.json make demo` must not add keys to the prod file,
    nor must a config file in the folder or MRTR_STATE_CONFIG redirect it."""
    prod = tmp_path / "prod" / "keyset.json"
    ms.Keyset.generate(("A256GCM",)).save(prod)
    before = prod.read_bytes()
    workdir = tmp_path / "work"
    workdir.mkdir()
    config = workdir / "mrtr-state.toml"
    config.write_text(f'keyset = "{prod}"\n')
    config.chmod(0o600)
    env = {
        **os.environ,
        "MRTR_STATE_KEYSET": str(prod),
        "MRTR_STATE_CONFIG": str(config),
        "MRTR_STATE_KEYSET_JSON": prod.read_text(),
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        "NO_COLOR": "1",
        "PYTHONPATH": str(ROOT),
    }
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "demo.sh")],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "The demo uses its own keyset, keys/keyset.json" in done.stdout
    assert prod.read_bytes() == before
    assert len(ms.Keyset.load(workdir / "keys" / "keyset.json")) >= 4


def test_the_proxy_pages_sample_upstream_behind_the_proxy(tmp_path: Path) -> None:
    """docs/proxy.md's walk-through: examples/naive_upstream.py trusts its plain state; behind
    the proxy the client only sees a sealed token, and an edited retry never reaches it."""
    import socket
    import time

    from .helpers import ProxyProcess, call, request, run, send_raw
    from .servers import free_port

    keyset = tmp_path / "keyset.json"
    ms.Keyset.generate(("A256GCM",)).save(keyset)
    port = free_port()
    upstream = subprocess.Popen(
        [sys.executable, str(ROOT / "examples" / "naive_upstream.py"), str(port)],
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.3).close()
                break
            except OSError:
                assert time.monotonic() < deadline
                time.sleep(0.05)
        proxy = ProxyProcess(keyset, f"http://127.0.0.1:{port}", principal=("--allow-anonymous",))
        try:
            deploy = {"arguments": {"env": "prod"}}
            first = send_raw(proxy.port, request(body=call("deploy", 1, **deploy))).json()
            token = first["result"]["requestState"]
            assert token.startswith("ms1.") and "eyJ" not in token
            retry = call("deploy", 2, requestState=token, **deploy)
            done = send_raw(proxy.port, request(body=retry)).json()
            assert done["result"]["content"][0]["text"] == "deployed prod"
            edited = call("deploy", 3, requestState=token, arguments={"env": "dev"})
            refused = send_raw(proxy.port, request(body=edited)).json()
            assert refused["error"]["code"] == -32602
            # docs/proxy.md's probe of the same two: every high finding alone, none behind
            probe = ("probe", "--tool", "deploy", "--arguments", '{"env": "prod"}', "--json")
            alone = json.loads(
                run(probe[0], f"http://127.0.0.1:{port}/mcp", *probe[1:], code=1).stdout
            )
            assert alone["server"]["name"] == "naive-upstream"
            failed = {check["id"] for check in alone["checks"] if check["result"] == "fail"}
            assert {"tamper-accepted", "forged-accepted", "cross-request-accepted"} <= failed
            behind = json.loads(
                run(probe[0], f"http://127.0.0.1:{proxy.port}/mcp", *probe[1:]).stdout
            )
            assert behind["format"] == "aead"
            assert not [f for f in behind["findings"] if f["severity"] == "high"]
        finally:
            assert proxy.stop() == 0
    finally:
        upstream.terminate()
        upstream.wait(10)
