"""The "single use at scale" section of ``make bench``: replay stores with many live entries, and
``audit`` over long captures.

Redeem rates are timed with 0, 100k and 300k live entries in the store (entries whose tokens are
unexpired, so none may be purged), in interleaved rounds, beside a bare ``SET NX PX`` on the same
Redis server. ``audit`` runs as the CLI on captures of 400k and 1.6M lines whose messages are one
every 2 ms (the whole capture within the ttl window: the most it ever remembers) and one every
50 ms, with its wall time and peak resident memory, beside plain ``json.loads`` of the same lines.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import mrtr_state as ms
from mrtr_state.state.blocking import run_blocking
from mrtr_state.state.redis.client import Router, connect
from mrtr_state.state.redis.url import parse_url
from mrtr_state.state.replay import MemoryStore, RedisStore, SqliteStore

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from tests.helpers import synthetic_capture  # noqa: E402

LIVE = (0, 100_000, 300_000)
BATCH = 20_000
START = 1_800_000_000.0


def _prefill(store: Any, count: int, now: float) -> None:
    """``count`` live entries, written the fast way each backend allows (same rows as redeem)."""
    if not count:
        return
    exp = now + 3000
    if isinstance(store, MemoryStore):
        for n in range(count):
            store.redeem(f"jti:live-{n}", exp + n / count, now=now)
    elif isinstance(store, SqliteStore):
        db = sqlite3.connect(store.path, isolation_level=None)
        db.execute("BEGIN")
        db.executemany(
            "INSERT INTO redeemed (key, expires_at) VALUES (?, ?)",
            ((f"jti:live-{n}", exp + n / count) for n in range(count)),
        )
        db.execute("COMMIT")
        db.close()
    else:
        # the store's own client, 10,000 commands in flight at a time on its pipelined connection
        router = connect(parse_url(store.url), timeout=30.0)
        keep_until_ms = int((exp + 300) * 1000)

        async def fill(first: int, last: int) -> None:
            entries = (store._keys(f"jti:live-{n}")[0] for n in range(first, last))
            await asyncio.gather(
                *(
                    router.call(e.encode(), "SET", e, b"1", "NX", "PXAT", keep_until_ms)
                    for e in entries
                )
            )

        for first in range(0, count, 10_000):
            run_blocking(fill(first, min(first + 10_000, count)), 60.0)
        router.close()


def _rate(func: Any, count: int) -> float:
    started = time.perf_counter()
    for n in range(count):
        func(n)
    return count / (time.perf_counter() - started)


def store_rates(redis_url: str | None) -> dict[str, dict[str, float]]:
    """Redeems per second (best of 3 interleaved rounds) by store and live entries."""
    rates: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as folder:
        for live in LIVE:
            now = time.time()
            stores: dict[str, Any] = {
                "memory": MemoryStore(),
                "sqlite": SqliteStore(Path(folder) / f"replay-{live}.db"),
            }
            bare: Router | None = None
            if redis_url is not None:
                stores["redis"] = RedisStore(redis_url)
                # the store's own client, for the floor below: the same path, one bare command
                bare = connect(parse_url(redis_url), timeout=5.0)
                _command(bare, b"", "FLUSHDB")
            for store in stores.values():
                _prefill(store, live, now)
            best: dict[str, float] = {}
            for round_number in range(3):
                for name, store in stores.items():
                    count = BATCH if name != "redis" else BATCH // 4
                    tag = f"{live}-{round_number}"
                    rate = _rate(
                        lambda n, s=store, t=tag, at=now: s.redeem(
                            f"jti:new-{t}-{n}", at + 600, now=at
                        ),
                        count,
                    )
                    best[name] = max(best.get(name, 0.0), rate)
                if live == 0:
                    best["sqlite bare INSERT"] = max(
                        best.get("sqlite bare INSERT", 0.0), _bare_insert(folder, round_number)
                    )
                if bare is not None and live == 0:
                    rate = _rate(
                        lambda n, c=bare, t=round_number: _command(
                            c,
                            f"bare:{t}-{n}".encode(),
                            "SET",
                            f"bare:{t}-{n}",
                            b"1",
                            "NX",
                            "PX",
                            600_000,
                        ),
                        BATCH // 4,
                    )
                    best["redis bare SET NX PX"] = max(best.get("redis bare SET NX PX", 0), rate)
            for name, rate in best.items():
                rates.setdefault(name, {})[str(live)] = rate
            for store in stores.values():
                store.close()
            if bare is not None:
                bare.close()
    return rates


def _command(router: Router, key: bytes, *args: Any) -> Any:
    """One command on the package's own client, from blocking code, as the store runs its own."""

    async def call() -> Any:
        return await router.call(key, *args)

    return run_blocking(call(), 5.0)


def _bare_insert(folder: str, round_number: int) -> float:
    """A plain autocommit INSERT per redemption on the same schema and pragmas: SQLite's floor."""
    db = sqlite3.connect(Path(folder) / f"bare-{round_number}.db", isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute("CREATE TABLE redeemed (key TEXT PRIMARY KEY, expires_at REAL NOT NULL)")
    db.execute("CREATE INDEX redeemed_by_expiry ON redeemed (expires_at)")
    rate = _rate(
        lambda n: db.execute("INSERT INTO redeemed VALUES (?, ?)", (f"jti:{n}", START + n)),
        BATCH,
    )
    db.close()
    return rate


#: Runs a command and prints its peak RSS (KiB). A small wrapper process: a child forked
#: straight from this bench would count the bench's own memory in its peak.
_PEAK = (
    "import resource, subprocess, sys; code = subprocess.call(sys.argv[1:], "
    "stdout=subprocess.DEVNULL); print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); "
    "sys.exit(code)"
)


def _peak_run(command: list[str]) -> tuple[float, float]:
    """Wall seconds and peak resident MiB of one process."""
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", _PEAK, *command], capture_output=True, text=True, check=True
    )
    return time.perf_counter() - started, int(done.stdout.split()[-1]) / 1024


def audit_rates() -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as folder:
        keyset = ms.Keyset.generate(now=int(START) - 3600)
        keyset_path = Path(folder) / "keyset.json"
        keyset.save(keyset_path)
        for step in (0.002, 0.05):
            for lines in (400_000, 1_600_000):
                capture = Path(folder) / f"capture-{step}-{lines}.jsonl"
                with capture.open("w") as out:
                    for line in synthetic_capture(keyset, lines // 4, start=START, step=step):
                        out.write(line + "\n")
                started = time.perf_counter()
                with capture.open() as source:
                    for line in source:
                        json.loads(line)
                floor = lines / (time.perf_counter() - started)
                command = [sys.executable, "-m", "mrtr_state", "--keyset", str(keyset_path)]
                wall, peak = _peak_run([*command, "audit", "--json", str(capture)])
                rows.append(
                    {
                        "lines": lines,
                        "step_s": step,
                        "lines_per_s": lines / wall,
                        "json_loads_lines_per_s": floor,
                        "peak_mib": peak,
                    }
                )
                capture.unlink()
    return rows


def markdown(rates: dict[str, dict[str, float]], audits: list[dict[str, Any]]) -> str:
    head = "| store | " + " | ".join(f"{live:,} live" for live in LIVE) + " | 300k / 0 |"
    lines = [head, "|---" * (len(LIVE) + 2) + "|"]
    for name, by_live in rates.items():
        cells = [f"{by_live[str(live)]:,.0f}/s" if str(live) in by_live else "" for live in LIVE]
        ratio = (
            f"{by_live['300000'] / by_live['0']:.2f}" if "300000" in by_live else "(bare, 0 live)"
        )
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {ratio} |")
    share = rates["sqlite"]["0"] / rates["sqlite bare INSERT"]["0"]
    lines.append(f"\nSQLite redeem = {share:.2f}x a bare autocommit `INSERT` on the same schema.")
    if "redis" in rates and "redis bare SET NX PX" in rates:
        share = rates["redis"]["0"] / rates["redis bare SET NX PX"]["0"]
        lines.append(f"Redis redeem = {share:.2f}x a bare `SET NX PX` on the same server.")
    lines.append(
        "\n| audit capture | lines/s (CLI, verifying) | plain json.loads lines/s | "
        "audit / json.loads | peak RSS |"
    )
    lines.append("|---|---|---|---|---|")
    for row in audits:
        lines.append(
            f"| {row['lines']:,} lines, a message every {row['step_s'] * 1000:g} ms | "
            f"{row['lines_per_s']:,.0f} | {row['json_loads_lines_per_s']:,.0f} | "
            f"{row['lines_per_s'] / row['json_loads_lines_per_s']:.2f} | "
            f"{row['peak_mib']:.0f} MiB |"
        )
    return "\n".join(lines)


def main(redis_url: str | None) -> dict[str, Any]:
    rates = store_rates(redis_url)
    audits = audit_rates()
    text = markdown(rates, audits)
    print(text)
    (HERE / "at_scale.md").write_text(text + "\n")
    return {"store_rates": rates, "audit": audits}


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
