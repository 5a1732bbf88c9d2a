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
from typing import NamedTuple

__all__ = ["NO_FRESH_BYTES", "Fresh", "deterministic", "fresh", "random_bytes"]

_source: Callable[[int], bytes] = os.urandom


def random_bytes(count: int) -> bytes:
    return _source(count)


class Fresh(NamedTuple):
    """The random bytes one token needs, drawn in one system call (a call costs more than the
    bytes) and handed out by name: the parts are laid out here and nowhere else.

    ``token_id``: 16 bytes (a ``jti``). ``nonce``: the 12 bytes of the wire's nonce or IV.
    ``salt``: 8 bytes salting a principal tag; in a draw of 28 bytes (a token whose wire
    takes a nonce or a salt, never both: mrtr-state's own formats) they are the nonce's first
    eight, in a draw of 36 bytes (a wire that takes both: the Python SDK's) the last eight.
    """

    token_id: bytes
    nonce: bytes
    salt: bytes


#: A token that needs no random bytes (a signed SDK body): nothing drawn.
NO_FRESH_BYTES = Fresh(b"", b"", b"")
_new = tuple.__new__


def fresh(count: int) -> Fresh:
    """``count`` (0, 28 or 36) random bytes for one token, laid out as :class:`Fresh` says."""
    if not count:
        return NO_FRESH_BYTES
    raw = _source(count)
    return _new(Fresh, (raw[:16], raw[16:28], raw[28:36] if count > 28 else raw[16:24]))


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
