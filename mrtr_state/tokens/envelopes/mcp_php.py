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

from ..._encoding import one_shot_encoder, written
from ...errors import InvalidClaims
from ..binding import Binding
from ..claims import Claims, new_claims
from . import Document, RequestStateOnly, check_lifetime

if TYPE_CHECKING:
    from ..._entropy import Fresh
    from ...keys.key import Key
    from ..policy import Policy

__all__ = ["McpPhpEnvelope"]

_encode_body = one_shot_encoder(json.JSONEncoder(separators=(",", ":"), allow_nan=False))
_MEMBERS = frozenset({"exp", "data"})
_floor = math.floor


class McpPhpEnvelope(RequestStateOnly):
    """See the module docstring."""

    kind = "mcp-php"
    state_member = "data"
    binds = ""  # the SDK binds nothing
    document = "body"
    members, every_member, shape = _MEMBERS, True, '{"exp", "data"} object'
    fresh_bytes = 0

    def pack(
        self, state: Any, binding: Binding, key: Key, now: float, ttl: int, fresh: Fresh
    ) -> tuple[bytes, dict[str, Any]]:
        if not isinstance(state, dict | list):
            raise ValueError(
                f"{self.name} state is a JSON object or list (the SDK's data, a PHP array)"
            )
        body = {"exp": _floor(now) + ttl, "data": state}
        # json_encode escapes "/" (only ever inside strings in JSON text)
        return written(_encode_body, body).replace("/", "\\/").encode("ascii"), body

    def checked(self, document: Document, plaintext: bytes, now: float, policy: Policy) -> None:
        # the SDK's shape: an integer exp, an array of data
        exp: Any = document["exp"]
        if type(exp) is not int:
            raise InvalidClaims(f"{self.what}: exp must be an integer")
        data: Any = document["data"]
        if type(data) is not dict and type(data) is not list:
            raise InvalidClaims(f"{self.what}: data must be an object or a list (a PHP array)")
        # the SDK's lifetime (not exp < now, in whole seconds), then beyond the SDK exp - now
        # <= ttl_cap
        check_lifetime(_floor(now) <= exp, now - exp, exp - now, policy)
        # the SDK binds nothing: a binding stated is one the token does not carry (carries: 0)

    def claims_of(self, document: dict[str, Any], kid: str) -> Claims:
        return new_claims(
            state=document["data"], exp=document["exp"], raw=document, kid=kid, format=self.name
        )
