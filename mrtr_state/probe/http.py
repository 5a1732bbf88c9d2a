"""Streamable HTTP, as the MCP SDK clients speak it, on the standard library's ``http.client``.

Every request is a POST of one JSON-RPC message with ``Accept: application/json,
text/event-stream``; the answer is JSON, or an SSE stream read event by event until the response
to this request arrives (notifications and server requests in the stream are passed over). The
``Mcp-Session-Id`` a server hands out is sent back on every later request; the protocol version
in force goes in ``MCP-Protocol-Version``; in the 2026-07-28 era the method and tool name go in
``Mcp-Method`` and ``Mcp-Name`` too, as the SDK servers require.

One connection per request: nothing a server left unread on one can be read as the answer to
the next, and a connection cut at the deadline takes nothing else with it.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import re
import socket
import ssl
from typing import Any
from urllib.parse import urlsplit

from ..errors import ProbeFailed
from .transport import MAX_ANSWER_BYTES, Deadline, Reply, Routing, shorten

__all__ = ["HttpTransport", "check_url", "header_value"]

_HEADER_SAFE = re.compile(r"[\x21-\x7e](?:[\x20-\x7e]*[\x21-\x7e])?")
_SENTINEL = re.compile(r"=\?base64\?.*\?=")
_SSE_LINE = re.compile(rb"\r\n|\n|\r(?=[^\n])")
_SSE_END = re.compile(rb"\r\n|\n|\r")


def check_url(url: str) -> str:
    """``url`` if it is an http:// or https:// URL with a host, else ValueError."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(
            f"the server URL must be http:// or https:// with a host, e.g. "
            f"http://127.0.0.1:8000/mcp; got {url!r}"
        )
    if parts.username is not None or parts.password is not None:
        raise ValueError(
            "the server URL must not carry a user name or password (it is printed in reports): "
            "give credentials with --header 'Authorization: ...' or --header @FILE"
        )
    try:
        parts.port  # noqa: B018 (a port that is not a number raises here)
    except ValueError:
        raise ValueError(f"the server URL has a port that is not a number: {url!r}") from None
    return url


def header_value(value: str) -> str:
    """A value for ``Mcp-Name``: as it is when it survives an HTTP field, else the MCP
    ``=?base64?...?=`` form (non-ASCII, controls, surrounding spaces), as the SDKs write it."""
    if _HEADER_SAFE.fullmatch(value) and not _SENTINEL.fullmatch(value):
        return value
    return "=?base64?" + base64.b64encode(value.encode("utf-8")).decode("ascii") + "?="


class HttpTransport:
    """A Streamable HTTP endpoint, reached as principal A (``headers``) or B (``other``)."""

    def __init__(
        self,
        url: str,
        headers: list[tuple[str, str]],
        other: list[tuple[str, str]] | None,
    ) -> None:
        check_url(url)
        self.target = url
        parts = urlsplit(url)
        self._https = parts.scheme == "https"
        self._host = parts.hostname or ""
        self._port = parts.port
        self._path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self._headers = headers
        self._other = other
        self.has_other = other is not None
        self.session_id: str | None = None

    # --- the interface ---------------------------------------------------------------------

    def open(self, timeout: float) -> None:
        """Nothing to start: the first request finds out whether the server is there."""

    def request(
        self, message: dict[str, Any], routing: Routing, other: bool, timeout: float
    ) -> Reply:
        body = json.dumps(message, separators=(",", ":")).encode("utf-8")
        return self._exchange("POST", body, routing, other, timeout, message.get("id"))

    def notify(self, message: dict[str, Any], routing: Routing, timeout: float) -> None:
        body = json.dumps(message, separators=(",", ":")).encode("utf-8")
        self._exchange("POST", body, routing, False, timeout, None)

    def close(self, timeout: float) -> None:
        """Delete the session the server opened, if it opened one (failures are not the
        verdict's business: the probe is over)."""
        if self.session_id is None:
            return
        with contextlib.suppress(ProbeFailed):
            self._exchange("DELETE", b"", None, False, timeout, None)
        self.session_id = None

    # --- one exchange ----------------------------------------------------------------------

    def _fields(self, routing: Routing | None, other: bool, has_body: bool) -> dict[str, str]:
        fields = {"Accept": "application/json, text/event-stream"}
        if has_body:
            fields["Content-Type"] = "application/json"
        chosen = {name.lower(): (name, value) for name, value in self._headers}
        if other and self._other is not None:
            chosen.update((name.lower(), (name, value)) for name, value in self._other)
        fields.update(chosen.values())
        if routing is not None and routing.version is not None:
            fields["MCP-Protocol-Version"] = routing.version
            if routing.modern:
                fields["Mcp-Method"] = routing.method
                if routing.name is not None:
                    fields["Mcp-Name"] = header_value(routing.name)
        if self.session_id is not None:
            fields["Mcp-Session-Id"] = self.session_id
        return fields

    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        if self._https:
            return http.client.HTTPSConnection(
                self._host, self._port, timeout=timeout, context=ssl.create_default_context()
            )
        return http.client.HTTPConnection(self._host, self._port, timeout=timeout)

    def _exchange(
        self,
        verb: str,
        body: bytes,
        routing: Routing | None,
        other: bool,
        timeout: float,
        request_id: Any,
    ) -> Reply:
        what = f"{routing.method if routing else verb} at {self.target}"
        connection = self._connection(timeout)

        def cut() -> None:
            if connection.sock is not None:
                connection.sock.shutdown(socket.SHUT_RDWR)

        with Deadline(timeout, cut) as deadline:
            try:
                # reaching the server is judged apart from reading its answer, so a name that
                # does not resolve or a certificate refused is not reported as a cut-off answer
                try:
                    connection.connect()
                except OSError as err:
                    # a name that did not resolve says so, however long the resolver took
                    slow = isinstance(err, TimeoutError) or deadline.expired
                    if slow and not isinstance(err, socket.gaierror):
                        raise deadline.failure(what) from None
                    raise ProbeFailed(f"cannot reach {self.target}: {_unreached(err)}") from None
                connection.request(verb, self._path, body, self._fields(routing, other, bool(body)))
                response = connection.getresponse()
                return self._read(response, request_id, what)
            except ProbeFailed:
                if deadline.expired:
                    raise deadline.failure(what) from None
                raise
            except TimeoutError:
                raise deadline.failure(what) from None
            except (http.client.HTTPException, OSError, ValueError) as err:
                if deadline.expired:
                    raise deadline.failure(what) from None
                raise ProbeFailed(
                    f"the answer to {what} was cut off or unreadable: {_said(err)}"
                ) from None
            finally:
                connection.close()

    def _read(self, response: http.client.HTTPResponse, request_id: Any, what: str) -> Reply:
        session = response.getheader("Mcp-Session-Id")
        if session:
            self.session_id = session
        kind = (response.getheader("Content-Type") or "").split(";")[0].strip().lower()
        status = response.status
        if kind == "text/event-stream" and request_id is not None and 200 <= status < 300:
            return _from_stream(response, request_id, status, what)
        data = response.read(MAX_ANSWER_BYTES + 1)
        if len(data) > MAX_ANSWER_BYTES:
            raise ProbeFailed(f"the answer to {what} is over {MAX_ANSWER_BYTES} bytes")
        if response.length:  # a Content-Length the body fell short of: the server hung up
            raise ProbeFailed(
                f"the answer to {what} was cut off or unreadable: {len(data)} bytes of the "
                f"{len(data) + response.length} its Content-Length promised"
            )
        text = data.decode("utf-8", "replace")
        if request_id is None:  # a notification or DELETE: any 2xx will do
            if not 200 <= status < 300:
                raise ProbeFailed(f"{what} was answered with HTTP {status}: {shorten(text)}")
            return Reply(None, status, text)
        message = _response_in(data, request_id)
        if message is None and 200 <= status < 300:
            raise ProbeFailed(
                f"the answer to {what} (HTTP {status}) is not a JSON-RPC response to it: "
                f"{shorten(text) or 'an empty body'}"
            )
        return Reply(message, status, text)


def _unreached(err: OSError) -> str:
    """Why a connection could not be made, in the words an operator looks for."""
    if isinstance(err, ConnectionRefusedError):
        return "connection refused"
    if isinstance(err, socket.gaierror):
        return f"the host name does not resolve ({_said(err)})"
    if isinstance(err, ssl.SSLCertVerificationError):
        return f"its TLS certificate was refused ({err.verify_message or _said(err)})"
    if isinstance(err, ssl.SSLError):
        return f"the TLS handshake failed ({_said(err)})"
    return _said(err)


def _said(err: BaseException) -> str:
    text = str(err) or type(err).__name__
    return shorten(text, 120)


def _response_in(data: bytes, request_id: Any) -> dict[str, Any] | None:
    """The JSON-RPC response to ``request_id`` in a JSON body (an object, or a batch), else
    None. An error answering no id (a parse error, ``"id": null``) answers this request too."""
    try:
        document = json.loads(data)
    except (ValueError, RecursionError):
        return None
    for item in document if isinstance(document, list) else [document]:
        if _answers(item, request_id):
            return item  # type: ignore[no-any-return]
    return None


def _answers(item: Any, request_id: Any) -> bool:
    if not isinstance(item, dict) or "method" in item:
        return False
    if "result" in item:
        return bool(item.get("id") == request_id and isinstance(item["result"], dict))
    if "error" in item:
        return item.get("id") in (request_id, None) and isinstance(item["error"], dict)
    return False


def _from_stream(
    response: http.client.HTTPResponse, request_id: Any, status: int, what: str
) -> Reply:
    """Read SSE events (WHATWG framing: LF, CRLF or CR line ends) until one carries the response
    to ``request_id``; events that carry other messages are passed over."""
    pending = b""
    data_lines: list[bytes] = []
    seen = 0
    while True:
        chunk = response.read1(65536)
        seen += len(chunk)
        if seen > MAX_ANSWER_BYTES:
            raise ProbeFailed(f"the stream answering {what} is over {MAX_ANSWER_BYTES} bytes")
        ended = not chunk
        pending += chunk
        # a CR at the end may be the first half of a CRLF: it ends a line only at the end
        lines = (_SSE_END if ended else _SSE_LINE).split(pending)
        pending = lines.pop()
        if ended:  # an event the stream ended inside is still the server's word
            lines += [pending, b""] if pending else [b""]
        for line in lines:
            if not line:
                found = _event(data_lines, request_id)
                data_lines = []
                if found is not None:
                    return Reply(found, status, found_text(found))
            elif line.startswith(b"data:"):
                data_lines.append(line[5:].removeprefix(b" "))
            elif line == b"data":
                data_lines.append(b"")
        if ended:
            raise ProbeFailed(f"the stream answering {what} ended before the answer")


def found_text(message: dict[str, Any]) -> str:
    return json.dumps(message, separators=(",", ":"), ensure_ascii=False)


def _event(data_lines: list[bytes], request_id: Any) -> dict[str, Any] | None:
    if not data_lines:
        return None
    return _response_in(b"\n".join(data_lines), request_id)
