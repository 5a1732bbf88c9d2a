"""The two primitives every format uses, wrapped once so that they are tested once.

The Wycheproof tests drive these wrappers directly. The formats call the same objects inline on
their hot paths (``AESGCM.decrypt``, and copy/update/finalize of the keyed HMAC state that
:func:`hmac_key` builds), mapping failures to the same errors with the same messages, so what a
vector probes in the primitive is what the formats run.
"""

from __future__ import annotations

from typing import Protocol

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from ._encoding import compare_digest
from .errors import BadSignature

__all__ = [
    "AESGCM",
    "TAG_MISMATCH",
    "InvalidTag",
    "Keyed",
    "gcm_open",
    "hmac_key",
    "hmac_sha256",
    "mac_matches",
]


class Keyed(Protocol):
    """A keyed HMAC-SHA256 state (cryptography's): copy it, feed it the message, finalize."""

    def copy(self) -> Keyed: ...
    def update(self, data: bytes, /) -> None: ...
    def finalize(self) -> bytes: ...


TAG_MISMATCH = "authentication tag mismatch (tampered, truncated or forged)"


def gcm_open(cipher: AESGCM, nonce: bytes, sealed: bytes, associated: bytes) -> bytes:
    """Decrypt ``sealed`` (ciphertext ‖ 16-byte tag); a bad tag is :class:`BadSignature`."""
    try:
        return cipher.decrypt(nonce, sealed, associated)
    except InvalidTag:
        raise BadSignature(TAG_MISMATCH) from None


def hmac_key(secret: bytes, prefix: bytes = b"") -> Keyed:
    """An HMAC-SHA256 state keyed (and fed ``prefix``) once, to be copied for each message.

    Copying a keyed state skips the per-message key schedule. The state is cryptography's own
    (OpenSSL in Rust, already loaded for AES-GCM): its copy, update and finalize are faster than
    those of the standard library's ``_hashlib``, and using it spares a command the start-up of a
    second OpenSSL binding.
    """
    from cryptography.hazmat.primitives.hashes import SHA256
    from cryptography.hazmat.primitives.hmac import HMAC

    keyed = HMAC(secret, SHA256())
    if prefix:
        keyed.update(prefix)
    return keyed


def hmac_sha256(keyed: Keyed, data: bytes) -> bytes:
    state = keyed.copy()
    state.update(data)
    return state.finalize()


def mac_matches(keyed: Keyed, data: bytes, mac: bytes) -> bool:
    """Constant-time check of a full 32-byte HMAC-SHA256 ``mac`` over ``data``."""
    state = keyed.copy()
    state.update(data)
    return compare_digest(state.finalize(), mac)
