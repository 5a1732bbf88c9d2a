"""The MCP session the probe holds: the handshake, the request envelope, and the request bound.

The handshake is the SDK clients' (``mode='auto'``): ``server/discover`` at protocol 2026-07-28
first, and a server that answers it with that version is spoken to in the per-request era (no
session; every request carries the ``_meta`` envelope: protocol version, client info, client
capabilities). Any other answer falls back to ``initialize`` and ``notifications/initialized``
(with the ``Mcp-Session-Id`` and protocol version the server gives). Either way the client
capabilities (elicitation, sampling, roots) are declared in ``initialize`` and in
``_meta["io.modelcontextprotocol/clientCapabilities"]`` on every call.
"""

from __future__ import annotations

import itertools
from typing import Any

from ..about import package_version
from ..errors import ProbeFailed
from .transport import Reply, Routing, Transport, shorten

__all__ = [
    "CAPABILITIES",
    "MODERN_VERSION",
    "Budget",
    "BudgetSpent",
    "ServerInfo",
    "Session",
]

MODERN_VERSION = "2026-07-28"
HANDSHAKE_VERSION = "2025-11-25"
#: What the probe declares: it answers every kind of input request (see answers.py).
CAPABILITIES: dict[str, Any] = {"elicitation": {"form": {}, "url": {}}, "sampling": {}, "roots": {}}
_VERSION_KEY = "io.modelcontextprotocol/protocolVersion"
_INFO_KEY = "io.modelcontextprotocol/clientInfo"
_CAPS_KEY = "io.modelcontextprotocol/clientCapabilities"
_SERVER_INFO_KEY = "io.modelcontextprotocol/serverInfo"


class BudgetSpent(Exception):
    """The request bound (``--max-requests``) is reached: nothing more is sent."""


class Budget:
    """At most ``limit`` messages sent, counted as they go (``sent``)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.sent = 0

    def take(self) -> None:
        if self.sent >= self.limit:
            raise BudgetSpent
        self.sent += 1

    @property
    def left(self) -> int:
        return self.limit - self.sent


class ServerInfo:
    """Who answered: ``name`` and ``version`` from its handshake, the protocol in force."""

    __slots__ = ("name", "protocol", "version")

    def __init__(self, name: str | None, version: str | None, protocol: str) -> None:
        self.name, self.version, self.protocol = name, version, protocol

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version, "protocol": self.protocol}


def _client_info() -> dict[str, str]:
    return {"name": "mrtr-state-probe", "version": package_version()}


class Session:
    """One server, one handshake, then tool calls; every message counted against ``budget``."""

    def __init__(self, transport: Transport, budget: Budget, timeout: float) -> None:
        self.transport = transport
        self.budget = budget
        self.timeout = timeout
        self.modern = True
        self.version: str | None = MODERN_VERSION
        self.server: ServerInfo | None = None
        self._ids = itertools.count(1)

    # --- the handshake ---------------------------------------------------------------------

    def handshake(self) -> ServerInfo:
        self.transport.open(self.timeout)
        discover = self._send("server/discover", {"_meta": self._meta()})
        result = _result(discover)
        versions = result.get("supportedVersions") if result is not None else None
        if isinstance(versions, list) and MODERN_VERSION in versions:
            info = (result or {}).get("_meta", {})
            info = info.get(_SERVER_INFO_KEY) if isinstance(info, dict) else None
            self.server = _server(info, MODERN_VERSION)
            return self.server
        # not a 2026-07-28 server by its own word: the initialize handshake, as the SDKs fall back
        self.modern, self.version = False, None
        params = {
            "protocolVersion": HANDSHAKE_VERSION,
            "capabilities": CAPABILITIES,
            "clientInfo": _client_info(),
        }
        reply = self._send("initialize", params)
        result = _result(reply)
        agreed = result.get("protocolVersion") if result is not None else None
        if not isinstance(agreed, str) or not agreed:
            raise ProbeFailed(
                f"the handshake failed: {self.transport.target} answered neither server/discover "
                f"nor initialize ({describe(reply)})"
            )
        self.version = agreed
        self.server = _server(result.get("serverInfo") if result else None, agreed)
        self.budget.take()
        self.transport.notify(
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            Routing(self.version, "notifications/initialized", None, False),
            self.timeout,
        )
        return self.server

    # --- requests --------------------------------------------------------------------------

    def _meta(self) -> dict[str, Any]:
        meta: dict[str, Any] = {_INFO_KEY: _client_info(), _CAPS_KEY: CAPABILITIES}
        if self.modern:
            meta = {_VERSION_KEY: MODERN_VERSION, **meta}
        return meta

    def _send(
        self, method: str, params: dict[str, Any], other: bool = False, name: str | None = None
    ) -> Reply:
        self.budget.take()
        message = {"jsonrpc": "2.0", "id": next(self._ids), "method": method, "params": params}
        routing = Routing(self.version, method, name, self.modern)
        return self.transport.request(message, routing, other, self.timeout)

    def call(
        self,
        tool: str,
        arguments: dict[str, Any],
        *,
        state: str | None = None,
        responses: dict[str, Any] | None = None,
        other: bool = False,
    ) -> Reply:
        """``tools/call`` of ``tool``: a first round (no state), or a retry carrying ``state``
        and ``responses`` (as principal B when ``other``)."""
        params: dict[str, Any] = {"name": tool, "arguments": arguments, "_meta": self._meta()}
        if state is not None:
            params["requestState"] = state
            params["inputResponses"] = responses if responses is not None else {}
        return self._send("tools/call", params, other=other, name=tool)

    def close(self) -> None:
        if self.budget.left > 0 and getattr(self.transport, "session_id", None) is not None:
            self.budget.take()
        self.transport.close(self.timeout)


def _result(reply: Reply) -> dict[str, Any] | None:
    message = reply.message
    if message is None:
        return None
    result = message.get("result")
    return result if isinstance(result, dict) else None


def _server(info: Any, protocol: str) -> ServerInfo:
    if not isinstance(info, dict):
        return ServerInfo(None, None, protocol)
    name, version = info.get("name"), info.get("version")
    return ServerInfo(
        name if isinstance(name, str) else None,
        version if isinstance(version, str) and version else None,
        protocol,
    )


def describe(reply: Reply) -> str:
    """A reply in a few words, for evidence: its error, its result, or its HTTP status."""
    message = reply.message
    if message is not None and isinstance(message.get("error"), dict):
        error = message["error"]
        return shorten(f"error {error.get('code')}: {error.get('message')}", 200)
    if message is not None:
        return shorten("result " + _compact(message.get("result")), 200)
    return shorten(f"HTTP {reply.status}: {reply.text.strip() or 'no body'}", 200)


def _compact(value: Any) -> str:
    import json

    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(value)
