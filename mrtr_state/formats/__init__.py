"""Wire formats: one module per format behind one small protocol, and format detection.

A format turns plaintext bytes into a token string under one key and back. It knows nothing of
claims, lifetimes or bindings (the tokens layer adds those), so each module stays a page long and
can be checked against its specification alone. Formats take the key id from the token, look the
key up by that id (one dictionary look-up, never a trial of every key) and take the algorithm
from the key, never from the token.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Protocol

from ..errors import MalformedToken

if TYPE_CHECKING:
    from ..keyset import Key, Keyset

__all__ = ["FORMAT_NAMES", "OWN_FORMAT_NAMES", "Anatomy", "Format", "detect_format", "get_format"]


class Anatomy:
    """What can be read from a token without its key.

    ``segments`` split the token text itself, in order, into labelled pieces that join back to
    the token (for colouring). ``fields`` are decoded facts (key id, nonce, sizes). ``readable``
    holds the payload bytes when the format does not encrypt them.

    A plain record (no dataclass machinery, which would cost every command's start-up).
    """

    __slots__ = ("confidential", "fields", "format", "header", "kid", "readable", "segments")

    def __init__(
        self,
        *,
        format: str,
        kid: str,
        segments: tuple[tuple[str, str], ...],
        fields: tuple[tuple[str, str], ...],
        confidential: bool,
        header: dict[str, object] | None = None,
        readable: bytes | None = None,
    ) -> None:
        self.format = format
        self.kid = kid
        self.segments = segments
        self.fields = fields
        self.confidential = confidential
        self.header = header
        self.readable = readable

    def __repr__(self) -> str:
        return f"Anatomy(format={self.format!r}, kid={self.kid!r}, fields={self.fields!r})"


class Format(Protocol):
    """The contract every wire format module fulfils."""

    name: str
    alg: str
    confidential: bool

    def seal(self, key: Key, plaintext: bytes, nonce: bytes | None = None) -> str:
        """Protect ``plaintext`` under ``key`` (a key of :attr:`alg`).

        ``nonce``: 12 random bytes the caller drew fresh for this token alone (minting draws a
        token's nonce and ``jti`` in one system call), or None to draw them here. Formats
        without a nonce ignore it.
        """
        ...

    def open(self, keyset: Keyset, token: str) -> tuple[Key, bytes]:
        """Authenticate (and decrypt) ``token``; return the key it named and the plaintext."""
        ...

    def anatomy(self, token: str) -> Anatomy:
        """Parse the structure of ``token`` without any key (nothing here is trusted)."""
        ...


_MODULES = {"aead": "aead", "jws": "jws", "jwe": "jwe", "mcp-py": "mcp_py", "mcp-ts": "mcp_ts"}
FORMAT_NAMES = tuple(_MODULES)
#: mrtr-state's own formats, with its claims; the others are the official SDKs' wire formats.
OWN_FORMAT_NAMES = ("aead", "jws", "jwe")
_loaded: dict[str, Format] = {}


def get_format(name: str) -> Format:
    """The format called ``name``; its module is imported on first use."""
    try:
        return _loaded[name]
    except KeyError:
        pass
    if name not in _MODULES:
        raise ValueError(f"unknown format {name!r}; known: {', '.join(FORMAT_NAMES)}")
    module = importlib.import_module(f"{__name__}.{_MODULES[name]}")
    fmt: Format = module.FORMAT
    _loaded[name] = fmt
    return fmt


def detect_format(token: str) -> str:
    """Name the format a token is written in, from its shape alone (DESIGN section 3)."""
    if token.startswith("ms1."):
        return "aead"
    if token.startswith("v1."):
        return "mcp-ts" if token.count(".") == 2 else "mcp-py"
    dots = token.count(".")
    if dots == 2 and token.startswith("eyJ"):
        return "jws"
    if dots == 4:
        return "jwe"
    raise MalformedToken("not a requestState token of any known format")
