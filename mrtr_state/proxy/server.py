"""Serving the proxy with uvicorn, under either of its HTTP/1.1 parsers.

``httptools`` (llhttp, the parser of Node.js: the faster, and the default) or ``h11`` (pure
Python). The app refuses on its own whatever it does not handle, whichever parser
ran, and the tests attack it under both. One thing the app cannot see by itself: uvicorn's
httptools protocol keeps only the path of an absolute-form target (``POST http://other/x``), so
the protocol below hands the app the request target exactly as received, and the app refuses
every target that is not origin-form.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
import socket
from collections.abc import Callable, Iterator
from typing import Any, TextIO

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["TARGET_EXTENSION", "bind", "json_lines", "probe_once", "protocol_class", "serve"]

#: The ASGI scope extension holding the request target as received (bytes).
TARGET_EXTENSION = "mrtr_state.request_target"
PARSERS = ("httptools", "h11")


def _httptools_protocol() -> type[Any]:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class TargetKeepingHttpToolsProtocol(HttpToolsProtocol):
        """uvicorn's httptools protocol, recording the raw request target in the scope."""

        def on_headers_complete(self) -> None:
            # the scope dict is the one the request cycle will carry
            self.scope["extensions"] = {TARGET_EXTENSION: bytes(self.url)}  # type: ignore[dict-item]
            super().on_headers_complete()

    return TargetKeepingHttpToolsProtocol


def protocol_class(parser: str) -> type[Any]:
    """The uvicorn HTTP protocol class for ``parser``."""
    if parser not in PARSERS:
        raise ValueError(f"unknown HTTP parser {parser!r}; known: {', '.join(PARSERS)}")
    if parser == "h11":
        return H11Protocol
    return _httptools_protocol()


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


def json_lines(stream: TextIO) -> Callable[[dict[str, Any]], None]:
    """A log sink writing one JSON object per line to ``stream``."""

    def write(line: dict[str, Any]) -> None:
        stream.write(json.dumps(line, separators=(",", ":")) + "\n")
        stream.flush()

    return write


class _JsonLogHandler(logging.Handler):
    """uvicorn's own messages (a request its parser refused, a failed start) as JSON lines."""

    def __init__(self, sink: Callable[[dict[str, Any]], None]) -> None:
        super().__init__()
        self._sink = sink

    def emit(self, record: logging.LogRecord) -> None:
        event = "refused" if "Invalid HTTP request" in record.getMessage() else "server"
        if event == "refused":
            facts = {"status": 400, "reason": "the HTTP parser refused the request"}
        else:
            facts = {"level": record.levelname.lower(), "reason": record.getMessage()}
        self._sink({"event": event, **facts, "source": record.name})


def serve(
    app: Any,
    sock: socket.socket,
    *,
    parser: str = "httptools",
    log: Callable[[dict[str, Any]], None] | None = None,
    drain: int = 10,
    admin: Any = None,
    admin_sock: socket.socket | None = None,
) -> None:
    """Serve ``app`` on ``sock`` (and ``admin`` on ``admin_sock``) until SIGINT or SIGTERM,
    then stop accepting and give requests in flight (streams included) ``drain`` seconds to
    finish before closing them; the admin listener answers until the proxy is done (its
    ``/readyz`` says "shutting down" meanwhile)."""
    handler: logging.Handler
    if log is not None:
        handler = _JsonLogHandler(log)
    else:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("mrtr-state proxy: %(message)s"))
    for name in ("uvicorn", "mrtr_state"):
        logger = logging.getLogger(name)
        logger.handlers[:] = [handler]
        logger.setLevel(logging.WARNING)
        logger.propagate = False
    common: dict[str, Any] = {
        "ws": "none",
        "log_config": None,
        "access_log": False,
        "server_header": False,
        "date_header": False,
        "proxy_headers": False,
    }
    config = uvicorn.Config(
        app, http=protocol_class(parser), lifespan="on", timeout_graceful_shutdown=drain, **common
    )
    main = uvicorn.Server(config)

    async def run() -> None:
        side: asyncio.Task[None] | None = None
        admin_server: Any = None
        if admin is not None and admin_sock is not None:
            admin.draining = lambda: main.should_exit
            admin_config = uvicorn.Config(
                admin, http=protocol_class(parser), lifespan="off", **common
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
    # handler be a no-op, so that a drained proxy exits 0 (an orchestrator's normal stop).
    signal.signal(signal.SIGTERM, lambda number, frame: None)
    loop_factory = config.get_loop_factory()
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(run())


class _QuietServer(uvicorn.Server):
    """A uvicorn server that leaves signals to the proxy's own server (one handler each)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield
