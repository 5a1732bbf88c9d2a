"""``make bench`` (proxy part): the latency ``mrtr-state proxy`` adds, under a bounded load.

A naive MCP-shaped server (the tests' one: plain base64 JSON state) serves on loopback in a
process of its own, once reached directly and once through ``mrtr-state proxy`` (another
process, started as an operator would start it). CLIENTS concurrent clients each make ROUNDS
round trips
(a ``tools/call`` answered input_required, then its retry with the state): every answer is
checked (no lost or mixed-up responses), and the per-round-trip latency is reported as p50 and
p99, direct against proxied. The load stops by itself; every address is 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import mrtr_state as ms  # noqa: E402
from tests.servers import free_port  # noqa: E402

CLIENTS = int(os.environ.get("PROXY_BENCH_CLIENTS", "50"))
ROUNDS = int(os.environ.get("PROXY_BENCH_ROUNDS", "200"))


async def client(url: str, number: int, latencies: list[float], errors: list[str]) -> None:
    headers = {"X-Forwarded-User": f"user-{number}", "Accept": "application/json"}
    limits = httpx.Limits(max_connections=1)
    async with httpx.AsyncClient(headers=headers, timeout=30, limits=limits) as http:
        for round_ in range(ROUNDS):
            env = f"{number}-{round_}"
            params: dict[str, Any] = {"name": "deploy", "arguments": {"env": env}}
            started = time.perf_counter()
            first = await http.post(
                url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
            )
            state = first.json()["result"]["requestState"]
            retry = {**params, "requestState": state}
            done = await http.post(
                url, json={"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": retry}
            )
            latencies.append(time.perf_counter() - started)
            text = done.json().get("result", {}).get("content", [{}])[0].get("text")
            if text != f"deployed {env}":
                errors.append(f"{env}: {done.text[:200]}")


async def load(url: str) -> tuple[list[float], list[str], float]:
    latencies: list[float] = []
    errors: list[str] = []
    started = time.perf_counter()
    await asyncio.gather(*(client(url, n, latencies, errors) for n in range(CLIENTS)))
    return latencies, errors, time.perf_counter() - started


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def started(command: list[str], port: int, env: dict[str, str]) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(command, env=env, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return process
        except OSError:
            if time.monotonic() > deadline or process.poll() is not None:
                process.kill()
                raise RuntimeError(f"{command[:3]} did not start") from None
            time.sleep(0.05)


def main() -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(HERE.parent)}
    upstream_port, proxy_port = free_port(), free_port()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "keyset.json"
        ms.Keyset.generate(("A256GCM",)).save(path)
        upstream = started(
            [
                *(sys.executable, "-m", "uvicorn", "--factory", "tests.servers:NaiveServer"),
                *("--port", str(upstream_port), "--log-level", "error"),
            ],
            upstream_port,
            env,
        )
        proxy = started(
            [
                *(sys.executable, "-m", "mrtr_state", "proxy", "--keyset", str(path)),
                *("--upstream", f"http://127.0.0.1:{upstream_port}/mcp"),
                *("--listen", f"127.0.0.1:{proxy_port}", "--principal-header", "X-Forwarded-User"),
            ],
            proxy_port,
            env,
        )
        try:
            direct, direct_errors, direct_s = asyncio.run(
                load(f"http://127.0.0.1:{upstream_port}/mcp")
            )
            proxied, proxied_errors, proxied_s = asyncio.run(
                load(f"http://127.0.0.1:{proxy_port}/mcp")
            )
        finally:
            for process in (proxy, upstream):
                process.terminate()
                process.wait(10)
    report = {
        "clients": CLIENTS,
        "rounds": ROUNDS,
        "round_trips": len(proxied),
        "lost_or_mixed": len(direct_errors)
        + len(proxied_errors)
        + 2 * CLIENTS * ROUNDS
        - len(direct)
        - len(proxied),
        "direct_p50_ms": percentile(direct, 0.50) * 1000,
        "direct_p99_ms": percentile(direct, 0.99) * 1000,
        "proxied_p50_ms": percentile(proxied, 0.50) * 1000,
        "proxied_p99_ms": percentile(proxied, 0.99) * 1000,
        "direct_round_trips_per_s": len(direct) / direct_s,
        "proxied_round_trips_per_s": len(proxied) / proxied_s,
        "mean_added_ms": (statistics.mean(proxied) - statistics.mean(direct)) * 1000,
    }
    for sample in (direct_errors + proxied_errors)[:5]:
        print("error:", sample, file=sys.stderr)
    return report


if __name__ == "__main__":
    result = main()
    print(json.dumps(result, indent=1))
    (HERE / "proxy_results.json").write_text(json.dumps(result, indent=1) + "\n")
    if result["lost_or_mixed"]:
        sys.exit(1)
