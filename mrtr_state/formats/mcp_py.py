"""``mcp-py``: the requestState tokens of the official MCP Python SDK (``mcp`` 2.x).

    v1. + b64url( kid (4) | nonce (12) | AES-256-GCM ciphertext and tag )

The AES key is HKDF-SHA256(operator secret, no salt, info ``mcp/request-state/v1/aes-256-gcm``);
the kid is SHA-256(``mcp/request-state/v1/kid:`` ‖ AES key)[:4]; the associated data is ``v1.`` ‖
kid: the layout of ``aead`` under another prefix and key derivation. This module only seals and
opens; the SDK's claims envelope lives in :mod:`mrtr_state.envelopes.mcp_py`.
"""

from __future__ import annotations

from ..algorithms import mcp_py_aes_key
from ._gcm_blob import GcmBlobWire
from ._primitives import AESGCM

PREFIX = "v1."


def _cipher(secret: bytes) -> AESGCM:
    return AESGCM(mcp_py_aes_key(secret))


WIRE = GcmBlobWire(
    "mcp-py",
    "mcp-py-v1",
    PREFIX,
    _cipher,
    key_note=" (derived from the SDK secret)",
    shared_with="mcp_rb",
)
