"""Start examples/github_login_server.py over stdio and complete one round trip.

The official SDK client answers the elicitation (as a user would) and retries with the sealed
``requestState``; we also show what that token looks like to ``mrtr-state inspect``.

    python examples/client.py            # or: make example
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters
from mcp_types import ElicitResult, InputRequiredResult

import mrtr_state as ms

HERE = Path(__file__).resolve().parent


# --8<-- [start:client]
async def answer(context: Any, params: Any) -> ElicitResult:
    print(f"server asks: {params.message}")
    print("user answers: octocat")
    return ElicitResult(action="accept", content={"login": "octocat"})


async def main() -> None:
    # The server is a child process with a clean environment: tell it where the keyset is.
    keyset = os.path.abspath(os.environ.get("MRTR_STATE_KEYSET", "keys/keyset.json"))
    server = StdioServerParameters(
        command=sys.executable,
        args=[str(HERE / "github_login_server.py")],
        env={"MRTR_STATE_KEYSET": keyset},
    )
    async with Client(server, elicitation_callback=answer) as client:
        first = await client.session.call_tool(
            "star_repository", {"repo": "octo/hello"}, allow_input_required=True
        )
        assert isinstance(first, InputRequiredResult)
        assert first.request_state is not None
        view = ms.inspect(first.request_state)
        print(
            f"requestState: {view.format} token, key {view.kid}, "
            f"{len(first.request_state)} bytes, NOT readable by this client"
        )
        result = await client.call_tool("star_repository", {"repo": "octo/hello"})
        print("result:", result.content[0].text)  # type: ignore[union-attr]


# --8<-- [end:client]


if __name__ == "__main__":
    anyio.run(main)
