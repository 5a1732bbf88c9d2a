"""What mrtr-state's own formats (aead, jws, jwe) carry: claims, or a marked payload.

The plaintext's first byte says which, and no two can be confused:

* ``{``: claims, ``{"iat","exp","jti","sub"?,"aud"?,"rid"?,"st"}`` (:mod:`mrtr_state.claims`);
* ``0x00``: bytes sealed by :func:`mrtr_state.seal`, with no claims, expiry or binding;
* ``0x01``: an MCP Python SDK envelope sealed by :class:`mrtr_state.mcp.KeysetCodec`, accepted
  on that SDK's conditions (:mod:`.mcp_py`).

Claims are accepted in one straight run, each check stated as the condition to accept so that a
value comparing false with everything (NaN) fails closed: shape (exact types, nothing unknown),
then lifetime (``0 < exp - iat <= ttl_cap``, ``iat <= now + skew``, ``now < exp``), then each
binding, both ways: a token bound to a principal, request or audience is refused when the
verifier does not state the same value, and a verifier that states one refuses a token that
lacks it. Otherwise an unbound token, minted by any code path that forgot the binding, would be
accepted everywhere.

In a readable format (jws) the principal is never written in clear: ``sub`` holds a salted keyed
tag of it (:mod:`mrtr_state._principal`), which only a key holder can test.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._encoding import (
    EncodingError,
    b64url_encode,
    claims_bytes,
    compare_digest,
    json_loads_object,
    strict_object,
)
from .._principal import principal_tag, tag_matches
from ..binding import AUDIENCE, PRINCIPAL, REQUEST, REQUEST_ID, Binding
from ..claims import MAX_TIME, Claims, audience_list, claims_of, claims_problem, parse_claims
from ..errors import (
    AudienceMismatch,
    ExpiredToken,
    InvalidClaims,
    InvalidToken,
    NotYetValid,
    PrincipalMismatch,
    RequestMismatch,
    WrongFormat,
)
from . import UNCHECKED, View, refuse_uncarried

if TYPE_CHECKING:
    from ..formats import Format
    from ..keyset import Key
    from ..policy import Policy

__all__ = ["ENVELOPE"]

SEALED = b"\x00"
CODEC = b"\x01"
_CARRIES = PRINCIPAL | AUDIENCE | REQUEST_ID | REQUEST
_UNCARRIED = ~_CARRIES
_REQUESTS = REQUEST_ID | REQUEST
_new_tuple = tuple.__new__
_NOT_CHECKED = "bindings (principal, request, audience) were not checked"


def _ago(seconds: float) -> str:
    whole = int(seconds)
    if whole < 120:
        return f"{whole} s"
    if whole < 7200:
        return f"{whole // 60} min"
    return f"{whole // 3600} h"


def _same(stored: str, expected: str) -> bool:
    """Equal, compared in constant time (non-ASCII text as its UTF-8 bytes; a lone surrogate,
    which only a key holder could have written, equals nothing a verifier can state)."""
    try:
        return compare_digest(stored, expected)
    except TypeError:
        return compare_digest(stored.encode("utf-8", "surrogatepass"), expected.encode("utf-8"))


def _unbound(what: str, error: type[InvalidToken]) -> InvalidToken:
    return error(f"{what} mismatch: the token is not bound to a {what}, but one was given")


def _bound(what: str, error: type[InvalidToken]) -> InvalidToken:
    return error(f"{what} mismatch: the token is bound to a {what}; give it to verify")


class OwnEnvelope:
    """Claims, sealed payloads and KeysetCodec envelopes in aead, jws and jwe; see above."""

    kind = "claims"
    state_member = "st"
    carries = _CARRIES
    # the token id (16) and the wire's nonce (12); jws, which takes no nonce, salts the
    # principal tag with the nonce's first 8 bytes instead
    fresh_bytes = 28

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
        iat = int(now)
        claims: dict[str, Any] = {"iat": iat, "exp": iat + ttl, "jti": b64url_encode(fresh[:16])}
        principal = binding.principal
        if principal is not None:
            claims["sub"] = (
                principal if fmt.confidential else principal_tag(key, principal, fresh[16:24])
            )
        if binding.audience is not None:
            claims["aud"] = binding.audience
        if binding.kinds & (REQUEST_ID | REQUEST):
            claims["rid"] = binding.fingerprint()
        claims["st"] = state
        return claims_bytes(claims, state), claims

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
        if plaintext[:1] != b"{":
            return self._marked(plaintext, key, fmt, binding, now, policy)
        parsed = strict_object(plaintext)
        if parsed is None:
            raise _unreadable(plaintext)
        document, text = parsed
        try:
            state, iat, exp, jti = document["st"], document["iat"], document["exp"], document["jti"]
        except KeyError:
            raise _refusal(document, key, fmt, binding, now, policy) from None
        get = document.get
        sub, rid = get("sub"), get("rid")
        aud: Any = get("aud")
        principal, audience, requests = binding.principal, binding.audience, binding.kinds
        requests &= _REQUESTS
        # The one accepting test, in the module docstring's order: shape, lifetime, bindings.
        # Each clause is the condition to accept (NaN, or anything unforeseen, fails closed);
        # _refusal works out which failed only once one has. A stated binding is non-empty text,
        # so comparing with it also tests the claim's type and non-emptiness.
        if (
            type(iat) is int
            and type(exp) is int
            and type(jti) is str
            and jti
            and len(document) == 4 + (sub is not None) + (aud is not None) + (rid is not None)
            and iat >= 0
            and exp < MAX_TIME
            and 0 < exp - iat <= policy.lifetime_cap
            and iat <= now + policy.skew
            and now < exp
            and (
                (
                    not binding.kinds & _UNCARRIED
                    and (
                        (sub is None and principal is None)
                        or (
                            type(sub) is str
                            and principal is not None
                            and (
                                _same(sub, principal)
                                if fmt.confidential
                                else tag_matches(key, sub, principal)
                            )
                        )
                    )
                    and (
                        (aud is None and audience is None)
                        or (
                            audience is not None
                            and (
                                _same(aud, audience)
                                if type(aud) is str
                                else audience_list(aud) and any(_same(a, audience) for a in aud)
                            )
                        )
                    )
                    and (
                        (rid is None and not requests)
                        or (
                            type(rid) is str
                            and requests
                            and _same(rid, binding.rid or binding.fingerprint())  # type: ignore[arg-type]
                        )
                    )
                )
                # inspect's view: the shape of the claims it did not compare
                or (
                    binding is UNCHECKED
                    and (sub is None or (type(sub) is str and sub))
                    and (aud is None or (type(aud) is str and aud) or audience_list(aud))
                    and (rid is None or (type(rid) is str and rid))
                )
            )
        ):
            if carried is not None:
                value = _carried_state(text, document)
                if value is not None:
                    carried.append(value)
            return _new_tuple(Claims, (state, iat, exp, jti, sub, aud, rid, None))
        raise _refusal(document, key, fmt, binding, now, policy)

    def _marked(
        self, plaintext: bytes, key: Key, fmt: Format, binding: Binding, now: float, policy: Policy
    ) -> Claims:
        """A plaintext that is not claims: a KeysetCodec envelope is accepted as the SDK's."""
        marker = plaintext[:1]
        if marker == CODEC:
            from .mcp_py import ENVELOPE as sdk

            return sdk.accept(plaintext[1:], key, fmt, binding, now, policy)
        if marker == SEALED:
            raise WrongFormat("this token holds a sealed payload, not claims; use unseal")
        raise _unreadable(plaintext)

    def view(self, plaintext: bytes, key: Key, fmt: Format, now: float, policy: Policy) -> View:
        marker = plaintext[:1]
        if marker == CODEC:
            from .mcp_py import ENVELOPE as sdk

            inner = sdk.view(plaintext[1:], key, fmt, now, policy)
            inner.notes = (
                "an MCP Python SDK envelope sealed by KeysetCodec; its bindings (request, "
                "audience, principal) were not checked: use verify with them",
            )
            return inner
        if marker == SEALED:
            notes = ("sealed payload: no claims, no expiry, no binding",)
            return View("sealed", None, "st", notes, sealed_bytes=len(plaintext) - 1)
        shown: dict[str, Any] | None = None
        try:
            shown = parse_claims(json_loads_object(plaintext)).to_dict()
        except EncodingError as err:
            return View("claims", None, "st", (_NOT_CHECKED,), InvalidClaims(f"claims: {err}"))
        except InvalidClaims as err:
            return View("claims", None, "st", (_NOT_CHECKED,), err)
        try:
            self.accept(plaintext, key, fmt, UNCHECKED, now, policy)
        except InvalidToken as err:
            return View("claims", shown, "st", (_NOT_CHECKED,), err)
        return View("claims", shown, "st", (_NOT_CHECKED,))

    def claims_of(self, document: dict[str, Any]) -> Claims:
        return claims_of(document)  # our own, just packed: nothing to check

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


def _refusal(
    document: dict[str, Any], key: Key, fmt: Format, binding: Binding, now: float, policy: Policy
) -> InvalidToken:
    """Why :meth:`OwnEnvelope.accept` refused ``document``: its checks, one at a time, in its
    order. Only ever an explanation: whatever this finds, the token was already refused."""
    problem = claims_problem(document)
    if problem is not None:
        return problem
    iat, exp = document["iat"], document["exp"]
    lifetime = exp - iat
    if not lifetime > 0:
        return InvalidClaims(f"token lifetime {lifetime} s is not positive (exp <= iat)")
    if not lifetime <= policy.lifetime_cap:
        return InvalidClaims(
            f"token lifetime {lifetime} s exceeds this verifier's ttl_cap of "
            f"{policy.lifetime_cap} s: it was minted under a higher cap; raise ttl_cap on the "
            "verifier too, or mint shorter tokens"
        )
    if not iat <= now + policy.skew:
        return NotYetValid(
            f"not yet valid: issued {iat - now:.0f} s in the future, beyond the "
            f"{policy.skew} s allowed clock skew"
        )
    if not now < exp:
        return ExpiredToken(f"expired {_ago(now - exp)} ago")
    if binding is not UNCHECKED:
        if binding.kinds & _UNCARRIED:
            return refuse_uncarried(binding.kinds & _UNCARRIED, f"{fmt.name} tokens")
        get = document.get
        sub, principal = get("sub"), binding.principal
        if sub is None:
            if principal is not None:
                return _unbound("principal", PrincipalMismatch)
        elif principal is None:
            return _bound("principal", PrincipalMismatch)
        elif not (_same(sub, principal) if fmt.confidential else tag_matches(key, sub, principal)):
            return PrincipalMismatch("principal mismatch")
        aud, audience = get("aud"), binding.audience
        if aud is None:
            if audience is not None:
                return _unbound("audience", AudienceMismatch)
        elif audience is None:
            return _bound("audience", AudienceMismatch)
        elif not any(_same(one, audience) for one in ([aud] if type(aud) is str else aud)):
            return AudienceMismatch("audience mismatch")
        rid, requests = get("rid"), binding.kinds & _REQUESTS
        if rid is None:
            if requests:
                return _unbound("request", RequestMismatch)
        elif not requests:
            return _bound("request", RequestMismatch)
        elif not _same(rid, binding.fingerprint()):  # type: ignore[arg-type]
            return RequestMismatch("request mismatch")
    # not reached while this and accept agree; if they ever part, the token stays refused
    return InvalidClaims("claims refused")


def _unreadable(plaintext: bytes) -> InvalidClaims:
    """Why ``plaintext`` is not claims JSON, as the strict parser words it."""
    try:
        json_loads_object(plaintext)
    except EncodingError as err:
        return InvalidClaims(f"claims: {err}")
    return InvalidClaims("claims: not valid JSON")  # not reached: fail closed


def _carried_state(text: str, document: dict[str, Any]) -> str | None:
    """The state's own JSON text in accepted claims ``text``, if it can be printed as is: the
    top-level ``st`` member written plainly and last, its value on one line. Else None.

    The first plain ``"st":`` is the top-level member when no object opens before it (the
    members before it are scalars or lists of strings, and a JSON string cannot hold an
    unescaped quote); claims whose last member is ``st`` end with its value, then only
    whitespace and the brace.
    """
    at = text.find('"st":')
    if at < 0 or "{" in text[1:at] or next(reversed(document)) != "st":
        return None
    value = text[at + 5 : -1].strip(" \t")
    if not value or "\n" in value or "\r" in value:
        return None
    return value


ENVELOPE = OwnEnvelope()
