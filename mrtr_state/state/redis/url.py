"""The one reading of a Redis URL: what to reach, with which credentials; and how to show it.

Every store that keeps something in Redis (the replay store, the handle store) is given one of
these URLs, and the proxy, the CLI and the SDK codec read them here, the same way:

    redis://[[USER]:PASSWORD@]HOST[:PORT][/DB]      one server (rediss:// over TLS)
    unix://[[USER]:PASSWORD@]/PATH[?db=N]           one server on a Unix socket
    redis+cluster://[[USER]:PASSWORD@]HOST:PORT[,HOST:PORT...]
                                                    a Redis Cluster, from any of its nodes
    redis+sentinel://[[USER]:PASSWORD@]HOST:PORT[,HOST:PORT...]/SERVICE[/DB]
                                                    the primary Sentinel names for SERVICE

``rediss+cluster://`` and ``rediss+sentinel://`` use TLS. The credentials, when given, are the
data nodes' (Sentinels are asked without them). Anything this reading cannot place (a database
that is not a number, a query it does not know, a cluster URL with a database) is a
``ValueError`` naming the URL without its password: a URL two readers would read two ways is
refused, never guessed at.
"""

from __future__ import annotations

from typing import NamedTuple
from urllib.parse import parse_qs, unquote, urlsplit

__all__ = ["SCHEMES", "RedisTarget", "parse_url", "shown"]

SCHEMES = (
    "redis://",
    "rediss://",
    "unix://",
    "redis+cluster://",
    "rediss+cluster://",
    "redis+sentinel://",
    "rediss+sentinel://",
)


class RedisTarget(NamedTuple):
    """What a Redis URL names. ``kind`` is ``server``, ``unix``, ``cluster`` or ``sentinel``;
    ``nodes`` the HOST:PORT pairs (the server, the cluster's seeds, the Sentinels); ``path``
    the socket of ``unix``; ``service`` the name Sentinel is asked about."""

    kind: str
    nodes: tuple[tuple[str, int], ...]
    path: str | None
    username: str | None
    password: str | None
    db: int
    tls: bool
    service: str | None

    def __repr__(self) -> str:  # never the password
        return f"RedisTarget(kind={self.kind!r}, nodes={self.nodes!r}, db={self.db})"


def shown(url: str) -> str:
    """``url`` without its credentials, for messages and logs."""
    scheme, _, rest = url.partition("://")
    _userinfo, at, hosts = rest.rpartition("@")
    return f"{scheme}://{hosts}" if at else url


def _number(text: str) -> bool:
    """ASCII digits only (``str.isdigit`` also takes '²' and Arabic-Indic digits)."""
    return text.isascii() and text.isdigit()


def _database(text: str, url: str) -> int:
    if text and not _number(text):
        raise ValueError(f"{shown(url)}: the database must be a number")
    return int(text or 0)


def _nodes(netloc: str, url: str) -> tuple[tuple[str, int], ...]:
    nodes = []
    for part in netloc.rpartition("@")[2].split(","):
        host, colon, port = part.rpartition(":")
        if not colon or not _number(port) or not host or not 0 < int(port) < 65536:
            raise ValueError(f"{shown(url)}: every node must be HOST:PORT, got {part!r}")
        nodes.append((host.strip("[]"), int(port)))
    return tuple(nodes)


def parse_url(url: str) -> RedisTarget:
    """The :class:`RedisTarget` ``url`` names, or the ``ValueError`` saying how to write it."""
    scheme, separator, _ = url.partition("://")
    if not separator or scheme + "://" not in SCHEMES:
        raise ValueError(f"{shown(url)}: not a Redis URL ({', '.join(SCHEMES)})")
    parts = urlsplit(url)
    if parts.fragment or url.endswith("#"):
        raise ValueError(f"{shown(url)}: a Redis URL has no fragment")
    username = unquote(parts.username) if parts.username else None
    password = unquote(parts.password) if parts.password else None
    tls = scheme.startswith("rediss")
    if scheme == "unix":
        query = parse_qs(parts.query, keep_blank_values=True)
        # unix://relative/path has a host; ?password= would be read by redis-py, not here
        if parts.hostname or not parts.path.startswith("/") or set(query) - {"db"}:
            raise ValueError(f"{shown(url)}: write unix://[:PASSWORD@]/PATH/TO/redis.sock[?db=N]")
        db = _database(query.get("db", ["0"])[-1], url)
        return RedisTarget("unix", (), unquote(parts.path), username, password, db, False, None)
    if parts.query:
        raise ValueError(f"{shown(url)}: a {scheme}:// URL takes no query")
    if scheme in ("redis", "rediss"):
        try:
            port = parts.port or 6379
        except ValueError:
            raise ValueError(f"{shown(url)}: the port must be a number") from None
        db = _database(parts.path.strip("/"), url)
        node = ((parts.hostname or "127.0.0.1"), port)
        return RedisTarget("server", (node,), None, username, password, db, tls, None)
    nodes = _nodes(parts.netloc, url)
    if scheme.endswith("cluster"):
        if parts.path not in ("", "/"):
            raise ValueError(f"{shown(url)}: a cluster has one database: give no /DB")
        return RedisTarget("cluster", nodes, None, username, password, 0, tls, None)
    service, _, db_text = parts.path.strip("/").partition("/")
    if not service:
        raise ValueError(f"{shown(url)}: write redis+sentinel://HOST:PORT,.../SERVICE[/DB]")
    db = _database(db_text, url)
    return RedisTarget("sentinel", nodes, None, username, password, db, tls, service)
