"""The key algorithms: which format each key serves, the secrets it takes, the id it implies.

One algorithm per key (a key made for one format can never be fed to another), so this table is
where the keyset learns what a key may be. mrtr-state's own algorithms take 32 random bytes and
an id of our choosing; the official SDKs' take the operator's secret as given, and some derive
the key id from it (a token of the Python SDK carries a 4-byte id derived from its AES key, so
the keyset must call the key by that id to route its tokens).

Kept below the formats: the keyset validates keys with it, and a format module asks it for the
key material its wire uses (the Python SDK's HKDF-derived AES key).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

__all__ = [
    "ALGORITHMS",
    "OWN_ALGORITHMS",
    "SDK_SECRET_BYTES",
    "Algorithm",
    "derived_kid",
    "mcp_py_aes_key",
    "secret_length_ok",
    "secret_rule",
]

#: The official SDKs take operator secrets "as given": at least 32 bytes (and a sane maximum).
SDK_SECRET_BYTES = (32, 4096)
_MCP_PY_INFO = b"mcp/request-state/v1/aes-256-gcm"
_MCP_PY_KID_LABEL = b"mcp/request-state/v1/kid:"
_MCP_TS_KID_LABEL = b"mrtr-state/mcp-ts/kid:"


class Algorithm:
    """One key algorithm: the format it serves and the secrets it takes.

    ``exact``: a generated (and required) secret length, for our own formats; else the secret
    is the operator's, of ``SDK_SECRET_BYTES`` length. ``kid``: how the key id follows from the
    secret, if it does.
    """

    __slots__ = ("exact", "format", "kid", "name")

    def __init__(
        self,
        name: str,
        format: str,
        exact: int | None = None,
        kid: Callable[[bytes], str] | None = None,
    ) -> None:
        self.name = name
        self.format = format
        self.exact = exact
        self.kid = kid


def _sha256(data: bytes) -> bytes:
    # cryptography's SHA-256, not hashlib's: a keyset holding an SDK key should not make every
    # command start a second OpenSSL binding
    from cryptography.hazmat.primitives.hashes import SHA256, Hash

    hashed = Hash(SHA256())
    hashed.update(data)
    return hashed.finalize()


def mcp_py_aes_key(secret: bytes) -> bytes:
    """The AES-256 key the MCP Python SDK derives from an operator secret (HKDF-SHA256)."""
    from cryptography.hazmat.primitives.hashes import SHA256
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    return HKDF(algorithm=SHA256(), length=32, salt=None, info=_MCP_PY_INFO).derive(secret)


def _mcp_py_kid(secret: bytes) -> str:
    """SHA-256(label ‖ derived AES key)[:4]: the id every token of this secret carries."""
    return _sha256(_MCP_PY_KID_LABEL + mcp_py_aes_key(secret))[:4].hex()


def _mcp_ts_kid(secret: bytes) -> str:
    """The TypeScript SDK's tokens carry no key id; this one only names the key, stably."""
    return _sha256(_MCP_TS_KID_LABEL + secret)[:4].hex()


_TABLE = (
    Algorithm("A256GCM", "aead", exact=32),
    Algorithm("HS256", "jws", exact=32),
    Algorithm("dir+A256GCM", "jwe", exact=32),
    Algorithm("mcp-py-v1", "mcp-py", kid=_mcp_py_kid),
    Algorithm("mcp-ts-v1", "mcp-ts", kid=_mcp_ts_kid),
)
#: Algorithm name -> its rules.
ALGORITHMS: Mapping[str, Algorithm] = {alg.name: alg for alg in _TABLE}
#: The algorithms of mrtr-state's own formats: what ``keys init`` makes by default.
OWN_ALGORITHMS = tuple(alg.name for alg in _TABLE if alg.exact is not None)


def secret_length_ok(alg: str, secret: bytes) -> bool:
    exact = ALGORITHMS[alg].exact
    if exact is not None:
        return len(secret) == exact
    low, high = SDK_SECRET_BYTES
    return low <= len(secret) <= high


def secret_rule(alg: str) -> str:
    """What a secret of ``alg`` must be, for messages: "exactly 32" or "32..4096"."""
    exact = ALGORITHMS[alg].exact
    return f"exactly {exact}" if exact is not None else "{}..{}".format(*SDK_SECRET_BYTES)


def derived_kid(alg: str, secret: bytes) -> str | None:
    """The key id a secret of ``alg`` implies, or None when the keyset chooses it."""
    derive = ALGORITHMS[alg].kid if alg in ALGORITHMS else None
    return None if derive is None else derive(secret)
