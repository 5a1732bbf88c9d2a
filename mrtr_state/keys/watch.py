"""Following a keyset file: when to look at it again, and what to do when it changed.

A keyset loaded from a file follows it (:meth:`mrtr_state.keys.keyset.Keyset.load`): at most once
per interval a stat call says whether the file changed, and only then is it read, validated and
swapped in whole. A file that cannot be used (missing for a moment during a swap, half-written,
invalid, loosened permissions) never replaces the good version in memory, and is never silent.

Each outcome is one record of the ``mrtr_state`` logger naming its event, the words the proxy's
metrics use too: ``keyset_reloaded`` (info; counted in :attr:`FileWatch.reloads`) and
``keyset_reload_failed`` (warning, with the reason; counted in :attr:`FileWatch.failures`), both
with the ids of the keys in force (``record.event`` and ``record.facts``, which the proxy's
``--json-log`` writes as one line).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import KekRefused, KekUnavailable, KeysetError
from . import file as keyfile
from .key import KeyTable
from .store import read_keys

if TYPE_CHECKING:
    from .encryption import Sealing
    from .kek import Kek

__all__ = ["KEK_RETRY_SECONDS", "FileWatch"]

#: After a KEK failed to open a changed keyset file, how long before it is asked again about
#: the same file (a changed file is tried at once).
KEK_RETRY_SECONDS = 30.0

#: How a keyset takes a new version: its table and how its file is encrypted.
Install = Callable[[KeyTable, "Sealing | None"], None]


def _log() -> Any:
    """The ``mrtr_state`` logger, imported only when a reload has something to say."""
    import logging

    return logging.getLogger("mrtr_state")


def _event(name: str, source: str, table: KeyTable, **facts: Any) -> dict[str, Any]:
    """The ``extra`` of a reload's log record: its event and facts, the keys in force last."""
    kids = [key.kid for key in table.keys]
    return {"event": name, "facts": {"keyset": source, **facts, "kids": kids}}


class FileWatch:
    """Where a loaded keyset came from, and when to look at that file again."""

    __slots__ = (
        "failures",
        "interval",
        "kek",
        "kek_failed",
        "lock",
        "next_check",
        "path",
        "problem",
        "reloads",
        "source",
        "stamp",
    )

    def __init__(
        self,
        path: str,
        stamp: keyfile.Stamp,
        interval: float,
        kek: Kek | None = None,
        source: str | None = None,
    ) -> None:
        self.path = path
        self.source = path if source is None else source
        self.kek = kek
        self.stamp = stamp
        self.interval = interval
        self.next_check = time.monotonic() + interval
        self.lock = threading.Lock()
        self.problem: KeysetError | None = None
        #: looks that failed, and looks that left a good keyset in force after a change or a
        #: failure (each one logged: ``keyset_reload_failed``, ``keyset_reloaded``)
        self.failures = 0
        self.reloads = 0
        #: (file stamp, monotonic time of the next attempt) after the KEK failed on that file:
        #: a KEK is not asked again every interval (scrypt's cost, a KMS's quota)
        self.kek_failed: tuple[keyfile.Stamp | None, float] | None = None

    def refresh(self, current_table: KeyTable, install: Install, *, wait: bool) -> bool:
        """Re-read the file if it changed, and ``install`` the new version (under this watch's
        lock, so that of two looks the later file always lands last); True if one was.

        A request's look (``wait`` False) never waits on a KEK: a new encrypted file whose data
        key was not opened before (a rewrap) is left to the next look that may wait
        (:meth:`Keyset.check`, :meth:`Keyset.reload`; the proxy makes one every second in a
        thread). After the KEK fails on a file, it is asked again only when the file changes or
        :data:`KEK_RETRY_SECONDS` have passed; the failure is reported meanwhile.

        A file that cannot be used never replaces the good version: each failed look (at most
        one per interval) logs a warning through the ``mrtr_state`` logger, counts in
        :attr:`failures` and is kept in :attr:`problem` until a good file loads; on demand it
        is raised. (A keyset that rotation retired a key in, published with a bad mode, leaves
        that key accepted meanwhile: an operator must hear of it.)
        """
        if not self.lock.acquire(blocking=wait):
            return False  # another thread is reading the file right now
        try:
            self.next_check = time.monotonic() + self.interval
            current = keyfile.stamp(self.path)
            if current == self.stamp:
                self._recovered(current_table, changed=False)
                return False
            from .encryption import NeedsKek

            try:
                failed = self.kek_failed
                if failed is not None and failed[0] == current and time.monotonic() < failed[1]:
                    assert self.problem is not None
                    raise self.problem  # the same file, the same KEK: not asked again yet
                text, stamp = keyfile.read_keyset_file(self.path)
                keys, sealing = read_keys(text, self.source, self.kek, may_call_kek=wait)
                table = KeyTable(keys, self.source, current_table)
            except NeedsKek:
                return False  # the next look that may wait (check, reload) opens it
            except KeysetError as err:
                if isinstance(err, (KekRefused, KekUnavailable)) and (
                    failed is None or failed[0] != current or time.monotonic() >= failed[1]
                ):
                    self.kek_failed = (current, time.monotonic() + KEK_RETRY_SECONDS)
                self.failures += 1
                _log().warning(
                    "%s; still using the keyset loaded before",
                    err,
                    extra=_event(
                        "keyset_reload_failed", self.source, current_table, reason=str(err)
                    ),
                )
                self.problem = err
                if wait:
                    raise
                return False
            install(table, sealing)
            self.stamp = stamp
            self.kek_failed = None
            self._recovered(table, changed=True)
            return True
        finally:
            self.lock.release()

    def _recovered(self, table: KeyTable, *, changed: bool) -> None:
        """A good keyset is in force after a look: a new version of the file, or the one in
        force found good again after a failure (its file back as it was)."""
        if changed or self.problem is not None:
            self.reloads += 1
            _log().info(
                "keyset %s loaded again: %d keys",
                self.source,
                len(table.keys),
                extra=_event("keyset_reloaded", self.source, table, changed=changed),
            )
        self.problem = None
