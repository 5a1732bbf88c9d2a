"""Durations as people write them (``90s``, ``15m``, ``1h30m``, ``7d``) and read them back."""

from __future__ import annotations

import re

__all__ = ["duration_as_written", "format_duration", "parse_duration"]

_UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}
_PART = r"(\d+)([dhms])"  # compiled on first use (re's cache): not on every command's start-up


def parse_duration(text: str) -> int:
    """Seconds in ``text``: a whole number of seconds, or parts like ``1h30m``; else ValueError."""
    cleaned = text.strip().lower()
    if cleaned.isdigit():
        return int(cleaned)
    parts = re.findall(_PART, cleaned)
    if not parts or "".join(n + u for n, u in parts) != cleaned:
        raise ValueError(f"{text!r} is not a duration; write e.g. 90s, 15m, 1h30m or 7d")
    return sum(int(number) * _UNITS[unit] for number, unit in parts)


def format_duration(seconds: float) -> str:
    """``4m 12s``, ``3h 5m``, ``2d 4h``: the two largest units, as people read clocks."""
    whole = int(abs(seconds))
    if whole < 60:
        return f"{whole}s"
    parts = []
    for name, size in _UNITS.items():
        if whole >= size:
            parts.append(f"{whole // size}{name}")
            whole %= size
        if len(parts) == 2 or (parts and whole == 0):
            break
    return " ".join(parts)


def duration_as_written(seconds: int) -> str:
    """``seconds`` exactly, as a person writes it in a config file: ``5m``, ``1h30m``, ``30d``,
    ``1h1s`` (every unit, no spaces): what :func:`parse_duration` reads back as ``seconds``."""
    if seconds == 0:
        return "0s"
    parts = []
    left = seconds
    for name, size in _UNITS.items():
        if left >= size:
            parts.append(f"{left // size}{name}")
            left %= size
    return "".join(parts)
