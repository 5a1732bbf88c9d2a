"""How a secret becomes the key a wire uses and the id a keyset calls it by.

mrtr-state's own keys are 32 random bytes with an id the keyset chooses. The official SDKs take
the operator's secret as given, and a keyset must call such a key by an id that follows from it:
tokens of the Python SDK carry a 4-byte id derived from its HKDF key (so routing needs exactly
that id), rmcp's keyring tokens carry the operator's key id (so ours derives from it), and the
SDKs whose tokens carry no id get one that only names the secret, stably, so that one secret is
one key. The format table (:mod:`mrtr_state.tokens.registry`) says which rule each key algorithm
follows; the rules live here, below both the table and the wires that use them.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = [
    "KidRule",
    "hmac_key_as_used",
    "mcp_py_aes_key",
    "mcp_py_kid",
    "mcp_rs2_kid",
    "named_by_sdk_kid",
    "named_by_secret",
]

#: How a key id follows from a key's secret and, for keys that carry one, the SDK's key id.
KidRule = Callable[[bytes, "str | None"], str]

_MCP_PY_INFO = b"mcp/request-state/v1/aes-256-gcm"
_MCP_PY_KID_LABEL = b"mcp/request-state/v1/kid:"


def _sha256(data: bytes) -> bytes:
    # cryptography's SHA-256, not hashlib's: a keyset holding an SDK key should not make every
    # command start a second OpenSSL binding
    from cryptography.hazmat.primitives.hashes import SHA256, Hash

    hashed = Hash(SHA256())
    hashed.update(data)
    return hashed.finalize()


#: SHA-256's block size: HMAC-SHA256 pads its key with zeros to it, and hashes a longer one.
_HMAC_BLOCK = 64


def hmac_key_as_used(secret: bytes) -> bytes:
    """The block HMAC-SHA256 is keyed with (RFC 2104 section 2): ``secret`` hashed first when
    it is longer than the block, then padded with zeros to it. Two secrets with one block are
    one key to HMAC (K and K followed by a zero byte; a 65-byte K and SHA-256(K))."""
    if len(secret) > _HMAC_BLOCK:
        secret = _sha256(secret)
    return secret.ljust(_HMAC_BLOCK, b"\0")


def mcp_py_aes_key(secret: bytes) -> bytes:
    """The AES-256 key the MCP Python SDK derives from an operator secret (HKDF-SHA256)."""
    from cryptography.hazmat.primitives.hashes import SHA256
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    return HKDF(algorithm=SHA256(), length=32, salt=None, info=_MCP_PY_INFO).derive(secret)


def mcp_py_kid(secret: bytes, sdk_kid: str | None = None) -> str:
    """SHA-256(label ‖ derived AES key)[:4]: the id every Python SDK token of this secret
    carries."""
    return _sha256(_MCP_PY_KID_LABEL + mcp_py_aes_key(secret))[:4].hex()


def named_by_secret(label: bytes) -> KidRule:
    """For SDKs whose tokens carry no key id: an id that only names the key, derived from its
    secret under ``label`` (one label per algorithm, so one secret is one key of each)."""

    def kid(secret: bytes, sdk_kid: str | None = None) -> str:
        return _sha256(label + secret)[:4].hex()

    return kid


def named_by_sdk_kid(label: bytes) -> KidRule:
    """For SDK keyrings whose tokens name their key by the operator's id (rmcp's): an id
    derived from that id, so a keyset cannot hold two keys under one SDK key id."""

    def kid(secret: bytes, sdk_kid: str | None = None) -> str:
        if sdk_kid is None:
            raise ValueError("this key needs the SDK key id its tokens carry (sdk_kid)")
        return _sha256(label + sdk_kid.encode("utf-8"))[:4].hex()

    return kid


#: rmcp's keyring keys (``mcp-rs-v2``): the wire names the key a token's rmcp id implies.
mcp_rs2_kid = named_by_sdk_kid(b"mrtr-state/mcp-rs2/kid:")
