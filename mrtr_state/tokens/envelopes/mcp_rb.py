"""The Ruby SDK's envelope (1.3.0, ``RequestStateSecurity``), checked as the SDK checks it.

    {"v":1,"exp":int seconds,"m":method,"t":target,"a":arguments digest,"aud"?,"s":state string}

``t`` is the tool or prompt name, else the resource URI, else ``""``; ``a`` is the hex SHA-256
of Ruby's canonical JSON of the arguments (``{}`` when absent): object keys sorted bytewise, no
whitespace, strings as the ``json`` gem writes them (UTF-8 raw, ``/`` not escaped, control
characters as ``\\n``/``\\t``/``\\r``/``\\b``/``\\f`` or lowercase ``\\u00XX``), integers exact
at any size and floats as Ruby's ``Float#to_s`` spells them (``1.0``, ``1.0e+20``, ``1.0e-05``),
so ``1`` and ``1.0`` digest differently. ``aud`` is present exactly when the server has an
audience, compared both ways. There is no principal and no issue time.

The SDK accepts while ``now <= exp`` in whole seconds and only an integer ``exp`` (a float
expiry is "expired" there; here it is refused as not the SDK's envelope). Beyond the SDK,
``exp`` may lie at most the verifier's ``ttl_cap`` ahead, and members it does not write are
refused.
"""

from __future__ import annotations

import hashlib
import json
import math
from json.encoder import encode_basestring
from typing import TYPE_CHECKING, Any

from ..._encoding import one_shot_encoder, utf8
from ...errors import AudienceMismatch, InvalidClaims, RequestMismatch
from ..binding import AUDIENCE, REQUEST, Binding
from ..claims import Claims, new_claims
from . import Document, RequestStateOnly, check_lifetime, request_members

if TYPE_CHECKING:
    from ..._entropy import Fresh
    from ...keys.key import Key
    from ..policy import Policy

__all__ = ["McpRbEnvelope", "canonical_json", "ruby_arguments_digest", "ruby_float"]

# JSON.generate: compact, UTF-8 raw
_encode_envelope = one_shot_encoder(
    json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)
)
_MEMBERS = frozenset({"v", "exp", "m", "t", "a", "aud", "s"})
_CARRIES = AUDIENCE | REQUEST
_floor = math.floor


def ruby_float(value: float) -> str:
    """``value`` as Ruby's ``Float#to_s`` writes it: the shortest digits that read back as the
    same double (Python's ``repr`` finds the same ones), in fixed notation while the decimal
    point falls within 16 digits of the first (``123456789012345.0``, ``0.0001``, and a
    17-digit ``1000000000000000.5``), else as
    ``d.ddde+XX`` (``1.0e+15``, ``1.0e-05``)."""
    if not math.isfinite(value):
        raise ValueError(f"{value!r} has no JSON spelling")
    text = repr(value)
    sign = "-" if text.startswith("-") else ""
    mantissa, _e, exponent = text.lstrip("-").partition("e")
    whole, _dot, fraction = mantissa.partition(".")
    all_digits = whole + fraction
    significant = all_digits.lstrip("0")
    if not significant:
        return sign + "0.0"
    # where the decimal point falls, counted from the first significant digit
    point = len(whole) + int(exponent or 0) - (len(all_digits) - len(significant))
    digits = significant.rstrip("0")
    if -4 < point <= 0:
        return f"{sign}0.{'0' * -point}{digits}"
    # Ruby also keeps a 17-digit value fixed when its point falls at 16 (1000000000000000.5),
    # while 16 digits or fewer there are written with an exponent (1.234567890123456e+15)
    if 0 < point < 16 or (point == 16 and len(digits) > point):
        if len(digits) <= point:
            return f"{sign}{digits}{'0' * (point - len(digits))}.0"
        return f"{sign}{digits[:point]}.{digits[point:]}"
    power = point - 1
    return f"{sign}{digits[0]}.{digits[1:] or '0'}e{'+' if power >= 0 else '-'}{abs(power):02d}"


def canonical_json(value: Any) -> str:
    """The Ruby SDK's ``canonical_json``: see the module docstring."""
    if isinstance(value, dict):
        members = sorted(value.items(), key=lambda item: _name_bytes(item[0]))
        inner = ",".join(f"{encode_basestring(name)}:{canonical_json(v)}" for name, v in members)
        return "{" + inner + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(canonical_json(item) for item in value) + "]"
    if isinstance(value, str):
        return encode_basestring(value)
    if value is True:
        return "true"
    if value is False:
        return "false"
    if value is None:
        return "null"
    if isinstance(value, int):
        return int.__repr__(value)
    if isinstance(value, float):
        return ruby_float(value)
    raise ValueError(f"arguments hold a {type(value).__name__}, which JSON cannot carry")


def _name_bytes(name: Any) -> bytes:
    if not isinstance(name, str):
        raise ValueError(f"a member name is {type(name).__name__}, not text: {name!r}")
    return name.encode("utf-8")


def ruby_arguments_digest(arguments: Any) -> str:
    """The hex SHA-256 of :func:`canonical_json` of the arguments (``{}`` when absent)."""
    try:
        text = canonical_json({} if arguments is None else arguments).encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("arguments hold a lone surrogate, which UTF-8 cannot carry") from None
    except RecursionError:
        raise ValueError("arguments nest too deeply") from None
    return hashlib.sha256(text).hexdigest()


def _digest(binding: Binding) -> str | None:
    """The binding's arguments digest, or None when Ruby could not have computed one."""
    try:
        return ruby_arguments_digest(binding.arguments)
    except ValueError:
        return None


class McpRbEnvelope(RequestStateOnly):
    """See the module docstring."""

    kind = "mcp-rb"
    state_member = "s"
    binds = "request, audience"
    carries = _CARRIES
    members = _MEMBERS
    fresh_bytes = 28  # (16 unused) the wire's IV (12)

    def pack(
        self, state: Any, binding: Binding, key: Key, now: float, ttl: int, fresh: Fresh
    ) -> tuple[bytes, dict[str, Any]]:
        self._requested(state, binding, "method, target (and arguments)")
        request = request_members(binding, ruby_arguments_digest(binding.arguments))
        document: dict[str, Any] = {"v": 1, "exp": _floor(now) + ttl, **request}
        if binding.audience is not None:
            document["aud"] = binding.audience
        document["s"] = state
        return utf8(_encode_envelope(document)), document

    def checked(self, document: Document, plaintext: bytes, now: float, policy: Policy) -> None:
        # the SDK's shape: its version, an integer exp, the state
        self._version_one(document)
        exp: Any = document.get("exp")
        if type(exp) is not int:
            raise InvalidClaims(f"{self.what}: exp must be a whole number of seconds")
        if type(document.get("s")) is not str:
            raise InvalidClaims(f"{self.what}: missing state (s must be a string)")
        # the SDK's lifetime (now <= exp in whole seconds), then beyond the SDK exp - now <=
        # ttl_cap
        check_lifetime(_floor(now) <= exp, now - exp, exp - now, policy)

    def bound(self, document: Document, key: Key, binding: Binding) -> None:
        # method, target, arguments digest and audience, in the SDK's order, both ways
        self._request_stated(binding.kinds, "method, target and arguments")
        get = document.get
        if get("m") != binding.method:
            raise RequestMismatch("request mismatch: method")
        if get("t") != binding.target:
            raise RequestMismatch("request mismatch: target")
        if get("a") != _digest(binding):
            raise RequestMismatch("request mismatch: arguments")
        if get("aud") != binding.audience:
            raise AudienceMismatch("audience mismatch")

    def claims_of(self, document: dict[str, Any], kid: str) -> Claims:
        get = document.get
        return new_claims(
            state=document["s"],
            exp=document["exp"],
            aud=get("aud"),
            rid=f"{get('m')} {get('t')} {get('a')}",
            raw=document,
            kid=kid,
            format=self.name,
        )
