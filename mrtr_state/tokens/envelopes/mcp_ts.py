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
from typing import TYPE_CHECKING, Any

from ..._encoding import (
    b64url_encode,
    compare_digest,
    one_shot_encoder,
    utf8,
)
from ..._primitives import Keyed, hmac_key
from ...errors import ExpiredToken, InvalidClaims, RequestMismatch
from ..binding import BIND, Binding
from ..claims import Claims, new_claims
from . import Document, RequestStateOnly, check_lifetime

if TYPE_CHECKING:
    from ..._entropy import Fresh
    from ...keys.key import Key
    from ..policy import Policy

__all__ = ["McpTsEnvelope", "bind_tag"]

_encode_body = one_shot_encoder(
    json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)
)
_BIND_LABEL = b"mcp.requestState.bind:"
_MEMBERS = frozenset({"p", "exp", "b"})


def _bind_keyed(secret: bytes) -> Keyed:
    return hmac_key(secret, _BIND_LABEL)


def bind_tag(key: Key, value: str | bytes) -> str:
    """The SDK's tag of a bind value under ``key``."""
    state = key.prepared("mcp-ts-bind", _bind_keyed).copy()
    state.update(value.encode("utf-8") if isinstance(value, str) else value)
    return b64url_encode(state.finalize()[:16])


class McpTsEnvelope(RequestStateOnly):
    """See the module docstring."""

    kind = "mcp-ts"
    state_member = "p"
    binds = "bind value"
    carries = BIND
    document = "body"
    members, shape = _MEMBERS, "{p, exp, b} object"
    fresh_bytes = 0  # a signed body: no id, no nonce, no salt

    def pack(
        self, state: Any, binding: Binding, key: Key, now: float, ttl: int, fresh: Fresh
    ) -> tuple[bytes, dict[str, Any]]:
        body: dict[str, Any] = {"p": state, "exp": int(now) + ttl}
        if binding.bind is not None:
            body["b"] = bind_tag(key, binding.bind)
        return utf8(_encode_body(body)), body

    def checked(self, document: Document, plaintext: bytes, now: float, policy: Policy) -> None:
        if "p" not in document:
            raise InvalidClaims(f"{self.what} lacks its payload p")
        # the SDK's now < exp (a number: stated as what accepts, so a NaN fails; the reader
        # refuses what is not finite), then beyond the SDK exp - now <= ttl_cap
        exp: Any = document.get("exp")
        if not (type(exp) is int or type(exp) is float):
            raise ExpiredToken("expired: exp is not a number")
        check_lifetime(now < exp, now - exp, exp - now, policy)

    def bound(self, document: Document, key: Key, binding: Binding) -> None:
        # the bind tag, both ways (a tag that is not ASCII text never matches)
        tag, bind = document.get("b"), binding.bind
        if tag is None:
            if bind is not None:
                raise RequestMismatch(
                    "bind mismatch: the token carries no bind tag, but one was given"
                )
        elif bind is None:
            raise RequestMismatch(
                "bind mismatch: the token carries a bind tag; state its bind value to verify"
            )
        elif not (type(tag) is str and tag.isascii() and compare_digest(tag, bind_tag(key, bind))):
            raise RequestMismatch("bind mismatch")

    def claims_of(self, document: dict[str, Any], kid: str) -> Claims:
        return new_claims(
            state=document["p"], exp=document["exp"], raw=document, kid=kid, format=self.name
        )
