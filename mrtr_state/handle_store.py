"""Where the records of state handles live (:mod:`mrtr_state.handles`): memory, or Redis.

A store does three things, each one command: ``put`` files a record under its key until an
absolute time (``SET key value NX PXAT``), ``take`` hands it over and deletes it, atomically, if
the caller's lock is the record's (a short script), and ``peek`` reads it for ``inspect``. Every
failure (unreachable, ``READONLY`` after a failover, a server that may evict records before
they expire, a clock beyond ``max_skew``) raises :class:`StateStoreError`: the round fails
closed, and no handle is ever given out for a record the store did not accept.

``open_handle_store(url)`` takes ``memory:`` (one process) or any URL of :mod:`mrtr_state._redis`
(one server, a Cluster, a Sentinel-watched primary); ``asyncio=True`` gives the proxy a store
whose operations it awaits, so a slow store never stalls its other connections. The blocking
store speaks through redis-py, the awaited one through the proxy's own client
(:mod:`mrtr_state._resp`); the script, the judgement of a server and the reading of replies are
written once, below.
"""

from __future__ import annotations

import hashlib
import heapq
import math
import time
from collections.abc import Callable
from typing import Any, NamedTuple

from .errors import StateStoreError

__all__ = [
    "AsyncRedisHandleStore",
    "MemoryHandleStore",
    "RedisHandleStore",
    "StateStoreError",
    "Taken",
    "awaited",
    "open_handle_store",
]


class Taken(NamedTuple):
    """A record a store found: ``handed`` when the lock matched (it is deleted), else only read
    (it stays, for the retry it belongs to)."""

    value: bytes
    handed: bool


#: Hands a record over (and deletes it) only to the lock it was filed with; otherwise returns
#: it marked with "!" (a lock never starts so) and leaves it. One script: atomic on the server.
TAKE_SCRIPT = """
local v = redis.call('GET', KEYS[1])
if not v then return false end
if string.sub(v, 1, 43) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return v
end
return '!' .. v
"""

#: How often a Redis store re-reads the server's eviction policy and clock.
CHECK_EVERY = 60.0


def _taken(reply: Any) -> Taken | None:
    if reply is None or reply is False:
        return None
    value = bytes(reply)
    if value[:1] == b"!":
        return Taken(value[1:], False)
    return Taken(value, True)


def _server_problem(memory: dict[str, Any], offset: float, max_skew: float) -> str | None:
    """Why a Redis server cannot keep records until they expire, or None."""
    if memory.get("maxmemory") and memory.get("maxmemory_policy") != "noeviction":
        return (
            f"the server may evict records before they expire (maxmemory "
            f"{memory.get('maxmemory')}, maxmemory-policy {memory.get('maxmemory_policy')}); "
            "set maxmemory-policy noeviction"
        )
    if not abs(offset) <= max_skew:
        return (
            f"the server's clock reads {offset:+.0f} s from this host's, beyond max_skew "
            f"{max_skew:.0f} s: fix the clocks (NTP)"
        )
    return None


def _memories(info: Any) -> list[dict[str, Any]]:
    """``INFO memory`` of one server, or of every node of a cluster (a dict per node)."""
    if isinstance(info, dict) and "maxmemory_policy" not in info:
        return [v for v in info.values() if isinstance(v, dict)]
    return [info]


class MemoryHandleStore:
    """Records in this process (a library server with one replica, and the tests)."""

    def __init__(self, *, max_skew: float = 300.0) -> None:
        self.max_skew = max_skew
        self.url = "memory:"
        self._records: dict[str, tuple[bytes, float]] = {}
        #: (keep until, key) of every record filed, soonest first: purging looks only at the
        #: records whose time is up, not at all of them (entries of records taken since stay
        #: until their time, and are then passed over)
        self._expiries: list[tuple[float, str]] = []

    def put(self, key: str, value: bytes, keep_until: float) -> None:
        if not math.isfinite(keep_until):  # a NaN would sit first in the heap, purging nothing
            raise ValueError(f"a record is kept until a finite time, not {keep_until!r}")
        self._purge()
        if key in self._records:
            raise StateStoreError("a record is already filed under that key")
        self._records[key] = (value, keep_until)
        heapq.heappush(self._expiries, (keep_until, key))

    def take(self, key: str, lock: str) -> Taken | None:
        self._purge()
        found = self._records.get(key)
        if found is None:
            return None
        if found[0][:43] == lock.encode("ascii"):
            del self._records[key]
            if len(self._expiries) > 2 * len(self._records) + 1024:
                # most entries are of records taken before their time: keep the live ones
                self._expiries = [(until, k) for k, (_, until) in self._records.items()]
                heapq.heapify(self._expiries)
            return Taken(found[0], True)
        return Taken(found[0], False)

    def peek(self, key: str) -> bytes | None:
        self._purge()
        found = self._records.get(key)
        return None if found is None else found[0]

    def probe(self) -> str | None:
        return None

    def __len__(self) -> int:
        self._purge()
        return len(self._records)

    def _purge(self) -> None:
        now = time.time()
        expiries, records = self._expiries, self._records
        while expiries and expiries[0][0] <= now:
            until, key = heapq.heappop(expiries)
            found = records.get(key)
            if found is not None and found[1] == until:
                del records[key]

    def close(self) -> None:
        self._records.clear()
        self._expiries.clear()


class RedisHandleStore:
    """Records in Redis, for the CLI and library servers: redis-py's client (blocking calls),
    with its own Cluster and Sentinel support."""

    def __init__(self, url: str, *, max_skew: float = 300.0, timeout: float = 5.0) -> None:
        from . import _redis

        try:
            import redis
        except ImportError:
            raise StateStoreError(
                "the redis state store needs the redis package: pip install 'mrtr-state[redis]'"
            ) from None
        self.url = url
        self.max_skew = max_skew
        try:
            self._client: Any = _redis.connect(url, timeout=timeout)
        except (ValueError, redis.RedisError) as err:
            raise StateStoreError(f"state store {_redis.shown(url)}: {err}") from None
        self._redis_error: type[Exception] = redis.RedisError
        self._script: Any = self._client.register_script(TAKE_SCRIPT)
        self._checked_at = -math.inf
        self._problem: str | None = None
        #: the server's clock minus this host's, in seconds, as last read (None: not yet)
        self.clock_offset: float | None = None

    def _error(self, doing: str, err: Exception | str) -> StateStoreError:
        from ._redis import shown

        return StateStoreError(f"state store {shown(self.url)}: cannot {doing}: {err}")

    def _due(self) -> bool:
        return time.monotonic() - self._checked_at >= CHECK_EVERY or self._problem is not None

    def _judge(self, infos: Any, server_time: tuple[int, int], before: float, after: float) -> None:
        seconds, micros = server_time
        offset = seconds + micros / 1e6 - (before + after) / 2
        self.clock_offset = offset
        problems = (_server_problem(m, offset, self.max_skew) for m in _memories(infos))
        self._problem = next((p for p in problems if p is not None), None)
        self._checked_at = time.monotonic()

    def _run(self, doing: str, call: Callable[[], Any]) -> Any:
        try:
            return call()
        except self._redis_error as err:
            raise self._error(doing, err) from None

    def _check(self) -> None:
        if self._due():
            before = time.time()
            clock = self._run("read its clock", self._client.time)
            after = time.time()
            self._judge(
                self._run("read its memory policy", lambda: self._client.info("memory")),
                clock,
                before,
                after,
            )
        if self._problem is not None:
            raise self._error("keep records", self._problem)

    def put(self, key: str, value: bytes, keep_until: float) -> None:
        self._check()
        ms = math.ceil(keep_until * 1000)
        stored = self._run(
            "file a record",
            lambda: self._client.execute_command("SET", key, value, "NX", "PXAT", ms),
        )
        if stored is None:
            raise self._error("file a record", "a record is already filed under that key")

    def take(self, key: str, lock: str) -> Taken | None:
        return _taken(self._run("take a record", lambda: self._script(keys=[key], args=[lock])))

    def peek(self, key: str) -> bytes | None:
        found = self._run("read a record", lambda: self._client.get(key))
        return None if found is None else bytes(found)

    def probe(self) -> str | None:
        try:
            self._client.ping()
            self._check()
        except StateStoreError as err:
            return str(err)
        except self._redis_error as err:
            return str(self._error("be reached", err))
        return None

    def close(self) -> None:
        self._client.close()


class AsyncRedisHandleStore:
    """Records in Redis, for the proxy: every operation is awaited, over the proxy's own
    client (:mod:`mrtr_state._resp`: hiredis, one pipelined connection per node), since
    redis-py's asyncio client costs four times the CPU per command on the proxy's path."""

    def __init__(self, url: str, *, max_skew: float = 300.0, timeout: float = 2.0) -> None:
        from . import _resp
        from ._redis import shown

        try:
            self._router = _resp.router_for(url, timeout=timeout)
        except ImportError:
            raise StateStoreError(
                "the proxy's redis state store needs hiredis: pip install 'mrtr-state[redis]'"
            ) from None
        except ValueError as err:
            raise StateStoreError(f"state store {shown(url)}: {err}") from None
        self._failure: type[Exception] = _resp.StoreFailure
        self.url = url
        self.max_skew = max_skew
        self._checked_at = -math.inf
        self._problem: str | None = None

    def _error(self, doing: str, err: Exception | str) -> StateStoreError:
        from ._redis import shown

        return StateStoreError(f"state store {shown(self.url)}: cannot {doing}: {err}")

    async def _call(self, doing: str, key: str, *args: Any) -> Any:
        try:
            return await self._router.call(key.encode(), *args)
        except self._failure as err:
            raise self._error(doing, err) from None

    async def _check(self) -> None:
        if self._check_due():
            problem = None
            try:
                for node in await self._router.nodes():
                    before = time.time()
                    seconds, micros = await node.call("TIME")
                    after = time.time()
                    offset = int(seconds) + int(micros) / 1e6 - (before + after) / 2
                    memory = _info_fields(await node.call("INFO", "memory"))
                    problem = problem or _server_problem(memory, offset, self.max_skew)
            except self._failure as err:
                raise self._error("read the server's policy and clock", err) from None
            self._problem = problem
            self._checked_at = time.monotonic()
        if self._problem is not None:
            raise self._error("keep records", self._problem)

    def _check_due(self) -> bool:
        """Whether the server's policy and clock are to be read (again) before a write."""
        return time.monotonic() - self._checked_at >= CHECK_EVERY or self._problem is not None

    async def put(self, key: str, value: bytes, keep_until: float) -> None:
        if self._check_due():  # tested here: most writes need no check, nor a coroutine for it
            await self._check()
        ms = math.ceil(keep_until * 1000)
        stored = await self._call("file a record", key, "SET", key, value, "NX", "PXAT", ms)
        if stored is None:
            raise self._error("file a record", "a record is already filed under that key")

    async def take(self, key: str, lock: str) -> Taken | None:
        try:
            reply = await self._call("take a record", key, "EVALSHA", _TAKE_SHA, 1, key, lock)
        except StateStoreError as err:
            if "NOSCRIPT" not in str(err):
                raise
            # the node has not cached the script yet (new, restarted, promoted): send it whole
            reply = await self._call("take a record", key, "EVAL", TAKE_SCRIPT, 1, key, lock)
        return _taken(reply)

    async def peek(self, key: str) -> bytes | None:
        found = await self._call("read a record", key, "GET", key)
        return None if found is None else bytes(found)

    async def probe(self) -> str | None:
        """Why the store cannot be used now (each node asked: PING), or None (readiness)."""
        try:
            for node in await self._router.nodes():
                await node.call("PING")
            await self._check()
        except self._failure as err:
            return str(self._error("be reached", err))
        except StateStoreError as err:
            return str(err)
        return None

    async def aclose(self) -> None:
        self._router.close()


#: The script's SHA-1, as EVALSHA names it.
_TAKE_SHA = hashlib.sha1(TAKE_SCRIPT.encode(), usedforsecurity=False).hexdigest()


def _info_fields(text: Any) -> dict[str, Any]:
    """The ``name:value`` lines of an INFO reply."""
    fields: dict[str, Any] = {}
    for line in bytes(text).decode("utf-8", "replace").splitlines():
        name, colon, value = line.partition(":")
        if colon:
            fields[name] = int(value) if value.isdigit() else value
    return fields


async def awaited(value: Any) -> Any:
    """A store's answer, whether its operations are coroutines (Redis) or not (memory; no
    store answers with an object that is awaitable in itself)."""
    return await value if hasattr(value, "__await__") else value


def open_handle_store(url: str, *, max_skew: float = 300.0, asyncio: bool = False) -> Any:
    """The store a URL names: ``memory:`` or a Redis URL (see :mod:`mrtr_state._redis`)."""
    from ._redis import SCHEMES

    if url in ("memory:", "memory://"):
        return MemoryHandleStore(max_skew=max_skew)
    if url.startswith(SCHEMES):
        factory = AsyncRedisHandleStore if asyncio else RedisHandleStore
        return factory(url, max_skew=max_skew)
    raise ValueError(f"unknown state store {url!r}: use memory: or a redis:// URL")
