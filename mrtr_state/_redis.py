"""Redis clients from a URL: one server, a Redis Cluster, or a primary watched by Sentinel.

The replay store and the state-handle store share these, through the optional ``redis``
package (``pip install 'mrtr-state[redis]'``); nothing imports it until a URL asks for it.

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

__all__ = ["SCHEMES", "connect", "shown"]

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


def _nodes(netloc: str, url: str) -> list[tuple[str, int]]:
    nodes = []
    for part in netloc.split(","):
        host, colon, port = part.rpartition(":")
        if not colon or not port.isdigit() or not host:
            raise ValueError(f"{shown(url)}: every node must be HOST:PORT, got {part!r}")
        nodes.append((host.strip("[]"), int(port)))
    return nodes


def connect(url: str, *, asyncio: bool = False, timeout: float = 5.0) -> Any:
    """A client for ``url`` (see the module's table): redis-py's own, sync or asyncio.

    Raises ``ValueError`` for a URL it cannot use and ``ImportError`` without redis-py.
    """
    options: dict[str, Any] = {"socket_timeout": timeout, "socket_connect_timeout": timeout}
    if url.startswith(("redis://", "rediss://", "unix://")):
        if asyncio:
            from redis.asyncio import Redis as AsyncRedis

            return AsyncRedis.from_url(url, **options)
        from redis import Redis

        return Redis.from_url(url, **options)
    scheme, _, _ = url.partition("://")
    if scheme not in ("redis+cluster", "rediss+cluster", "redis+sentinel", "rediss+sentinel"):
        raise ValueError(f"{shown(url)}: not a Redis URL ({', '.join(SCHEMES)})")
    parts = urlsplit(url)
    netloc = parts.netloc.rpartition("@")[2]
    password = unquote(parts.password) if parts.password else None
    if password is not None:
        options["password"] = password
    if scheme.startswith("rediss"):
        options["ssl"] = True
    nodes = _nodes(netloc, url)
    if scheme.endswith("cluster"):
        if parts.path not in ("", "/"):
            raise ValueError(f"{shown(url)}: a cluster has one database: give no /DB")
        if asyncio:
            from redis.asyncio.cluster import ClusterNode as AsyncNode
            from redis.asyncio.cluster import RedisCluster as AsyncCluster

            return AsyncCluster(startup_nodes=[AsyncNode(h, p) for h, p in nodes], **options)
        from redis.cluster import ClusterNode, RedisCluster

        node: Any = ClusterNode  # untyped in redis-py
        return RedisCluster(startup_nodes=[node(h, p) for h, p in nodes], **options)
    service, _, db = parts.path.strip("/").partition("/")
    if not service or (db and not db.isdigit()):
        raise ValueError(f"{shown(url)}: write redis+sentinel://HOST:PORT,.../SERVICE[/DB]")
    sentinel_options = {"socket_timeout": timeout, "socket_connect_timeout": timeout}
    if asyncio:
        from redis.asyncio.sentinel import Sentinel as AsyncSentinel

        watcher: Any = AsyncSentinel  # untyped in redis-py
    else:
        from redis.sentinel import Sentinel

        watcher = Sentinel
    watch = watcher(nodes, sentinel_kwargs=sentinel_options, **options)
    return watch.master_for(service, db=int(db or 0))
