"""``mcp-py``: the requestState tokens of the official MCP Python SDK (``mcp`` 2.x).

    v1. + b64url( kid (4) | nonce (12) | AES-256-GCM ciphertext and tag )

The AES key is HKDF-SHA256(operator secret, no salt, info ``mcp/request-state/v1/aes-256-gcm``);
the kid is SHA-256(``mcp/request-state/v1/kid:`` ‖ AES key)[:4]; the associated data is ``v1.`` ‖
kid. This module only seals and opens; the SDK's claims envelope lives in ``sdk_envelopes``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._encoding import EncodingError, b64url_decode, b64url_encode
from .._entropy import random_bytes
from ..errors import MalformedToken, WrongFormat
from ..keyset import sdk_aes_key
from . import Anatomy
from ._primitives import AESGCM, gcm_open

if TYPE_CHECKING:
    from ..keyset import Key, Keyset

PREFIX = "v1."
_PREFIX_BYTES = PREFIX.encode("ascii")
_HEADER = 4 + 12
_TAG = 16


def _cipher(secret: bytes) -> AESGCM:
    return AESGCM(sdk_aes_key(secret))


class McpPyFormat:
    name = "mcp-py"
    alg = "mcp-py-v1"
    confidential = True

    def seal(self, key: Key, plaintext: bytes) -> str:
        key_id = key.key_id
        nonce = random_bytes(12)
        sealed = key.prepared(self.alg, _cipher).encrypt(nonce, plaintext, _PREFIX_BYTES + key_id)
        return PREFIX + b64url_encode(key_id + nonce + sealed)

    def _split(self, token: str) -> bytes:
        if not token.startswith(PREFIX) or token.count(".") != 1:
            raise WrongFormat("not an mcp-py token (v1. followed by one base64url segment)")
        try:
            raw = b64url_decode(token[len(PREFIX) :])
        except EncodingError as err:
            raise MalformedToken(f"mcp-py token body: {err}") from None
        if len(raw) < _HEADER + _TAG:
            raise MalformedToken(f"mcp-py token is truncated ({len(raw)} bytes decoded)")
        return raw

    def open(self, keyset: Keyset, token: str) -> tuple[Key, bytes]:
        raw = self._split(token)
        key_id = raw[:4]
        key = keyset.verifying_key(key_id.hex(), self.alg)
        cipher = key.prepared(self.alg, _cipher)
        return key, gcm_open(cipher, raw[4:_HEADER], raw[_HEADER:], _PREFIX_BYTES + key_id)

    def anatomy(self, token: str) -> Anatomy:
        raw = self._split(token)
        body = token[len(PREFIX) :]
        cuts = [0] + [(n * 4 + 2) // 3 for n in (4, _HEADER, len(raw) - _TAG)] + [len(body)]
        labels = ("key id", "nonce", "ciphertext", "tag")
        segments: tuple[tuple[str, str], ...] = (("prefix", PREFIX),)
        segments += tuple((labels[i], body[cuts[i] : cuts[i + 1]]) for i in range(4))
        return Anatomy(
            format=self.name,
            kid=raw[:4].hex(),
            segments=segments,
            fields=(
                ("key id", raw[:4].hex() + " (derived from the SDK secret)"),
                ("nonce", raw[4:_HEADER].hex()),
                ("ciphertext", f"{len(raw) - _HEADER - _TAG} bytes (AES-256-GCM, HKDF key)"),
                ("tag", raw[-_TAG:].hex()),
            ),
            confidential=True,
        )


FORMAT = McpPyFormat()
