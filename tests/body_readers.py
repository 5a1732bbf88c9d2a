"""Real request-body readers for the proxy's differential tests (tests/test_proxy_body_readers.py).

Each is an MCP-shaped Streamable HTTP endpoint with one ``deploy`` tool that, like the spec's
naive example, puts plain base64 JSON in ``requestState`` and trusts whatever comes back: what its
handler runs on is what its *body reader* made of the bytes, so a body the proxy reads one way and
the reader another shows up as a state the proxy never opened reaching the handler.

* :class:`ExpressReader`: ``express.json()`` (express 5, body-parser 2) in a Node process
  (``tests/ts/express_reader.mjs``): honours any ``utf-*`` charset, inflates Content-Encoding.
* :func:`starlette_reader`: Starlette's ``Request.json()``, which is ``json.loads`` of the bytes:
  it ignores the Content-Type and sniffs UTF-16 and UTF-32 (and a UTF-8 BOM) from the first bytes.
* :func:`c_string_reader`: the body read as UTF-8 JSON with every member name cut at its first
  NUL, as a C parser that keeps names as NUL-terminated strings reads it (cJSON decodes
  ``\\u0000`` into the name's buffer, which then ends there), and of two members whose names
  are then equal, the *first* kept, as ``cJSON_GetObjectItemCaseSensitive`` walks the members
  from the start.

Every request is recorded under its ``X-Variant-Case`` header (:class:`Events`): ``arrived``
before its body is read, then ``asked`` (the state issued), ``retried`` (the ``requestState``
handed to the handler and the state decoded from it) or ``unread`` (the reader refused the body).
A test reads a case's records after its answer came back: a reader records before it answers.
"""

from __future__ import annotations

import base64
import binascii
import json
import shutil
import subprocess
import threading
import urllib.parse
import urllib.request
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from .servers import serving

HERE = Path(__file__).resolve().parent
CASE_HEADER = "x-variant-case"


class Events:
    """What a reader recorded, by case; safe to add to from the server's thread."""

    def __init__(self) -> None:
        self._events: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def add(self, case: str | None, event: str, **fields: Any) -> None:
        with self._lock:
            self._events.append({"case": case, "event": event, **fields})

    def of(self, case: str) -> list[dict[str, Any]]:
        with self._lock:
            return [event for event in self._events if event["case"] == case]


def deploy(message: Any, case: str | None, events: Events) -> tuple[int, dict[str, Any]]:
    """The tool, given the message its reader read: (HTTP status, JSON-RPC answer)."""
    if not isinstance(message, dict):
        events.add(case, "unread", why="no JSON object read")
        return 400, {
            "jsonrpc": "2.0",
            "id": None,
            "error": {"code": -32700, "message": "no object"},
        }
    params = message.get("params")
    params = params if isinstance(params, dict) else {}
    if message.get("method") != "tools/call" or params.get("name") != "deploy":
        error = {"code": -32601, "message": f"no method {message.get('method')}"}
        return 200, {"jsonrpc": "2.0", "id": message.get("id"), "error": error}
    arguments = params.get("arguments")
    env = arguments.get("env") if isinstance(arguments, dict) else None
    if "requestState" not in params:
        state = {"env": env, "nonce": uuid.uuid4().hex}
        events.add(case, "asked", state=state)
        confirm = {
            "method": "elicitation/create",
            "params": {"message": f"Deploy {env}?", "requestedSchema": {}},
        }
        result = {
            "resultType": "input_required",
            "inputRequests": {"confirm": confirm},
            "requestState": base64.b64encode(json.dumps(state).encode()).decode(),
        }
        return 200, {"jsonrpc": "2.0", "id": message.get("id"), "result": result}
    handed = params["requestState"]
    try:
        decoded = json.loads(base64.b64decode(str(handed)))
    except (binascii.Error, ValueError):
        decoded = None  # a state this server never issued: still, the handler was handed it
    events.add(case, "retried", requestState=handed, state=decoded)
    env_run = decoded.get("env") if isinstance(decoded, dict) else None
    content = [{"type": "text", "text": f"deployed {env_run}"}]
    return 200, {"jsonrpc": "2.0", "id": message.get("id"), "result": {"content": content}}


BodyReader = Callable[[Request], Awaitable[Any]]


def _endpoint(read: BodyReader, events: Events) -> Starlette:
    async def mcp(request: Request) -> JSONResponse:
        case = request.headers.get(CASE_HEADER)
        events.add(case, "arrived")
        try:
            message = await read(request)
        except ValueError as err:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            events.add(case, "unread", why=type(err).__name__)
            error = {"code": -32700, "message": "parse error"}
            return JSONResponse({"jsonrpc": "2.0", "id": None, "error": error}, 400)
        status, answer = deploy(message, case, events)
        return JSONResponse(answer, status)

    return Starlette(routes=[Route("/mcp", mcp, methods=["POST"])])


async def _starlette_json(request: Request) -> Any:
    return await request.json()


def starlette_reader(events: Events) -> Starlette:
    """The endpoint whose body reader is Starlette's ``Request.json()``."""
    return _endpoint(_starlette_json, events)


def _first_of_each_c_name(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    members: dict[str, Any] = {}
    for name, value in pairs:
        members.setdefault(name.partition("\0")[0], value)
    return members


def c_string_loads(body: bytes) -> Any:
    """JSON as a C parser with NUL-terminated names reads it (see the module docstring)."""
    return json.loads(body.decode("utf-8"), object_pairs_hook=_first_of_each_c_name)


async def _c_string_json(request: Request) -> Any:
    return c_string_loads(await request.body())


def c_string_reader(events: Events) -> Starlette:
    """The endpoint whose body reader cuts member names at NUL (see the module docstring)."""
    return _endpoint(_c_string_json, events)


class ServedReader:
    """A reader on a loopback port: its base URL, and the records of one case."""

    def __init__(self, name: str, url: str, events: Callable[[str], list[dict[str, Any]]]):
        self.name = name
        self.url = url
        self.port = int(url.rpartition(":")[2])
        self.events = events


@contextmanager
def served_in_process(name: str, make: Callable[[Events], Starlette]) -> Iterator[ServedReader]:
    """A Python reader under uvicorn in a thread of this process."""
    events = Events()
    with serving(make(events)) as url:
        yield ServedReader(name, url, events.of)


def express_folder(given: str | None) -> tuple[Path | None, str]:
    """Where express is installed (the TypeScript SDK's folder), or None and why not."""
    if shutil.which("node") is None:
        return None, "Node.js is not installed"
    if not given:
        return None, "MRTR_STATE_TEST_TS_SDK is not set (.ci/run installs express there)"
    folder = Path(given)
    if not (folder / "node_modules" / "express" / "package.json").exists():
        return None, f"express is not installed in {folder} (.ci/run installs express@5)"
    return folder, ""


@contextmanager
def served_express(folder: Path) -> Iterator[ServedReader]:
    """``tests/ts/express_reader.mjs`` under Node, express loaded from ``folder``."""
    script = HERE / "ts" / "express_reader.mjs"
    node = subprocess.Popen(
        ["node", str(script), str(folder)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert node.stdout is not None
        line = node.stdout.readline()
        assert line, node.stderr.read() if node.stderr else "the express reader did not start"
        url = f"http://127.0.0.1:{json.loads(line)['port']}"

        def events(case: str) -> list[dict[str, Any]]:
            query = urllib.parse.urlencode({"case": case})
            with urllib.request.urlopen(f"{url}/events?{query}", timeout=10) as answer:
                found: list[dict[str, Any]] = json.loads(answer.read())
                return found

        yield ServedReader("express", url, events)
    finally:
        node.terminate()
        node.communicate(timeout=10)
