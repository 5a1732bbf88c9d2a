"""Servers the probe is tried against (tests/test_probe*.py): the official Python SDK's with its
requestState protection on and off, the TypeScript SDK's with createRequestStateCodec, a naive
server that leaks its tracebacks, and raw sockets that answer garbage, hang or hang up."""

from __future__ import annotations

import base64
import contextlib
import json
import shutil
import socket
import subprocess
import threading
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.request_state import RequestStateSecurity
from mcp_types import ElicitRequest, ElicitRequestFormParams, InputRequiredResult
from pydantic import AnyHttpUrl

from .servers import NaiveServer

HERE = Path(__file__).resolve().parent


# --- the official Python SDK (mcp 2.3.0) ---------------------------------------------------------


class PlainCodec:
    """The SDK's protection switched off: its envelope in plain base64, signed by nothing."""

    def seal(self, payload: bytes) -> str:
        return base64.urlsafe_b64encode(payload).decode()

    def unseal(self, token: str) -> bytes:
        return base64.urlsafe_b64decode(token.encode())


class TokenVerifier:
    """Two OAuth bearer tokens, one per client: ``Bearer alice-token`` and ``Bearer
    bob-token``; the SDK binds each state to the token's client (its default principal)."""

    async def verify_token(self, token: str) -> AccessToken | None:
        if token in ("alice-token", "bob-token"):
            return AccessToken(token=token, client_id=token.split("-")[0], scopes=[])
        return None


def sdk_server(protected: bool, *, ttl: float = 600.0, json_response: bool = True) -> Any:
    """The Python SDK's MCPServer behind bearer authentication, its ``deploy`` tool asking for
    a confirmation; its requestState sealed by the SDK (AES-GCM, bound to the request and the
    token's client) when ``protected``, else plain base64."""
    security = (
        RequestStateSecurity(keys=[b"probe-test-secret".ljust(32, b"s")], ttl=ttl)
        if protected
        else RequestStateSecurity(codec=PlainCodec(), bind_principal=None, ttl=ttl)
    )
    server = MCPServer(
        "fleet-py" if protected else "fleet-py-plain",
        version="2.3.0",
        token_verifier=TokenVerifier(),
        auth=AuthSettings(
            issuer_url=AnyHttpUrl("https://auth.example.com"), resource_server_url=None
        ),
        request_state_security=security,
    )

    @server.tool()
    async def deploy(env: str, ctx: Context) -> str | InputRequiredResult:
        if ctx.input_responses is None:
            form = ElicitRequestFormParams(
                message=f"Deploy {env[:20]}?",
                requested_schema={
                    "type": "object",
                    "properties": {"ok": {"type": "boolean"}},
                    "required": ["ok"],
                },
            )
            return InputRequiredResult(
                input_requests={"confirm": ElicitRequest(params=form)},
                request_state=f"confirm:{env}",
            )
        return f"deployed {env[:20]}"

    return server.streamable_http_app(json_response=json_response)


ALICE = ("--header", "Authorization: Bearer alice-token")
BOB = ("--other", "Authorization: Bearer bob-token")


# --- a naive server that tells the client what went wrong -------------------------------------


class LeakyServer(NaiveServer):
    """The naive server, answering a state it cannot read with the Python traceback: the
    error-leaks check's catch."""

    def answer(self, message: dict[str, Any]) -> dict[str, Any] | None:
        try:
            return super().answer(message)
        except Exception:
            error = {"code": -32603, "message": traceback.format_exc()}
            return {"jsonrpc": "2.0", "id": message.get("id"), "error": error}


# --- the TypeScript SDK (@modelcontextprotocol/server 2.4.0) -----------------------------------


@contextlib.contextmanager
def ts_server(sdk_folder: Path, mode: str, ttl: int = 60) -> Iterator[str]:
    """tests/ts/codec_server.mjs run by Node (``mode`` "bind" or "plain"); yields its URL."""
    script = sdk_folder / "codec_server.mjs"
    shutil.copyfile(HERE / "ts" / "codec_server.mjs", script)
    node = subprocess.Popen(
        ["node", str(script), mode, str(ttl)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert node.stdout is not None
        port = json.loads(node.stdout.readline())["port"]
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        node.terminate()
        node.communicate(timeout=10)


# --- raw sockets: servers that cannot be judged -----------------------------------------------


def read_request(conn: socket.socket) -> bytes:
    """One HTTP request's bytes (head and Content-Length body), or what came before EOF."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(body) < length:
        chunk = conn.recv(65536)
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body


class RawServer:
    """A loopback listener whose every connection is handed to ``handler`` (a thread each);
    counts the connections it accepted (``accepted``)."""

    def __init__(self, handler: Callable[[socket.socket], None]) -> None:
        self.handler = handler
        self.accepted = 0
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port: int = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._open: list[socket.socket] = []

    def _serve(self) -> None:
        self.sock.settimeout(0.1)
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.accepted += 1
            self._open.append(conn)
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        with contextlib.suppress(OSError):
            self.handler(conn)

    def __enter__(self) -> RawServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()
        for conn in self._open:
            with contextlib.suppress(OSError):
                conn.close()


def answer_garbage(conn: socket.socket) -> None:
    """Not HTTP at all."""
    read_request(conn)
    conn.sendall(b"hello, this is not HTTP\r\n\r\n")
    conn.close()


def answer_not_json(conn: socket.socket) -> None:
    """HTTP 200, JSON by its type, not JSON by its body."""
    read_request(conn)
    body = b"<html>surprise</html>"
    conn.sendall(
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
        b"Connection: close\r\n\r\n%s" % (len(body), body)
    )
    conn.close()


def hang(conn: socket.socket) -> None:
    """Reads the request and never answers (until the test ends)."""
    read_request(conn)
    threading.Event().wait(30)


def close_mid_body(conn: socket.socket) -> None:
    """Promises 1,000 bytes, sends 20, hangs up."""
    read_request(conn)
    conn.sendall(
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
        b'{"jsonrpc":"2.0","id"'
    )
    conn.close()


def close_mid_stream(conn: socket.socket) -> None:
    """An SSE stream that ends inside the answer's event."""
    read_request(conn)
    conn.sendall(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
        b': hello\n\ndata: {"jsonrpc":"2.0","id":1,"res'
    )
    conn.close()
