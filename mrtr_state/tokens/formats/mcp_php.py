"""``mcp-php``: the requestState tokens of the PHP SDK (main, ``RequestStateCodec``).

    b64url(body JSON) + . + b64url(HMAC-SHA256(key, the body segment's text))

No prefix and no key id: the verifier checks the MAC under each usable ``mcp-php-v1`` key,
primary first. The MAC covers the body *text* as it arrives, so any re-encoding of the body
fails it. Where the SDK decodes leniently (``=`` padding, the standard alphabet, non-zero
trailing bits, in the MAC and, under a MAC made over such text, in the body), mrtr-state keeps
its canonical rule and refuses: a token has exactly one spelling. Signed, not encrypted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..._encoding import b64url_encode
from ..._primitives import Keyed, hmac_key
from ...errors import BadSignature, MalformedToken
from . import Anatomy, KeylessWire, decode_segment, mac_signer

if TYPE_CHECKING:
    from ...keys.key import Key
    from ...keys.keyset import Keyset

__all__ = ["PhpWire"]


class PhpWire(KeylessWire["Keyed"]):
    confidential = False

    def _keyed(self, key: Key) -> tuple[Key, Keyed]:
        return key, key.prepared(self.alg, hmac_key)

    def seal(self, key: Key, plaintext: bytes, nonce: bytes = b"", associated: bytes = b"") -> str:
        body = b64url_encode(plaintext)
        state = key.prepared(self.alg, hmac_key).copy()
        state.update(body.encode("ascii"))
        return body + "." + b64url_encode(state.finalize())

    def _split(self, token: str) -> tuple[str, str]:
        sections = token.split(".")
        if len(sections) != 2:
            raise MalformedToken(
                f"not an {self.name} token: BODY.MAC has 2 sections, this has {len(sections)}"
            )
        return sections[0], sections[1]

    def open(self, keyset: Keyset, token: str, associated: bytes = b"") -> tuple[Key, bytes]:
        body, mac_text = self._split(token)
        # keys first: of two formats of this shape, the one the keyset holds no key of says
        # only that, and a malformed MAC is named by the format whose keys would have read it
        tried = self._tried(keyset)
        key = mac_signer(tried, body.encode("ascii"), decode_segment(mac_text, f"{self.name} MAC"))
        if key is None:
            raise BadSignature("signature mismatch (tampered, truncated, forged or another key)")
        return key, decode_segment(body, f"{self.name} body")

    def anatomy(self, token: str) -> Anatomy:
        body, mac = self._split(token)
        return self._signed_anatomy((), body, mac, "of the body text under the raw SDK key")
