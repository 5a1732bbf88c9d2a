"""The proxy's admin listener: liveness, readiness and metrics, on an address of its own.

    GET /healthz   200 while the process serves (liveness: restart it if this fails)
    GET /readyz    200 when ready; 503 with the reasons when the keyset file cannot be loaded
                   (the last good keyset is still in force: a rotation did not take effect), the
                   upstream or the state or replay store cannot be used (or takes over two
                   seconds to answer), or the proxy is shutting down; answered within 0.2 s,
                   from the look it starts or the latest one
    GET /metrics   Prometheus text (see :mod:`mrtr_state.proxy.metrics`); its
                   ``mrtr_state_proxy_ready`` is worked out at each scrape as /readyz is

Keep it off the network clients reach: it says which keys are in use and whether the keyset is
healthy. It serves nothing else: ``HEAD`` answers as ``GET`` without the body (load balancers
probe so), any other method is 405 and any other path 404.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any

from ..keys.keyset import Keyset
from .app import Receive, Scope, Send, send_whole
from .metrics import ProxyMetrics
from .upstream import Upstream

if TYPE_CHECKING:
    from ..state.backend import StateBackend

__all__ = ["AdminApp"]


class AdminApp:
    """An ASGI app for the admin listener of one proxy.

    ``/readyz`` answers from a look at the keyset, the state backend's store and the upstream:
    each request starts one (unless one is under way), each of its checks bounded by
    :data:`LOOK_TIMEOUT`, and waits for it at most :data:`FRESH_WAIT` seconds before it gives
    the latest verdict instead (none yet: not ready): a slow store or upstream makes the proxy
    not ready, never the admin listener slow.
    """

    def __init__(
        self,
        keyset: Keyset | None,
        upstream: Upstream,
        metrics: ProxyMetrics,
        draining: Callable[[], bool] = lambda: False,
        backend: StateBackend | None = None,
    ) -> None:
        self.keyset = keyset
        self.backend = backend
        self.upstream = upstream
        self.metrics = metrics
        self.draining = draining
        self._reasons: list[str] | None = None  # the latest look's, None before the first
        self._looking: asyncio.Task[None] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        if scope["method"] not in ("GET", "HEAD"):
            await _answer(send, 405, b"only GET\n", b"text/plain", [(b"allow", b"GET, HEAD")])
        elif scope["path"] == "/healthz":
            await _answer(send, 200, b'{"status":"alive"}', b"application/json")
        elif scope["path"] == "/readyz":
            reasons = await self.not_ready()
            body: dict[str, Any] = {"status": "not ready" if reasons else "ready"}
            if reasons:
                body["reasons"] = reasons
            await _answer(
                send, 503 if reasons else 200, json.dumps(body).encode(), b"application/json"
            )
        elif scope["path"] == "/metrics":
            self.metrics.ready(not await self.not_ready())  # mrtr_state_proxy_ready, as /readyz
            text, kind = self.metrics.exposition()
            await _answer(send, 200, text, kind.encode("ascii"))
        else:
            await _answer(send, 404, b"not found\n", b"text/plain")

    async def not_ready(self) -> list[str]:
        """Why the proxy should not get traffic now (nothing: it is ready), from the latest
        look (started anew when it is stale; awaited only when there was none yet)."""
        if self._looking is None:
            self._looking = asyncio.ensure_future(self._look())
        looking = self._looking
        if looking is not None:  # a fresh verdict if it comes at once, else the latest one
            await asyncio.wait({looking}, timeout=FRESH_WAIT)
        reasons = ["shutting down"] if self.draining() else []
        if self._reasons is None:
            return [
                *reasons,
                "readiness: the first look at the keyset, store and upstream is under way",
            ]
        return reasons + self._reasons

    async def _look(self) -> None:
        try:
            found = await asyncio.gather(
                _bounded(self._keyset_problem(), "keyset"),
                _bounded(self._backend_problem(), "state"),
                _bounded(self._upstream_problem(), "upstream"),
            )
            self._reasons = [reason for reason in found if reason is not None]
        finally:
            self._looking = None

    async def _keyset_problem(self) -> str | None:
        if self.keyset is None:
            return None
        # in a thread: a keyset change that needs the KEK (scrypt, an HSM, a KMS helper) must
        # not stall the event loop
        problem = await asyncio.to_thread(self.keyset.check)
        if problem is None:
            return None
        return f"keyset: {problem} (the last good keyset is in force)"

    async def _upstream_problem(self) -> str | None:
        unreachable = await self.upstream.probe()
        return None if unreachable is None else f"upstream: {unreachable}"

    async def _backend_problem(self) -> str | None:
        return None if self.backend is None else await self.backend.aprobe()


#: How long each check of a readiness look may take before it counts as failed (seconds).
LOOK_TIMEOUT = 2.0
#: How long /readyz waits for a look under way before it answers from the one before.
FRESH_WAIT = 0.2


async def _bounded(check: Awaitable[str | None], what: str) -> str | None:
    """``check``'s reason, or one saying it took longer than :data:`LOOK_TIMEOUT`."""
    where = {"keyset": "keyset", "state": "state store", "upstream": "upstream"}[what]
    try:
        return await asyncio.wait_for(check, LOOK_TIMEOUT)
    except TimeoutError:
        return f"{where}: no answer within {LOOK_TIMEOUT:g} s"
    except Exception as err:  # a failed check is a reason, never a lost task exception
        return f"{where}: {type(err).__name__}: {err}"


async def _answer(
    send: Send, status: int, body: bytes, kind: bytes, headers: Iterable[tuple[bytes, bytes]] = ()
) -> None:
    """An admin page: never cached (health and metrics are of this moment)."""
    await send_whole(send, status, body, kind, [(b"cache-control", b"no-store"), *headers])
