"""Text from tokens and captures, made safe to print on a terminal.

A header member name, a JSON-RPC method or a key of inputRequests is attacker-chosen, and a
terminal obeys the control sequences in what it prints: ESC [ ... can move the cursor, rewrite a
verdict already on screen ("VERIFIED") or set the window title; a bidirectional override makes
text read backwards. Every untrusted string that can reach a message goes through
:func:`printable`, which writes C0 and C1 controls, DEL and the Unicode bidirectional and line
controls as visible escapes (``\\x1b``, ``\\u202e``). JSON output (a state, claims, ``--json``)
goes through :func:`terminal_json`, which writes the same characters as ``\\uXXXX`` escapes:
still the same JSON to any reader, but inert on a terminal.
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
    return text.translate(_TABLE)


def terminal_json(text: str) -> str:
    """JSON ``text`` with every terminal-active character written as a ``\\uXXXX`` escape.

    Those characters can only occur inside JSON strings, where the escape means the same
    character, so the result parses to the same value.
    """
    return text.translate(_JSON_TABLE)
