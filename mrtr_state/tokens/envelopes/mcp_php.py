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

from ..._encoding import one_shot_encoder
from ...errors import ExpiredToken, InvalidClaims
from ..binding import Binding
from ..claims import Claims, new_claims
from . import UNCHECKED, RequestStateOnly, over_cap, read_document, refuse_uncarried

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
    carries = 0
    fresh_bytes = 0

    def pack(
        self, state: Any, binding: Binding, key: Key, now: float, ttl: int, fresh: Fresh
    ) -> tuple[bytes, dict[str, Any]]:
        if not isinstance(state, dict | list):
            raise ValueError(
                f"{self.name} state is a JSON object or list (the SDK's data, a PHP array)"
            )
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
        binding: Binding,
        now: float,
        policy: Policy,
        carried: list[str] | None = None,
    ) -> Claims:
        what = f"{self.name} body"
        document = read_document(plaintext, what)
        # the SDK's shape: an integer exp, an array of data
        if document.keys() != _MEMBERS:
            raise InvalidClaims(f'{what} is not the SDK\'s {{"exp", "data"}} object')
        exp: Any = document["exp"]
        if type(exp) is not int:
            raise InvalidClaims(f"{what}: exp must be an integer")
        data: Any = document["data"]
        if type(data) is not dict and type(data) is not list:
            raise InvalidClaims(f"{what}: data must be an object or a list (a PHP array)")
        # the SDK's lifetime (not exp < now, in whole seconds), then beyond the SDK exp - now
        # <= ttl_cap
        if not _floor(now) <= exp:
            raise ExpiredToken(f"expired {int(now - exp)} s ago")
        if not exp - now <= policy.lifetime_cap:
            raise InvalidClaims(over_cap(exp - now, policy.lifetime_cap))
        # the SDK binds nothing: a binding stated is one the token does not carry
        if binding is not UNCHECKED and binding.kinds:
            raise refuse_uncarried(binding.kinds, self.tokens)
        return self._claims(document, key.kid)

    def _claims(self, document: dict[str, Any], kid: str) -> Claims:
        return new_claims(
            state=document["data"], exp=document["exp"], raw=document, kid=kid, format=self.name
        )

    def claims_of(self, document: dict[str, Any], kid: str) -> Claims:
        return self._claims(document, kid)
