"""Single-use requestState: memory, SQLite and a real Redis server, races and faults."""

from __future__ import annotations

import json
import multiprocessing
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import mrtr_state as ms
from mrtr_state.state.replay import (
    DEFAULT_MAX_SKEW,
    MemoryStore,
    RedisStore,
    ReplayStore,
    SqliteStore,
    open_store,
    token_key,
)

from .conftest import NOW
from .helpers import run
from .servers import free_port

ROUNDS = 25
RACERS = 16


# --- the library ---------------------------------------------------------------------------


def test_a_token_is_accepted_once_then_refused_as_replayed(keyset: ms.Keyset) -> None:
    store = MemoryStore()
    token = ms.mint(keyset, "pay", ttl=60, now=NOW)
    assert ms.verify(keyset, token, now=NOW, once=store).state == "pay"
    with pytest.raises(ms.Replayed, match="already redeemed") as caught:
        ms.verify(keyset, token, now=NOW + 1, once=store)
    assert caught.value.exit_code == 5
    # other tokens are unaffected, and verifying without the store does not consult it
    ms.verify(keyset, ms.mint(keyset, "pay", now=NOW), now=NOW, once=store)
    ms.verify(keyset, token, now=NOW + 2)


def test_a_refused_token_is_never_recorded(keyset: ms.Keyset) -> None:
    store = MemoryStore()
    token = ms.mint(keyset, "x", principal="alice", ttl=60, now=NOW)
    with pytest.raises(ms.PrincipalMismatch):
        ms.verify(keyset, token, principal="bob", now=NOW, once=store)
    assert len(store) == 0
    ms.verify(keyset, token, principal="alice", now=NOW, once=store)


def test_an_expired_redeemed_token_is_reported_as_expired_not_replayed(keyset: ms.Keyset) -> None:
    store = MemoryStore()
    token = ms.mint(keyset, "x", ttl=60, now=NOW)
    ms.verify(keyset, token, now=NOW, once=store)
    with pytest.raises(ms.ExpiredToken):
        ms.verify(keyset, token, now=NOW + 60, once=store)


def test_store_keys_never_hold_the_state_or_principal() -> None:
    assert token_key("abc", "ms1.whatever") == "jti:abc"
    digest = token_key(None, "v1.token")
    assert digest.startswith("sha256:") and "token" not in digest


@pytest.mark.parametrize("url", ["nope:", "sqlite://relative.db", "sqlite:///"])
def test_unknown_store_urls_are_refused(url: str) -> None:
    with pytest.raises(ValueError, match=r"replay store|sqlite:///"):
        open_store(url)


# --- SQLite --------------------------------------------------------------------------------


def test_sqlite_entries_outlive_their_token_by_max_skew(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "replay.db")
    assert store.max_skew == DEFAULT_MAX_SKEW == 300
    assert store.redeem("jti:a", NOW + 60, now=NOW)
    assert not store.redeem("jti:a", NOW + 60, now=NOW + 59)
    # a replica whose clock runs 299 s behind the purging one still sees the token as live
    assert not store.redeem("jti:a", NOW + 900, now=NOW + 60 + 299)
    assert store.redeem("jti:a", NOW + 900, now=NOW + 60 + 300)  # lapsed: reclaimed
    store.purge(now=NOW + 900 + 300)
    assert store.count() == 0
    assert isinstance(open_store(f"sqlite:///{tmp_path}/other.db"), SqliteStore)


def _race_sqlite(path: str, barrier: Any, results: Any) -> None:
    store = SqliteStore(path)
    for round_number in range(ROUNDS):
        barrier.wait()
        now = time.time()
        results.put((round_number, store.redeem(f"jti:round-{round_number}", now + 60, now=now)))
    store.close()


def test_sixteen_processes_racing_on_sqlite_redeem_exactly_once(tmp_path: Path) -> None:
    path = str(tmp_path / "replay.db")
    SqliteStore(path).close()
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(RACERS)
    results = context.Queue()
    racers = [
        context.Process(target=_race_sqlite, args=(path, barrier, results)) for _ in range(RACERS)
    ]
    for racer in racers:
        racer.start()
    winners: dict[int, int] = dict.fromkeys(range(ROUNDS), 0)
    for _ in range(ROUNDS * RACERS):
        round_number, won = results.get(timeout=120)
        winners[round_number] += won
    for racer in racers:
        racer.join(60)
        assert racer.exitcode == 0
    assert winners == dict.fromkeys(range(ROUNDS), 1)


def test_an_unwritable_sqlite_store_fails_closed(keyset: ms.Keyset, tmp_path: Path) -> None:
    a_file = tmp_path / "file"
    a_file.write_text("")
    with pytest.raises(ms.ReplayStoreError, match="cannot open") as caught:
        SqliteStore(a_file / "replay.db")  # a path under a file: never writable, even for root
    assert caught.value.exit_code == 6
    folder = tmp_path / "db-is-a-folder"
    folder.mkdir()
    with pytest.raises(ms.ReplayStoreError):
        SqliteStore(folder)


# --- Redis ---------------------------------------------------------------------------------


def test_redis_redeems_once(keyset: ms.Keyset, redis_url: str) -> None:
    store = open_store(redis_url)
    assert isinstance(store, RedisStore)
    token = ms.mint(keyset, "x", ttl=60)
    ms.verify(keyset, token, once=store)
    with pytest.raises(ms.Replayed):
        ms.verify(keyset, token, once=store)


@pytest.mark.parametrize("store_kind", ["memory", "sqlite", "redis"])
def test_a_token_with_no_time_left_is_refused_not_waved_through(
    store_kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Issue 16.3: at 0 ms left the Redis store returned True without recording anything."""
    if store_kind == "redis":
        store: ReplayStore = RedisStore(request.getfixturevalue("redis_url"))
    elif store_kind == "sqlite":
        store = SqliteStore(tmp_path / "replay.db")
    else:
        store = MemoryStore()
    key = f"jti:zero-{time.time()}"
    assert not store.redeem(key, NOW, now=NOW)
    assert not store.redeem(key, NOW, now=NOW + 1)


def test_the_sqlite_store_is_private_and_refuses_a_loose_or_foreign_file(
    tmp_path: Path, open_dir: Path
) -> None:
    """Issue 16.8: the store was created 0644 and took a foreign-owned 0666 database."""
    import stat

    path = tmp_path / "replay.db"
    SqliteStore(path).redeem("jti:x", NOW + 60, now=NOW)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    path.chmod(0o666)
    with pytest.raises(ms.ReplayStoreError, match=r"mode 0666.*chmod 600"):
        SqliteStore(path)
    shared = open_dir / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(ms.ReplayStoreError, match="writable by group or others"):
        SqliteStore(shared / "replay.db")
    if os.geteuid() == 0:
        foreign = open_dir / "foreign.db"
        foreign.touch(mode=0o600)
        os.chown(foreign, 4242, 4242)
        with pytest.raises(ms.ReplayStoreError, match="belongs to uid 4242"):
            SqliteStore(foreign)


def test_sixteen_connections_racing_on_redis_redeem_exactly_once(redis_url: str) -> None:
    stores = [RedisStore(redis_url) for _ in range(RACERS)]
    for round_number in range(ROUNDS):
        barrier = threading.Barrier(RACERS)
        outcomes: list[bool] = []
        lock = threading.Lock()
        key = f"jti:race-{time.time()}-{round_number}"

        def race(
            store: RedisStore,
            key: str = key,
            barrier: threading.Barrier = barrier,
            outcomes: list[bool] = outcomes,
            lock: threading.Lock = lock,
        ) -> None:
            barrier.wait()
            won = store.redeem(key, time.time() + 60, now=time.time())
            with lock:
                outcomes.append(won)

        threads = [threading.Thread(target=race, args=(store,)) for store in stores]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert outcomes.count(True) == 1, (round_number, outcomes)


def test_an_unreachable_redis_fails_closed(keyset: ms.Keyset) -> None:
    store = RedisStore(f"redis://127.0.0.1:{free_port()}/0")
    token = ms.mint(keyset, "x")
    with pytest.raises(ms.ReplayStoreError, match=r"replay store redis://127\.0\.0\.1") as caught:
        ms.verify(keyset, token, once=store)
    assert caught.value.exit_code == 6


# --- the CLI -------------------------------------------------------------------------------


def test_cli_verify_once_across_processes_with_sqlite(tmp_path: Path) -> None:
    keyset = tmp_path / "keyset.json"
    run("--keyset", str(keyset), "keys", "init")
    token = run("--keyset", str(keyset), "mint", "--state", '"go"').stdout.strip()
    store = f"sqlite:///{tmp_path}/replay.db"
    assert (
        run("--keyset", str(keyset), "verify", "--once", "--replay-store", store, token).stdout
        == '"go"\n'
    )
    again = run("--keyset", str(keyset), "verify", "--once", "--replay-store", store, token, code=5)
    assert again.stderr == "error: replayed: this requestState was already redeemed\n"
    from_env = run(
        "--keyset",
        str(keyset),
        "verify",
        "--once",
        "--json",
        token,
        code=5,
        env={"MRTR_STATE_REPLAY_STORE": store},
    )
    assert json.loads(from_env.stdout)["error"]["code"] == "replayed"
    # without --once the store is not consulted
    run("--keyset", str(keyset), "verify", token)


def test_cli_verify_once_in_a_batch_and_store_faults(tmp_path: Path) -> None:
    keyset = tmp_path / "keyset.json"
    run("--keyset", str(keyset), "keys", "init")
    token = run("--keyset", str(keyset), "mint", "--state", "1").stdout.strip()
    batch = run(
        "--keyset", str(keyset), "verify", "--once", "-", input=f"{token}\n{token}\n", code=5
    )
    assert batch.stdout.splitlines() == [
        "1",
        "rejected: replayed: this requestState was already redeemed",
    ]
    broken = run(
        "--keyset",
        str(keyset),
        "verify",
        "--once",
        "--replay-store",
        f"sqlite:///{keyset}/replay.db",
        token,
        code=6,
    )
    assert broken.stderr.startswith("error: replay store ")
    assert (
        "unknown replay store"
        in run(
            "--keyset", str(keyset), "verify", "--once", "--replay-store", "ftp://x", token, code=2
        ).stderr
    )
