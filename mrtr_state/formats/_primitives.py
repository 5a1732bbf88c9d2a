"""The two primitives every format uses, wrapped once so that they are tested once.

The Wycheproof tests drive these wrappers directly. The AES-GCM formats call the same
``AESGCM.decrypt`` inline on their hot path and map :class:`InvalidTag` to the same error with
the same message, so what a vector probes in the primitive is what the formats run.
"""

from __future__ import annotations

from typing import Protocol

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from .._encoding import compare_digest
from ..errors import BadSignature

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
    """A keyed HMAC state: OpenSSL's ``_hashlib.HMAC`` or :class:`hmac.HMAC`."""

    def copy(self) -> Keyed: ...
    def update(self, data: bytes, /) -> None: ...
    def digest(self) -> bytes: ...


TAG_MISMATCH = "authentication tag mismatch (tampered, truncated or forged)"


def gcm_open(cipher: AESGCM, nonce: bytes, sealed: bytes, associated: bytes) -> bytes:
    """Decrypt ``sealed`` (ciphertext ‖ 16-byte tag); a bad tag is :class:`BadSignature`."""
    try:
        return cipher.decrypt(nonce, sealed, associated)
    except InvalidTag:
        raise BadSignature(TAG_MISMATCH) from None


def hmac_key(secret: bytes, prefix: bytes = b"") -> Keyed:
    """An HMAC-SHA256 state keyed (and fed ``prefix``) once, to be copied for each message.

    Copying a keyed state skips the per-message key schedule: about twice as fast as the
    one-shot ``hmac.digest`` for token-sized messages. Where OpenSSL backs :mod:`hashlib` (it
    does in every CPython build that has ``_hashlib``), the state is OpenSSL's own object, whose
    ``copy``, ``update`` and ``digest`` are C calls; :mod:`hmac`'s wrapper adds a Python frame to
    each of them.
    """
    try:  # imported here: the AES-GCM formats never need it
        from _hashlib import hmac_new
    except ImportError:  # pragma: no cover - CPython without OpenSSL's hashlib
        import hmac

        return hmac.new(secret, prefix, "sha256")
    return hmac_new(secret, prefix, "sha256")


def hmac_sha256(keyed: Keyed, data: bytes) -> bytes:
    state = keyed.copy()
    state.update(data)
    return state.digest()


def mac_matches(keyed: Keyed, data: bytes, mac: bytes) -> bool:
    """Constant-time check of a full 32-byte HMAC-SHA256 ``mac`` over ``data``."""
    state = keyed.copy()
    state.update(data)
    return compare_digest(state.digest(), mac)
