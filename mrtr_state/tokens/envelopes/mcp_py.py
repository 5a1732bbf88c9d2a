"""The MCP Python SDK's envelope (``mcp`` 2.x), checked exactly as the SDK checks it.

    {"v":1,"iat","exp","m","t","a","s","aud"?,"p"?}

written by ``json.dumps`` with ``,``/``:`` separators and non-ASCII escaped; ``iat``/``exp`` are
float seconds and ``iat`` may be up to 60 s in the future; ``m``/``t``/``a`` bind the method,
the target (tool or prompt name, or resource URI) and the arguments digest; ``aud`` and ``p``
bind the audience and the principal, fail-closed both ways. ``p`` is b64url(salt (8) ‖ SHA-256(
``mcp/request-state/principal:`` ‖ salt ‖ principal)[:16]); ``s`` is the server's state string.

It travels in the ``mcp-py`` wire, and (marked 0x01) in aead and jwe when
:class:`mrtr_state.sdk.codec.KeysetCodec` seals it. Where the SDK is lenient, we are not: booleans
are not numbers, NaN fails the accept-conditions, and beyond the SDK a lifetime over the
verifier's ``ttl_cap`` is refused (a leaked secret must not mint state that lives for a year).
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any

from ..._encoding import (
    EncodingError,
    b64url_decode,
    b64url_encode,
    compare_digest,
    one_shot_encoder,
)
from ...errors import (
    AudienceMismatch,
    ExpiredToken,
    InvalidClaims,
    NotYetValid,
    PrincipalMismatch,
    RequestMismatch,
)
from ..binding import AUDIENCE, PRINCIPAL, REQUEST, Binding
from ..claims import Claims, new_claims
from . import Document, RequestStateOnly, both_ways, check_lifetime, request_members

if TYPE_CHECKING:
    from ..._entropy import Fresh
    from ...keys.key import Key
    from ..policy import Policy

__all__ = ["FUTURE_SKEW", "McpPyEnvelope"]

# The SDK's compact_json: ``,``/``:`` separators, non-ASCII escaped.
_encode_envelope = one_shot_encoder(json.JSONEncoder(separators=(",", ":")))

FUTURE_SKEW = 60.0
_PRINCIPAL_LABEL = b"mcp/request-state/principal:"
_MEMBERS = frozenset({"v", "iat", "exp", "m", "t", "a", "s", "aud", "p"})
_CARRIES = PRINCIPAL | AUDIENCE | REQUEST
_sha256 = hashlib.sha256


def _principal_digest(salt: bytes, principal: str) -> bytes:
    # hashlib's SHA-256, a third of cryptography's per call; this module loads only for SDK
    # envelopes, so commands that never see one do not pay for importing it
    return _sha256(_PRINCIPAL_LABEL + salt + principal.encode("utf-8")).digest()[:16]


def _principal_matches(claim: Any, principal: str) -> bool:
    if type(claim) is not str:
        return False
    try:
        raw = b64url_decode(claim)
    except EncodingError:
        return False
    if len(raw) != 24:
        return False
    return compare_digest(_principal_digest(raw[:8], principal), raw[8:])


class McpPyEnvelope(RequestStateOnly):
    """See the module docstring."""

    kind = "mcp-py"
    state_member = "s"
    binds = "request, audience, principal"
    carries, members = _CARRIES, _MEMBERS
    fresh_bytes = 36  # (16 unused) the wire's nonce (12), the principal digest's salt (8)

    def __init__(self, name: str, confidential: bool) -> None:
        super().__init__(name, confidential)
        # the SDK's rules, whichever format carries the envelope (aead and jwe do, for
        # KeysetCodec): its refusals speak of mcp-py tokens
        self.tokens, self.what = "mcp-py tokens", "mcp-py envelope"

    def pack(
        self, state: Any, binding: Binding, key: Key, now: float, ttl: int, fresh: Fresh
    ) -> tuple[bytes, dict[str, Any]]:
        self._requested(state, binding, "method, target (and arguments)")
        request = request_members(binding, binding.digest())
        document: dict[str, Any] = {"v": 1, "iat": now, "exp": now + ttl, **request, "s": state}
        if binding.audience is not None:
            document["aud"] = binding.audience
        if binding.principal is not None:
            salt = fresh.salt
            document["p"] = b64url_encode(salt + _principal_digest(salt, binding.principal))
        return _encode_envelope(document).encode("ascii"), document

    def checked(self, document: Document, plaintext: bytes, now: float, policy: Policy) -> None:
        # the SDK's shape (its version, the state), then its lifetime (numbers, iat at most
        # 60 s ahead, now < exp: stated as what accepts, so a NaN fails; the reader refuses
        # what is not finite), then beyond the SDK exp - iat <= ttl_cap. Where the SDK takes
        # True for the version 1, or fails on its comparison of an iat that is not a number,
        # both are refused here as not its claims.
        self._version_one(document)
        get = document.get
        if type(get("s")) is not str:
            raise InvalidClaims(f"{self.what}: missing state (s must be a string)")
        iat: Any = get("iat")
        exp: Any = get("exp")
        if not (type(iat) is float or type(iat) is int):
            raise InvalidClaims(f"{self.what}: iat must be a number")
        if not iat <= now + FUTURE_SKEW:
            raise NotYetValid(f"not yet valid: minted in the future (iat {iat!r})")
        if not (type(exp) is float or type(exp) is int):
            raise ExpiredToken("expired: exp is not a number")
        check_lifetime(now < exp, now - exp, exp - iat, policy)

    def bound(self, document: Document, key: Key, binding: Binding) -> None:
        # the request, the audience and the principal, each both ways
        self._request_stated(binding.kinds, "method, target and arguments")
        get = document.get
        if get("m") != binding.method or get("t") != binding.target or get("a") != binding.digest():
            raise RequestMismatch("request mismatch")
        if get("aud") != binding.audience:
            raise AudienceMismatch("audience mismatch")
        claim, principal = get("p"), binding.principal
        if both_ways(claim, principal, "principal", PrincipalMismatch) and not (
            _principal_matches(claim, principal)  # type: ignore[arg-type]
        ):
            raise PrincipalMismatch("principal mismatch")

    def claims_of(self, document: dict[str, Any], kid: str) -> Claims:
        get = document.get
        claim = get("p")
        return new_claims(
            state=document["s"],
            iat=get("iat"),
            exp=get("exp"),
            sub=claim if type(claim) is str else None,
            aud=get("aud"),
            rid=f"{get('m')} {get('t')} {get('a')}",
            raw=document,
            kid=kid,
            format=self.name,
        )

    def codec_plaintext(self, envelope: bytes) -> bytes:
        return envelope  # the SDK's own codec seals the envelope as it is

    def codec_envelope(self, plaintext: bytes) -> bytes:
        return plaintext
