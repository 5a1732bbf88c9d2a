"""The proxy's admin listener: liveness, readiness and metrics, on an address of its own.

    GET /healthz   200 while the process serves (liveness: restart it if this fails)
    GET /readyz    200 when ready; 503 with the reasons when the keyset file cannot be loaded
                   (the last good keyset is still in force: a rotation did not take effect), the
                   upstream or the state store cannot be used, or the proxy is shutting down
    GET /metrics   Prometheus text (see :mod:`mrtr_state.proxy.metrics`); its
                   ``mrtr_state_proxy_ready`` is worked out at each scrape by /readyz's checks

Keep it off the network clients reach: it says which keys are in use and whether the keyset is
healthy. It serves nothing else, and answers any other method 405 and any other path 404.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

from ..handle_store import awaited
from ..keyset import Keyset
from .app import Receive, Scope, Send
from .metrics import ProxyMetrics
from .upstream import Upstream

__all__ = ["AdminApp"]


class AdminApp:
    """An ASGI app for the admin listener of one proxy."""

    def __init__(
        self,
        keyset: Keyset | None,
        upstream: Upstream,
        metrics: ProxyMetrics,
        draining: Callable[[], bool] = lambda: False,
        store: Any = None,
    ) -> None:
        self.keyset = keyset
        self.store = store
        self.upstream = upstream
        self.metrics = metrics
        self.draining = draining

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
        """Why the proxy should not get traffic now (nothing: it is ready)."""
        reasons = []
        if self.draining():
            reasons.append("shutting down")
        # in a thread: a keyset change that needs the KEK (scrypt, an HSM, a KMS helper) must
        # not stall the event loop
        if self.keyset is not None:
            problem = await asyncio.to_thread(self.keyset.check)
            if problem is not None:
                reasons.append(f"keyset: {problem} (the last good keyset is in force)")
        if self.store is not None:
            unusable = await awaited(self.store.probe())
            if unusable is not None:
                reasons.append(f"state store: {unusable}")
        unreachable = await self.upstream.probe()
        if unreachable is not None:
            reasons.append(f"upstream: {unreachable}")
        return reasons


async def _answer(
    send: Send,
    status: int,
    body: bytes,
    kind: bytes,
    headers: list[tuple[bytes, bytes]] | None = None,
) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", kind),
                (b"content-length", str(len(body)).encode("ascii")),
                (b"cache-control", b"no-store"),
                *(headers or []),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
