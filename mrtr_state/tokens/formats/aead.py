"""``aead``: the smallest, fastest confidential format, and the default.

    ms1. + b64url( key id (4) | nonce (12) | AES-256-GCM ciphertext | tag (16) )

The associated data is ``ms1.`` followed by the 4 key-id bytes, so a ciphertext cannot be moved
under another key id or another format prefix without failing the tag. Every token gets a fresh
random 96-bit nonce from the OS; see SECURITY.md for the per-key budget that keeps nonce
collisions out of reach, and rotation keeps keys far from it.
"""

from __future__ import annotations

from ..._primitives import AESGCM
from ._gcm_blob import GcmBlobWire

__all__ = ["AeadWire"]


class AeadWire(GcmBlobWire):
    """The key's 32 random bytes are the AES-256 key."""

    prefix = "ms1."

    @staticmethod
    def cipher(secret: bytes) -> AESGCM:
        return AESGCM(secret)
