"""Which Redis client the stores speak through: redis-py's asyncio client (with hiredis) against
the package's own (mrtr_state.state.redis.client), per command, on one server, in one run.

Issue 45 made this the deciding measurement: the package keeps its own client only while it costs
at most half the CPU per command of redis-py's. Each round runs, on uvloop as the proxy does,
COMMANDS commands one after another (each awaited before the next, as a request awaits its
store) through each client in turn, in alternating order, against a private redis-server; CPU
is the process's (time.process_time), wall the round's. The table gives best and median over the
rounds, and the ratio of the medians.

    python bench/redis_clients.py [ROUNDS] [COMMANDS]     (writes bench/redis_results.{md,json})
"""

from __future__ import annotations

import json
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


async def _own(url: str, commands: int) -> tuple[float, float]:
    from mrtr_state.state.redis.client import router_for

    router = router_for(url, timeout=5.0)
    await router.call(b"bench", "SET", "bench", "v")
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(commands):
        await router.call(b"bench", "GET", "bench")
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    router.close()
    return cpu / commands, wall / commands


async def _redis_py(url: str, commands: int) -> tuple[float, float]:
    import redis.asyncio

    client: Any = redis.asyncio.Redis.from_url(url)  # hiredis parses its replies when present
    await client.set("bench", "v")
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(commands):
        await client.get("bench")
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    await client.aclose()
    return cpu / commands, wall / commands


def main() -> None:
    import uvloop

    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 9
    commands = int(sys.argv[2]) if len(sys.argv) > 2 else 20000
    binary = shutil.which("redis-server")
    if binary is None:
        sys.exit("redis-server is needed: apt-get install redis-server")
    port = _free_port()
    folder = tempfile.mkdtemp()
    server = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--dir", folder],
        stdout=subprocess.DEVNULL,
    )
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        url = f"redis://127.0.0.1:{port}/0"
        clients = {"mrtr-state's own client": _own, "redis-py asyncio + hiredis": _redis_py}
        samples: dict[str, list[tuple[float, float]]] = {name: [] for name in clients}
        for number in range(rounds):
            order = list(clients) if number % 2 == 0 else list(reversed(clients))
            for name in order:
                samples[name].append(uvloop.run(clients[name](url, commands)))
    finally:
        server.kill()
        server.wait(10)
        shutil.rmtree(folder, ignore_errors=True)
    rows: list[dict[str, Any]] = []
    for name, got in samples.items():
        cpu = [c * 1e6 for c, _ in got]
        wall = [w * 1e6 for _, w in got]
        rows.append(
            {
                "client": name,
                "cpu_us_best": min(cpu),
                "cpu_us_median": statistics.median(cpu),
                "wall_us_best": min(wall),
                "wall_us_median": statistics.median(wall),
            }
        )
    own, theirs = rows
    ratio = float(theirs["cpu_us_median"]) / float(own["cpu_us_median"])
    verdict = "keep the own client" if ratio >= 2 else "use redis-py everywhere"
    lines = [
        "| client | CPU µs/command (best) | CPU µs/command (median) | wall µs (best) | "
        "wall µs (median) |",
        "|---|---|---|---|---|",
        *(
            f"| {r['client']} | {r['cpu_us_best']:.1f} | {r['cpu_us_median']:.1f} | "
            f"{r['wall_us_best']:.1f} | {r['wall_us_median']:.1f} |"
            for r in rows
        ),
        "",
        f"redis-py costs {ratio:.2f}x the own client's CPU per command (medians; the rule: keep "
        f"the own client only at 2x or more): {verdict}. {rounds} rounds of {commands:,} "
        f"commands each, clients alternating, uvloop, one local redis-server.",
        "",
        f"Machine: Python {platform.python_version()}, {platform.platform()}, "
        f"{time.strftime('%Y-%m-%d')}.",
    ]
    (HERE / "redis_results.md").write_text("\n".join(lines) + "\n")
    (HERE / "redis_results.json").write_text(
        json.dumps({"rows": rows, "ratio": ratio, "verdict": verdict}, indent=2) + "\n"
    )
    print("\n".join(lines))


if __name__ == "__main__":
    main()
