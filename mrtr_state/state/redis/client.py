"""The package's asyncio client for Redis: its protocol, parsed by hiredis.

Why not redis-py's asyncio client: per command it costs three to four times the CPU of this one
(``make bench`` measures both on one server: its connection pool, retry wrapper, command packing
and reply callbacks are Python on every call), and the proxy makes two commands a round trip.
So, as the proxy reaches its upstream over llhttp with a client of its own, every store reaches
Redis over hiredis (the C parser redis-py itself uses) with this: one pipelined connection per
node, replies matched to requests in order, a timeout per command, and nothing else. Blocking
callers (the CLI, the SDK codec) use the same client through :mod:`mrtr_state.state.blocking`.
Three topologies, from the URLs of :mod:`mrtr_state.state.redis.url`:

* one server: the URL's host, credentials, database and TLS; or its Unix socket (``unix://``, a
  Redis beside the proxy: a command then costs the proxy no TCP on either side of the socket);
* Sentinel: the primary is asked of the Sentinels (``SENTINEL get-master-addr-by-name``) when
  first needed and again after any failure, so a failover is followed on the next command;
* Cluster: the slot map is read with ``CLUSTER SLOTS`` from any node, each key sent to the
  node serving its slot (CRC16, RFC 1952's CCITT variant as Redis defines it), and read again
  on ``MOVED`` (the command is then retried once) or after a failure.

Each new connection to a data node is handed, once authenticated, to the ``on_open`` hook a
store gives (:mod:`mrtr_state.state.redis.watch` judges the server there) before any command of
the store is sent on it. Every failure (refused, reset, timed out, an error reply, the hook's
refusal) is a :class:`StoreFailure`; the store above turns it into a failed round. Nothing here
retries a write that may have been applied.
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from . import StoreFailure
from .url import RedisTarget, parse_url

__all__ = ["Node", "OnOpen", "Router", "StoreFailure", "connect", "router_for", "slot_of"]


def _crc16_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
        table.append(crc & 0xFFFF)
    return table


_CRC16 = _crc16_table()


def slot_of(key: bytes) -> int:
    """The Redis Cluster hash slot of ``key`` (with the ``{tag}`` rule)."""
    start = key.find(b"{")
    if start >= 0:
        end = key.find(b"}", start + 1)
        if end > start + 1:
            key = key[start + 1 : end]
    crc = 0
    for byte in key:
        crc = ((crc << 8) & 0xFFFF) ^ _CRC16[((crc >> 8) ^ byte) & 0xFF]
    return crc % 16384


class _Link(asyncio.Protocol):
    """One connection: commands written as they come, replies matched to them in order.

    Replies come back in the order commands were sent, so only the oldest command waiting can
    be late first: one watchdog timer per link, set for the oldest command's deadline, replaces
    a timer per command (which cost more CPU than the command's own bytes). A command not
    answered within the timeout fails the link and every command waiting on it: those behind it
    could only be answered after it.
    """

    def __init__(self, timeout: float) -> None:
        import hiredis

        self._reader = hiredis.Reader()
        self._pack = hiredis.pack_command
        self._timeout = timeout
        #: (waiter, deadline) of each command sent and not yet answered, oldest first
        self._waiting: deque[tuple[asyncio.Future[Any], float]] = deque()
        self._watchdog: asyncio.TimerHandle | None = None
        self._loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.lost = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self._reader.feed(data)
        while (reply := self._reader.gets()) is not False:
            if self._waiting:
                waiter = self._waiting.popleft()[0]
                if waiter.done():
                    continue
                if isinstance(reply, Exception):  # an error reply (hiredis.ReplyError)
                    waiter.set_exception(StoreFailure(str(reply)))
                else:
                    waiter.set_result(reply)

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail("the connection closed")

    def _fail(self, why: str) -> None:
        self.lost = True
        while self._waiting:
            waiter = self._waiting.popleft()[0]
            if not waiter.done():
                waiter.set_exception(StoreFailure(why))

    def _watch(self) -> None:
        """The watchdog: fail the link if its oldest command is late, else wait for the next."""
        self._watchdog = None
        if not self._waiting:
            return
        deadline = self._waiting[0][1]
        # uvloop's timers count whole milliseconds and may fire just before the deadline:
        # within a millisecond of it counts as reached (else the watchdog would re-arm in a spin)
        if self._loop.time() >= deadline - 0.001:
            self._fail("timed out")
            self.close()
        else:
            self._watchdog = self._loop.call_at(deadline, self._watch)

    def send(self, args: tuple[Any, ...]) -> asyncio.Future[Any]:
        """The reply to one command, to be awaited: an error reply raises the
        :class:`StoreFailure` naming it, as does a link that fails or a reply later than the
        timeout."""
        if self.lost or self.transport is None:
            raise StoreFailure("the connection closed")
        loop = self._loop
        waiter: asyncio.Future[Any] = loop.create_future()
        deadline = loop.time() + self._timeout
        self._waiting.append((waiter, deadline))
        if self._watchdog is None:
            self._watchdog = loop.call_at(deadline, self._watch)
        self.transport.write(self._pack(args))
        return waiter

    def close(self) -> None:
        self.lost = True
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        if self.transport is not None:
            self.transport.abort()


#: Told of each new data-node connection, authenticated and before any command of the store
#: is sent on it: it may send commands of its own (``node.send_on(link, ...)``) and refuse the
#: connection by raising :class:`StoreFailure`.
OnOpen = Callable[["Node", "_Link"], Awaitable[None]]


class Node:
    """One Redis server: a lazily opened link, re-opened after it fails.

    ``opened`` counts the links made so far: a store that must judge every server it writes to
    sees a new one (a reconnection, a failover's new primary) by it."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        password: str | None,
        db: int,
        tls: bool,
        timeout: float,
        path: str | None = None,
        username: str | None = None,
        on_open: OnOpen | None = None,
    ) -> None:
        self.host, self.port, self._path = host, port, path
        self._username, self._password, self._db = username, password, db
        self._timeout = timeout
        self._tls = ssl.create_default_context() if tls else None
        self._on_open = on_open
        self._link: _Link | None = None
        self._opening: asyncio.Future[_Link] | None = None
        self.opened = 0

    @property
    def where(self) -> str:
        """The node's address, for messages."""
        return self._path or f"{self.host}:{self.port}"

    async def _connected(self) -> _Link:
        if self._opening is None:
            self._opening = asyncio.ensure_future(self._open())
        try:
            return await asyncio.shield(self._opening)
        finally:
            if self._opening is not None and self._opening.done():
                self._opening = None

    async def _open(self) -> _Link:
        loop = asyncio.get_running_loop()
        timeout = self._timeout
        try:
            if self._path is not None:
                opening = loop.create_unix_connection(lambda: _Link(timeout), self._path)
            else:
                opening = loop.create_connection(
                    lambda: _Link(timeout),
                    self.host,
                    self.port,
                    ssl=self._tls,
                    server_hostname=self.host if self._tls else None,
                )
            _, link = await asyncio.wait_for(opening, timeout)
        except (OSError, TimeoutError, ssl.SSLError) as err:
            where = self._path or f"{self.host}:{self.port}"
            raise StoreFailure(f"{where} unreachable ({type(err).__name__})") from None
        try:
            if self._password is not None:
                credentials: tuple[str, ...] = (self._password,)
                if self._username is not None:
                    credentials = (self._username, self._password)
                await link.send(("AUTH", *credentials))
            if self._db:
                await link.send(("SELECT", self._db))
            if self._on_open is not None:
                await self._on_open(self, link)
        except BaseException:  # refused (a wrong password, no such database) or cancelled
            link.close()  # else each attempt would leave a connection open on both sides
            raise
        self.opened += 1
        self._link = link
        return link

    @staticmethod
    def send_on(link: _Link, *args: Any) -> Awaitable[Any]:
        """One command on ``link`` itself (for an :data:`OnOpen` hook, before the link is in
        use)."""
        return link.send(args)

    def call(self, *args: Any) -> Awaitable[Any]:
        """The reply to one command, to be awaited; :class:`StoreFailure` for anything else. A
        failed link is dropped (a late reply fails it), so the next command opens a new one.

        Not a coroutine while the link is up: the reply's future itself, so the task that
        awaits it resumes straight from the reply (the proxy makes two commands a round trip)."""
        link = self._link
        if link is None or link.lost:
            self._link = None
            return self._call_connected(args)
        return link.send(args)

    async def _call_connected(self, args: tuple[Any, ...]) -> Any:
        link = await self._connected()
        return await link.send(args)

    def close(self) -> None:
        if self._link is not None:
            self._link.close()
            self._link = None


class Router:
    """Sends each command to the node that serves its key. ``nodes()`` lists the primaries."""

    def call(self, key: bytes, *args: Any) -> Awaitable[Any]:
        raise NotImplementedError

    async def nodes(self) -> list[Node]:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class _One(Router):
    def __init__(self, node: Node) -> None:
        self._node = node

    def call(self, key: bytes, *args: Any) -> Awaitable[Any]:
        return self._node.call(*args)

    async def nodes(self) -> list[Node]:
        return [self._node]

    def close(self) -> None:
        self._node.close()


class _Sentinel(Router):
    def __init__(self, sentinels: list[Node], service: str, make: Any) -> None:
        self._sentinels = sentinels
        self._service = service
        self._make = make
        self._primary: Node | None = None

    async def _primary_node(self) -> Node:
        if self._primary is None:
            for sentinel in self._sentinels:
                try:
                    found = await sentinel.call(
                        "SENTINEL", "get-master-addr-by-name", self._service
                    )
                except StoreFailure:
                    continue
                if isinstance(found, list) and len(found) == 2:
                    self._primary = self._make(found[0].decode(), int(found[1]))
                    break
            else:
                raise StoreFailure(f"no Sentinel names a primary for {self._service!r}")
        return self._primary

    async def call(self, key: bytes, *args: Any) -> Any:
        primary = await self._primary_node()
        try:
            return await primary.call(*args)
        except StoreFailure:
            # a failover may be under way: ask the Sentinels again next time
            primary.close()
            self._primary = None
            raise

    async def nodes(self) -> list[Node]:
        return [await self._primary_node()]

    def close(self) -> None:
        for node in [*self._sentinels, *([self._primary] if self._primary else [])]:
            node.close()


class _Cluster(Router):
    def __init__(self, seeds: list[Node], make: Any) -> None:
        self._seeds = seeds
        self._make = make
        self._by_address: dict[tuple[str, int], Node] = {}
        self._slots: list[Node] | None = None

    def _node(self, host: str, port: int) -> Node:
        found = self._by_address.get((host, port))
        if found is None:
            found = self._by_address[(host, port)] = self._make(host, port)
        return found

    async def _map(self) -> list[Node]:
        if self._slots is None:
            for seed in [*self._by_address.values(), *self._seeds]:
                try:
                    ranges = await seed.call("CLUSTER", "SLOTS")
                except StoreFailure:
                    continue
                slots: list[Node | None] = [None] * 16384
                for first, last, primary, *_ in ranges:
                    node = self._node(primary[0].decode(), int(primary[1]))
                    slots[first : last + 1] = [node] * (last - first + 1)
                if all(slots):
                    self._slots = slots  # type: ignore[assignment]
                    break
            else:
                raise StoreFailure("no cluster node gave a slot map covering every slot")
        assert self._slots is not None
        return self._slots

    async def call(self, key: bytes, *args: Any) -> Any:
        return await self._send(key, args, moved_again=True)

    async def _send(self, key: bytes, args: tuple[Any, ...], *, moved_again: bool) -> Any:
        node = (await self._map())[slot_of(key)]
        try:
            return await node.call(*args)
        except StoreFailure as err:
            self._slots = None  # moved, failed over or gone: read the map again
            if moved_again and str(err).startswith("MOVED "):  # not applied: send it once more
                return await self._send(key, args, moved_again=False)
            raise

    async def nodes(self) -> list[Node]:
        slots = await self._map()
        return list(dict.fromkeys(slots))

    def close(self) -> None:
        for node in [*self._seeds, *self._by_address.values()]:
            node.close()


def connect(target: RedisTarget, *, timeout: float, on_open: OnOpen | None = None) -> Router:
    """The router for ``target`` (see :func:`mrtr_state.state.redis.url.parse_url`); ``on_open``
    hears of every new connection to a data node. (Needs the ``hiredis`` package, which the
    ``redis`` extra brings: imported here, so that a missing one fails at start-up.)"""
    import hiredis  # noqa: F401

    def make(host: str, port: int, db: int = target.db) -> Node:
        return Node(
            host,
            port,
            username=target.username,
            password=target.password,
            db=db,
            tls=target.tls,
            timeout=timeout,
            on_open=on_open,
        )

    if target.kind == "unix":
        return _One(
            Node(
                "",
                0,
                username=target.username,
                password=target.password,
                db=target.db,
                tls=False,
                timeout=timeout,
                path=target.path,
                on_open=on_open,
            )
        )
    if target.kind == "server":
        ((host, port),) = target.nodes
        return _One(make(host, port))
    if target.kind == "sentinel":
        assert target.service is not None
        sentinels = [
            Node(host, port, password=None, db=0, tls=target.tls, timeout=timeout)
            for host, port in target.nodes
        ]
        return _Sentinel(sentinels, target.service, make)
    return _Cluster([make(host, port, 0) for host, port in target.nodes], make)


def router_for(url: str, *, timeout: float, on_open: OnOpen | None = None) -> Router:
    """The router a Redis URL names; ``ValueError`` if it cannot be used."""
    return connect(parse_url(url), timeout=timeout, on_open=on_open)
