"""Which Redis client the stores speak through: redis-py's asyncio client (with hiredis) against
the package's own (mrtr_state.state.redis.client), per command, on one server, in one run.

Issue 45 made this the deciding measurement: the package keeps its own client only while it costs
at most half the CPU per command of redis-py's. Each round runs, on uvloop as the proxy does,
COMMANDS commands one after another (each awaited before the next, as a request awaits its
store) through each client in turn, in alternating order, against a private redis-server; CPU
is the process's (getrusage: user and kernel apart, then summed), wall the round's. The table
gives best and median over the rounds, and the ratio of the medians. The kernel's part is the
same for both clients (one write and one read per command on loopback) and moves with the host's
kernel (22 µs a command under one kernel of the shared machine, 7-10 under an earlier one), so the
user-space ratio is printed beside the rule's: it is what the choice of client changes.

    python bench/redis_clients.py [ROUNDS] [COMMANDS]     (writes bench/redis_results.{md,json})
"""

from __future__ import annotations

import json
import platform
import resource
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


def _cpu() -> tuple[float, float]:
    used = resource.getrusage(resource.RUSAGE_SELF)
    return used.ru_utime, used.ru_stime


Sample = tuple[float, float, float]  # user, kernel and wall seconds per command


def _per_command(started: tuple[float, float, float], commands: int) -> Sample:
    user, kernel = _cpu()
    wall = time.perf_counter()
    return (
        (user - started[0]) / commands,
        (kernel - started[1]) / commands,
        (wall - started[2]) / commands,
    )


async def _own(url: str, commands: int) -> Sample:
    from mrtr_state.state.redis.client import router_for

    router = router_for(url, timeout=5.0)
    await router.call(b"bench", "SET", "bench", "v")
    started = (*_cpu(), time.perf_counter())
    for _ in range(commands):
        await router.call(b"bench", "GET", "bench")
    sample = _per_command(started, commands)
    router.close()
    return sample


async def _redis_py(url: str, commands: int) -> Sample:
    import redis.asyncio

    client: Any = redis.asyncio.Redis.from_url(url)  # hiredis parses its replies when present
    await client.set("bench", "v")
    started = (*_cpu(), time.perf_counter())
    for _ in range(commands):
        await client.get("bench")
    sample = _per_command(started, commands)
    await client.aclose()
    return sample


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
        samples: dict[str, list[Sample]] = {name: [] for name in clients}
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
        user = [u * 1e6 for u, _, _ in got]
        kernel = [k * 1e6 for _, k, _ in got]
        cpu = [(u + k) * 1e6 for u, k, _ in got]
        wall = [w * 1e6 for _, _, w in got]
        rows.append(
            {
                "client": name,
                "cpu_us_best": min(cpu),
                "cpu_us_median": statistics.median(cpu),
                "user_us_median": statistics.median(user),
                "kernel_us_median": statistics.median(kernel),
                "wall_us_best": min(wall),
                "wall_us_median": statistics.median(wall),
            }
        )
    own, theirs = rows
    ratio = float(theirs["cpu_us_median"]) / float(own["cpu_us_median"])
    user_ratio = float(theirs["user_us_median"]) / float(own["user_us_median"])
    verdict = "keep the own client" if ratio >= 2 else "use redis-py everywhere"
    lines = [
        "| client | CPU µs/command (best) | CPU µs/command (median) | of which user / kernel "
        "(medians) | wall µs (best) | wall µs (median) |",
        "|---|---|---|---|---|---|",
        *(
            f"| {r['client']} | {r['cpu_us_best']:.1f} | {r['cpu_us_median']:.1f} | "
            f"{r['user_us_median']:.1f} / {r['kernel_us_median']:.1f} | "
            f"{r['wall_us_best']:.1f} | {r['wall_us_median']:.1f} |"
            for r in rows
        ),
        "",
        f"redis-py costs {ratio:.2f}x the own client's CPU per command (medians; the rule: keep "
        f"the own client only at 2x or more): {verdict}. In user space alone, what the choice "
        f"of client changes, {user_ratio:.2f}x; the kernel's part is the same write and read "
        f"for both. {rounds} rounds of {commands:,} commands each, clients alternating, uvloop, "
        "one local redis-server.",
        "",
        f"Machine: Python {platform.python_version()}, {platform.platform()}, "
        f"{time.strftime('%Y-%m-%d')}.",
    ]
    (HERE / "redis_results.md").write_text("\n".join(lines) + "\n")
    (HERE / "redis_results.json").write_text(
        json.dumps(
            {"rows": rows, "ratio": ratio, "user_ratio": user_ratio, "verdict": verdict},
            indent=2,
        )
        + "\n"
    )
    print("\n".join(lines))


if __name__ == "__main__":
    main()
