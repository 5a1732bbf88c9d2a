"""What wires, envelopes and the format table see of a key and a keyset.

Those layers sit below ``keyset.py`` (which loads the format table to check its keys), so they
name no class above them, not even in annotations: they are written against these protocols,
which :class:`mrtr_state.keytable.Key` and :class:`mrtr_state.keyset.Keyset` satisfy. A wire
reads a key's id and builds its primitives through ``prepared``/``derived`` (never the secret
itself), and reads a keyset only through ``derived``: the look-up tables it builds once per
version of the keyset.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol, TypeVar

__all__ = ["Key", "Keyset"]

T = TypeVar("T")


class Key(Protocol):
    """One key, as a wire or envelope uses it."""

    @property
    def kid(self) -> str: ...

    @property
    def alg(self) -> str: ...

    @property
    def sdk_kid(self) -> str | None: ...

    @property
    def status(self) -> str: ...

    @property
    def since(self) -> Mapping[str, int]: ...

    @property
    def key_id(self) -> bytes: ...

    @property
    def format(self) -> str: ...

    def prepared(self, purpose: str, build: Callable[[bytes], T]) -> T: ...

    def derived(self, purpose: str, build: Callable[[Key], T]) -> T: ...


class Keyset(Protocol):
    """A keyset, as a wire reads it: tables built from one version's keys, once."""

    def derived(self, purpose: str, build: Callable[[tuple[Key, ...]], T]) -> T: ...
