"""MCP integration: request fingerprints, InputRequiredResult and retry helpers, and the client
capability check: plain dicts in and out, for any server. (The official Python SDK's
``RequestStateCodec`` backed by a keyset is :class:`mrtr_state.sdk.codec.KeysetCodec`.)

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

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..errors import (
    CapabilityMissing,
    InvalidToken,
    MalformedToken,
    RequestMismatch,
)
from ..tokens.binding import Binding, binding_of
from ..tokens.claims import Claims
from ..tokens.claims import request_id as fingerprint
from ..tokens.facade import mint, verify
from ..tokens.policy import DEFAULT_FORMAT, DEFAULT_POLICY, Policy

if TYPE_CHECKING:
    from ..keys.keyset import Keyset
    from ..state.replay import ReplayStore

__all__ = [
    "CAPABILITIES_META_KEY",
    "INPUT_REQUIRED_METHODS",
    "CapabilityMissing",
    "check_capabilities",
    "input_required_result",
    "open_retry",
    "request_fingerprint",
    "request_target",
    "retry_binding",
    "retry_target",
    "verify_retry",
    "wire_error",
]

INPUT_REQUIRED_METHODS = ("tools/call", "prompts/get", "resources/read")
CAPABILITIES_META_KEY = "io.modelcontextprotocol/clientCapabilities"
INVALID_PARAMS = -32602
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
    format: str = DEFAULT_FORMAT,
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
    token, binding = retry_binding(method, params, principal=principal, audience=audience)
    claims = verify(keyset, token, expect=binding, format=format, now=now, policy=policy, once=once)
    return claims.state


def verify_retry(
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
) -> Claims:
    """:func:`open_retry`, returning the whole verified claims: the state, and the key and
    format that verified it (``claims.kid``, ``claims.format``) for a log line."""
    token, binding = retry_binding(method, params, principal=principal, audience=audience)
    return verify(keyset, token, expect=binding, format=format, now=now, policy=policy, once=once)


def retry_binding(
    method: str,
    params: Mapping[str, Any] | None,
    *,
    principal: str | None = None,
    audience: str | None = None,
) -> tuple[str, Binding]:
    """A retry's ``requestState`` and the :class:`~mrtr_state.Binding` it must have been sealed
    under: the principal and audience stated, and the retry's own method, target and arguments
    (never anything the state says). A retry that carries no state string or names no target
    is refused as the token error that names it; a principal or audience no binding can hold
    is the caller's ``ValueError``."""
    _require_method(method)
    token = params.get("requestState") if isinstance(params, Mapping) else None
    if not isinstance(token, str):
        raise MalformedToken("the retry carries no requestState string")
    target, arguments = retry_target(method, params)
    return token, binding_of(principal, None, audience, method, target, arguments, None)


_WIRE_ERROR: dict[str, Any] = {
    "message": "Invalid or expired requestState",
    "data": {"reason": "invalid_request_state"},
}


def wire_error(err: InvalidToken | None = None) -> dict[str, Any]:
    """The one JSON-RPC error every refused requestState gets; log ``err`` itself instead."""
    del err  # the reason is for the server log, never for the client
    return {"code": INVALID_PARAMS, **_WIRE_ERROR, "data": dict(_WIRE_ERROR["data"])}
