"""The proxy's core: seal the states a server emits, open the ones clients send back.

Outbound, a result with ``resultType: "input_required"`` has its ``requestState`` (whatever the
server put there, often plain base64 JSON) sealed by the proxy's state backend
(:mod:`mrtr_state.state`: an ``aead`` token, or a record in a store behind a handle) bound to the
principal, the request it answers (method, target and arguments digest) and a short lifetime. A
state that cannot be sealed (no request to bind it to, not a string, too large, outside an
``input_required`` result, a store that is down) is replaced by a JSON-RPC error: the server's
plain state never reaches the client. Inbound, a retry's ``requestState`` is opened against the
retry itself and replaced by the server's original state; a refused one never reaches the
server, and the client gets the uniform wire error of :func:`mrtr_state.sdk.mcp.wire_error` while
the log gets the reason. A store that cannot be reached answers the retry with its own id
(-32603), never forwarded.

The guard is handed one backend and never asks which: both kinds of state go through
``backend.seal`` and ``backend.open``, awaited (a store is reached without stalling the event
loop). Nothing else here does I/O: the HTTP layer (:mod:`mrtr_state.proxy.app`) hands in parsed
messages (already checked by :mod:`mrtr_state.proxy.jsonrpc`).
"""

from __future__ import annotations

import base64
import hashlib
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from .._encoding import encode_wire
from ..errors import (
    InvalidClaims,
    InvalidToken,
    MalformedToken,
    ReplayStoreError,
    StateStoreError,
)
from ..sdk.mcp import INPUT_REQUIRED_METHODS, request_target, retry_binding, wire_error
from ..tokens.binding import binding_of
from .jsonrpc import Body, Refusal, ambiguous_member, id_key
from .sse import DROP  # what :meth:`Exchange.rewrite` returns for a message not to pass on

if TYPE_CHECKING:
    from ..keys.keyset import Keyset
    from ..state.backend import StateBackend
    from .metrics import ProxyMetrics

__all__ = [
    "DROP",
    "Exchange",
    "LogSink",
    "StateGuard",
    "bearer_principal",
    "is_request",
]

#: One line per sealed, opened or refused state, for operators (``--json-log``).
LogSink = Callable[[dict[str, Any]], None]


def bearer_principal(authorization: str | None) -> str | None:
    """A principal for a bearer credential: a digest, so the credential itself is never stored.

    ``bearer:`` + b64url(SHA-256(credential)[:16]). Two requests with the same credential get the
    same principal; a token minted for one credential is refused with any other.
    """
    if not authorization:
        return None
    # only SP and HTAB are white space in a header (RFC 9110 section 5.6.3): a credential that
    # differs by any other character is another credential
    scheme, _, credential = authorization.strip(" \t").partition(" ")
    credential = credential.strip(" \t")
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
#: What a client gets for a state the proxy could not file or take (the store is down).
STORE_UNAVAILABLE = "the proxy cannot reach its state store; retry later"
#: What a retry gets when the replay store (single use, ``--once``) cannot be reached.
REPLAY_STORE_UNAVAILABLE = "replay store unavailable"
#: What a client gets for an upstream answer whose ids are not its requests'.
FOREIGN_ANSWER = "the upstream's answer does not match the request"
#: "the configured audience", where a caller states none (None states "no audience")
_CONFIGURED: Any = object()


class StateGuard:
    """Seals the states a server emits and opens the ones clients send back, through the one
    state ``backend`` it is handed (:mod:`mrtr_state.state`).

    One guard serves the whole proxy; it keeps no per-request memory (the request a response
    answers is handed in by the caller), so it is safe to share across concurrent requests.
    ``keyset``: the keyset the proxy follows (its file watched, its health on /readyz and
    /metrics), when its backend uses one.
    """

    def __init__(
        self,
        backend: StateBackend,
        *,
        audience: str | None = None,
        log: LogSink | None = None,
        metrics: ProxyMetrics | None = None,
        keyset: Keyset | None = None,
    ) -> None:
        self.backend = backend
        #: what the guard gives clients: a token format (``aead``), or ``handle``
        self.format = backend.name
        #: what names a state in a log line: its token's key id, or its record's reference
        self._ref_name = backend.ref_name
        self.keyset = keyset
        self.audience = audience
        self.metrics = metrics
        self._log = log

    def report(self, event: str, started: float, result: str, **facts: Any) -> None:
        """A state sealed, opened or refused: one log line (when logging), with the time spent
        since ``started``, and its count (when counting). ``result`` is ``ok`` or a short code."""
        if self.metrics is not None:
            self.metrics.state(event, self.format, result)
        if self._log is not None:
            latency = round((time.perf_counter() - started) * 1000, 3)
            line = {"event": event, "format": self.format, "result": result, **facts}
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

    def needs_sealing(self, response: Any) -> bool:
        """Whether ``response`` carries something to seal or to withhold: a ``requestState``,
        or a member some client reads as one the proxy reads. (Every message is looked at:
        ``ID`` or ``Result`` spelled in another case, or a ``method`` beside a ``result``, is
        a response to some client.)"""
        if type(response) is not dict:
            return False
        if ambiguous_member(response, "message") is not None:
            return True
        if "method" in response and "result" in response:
            return True
        result = response.get("result")
        if type(result) is not dict:
            return False
        return ambiguous_member(result, "result") is not None or "requestState" in result

    async def seal_response(
        self,
        response: Any,
        request: Mapping[str, Any] | None,
        principal: str | None,
        audience: str | None = _CONFIGURED,
    ) -> Any:
        """``response`` with its ``requestState`` sealed, if it carries one; else as it is.

        ``request`` is the request this response answers (matched by id by the caller). A
        state that cannot be sealed and bound to it is replaced by an error, never passed on.
        ``audience``: what the state is bound to (the HTTP layer passes :meth:`audience_for`
        the request's path); by default the configured audience.
        """
        if not self.needs_sealing(response):
            return response
        return await self._seal(response, request, principal, audience)

    async def _seal(
        self,
        response: dict[str, Any],
        request: Mapping[str, Any] | None,
        principal: str | None,
        audience: str | None,
    ) -> Any:
        """:meth:`seal_response` of a response :meth:`needs_sealing` has picked."""
        result = response.get("result")
        odd = ambiguous_member(response, "message")
        if odd is None and "method" in response and "result" in response:
            odd = "method"
        if odd is None and type(result) is dict:
            odd = ambiguous_member(result, "result")
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
            bound = self.audience if audience is _CONFIGURED else audience
            binding = binding_of(principal, None, bound, method, target, arguments, None)
            sealed = await self.backend.seal(result["requestState"], binding)
        except (StateStoreError, ReplayStoreError) as err:
            if self.metrics is not None:
                self.metrics.store_failed()
            self.report("refused", started, "store_unavailable", reason=str(err), method=method)
            return _error(response.get("id"), -32603, UNPROTECTED)
        except (ValueError, InvalidToken) as err:  # oversized state, no primary key...
            self.report("refused", started, "unsealable", reason=str(err), method=method)
            return _error(response.get("id"), -32603, UNPROTECTED)
        ref = sealed.ref
        self.report("sealed", started, "ok", method=method, **{self._ref_name: ref} if ref else {})
        return {**response, "result": {**result, "requestState": sealed.carried}}

    # --- inbound -------------------------------------------------------------------------

    async def open_request(
        self,
        message: Any,
        principal: str | None,
        audience: str | None = _CONFIGURED,
    ) -> tuple[Any | None, dict[str, Any] | None]:
        """``(message to forward, None)``, or ``(None, error response)`` for a refused state.

        A message that carries no ``params.requestState`` (:func:`carries_state`) passes as it
        is; notifications never carry one here (:func:`mrtr_state.proxy.jsonrpc.parse_body`
        refuses them). ``audience`` as for :meth:`seal_response`.
        """
        if not carries_state(message):
            return message, None
        params = message["params"]
        started = time.perf_counter()
        method = message["method"]
        bound = self.audience if audience is _CONFIGURED else audience
        try:
            if method not in INPUT_REQUIRED_METHODS:
                raise MalformedToken(f"{method} cannot carry a requestState")
            try:
                # the retry's own method, target and arguments: never taken from the state
                token, binding = retry_binding(method, params, principal=principal, audience=bound)
            except ValueError as err:  # text a request could not have been bound to
                raise MalformedToken(f"the retry cannot be bound: {err}") from None
            opened = await self.backend.open(token, binding)
            if type(opened.state) is not str:
                raise InvalidClaims("the sealed state is not the server's string")
        except (StateStoreError, ReplayStoreError) as err:
            if self.metrics is not None:
                self.metrics.store_failed()
            replay = isinstance(err, ReplayStoreError)
            code = "replay_store_unavailable" if replay else "store_unavailable"
            self.report("refused", started, code, reason=str(err), method=method)
            said = REPLAY_STORE_UNAVAILABLE if replay else STORE_UNAVAILABLE
            error = {"code": -32603, "message": said}
            return None, {"jsonrpc": "2.0", "id": message.get("id"), "error": error}
        except InvalidToken as err:
            self.report("refused", started, err.code, reason=str(err), method=method)
            return None, {"jsonrpc": "2.0", "id": message.get("id"), "error": wire_error(err)}
        ref = opened.ref
        self.report("opened", started, "ok", method=method, **{self._ref_name: ref} if ref else {})
        return {**message, "params": {**params, "requestState": opened.state}}, None


def carries_state(message: Any) -> bool:
    """Whether ``message`` is a request whose params carry a ``requestState``."""
    if not is_request(message):
        return False
    params = message.get("params")
    return type(params) is dict and "requestState" in params


def _unsealable(result: Any, odd: str | None, method: Any) -> tuple[str, str] | None:
    """(code, reason) why the state in ``result`` cannot be sealed for a request of ``method``,
    or None."""
    if odd == "method":
        return "ambiguous_message", "the message has both a method and a result"
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


class Exchange:
    """One HTTP request through the proxy: its requests, what is forwarded, what is refused.

    Made from a checked POST body (or from nothing, for a GET stream) by :meth:`build`, which
    opens every state the body carries. :attr:`forward` is the list of messages to send
    upstream, :attr:`refusals` the error responses the proxy answers itself, and
    :meth:`rewrite` seals the states in whatever comes back, matching each response to its
    request by id. A response that answers none of this exchange's requests (or one already
    answered) is :data:`DROP`: the upstream sent what nobody here asked for (a late answer on a
    reused connection), and :attr:`foreign` says so. When the event stream drops an event,
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
        #: the messages of a POST are requests whose answers must match them; a GET stream's
        #: may answer earlier POSTs (resumed), which are not at hand
        self.posted = body is not None
        self.requests: dict[tuple[str, Any], Mapping[str, Any]] = {}
        self.refusals: list[dict[str, Any]] = []
        self.changed = False
        self.forward: list[Any] = []
        #: an answer to no request of this exchange came back: its connection is not reused
        self.foreign = False
        self._body = body
        self._answered: set[tuple[str, Any]] = set()
        self._dropped = 0

    @classmethod
    async def build(
        cls,
        guard: StateGuard,
        body: Body | None,
        principal: str | None,
        audience: str | None = _CONFIGURED,
    ) -> Exchange:
        """The exchange of ``body``, every state it carries opened (refused ones answered)."""
        exchange = cls(guard, body, principal, audience)
        for message in body.messages if body is not None else ():
            opened: Any = message
            if carries_state(message):
                opened, refusal = await guard.open_request(message, principal, audience)
                if refusal is not None:
                    exchange.refusals.append(refusal)
                    exchange.changed = True
                    continue
                exchange.changed = True
            if is_request(message) and "id" in message:
                exchange.requests[id_key(message["id"])] = message
            exchange.forward.append(opened)
        return exchange

    def forward_body(self, original: bytes) -> bytes | None:
        """The body to send upstream: the original bytes when nothing changed; None when every
        message was refused."""
        if not self.forward:
            return None
        if not self.changed:
            return original
        return encode_wire(self.forward if self.batch else self.forward[0])

    async def rewrite(self, message: Any) -> Any:
        """A response (or batch of them) with every state sealed, or replaced by an error;
        :data:`DROP` for one that answers none of this exchange's requests."""
        if type(message) is list:
            out = []
            for item in message:
                rewritten = await self.rewrite(item)
                if rewritten is DROP:
                    return DROP
                out.append(rewritten)
            return message if all(a is b for a, b in zip(out, message, strict=True)) else out
        if type(message) is not dict:
            return message
        request: Mapping[str, Any] | None = None
        if "id" in message and "method" not in message:  # a response
            try:
                key: tuple[str, Any] | None = id_key(message["id"])
            except Refusal:
                key = None
            request = self.requests.get(key) if key is not None else None
            # an error with a null id (a session gone...) answers no request: it may pass
            stray = not (message["id"] is None and "error" in message)
            if self.posted and (request is None or key in self._answered) and stray:
                self.foreign = True
                self._dropped += 1
                self.guard.report(
                    "refused",
                    time.perf_counter(),
                    "foreign_answer",
                    reason="a response answering no request of this exchange",
                )
                return DROP
            if request is not None:
                self._answered.add(key)  # type: ignore[arg-type]
        if not self.guard.needs_sealing(message):
            return message
        return await self.guard._seal(message, request, self.principal, self.audience)

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
