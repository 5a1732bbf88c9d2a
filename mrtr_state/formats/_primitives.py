"""The two primitives every format uses, wrapped once so that they are tested once.

The Wycheproof tests drive these wrappers directly: whatever AES-GCM or HMAC-SHA256 quirk a
vector probes, it is probed through exactly the code the formats run.
"""

from __future__ import annotations

import hmac

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from ..errors import BadSignature

__all__ = ["AESGCM", "gcm_open", "hmac_key", "hmac_sha256", "mac_matches"]


def gcm_open(cipher: AESGCM, nonce: bytes, sealed: bytes, associated: bytes) -> bytes:
    """Decrypt ``sealed`` (ciphertext ‖ 16-byte tag); a bad tag is :class:`BadSignature`."""
    try:
        return cipher.decrypt(nonce, sealed, associated)
    except InvalidTag:
        raise BadSignature("authentication tag mismatch (tampered, truncated or forged)") from None


def hmac_key(secret: bytes, prefix: bytes = b"") -> hmac.HMAC:
    """An HMAC-SHA256 state keyed (and fed ``prefix``) once, to be copied for each message.

    Copying a keyed state skips the per-message key schedule: about twice as fast as the
    one-shot ``hmac.digest`` for token-sized messages.
    """
    return hmac.new(secret, prefix, "sha256")


def hmac_sha256(keyed: hmac.HMAC, data: bytes) -> bytes:
    state = keyed.copy()
    state.update(data)
    return state.digest()


def mac_matches(keyed: hmac.HMAC, data: bytes, mac: bytes) -> bool:
    """Constant-time check of a full 32-byte HMAC-SHA256 ``mac`` over ``data``."""
    state = keyed.copy()
    state.update(data)
    return hmac.compare_digest(state.digest(), mac)
