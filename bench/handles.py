"""``make bench`` (handles part): ``mrtr-state proxy --state-store`` against the same proxy with
tokens, and a fleet's worth of outstanding handles.

1. CPU per round trip: the naive upstream (examples/naive_upstream.py) behind two proxies, one
   sealing ``aead`` tokens, one keeping states in a private redis-server and giving handles; the
   load client (bench/load_client.py) makes round trips through each in interleaved rounds. The
   proxy's CPU per round trip (from /proc) is compared, and so is the Redis server's own.
2. Redis commands per round trip, from ``INFO commandstats`` (commands the proxy sent; those a
   script runs inside the server are counted apart).
3. A 256 KB state through the proxy: the length of the handle the client sees.
4. 10,000 handles outstanding at once (10,000 first rounds through two proxies sharing one
   store), then every one retried once (each on the other proxy than the one that gave it) and
   then once more: how many succeeded, how many of the second retries were refused. Against one
   Redis server and against a 3-master Redis Cluster on loopback.

    python bench/handles.py          # HANDLES_BENCH_OUTSTANDING=10000, HANDLES_BENCH_ROUNDS=5
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT)]

from load_client import META, Connection  # noqa: E402
from proxy_load import PY, cpu_seconds, free_port, load, started, stop  # noqa: E402

ROUNDS = int(os.environ.get("HANDLES_BENCH_ROUNDS", "5"))
OUTSTANDING = int(os.environ.get("HANDLES_BENCH_OUTSTANDING", "10000"))
LOADS = ((1, 400), (10, 60))


def redis_server(folder: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    server = started(
        [
            *(shutil.which("redis-server") or "redis-server", "--port", str(port)),
            *("--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(folder)),
            *("--logfile", str(folder / f"redis-{port}.log")),
        ],
        port,
    )
    return server, f"redis://127.0.0.1:{port}/0"


def proxy(upstream: str, *more: str) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    process = started(
        [
            *(PY, "-m", "mrtr_state", "proxy", "--upstream", upstream),
            *("--listen", f"127.0.0.1:{port}", "--principal-header", "X-Forwarded-User", *more),
        ],
        port,
    )
    return process, port


def commandstats(url: str) -> dict[str, int]:
    import redis

    stats = redis.Redis.from_url(url).info("commandstats")
    return {name.removeprefix("cmdstat_"): int(value["calls"]) for name, value in stats.items()}


def cpu_per_round_trip(folder: Path, keyset: Path) -> dict[str, Any]:
    upstream_port = free_port()
    upstream_url = f"http://127.0.0.1:{upstream_port}/mcp"
    upstream = started(
        [PY, str(ROOT / "examples" / "naive_upstream.py"), str(upstream_port)], upstream_port
    )
    server, store = redis_server(folder)
    tokens, token_port = proxy(upstream_url, "--keyset", str(keyset))
    handles, handle_port = proxy(upstream_url, "--state-store", store)
    cells = []
    try:
        for concurrency, rounds in LOADS:
            load(token_port, concurrency, 5)
            load(handle_port, concurrency, 5)
            samples: dict[str, list[float]] = {"tokens": [], "handles": [], "redis": []}
            commands_per_trip = 0.0
            for _ in range(ROUNDS):
                for name, port, process in (
                    ("tokens", token_port, tokens),
                    ("handles", handle_port, handles),
                ):
                    before = cpu_seconds(process.pid)
                    redis_before = cpu_seconds(server.pid)
                    stats_before = commandstats(store)
                    report = load(port, concurrency, rounds)
                    trips = len(report["latencies"])
                    samples[name].append((cpu_seconds(process.pid) - before) / trips * 1000)
                    if name == "handles":
                        samples["redis"].append(
                            (cpu_seconds(server.pid) - redis_before) / trips * 1000
                        )
                        after = commandstats(store)
                        sent = sum(
                            after.get(c, 0) - stats_before.get(c, 0) for c in ("set", "evalsha")
                        )
                        commands_per_trip = sent / trips
            ratios = [h / t for h, t in zip(samples["handles"], samples["tokens"], strict=True)]
            cells.append(
                {
                    "concurrency": concurrency,
                    "token_cpu_ms_per_rt": statistics.median(samples["tokens"]),
                    "handle_cpu_ms_per_rt": statistics.median(samples["handles"]),
                    "handle_over_token_median": statistics.median(ratios),
                    "handle_over_token_best": min(h for h in samples["handles"])
                    / min(samples["tokens"]),
                    "redis_cpu_ms_per_rt": statistics.median(samples["redis"]),
                    "redis_commands_per_rt": commands_per_trip,
                }
            )
        big = asyncio.run(large_state(handle_port))
    finally:
        for process in (tokens, handles, server, upstream):
            stop(process)
    return {"cells": cells, "large_state": big}


async def _session(port: int, user: str) -> tuple[Connection, bytes]:
    _, connection = await asyncio.get_running_loop().create_connection(
        Connection, "127.0.0.1", port
    )
    head = (
        f"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\n"
        "content-type: application/json\r\naccept: application/json, text/event-stream\r\n"
        f"x-forwarded-user: {user}\r\n"
    ).encode()
    return connection, head


def _call(env: str, id_: int, state: str | None = None) -> dict[str, Any]:
    params: dict[str, Any] = {"name": "deploy", "arguments": {"env": env}, "_meta": META}
    if state is not None:
        params["requestState"] = state
        params["inputResponses"] = {"confirm": {"action": "accept", "content": {"ok": True}}}
    return {"jsonrpc": "2.0", "id": id_, "method": "tools/call", "params": params}


async def large_state(port: int) -> dict[str, Any]:
    """A 256 KB state (base64 of a 192 KB environment name) round trip through handles."""
    env = "e" * (192 << 10)
    connection, head = await _session(port, "big")
    first = await connection.post(head, _call(env, 1))
    handle = first["result"]["requestState"]
    done = await connection.post(head, _call(env, 2, handle))
    connection.transport.close()
    ok = done["result"]["content"][0]["text"] == f"deployed {env}"
    return {
        "state_bytes": len(json.dumps({"env": env})) * 4 // 3,
        "handle_length": len(handle),
        "round_trip_ok": ok,
    }


async def outstanding(ports: tuple[int, int], count: int, concurrency: int = 50) -> dict[str, Any]:
    """``count`` first rounds (alternating proxies), then each retried once on the other proxy,
    then once more: the counts of each outcome."""
    handles: list[tuple[int, str]] = []

    async def worker(number: int, jobs: list[int], act: Any) -> None:
        sessions = [await _session(port, f"user-{number}") for port in ports]
        for job in jobs:
            await act(sessions, job)
        for connection, _ in sessions:
            connection.transport.close()

    async def first(sessions: list[tuple[Connection, bytes]], job: int) -> None:
        connection, head = sessions[job % 2]
        answer = await connection.post(head, _call(f"e{job}", job))
        handles.append((job, answer["result"]["requestState"]))

    results = {"retried_ok": 0, "retried_refused": 0, "again_ok": 0, "again_refused": 0}

    def retry(field: str) -> Any:
        async def act(sessions: list[tuple[Connection, bytes]], job: int) -> None:
            number, handle = handles[job]
            connection, head = sessions[(number + 1) % 2]
            answer = await connection.post(head, _call(f"e{number}", job, handle))
            key = "ok" if "result" in answer else "refused"
            results[f"{field}_{key}"] += 1

        return act

    started_at = time.perf_counter()
    spread = [list(range(n, count, concurrency)) for n in range(concurrency)]
    # each worker is its own principal: first rounds and retries of one job share a worker
    await asyncio.gather(*(worker(n, jobs, first) for n, jobs in enumerate(spread)))
    filled = time.perf_counter() - started_at
    handles.sort()
    assert len(handles) == count
    await asyncio.gather(*(worker(n, jobs, retry("retried")) for n, jobs in enumerate(spread)))
    await asyncio.gather(*(worker(n, jobs, retry("again")) for n, jobs in enumerate(spread)))
    return {
        "outstanding": count,
        "fill_seconds": filled,
        "seconds": time.perf_counter() - started_at,
        **results,
    }


def at_scale(folder: Path) -> list[dict[str, Any]]:
    upstream_port = free_port()
    upstream_url = f"http://127.0.0.1:{upstream_port}/mcp"
    upstream = started(
        [PY, str(ROOT / "examples" / "naive_upstream.py"), str(upstream_port)], upstream_port
    )
    rows = []
    try:
        server, store = redis_server(folder)
        try:
            rows.append({"store": "one Redis", **_with_two_proxies(upstream_url, store)})
        finally:
            stop(server)
        from tests.redis_topologies import cluster

        with cluster() as (_, url):
            rows.append({"store": "3-master Cluster", **_with_two_proxies(upstream_url, url)})
    finally:
        stop(upstream)
    return rows


def _with_two_proxies(upstream_url: str, store: str) -> dict[str, Any]:
    first, one = proxy(upstream_url, "--state-store", store)
    second, two = proxy(upstream_url, "--state-store", store, "--http", "h11")
    try:
        return asyncio.run(outstanding((one, two), OUTSTANDING))
    finally:
        stop(first)
        stop(second)


def main() -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        keyset = folder / "keyset.json"
        subprocess.run(
            [PY, "-m", "mrtr_state", "--keyset", str(keyset), "keys", "init", "--alg", "A256GCM"],
            check=True,
            capture_output=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        return {
            "rounds": ROUNDS,
            **cpu_per_round_trip(folder, keyset),
            "at_scale": at_scale(folder),
        }


def table(report: dict[str, Any]) -> str:
    lines = [
        "| conc. | tokens: proxy CPU/RT | handles: proxy CPU/RT | handles / tokens (median, best) "
        "| Redis CPU/RT | Redis commands/RT |",
        "|---|---|---|---|---|---|",
    ]
    for c in report["cells"]:
        lines.append(
            f"| {c['concurrency']} | {c['token_cpu_ms_per_rt']:.3f} ms | "
            f"{c['handle_cpu_ms_per_rt']:.3f} ms | {c['handle_over_token_median']:.2f}x, "
            f"{c['handle_over_token_best']:.2f}x | {c['redis_cpu_ms_per_rt']:.3f} ms | "
            f"{c['redis_commands_per_rt']:.2f} |"
        )
    big = report["large_state"]
    lines += [
        "",
        f"A {big['state_bytes'] // 1024} KB state: the client saw a "
        f"{big['handle_length']}-character handle; round trip "
        f"{'ok' if big['round_trip_ok'] else 'FAILED'}.",
        "",
        "| store | outstanding | first rounds (s) | retried once: ok / refused "
        "| second retry: ok / refused | total (s) |",
        "|---|---|---|---|---|---|",
    ]
    for r in report["at_scale"]:
        lines.append(
            f"| {r['store']} | {r['outstanding']} | {r['fill_seconds']:.1f} | "
            f"{r['retried_ok']} / {r['retried_refused']} | "
            f"{r['again_ok']} / {r['again_refused']} | {r['seconds']:.1f} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # pragma: no cover
        pass
    result = main()
    print(table(result))
    (HERE / "handles_results.json").write_text(json.dumps(result, indent=1) + "\n")
    (HERE / "handles_results.md").write_text(table(result) + "\n")
