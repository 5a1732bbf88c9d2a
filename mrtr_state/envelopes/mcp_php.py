"""The PHP SDK's body (``RequestStateCodec``), checked as the SDK checks it.

    {"exp": int unix seconds, "data": array}

``data`` is a PHP array: a JSON object or list (``{}`` comes back from PHP as ``[]``, which a
PHP array cannot tell apart). ``exp`` must be an integer, and the SDK refuses a token only once
``exp < now`` (so it is still good in the second ``exp`` names). The SDK binds nothing: a
verifier that states a principal, audience, request or bind value is refused rather than
silently given less (bind those in ``data`` and check them in the application, as the SDK
says). Beyond the SDK, ``exp`` may lie at most the verifier's ``ttl_cap`` ahead.

Minting writes the body as PHP's ``json_encode`` does by default where it matters to a reader:
non-ASCII as ``\\u`` escapes and ``/`` as ``\\/``. (Floats are written as Python writes them;
PHP reads both spellings alike, and the MAC covers the text, whichever it is.)
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

from .._encoding import EncodingError, json_loads_object, one_shot_encoder, strict_object
from ..binding import Binding
from ..claims import Claims
from ..errors import ExpiredToken, InvalidClaims, InvalidToken
from . import UNCHECKED, RequestStateOnly, refuse_uncarried
from .mcp_py import over_cap

if TYPE_CHECKING:
    from ..formats import Format
    from ..keyset import Key
    from ..policy import Policy

__all__ = ["ENVELOPE"]

_encode_body = one_shot_encoder(json.JSONEncoder(separators=(",", ":"), allow_nan=False))
_MEMBERS = frozenset({"exp", "data"})
_floor = math.floor
_new_tuple = tuple.__new__


def _document(plaintext: bytes) -> dict[str, Any]:
    try:
        document = json_loads_object(plaintext)
    except EncodingError as err:
        raise InvalidClaims(f"mcp-php body: {err}") from None
    if type(document) is not dict or document.keys() != _MEMBERS:
        raise InvalidClaims('mcp-php body is not the SDK\'s {"exp", "data"} object')
    if type(document["exp"]) is not int:
        raise InvalidClaims("mcp-php body: exp must be an integer")
    if type(document["data"]) is not dict and type(document["data"]) is not list:
        raise InvalidClaims("mcp-php body: data must be an object or a list (a PHP array)")
    return document


def _claims(document: dict[str, Any]) -> Claims:
    # Claims(state, iat, exp, jti, sub, aud, rid, raw)
    return _new_tuple(
        Claims, (document["data"], None, document["exp"], None, None, None, None, document)
    )


class McpPhpEnvelope(RequestStateOnly):
    """See the module docstring."""

    name = "mcp-php"
    kind = "mcp-php"
    state_member = "data"
    binds = ""  # the SDK binds nothing
    carries = 0
    fresh_bytes = 0
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
        if not isinstance(state, dict | list):
            raise ValueError("mcp-php state is a JSON object or list (the SDK's data, a PHP array)")
        body = {"exp": _floor(now) + ttl, "data": state}
        try:
            text = _encode_body(body)
        except (TypeError, ValueError, RecursionError) as err:
            raise ValueError(f"value is not JSON-serialisable: {err}") from None
        # json_encode escapes "/" (only ever inside strings in JSON text)
        return text.replace("/", "\\/").encode("ascii"), body

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
        exp: Any = document.get("exp")
        data: Any = document.get("data")
        # The one accepting test: the SDK's shape (an integer exp, an array of data) and
        # lifetime (not exp < now, in whole seconds), beyond the SDK exp - now <= ttl_cap and no
        # binding stated (it binds none). _refusal says which failed.
        if (
            document.keys() == _MEMBERS
            and type(exp) is int
            and (type(data) is dict or type(data) is list)
            and _floor(now) <= exp
            and exp - now <= policy.lifetime_cap
            and not binding.kinds
        ):
            return _claims(document)
        raise _refusal(plaintext, binding, now, policy)

    def claims_of(self, document: dict[str, Any]) -> Claims:
        return _claims(document)


def _refusal(plaintext: bytes, binding: Binding, now: float, policy: Policy) -> InvalidToken:
    """Why :meth:`McpPhpEnvelope.accept` refused: its checks one at a time, in its order. Only
    ever an explanation: whatever this finds, the token was already refused."""
    try:
        document = _document(plaintext)
    except InvalidClaims as err:
        return err
    exp = document["exp"]
    if exp < _floor(now):
        return ExpiredToken(f"expired {int(now - exp)} s ago")
    if not exp - now <= policy.lifetime_cap:
        return InvalidClaims(over_cap(exp - now, policy.lifetime_cap))
    if binding is not UNCHECKED and binding.kinds:
        return refuse_uncarried(binding.kinds, "mcp-php tokens")
    # not reached while this and accept agree; if they ever part, the token stays refused
    return InvalidClaims("mcp-php body refused")


ENVELOPE = McpPhpEnvelope()
