"""Token formats: the one table of format names, and detection.

A format is a **wire** (a module here: bytes in, a token string out, under one key, and back;
it knows nothing of claims, lifetimes or bindings, so each stays a page long and can be checked
against its specification alone) carrying an **envelope** (a module of
:mod:`mrtr_state.envelopes`: what the plaintext means and the one path that accepts it). The
AES-GCM blob wire serves aead and mcp-py alike; our claims travel in aead, jws and jwe.

Wires take the key id from the token, look the key up by that id (one dictionary look-up, never
a trial of every key) and take the algorithm from the key, never from the token.

Adding a format is a wire module, an envelope module (or an existing one) and a row in
:data:`_TABLE`; nothing else in the package branches on format names. Modules are imported on
first use, so a command pays only for the formats it meets.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Protocol

from ..errors import MalformedToken, OversizedToken

if TYPE_CHECKING:
    from ..envelopes import Envelope
    from ..keyset import Key, Keyset

__all__ = [
    "FORMAT_NAMES",
    "OWN_FORMAT_NAMES",
    "Anatomy",
    "Format",
    "Wire",
    "detect_format",
    "format_for_alg",
    "format_of",
    "get_format",
    "token_text",
]


class Anatomy:
    """What can be read from a token without its key.

    ``kid`` is the keyset's id of the key the token names: derived from what it carries, or,
    for a token that names none, set by ``inspect`` to the key that opened it (empty until
    then). ``segments`` split the token text itself, in order, into labelled pieces that join
    back to the token (for colouring). ``fields`` are decoded facts (key id, nonce, sizes).
    ``readable`` holds the payload bytes when the format does not encrypt them.

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


class Wire(Protocol):
    """The contract every wire module's ``WIRE`` fulfils."""

    name: str
    alg: str
    confidential: bool
    #: whether the tag also covers associated data the verifier states (rmcp's wires): then
    #: ``seal`` and ``open`` take it as a further argument, the bind value's bytes
    associates: bool

    def seal(self, key: Key, plaintext: bytes, nonce: bytes | None = None) -> str:
        """Protect ``plaintext`` under ``key`` (a key of :attr:`alg`).

        ``nonce``: 12 random bytes the caller drew fresh for this token alone (minting draws a
        token's random bytes in one system call), or None to draw them here. Wires without a
        nonce ignore it.
        """
        ...

    def open(self, keyset: Keyset, token: str) -> tuple[Key, bytes]:
        """Authenticate (and decrypt) ``token``; return the key it named and the plaintext, or
        the specific refusal. The key's algorithm names the format the token turned out to
        be, where one shape serves two (a ``v1.`` blob of the Python or the Ruby SDK)."""
        ...

    def anatomy(self, token: str) -> Anatomy:
        """Parse the structure of ``token`` without any key (nothing here is trusted)."""
        ...


class Format:
    """One token format: its wire's ``seal``/``open``/``anatomy`` (the wire's own bound
    methods, so calling them costs nothing more) and its ``envelope``. ``notes``: what
    ``inspect`` says of every token of the format."""

    __slots__ = (
        "alg",
        "anatomy",
        "associates",
        "confidential",
        "envelope",
        "name",
        "notes",
        "open",
        "seal",
        "shares",
        "wire",
    )

    def __init__(
        self,
        name: str,
        wire: Wire,
        envelope: Envelope,
        notes: tuple[str, ...],
        shares: tuple[str, ...] = (),
    ) -> None:
        self.name = name
        self.wire = wire
        self.envelope = envelope
        self.alg = wire.alg
        self.confidential = wire.confidential
        self.associates = wire.associates
        #: the formats whose tokens have this one's shape (detection cannot tell them apart;
        #: the key that opens a token does)
        self.shares = shares
        self.seal = wire.seal
        self.open = wire.open
        self.anatomy = wire.anatomy
        self.notes = notes

    def __repr__(self) -> str:
        return f"Format({self.name!r}, alg={self.alg!r})"


class _Row:
    """A row of the format table: the modules, and the token shape detection looks for.

    ``prefix``: the text before a token's first dot, for prefixed formats; ``dots``: how many
    dots follow it (None: any), or for unprefixed formats how many the token has, with
    ``start`` its opening characters. ``shares``: the format detection names for this shape,
    when another has it too (then the keyset tells them apart: see :data:`_TABLE`).
    """

    __slots__ = ("dots", "envelope", "name", "notes", "own", "prefix", "shares", "start", "wire")

    def __init__(
        self,
        name: str,
        wire: str,
        envelope: str,
        *,
        prefix: str = "",
        start: str = "",
        dots: int | None = None,
        own: bool = False,
        notes: tuple[str, ...] = (),
        shares: str = "",
    ) -> None:
        self.name, self.wire, self.envelope = name, wire, envelope
        self.prefix, self.start, self.dots = prefix, start, dots
        self.own, self.notes, self.shares = own, notes, shares


_READABLE_CLAIMS = (
    "the payload is readable by anyone holding the token; its sub is a salted keyed tag of the "
    "principal, never the principal itself"
)
_SIGNED_ONLY = ("signed, not encrypted: the client can read the payload",)
# A ``v1.`` token without a further dot is the Python SDK's or the Ruby SDK's: detection names
# mcp-py, whose wire routes by the 4-byte key id and, when no mcp-py key has it, tries the
# keyset's mcp-rb keys (there are few); the key that opens the token names its format.
_TABLE = (
    _Row("aead", "aead", "own", prefix="ms1", own=True),
    _Row("jws", "jws", "own", start="eyJ", dots=2, own=True, notes=(_READABLE_CLAIMS,)),
    _Row("jwe", "jwe", "own", dots=4, own=True),
    _Row("mcp-py", "mcp_py", "mcp_py", prefix="v1", dots=0),
    _Row("mcp-ts", "mcp_ts", "mcp_ts", prefix="v1", dots=1, notes=_SIGNED_ONLY),
    _Row("mcp-rb", "mcp_rb", "mcp_rb", prefix="v1", dots=0, shares="mcp-py"),
    _Row("mcp-rs", "mcp_rs", "mcp_rs", prefix="rs1", notes=_SIGNED_ONLY),
    _Row("mcp-rs2", "mcp_rs2", "mcp_rs", prefix="rs2", notes=_SIGNED_ONLY),
    _Row("mcp-php", "mcp_php", "mcp_php", start="eyJ", dots=1, notes=_SIGNED_ONLY),
)
_ROWS = {row.name: row for row in _TABLE}
FORMAT_NAMES = tuple(_ROWS)
#: mrtr-state's own formats, with its claims; the others are the official SDKs' wire formats.
OWN_FORMAT_NAMES = tuple(row.name for row in _TABLE if row.own)
# detection: prefix -> {dots after it (None: any): name}; unprefixed: {dots: (start, name)}
_PREFIXED: dict[str, dict[int | None, str]] = {}
for _row in _TABLE:
    if _row.prefix and not _row.shares:
        _PREFIXED.setdefault(_row.prefix, {})[_row.dots] = _row.name
_UNPREFIXED = {row.dots: (row.start, row.name) for row in _TABLE if not row.prefix}
# detected name -> the formats that share its shape
_SHARED: dict[str, tuple[str, ...]] = {}
for _row in _TABLE:
    if _row.shares:
        _SHARED[_row.shares] = (*_SHARED.get(_row.shares, ()), _row.name)
        _SHARED[_row.name] = (_row.shares,)
_LONGEST_PREFIX = max(len(prefix) for prefix in _PREFIXED)
_loaded: dict[str, Format] = {}


def get_format(name: str) -> Format:
    """The format called ``name``; its modules are imported on first use."""
    try:
        return _loaded[name]
    except KeyError:
        pass
    row = _ROWS.get(name)
    if row is None:
        raise ValueError(f"unknown format {name!r}; known: {', '.join(FORMAT_NAMES)}")
    wire: Wire = importlib.import_module(f"{__name__}.{row.wire}").WIRE
    envelope: Envelope = importlib.import_module(f"..envelopes.{row.envelope}", __name__).ENVELOPE
    fmt = _loaded[name] = Format(name, wire, envelope, row.notes, _SHARED.get(name, ()))
    return fmt


def format_for_alg(alg: str) -> Format:
    """The format a key of algorithm ``alg`` serves."""
    from ..algorithms import ALGORITHMS

    return get_format(ALGORITHMS[alg].format)


def _dots_after(token: str, at: int) -> int:
    """How many dots ``token`` holds after index ``at``: two ``find`` calls (memchr) settle the
    usual zero or one, a count the rest."""
    second = token.find(".", at + 1)
    if second < 0:
        return 0
    if token.find(".", second + 1) < 0:
        return 1
    return token.count(".", at + 1)


def format_of(token: str) -> Format:
    """The :class:`Format` a token is written in, from its shape alone (DESIGN section 3)."""
    at = token.find(".")
    # prefixes are short: a JOSE header before the first dot is never hashed and looked up
    by_dots = _PREFIXED.get(token[:at]) if 0 < at <= _LONGEST_PREFIX else None
    if by_dots is not None:
        name = by_dots.get(None) or by_dots.get(_dots_after(token, at))
        if name is not None:
            return _loaded.get(name) or get_format(name)
    else:
        # no prefix: the number of segments, then how the first starts
        start_name = _UNPREFIXED.get(token.count("."))
        if start_name is not None and token.startswith(start_name[0]):
            return _loaded.get(start_name[1]) or get_format(start_name[1])
    raise MalformedToken("not a requestState token of any known format")


def detect_format(token: str) -> str:
    """The name of the format a token is written in (:func:`format_of`)."""
    return format_of(token).name


def token_text(token: str | bytes, max_size: int) -> str:
    """Size-check and normalise untrusted token input to ASCII text."""
    if not isinstance(token, str | bytes):
        raise TypeError(f"token must be str or bytes, not {type(token).__name__}")
    if len(token) > max_size:
        raise OversizedToken(f"token is {len(token)} bytes, over the {max_size}-byte size cap")
    if isinstance(token, bytes):
        try:
            return token.decode("ascii")
        except UnicodeDecodeError:
            raise MalformedToken("token holds non-ASCII bytes") from None
    if not token.isascii():
        raise MalformedToken("token holds non-ASCII characters")
    return token
