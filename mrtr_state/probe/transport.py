"""What the probe sends requests through: one small interface, two transports (Streamable HTTP
and stdio). The session above is handed one and never asks which.

A transport turns one JSON-RPC message into one :class:`Reply` within a deadline, or raises
:class:`~mrtr_state.errors.ProbeFailed` saying why it could not: unreachable, no answer in time,
an answer cut off or unreadable. A server's answer never escapes as another exception: the probe
must end with a reason, never a traceback, and never read a failure to answer as a refusal.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any, Protocol

from ..errors import ProbeFailed

__all__ = ["MAX_ANSWER_BYTES", "Deadline", "Reply", "Routing", "Transport", "shorten"]

#: The largest answer read (a state over SEP-2778's 64 KiB cap must still be seen whole).
MAX_ANSWER_BYTES = 4 << 20


def shorten(text: str, limit: int = 160) -> str:
    """``text`` cut to ``limit`` characters, marking the cut, for evidence lines."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


class Reply:
    """What one request got back.

    ``message`` is the JSON-RPC response to it (a dict with ``result`` or ``error``), or None when
    the server answered with an HTTP status and no JSON-RPC body (``status``, ``text``). ``text``
    is the answer as received (bounded), kept for evidence and for the error-leak check.
    """

    __slots__ = ("message", "status", "text")

    def __init__(self, message: dict[str, Any] | None, status: int | None, text: str) -> None:
        self.message = message
        self.status = status
        self.text = text

    def __repr__(self) -> str:
        return f"Reply(status={self.status!r}, message={shorten(repr(self.message))})"


class Routing:
    """What a request is, for transports that say it beside the body: the protocol version in
    force, the JSON-RPC method and the tool name (Streamable HTTP's ``MCP-Protocol-Version``,
    ``Mcp-Method`` and ``Mcp-Name`` headers)."""

    __slots__ = ("method", "modern", "name", "version")

    def __init__(self, version: str | None, method: str, name: str | None, modern: bool) -> None:
        self.version, self.method, self.name, self.modern = version, method, name, modern


class Transport(Protocol):
    """One request at a time to one server."""

    #: whether a second principal (``--other``) can be sent as; stdio has no principal headers
    has_other: bool
    #: what is being probed, for the report (a URL or the command)
    target: str

    def open(self, timeout: float) -> None:
        """Start or reach the server (a stdio server is started here)."""

    def request(
        self, message: dict[str, Any], routing: Routing, other: bool, timeout: float
    ) -> Reply:
        """Send a request and return the answer to it (as principal B when ``other``)."""

    def notify(self, message: dict[str, Any], routing: Routing, timeout: float) -> None:
        """Send a notification; an answer, if any, is read and dropped."""

    def close(self, timeout: float) -> None:
        """End the session (an HTTP session is deleted, a stdio server stopped)."""


class Deadline:
    """A request's whole time, from sending to the last byte read, however the server paces
    its bytes: at the deadline ``on_expiry`` cuts the connection (a socket shut, a pipe closed),
    so a read that would wait longer returns, and :attr:`expired` says why it did."""

    def __init__(self, seconds: float, on_expiry: Callable[[], None]) -> None:
        self.seconds = seconds
        self.expired = False
        self._on_expiry = on_expiry
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True

    def _expire(self) -> None:
        self.expired = True
        with contextlib.suppress(OSError):
            self._on_expiry()

    def __enter__(self) -> Deadline:
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()

    def failure(self, what: str) -> ProbeFailed:
        return ProbeFailed(f"no answer to {what} within {self.seconds:g}s (--timeout)")
