"""The proxy in front of a real MCP server from the official Python SDK (``mcp`` 2.3.0) whose
own request-state protection is switched off, driven by the SDK's own client."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import anyio
import pytest

import mrtr_state as ms
from mrtr_state.proxy.app import ProxyApp
from mrtr_state.proxy.rewrite import StateGuard

from .servers import serving

mcp = pytest.importorskip("mcp", reason="the official SDK (mcp==2.3.0) is a test dependency")

from mcp import Client  # noqa: E402
from mcp.server.mcpserver import Context, MCPServer  # noqa: E402
from mcp.server.request_state import RequestStateSecurity  # noqa: E402
from mcp_types import (  # noqa: E402
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitResult,
    InputRequiredResult,
)


class PlainCodec:
    """Request-state "protection" switched off: the SDK's envelope in plain base64, as a naive
    server would send it. The proxy must make it safe without the server knowing."""

    def seal(self, payload: bytes) -> str:
        return base64.urlsafe_b64encode(payload).decode()

    def unseal(self, token: str) -> bytes:
        return base64.urlsafe_b64decode(token.encode())


def naive_server(seen: list[str]) -> MCPServer:
    server = MCPServer(
        "naive",
        request_state_security=RequestStateSecurity(codec=PlainCodec(), bind_principal=None),
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
        seen.append(str(ctx.request_state))
        return f"deployed {env}"

    return server


async def _accept(context: Any, params: Any) -> ElicitResult:
    return ElicitResult(action="accept", content={"ok": True})


def sdk_client_round_trip(url: str) -> tuple[str, str]:
    """The official SDK client through ``url``: a first round (kept, to show its requestState),
    then ``call_tool``, which answers the elicitation and retries. Returns (state, result)."""

    async def round_trip() -> tuple[str, str]:
        async with Client(url, elicitation_callback=_accept) as client:
            first = await client.session.call_tool(
                "deploy", {"env": "prod"}, allow_input_required=True
            )
            assert isinstance(first, InputRequiredResult)
            assert first.request_state is not None
            result = await client.call_tool("deploy", {"env": "prod"})
            return first.request_state, result.content[0].text  # type: ignore[union-attr]

    return anyio.run(round_trip)


@pytest.mark.parametrize("json_response", [True, False], ids=["json", "sse"])
def test_the_official_sdk_completes_an_elicitation_through_the_proxy(
    keyset_file: Path, json_response: bool
) -> None:
    seen: list[str] = []
    server = naive_server(seen)
    lines: list[dict[str, Any]] = []
    guard = StateGuard(ms.Keyset.load(keyset_file), ttl=60, log=lines.append)
    upstream_app = server.streamable_http_app(json_response=json_response)
    with serving(upstream_app) as upstream_url:
        proxy = ProxyApp(guard, upstream=upstream_url + "/mcp")
        with serving(proxy) as proxy_url:
            token, text = sdk_client_round_trip(proxy_url + "/mcp")
    assert token.startswith("ms1.")  # what the client saw: sealed by the proxy
    assert text == "deployed prod" and seen == ["confirm:prod"]
    assert [line["event"] for line in lines].count("opened") >= 1
    assert "refused" not in [line["event"] for line in lines]
