"""An MCP server for the official conformance suite's multi round-trip scenarios
(``input-required-result-*``) and ``server-stateless``, on the official Python SDK.

It carries its state the way a server under test chooses:

    python tests/conformance/server.py PORT keyset KEYSET   # sealed by mrtr-state's KeysetCodec
    python tests/conformance/server.py PORT plain           # unprotected: plain base64

Unprotected, it fails ``input-required-result-tampered-state`` (a forged state is accepted):
the control that shows ``mrtr-state proxy`` in front of it is what protects it.
"""

from __future__ import annotations

import base64
import sys
from typing import Any

import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.request_state import RequestStateSecurity
from mcp.shared.exceptions import MCPError
from mcp_types import (
    CreateMessageRequest,
    CreateMessageRequestParams,
    ElicitRequest,
    ElicitRequestFormParams,
    InputRequiredResult,
    ListRootsRequest,
    SamplingMessage,
    TextContent,
)

from mrtr_state.sdk.mcp import CAPABILITIES_META_KEY, CapabilityMissing, check_capabilities


class PlainCodec:
    """No protection at all: the SDK's envelope in plain base64, read by Python's lenient decoder.

    The suite tampers by appending ``-TAMPERED``. The lenient decoder ignores what follows a
    padding ``=``, but refuses a tail that leaves one character over a multiple of four, which
    is what an unpadded encoding (a payload of a multiple of three bytes) plus those nine
    characters gives. The envelope's length varies from run to run, so the control would then
    pass by accident one run in three. Trailing spaces (which JSON ignores) keep the encoding
    padded, so the tampered state is accepted every time, as the control needs.
    """

    def seal(self, payload: bytes) -> str:
        if len(payload) % 3 == 0:
            payload += b" "
        return base64.urlsafe_b64encode(payload).decode()

    def unseal(self, token: str) -> bytes:
        return base64.urlsafe_b64decode(token.encode())


def ask(key: str, message: str, field: str) -> dict[str, Any]:
    form = ElicitRequestFormParams(
        message=message,
        requested_schema={
            "type": "object",
            "properties": {field: {"type": "string"}},
            "required": [field],
        },
    )
    return {key: ElicitRequest(params=form)}


def sample(key: str, text: str, max_tokens: int) -> dict[str, Any]:
    params = CreateMessageRequestParams(
        messages=[SamplingMessage(role="user", content=TextContent(type="text", text=text))],
        max_tokens=max_tokens,
    )
    return {key: CreateMessageRequest(params=params)}


def roots(key: str) -> dict[str, Any]:
    return {key: ListRootsRequest()}


def answer(responses: Any, key: str) -> Any:
    """The answer to input request ``key``, or None."""
    if not isinstance(responses, dict):
        return None
    return responses.get(key)


def content_of(value: Any, field: str) -> str | None:
    content = getattr(value, "content", None)
    if isinstance(content, dict) and isinstance(content.get(field), str):
        return str(content[field])
    text = getattr(content, "text", None)
    return text if isinstance(text, str) else None


def _declared(ctx: Context) -> dict[str, Any]:
    capabilities = ctx.client_capabilities
    if capabilities is None:
        return {}
    dumped: dict[str, Any] = capabilities.model_dump(by_alias=True, exclude_none=True)
    return dumped


def build(codec: Any) -> MCPServer:
    server = MCPServer(
        "mrtr-state-conformance",
        request_state_security=RequestStateSecurity(codec=codec, bind_principal=None),
        log_level="WARNING",
    )

    @server.tool()
    async def test_input_required_result_elicitation(ctx: Context) -> str | InputRequiredResult:
        name = content_of(answer(ctx.input_responses, "user_name"), "name")
        if name is None:
            return InputRequiredResult(
                input_requests=ask("user_name", "What is your name?", "name")
            )
        return f"Hello, {name}!"

    @server.tool()
    async def test_input_required_result_sampling(ctx: Context) -> str | InputRequiredResult:
        reply = content_of(answer(ctx.input_responses, "capital_question"), "text")
        if reply is None:
            question = sample("capital_question", "What is the capital of France?", 100)
            return InputRequiredResult(input_requests=question)
        return f"The model answered: {reply}"

    @server.tool()
    async def test_input_required_result_list_roots(ctx: Context) -> str | InputRequiredResult:
        listed = answer(ctx.input_responses, "client_roots")
        found = getattr(listed, "roots", None)
        if found is None:
            return InputRequiredResult(input_requests=roots("client_roots"))
        return "Roots: " + ", ".join(str(root.uri) for root in found)

    @server.tool()
    async def test_input_required_result_request_state(ctx: Context) -> str | InputRequiredResult:
        confirm = answer(ctx.input_responses, "confirm")
        if confirm is None or ctx.request_state != "confirm-pending":
            form = ElicitRequestFormParams(
                message="Please confirm",
                requested_schema={
                    "type": "object",
                    "properties": {"ok": {"type": "boolean"}},
                    "required": ["ok"],
                },
            )
            return InputRequiredResult(
                input_requests={"confirm": ElicitRequest(params=form)},
                request_state="confirm-pending",
            )
        return "state-ok: confirmed"

    @server.tool()
    async def test_input_required_result_multiple_inputs(
        ctx: Context,
    ) -> str | InputRequiredResult:
        responses = ctx.input_responses
        keys = ("user_name", "greeting", "client_roots")
        if ctx.request_state != "all-three" or not all(answer(responses, k) for k in keys):
            return InputRequiredResult(
                input_requests={
                    **ask("user_name", "What is your name?", "name"),
                    **sample("greeting", "Generate a greeting", 50),
                    **roots("client_roots"),
                },
                request_state="all-three",
            )
        name = content_of(answer(responses, "user_name"), "name")
        return f"Received all three inputs (name {name})"

    @server.tool()
    async def test_input_required_result_multi_round(ctx: Context) -> str | InputRequiredResult:
        state = ctx.request_state
        if state == "round-2":
            color = content_of(answer(ctx.input_responses, "step2"), "color")
            if color is not None:
                return f"All rounds complete (favorite color {color})"
        if state == "round-1":
            name = content_of(answer(ctx.input_responses, "step1"), "name")
            if name is not None:
                return InputRequiredResult(
                    input_requests=ask("step2", "Step 2: What is your favorite color?", "color"),
                    request_state="round-2",
                )
        return InputRequiredResult(
            input_requests=ask("step1", "Step 1: What is your name?", "name"),
            request_state="round-1",
        )

    @server.tool()
    async def test_input_required_result_tampered_state(ctx: Context) -> str | InputRequiredResult:
        if ctx.input_responses is None:
            return InputRequiredResult(
                input_requests=ask("confirm", "Please confirm", "ok"),
                request_state="integrity-protected",
            )
        return f"accepted state {ctx.request_state!r}"

    @server.tool()
    async def test_input_required_result_capabilities(ctx: Context) -> str | InputRequiredResult:
        declared = ctx.client_capabilities
        wanted: dict[str, Any] = {}
        if getattr(declared, "elicitation", None) is not None:
            wanted.update(ask("user_name", "What is your name?", "name"))
        if getattr(declared, "sampling", None) is not None:
            wanted.update(sample("greeting", "Generate a greeting", 50))
        if getattr(declared, "roots", None) is not None:
            wanted.update(roots("client_roots"))
        if ctx.input_responses is None and wanted:
            return InputRequiredResult(input_requests=wanted)
        return "Answered what the client can answer"

    @server.tool()
    async def test_missing_capability(ctx: Context) -> str | InputRequiredResult:
        """Needs sampling: refused (-32021) unless the client declared it, by mrtr-state's
        check of the request's own _meta."""
        wanted = sample("needed", "Say something", 10)
        declared = {CAPABILITIES_META_KEY: _declared(ctx)}
        try:
            check_capabilities(
                declared, {k: v.model_dump(by_alias=True) for k, v in wanted.items()}
            )
        except CapabilityMissing as err:
            raise MCPError(**err.to_error()) from None
        return InputRequiredResult(input_requests=wanted)

    @server.prompt()
    async def test_input_required_result_prompt(ctx: Context) -> Any:
        context = content_of(answer(ctx.input_responses, "user_context"), "context")
        if context is None:
            question = ask("user_context", "What context should the prompt use?", "context")
            return InputRequiredResult(input_requests=question)
        return f"Use this context: {context}"

    return server


if __name__ == "__main__":
    port, mode = int(sys.argv[1]), sys.argv[2]
    if mode == "keyset":
        from mrtr_state.sdk.codec import KeysetCodec

        codec: Any = KeysetCodec(sys.argv[3])
    else:
        codec = PlainCodec()
    app = build(codec).streamable_http_app(stateless_http=True, json_response=True)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)
