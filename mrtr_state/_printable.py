"""Text from tokens and captures, made safe to print on a terminal.

A header member name, a JSON-RPC method or a key of inputRequests is attacker-chosen, and a
terminal obeys the control sequences in what it prints: ESC [ ... can move the cursor, rewrite a
verdict already on screen ("VERIFIED") or set the window title. Every untrusted string that can
reach a message goes through :func:`printable`, which writes C0 and C1 controls, DEL and the
Unicode bidirectional overrides as visible escapes (``\\x1b``, ``\\u202e``).
"""

from __future__ import annotations

__all__ = ["printable"]

_UNSAFE = {
    **{code: f"\\x{code:02x}" for code in [*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0)]},
    **{code: f"\\u{code:04x}" for code in [*range(0x202A, 0x202F), *range(0x2066, 0x206A)]},
}
_TABLE = str.maketrans(_UNSAFE)


def printable(text: str, limit: int | None = None) -> str:
    """``text`` with every control character escaped (cut to ``limit`` characters first)."""
    if limit is not None and len(text) > limit:
        text = text[:limit] + "..."
    return text.translate(_TABLE)
