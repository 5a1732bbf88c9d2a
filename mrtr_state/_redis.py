"""Redis clients from a URL: one server, a Redis Cluster, or a primary watched by Sentinel.

The state-handle store of the CLI and library servers reaches them through the optional
``redis`` package (``pip install 'mrtr-state[redis]'``); nothing imports it until a URL asks
for it. The proxy reaches the same URLs with :mod:`mrtr_state._resp`.

    redis://[:PASSWORD@]HOST[:PORT][/DB]          one server (rediss:// over TLS)
    unix:///PATH[?db=N]                           one server on a Unix socket
    redis+cluster://[:PASSWORD@]HOST:PORT[,HOST:PORT...]
                                                  a Redis Cluster, from any of its nodes
    redis+sentinel://[:PASSWORD@]HOST:PORT[,HOST:PORT...]/SERVICE[/DB]
                                                  the primary Sentinel names for SERVICE

``rediss+cluster://`` and ``rediss+sentinel://`` use TLS. The password, when given, is the data
nodes' (Sentinels are asked without one). Clients have short socket timeouts: a store that does
not answer fails the operation closed rather than holding the request.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote, urlsplit

__all__ = ["SCHEMES", "connect", "nodes_of", "shown"]

SCHEMES = (
    "redis://",
    "rediss://",
    "unix://",
    "redis+cluster://",
    "rediss+cluster://",
    "redis+sentinel://",
    "rediss+sentinel://",
)


def shown(url: str) -> str:
    """``url`` without its password, for messages and logs."""
    scheme, _, rest = url.partition("://")
    _userinfo, at, hosts = rest.rpartition("@")
    return f"{scheme}://{hosts}" if at else url


def nodes_of(url: str) -> list[tuple[str, int]]:
    """The HOST:PORT list of a cluster or Sentinel URL."""
    netloc = urlsplit(url).netloc.rpartition("@")[2]
    nodes = []
    for part in netloc.split(","):
        host, colon, port = part.rpartition(":")
        if not colon or not port.isdigit() or not host:
            raise ValueError(f"{shown(url)}: every node must be HOST:PORT, got {part!r}")
        nodes.append((host.strip("[]"), int(port)))
    return nodes


def connect(url: str, *, timeout: float = 5.0) -> Any:
    """A redis-py client for ``url`` (see the module's table). The proxy, which awaits its
    store, reaches the same URLs with :mod:`mrtr_state._resp` instead.

    Raises ``ValueError`` for a URL it cannot use and ``ImportError`` without redis-py.
    """
    options: dict[str, Any] = {"socket_timeout": timeout, "socket_connect_timeout": timeout}
    if url.startswith(("redis://", "rediss://", "unix://")):
        if not url.startswith("unix://"):
            db = urlsplit(url).path.strip("/")
            if db and not db.isdigit():  # redis-py would quietly take database 0
                raise ValueError("the database is a number: redis://HOST:PORT/N")
        from redis import Redis

        return Redis.from_url(url, **options)
    scheme, _, _ = url.partition("://")
    if scheme not in ("redis+cluster", "rediss+cluster", "redis+sentinel", "rediss+sentinel"):
        raise ValueError(f"{shown(url)}: not a Redis URL ({', '.join(SCHEMES)})")
    parts = urlsplit(url)
    password = unquote(parts.password) if parts.password else None
    if password is not None:
        options["password"] = password
    if scheme.startswith("rediss"):
        options["ssl"] = True
    nodes = nodes_of(url)
    if scheme.endswith("cluster"):
        if parts.path not in ("", "/"):
            raise ValueError(f"{shown(url)}: a cluster has one database: give no /DB")
        from redis.cluster import ClusterNode, RedisCluster

        node: Any = ClusterNode  # untyped in redis-py
        return RedisCluster(startup_nodes=[node(h, p) for h, p in nodes], **options)
    service, _, db = parts.path.strip("/").partition("/")
    if not service or (db and not db.isdigit()):
        raise ValueError(f"{shown(url)}: write redis+sentinel://HOST:PORT,.../SERVICE[/DB]")
    sentinel_options = {"socket_timeout": timeout, "socket_connect_timeout": timeout}
    from redis.sentinel import Sentinel

    watcher: Any = Sentinel  # untyped in redis-py
    watch = watcher(nodes, sentinel_kwargs=sentinel_options, **options)
    return watch.master_for(service, db=int(db or 0))
