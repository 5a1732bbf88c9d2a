"""Where the records of state handles live (:mod:`mrtr_state.state.records`): memory, or Redis.

A store does three things, each one command: ``put`` files a record under its key until an
absolute time (``SET key value NX PXAT``), ``take`` hands it over and deletes it, atomically, if
the caller's lock is the record's (a short script), and ``peek`` reads it for ``inspect``. Every
failure (unreachable, ``READONLY`` after a failover, a server that may evict records before
they expire, a clock beyond ``max_skew``) raises :class:`StateStoreError`: the round fails
closed, and no handle is ever given out for a record the store did not accept.

Each store has two faces over one implementation: ``put``/``take``/``peek``/``probe`` for
blocking callers (the CLI, the SDK codec) and ``aput``/``atake``/``apeek``/``aprobe`` for the
proxy's event loop. The memory store's work is a dictionary's; the Redis store is written once
over the package's asyncio client (:mod:`mrtr_state.state.redis`) and its blocking face runs it
on the package's own loop (:mod:`mrtr_state.state.blocking`).

``open_handle_store(url)`` takes ``memory:`` (one process) or any URL of
:mod:`mrtr_state.state.redis.url` (one server, its Unix socket, a Cluster, a Sentinel-watched
primary).
"""

from __future__ import annotations

import asyncio
import hashlib
import heapq
import math
import time
from typing import Any, NamedTuple

from ..errors import StateStoreError
from .backend import waited
from .redis import StoreFailure

__all__ = [
    "MemoryHandleStore",
    "RedisHandleStore",
    "StateStoreError",
    "Taken",
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


def _taken(reply: Any) -> Taken | None:
    if reply is None or reply is False:
        return None
    value = bytes(reply)
    if value[:1] == b"!":
        return Taken(value[1:], False)
    return Taken(value, True)


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

    # the asyncio face: a dictionary's work, nothing to wait for
    async def aput(self, key: str, value: bytes, keep_until: float) -> None:
        self.put(key, value, keep_until)

    async def atake(self, key: str, lock: str) -> Taken | None:
        return self.take(key, lock)

    async def apeek(self, key: str) -> bytes | None:
        return self.peek(key)

    async def aprobe(self) -> str | None:
        return None

    async def aclose(self) -> None:
        self.close()

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
    """Records in Redis, for every caller: the proxy awaits its ``a``-methods on its loop, the
    CLI and library servers call the others. Each server is judged when a connection opens and
    every few seconds after (:mod:`mrtr_state.state.redis.watch`)."""

    def __init__(self, url: str, *, max_skew: float = 300.0, timeout: float = 2.0) -> None:
        from .redis.url import parse_url, shown

        try:
            self._target = parse_url(url)
        except ValueError as err:
            raise StateStoreError(f"state store {err}") from None
        try:
            import hiredis  # noqa: F401
        except ImportError:
            raise StateStoreError(
                "the redis state store needs hiredis: pip install 'mrtr-state[redis]'"
            ) from None
        self.url = url
        self.max_skew = max_skew
        self.timeout = timeout
        self._shown = shown(url)
        self._links: dict[asyncio.AbstractEventLoop, Any] = {}

    def _link(self) -> Any:
        loop = asyncio.get_running_loop()
        link = self._links.get(loop)
        if link is None:
            from .redis.client import connect
            from .redis.watch import ServerWatch

            watch = ServerWatch(self.max_skew, "records")
            router = connect(self._target, timeout=self.timeout, on_open=watch.on_open)
            link = self._links[loop] = (router, watch)
        return link

    def _error(self, doing: str, err: Exception | str) -> StateStoreError:
        return StateStoreError(f"state store {self._shown}: cannot {doing}: {err}")

    @property
    def clock_offset(self) -> float | None:
        """The server's clock minus this host's, in seconds, as last read (None: not yet)."""
        for _, watch in self._links.values():
            if watch.looked:
                offset: float = watch.offset
                return offset
        return None

    def _failed(self, doing: str, err: Exception) -> StateStoreError:
        """A command's failure; a server refused when its connection opened is named as what
        it cannot do (keep records until their time), not as unreachable."""
        _, watch = self._link()
        if watch.problem is not None:
            return self._error("keep records", watch.problem)
        return self._error(doing, err)

    async def _call(self, doing: str, key: str, *args: Any) -> Any:

        router, _ = self._link()
        started = time.perf_counter()
        try:
            return await router.call(key.encode(), *args)
        except StoreFailure as err:
            raise self._failed(doing, err) from None
        finally:
            waited(time.perf_counter() - started)

    async def _check(self) -> None:
        """Refuse to file a record with a server that may not keep it until its time."""

        router, watch = self._link()
        if watch.due():
            started = time.perf_counter()
            try:
                await watch.look(router)
            except StoreFailure as err:
                raise self._failed("read the server's policy and clock", err) from None
            finally:
                waited(time.perf_counter() - started)
        if watch.problem is not None:
            raise self._error("keep records", watch.problem)

    async def aput(self, key: str, value: bytes, keep_until: float) -> None:
        await self._check()
        ms = math.ceil(keep_until * 1000)
        stored = await self._call("file a record", key, "SET", key, value, "NX", "PXAT", ms)
        if stored is None:
            raise self._error("file a record", "a record is already filed under that key")

    async def atake(self, key: str, lock: str) -> Taken | None:
        try:
            reply = await self._call("take a record", key, "EVALSHA", _TAKE_SHA, 1, key, lock)
        except StateStoreError as err:
            if "NOSCRIPT" not in str(err):
                raise
            # the node has not cached the script yet (new, restarted, promoted): send it whole
            reply = await self._call("take a record", key, "EVAL", TAKE_SCRIPT, 1, key, lock)
        return _taken(reply)

    async def apeek(self, key: str) -> bytes | None:
        found = await self._call("read a record", key, "GET", key)
        return None if found is None else bytes(found)

    async def aprobe(self) -> str | None:
        """Why the store cannot be used now (each node asked: PING), or None (readiness)."""

        router, _ = self._link()
        try:
            for node in await router.nodes():
                await node.call("PING")
            await self._check()
        except StoreFailure as err:
            return str(self._failed("be reached", err))
        except StateStoreError as err:
            return str(err)
        return None

    def _blocking(self, operation: Any) -> Any:
        from .blocking import run_blocking

        try:
            return run_blocking(operation, self.timeout * 4 + 1)
        except TimeoutError as err:
            raise self._error("answer in time", err) from None

    def put(self, key: str, value: bytes, keep_until: float) -> None:
        self._blocking(self.aput(key, value, keep_until))

    def take(self, key: str, lock: str) -> Taken | None:
        taken: Taken | None = self._blocking(self.atake(key, lock))
        return taken

    def peek(self, key: str) -> bytes | None:
        found: bytes | None = self._blocking(self.apeek(key))
        return found

    def probe(self) -> str | None:
        problem: str | None = self._blocking(self.aprobe())
        return problem

    def close(self) -> None:
        """Close the connections, on whichever loop each was made."""
        links, self._links = self._links, {}
        for loop, (router, _) in links.items():
            if not loop.is_closed():
                loop.call_soon_threadsafe(router.close)

    async def aclose(self) -> None:
        self.close()


#: The script's SHA-1, as EVALSHA names it.
_TAKE_SHA = hashlib.sha1(TAKE_SCRIPT.encode(), usedforsecurity=False).hexdigest()


def open_handle_store(url: str, *, max_skew: float = 300.0, asyncio: bool = False) -> Any:
    """The store a URL names: ``memory:`` or a Redis URL (see
    :mod:`mrtr_state.state.redis.url`). Every store has both faces (``asyncio`` is accepted
    for callers written before that, and changes nothing)."""
    from .redis.url import SCHEMES

    del asyncio
    if url in ("memory:", "memory://"):
        return MemoryHandleStore(max_skew=max_skew)
    if url.startswith(SCHEMES):
        return RedisHandleStore(url, max_skew=max_skew)
    raise ValueError(f"unknown state store {url!r}: use memory: or a redis:// URL")
