"""``make bench`` (proxy part): what ``mrtr-state proxy`` costs, beside what it cannot avoid.

Each upstream (``naive``: examples/naive_upstream.py, plain base64 state; ``sdk``: the official
Python SDK server of bench/sdk_upstream.py) runs in a process of its own and is reached three
ways: directly; through a pass-through on the proxy's own stack (bench/passthrough.py: uvicorn
with httptools and uvloop in front, the proxy's upstream client behind, nothing in between); and
through ``mrtr-state proxy`` as an operator starts it. The load (bench/load_client.py, a process
of its own) makes round trips, a ``tools/call`` answered ``input_required`` and its retry, at
concurrency 1, 10 and 50, and checks every answer. All of it shares the machine's cores, as a
sidecar shares a pod's.

For each cell: round trips per second, the CPU time the proxy (or the pass-through) process
spent per round trip (user + system, from /proc), and the latency per round trip; ``added`` is
the proxied latency less the direct one. Every cell is measured in ROUNDS interleaved rounds
(direct, pass-through, proxy, direct, ...): the report gives the median and the best.
"""

from __future__ import annotations

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

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PY = sys.executable
ROUNDS = int(os.environ.get("PROXY_BENCH_ROUNDS", "3"))
#: (concurrency, round trips per connection) for each cell.
LOADS = ((1, 600), (10, 100), (50, 24))
TICK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def started(command: list[str], port: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(command, env=env, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return process
        except OSError:
            if time.monotonic() > deadline or process.poll() is not None:
                process.kill()
                raise RuntimeError(f"{command[:3]} did not start") from None
            time.sleep(0.05)


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def cpu_seconds(pid: int) -> float:
    """CPU time of ``pid`` (user and system): to the nanosecond from /proc/PID/schedstat where
    the kernel keeps it, else in clock ticks (10 ms: a 400-round sample of 1.5 ms rounds would
    then be read to +-2%)."""
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICK


def load(port: int, concurrency: int, rounds: int) -> dict[str, Any]:
    done = subprocess.run(
        [
            PY,
            str(HERE / "load_client.py"),
            f"http://127.0.0.1:{port}/mcp",
            str(concurrency),
            str(rounds),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"load on {port} failed: {done.stderr[-600:]}")
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def measure_upstream(kind: str, keyset: Path) -> list[dict[str, Any]]:
    upstream_port, base_port, proxy_port = free_port(), free_port(), free_port()
    naive = ROOT / "examples" / "naive_upstream.py"
    script = naive if kind == "naive" else HERE / "sdk_upstream.py"
    upstream_url = f"http://127.0.0.1:{upstream_port}/mcp"
    upstream = started([PY, str(script), str(upstream_port)], upstream_port)
    base = started([PY, str(HERE / "passthrough.py"), str(base_port), upstream_url], base_port)
    proxy = started(
        [
            *(PY, "-m", "mrtr_state", "proxy", "--keyset", str(keyset), "--upstream", upstream_url),
            *("--listen", f"127.0.0.1:{proxy_port}", "--principal-header", "X-Forwarded-User"),
            *("--admin-listen", str(free_port())),  # as in production: metrics counted
        ],
        proxy_port,
    )
    rows = []
    try:
        for concurrency, rounds in LOADS:
            for port in (upstream_port, base_port, proxy_port):  # warm every path up
                load(port, concurrency, 5)
            samples: dict[str, list[dict[str, float]]] = {"direct": [], "base": [], "proxy": []}
            for _ in range(ROUNDS):
                for name, port, process in (
                    ("direct", upstream_port, None),
                    ("base", base_port, base),
                    ("proxy", proxy_port, proxy),
                ):
                    before = cpu_seconds(process.pid) if process is not None else 0.0
                    report = load(port, concurrency, rounds)
                    spent = cpu_seconds(process.pid) - before if process is not None else 0.0
                    trips = len(report["latencies"])
                    samples[name].append(
                        {
                            "rt_per_s": trips / report["elapsed"],
                            "cpu_ms_per_rt": spent / trips * 1000,
                            "p50_ms": percentile(report["latencies"], 0.50) * 1000,
                            "p99_ms": percentile(report["latencies"], 0.99) * 1000,
                        }
                    )
            rows.append(_row(kind, concurrency, rounds, samples))
    finally:
        for process in (proxy, base, upstream):
            stop(process)
    return rows


def _row(
    kind: str, concurrency: int, rounds: int, samples: dict[str, list[dict[str, float]]]
) -> dict[str, Any]:
    def median(name: str, field: str) -> float:
        return statistics.median(s[field] for s in samples[name])

    def best(name: str, field: str) -> float:
        values = [s[field] for s in samples[name]]
        return max(values) if field == "rt_per_s" else min(values)

    added = [
        p["p50_ms"] - d["p50_ms"] for p, d in zip(samples["proxy"], samples["direct"], strict=True)
    ]
    added99 = [
        p["p99_ms"] - d["p99_ms"] for p, d in zip(samples["proxy"], samples["direct"], strict=True)
    ]
    return {
        "upstream": kind,
        "concurrency": concurrency,
        "round_trips": concurrency * rounds,
        "direct_rt_per_s": median("direct", "rt_per_s"),
        "base_rt_per_s": median("base", "rt_per_s"),
        "proxy_rt_per_s": median("proxy", "rt_per_s"),
        "proxy_share_of_direct": median("proxy", "rt_per_s") / median("direct", "rt_per_s"),
        "base_cpu_ms_per_rt": median("base", "cpu_ms_per_rt"),
        "proxy_cpu_ms_per_rt": median("proxy", "cpu_ms_per_rt"),
        "proxy_cpu_ms_per_rt_best": best("proxy", "cpu_ms_per_rt"),
        "direct_p50_ms": median("direct", "p50_ms"),
        "added_p50_ms": statistics.median(added),
        "added_p99_ms": statistics.median(added99),
        "added_p50_ms_best": min(added),
        "added_p99_ms_best": min(added99),
    }


def main() -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as folder:
        keyset = Path(folder) / "keyset.json"
        subprocess.run(
            [PY, "-m", "mrtr_state", "--keyset", str(keyset), "keys", "init", "--alg", "A256GCM"],
            check=True,
            capture_output=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        rows = [row for kind in ("sdk", "naive") for row in measure_upstream(kind, keyset)]
    return {"rounds": ROUNDS, "rows": rows}


def table(report: dict[str, Any]) -> str:
    lines = [
        "| upstream | conc. | direct RT/s | pass-through RT/s | proxy RT/s (share) | "
        "pass-through CPU/RT | proxy CPU/RT (best) | added p50 / p99 (best) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in report["rows"]:
        lines.append(
            f"| {r['upstream']} | {r['concurrency']} | {r['direct_rt_per_s']:.0f} | "
            f"{r['base_rt_per_s']:.0f} | {r['proxy_rt_per_s']:.0f} "
            f"({r['proxy_share_of_direct'] * 100:.0f} %) | {r['base_cpu_ms_per_rt']:.2f} ms | "
            f"{r['proxy_cpu_ms_per_rt']:.2f} ms ({r['proxy_cpu_ms_per_rt_best']:.2f}) | "
            f"{r['added_p50_ms']:+.2f} / {r['added_p99_ms']:+.2f} ms "
            f"({r['added_p50_ms_best']:+.2f} / {r['added_p99_ms_best']:+.2f}) |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    result = main()
    print(table(result))
    (HERE / "proxy_results.json").write_text(json.dumps(result, indent=1) + "\n")
    (HERE / "proxy_results.md").write_text(table(result) + "\n")
