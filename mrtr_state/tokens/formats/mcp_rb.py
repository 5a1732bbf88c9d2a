"""``mcp-rb``: the requestState tokens of the Ruby SDK (1.3.0, ``RequestStateSecurity``).

    v1. + b64url( iv (12) | AES-256-GCM ciphertext | tag (16) ),  associated data ``v1.``

The raw 32-byte key is the AES key (no derivation) and the token carries no key id, so the
verifier tries each usable ``mcp-rb-v1`` key, primary first: AES-GCM's tag tells the right one
(a wrong key fails it like a forgery would). The prefix and shape are those of ``mcp-py``
tokens: a ``v1.`` token goes to an mcp-py key by its 4-byte key id first, and to these keys
only when none has it (:class:`mrtr_state.tokens.registry.Shape`: the key that opens a token names
its format). The Ruby SDK's decoder also takes padding and the standard alphabet; mrtr-state refuses
both (one spelling per token).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..._encoding import EncodingError, b64url_decode, b64url_encode
from ..._entropy import random_bytes
from ..._primitives import AESGCM, InvalidTag
from ...errors import BadSignature, MalformedToken
from . import Anatomy, KeylessWire

if TYPE_CHECKING:
    from ...keys.key import Key
    from ...keys.keyset import Keyset

__all__ = ["RubyWire"]

PREFIX = "v1."
_AAD = b"v1."
_IV, _TAG = 12, 16


class RubyWire(KeylessWire[AESGCM]):
    confidential = True

    def _keyed(self, key: Key) -> tuple[Key, AESGCM]:
        return key, key.prepared(self.alg, AESGCM)

    def seal(self, key: Key, plaintext: bytes, nonce: bytes = b"", associated: bytes = b"") -> str:
        iv = nonce or random_bytes(_IV)
        sealed = key.prepared(self.alg, AESGCM).encrypt(iv, plaintext, _AAD)
        return PREFIX + b64url_encode(iv + sealed)

    def _blob(self, token: str) -> bytes:
        if not token.startswith(PREFIX) or "." in token[len(PREFIX) :]:
            raise MalformedToken(f"not an {self.name} token (v1. and one base64url segment)")
        try:
            raw = b64url_decode(token[len(PREFIX) :])
        except EncodingError as err:
            raise MalformedToken(f"{self.name} token body: {err}") from None
        if len(raw) < _IV + _TAG:
            raise MalformedToken(f"{self.name} token is truncated ({len(raw)} bytes decoded)")
        return raw

    def open(self, keyset: Keyset, token: str, associated: bytes = b"") -> tuple[Key, bytes]:
        raw = self._blob(token)
        tried = self._tried(keyset)
        iv, sealed = raw[:_IV], raw[_IV:]
        for key, cipher in tried:
            try:
                return key, cipher.decrypt(iv, sealed, _AAD)
            except InvalidTag:
                continue
        raise BadSignature(
            f"authentication tag mismatch under every {self.alg} key (tampered, truncated, "
            "forged or another key)"
        )

    def anatomy(self, token: str) -> Anatomy:
        raw = self._blob(token)
        body = token[len(PREFIX) :]
        cuts = [0, (_IV * 4 + 2) // 3, ((len(raw) - _TAG) * 4 + 2) // 3, len(body)]
        labels = ("iv", "ciphertext", "tag")
        segments: tuple[tuple[str, str], ...] = (("prefix", PREFIX),)
        segments += tuple((labels[i], body[cuts[i] : cuts[i + 1]]) for i in range(3))
        return Anatomy(
            format=self.name,
            kid="",
            segments=segments,
            fields=(
                self.no_kid(),
                ("iv", raw[:_IV].hex()),
                ("ciphertext", f"{len(raw) - _IV - _TAG} bytes (AES-256-GCM, the raw key)"),
                ("tag", raw[-_TAG:].hex()),
            ),
            confidential=True,
        )
