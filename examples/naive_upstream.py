"""A naive MCP endpoint that keeps its requestState as plain base64 JSON, as the spec's own
example does: the kind of server ``mrtr-state proxy`` is for. Never expose it directly.

Its one tool, ``deploy {env}``, asks for a confirmation (input_required) and carries the
environment in its state; the retry deploys whatever environment the state names. A client that
edits the state deploys elsewhere; behind the proxy it cannot.

    python examples/naive_upstream.py 8000      # then: mrtr-state proxy --upstream ...
    mrtr-state probe http://127.0.0.1:8000/mcp --tool deploy --arguments '{"env": "prod"}'
"""

from __future__ import annotations

import base64
import json
import sys
from typing import Any

import uvicorn


# --8<-- [start:answer]
def answer(message: dict[str, Any]) -> dict[str, Any]:
    params = message.get("params") or {}
    if message.get("method") != "tools/call" or params.get("name") != "deploy":
        error = {"code": -32601, "message": "only tools/call deploy here"}
        return {"jsonrpc": "2.0", "id": message.get("id"), "error": error}
    state = params.get("requestState")
    if state is None:  # first round: ask, and remember where we are, in the clear
        plain = base64.b64encode(json.dumps({"env": params["arguments"]["env"]}).encode())
        confirm = {"method": "elicitation/create", "params": {"message": "Deploy?"}}
        result: dict[str, Any] = {
            "resultType": "input_required",
            "inputRequests": {"confirm": confirm},
            "requestState": plain.decode(),
        }
    else:  # the retry: trust the state (the proxy is what makes that safe)
        env = json.loads(base64.b64decode(state))["env"]
        result = {"content": [{"type": "text", "text": f"deployed {env}"}]}
    return {"jsonrpc": "2.0", "id": message["id"], "result": result}


# --8<-- [end:answer]


def greet(message: dict[str, Any]) -> dict[str, Any]:
    """The ``initialize`` handshake, at the version the client asked for: enough for a client
    (``mrtr-state probe`` among them) to reach ``deploy``."""
    asked = (message.get("params") or {}).get("protocolVersion", "2025-06-18")
    result = {
        "protocolVersion": asked,
        "capabilities": {"tools": {}},
        "serverInfo": {"name": "naive-upstream", "version": "1.0"},
    }
    return {"jsonrpc": "2.0", "id": message["id"], "result": result}


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    body = b""
    while True:
        event = await receive()
        body += event.get("body", b"")
        if not event.get("more_body"):
            break
    message = json.loads(body)
    if "id" not in message:  # a notification (notifications/initialized): accepted, no answer
        await send({"type": "http.response.start", "status": 202, "headers": []})
        await send({"type": "http.response.body", "body": b""})
        return
    reply = greet(message) if message.get("method") == "initialize" else answer(message)
    headers = [(b"content-type", b"application/json")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": json.dumps(reply).encode()})


if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
