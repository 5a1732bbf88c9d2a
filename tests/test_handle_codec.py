"""HandleCodec: the official Python SDK keeping its requestState server-side, with one line of
configuration. Live round trips through the SDK's own client and server, on a real Redis and
in memory."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from mrtr_state.handle_codec import HandleCodec
from mrtr_state.handle_store import MemoryHandleStore, open_handle_store

from .helpers import private_redis

pytest.importorskip("mcp", reason="the official SDK (mcp==2.3.0) is a test dependency")

from mcp import Client
from mcp.server.request_state import InvalidRequestState, RequestStateSecurity
from mcp.shared.exceptions import MCPError
from mcp_types import ElicitResult, InputRequiredResult, InputResponses

from .test_mcp import _accept, elicitation_server, mcp_error

RESPONSES: InputResponses = {"confirm": ElicitResult(action="accept", content={"ok": True})}


@pytest.fixture(params=["memory", "redis"])
def codec(request: pytest.FixtureRequest) -> Iterator[HandleCodec]:
    if request.param == "memory":
        yield HandleCodec(MemoryHandleStore())
        return
    with private_redis() as (_, url):
        yield HandleCodec(url)


def test_a_round_trip_through_the_sdk_keeps_the_state_server_side(codec: HandleCodec) -> None:
    seen: list[str] = []
    server = elicitation_server(RequestStateSecurity(codec=codec, bind_principal=None), seen)

    async def round_trip() -> Any:
        async with Client(server, elicitation_callback=_accept) as client:
            first = await client.session.call_tool(
                "deploy", {"env": "prod"}, allow_input_required=True
            )
            assert isinstance(first, InputRequiredResult) and first.request_state is not None
            handle = first.request_state
            assert handle.startswith("mh1.") and len(handle) == 31
            done = await client.session.call_tool(
                "deploy", {"env": "prod"}, request_state=handle, input_responses=RESPONSES
            )
            with pytest.raises(MCPError, match="Invalid or expired requestState"):
                await client.session.call_tool(  # single use, by construction
                    "deploy", {"env": "prod"}, request_state=handle, input_responses=RESPONSES
                )
            return done

    assert "deployed prod" in json.dumps(anyio.run(round_trip).model_dump(mode="json"))
    assert seen == ["awaiting-confirm"]  # the server's own state, restored


def test_the_sdk_still_checks_its_envelope_after_the_codec(codec: HandleCodec) -> None:
    """Another request's handle opens (the codec binds nothing) and the SDK refuses it; the
    record is spent."""
    seen: list[str] = []
    server = elicitation_server(RequestStateSecurity(codec=codec, bind_principal=None), seen)

    async def swapped() -> None:
        async with Client(server, elicitation_callback=_accept) as client:
            first = await client.session.call_tool(
                "deploy", {"env": "prod"}, allow_input_required=True
            )
            assert isinstance(first, InputRequiredResult)
            await client.session.call_tool(
                "deploy",
                {"env": "dev"},
                request_state=first.request_state,
                input_responses=RESPONSES,
            )

    try:
        anyio.run(swapped)
    except BaseException as error:
        found = mcp_error(error)
        assert found is not None and "Invalid or expired requestState" in str(found)
    else:
        raise AssertionError("a handle for another request was accepted")
    assert seen == []


@pytest.mark.parametrize(
    "token",
    ["", "mh1.AAAAAAAAAAAAAAAAAAAAAAAAAAA", "ms1.xyz", "v1.abc", "mh1." + "A" * 27],
)
def test_what_is_not_a_live_handle_is_refused(codec: HandleCodec, token: str) -> None:
    with pytest.raises(InvalidRequestState):
        codec.unseal(token)


def test_a_handle_opens_once_and_returns_the_payload_byte_for_byte(codec: HandleCodec) -> None:
    payload = json.dumps({"v": 1, "exp": 4102444800, "s": "é\u2028\x00"}).encode()
    handle = codec.seal(payload)
    assert codec.unseal(handle) == payload
    with pytest.raises(InvalidRequestState, match="unknown_handle"):
        codec.unseal(handle)


def test_an_envelope_over_the_limit_is_not_filed() -> None:
    codec = HandleCodec(MemoryHandleStore(), max_state=100)
    with pytest.raises(ValueError, match="over the store's 100"):
        codec.seal(b"x" * 101)
    assert len(codec.store) == 0


def test_a_store_that_is_down_refuses_and_files_nothing() -> None:
    with private_redis() as (server, url):
        codec = HandleCodec(open_handle_store(url))
        handle = codec.seal(b'{"exp": 4102444800}')
        server.kill()
        server.wait(10)
        with pytest.raises(InvalidRequestState, match="state_store_error"):
            codec.unseal(handle)
        from mrtr_state.errors import StateStoreError

        with pytest.raises(StateStoreError):
            codec.seal(b'{"exp": 4102444800}')
