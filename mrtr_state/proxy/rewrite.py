"""The proxy's core: seal the states a server emits, open the ones clients send back.

Outbound, a result with ``resultType: "input_required"`` has its ``requestState`` (whatever the
server put there, often plain base64 JSON) sealed into an ``aead`` token bound to the principal,
the request it answers (method, target and arguments digest) and a short lifetime. A state that
cannot be sealed (no request to bind it to, not a string, too large, outside an
``input_required`` result) is replaced by a JSON-RPC error: the server's plain state never
reaches the client. Inbound, a retry's ``requestState`` is verified against the retry itself and
replaced by the server's original state; a refused one never reaches the server, and the client
gets the uniform wire error of :func:`mrtr_state.mcp.wire_error` while the log gets the reason.

Nothing here does I/O: the HTTP layer (:mod:`mrtr_state.proxy.app`) hands in parsed messages
(already checked by :mod:`mrtr_state.proxy.jsonrpc`), so every rule is tested without a socket.
"""

from __future__ import annotations

import base64
import hashlib
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from .._encoding import b64url_decode, encode_wire
from ..errors import InvalidClaims, InvalidToken, MalformedToken
from ..keyset import Keyset
from ..mcp import INPUT_REQUIRED_METHODS, open_retry, request_target, wire_error
from ..policy import DEFAULT_POLICY, Policy
from ..replay import ReplayStore
from ..tokens import issue
from .jsonrpc import Body, Refusal, ambiguous_member, id_key

if TYPE_CHECKING:
    from .metrics import ProxyMetrics

__all__ = [
    "Exchange",
    "LogSink",
    "StateGuard",
    "bearer_principal",
    "is_request",
]

#: One line per sealed, verified or refused state, for operators (``--json-log``).
LogSink = Callable[[dict[str, Any]], None]
Clock = Callable[[], float]


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
    digest = hashlib.sha256(credential.encode("utf-8", "surrogateescape")).digest()[:16]
    return "bearer:" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def is_request(message: Any) -> bool:
    return type(message) is dict and type(message.get("method")) is str


def _is_response(message: Any) -> bool:
    return type(message) is dict and "id" in message and "method" not in message


def _error(id_: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id_, "error": {"code": code, "message": message}}


UNPROTECTED = "the proxy could not protect requestState"
#: "the configured audience", where a caller states none (None states "no audience")
_CONFIGURED: Any = object()
#: The name each logged event is counted under.
_COUNTED = {"verified": "opened"}


class StateGuard:
    """Seals the states a server emits and opens the ones clients send back.

    One guard serves the whole proxy; it keeps no per-request memory (the request a response
    answers is handed in by the caller), so it is safe to share across concurrent requests.
    ``clock`` gives the time for minting and verifying (tests pass a fake one).
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
        clock: Clock = time.time,
        metrics: ProxyMetrics | None = None,
    ) -> None:
        self.keyset = keyset
        self.audience = audience
        self.ttl = ttl
        self.policy = policy
        self.once = once
        self.clock = clock
        self.metrics = metrics
        self._log = log

    def report(self, event: str, started: float, result: str, **facts: Any) -> None:
        """A state sealed, verified or refused: one log line (when logging), with the time spent
        since ``started``, and its count (when counting). ``result`` is ``ok`` or a short code."""
        if self.metrics is not None:
            self.metrics.state(_COUNTED.get(event, event), "aead", result)
        if self._log is not None:
            latency = round((time.perf_counter() - started) * 1000, 3)
            line = {"event": event, "format": "aead", "result": result, **facts}
            self._log({**line, "latency_ms": latency})

    def audience_for(self, path: str) -> str:
        """The audience a state issued on ``path`` is bound to: the configured audience followed
        by the path (``https://mcp.example.com`` on ``/mcp``: ``https://mcp.example.com/mcp``),
        or the path alone. A state issued on one path is refused on any other, so one proxy
        (or one keyset) serving two endpoints keeps their states apart."""
        return path if self.audience is None else self.audience + path

    def note(self, **facts: Any) -> None:
        """One log line about a request (when logging): a refusal, a client gone, an error."""
        if self._log is not None:
            self._log(facts)

    # --- outbound ------------------------------------------------------------------------

    def seal_response(
        self,
        response: Any,
        request: Mapping[str, Any] | None,
        principal: str | None,
        audience: str | None = _CONFIGURED,
    ) -> Any:
        """``response`` with its ``requestState`` sealed, if it carries one; else as it is.

        ``request`` is the request this response answers (matched by id by the caller). A
        state that cannot be sealed and bound to it is replaced by an error, never passed on.
        ``audience``: what the state is bound to (the HTTP layer passes
        :meth:`audience_for` the request's path); by default the configured audience.
        """
        if not _is_response(response):
            return response
        result = response.get("result")
        odd = ambiguous_member(response, "message")
        if odd is None and type(result) is dict:
            odd = ambiguous_member(result, "result")
            if odd is None and "requestState" not in result:
                return response
        elif odd is None:
            return response
        started = time.perf_counter()
        method = request.get("method") if request is not None else None
        why = _unsealable(result, odd, method)
        if (
            why is not None
            or request is None
            or type(result) is not dict
            or type(method) is not str
        ):
            code, reason = why or ("no_matching_request", "no matching request")
            self.report("refused", started, code, reason=reason, method=method)
            return _error(response.get("id"), -32603, UNPROTECTED)
        params = request.get("params")
        target, arguments = request_target(method, params if type(params) is dict else None)
        try:
            minted = issue(
                self.keyset,
                result["requestState"],
                principal=principal,
                audience=self.audience if audience is _CONFIGURED else audience,
                ttl=self.ttl,
                policy=self.policy,
                format="aead",
                method=method,
                target=target,
                arguments=arguments,
                now=self.clock(),
            )
        except (ValueError, InvalidToken) as err:  # oversized state, no primary key...
            self.report("refused", started, "unsealable", reason=str(err), method=method)
            return _error(response.get("id"), -32603, UNPROTECTED)
        sealed = {**result, "requestState": minted.token}
        self.report("sealed", started, "ok", kid=minted.kid, method=method)
        return {**response, "result": sealed}

    # --- inbound -------------------------------------------------------------------------

    def open_request(
        self, message: Any, principal: str | None, audience: str | None = _CONFIGURED
    ) -> tuple[Any | None, dict[str, Any] | None]:
        """``(message to forward, None)``, or ``(None, error response)`` for a refused state.

        A request without ``requestState`` passes as it is. Notifications never carry one here:
        :func:`mrtr_state.proxy.jsonrpc.parse_body` refuses them. ``audience`` as for
        :meth:`seal_response`.
        """
        if not is_request(message):
            return message, None
        params = message.get("params")
        if type(params) is not dict or "requestState" not in params:
            return message, None
        started = time.perf_counter()
        method = message["method"]
        try:
            if method not in INPUT_REQUIRED_METHODS:
                raise MalformedToken(f"{method} cannot carry a requestState")
            # the retry's own method, target and arguments: never taken from the token
            state = open_retry(
                self.keyset,
                method=method,
                params=params,
                principal=principal,
                audience=self.audience if audience is _CONFIGURED else audience,
                format="aead",
                once=self.once,
                policy=self.policy,
                now=self.clock(),
            )
            if type(state) is not str:
                raise InvalidClaims("the sealed state is not the server's string")
        except InvalidToken as err:
            self.report("refused", started, err.code, reason=str(err), method=method)
            return None, {"jsonrpc": "2.0", "id": message.get("id"), "error": wire_error(err)}
        kid = _kid_of(params["requestState"])
        self.report("verified", started, "ok", kid=kid, method=method)
        return {**message, "params": {**params, "requestState": state}}, None


def _unsealable(result: Any, odd: str | None, method: Any) -> tuple[str, str] | None:
    """(code, reason) why the state in ``result`` cannot be sealed for a request of ``method``,
    or None."""
    if odd is not None:
        return (
            "ambiguous_member",
            f"the response has a member {odd!r} (a case variant of one the proxy reads)",
        )
    if type(result) is not dict:
        return "no_result", "no result"
    if result.get("resultType") != "input_required":
        return "outside_input_required", "requestState outside an input_required result"
    if type(result["requestState"]) is not str:
        return "not_a_string", "requestState is not a string"
    if method not in INPUT_REQUIRED_METHODS:
        return "no_matching_request", "no matching request"
    return None


def _kid_of(token: str) -> str:
    """The key id of an aead token that verified: its first 4 bytes, from 8 base64 digits."""
    return b64url_decode(token[4:12])[:4].hex()


class Exchange:
    """One HTTP request through the proxy: its requests, what is forwarded, what is refused.

    Built from a checked POST body (or from nothing, for a GET stream). :attr:`forward` is the
    list of messages to send upstream, :attr:`refusals` the error responses the proxy answers
    itself, and :meth:`rewrite` seals the states in whatever comes back, matching each response
    to its request by id. When the event stream drops an event it cannot inspect,
    :meth:`missing_answers` answers the requests that were left without a response.
    """

    def __init__(
        self,
        guard: StateGuard,
        body: Body | None,
        principal: str | None,
        audience: str | None = _CONFIGURED,
    ) -> None:
        self.guard = guard
        self.principal = principal
        self.audience = audience
        self.batch = body is not None and body.batch
        self.requests: dict[tuple[str, Any], Mapping[str, Any]] = {}
        self.refusals: list[dict[str, Any]] = []
        self.changed = False
        self.forward: list[Any] = []
        self._answered: set[tuple[str, Any]] = set()
        self._dropped = 0
        for message in body.messages if body is not None else ():
            opened, refusal = guard.open_request(message, principal, audience)
            if refusal is not None:
                self.refusals.append(refusal)
                self.changed = True
                continue
            if opened is not message:
                self.changed = True
            if is_request(message) and "id" in message:
                self.requests[id_key(message["id"])] = message
            self.forward.append(opened)

    def forward_body(self, original: bytes) -> bytes | None:
        """The body to send upstream: the original bytes when nothing changed; None when every
        message was refused."""
        if not self.forward:
            return None
        if not self.changed:
            return original
        return encode_wire(self.forward if self.batch else self.forward[0])

    def rewrite(self, message: Any) -> Any:
        """A response (or batch of them) with every state sealed, or replaced by an error."""
        if type(message) is list:
            out = [self.rewrite(item) for item in message]
            return message if all(a is b for a, b in zip(out, message, strict=True)) else out
        if not _is_response(message):
            return message
        try:
            key: tuple[str, Any] | None = id_key(message["id"])
        except Refusal:
            key = None
        request = self.requests.get(key) if key is not None else None
        if key is not None and request is not None:
            self._answered.add(key)
        return self.guard.seal_response(message, request, self.principal, self.audience)

    def dropped(self, reason: str) -> None:
        """An event the stream could not inspect was dropped (it never reached the client)."""
        self._dropped += 1
        self.guard.report("refused", time.perf_counter(), "event_dropped", reason=reason)

    def missing_answers(self) -> list[dict[str, Any]]:
        """After a dropped event: an error for each request that got no response."""
        if not self._dropped:
            return []
        return [
            _error(request.get("id"), -32603, UNPROTECTED)
            for key, request in self.requests.items()
            if key not in self._answered
        ]
