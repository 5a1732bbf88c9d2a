"""Single-use requestState: redeem a verified token at most once while any replica could accept it.

Principal, expiry and request binding narrow the replay window; they do not close it. A server
that must act on a given state once only (charge a card, deploy once) records each token it
accepts and refuses the second presentation. The store keeps nothing but an opaque key (the
token's ``jti``, or a SHA-256 of the token for formats without one) and the token's expiry.

Clocks. A fleet's replicas, and the store, each judge time by their own clock. A token is
acceptable on some replica until the slowest clock reaches its ``exp``; a store that forgets the
entry by a fast clock's reading of ``exp`` would let the slow replica accept it a second time.
So every store keeps an entry until ``exp + max_skew`` by the clock that purges it, where
``max_skew`` (default 5 minutes) bounds the difference between any two clocks that judge the
same token. Expiries are stored as absolute times (the token's own ``exp``), never as a time
left computed on one replica's clock. A token whose remaining lifetime exceeds what a store
promises to remember (its ``horizon``, one day by default) is refused before it is recorded.

Backends, chosen by URL:

* ``memory:``: one process (the default): a dictionary and a min-heap of expiries, so purging
  costs a constant per redemption whatever the number of live entries;
* ``sqlite:///path/replay.db``: many processes on one machine (WAL, one upsert statement that
  records a new key or reclaims a lapsed one and reports which, an index on the expiry so
  purges touch only lapsed rows); ``?timeout=SECONDS`` is how long a writer waits for another's
  lock before failing closed (10 s by default);
* ``redis://host:port/db`` (or any URL of :mod:`mrtr_state.state.redis.url`: a Unix socket,
  Sentinel, Cluster): a fleet (``SET key 1 NX PXAT exp+max_skew``, judged by the Redis
  server's clock), over the package's own client and the optional ``hiredis`` parser
  (``pip install 'mrtr-state[redis]'``). Each server is judged when a connection opens and
  every few seconds after: its clock must lie within ``max_skew`` of the verifier's, and a
  server that may evict keys under memory pressure is refused; every redemption also reads, in
  the same script as its ``SET``, the server's count of evicted keys, and refuses while an
  eviction may have dropped an entry that still matters (see :class:`RedisStore`).

Every store has two faces: ``redeem`` for blocking callers (the CLI, library servers) and
``aredeem`` for the proxy's event loop, which never waits on a store (SQLite runs on a small
pool of threads, Redis on the asyncio client).

Every failure of a store (unreachable, read-only, locked, corrupt, foreign, a clock beyond the
bound) raises :class:`ReplayStoreError`: verification fails closed rather than silently accepting
a token it could not record.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import heapq
import math
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol
from urllib.parse import parse_qsl, quote

from .. import errors as ms_errors
from ..errors import ReplayStoreError
from .backend import waited
from .redis import StoreFailure

if TYPE_CHECKING:
    import sqlite3

__all__ = [
    "DEFAULT_HORIZON",
    "DEFAULT_MAX_SKEW",
    "MemoryStore",
    "RedisStore",
    "ReplayStore",
    "SqliteStore",
    "open_store",
    "token_key",
]

#: The largest difference between two clocks (replicas', the store's) that the stores absorb.
DEFAULT_MAX_SKEW = 300.0
#: The longest remaining lifetime a store promises to remember (tokens living longer are refused).
DEFAULT_HORIZON = 86_400.0
_PURGE_EVERY = 256


class ReplayStore(Protocol):
    """What a single-use backend offers: one atomic test-and-set, and the bounds it keeps."""

    #: Entries are kept until ``expires_at + max_skew`` by the clock that purges them.
    max_skew: float
    #: The longest ``expires_at - now`` that :meth:`redeem` accepts to record.
    horizon: float

    def redeem(self, key: str, expires_at: float, *, now: float) -> bool:
        """Record ``key`` for a token expiring at ``expires_at``; False if already recorded."""
        ...

    async def aredeem(self, key: str, expires_at: float, *, now: float) -> bool:
        """:meth:`redeem` for an asyncio caller: never blocks the event loop (the proxy)."""
        ...

    def close(self) -> None: ...


def redemption(
    claims_exp: float | None, jti: str | None, token: str, store: ReplayStore, moment: float
) -> tuple[str, float]:
    """The (store key, expiry) under which a verified token is redeemed at ``moment``; or
    :class:`LifetimeBeyondStore` for a token that outlives what ``store`` remembers."""
    if claims_exp is None or not claims_exp - moment <= store.horizon:
        raise ms_errors.LifetimeBeyondStore(
            "single use refused: this token "
            + ("never expires" if claims_exp is None else f"lives {claims_exp - moment:.0f} s more")
            + f", beyond the {store.horizon:.0f} s the replay store remembers"
        )
    return token_key(jti, token), claims_exp


def replayed() -> ms_errors.Replayed:
    """The refusal of a token redeemed before."""
    return ms_errors.Replayed("replayed: this requestState was already redeemed")


def token_key(jti: str | None, token: str) -> str:
    """The store key of a token: its ``jti``, else a digest of the token itself."""
    if jti:
        return "jti:" + jti
    return "sha256:" + hashlib.sha256(token.encode("ascii")).hexdigest()


def _bounds(max_skew: float, horizon: float) -> tuple[float, float]:
    for name, value in (("max_skew", max_skew), ("horizon", horizon)):
        if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
            raise ValueError(f"replay store {name} must be a finite number of seconds >= 0")
    if horizon <= 0:
        raise ValueError("replay store horizon must be positive")
    return float(max_skew), float(horizon)


class MemoryStore:
    """A dictionary and a min-heap of expiries, guarded by a lock: for one process.

    The heap hands out lapsed entries oldest first, so each redemption pops what has lapsed
    since the last one and no call ever walks the live entries.
    """

    def __init__(
        self, *, max_skew: float = DEFAULT_MAX_SKEW, horizon: float = DEFAULT_HORIZON
    ) -> None:
        self.max_skew, self.horizon = _bounds(max_skew, horizon)
        self._expiry: dict[str, float] = {}
        self._queue: list[tuple[float, str]] = []
        self._lock = threading.Lock()

    def redeem(self, key: str, expires_at: float, *, now: float) -> bool:
        if not now < expires_at:
            return False  # expired here: never recorded, never accepted
        lapsed = now - self.max_skew
        with self._lock:
            queue, expiry = self._queue, self._expiry
            while queue and queue[0][0] <= lapsed:
                old_expiry, old_key = heapq.heappop(queue)
                if expiry.get(old_key) == old_expiry:
                    del expiry[old_key]
            if key in expiry:
                return False
            expiry[key] = expires_at
            heapq.heappush(queue, (expires_at, key))
            return True

    async def aredeem(self, key: str, expires_at: float, *, now: float) -> bool:
        return self.redeem(key, expires_at, now=now)  # a dictionary: nothing to wait for

    def __len__(self) -> int:
        return len(self._expiry)

    def close(self) -> None:
        with self._lock:
            self._expiry.clear()
            self._queue.clear()


#: ``PRAGMA application_id`` of a replay store ("mrtr"): a file without it is not ours to write.
SQLITE_APPLICATION_ID = 0x6D727472
_SQLITE_SCHEMA_VERSION = 2
# WITHOUT ROWID: the key is the table's one b-tree (with the expiry index, two per write, as
# many as the first version's table had without the index)
_SQLITE_TABLE = (
    "CREATE TABLE redeemed (key TEXT PRIMARY KEY, expires_at REAL NOT NULL) WITHOUT ROWID"
)
#: (name, type, not null, primary key) of each column, as ``PRAGMA table_info`` gives them.
_SQLITE_COLUMNS = [("key", "TEXT", 0, 1), ("expires_at", "REAL", 1, 0)]
_SQLITE_INDEX = "CREATE INDEX IF NOT EXISTS redeemed_by_expiry ON redeemed (expires_at)"
# One statement records a new key, or reclaims one whose entry has lapsed, and its row count says
# which happened: 1 recorded, 0 already redeemed. Autocommit makes it one atomic transaction.
_SQLITE_REDEEM = (
    "INSERT INTO redeemed (key, expires_at) VALUES (?, ?) ON CONFLICT (key) DO UPDATE"
    " SET expires_at = excluded.expires_at WHERE redeemed.expires_at <= ?"
)
_SQLITE_PURGE = "DELETE FROM redeemed WHERE expires_at <= ?"
#: How much longer than its lock timeout an awaited redemption may take (the statement itself).
_SQLITE_GRACE = 1.0


class SqliteStore:
    """One SQLite file shared by the processes of one machine."""

    def __init__(
        self,
        path: str | Path,
        *,
        max_skew: float = DEFAULT_MAX_SKEW,
        horizon: float = DEFAULT_HORIZON,
        timeout: float = 10.0,
    ) -> None:
        import sqlite3  # deferred: only this backend needs it

        self.max_skew, self.horizon = _bounds(max_skew, horizon)
        self._sqlite = sqlite3
        self.path = Path(path)
        # every connection and check names the file the store opened, whatever the working
        # folder becomes later (a relative path would name another file after a chdir), and
        # a connection never creates it (mode=rw): a deleted file is not quietly made again
        self._file = os.path.abspath(self.path)
        self._uri = "file:" + quote(self._file) + "?mode=rw"
        self.timeout = timeout
        self._identity = _prepare_private_file(self.path)
        self._local = threading.local()
        self._writes = 0
        with self._errors("open"):
            # the file is checked before anything is written to it (journal mode included)
            first = self._connect()
            try:
                self._adopt(first)
            finally:
                first.close()
            self._connection()

    @contextlib.contextmanager
    def _errors(self, doing: str) -> Iterator[None]:
        try:
            yield
        except self._sqlite.Error as err:
            raise ReplayStoreError(f"replay store {self.path}: cannot {doing}: {err}") from None

    def _adopt(self, db: sqlite3.Connection) -> None:
        """Create the schema in an empty file; accept only our own (or its first version).

        A file that holds anything else (another program's database, a store of a future
        version) is refused and left untouched: writing our table into it would damage it.
        """
        db.execute("BEGIN IMMEDIATE")  # two processes creating the store at once: one does
        try:
            application_id = db.execute("PRAGMA application_id").fetchone()[0]
            version = db.execute("PRAGMA user_version").fetchone()[0]
            tables = [
                row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            ]
            if application_id == SQLITE_APPLICATION_ID and version == _SQLITE_SCHEMA_VERSION:
                pass
            elif not tables and application_id == 0:
                db.execute(_SQLITE_TABLE)
            elif not (
                application_id in (0, SQLITE_APPLICATION_ID)
                and version in (0, _SQLITE_SCHEMA_VERSION)
                and set(tables) == {"redeemed"}
                and _columns(db) == _SQLITE_COLUMNS
            ):
                raise ReplayStoreError(
                    f"replay store {self.path} is not a mrtr-state replay store (application_id "
                    f"{application_id:#x}, tables {', '.join(sorted(tables)) or 'none'}); it was "
                    "left untouched: name a new file"
                )
            # the first version's file (our one table, no marks) is adopted as it is: its rows
            # hold expiry + 120 s, which only keeps them longer
            db.execute(_SQLITE_INDEX)
            db.execute(f"PRAGMA application_id = {SQLITE_APPLICATION_ID}")
            db.execute(f"PRAGMA user_version = {_SQLITE_SCHEMA_VERSION}")
            db.execute("COMMIT")
        finally:
            if db.in_transaction:
                db.execute("ROLLBACK")

    def _connection(self) -> sqlite3.Connection:
        connection: sqlite3.Connection | None = getattr(self._local, "connection", None)
        if connection is None:
            self._check_file()
            connection = self._connect()
            self._local.connection = connection
            self._check_file()  # the file connected to is the one opened (no swap between)
            connection.execute("PRAGMA journal_mode=WAL")
            connection.execute("PRAGMA synchronous=NORMAL")
        return connection

    def _connect(self) -> sqlite3.Connection:
        return self._sqlite.connect(self._uri, timeout=self.timeout, isolation_level=None, uri=True)

    def _check_file(self) -> None:
        """Refuse once the path no longer names the file this store opened.

        A file deleted, renamed or replaced under a running process splits the store in two: the
        process goes on writing to the file it holds open, and a process started later opens
        the one now at the path; each accepts a token the other already redeemed. Its device
        and inode, taken when the store was opened, are compared with the path's before and
        after every redemption (a ``stat`` each); while the store holds the file open no other
        file can be given that inode.
        """
        try:
            info = os.stat(self._file)
        except OSError:
            info = None
        if info is None or (info.st_dev, info.st_ino) != self._identity:
            raise ReplayStoreError(
                f"replay store {self.path} was deleted, renamed or replaced under this process: "
                "the file it opened is no longer the one at that path, and two files would be "
                "two stores that each accept a token once; refusing until the store is opened "
                "again (restart) on the file now at the path"
            )

    def redeem(self, key: str, expires_at: float, *, now: float) -> bool:
        if not now < expires_at:
            return False  # expired here: never recorded, never accepted
        lapsed = now - self.max_skew
        with self._errors("record a redemption"):
            db = self._connection()
            # before the write, so that nothing is written once the file is swapped (its
            # journal stays at the path, where the file now there would read it), and after it,
            # for a swap in the moment between
            self._check_file()
            recorded = db.execute(_SQLITE_REDEEM, (key, expires_at, lapsed)).rowcount == 1
            self._check_file()
            if recorded:
                self._writes += 1
                if self._writes % _PURGE_EVERY == 0:
                    db.execute(_SQLITE_PURGE, (lapsed,))
            return recorded

    async def aredeem(self, key: str, expires_at: float, *, now: float) -> bool:
        """:meth:`redeem` on the blocking pool (:func:`mrtr_state.state.blocking.off_loop`): a
        file locked by another process holds this redemption, never the event loop."""
        from .blocking import off_loop

        started = time.perf_counter()
        try:
            return await off_loop(
                lambda: self.redeem(key, expires_at, now=now), self.timeout + _SQLITE_GRACE
            )
        except TimeoutError as err:
            raise ReplayStoreError(f"replay store {self.path}: {err}") from None
        finally:
            waited(time.perf_counter() - started)

    def count(self) -> int:
        with self._errors("count"):
            row = self._connection().execute("SELECT COUNT(*) FROM redeemed").fetchone()
            return int(row[0])

    def purge(self, *, now: float) -> None:
        with self._errors("purge"):
            self._connection().execute(_SQLITE_PURGE, (now - self.max_skew,))

    def close(self) -> None:
        connection = getattr(self._local, "connection", None)
        if connection is not None:
            connection.close()
            self._local.connection = None


def _columns(db: sqlite3.Connection) -> list[tuple[str, str, int, int]]:
    rows = db.execute("PRAGMA table_info(redeemed)").fetchall()
    return [(row[1], str(row[2]).upper(), row[3], row[5]) for row in rows]


# One redemption, atomic on the server (a script runs alone): the eviction count and the
# server's time, the store's record of both (its ``meta`` hash: the count last seen, when the
# refusal after an eviction ends, and an epoch naming this incarnation of the data), then the
# test-and-set. Replies: {1, epoch} recorded, {0, epoch} already redeemed, {-1, epoch, until_ms,
# count} refused after an eviction or a loss of the store's data; an error if there is no count.
_REDIS_REDEEM = """
local stats = redis.call('INFO', 'stats')
local count = string.match(stats, '\\r\\nevicted_keys:(%d+)')
if not count then return redis.error_reply('no evicted_keys in INFO stats') end
count = tonumber(count)
local clock = redis.call('TIME')
local now_ms = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local meta = redis.call('HMGET', KEYS[2], 'epoch', 'evicted', 'until')
local epoch, seen, until_ms = meta[1], tonumber(meta[2]), tonumber(meta[3]) or 0
local lost = false
if not epoch then
  epoch = ARGV[4]
  seen = count
  lost = ARGV[3] ~= ''
  redis.call('HSET', KEYS[2], 'epoch', epoch, 'evicted', count, 'until', 0)
elseif ARGV[3] ~= '' and ARGV[3] ~= epoch then
  lost = true
end
if lost or count ~= seen then
  until_ms = math.max(until_ms, now_ms + tonumber(ARGV[2]))
  redis.call('HSET', KEYS[2], 'evicted', count, 'until', until_ms)
end
if now_ms < until_ms then return {-1, epoch, until_ms, count} end
if redis.call('SET', KEYS[1], '1', 'NX', 'PXAT', ARGV[1]) then return {1, epoch} end
return {0, epoch}
"""


class _Link(NamedTuple):
    """What a Redis store holds per event loop: its router (bound to that loop) and the watch
    of the servers it reaches."""

    router: Any
    watch: Any


class RedisStore:
    """A Redis server shared by a fleet: ``SET key 1 NX PXAT`` is the atomic test-and-set.

    The entry's expiry is an absolute time judged by the server's clock, so no replica's clock
    shortens it. Each server is judged when a connection to it opens and at most every
    :data:`~mrtr_state.state.redis.watch.CHECK_EVERY` seconds after (its clock and its
    eviction policy, :mod:`mrtr_state.state.redis.watch`): a server whose clock lies beyond
    ``max_skew`` of the verifier's, or that may evict keys before they expire (a ``maxmemory``
    with a policy other than ``noeviction``), cannot keep the promise, and every redemption
    fails closed until it can.

    That look is seconds old at worst, and a policy is a promise about the future anyway: an
    entry written under ``noeviction`` is dropped all the same if the policy changes later. So
    what single use rests on is what did happen: each redemption runs as one script that reads
    the server's ``evicted_keys`` counter and its clock before its ``SET``. A counter that moved
    since any verifier of the fleet last looked (kept in the ``meta`` hash beside the entries)
    means a key may have been evicted, an entry among them, and that entry matters until its
    token's ``exp + max_skew``, at most ``horizon + max_skew`` from now: every redemption is
    refused until then (the refusal is kept in the hash, so every replica and every new process
    honours it). The hash also carries a random epoch: a process that finds it gone or replaced
    (a restart without persistence, ``FLUSHALL``, the hash evicted) knows the entries went with
    it and refuses the same way. What stays open (docs/single-use.md): a process that first
    reaches the store after such a loss cannot tell it from a new store.

    Any URL of :mod:`mrtr_state.state.redis.url`: one server, its Unix socket, a
    Sentinel-watched primary, or a Cluster. On a Cluster, a redemption's script touches its
    entry and the ``meta`` hash, which must share a slot: entries are spread over
    :data:`CLUSTER_SHARDS` hash tags, each with its own hash (and so its own node's eviction
    counter). One implementation, two faces: :meth:`aredeem` for the proxy, awaited on its
    loop; :meth:`redeem` for blocking callers, run on the package's own loop
    (:mod:`mrtr_state.state.blocking`).
    """

    PREFIX = "mrtr-state:redeemed:"
    META = "mrtr-state:meta"
    #: How many hash tags a Cluster's entries are spread over.
    CLUSTER_SHARDS = 16

    def __init__(
        self,
        url: str,
        *,
        max_skew: float = DEFAULT_MAX_SKEW,
        horizon: float = DEFAULT_HORIZON,
        timeout: float = 5.0,
    ) -> None:
        from .redis.url import parse_url, shown

        self.max_skew, self.horizon = _bounds(max_skew, horizon)
        self._target = parse_url(url)  # ValueError: the caller's URL cannot be read
        try:
            import hiredis  # noqa: F401
        except ImportError:
            raise ReplayStoreError(
                "the redis replay store needs hiredis: pip install 'mrtr-state[redis]'"
            ) from None
        self.url = url
        self.timeout = timeout
        self._shown = shown(url)
        self._sharded = self._target.kind == "cluster"
        self._links: dict[asyncio.AbstractEventLoop, _Link] = {}
        #: the store's epoch as this process last saw it, by record (a Cluster has one record
        #: per shard; none yet: b"")
        self._epochs: dict[str, bytes] = {}
        self._new_epoch = os.urandom(12).hex()  # the epoch written if the store has none

    def _link(self) -> _Link:
        loop = asyncio.get_running_loop()
        link = self._links.get(loop)
        if link is None:
            from .redis.client import connect
            from .redis.watch import ServerWatch

            watch = ServerWatch(self.max_skew, "keys")
            router = connect(self._target, timeout=self.timeout, on_open=watch.on_open)
            link = self._links[loop] = _Link(router, watch)
        return link

    def _keys(self, key: str) -> tuple[str, str]:
        if not self._sharded:
            return self.PREFIX + key, self.META
        shard = hashlib.sha256(key.encode("utf-8")).digest()[0] % self.CLUSTER_SHARDS
        return f"{self.PREFIX}{{{shard}}}:{key}", f"{self.META}:{{{shard}}}"

    def _failed(self, why: object) -> ReplayStoreError:
        return ReplayStoreError(f"replay store {self._shown}: {why}")

    @staticmethod
    def _verdict(link: _Link) -> str | None:
        """Why a server refused when its connection opened (it cannot keep what this store
        promises), rather than "unreachable"."""
        problem: str | None = link.watch.problem
        return None if problem is None else f"{problem}; single use cannot be promised"

    async def aredeem(self, key: str, expires_at: float, *, now: float) -> bool:
        if not now < expires_at:
            return False  # expired on this replica's clock: refused, not waved through

        link = self._link()
        started = time.perf_counter()
        try:
            if link.watch.due():
                await link.watch.look(link.router)
            if link.watch.problem is not None:
                raise self._failed(f"{link.watch.problem}; single use cannot be promised")
            server_now = time.time() + link.watch.offset
            if not abs(server_now - now) <= self.max_skew:
                raise self._failed(
                    f"the verifier's clock reads {now - server_now:+.0f} s from the Redis "
                    f"server's, beyond max_skew {self.max_skew:.0f} s; single use cannot be "
                    "promised: fix the clocks (NTP)"
                )
            keep_until_ms = math.ceil((expires_at + self.max_skew) * 1000)
            refuse_ms = math.ceil((self.horizon + self.max_skew) * 1000)
            entry, meta = self._keys(key)
            args = (keep_until_ms, refuse_ms, self._epochs.get(meta, b""), self._new_epoch)
            try:
                answer = await link.router.call(
                    entry.encode(), "EVALSHA", _REDEEM_SHA, 2, entry, meta, *args
                )
            except StoreFailure as err:
                if not str(err).startswith("NOSCRIPT"):
                    raise
                # the node has not cached the script yet (new, restarted, promoted): send it
                answer = await link.router.call(
                    entry.encode(), "EVAL", _REDIS_REDEEM, 2, entry, meta, *args
                )
        except StoreFailure as err:
            raise self._failed(self._verdict(link) or err) from None
        finally:
            waited(time.perf_counter() - started)
        outcome, self._epochs[meta] = int(answer[0]), bytes(answer[1])
        if outcome == -1:
            until = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(int(answer[2]) / 1000))
            raise self._failed(
                f"the server has evicted keys (evicted_keys {int(answer[3])}) or lost this "
                f"store's data since a verifier last looked, so the entry of a redeemed token "
                f"may be gone: every redemption is refused until {until} (horizon + max_skew "
                "later); keep maxmemory-policy noeviction (docs/single-use.md)"
            )
        return outcome == 1

    def redeem(self, key: str, expires_at: float, *, now: float) -> bool:
        from .blocking import run_blocking

        try:
            return run_blocking(self.aredeem(key, expires_at, now=now), self._patience())
        except TimeoutError as err:
            raise self._failed(err) from None

    def _patience(self) -> float:
        """How long a blocking caller waits: a look at every server, then the script."""
        return self.timeout * 4 + 1

    async def aprobe(self) -> float:
        """Reach the servers and judge them as a redemption would (clock, eviction policy);
        the server's clock minus this host's, in seconds. ``ReplayStoreError`` says why not."""

        link = self._link()
        try:
            await link.watch.look(link.router)
        except StoreFailure as err:
            raise self._failed(self._verdict(link) or err) from None
        if link.watch.problem is not None:
            raise self._failed(link.watch.problem)
        return float(link.watch.offset)

    def probe(self) -> float:
        """:meth:`aprobe` for blocking callers (``doctor``)."""
        from .blocking import run_blocking

        try:
            return run_blocking(self.aprobe(), self._patience())
        except TimeoutError as err:
            raise self._failed(err) from None

    def close(self) -> None:
        """Close the connections, on whichever loop each was made."""
        links, self._links = self._links, {}
        for loop, link in links.items():
            if not loop.is_closed():
                loop.call_soon_threadsafe(link.router.close)

    async def aclose(self) -> None:
        self.close()


#: The redemption script's SHA-1, as EVALSHA names it.
_REDEEM_SHA = hashlib.sha1(_REDIS_REDEEM.encode(), usedforsecurity=False).hexdigest()


def _prepare_private_file(path: Path) -> tuple[int, int]:
    """Create the database 0600 if it is new, and refuse one that others own or may write.

    The redeemed set decides whether a token is accepted a second time: a store another user can
    write (or replace, through its folder) could be emptied to replay tokens. The rules are the
    keyset file's (owner and mode, and a folder only its owner may write in). Returns the
    file's (device, inode), what the store later checks the path against.
    """
    from ..keys import file as keyfile

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
    return info.st_dev, info.st_ino


def open_store(
    url: str, *, max_skew: float = DEFAULT_MAX_SKEW, horizon: float = DEFAULT_HORIZON
) -> ReplayStore:
    """The store a URL names: ``memory:``, ``sqlite:///path[?timeout=S]`` or ``redis://...``."""
    if url in ("memory:", "memory://"):
        return MemoryStore(max_skew=max_skew, horizon=horizon)
    if url.startswith("sqlite://"):
        path, _, query = url[len("sqlite://") :].partition("?")
        if not path.startswith("/") or path == "/":
            raise ValueError(f"{url!r}: write sqlite:///relative.db or sqlite:////absolute.db")
        options = dict(parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query)))
        unknown = sorted(set(options) - {"timeout"})
        if unknown:
            raise ValueError(f"{url!r}: unknown option {unknown[0]!r}; the one option is timeout")
        timeout = _seconds(options.get("timeout", "10"), url)
        return SqliteStore(path[1:], max_skew=max_skew, horizon=horizon, timeout=timeout)
    from .redis.url import SCHEMES, shown

    if url.startswith(SCHEMES):
        return RedisStore(url, max_skew=max_skew, horizon=horizon)
    raise ValueError(
        f"unknown replay store {shown(url)!r}: use memory:, sqlite:///PATH, or a Redis URL "
        "(redis://HOST, unix:///PATH, redis+sentinel://..., redis+cluster://...)"
    )


def _seconds(text: str, url: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and 0 <= value <= 3600):
        raise ValueError(f"{url!r}: timeout must be a number of seconds from 0 to 3600")
    return value
