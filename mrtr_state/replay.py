"""Single-use requestState: redeem a verified token at most once until it expires.

Principal, expiry and request binding narrow the replay window; they do not close it. A server
that must act on a given state once only (charge a card, deploy once) records each token it
accepts and refuses the second presentation. The store keeps nothing but an opaque key (the
token's ``jti``, or a SHA-256 of the token for formats without one) and its expiry, and forgets
the entry when the token expires: an expired token is refused as expired before the store is
consulted.

Backends, chosen by URL:

* ``memory:``: one process (the default);
* ``sqlite:///path/replay.db``: many processes on one machine (WAL, an atomic insert that fails
  on a second redemption, expired rows purged as it goes);
* ``redis://host:port/db``: a fleet (``SET key 1 NX PX remaining-lifetime``), through the optional
  ``redis`` package (``pip install 'mrtr-state[redis]'``).

Every failure of a store (unreachable, unwritable, corrupt) raises :class:`ReplayStoreError`:
verification fails closed rather than silently accepting a token it could not record.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from . import errors as ms_errors
from .errors import ReplayStoreError

if TYPE_CHECKING:
    import sqlite3

__all__ = [
    "CLOCK_MARGIN",
    "MemoryStore",
    "RedisStore",
    "ReplayStore",
    "SqliteStore",
    "open_store",
    "token_key",
]

_PURGE_EVERY = 256
#: How long past a token's ``exp`` its entry is kept. Replicas' clocks differ (a verifier accepts
#: an ``iat`` up to 60 s ahead), so a replica whose clock is behind the redeeming one still takes
#: the token as unexpired for that long: forgetting the entry at ``exp`` exactly would let that
#: replica accept it a second time.
CLOCK_MARGIN = 120.0


class ReplayStore(Protocol):
    """What a single-use backend offers: one atomic test-and-set."""

    def redeem(self, key: str, expires_at: float, *, now: float) -> bool:
        """Record ``key`` until ``expires_at``; False if it is already recorded and unexpired."""
        ...

    def close(self) -> None: ...


def token_key(jti: str | None, token: str) -> str:
    """The store key of a token: its ``jti``, else a digest of the token itself."""
    if jti:
        return "jti:" + jti
    return "sha256:" + hashlib.sha256(token.encode("ascii")).hexdigest()


class MemoryStore:
    """A dictionary guarded by a lock: for one process."""

    def __init__(self) -> None:
        self._entries: dict[str, float] = {}
        self._lock = threading.Lock()
        self._writes = 0

    def redeem(self, key: str, expires_at: float, *, now: float) -> bool:
        if not now < expires_at:
            return False  # expired here: never recorded, never accepted
        with self._lock:
            seen = self._entries.get(key)
            if seen is not None and now < seen:
                return False
            self._entries[key] = expires_at + CLOCK_MARGIN
            self._writes += 1
            if self._writes % _PURGE_EVERY == 0:
                self._entries = {k: exp for k, exp in self._entries.items() if now < exp}
            return True

    def __len__(self) -> int:
        return len(self._entries)

    def close(self) -> None:
        self._entries.clear()


class SqliteStore:
    """One SQLite file shared by the processes of one machine."""

    def __init__(self, path: str | Path) -> None:
        import sqlite3  # deferred: only this backend needs it

        self._sqlite = sqlite3
        self.path = Path(path)
        _prepare_private_file(self.path)
        self._local = threading.local()
        self._writes = 0
        with self._errors("open"):
            self._connection().execute(
                "CREATE TABLE IF NOT EXISTS redeemed"
                " (key TEXT PRIMARY KEY, expires_at REAL NOT NULL)"
            )

    @contextlib.contextmanager
    def _errors(self, doing: str) -> Iterator[None]:
        try:
            yield
        except self._sqlite.Error as err:
            raise ReplayStoreError(f"replay store {self.path}: cannot {doing}: {err}") from None

    def _connection(self) -> sqlite3.Connection:
        connection: sqlite3.Connection | None = getattr(self._local, "connection", None)
        if connection is None:
            connection = self._sqlite.connect(self.path, timeout=10.0, isolation_level=None)
            connection.execute("PRAGMA journal_mode=WAL")
            connection.execute("PRAGMA synchronous=NORMAL")
            self._local.connection = connection
        return connection

    def redeem(self, key: str, expires_at: float, *, now: float) -> bool:
        if not now < expires_at:
            return False  # expired here: never recorded, never accepted
        keep_until = expires_at + CLOCK_MARGIN
        with self._errors("record a redemption"):
            db = self._connection()
            db.execute("BEGIN IMMEDIATE")
            try:
                # An entry whose token has expired no longer blocks anything.
                db.execute("DELETE FROM redeemed WHERE key = ? AND expires_at <= ?", (key, now))
                try:
                    db.execute(
                        "INSERT INTO redeemed (key, expires_at) VALUES (?, ?)", (key, keep_until)
                    )
                except self._sqlite.IntegrityError:
                    db.execute("ROLLBACK")
                    return False
                self._writes += 1
                if self._writes % _PURGE_EVERY == 0:
                    db.execute("DELETE FROM redeemed WHERE expires_at <= ?", (now,))
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
            return True

    def count(self) -> int:
        with self._errors("count"):
            row = self._connection().execute("SELECT COUNT(*) FROM redeemed").fetchone()
            return int(row[0])

    def purge(self, *, now: float) -> None:
        with self._errors("purge"):
            self._connection().execute("DELETE FROM redeemed WHERE expires_at <= ?", (now,))

    def close(self) -> None:
        connection = getattr(self._local, "connection", None)
        if connection is not None:
            connection.close()
            self._local.connection = None


class RedisStore:
    """A Redis server shared by a fleet: ``SET key 1 NX PX ttl`` is the atomic test-and-set."""

    PREFIX = "mrtr-state:redeemed:"

    def __init__(self, url: str) -> None:
        try:
            import redis
        except ImportError:
            raise ReplayStoreError(
                "the redis replay store needs the redis package: pip install 'mrtr-state[redis]'"
            ) from None
        self.url = url
        self._client: Any = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
        self._redis_error: type[Exception] = redis.RedisError

    def redeem(self, key: str, expires_at: float, *, now: float) -> bool:
        if not now < expires_at:
            return False  # expired on this replica's clock: refused, not waved through
        keep_ms = int((expires_at - now + CLOCK_MARGIN) * 1000)
        try:
            stored = self._client.set(self.PREFIX + key, b"1", nx=True, px=keep_ms)
        except self._redis_error as err:
            raise ReplayStoreError(f"replay store {self._shown()}: {err}") from None
        return bool(stored)

    def _shown(self) -> str:
        from urllib.parse import urlsplit

        parts = urlsplit(self.url)
        return f"redis://{parts.hostname}:{parts.port or 6379}{parts.path}"  # no password

    def close(self) -> None:
        self._client.close()


def _prepare_private_file(path: Path) -> None:
    """Create the database 0600 if it is new, and refuse one that others own or may write.

    The redeemed set decides whether a token is accepted a second time: a store another user can
    write (or replace, through its folder) could be emptied to replay tokens. The rules are the
    keyset file's (owner and mode, and a folder only its owner may write in).
    """
    from . import keyfile

    folder = path.parent if str(path.parent) else Path(".")
    try:
        keyfile.check_folder(folder)
        handle = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError as err:
        raise ReplayStoreError(f"replay store {path}: cannot open: {err.strerror}") from None
    except ms_errors.KeysetPermissions as err:
        raise ReplayStoreError(f"replay store {path}: {err}") from None
    try:
        info = os.fstat(handle)
    finally:
        os.close(handle)
    problem = keyfile.permission_problem(info.st_mode, info.st_uid, os.geteuid())
    if problem is not None:
        raise ReplayStoreError(
            f"replay store {path} {problem.replace('a keyset', 'a replay store')}; fix with: "
            f"chmod 600 {path}"
        )


def open_store(url: str) -> ReplayStore:
    """The store a URL names: ``memory:``, ``sqlite:///path`` or ``redis://host:port/db``."""
    if url in ("memory:", "memory://"):
        return MemoryStore()
    if url.startswith("sqlite://"):
        path = url[len("sqlite://") :]
        if not path.startswith("/") or path == "/":
            raise ValueError(f"{url!r}: write sqlite:///relative.db or sqlite:////absolute.db")
        return SqliteStore(path[1:])
    if url.startswith(("redis://", "rediss://", "unix://")):
        return RedisStore(url)
    raise ValueError(f"unknown replay store {url!r}: use memory:, sqlite:///PATH or redis://HOST")
