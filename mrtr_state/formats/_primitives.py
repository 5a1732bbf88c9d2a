"""The two primitives every format uses, wrapped once so that they are tested once.

The Wycheproof tests drive these wrappers directly: whatever AES-GCM or HMAC-SHA256 quirk a
vector probes, it is probed through exactly the code the formats run.
"""

from __future__ import annotations

import hashlib
import hmac

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from ..errors import BadSignature

__all__ = ["AESGCM", "gcm_open", "hmac_sha256", "mac_matches"]

_SHA256 = hashlib.sha256


def gcm_open(cipher: AESGCM, nonce: bytes, sealed: bytes, associated: bytes) -> bytes:
    """Decrypt ``sealed`` (ciphertext ‖ 16-byte tag); a bad tag is :class:`BadSignature`."""
    try:
        return cipher.decrypt(nonce, sealed, associated)
    except InvalidTag:
        raise BadSignature("authentication tag mismatch (tampered, truncated or forged)") from None


def hmac_sha256(secret: bytes, data: bytes) -> bytes:
    return hmac.digest(secret, data, _SHA256)


def mac_matches(secret: bytes, data: bytes, mac: bytes) -> bool:
    """Constant-time check of a full 32-byte HMAC-SHA256 ``mac`` over ``data``."""
    return hmac.compare_digest(hmac.digest(secret, data, _SHA256), mac)
