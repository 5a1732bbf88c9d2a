"""The bench's "single use at scale" set-up writes live entries each store then refuses.

``make bench`` is not part of ``make test``, so a store's internals changing under the bench
went unseen until a full bench run stopped at it (bench/at_scale.py still asked the Redis store
for redis-py's pipeline after the store moved to the package's own client). These tests run the
part that reaches into the stores: the live entries it writes must be entries the store's own
redemption finds, with no time left short of what a token would have.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from mrtr_state.state.redis.client import connect
from mrtr_state.state.redis.url import parse_url
from mrtr_state.state.replay import MemoryStore, RedisStore, SqliteStore

ROOT = Path(__file__).resolve().parent.parent
LIVE = 50


@pytest.fixture(scope="module")
def at_scale() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_at_scale", ROOT / "bench" / "at_scale.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _store(kind: str, tmp_path: Path, request: pytest.FixtureRequest, at_scale: Any) -> Any:
    if kind == "memory":
        return MemoryStore()
    if kind == "sqlite":
        return SqliteStore(tmp_path / "replay.db")
    url = request.getfixturevalue("redis_url")
    # entries an earlier run left would hide a prefill that wrote nothing: remove them first
    router = connect(parse_url(url), timeout=5.0)
    store = RedisStore(url)
    for n in range(LIVE):
        entry = store._keys(f"jti:live-{n}")[0]
        at_scale._command(router, entry.encode(), "DEL", entry)
    router.close()
    return store


@pytest.mark.parametrize("kind", ["memory", "sqlite", "redis"])
def test_the_live_entries_are_ones_the_store_refuses_to_redeem_again(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest, at_scale: Any
) -> None:
    store = _store(kind, tmp_path, request, at_scale)
    now = time.time()
    try:
        at_scale._prefill(store, LIVE, now)
        for n in (0, LIVE // 2, LIVE - 1):
            assert not store.redeem(f"jti:live-{n}", now + 600, now=now), n
        fresh = f"jti:fresh-{os.urandom(8).hex()}"
        assert store.redeem(fresh, now + 600, now=now)
        assert not store.redeem(fresh, now + 600, now=now)
    finally:
        store.close()


def test_the_redis_entries_outlive_the_tokens_they_stand_for(
    redis_url: str, tmp_path: Path, request: pytest.FixtureRequest, at_scale: Any
) -> None:
    store = _store("redis", tmp_path, request, at_scale)
    now = time.time()
    try:
        at_scale._prefill(store, LIVE, now)
        router = connect(parse_url(redis_url), timeout=5.0)
        entry = store._keys(f"jti:live-{LIVE - 1}")[0]
        left_ms = at_scale._command(router, entry.encode(), "PTTL", entry)
        router.close()
        # written to expire 3,300 s on (the bench's exp + 300), judged on the server's clock
        assert 3_000_000 < int(left_ms) <= 3_300_000
    finally:
        store.close()
