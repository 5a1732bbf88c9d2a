"""Serving the proxy with uvicorn, under either of its HTTP/1.1 parsers.

``httptools`` (llhttp, the parser of Node.js: the faster, and the default) or ``h11`` (pure
Python). Neither is trusted with framing: the protocols below put
:class:`~mrtr_state.proxy.framing.RequestFramer` between the socket and the parser, so the parser
only ever reads requests whose framing has one reading, and a refused request is answered (after
the answers owed to the requests before it) and its connection closed. The app refuses on its
own whatever it does not handle, whichever parser ran, and the tests attack it under both.

Two things the app cannot see by itself, handed to it here: uvicorn's httptools protocol keeps
only the path of an absolute-form target (``POST http://other/x``), so the request target is
recorded exactly as received, and the app refuses every target that is not origin-form; and
that protocol adds fields read after the head to the list the scope's headers are, so the scope
gets its own copy of the header section, taken when the head ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
import socket
from collections.abc import Callable, Iterator
from http import HTTPStatus
from typing import Any

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from .framing import MAX_HEAD, METHODS, FramingRefusal, RequestFramer

__all__ = [
    "TARGET_EXTENSION",
    "UVICORN_RANGE",
    "bind",
    "check_uvicorn",
    "hold_sigterm",
    "probe_once",
    "protocol_class",
    "serve",
]

#: The uvicorn releases the proxy is tested on (lowest and highest, in CI): it extends two of
#: uvicorn's protocol classes, which are not a public interface.
UVICORN_RANGE = ((0, 36), (0, 56))  # >=0.36, <0.56
#: What the proxy overrides or reads of uvicorn's protocols and server, by class.
_HOOKS = {
    "uvicorn.protocols.http.h11_impl.H11Protocol": (
        "connection_made",
        "connection_lost",
        "data_received",
        "on_response_complete",
    ),
    "uvicorn.protocols.http.httptools_impl.HttpToolsProtocol": (
        "connection_made",
        "connection_lost",
        "data_received",
        "on_response_complete",
        "on_headers_complete",
    ),
    "uvicorn.Config": ("get_loop_factory",),
    "uvicorn.Server": ("capture_signals", "serve"),
}


def check_uvicorn() -> str | None:
    """Why the installed uvicorn cannot run the proxy, naming the range it is tested on (every
    hook it extends must be there), or None; a release outside the range that has every hook is
    let run (see :func:`uvicorn_untested`)."""
    import importlib

    wanted = f"uvicorn>={_shown(UVICORN_RANGE[0])},<{_shown(UVICORN_RANGE[1])}"
    for dotted, names in _HOOKS.items():
        module, _, name = dotted.rpartition(".")
        try:
            found = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):
            found = None
        missing = [hook for hook in names if not hasattr(found, hook)]
        if found is None or missing:
            what = f"{dotted}.{missing[0]}" if found is not None and missing else dotted
            return (
                f"the proxy extends uvicorn's HTTP protocols, tested on {wanted}; uvicorn "
                f"{uvicorn.__version__} has no {what}: pip install '{wanted}'"
            )
    return None


def uvicorn_untested() -> str | None:
    """A warning when the installed uvicorn lies outside the range the proxy is tested on."""
    parts = tuple(int(p) for p in uvicorn.__version__.split(".")[:2] if p.isdigit())
    if UVICORN_RANGE[0] <= parts < UVICORN_RANGE[1]:
        return None
    return (
        f"uvicorn {uvicorn.__version__} is outside the range the proxy is tested on "
        f"(>={_shown(UVICORN_RANGE[0])},<{_shown(UVICORN_RANGE[1])})"
    )


def _shown(version: tuple[int, int]) -> str:
    return ".".join(map(str, version))


#: The methods the admin listener serves: HEAD as GET, without a body (a load balancer's probe).
ADMIN_METHODS = (b"GET", b"HEAD")
#: The ASGI scope extension holding the request target as received (bytes).
TARGET_EXTENSION = "mrtr_state.request_target"
PARSERS = ("httptools", "h11")
#: Told of each request the framer refused (the app logs and counts it).
OnRefused = Callable[[FramingRefusal], None]
#: How long a new connection may take to send its first request head, in seconds.
HEAD_TIMEOUT = 10.0
#: How long a request's body may take to arrive once its head has, in seconds.
BODY_TIMEOUT = 30.0


class _Framed:
    """What the proxy adds to a uvicorn HTTP protocol: the strict framer in front of its parser.

    Mixed in before the protocol class, so ``super()`` is uvicorn's. A refused request is
    answered only once every request before it has its answer (the parser may still be
    serving them, pipelined), then the connection is closed; what follows it is never read.
    """

    max_body: int = 0
    methods: tuple[bytes, ...] = METHODS
    head_timeout: float = HEAD_TIMEOUT
    body_timeout: float = BODY_TIMEOUT
    on_refused: OnRefused | None = None
    # provided by the uvicorn protocol this is mixed into
    transport: Any
    cycle: Any

    def connection_made(self, transport: Any) -> None:
        self._framer = RequestFramer(self.max_body, self.methods)
        self._answered = 0
        # a new connection has HEAD_TIMEOUT seconds to send its first head (uvicorn times only
        # the idle time after an answer, which the keep-alive timer covers)
        self._head_timer: Any = asyncio.get_running_loop().call_later(
            self.head_timeout, self._head_timed_out
        )
        #: set while a request's head has been handed on and its body has not all come
        self._body_timer: asyncio.TimerHandle | None = None
        super().connection_made(transport)  # type: ignore[misc]

    def connection_lost(self, exc: Exception | None) -> None:
        self._head_timer.cancel()
        if self._body_timer is not None:
            self._body_timer.cancel()
        super().connection_lost(exc)  # type: ignore[misc]

    def data_received(self, data: bytes) -> None:
        framer = self._framer
        if framer.closed:
            return
        passed = framer.feed(data)
        if passed:  # uvicorn's own call stops the keep-alive timer: only for a request's bytes,
            # so that empty lines sent now and then cannot hold a connection open for ever
            self._head_timer.cancel()
            super().data_received(passed)  # type: ignore[misc]
        if framer.refusal is not None:
            self._head_timer.cancel()
            if self.on_refused is not None:
                self.on_refused(framer.refusal)
            self._answer_refusal()
        elif framer.partial:  # a body still to come: it has body_timeout seconds in all
            if self._body_timer is None:
                self._body_timer = asyncio.get_running_loop().call_later(
                    self.body_timeout, self._body_timed_out
                )
        elif self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None

    def _body_timed_out(self) -> None:
        """A body did not arrive whole in time: answer 408 and close (a client dripping a byte
        at a time would otherwise hold the connection, and a descriptor, for ever)."""
        self._body_timer = None
        framer = self._framer
        if not framer.partial or framer.closed or self.transport.is_closing():
            return
        refusal = FramingRefusal(408, "body_timeout", "the request body did not come in time")
        framer.refuse(refusal)
        if self.on_refused is not None:
            self.on_refused(refusal)
        self._answer_refusal()

    def _head_timed_out(self) -> None:
        """No request began in time on a new connection: answer 408 and close it."""
        if self._framer.begun or self.transport.is_closing():
            return
        refusal = FramingRefusal(408, "head_timeout", "no request came in time")
        self._framer.refuse(refusal)
        if self.on_refused is not None:
            self.on_refused(refusal)
        self._answer_refusal()

    def on_response_complete(self) -> None:
        self._answered += 1
        super().on_response_complete()  # type: ignore[misc]
        if self._framer.refusal is not None:
            self._answer_refusal()

    def _answer_refusal(self) -> None:
        transport = self.transport
        framer = self._framer
        refusal = framer.refusal
        if refusal is None or transport.is_closing() or self._answered < framer.complete:
            return  # closed already, or answers are still owed to the requests before it
        answered_it = self._answered > framer.complete  # the app answered it before its end
        cycle = self.cycle
        if (
            framer.partial
            and not answered_it
            and cycle is not None
            and cycle.response_started
            and not cycle.response_complete
        ):
            return  # its answer is being written: wait for its end, then close
        if not answered_it:
            transport.write(_refusal_response(refusal, self.methods))
        transport.close()


def _refusal_response(refusal: FramingRefusal, allow: tuple[bytes, ...] = METHODS) -> bytes:
    body = json.dumps(
        {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": refusal.reason}},
        separators=(",", ":"),
    ).encode()
    status = HTTPStatus(refusal.status)
    extra = b"allow: " + b", ".join(allow) + b"\r\n" if refusal.status == 405 else b""
    return (
        b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
        b"connection: close\r\n%s\r\n%s"
        % (refusal.status, status.phrase.encode("ascii"), len(body), extra, body)
    )


def _httptools_protocol() -> type[Any]:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class FramedHttpToolsProtocol(_Framed, HttpToolsProtocol):
        """uvicorn's httptools protocol behind the framer, recording the raw request target
        and a copy of the header section in the scope."""

        def on_headers_complete(self) -> None:
            # the scope dict is the one the request cycle will carry
            self.scope["extensions"] = {TARGET_EXTENSION: bytes(self.url)}  # type: ignore[dict-item]
            self.scope["headers"] = list(self.headers)
            super().on_headers_complete()

    return FramedHttpToolsProtocol


class _FramedH11Protocol(_Framed, H11Protocol):
    """uvicorn's h11 protocol behind the framer."""


def protocol_class(
    parser: str,
    *,
    max_body: int = 4 << 20,
    on_refused: OnRefused | None = None,
    head_timeout: float = HEAD_TIMEOUT,
    body_timeout: float = BODY_TIMEOUT,
    methods: tuple[bytes, ...] = METHODS,
) -> type[Any]:
    """The uvicorn HTTP protocol class for ``parser``, behind the strict framer: bodies over
    ``max_body`` are refused (413) before they are read, a new connection that sends no
    request head within ``head_timeout`` seconds, or a request whose body has not all come
    ``body_timeout`` seconds after its head, is answered 408 and closed; ``on_refused`` hears
    of each refusal."""
    if parser not in PARSERS:
        raise ValueError(f"unknown HTTP parser {parser!r}; known: {', '.join(PARSERS)}")
    base = _FramedH11Protocol if parser == "h11" else _httptools_protocol()
    settings = {
        "max_body": max_body,
        "on_refused": staticmethod(on_refused) if on_refused else None,
        "head_timeout": head_timeout,
        "body_timeout": body_timeout,
        "methods": methods,
    }
    return type(base.__name__, (base,), settings)


def bind(host: str, port: int) -> socket.socket:
    """A listening socket for ``host:port`` (IPv4 or IPv6); ``OSError`` says why not.

    Bound here rather than by uvicorn, so that an address in use is one clear error before
    anything starts, instead of a log line and an exit code of uvicorn's choosing.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def probe_once(upstream: Any) -> str | None:
    """Whether the upstream answers a connection now (before the proxy's own loop runs)."""
    found: str | None = asyncio.run(upstream.probe())
    return found


class _JsonLogHandler(logging.Handler):
    """uvicorn's own messages (a request its parser refused, a failed start) as JSON lines."""

    def __init__(self, sink: Callable[[dict[str, Any]], None]) -> None:
        super().__init__()
        self._sink = sink

    def emit(self, record: logging.LogRecord) -> None:
        named = getattr(record, "event", None)
        if isinstance(named, str):  # a record naming its event (the keyset's reloads) and facts
            level = "error" if record.levelno >= logging.ERROR else record.levelname.lower()
            self._sink({"event": named, "level": level, **getattr(record, "facts", {})})
            return
        event = "refused" if "Invalid HTTP request" in record.getMessage() else "server"
        if event == "refused":
            facts: dict[str, Any] = {"status": 400, "reason": "the HTTP parser refused the request"}
        else:
            level = "error" if record.levelno >= logging.ERROR else "warning"
            facts = {"level": level, "reason": record.getMessage()}
        self._sink({"event": event, **facts, "source": record.name})


#: Whether a SIGTERM came while the proxy was starting (see :func:`hold_sigterm`).
_stop_asked = [False]


def hold_sigterm() -> None:
    """From now on, a SIGTERM asks the proxy to stop once it serves, rather than killing it
    half-started: an orchestrator stopping a pod during start-up still sees exit 0."""
    signal.signal(signal.SIGTERM, lambda number, frame: _stop_asked.__setitem__(0, True))


def serve(
    app: Any,
    sock: socket.socket,
    *,
    parser: str = "httptools",
    log: Callable[[dict[str, Any]], None] | None = None,
    drain: int = 10,
    admin: Any = None,
    admin_sock: socket.socket | None = None,
    head_timeout: float = HEAD_TIMEOUT,
    body_timeout: float = BODY_TIMEOUT,
) -> None:
    """Serve ``app`` (a :class:`~mrtr_state.proxy.app.ProxyApp`) on ``sock`` (and ``admin``
    on ``admin_sock``) until SIGINT or SIGTERM, then stop accepting and give requests in flight
    (streams included) ``drain`` seconds to finish before closing them; the admin listener
    answers until the proxy is done (its ``/readyz`` says "shutting down" meanwhile)."""
    handler: logging.Handler
    if log is not None:
        handler = _JsonLogHandler(log)
    else:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("mrtr-state proxy: %(message)s"))
    # mrtr_state's info records too: a keyset reloaded is said, as a failed reload is
    for name, least in (("uvicorn", logging.WARNING), ("mrtr_state", logging.INFO)):
        logger = logging.getLogger(name)
        logger.handlers[:] = [handler]
        logger.setLevel(least)
        logger.propagate = False
    common: dict[str, Any] = {
        "ws": "none",
        "log_config": None,
        "access_log": False,
        "server_header": False,
        "date_header": False,
        "proxy_headers": False,
    }
    # h11 refuses a head past its own limit; let it be the framer's, so both parsers agree
    common["h11_max_incomplete_event_size"] = MAX_HEAD + 1
    protocol = protocol_class(
        parser,
        max_body=app.max_body,
        on_refused=app.framing_refused,
        head_timeout=head_timeout,
        body_timeout=body_timeout,
    )
    config = uvicorn.Config(
        app, http=protocol, lifespan="on", timeout_graceful_shutdown=drain, **common
    )
    main = uvicorn.Server(config)

    async def run() -> None:
        side: asyncio.Task[None] | None = None
        admin_server: Any = None
        if admin is not None and admin_sock is not None:
            admin.draining = lambda: main.should_exit
            # the admin listener serves GETs: no body at all
            admin_config = uvicorn.Config(
                admin,
                http=protocol_class(parser, max_body=0, methods=ADMIN_METHODS),
                lifespan="off",
                **common,
            )
            admin_server = _QuietServer(admin_config)
            side = asyncio.ensure_future(admin_server.serve(sockets=[admin_sock]))
        try:
            await main.serve(sockets=[sock])
        finally:
            if admin_server is not None and side is not None:
                admin_server.should_exit = True
                await side

    # uvicorn stops on SIGTERM, then raises the signal again for the handler it found: let that
    # handler ask for the stop itself (not kill the process), so that a drained proxy exits 0
    # (an orchestrator's normal stop), and a SIGTERM that comes before uvicorn's own handler is
    # in place is not lost: the server then stops as soon as it has started.
    main.should_exit = _stop_asked[0]
    signal.signal(signal.SIGTERM, lambda number, frame: setattr(main, "should_exit", True))
    loop_factory = config.get_loop_factory()
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(run())


class _QuietServer(uvicorn.Server):
    """A uvicorn server that leaves signals to the proxy's own server (one handler each)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield
