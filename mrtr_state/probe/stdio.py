"""MCP over stdio: the server is a child process, each message one line of JSON on its stdin
and stdout (its stderr is its log, kept to say why it stopped).

The server is started by :meth:`StdioTransport.open` and stopped by :meth:`close`, whatever
happened between. Stdout is read by a thread into a queue so that each request waits for its
answer only until its deadline; a line that is not JSON, stdout closing, or the process exiting
ends the probe with the reason. Requests the server itself sends (stdio has a back channel) are
answered as a client without that feature would answer them, so a server never waits on us.
"""

from __future__ import annotations

import contextlib
import json
import queue
import subprocess
import threading
import time
from collections import deque
from typing import IO, Any

from ..errors import ProbeFailed
from .transport import MAX_ANSWER_BYTES, Reply, Routing, shorten

__all__ = ["StdioTransport"]

_EOF = b""


class StdioTransport:
    """A server started as ``argv``, spoken to over its stdin and stdout."""

    has_other = False

    def __init__(self, argv: list[str]) -> None:
        if not argv:
            raise ValueError("--stdio needs a command to start the server")
        self.argv = argv
        self.target = " ".join(argv)
        self._process: subprocess.Popen[bytes] | None = None
        self._lines: queue.Queue[bytes] = queue.Queue()
        self._log: deque[str] = deque(maxlen=5)

    # --- the process -----------------------------------------------------------------------

    def open(self, timeout: float) -> None:
        try:
            self._process = subprocess.Popen(  # noqa: S603 (the operator's own command)
                self.argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
        except OSError as err:
            raise ProbeFailed(
                f"cannot start the stdio server {self.target!r}: {err.strerror or err}"
            ) from None
        assert self._process.stdout is not None
        assert self._process.stderr is not None
        threading.Thread(target=self._read_lines, args=(self._process.stdout,), daemon=True).start()
        threading.Thread(target=self._read_log, args=(self._process.stderr,), daemon=True).start()

    def _read_lines(self, stream: IO[bytes]) -> None:
        try:
            while True:
                line = stream.readline(MAX_ANSWER_BYTES + 1)
                if not line:
                    break
                self._lines.put(line)
        except (OSError, ValueError):
            pass
        self._lines.put(_EOF)

    def _read_log(self, stream: IO[bytes]) -> None:
        with contextlib.suppress(OSError, ValueError):
            for line in stream:
                self._log.append(line.decode("utf-8", "replace").rstrip())

    def close(self, timeout: float) -> None:
        process = self._process
        if process is None:
            return
        self._process = None
        with contextlib.suppress(OSError):
            if process.stdin is not None:
                process.stdin.close()
        for stop in (None, process.terminate, process.kill):
            if stop is not None:
                with contextlib.suppress(OSError):
                    stop()
            try:
                process.wait(min(timeout, 2.0))
                break
            except subprocess.TimeoutExpired:
                continue
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()

    # --- messages --------------------------------------------------------------------------

    def _write(self, message: dict[str, Any]) -> None:
        process = self._process
        if process is None or process.stdin is None:
            raise ProbeFailed(f"the stdio server {self.target!r} is not running")
        try:
            process.stdin.write(json.dumps(message, separators=(",", ":")).encode() + b"\n")
            process.stdin.flush()
        except OSError:
            raise self._gone() from None

    def _gone(self) -> ProbeFailed:
        process = self._process
        code = None if process is None else process.poll()
        if process is not None and code is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                code = process.wait(1.0)
        said = f" (exit {code})" if code is not None else ""
        log = f"; its last words: {shorten(' | '.join(self._log), 200)}" if self._log else ""
        return ProbeFailed(f"the stdio server {self.target!r} closed its stdout{said}{log}")

    def notify(self, message: dict[str, Any], routing: Routing, timeout: float) -> None:
        self._write(message)

    def request(
        self, message: dict[str, Any], routing: Routing, other: bool, timeout: float
    ) -> Reply:
        self._write(message)
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            try:
                line = self._lines.get(timeout=max(left, 0.0))
            except queue.Empty:
                raise ProbeFailed(
                    f"no answer to {routing.method} from the stdio server within {timeout:g}s "
                    "(--timeout)"
                ) from None
            if line == _EOF:
                self._lines.put(_EOF)  # every later read sees the end too
                raise self._gone()
            if len(line) > MAX_ANSWER_BYTES:
                raise ProbeFailed(f"the stdio server wrote a line over {MAX_ANSWER_BYTES} bytes")
            if not line.strip():
                continue
            try:
                item = json.loads(line)
            except (ValueError, RecursionError):
                raise ProbeFailed(
                    f"the stdio server wrote a line that is not JSON-RPC: "
                    f"{shorten(line.decode('utf-8', 'replace').strip())}"
                ) from None
            if not isinstance(item, dict):
                raise ProbeFailed(
                    f"the stdio server wrote a line that is not JSON-RPC: {shorten(line.decode())}"
                )
            if "method" in item:
                self._answer_server(item)
                continue
            if item.get("id") == message["id"] or ("error" in item and item.get("id") is None):
                return Reply(item, None, line.decode("utf-8", "replace").strip())

    def _answer_server(self, item: dict[str, Any]) -> None:
        """Answer a request the server sent (a notification needs none): ping as every client
        does, anything else as a client that does not offer it."""
        if "id" not in item:
            return
        if item.get("method") == "ping":
            self._write({"jsonrpc": "2.0", "id": item["id"], "result": {}})
            return
        error = {"code": -32601, "message": "the probe answers input requests in inputResponses"}
        self._write({"jsonrpc": "2.0", "id": item["id"], "error": error})
