"""MCP integration: request fingerprints, InputRequiredResult and retry helpers, the client
capability check, and a ``RequestStateCodec`` for the official Python SDK.

Nothing here imports the SDK at module level: servers without it use the dict helpers, and
:class:`KeysetCodec` imports the SDK's error class only when it has to raise it.

The spec's server rules these helpers enforce (MCP 2026-07-28, multi round-trip requests):

* only ``tools/call``, ``prompts/get`` and ``resources/read`` may answer ``input_required``;
* the result carries at least one of ``inputRequests`` or ``requestState``;
* ``inputRequests`` only of kinds the client declared in
  ``_meta["io.modelcontextprotocol/clientCapabilities"]`` (``elicitation`` form/url, ``sampling``,
  ``roots``), else the -32021 error;
* ``requestState`` is protected, bound to the principal, a short expiry and the request (its
  method, target and arguments, never the JSON-RPC id), and checked on the retry; failures
  answer one uniform -32602 error, the specific reason going to the logs.
"""

from __future__ import annotations

import contextvars
import logging
import os
import time
from collections.abc import Mapping
from typing import Any

from .claims import request_id as fingerprint
from .errors import (
    CapabilityMissing,
    InvalidToken,
    MalformedToken,
    RequestMismatch,
)
from .formats import get_format
from .keyset import Keyset
from .policy import DEFAULT_POLICY, Policy
from .replay import ReplayStore, token_key
from .tokens import mint, open_envelope, seal_envelope, verify

__all__ = [
    "CAPABILITIES_META_KEY",
    "INPUT_REQUIRED_METHODS",
    "CapabilityMissing",
    "KeysetCodec",
    "ReplayGuard",
    "check_capabilities",
    "input_required_result",
    "open_retry",
    "request_fingerprint",
    "request_target",
    "retry_target",
    "wire_error",
]

INPUT_REQUIRED_METHODS = ("tools/call", "prompts/get", "resources/read")
CAPABILITIES_META_KEY = "io.modelcontextprotocol/clientCapabilities"
INVALID_PARAMS = -32602
_log = logging.getLogger("mrtr_state")
_KIND_OF_METHOD = {
    "elicitation/create": "elicitation",
    "sampling/createMessage": "sampling",
    "roots/list": "roots",
}


def _require_method(method: str) -> None:
    if method not in INPUT_REQUIRED_METHODS:
        raise ValueError(
            f"{method} cannot answer input_required; only {', '.join(INPUT_REQUIRED_METHODS)} can"
        )


def request_target(method: str, params: Mapping[str, Any] | None) -> tuple[str, Any]:
    """The (target, arguments) a request is identified by, as the Python SDK takes them.

    ``resources/read`` is identified by its URI alone; ``tools/call`` and ``prompts/get`` by the
    name and the arguments (``{}`` when absent). An allow-list per method: a new wire field
    never joins the identity by accident.
    """
    given: Mapping[str, Any] = params if isinstance(params, Mapping) else {}
    if method == "resources/read":
        return str(given.get("uri", "")), {}
    return str(given.get("name", "")), given.get("arguments") or {}


def retry_target(method: str, params: Any) -> tuple[str, Any]:
    """The retry's (target, arguments), refused as a request mismatch unless the retry names
    its target as a string and gives its arguments, if any, as an object: the retry is the
    client's, and a shape no request could have had matches no state (never a Python error)."""
    given: Mapping[str, Any] = params if isinstance(params, Mapping) else {}
    what = "uri" if method == "resources/read" else "name"
    named = given.get(what)
    if not isinstance(named, str) or not named:
        raise RequestMismatch(f"request mismatch: the retry carries no {what} string")
    arguments = given.get("arguments")
    if arguments is not None and not isinstance(arguments, dict):
        raise RequestMismatch("request mismatch: the retry's arguments are not an object")
    return request_target(method, params)


def request_fingerprint(method: str, params: Mapping[str, Any] | None) -> str:
    """The request identifier of a request: its method, target and SDK arguments digest."""
    target, arguments = request_target(method, params)
    return fingerprint(method=method, target=target, arguments=arguments)


def check_capabilities(
    params_meta: Mapping[str, Any] | None, input_requests: Mapping[str, Any]
) -> None:
    """Refuse input requests of a kind the client did not declare (raises CapabilityMissing).

    ``params_meta`` is the client's: any shape it has is answered with CapabilityMissing (or
    accepted), never with a Python error.
    """
    meta = params_meta if isinstance(params_meta, Mapping) else {}
    declared = meta.get(CAPABILITIES_META_KEY)
    if not isinstance(declared, Mapping):
        declared = {}
    missing: dict[str, Any] = {}
    for key, request in input_requests.items():
        if not isinstance(key, str) or not key:
            raise ValueError("inputRequests keys must be non-empty strings")
        method = request.get("method") if isinstance(request, Mapping) else None
        kind = _KIND_OF_METHOD.get(str(method))
        if kind is None:
            raise ValueError(f"inputRequests[{key!r}] has unknown method {method!r}")
        capability = declared.get(kind)
        if kind == "elicitation":
            params = request.get("params") or {}
            mode = params.get("mode", "form") if isinstance(params, Mapping) else "form"
            if not isinstance(mode, str):
                mode = repr(mode)  # not a mode any client can declare: reported as missing
            modes = capability if isinstance(capability, Mapping) else None
            # An empty elicitation object declares form mode only (the spec's default).
            has_mode = modes is not None and (mode in modes or (mode == "form" and not modes))
            if not has_mode:
                missing.setdefault("elicitation", {})[mode] = {}
        elif capability is None:
            missing[kind] = {}
    if missing:
        raise CapabilityMissing(
            f"the client did not declare {', '.join(sorted(missing))} "
            f"({', '.join(sorted(input_requests))})",
            missing,
        )


def input_required_result(
    keyset: Keyset,
    *,
    method: str,
    params: Mapping[str, Any] | None,
    state: Any,
    input_requests: Mapping[str, Any] | None = None,
    principal: str | None = None,
    audience: str | None = None,
    ttl: int | None = None,
    format: str = "aead",
    policy: Policy = DEFAULT_POLICY,
) -> dict[str, Any]:
    """An ``InputRequiredResult`` dict whose ``requestState`` is minted and bound to this request.

    The capabilities check runs against the request's own ``_meta``, so a server cannot send an
    input request the client never declared.
    """
    _require_method(method)
    result: dict[str, Any] = {"resultType": "input_required"}
    if input_requests:
        check_capabilities((params or {}).get("_meta"), input_requests)
        result["inputRequests"] = dict(input_requests)
    target, arguments = request_target(method, params)
    binding: dict[str, Any] = {"method": method, "target": target, "arguments": arguments}
    result["requestState"] = mint(
        keyset,
        state,
        principal=principal,
        audience=audience,
        ttl=ttl,
        format=format,
        policy=policy,
        **binding,
    )
    return result


def open_retry(
    keyset: Keyset,
    *,
    method: str,
    params: Mapping[str, Any] | None,
    principal: str | None = None,
    audience: str | None = None,
    format: str | None = None,
    once: ReplayStore | None = None,
    now: float | None = None,
    policy: Policy = DEFAULT_POLICY,
) -> Any:
    """The state a retry's ``requestState`` carries, checked against the retry itself.

    The binding is recomputed from the retry's own method, target and arguments, never taken
    from the token. Raises an :class:`InvalidToken` subclass; answer it with :func:`wire_error`.
    """
    _require_method(method)
    token = params.get("requestState") if isinstance(params, Mapping) else None
    if not isinstance(token, str):
        raise MalformedToken("the retry carries no requestState string")
    target, arguments = retry_target(method, params)
    claims = verify(
        keyset,
        token,
        principal=principal,
        audience=audience,
        format=format,
        now=now,
        policy=policy,
        once=once,
        method=method,
        target=target,
        arguments=arguments,
    )
    return claims.state


_WIRE_ERROR: dict[str, Any] = {
    "message": "Invalid or expired requestState",
    "data": {"reason": "invalid_request_state"},
}


def wire_error(err: InvalidToken | None = None) -> dict[str, Any]:
    """The one JSON-RPC error every refused requestState gets; log ``err`` itself instead."""
    del err  # the reason is for the server log, never for the client
    return {"code": INVALID_PARAMS, **_WIRE_ERROR, "data": dict(_WIRE_ERROR["data"])}


class KeysetCodec:
    """The Python SDK's ``RequestStateCodec`` protocol, backed by a mrtr-state keyset.

    Pass it as ``RequestStateSecurity(codec=KeysetCodec(...))``: the SDK keeps stamping and
    checking its envelope (expiry, request, audience, principal); the codec adds our keysets, key
    ids, staged rotation and formats. Given a path (or a keyset from :meth:`Keyset.load`), the
    keyset follows its file, so a key rolled out, promoted or revoked (``mrtr-state keys ...``,
    a Kubernetes Secret update) takes effect on a running server within a second, without a
    restart, and in-flight tokens of the previous primary still open. An encrypted keyset file
    opens with ``kek`` (a URI, e.g. ``os.environ["MRTR_STATE_KEK"]``), unwrapped once.

    With ``once``, each token is accepted at most once until its envelope expires. A token is
    redeemed only after the SDK has checked every binding, by the middleware
    :meth:`replay_guard` returns (``MCPServer(..., middleware=[codec.replay_guard()])``): were it
    redeemed in :meth:`unseal`, another principal's refused attempt would burn the rightful
    retry. Without that middleware every retry is refused (fail closed).
    """

    def __init__(
        self,
        keyset: Keyset | str | os.PathLike[str],
        *,
        format: str = "aead",
        once: ReplayStore | None = None,
        policy: Policy = DEFAULT_POLICY,
        kek: str | None = None,
    ) -> None:
        if not get_format(format).confidential:
            raise ValueError(
                f"{format} is readable by clients; the codec needs aead, jwe or mcp-py"
            )
        self._format = format
        self._once = once
        self._policy = policy
        self._keyset = keyset if isinstance(keyset, Keyset) else Keyset.load(keyset, kek=kek)
        self._guarded = False
        # (store key, expiry, inner state) of the token this request's unseal opened; the guard
        # middleware runs in the same task once the SDK has accepted the round.
        self._opened: contextvars.ContextVar[tuple[str, float, Any] | None] = (
            contextvars.ContextVar(f"mrtr_state_opened_{id(self)}", default=None)
        )

    @property
    def keyset(self) -> Keyset:
        """The keyset in use; a loaded one follows its file (see :meth:`Keyset.load`)."""
        return self._keyset

    def seal(self, payload: bytes) -> str:
        return seal_envelope(self.keyset, payload, format=self._format, policy=self._policy)

    def unseal(self, token: str) -> bytes:
        from mcp.server.request_state import InvalidRequestState

        if self._once is not None and not self._guarded:
            _log.warning("requestState refused: once= needs middleware=[codec.replay_guard()]")
            raise InvalidRequestState("replay guard not installed")
        try:
            _fmt, payload = open_envelope(
                self.keyset, token, format=self._format, policy=self._policy
            )
        except InvalidToken as err:
            raise InvalidRequestState(err.code) from None
        if self._once is not None:
            self._opened.set((token_key(None, token), _envelope_expiry(payload), _inner(payload)))
        return payload

    def replay_guard(self) -> ReplayGuard:
        """The SDK middleware that redeems a token once the SDK accepted its round (see above)."""
        if self._once is None:
            raise ValueError("replay_guard() is for a codec made with once=")
        self._guarded = True
        return ReplayGuard(self._once, self._opened)


class ReplayGuard:
    """SDK server middleware: redeem the opened requestState, after every SDK check passed.

    It runs inside the SDK's request-state boundary, so it is reached only by rounds whose state
    the boundary accepted; a second presentation of the same token is refused with the SDK's own
    uniform error and logged as ``replayed``.
    """

    def __init__(
        self,
        store: ReplayStore,
        opened: contextvars.ContextVar[tuple[str, float, Any] | None],
    ) -> None:
        self._store = store
        self._opened = opened

    async def __call__(self, ctx: Any, call_next: Any) -> Any:
        pending = self._opened.get()
        if pending is not None:
            self._opened.set(None)
            key, expires, inner = pending
            params = getattr(ctx, "params", None) or {}
            accepted = params.get("requestState") == inner  # the round the boundary accepted
            if accepted and not self._store.redeem(key, expires, now=time.time()):
                from mcp.shared.exceptions import MCPError

                _log.warning("requestState rejected on %s: replayed", ctx.method)
                raise MCPError(code=INVALID_PARAMS, **_WIRE_ERROR)
        return await call_next(ctx)


def _inner(payload: bytes) -> Any:
    """The server's own state inside an SDK envelope (what the boundary hands on)."""
    import json

    try:
        return json.loads(payload).get("s")
    except (ValueError, AttributeError):
        return None


def _envelope_expiry(payload: bytes) -> float:
    """The SDK envelope's ``exp``, or an hour from now if it cannot be read (fail towards keeping
    the entry, never towards forgetting it early)."""
    import json

    try:
        exp = json.loads(payload).get("exp")
    except (ValueError, AttributeError):
        exp = None
    return float(exp) if isinstance(exp, int | float) else time.time() + 3600
