"""The proxy's core: rewrite one JSON-RPC message, or one Server-Sent Event, at a time.

Outbound, a result with ``resultType: "input_required"`` has its ``requestState`` (whatever the
server put there, often plain base64 JSON) sealed into an ``aead`` token bound to the principal,
the request it answers (method, target and arguments digest) and a short lifetime. Inbound, a
retry's ``requestState`` is verified against the retry itself and replaced by the server's
original state; a refused one never reaches the server, and the client gets the uniform wire
error of :func:`mrtr_state.mcp.wire_error` while the log gets the specific reason.

Nothing here does I/O: the HTTP layer (:mod:`mrtr_state.proxy.app`) hands in parsed messages and
event bytes, so every rule is tested without a socket.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from .._encoding import b64url_decode
from ..errors import InvalidClaims, InvalidToken
from ..keyset import Keyset
from ..mcp import INPUT_REQUIRED_METHODS, open_retry, request_target, wire_error
from ..policy import DEFAULT_POLICY, Policy
from ..replay import ReplayStore
from ..tokens import issue

__all__ = [
    "EventStream",
    "Exchange",
    "StateGuard",
    "bearer_principal",
    "is_request",
]

#: One line per sealed, verified or refused state, for operators (``--json-log``).
LogSink = Callable[[dict[str, Any]], None]


def bearer_principal(authorization: str | None) -> str | None:
    """A principal for a bearer credential: a digest, so the credential itself is never stored.

    ``bearer:`` + b64url(SHA-256(credential)[:16]). Two requests with the same credential get the
    same principal; a token minted for one credential is refused with any other.
    """
    if not authorization:
        return None
    scheme, _, credential = authorization.strip().partition(" ")
    credential = credential.strip()
    if scheme.lower() != "bearer" or not credential:
        return None
    digest = hashlib.sha256(credential.encode("utf-8")).digest()[:16]
    return "bearer:" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def is_request(message: Any) -> bool:
    return isinstance(message, dict) and isinstance(message.get("method"), str)


def _is_response(message: Any) -> bool:
    return isinstance(message, dict) and "id" in message and "method" not in message


class StateGuard:
    """Seals the states a server emits and opens the ones clients send back.

    One guard serves the whole proxy; it keeps no per-request memory (the request a response
    answers is handed in by the caller), so it is safe to share across concurrent requests.
    """

    def __init__(
        self,
        keyset: Keyset,
        *,
        audience: str | None = None,
        ttl: int | None = None,
        policy: Policy = DEFAULT_POLICY,
        once: ReplayStore | None = None,
        log: LogSink | None = None,
    ) -> None:
        self.keyset = keyset
        self.audience = audience
        self.ttl = ttl
        self.policy = policy
        self.once = once
        self._log = log

    def _report(self, event: str, started: float, **facts: Any) -> None:
        if self._log is not None:
            latency = round((time.perf_counter() - started) * 1000, 3)
            self._log({"event": event, "format": "aead", **facts, "latency_ms": latency})

    # --- outbound ------------------------------------------------------------------------

    def seal_response(
        self, response: Any, request: Mapping[str, Any] | None, principal: str | None
    ) -> Any:
        """``response`` with its ``requestState`` sealed, if it is an input_required result.

        ``request`` is the request this response answers (matched by id by the caller). Without
        it the request binding cannot be made, and an unbound state would be refused on retry
        anyway, so the result is replaced by an error instead of leaking the server's state.
        """
        if not _is_response(response):
            return response
        result = response.get("result")
        if not (
            isinstance(result, dict)
            and result.get("resultType") == "input_required"
            and isinstance(result.get("requestState"), str)
        ):
            return response
        started = time.perf_counter()
        method = request.get("method") if request is not None else None
        if request is None or method not in INPUT_REQUIRED_METHODS:
            self._report("refused", started, result="error", reason="no matching request")
            return _error(response.get("id"), -32603, "the proxy could not bind requestState")
        params = request.get("params")
        target, arguments = request_target(method, params if isinstance(params, dict) else None)
        try:
            minted = issue(
                self.keyset,
                result["requestState"],
                principal=principal,
                audience=self.audience,
                ttl=self.ttl,
                policy=self.policy,
                format="aead",
                method=method,
                target=target,
                arguments=arguments,
            )
        except (ValueError, InvalidToken) as err:  # oversized state, no primary key...
            self._report("refused", started, result="error", reason=str(err), method=method)
            return _error(response.get("id"), -32603, "the proxy could not protect requestState")
        sealed = {**result, "requestState": minted.token}
        self._report("sealed", started, result="ok", kid=minted.kid, method=method)
        return {**response, "result": sealed}

    # --- inbound -------------------------------------------------------------------------

    def open_request(
        self, message: Any, principal: str | None
    ) -> tuple[Any | None, dict[str, Any] | None]:
        """``(message to forward, None)``, or ``(None, error response)`` for a refused state.

        Only the three methods that can answer input_required carry state; anything else, and
        a request without ``requestState``, passes as it is.
        """
        if not is_request(message) or message["method"] not in INPUT_REQUIRED_METHODS:
            return message, None
        params = message.get("params")
        if not isinstance(params, dict) or "requestState" not in params:
            return message, None
        started = time.perf_counter()
        method = message["method"]
        try:  # the retry's own method, target and arguments: never taken from the token
            state = open_retry(
                self.keyset,
                method=method,
                params=params,
                principal=principal,
                audience=self.audience,
                format="aead",
                once=self.once,
                policy=self.policy,
            )
            if not isinstance(state, str):
                raise InvalidClaims("the sealed state is not the server's string")
        except InvalidToken as err:
            self._report("refused", started, result=err.code, reason=str(err), method=method)
            if "id" not in message:  # a notification gets no answer; it is dropped
                return None, None
            return None, {"jsonrpc": "2.0", "id": message["id"], "error": wire_error(err)}
        kid = _kid_of(params["requestState"])
        self._report("verified", started, result="ok", kid=kid, method=method)
        return {**message, "params": {**params, "requestState": state}}, None


def _kid_of(token: str) -> str:
    """The key id of an aead token that verified: its first 4 bytes, from 8 base64 digits."""
    return b64url_decode(token[4:12])[:4].hex()


def _error(id_: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id_, "error": {"code": code, "message": message}}


def _id_key(value: Any) -> str:
    """A dictionary key for a JSON-RPC id of any JSON type (1 and "1" stay apart)."""
    return json.dumps(value, sort_keys=True)


class Exchange:
    """One HTTP POST through the proxy: its requests, what is forwarded, what is refused.

    Built from the parsed body (one message or a batch). :attr:`forward` is the body to send
    upstream (None when nothing is left to send), :attr:`refusals` the error responses the proxy
    answers itself, and :meth:`rewrite` seals the states in whatever comes back, matching each
    response to its request by id.
    """

    def __init__(self, guard: StateGuard, body: Any, principal: str | None) -> None:
        self.guard = guard
        self.principal = principal
        self.batch = isinstance(body, list)
        self.requests: dict[str, Mapping[str, Any]] = {}
        self.refusals: list[dict[str, Any]] = []
        self.changed = False
        kept: list[Any] = []
        for message in body if self.batch else [body]:
            if is_request(message) and "id" in message:
                self.requests[_id_key(message["id"])] = message
            opened, refusal = guard.open_request(message, principal)
            if refusal is not None:
                self.refusals.append(refusal)
            if opened is not message:
                self.changed = True
            if opened is not None:
                kept.append(opened)
        self.forward: Any | None
        if not kept:
            self.forward = None
        elif self.batch:
            self.forward = kept
        else:
            self.forward = kept[0]

    def rewrite(self, message: Any) -> Any:
        """A response (or batch of them) with every input_required state sealed."""
        if isinstance(message, list):
            out = [self.rewrite(item) for item in message]
            return message if all(a is b for a, b in zip(out, message, strict=True)) else out
        if not _is_response(message):
            return message
        request = self.requests.get(_id_key(message.get("id")))
        return self.guard.seal_response(message, request, self.principal)


# --- Server-Sent Events ------------------------------------------------------------------

# An event ends at a blank line; lines end with CRLF, LF or CR (the SSE specification). A CR
# at the very end of the buffer may be the first half of a CRLF, so it is never taken as an end.
_EVENT_END = re.compile(rb"(?:\r\n|\r(?!\n)|\n)(?:\r\n|\r(?!\n)|\n)")
_LINE = re.compile(rb"\r\n|\r|\n")


class EventStream:
    """Splits a ``text/event-stream`` into events as bytes arrive and rewrites their data.

    ``rewrite`` gets the parsed JSON of an event's ``data`` and returns it (the same object when
    nothing changed). An event whose data is not JSON, or is unchanged, goes out byte for byte;
    a rewritten one keeps its other fields (``id``, ``event``, ``retry``, comments) in order.
    """

    def __init__(self, rewrite: Callable[[Any], Any], *, max_event: int = 4 << 20) -> None:
        self._rewrite = rewrite
        self._buffer = b""
        self._max_event = max_event

    def feed(self, chunk: bytes) -> Iterator[bytes]:
        """The complete events (with their terminators) that ``chunk`` finishes."""
        self._buffer += chunk
        while True:
            end = _EVENT_END.search(self._buffer)
            if end is None or (end.end() == len(self._buffer) and self._buffer.endswith(b"\r")):
                break
            block, self._buffer = self._buffer[: end.end()], self._buffer[end.end() :]
            yield self._event(block, end.end() - end.start())
        if len(self._buffer) > self._max_event:  # a runaway event: pass it on unparsed
            block, self._buffer = self._buffer, b""
            yield block

    def close(self) -> bytes:
        """Whatever is left when the stream ends (an unterminated event, passed on as it is)."""
        rest, self._buffer = self._buffer, b""
        return rest

    def _event(self, block: bytes, terminator: int) -> bytes:
        body = block[:-terminator]
        lines = _LINE.split(body)
        data = [line[5:].removeprefix(b" ") for line in lines if line.startswith(b"data:")]
        if not data:
            return block
        try:
            message = json.loads(b"\n".join(data))
        except (ValueError, UnicodeDecodeError):
            return block
        rewritten = self._rewrite(message)
        if rewritten is message:
            return block
        out: list[bytes] = []
        wrote_data = False
        for line in lines:
            if line.startswith(b"data:"):
                if not wrote_data:
                    out.append(b"data: " + json.dumps(rewritten, separators=(",", ":")).encode())
                    wrote_data = True
            else:
                out.append(line)
        newline = b"\r\n" if b"\r\n" in block else b"\n"
        return newline.join(out) + newline + newline
