"""``aead``: the smallest, fastest confidential format, and the default.

    ms1. + b64url( key id (4) | nonce (12) | AES-256-GCM ciphertext | tag (16) )

The associated data is ``ms1.`` followed by the 4 key-id bytes, so a ciphertext cannot be moved
under another key id or another format prefix without failing the tag. Every token gets a fresh
random 96-bit nonce from the OS; with 2^32 tokens per key the chance of a nonce collision stays
below 2^-32, and rotation keeps keys far from that count.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._encoding import EncodingError, b64url_decode, b64url_encode
from .._entropy import random_bytes
from ..errors import MalformedToken, WrongFormat
from . import Anatomy
from ._primitives import AESGCM, gcm_open

if TYPE_CHECKING:
    from ..keyset import Key, Keyset

PREFIX = "ms1."
_PREFIX_BYTES = PREFIX.encode("ascii")
_HEADER = 4 + 12
_TAG = 16


class AeadFormat:
    name = "aead"
    alg = "A256GCM"
    confidential = True

    def seal(self, key: Key, plaintext: bytes) -> str:
        cipher = key.prepared(self.alg, AESGCM)
        key_id = key.prepared("key-id", lambda _secret: key.key_id)
        nonce = random_bytes(12)
        sealed = cipher.encrypt(nonce, plaintext, _PREFIX_BYTES + key_id)
        return PREFIX + b64url_encode(key_id + nonce + sealed)

    def _split(self, token: str) -> bytes:
        if not token.startswith(PREFIX):
            raise WrongFormat("not an aead token (it does not start with ms1.)")
        try:
            raw = b64url_decode(token[len(PREFIX) :])
        except EncodingError as err:
            raise MalformedToken(f"aead token body: {err}") from None
        if len(raw) < _HEADER + _TAG:
            raise MalformedToken(f"aead token is truncated ({len(raw)} bytes decoded)")
        return raw

    def open(self, keyset: Keyset, token: str) -> tuple[Key, bytes]:
        raw = self._split(token)
        key_id = raw[:4]
        key = keyset.verifying_key(key_id.hex(), self.alg)
        cipher = key.prepared(self.alg, AESGCM)
        plaintext = gcm_open(cipher, raw[4:_HEADER], raw[_HEADER:], _PREFIX_BYTES + key_id)
        return key, plaintext

    def anatomy(self, token: str) -> Anatomy:
        raw = self._split(token)
        body = token[len(PREFIX) :]
        # Base64 digits do not align with bytes; split at the digit where each part starts.
        cuts = [0] + [(n * 4 + 2) // 3 for n in (4, _HEADER, len(raw) - _TAG)] + [len(body)]
        labels = ("key id", "nonce", "ciphertext", "tag")
        segments: tuple[tuple[str, str], ...] = (("prefix", PREFIX),)
        segments += tuple((labels[i], body[cuts[i] : cuts[i + 1]]) for i in range(4))
        return Anatomy(
            format=self.name,
            kid=raw[:4].hex(),
            segments=segments,
            fields=(
                ("key id", raw[:4].hex()),
                ("nonce", raw[4:_HEADER].hex()),
                ("ciphertext", f"{len(raw) - _HEADER - _TAG} bytes (AES-256-GCM)"),
                ("tag", raw[-_TAG:].hex()),
            ),
            confidential=True,
        )


FORMAT = AeadFormat()
