"""Text from tokens and captures, made safe to print on a terminal.

A header member name, a JSON-RPC method or a key of inputRequests is attacker-chosen, and a
terminal obeys the control sequences in what it prints: ESC [ ... can move the cursor, rewrite a
verdict already on screen ("VERIFIED") or set the window title; a bidirectional override makes
text read backwards. Every untrusted string that can reach a message goes through
:func:`printable`, which writes C0 and C1 controls, DEL and the Unicode bidirectional and line
controls as visible escapes (``\\x1b``, ``\\u202e``). JSON output (a state, claims, ``--json``)
goes through :func:`terminal_json`, which writes the same characters as ``\\uXXXX`` escapes:
still the same JSON to any reader, but inert on a terminal.

Both also escape lone surrogates (U+D800-DFFF, which a JSON ``\\ud800`` escape can put in a
``str``): UTF-8 cannot encode them, so printed raw they stop the output with a codec error. In
JSON the escape is how such a value is written anyway.
"""

from __future__ import annotations

__all__ = ["printable", "terminal_json"]

# What a JSON encoder leaves raw but a terminal or a text renderer acts on: DEL, the C1
# controls, the bidirectional marks, embeddings, overrides and isolates, and the Unicode line
# and paragraph separators.
_FORMATTING = [
    0x7F,
    *range(0x80, 0xA0),
    0x061C,
    0x200E,
    0x200F,
    *range(0x202A, 0x202F),
    *range(0x2066, 0x206A),
    0x2028,
    0x2029,
]
_UNSAFE = {
    **{code: f"\\x{code:02x}" for code in [*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0)]},
    **{code: f"\\u{code:04x}" for code in _FORMATTING if code > 0xFF},
}
_TABLE = str.maketrans(_UNSAFE)
# C0 controls never reach this: JSON encoders escape them already.
_JSON_TABLE = str.maketrans({code: f"\\u{code:04x}" for code in _FORMATTING})


def printable(text: str, limit: int | None = None) -> str:
    """``text`` with every control character escaped (cut to ``limit`` characters first)."""
    if limit is not None and len(text) > limit:
        text = text[:limit] + "..."
    return _surrogates_escaped(text.translate(_TABLE))


def terminal_json(text: str) -> str:
    """JSON ``text`` with every terminal-active character written as a ``\\uXXXX`` escape.

    Those characters can only occur inside JSON strings, where the escape means the same
    character, so the result parses to the same value.
    """
    return _surrogates_escaped(text.translate(_JSON_TABLE))


def _surrogates_escaped(text: str) -> str:
    """``text`` with each lone surrogate written ``\\udXXX`` (a table of all 2,048 would cost
    every command milliseconds to build). UTF-8 refuses surrogates and nothing else, so its
    ``backslashreplace`` touches exactly them."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text
