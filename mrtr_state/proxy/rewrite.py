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
from typing import TYPE_CHECKING, Any, NamedTuple

from .._encoding import encode_wire
from ..binding import Binding, binding_of
from ..errors import InvalidClaims, InvalidToken, MalformedToken, UnknownHandle
from ..handle_store import StateStoreError, Taken, awaited
from ..handles import (
    DEFAULT_MAX_STATE,
    Handle,
    encode_record,
    lock_of,
    new_handle,
    read_handle,
    redeem,
)
from ..keyset import Keyset
from ..mcp import INPUT_REQUIRED_METHODS, request_target, retry_target, verify_retry, wire_error
from ..policy import DEFAULT_POLICY, Policy
from ..replay import DEFAULT_MAX_SKEW, ReplayStore
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

#: One line per sealed, opened or refused state, for operators (``--json-log``).
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
#: What a client gets for a state the proxy could not file or take (the store is down).
STORE_UNAVAILABLE = "the proxy cannot reach its state store; retry later"
#: "the configured audience", where a caller states none (None states "no audience")
_CONFIGURED: Any = object()


class Pending(NamedTuple):
    """A record made for a handle the proxy is about to give out: filed before it is sent."""

    key: str
    value: bytes
    keep_until: float
    ref: str


class Filing:
    """One exchange's records on their way to the store: those made and not yet filed, or,
    once the store failed for the exchange, why (every later state is withheld for it)."""

    __slots__ = ("failed", "records")

    def __init__(self) -> None:
        self.records: list[Pending] = []
        self.failed: str | None = None


class Opening(NamedTuple):
    """What taking a retry's handle from the store gave: the retry's binding, the record found
    (None: unknown, used or expired) and the handle (whose key opens it), or why there is
    nothing to check."""

    binding: Binding | None
    found: Taken | None
    error: InvalidToken | StateStoreError | None
    handle: Handle | None = None


class StateGuard:
    """Seals the states a server emits and opens the ones clients send back.

    One guard serves the whole proxy; it keeps no per-request memory (the request a response
    answers is handed in by the caller), so it is safe to share across concurrent requests.
    ``clock`` gives the time for minting and verifying (tests pass a fake one).

    With a ``store`` (:mod:`mrtr_state.handle_store`), states are kept server-side and clients
    get handles (:mod:`mrtr_state.handles`) instead of tokens; no keyset is needed then. The
    store's I/O is awaited by the HTTP layer around the guard's work: :meth:`take` before a body
    is opened, :meth:`Exchange.commit` before an answer carrying new handles is sent.
    """

    def __init__(
        self,
        keyset: Keyset | None,
        *,
        audience: str | None = None,
        ttl: int | None = None,
        policy: Policy = DEFAULT_POLICY,
        once: ReplayStore | None = None,
        log: LogSink | None = None,
        clock: Clock = time.time,
        metrics: ProxyMetrics | None = None,
        store: Any = None,
        max_state: int = DEFAULT_MAX_STATE,
        max_skew: float = DEFAULT_MAX_SKEW,
    ) -> None:
        if keyset is None and store is None:
            raise ValueError("the guard needs a keyset (tokens) or a state store (handles)")
        self.store = store
        #: what the guard gives clients: ``aead`` tokens, or ``handle``s
        self.format = "aead" if store is None else "handle"
        self.max_state = max_state
        self.max_skew = max_skew
        self.keyset = keyset
        self.audience = audience
        self.ttl = ttl
        self.policy = policy
        self.once = once
        self.clock = clock
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

    def seal_response(
        self,
        response: Any,
        request: Mapping[str, Any] | None,
        principal: str | None,
        audience: str | None = _CONFIGURED,
        filing: Filing | None = None,
    ) -> Any:
        """``response`` with its ``requestState`` sealed, if it carries one; else as it is.

        ``request`` is the request this response answers (matched by id by the caller). A
        state that cannot be sealed and bound to it is replaced by an error, never passed on.
        ``audience``: what the state is bound to (the HTTP layer passes
        :meth:`audience_for` the request's path); by default the configured audience. With a
        store, the new record joins ``filing`` (filed before the answer is sent), or the state
        is withheld once the store failed for the exchange.
        """
        if type(response) is not dict:
            return response
        result = response.get("result")
        # every message is looked at: a member spelled in another case ("ID", "Result"), or a
        # "method" beside a "result", is a message some client reads as a response
        odd = ambiguous_member(response, "message")
        if odd is None and "method" in response and "result" in response:
            odd = "method"
        if odd is None:
            if type(result) is not dict:
                return response
            odd = ambiguous_member(result, "result")
            if odd is None and "requestState" not in result:
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
        bound = self.audience if audience is _CONFIGURED else audience
        try:
            if self.store is not None:
                if filing is None or filing.failed is not None:
                    raise StateStoreError(filing.failed if filing else "no filing for the records")
                binding = binding_of(
                    principal=principal,
                    audience=bound,
                    method=method,
                    target=target,
                    arguments=arguments,
                )
                sealed, ref = self._file(result["requestState"], binding, filing.records)
                facts = {"ref": ref}
            else:
                assert self.keyset is not None
                minted = issue(
                    self.keyset,
                    result["requestState"],
                    principal=principal,
                    audience=bound,
                    ttl=self.ttl,
                    policy=self.policy,
                    format="aead",
                    method=method,
                    target=target,
                    arguments=arguments,
                    now=self.clock(),
                )
                sealed, facts = minted.token, {"kid": minted.kid}
        except StateStoreError as err:
            self.report("refused", started, "store_unavailable", reason=str(err), method=method)
            return _error(response.get("id"), -32603, UNPROTECTED)
        except (ValueError, InvalidToken) as err:  # oversized state, no primary key...
            self.report("refused", started, "unsealable", reason=str(err), method=method)
            return _error(response.get("id"), -32603, UNPROTECTED)
        self.report("sealed", started, "ok", method=method, **facts)
        return {**response, "result": {**result, "requestState": sealed}}

    def _file(self, state: str, binding: Binding, pending: list[Pending]) -> tuple[str, str]:
        """A new handle for ``state``, its record added to ``pending``; and its log ref."""
        size = len(state.encode("utf-8", "surrogatepass"))
        if size > self.max_state:
            raise ValueError(f"the state is {size} bytes, over the store's {self.max_state}")
        handle = new_handle()
        now = self.clock()
        ttl = self.policy.ttl if self.ttl is None else self.ttl
        value = encode_record(handle, state, binding, now=now, ttl=ttl)
        ref = handle.ref  # names the record in logs; the handle never appears there
        pending.append(Pending(handle.key, value, now + ttl + self.max_skew, ref))
        return handle.text, ref

    # --- inbound -------------------------------------------------------------------------

    def open_request(
        self,
        message: Any,
        principal: str | None,
        audience: str | None = _CONFIGURED,
        opening: Opening | None = None,
    ) -> tuple[Any | None, dict[str, Any] | None]:
        """``(message to forward, None)``, or ``(None, error response)`` for a refused state.

        A request without ``requestState`` passes as it is. Notifications never carry one here:
        :func:`mrtr_state.proxy.jsonrpc.parse_body` refuses them. ``audience`` as for
        :meth:`seal_response`. With a store, ``opening`` is what :meth:`take` found for this
        message; the checks are :func:`mrtr_state.handles.redeem`'s.
        """
        if not is_request(message):
            return message, None
        params = message.get("params")
        if type(params) is not dict or "requestState" not in params:
            return message, None
        started = time.perf_counter()
        method = message["method"]
        bound = self.audience if audience is _CONFIGURED else audience
        try:
            if method not in INPUT_REQUIRED_METHODS:
                raise MalformedToken(f"{method} cannot carry a requestState")
            if self.store is not None:
                state, facts = self._redeem(opening)
            else:
                assert self.keyset is not None
                # the retry's own method, target and arguments: never taken from the token
                claims = verify_retry(
                    self.keyset,
                    method=method,
                    params=params,
                    principal=principal,
                    audience=bound,
                    format="aead",
                    once=self.once,
                    policy=self.policy,
                    now=self.clock(),
                )
                state = claims.state
                facts = {} if claims.kid is None else {"kid": claims.kid}
            if type(state) is not str:
                raise InvalidClaims("the sealed state is not the server's string")
        except StateStoreError as err:
            self.report("refused", started, "store_unavailable", reason=str(err), method=method)
            error = {"code": -32603, "message": STORE_UNAVAILABLE}
            return None, {"jsonrpc": "2.0", "id": message.get("id"), "error": error}
        except InvalidToken as err:
            self.report("refused", started, err.code, reason=str(err), method=method)
            return None, {"jsonrpc": "2.0", "id": message.get("id"), "error": wire_error(err)}
        self.report("opened", started, "ok", method=method, **facts)
        return {**message, "params": {**params, "requestState": state}}, None

    def _redeem(self, opening: Opening | None) -> tuple[Any, dict[str, str]]:
        """The state of the record :meth:`take` found, once every check passed."""
        if opening is None:  # the HTTP layer took nothing for this message
            raise StateStoreError("the handle was not looked up")
        if opening.error is not None:
            raise opening.error
        found, binding, handle = opening.found, opening.binding, opening.handle
        if found is None or binding is None or handle is None:
            raise UnknownHandle("unknown handle: never issued, already used, or expired")
        record = redeem(handle, found.value, found.handed, binding, now=self.clock())
        return record.state, {"ref": handle.ref}

    async def take(
        self, body: Body, principal: str | None, audience: str | None
    ) -> dict[int, Opening]:
        """Take from the store the record of every handle ``body`` carries, by the message's
        index: each handed over (and deleted) only if the retry's binding is the record's.
        The one place the proxy waits on the store for a retry (one command per handle)."""
        assert self.store is not None
        openings: dict[int, Opening] = {}
        for index, message in enumerate(body.messages):
            params = message.get("params") if is_request(message) else None
            if type(params) is dict and "requestState" in params:
                openings[index] = await self._take_one(
                    message["method"], params, principal, audience
                )
        return openings

    async def _take_one(
        self, method: str, params: dict[str, Any], principal: str | None, audience: str | None
    ) -> Opening:
        try:
            if method not in INPUT_REQUIRED_METHODS:
                raise MalformedToken(f"{method} cannot carry a requestState")
            token = params["requestState"]
            if type(token) is not str:
                raise MalformedToken("the retry carries no requestState string")
            handle = read_handle(token)
            target, arguments = retry_target(method, params)
            try:
                binding = binding_of(
                    principal=principal,
                    audience=audience,
                    method=method,
                    target=target,
                    arguments=arguments,
                )
            except ValueError as err:  # text a request could not have been bound to
                raise MalformedToken(f"the retry cannot be bound: {err}") from None
            found = await awaited(self.store.take(handle.key, lock_of(handle, binding)))
        except StateStoreError as err:
            if self.metrics is not None:
                self.metrics.store_failed()
            return Opening(None, None, err)
        except InvalidToken as err:
            return Opening(None, None, err)
        return Opening(binding, found, None, handle)


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
        openings: Mapping[int, Opening] | None = None,
    ) -> None:
        self.guard = guard
        self.principal = principal
        self.audience = audience
        #: records of handles given out in answers not yet sent (filed by :meth:`commit`)
        self.filing: Filing | None = Filing() if guard.store is not None else None
        self._committed_answers: set[tuple[str, Any]] = set()
        self.batch = body is not None and body.batch
        self.requests: dict[tuple[str, Any], Mapping[str, Any]] = {}
        self.refusals: list[dict[str, Any]] = []
        self.changed = False
        self.forward: list[Any] = []
        self._answered: set[tuple[str, Any]] = set()
        self._dropped = 0
        for index, message in enumerate(body.messages if body is not None else ()):
            opening = openings.get(index) if openings is not None else None
            opened, refusal = guard.open_request(message, principal, audience, opening)
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
        if type(message) is not dict:
            return message
        key: tuple[str, Any] | None = None
        if _is_response(message):
            try:
                key = id_key(message["id"])
            except Refusal:
                key = None
        request = self.requests.get(key) if key is not None else None
        if key is not None and request is not None:
            self._answered.add(key)
        return self.guard.seal_response(
            message, request, self.principal, self.audience, self.filing
        )

    @property
    def pending(self) -> bool:
        """Whether records wait to be filed before what was rewritten may be sent."""
        return self.filing is not None and bool(self.filing.records)

    async def commit(self) -> bool:
        """File the records of the handles in the answer about to be sent; False if the store
        failed: then nothing that carries them may be sent, and from now on every state of this
        exchange is withheld (an error in its place)."""
        filing = self.filing
        if filing is None or not filing.records:
            self._committed_answers = set(self._answered)
            return True
        records, filing.records = filing.records, []
        store = self.guard.store
        try:
            for record in records:
                await awaited(store.put(record.key, record.value, record.keep_until))
        except StateStoreError as err:
            filing.failed = str(err)
            self.guard.report("refused", time.perf_counter(), "store_unavailable", reason=str(err))
            if self.guard.metrics is not None:
                self.guard.metrics.store_failed()
            # what was rewritten since the last commit is not sent: its requests get an error
            self._answered = set(self._committed_answers)
            self._dropped += 1
            return False
        self._committed_answers = set(self._answered)
        return True

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
