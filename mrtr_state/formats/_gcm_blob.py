"""The layout ``aead`` and ``mcp-py`` share: PREFIX + b64url(kid (4) | nonce (12) | sealed).

AES-256-GCM with the prefix and the 4 key-id bytes as associated data, so a ciphertext cannot be
moved under another key id or another format without failing its tag. The two formats differ only
in their prefix, their key algorithm and how a key's secret becomes the AES key.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from .._encoding import EncodingError, b64url_decode, b64url_encode
from .._entropy import random_bytes
from ..errors import MalformedToken, WrongFormat
from . import Anatomy
from ._primitives import AESGCM, gcm_open

if TYPE_CHECKING:
    from ..keyset import Key, Keyset

_HEADER = 4 + 12
_TAG = 16


class GcmBlobFormat:
    """One AES-GCM blob format; see the module docstring."""

    confidential = True

    def __init__(
        self,
        name: str,
        alg: str,
        prefix: str,
        cipher: Callable[[bytes], AESGCM],
        key_note: str = "",
    ) -> None:
        self.name = name
        self.alg = alg
        self._prefix = prefix
        self._prefix_bytes = prefix.encode("ascii")
        self._cipher = cipher
        self._key_note = key_note

    def seal(self, key: Key, plaintext: bytes) -> str:
        key_id = key.prepared("key-id", lambda _secret: key.key_id)
        nonce = random_bytes(12)
        sealed = key.prepared(self.alg, self._cipher).encrypt(
            nonce, plaintext, self._prefix_bytes + key_id
        )
        return self._prefix + b64url_encode(key_id + nonce + sealed)

    def _split(self, token: str) -> bytes:
        if not token.startswith(self._prefix) or token.count(".") != self._prefix.count("."):
            raise WrongFormat(
                f"not an {self.name} token ({self._prefix} and one base64url segment)"
            )
        try:
            raw = b64url_decode(token[len(self._prefix) :])
        except EncodingError as err:
            raise MalformedToken(f"{self.name} token body: {err}") from None
        if len(raw) < _HEADER + _TAG:
            raise MalformedToken(f"{self.name} token is truncated ({len(raw)} bytes decoded)")
        return raw

    def open(self, keyset: Keyset, token: str) -> tuple[Key, bytes]:
        raw = self._split(token)
        key_id = raw[:4]
        key = keyset.verifying_key(key_id.hex(), self.alg)
        cipher = key.prepared(self.alg, self._cipher)
        return key, gcm_open(cipher, raw[4:_HEADER], raw[_HEADER:], self._prefix_bytes + key_id)

    def anatomy(self, token: str) -> Anatomy:
        raw = self._split(token)
        body = token[len(self._prefix) :]
        # Base64 digits do not align with bytes; split at the digit where each part starts.
        cuts = [0] + [(n * 4 + 2) // 3 for n in (4, _HEADER, len(raw) - _TAG)] + [len(body)]
        labels = ("key id", "nonce", "ciphertext", "tag")
        segments: tuple[tuple[str, str], ...] = (("prefix", self._prefix),)
        segments += tuple((labels[i], body[cuts[i] : cuts[i + 1]]) for i in range(4))
        return Anatomy(
            format=self.name,
            kid=raw[:4].hex(),
            segments=segments,
            fields=(
                ("key id", raw[:4].hex() + self._key_note),
                ("nonce", raw[4:_HEADER].hex()),
                ("ciphertext", f"{len(raw) - _HEADER - _TAG} bytes (AES-256-GCM)"),
                ("tag", raw[-_TAG:].hex()),
            ),
            confidential=True,
        )
