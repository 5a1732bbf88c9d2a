"""The official Python SDK (``mcp`` 2.x) as an upstream for ``make bench``: a stateless
Streamable HTTP server whose ``deploy`` tool asks for confirmation, with the SDK's own
request-state protection switched off (plain base64), as the proxy's users run it.

    python bench/sdk_upstream.py PORT [json|sse]
"""

from __future__ import annotations

import base64
import sys

import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.request_state import RequestStateSecurity
from mcp_types import ElicitRequest, ElicitRequestFormParams, InputRequiredResult


class PlainCodec:
    """No protection: the SDK's envelope in plain base64."""

    def seal(self, payload: bytes) -> str:
        return base64.urlsafe_b64encode(payload).decode()

    def unseal(self, token: str) -> bytes:
        return base64.urlsafe_b64decode(token.encode())


def build(json_response: bool = True) -> object:
    server = MCPServer(
        "bench-upstream",
        request_state_security=RequestStateSecurity(codec=PlainCodec(), bind_principal=None),
        log_level="WARNING",
    )

    @server.tool()
    async def deploy(env: str, ctx: Context) -> str | InputRequiredResult:
        if ctx.input_responses is None:
            form = ElicitRequestFormParams(
                message=f"Deploy {env}?",
                requested_schema={"type": "object", "properties": {"ok": {"type": "boolean"}}},
            )
            return InputRequiredResult(
                input_requests={"confirm": ElicitRequest(params=form)},
                request_state=f"confirm:{env}",
            )
        return f"deployed {env}"

    return server.streamable_http_app(json_response=json_response, stateless_http=True)


if __name__ == "__main__":
    mode = sys.argv[2] if len(sys.argv) > 2 else "json"
    uvicorn.run(
        build(mode == "json"),  # type: ignore[arg-type]
        host="127.0.0.1",
        port=int(sys.argv[1]),
        log_level="warning",
        access_log=False,
    )
