"""``jws``: HMAC-signed base64url JSON, a JWS in compact serialisation (RFC 7515) with HS256.

    b64url({"alg":"HS256","kid":KID,"typ":"mrtr-state+jwt"}) . b64url(payload) . b64url(HMAC)

Any JWT library holding the key can verify it, and anyone can read the payload: so the tokens
layer never writes the principal here in clear, only a salted keyed tag of it. The verifier never
reads ``alg`` to choose an algorithm; it accepts only the exact header it would have written.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._encoding import b64url_decode, b64url_encode, compare_digest
from ..errors import BadSignature, MalformedToken, WrongFormat
from . import Anatomy, detect_format
from ._jose import ExactHeader, decode_segment, split_compact
from ._primitives import Keyed, hmac_key, mac_matches

if TYPE_CHECKING:
    from ..keyset import Key, Keyset

HEADER = ExactHeader("jws", (("alg", "HS256"),), "HS256")
_SIGNER = "jws-signer"


class JwsFormat:
    name = "jws"
    alg = "HS256"
    confidential = False

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

    def open(self, keyset: Keyset, token: str) -> tuple[Key, bytes]:
        header, payload, signature = self._split(token)
        key = HEADER.key_for(keyset, header)
        mac = decode_segment(signature, "jws signature")
        if len(mac) != 32:
            raise MalformedToken(f"jws signature is {len(mac)} bytes, HS256 makes 32")
        keyed = key.prepared(self.alg, hmac_key)
        if not mac_matches(keyed, f"{header}.{payload}".encode("ascii"), mac):
            raise BadSignature("signature mismatch (tampered, truncated or forged)")
        return key, decode_segment(payload, "jws payload")

    def open_quickly(self, keyset: Keyset, token: str) -> tuple[Key, bytes] | None:
        """:meth:`open` for a well-formed token of a usable key, in one straight run.

        None, or any exception, sends the caller to :meth:`open`, which decides again and names
        the reason. A payload segment holding a dot fails its strict decoding here.
        """
        signing_input, _, signature = token.rpartition(".")
        header, _, payload = signing_input.partition(".")
        key = HEADER.usable_key(keyset, header)
        if key is None:
            return None
        state = key.prepared(self.alg, hmac_key).copy()
        state.update(signing_input.encode("ascii"))
        if not compare_digest(state.finalize(), b64url_decode(signature)):
            return None
        return key, b64url_decode(payload)

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


FORMAT = JwsFormat()
