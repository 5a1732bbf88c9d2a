"""The MCP Python SDK's envelope (``mcp`` 2.x), checked exactly as the SDK checks it.

    {"v":1,"iat","exp","m","t","a","s","aud"?,"p"?}

written by ``json.dumps`` with ``,``/``:`` separators and non-ASCII escaped; ``iat``/``exp`` are
float seconds and ``iat`` may be up to 60 s in the future; ``m``/``t``/``a`` bind the method,
the target (tool or prompt name, or resource URI) and the arguments digest; ``aud`` and ``p``
bind the audience and the principal, fail-closed both ways. ``p`` is b64url(salt (8) ‖ SHA-256(
``mcp/request-state/principal:`` ‖ salt ‖ principal)[:16]); ``s`` is the server's state string.

It travels in the ``mcp-py`` wire, and (marked 0x01) in aead and jwe when
:class:`mrtr_state.mcp.KeysetCodec` seals it. Where the SDK is lenient, we are not: booleans
are not numbers, NaN fails the accept-conditions, and beyond the SDK a lifetime over the
verifier's ``ttl_cap`` is refused (a leaked secret must not mint state that lives for a year).
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import TYPE_CHECKING, Any

from .._encoding import (
    EncodingError,
    b64url_decode,
    b64url_encode,
    compare_digest,
    json_loads_object,
    one_shot_encoder,
    strict_object,
)
from ..binding import AUDIENCE, PRINCIPAL, REQUEST, Binding
from ..claims import Claims
from ..errors import (
    AudienceMismatch,
    ExpiredToken,
    InvalidClaims,
    InvalidToken,
    NotYetValid,
    PrincipalMismatch,
    RequestMismatch,
)
from . import UNCHECKED, RequestStateOnly, refuse_uncarried

if TYPE_CHECKING:
    from ..formats import Format
    from ..keyset import Key
    from ..policy import Policy

__all__ = ["ENVELOPE", "FUTURE_SKEW", "over_cap"]

# The SDK's compact_json: ``,``/``:`` separators, non-ASCII escaped.
_encode_envelope = one_shot_encoder(json.JSONEncoder(separators=(",", ":")))

FUTURE_SKEW = 60.0
_PRINCIPAL_LABEL = b"mcp/request-state/principal:"
_MEMBERS = frozenset({"v", "iat", "exp", "m", "t", "a", "s", "aud", "p"})
_CARRIES = PRINCIPAL | AUDIENCE | REQUEST
# a binding's kinds under this mask must be REQUEST alone: the request stated, nothing uncarried
_REQUIRED_ONLY = ~(PRINCIPAL | AUDIENCE)
_isfinite = math.isfinite
_sha256 = hashlib.sha256
_new_tuple = tuple.__new__


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


def _number(value: object) -> bool:
    return (type(value) is float or type(value) is int) and _isfinite(value)


def over_cap(lifetime: float, ttl_cap: float) -> str:
    return (
        f"token lifetime {lifetime:.0f} s exceeds this verifier's ttl_cap of {ttl_cap:.0f} s; "
        "raise ttl_cap on the verifier if the issuer really mints tokens this long-lived"
    )


def _document(plaintext: bytes) -> dict[str, Any]:
    """The envelope's members, if it has the SDK's shape; else the refusal."""
    try:
        document = json_loads_object(plaintext)
    except EncodingError as err:
        raise InvalidClaims(f"mcp-py envelope: {err}") from None
    if type(document) is not dict or not document.keys() <= _MEMBERS:
        raise InvalidClaims("mcp-py envelope is not the SDK's claims object")
    if document.get("v") != 1 or type(document.get("s")) is not str:
        raise InvalidClaims("mcp-py envelope: version must be 1 and the state a string")
    return document


def _claims(document: dict[str, Any]) -> Claims:
    get = document.get
    claim = get("p")
    # Claims(state, iat, exp, jti, sub, aud, rid, raw), built as the tuple it is
    return _new_tuple(
        Claims,
        (
            document["s"],
            get("iat"),
            get("exp"),
            None,
            claim if type(claim) is str else None,
            get("aud"),
            f"{get('m')} {get('t')} {get('a')}",
            document,
        ),
    )


class McpPyEnvelope(RequestStateOnly):
    """See the module docstring."""

    name = "mcp-py"
    kind = "mcp-py"
    state_member = "s"
    binds = "request, audience, principal"
    carries = _CARRIES
    fresh_bytes = 36  # (16 unused) the wire's nonce (12), the principal digest's salt (8)
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
        if not isinstance(state, str):
            raise ValueError(
                "mcp-py state is a string (the SDK's requestState); JSON-encode it first"
            )
        if not binding.kinds & REQUEST:
            raise ValueError("mcp-py tokens bind a request: give method, target (and arguments)")
        document: dict[str, Any] = {
            "v": 1,
            "iat": now,
            "exp": now + ttl,
            "m": binding.method,
            "t": binding.target,
            "a": binding.digest(),
            "s": state,
        }
        if binding.audience is not None:
            document["aud"] = binding.audience
        if binding.principal is not None:
            salt = fresh[28:36]
            document["p"] = b64url_encode(salt + _principal_digest(salt, binding.principal))
        return _encode_envelope(document).encode("ascii"), document

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
            raise _refusal(plaintext, binding, now, policy)
        document = parsed[0]
        get = document.get
        iat: Any = get("iat")
        exp: Any = get("exp")
        claim, principal = get("p"), binding.principal
        # The one accepting test, in the SDK's order: shape, lifetime (iat at most 60 s ahead,
        # now < exp, both finite numbers; beyond the SDK exp - iat <= ttl_cap), then request,
        # audience and principal, fail-closed both ways. _refusal says which failed.
        if (
            document.keys() <= _MEMBERS
            and get("v") == 1
            and type(get("s")) is str
            and (type(iat) is float or type(iat) is int)
            and _isfinite(iat)
            and (type(exp) is float or type(exp) is int)
            and _isfinite(exp)
            and iat <= now + FUTURE_SKEW
            and now < exp
            and exp - iat <= policy.lifetime_cap
            and (
                binding is UNCHECKED
                or (
                    (binding.kinds & _REQUIRED_ONLY) == REQUEST
                    and get("m") == binding.method
                    and get("t") == binding.target
                    and get("a") == binding.digest()
                    and get("aud") == binding.audience
                    and (
                        (claim is None and principal is None)
                        or (
                            claim is not None
                            and principal is not None
                            and _principal_matches(claim, principal)
                        )
                    )
                )
            )
        ):
            return _claims(document)
        raise _refusal(plaintext, binding, now, policy)

    def claims_of(self, document: dict[str, Any]) -> Claims:
        return _claims(document)

    def codec_plaintext(self, envelope: bytes) -> bytes:
        return envelope  # the SDK's own codec seals the envelope as it is

    def codec_envelope(self, plaintext: bytes) -> bytes:
        return plaintext


def _refusal(plaintext: bytes, binding: Binding, now: float, policy: Policy) -> InvalidToken:
    """Why :meth:`McpPyEnvelope.accept` refused: its checks one at a time, in its order. Only
    ever an explanation: whatever this finds, the token was already refused."""
    try:
        document = _document(plaintext)
    except InvalidClaims as err:
        return err
    get = document.get
    # the SDK's lifetime (iat at most 60 s ahead, now < exp, both finite numbers), then
    # beyond the SDK exp - iat <= ttl_cap
    iat: Any = get("iat")
    exp: Any = get("exp")
    if not (_number(iat) and iat <= now + FUTURE_SKEW):
        return NotYetValid(f"not yet valid: minted in the future (iat {iat!r})")
    if not (_number(exp) and now < exp):
        return ExpiredToken(f"expired {int(now - exp) if _number(exp) else '?'} s ago")
    if not exp - iat <= policy.lifetime_cap:
        return InvalidClaims(over_cap(exp - iat, policy.lifetime_cap))
    if binding is UNCHECKED:
        pass  # inspect's view: bindings are not examined
    elif binding.kinds & ~_CARRIES:
        return refuse_uncarried(binding.kinds & ~_CARRIES, "mcp-py tokens")
    elif not binding.kinds & REQUEST:
        return RequestMismatch(
            "request mismatch: mcp-py tokens are bound to their request; give the method, "
            "target and arguments"
        )
    elif get("m") != binding.method or get("t") != binding.target or get("a") != binding.digest():
        return RequestMismatch("request mismatch")
    elif get("aud") != binding.audience:
        return AudienceMismatch("audience mismatch")
    elif get("p") is None:
        if binding.principal is not None:
            return PrincipalMismatch(
                "principal mismatch: the token is not bound to a principal, but one was given"
            )
    elif binding.principal is None:
        return PrincipalMismatch(
            "principal mismatch: the token is bound to a principal; give it to verify"
        )
    elif not _principal_matches(get("p"), binding.principal):
        return PrincipalMismatch("principal mismatch")
    # not reached while this and accept agree; if they ever part, the token stays refused
    return InvalidClaims("mcp-py envelope refused")


ENVELOPE = McpPyEnvelope()
