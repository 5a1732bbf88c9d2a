"""The claims envelopes of the official MCP SDKs, checked exactly as the SDKs check them.

``mcp-py`` (Python SDK): ``{"v":1,"iat","exp","m","t","a","s","aud"?,"p"?}``, written by
``json.dumps`` with ``,``/``:`` separators and non-ASCII escaped; ``iat``/``exp`` are float
seconds; ``iat`` may be up to 60 s in the future; ``m``/``t``/``a`` bind the method, the target
(tool or prompt name, or resource URI) and the arguments digest; ``aud`` and ``p`` bind the
audience and the principal, fail-closed both ways. ``p`` is b64url(salt (8) ‖ SHA-256(
``mcp/request-state/principal:`` ‖ salt ‖ principal)[:16]).

``mcp-ts`` (TypeScript SDK): ``{"p": payload, "exp": unix seconds, "b"?: bind tag}`` with
bind tag = b64url(HMAC-SHA256(secret, ``mcp.requestState.bind:`` ‖ value)[:16]).

Where the SDKs are lenient, we are not: booleans are not numbers here, and NaN fails the
accept-conditions (stated positively, as the Python SDK states them). The SDKs set no lifetime
cap, so verification sets none either; minting still obeys the policy's TTL cap.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import TYPE_CHECKING, Any, TypeGuard

from ._encoding import (
    MAX_DEPTH,
    EncodingError,
    b64url_decode,
    b64url_encode,
    compare_digest,
    json_loads_object,
    nesting_depth,
    one_shot_encoder,
    scan_json,
)
from ._entropy import random_bytes
from .claims import Claims, arguments_digest
from .errors import (
    AudienceMismatch,
    ExpiredToken,
    InvalidClaims,
    InvalidToken,
    NotYetValid,
    PrincipalMismatch,
    RequestMismatch,
)
from .formats._primitives import hmac_key

if TYPE_CHECKING:
    from .keyset import Key

__all__ = ["check_mcp_py", "check_mcp_ts", "mcp_py_envelope", "mcp_ts_envelope"]

# The SDK's compact_json (ASCII escapes), and the TypeScript body (JSON.stringify: UTF-8).
_encode_envelope = one_shot_encoder(json.JSONEncoder(separators=(",", ":")))
_encode_body = one_shot_encoder(
    json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)
)

FUTURE_SKEW = 60.0
_PRINCIPAL_LABEL = b"mcp/request-state/principal:"
_BIND_LABEL = b"mcp.requestState.bind:"
_MCP_PY_MEMBERS = frozenset({"v", "iat", "exp", "m", "t", "a", "s", "aud", "p"})
_MCP_TS_MEMBERS = frozenset({"p", "exp", "b"})


_new_tuple = tuple.__new__
_isfinite = math.isfinite


def _number(value: object) -> TypeGuard[float]:
    return type(value) in (int, float) and math.isfinite(value)  # type: ignore[arg-type]


def _principal_bytes(principal: str) -> bytes:
    return principal.encode("utf-8", "surrogatepass")


def _principal_claim(principal: str, salt: bytes | None = None) -> str:
    chosen = random_bytes(8) if salt is None else salt
    digest = hashlib.sha256(_PRINCIPAL_LABEL + chosen + _principal_bytes(principal)).digest()
    return b64url_encode(chosen + digest[:16])


def _principal_matches(claim: str, principal: str) -> bool:
    try:
        raw = b64url_decode(claim)
    except EncodingError:
        return False
    if len(raw) != 24:
        return False
    salt = raw[:8]
    digest = hashlib.sha256(_PRINCIPAL_LABEL + salt + _principal_bytes(principal)).digest()
    return compare_digest(digest[:16], raw[8:])


def _target_and_digest(method: str | None, target: str | None, arguments: Any) -> tuple[str, str]:
    if not method or target is None:
        raise RequestMismatch(
            "request mismatch: mcp-py tokens are bound to their request; give the method, "
            "target and arguments"
        )
    return target, arguments_digest({} if arguments is None else arguments)


def mcp_py_envelope(
    state: str,
    *,
    now: float,
    ttl: float,
    method: str | None,
    target: str | None,
    arguments: Any,
    audience: str | None,
    principal: str | None,
) -> bytes:
    """The plaintext the Python SDK seals for one round, byte for byte in its layout."""
    if not isinstance(state, str):
        raise ValueError("mcp-py state is a string (the SDK's requestState); JSON-encode it first")
    if not method or target is None:
        raise ValueError("mcp-py tokens bind a request: give method, target (and arguments)")
    claims: dict[str, Any] = {
        "v": 1,
        "iat": now,
        "exp": now + ttl,
        "m": method,
        "t": target,
        "a": arguments_digest({} if arguments is None else arguments),
        "s": state,
    }
    if audience is not None:
        claims["aud"] = audience
    if principal is not None:
        claims["p"] = _principal_claim(principal)
    return _encode_envelope(claims).encode("ascii")


def check_mcp_py(
    plaintext: bytes,
    *,
    now: float,
    method: str | None,
    target: str | None,
    arguments: Any,
    audience: str | None,
    principal: str | None,
    ttl_cap: float | None = None,
) -> Claims:
    """Accept a Python-SDK envelope only on the SDK's conditions; else the precise refusal.

    Beyond the SDK, ``ttl_cap`` refuses an envelope whose ``exp - iat`` exceeds it: a leaked
    secret must not mint state that lives for a year.
    """
    try:
        document = json_loads_object(plaintext)
    except EncodingError as err:
        raise InvalidClaims(f"mcp-py envelope: {err}") from None
    if type(document) is not dict or not document.keys() <= _MCP_PY_MEMBERS:
        raise InvalidClaims("mcp-py envelope is not the SDK's claims object")
    get = document.get
    iat, exp, state = get("iat"), get("exp"), get("s")
    if get("v") != 1 or type(state) is not str:
        raise InvalidClaims("mcp-py envelope: version must be 1 and the state a string")
    # _number() written out for the common case (float times): this runs on every retry
    if not (
        (type(iat) is float or type(iat) is int) and _isfinite(iat) and iat <= now + FUTURE_SKEW
    ):
        raise NotYetValid(f"not yet valid: minted in the future (iat {iat!r})")
    if not ((type(exp) is float or type(exp) is int) and _isfinite(exp) and now < exp):
        raise ExpiredToken(f"expired {int(now - exp) if _number(exp) else '?'} s ago")
    if ttl_cap is not None and not exp - iat <= ttl_cap:
        raise InvalidClaims(_over_cap(exp - iat, ttl_cap))
    expected_target, digest = _target_and_digest(method, target, arguments)
    if get("m") != method or get("t") != expected_target or get("a") != digest:
        raise RequestMismatch("request mismatch")
    if get("aud") != audience:
        raise AudienceMismatch("audience mismatch")
    claim = get("p")
    if (claim is None) != (principal is None):
        raise PrincipalMismatch(
            "principal mismatch: the token is bound to a principal; give it to verify"
            if principal is None
            else "principal mismatch: the token is not bound to a principal, but one was given"
        )
    if (
        claim is not None
        and principal is not None
        and not (isinstance(claim, str) and _principal_matches(claim, principal))
    ):
        raise PrincipalMismatch("principal mismatch")
    # Claims(state, iat, exp, jti, sub, aud, rid, raw), built as the tuple it is
    return _new_tuple(
        Claims,
        (
            state,
            iat,
            exp,
            None,
            claim if isinstance(claim, str) else None,
            get("aud"),
            f"{method} {expected_target} {digest}",
            document,
        ),
    )


def _bind_keyed(secret: bytes) -> Any:
    return hmac_key(secret, _BIND_LABEL)


def bind_tag(key: Key, value: str | bytes) -> str:
    """The SDK's tag of a bind value; text is taken as its UTF-8 bytes, as the SDK's
    ``TextEncoder`` takes a JavaScript string."""
    state = key.prepared("mcp-ts-bind", _bind_keyed).copy()
    state.update(value.encode("utf-8") if isinstance(value, str) else value)
    return b64url_encode(state.finalize()[:16])


def mcp_ts_envelope(
    state: Any, *, key: Key, now: float, ttl: int, bind: str | bytes | None
) -> bytes:
    """The body the TypeScript SDK signs: ``{"p":payload,"exp":seconds,"b"?:tag}``."""
    body: dict[str, Any] = {"p": state, "exp": int(now) + ttl}
    if bind is not None:
        body["b"] = bind_tag(key, bind)
    return _encode_body(body).encode()


def _over_cap(lifetime: float, ttl_cap: float) -> str:
    return (
        f"token lifetime {lifetime:.0f} s exceeds this verifier's ttl_cap of {ttl_cap:.0f} s; "
        "raise ttl_cap on the verifier if the issuer really mints tokens this long-lived"
    )


def check_mcp_ts(
    plaintext: bytes,
    *,
    key: Key,
    now: float,
    bind: str | bytes | None,
    ttl_cap: float | None = None,
) -> Claims:
    """Accept a TypeScript-SDK body on the SDK's conditions, and (beyond the SDK, which has no
    issue time) only while ``exp`` lies at most ``ttl_cap`` ahead."""
    try:
        document = json_loads_object(plaintext)
    except EncodingError as err:
        raise InvalidClaims(f"mcp-ts body: {err}") from None
    if type(document) is not dict or not document.keys() <= _MCP_TS_MEMBERS:
        raise InvalidClaims("mcp-ts body is not the SDK's {p, exp, b} object")
    if "p" not in document:
        raise InvalidClaims("mcp-ts body lacks its payload p")
    exp = document.get("exp")
    if not ((type(exp) is int or type(exp) is float) and _isfinite(exp) and now < exp):
        raise ExpiredToken(f"expired {int(now - exp) if _number(exp) else '?'} s ago")
    if ttl_cap is not None and not exp - now <= ttl_cap:
        raise InvalidClaims(_over_cap(exp - now, ttl_cap))
    tag = document.get("b")
    if tag is not None and bind is not None and type(tag) is str:  # the common case first
        # a tag that is not ASCII never matches (and must not reach compare_digest, which
        # refuses non-ASCII text with a TypeError)
        if tag.isascii() and compare_digest(tag, bind_tag(key, bind)):
            return _new_tuple(Claims, (document["p"], None, exp, None, None, None, None, document))
        raise RequestMismatch("bind mismatch")
    if (tag is None) != (bind is None):
        raise RequestMismatch(
            "bind mismatch: the token carries a bind tag; give --bind to verify"
            if bind is None
            else "bind mismatch: the token carries no bind tag, but one was given"
        )
    if tag is not None:  # a bind value was given, and the tag is not even text
        raise RequestMismatch("bind mismatch")
    return _new_tuple(Claims, (document["p"], None, exp, None, None, None, None, document))


def mcp_ts_accepted(
    plaintext: bytes, *, key: Key, now: float, bind: str | bytes | None, ttl_cap: float
) -> Claims | None:
    """The claims :func:`check_mcp_ts` would return, when the body is well-formed and valid;
    else None (exceptions may escape): the common case of every retry in one straight run, the
    caller's general path naming any refusal."""
    text = plaintext.decode("utf-8")
    document, end = scan_json(text, 0)
    if end != len(text) or type(document) is not dict or "p" not in document:
        return None
    if text.count("{") + text.count("[") > MAX_DEPTH and nesting_depth(document) > MAX_DEPTH:
        return None
    exp = document.get("exp")
    tag = document.get("b")
    if (
        (type(exp) is int or type(exp) is float)
        and _isfinite(exp)
        and now < exp
        and exp - now <= ttl_cap
        and len(document) == 2 + (tag is not None)
        and (
            (tag is None and bind is None)
            or (type(tag) is str and bind is not None and compare_digest(tag, bind_tag(key, bind)))
        )
    ):
        return _new_tuple(Claims, (document["p"], None, exp, None, None, None, None, document))
    return None


def lifetime_problem(envelope: Any, now: float, ttl_cap: float) -> InvalidToken | None:
    """For ``inspect``: why an SDK envelope is outside its lifetime or the cap, if it is."""
    if not isinstance(envelope, dict):
        return InvalidClaims("not an SDK claims envelope")
    iat, exp = envelope.get("iat"), envelope.get("exp")
    if iat is not None and not (_number(iat) and iat <= now + FUTURE_SKEW):
        return NotYetValid(f"not yet valid: minted in the future (iat {iat!r})")
    if not (_number(exp) and now < exp):
        return ExpiredToken(f"expired {int(now - exp) if _number(exp) else '?'} s ago")
    lifetime = exp - (iat if _number(iat) else now)
    if not lifetime <= ttl_cap:
        return InvalidClaims(_over_cap(lifetime, ttl_cap))
    return None
