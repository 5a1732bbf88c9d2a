"""Claims: what a requestState token asserts, and the checks that decide whether to believe it.

Every check is stated as the condition to *accept* (``iat <= now + skew``, ``now < exp``), so a
value that compares false with everything, such as NaN, fails closed instead of slipping through
an ``if now > exp: reject`` test. Numbers must be true integers: ``true`` is not 1, ``"1"`` is
not 1, and 1e400 never gets this far (the JSON layer refuses it).

Binding fails closed in both directions: a token bound to a principal, request or audience is
refused when the verifier does not state the same value, and a verifier that states one refuses
a token that lacks it. Otherwise an unbound token, minted by any code path that forgot the
binding, would be accepted everywhere.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, NamedTuple

from ._encoding import b64url_encode, compare_digest, one_shot_encoder
from .errors import (
    AudienceMismatch,
    BindingMismatch,
    ExpiredToken,
    InvalidClaims,
    NotYetValid,
    PrincipalMismatch,
    RequestMismatch,
)
from .policy import Policy

__all__ = ["Claims", "arguments_digest", "request_id"]

MAX_TIME = 2**53  # beyond this a double loses integers; no honest token gets near it
_MAX_TIME = MAX_TIME
_MEMBERS = frozenset({"iat", "exp", "jti", "sub", "aud", "rid", "st"})
_REQUIRED = ("iat", "exp", "jti", "st")
_FINGERPRINT_PREFIX = "mcp1:"
# json.dumps(sort_keys=True, separators=(",", ":")) with its ASCII escaping, built once.
_ARGUMENTS_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=True)


_encode_arguments = one_shot_encoder(_ARGUMENTS_ENCODER)
# json.dumps(separators=(",", ":"), ensure_ascii=True) of the fingerprint's parts, built once.
_encode_parts = one_shot_encoder(json.JSONEncoder(separators=(",", ":"), ensure_ascii=True))


class Claims(NamedTuple):
    """The verified content of a token. ``state`` is what the server asked to carry.

    Immutable. A named tuple rather than a frozen dataclass because it is built on every
    verification: a frozen dataclass's ``__init__`` costs more than the JSON checks of the claims.
    """

    state: Any
    iat: float | None
    exp: float
    jti: str | None
    sub: str | None = None
    #: One audience, or (in a JWT from another library) a list of them.
    aud: str | list[str] | None = None
    rid: str | None = None
    #: For the SDK formats, the envelope exactly as the token carries it.
    raw: Mapping[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """Claims under their JWT names, in the order they are minted (SDK envelopes as is)."""
        if self.raw is not None:
            return dict(self.raw)
        out: dict[str, Any] = {"iat": self.iat, "exp": self.exp, "jti": self.jti}
        for name in ("sub", "aud", "rid"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        out["st"] = self.state
        return out


_new_tuple = tuple.__new__


def _integer_error(name: str, value: Any) -> InvalidClaims:
    return InvalidClaims(f"claim {name} must be a whole number of seconds, got {_show(value)}")


def _show(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, float) else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def parse_claims(document: Any) -> Claims:
    """Check the shape of decoded claims: required members, exact types, nothing unknown.

    On the hot path of every verification: one expression accepts well-formed claims, and only
    when it fails are the specific messages worked out (:func:`_refuse_claims`). Counting the
    members present against those the expression checked rules out unknown members and
    optional claims written as null in the same step.
    """
    if type(document) is dict:
        get = document.get
        iat, exp, jti, sub, aud, rid = (
            get("iat"),
            get("exp"),
            get("jti"),
            get("sub"),
            get("aud"),
            get("rid"),
        )
        if (
            type(iat) is int
            and type(exp) is int
            and type(jti) is str
            and 0 <= iat < _MAX_TIME
            and 0 <= exp < _MAX_TIME
            and jti
            and "st" in document
            and (sub is None or (type(sub) is str and sub))
            and (aud is None or (type(aud) is str and aud) or _audience_list(aud))
            and (rid is None or (type(rid) is str and rid))
            and len(document) == 4 + (sub is not None) + (aud is not None) + (rid is not None)
        ):
            return _new_tuple(Claims, (document["st"], iat, exp, jti, sub, aud, rid, None))
    raise _refuse_claims(document)


def _audience_list(value: Any) -> bool:
    """RFC 7519 allows ``aud`` to be a list of audiences; ours are never empty, nor their items."""
    return type(value) is list and bool(value) and all(type(a) is str and a for a in value)


def _refuse_claims(document: Any) -> InvalidClaims:
    """The precise reason ``document`` is not acceptable claims (the slow path)."""
    if type(document) is not dict:
        return InvalidClaims("claims must be a JSON object")
    if not document.keys() <= _MEMBERS:
        unknown = sorted(set(document) - _MEMBERS)
        return InvalidClaims(f"claims hold unknown members {', '.join(unknown)}")
    missing = [name for name in _REQUIRED if name not in document]
    if missing:
        return InvalidClaims(f"claims lack {', '.join(missing)}")
    for name in ("iat", "exp"):
        value = document[name]
        if type(value) is not int or not 0 <= value < _MAX_TIME:
            return _integer_error(name, value)
    if type(document["jti"]) is not str or not document["jti"]:
        return InvalidClaims("claim jti must be a non-empty string")
    for name in ("sub", "aud", "rid"):
        if name in document:
            value = document[name]
            if name == "aud" and _audience_list(value):
                continue
            if type(value) is not str or not value:
                what = "a non-empty string" + (" or list of them" if name == "aud" else "")
                return InvalidClaims(f"claim {name} must be {what}, got {_show(value)}")
    return InvalidClaims("claims are not in the accepted shape")  # not reached: fail closed


def check_claims(
    claims: Claims,
    now: float,
    policy: Policy,
    *,
    sub: str | None,
    aud: str | None,
    rid: str | None,
) -> None:
    """:func:`check_lifetime` then :func:`check_binding`, lifetime first, so that "expired" wins
    over a binding mismatch.

    The general path of verification, where every refusal is named: a valid token's common case
    is accepted by :func:`mrtr_state.tokens.verify` in one folded test before it gets here.
    """
    check_lifetime(claims, now, policy)
    check_binding(claims, sub=sub, aud=aud, rid=rid)


def _same(stored: str | None, expected: str | None) -> bool:
    """Both absent, or both present and equal (compared in constant time)."""
    if stored is None or expected is None:
        return stored is expected
    try:
        return compare_digest(stored, expected)
    except TypeError:  # non-ASCII text is compared as UTF-8 bytes
        return compare_digest(stored.encode("utf-8"), expected.encode("utf-8"))


def check_lifetime(claims: Claims, now: float, policy: Policy) -> None:
    """Accept only ``0 < exp - iat <= ttl_cap``, ``iat <= now + skew`` and ``now < exp``."""
    if claims.iat is None:
        raise InvalidClaims("claims lack iat")
    lifetime = claims.exp - claims.iat
    if not lifetime > 0:
        raise InvalidClaims(f"token lifetime {lifetime} s is not positive (exp <= iat)")
    if not lifetime <= policy.ttl_cap:
        raise InvalidClaims(
            f"token lifetime {lifetime} s exceeds this verifier's ttl_cap of {policy.ttl_cap} s: "
            "it was minted under a higher cap; raise ttl_cap on the verifier too, or mint "
            "shorter tokens"
        )
    if not claims.iat <= now + policy.skew:
        ahead = claims.iat - now
        raise NotYetValid(
            f"not yet valid: issued {ahead:.0f} s in the future, beyond the {policy.skew} s "
            "allowed clock skew"
        )
    if not now < claims.exp:
        raise ExpiredToken(f"expired {_ago(now - claims.exp)} ago")


def _ago(seconds: float) -> str:
    whole = int(seconds)
    if whole < 120:
        return f"{whole} s"
    if whole < 7200:
        return f"{whole // 60} min"
    return f"{whole // 3600} h"


def check_binding(claims: Claims, *, sub: str | None, aud: str | None, rid: str | None) -> None:
    """Refuse unless each of principal, audience and request matches exactly (or both absent)."""
    if claims.sub is not None or sub is not None:
        _bound("principal", claims.sub, sub, PrincipalMismatch)
    if claims.aud is not None or aud is not None:
        stored: Any = claims.aud
        if type(stored) is list and aud is not None:
            # a list names every audience the token is for: the verifier's must be one of them
            stored = next((a for a in stored if _same(a, aud)), stored[0])
        _bound("audience", stored, aud, AudienceMismatch)
    if claims.rid is not None or rid is not None:
        _bound("request", claims.rid, rid, RequestMismatch)


def _bound(
    what: str, stored: str | None, expected: str | None, error: type[BindingMismatch]
) -> None:
    if stored is None:
        raise error(f"{what} mismatch: the token is not bound to a {what}, but one was given")
    if expected is None:
        raise error(f"{what} mismatch: the token is bound to a {what}; give it to verify")
    if not _same(stored, expected):
        raise error(f"{what} mismatch")


_SHA256: Any = None


def _sha256(data: bytes) -> bytes:
    """SHA-256, its module imported on first use: verifying a token bound to a request id string
    needs no hashing, and a command's start-up should not pay for it."""
    global _SHA256
    if _SHA256 is None:
        import hashlib

        _SHA256 = hashlib.sha256
    digest: bytes = _SHA256(data).digest()
    return digest


def arguments_digest(arguments: Any) -> str:
    """The MCP Python SDK's digest of request arguments.

    b64url(SHA-256(JSON)[:16]) where the JSON is what Python's ``json.dumps`` writes with sorted
    keys, ``,``/``:`` separators and non-ASCII escaped as ``\\uXXXX`` (its default): matching it
    byte for byte lets one fingerprint serve our formats and the SDK's.
    """
    text = _encode_arguments(arguments)
    return b64url_encode(_sha256(text.encode("ascii"))[:16])


def request_id(
    value: str | None = None,
    *,
    method: str | None = None,
    target: str | None = None,
    arguments: Any = None,
) -> str:
    """The identifier a token is bound to: the caller's own string, or a request fingerprint.

    The fingerprint covers the method, the target (tool name, prompt name or resource URI) and
    the arguments digest; never the JSON-RPC id, which changes on every retry. It is
    ``mcp1:`` + b64url(SHA-256 of the JSON array [method, target, digest])[:16].
    """
    if value is not None:
        if method is not None or target is not None or arguments is not None:
            raise ValueError("give either a request id string or method/target/arguments")
        if not isinstance(value, str) or not value:
            raise ValueError("a request id must be a non-empty string")
        return value
    if not isinstance(method, str) or not method or not isinstance(target, str) or not target:
        raise ValueError("a request fingerprint needs a method and a target")
    parts = _encode_parts(
        [method, target, arguments_digest({} if arguments is None else arguments)]
    )
    return _FINGERPRINT_PREFIX + b64url_encode(_sha256(parts.encode("ascii"))[:16])
