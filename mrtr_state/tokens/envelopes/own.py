"""What mrtr-state's own formats (aead, jws, jwe) carry: claims, or a marked payload.

The plaintext's first byte says which, and no two can be confused:

* ``{``: claims, ``{"iat","exp","jti","sub"?,"aud"?,"rid"?,"st"}``
(:mod:`mrtr_state.tokens.claims`);
* ``0x00``: bytes sealed by :func:`mrtr_state.seal`, with no claims, expiry or binding;
* ``0x01``: an MCP Python SDK envelope sealed by :class:`mrtr_state.sdk.codec.KeysetCodec`, accepted
  on that SDK's conditions (:mod:`.mcp_py`).

Claims are accepted in one straight run, each check stated as the condition to accept so that a
value comparing false with everything (NaN) fails closed: shape (exact types, nothing unknown),
then lifetime (``0 < exp - iat <= ttl_cap``, ``iat <= now + skew``, ``now < exp``), then each
binding, both ways: a token bound to a principal, request or audience is refused when the
verifier does not state the same value, and a verifier that states one refuses a token that
lacks it. Otherwise an unbound token, minted by any code path that forgot the binding, would be
accepted everywhere.

In a readable format (jws) the principal is never written in clear: ``sub`` holds a salted keyed
tag of it (:mod:`mrtr_state.tokens.principal`), which only a key holder can test.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ..._encoding import (
    EncodingError,
    authenticated_object,
    b64url_encode,
    claims_bytes,
    compare_digest,
    json_value_end,
)
from ...errors import (
    AudienceMismatch,
    ExpiredToken,
    InvalidClaims,
    InvalidToken,
    NotYetValid,
    PrincipalMismatch,
    RequestMismatch,
    WrongFormat,
)
from ..binding import AUDIENCE, PRINCIPAL, REQUEST, REQUEST_ID, Binding
from ..claims import MAX_TIME, Claims, audience_list, new_claims
from ..principal import principal_tag, tag_matches
from . import (
    UNCHECKED,
    Carried,
    View,
    bound_mismatch,
    refuse_uncarried,
    unbound_mismatch,
    unreadable,
)

if TYPE_CHECKING:
    from ..._entropy import Fresh
    from ...keys.key import Key
    from ..policy import Policy
    from .mcp_py import McpPyEnvelope

__all__ = ["CODEC", "SEALED", "OwnEnvelope"]

SEALED = b"\x00"
CODEC = b"\x01"
_MEMBERS = frozenset({"iat", "exp", "jti", "sub", "aud", "rid", "st"})
_REQUIRED = ("iat", "exp", "jti", "st")
_CARRIES = PRINCIPAL | AUDIENCE | REQUEST_ID | REQUEST
_UNCARRIED = ~_CARRIES
_REQUESTS = REQUEST_ID | REQUEST
_OPTIONAL = ("sub", "aud", "rid")
_AUDIENCES = " or list of them"
_NOT_CHECKED = "bindings (principal, request, audience) were not checked"


def _show(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, float) else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _not_seconds(name: str, value: Any) -> InvalidClaims:
    return InvalidClaims(f"claim {name} must be a whole number of seconds, got {_show(value)}")


def _not_text(name: str, value: Any, lists: str = "") -> InvalidClaims:
    return InvalidClaims(f"claim {name} must be a non-empty string{lists}, got {_show(value)}")


def _unknown_or_null(document: dict[str, Any]) -> InvalidClaims:
    """The refusal of claims that hold more members than their required claims and the
    optional ones given: members of no claim, else an optional claim given as null."""
    unknown = sorted(document.keys() - _MEMBERS)
    if unknown:
        return InvalidClaims(f"claims hold unknown members {', '.join(unknown)}")
    name = next(name for name in _OPTIONAL if name in document and document[name] is None)
    return _not_text(name, None, _AUDIENCES if name == "aud" else "")


def _ago(seconds: float) -> str:
    whole = int(seconds)
    if whole < 120:
        return f"{whole} s"
    if whole < 7200:
        return f"{whole // 60} min"
    return f"{whole // 3600} h"


def _fingerprint(binding: Binding) -> str:
    """The fingerprint of the request a verifier states; for one with an empty target, which
    has none (no token of ours is minted for it), the empty string: it matches no claim, so
    the token is refused as bound to another request, whichever binding is checked first."""
    try:
        return binding.fingerprint() or ""
    except ValueError:
        return ""


def _same(stored: str, expected: str) -> bool:
    """Equal, compared in constant time (non-ASCII text as its UTF-8 bytes; a lone surrogate,
    which only a key holder could have written, equals nothing a verifier can state)."""
    try:
        return compare_digest(stored, expected)
    except TypeError:
        return compare_digest(stored.encode("utf-8", "surrogatepass"), expected.encode("utf-8"))


class OwnEnvelope:
    """Claims, sealed payloads and KeysetCodec envelopes in aead, jws and jwe; see above."""

    kind = "claims"
    state_member = "st"
    carries = _CARRIES
    mint_binds = ""
    # the token id (16) and the wire's nonce (12); jws, which takes no nonce, salts the
    # principal tag with those bytes instead (see Fresh)
    fresh_bytes = 28

    def __init__(self, name: str, confidential: bool) -> None:
        self.name = name
        #: whether the wire encrypts: then ``sub`` is the principal, else a keyed tag of it
        self.confidential = confidential
        self._tokens = f"{name} tokens"
        self._sdk: McpPyEnvelope | None = None

    def _codec(self) -> McpPyEnvelope:
        """The Python SDK's checks, for envelopes KeysetCodec sealed in this format (made on
        first use: most commands never meet one)."""
        if self._sdk is None:
            from .mcp_py import McpPyEnvelope

            self._sdk = McpPyEnvelope(self.name, self.confidential)
        return self._sdk

    def pack(
        self, state: Any, binding: Binding, key: Key, now: float, ttl: int, fresh: Fresh
    ) -> tuple[bytes, dict[str, Any]]:
        iat = int(now)
        claims: dict[str, Any] = {
            "iat": iat,
            "exp": iat + ttl,
            "jti": b64url_encode(fresh.token_id),
        }
        principal = binding.principal
        if principal is not None:
            claims["sub"] = (
                principal if self.confidential else principal_tag(key, principal, fresh.salt)
            )
        if binding.audience is not None:
            claims["aud"] = binding.audience
        if binding.kinds & _REQUESTS:
            claims["rid"] = binding.fingerprint()
        claims["st"] = state
        return claims_bytes(claims, state), claims

    def accept(
        self, plaintext: bytes, key: Key, binding: Binding, now: float, policy: Policy, out: Carried
    ) -> Claims:
        try:
            document = authenticated_object(plaintext)
        except EncodingError as err:  # a marked payload, or not claims at all
            return self._marked(plaintext, err, key, binding, now, policy)
        # shape: every required claim, exact types, nothing unknown, no optional claim null
        try:
            state, iat, exp, jti = document["st"], document["iat"], document["exp"], document["jti"]
        except KeyError:
            missing = ", ".join(name for name in _REQUIRED if name not in document)
            raise InvalidClaims(f"claims lack {missing}") from None
        if type(iat) is not int or not 0 <= iat < MAX_TIME:
            raise _not_seconds("iat", iat)
        if type(exp) is not int or not 0 <= exp < MAX_TIME:
            raise _not_seconds("exp", exp)
        if type(jti) is not str or not jti:
            raise InvalidClaims("claim jti must be a non-empty string")
        get = document.get
        sub, aud, rid = get("sub"), get("aud"), get("rid")
        if len(document) != 4 + (sub is not None) + (aud is not None) + (rid is not None):
            raise _unknown_or_null(document)
        if sub is not None and (type(sub) is not str or not sub):
            raise _not_text("sub", sub)
        if aud is not None and not ((type(aud) is str and aud) or audience_list(aud)):
            raise _not_text("aud", aud, _AUDIENCES)
        if rid is not None and (type(rid) is not str or not rid):
            raise _not_text("rid", rid)
        # lifetime, each condition stated as what accepts (a NaN clock fails closed)
        lifetime = exp - iat
        if not lifetime > 0:
            raise InvalidClaims(f"token lifetime {lifetime} s is not positive (exp <= iat)")
        if not lifetime <= policy.lifetime_cap:
            raise InvalidClaims(
                f"token lifetime {lifetime} s exceeds this verifier's ttl_cap of "
                f"{policy.lifetime_cap} s: it was minted under a higher cap; raise ttl_cap on "
                "the verifier too, or mint shorter tokens"
            )
        if not iat <= now + policy.skew:
            raise NotYetValid(
                f"not yet valid: issued {iat - now:.0f} s in the future, beyond the "
                f"{policy.skew} s allowed clock skew"
            )
        if not now < exp:
            raise ExpiredToken(f"expired {_ago(now - exp)} ago")
        # each binding, both ways (inspect states none: its view stops before them), compared
        # in constant time
        if binding is not UNCHECKED:
            kinds = binding.kinds
            if kinds & _UNCARRIED:
                raise refuse_uncarried(kinds & _UNCARRIED, self._tokens)
            principal = binding.principal
            if sub is None:
                if principal is not None:
                    raise unbound_mismatch("principal", PrincipalMismatch)
            elif principal is None:
                raise bound_mismatch("principal", PrincipalMismatch)
            elif not (
                _same(sub, principal) if self.confidential else tag_matches(key, sub, principal)
            ):
                raise PrincipalMismatch("principal mismatch")
            audience = binding.audience
            if aud is None:
                if audience is not None:
                    raise unbound_mismatch("audience", AudienceMismatch)
            elif audience is None:
                raise bound_mismatch("audience", AudienceMismatch)
            elif not (
                _same(aud, audience)
                if type(aud) is str
                else any(_same(one, audience) for one in aud)
            ):
                raise AudienceMismatch("audience mismatch")
            if rid is None:
                if kinds & _REQUESTS:
                    raise unbound_mismatch("request", RequestMismatch)
            elif not kinds & _REQUESTS:
                raise bound_mismatch("request", RequestMismatch)
            elif not _same(rid, binding.rid or _fingerprint(binding)):
                raise RequestMismatch("request mismatch")
        if out is not None:
            shown = _carried_state(plaintext)
            if shown is not None:
                out.append(shown)
        return new_claims(
            state=state,
            iat=iat,
            exp=exp,
            jti=jti,
            sub=sub,
            aud=aud,
            rid=rid,
            kid=key.kid,
            format=self.name,
        )

    def _marked(
        self,
        plaintext: bytes,
        unread: EncodingError,
        key: Key,
        binding: Binding,
        now: float,
        policy: Policy,
    ) -> Claims:
        """A plaintext that is not claims: a KeysetCodec envelope is accepted as the SDK's, a
        sealed payload is refused as not a requestState, anything else as unreadable claims."""
        marker = plaintext[:1]
        if marker == CODEC:
            return self._codec().accept(plaintext[1:], key, binding, now, policy, None)
        if marker == SEALED:
            raise WrongFormat("this token holds a sealed payload, not claims; use unseal")
        raise unreadable("claims", unread)

    def view(self, plaintext: bytes, key: Key, now: float, policy: Policy) -> View:
        marker = plaintext[:1]
        if marker == CODEC:
            inner = self._codec().view(plaintext[1:], key, now, policy)
            inner.notes = (
                "an MCP Python SDK envelope sealed by KeysetCodec; its bindings (request, "
                "audience, principal) were not checked: use verify with them",
            )
            return inner
        if marker == SEALED:
            notes = ("sealed payload: no claims, no expiry, no binding",)
            return View("sealed", None, "st", notes, sealed_bytes=len(plaintext) - 1)
        try:
            shown: dict[str, Any] | None = authenticated_object(plaintext)
        except EncodingError:
            shown = None
        try:
            self.accept(plaintext, key, UNCHECKED, now, policy, None)
        except InvalidToken as err:
            return View("claims", shown, "st", (_NOT_CHECKED,), err)
        return View("claims", shown, "st", (_NOT_CHECKED,))

    def claims_of(self, document: dict[str, Any], kid: str) -> Claims:
        """The claims :meth:`pack` just made: ours, so nothing to check."""
        get = document.get
        return new_claims(
            state=document["st"],
            iat=document["iat"],
            exp=document["exp"],
            jti=document["jti"],
            sub=get("sub"),
            aud=get("aud"),
            rid=get("rid"),
            kid=kid,
            format=self.name,
        )

    def unverified(self, document: dict[str, Any]) -> dict[str, Any]:
        return document

    def sealed(self, payload: bytes) -> bytes:
        return SEALED + payload

    def unsealed(self, plaintext: bytes) -> bytes:
        marker = plaintext[:1]
        if marker == SEALED:
            return plaintext[1:]
        if marker == CODEC:
            raise WrongFormat(
                "this token holds an SDK requestState envelope; use verify or inspect"
            )
        raise WrongFormat("this token holds claims, not a sealed payload; use verify")

    def codec_plaintext(self, envelope: bytes) -> bytes:
        return CODEC + envelope

    def codec_envelope(self, plaintext: bytes) -> bytes:
        if plaintext[:1] != CODEC:
            raise WrongFormat("this token does not hold an SDK requestState envelope")
        return plaintext[1:]


def _carried_state(plaintext: bytes) -> str | None:
    """The state's own JSON text in accepted claims, if it can be printed as is: the top-level
    ``st`` member written plainly and last, its value on one line. Else None.

    The first plain ``"st":`` is the top-level member when no object opens before it (the
    members before it are scalars or lists of strings, and a JSON string cannot hold an
    unescaped quote); it is the last member, and so (last wins) the one accepted, when its
    value runs to the closing brace.
    """
    text = plaintext.decode("utf-8")
    at = text.find('"st":')
    if at < 0 or "{" in text[1:at]:
        return None
    end = json_value_end(text, at + 5)
    if end is None:
        return None
    value = text[at + 5 : end]
    if end != len(text) - 1 or "\n" in value or "\r" in value:
        return None
    return value
