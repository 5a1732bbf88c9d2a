"""Helpers tests share: the CLI run in-process, raw HTTP on a socket, the proxy as a process."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from click.testing import CliRunner, Result

from mrtr_state.cli import cli

from .servers import free_port

if TYPE_CHECKING:
    from mrtr_state.proxy.rewrite import StateGuard

ROOT = Path(__file__).resolve().parents[1]
USER = b"X-Forwarded-User: alice\r\n"
#: The environment a CLI test runs in: none of the caller's MRTR_STATE_* settings leak in.
CLEAN_ENV: dict[str, str | None] = {
    name: None for name in os.environ if name.startswith("MRTR_STATE_")
}


def program(name: str, package: str) -> str:
    """The path of ``name``, a program a fresh machine may lack (Node, promtool, redis-server,
    ruby, php, javac, softhsm2-util), else skip the test naming the Debian package that brings
    it. Under CI (``MRTR_STATE_TEST_PROFILE=ci``) a missing program fails instead: ``.ci/run``
    installs every one, so a test that skips there is a test that never runs."""
    found = shutil.which(name)
    if found is not None:
        return found
    reason = f"{name} is not installed (apt-get install {package})"
    if os.environ.get("MRTR_STATE_TEST_PROFILE") == "ci":
        pytest.fail(f"{reason}: .ci/run installs it")
    pytest.skip(reason)


def run(
    *args: str, input: str | bytes | None = None, env: dict[str, str] | None = None, code: int = 0
) -> Result:
    """Run the CLI in-process; assert the exit code and that no traceback escaped."""
    runner = CliRunner()
    result = runner.invoke(cli, list(args), input=input, env={**CLEAN_ENV, **(env or {})})
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    assert result.exit_code == code, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    return result


def mint(ks: Path, *args: str) -> str:
    """A token minted by the CLI under the keyset at ``ks``."""
    return run("--keyset", str(ks), "mint", *args).stdout.strip()


def raw_secret(size: int = 32) -> bytes:
    """Random key bytes for ``keys import``: never ending in a newline, which a raw secret
    file may not (keys import cannot tell the key's byte from an editor's)."""
    return os.urandom(size - 1) + b"k"


def keys_import(
    ks: Path, alg: str, secret: bytes | str, *extra: str, code: int = 0, name: str = ""
) -> Result:
    """``mrtr-state --keyset KS keys import --alg ALG --secret-file FILE [EXTRA]``, the secret
    (bytes as they are, text as UTF-8) written first to a file beside the keyset, 0600 (``name``:
    its file name, when a test imports several of one algorithm)."""
    secret_file = ks.parent / (name or f"{alg}.secret")
    secret_file.write_bytes(secret.encode() if isinstance(secret, str) else secret)
    secret_file.chmod(0o600)
    command = ("keys", "import", "--alg", alg, "--secret-file", str(secret_file), *extra)
    return run("--keyset", str(ks), *command, code=code)


class Reply:
    def __init__(self, raw: bytes) -> None:
        self.raw = raw
        head, _, body = raw.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        self.status = int(lines[0].split(b" ")[1]) if lines[0].startswith(b"HTTP/") else 0
        self.headers = {
            k.strip().lower(): v.strip() for k, _, v in (line.partition(b":") for line in lines[1:])
        }
        if self.headers.get(b"transfer-encoding") == b"chunked":
            body = _unchunk(body)
        self.body = body

    def json(self) -> Any:
        return json.loads(self.body)


def _unchunk(data: bytes) -> bytes:
    out = b""
    while data:
        size_line, _, data = data.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            break
        out, data = out + data[:size], data[size + 2 :]
    return out


def send_raw(port: int, request: bytes, timeout: float = 30) -> Reply:
    """One request as raw bytes (the caller frames it); read until the server closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(request)
        chunks = []
        while True:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            chunks.append(chunk)
    return Reply(b"".join(chunks))


def request(
    method: bytes = b"POST",
    target: bytes = b"/mcp",
    body: Any = None,
    headers: bytes = USER,
) -> bytes:
    content = (
        body if isinstance(body, bytes) else b"" if body is None else json.dumps(body).encode()
    )
    framing = b"Content-Length: %d\r\n" % len(content) if content or method == b"POST" else b""
    return (
        method
        + b" "
        + target
        + b" HTTP/1.1\r\nHost: proxy\r\nConnection: close\r\n"
        + b"Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
        + headers
        + framing
        + b"\r\n"
        + content
    )


def call(name: str, id_: Any = 1, **params: Any) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": id_,
        "method": "tools/call",
        "params": {"name": name, "arguments": {}, **params},
    }


class ProxyProcess:
    """The real ``mrtr-state proxy`` process, as an operator starts it, with ``--json-log``;
    its stderr is kept (``stderr``) and its JSON lines parsed (``log``)."""

    def __init__(
        self,
        keyset: Path,
        upstream_url: str,
        *more: str,
        parser: str = "httptools",
        principal: tuple[str, ...] = ("--principal-header", "X-Forwarded-User"),
        upstream_path: str = "/mcp",
        listen_host: str = "127.0.0.1",
        open_files: int | None = None,
    ) -> None:
        self.port = free_port()
        self.log: list[dict[str, Any]] = []
        self.stderr: list[str] = []
        # a process limit on open files, as a container's ulimit sets it (util-linux's prlimit)
        limit = [] if open_files is None else ["prlimit", f"--nofile={open_files}:{open_files}"]
        self.process = subprocess.Popen(
            [
                *limit,
                *(sys.executable, "-m", "mrtr_state", "proxy", "--keyset", str(keyset)),
                *("--upstream", upstream_url + upstream_path),
                *("--listen", f"{listen_host}:{self.port}"),
                *principal,
                *("--json-log", "--http", parser, *more),
            ],
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                assert time.monotonic() < deadline and self.process.poll() is None, self.stderr
                time.sleep(0.05)

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.stderr.append(line)
            if line.startswith("{"):
                self.log.append(json.loads(line))

    def last_log(self, count: int = 1) -> list[dict[str, Any]]:
        deadline = time.monotonic() + 5
        while len(self.log) < count and time.monotonic() < deadline:
            time.sleep(0.01)
        return self.log[-count:]

    def logged(self, field: str, value: Any, seconds: float = 10) -> dict[str, Any]:
        """The latest log line whose ``field`` is ``value``, waiting for it: a line is written
        when the proxy has finished with a request, which may be after its answer was read (so
        the last line at the moment the answer arrives can be an earlier request's)."""
        deadline = time.monotonic() + seconds
        while True:
            for line in reversed(self.log):
                if line.get(field) == value:
                    found: dict[str, Any] = line
                    return found
            assert time.monotonic() < deadline, f"no log line with {field}={value!r}: {self.log}"
            time.sleep(0.01)

    def stop(self) -> int:
        """SIGTERM, wait, and return the exit code; the streams are closed."""
        if self.process.poll() is None:
            self.process.terminate()
        code = self.process.wait(30)
        self.reader.join(10)
        assert self.process.stderr is not None
        self.process.stderr.close()
        return code


@contextlib.contextmanager
def private_redis() -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """A redis-server of this test's own (to stop, reconfigure or kill), else skip."""
    binary = program("redis-server", "redis-server")
    port = free_port()
    server = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        yield server, f"redis://127.0.0.1:{port}/0"
    finally:
        server.kill()
        server.wait(10)


def synthetic_capture(
    keyset: Any, exchanges: int, *, start: float, step: float, retry: bool = True
) -> Iterator[str]:
    """A capture of ``exchanges`` sound exchanges (request, input_required, retry, result), one
    message every ``step`` seconds, tokens minted for each request at its time (aead)."""
    import mrtr_state as ms

    ts = start
    for n in range(exchanges):
        arguments = {"n": n}
        params = {"name": "pay", "arguments": arguments}
        token = ms.mint(
            keyset, {"n": n}, method="tools/call", target="pay", arguments=arguments, now=ts
        )
        messages: list[tuple[str, dict[str, Any]]] = [
            ("c2s", {"id": 2 * n, "method": "tools/call", "params": params}),
            (
                "s2c",
                {"id": 2 * n, "result": {"resultType": "input_required", "requestState": token}},
            ),
        ]
        if retry:
            retried = {**params, "requestState": token, "inputResponses": {}}
            messages.append(("c2s", {"id": 2 * n + 1, "method": "tools/call", "params": retried}))
            messages.append(("s2c", {"id": 2 * n + 1, "result": {"content": []}}))
        for direction, message in messages:
            wrapped = {"ts": ts, "dir": direction, "msg": {"jsonrpc": "2.0", **message}}
            yield json.dumps(wrapped, separators=(",", ":"))
            ts += step


def token_guard(
    keyset: Any,
    *,
    audience: str | None = None,
    ttl: int | None = None,
    once: Any = None,
    clock: Any = time.time,
    log: Any = None,
    metrics: Any = None,
) -> StateGuard:
    """A proxy's guard sealing ``aead`` tokens under ``keyset`` (``once``: a replay store), as
    ``mrtr-state proxy`` builds it without ``--state-store``."""
    from mrtr_state.proxy.rewrite import StateGuard
    from mrtr_state.state import TokenBackend

    backend = TokenBackend(keyset, format="aead", replay=once, ttl=ttl, clock=clock)
    return StateGuard(backend, audience=audience, log=log, metrics=metrics, keyset=keyset)


def handle_guard(store: Any, *, audience: str | None = None, log: Any = None) -> StateGuard:
    """A proxy's guard keeping states in ``store`` behind handles (``--state-store``)."""
    from mrtr_state.proxy.rewrite import StateGuard
    from mrtr_state.state import HandleBackend

    return StateGuard(HandleBackend(store), audience=audience, log=log)


def documented_example(page: str, heading: str, command: str) -> tuple[list[str], list[str]]:
    """An example of ``docs/PAGE`` under ``## HEADING``: the first ``$ `` command line starting
    ``command`` (its ``\\`` continuations joined, split as a shell would, the program's name
    included), and the lines it shows printed after it. Tests run it, so that what the page
    shows is what the command does."""
    import shlex

    text = (ROOT / "docs" / page).read_text(encoding="utf-8")
    section = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    lines = [line.strip() for line in section.splitlines()]
    start = next(n for n, line in enumerate(lines) if line.startswith("$ " + command))
    joined, end = lines[start][2:], start
    while joined.endswith("\\"):
        end += 1
        joined = joined[:-1] + " " + lines[end]
    shown = []
    for line in lines[end + 1 :]:
        if not line or line.startswith("$ "):
            break
        shown.append(line)
    return shlex.split(joined), shown
