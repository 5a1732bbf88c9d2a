"""Claims: what a requestState token asserts, their exact shape, and request fingerprints.

Numbers must be true integers: ``true`` is not 1, ``"1"`` is not 1, and 1e400 never gets this
far (the JSON layer refuses it). The checks that decide whether to believe the claims (lifetime,
then binding) are the accepting path of their envelope, :mod:`mrtr_state.envelopes.own`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, NamedTuple

from ._encoding import b64url_encode, one_shot_encoder
from .errors import (
    InvalidClaims,
)

__all__ = [
    "Claims",
    "arguments_digest",
    "claims_of",
    "claims_problem",
    "parse_claims",
    "request_id",
]

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
    """The claims of a decoded document, or the :class:`InvalidClaims` naming what is wrong.

    For showing claims (``inspect``) and rebuilding freshly minted ones. Verification does not
    come here: its envelope's accepting path tests the same shape inline
    (:mod:`mrtr_state.envelopes.own`) and asks :func:`claims_problem` only why it failed.
    """
    problem = claims_problem(document)
    if problem is not None:
        raise problem
    return claims_of(document)


def claims_of(document: dict[str, Any]) -> Claims:
    """The :class:`Claims` of a document already known to have their shape (one just minted,
    or one :func:`claims_problem` passed)."""
    get = document.get
    return _new_tuple(
        Claims,
        (
            document["st"],
            document["iat"],
            document["exp"],
            document["jti"],
            get("sub"),
            get("aud"),
            get("rid"),
            None,
        ),
    )


def audience_list(value: Any) -> bool:
    """RFC 7519 allows ``aud`` to be a list of audiences; ours are never empty, nor their items."""
    return type(value) is list and bool(value) and all(type(a) is str and a for a in value)


def claims_problem(document: Any) -> InvalidClaims | None:
    """What is wrong with the shape of decoded claims, None if nothing: required members, exact
    types, nothing unknown, optional claims never null."""
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
            if name == "aud" and audience_list(value):
                continue
            if type(value) is not str or not value:
                what = "a non-empty string" + (" or list of them" if name == "aud" else "")
                return InvalidClaims(f"claim {name} must be {what}, got {_show(value)}")
    return None


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
