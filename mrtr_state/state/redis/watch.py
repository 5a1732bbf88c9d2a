"""Whether a Redis server keeps what a store promises: nothing evicted early, and one clock.

A replay entry or a handle record must stay until its time. A server with a ``maxmemory`` and
any policy but ``noeviction`` may drop it sooner (a token then accepted twice, a handle gone),
and a server whose clock is far from this host's keeps it by another time. So each server a
store writes to is judged, with ``TIME`` and ``INFO memory``:

* when a connection to it opens, before the store's first command on it (a reconnection, a
  failover's new primary, a cluster node first reached), through the client's ``on_open`` hook:
  a server found wanting refuses the connection itself, so no command reaches it;
* and again before a store's operation once :data:`CHECK_EVERY` seconds have passed since the
  last look, so a policy changed at run time (``CONFIG SET``) is seen within that window.

A verdict stands until the next look: between two looks a policy switched and switched back goes
unseen, which is why the replay store also reads the server's eviction counter in every
redemption (:mod:`mrtr_state.state.replay`). The one judgement, for both stores, is here.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable
from typing import Any

from . import StoreFailure
from .client import Node, Router, _Link

__all__ = ["CHECK_EVERY", "ServerWatch", "info_fields", "server_problem"]

#: The longest time between two looks at a server (seconds): a policy changed at run time is
#: seen within it.
CHECK_EVERY = 5.0


def info_fields(text: Any) -> dict[str, Any]:
    """The ``name:value`` lines of an INFO reply (numbers as ints)."""
    fields: dict[str, Any] = {}
    for line in bytes(text).decode("utf-8", "replace").splitlines():
        name, colon, value = line.partition(":")
        if colon:
            fields[name] = int(value) if value.isdigit() else value
    return fields


def server_problem(memory: dict[str, Any], offset: float, max_skew: float, kept: str) -> str | None:
    """Why a server whose ``INFO memory`` is ``memory`` and whose clock reads ``offset`` seconds
    from this host's cannot keep ``kept`` (``keys``, ``records``) until they expire, or None."""
    if memory.get("maxmemory") and memory.get("maxmemory_policy") != "noeviction":
        return (
            f"the server may evict {kept} before they expire (maxmemory "
            f"{memory.get('maxmemory')}, maxmemory-policy {memory.get('maxmemory_policy')}); "
            "set maxmemory-policy noeviction"
        )
    if not abs(offset) <= max_skew:
        return (
            f"the server's clock reads {offset:+.0f} s from this host's, beyond max_skew "
            f"{max_skew:.0f} s: fix the clocks (NTP)"
        )
    return None


Send = Callable[..., Awaitable[Any]]


class ServerWatch:
    """The verdict on the servers one store writes to. ``offset``: the server's clock minus
    this host's, as last read (the largest in size, over a cluster's nodes)."""

    def __init__(self, max_skew: float, kept: str) -> None:
        self.max_skew = max_skew
        self.kept = kept
        self.offset = 0.0
        self._verdicts: dict[str, tuple[str | None, float]] = {}
        #: why a server of the store cannot be written to now, or None (kept as verdicts come)
        self.problem: str | None = None
        self._looked_at = -math.inf

    @property
    def looked(self) -> bool:
        """Whether a server's clock has been read yet (:attr:`offset` means something)."""
        return bool(self._verdicts)

    def due(self) -> bool:
        """Whether the servers are to be looked at again before the next write."""
        return time.monotonic() - self._looked_at >= CHECK_EVERY or self.problem is not None

    async def on_open(self, node: Node, link: _Link) -> None:
        """The client's hook: judge a server as a connection to it opens; refuse the connection
        (no command of the store goes on it) if it cannot keep what the store files."""
        problem = await self._judge(node.where, lambda *args: node.send_on(link, *args))
        if problem is not None:
            raise StoreFailure(problem)

    async def look(self, router: Router) -> None:
        """Judge every primary of ``router`` now (a cluster's each)."""
        self._verdicts.clear()
        self.problem = None
        for node in await router.nodes():
            await self._judge(node.where, node.call)
        self._looked_at = time.monotonic()

    async def _judge(self, where: str, send: Send) -> str | None:
        before = time.time()
        seconds, micros = await send("TIME")
        after = time.time()
        offset = int(seconds) + int(micros) / 1e6 - (before + after) / 2
        memory = info_fields(await send("INFO", "memory"))
        problem = server_problem(memory, offset, self.max_skew, self.kept)
        verdicts = self._verdicts
        verdicts[where] = (problem, offset)
        self.offset = max((o for _, o in verdicts.values()), key=abs)
        self.problem = next((p for p, _ in verdicts.values() if p is not None), None)
        return problem
