"""What a requestState is made of, from outside, and the states the attacks send instead.

The probe holds no key, so it reads a state as a client can: split at its dots, each segment that
decodes (base64url, base64, padded or not, hex) decoded, the rest (a prefix such as ``v1``) kept
as written. From that it makes:

- **tampered** states: the issued one with one decoded byte changed, at several positions, and
  written back in the segment's own encoding, canonically. The bytes differ, not just their
  spelling (a changed trailing base64 bit that decodes the same would prove nothing), and the
  encoding stays valid, so a refusal is the server's integrity check and not its decoder. Where a
  segment is readable JSON, the positions are letters and digits inside string values (changed to
  another of their kind), so a server that trusts the JSON still parses it;
- **forged** states, never issued: random bytes of each segment's length in its encoding (the
  prefixes kept, so the shape is the server's own), and, when a segment is readable, its JSON
  written again with one value changed;
- whether the state is **readable**: a segment (or the whole text) that is JSON once decoded.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
import string
from typing import Any

__all__ = ["State", "Variant", "changed_value"]

_MIN_SEGMENT = 8  # shorter segments are prefixes and versions: kept as written
_HEX = frozenset(string.hexdigits)
_URL = frozenset(string.ascii_letters + string.digits + "-_")
_STD = frozenset(string.ascii_letters + string.digits + "+/")
_SPECIAL = frozenset("-_+/")
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)


class Variant:
    """A state to send instead of the issued one, and what was done to make it."""

    __slots__ = ("how", "text")

    def __init__(self, text: str, how: str) -> None:
        self.text, self.how = text, how

    def __repr__(self) -> str:
        return f"Variant({self.how!r})"


class _Segment:
    """One dot-separated part: its text, and its encoding and bytes when it decodes."""

    __slots__ = ("alphabet", "data", "encoding", "padded", "text", "upper")

    def __init__(self, text: str) -> None:
        self.text = text
        self.encoding: str | None = None  # "base64", "hex", or None (kept as written)
        self.data = b""
        self.padded = False
        self.alphabet = "ambiguous"  # base64: "url", "std", or letters and digits only
        self.upper = False
        if len(text) < _MIN_SEGMENT:
            return
        letters = {char for char in text if char.isalpha()}
        one_case = not (letters & set("abcdef") and letters & set("ABCDEF"))
        if len(text) % 2 == 0 and set(text) <= _HEX and one_case and (letters or len(text) >= 32):
            self.encoding, self.data = "hex", bytes.fromhex(text)
            self.upper = bool(letters) and text.isupper()
            return
        stripped = text.rstrip("=")
        chars = set(stripped)
        if len(stripped) % 4 == 1 or not (chars <= _URL or chars <= _STD):
            return
        if len(text) - len(stripped) > 2 or (text != stripped and len(text) % 4):
            return
        self.padded = text != stripped
        self.alphabet = (
            "url" if chars & {"-", "_"} else "std" if chars & {"+", "/"} else "ambiguous"
        )
        filled = stripped + "=" * (-len(stripped) % 4)
        try:
            self.data = base64.b64decode(
                filled, altchars=b"-_" if self.alphabet == "url" else None, validate=True
            )
        except (binascii.Error, ValueError):
            return
        self.encoding = "base64"

    def encode(self, data: bytes, alphabet: str | None = None) -> str:
        """``data`` written as this segment is written (canonically)."""
        if self.encoding == "hex":
            return data.hex().upper() if self.upper else data.hex()
        chosen = alphabet or self.alphabet
        if chosen == "url":
            text = base64.urlsafe_b64encode(data).decode("ascii")
        else:
            text = base64.b64encode(data).decode("ascii")
        if chosen == "ambiguous" and not self.padded:
            text = base64.urlsafe_b64encode(data).decode("ascii")
        return text if self.padded else text.rstrip("=")

    def fits(self, text: str) -> bool:
        """Whether ``text`` keeps to this segment's alphabet (an ambiguous one is letters and
        digits only: a ``-`` or ``+`` could be read by the wrong decoder)."""
        return self.alphabet != "ambiguous" or not (set(text) & _SPECIAL)

    def readable(self) -> Any:
        return _json_of(self.data) if self.encoding is not None else None


def _json_of(data: bytes) -> Any:
    """The JSON object or array ``data`` holds as UTF-8 text, or None."""
    text = data.strip()
    if text[:1] not in (b"{", b"["):
        return None
    try:
        return json.loads(text.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None


def _other_of_kind(byte: int, step: int = 1) -> int:
    """Another byte of the same kind: a letter for a letter, a digit for a digit (so text
    stays text), any other byte with a low bit flipped."""
    for low, size in ((0x61, 26), (0x41, 26), (0x30, 10)):
        if low <= byte < low + size:
            return low + (byte - low + step) % size
    return byte ^ (step & 0xFF or 1)


def _value_ends(data: bytes) -> list[int]:
    """For each string value (not member name) of the JSON text ``data``, the position of its
    last letter or digit that no backslash escapes."""
    positions: list[int] = []
    for match in _STRING.finditer(data):
        after = data[match.end() : match.end() + 64].lstrip()
        if after[:1] == b":":  # a member name
            continue
        inside = [
            at
            for at in range(match.start() + 1, match.end() - 1)
            if chr(data[at]).isascii() and chr(data[at]).isalnum() and data[at - 1] != 0x5C
        ]
        if inside:
            positions.append(inside[-1])
    return positions


class State:
    """An issued requestState, as the probe reads it."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.raw_json = _json_of(text.encode("utf-8", "surrogatepass"))
        self.segments = (
            [_Segment(part) for part in text.split(".")] if self.raw_json is None else []
        )

    @property
    def size(self) -> int:
        return len(self.text.encode("utf-8", "surrogatepass"))

    def readable(self) -> Any:
        """What a client can read of the state: the JSON it is or holds, else None."""
        if self.raw_json is not None:
            return self.raw_json
        for segment in self.segments:
            found = segment.readable()
            if found is not None:
                return found
        return None

    def _join(self, index: int, text: str) -> str:
        return ".".join(text if n == index else s.text for n, s in enumerate(self.segments))

    # --- tampered --------------------------------------------------------------------------

    def tampered(self, limit: int = 5) -> list[Variant]:
        """Up to ``limit`` states, each the issued one with one decoded byte changed: in each
        readable string value (its last letter or digit: up to four values, in document order),
        then at the first, middle and last byte of the segments that are not readable."""
        values: list[tuple[int, int]] = []
        opaque: list[tuple[int, int]] = []
        if self.raw_json is not None:
            data = self.text.encode("utf-8", "surrogatepass")
            values = [(-1, at) for at in _value_ends(data)] or [(-1, len(data) // 2)]
        for index, segment in enumerate(self.segments):
            if segment.encoding is None or not segment.data:
                continue
            if segment.readable() is not None:
                values += [(index, at) for at in _value_ends(segment.data)]
            else:
                size = len(segment.data)
                opaque += [(index, at) for at in dict.fromkeys((0, size // 2, size - 1))]
        spots = values[:4]
        spots += opaque[: max(1, limit - len(spots))]
        chosen = list(dict.fromkeys(spots))[:limit]
        return [variant for spot in chosen if (variant := self._tamper(*spot)) is not None]

    def _tamper(self, index: int, at: int) -> Variant | None:
        if index < 0:  # the state is JSON text itself
            data = bytearray(self.text.encode("utf-8", "surrogatepass"))
            before = data[at]
            data[at] = _other_of_kind(before)
            how = f"character {at} of the JSON changed ({chr(before)!r} to {chr(data[at])!r})"
            return Variant(data.decode("utf-8", "surrogatepass"), how)
        segment = self.segments[index]
        for step in range(1, 40):
            data = bytearray(segment.data)
            before = data[at]
            data[at] = _other_of_kind(before, step)
            if data[at] == before:
                continue
            text = segment.encode(bytes(data))
            if segment.fits(text):
                how = (
                    f"decoded byte {at} of segment {index + 1} changed "
                    f"(0x{before:02x} to 0x{data[at]:02x}), re-encoded as {segment.encoding}"
                )
                return Variant(self._join(index, text), how)
        return None

    # --- forged ----------------------------------------------------------------------------

    def forged_random(self) -> Variant:
        """A state never issued: random bytes in each decodable segment's length and encoding
        (prefixes kept); a state that decodes nowhere, random characters of its own alphabet."""
        if self.raw_json is None and any(s.encoding is not None for s in self.segments):
            parts = []
            for segment in self.segments:
                if segment.encoding is None:
                    parts.append(segment.text)
                    continue
                for _ in range(64):
                    text = segment.encode(os.urandom(len(segment.data)))
                    if segment.fits(text):
                        break
                parts.append(text)
            return Variant(".".join(parts), "random bytes of each segment's length and encoding")
        alphabet = sorted(set(self.text) - {"."}) or list(string.ascii_letters)
        drawn = "".join(
            "." if char == "." else alphabet[os.urandom(1)[0] % len(alphabet)] for char in self.text
        )
        return Variant(drawn, "random characters of the state's own alphabet and length")

    def forged_readable(self) -> Variant | None:
        """The readable part written again with one value changed (the rest kept as issued),
        or None when nothing of the state is readable."""
        if self.raw_json is not None:
            changed = changed_value(self.raw_json)
            if changed is None:
                return None
            value, how = changed
            return Variant(_dumps(value, self.text), f"the JSON with {how}")
        for index, segment in enumerate(self.segments):
            document = segment.readable()
            if document is None:
                continue
            changed = changed_value(document)
            if changed is None:
                continue
            value, how = changed
            written = _dumps(value, segment.data.decode("utf-8", "replace")).encode("utf-8")
            text = segment.encode(
                written, "url" if segment.alphabet == "ambiguous" and not segment.padded else None
            )
            return Variant(
                self._join(index, text),
                f"segment {index + 1} decoded, {how}, and encoded again",
            )
        return None


def _dumps(value: Any, like: str) -> str:
    """``value`` as JSON, spaced as ``like`` was (``": "`` or compact)."""
    if '": ' in like:
        return json.dumps(value, ensure_ascii=False)
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def changed_value(document: Any) -> tuple[Any, str] | None:
    """``document`` with its first string or number (in document order) changed, and what was
    changed; None when it holds neither. A string gets its last letter or digit changed to
    another of its kind (or an ``x`` added), a number one added, a boolean flipped."""
    path = _first_leaf(document, ())
    if path is None:
        return None
    copy = json.loads(json.dumps(document))
    holder: Any = copy
    for key in path[:-1]:
        holder = holder[key]
    last = path[-1]
    old = holder[last]
    if isinstance(old, bool):
        new: Any = not old
    elif isinstance(old, int | float):
        new = old + 1
    else:
        spots = [n for n, char in enumerate(old) if char.isascii() and char.isalnum()]
        if spots:
            at = spots[-1]
            new = old[:at] + chr(_other_of_kind(ord(old[at]))) + old[at + 1 :]
        else:
            new = old + "x"
    holder[last] = new
    where = "".join(f"[{json.dumps(key)}]" for key in path)
    return copy, f"{where} changed from {_short(old)} to {_short(new)}"


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 40 else text[:37] + "..."


def _first_leaf(node: Any, path: tuple[Any, ...]) -> tuple[Any, ...] | None:
    if isinstance(node, dict):
        items: list[tuple[Any, Any]] = list(node.items())
    elif isinstance(node, list):
        items = list(enumerate(node))
    else:
        return None
    for key, value in items:
        if isinstance(value, str | int | float) and not (isinstance(value, str) and not value):
            return (*path, key)
    for key, value in items:
        found = _first_leaf(value, (*path, key))
        if found is not None:
            return found
    return None
