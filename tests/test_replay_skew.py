"""Replay stores under skewed clocks, at their bounds, on hostile files, failing mid-batch.

Two "replicas" share one store and judge time by clocks that differ (an injected ``now``); no
difference up to ``max_skew`` may make the store forget a token the other would still accept.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mrtr_state as ms
from mrtr_state.state.replay import (
    SQLITE_APPLICATION_ID,
    MemoryStore,
    RedisStore,
    ReplayStore,
    SqliteStore,
    open_store,
)

from .conftest import NOW
from .helpers import CLEAN_ENV, private_redis

SKEW = 300.0  # the default bound


@pytest.fixture(scope="module")
def redis_server() -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    with private_redis() as server:
        yield server


def _store(kind: str, tmp_path: Path, request: pytest.FixtureRequest, **bounds: Any) -> Any:
    if kind == "memory":
        return MemoryStore(**bounds)
    if kind == "sqlite":
        return SqliteStore(tmp_path / "replay.db", **bounds)
    return RedisStore(request.getfixturevalue("redis_server")[1], **bounds)


def _two_replicas(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> tuple[Any, Any]:
    """Two replicas' handles on one store (one MemoryStore is what two threads would share)."""
    first = _store(kind, tmp_path, request)
    if kind == "memory":
        return first, first
    return first, _store(kind, tmp_path, request)


# --- clock skew: the two findings ----------------------------------------------------


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_a_fast_replica_purging_cannot_reopen_a_token_a_correct_replica_still_accepts(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Found in review: a replica 300 s fast purged an entry the correct replica still needed."""
    correct, fast = _two_replicas(kind, tmp_path, request)
    true_now = NOW
    exp = true_now + 60
    assert correct.redeem("jti:pay", exp, now=true_now)
    # the fast replica, 300 s ahead, keeps redeeming other tokens (each call may purge), until
    # the correct clock reaches the token's last acceptable second
    for step in range(0, 60, 2):
        for n in range(300):  # past the SQLite store's purge interval of 256 writes
            assert fast.redeem(f"jti:other-{step}-{n}", exp + 10_000, now=true_now + step + SKEW)
        if kind == "sqlite":
            fast.purge(now=true_now + step + SKEW)
        # the correct replica, whose clock says the token is still live, must refuse it
        assert not correct.redeem("jti:pay", exp, now=true_now + step)
    assert not correct.redeem("jti:pay", exp, now=exp - 0.001)
    # once no clock within the bound can accept it, the entry may go (and the token is expired)
    assert fast.redeem("jti:pay", exp + 10_000, now=exp + SKEW)


def test_a_slow_replica_after_a_fast_one_purged_sees_the_token_as_expired(
    tmp_path: Path,
) -> None:
    """The purge horizon is exp + max_skew by the purging clock: a clock at most max_skew behind
    reads the token as expired at that moment, so forgetting it lets nothing through."""
    store = SqliteStore(tmp_path / "replay.db")
    exp = NOW + 60
    assert store.redeem("jti:t", exp, now=NOW)
    store.purge(now=exp + SKEW)  # the fast replica: exactly max_skew past exp
    assert store.count() == 0
    keyset = ms.Keyset.generate()
    token = ms.mint(keyset, "x", ttl=60, now=NOW)
    with pytest.raises(ms.ExpiredToken):  # the slow replica's verify, at exp on its own clock
        ms.verify(keyset, token, now=exp, once=store)


def test_redis_keeps_an_entry_until_an_absolute_time_whatever_the_redeeming_clock(
    redis_server: tuple[subprocess.Popen[bytes], str],
) -> None:
    """Found in review: a replica 300 s fast wrote a TTL of 121 s for a token with 299 s left.

    The entry's expiry is exp + max_skew as an absolute time, so the redeeming replica's clock
    does not enter it: a fast and a slow replica write the same expiry, judged by Redis.
    """
    import redis

    client = redis.Redis.from_url(redis_server[1])
    true_now = time.time()
    exp = true_now + 299
    fast, slow = RedisStore(redis_server[1]), RedisStore(redis_server[1])
    assert fast.redeem("jti:fast", exp, now=true_now + 298)  # on its clock: 1 s left
    assert slow.redeem("jti:slow", exp, now=true_now - 298)
    expected = int(-(-(exp + SKEW) * 1000 // 1))
    for key in ("jti:fast", "jti:slow"):
        assert client.pexpiretime(RedisStore.PREFIX + key) == expected
    # the correct replica, one second before exp on its clock: still refused
    correct = RedisStore(redis_server[1])
    assert not correct.redeem("jti:fast", exp, now=exp - 1)


def test_redis_refuses_to_promise_single_use_when_the_clocks_disagree_beyond_the_bound(
    redis_server: tuple[subprocess.Popen[bytes], str], keyset: ms.Keyset
) -> None:
    store = RedisStore(redis_server[1], max_skew=30)
    now = time.time()
    assert store.redeem(f"jti:near-{now}", now + 100, now=now + 29)  # within the bound
    for off in (+31, -31, +3600):
        with pytest.raises(ms.ReplayStoreError, match=r"beyond max_skew 30 s.*NTP"):
            store.redeem(f"jti:far-{now}-{off}", now + 7200, now=now + off)
    token = ms.mint(keyset, "x", ttl=60, now=now + 600)  # a verifier whose clock is 10 min fast
    with pytest.raises(ms.ReplayStoreError) as caught:
        ms.verify(keyset, token, now=now + 600, once=store)
    assert caught.value.exit_code == 6


def test_redis_that_may_evict_keys_is_refused(
    redis_server: tuple[subprocess.Popen[bytes], str],
) -> None:
    import redis

    client = redis.Redis.from_url(redis_server[1])
    client.config_set("maxmemory", "512mb")
    try:
        client.config_set("maxmemory-policy", "volatile-lru")  # our keys all have a TTL
        with pytest.raises(ms.ReplayStoreError, match=r"may evict keys.*noeviction"):
            RedisStore(redis_server[1]).redeem("jti:e", time.time() + 60, now=time.time())
        client.config_set("maxmemory-policy", "noeviction")
        assert RedisStore(redis_server[1]).redeem("jti:e", time.time() + 60, now=time.time())
    finally:
        client.config_set("maxmemory", "0")


# --- every backend agrees with the model of what single use means -----------------------------

_OPS = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", "c"]),  # the key
        st.floats(0, 700, allow_nan=False),  # the token's lifetime left at that moment
        st.floats(0, 200, allow_nan=False),  # how far the clock moved on since the last call
    ),
    max_size=60,
)


def _model_run(ops: list[tuple[str, float, float]], store: ReplayStore) -> None:
    """Accepted iff the token is unexpired and no entry of the key has exp > now - max_skew."""
    held: dict[str, float] = {}
    now = float(NOW)
    for key, left, moved in ops:
        now += moved
        exp = now + left
        expected = now < exp and not (key in held and held[key] > now - store.max_skew)
        assert store.redeem("jti:" + key, exp, now=now) is expected, (key, exp, now, held)
        if expected:
            held[key] = exp


@settings(max_examples=150, deadline=None)
@given(_OPS)
def test_the_memory_store_is_the_model(ops: list[tuple[str, float, float]]) -> None:
    _model_run(ops, MemoryStore())


@settings(max_examples=60, deadline=None)
@given(_OPS)
def test_the_sqlite_store_is_the_model(ops: list[tuple[str, float, float]]) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        store = SqliteStore(Path(folder) / "replay.db")
        _model_run(ops, store)
        store.close()


def test_sixteen_threads_racing_on_one_memory_store_redeem_exactly_once() -> None:
    store = MemoryStore()
    for round_number in range(25):
        barrier = threading.Barrier(16)
        outcomes: list[bool] = []

        def race(
            key: str = f"jti:{round_number}",
            barrier: threading.Barrier = barrier,
            outcomes: list[bool] = outcomes,
        ) -> None:
            barrier.wait()
            outcomes.append(store.redeem(key, NOW + 60, now=NOW))

        threads = [threading.Thread(target=race) for _ in range(16)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert outcomes.count(True) == 1


def test_the_memory_store_forgets_lapsed_entries_as_it_goes() -> None:
    store = MemoryStore(max_skew=10)
    for n in range(1000):
        assert store.redeem(f"jti:{n}", NOW + 5, now=NOW)
    assert len(store) == 1000
    assert store.redeem("jti:late", NOW + 100, now=NOW + 15)  # all 1,000 lapsed at NOW + 15
    assert len(store) == 1


# --- the horizon: what a store can remember ----------------------------------------------------


@pytest.mark.parametrize("kind", ["memory", "sqlite", "redis"])
def test_a_token_outliving_the_store_horizon_is_refused_not_recorded(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest, keyset: ms.Keyset
) -> None:
    store = _store(kind, tmp_path, request, horizon=120)
    now = float(int(time.time()))  # tokens carry whole seconds
    token = ms.mint(keyset, "x", ttl=600, now=now)
    with pytest.raises(ms.LifetimeBeyondStore, match=r"lives 600 s more, beyond the 120 s") as c:
        ms.verify(keyset, token, now=now, once=store)
    assert c.value.exit_code == 1 and c.value.code == "lifetime_beyond_store"
    short = ms.mint(keyset, "x", ttl=120, now=now)
    ms.verify(keyset, short, now=now, once=store)
    with pytest.raises(ms.Replayed):
        ms.verify(keyset, short, now=now, once=store)
    ms.verify(keyset, token, now=now)  # without single use the token is fine


def test_a_token_that_never_expires_cannot_be_single_use() -> None:
    """rmcp's expiry 0, accepted with ttl_cap none, would have to be remembered forever."""
    from .sdk_vectors import RMCP, _rmcp_keyset

    never = next(c for c in RMCP if c["name"] == "no_ad_no_ttl_expiry_zero")
    keyset, uncapped = _rmcp_keyset(never), ms.Policy(ttl_cap=None)
    assert ms.verify(keyset, never["token"], policy=uncapped).exp is None
    with pytest.raises(ms.LifetimeBeyondStore, match="never expires"):
        ms.verify(keyset, never["token"], policy=uncapped, once=MemoryStore())


@pytest.mark.parametrize("bad", [-1, float("inf"), float("nan")])
def test_store_bounds_are_checked(bad: float, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="max_skew"):
        MemoryStore(max_skew=bad)
    with pytest.raises(ValueError, match="horizon"):
        SqliteStore(tmp_path / "r.db", horizon=bad)
    with pytest.raises(ValueError, match="horizon must be positive"):
        MemoryStore(horizon=0)


# --- SQLite files that are not ours --------------------------------------------------------------


def test_a_foreign_sqlite_database_is_refused_and_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE users (name TEXT)")
    db.execute("INSERT INTO users VALUES ('alice')")
    db.commit()
    db.close()
    path.chmod(0o600)
    before = path.read_bytes()
    with pytest.raises(ms.ReplayStoreError, match=r"not a mrtr-state replay store.*users"):
        open_store(f"sqlite:///{path}")
    assert path.read_bytes() == before


@pytest.mark.parametrize(
    "content",
    [b"this is not a database at all" * 100, b"SQLite format 3\x00" + b"\xff" * 4000],
    ids=["text", "damaged-header"],
)
def test_a_corrupt_sqlite_file_is_refused_and_never_truncated(
    content: bytes, tmp_path: Path
) -> None:
    path = tmp_path / "replay.db"
    path.write_bytes(content)
    path.chmod(0o600)
    with pytest.raises(ms.ReplayStoreError, match=r"cannot open: .*(not a database|malformed)"):
        SqliteStore(path)
    assert path.read_bytes() == content


def test_a_store_of_a_future_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "replay.db"
    SqliteStore(path).close()
    db = sqlite3.connect(path)
    db.execute("PRAGMA user_version = 3")
    db.close()
    with pytest.raises(ms.ReplayStoreError, match="not a mrtr-state replay store"):
        SqliteStore(path)


def test_a_first_version_store_is_adopted_with_its_entries(tmp_path: Path) -> None:
    path = tmp_path / "replay.db"
    db = sqlite3.connect(path)
    db.execute(
        "CREATE TABLE IF NOT EXISTS redeemed (key TEXT PRIMARY KEY, expires_at REAL NOT NULL)"
    )
    db.execute("INSERT INTO redeemed VALUES ('jti:old', ?)", (NOW + 180,))
    db.commit()
    db.close()
    path.chmod(0o600)
    store = SqliteStore(path)
    assert not store.redeem("jti:old", NOW + 60, now=NOW)  # still remembered
    marks = sqlite3.connect(path)
    assert marks.execute("PRAGMA application_id").fetchone()[0] == SQLITE_APPLICATION_ID
    indexes = marks.execute("SELECT name FROM sqlite_master WHERE type = 'index'").fetchall()
    assert ("redeemed_by_expiry",) in indexes


@pytest.mark.parametrize(
    "url",
    ["sqlite:///r.db?timeout=abc", "sqlite:///r.db?timeout=-1", "sqlite:///r.db?wal=off"],
)
def test_sqlite_url_options_are_checked(url: str) -> None:
    with pytest.raises(ValueError, match=r"timeout|unknown option"):
        open_store(url)


# --- faults in the middle of a batch: fail closed, keep what was answered ---------------------


def _batch(
    keyset_path: Path, store_url: str, tokens: list[str], fault: Any
) -> tuple[int, str, str]:
    """Run ``verify --once -``: the first half of the tokens, then the fault, then the rest."""
    env = {k: v for k, v in os.environ.items() if k not in CLEAN_ENV}
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mrtr_state",
            "--keyset",
            str(keyset_path),
            "verify",
            "--once",
            "--replay-store",
            store_url,
            "-",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert process.stdin is not None and process.stdout is not None
    half = len(tokens) // 2
    process.stdin.write("".join(t + "\n" for t in tokens[:half]).encode())
    process.stdin.flush()
    answered = [process.stdout.readline() for _ in range(half)]
    fault()
    out, err = process.communicate("".join(t + "\n" for t in tokens[half:]).encode(), timeout=60)
    return process.returncode, b"".join(answered).decode() + out.decode(), err.decode()


@pytest.fixture
def batch_keyset(tmp_path: Path) -> tuple[Path, list[str]]:
    keyset = ms.Keyset.generate()
    path = tmp_path / "keyset.json"
    keyset.save(path)
    return path, [ms.mint(keyset, n) for n in range(10)]


def test_redis_going_away_mid_batch_fails_closed_after_the_answers_given(
    batch_keyset: tuple[Path, list[str]],
) -> None:
    path, tokens = batch_keyset
    with private_redis() as (server, url):
        code, out, err = _batch(path, url, tokens, server.kill)
    assert code == 6
    assert out.splitlines() == [str(n) for n in range(5)]
    assert err.startswith("error: replay store redis://127.0.0.1:")


def test_redis_turning_read_only_mid_batch_fails_closed(
    batch_keyset: tuple[Path, list[str]],
) -> None:
    import redis

    path, tokens = batch_keyset
    with private_redis() as (_server, url):
        client = redis.Redis.from_url(url)
        # a primary demoted to a replica (of nothing reachable) refuses every write
        code, out, err = _batch(path, url, tokens, lambda: client.replicaof("127.0.0.1", "1"))
    assert code == 6
    assert out.splitlines() == [str(n) for n in range(5)]
    assert "READONLY" in err or "read only" in err


def test_sqlite_locked_by_another_writer_mid_batch_fails_closed(
    batch_keyset: tuple[Path, list[str]], tmp_path: Path
) -> None:
    path, tokens = batch_keyset
    db_path = tmp_path / "replay.db"
    SqliteStore(db_path).close()
    holder = sqlite3.connect(db_path, isolation_level=None)

    def lock() -> None:
        holder.execute("BEGIN EXCLUSIVE")

    try:
        code, out, err = _batch(path, f"sqlite:///{db_path}?timeout=0.3", tokens, lock)
    finally:
        holder.close()
    assert code == 6
    assert out.splitlines() == [str(n) for n in range(5)]
    assert "database is locked" in err
    # what was answered was recorded: the tokens stay redeemed once the lock is gone
    store = SqliteStore(db_path)
    assert store.count() == 5


# --- a Redis that lost entries: evictions, a flush, a reset counter (issue 35) -----------------


def _evict(client: Any, entry: str) -> None:
    """Switch the live server to an evicting policy, fill it until ``entry`` is evicted, then
    switch back to noeviction (the review's scenario: inside the store's minute)."""
    client.config_set("maxmemory-policy", "volatile-lru")  # our entries all have a TTL
    client.config_set("maxmemory", str(client.info("memory")["used_memory"] + 256 * 1024))
    try:
        for batch in range(200):
            with client.pipeline(transaction=False) as fill:
                for n in range(2000):
                    fill.set(f"fill:{batch}:{n}", b"x" * 100, px=600_000)
                fill.execute()
            if not client.exists(entry):
                break
        assert not client.exists(entry), "the entry was never evicted"
        assert client.info("stats")["evicted_keys"] > 0
    finally:
        client.config_set("maxmemory-policy", "noeviction")
        client.config_set("maxmemory", "0")


def test_redis_entry_evicted_under_a_policy_switched_live_is_never_redeemed_again(
    tmp_path: Path,
) -> None:
    """Issue 35: the eviction policy was checked once a minute, so a switch to volatile-lru
    inside that minute, an eviction, and a switch back let a redeemed token be accepted again.
    The eviction counter is read in the same script as every SET: the replay, and every other
    redemption, is refused (exit 6) until horizon + max_skew after the eviction was seen, by
    this store, by one opened afterwards (another replica, a restarted process), by the CLI."""
    import redis

    with private_redis() as (_server, url):
        client = redis.Redis.from_url(url)
        store = RedisStore(url, horizon=2.0, max_skew=1.0)
        now = time.time()
        assert store.redeem("jti:paid", now + 60, now=now)
        assert not store.redeem("jti:paid", now + 60, now=now)  # its minute's check is done
        _evict(client, RedisStore.PREFIX + "jti:paid")
        for handle in (store, RedisStore(url, horizon=2.0, max_skew=1.0)):
            for key in ("jti:paid", "jti:new"):
                with pytest.raises(ms.ReplayStoreError, match="evicted keys") as caught:
                    handle.redeem(key, now + 60, now=time.time())
                assert caught.value.exit_code == 6
        keyset = ms.Keyset.generate()
        keyset.save(tmp_path / "keyset.json")
        token = ms.mint(keyset, "once", request_id="r")
        env = {k: v for k, v in os.environ.items() if k not in CLEAN_ENV}
        refused = subprocess.run(
            [sys.executable, "-m", "mrtr_state", "--keyset", str(tmp_path / "keyset.json"),
             "verify", "--once", "--replay-store", url, "--request-id", "r", token],
            capture_output=True, text=True, env=env,
        )  # fmt: skip
        assert refused.returncode == 6, refused.stderr
        assert "every redemption is refused until" in refused.stderr
        assert client.exists(RedisStore.PREFIX + "jti:new") == 0  # nothing recorded meanwhile
        time.sleep(3.1)  # horizon + max_skew: every entry an eviction could have taken expired
        assert store.redeem("jti:new", time.time() + 60, now=time.time())
        # a counter that went down (CONFIG RESETSTAT, or a restart from a snapshot) is a loss too
        client.config_resetstat()
        with pytest.raises(ms.ReplayStoreError, match="evicted keys"):
            store.redeem("jti:after-reset", time.time() + 60, now=time.time())


def test_redis_data_lost_under_a_running_process_is_refused_by_every_process(
    tmp_path: Path,
) -> None:
    """A FLUSHALL (or a restart without persistence) takes the entries and the store's own
    record with them: a process that knew the record refuses, and its refusal is written
    back, so a process that first comes after it refuses as well."""
    import redis

    with private_redis() as (_server, url):
        client = redis.Redis.from_url(url)
        store = RedisStore(url, horizon=60.0)
        now = time.time()
        assert store.redeem("jti:a", now + 30, now=now)
        client.flushall()
        with pytest.raises(ms.ReplayStoreError, match="lost this store's data"):
            store.redeem("jti:a", now + 30, now=now)
        with pytest.raises(ms.ReplayStoreError, match="refused until"):
            RedisStore(url).redeem("jti:b", now + 30, now=now)
        assert not client.exists(RedisStore.PREFIX + "jti:a")
        # the operator's early end (docs/single-use.md): the record's until set back to 0
        client.hset(RedisStore.META, "until", 0)
        assert store.redeem("jti:b", now + 30, now=now)
        assert not RedisStore(url).redeem("jti:b", now + 30, now=now)


def test_redis_policy_switched_live_without_an_eviction_loses_nothing() -> None:
    """A policy that may evict, switched on inside the store's minute, takes nothing by itself:
    the entry is there and the replay is refused as a replay; once the minute's look sees the
    policy, every redemption is refused with what to fix."""
    import redis

    with private_redis() as (_server, url):
        client = redis.Redis.from_url(url)
        store = RedisStore(url)
        now = time.time()
        assert store.redeem("jti:a", now + 60, now=now)
        client.config_set("maxmemory", "512mb")
        client.config_set("maxmemory-policy", "allkeys-lru")
        assert not store.redeem("jti:a", now + 60, now=now)
        with pytest.raises(ms.ReplayStoreError, match="may evict keys"):
            RedisStore(url).redeem("jti:b", now + 60, now=now)


def test_redis_store_record_of_another_type_fails_closed() -> None:
    import redis

    with private_redis() as (_server, url):
        redis.Redis.from_url(url).set(RedisStore.META, b"not a hash")
        with pytest.raises(ms.ReplayStoreError, match="WRONGTYPE"):
            RedisStore(url).redeem("jti:a", time.time() + 60, now=time.time())


# --- a SQLite file deleted or replaced under a running process (issue 35) ----------------------


def _delete(path: Path) -> None:
    path.unlink()


def _rename(path: Path) -> None:
    path.rename(path.with_name("moved.db"))


def _replace_with_a_new_store(path: Path) -> None:
    fresh = path.with_name("fresh.db")
    SqliteStore(fresh).close()
    fresh.rename(path)


def _replace_with_a_copy(path: Path) -> None:
    copy = path.with_name("copy.db")
    copy.write_bytes(path.read_bytes())
    copy.chmod(0o600)
    copy.rename(path)


@pytest.mark.parametrize(
    "swap", [_delete, _rename, _replace_with_a_new_store, _replace_with_a_copy]
)
def test_sqlite_file_deleted_or_replaced_under_the_store_is_refused(
    tmp_path: Path, swap: Any
) -> None:
    """Before: the process went on writing to the file it held open while a process opened
    later used the one at the path, two stores each accepting a token once. Now each
    redemption compares the path's device and inode with the file opened: refused (exit 6),
    whatever the redemption's result; a store opened again uses the file now at the path."""
    path = tmp_path / "replay.db"
    store = SqliteStore(path)
    now = time.time()
    assert store.redeem("jti:a", now + 60, now=now)
    swap(path)
    for key in ("jti:a", "jti:b"):
        with pytest.raises(ms.ReplayStoreError, match="deleted, renamed or replaced") as caught:
            store.redeem(key, now + 60, now=now)
        assert caught.value.exit_code == 6
    refused_in_a_thread: list[BaseException] = []

    def other_thread() -> None:  # a new connection of the same store is checked too
        try:
            store.redeem("jti:c", now + 60, now=now)
        except ms.ReplayStoreError as err:
            refused_in_a_thread.append(err)

    worker = threading.Thread(target=other_thread)
    worker.start()
    worker.join()
    assert len(refused_in_a_thread) == 1
    store.close()
    again = SqliteStore(path)
    assert again.redeem("jti:b", now + 60, now=now)
    assert not again.redeem("jti:b", now + 60, now=now)


def test_sqlite_store_survives_a_change_of_working_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A relative path names the file the store opened, not another one after a chdir: a
    thread's first redemption (its own connection) once opened ./replay.db of the new folder,
    a second store beside the first."""
    monkeypatch.chdir(tmp_path)
    store = SqliteStore("replay.db")
    now = time.time()
    assert store.redeem("jti:a", now + 60, now=now)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    monkeypatch.chdir(elsewhere)
    answers: list[bool] = []

    def redeem_in_a_new_thread() -> None:  # its own connection, opened after the chdir
        answers.append(store.redeem("jti:a", now + 60, now=now))

    worker = threading.Thread(target=redeem_in_a_new_thread)
    worker.start()
    worker.join()
    assert answers == [False]
    assert not (elsewhere / "replay.db").exists()


def test_sqlite_file_deleted_mid_batch_fails_closed_after_the_answers_given(
    batch_keyset: tuple[Path, list[str]], tmp_path: Path
) -> None:
    path, tokens = batch_keyset
    db_path = tmp_path / "replay.db"
    code, out, err = _batch(path, f"sqlite:///{db_path}", tokens, db_path.unlink)
    assert code == 6
    assert out.splitlines() == [str(n) for n in range(5)]
    assert "was deleted, renamed or replaced under this process" in err


# --- the replay store on a Cluster and behind Sentinel (issue 45: one Redis path) -------------


def test_the_replay_store_on_a_cluster_spreads_its_entries_and_redeems_each_once() -> None:
    """Each redemption's script touches its entry and its shard's record of the server, so both
    share a hash tag: entries spread over the masters, each redeemed once, a replay refused
    whichever master holds it; every shard's record keeps its own node's eviction count."""
    from .redis_topologies import cluster

    with cluster() as (nodes, url):
        store = RedisStore(url)
        assert store.probe() is not None  # the servers judged: a clock offset, no problem
        now = time.time()
        keys = [f"jti:cluster-{n}" for n in range(120)]
        assert all(store.redeem(key, now + 60, now=now) for key in keys)
        assert not any(store.redeem(key, now + 60, now=now) for key in keys)
        counts = [int(node.cli("dbsize")) for node in nodes]
        assert sum(counts) == 120 + RedisStore.CLUSTER_SHARDS and all(counts)
        other = RedisStore(url)  # another replica, on its own connections: the same verdicts
        assert not other.redeem(keys[0], now + 60, now=now)
        assert other.redeem("jti:cluster-new", now + 60, now=now)
        store.close()
        other.close()


def test_the_replay_store_behind_sentinel_follows_a_failover_failing_closed_meanwhile() -> None:
    from .redis_topologies import sentinel_watched

    with sentinel_watched() as (primary, replica, _, url):
        store = RedisStore(url)
        now = time.time()
        assert store.redeem("jti:before", now + 120, now=now)
        deadline = time.monotonic() + 10
        while replica.cli("exists", RedisStore.PREFIX + "jti:before") != "1":  # replicated
            assert time.monotonic() < deadline
            time.sleep(0.05)
        primary.kill()
        failures = 0
        deadline = time.monotonic() + 60
        while True:
            try:
                replayed = store.redeem("jti:before", now + 120, now=time.time())
                break
            except ms.ReplayStoreError:  # the primary is gone: refused, never accepted
                failures += 1
                assert time.monotonic() < deadline
                time.sleep(0.5)
        # on the promoted replica the entry is there: the replay is refused as a replay
        assert failures and replayed is False
        assert store.redeem("jti:after", time.time() + 120, now=time.time())
        store.close()
