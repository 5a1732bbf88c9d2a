"""The one table of token formats, and detection.

A format is a **wire** (:mod:`mrtr_state.tokens.formats`: bytes in, a token string out under one
key, and back; it knows nothing of claims, lifetimes or bindings) carrying an **envelope**
(:mod:`mrtr_state.tokens.envelopes`: what the plaintext means and the one path that accepts it),
under keys of one **key algorithm** (the secrets its keys take and the id a secret implies). Each
entry of :data:`_TABLE` names the three once, with the token shape detection looks for. This module
sits above both packages and is the only place that pairs them: neither imports the other or
this table, and each is handed what it uses (a wire its format's name and key algorithm, an
envelope its format's name and whether the wire is confidential).

**One shape, several formats.** Some SDKs' tokens cannot be told apart by their shape: a
``v1.`` blob without a further dot is the Python SDK's or the Ruby SDK's, two unprefixed
segments starting ``eyJ`` are the PHP SDK's or the Java SDK's. Entries that declare the
same shape share it: detection finds the shape, and the key that opens the token names its
format (:meth:`Shape.open`, the one mechanism). Adding a format is a wire module, an envelope
module (or an existing one) and an entry; nothing else branches on format names.

The keyset validates keys against :data:`KEY_ALGORITHMS`, so the table is light: its modules are
imported when a format is first used, and a command pays only for the formats it meets.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import TYPE_CHECKING

from ..errors import BadSignature, InvalidToken, KeyRetired, MalformedToken, OversizedToken
from ..keys.derivation import (
    KidRule,
    hmac_key_as_used,
    mcp_py_kid,
    mcp_rs2_kid,
    named_by_secret,
)

if TYPE_CHECKING:
    from ..keys.key import Key
    from ..keys.keyset import Keyset
    from .envelopes import Envelope
    from .formats import Wire

__all__ = [
    "FORMAT_NAMES",
    "KEY_ALGORITHMS",
    "OWN_ALGORITHMS",
    "OWN_FORMAT_NAMES",
    "SDK_SECRET_BYTES",
    "Format",
    "KeyAlgorithm",
    "Shape",
    "carries_audience",
    "derived_kid",
    "format_named",
    "key_algorithm_of",
    "sdk_kid_problem",
    "secret_length_ok",
    "secret_rule",
    "shape_of",
    "token_text",
]

#: The official SDKs take operator secrets "as given": at least 32 bytes (and a sane maximum).
SDK_SECRET_BYTES = (32, 4096)


class KeyAlgorithm:
    """One key algorithm: the format it serves and the secrets its keys take.

    ``exact``: the secret length it requires (generated keys have it); else the secret is the
    operator's, of :data:`SDK_SECRET_BYTES` length. ``kid``: how the key id follows from the
    secret (and, with ``sdk_kid``, from the SDK's own key id that its tokens carry), if it does;
    else the keyset chooses it. ``own``: one of mrtr-state's own formats' (``keys init`` makes
    one of each). ``format``: the name of the entry that uses it. ``hmac``: its wire keys
    HMAC-SHA256 with the secret itself (so secrets HMAC pads or hashes alike are one key).
    ``text``: the SDK is given its secret as text (a string it encodes as UTF-8, read from an
    environment variable), so the secret is that text, byte for byte, and a secret file's one
    final line break is the file's, not the secret's.
    """

    __slots__ = ("exact", "format", "hmac", "kid", "name", "own", "sdk_kid", "text")

    def __init__(
        self,
        name: str,
        *,
        exact: int | None = None,
        kid: KidRule | None = None,
        own: bool = False,
        sdk_kid: bool = False,
        hmac: bool = False,
        text: bool = False,
    ) -> None:
        self.name = name
        self.exact = exact
        self.kid = kid
        self.own = own
        self.sdk_kid = sdk_kid
        self.hmac = hmac
        self.text = text
        self.format = ""  # set by the entry that names it

    def __repr__(self) -> str:
        return f"KeyAlgorithm({self.name!r}, format={self.format!r})"


def _own(name: str) -> KeyAlgorithm:
    """An algorithm of mrtr-state's own formats: 32 random bytes, an id the keyset chooses."""
    return KeyAlgorithm(name, exact=32, own=True)


#: A token shape: (prefix, dots after it or None for any, "") for prefixed tokens, or ("",
#: dots in the token, its opening characters) for unprefixed ones.
ShapeKey = tuple[str, int | None, str]


def _prefixed(prefix: str, dots: int | None = None) -> ShapeKey:
    return (prefix, dots, "")


def _unprefixed(dots: int, start: str = "") -> ShapeKey:
    return ("", dots, start)


class _Entry:
    """A row of the table: the format's name, its wire and envelope (``module:Class`` in
    :mod:`mrtr_state.tokens.formats` and :mod:`mrtr_state.tokens.envelopes`), its key algorithm, its
    shape, and the notes ``inspect`` gives every token of it."""

    __slots__ = ("alg", "envelope", "name", "notes", "shape", "wire")

    def __init__(
        self,
        name: str,
        wire: str,
        envelope: str,
        alg: KeyAlgorithm,
        shape: ShapeKey,
        notes: tuple[str, ...] = (),
    ) -> None:
        self.name, self.wire, self.envelope = name, wire, envelope
        self.alg, self.shape, self.notes = alg, shape, notes
        alg.format = name


_READABLE_CLAIMS = (
    "the payload is readable by anyone holding the token; its sub is a salted keyed tag of the "
    "principal, never the principal itself",
)
_SIGNED_ONLY = ("signed, not encrypted: the client can read the payload",)

_TABLE = (
    _Entry("aead", "aead:AeadWire", "own:OwnEnvelope", _own("A256GCM"), _prefixed("ms1")),
    _Entry(
        "jws",
        "jws:JwsWire",
        "own:OwnEnvelope",
        _own("HS256"),
        _unprefixed(2, "eyJ"),
        _READABLE_CLAIMS,
    ),
    _Entry("jwe", "jwe:JweWire", "own:OwnEnvelope", _own("dir+A256GCM"), _unprefixed(4)),
    _Entry(
        "mcp-py",
        "mcp_py:McpPyWire",
        "mcp_py:McpPyEnvelope",
        KeyAlgorithm("mcp-py-v1", kid=mcp_py_kid, text=True),
        _prefixed("v1", 0),
    ),
    _Entry(
        "mcp-ts",
        "mcp_ts:McpTsWire",
        "mcp_ts:McpTsEnvelope",
        KeyAlgorithm("mcp-ts-v1", kid=named_by_secret(b"mrtr-state/mcp-ts/kid:"), text=True),
        _prefixed("v1", 1),
        _SIGNED_ONLY,
    ),
    # the Ruby SDK uses its key as the AES-256 key itself: exactly 32 bytes. Its tokens have the
    # Python SDK's shape; the key that opens one names which it is.
    _Entry(
        "mcp-rb",
        "mcp_rb:RubyWire",
        "mcp_rb:McpRbEnvelope",
        KeyAlgorithm("mcp-rb-v1", exact=32, kid=named_by_secret(b"mrtr-state/mcp-rb/kid:")),
        _prefixed("v1", 0),
    ),
    _Entry(
        "mcp-rs",
        "mcp_rs:RmcpWire",
        "mcp_rs:McpRsEnvelope",
        KeyAlgorithm("mcp-rs-v1", kid=named_by_secret(b"mrtr-state/mcp-rs/kid:")),
        _prefixed("rs1"),
        _SIGNED_ONLY,
    ),
    _Entry(
        "mcp-rs2",
        "mcp_rs2:KeyringWire",
        "mcp_rs:McpRsEnvelope",
        KeyAlgorithm("mcp-rs-v2", kid=mcp_rs2_kid, sdk_kid=True),
        _prefixed("rs2"),
        _SIGNED_ONLY,
    ),
    _Entry(
        "mcp-php",
        "mcp_php:PhpWire",
        "mcp_php:McpPhpEnvelope",
        KeyAlgorithm("mcp-php-v1", kid=named_by_secret(b"mrtr-state/mcp-php/kid:"), hmac=True),
        _unprefixed(1, "eyJ"),
        _SIGNED_ONLY,
    ),
    # the Java SDK signs as the PHP SDK does (the same shape: the key that opens a token names
    # it) and takes keys of any length; mrtr-state holds them to 32 bytes at least
    _Entry(
        "mcp-java",
        "mcp_java:JavaWire",
        "mcp_java:McpJavaEnvelope",
        KeyAlgorithm("mcp-java-v1", kid=named_by_secret(b"mrtr-state/mcp-java/kid:"), hmac=True),
        _unprefixed(1, "eyJ"),
        (
            "signed, not encrypted: the client can read the payload, and the principal (p) is "
            "in clear, readable by anyone holding the token",
        ),
    ),
)
_ENTRIES = {entry.name: entry for entry in _TABLE}
FORMAT_NAMES = tuple(_ENTRIES)
#: mrtr-state's own formats, with its claims; the others are the official SDKs' wire formats.
OWN_FORMAT_NAMES = tuple(entry.name for entry in _TABLE if entry.alg.own)
#: Key algorithm name -> its rules.
KEY_ALGORITHMS: Mapping[str, KeyAlgorithm] = {entry.alg.name: entry.alg for entry in _TABLE}
#: The algorithms of mrtr-state's own formats: what ``keys init`` makes by default.
OWN_ALGORITHMS = tuple(entry.alg.name for entry in _TABLE if entry.alg.own)


# --- key algorithms --------------------------------------------------------------------------


def key_algorithm_of(format_name: str) -> str:
    """The key algorithm of the format called ``format_name`` (its modules are not loaded)."""
    entry = _ENTRIES.get(format_name)
    if entry is None:
        raise ValueError(f"unknown format {format_name!r}; known: {', '.join(FORMAT_NAMES)}")
    return entry.alg.name


def secret_length_ok(alg: str, secret: bytes) -> bool:
    exact = KEY_ALGORITHMS[alg].exact
    if exact is not None:
        return len(secret) == exact
    low, high = SDK_SECRET_BYTES
    return low <= len(secret) <= high


def secret_rule(alg: str) -> str:
    """What a secret of ``alg`` must be, for messages: "exactly 32" or "32..4096"."""
    exact = KEY_ALGORITHMS[alg].exact
    return f"exactly {exact}" if exact is not None else "{}..{}".format(*SDK_SECRET_BYTES)


def derived_kid(alg: str, secret: bytes, sdk_kid: str | None = None) -> str | None:
    """The key id a secret of ``alg`` (and the SDK's key id, for keys that carry one) implies,
    or None when the keyset chooses it."""
    algorithm = KEY_ALGORITHMS.get(alg)
    derive = None if algorithm is None else algorithm.kid
    return None if derive is None else derive(secret, sdk_kid)


def sdk_kid_problem(alg: str, sdk_kid: object, option: str = "sdk_kid") -> str | None:
    """Why ``sdk_kid`` cannot be the SDK key id of a key of ``alg`` (None: it can).
    ``option``: what the caller calls the value, for the message."""
    algorithm = KEY_ALGORITHMS.get(alg)
    if algorithm is None or not algorithm.sdk_kid:
        return None if sdk_kid is None else f"{alg} keys carry no SDK key id (drop {option})"
    if type(sdk_kid) is not str:
        return f"{alg} keys need the SDK key id their tokens carry ({option})"
    try:
        size = len(sdk_kid.encode("utf-8"))
    except UnicodeEncodeError:
        return "the SDK key id is not valid UTF-8"
    if not 1 <= size <= 255:
        return f"the SDK key id must be 1-255 bytes of UTF-8, this one is {size}"
    return None


# --- formats ---------------------------------------------------------------------------------


class Format:
    """One format with its modules loaded: the wire's ``seal``, ``open`` and ``anatomy`` (its
    own bound methods, so calling them costs nothing more), the envelope, the key algorithm's
    name, and what ``inspect`` says of every token of the format (``notes``)."""

    __slots__ = (
        "alg",
        "anatomy",
        "associates",
        "confidential",
        "envelope",
        "name",
        "notes",
        "open",
        "own",
        "seal",
        "wire",
    )

    def __init__(self, entry: _Entry) -> None:
        wire_class = _attribute("formats", entry.wire)
        envelope_class = _attribute("envelopes", entry.envelope)
        wire: Wire = wire_class(entry.name, entry.alg.name)
        self.name = entry.name
        self.alg = entry.alg.name
        self.own = entry.alg.own
        self.wire = wire
        self.confidential = wire.confidential
        #: whether the tag also covers associated data the verifier states (rmcp's wires)
        self.associates = wire.associates
        self.envelope: Envelope = envelope_class(entry.name, wire.confidential)
        self.seal = wire.seal
        self.open = wire.open
        self.anatomy = wire.anatomy
        self.notes = entry.notes

    def __repr__(self) -> str:
        return f"Format({self.name!r}, alg={self.alg!r})"


def _attribute(package: str, where: str) -> type:
    """The class ``module:Class`` of ``package`` names, its module imported on first use."""
    module, _colon, name = where.partition(":")
    found: type = getattr(importlib.import_module(f"{__package__}.{package}.{module}"), name)
    return found


_loaded: dict[str, Format] = {}


def carries_audience(format_name: str) -> bool:
    """Whether tokens of the format called ``format_name`` can be bound to an audience."""
    from .binding import AUDIENCE

    return bool(format_named(format_name).envelope.carries & AUDIENCE)


def format_named(name: str) -> Format:
    """The format called ``name`` (a caller's unknown name is a ``ValueError``)."""
    fmt = _loaded.get(name)
    if fmt is not None:
        return fmt
    entry = _ENTRIES.get(name)
    if entry is None:
        raise ValueError(f"unknown format {name!r}; known: {', '.join(FORMAT_NAMES)}")
    fmt = _loaded[name] = Format(entry)
    return fmt


# --- shapes and detection --------------------------------------------------------------------


class Shape:
    """A token shape detection recognises, and the formats written in it, in the table's order.

    ``name`` is what detection can say of a token of the shape: its format's name, or the names
    of the formats that share it ("mcp-py or mcp-rb"). ``only`` is the one format written in
    the shape, or None when several share it (then :meth:`open` tells them apart).
    """

    __slots__ = ("formats", "name", "names", "only")

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names
        self.name = " or ".join(names)
        self.formats: tuple[Format, ...] = ()  # loaded on first use (see shape_of)
        self.only: Format | None = None

    def __repr__(self) -> str:
        return f"Shape({self.name!r})"

    def load(self) -> Shape:
        formats = tuple(format_named(name) for name in self.names)
        self.only = formats[0] if len(formats) == 1 else None
        self.formats = formats
        return self

    def open(self, keyset: Keyset, text: str, associated: bytes) -> tuple[Format, Key, bytes]:
        """Authenticate (and decrypt) a token of this shape: (its format, the key that opened
        it, the plaintext), or the specific refusal. (Where :attr:`only` names the format, its
        wire's ``open`` is the whole of this.)

        When several formats share the shape, each is tried in the table's order and the key
        that opens the token names its format: a format that refuses it (no key by the token's
        id, no key of the format at all, a tag that fails under each, a layout of its own the
        token breaks) is passed over. A token every format refuses gets a bad tag or MAC,
        naming each format's reason, if a key of any was tried; else the first refusal of a
        format that holds keys, or the first format's when none does.
        """
        refused: list[tuple[Format, InvalidToken]] = []
        for fmt in self.formats:
            try:
                key, plaintext = fmt.open(keyset, text, associated)
            except InvalidToken as err:
                refused.append((fmt, err))
                continue
            return fmt, key, plaintext
        if not any(isinstance(err, BadSignature) for _fmt, err in refused):
            # a format that had keys to try says more than one that had none (a Java token
            # whose MAC a key checked, but whose payload is padded, is malformed, not keyless)
            # and one whose keys are all retired more than one that finds no key by an id
            keyed = [err for _fmt, err in refused if not _keyless(err)]
            keyed.sort(key=lambda err: not isinstance(err, KeyRetired))
            raise keyed[0] if keyed else refused[0][1]
        raise BadSignature("; ".join(f"{fmt.name}: {err}" for fmt, err in refused))


def _keyless(err: InvalidToken) -> bool:
    """Whether ``err`` says only that the keyset holds no key of the format (its remedy is to
    import one)."""
    return err.remedy is not None and err.remedy[0] == "import_key"


def _shapes(
    table: tuple[_Entry, ...],
) -> tuple[dict[str, dict[int | None, Shape]], dict[int, tuple[str, Shape]]]:
    """The detection tables of ``table``: prefix -> dots after it (None: any) -> shape; and for
    unprefixed tokens, dots -> (opening characters, shape). Entries of one shape share its
    Shape, in the table's order."""
    names: dict[ShapeKey, tuple[str, ...]] = {}
    for entry in table:
        names[entry.shape] = (*names.get(entry.shape, ()), entry.name)
    prefixed: dict[str, dict[int | None, Shape]] = {}
    unprefixed: dict[int, tuple[str, Shape]] = {}
    for (prefix, dots, start), shared in names.items():
        shape = Shape(shared)
        if prefix:
            prefixed.setdefault(prefix, {})[dots] = shape
        else:
            assert dots is not None, "an unprefixed shape counts its dots"
            unprefixed[dots] = (start, shape)
    return prefixed, unprefixed


_PREFIXED, _UNPREFIXED = _shapes(_TABLE)


def _shape_peers(table: tuple[_Entry, ...]) -> dict[str, frozenset[str]]:
    """Key algorithm -> the other algorithms whose formats share its token shape."""
    by_shape: dict[ShapeKey, set[str]] = {}
    for entry in table:
        by_shape.setdefault(entry.shape, set()).add(entry.alg.name)
    return {
        alg: frozenset(algs - {alg}) for algs in by_shape.values() for alg in algs if len(algs) > 1
    }


_SHAPE_PEERS = _shape_peers(_TABLE)


def secret_as_used(alg: str, secret: bytes) -> bytes:
    """``secret`` as ``alg``'s primitive takes it: the block HMAC keys with, for an HMAC key
    (see :func:`mrtr_state.keys.derivation.hmac_key_as_used`); else the secret itself."""
    if KEY_ALGORITHMS[alg].hmac:
        return hmac_key_as_used(secret)
    return secret


def shape_peers(alg: str) -> frozenset[str]:
    """The key algorithms whose tokens look like ``alg``'s (one shape, several formats): the key
    that opens such a token names its format, so one secret must not be held under two of them
    (its MAC would open the other's tokens and name the wrong format)."""
    return _SHAPE_PEERS.get(alg, frozenset())


_LONGEST_PREFIX = max(len(prefix) for prefix in _PREFIXED)
_UNKNOWN_SHAPE = "not a requestState token of any known format"
#: The prefix of a state handle (:mod:`mrtr_state.state.records`): not a token, but named here so
#: that one given where a token is expected is told apart from garbage.
HANDLE_PREFIX = "mh1."


def shape_of(token: str) -> Shape:
    """The :class:`Shape` a token is written in, from its text alone (its formats loaded)."""
    at = token.find(".")
    # prefixes are short: a JOSE header before the first dot is never hashed and looked up
    by_dots = _PREFIXED.get(token[:at]) if 0 < at <= _LONGEST_PREFIX else None
    if by_dots is not None:
        shape = by_dots.get(None) or by_dots.get(token.count(".", at + 1))
    else:
        # no prefix: the number of segments, then how the first starts
        start_shape = _UNPREFIXED.get(token.count("."))
        shape = (
            start_shape[1] if start_shape is not None and token.startswith(start_shape[0]) else None
        )
    if shape is None:
        if token.startswith(HANDLE_PREFIX):
            raise MalformedToken(
                "a state handle, not a token: its state is in a store, verified there"
            ).needing("use_state_store")
        raise MalformedToken(_UNKNOWN_SHAPE)
    return shape if shape.formats else shape.load()


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
