"""The baseline of ``make bench``'s proxy rows: a pass-through on the proxy's own stack.

uvicorn (httptools, uvloop) in front, the proxy's upstream client behind, and nothing in
between: the body goes up and the answer comes back untouched. Measured beside
``mrtr-state proxy``, it shows what the HTTP stack costs and what the proxy's own work adds.

    python bench/passthrough.py PORT UPSTREAM_URL
"""

from __future__ import annotations

import sys
from typing import Any

import uvicorn

from mrtr_state.proxy.upstream import Upstream

_HOP = {b"host", b"content-length", b"transfer-encoding", b"connection"}


def build(upstream_url: str) -> Any:
    upstream = Upstream(upstream_url)

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            event = await receive()
            body += event.get("body", b"")
            if not event.get("more_body"):
                break
        headers = [(k, v) for k, v in scope["headers"] if k not in _HOP]
        response = await upstream.request(
            scope["method"].encode(), scope["raw_path"], headers, body
        )
        try:
            back = [(k, v) for k, v in response.headers if k not in _HOP]
            await send({"type": "http.response.start", "status": response.status, "headers": back})
            while (chunk := await response.next_chunk()) is not None:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        finally:
            response.release()

    return app


if __name__ == "__main__":
    uvicorn.run(
        build(sys.argv[2]),
        host="127.0.0.1",
        port=int(sys.argv[1]),
        http="httptools",
        log_level="warning",
        access_log=False,
        server_header=False,
        date_header=False,
    )
