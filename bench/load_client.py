"""The load generator of ``make bench``'s proxy rows, a process of its own.

CONCURRENCY keep-alive connections, each making ROUNDS round trips back to back: a ``tools/call
deploy {env}`` answered ``input_required``, then its retry with the state. Raw HTTP/1.1 on
uvloop, parsed by llhttp, so that the client costs as little of the shared cores as it can.
Every answer is checked (the retry must deploy the connection's own environment); the JSON it
prints holds each round trip's latency in seconds.

    python bench/load_client.py URL CONCURRENCY ROUNDS
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any
from urllib.parse import urlsplit

import httptools

META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
    "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "1"},
}


class Connection(asyncio.Protocol):
    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.body: list[bytes] = []
        self.done: asyncio.Future[bytes] | None = None
        self.transport: Any = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        assert self.done is not None
        self.done.set_result(b"".join(self.body))
        self.body = []

    def connection_lost(self, exc: Exception | None) -> None:
        if self.done is not None and not self.done.done():
            self.done.set_exception(ConnectionError("closed"))

    async def post(self, head: bytes, message: dict[str, Any]) -> Any:
        body = json.dumps(message).encode()
        self.done = asyncio.get_running_loop().create_future()
        self.transport.write(head + b"content-length: %d\r\n\r\n" % len(body) + body)
        answer = await self.done
        if answer.startswith(b"data:") or b"\ndata:" in answer:  # an event stream
            line = next(x for x in answer.split(b"\n") if x.startswith(b"data:"))
            return json.loads(line[5:])
        return json.loads(answer)


async def client(host: str, port: int, path: str, number: int, rounds: int) -> list[float]:
    loop = asyncio.get_running_loop()
    _, connection = await loop.create_connection(Connection, host, port)
    head = (
        f"POST {path} HTTP/1.1\r\nhost: {host}:{port}\r\n"
        "content-type: application/json\r\naccept: application/json, text/event-stream\r\n"
        f"x-forwarded-user: user-{number}\r\nmcp-protocol-version: 2026-07-28\r\n"
        "mcp-method: tools/call\r\nmcp-name: deploy\r\n"
    ).encode()
    latencies = []
    for round_ in range(rounds):
        env = f"{number}-{round_}"
        params: dict[str, Any] = {"name": "deploy", "arguments": {"env": env}, "_meta": META}
        started = time.perf_counter()
        first = await connection.post(
            head, {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
        )
        retry = {
            **params,
            "requestState": first["result"]["requestState"],
            "inputResponses": {"confirm": {"action": "accept", "content": {"ok": True}}},
        }
        done = await connection.post(
            head, {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": retry}
        )
        latencies.append(time.perf_counter() - started)
        text = done["result"]["content"][0]["text"]
        if text != f"deployed {env}":
            raise AssertionError(f"{env}: got {text!r}")
    connection.transport.close()
    return latencies


async def main(url: str, concurrency: int, rounds: int) -> dict[str, Any]:
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    started = time.perf_counter()
    results = await asyncio.gather(
        *(client(host, port, parts.path, n, rounds) for n in range(concurrency))
    )
    elapsed = time.perf_counter() - started
    return {"elapsed": elapsed, "latencies": [x for r in results for x in r]}


if __name__ == "__main__":
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # pragma: no cover - the [proxy] extra brings it
        pass
    report = asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
    print(json.dumps(report))
