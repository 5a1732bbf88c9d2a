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
def serving(app: ASGIApp, port: int | None = None, http: str = "auto") -> Iterator[str]:
    """Serve ``app`` on a loopback port in a thread; yields its base URL; stops on exit.

    ``http="h11"`` makes an upstream that accepts any method token ("post" included), so that a
    test sees whatever a proxy lets through.
    """
    chosen = port or free_port()
    config = uvicorn.Config(
        app, host="127.0.0.1", port=chosen, log_level="error", lifespan="on", http=http
    )
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
    base64(JSON), then completes when retried with it; ``initialize`` is answered (a server of
    the handshake era, which ``mrtr-state probe`` reaches after server/discover). Every JSON-RPC
    message it receives is kept in :attr:`received`, so a test can prove that a refused state
    never arrived. ``mode`` is ``json`` or ``sse`` (each response as its own event, after a
    comment line).
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
        if method == "initialize":  # the handshake of the era before 2026-07-28, nothing more
            version = params.get("protocolVersion", "2025-11-25")
            info = {"name": "naive", "version": "0.0.1"}
            result = {"protocolVersion": version, "capabilities": {"tools": {}}, "serverInfo": info}
            return {"jsonrpc": "2.0", "id": message["id"], "result": result}
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


PLAIN = "PLAIN-STATE-eyJzZWNyZXQiOnRydWV9"
#: Messages a client may read as a response while the proxy, by its first reading, would not.
_ODD_MESSAGES: dict[str, dict[str, Any]] = {
    "method-null": {"method": None},
    "method-number": {"method": 1},
    "method-null-sse": {"method": None},
    "id-upper": {"ID": 41},
    "id-upper-sse": {"ID": 41},
    "id-upper-batch": {"Id": 41},
}
#: Events whose data field a lenient client may read and a browser does not: what precedes
#: the JSON-RPC message in each.
_ODD_EVENTS = {
    "sse-data-space": b"data : ",
    "sse-space-data": b" data: ",
    "sse-upper": b"Data: ",
    "sse-nul": b": \x00\ndata: ",
    "sse-not-utf8": b": \xff\xfe\ndata: ",
    # a comment or id a client splitting lines as str.splitlines does reads as data
    "sse-ls-comment": b": x\xe2\x80\xa8data: ",
    "sse-ps-comment": b": x\xe2\x80\xa9data: ",
    "sse-nel-comment": b": x\xc2\x85data: ",
    "sse-ff-comment": b": x\x0cdata: ",
    "sse-vt-comment": b": x\x0bdata: ",
    "sse-rs-comment": b": x\x1edata: ",
    "sse-ls-id": b"id: 7\xe2\x80\xa8data: ",
}


class ScriptedUpstream:
    """An upstream that answers each ``tools/call`` as its tool name scripts, to try every way a
    server's plain state could slip past the proxy. Records every message it receives, every
    connection it sees, and the GET streams open right now.

    ``deploy`` answers input_required (JSON) with :data:`PLAIN` as the state, and completes when
    retried; ``big-sse`` sends a 5 MiB input_required event; ``cr-eof`` ends the stream right
    after an event framed by a lone CR; ``unterminated`` ends it inside the event; ``gzip``
    compresses its JSON answer; ``dup-json`` hides the state in a duplicate ``result``;
    ``text-json`` answers JSON as text/plain; ``object-state`` sends a non-string state;
    ``case-state`` spells the member ``RequestState``; ``slow`` answers after ``seconds``.
    Content types a client may read otherwise than the proxy: ``two-types`` (Content-Type sent
    twice), ``listed-type`` (``text/event-stream, text/event-stream``), ``no-type`` (JSON with
    none), ``latin1-json`` (a charset other than UTF-8). Events a lenient client may read as data:
    ``sse-data-space`` (``data :``), ``sse-space-data`` (`` data:``), ``sse-upper`` (``Data:``),
    ``sse-nul`` (a NUL in the event), ``sse-not-utf8`` (bytes that are not UTF-8 in a comment).
    Messages some client reads as a response: ``method-null``, ``method-number`` (a method
    beside the result), ``id-upper`` (``ID``), as JSON, in an event (``-sse``) or a batch.
    A GET opens a stream that stays open until the connection goes away.
    """

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []
        self.requests: list[tuple[str, bytes]] = []  # (method, target) of every HTTP request
        self.streams = 0
        self.lock = threading.Lock()

    def _result(self, id_: Any, **result: Any) -> bytes:
        return json.dumps({"jsonrpc": "2.0", "id": id_, "result": result}).encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await NaiveServer()(scope, receive, send)
            return
        target = scope["raw_path"] + (
            b"?" + scope["query_string"] if scope["query_string"] else b""
        )
        with self.lock:
            self.requests.append((scope["method"], target))
        if scope["method"] == "GET":
            with self.lock:
                self.streams += 1
            try:
                headers = [(b"content-type", b"text/event-stream")]
                await send({"type": "http.response.start", "status": 200, "headers": headers})
                await send({"type": "http.response.body", "body": b": open\n\n", "more_body": True})
                while (await receive())["type"] != "http.disconnect":
                    pass
            finally:
                with self.lock:
                    self.streams -= 1
            return
        body = b""
        while True:
            event = await receive()
            body += event.get("body", b"")
            if not event.get("more_body"):
                break
        message = json.loads(body) if body else {}
        with self.lock:
            self.received.extend(message if isinstance(message, list) else [message])
        if not isinstance(message, dict) or "id" not in message:
            await send({"type": "http.response.start", "status": 202, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        id_ = message["id"]
        params = message.get("params") or {}
        name = params.get("name")
        state = {"resultType": "input_required", "requestState": PLAIN}
        content_type, payload, encoding = b"application/json", self._result(id_, **state), None
        if name == "deploy" and "requestState" in params:
            payload = self._result(id_, content=[{"type": "text", "text": params["requestState"]}])
        elif name == "big-sse":
            big = {**state, "inputRequests": {"pad": {"method": "x", "params": "y" * (5 << 20)}}}
            payload = b"data: " + self._result(id_, **big) + b"\n\n"
            content_type = b"text/event-stream"
        elif name == "cr-eof":
            payload = b": first\r\rdata: " + self._result(id_, **state) + b"\r\r"
            content_type = b"text/event-stream"
        elif name == "unterminated":
            payload = b"data: " + self._result(id_, **state)
            content_type = b"text/event-stream"
        elif name == "gzip":
            import gzip

            payload, encoding = gzip.compress(payload), b"gzip"
        elif name == "dup-json":
            payload = payload[:-1] + b', "result": {"content": []}}'
        elif name == "text-json":
            content_type = b"text/plain"
        elif name in ("two-types", "listed-type"):
            payload = b"data: " + self._result(id_, **state) + b"\n\n"
            content_type = b"text/event-stream"
        elif name == "no-type":
            content_type = b""
        elif name == "latin1-json":
            content_type = b"application/json; charset=iso-8859-1"
        elif name in _ODD_MESSAGES:  # read as a response by some client, as a request by others
            odd = {"jsonrpc": "2.0", **_ODD_MESSAGES[name], "result": state}
            if "method" in odd:
                odd["id"] = id_
            payload = json.dumps(odd).encode()
            if name.endswith("-sse"):
                payload, content_type = b"data: " + payload + b"\n\n", b"text/event-stream"
            elif name.endswith("-batch"):
                payload = b"[" + payload + b"]"
        elif name in _ODD_EVENTS:
            payload = _ODD_EVENTS[name] + self._result(id_, **state) + b"\n\n"
            content_type = b"text/event-stream"
        elif name == "object-state":
            payload = self._result(id_, resultType="input_required", requestState={"s": PLAIN})
        elif name == "case-state":
            payload = self._result(id_, resultType="input_required", RequestState=PLAIN)
        elif name == "slow":  # a tool still working when the proxy is told to stop
            import asyncio

            await asyncio.sleep(float((params.get("arguments") or {}).get("seconds", 1.5)))
            payload = self._result(id_, content=[{"type": "text", "text": "slow done"}])
        headers = [(b"content-type", content_type)] if content_type else []
        if name == "two-types":
            headers.append((b"content-type", b"text/event-stream"))
        elif name == "listed-type":
            headers = [(b"content-type", b"text/event-stream, text/event-stream")]
        if encoding is not None:
            headers.append((b"content-encoding", encoding))
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        if content_type == b"text/event-stream":
            for start in range(0, len(payload), 65536):
                chunk = payload[start : start + 65536]
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
            return
        await send({"type": "http.response.body", "body": payload})


class RecordingUpstream:
    """An upstream that records every HTTP request it gets whole: method, target, the header
    fields (names as its parser gives them, lower case) and the body. Answers a JSON-RPC request
    with an empty result and a notification with 202. For the framing tests: what reached the
    server, and with which header section."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, bytes, list[tuple[bytes, bytes]], bytes]] = []
        self.lock = threading.Lock()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await NaiveServer()(scope, receive, send)
            return
        body = b""
        while True:
            event = await receive()
            body += event.get("body", b"")
            if not event.get("more_body"):
                break
        query = scope["query_string"]
        target = scope["raw_path"] + (b"?" + query if query else b"")
        with self.lock:
            self.requests.append((scope["method"], target, list(scope["headers"]), body))
        message = json.loads(body) if body else None
        if isinstance(message, dict) and "id" in message:
            answer = json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": {}}).encode()
            headers = [(b"content-type", b"application/json")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": answer})
            return
        await send({"type": "http.response.start", "status": 202, "headers": []})
        await send({"type": "http.response.body", "body": b""})
