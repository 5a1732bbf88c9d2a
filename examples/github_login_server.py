"""An MCP server (official Python SDK, stdio) whose tool asks the user for their GitHub login.

The first call answers ``input_required`` with an elicitation and a ``requestState``; the client
retries with the user's answer and the state echoed back. The state is sealed by mrtr-state's
``KeysetCodec`` under the keyset file (default ``keys/keyset.json``), so every replica holding that
file can take the retry, ``mrtr-state keys add``/``promote`` rotate keys without a restart, and
each state opens at most once.

    python examples/github_login_server.py          # normally started by examples/client.py
"""

from __future__ import annotations

import os

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.request_state import RequestStateSecurity
from mcp_types import ElicitRequest, ElicitRequestFormParams, InputRequiredResult

from mrtr_state.sdk.codec import KeysetCodec
from mrtr_state.state.replay import open_store

KEYSET = os.environ.get("MRTR_STATE_KEYSET", "keys/keyset.json")

codec = KeysetCodec(KEYSET, format="aead", once=open_store("memory:"))
server = MCPServer(
    "github-helper",
    request_state_security=RequestStateSecurity(codec=codec, ttl=120, bind_principal=None),
    # redeems each state once the SDK has accepted its round (see KeysetCodec)
    middleware=[codec.replay_guard()],
)


# --8<-- [start:tool]
@server.tool()
async def star_repository(repo: str, ctx: Context) -> str | InputRequiredResult:
    """Star a repository on the user's behalf, asking for their GitHub login first."""
    if ctx.input_responses is None:
        question = ElicitRequestFormParams(
            message=f"Which GitHub account should star {repo}?",
            requested_schema={
                "type": "object",
                "properties": {"login": {"type": "string", "title": "GitHub login"}},
                "required": ["login"],
            },
        )
        return InputRequiredResult(
            input_requests={"github_login": ElicitRequest(params=question)},
            request_state=f"star:{repo}",  # sealed by the codec before it leaves the server
        )
    answer = ctx.input_responses["github_login"]
    login = getattr(answer, "content", None) or {}
    return f"{login.get('login', '?')} starred {repo} (state {ctx.request_state!r} verified)"


# --8<-- [end:tool]


if __name__ == "__main__":
    server.run("stdio")
