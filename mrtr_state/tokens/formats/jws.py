"""``jws``: HMAC-signed base64url JSON, a JWS in compact serialisation (RFC 7515) with HS256.

    b64url({"alg":"HS256","kid":KID,"typ":"mrtr-state+jwt"}) . b64url(payload) . b64url(HMAC)

Any JWT library holding the key can verify it, and anyone can read the payload: so the tokens
layer never writes the principal here in clear, only a salted keyed tag of it. The verifier never
reads ``alg`` to choose an algorithm; it accepts only the exact header it would have written.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..._encoding import b64url_encode, compare_digest
from ..._primitives import Keyed, hmac_key
from ...errors import BadSignature, MalformedToken, WrongFormat
from . import Anatomy, decode_segment
from ._jose import ExactHeader, JoseWire, split_compact

if TYPE_CHECKING:
    from ...keys.key import Key
    from ...keys.keyset import Keyset

__all__ = ["JwsWire"]

HEADER = ExactHeader("jws", (("alg", "HS256"),))
_STRUCTURE = "not a jws token (three segments, the first a JOSE header)"


class JwsWire(JoseWire["tuple[Key, Keyed]", "tuple[str, Keyed]"]):
    confidential = False
    header = HEADER

    def _route_of(self, key: Key) -> tuple[Key, Keyed]:
        """A route: the key and its keyed HMAC state."""
        return key, key.prepared(self.alg, hmac_key)

    def _sealer(self, key: Key) -> tuple[str, Keyed]:
        """(header segment and its dot, keyed HMAC state) of ``key``, built once per key."""
        return HEADER.encode(key.kid) + ".", key.prepared(self.alg, hmac_key)

    def seal(self, key: Key, plaintext: bytes, nonce: bytes = b"", associated: bytes = b"") -> str:
        header, keyed = key.derived(self._sealer_name, self._build_sealer)
        signing_input = header + b64url_encode(plaintext)
        state = keyed.copy()
        state.update(signing_input.encode("ascii"))
        return signing_input + "." + b64url_encode(state.finalize())

    def _split(self, token: str) -> list[str]:
        if not (token.startswith("eyJ") and token.count(".") == 2):
            raise WrongFormat(_STRUCTURE)
        return split_compact(token, 3, "jws")

    def open(self, keyset: Keyset, token: str, associated: bytes = b"") -> tuple[Key, bytes]:
        signing_input, _dot, signature = token.rpartition(".")
        header, dot, payload = signing_input.partition(".")
        if not (dot and "." not in payload and header.startswith("eyJ")):
            raise WrongFormat(_STRUCTURE)
        route = keyset.derived(self._routes_name, self._build_routes).usable.get(header)
        if route is None:
            raise self._no_route(keyset, header)
        key, keyed = route
        mac = decode_segment(signature, "jws signature")
        if len(mac) != 32:
            raise MalformedToken(f"jws signature is {len(mac)} bytes, HS256 makes 32")
        state = keyed.copy()
        state.update(signing_input.encode("ascii"))
        if not compare_digest(state.finalize(), mac):
            raise BadSignature("signature mismatch (tampered, truncated or forged)")
        return key, decode_segment(payload, "jws payload")

    def anatomy(self, token: str) -> Anatomy:
        header, payload, signature = self._split(token)
        kid = HEADER.kid_of(header)
        readable = decode_segment(payload, "jws payload")
        mac = decode_segment(signature, "jws signature")
        return self._anatomy(
            header,
            kid,
            (("payload", payload), ("signature", signature)),
            (
                ("payload", f"{len(readable)} bytes, readable by anyone"),
                ("signature", f"HMAC-SHA256, {len(mac)} bytes"),
            ),
            readable,
        )
