"""``jws``: HMAC-signed base64url JSON, a JWS in compact serialisation (RFC 7515) with HS256.

    b64url({"alg":"HS256","kid":KID,"typ":"mrtr-state+jwt"}) . b64url(payload) . b64url(HMAC)

Any JWT library holding the key can verify it, and anyone can read the payload: so the tokens
layer never writes the principal here in clear, only a salted keyed tag of it. The verifier never
reads ``alg`` to choose an algorithm; it accepts only the exact header it would have written.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._encoding import b64url_encode, compare_digest
from ..errors import BadSignature, MalformedToken, WrongFormat
from . import Anatomy, detect_format
from ._jose import ExactHeader, decode_segment, split_compact
from ._primitives import Keyed, hmac_key

if TYPE_CHECKING:
    from ..keyset import Key, Keyset

HEADER = ExactHeader("jws", (("alg", "HS256"),), "HS256")
_SIGNER = "jws-signer"
_ROUTES = "jws-routes"


class JwsWire:
    name = "jws"
    alg = "HS256"
    confidential = False
    associates = False

    def __init__(self) -> None:
        self._build_routes = self._routes  # one bound method, not one per verification

    def _signer(self, key: Key) -> tuple[str, Keyed]:
        """(header segment and its dot, keyed HMAC state) of ``key``, built once per key."""
        return HEADER.encode(key.kid) + ".", key.prepared(self.alg, hmac_key)

    def seal(self, key: Key, plaintext: bytes, nonce: bytes | None = None) -> str:
        signer = key._prepared.get(_SIGNER)
        if signer is None:
            signer = key._prepared[_SIGNER] = self._signer(key)
        header, keyed = signer
        signing_input = header + b64url_encode(plaintext)
        state = keyed.copy()
        state.update(signing_input.encode("ascii"))
        return signing_input + "." + b64url_encode(state.finalize())

    def _split(self, token: str) -> list[str]:
        if not (token.startswith("eyJ") and token.count(".") == 2):
            raise WrongFormat(f"not a jws token (it looks like {detect_format(token)})")
        return split_compact(token, 3, "jws")

    def _routes(self, keys: tuple[Key, ...]) -> dict[str, tuple[Key, Keyed]]:
        """Each usable key's exact header segment -> the key and its keyed HMAC state."""
        return {
            segment: (key, key.prepared(self.alg, hmac_key))
            for segment, key in HEADER._by_header(keys).items()
        }

    def open(self, keyset: Keyset, token: str) -> tuple[Key, bytes]:
        signing_input, _dot, signature = token.rpartition(".")
        header, dot, payload = signing_input.partition(".")
        if not (dot and "." not in payload and header.startswith("eyJ")):
            self._split(token)  # names what is wrong with the structure
            raise WrongFormat("not a jws token")  # fail closed
        route = keyset.derived(_ROUTES, self._build_routes).get(header)
        if route is None:  # a foreign header, an unknown or retired key: the precise refusal
            HEADER.key_for(keyset, header)
            raise AssertionError("unreachable: key_for refuses what has no route")
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
        return Anatomy(
            format=self.name,
            kid=kid,
            segments=(
                ("header", header),
                (".", "."),
                ("payload", payload),
                (".", "."),
                ("signature", signature),
            ),
            fields=(
                ("key id", kid),
                ("payload", f"{len(readable)} bytes, readable by anyone"),
                ("signature", f"HMAC-SHA256, {len(mac)} bytes"),
            ),
            confidential=False,
            header={"alg": "HS256", "kid": kid, "typ": "mrtr-state+jwt"},
            readable=readable,
        )


WIRE = JwsWire()
