"""The TypeScript SDK's body (``createRequestStateCodec``), checked as the SDK checks it.

    {"p": payload, "exp": unix seconds, "b"?: bind tag}

with bind tag = b64url(HMAC-SHA256(secret, ``mcp.requestState.bind:`` ‖ value)[:16]), value
the bind string's UTF-8 (as the SDK's ``TextEncoder`` takes it) or the given bytes. The body is
what ``JSON.stringify`` writes (UTF-8, not escaped). The SDK binds nothing else: a verifier that
states a principal, audience or request is refused rather than silently given less. Beyond the
SDK, which has no issue time, ``exp`` may lie at most the verifier's ``ttl_cap`` ahead.
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

from .._encoding import (
    EncodingError,
    b64url_encode,
    compare_digest,
    json_loads_object,
    one_shot_encoder,
    strict_object,
)
from ..binding import BIND, Binding
from ..claims import Claims
from ..errors import ExpiredToken, InvalidClaims, InvalidToken, RequestMismatch
from ..formats._primitives import Keyed, hmac_key
from . import UNCHECKED, RequestStateOnly, refuse_uncarried
from .mcp_py import over_cap

if TYPE_CHECKING:
    from ..formats import Format
    from ..keyset import Key
    from ..policy import Policy

__all__ = ["ENVELOPE", "bind_tag"]

_encode_body = one_shot_encoder(
    json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)
)
_BIND_LABEL = b"mcp.requestState.bind:"
_MEMBERS = frozenset({"p", "exp", "b"})
_UNCARRIED = ~BIND
_isfinite = math.isfinite
_new_tuple = tuple.__new__


def _bind_keyed(secret: bytes) -> Keyed:
    return hmac_key(secret, _BIND_LABEL)


def bind_tag(key: Key, value: str | bytes) -> str:
    """The SDK's tag of a bind value under ``key``."""
    state = key.prepared("mcp-ts-bind", _bind_keyed).copy()
    state.update(value.encode("utf-8") if isinstance(value, str) else value)
    return b64url_encode(state.finalize()[:16])


def _document(plaintext: bytes) -> dict[str, Any]:
    try:
        document = json_loads_object(plaintext)
    except EncodingError as err:
        raise InvalidClaims(f"mcp-ts body: {err}") from None
    if type(document) is not dict or not document.keys() <= _MEMBERS:
        raise InvalidClaims("mcp-ts body is not the SDK's {p, exp, b} object")
    if "p" not in document:
        raise InvalidClaims("mcp-ts body lacks its payload p")
    return document


def _claims(document: dict[str, Any]) -> Claims:
    # Claims(state, iat, exp, jti, sub, aud, rid, raw)
    return _new_tuple(
        Claims, (document["p"], None, document["exp"], None, None, None, None, document)
    )


class McpTsEnvelope(RequestStateOnly):
    """See the module docstring."""

    name = "mcp-ts"
    kind = "mcp-ts"
    state_member = "p"
    binds = "bind value"
    carries = BIND
    fresh_bytes = 0  # a signed body: no id, no nonce, no salt
    document = staticmethod(_document)

    def pack(
        self,
        state: Any,
        binding: Binding,
        key: Key,
        fmt: Format,
        now: float,
        ttl: int,
        fresh: bytes,
    ) -> tuple[bytes, dict[str, Any]]:
        body: dict[str, Any] = {"p": state, "exp": int(now) + ttl}
        if binding.bind is not None:
            body["b"] = bind_tag(key, binding.bind)
        try:
            return _encode_body(body).encode("utf-8"), body
        except UnicodeEncodeError:
            raise ValueError("value holds a lone surrogate, which UTF-8 cannot encode") from None

    def accept(
        self,
        plaintext: bytes,
        key: Key,
        fmt: Format,
        binding: Binding,
        now: float,
        policy: Policy,
        carried: list[str] | None = None,
    ) -> Claims:
        parsed = strict_object(plaintext)
        if parsed is None:
            raise _refusal(plaintext, key, binding, now, policy)
        document = parsed[0]
        exp: Any = document.get("exp")
        tag, bind = document.get("b"), binding.bind
        # The one accepting test: the SDK's shape and now < exp (a finite number), beyond the SDK
        # exp - now <= ttl_cap, then the bind tag both ways (a tag that is not ASCII text never
        # matches). _refusal says which failed.
        if (
            document.keys() <= _MEMBERS
            and "p" in document
            and (type(exp) is int or type(exp) is float)
            and _isfinite(exp)
            and now < exp
            and exp - now <= policy.lifetime_cap
            and (
                binding is UNCHECKED
                or (
                    not binding.kinds & _UNCARRIED
                    and (
                        (tag is None and bind is None)
                        or (
                            bind is not None
                            and type(tag) is str
                            and tag.isascii()
                            and compare_digest(tag, bind_tag(key, bind))
                        )
                    )
                )
            )
        ):
            return _claims(document)
        raise _refusal(plaintext, key, binding, now, policy)

    def claims_of(self, document: dict[str, Any]) -> Claims:
        return _claims(document)


def _refusal(
    plaintext: bytes, key: Key, binding: Binding, now: float, policy: Policy
) -> InvalidToken:
    """Why :meth:`McpTsEnvelope.accept` refused: its checks one at a time, in its order. Only
    ever an explanation: whatever this finds, the token was already refused."""
    try:
        document = _document(plaintext)
    except InvalidClaims as err:
        return err
    # the SDK's now < exp (a finite number), then beyond the SDK exp - now <= ttl_cap
    exp: Any = document.get("exp")
    finite = (type(exp) is int or type(exp) is float) and _isfinite(exp)
    if not (finite and now < exp):
        return ExpiredToken(f"expired {int(now - exp) if finite else '?'} s ago")
    if not exp - now <= policy.lifetime_cap:
        return InvalidClaims(over_cap(exp - now, policy.lifetime_cap))
    tag, bind = document.get("b"), binding.bind
    if binding is UNCHECKED:
        pass  # inspect's view: bindings are not examined
    elif binding.kinds & ~BIND:
        return refuse_uncarried(binding.kinds & ~BIND, "mcp-ts tokens")
    elif tag is None:
        if bind is not None:
            return RequestMismatch(
                "bind mismatch: the token carries no bind tag, but one was given"
            )
    elif bind is None:
        return RequestMismatch("bind mismatch: the token carries a bind tag; give --bind to verify")
    # a tag that is not ASCII text never matches (compare_digest refuses non-ASCII text)
    elif not (type(tag) is str and tag.isascii() and compare_digest(tag, bind_tag(key, bind))):
        return RequestMismatch("bind mismatch")
    # not reached while this and accept agree; if they ever part, the token stays refused
    return InvalidClaims("mcp-ts body refused")


ENVELOPE = McpTsEnvelope()
