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
    "sdk_kid_problem",
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

    ``own``: one of mrtr-state's own formats, whose keys it generates. ``exact``: the secret
    length the format requires (generated keys have it); else the secret is the operator's, of
    ``SDK_SECRET_BYTES`` length. ``kid``: how the key id follows from the secret (and, for a
    format whose tokens name their key by the SDK's own key id, that id), if it does.
    ``sdk_kid``: whether keys carry the SDK's key id (rmcp's keyring ids).
    """

    __slots__ = ("exact", "format", "kid", "name", "own", "sdk_kid")

    def __init__(
        self,
        name: str,
        format: str,
        exact: int | None = None,
        kid: Callable[[bytes, str | None], str] | None = None,
        *,
        own: bool = False,
        sdk_kid: bool = False,
    ) -> None:
        self.name = name
        self.format = format
        self.exact = exact
        self.kid = kid
        self.own = own
        self.sdk_kid = sdk_kid


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


def _mcp_py_kid(secret: bytes, sdk_kid: str | None = None) -> str:
    """SHA-256(label ‖ derived AES key)[:4]: the id every token of this secret carries."""
    return _sha256(_MCP_PY_KID_LABEL + mcp_py_aes_key(secret))[:4].hex()


def _named_by_secret(label: bytes) -> Callable[[bytes, str | None], str]:
    """For SDKs whose tokens carry no key id (TypeScript, Ruby, rmcp's rs1, PHP): an id that
    only names the key, stably, derived from its secret (so one secret is one key)."""

    def kid(secret: bytes, sdk_kid: str | None = None) -> str:
        return _sha256(label + secret)[:4].hex()

    return kid


def _mcp_rs2_kid(secret: bytes, sdk_kid: str | None = None) -> str:
    """rmcp's keyring tokens name their key by the operator's id: ours derives from it, so a
    keyset cannot hold two keys under one rmcp id."""
    if sdk_kid is None:
        raise ValueError("an mcp-rs-v2 key needs the rmcp key id its tokens carry (--kid)")
    return _sha256(b"mrtr-state/mcp-rs2/kid:" + sdk_kid.encode("utf-8"))[:4].hex()


_TABLE = (
    Algorithm("A256GCM", "aead", exact=32, own=True),
    Algorithm("HS256", "jws", exact=32, own=True),
    Algorithm("dir+A256GCM", "jwe", exact=32, own=True),
    Algorithm("mcp-py-v1", "mcp-py", kid=_mcp_py_kid),
    Algorithm("mcp-ts-v1", "mcp-ts", kid=_named_by_secret(_MCP_TS_KID_LABEL)),
    # the Ruby SDK uses its key as the AES-256 key itself: exactly 32 bytes
    Algorithm("mcp-rb-v1", "mcp-rb", exact=32, kid=_named_by_secret(b"mrtr-state/mcp-rb/kid:")),
    Algorithm("mcp-rs-v1", "mcp-rs", kid=_named_by_secret(b"mrtr-state/mcp-rs/kid:")),
    Algorithm("mcp-rs-v2", "mcp-rs2", kid=_mcp_rs2_kid, sdk_kid=True),
    Algorithm("mcp-php-v1", "mcp-php", kid=_named_by_secret(b"mrtr-state/mcp-php/kid:")),
)
#: Algorithm name -> its rules.
ALGORITHMS: Mapping[str, Algorithm] = {alg.name: alg for alg in _TABLE}
#: The algorithms of mrtr-state's own formats: what ``keys init`` makes by default.
OWN_ALGORITHMS = tuple(alg.name for alg in _TABLE if alg.own)


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


def derived_kid(alg: str, secret: bytes, sdk_kid: str | None = None) -> str | None:
    """The key id a secret of ``alg`` (and the SDK's key id, for keys that carry one) implies,
    or None when the keyset chooses it."""
    derive = ALGORITHMS[alg].kid if alg in ALGORITHMS else None
    return None if derive is None else derive(secret, sdk_kid)


def sdk_kid_problem(alg: str, sdk_kid: object) -> str | None:
    """Why ``sdk_kid`` cannot be the SDK key id of a key of ``alg`` (None: it can)."""
    wants = alg in ALGORITHMS and ALGORITHMS[alg].sdk_kid
    if not wants:
        return None if sdk_kid is None else f"{alg} keys carry no SDK key id (drop --kid)"
    if type(sdk_kid) is not str:
        return f"{alg} keys need the rmcp key id their tokens carry (--kid)"
    try:
        size = len(sdk_kid.encode("utf-8"))
    except UnicodeEncodeError:
        return "the rmcp key id is not valid UTF-8"
    if not 1 <= size <= 255:
        return f"the rmcp key id must be 1-255 bytes of UTF-8, this one is {size}"
    return None
