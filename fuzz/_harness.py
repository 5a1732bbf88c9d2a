"""What every ``make fuzz`` target does around its input function: hand atheris only the
options (``-name=value``) among the arguments, run, and say how long the target ran."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

import atheris


def run(name: str, one_input: Callable[[bytes], None]) -> None:
    started = time.monotonic()
    argv = [sys.argv[0], *[a for a in sys.argv[1:] if a.startswith("-")]]
    atheris.Setup(argv, one_input)
    try:
        atheris.Fuzz()
    finally:
        print(f"fuzz {name}: {time.monotonic() - started:.0f} s", file=sys.stderr)
