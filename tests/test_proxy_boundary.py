"""The proxy as a boundary under load and abuse (issue 44), over raw sockets, under both parsers.

What is tried here, as an attacker would: bodies whose meaning depends on the reader (refused,
logged and counted by reason; the differential proof against real readers is in
test_proxy_body_readers), bodies that never finish (cut off, their connections closed),
hundreds of dripping connections against a process limited to 256 files, stores that are slow,
locked or gone (only the retry that needs them waits, and it gets its own id back), principals
padded with characters other than SP and HTAB, upstream answers that arrive late or answer
another request, HEAD on the admin listener, and an eviction policy changed at run time.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sqlite3
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, MutableMapping
from pathlib import Path
from typing import Any

import pytest

import mrtr_state as ms

from .helpers import ProxyProcess, Reply, call, private_redis
from .servers import NaiveServer, free_port, serving

PARSERS = ["httptools", "h11"]
JSON = b"Content-Type: application/json\r\n"
ALICE = b"X-Forwarded-User: alice\r\n"
#: a client done after one request (the proxy closes at once: nothing to wait for)
ONCE = b"Connection: close\r\n"


@pytest.fixture
def keyset_path(tmp_path: Path) -> Path:
    path = tmp_path / "keyset.json"
    ms.Keyset.generate(("A256GCM",)).save(path)
    return path


def post(body: Any, *headers: bytes, target: bytes = b"/mcp") -> bytes:
    """A POST of ``body`` (JSON, or bytes as they are) with ``headers`` (whole lines)."""
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return (
        b"POST " + target + b" HTTP/1.1\r\nHost: proxy\r\n"
        + b"".join(headers)
        + b"Content-Length: %d\r\n\r\n" % len(content)
        + content
    )  # fmt: skip


def exchange(port: int, raw: bytes, timeout: float = 10) -> tuple[Reply, bool]:
    """Send ``raw`` on a new connection; the first response, and whether the proxy then closed
    the connection (within two seconds)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(raw)
        received = b""
        while not _whole(received):
            chunk = sock.recv(65536)
            if not chunk:
                return Reply(received), True
            received += chunk
        sock.settimeout(2)
        try:
            closed = sock.recv(1) == b""
        except (TimeoutError, ConnectionResetError):
            closed = False
    return Reply(received), closed


def _whole(received: bytes) -> bool:
    _head, sep, body = received.partition(b"\r\n\r\n")
    if not sep:
        return False
    length = Reply(received).headers.get(b"content-length")
    return length is not None and len(body) >= int(length)


def admin(port: int, path: str, method: str = "GET") -> tuple[int, bytes, float]:
    started = time.monotonic()
    asked = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method)
    try:
        with urllib.request.urlopen(asked, timeout=10) as answer:
            return answer.status, answer.read(), time.monotonic() - started
    except urllib.error.HTTPError as err:
        with err:
            return err.code, err.read(), time.monotonic() - started


def counted(metrics: bytes, name: str, **labels: str) -> float:
    """The value of one sample of ``name`` with exactly ``labels`` (0 when absent)."""
    for line in metrics.decode().splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        shown = line[len(name) :].partition(" ")[0]
        want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        got = ",".join(sorted(shown.strip("{}").split(","))) if shown else ""
        if got == want:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


# --- one meaning for the bytes forwarded ------------------------------------------------------

FORGED = {
    "jsonrpc": "2.0",
    "id": 5,
    "method": "tools/call",
    "params": {"name": "deploy", "arguments": {"env": "prod"}, "requestState": "eyJlbnYiOiAxfQ"},
}


@pytest.mark.parametrize("parser", PARSERS)
@pytest.mark.parametrize(
    ("headers", "body", "status", "kind", "closed"),
    [
        pytest.param(
            [b"Content-Type: text/plain\r\n"], FORGED, 415, "media_type", True, id="text-plain"
        ),
        pytest.param([], FORGED, 415, "media_type", True, id="no-content-type"),
        pytest.param(
            [b"Content-Type: application/json; charset=utf-7\r\n"],
            json.dumps(FORGED).replace("requestState", "+AHI-equestState").encode(),
            415,
            "media_type",
            True,
            id="utf-7",
        ),
        pytest.param(
            [b"Content-Type: application/json; charset=utf-8; charset=utf-7\r\n"],
            FORGED,
            415,
            "media_type",
            True,
            id="two-charsets",
        ),
        pytest.param(
            [JSON, b"Content-Encoding: gzip\r\n"], FORGED, 415, "content_encoding", True, id="gzip"
        ),
        pytest.param(
            [JSON], b"\xef\xbb\xbf" + json.dumps(FORGED).encode(), 415, "bom", False, id="bom"
        ),
        pytest.param(
            [JSON],
            json.dumps(FORGED).replace('"requestState"', '"requestState\\u0000"').encode(),
            400,
            "control_in_name",
            False,
            id="nul-in-a-name",
        ),
    ],
)
def test_a_body_of_unfixed_meaning_is_refused_logged_and_counted(
    keyset_path: Path,
    parser: str,
    headers: list[bytes],
    body: Any,
    status: int,
    kind: str,
    closed: bool,
) -> None:
    upstream = NaiveServer()
    port = free_port()
    with serving(upstream) as upstream_url:
        proxy = ProxyProcess(keyset_path, upstream_url, "--admin-listen", str(port), parser=parser)
        try:
            reply, was_closed = exchange(proxy.port, post(body, ALICE, *headers))
            assert reply.status == status, reply.raw
            assert reply.json()["error"]["code"] == -32600
            # answered before the body was read: the connection is closed, never drained
            assert (reply.headers.get(b"connection") == b"close") == closed
            assert was_closed or not closed
            line = proxy.logged("kind", kind)
            assert line["event"] == "refused" and line["status"] == status
            metrics = admin(port, "/metrics")[1]
            total = "mrtr_state_proxy_refused_requests_total"
            assert counted(metrics, total, status=str(status), reason=kind) == 1.0
        finally:
            proxy.stop()
    assert upstream.received == []


@pytest.mark.parametrize("parser", PARSERS)
@pytest.mark.parametrize(
    "spelling",
    [b"application/json", b"application/json; charset=utf-8", b'Application/JSON;charset="UTF-8"'],
)
def test_json_in_utf_8_said_any_way_passes(keyset_path: Path, parser: str, spelling: bytes) -> None:
    upstream = NaiveServer()
    with serving(upstream) as upstream_url:
        proxy = ProxyProcess(keyset_path, upstream_url, parser=parser)
        try:
            first_call = call("deploy", arguments={"env": "prod"})
            first, _ = exchange(proxy.port, post(first_call, ALICE, JSON, ONCE))
            token = first.json()["result"]["requestState"]
            retry = call("deploy", 2, arguments={"env": "prod"}, requestState=token)
            raw = post(retry, ALICE, b"Content-Type: " + spelling + b"\r\n")
            answered, _ = exchange(proxy.port, raw)
            assert answered.json()["result"]["content"][0]["text"] == "deployed prod"
        finally:
            proxy.stop()


# --- bodies that never finish ---------------------------------------------------------------------


def _drip_until_closed(sock: socket.socket, seconds: float) -> tuple[bytes, float | None]:
    """Send a byte every 0.2 s for ``seconds``; what came back, and when the proxy closed."""
    started = time.monotonic()
    received = b""
    sock.settimeout(0.2)
    while time.monotonic() - started < seconds:
        try:
            sock.sendall(b" ")
        except OSError:
            return received, time.monotonic() - started
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            continue
        except ConnectionResetError:
            return received, time.monotonic() - started
        if not chunk:
            return received, time.monotonic() - started
        received += chunk
    return received, None


@pytest.mark.parametrize("parser", PARSERS)
@pytest.mark.parametrize(
    ("head", "status"),
    [
        pytest.param(b"POST /mcp HTTP/1.1\r\nHost: p\r\n" + JSON, 401, id="no-principal"),
        pytest.param(b"POST /elsewhere HTTP/1.1\r\nHost: p\r\n" + ALICE + JSON, 404, id="no-path"),
        pytest.param(b"POST /mcp HTTP/1.1\r\nHost: p\r\n" + ALICE, 415, id="no-type"),
        pytest.param(
            b"POST /mcp HTTP/1.1\r\nHost: p\r\n" + ALICE + b"Content-Encoding: br\r\n" + JSON,
            415,
            id="encoded",
        ),
    ],
)
def test_a_request_answered_before_its_body_is_closed_not_drained(
    keyset_path: Path, parser: str, head: bytes, status: int
) -> None:
    """Found by an attack (issue 44): after the 401 a dripping body held its connection for ever."""
    upstream = NaiveServer()
    with serving(upstream) as upstream_url:
        proxy = ProxyProcess(keyset_path, upstream_url, parser=parser)
        try:
            with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as sock:
                sock.sendall(head + b"Content-Length: 100000\r\n\r\n{")
                received, closed_at = _drip_until_closed(sock, 6)
            reply = Reply(received)
            assert reply.status == status and reply.headers.get(b"connection") == b"close"
            assert closed_at is not None and closed_at < 3
        finally:
            proxy.stop()
    assert upstream.received == []


@pytest.mark.parametrize("parser", PARSERS)
@pytest.mark.parametrize("framing", ["length", "chunked"])
def test_a_body_that_does_not_come_in_time_is_408_and_closed(
    keyset_path: Path, parser: str, framing: str
) -> None:
    upstream = NaiveServer()
    with serving(upstream) as upstream_url:
        proxy = ProxyProcess(keyset_path, upstream_url, "--body-timeout", "1s", parser=parser)
        try:
            with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as sock:
                size = b"Content-Length: 1000\r\n" if framing == "length" else b""
                chunks = b"Transfer-Encoding: chunked\r\n" if framing == "chunked" else b""
                sock.sendall(b"POST /mcp HTTP/1.1\r\nHost: p\r\n" + ALICE + JSON + size + chunks)
                sock.sendall(b"\r\n" + (b"400\r\n{" if framing == "chunked" else b"{"))
                started = time.monotonic()
                received, closed_at = _drip_until_closed(sock, 8)
            assert Reply(received).status == 408
            assert closed_at is not None and 0.8 < closed_at < 4
            assert time.monotonic() - started < 5
            assert proxy.logged("kind", "body_timeout")["status"] == 408
        finally:
            proxy.stop()
    assert upstream.received == []


def test_hundreds_of_dripping_connections_neither_exhaust_files_nor_stall_a_client(
    keyset_path: Path,
) -> None:
    """The attack of issue 44 (242 dripping connections took all of 256 descriptors), against
    a proxy limited to 256 open files: waves of 120 connections drip their bodies a byte at a
    time (half of them answered 401 at once, half waiting on their body); every one is cut
    off, and a client making ordinary calls meanwhile is served in well under a second."""
    upstream = NaiveServer()
    with serving(upstream) as upstream_url:
        proxy = ProxyProcess(keyset_path, upstream_url, "--body-timeout", "2s", open_files=256)
        stop = threading.Event()
        slowest: list[float] = []
        failures: list[str] = []

        def client() -> None:
            while not stop.is_set():
                started = time.monotonic()
                try:
                    first = post(call("deploy", arguments={"env": "x"}), ALICE, JSON, ONCE)
                    reply, _ = exchange(proxy.port, first, 5)
                    assert reply.json()["result"]["resultType"] == "input_required"
                except (OSError, AssertionError, ValueError) as err:
                    failures.append(repr(err))
                slowest.append(time.monotonic() - started)
                time.sleep(0.1)

        def drip(sock: socket.socket) -> None:
            try:
                _drip_until_closed(sock, 6)
            finally:
                sock.close()

        worker = threading.Thread(target=client, daemon=True)
        worker.start()
        try:
            drippers: list[threading.Thread] = []
            for wave in range(3):
                for n in range(120):
                    sock = socket.create_connection(("127.0.0.1", proxy.port), timeout=10)
                    who = ALICE if n % 2 else b""  # none: 401 at once; else: wait on the body
                    sock.sendall(
                        b"POST /mcp HTTP/1.1\r\nHost: p\r\n" + who + JSON
                        + b"Content-Length: 100000\r\n\r\n{"
                    )  # fmt: skip
                    thread = threading.Thread(target=drip, args=(sock,), daemon=True)
                    thread.start()
                    drippers.append(thread)
                time.sleep(1.0 + wave * 0.2)
            for thread in drippers:
                thread.join(15)
            assert not any(thread.is_alive() for thread in drippers)
            open_now = len(os.listdir(f"/proc/{proxy.process.pid}/fd"))
        finally:
            stop.set()
            worker.join(10)
            proxy.stop()
    assert failures == [] and slowest and max(slowest) < 1.0, (failures, max(slowest))
    assert open_now < 64  # every dripping connection's descriptor was given back
    refused = [line for line in proxy.log if line.get("event") == "refused"]
    assert sum(line.get("kind") == "body_timeout" for line in refused) >= 150
    assert not any("Too many open files" in line for line in proxy.stderr)


# --- nothing on the event loop waits for a store ------------------------------------------------


class SlowForwarder:
    """A TCP forwarder to ``port`` that holds every piece of data sent either way for ``delay``
    seconds: a Redis that answers, slowly."""

    def __init__(self, port: int, delay: float) -> None:
        self.target = port
        self.delay = delay
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                time.sleep(self.delay)
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.server.close()


def _first_state(proxy: ProxyProcess, env: str = "prod") -> str:
    reply, _ = exchange(proxy.port, post(call("deploy", arguments={"env": env}), ALICE, JSON, ONCE))
    token: str = reply.json()["result"]["requestState"]
    return token


def _retry(proxy: ProxyProcess, token: str, id_: Any = 2, env: str = "prod") -> dict[str, Any]:
    retry = call("deploy", id_, arguments={"env": env}, requestState=token)
    reply, _ = exchange(proxy.port, post(retry, ALICE, JSON, ONCE), timeout=30)
    answer: dict[str, Any] = reply.json()
    return answer


def _meanwhile(proxy: ProxyProcess, admin_port: int) -> list[float]:
    """How long an unrelated first call, /healthz, /readyz and /metrics each took."""
    times = []
    started = time.monotonic()
    exchange(proxy.port, post(call("deploy", 9, arguments={"env": "other"}), ALICE, JSON, ONCE))
    times.append(time.monotonic() - started)
    for path in ("/healthz", "/readyz", "/metrics"):
        times.append(admin(admin_port, path)[2])
    return times


def test_a_slow_redis_replay_store_stalls_only_the_retry_that_needs_it(
    keyset_path: Path,
) -> None:
    """Found by an attack (issue 44): with --once and a Redis 1.5 s away, one retry stalled
    every other request and /healthz for 10 s. Now the retry waits alone."""
    upstream = NaiveServer()
    admin_port = free_port()
    with private_redis() as (_server, url), serving(upstream) as upstream_url:
        forwarder = SlowForwarder(int(url.split(":")[2].split("/")[0]), 0.6)
        proxy = ProxyProcess(
            keyset_path,
            upstream_url,
            "--once",
            "--replay-store",
            f"redis://127.0.0.1:{forwarder.port}/0",
            "--admin-listen",
            str(admin_port),
        )
        try:
            token = _first_state(proxy)
            answers: list[dict[str, Any]] = []
            waiting = threading.Thread(target=lambda: answers.append(_retry(proxy, token)))
            started = time.monotonic()
            waiting.start()
            time.sleep(0.3)  # the retry is waiting on the store now
            during = _meanwhile(proxy, admin_port)
            waiting.join(30)
            took = time.monotonic() - started
            assert answers[0]["result"]["content"][0]["text"] == "deployed prod"
            assert took > 1.0  # it did wait on the slow store
            assert max(during) < 0.5, during
            assert _retry(proxy, token, 3)["error"]["code"] == -32602  # once, as ever
        finally:
            proxy.stop()
            forwarder.close()
    assert len(upstream.retries()) == 1


def test_a_locked_sqlite_replay_store_stalls_only_its_retry_which_gets_its_own_id(
    keyset_path: Path, tmp_path: Path
) -> None:
    upstream = NaiveServer()
    admin_port = free_port()
    store = tmp_path / "replay.db"
    with serving(upstream) as upstream_url:
        proxy = ProxyProcess(
            keyset_path,
            upstream_url,
            "--once",
            "--replay-store",
            f"sqlite:///{store}?timeout=2",
            "--admin-listen",
            str(admin_port),
        )
        try:
            token = _first_state(proxy)
            locker = sqlite3.connect(store, isolation_level=None)
            locker.execute("BEGIN EXCLUSIVE")  # another process holds the file
            try:
                answers: list[dict[str, Any]] = []
                waiting = threading.Thread(
                    target=lambda: answers.append(_retry(proxy, token, "retry-7"))
                )
                waiting.start()
                time.sleep(0.3)
                during = _meanwhile(proxy, admin_port)
                waiting.join(30)
            finally:
                locker.execute("ROLLBACK")
                locker.close()
            assert max(during) < 0.5, during
            assert answers[0] == {
                "jsonrpc": "2.0",
                "id": "retry-7",
                "error": {"code": -32603, "message": "replay store unavailable"},
            }
            line = proxy.logged("result", "replay_store_unavailable")
            assert line["event"] == "refused" and "replay.db" in line["reason"]
            metrics = admin(admin_port, "/metrics")[1]
            states = "mrtr_state_proxy_states_total"
            labels = {"event": "refused", "format": "aead", "reason": "replay_store_unavailable"}
            assert counted(metrics, states, **labels) == 1.0
        finally:
            proxy.stop()
    assert upstream.retries() == []


def test_a_replay_store_that_went_away_answers_the_retry_with_its_own_id(
    keyset_path: Path,
) -> None:
    """Found by an attack (issue 44): the vanished store's retry got HTTP 500 with id null."""
    upstream = NaiveServer()
    with private_redis() as (server, url), serving(upstream) as upstream_url:
        proxy = ProxyProcess(keyset_path, upstream_url, "--once", "--replay-store", url)
        try:
            token = _first_state(proxy)
            server.kill()
            server.wait(10)
            answer = _retry(proxy, token, 41)
            assert answer == {
                "jsonrpc": "2.0",
                "id": 41,
                "error": {"code": -32603, "message": "replay store unavailable"},
            }
            assert proxy.logged("result", "replay_store_unavailable")["method"] == "tools/call"
        finally:
            proxy.stop()
    assert upstream.retries() == []


# --- principals -------------------------------------------------------------------------------


@pytest.mark.parametrize("parser", PARSERS)
def test_only_sp_and_htab_are_trimmed_from_a_principal(keyset_path: Path, parser: str) -> None:
    """Found by an attack (issue 44): ``\\x85alice\\xa0`` was stripped to ``alice``."""
    upstream = NaiveServer()
    with serving(upstream) as upstream_url:
        proxy = ProxyProcess(keyset_path, upstream_url, parser=parser)
        try:

            def round_trip(first: bytes, second: bytes) -> dict[str, Any]:
                first_call = call("deploy", arguments={"env": "p"})
                reply, _ = exchange(proxy.port, post(first_call, first, JSON, ONCE))
                token = reply.json()["result"]["requestState"]
                retry = call("deploy", 2, arguments={"env": "p"}, requestState=token)
                answered, _ = exchange(proxy.port, post(retry, second, JSON))
                result: dict[str, Any] = answered.json()
                return result

            padded = b"X-Forwarded-User: \x85alice\xa0\r\n"
            assert round_trip(padded, ALICE)["error"]["code"] == -32602
            assert round_trip(ALICE, padded)["error"]["code"] == -32602
            assert "result" in round_trip(padded, padded)
            assert "result" in round_trip(b"X-Forwarded-User: \t alice \t\r\n", ALICE)
        finally:
            proxy.stop()


def test_a_principal_holding_a_control_character_is_refused_by_the_app(keyset_path: Path) -> None:
    """The framer refuses control characters in any header; the app refuses them again where it
    reads the principal (it decides whose a state is), whatever server runs it."""
    import asyncio

    from mrtr_state.proxy.app import ProxyApp

    from .helpers import token_guard

    app = ProxyApp(
        token_guard(ms.Keyset.load(keyset_path)),
        upstream="http://127.0.0.1:9/mcp",
        principal_header="X-Forwarded-User",
    )
    sent: list[dict[str, Any]] = []

    async def run(value: bytes) -> None:
        scope = {
            "type": "http",
            "method": "POST",
            "raw_path": b"/mcp",
            "query_string": b"",
            "headers": [(b"x-forwarded-user", value), (b"content-type", b"application/json")],
        }

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b"{}", "more_body": False}

        async def send(message: MutableMapping[str, Any]) -> None:
            sent.append(dict(message))

        await app(scope, receive, send)

    for value in (b"ali\x01ce", b"alice\x7f", b"\x00alice"):
        sent.clear()
        asyncio.run(run(value))
        assert sent[0]["status"] == 400, value
        assert b"control character" in sent[1]["body"]


# --- pooled upstream connections --------------------------------------------------------------


class LateUpstream:
    """A raw upstream: answers each request with ``answer(request)`` and, ``late`` seconds
    later, sends one more response nobody asked for on the same connection. Counts the
    connections it accepted."""

    def __init__(self, answer: Any, late: float | None = None, events: bool = False) -> None:
        self.answer = answer
        self.late = late
        self.events = events
        self.connections = 0
        self.requests: list[dict[str, Any]] = []
        self.server = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.server.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self.server.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(connection,), daemon=True).start()

    def _respond(self, message: dict[str, Any]) -> bytes:
        body = json.dumps(message).encode()
        if self.events:
            body = b"data: " + body + b"\n\n"
        kind = b"text/event-stream" if self.events else b"application/json"
        return b"HTTP/1.1 200 OK\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s" % (
            kind,
            len(body),
            body,
        )

    def _serve(self, connection: socket.socket) -> None:
        buffer = b""
        with connection:
            while True:
                while b"\r\n\r\n" not in buffer:
                    chunk = connection.recv(65536)
                    if not chunk:
                        return
                    buffer += chunk
                head, _, buffer = buffer.partition(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                while len(buffer) < length:
                    buffer += connection.recv(65536)
                body, buffer = buffer[:length], buffer[length:]
                request = json.loads(body)
                self.requests.append(request)
                connection.sendall(self._respond(self.answer(request)))
                if self.late is not None:
                    time.sleep(self.late)
                    late = {"jsonrpc": "2.0", "id": request["id"], "result": {"late": True}}
                    connection.sendall(self._respond(late))

    def close(self) -> None:
        self.server.close()


def _ping(id_: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id_, "method": "ping"}


@pytest.mark.parametrize("parser", PARSERS)
def test_a_pooled_connection_holding_a_late_answer_is_never_reused(
    keyset_path: Path, parser: str
) -> None:
    """Found by an attack (issue 44): an answer the upstream sent after the one asked for, left
    on a pooled connection, could be read as the next client's answer. Each client here sends
    the same id (clients start at 1)."""
    upstream = LateUpstream(lambda r: {"jsonrpc": "2.0", "id": r["id"], "result": {}}, late=0.2)
    proxy = ProxyProcess(keyset_path, upstream.url, upstream_path="/mcp", parser=parser)
    try:
        for _ in range(3):
            reply, _ = exchange(proxy.port, post(_ping(1), ALICE, JSON))
            assert reply.json() == {"jsonrpc": "2.0", "id": 1, "result": {}}
            time.sleep(0.4)  # the late answer has arrived on the pooled connection by now
    finally:
        proxy.stop()
        upstream.close()
    assert upstream.connections >= 3  # a new connection each time (the probe's aside)


@pytest.mark.parametrize("events", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("parser", PARSERS)
def test_an_answer_whose_id_is_not_the_requests_is_refused_and_its_connection_closed(
    keyset_path: Path, parser: str, events: bool
) -> None:
    answer = {"jsonrpc": "2.0", "id": 999, "result": {"resultType": "input_required",
              "inputRequests": {}, "requestState": "PLAIN"}}  # fmt: skip
    upstream = LateUpstream(lambda r: answer, events=events)
    proxy = ProxyProcess(keyset_path, upstream.url, upstream_path="/mcp", parser=parser)
    try:
        before = upstream.connections
        for n in range(2):
            reply, _ = exchange(proxy.port, post(call("deploy", 7 + n), ALICE, JSON))
            assert b"PLAIN" not in reply.raw and b"999" not in reply.raw
            if events:
                data = [line for line in reply.body.split(b"\n") if line.startswith(b"data:")]
                (message,) = [json.loads(line[5:]) for line in data]
            else:
                assert reply.status == 502
                message = reply.json()
            assert message["error"]["code"] == -32603
        assert proxy.logged("result", "foreign_answer")["event"] == "refused"
    finally:
        proxy.stop()
        upstream.close()
    assert upstream.connections - before >= 2  # the one that carried it was not reused


# --- the admin listener -----------------------------------------------------------------------


@pytest.mark.parametrize("parser", PARSERS)
def test_head_on_healthz_and_readyz_answers_as_get_without_a_body(
    keyset_path: Path, parser: str
) -> None:
    upstream = NaiveServer()
    admin_port = free_port()
    with serving(upstream) as upstream_url:
        proxy = ProxyProcess(
            keyset_path, upstream_url, "--admin-listen", str(admin_port), parser=parser
        )
        try:
            for path in ("/healthz", "/readyz"):
                got = admin(admin_port, path)
                status, body, _ = admin(admin_port, path, "HEAD")
                assert status == got[0] == 200 and body == b"" and got[1]
            assert admin(admin_port, "/healthz", "PUT")[0] == 405
        finally:
            proxy.stop()


# --- a store's eviction policy, changed at run time ---------------------------------------------


@pytest.fixture
def redis_url() -> Iterator[str]:
    with private_redis() as (_server, url):
        yield url


def test_an_eviction_policy_switched_at_run_time_is_seen_within_five_seconds(
    redis_url: str,
) -> None:
    import redis

    from mrtr_state.state.handle_store import open_handle_store
    from mrtr_state.state.redis.watch import CHECK_EVERY

    client = redis.Redis.from_url(redis_url)
    handles = open_handle_store(redis_url)
    replay = ms.open_store(redis_url)
    handles.put("mrtr-state:state:a", b"x" * 60, time.time() + 60)
    assert replay.redeem("jti:a", time.time() + 60, now=time.time())
    client.config_set("maxmemory", "512mb")
    client.config_set("maxmemory-policy", "allkeys-lru")
    try:
        switched = time.monotonic()
        deadline = switched + CHECK_EVERY + 2

        def filing() -> None:
            handles.put(f"mrtr-state:state:{time.monotonic()}", b"x" * 60, time.time() + 60)

        assert "may evict records" in _until_refused(filing, ms.StateStoreError, deadline)
        assert time.monotonic() - switched <= CHECK_EVERY + 0.5

        def redeeming() -> None:
            replay.redeem(f"jti:{time.monotonic()}", time.time() + 60, now=time.time())

        assert "may evict keys" in _until_refused(redeeming, ms.ReplayStoreError, deadline)
    finally:
        client.config_set("maxmemory-policy", "noeviction")
        client.config_set("maxmemory", "0")
        handles.close()
        replay.close()


def _until_refused(operation: Any, error: type[Exception], deadline: float) -> str:
    """Run ``operation`` every 0.2 s until it raises ``error``; its message."""
    while True:
        try:
            operation()
        except error as err:
            return str(err)
        assert time.monotonic() < deadline, "the switch was never seen"
        time.sleep(0.2)


def test_a_new_connection_is_judged_before_its_first_command(redis_url: str) -> None:
    """A reconnection (a restart, a failover) to a server that now may evict is refused at
    once, not at the next periodic look."""
    import redis

    from mrtr_state.state.handle_store import open_handle_store

    client = redis.Redis.from_url(redis_url)
    handles = open_handle_store(redis_url)
    handles.put("mrtr-state:state:a", b"x" * 60, time.time() + 60)
    client.config_set("maxmemory", "512mb")
    client.config_set("maxmemory-policy", "volatile-lru")
    try:
        client.client_kill_filter(_type="normal", skipme=True)  # the store's link is cut
        # a command sent before the store saw its link close fails closed ("the connection
        # closed"); the next opens a new link, judged before anything is sent on it
        refusals = []
        for _ in range(2):
            with pytest.raises(ms.StateStoreError) as refused:
                handles.take("mrtr-state:state:a", "x" * 43)
            refusals.append(str(refused.value))
            if "may evict records" in refusals[-1]:
                break
        assert "may evict records" in refusals[-1], refusals
    finally:
        client.config_set("maxmemory-policy", "noeviction")
        client.config_set("maxmemory", "0")
        handles.close()
