"""Where every random byte comes from: the OS, except inside the vector generator.

Nonces, ``jti`` values and principal-tag salts must be fresh and unpredictable, so the library
has no parameter to pass them in (as Fernet has none). Published test vectors, though, must be
reproducible. This private seam is the only way to make them so: ``deterministic(seed)`` swaps
the source for a keyed stream for the duration of a ``with`` block, and nothing in the public
API reaches it. The generator script and the tests use it; servers never do.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator

_source: Callable[[int], bytes] = os.urandom


def random_bytes(count: int) -> bytes:
    return _source(count)


@contextlib.contextmanager
def deterministic(seed: bytes) -> Iterator[None]:
    """Draw "random" bytes from SHA-256(seed ‖ counter) until the block ends. Tests only."""
    global _source
    import hashlib

    counter = 0

    def stream(count: int) -> bytes:
        nonlocal counter
        out = b""
        while len(out) < count:
            out += hashlib.sha256(seed + counter.to_bytes(8, "big")).digest()
            counter += 1
        return out[:count]

    previous, _source = _source, stream
    try:
        yield
    finally:
        _source = previous
