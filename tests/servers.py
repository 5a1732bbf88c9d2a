"""Real HTTP servers on loopback for the proxy tests: a runner for ASGI apps, and a naive MCP
server that, like the spec's own example, puts plain base64 JSON in ``requestState``."""

from __future__ import annotations

import base64
import json
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from contextlib import contextmanager
from typing import Any

import uvicorn

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextmanager
def serving(app: ASGIApp, port: int | None = None) -> Iterator[str]:
    """Serve ``app`` on a loopback port in a thread; yields its base URL; stops on exit."""
    chosen = port or free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=chosen, log_level="error", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the test server did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{chosen}"
    finally:
        server.should_exit = True
        thread.join(10)


def encode_state(value: Any) -> str:
    return base64.b64encode(json.dumps(value).encode()).decode()


class NaiveServer:
    """An MCP-shaped Streamable HTTP endpoint that trusts whatever ``requestState`` it gets back.

    ``tools/call deploy {env}`` answers ``input_required`` with an elicitation and the state
    base64(JSON), then completes when retried with it. Every JSON-RPC message it receives is kept
    in :attr:`received`, so a test can prove that a refused state never arrived. ``mode`` is
    ``json`` or ``sse`` (each response as its own event, after a comment line).
    """

    def __init__(self, mode: str = "json") -> None:
        self.mode = mode
        self.received: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def retries(self) -> list[dict[str, Any]]:
        with self.lock:
            return [m for m in self.received if "requestState" in (m.get("params") or {})]

    def answer(self, message: dict[str, Any]) -> dict[str, Any] | None:
        if "id" not in message:
            return None
        method, params = message.get("method"), message.get("params") or {}
        if method == "tools/call" and params.get("name") == "deploy":
            env = (params.get("arguments") or {}).get("env")
            state = params.get("requestState")
            if state is None:
                result: dict[str, Any] = {
                    "resultType": "input_required",
                    "inputRequests": {
                        "confirm": {
                            "method": "elicitation/create",
                            "params": {"message": f"deploy {env}?", "requestedSchema": {}},
                        }
                    },
                    "requestState": encode_state({"step": 1, "env": env}),
                }
            else:
                decoded = json.loads(base64.b64decode(state))
                result = {"content": [{"type": "text", "text": f"deployed {decoded['env']}"}]}
            return {"jsonrpc": "2.0", "id": message["id"], "result": result}
        if method == "ping":
            return {"jsonrpc": "2.0", "id": message["id"], "result": {}}
        return {
            "jsonrpc": "2.0",
            "id": message["id"],
            "error": {"code": -32601, "message": f"no method {method}"},
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while True:
                event = await receive()
                if event["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                else:
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["method"] == "DELETE":
            await send({"type": "http.response.start", "status": 204, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        if scope["method"] == "GET":
            headers = [(b"content-type", b"text/event-stream"), (b"mcp-session-id", b"s-1")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            note = b'data: {"jsonrpc":"2.0","method":"notifications/message","params":{}}\n\n'
            await send({"type": "http.response.body", "body": note, "more_body": True})
            # a response to an earlier POST, as a resumed stream may replay it
            replayed = {
                "jsonrpc": "2.0",
                "id": "old",
                "result": {
                    "resultType": "input_required",
                    "requestState": encode_state({"secret": 1}),
                },
            }
            line = b"data: " + json.dumps(replayed).encode() + b"\n\n"
            await send({"type": "http.response.body", "body": line})
            return
        body = b""
        while True:
            event = await receive()
            body += event.get("body", b"")
            if not event.get("more_body"):
                break
        parsed = json.loads(body)
        messages = parsed if isinstance(parsed, list) else [parsed]
        with self.lock:
            self.received.extend(messages)
        answers = [a for a in (self.answer(m) for m in messages) if a is not None]
        session = [(b"mcp-session-id", b"s-1")]
        if not answers:
            await send({"type": "http.response.start", "status": 202, "headers": session})
            await send({"type": "http.response.body", "body": b""})
            return
        if self.mode == "sse":
            headers = [(b"content-type", b"text/event-stream"), *session]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": b": hello\n\n", "more_body": True})
            for number, answer in enumerate(answers):
                chunk = f"id: e{number}\r\nevent: message\r\ndata: {json.dumps(answer)}\r\n\r\n"
                await send(
                    {"type": "http.response.body", "body": chunk.encode(), "more_body": True}
                )
            await send({"type": "http.response.body", "body": b""})
            return
        payload = json.dumps(answers if isinstance(parsed, list) else answers[0]).encode()
        headers = [(b"content-type", b"application/json"), *session]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": payload})
