"""``mcp-py``: the requestState tokens of the official MCP Python SDK (``mcp`` 2.x).

    v1. + b64url( kid (4) | nonce (12) | AES-256-GCM ciphertext and tag )

The AES key is HKDF-SHA256(operator secret, no salt, info ``mcp/request-state/v1/aes-256-gcm``);
the kid is SHA-256(``mcp/request-state/v1/kid:`` ‖ AES key)[:4] (both in
:mod:`mrtr_state.keys.derivation`); the associated data is ``v1.`` ‖ kid: the layout of ``aead``
under another prefix and key derivation. This module only seals and opens; the SDK's claims
envelope lives in :mod:`mrtr_state.tokens.envelopes.mcp_py`. The Ruby SDK's tokens have this shape
too (:mod:`.mcp_rb`); the key that opens a token names which it is.
"""

from __future__ import annotations

from ..._primitives import AESGCM
from ...keys.derivation import mcp_py_aes_key
from ._gcm_blob import GcmBlobWire

__all__ = ["McpPyWire"]


class McpPyWire(GcmBlobWire):
    """The AES key is derived from the operator's secret, as the SDK derives it."""

    prefix = "v1."
    key_note = " (derived from the SDK secret)"

    @staticmethod
    def cipher(secret: bytes) -> AESGCM:
        return AESGCM(mcp_py_aes_key(secret))
