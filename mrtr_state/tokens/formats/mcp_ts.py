"""``mcp-ts``: the requestState tokens of the TypeScript SDK's ``createRequestStateCodec``.

    v1. + b64url(body JSON) + . + b64url(HMAC-SHA256(secret, "v1." + b64url(body JSON)))

Signed, not encrypted: the client can read the body. The secret is used raw. The token carries
no key id (the SDK has one key), so the verifier checks the MAC under each usable mcp-ts key of
the keyset, primary first; there is rarely more than one, and never more than rotation makes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..._encoding import b64url_encode
from ..._primitives import Keyed, hmac_key, hmac_sha256
from ...errors import BadSignature, MalformedToken, WrongFormat
from . import Anatomy, KeylessWire, decode_segment, mac_signer
from ._jose import split_compact

if TYPE_CHECKING:
    from ...keys.key import Key
    from ...keys.keyset import Keyset

__all__ = ["McpTsWire"]

PREFIX = "v1."
_BODY = len(PREFIX)  # where the body starts


class McpTsWire(KeylessWire["Keyed"]):
    confidential = False

    def __init__(self, name: str, alg: str) -> None:
        super().__init__(name, alg)
        self._layout = f"not an {name} token (v1.BODY.MAC)"
        self._mac_what, self._body_what = f"{name} MAC", f"{name} body"

    def seal(self, key: Key, plaintext: bytes, nonce: bytes = b"", associated: bytes = b"") -> str:
        signed = PREFIX + b64url_encode(plaintext)
        mac = hmac_sha256(key.prepared(self.alg, hmac_key), signed.encode("ascii"))
        return signed + "." + b64url_encode(mac)

    def _split(self, token: str) -> tuple[str, str]:
        if not token.startswith(PREFIX) or token.count(".") != 2:
            raise WrongFormat(self._layout)
        _prefix, body, mac = split_compact(token, 3, self.name)
        return body, mac

    def _keyed(self, key: Key) -> tuple[Key, Keyed]:
        return key, key.prepared(self.alg, hmac_key)

    def open(self, keyset: Keyset, token: str, associated: bytes = b"") -> tuple[Key, bytes]:
        signed, _dot, mac_text = token.rpartition(".")
        if not (signed.startswith(PREFIX) and signed.find(".", _BODY) < 0):
            raise WrongFormat(self._layout)
        mac = decode_segment(mac_text, self._mac_what)
        if len(mac) != 32:
            raise MalformedToken(f"{self.name} MAC is {len(mac)} bytes, HMAC-SHA256 makes 32")
        key = mac_signer(self._tried(keyset), signed.encode("ascii"), mac)
        if key is None:
            raise BadSignature("signature mismatch (tampered, truncated, forged or another key)")
        return key, decode_segment(signed[_BODY:], self._body_what)

    def anatomy(self, token: str) -> Anatomy:
        body, mac = self._split(token)
        return self._signed_anatomy((("prefix", PREFIX),), body, mac, "under the raw SDK secret")
