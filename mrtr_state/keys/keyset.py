"""Keysets: the validated keys a deployment shares, and the file they live in.

A :class:`Keyset` is one version of its keys at a time (a :class:`~mrtr_state.keys.key.KeyTable`,
whose invariants are checked whenever one is built) with O(1) look-ups by key id. Loaded from a
file, it follows the file (:mod:`mrtr_state.keys.watch`); saved, updated or converted, it is
written atomically under the writer lock, plain or encrypted (:mod:`mrtr_state.keys.store`).
This module is the public face of the three: it holds no parsing, locking or encryption itself.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import KeysetError, KeysetNotFound, NoPrimaryKey
from ..tokens.registry import (
    KEY_ALGORITHMS,
    OWN_ALGORITHMS,
    SDK_SECRET_BYTES,
    derived_kid,
    secret_length_ok,
)
from . import store
from .key import STATUSES, Key, KeyTable, changed_key
from .store import listed_without_kek
from .watch import FileWatch

if TYPE_CHECKING:
    from pathlib import Path

    from .encryption import Sealing
    from .kek import Kek

__all__ = [
    "ALGORITHMS",
    "OWN_ALGORITHMS",
    "SDK_SECRET_BYTES",
    "STATUSES",
    "Key",
    "Keyset",
    "derived_kid",
    "listed_without_kek",
    "secret_length_ok",
]

#: Key algorithm name -> its rules (the format table's,
#: :data:`mrtr_state.tokens.registry.KEY_ALGORITHMS`).
ALGORITHMS = KEY_ALGORITHMS

T = TypeVar("T")


class Keyset:
    """A validated set of keys with O(1) routing by key id.

    Built with :meth:`generate`, :meth:`from_json` or by hand, a keyset never changes. Loaded
    from a file with :meth:`load`, it follows that file: at most once per ``reload_interval``
    (a stat call, nothing more when nothing changed) it re-reads a file that changed, so a
    running server picks up a key rotated in, promoted or revoked without a restart. Change the
    file itself with :meth:`update`, which works on a copy under the file lock.
    """

    __slots__ = ("_sealing", "_table", "_watch", "source")

    def __init__(self, keys: Iterable[Key], *, source: str = "keyset") -> None:
        self.source = source
        self._table = KeyTable(keys, source)
        self._watch: FileWatch | None = None
        #: How the file this keyset was read from is encrypted (None: a plain keyset).
        self._sealing: Sealing | None = None

    def _current(self) -> KeyTable:
        watch = self._watch
        if watch is not None and time.monotonic() >= watch.next_check:
            watch.refresh(self._table, self._install, wait=False)
        return self._table

    def _install(self, table: KeyTable, sealing: Sealing | None) -> None:
        """Take a new version of the followed file (its watch calls this, under its lock)."""
        self._table, self._sealing = table, sealing

    # --- reading ---------------------------------------------------------------------------

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str],
        *,
        reload_interval: float | None = 1.0,
        kek: Kek | str | None = None,
    ) -> Keyset:
        """Load and validate the keyset file at ``path`` (refusing unsafe files).

        The keyset then follows the file, checking it at most every ``reload_interval``
        seconds; ``None`` loads it once. Symlinks are followed (a Kubernetes Secret mount is
        ``keyset.json -> ..data/keyset.json``) and the file reached must pass the permission
        rule of :mod:`mrtr_state.keys.file`.

        ``kek`` (a URI such as ``passphrase:env:NAME``, or a :class:`~mrtr_state.keys.kek.Kek`)
        opens an encrypted keyset; with one, a plain file is refused (:class:`KekRequired`), so
        swapping the file for a plain one cannot pass. The data key is unwrapped once; reloads
        reuse it while the file's data key record is unchanged.
        """
        if reload_interval is not None and reload_interval < 0:
            raise ValueError(f"reload_interval must be >= 0 seconds, got {reload_interval}")
        target = os.fspath(path)
        chosen = store.resolve_kek(kek)
        text, stamp = store.read_keyset_file(target)
        keys, sealing = store.read_keys(text, target, chosen)
        keyset = cls(keys, source=target)
        keyset._sealing = sealing
        if reload_interval is not None:
            keyset._watch = FileWatch(target, stamp, reload_interval, chosen)
        return keyset

    def reload(self) -> bool:
        """Re-read the file now if it changed; True if a new version was loaded.

        Raises the :class:`KeysetError` of a file that cannot be used; the keyset keeps its last
        good version. A keyset that did not come from a file has nothing to reload (False).
        """
        if self._watch is None:
            return False
        return self._watch.refresh(self._table, self._install, wait=True)

    @property
    def path(self) -> Path | None:
        """The file this keyset follows, if it follows one."""
        if self._watch is None:
            return None
        from pathlib import Path  # not at import: a verify should not pay for pathlib

        return Path(self._watch.path)

    @property
    def reload_error(self) -> KeysetError | None:
        """Why the followed file could not be used at the last look, or None: wire it to a
        health check (the proxy's ``/readyz`` answers 503 with it)."""
        return None if self._watch is None else self._watch.problem

    @property
    def reload_failures(self) -> int:
        """How many looks at the followed file failed since it was loaded (for metrics)."""
        return 0 if self._watch is None else self._watch.failures

    @property
    def reloads(self) -> int:
        """How many looks at the followed file left a good keyset in force after a change (a
        new version taken) or after a failure (the file back as it was), since it was loaded
        (for metrics, beside :attr:`reload_failures`)."""
        return 0 if self._watch is None else self._watch.reloads

    def check(self) -> KeysetError | None:
        """Look at the followed file if its check interval has passed (re-reading it if it
        changed) and return what :attr:`reload_error` then says. Never raises: for monitors that
        run on a timer, so that a broken file is reported even while no token is verified."""
        watch = self._watch
        if watch is None:
            return None
        if time.monotonic() >= watch.next_check:  # one look per interval, whoever asks
            with contextlib.suppress(KeysetError):
                watch.refresh(self._table, self._install, wait=True)
        return watch.problem

    @classmethod
    def from_json(
        cls, text: str, *, source: str = "keyset", kek: Kek | str | None = None
    ) -> Keyset:
        """Parse a keyset file's content: a JWK Set, or an encrypted keyset opened by ``kek``."""
        keys, sealing = store.read_keys(text, source, store.resolve_kek(kek))
        keyset = cls(keys, source=source)
        keyset._sealing = sealing
        return keyset

    @property
    def kek_uri(self) -> str | None:
        """The URI of the KEK the keyset's file is encrypted under, or None for a plain one."""
        return None if self._sealing is None else self._sealing.kek.uri

    def to_json(self) -> str:
        """The keyset file content, secrets included. Only :meth:`save` should need it."""
        return store.plain_text(self)

    def save(
        self,
        path: str | os.PathLike[str],
        *,
        overwrite: bool = False,
        kek: Kek | str | None = None,
    ) -> None:
        """Write the keyset atomically, mode 0600, under the writer lock; encrypted under
        ``kek`` (a fresh data key) when one is given."""
        from pathlib import Path

        target = Path(path)
        chosen = store.resolve_kek(kek)
        sealing = None if chosen is None else store.new_sealing(chosen)
        with store.keyset_lock(target):
            store.write_keyset_text(target, store.file_text(self, sealing), overwrite=overwrite)

    @classmethod
    def update(
        cls,
        path: str | os.PathLike[str],
        change: Callable[[Keyset], Keyset],
        *,
        create: bool = False,
        kek: Kek | str | None = None,
    ) -> Keyset:
        """Read, change and write back the keyset at ``path``, all under the writer lock.

        With ``create`` a missing file counts as an empty keyset (``keys import`` on a new host).
        A symlinked or read-only keyset (a deployed copy) is refused before anything is read.
        An encrypted keyset (opened by ``kek``) is written back encrypted under the same data
        key; a missing one created with a ``kek`` is encrypted under a fresh one.
        """
        from pathlib import Path

        target = Path(path)
        chosen = store.resolve_kek(kek)
        with store.keyset_lock(target):
            try:
                current = cls.load(target, reload_interval=None, kek=chosen)
                sealing, existed = current._sealing, True
            except KeysetNotFound:
                if not create:
                    raise
                current = cls([], source=str(target))
                sealing, existed = None if chosen is None else store.new_sealing(chosen), False
            changed = change(current)
            # Nothing changed, nothing written: an encrypted file would otherwise get a fresh
            # nonce on every no-op rotate, and a ship-on-change job would ship it every run.
            if not existed or changed.to_json() != current.to_json():
                store.write_keyset_text(target, store.file_text(changed, sealing), overwrite=True)
        changed._sealing = sealing
        return changed

    @classmethod
    def convert(
        cls,
        path: str | os.PathLike[str],
        *,
        kek: Kek | str | None,
        to_kek: Kek | str | None,
    ) -> Keyset:
        """Re-encrypt the keyset file at ``path`` under the writer lock: plain to encrypted
        (``kek`` None), encrypted to plain (``to_kek`` None), or to another KEK (the same data
        key and token keys, wrapped anew: a KEK rotation). The keys themselves never change."""
        from pathlib import Path

        target = Path(path)
        source_kek, new_kek = store.resolve_kek(kek), store.resolve_kek(to_kek)
        with store.keyset_lock(target):
            current = cls.load(target, reload_interval=None, kek=source_kek)
            if new_kek is None:
                sealing = None
            else:
                sealing = store.new_sealing(new_kek, rewrapping=current._sealing)
            store.write_keyset_text(target, store.file_text(current, sealing), overwrite=True)
        current._sealing = sealing
        return current

    @classmethod
    def generate(cls, algs: Iterable[str] = OWN_ALGORITHMS, *, now: int | None = None) -> Keyset:
        """A new keyset holding one fresh primary key per algorithm."""
        keys: list[Key] = []
        for alg in algs:
            keys.append(Key.generate(alg, kid=_fresh_kid({k.kid for k in keys}), now=now))
        return cls(keys, source="new keyset")

    def fresh_kid(self) -> str:
        """A random key id that no key in this keyset uses."""
        return _fresh_kid(self._current().by_kid.keys())

    def with_new_key(
        self,
        alg: str,
        *,
        secret: bytes | None = None,
        now: int | None = None,
        sdk_kid: str | None = None,
    ) -> tuple[Keyset, Key]:
        """This keyset plus a key of ``alg`` (fresh, or for ``secret``): primary if ``alg`` has
        none, else pending.

        A pending key verifies but does not mint, so it can be rolled out to every replica
        before any token depends on it.
        """
        table = self._current()
        status = "pending" if alg in table.primary else "primary"
        twin = next(
            (k for k in table.keys if k.alg == alg and k.secret == secret and k.sdk_kid == sdk_kid),
            None,
        )
        if secret is not None and twin is not None:
            raise ValueError(
                f"this secret is already in {self.source} as {twin.status} key {twin.kid}; "
                "nothing was added"
            )
        if secret is None:
            key = Key.generate(alg, kid=self.fresh_kid(), status=status, now=now, sdk_kid=sdk_kid)
        else:
            key = Key.from_secret(
                alg, secret, kid=self.fresh_kid(), status=status, now=now, sdk_kid=sdk_kid
            )
        return self.with_keys([*table.keys, key]), key

    def with_keys(self, keys: Iterable[Key]) -> Keyset:
        """A new keyset of ``keys`` under the same name; it follows no file."""
        return Keyset(keys, source=self.source)

    def replace_key(self, key: Key, **changes: Any) -> Keyset:
        changed = changed_key(key, **changes)
        return self.with_keys(changed if k is key else k for k in self)

    # --- lookups ---------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Key]:
        return iter(self._current().keys)

    def __len__(self) -> int:
        return len(self._current().keys)

    def __repr__(self) -> str:
        count = len(self)
        return f"Keyset({self.source!r}, {count} key{'' if count == 1 else 's'})"

    def derived(self, purpose: str, build: Callable[[tuple[Key, ...]], T]) -> T:
        """A look-up table built once per version of the keyset, e.g. exact JOSE headers.

        On every verification's path: the reload check of :meth:`_current` is written out here.
        """
        watch = self._watch
        if watch is not None and time.monotonic() >= watch.next_check:
            watch.refresh(self._table, self._install, wait=False)
        table = self._table
        try:
            return table.derived[purpose]  # type: ignore[no-any-return]
        except KeyError:
            made = table.derived[purpose] = build(table.keys)
            return made

    def get(self, kid: str) -> Key | None:
        return self._current().by_kid.get(kid)

    def primary(self, alg: str) -> Key:
        """The key that mints tokens of algorithm ``alg``."""
        try:
            return self._current().primary[alg]
        except KeyError:
            algorithm = KEY_ALGORITHMS.get(alg)
            fmt = "?" if algorithm is None else algorithm.format
            raise NoPrimaryKey(
                f"{self.source} has no primary {alg} key to mint {fmt} tokens"
            ).needing("add_key", alg=alg) from None


def _fresh_kid(taken: Iterable[str]) -> str:
    used = set(taken)
    while True:
        kid = os.urandom(4).hex()
        if kid not in used:
            return kid
