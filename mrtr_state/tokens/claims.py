"""Claims: what a verified requestState token asserts, and request fingerprints.

The checks that decide whether to believe a token's claims (their shape, lifetime, then
binding) are the accepting path of its envelope, :mod:`mrtr_state.tokens.envelopes`; this module
holds what they produce and the request identity every format binds.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, NamedTuple

from .._encoding import b64url_encode, one_shot_encoder

__all__ = ["MAX_TIME", "Claims", "arguments_digest", "audience_list", "request_id"]

MAX_TIME = 2**53  # beyond this a double loses integers; no honest token gets near it
_FINGERPRINT_PREFIX = "mcp1:"
# json.dumps(sort_keys=True, separators=(",", ":")) with its ASCII escaping, built once.
_ARGUMENTS_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=True)


_encode_arguments = one_shot_encoder(_ARGUMENTS_ENCODER)
# json.dumps(separators=(",", ":"), ensure_ascii=True) of the fingerprint's parts, built once.
_encode_parts = one_shot_encoder(json.JSONEncoder(separators=(",", ":"), ensure_ascii=True))


class Claims(NamedTuple):
    """The verified content of a token. ``state`` is what the server asked to carry.

    Immutable. A named tuple rather than a frozen dataclass because it is built on every
    verification: a frozen dataclass's ``__init__`` costs more than the checks of the claims.
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
    #: The id of the key that verified (or minted) the token: what a log line names, so that
    #: no caller reads the token's bytes again for it.
    kid: str | None = None
    #: The format the token turned out to be (where one shape serves two, the key that opened
    #: it named it).
    format: str | None = None

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


_new = tuple.__new__


def new_claims(
    *,
    state: Any,
    exp: float | None,
    iat: float | None = None,
    jti: str | None = None,
    sub: str | None = None,
    aud: str | list[str] | None = None,
    rid: str | None = None,
    raw: Mapping[str, Any] | None = None,
    kid: str | None = None,
    format: str | None = None,
) -> Claims:
    """:class:`Claims`, every member by name, built on the fast path (``tuple.__new__``: a named
    tuple's own constructor costs more than the checks of the claims). The one place their
    positions are written: every envelope names what it sets. ``exp`` is None only for an rmcp
    token its SDK minted never to expire (expiry 0), which verification then refuses or reports
    as such."""
    return _new(Claims, (state, iat, exp, jti, sub, aud, rid, raw, kid, format))


def audience_list(value: Any) -> bool:
    """RFC 7519 allows ``aud`` to be a list of audiences; ours are never empty, nor their items."""
    return type(value) is list and bool(value) and all(type(a) is str and a for a in value)


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
