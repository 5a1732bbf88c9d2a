"""The proxy's HTTP layer: a raw ASGI app in front of one Streamable HTTP MCP endpoint.

It is a security boundary, so it forwards only what it has inspected and understood, and answers
everything else itself without contacting the upstream:

* methods: exactly ``POST``, ``GET`` and ``DELETE`` (case-sensitive, RFC 9110); else 405;
* targets: origin-form only (``/path?query``, RFC 3986 characters, no ``//`` start); else 400.
  The connection always goes to the configured upstream, whatever the target says;
* bodies: a POST must be JSON-RPC the proxy understands (:mod:`~mrtr_state.proxy.jsonrpc`);
  ``GET`` and ``DELETE`` carry none; over ``max_body`` is 413, before parsing;
* principal: the one value of the trusted header (two: 400; none: 401 unless anonymous requests
  are allowed), or a digest of the one bearer credential;
* answers: a JSON body is parsed strictly and rewritten; an event stream is rewritten event by
  event as it arrives (:mod:`~mrtr_state.proxy.sse`); a compressed answer, or a JSON body the
  proxy cannot read strictly, is a 502, never passed on.

When the client goes away, the upstream request is abandoned and its connection closed at once.
Every refusal is logged (``--json-log``) with its reason; no request path ends in a traceback.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Awaitable, Callable, Coroutine, MutableMapping
from typing import Any

from .jsonrpc import INVALID_REQUEST, Refusal, parse_body
from .rewrite import Exchange, StateGuard, bearer_principal
from .server import TARGET_EXTENSION
from .sse import EventStream
from .upstream import Upstream, UpstreamError, UpstreamResponse

__all__ = ["DEFAULT_MAX_BODY", "ProxyApp"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

DEFAULT_MAX_BODY = 4 << 20
#: The largest JSON answer the proxy buffers to rewrite (an event stream has a per-event cap).
MAX_ANSWER = 16 << 20
METHODS = ("POST", "GET", "DELETE")
_ALLOW = (b"allow", b"POST, GET, DELETE")
# RFC 3986 path and query characters, percent escapes well formed; no fragment, no "//" start.
_ORIGIN_FORM = re.compile(
    rb"/(?!/)(?:[A-Za-z0-9\-._~!$&'()*+,;=:@/]|%[0-9A-Fa-f]{2})*"
    rb"(?:\?(?:[A-Za-z0-9\-._~!$&'()*+,;=:@/?]|%[0-9A-Fa-f]{2})*)?"
)
# Hop-by-hop headers (RFC 9110 section 7.6.1) and those the proxy sets itself.
_NOT_FORWARDED = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
        b"host",
        b"content-length",
        b"accept-encoding",
        b"expect",
        b"http2-settings",
    }
)
_JSON = b"application/json"
_EVENTS = b"text/event-stream"


class ProxyApp:
    """``ProxyApp(guard, upstream="http://127.0.0.1:8000/mcp")``: an ASGI application.

    ``principal_header`` names a header that carries the authenticated principal (set by an
    authenticating front proxy that overwrites whatever the client sent); ``principal_from_bearer``
    takes a digest of the bearer credential instead. A request without its principal is refused
    (401) unless ``allow_anonymous``; with neither source, states bind no principal.
    """

    def __init__(
        self,
        guard: StateGuard,
        *,
        upstream: str,
        principal_header: str | None = None,
        principal_from_bearer: bool = False,
        allow_anonymous: bool = False,
        max_body: int = DEFAULT_MAX_BODY,
        timeout: float = 10.0,
    ) -> None:
        if principal_header and principal_from_bearer:
            raise ValueError("take the principal from a header or from the bearer, not both")
        self.upstream = Upstream(upstream, connect_timeout=timeout)
        self.origin = self.upstream.origin
        self.guard = guard
        header = principal_header.lower().encode("latin-1") if principal_header else None
        self.principal_header = header
        self.principal_from_bearer = principal_from_bearer
        self.allow_anonymous = allow_anonymous
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await self._http(scope, receive, send)
        elif scope["type"] == "lifespan":
            await self._lifespan(receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def aclose(self) -> None:
        await self.upstream.aclose()

    # --- one request -----------------------------------------------------------------------

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = time.perf_counter()
        state = _Progress(send)
        try:
            plan = await self._inspect(scope, receive)
            if plan.forward is None:  # every message was refused: answered here
                refusals = plan.exchange.refusals
                await _respond(send, 200, refusals if plan.exchange.batch else refusals[0], [])
                return
            await _unless_disconnected(receive, self._forward(plan, state))
        except Refusal as refusal:
            self._refused(scope, refusal, started)
            if not state.started:
                await _respond(send, refusal.status, refusal.body(), _extra_headers(refusal))
        except UpstreamError as err:
            self._refused(scope, Refusal(502, -32603, str(err)), started)
            if not state.started:
                await _respond(send, 502, _error(-32603, str(err)), [])
        except _ClientGone:
            self.guard.note(event="client_gone", http_method=str(scope.get("method", ""))[:16])
        except Exception as err:  # a bug: logged in one line, answered 500, no traceback
            self.guard.note(event="error", reason=f"{type(err).__name__}: {err}")
            if not state.started:
                await _respond(send, 500, _error(-32603, "internal proxy error"), [])

    def _refused(self, scope: Scope, refusal: Refusal, started: float) -> None:
        target = scope.get("extensions", {}).get(TARGET_EXTENSION) or scope.get("raw_path", b"")
        self.guard.note(
            event="refused",
            status=refusal.status,
            reason=refusal.reason,
            http_method=str(scope.get("method", ""))[:16],
            target=bytes(target)[:200].decode("latin-1"),
            latency_ms=round((time.perf_counter() - started) * 1000, 3),
        )

    async def _inspect(self, scope: Scope, receive: Receive) -> _Plan:
        """Everything checked before the upstream is contacted; the refusal otherwise."""
        method = scope["method"]
        if method not in METHODS:  # exactly, case-sensitive: "post" is not POST
            raise Refusal(405, INVALID_REQUEST, f"method not allowed ({str(method)[:16]!r})")
        target = _target(scope)
        headers: list[tuple[bytes, bytes]] = scope["headers"]
        principal = self._principal(headers)
        forwarded = _forwarded(headers)
        body = await self._read_body(receive)
        if method == "POST":
            exchange = Exchange(self.guard, parse_body(body), principal)
            return _Plan(method, target, forwarded, exchange, exchange.forward_body(body))
        if body:
            raise Refusal(400, INVALID_REQUEST, f"a {method} request carries no body here")
        # A GET stream (resumed with Last-Event-ID) may replay responses to earlier POSTs: their
        # requests are not at hand, so a state there cannot be bound and is withheld.
        return _Plan(method, target, forwarded, Exchange(self.guard, None, principal), b"")

    async def _forward(self, plan: _Plan, state: _Progress) -> None:
        assert plan.forward is not None
        response = await self.upstream.request(
            plan.method.encode("ascii"), plan.target, plan.headers, plan.forward
        )
        try:
            await self._relay(response, plan.exchange, state)
        finally:
            response.release()

    def _principal(self, headers: list[tuple[bytes, bytes]]) -> str | None:
        name = self.principal_header
        if name is None and not self.principal_from_bearer:
            return None
        values = [v for k, v in headers if k == (name or b"authorization")]
        if len(values) > 1:
            what = name.decode("latin-1") if name else "authorization"
            raise Refusal(400, INVALID_REQUEST, f"the {what} header appears {len(values)} times")
        text = values[0].decode("latin-1").strip() if values else ""
        principal = bearer_principal(text) if name is None else text or None
        if principal is None and not self.allow_anonymous:
            raise Refusal(401, INVALID_REQUEST, "no authenticated principal on the request")
        return principal

    async def _read_body(self, receive: Receive) -> bytes:
        """The whole request body; refused (413) once it passes ``max_body``."""
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise _ClientGone
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                raise Refusal(413, INVALID_REQUEST, "request body too large")
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    async def _relay(
        self, response: UpstreamResponse, exchange: Exchange, state: _Progress
    ) -> None:
        encodings = [e for e in response.values(b"content-encoding") if e.lower() != b"identity"]
        if encodings:
            raise UpstreamError("the upstream compressed its answer; the proxy cannot inspect it")
        kind = _content_type(response)
        headers = _returned(response.headers)
        if kind == _EVENTS:
            await self._relay_events(response, exchange, headers, state)
            return
        content = await response.read(MAX_ANSWER)
        answer = _rewrite_answer(exchange, content, kind)
        headers.append((b"content-length", str(len(answer)).encode("ascii")))
        status = response.status
        if exchange.refusals and not content:  # only notifications went up: 202, no body
            status, headers = 200, [(b"content-type", _JSON), headers[-1]]
        await state.start(status, headers)
        await state.send({"type": "http.response.body", "body": answer})

    async def _relay_events(
        self,
        response: UpstreamResponse,
        exchange: Exchange,
        headers: list[tuple[bytes, bytes]],
        state: _Progress,
    ) -> None:
        events = EventStream(exchange.rewrite, exchange.dropped)
        await state.start(response.status, headers)
        send = state.send
        if exchange.refusals:  # answered first, as their own events
            first = _as_events(exchange.refusals)
            await send({"type": "http.response.body", "body": first, "more_body": True})
        while (chunk := await response.next_chunk()) is not None:
            out = events.feed(chunk)
            if out:
                await send({"type": "http.response.body", "body": out, "more_body": True})
        tail = events.close() + _as_events(exchange.missing_answers())
        await send({"type": "http.response.body", "body": tail})


class _Progress:
    """Whether the response has started (after that, a failure can only cut it short)."""

    __slots__ = ("send", "started")

    def __init__(self, send: Send) -> None:
        self.send = send
        self.started = False

    async def start(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        self.started = True
        await self.send({"type": "http.response.start", "status": status, "headers": headers})


class _ClientGone(Exception):
    """The client closed its connection before the answer was complete."""


class _Plan:
    """A request that passed inspection: what to send upstream, and the exchange it belongs to."""

    __slots__ = ("exchange", "forward", "headers", "method", "target")

    def __init__(
        self,
        method: str,
        target: bytes,
        headers: list[tuple[bytes, bytes]],
        exchange: Exchange,
        forward: bytes | None,
    ) -> None:
        self.method = method
        self.target = target
        self.headers = headers
        self.exchange = exchange
        self.forward = forward


async def _unless_disconnected(receive: Receive, work: Coroutine[Any, Any, None]) -> None:
    """Run ``work``; if the client disconnects first, cancel it (its ``finally`` clauses close
    the upstream connection at once) instead of waiting on an upstream nobody listens to."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_disconnected(receive))
    try:
        await asyncio.wait((task, watcher), return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:  # the server is shutting down
        task.cancel()
        watcher.cancel()
        raise
    watcher.cancel()
    if task.done():
        task.result()
        return
    task.cancel()
    await asyncio.wait((task,))
    if not task.cancelled():
        task.exception()  # retrieved: whatever it was, nobody is listening
    raise _ClientGone


async def _disconnected(receive: Receive) -> None:
    """Return when the client disconnects (the body has been read: nothing else can come)."""
    while (await receive())["type"] != "http.disconnect":
        pass


def _target(scope: Scope) -> bytes:
    """The request target as received, if it is origin-form; else the refusal."""
    target = scope.get("extensions", {}).get(TARGET_EXTENSION)
    if target is None:  # h11 keeps the whole target before "?" in raw_path
        raw = scope.get("raw_path") or b""
        query = scope.get("query_string") or b""
        target = raw + b"?" + query if query else raw
    if not _ORIGIN_FORM.fullmatch(target):
        raise Refusal(
            400, INVALID_REQUEST, "the request target must be origin-form: /path or /path?query"
        )
    return bytes(target)


def _forwarded(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The request headers the upstream gets: end-to-end ones only, framing set by the proxy."""
    listed = _connection_options(headers)
    out = []
    for name, value in headers:
        if name in _NOT_FORWARDED or name in listed:
            continue
        if b"\r" in value or b"\n" in value or b"\x00" in value:
            raise Refusal(400, INVALID_REQUEST, "a header value holds a line break or NUL")
        out.append((name, value))
    out.append((b"accept-encoding", b"identity"))
    return out


def _returned(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The response headers the client gets (framing is the server's to set)."""
    listed = _connection_options(headers)
    return [(n, v) for n, v in headers if n not in _NOT_FORWARDED and n not in listed]


def _connection_options(headers: list[tuple[bytes, bytes]]) -> set[bytes]:
    """Header names a Connection header lists: hop-by-hop too (RFC 9110 section 7.6.1)."""
    return {
        option.strip().lower()
        for name, value in headers
        if name == b"connection"
        for option in value.split(b",")
    }


def _content_type(response: UpstreamResponse) -> bytes:
    values = response.values(b"content-type")
    return values[0].split(b";")[0].strip().lower() if len(values) == 1 else b""


def _rewrite_answer(exchange: Exchange, content: bytes, kind: bytes) -> bytes:
    """The upstream's answer with states sealed and the proxy's refusals merged in.

    A JSON answer must be strict JSON. An answer of another type is looked into as well: if any
    JSON reader would take it for JSON, it must be strict and is rewritten like a JSON answer;
    bytes no JSON reader accepts are passed on as they are (no client reads a state from them).
    """
    from .._encoding import EncodingError, json_loads
    from .jsonrpc import MAX_BODY_DEPTH

    text = content.strip(b" \t\r\n")
    message: Any = None
    if text:
        try:
            message = json_loads(text, max_depth=MAX_BODY_DEPTH)
        except EncodingError as err:
            if kind == _JSON or _lenient_json(text):
                raise UpstreamError(f"the upstream's answer is not strict JSON ({err})") from None
            return content
    rewritten = exchange.rewrite(message) if text else None
    if exchange.refusals:
        items = rewritten if type(rewritten) is list else [] if rewritten is None else [rewritten]
        return json.dumps([*exchange.refusals, *items], separators=(",", ":")).encode()
    if rewritten is message:
        return content
    return json.dumps(rewritten, separators=(",", ":")).encode()


def _lenient_json(text: bytes) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def _as_events(messages: list[dict[str, Any]]) -> bytes:
    return b"".join(
        b"data: " + json.dumps(m, separators=(",", ":")).encode() + b"\n\n" for m in messages
    )


def _error(code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}


def _extra_headers(refusal: Refusal) -> list[tuple[bytes, bytes]]:
    if refusal.status == 405:
        return [_ALLOW]
    if refusal.status == 401:
        return [(b"www-authenticate", b'Bearer realm="mcp"')]
    return []


async def _respond(send: Send, status: int, body: Any, headers: list[tuple[bytes, bytes]]) -> None:
    content = json.dumps(body, separators=(",", ":")).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", _JSON),
                (b"content-length", str(len(content)).encode("ascii")),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": content})
