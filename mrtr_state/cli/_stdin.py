"""Standard input, read in bounded pieces: no line or payload may make the CLI hold more than
the size cap (plus one read) in memory, whatever is piped in.

Batches (``verify -``) also flush their output whenever they are about to wait for more input,
so a live stream of tokens gets its answers as they come while a file of a million tokens is
not slowed by a flush per line.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import BinaryIO

__all__ = ["CHUNK", "read_bounded", "read_lines"]

CHUNK = 1 << 16


def read_lines(
    stream: BinaryIO, limit: int, before_wait: Callable[[], None] = lambda: None
) -> Iterator[bytes | None]:
    """Each line of ``stream`` without its newline, or None for a line over ``limit`` bytes.

    A line over the limit is skipped as it arrives, never accumulated. Each chunk is split in one
    C call: a batch of a million short lines spends its time verifying, not finding newlines.
    """
    read = stream.read1 if hasattr(stream, "read1") else stream.read
    pending = b""  # the start of a line that the next chunk continues
    skipping = False  # that line is already over the limit
    while True:
        before_wait()
        chunk = read(CHUNK)
        if not chunk:
            break
        pieces = chunk.split(b"\n")
        rest = pieces.pop()  # after the last newline: continued by the next chunk
        if pieces:
            first = pieces[0]
            if skipping or len(pending) + len(first) > limit:
                yield None
            else:
                yield pending + first if pending else first
            for piece in pieces[1:]:
                yield piece if len(piece) <= limit else None
            pending, skipping = b"", False
        if skipping or len(pending) + len(rest) > limit:
            pending, skipping = b"", True
        else:
            pending += rest
    if skipping:
        yield None
    elif pending:
        yield pending


def read_bounded(stream: BinaryIO, limit: int) -> bytes | None:
    """All of ``stream`` if it holds at most ``limit`` bytes, else None (reading stops there)."""
    data = stream.read(limit + 1)
    return None if len(data) > limit else data
