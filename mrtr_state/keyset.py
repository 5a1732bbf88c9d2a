"""Keys and keysets: ids, algorithms, lifecycle status, and the invariants checked on load.

A keyset is a JWK Set (RFC 7517) of symmetric keys. Each key serves exactly one algorithm, so a
key made for one format can never be fed to another (algorithm confusion needs a key that two
formats accept). Key ids are 4 bytes, written as 8 hex digits, carried in every token so that
verification finds its key in one dictionary look-up instead of trying each key in turn.

Invariants, checked whenever a keyset is built (as in Tink): unique key ids, at most one primary
per algorithm, secrets of the right length, known statuses. A keyset that breaks one is refused
with a message saying how to fix it; it is never repaired silently.

Secrets never appear in ``repr``, ``str`` or error messages.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from . import algorithms as _algorithms
from . import keyfile
from ._encoding import EncodingError, b64url_decode, b64url_encode, json_dumps, json_loads
from .errors import (
    KekRefused,
    KekRequired,
    KekUnavailable,
    KeyRetired,
    KeysetError,
    KeysetInvalid,
    KeysetNotFound,
    NoPrimaryKey,
    UnknownKey,
    WrongFormat,
)

if TYPE_CHECKING:
    from pathlib import Path

    from .encrypted_keyset import Sealing
    from .kek import Kek

__all__ = ["ALGORITHMS", "OWN_ALGORITHMS", "STATUSES", "Key", "Keyset", "derived_kid"]

# The algorithm table lives in its own module; re-exported for callers of the keyset.
ALGORITHMS = _algorithms.ALGORITHMS
OWN_ALGORITHMS = _algorithms.OWN_ALGORITHMS
SDK_SECRET_BYTES = _algorithms.SDK_SECRET_BYTES
derived_kid = _algorithms.derived_kid
secret_length_ok = _algorithms.secret_length_ok

T = TypeVar("T")

#: After a KEK failed to open a changed keyset file, how long before it is asked again about
#: the same file (a changed file is tried at once).
KEK_RETRY_SECONDS = 30.0


def _log() -> Any:
    """The ``mrtr_state`` logger, imported only when a reload has something to say."""
    import logging

    return logging.getLogger("mrtr_state")


STATUSES = ("pending", "primary", "active", "retired")
#: The latest ``since`` a key may carry, 9999-12-31T23:59:59Z: any later one is damage (every
#: writer records the time of a change), and could not be shown as a date.
LAST_SECOND = 253_402_300_799
_HEX_DIGITS = "0123456789abcdef"


def is_kid(value: object) -> bool:
    """Whether ``value`` is a key id: 8 lowercase hex digits (checked without a regular
    expression, whose compilation would cost every command's start-up)."""
    return type(value) is str and len(value) == 8 and not value.strip(_HEX_DIGITS)


_KEY_MEMBERS = frozenset({"kty", "kid", "alg", "k", "status", "since", "sdk_kid"})


class Key:
    """One secret key. ``since`` maps each lifecycle status the key entered to when (unix s).

    Immutable, compared by identity, and the secret never shown. A plain class rather than a
    dataclass: the dataclass machinery would be most of a command's start-up work.
    """

    __slots__ = ("_prepared", "alg", "kid", "sdk_kid", "secret", "since", "status")

    kid: str
    #: the key id the SDK's own tokens carry (rmcp's keyring ids), for algorithms that have one
    sdk_kid: str | None
    alg: str
    secret: bytes
    status: str
    since: Mapping[str, int]
    _prepared: dict[str, Any]

    def __init__(
        self,
        kid: str,
        alg: str,
        secret: bytes,
        status: str = "primary",
        since: Mapping[str, int] | None = None,
        _prepared: dict[str, Any] | None = None,
        sdk_kid: str | None = None,
    ) -> None:
        setter = object.__setattr__
        setter(self, "kid", kid)
        setter(self, "sdk_kid", sdk_kid)
        setter(self, "alg", alg)
        setter(self, "secret", secret)
        setter(self, "status", status)
        setter(self, "since", {} if since is None else since)
        setter(self, "_prepared", {} if _prepared is None else _prepared)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"keys are immutable; cannot set {name}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"keys are immutable; cannot delete {name}")

    def __repr__(self) -> str:
        return (
            f"Key(kid={self.kid!r}, alg={self.alg!r}, status={self.status!r}, since={self.since!r})"
        )

    def _changed(self, *, prepared: dict[str, Any] | None = None, **changes: Any) -> Key:
        """A copy with ``changes``, starting with no built primitives unless given ``prepared``
        (those of a key with the same secret)."""
        fields: dict[str, Any] = {
            "kid": self.kid,
            "alg": self.alg,
            "secret": self.secret,
            "status": self.status,
            "since": self.since,
            "sdk_kid": self.sdk_kid,
        }
        fields.update(changes)
        return Key(**fields, _prepared=prepared)

    @property
    def key_id(self) -> bytes:
        """The 4 raw bytes that tokens carry."""
        return bytes.fromhex(self.kid)

    @property
    def format(self) -> str:
        return ALGORITHMS[self.alg].format

    @property
    def can_verify(self) -> bool:
        return self.status != "retired"

    def prepared(self, purpose: str, build: Callable[[bytes], T]) -> T:
        """A primitive built from this key's secret once and reused (an AESGCM or HMAC object)."""
        try:
            return self._prepared[purpose]  # type: ignore[no-any-return]
        except KeyError:
            made = self._prepared[purpose] = build(self.secret)
            return made

    def to_jwk(self) -> dict[str, Any]:
        """The key as a JWK, secret included: only for writing the keyset file."""
        jwk: dict[str, Any] = {
            "kty": "oct",
            "kid": self.kid,
            "alg": self.alg,
            "k": b64url_encode(self.secret),
            "status": self.status,
            "since": dict(self.since),
        }
        if self.sdk_kid is not None:
            jwk["sdk_kid"] = self.sdk_kid
        return jwk

    def describe(self) -> dict[str, Any]:
        """Everything about the key except its secret (for listings and ``--json``)."""
        described: dict[str, Any] = {
            "kid": self.kid,
            "alg": self.alg,
            "format": self.format,
            "status": self.status,
            "since": dict(self.since),
        }
        if self.sdk_kid is not None:
            described["sdk_kid"] = self.sdk_kid
        return described

    @classmethod
    def from_secret(
        cls,
        alg: str,
        secret: bytes,
        *,
        kid: str | None = None,
        status: str = "primary",
        now: int | None = None,
        sdk_kid: str | None = None,
    ) -> Key:
        """A key of ``alg`` for ``secret``; SDK keys take the id their secret (or, for rmcp's
        keyring, the ``sdk_kid`` its tokens carry) implies."""
        if alg not in ALGORITHMS:
            raise ValueError(f"unknown key algorithm {alg!r}; known: {', '.join(ALGORITHMS)}")
        problem = _algorithms.sdk_kid_problem(alg, sdk_kid)
        if problem is not None:
            raise ValueError(problem)
        chosen = derived_kid(alg, secret, sdk_kid) or kid
        if chosen is None:
            raise ValueError(f"a {alg} key needs a key id")
        at = int(time.time() if now is None else now)  # whole seconds, as the file stores them
        return cls(
            kid=chosen, alg=alg, secret=secret, status=status, since={status: at}, sdk_kid=sdk_kid
        )

    @classmethod
    def generate(
        cls,
        alg: str,
        *,
        kid: str,
        status: str = "primary",
        now: int | None = None,
        sdk_kid: str | None = None,
    ) -> Key:
        """A key of ``alg`` with a fresh random secret."""
        if alg not in ALGORITHMS:
            raise ValueError(f"unknown key algorithm {alg!r}; known: {', '.join(ALGORITHMS)}")
        size = ALGORITHMS[alg].exact or _algorithms.SDK_SECRET_BYTES[0]
        if sdk_kid is None and ALGORITHMS[alg].sdk_kid:
            # a fresh key for an SDK keyring (rmcp's) gets a fresh id too, shown by
            # ``keys list``: give the ring the key under it
            sdk_kid = "mrtr-" + os.urandom(4).hex()
        return cls.from_secret(
            alg, os.urandom(size), kid=kid, status=status, now=now, sdk_kid=sdk_kid
        )


class _Table:
    """One validated version of a keyset: its keys and the look-ups built from them.

    Swapped whole when a watched file changes, so a reader sees one version or the next, never a
    mix of the two.
    """

    __slots__ = ("by_kid", "derived", "keys", "primary")

    def __init__(
        self,
        keys: Iterable[Key],
        source: str,
        previous: _Table | None = None,
        *,
        secrets: bool = True,
    ) -> None:
        self.keys: tuple[Key, ...] = ()
        self.by_kid: dict[str, Key] = {}
        self.primary: dict[str, Key] = {}
        self.derived: dict[str, Any] = {}
        admitted = []
        for key in keys:
            if previous is not None:
                key = _keep_prepared(key, previous.by_kid.get(key.kid))
            self._admit(key, source, secrets)
            admitted.append(key)
        self.keys = tuple(admitted)

    def _admit(self, key: Key, source: str, secrets: bool) -> None:
        """Check one key against the keyset's invariants. Without ``secrets`` (the clear list
        of an encrypted file, read without its KEK) the checks that need the secret are left
        out, and every other one holds, so nothing unchecked reaches the key table."""
        where = f"{source}: key {key.kid!r}"
        if not is_kid(key.kid):
            raise KeysetInvalid(f"{where}: a key id must be 8 lowercase hex digits")
        if key.alg not in ALGORITHMS:
            raise KeysetInvalid(
                f"{where}: unknown alg {key.alg!r}; use one of {', '.join(ALGORITHMS)}"
            )
        if secrets and not secret_length_ok(key.alg, key.secret):
            wanted = _algorithms.secret_rule(key.alg)
            raise KeysetInvalid(
                f"{where}: {key.alg} needs a secret of {wanted} bytes, this one has "
                f"{len(key.secret)}; "
                "generate a new key with: mrtr-state keys add --alg " + key.alg
            )
        problem = _algorithms.sdk_kid_problem(key.alg, key.sdk_kid)
        if problem is not None:
            raise KeysetInvalid(f"{where}: {problem}")
        implied = derived_kid(key.alg, key.secret, key.sdk_kid) if secrets else None
        if implied is not None and implied != key.kid:
            raise KeysetInvalid(
                f"{where}: the id of a {key.alg} key is derived from its secret ({implied}); "
                "re-import the secret with: mrtr-state keys import"
            )
        if key.status not in STATUSES:
            raise KeysetInvalid(
                f"{where}: unknown status {key.status!r}; use one of {', '.join(STATUSES)}"
            )
        if key.kid in self.by_kid:
            raise KeysetInvalid(
                f"{source}: key id {key.kid} appears twice; key ids must be unique "
                "(remove or regenerate one of them)"
            )
        if key.status == "primary":
            if key.alg in self.primary:
                raise KeysetInvalid(
                    f"{source}: keys {self.primary[key.alg].kid} and {key.kid} are both "
                    f"primary for {key.alg}; at most one may be (mark the older one active)"
                )
            self.primary[key.alg] = key
        self.by_kid[key.kid] = key


def _keep_prepared(key: Key, before: Key | None) -> Key:
    """``key``, sharing the primitives already built for the same secret (a status change)."""
    if before is None or before.alg != key.alg or before.secret != key.secret:
        return key
    return key._changed(prepared=before._prepared)


class _FileWatch:
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
        "stamp",
    )

    def __init__(
        self, path: str, stamp: keyfile.Stamp, interval: float, kek: Kek | None = None
    ) -> None:
        self.path = path
        self.kek = kek
        self.stamp = stamp
        self.interval = interval
        self.next_check = time.monotonic() + interval
        self.lock = threading.Lock()
        self.problem: KeysetError | None = None
        self.failures = 0
        #: (file stamp, monotonic time of the next attempt) after the KEK failed on that file:
        #: a KEK is not asked again every interval (scrypt's cost, a KMS's quota)
        self.kek_failed: tuple[keyfile.Stamp | None, float] | None = None

    def refresh(self, keyset: Keyset, *, wait: bool) -> bool:
        """Re-read the file if it changed; True if ``keyset`` now holds a new version.

        A request's look (``wait`` False) never waits on a KEK: a new encrypted file whose data
        key was not opened before (a rewrap) is left to the next look that may wait
        (:meth:`Keyset.check`, :meth:`Keyset.reload`; the proxy makes one every second in a
        thread). After the KEK fails on a file, it is asked again only when the file changes or
        :data:`KEK_RETRY_SECONDS` have passed; the failure is reported meanwhile.

        A file that cannot be used (missing for a moment during a swap, half-written, invalid,
        loosened permissions) never replaces the good version in memory, and is never silent:
        each failed look (at most one per interval) logs a warning through the ``mrtr_state``
        logger, counts in :attr:`failures` and is kept in :attr:`problem` until a good file
        loads; on demand it is raised. (A keyset that rotation retired a key in, published with
        a bad mode, leaves that key accepted meanwhile: an operator must hear of it.)
        """
        if not self.lock.acquire(blocking=wait):
            return False  # another thread is reading the file right now
        try:
            self.next_check = time.monotonic() + self.interval
            current = keyfile.stamp(self.path)
            if current == self.stamp:
                self._recovered(keyset, changed=False)
                return False
            from .encrypted_keyset import NeedsKek

            try:
                failed = self.kek_failed
                if failed is not None and failed[0] == current and time.monotonic() < failed[1]:
                    assert self.problem is not None
                    raise self.problem  # the same file, the same KEK: not asked again yet
                text, stamp = keyfile.read_keyset_file(self.path)
                keys, sealing = _read_keys(text, keyset.source, self.kek, may_call_kek=wait)
                table = _Table(keys, keyset.source, keyset._table)
            except NeedsKek:
                return False  # the next look that may wait (check, reload) opens it
            except KeysetError as err:
                if isinstance(err, (KekRefused, KekUnavailable)) and (
                    failed is None or failed[0] != current or time.monotonic() >= failed[1]
                ):
                    self.kek_failed = (current, time.monotonic() + KEK_RETRY_SECONDS)
                self.failures += 1
                _log().warning("%s; still using the keyset loaded before", err)
                self.problem = err
                if wait:
                    raise
                return False
            keyset._table, keyset._sealing, self.stamp = table, sealing, stamp
            self.kek_failed = None
            self._recovered(keyset, changed=True)
            return True
        finally:
            self.lock.release()

    def _recovered(self, keyset: Keyset, *, changed: bool) -> None:
        if changed or self.problem is not None:
            _log().info("keyset %s loaded again: %d keys", keyset.source, len(keyset._table.keys))
        self.problem = None


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
        self._table = _Table(keys, source)
        self._watch: _FileWatch | None = None
        #: How the file this keyset was read from is encrypted (None: a plain keyset).
        self._sealing: Sealing | None = None

    def _current(self) -> _Table:
        watch = self._watch
        if watch is not None and time.monotonic() >= watch.next_check:
            watch.refresh(self, wait=False)
        return self._table

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
        rule of :mod:`mrtr_state.keyfile`.

        ``kek`` (a URI such as ``passphrase:env:NAME``, or a :class:`~mrtr_state.kek.Kek`)
        opens an encrypted keyset; with one, a plain file is refused (:class:`KekRequired`), so
        swapping the file for a plain one cannot pass. The data key is unwrapped once; reloads
        reuse it while the file's data key record is unchanged.
        """
        if reload_interval is not None and reload_interval < 0:
            raise ValueError(f"reload_interval must be >= 0 seconds, got {reload_interval}")
        target = os.fspath(path)
        chosen = _kek(kek)
        text, stamp = keyfile.read_keyset_file(target)
        keys, sealing = _read_keys(text, target, chosen)
        keyset = cls(keys, source=target)
        keyset._sealing = sealing
        if reload_interval is not None:
            keyset._watch = _FileWatch(target, stamp, reload_interval, chosen)
        return keyset

    def reload(self) -> bool:
        """Re-read the file now if it changed; True if a new version was loaded.

        Raises the :class:`KeysetError` of a file that cannot be used; the keyset keeps its last
        good version. A keyset that did not come from a file has nothing to reload (False).
        """
        if self._watch is None:
            return False
        return self._watch.refresh(self, wait=True)

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

    def check(self) -> KeysetError | None:
        """Look at the followed file if its check interval has passed (re-reading it if it
        changed) and return what :attr:`reload_error` then says. Never raises: for monitors that
        run on a timer, so that a broken file is reported even while no token is verified."""
        watch = self._watch
        if watch is None:
            return None
        if time.monotonic() >= watch.next_check:  # one look per interval, whoever asks
            with contextlib.suppress(KeysetError):
                watch.refresh(self, wait=True)
        return watch.problem

    @classmethod
    def from_json(
        cls, text: str, *, source: str = "keyset", kek: Kek | str | None = None
    ) -> Keyset:
        """Parse a keyset file's content: a JWK Set, or an encrypted keyset opened by ``kek``."""
        keys, sealing = _read_keys(text, source, _kek(kek))
        keyset = cls(keys, source=source)
        keyset._sealing = sealing
        return keyset

    @property
    def kek_uri(self) -> str | None:
        """The URI of the KEK the keyset's file is encrypted under, or None for a plain one."""
        return None if self._sealing is None else self._sealing.kek.uri

    def to_json(self) -> str:
        """The keyset file content, secrets included. Only :meth:`save` should need it."""
        keys = ",\n    ".join(json_dumps(key.to_jwk()) for key in self)
        return '{\n  "keys": [\n    ' + keys + "\n  ]\n}\n" if keys else '{\n  "keys": []\n}\n'

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
        chosen = _kek(kek)
        sealing = None if chosen is None else _new_sealing(chosen)
        with keyfile.keyset_lock(target):
            keyfile.write_keyset_text(target, self._file_text(sealing), overwrite=overwrite)

    def _file_text(self, sealing: Sealing | None) -> str:
        """The file content: plain JSON, or encrypted under ``sealing``."""
        if sealing is None:
            return self.to_json()
        from .encrypted_keyset import seal_keys

        return seal_keys([key.to_jwk() for key in self], sealing)

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
        chosen = _kek(kek)
        with keyfile.keyset_lock(target):
            try:
                current = cls.load(target, reload_interval=None, kek=chosen)
                sealing, existed = current._sealing, True
            except KeysetNotFound:
                if not create:
                    raise
                current = cls([], source=str(target))
                sealing, existed = None if chosen is None else _new_sealing(chosen), False
            changed = change(current)
            # Nothing changed, nothing written: an encrypted file would otherwise get a fresh
            # nonce on every no-op rotate, and a ship-on-change job would ship it every run.
            if not existed or changed.to_json() != current.to_json():
                keyfile.write_keyset_text(target, changed._file_text(sealing), overwrite=True)
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
        source_kek, new_kek = _kek(kek), _kek(to_kek)
        with keyfile.keyset_lock(target):
            current = cls.load(target, reload_interval=None, kek=source_kek)
            if new_kek is None:
                sealing = None
            else:
                sealing = _new_sealing(new_kek, rewrapping=current._sealing)
            keyfile.write_keyset_text(target, current._file_text(sealing), overwrite=True)
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
        changed = key._changed(**changes)
        return self.with_keys(changed if k is key else k for k in self)

    # --- lookups ---------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Key]:
        return iter(self._current().keys)

    def __len__(self) -> int:
        return len(self._current().keys)

    def __repr__(self) -> str:
        return f"Keyset({self.source!r}, {len(self)} keys)"

    def derived(self, purpose: str, build: Callable[[tuple[Key, ...]], T]) -> T:
        """A look-up table built once per version of the keyset, e.g. exact JOSE headers.

        On every verification's path: the reload check of :meth:`_current` is written out here.
        """
        watch = self._watch
        if watch is not None and time.monotonic() >= watch.next_check:
            watch.refresh(self, wait=False)
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
            fmt = ALGORITHMS[alg].format if alg in ALGORITHMS else "?"
            raise NoPrimaryKey(
                f"{self.source} has no primary {alg} key to mint {fmt} tokens; add one with: "
                f"mrtr-state keys add --alg {alg}, or promote a pending one with: "
                "mrtr-state keys promote KID"
            ) from None

    def verifying_key(self, kid: str, alg: str) -> Key:
        """The key a token names, if it may verify tokens of ``alg``; else the precise refusal."""
        key = self._current().by_kid.get(kid)
        if key is None:
            raise UnknownKey(f"unknown key id {kid}")
        if key.alg != alg:
            raise WrongFormat(f"key {kid} is a {key.alg} key ({key.format} format), not {alg}")
        if key.status == "retired":
            raise KeyRetired(f"key {kid} is retired; its tokens are no longer accepted")
        return key


def _read_keys(
    text: str, source: str, kek: Kek | None, *, may_call_kek: bool = True
) -> tuple[list[Key], Sealing | None]:
    """The keys of a keyset file's text, each checked for shape (the table checks invariants),
    and how the file is encrypted. With a KEK the file must be encrypted; without, plain."""
    try:
        document = json_loads(text.strip())
    except EncodingError as err:
        raise KeysetInvalid(f"{source} is not valid JSON: {err}") from None
    sealing = None
    if isinstance(document, dict) and "mrtr-state-encrypted-keyset" in document:
        from .encrypted_keyset import open_document

        jwks, sealing = open_document(document, source, kek, may_call_kek=may_call_kek)
    elif kek is not None:
        raise KekRequired(
            f"keyset {source} is not encrypted, but a KEK ({kek.uri}) is configured: refusing a "
            f"plain keyset where an encrypted one is expected; if this is intended, encrypt it "
            f"with: mrtr-state keys encrypt --kek {kek.uri}"
        )
    elif not isinstance(document, dict) or not isinstance(document.get("keys"), list):
        raise KeysetInvalid(f'{source} must be a JSON object with a "keys" list (a JWK Set)')
    else:
        jwks = document["keys"]
    return [_key_from_jwk(jwk, source, n) for n, jwk in enumerate(jwks)], sealing


def _kek(kek: Kek | str | None) -> Kek | None:
    if kek is None or not isinstance(kek, str):
        return kek
    from .kek import kek_from_uri

    return kek_from_uri(kek)


def _new_sealing(kek: Kek, rewrapping: Sealing | None = None) -> Sealing:
    from .encrypted_keyset import new_sealing

    return new_sealing(kek, rewrapping=rewrapping)


def _fresh_kid(taken: Iterable[str]) -> str:
    used = set(taken)
    while True:
        kid = os.urandom(4).hex()
        if kid not in used:
            return kid


def _key_from_jwk(jwk: Any, source: str, index: int) -> Key:
    where = f"{source}: keys[{index}]"
    if not isinstance(jwk, dict):
        raise KeysetInvalid(f"{where} is not a JSON object")
    unknown = sorted(set(jwk) - _KEY_MEMBERS)
    if unknown:
        from ._printable import printable  # the file's text: inert in messages and logs

        names = printable(", ".join(unknown), 200)
        raise KeysetInvalid(f"{where} has unknown members {names}; remove them")
    if jwk.get("kty") != "oct":
        raise KeysetInvalid(f'{where}: kty must be "oct" (a symmetric key)')
    for member in ("kid", "alg", "k"):
        if not isinstance(jwk.get(member), str):
            raise KeysetInvalid(f"{where}: {member} must be a string")
    try:
        secret = b64url_decode(jwk["k"])
    except EncodingError:
        raise KeysetInvalid(
            f"{where} (kid {jwk['kid']!r}): k is not canonical unpadded base64url"
        ) from None
    status = jwk.get("status", "primary")
    since = jwk.get("since", {})
    if not isinstance(since, dict) or not all(
        name in STATUSES and type(at) is int and 0 <= at <= LAST_SECOND
        for name, at in since.items()
    ):
        raise KeysetInvalid(
            f"{where} (kid {jwk['kid']!r}): since must map statuses to unix seconds "
            "(0 to the end of year 9999)"
        )
    sdk_kid = jwk.get("sdk_kid")
    if sdk_kid is not None and not isinstance(sdk_kid, str):
        raise KeysetInvalid(f"{where} (kid {jwk['kid']!r}): sdk_kid must be a string")
    return Key(
        kid=jwk["kid"], alg=jwk["alg"], secret=secret, status=status, since=since, sdk_kid=sdk_kid
    )


def listed_without_kek(path: str | os.PathLike[str]) -> tuple[str, list[Key]] | None:
    """For ``keys list`` without a KEK: the KEK URI and the keys of an encrypted keyset file as
    its clear metadata says, each with an empty secret (so none can ever mint or verify, and
    none is ever in a :class:`Keyset`); None for a plain file. Unauthenticated: only opening the
    file with its KEK proves the metadata unchanged."""
    target = os.fspath(path)
    text, _stamp = keyfile.read_keyset_file(target)
    try:
        document = json_loads(text.strip())
    except EncodingError as err:
        raise KeysetInvalid(f"{target} is not valid JSON: {err}") from None
    from .encrypted_keyset import is_encrypted, metadata_of

    if not is_encrypted(document):
        return None
    kek_uri, metadata = metadata_of(document, target)
    keys = [_key_from_jwk({**jwk, "k": ""}, target, n) for n, jwk in enumerate(metadata)]
    # every invariant a loaded keyset holds, bar those that need the secrets: a damaged or
    # hostile clear list is a one-line KeysetInvalid, and what is listed is ids, algorithms and
    # statuses this program knows (nothing a terminal would act on)
    return kek_uri, list(_Table(keys, target, secrets=False).keys)
