"""The proxy's HTTP/1.1 client for its one upstream: a keep-alive pool on llhttp (httptools).

Why not a general HTTP client: the proxy talks to one origin, fixed at start-up, and must never
let a request choose another. So nothing here parses a URL per request: the connection goes to
the configured host and port, the request line carries the origin-form target the app checked,
and the ``Host`` header is the upstream's own. A general client also costs most of the proxy's
CPU (measured: 2.4 ms per request with httpx, 0.5 ms with aiohttp's client, 0.25 ms here; see
docs/speed.md).

Responses are framed by llhttp, the parser Node.js uses, under the rules of RFC 9112 section 6;
on top of it, a response is refused (:class:`UpstreamError`, a 502 to the client) when it is
framed ambiguously: both ``Transfer-Encoding`` and ``Content-Length``, differing or malformed
``Content-Length`` values, a transfer coding other than ``chunked``, a ``101`` nobody asked for.
A connection goes back to the pool only after a complete, keep-alive response with nothing
after it, and is taken from it again only if no byte waits unread on its socket; a response
abandoned half-way (the client went away), or one the app found answering another exchange's
requests (:meth:`UpstreamResponse.discard`), closes its connection at once.
"""

from __future__ import annotations

import asyncio
import fcntl
import ssl
import termios
import time
from collections import deque
from typing import cast
from urllib.parse import urlsplit

import httptools

__all__ = ["Upstream", "UpstreamError", "UpstreamResponse"]

#: Buffered body bytes past which a connection stops reading until the relay catches up.
_HIGH_WATER = 1 << 18
#: Idle pooled connections; more are closed when released.
_MAX_IDLE = 64
#: An idle connection older than this is not reused: servers close idle connections after a
#: few seconds (uvicorn and Node.js after 5), and a request written into one being closed is lost.
_IDLE_SECONDS = 2.0


class UpstreamError(Exception):
    """The upstream could not be reached, or answered with something the proxy will not relay."""


class _Connection(asyncio.Protocol):
    """One TCP (or TLS) connection to the upstream, carrying one exchange at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        #: the socket's descriptor, asked whether bytes wait unread before the connection is
        #: reused (None: it cannot be asked, so it is not reused)
        self.fd: int | None = None
        self.idle_since = 0.0
        self.lost = False
        self._loop = asyncio.get_running_loop()
        self._reset()

    def _reset(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        #: the values of the headers the proxy reads (framing, type, coding, connection)
        self.read: dict[bytes, list[bytes]] = {}
        self.complete = False
        self.keep_alive = False
        self.trailing = False  # bytes arrived after the response: never reuse the connection
        self._eof_ends_body = False
        self._in_head = False
        self._informational = False
        self._chunks: deque[bytes] = deque()
        self._buffered = 0
        self._paused = False
        self._error: UpstreamError | None = None
        self._headers_ready: asyncio.Future[None] = self._loop.create_future()
        self._waiter: asyncio.Future[None] | None = None

    # --- asyncio.Protocol ----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        sock = transport.get_extra_info("socket")
        self.fd = None if sock is None else sock.fileno()

    def data_received(self, data: bytes) -> None:
        if self.complete:
            self.trailing = True
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail("the upstream switched protocols unasked")
        except httptools.HttpParserError as err:
            self._fail(f"the upstream sent a malformed response ({err})")

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if self.complete:
            return
        if self._headers_ready.done() and self._eof_ends_body and self._error is None:
            self.on_message_complete()  # a body framed by the end of the connection
            return
        self._fail("the upstream closed the connection mid-response")

    def pause_writing(self) -> None:  # pragma: no cover - requests are small
        pass

    def resume_writing(self) -> None:  # pragma: no cover
        pass

    # --- llhttp callbacks ----------------------------------------------------------------------

    def on_message_begin(self) -> None:
        if self.complete:  # a second response in the same read: never read, never relayed
            self.trailing = True
            return
        self.headers = []
        self.read = {}
        self._in_head = True

    def on_header(self, name: bytes, value: bytes) -> None:
        if not self._in_head:
            return  # a trailer field, or a field of a response after the one asked for
        name, value = name.lower(), value.strip(b" \t")
        self.headers.append((name, value))
        if name in _READ:
            self.read.setdefault(name, []).append(value)

    def on_headers_complete(self) -> None:
        if self.complete:
            return
        self._in_head = False
        status = self.parser.get_status_code()
        if 100 <= status < 200 and status != 101:
            self._informational = True  # 103 Early Hints and the like: wait for the response
            return
        self._informational = False
        self.status = status
        problem = _framing_problem(status, self.read)
        if problem is not None:
            self._fail(problem)
            return
        self._eof_ends_body = status not in (204, 304) and not (
            b"content-length" in self.read or b"transfer-encoding" in self.read
        )
        if not self._headers_ready.done():
            self._headers_ready.set_result(None)

    def on_body(self, body: bytes) -> None:
        if self._informational or self._error is not None or self.complete:
            return
        self._chunks.append(body)
        self._buffered += len(body)
        if self._buffered > _HIGH_WATER and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        if self._informational:
            self._informational = False
            return
        if self._error is not None or self.complete:
            return
        self.complete = True
        self.keep_alive = not self.lost and self.parser.should_keep_alive()
        self._wake()

    # --- the exchange ------------------------------------------------------------------------

    def _fail(self, reason: str) -> None:
        if self._error is None:
            self._error = UpstreamError(reason)
        if not self._headers_ready.done():
            self._headers_ready.set_exception(self._error)
            self._headers_ready.exception()  # retrieved: no "never retrieved" warning
        if self.transport is not None:
            self.transport.abort()
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def headers_ready(self) -> None:
        await self._headers_ready

    async def next_chunk(self) -> bytes | None:
        """The next body bytes, or None at the end of the response."""
        while not self._chunks:
            if self._error is not None:
                raise self._error
            if self.complete:
                return None
            self._waiter = self._loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        chunk = self._chunks.popleft()
        self._buffered -= len(chunk)
        if self._paused and self._buffered <= _HIGH_WATER // 2 and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        return chunk

    def reusable(self) -> bool:
        return self.complete and self.keep_alive and not self.trailing and not self.lost

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()


def _unread(connection: _Connection) -> bool:
    """Whether bytes wait on the connection's socket that the loop has not read yet (a late
    answer the upstream sent after the one asked for): such a connection is never reused, lest
    those bytes be read as the next request's answer. One ``ioctl`` (FIONREAD) into a writable
    buffer (a bytes argument would cost a refused conversion first); a socket that cannot be
    asked counts as holding bytes."""
    if connection.fd is None:
        return True
    waiting = bytearray(4)
    try:
        fcntl.ioctl(connection.fd, termios.FIONREAD, waiting, True)
    except OSError:
        return True
    return waiting != _NONE_WAITING


_NONE_WAITING = bytearray(4)


#: The response headers the proxy reads, besides passing them on.
_READ = frozenset(
    {b"content-length", b"transfer-encoding", b"connection", b"content-type", b"content-encoding"}
)


def _framing_problem(status: int, read: dict[bytes, list[bytes]]) -> str | None:
    """Why a response's framing is ambiguous or unsupported (RFC 9112 section 6), or None."""
    if status == 101:
        return "the upstream switched protocols unasked"
    if not 200 <= status <= 599:
        return f"the upstream answered with status {status}, outside 200-599"
    lengths = read.get(b"content-length")
    codings = read.get(b"transfer-encoding")
    if lengths and codings:
        return "the upstream framed a response with both Content-Length and Transfer-Encoding"
    if codings:
        listed = [c.strip().lower() for value in codings for c in value.split(b",")]
        if listed != [b"chunked"]:
            return "the upstream used a transfer coding other than chunked"
    if lengths:
        values = {v.strip() for value in lengths for v in value.split(b",")}
        if len(values) != 1 or not next(iter(values)).isdigit():
            return "the upstream sent conflicting or malformed Content-Length values"
    return None


class UpstreamResponse:
    """A response whose head has arrived; read its body with :meth:`chunks` or :meth:`read`,
    then :meth:`release` it (always: a ``finally`` does it in the app)."""

    def __init__(self, upstream: Upstream, connection: _Connection) -> None:
        self._upstream = upstream
        self._connection = connection
        self.status = connection.status
        self.headers = connection.headers
        self._read = connection.read
        self._released = False

    def values(self, name: bytes) -> list[bytes]:
        """Every value of header ``name``, one of those the proxy reads (framing, type,
        coding, connection), in order."""
        if name not in _READ:
            raise ValueError(f"the proxy does not read the {name!r} header")
        return self._read.get(name, [])

    async def next_chunk(self) -> bytes | None:
        return await self._connection.next_chunk()

    async def read(self, limit: int) -> bytes:
        """The whole body; :class:`UpstreamError` past ``limit`` bytes."""
        parts: list[bytes] = []
        size = 0
        while (chunk := await self._connection.next_chunk()) is not None:
            size += len(chunk)
            if size > limit:
                raise UpstreamError(f"the upstream's response is over {limit} bytes")
            parts.append(chunk)
        return b"".join(parts)

    def release(self) -> None:
        """Give the connection back if the response was read whole and it may be reused; else
        close it at once (a relay abandoned half-way must not leave an upstream stream open)."""
        if self._released:
            return
        self._released = True
        self._upstream._release(self._connection)

    def discard(self) -> None:
        """Never reuse this connection (it carried an answer to no request of ours): it is
        closed when released."""
        self._connection.trailing = True


class Upstream:
    """``Upstream("http://127.0.0.1:8000/mcp")``: a pool of connections to that origin."""

    def __init__(self, url: str, *, connect_timeout: float = 10.0) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"--upstream must be an http(s) URL, got {url!r}")
        if parts.username is not None or parts.password is not None:
            raise ValueError("--upstream must not carry a user name or password")
        if parts.query or parts.fragment or url.endswith(("?", "#")):
            raise ValueError(f"--upstream must not carry a query or fragment, got {url!r}")
        try:
            port = parts.port
        except ValueError:
            raise ValueError(f"--upstream has an invalid port: {url!r}") from None
        self.scheme = parts.scheme
        self.host = parts.hostname
        self.port = port or (443 if parts.scheme == "https" else 80)
        default = port is None or port == (443 if parts.scheme == "https" else 80)
        shown = f"[{self.host}]" if ":" in self.host else self.host
        self.authority = shown if default else f"{shown}:{self.port}"
        self.origin = f"{self.scheme}://{self.authority}"
        #: the endpoint's path: the one path the proxy serves unless told of more
        self.path = parts.path or "/"
        #: the whole upstream URL, as start-up says it
        self.url = self.origin + self.path
        self._host_header = self.authority.encode("idna" if not self.host.isascii() else "ascii")
        self._ssl: ssl.SSLContext | None = (
            ssl.create_default_context() if parts.scheme == "https" else None
        )
        self._connect_timeout = connect_timeout
        self._idle: list[_Connection] = []
        self._busy: set[_Connection] = set()

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            _transport, connection = await asyncio.wait_for(
                loop.create_connection(
                    _Connection,
                    self.host,
                    self.port,
                    ssl=self._ssl,
                    server_hostname=self.host if self._ssl is not None else None,
                ),
                self._connect_timeout,
            )
        except (OSError, TimeoutError, ssl.SSLError) as err:
            raise UpstreamError(f"upstream unreachable ({type(err).__name__})") from None
        return connection

    async def _acquire(self) -> _Connection:
        now = time.monotonic()
        while self._idle:
            connection = self._idle.pop()
            transport = connection.transport
            if (
                not connection.lost
                and not connection.trailing  # bytes came while it sat idle: never reused
                and transport is not None
                and not transport.is_closing()
                and now - connection.idle_since < _IDLE_SECONDS
                and not _unread(connection)
            ):
                connection._reset()
                self._busy.add(connection)
                return connection
            connection.abort()
        connection = await self._connect()
        self._busy.add(connection)
        return connection

    def _release(self, connection: _Connection) -> None:
        self._busy.discard(connection)
        if connection.reusable() and len(self._idle) < _MAX_IDLE:
            connection.idle_since = time.monotonic()
            self._idle.append(connection)
        else:
            connection.abort()

    async def request(
        self,
        method: bytes,
        target: bytes,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
    ) -> UpstreamResponse:
        """Send one request and wait for its response head.

        ``target`` is an origin-form request target the caller has checked; ``headers`` must
        not hold ``Host`` or any framing header (this method frames the body itself). The
        caller must :meth:`UpstreamResponse.release` what it gets; on any exception the
        connection is already closed.
        """
        connection = await self._acquire()
        head = [method, b" ", target, b" HTTP/1.1\r\nhost: ", self._host_header, b"\r\n"]
        for name, value in headers:
            head += [name, b": ", value, b"\r\n"]
        if body or method == b"POST":
            head += [b"content-length: ", str(len(body)).encode("ascii"), b"\r\n"]
        head.append(b"\r\n")
        transport = connection.transport
        try:
            if transport is None or transport.is_closing():
                raise UpstreamError("upstream unreachable (connection closed)")
            transport.write(b"".join(head) + body)
            await connection.headers_ready()
        except BaseException:
            self._busy.discard(connection)
            connection.abort()
            raise
        return UpstreamResponse(self, connection)

    async def probe(self, timeout: float = 1.0) -> str | None:
        """Why a new connection to the upstream cannot be made right now, or None (readiness)."""
        loop = asyncio.get_running_loop()
        try:
            transport, _ = await asyncio.wait_for(
                loop.create_connection(
                    asyncio.Protocol,
                    self.host,
                    self.port,
                    ssl=self._ssl,
                    server_hostname=self.host if self._ssl is not None else None,
                ),
                timeout,
            )
        except (OSError, TimeoutError, ssl.SSLError) as err:
            return f"{self.origin} unreachable ({type(err).__name__})"
        transport.close()
        return None

    async def aclose(self) -> None:
        for connection in [*self._idle, *self._busy]:
            connection.abort()
        self._idle.clear()
        self._busy.clear()
