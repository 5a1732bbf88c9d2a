"""Bounded reading of stdin: every line comes out whole, or as None when over the limit."""

from __future__ import annotations

import io
import random

import pytest

from mrtr_state.cli._stdin import read_bounded, read_lines


class Trickle:
    """A stream that hands out its bytes in random small pieces, as a pipe may."""

    def __init__(self, data: bytes, most: int, seed: int) -> None:
        self._data = io.BytesIO(data)
        self._most = most
        self._random = random.Random(seed)

    def read(self, size: int = -1) -> bytes:
        return self._data.read(self._random.randint(1, self._most))


def expected(data: bytes, limit: int) -> list[bytes | None]:
    lines = data.split(b"\n")
    last = lines.pop()
    out: list[bytes | None] = [line if len(line) <= limit else None for line in lines]
    if last:
        out.append(last if len(last) <= limit else None)
    return out


@pytest.mark.parametrize("seed", range(20))
def test_lines_split_anywhere_come_out_as_written(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(150):
        parts = [b"x" * rng.randint(0, 12) for _ in range(rng.randint(0, 8))]
        data = b"\n".join(parts) + rng.choice([b"", b"\n"])
        limit = rng.randint(0, 10)
        got = list(read_lines(Trickle(data, 7, seed), limit))  # type: ignore[arg-type]
        assert got == expected(data, limit), (data, limit)


def test_an_endless_line_is_skipped_without_being_held() -> None:
    stream = io.BytesIO(b"ok\n" + b"A" * (10 << 20) + b"\nlast")
    assert list(read_lines(stream, 1024)) == [b"ok", None, b"last"]
    assert read_bounded(io.BytesIO(b"12345"), 4) is None
    assert read_bounded(io.BytesIO(b"1234"), 4) == b"1234"
