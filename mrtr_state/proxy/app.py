"""The proxy's HTTP layer: a thin ASGI app in front of one Streamable HTTP MCP endpoint.

Every request goes upstream to the same path at the ``--upstream`` origin, with its headers
(less hop-by-hop ones), and comes back with the upstream status and headers. Only JSON-RPC is
looked into: a POST's body, and the ``application/json`` or ``text/event-stream`` answer to it.
Bodies go through byte for byte wherever nothing is rewritten, and an event stream is passed on
event by event as it arrives. The rules live in :mod:`mrtr_state.proxy.rewrite`.

Needs the ``proxy`` extra (uvicorn, httpx); nothing else in mrtr-state imports this module.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import urlsplit

import httpx

from .._encoding import EncodingError, json_loads
from .rewrite import EventStream, Exchange, StateGuard, bearer_principal

__all__ = ["DEFAULT_MAX_BODY", "ProxyApp"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

DEFAULT_MAX_BODY = 4 << 20
_JSON_RPC_BODIES = ("application/json", "text/event-stream")
#: How deeply a request body may nest (tool arguments nest more than tokens do).
MAX_BODY_DEPTH = 128
# Hop-by-hop headers (RFC 9110 section 7.6.1) and those the proxy sets itself.
_DROP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
        "accept-encoding",
    }
)


def _error_body(code: int, message: str) -> bytes:
    return json.dumps(
        {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}
    ).encode()


class ProxyApp:
    """``ProxyApp(guard, upstream="http://127.0.0.1:8000/mcp")``: an ASGI application.

    ``principal_header`` names a header that carries the authenticated principal (set by an
    authenticating front proxy); ``principal_from_bearer`` takes a digest of the bearer
    credential instead. With neither, states are bound to no principal.
    """

    def __init__(
        self,
        guard: StateGuard,
        *,
        upstream: str,
        principal_header: str | None = None,
        principal_from_bearer: bool = False,
        max_body: int = DEFAULT_MAX_BODY,
        timeout: float = 30.0,
    ) -> None:
        parts = urlsplit(upstream)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"--upstream must be an http(s) URL, got {upstream!r}")
        self.origin = f"{parts.scheme}://{parts.netloc}"
        self.guard = guard
        self.principal_header = principal_header.lower() if principal_header else None
        self.principal_from_bearer = principal_from_bearer
        self.max_body = max_body
        # Connecting gets a deadline (an unreachable upstream is a 502, never a hang); reading
        # does not, because a Streamable HTTP stream may stay quiet for minutes.
        self._timeout = httpx.Timeout(timeout, read=None)
        self._client: httpx.AsyncClient | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        elif scope["type"] == "http":
            await self._http(scope, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return

    def client(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=self._timeout, follow_redirects=False)
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    # --- one request -----------------------------------------------------------------------

    def _principal(self, headers: dict[str, str]) -> str | None:
        if self.principal_header is not None:
            return headers.get(self.principal_header) or None
        if self.principal_from_bearer:
            return bearer_principal(headers.get("authorization"))
        return None

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        raw_headers: list[tuple[bytes, bytes]] = list(scope.get("headers") or [])
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in raw_headers}
        body = await self._read_body(receive)
        if body is None:
            await _respond(send, 413, _error_body(-32600, "request body too large"))
            return
        exchange: Exchange | None = None
        if scope["method"] == "POST" and body:
            # Strict JSON or nothing: were a body forwarded that this proxy read one way (say
            # the last of two "params" members) and the server another (the first), a forged
            # requestState could pass unseen. So duplicates, NaN and the like are refused here.
            try:
                parsed = json_loads(body.strip(), max_depth=MAX_BODY_DEPTH)
            except EncodingError as err:
                await _respond(send, 400, _error_body(-32700, f"parse error: {err}"))
                return
            if isinstance(parsed, dict | list) and parsed:
                exchange = Exchange(self.guard, parsed, self._principal(headers))
                if exchange.forward is None:  # every message refused: answered here
                    refusals: Any = exchange.refusals if exchange.batch else exchange.refusals[0]
                    await _respond(send, 200, json.dumps(refusals).encode())
                    return
                if exchange.changed:
                    body = json.dumps(exchange.forward, separators=(",", ":")).encode()
        if scope["method"] == "GET":
            # A stream resumed with Last-Event-ID may carry responses to earlier POSTs. Their
            # requests are not at hand, so an input_required state there cannot be bound: it is
            # withheld (an error in its place), never passed on in the clear.
            exchange = Exchange(self.guard, [], self._principal(headers))
        forward = [(k, v) for k, v in raw_headers if k.decode("latin-1").lower() not in _DROP] + [
            (b"accept-encoding", b"identity")
        ]
        url = self.origin + scope.get("raw_path", scope["path"].encode()).decode("latin-1")
        if scope.get("query_string"):
            url += "?" + scope["query_string"].decode("latin-1")
        request = self.client().build_request(scope["method"], url, headers=forward, content=body)
        try:
            upstream = await self.client().send(request, stream=True)
        except httpx.HTTPError as err:
            reason = type(err).__name__
            await _respond(send, 502, _error_body(-32603, f"upstream unreachable ({reason})"))
            return
        try:
            await self._relay(upstream, exchange, send)
        finally:
            await upstream.aclose()

    async def _read_body(self, receive: Receive) -> bytes | None:
        """The whole request body, or None once it passes ``max_body`` (reading stops)."""
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return b"".join(chunks)

    async def _relay(self, upstream: httpx.Response, exchange: Exchange | None, send: Send) -> None:
        kind = upstream.headers.get("content-type", "").split(";")[0].strip().lower()
        if exchange is not None and exchange.refusals and kind not in _JSON_RPC_BODIES:
            # The rest of a batch was only notifications (202, no body): the refusals are the
            # whole answer, and must not be lost.
            await upstream.aread()
            await _respond(send, 200, json.dumps(exchange.refusals).encode())
            return
        headers = [
            (k.encode("latin-1"), v.encode("latin-1"))
            for k, v in upstream.headers.multi_items()
            if k.lower() not in _DROP
        ]
        if exchange is not None and kind == "application/json":
            content = await upstream.aread()
            content = _rewrite_json(exchange, content)
            headers.append((b"content-length", str(len(content)).encode()))
            await send(
                {"type": "http.response.start", "status": upstream.status_code, "headers": headers}
            )
            await send({"type": "http.response.body", "body": content})
            return
        streaming_rewrite = exchange is not None and kind == "text/event-stream"
        if "content-length" in upstream.headers and not streaming_rewrite:
            headers.append((b"content-length", upstream.headers["content-length"].encode()))
        await send(
            {"type": "http.response.start", "status": upstream.status_code, "headers": headers}
        )
        if streaming_rewrite:
            assert exchange is not None
            events = EventStream(exchange.rewrite)
            for refusal in exchange.refusals:  # answered first, as their own events
                data = json.dumps(refusal, separators=(",", ":")).encode()
                await send(
                    {
                        "type": "http.response.body",
                        "body": b"data: " + data + b"\n\n",
                        "more_body": True,
                    }
                )
            async for chunk in upstream.aiter_raw():
                for event in events.feed(chunk):
                    await send({"type": "http.response.body", "body": event, "more_body": True})
            await send({"type": "http.response.body", "body": events.close()})
            return
        async for chunk in upstream.aiter_raw():
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b""})


def _rewrite_json(exchange: Exchange, content: bytes) -> bytes:
    """The upstream's JSON answer with states sealed and the proxy's refusals merged in."""
    try:
        message = json.loads(content) if content else None
    except (ValueError, UnicodeDecodeError):
        return content
    rewritten = exchange.rewrite(message) if message is not None else None
    if exchange.refusals:
        items = (
            rewritten if isinstance(rewritten, list) else [] if rewritten is None else [rewritten]
        )
        return json.dumps([*exchange.refusals, *items], separators=(",", ":")).encode()
    if rewritten is message:
        return content
    return json.dumps(rewritten, separators=(",", ":")).encode()


async def _respond(send: Send, status: int, body: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
