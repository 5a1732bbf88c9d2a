"""Canonical encodings: the bottom layer every format parses through.

Two inputs that differ in any byte must never both be accepted as the same token, and no
attacker-chosen input may make us do unbounded work. So:

* base64url is unpadded and canonical: only ``A-Z a-z 0-9 - _``, no ``=``, no whitespace, and the
  unused low bits of the last character must be zero (otherwise four spellings decode alike);
* a key id is 8 lowercase hex digits (:func:`is_kid`), checked before any look-up;
* sizes are checked by the callers before any of this runs (see :func:`check_size`).

JSON is read two ways, by where the bytes come from (docs/security.md, "Strict where bytes are
unauthenticated"):

* :func:`json_loads`, the **strict** reader, for everything read before a tag or MAC has been
  checked (a JOSE header read for why it was refused, a readable payload ``inspect`` shows
  without a key) and for every input that is not a token (proxy bodies, CLI input, keyset and
  config files, captures): it refuses duplicate member names (which parsers resolve
  differently), ``NaN``/``Infinity``, numbers that overflow a double, integers over Python's
  4,300-digit conversion limit, nesting deeper than :data:`MAX_DEPTH`, and anything but strict
  UTF-8;
* :func:`authenticated_object`, the **plain** reader, for the plaintext a tag or MAC has just
  authenticated: a key holder wrote it, so it is read with the C scanner alone (``json.loads``
  semantics: the last of two members of one name wins, as RFC 7515 section 5.2 allows), its
  nesting bounded by the token size cap and the interpreter's recursion limit, which is refused
  by name (:class:`NestingError`), never a traceback. ``NaN``, ``Infinity`` and numbers that
  overflow a double are still refused: the hooks that do it run only when such a literal (or a
  float) is met, so claims of integers and strings pay nothing for them.
"""

from __future__ import annotations

import binascii
import json
import math
import sys

# hmac.compare_digest is this same C function (or OpenSSL's equivalent); importing it from
# _operator spares every command the start-up cost of hmac, hashlib and OpenSSL's hash module.
from _operator import _compare_digest as compare_digest
from collections.abc import Callable
from typing import Any

__all__ = [
    "MAX_DEPTH",
    "EncodingError",
    "NestingError",
    "authenticated_json",
    "authenticated_object",
    "b64url_decode",
    "b64url_encode",
    "check_size",
    "claims_bytes",
    "compare_digest",
    "encode_parsed",
    "encode_wire",
    "is_kid",
    "json_bytes",
    "json_dumps",
    "json_loads",
    "json_loads_object",
    "json_value_end",
    "one_shot_encoder",
    "report_json",
    "utf8",
    "written",
]

MAX_DEPTH = 32

# Bytes tables: bytes.translate is far cheaper than str.translate. Decoding maps "-" and "_" to
# the standard alphabet and "+", "/" and "=" (never valid in base64url) to "!", which the strict
# decoder then refuses along with every other stray byte.
_TO_URLSAFE = bytes.maketrans(b"+/", b"-_")
_TO_STANDARD = bytes.maketrans(b"-_+/=", b"+/!!!")
_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
_INDEX = {c: i for i, c in enumerate(_ALPHABET)}


class EncodingError(ValueError):
    """Raised by this module; the calling layer turns it into the right public error."""


class NestingError(EncodingError):
    """Authenticated JSON nested deeper than the plain reader goes (the interpreter's recursion
    limit): refused by name, a malformed token rather than claims that break a rule."""


_HEX_DIGITS = "0123456789abcdef"


def is_kid(value: object) -> bool:
    """Whether ``value`` is a key id: 8 lowercase hex digits (checked without a regular
    expression, whose compilation would cost every command's start-up)."""
    return type(value) is str and len(value) == 8 and not value.strip(_HEX_DIGITS)


def check_size(text: str | bytes, limit: int, what: str = "token") -> None:
    """Refuse input longer than ``limit`` before anything else looks at it."""
    if len(text) > limit:
        raise EncodingError(f"{what} is {len(text)} bytes, over the {limit}-byte cap")


def b64url_encode(data: bytes) -> str:
    """Unpadded base64url (RFC 7515 section 2)."""
    return binascii.b2a_base64(data, newline=False).translate(_TO_URLSAFE, b"=").decode("ascii")


def b64url_decode(text: str) -> bytes:
    """Decode canonical unpadded base64url, refusing every other spelling."""
    remainder = len(text) % 4
    if remainder == 1:
        raise EncodingError("base64url text has an impossible length")
    try:
        raw = text.encode("ascii").translate(_TO_STANDARD)
    except UnicodeEncodeError:
        raise EncodingError(_OUTSIDE) from None
    if remainder:
        # The last character carries 2 (length % 4 == 2) or 4 (== 3) bits that are pure padding;
        # canonical encoders leave them zero, so any other value is a second spelling.
        if _INDEX.get(text[-1], 0) & (0b1111 if remainder == 2 else 0b11):
            raise EncodingError("base64url text is not canonical (non-zero trailing bits)")
        raw += b"==" if remainder == 2 else b"="
    try:
        return binascii.a2b_base64(raw, strict_mode=True)
    except binascii.Error:
        raise EncodingError(_OUTSIDE) from None


_OUTSIDE = "base64url text holds a character outside A-Z a-z 0-9 - _"


def _unique_members(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        seen: set[str] = set()
        for name, _ in pairs:
            if name in seen:
                raise EncodingError(f"JSON has a duplicate member {name!r}")
            seen.add(name)
    return result


def _refuse_constant(name: str) -> Any:
    raise EncodingError(f"JSON constant {name} is not allowed")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise EncodingError(f"JSON number {text[:20]} overflows a double")
    return value


Scan = Callable[[str, int], tuple[Any, int]]


def _counting_scanner() -> tuple[Scan, list[int]]:
    """The C scanner building objects on its fast path (plain dicts, no member lists), and a
    cell it adds each object's member count to. A duplicate member leaves its object one
    member short, which is how :func:`_parse` sees it without a hook that sees every pair."""
    members = [0]

    def counted(obj: dict[str, Any]) -> dict[str, Any]:
        members[0] += len(obj)
        return obj

    decoder = json.JSONDecoder(
        object_hook=counted, parse_constant=_refuse_constant, parse_float=_finite_float
    )
    return decoder.scan_once, members  # type: ignore[attr-defined]


# Idle counting scanners. A parse takes one (list.pop and append are atomic), so threads, and
# a parse started inside another (a signal handler's), never share a count; the pool holds as
# many as ever ran at once.
_IDLE: list[tuple[Scan, list[int]]] = []
# Names the duplicate once one has been seen: the scanner with a hook given every pair. Only
# refusals run it.
_EXPLAIN: Scan = json.JSONDecoder(
    object_pairs_hook=_unique_members,
    parse_constant=_refuse_constant,
    parse_float=_finite_float,
).scan_once  # type: ignore[attr-defined]
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def one_shot_encoder(encoder: json.JSONEncoder) -> Callable[[Any], str]:
    """``encoder.encode`` without its per-call set-up: the C encoder it builds on every call,
    built once (the same function, so the same bytes), where this Python has the C encoder."""
    from json import encoder as module

    make = getattr(module, "c_make_encoder", None)
    if make is None or encoder.indent is not None:  # pragma: no cover - no C accelerator
        return encoder.encode
    escape = module.encode_basestring_ascii if encoder.ensure_ascii else module.encode_basestring
    default = encoder.default
    one_shot = make(
        None,
        default,
        escape,
        None,
        encoder.key_separator,
        encoder.item_separator,
        encoder.sort_keys,
        encoder.skipkeys,
        encoder.allow_nan,
    )

    def encode(value: Any) -> str:
        if isinstance(value, str):  # encode() answers a bare string without the C encoder
            return encoder.encode(value)
        try:
            return "".join(one_shot(value, 0))
        except RecursionError:  # no cycle check (it would be shared state): refused the same
            raise ValueError("value is nested too deeply or refers to itself") from None

    return encode


_encode = one_shot_encoder(_ENCODER)


_CONTAINERS = (dict, list, tuple)
# What the skeleton keeps: quotes (deleted once strings are paired), member and item separators,
# brackets. UTF-8 continuation bytes are >= 0x80, so no multi-byte character yields one.
_NOT_STRUCTURE = bytes(set(range(256)) - set(b'":,[]{}'))
# Brackets of both kinds become "{" / "}"; separators go.
_BRACKETS = bytes.maketrans(b"[]", b"{}")
_BACKSLASH, _QUOTE, _COLON = b'\\":'  # int needles


def skeleton(data: bytes) -> bytes:
    """The structure of the valid JSON ``data`` outside its strings: its ``:`` (one per
    member), ``,`` and brackets, in order. Made at C speed, for :func:`_parse`'s checks.

    Escaped backslashes, then escaped quotes, go first (left to right, as a reader pairs
    them), so every quote left opens or closes a string, in turn. Then all but quotes,
    separators and brackets goes; a string holding none of those is then ``""``, and two of
    those quotes are adjacent only there (valid JSON puts a separator or bracket between two
    strings), so they go. The few strings left (a URL's colon, a bracket in text) are dropped
    by splitting at the quotes and keeping every other piece.
    """
    if _BACKSLASH in data:  # (an int needle is a plain memchr; a bytes one is not)
        data = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    marks = data.translate(None, _NOT_STRUCTURE).replace(b'""', b"")
    if _QUOTE in marks:
        marks = b"".join(marks.split(b'"')[::2])
    return marks


def nesting_depth(structure: bytes, stop_after: int) -> int:
    """How deeply the containers of a :func:`skeleton` nest, counted up to ``stop_after`` + 1
    (the work is a pass per level). Each pass deletes the innermost level: empty brackets."""
    level = structure.translate(_BRACKETS, b":,")
    depth = 0
    while level and depth <= stop_after:
        depth += 1
        level = level.replace(b"{}", b"")
    return depth


# Types that are never containers, tested first: a set look-up settles most values before the
# three-way isinstance (which must still catch subclasses of dict, list and tuple).
_LEAVES = frozenset({str, int, float, bool, type(None)})


def _writable_problem(value: Any, max_depth: int = MAX_DEPTH) -> str | None:
    """Why ``value`` cannot be written as the JSON it is: a member name that is not text (the
    encoder would turn ``{1: 2}`` into ``{"1": 2}``, and a reader gets back something else), or
    nesting deeper than :data:`MAX_DEPTH`."""
    if not isinstance(value, _CONTAINERS):
        return None
    return _container_problem(value, 1, max_depth)


def _container_problem(container: Any, depth: int, max_depth: int) -> str | None:
    """:func:`_writable_problem` of a container ``depth`` levels down. Depth first, one call
    per container and never per scalar (a call costs less than a level walk's queue on the
    small states tokens carry); the recursion is bounded by ``max_depth``."""
    if depth > max_depth:
        return f"value nests deeper than {max_depth} levels"
    children: Any = container
    if isinstance(container, dict):
        for name in container:
            if type(name) is not str and not isinstance(name, str):
                return f"a member name is {type(name).__name__}, not text: {name!r}"
        children = container.values()
    for child in children:
        if type(child) not in _LEAVES and isinstance(child, _CONTAINERS):
            problem = _container_problem(child, depth + 1, max_depth)
            if problem is not None:
                return problem
    return None


# The plain reader: the C scanner with no hook on objects (so it builds them at C speed), and
# hooks that run only on the literals NaN/Infinity and on floats.
_PLAIN: Scan = json.JSONDecoder(
    parse_constant=_refuse_constant, parse_float=_finite_float
).scan_once  # type: ignore[attr-defined]


def authenticated_object(plaintext: bytes) -> dict[str, Any]:
    """The JSON object in ``plaintext`` that a tag or MAC has just authenticated, read plainly
    (see the module docstring), or the :class:`EncodingError` saying why not. Every
    verification's envelope starts here. No whitespace around the object: key holders write
    compact JSON, and one spelling fewer is one ambiguity fewer."""
    if plaintext[:1] != b"{":
        raise EncodingError("not a JSON object")
    document: dict[str, Any] = authenticated_json(plaintext)
    return document


def authenticated_json(data: bytes) -> Any:
    """Any JSON value in authenticated ``data``, read plainly (see the module docstring), or
    the :class:`EncodingError` saying why not; :func:`authenticated_object` for an object."""
    try:
        text = data.decode("utf-8")
        value, end = _PLAIN(text, 0)
    except EncodingError:
        raise
    except StopIteration:
        raise EncodingError("not valid JSON") from None
    except RecursionError:
        raise NestingError("JSON nests deeper than this reader goes") from None
    except UnicodeDecodeError:
        raise EncodingError("JSON is not valid UTF-8") from None
    except ValueError as err:  # JSONDecodeError, and int() refusing a 4,300-digit literal
        raise EncodingError(f"not valid JSON ({err})") from None
    if end != len(text):
        raise EncodingError(f"not valid JSON (unexpected data at offset {end})")
    return value


def json_value_end(text: str, at: int) -> int | None:
    """Where the JSON value starting at ``at`` in authenticated ``text`` ends (read plainly),
    or None where none starts: for finding a value's own text without writing it again."""
    try:
        end: int = _PLAIN(text, at)[1]
    except (StopIteration, RecursionError, ValueError):
        return None
    return end


def json_loads(data: str | bytes, max_depth: int = MAX_DEPTH) -> Any:
    """Parse strict JSON (see the module docstring). Bytes must be UTF-8.

    No whitespace is allowed around the value (strip text typed by people first): this calls the
    scanner directly, skipping the decoder's whitespace handling, which is most of its overhead.
    """
    if isinstance(data, bytes):
        try:
            return _parse(data.decode("utf-8"), data, max_depth)
        except UnicodeDecodeError:
            raise EncodingError("JSON is not valid UTF-8") from None
    return _parse(data, None, max_depth)


def json_loads_object(data: bytes, max_depth: int = MAX_DEPTH) -> Any:
    """:func:`json_loads` of UTF-8 bytes that must start with ``{`` (claims, envelopes)."""
    if data[:1] != b"{":
        raise EncodingError("not a JSON object")
    return json_loads(data, max_depth)


def _parse(text: str, data: bytes | None, max_depth: int) -> Any:
    """The value ``text`` (whose UTF-8 is ``data``, when the caller has it) holds, or the
    :class:`EncodingError` saying why not.

    One scan by the C scanner, counting members; then the :func:`skeleton` of the text says how
    many members it wrote and how deeply it nests, at C speed. Fewer members built than
    written means a name was repeated: the explaining scanner then names it.
    """
    try:
        scan, members = _IDLE.pop()
    except IndexError:
        scan, members = _counting_scanner()
    members[0] = 0
    try:
        value, end = scan(text, 0)
        built = members[0]  # read before the scanner goes back to the pool for another parse
    except EncodingError:
        raise
    except StopIteration:
        raise EncodingError("not valid JSON") from None
    except RecursionError:
        raise EncodingError(f"JSON nests deeper than {max_depth} levels") from None
    except ValueError as err:  # JSONDecodeError, and int() refusing a 4,300-digit literal
        raise EncodingError(f"not valid JSON ({err})") from None
    finally:
        _IDLE.append((scan, members))
    if end != len(text):
        raise EncodingError(f"not valid JSON (unexpected data at offset {end})")
    if data is None:
        data = text.encode("utf-8", "surrogatepass")
    structure = skeleton(data)
    if structure.count(_COLON) != built:
        raise _duplicate(text)
    # every bracket opened is closed, so a skeleton of at most 2 * max_depth bytes opens at
    # most max_depth containers and cannot nest deeper: claims never pay for the measure
    if len(structure) > 2 * max_depth and nesting_depth(structure, max_depth) > max_depth:
        raise EncodingError(f"JSON nests deeper than {max_depth} levels")
    return value


def _duplicate(text: str) -> EncodingError:
    """The refusal of ``text``, which built fewer members than it wrote: a repeated name."""
    try:
        _EXPLAIN(text, 0)
    except EncodingError as err:
        return err
    except (ValueError, StopIteration, RecursionError):
        pass
    return EncodingError("JSON has a duplicate member")  # not reached: fail closed


_encode_ascii = one_shot_encoder(json.JSONEncoder(separators=(",", ":"), allow_nan=False))


def encode_wire(value: Any) -> bytes:
    """Compact, ASCII-only JSON bytes of a value :func:`json_loads` produced (a message the
    proxy forwards) or of finite numbers and checked text (a handle's record): non-ASCII and
    lone surrogates are written as ``\\u`` escapes, so any reader gets back exactly that value;
    NaN and the infinities are a ``ValueError``."""
    return _encode_ascii(value).encode("ascii")


def encode_parsed(value: Any) -> str:
    """Compact JSON of a value :func:`json_loads` produced: it needs none of the checks of
    :func:`json_dumps` again (no NaN, no cycle, depth within the cap)."""
    return _encode(value)


def json_dumps(value: Any, max_depth: int = MAX_DEPTH) -> str:
    """Compact JSON that :func:`json_loads` accepts again, or ``ValueError``.

    What we write we must be able to read, as what it was: a token minted with state our own
    verifier refuses would be lost. So NaN, Infinity and over-deep nesting are refused here, like
    integers over Python's 4,300-digit conversion limit, and member names that are not text
    (``{1: 2}`` would come back as ``{"1": 2}``). ``max_depth`` is for reports that wrap what a
    token held (a state already at the cap, inside ``--json``'s object).
    """
    if isinstance(value, _CONTAINERS):
        problem = _writable_problem(value, max_depth)
        if problem is not None:
            raise ValueError(problem)
    return written(_encode, value)


def written(encode: Callable[[Any], str], value: Any) -> str:
    """``encode(value)``: JSON text, or the ``ValueError`` every writer gives for a value JSON
    cannot carry."""
    try:
        return encode(value)
    except (TypeError, ValueError, RecursionError) as err:
        raise ValueError(f"value is not JSON-serialisable: {err}") from None


#: The levels a report may add around what it shows, and then some: the stack the report is
#: written from is deeper than the one the value was read in.
_REPORT_HEADROOM = 200


def report_json(value: Any) -> str:
    """Compact JSON of a report around values a reader has already accepted (verified claims,
    an inspected view), for ``--json`` output.

    No depth cap of its own: the authenticated reader's bound (the interpreter's recursion
    limit, see :func:`authenticated_object`) is the bound, and a state an SDK nested 500
    levels deep is as printable as it was verifiable. The C encoder needs as many levels as the
    C scanner did, from a deeper stack; the limit is raised by a fixed margin for the call,
    which a value the reader accepted cannot exceed. Anything else :func:`json_dumps` refuses
    (NaN, member names that are not text) is refused here too.
    """
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(limit + _REPORT_HEADROOM)  # the command line's one thread
    try:
        if isinstance(value, _CONTAINERS):
            problem = _writable_problem(value, limit)
            if problem is not None:
                raise ValueError(problem)
        return _encode(value)
    finally:
        sys.setrecursionlimit(limit)


def utf8(text: str) -> bytes:
    """``text`` as UTF-8, or the ``ValueError`` every writer gives for a lone surrogate (which
    UTF-8 cannot carry, and so no token can)."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("value holds a lone surrogate, which UTF-8 cannot encode") from None


def json_bytes(value: Any) -> bytes:
    """:func:`json_dumps` as UTF-8 bytes; refuses lone surrogates, which UTF-8 cannot carry."""
    return utf8(json_dumps(value))


def claims_bytes(claims: dict[str, Any], state: Any) -> bytes:
    """:func:`json_bytes` of a claims object whose members are ours but for ``state``, the
    caller's: only the state is walked for what JSON cannot carry as it is."""
    if isinstance(state, _CONTAINERS):
        problem = _writable_problem(state, MAX_DEPTH - 1)  # the claims object is one level
        if problem is not None:
            raise ValueError(problem)
    return utf8(written(_encode, claims))
