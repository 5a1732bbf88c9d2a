"""The proxy's HTTP layer: a raw ASGI app in front of one Streamable HTTP MCP endpoint.

It is a security boundary, so it forwards only what it has inspected and understood, and answers
everything else itself without contacting the upstream:

* framing: read by :mod:`~mrtr_state.proxy.framing` before the HTTP parser, so what arrives here
  is a request with one reading (no trailers, no ambiguous lengths, no folded fields);
* methods: exactly ``POST``, ``GET`` and ``DELETE`` (case-sensitive, RFC 9110); else 405;
* targets: origin-form only (``/path?query``, RFC 3986 characters, no ``//`` start); else 400.
  Only the paths served (the upstream URL's, and any ``--path``) are forwarded, else 404; the
  connection always goes to the configured upstream, whatever the target says;
* bodies: a POST must be JSON-RPC the proxy understands (:mod:`~mrtr_state.proxy.jsonrpc`);
  ``GET`` and ``DELETE`` carry none; over ``max_body`` is 413, before parsing;
* principal: the one value of the trusted header (two: 400; none: 401 unless anonymous requests
  are allowed), or a digest of the one bearer credential;
* answers: only bodies the proxy parsed itself go back. A JSON body (``application/json``) is
  parsed strictly and rewritten; an event stream (``text/event-stream``) is rewritten event by
  event as it arrives (:mod:`~mrtr_state.proxy.sse`). Any other body (another or no media type,
  a Content-Type repeated or listing two), a compressed one, or a JSON body the proxy cannot
  read strictly is a 502, never passed on; an empty body needs no type.

When the client goes away, the upstream request is abandoned and its connection closed at once.
Every refusal is logged (``--json-log``) with its reason; no request path ends in a traceback.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

from .._encoding import EncodingError, encode_wire, json_loads
from ..state.backend import store_waits
from .framing import FramingRefusal
from .jsonrpc import (
    INVALID_REQUEST,
    MAX_BODY_DEPTH,
    Refusal,
    check_routing_headers,
    parse_body,
)
from .rewrite import DROP, FOREIGN_ANSWER, Exchange, StateGuard, bearer_principal
from .server import TARGET_EXTENSION
from .sse import EventStream
from .upstream import Upstream, UpstreamError, UpstreamResponse

__all__ = ["DEFAULT_MAX_BODY", "ProxyApp"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

DEFAULT_MAX_BODY = 4 << 20
#: How often the proxy looks at its keyset file when no traffic makes it look.
KEYSET_CHECK_SECONDS = 1.0
#: The largest JSON answer the proxy buffers to rewrite (an event stream has a per-event cap).
MAX_ANSWER = 16 << 20
METHODS = ("POST", "GET", "DELETE")
_ALLOW = (b"allow", b"POST, GET, DELETE")
#: On an answer given before the request's body was read: the connection is closed after it,
#: never kept alive by reading (draining) a body that may never end.
_CLOSE = (b"connection", b"close")
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
        b"content-encoding",  # identity or refused (415): the body forwarded is the one read
        b"accept-encoding",
        b"expect",
        b"http2-settings",
    }
)
#: Request headers an upstream reads one value of: never forwarded twice.
_ONCE = frozenset(
    {
        b"mcp-session-id",
        b"mcp-protocol-version",
        b"last-event-id",
        b"authorization",
        b"content-type",
    }
)
_JSON = b"application/json"
_BOM = b"\xef\xbb\xbf"
#: A control character (any but HTAB): never in a principal's value. The framer refuses them in
#: any header already; checked again where the principal is read, since it decides whose a
#: state is. (Obs-text, UTF-8's bytes among them, is allowed.)
_CONTROL = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")
_EVENTS = b"text/event-stream"
_TOKEN = rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"
_QUOTED = rb'"(?:[\t \x21\x23-\x5b\x5d-\x7e]|\\[\t \x21-\x7e])*+"'
# RFC 9110 section 8.3.1: type "/" subtype *( OWS ";" OWS parameter ), one value, no list
_PARAMETER = re.compile(rb"[ \t]*+;[ \t]*+(" + _TOKEN + rb")=(" + _TOKEN + rb"|" + _QUOTED + rb")")
_CONTENT_TYPE = re.compile(
    rb"("
    + _TOKEN
    + rb"/"
    + _TOKEN
    + rb")((?:[ \t]*+;[ \t]*+"
    + _TOKEN
    + rb"=(?:"
    + _TOKEN
    + rb"|"
    + _QUOTED
    + rb"))*+)[ \t]*"
)


class ProxyApp:
    """``ProxyApp(guard, upstream="http://127.0.0.1:8000/mcp")``: an ASGI application.

    ``principal_header`` names a header that carries the authenticated principal (set by an
    authenticating front proxy that overwrites whatever the client sent); ``principal_from_bearer``
    takes a digest of the bearer credential instead. A request without its principal is refused
    (401) unless ``allow_anonymous``; with neither source, states bind no principal.

    The upstream URL's path is the one served, with any of ``paths``; every state is bound to
    the path its request came on (see :meth:`StateGuard.audience_for`).
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
        paths: Iterable[str] = (),
    ) -> None:
        if principal_header and principal_from_bearer:
            raise ValueError("take the principal from a header or from the bearer, not both")
        self.upstream = Upstream(upstream, connect_timeout=timeout)
        self.origin = self.upstream.origin
        served = [self.upstream.path, *paths]
        for path in served:
            if _ORIGIN_FORM.fullmatch(path.encode("ascii", "replace")) is None or "?" in path:
                raise ValueError(
                    f"a path to serve must be /path (RFC 3986 characters), got {path!r}"
                )
        #: the request paths forwarded (exactly, as sent: no decoding, no trailing-slash play)
        self.paths = frozenset(path.encode("ascii") for path in served)
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
        monitor: asyncio.Task[None] | None = None
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                if self.guard.keyset is not None:
                    monitor = asyncio.ensure_future(self._watch_keyset())
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if monitor is not None:
                    monitor.cancel()
                await self.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _watch_keyset(self) -> None:
        """Look at the keyset file every second even when no state passes, so that a file that
        cannot be used is logged (and counted) while it lasts, not only when traffic comes."""
        keyset = self.guard.keyset
        assert keyset is not None
        while True:
            await asyncio.sleep(KEYSET_CHECK_SECONDS)
            # in a thread: a change that needs the KEK must not stall the event loop (a request
            # never waits on the KEK; this look is what loads such a change)
            await asyncio.to_thread(keyset.check)

    async def aclose(self) -> None:
        await self.upstream.aclose()
        await self.guard.backend.aclose()

    # --- one request -----------------------------------------------------------------------

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = time.perf_counter()
        state = _Progress(send)
        try:
            plan = await self._inspect(scope, receive, state)
            if plan.forward is None:  # every message was refused: answered here
                self._observe_work(plan)
                refusals = plan.exchange.refusals
                await _respond(send, 200, refusals if plan.exchange.batch else refusals[0], [])
                return
            watch = _Watch(receive, state)
            try:
                await self._forward(plan, state)
            except asyncio.CancelledError:
                if not watch.gone:
                    raise  # the server is shutting down: not ours to swallow
                watch.task.uncancel()
                raise _ClientGone from None
            finally:
                watch.stop()
        except Refusal as refusal:
            self._refused(scope, refusal, started)
            if not state.started:
                extra = _extra_headers(refusal)
                if not state.body_read:  # answered before its body came: never drained
                    extra.append(_CLOSE)
                await _respond(send, refusal.status, refusal.body(), extra)
        except UpstreamError as err:
            self._refused(scope, Refusal(502, -32603, str(err), "upstream"), started)
            if not state.started:
                await _respond(send, 502, _error(-32603, str(err)), [])
        except _ClientGone:
            self.guard.note(event="client_gone", http_method=str(scope.get("method", ""))[:16])
        except Exception as err:  # a bug: logged in one line, answered 500, no traceback
            self.guard.note(event="error", reason=f"{type(err).__name__}: {err}")
            if not state.started:
                await _respond(send, 500, _error(-32603, "internal proxy error"), [])

    def framing_refused(self, refusal: FramingRefusal) -> None:
        """A request the framer refused before the HTTP parser read it: logged and counted
        like the app's own refusals (the framer answered it and closed the connection)."""
        if self.guard.metrics is not None:
            self.guard.metrics.refused_request(refusal.status, refusal.kind)
        self.guard.note(
            event="refused", status=refusal.status, kind=refusal.kind, reason=refusal.reason
        )

    def _refused(self, scope: Scope, refusal: Refusal, started: float) -> None:
        if self.guard.metrics is not None:
            self.guard.metrics.refused_request(refusal.status, refusal.kind)
        target = scope.get("extensions", {}).get(TARGET_EXTENSION) or scope.get("raw_path", b"")
        self.guard.note(
            event="refused",
            status=refusal.status,
            kind=refusal.kind,
            reason=refusal.reason,
            http_method=str(scope.get("method", ""))[:16],
            target=bytes(target)[:200].decode("latin-1"),
            latency_ms=round((time.perf_counter() - started) * 1000, 3),
        )

    async def _inspect(self, scope: Scope, receive: Receive, progress: _Progress) -> _Plan:
        """Everything checked before the upstream is contacted; the refusal otherwise.

        ``progress.body_read`` says, when it refuses, whether the body was read whole (a
        request refused before then has its connection closed, see :meth:`_http`)."""
        method = scope["method"]
        if method not in METHODS:  # exactly, case-sensitive: "post" is not POST
            raise Refusal(405, INVALID_REQUEST, f"method not allowed ({str(method)[:16]!r})")
        target, path = _target(scope)
        if path not in self.paths:
            raise Refusal(404, INVALID_REQUEST, "no MCP endpoint at this path", "not_found")
        # bound to the whole target: an upstream may route on the query as well as the path
        audience = self.guard.audience_for(target.decode("ascii"))
        headers: list[tuple[bytes, bytes]] = scope["headers"]
        principal = self._principal(headers)
        forwarded = _forwarded(headers)
        if method == "POST":
            _check_body_meaning(headers)
        body = await self._read_body(receive)
        progress.body_read = True
        if method == "POST":
            started = time.perf_counter()
            if body[:3] == _BOM:  # express.json drops it, Starlette reads it: refused by both
                raise Refusal(415, INVALID_REQUEST, "the body begins with a byte order mark", "bom")
            parsed = parse_body(body)
            check_routing_headers(headers, parsed)
            exchange = await Exchange.build(self.guard, parsed, principal, audience)
            plan = _Plan(method, target, forwarded, exchange, exchange.forward_body(body))
            plan.work = time.perf_counter() - started
            return plan
        if body:
            raise Refusal(
                400, INVALID_REQUEST, f"a {method} request carries no body here", "body_not_allowed"
            )
        # A GET stream (resumed with Last-Event-ID) may replay responses to earlier POSTs: their
        # requests are not at hand, so a state there cannot be bound and is withheld.
        return _Plan(
            method, target, forwarded, Exchange(self.guard, None, principal, audience), b""
        )

    async def _forward(self, plan: _Plan, state: _Progress) -> None:
        assert plan.forward is not None
        metrics = self.guard.metrics
        sent = time.perf_counter()
        response = await self.upstream.request(
            plan.method.encode("ascii"), plan.target, plan.headers, plan.forward
        )
        if metrics is not None:
            metrics.observe_upstream(time.perf_counter() - sent)
        try:
            await self._relay(response, plan, state)
        finally:
            response.release()
            self._observe_work(plan)

    def _observe_work(self, plan: _Plan) -> None:
        """Count the proxy's own work on a request: its measured time less its waits on its
        state or replay store (counted apart). Each request runs in a task of its own, and
        stores count their waits in the task's context: the total is this request's."""
        metrics = self.guard.metrics
        if metrics is None:
            return
        waited = store_waits()
        metrics.observe_work(plan.work - waited)
        if waited:
            metrics.observe_store(waited)

    def _principal(self, headers: list[tuple[bytes, bytes]]) -> str | None:
        name = self.principal_header
        if name is None and not self.principal_from_bearer:
            return None
        read = name or b"authorization"
        for other, value in headers:
            # a server behind a CGI-style gateway reads X_Forwarded_User as X-Forwarded-User,
            # and a header the Connection header lists is removed before the upstream sees it:
            # either way the upstream would not see the principal the proxy bound the state to
            if other != read and other.replace(b"_", b"-") == read:
                raise _unusable_principal(
                    f"a header is spelled {other!r} beside {read!r}", "principal_spelled_twice"
                )
            if other == b"connection" and read in _options([value]):
                raise _unusable_principal(
                    "the Connection header lists the principal's header", "principal_hop_by_hop"
                )
        values = [v for k, v in headers if k == read]
        if len(values) > 1:
            what = read.decode("latin-1")
            raise _unusable_principal(
                f"the {what} header appears {len(values)} times", "principal_repeated"
            )
        value = values[0].strip(b" \t") if values else b""  # RFC 9110 OWS, nothing else
        if _CONTROL.search(value) is not None:
            raise _unusable_principal(
                f"the {read.decode('latin-1')} header holds a control character",
                "principal_control",
            )
        text = value.decode("latin-1")
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

    async def _relay(self, response: UpstreamResponse, plan: _Plan, state: _Progress) -> None:
        exchange = plan.exchange
        encodings = [e for e in response.values(b"content-encoding") if e.lower() != b"identity"]
        if encodings:
            raise UpstreamError("the upstream compressed its answer; the proxy cannot inspect it")
        kind = _media_type(response)
        headers = _returned(response)
        if kind == _EVENTS:
            await self._relay_events(response, plan, headers, state)
            return
        content = await response.read(MAX_ANSWER)
        if content and kind != _JSON:
            shown = "no Content-Type" if kind is None else f"Content-Type {kind.decode('latin-1')}"
            raise UpstreamError(
                f"the upstream answered with a body of {shown}; the proxy relays only JSON "
                "and event streams it has read"
            )
        started = time.perf_counter()
        answer = await _rewrite_answer(exchange, content)
        plan.work += time.perf_counter() - started
        if answer is DROP:  # another exchange's answer, or an answer twice: never relayed
            response.discard()
            raise UpstreamError(FOREIGN_ANSWER)
        headers.append((b"content-length", str(len(answer)).encode("ascii")))
        status = response.status
        if exchange.refusals and not content:  # only notifications went up: 202, no body
            status, headers = 200, [(b"content-type", _JSON), headers[-1]]
        await state.start(status, headers)
        await state.finish(answer)

    async def _relay_events(
        self,
        response: UpstreamResponse,
        plan: _Plan,
        headers: list[tuple[bytes, bytes]],
        state: _Progress,
    ) -> None:
        exchange = plan.exchange
        events = EventStream(exchange.rewrite, exchange.dropped)
        clock = time.perf_counter
        await state.start(response.status, headers)
        send = state.send
        if exchange.refusals:  # answered first, as their own events
            first = _as_events(exchange.refusals)
            await send({"type": "http.response.body", "body": first, "more_body": True})
        while (chunk := await response.next_chunk()) is not None:
            started = clock()
            out = await events.afeed(chunk)
            plan.work += clock() - started
            if out:
                await send({"type": "http.response.body", "body": out, "more_body": True})
        last = await events.aclose()
        if exchange.foreign:  # the connection carried what this exchange never asked for
            response.discard()
        await state.finish(last + _as_events(exchange.missing_answers()))


class _Progress:
    """Whether the request's body has been read whole, whether the response has started (after
    that, a failure can only cut it short) and whether it is complete."""

    __slots__ = ("body_read", "complete", "send", "started")

    def __init__(self, send: Send) -> None:
        self.send = send
        self.body_read = False
        self.started = False
        self.complete = False

    async def start(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        self.started = True
        await self.send({"type": "http.response.start", "status": status, "headers": headers})

    async def finish(self, body: bytes) -> None:
        self.complete = True
        await self.send({"type": "http.response.body", "body": body})


class _ClientGone(Exception):
    """The client closed its connection before the answer was complete."""


class _Plan:
    """A request that passed inspection: what to send upstream, and the exchange it belongs to."""

    __slots__ = ("exchange", "forward", "headers", "method", "target", "work")

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
        #: seconds of the proxy's own work on this request so far (parse, open, rewrite)
        self.work = 0.0


#: How long a request runs before the proxy starts listening for its client's disconnect: most
#: answers come sooner, and watching costs a task; a stream or a slow tool outlives it.
WATCH_AFTER = 0.2


class _Watch:
    """Cancels the request's own task when its client disconnects before the answer is whole.

    A relay waiting on the upstream (a tool still working, a quiet event stream) learns nothing
    from a client that went away: once the request has run :data:`WATCH_AFTER` seconds, a task
    listens for ASGI's ``http.disconnect`` and cancels the relay, whose ``finally`` clauses
    then close the upstream connection at once. (The body has been read when it starts:
    ``receive`` has nothing else to deliver.)
    """

    __slots__ = ("gone", "state", "task", "timer", "watcher")

    def __init__(self, receive: Receive, state: _Progress) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.task = task
        self.state = state
        self.gone = False
        self.watcher: asyncio.Future[None] | None = None
        self.timer = asyncio.get_running_loop().call_later(WATCH_AFTER, self._start, receive)

    def _start(self, receive: Receive) -> None:
        if not self.state.complete:
            self.watcher = asyncio.ensure_future(self._watch(receive))

    async def _watch(self, receive: Receive) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        if not self.state.complete:  # uvicorn also says "disconnect" once the answer is whole
            self.gone = True
            self.task.cancel()

    def stop(self) -> None:
        self.timer.cancel()
        if self.watcher is not None:
            self.watcher.cancel()


def _target(scope: Scope) -> tuple[bytes, bytes]:
    """The request target as received and its path, if it is origin-form; else the refusal."""
    target = scope.get("extensions", {}).get(TARGET_EXTENSION)
    if target is None:  # h11 keeps the whole target before "?" in raw_path
        raw = scope.get("raw_path") or b""
        query = scope.get("query_string") or b""
        target = raw + b"?" + query if query else raw
    if not _ORIGIN_FORM.fullmatch(target):
        raise Refusal(
            400,
            INVALID_REQUEST,
            "the request target must be origin-form: /path or /path?query",
            "bad_target",
        )
    target = bytes(target)
    return target, target.partition(b"?")[0]


def _forwarded(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The request headers the upstream gets: end-to-end ones only, framing set by the proxy.
    A header the upstream takes one value of (the session, the protocol version, the
    credential) given twice is refused: one reader takes the first, another the last."""
    single: set[bytes] = set()
    for name, _ in headers:
        if name in _ONCE:
            if name in single:
                raise Refusal(
                    400,
                    INVALID_REQUEST,
                    f"the {name.decode()} header appears twice",
                    "header_twice",
                )
            single.add(name)
    out = [(name, value) for name, value in headers if name not in _NOT_FORWARDED]
    if any(name == b"connection" for name, _ in headers):
        listed = _options(v for n, v in headers if n == b"connection")
        out = [(name, value) for name, value in out if name not in listed]
    # both HTTP parsers refuse these in a header value; a value holding one would frame a second
    # request towards the upstream, so the proxy makes sure of it itself
    values = b"".join(value for _, value in out)
    if b"\r" in values or b"\n" in values or b"\x00" in values:
        raise Refusal(
            400, INVALID_REQUEST, "a header value holds a line break or NUL", "bad_header"
        )
    out.append((b"accept-encoding", b"identity"))
    return out


def _returned(response: UpstreamResponse) -> list[tuple[bytes, bytes]]:
    """The response headers the client gets (framing is the server's to set)."""
    out = [(n, v) for n, v in response.headers if n not in _NOT_FORWARDED]
    connection = response.values(b"connection")
    if connection:
        listed = _options(connection)
        out = [(n, v) for n, v in out if n not in listed]
    return out


def _options(values: Iterable[bytes]) -> set[bytes]:
    """Header names a Connection header lists: hop-by-hop too (RFC 9110 section 7.6.1)."""
    return {option.strip().lower() for value in values for option in value.split(b",")}


def _media_type(response: UpstreamResponse) -> bytes | None:
    """The media type of the upstream's answer (lower case, no parameters), or None for none.

    A Content-Type the proxy could read one way and a client another is an
    :class:`UpstreamError`: sent twice, listing two types, malformed, or naming a charset other
    than UTF-8 (which JSON and event streams always are).
    """
    values = response.values(b"content-type")
    if not values:
        return None
    if len(values) > 1:
        raise UpstreamError(f"the upstream sent Content-Type {len(values)} times")
    match = _CONTENT_TYPE.fullmatch(values[0])
    if match is None:
        raise UpstreamError("the upstream sent a malformed or list-valued Content-Type")
    for parameter in _PARAMETER.finditer(match.group(2)):
        name, value = parameter.group(1).lower(), parameter.group(2).strip(b'"').lower()
        if name == b"charset" and value not in (b"utf-8", b"utf8"):
            raise UpstreamError("the upstream's answer is not UTF-8")
    return match.group(1).lower()


def _check_body_meaning(headers: list[tuple[bytes, bytes]]) -> None:
    """Refuse (415) a POST whose body could be read another way than the proxy reads it.

    The proxy reads a body as UTF-8 JSON. A reader behind it may honour what the headers say
    instead: express.json() decodes the charset a Content-Type names (UTF-7 turns
    ``+AHI-equestState`` into ``requestState``) and inflates a Content-Encoding, Starlette's
    ``Request.json()`` sniffs UTF-16 and UTF-32. So a body is forwarded only when its meaning is
    fixed: one Content-Type, ``application/json`` with no parameter but at most one ``charset``
    that is ``utf-8`` (any case, quoted or not), and no Content-Encoding but ``identity``. (A
    Content-Type given twice is refused earlier, with the other single-valued headers.)
    """
    content_type = None
    for name, value in headers:
        if name == b"content-type":
            content_type = value  # given once: a second is refused with the single headers
        elif name == b"content-encoding" and value.strip(b" \t").lower() != b"identity":
            raise Refusal(
                415,
                INVALID_REQUEST,
                "the body must not be content-encoded (the proxy forwards only what it read)",
                "content_encoding",
            )
    if content_type == _JSON:  # the common spelling: nothing more to read
        return
    if content_type is None:
        raise Refusal(
            415, INVALID_REQUEST, "a POST body needs Content-Type: application/json", "media_type"
        )
    match = _CONTENT_TYPE.fullmatch(content_type)
    if match is None or match.group(1).lower() != _JSON:
        raise Refusal(
            415, INVALID_REQUEST, "the body must be Content-Type: application/json", "media_type"
        )
    charsets = 0
    for parameter in _PARAMETER.finditer(match.group(2)):
        name, value = parameter.group(1).lower(), parameter.group(2)
        if value[:1] == b'"':
            value = value[1:-1]  # a quoted-pair inside is not unquoted: it is refused below
        if name != b"charset" or value.lower() != b"utf-8":
            raise Refusal(
                415,
                INVALID_REQUEST,
                "the body must be application/json with no parameter but charset=utf-8",
                "media_type",
            )
        charsets += 1
    if charsets > 1:
        raise Refusal(415, INVALID_REQUEST, "the Content-Type names charset twice", "media_type")


async def _rewrite_answer(exchange: Exchange, content: bytes) -> Any:
    """The upstream's JSON answer (or empty body) with states sealed and the proxy's refusals
    merged in; :data:`DROP` for an answer to requests not this exchange's; an answer that is
    not strict JSON is an :class:`UpstreamError`."""
    text = content.strip(b" \t\r\n")
    message: Any = None
    if text:
        try:
            message = json_loads(text, max_depth=MAX_BODY_DEPTH)
        except EncodingError as err:
            raise UpstreamError(f"the upstream's answer is not strict JSON ({err})") from None
    rewritten = await exchange.rewrite(message) if text else None
    if rewritten is DROP:
        return DROP
    if exchange.refusals:
        items = rewritten if type(rewritten) is list else [] if rewritten is None else [rewritten]
        return encode_wire([*exchange.refusals, *items])
    if rewritten is message:
        return content
    return encode_wire(rewritten)


def _as_events(messages: list[dict[str, Any]]) -> bytes:
    return b"".join(b"data: " + encode_wire(m) + b"\n\n" for m in messages)


def _error(code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}


def _unusable_principal(why: str, reason: str) -> Refusal:
    """The refusal (400) of a request whose principal header the upstream could read otherwise
    than the proxy did, or not at all."""
    return Refusal(400, INVALID_REQUEST, why, reason)


def _extra_headers(refusal: Refusal) -> list[tuple[bytes, bytes]]:
    if refusal.status == 405:
        return [_ALLOW]
    if refusal.status == 401:
        return [(b"www-authenticate", b'Bearer realm="mcp"')]
    return []


async def _respond(send: Send, status: int, body: Any, headers: list[tuple[bytes, bytes]]) -> None:
    await send_whole(send, status, json.dumps(body, separators=(",", ":")).encode(), _JSON, headers)


async def send_whole(
    send: Send, status: int, body: bytes, kind: bytes, headers: Iterable[tuple[bytes, bytes]] = ()
) -> None:
    """An answer the proxy makes itself (a refusal, an admin page), sent whole: its content
    type and length, ``headers``, then the body."""
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", kind),
                (b"content-length", str(len(body)).encode("ascii")),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
