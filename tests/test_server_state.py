"""HandleCodec: the official Python SDK keeping its requestState server-side, with one line of
configuration. Live round trips through the SDK's own client and server, on a real Redis and
in memory."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from mrtr_state.sdk.codec import HandleCodec
from mrtr_state.state.handle_store import MemoryHandleStore, open_handle_store

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


# --- verify and inspect a handle, as the CLI does ------------------------------------------

from mrtr_state.errors import (  # noqa: E402
    AudienceMismatch,
    ExpiredToken,
    InvalidClaims,
    MalformedToken,
    PrincipalMismatch,
    RequestMismatch,
    UnknownHandle,
)
from mrtr_state.state import records as handles  # noqa: E402
from mrtr_state.state.handles import inspect_handle, verify_handle  # noqa: E402
from mrtr_state.tokens.binding import Binding  # noqa: E402

NOW = 1_800_000_000.0
BOUND: dict[str, Any] = {
    "principal": "alice",
    "audience": "/mcp",
    "method": "tools/call",
    "target": "deploy",
    "arguments": {"env": "prod"},
}


def filed_handle(store: Any, state: str = "step=1") -> str:
    ident = handles.new_handle()
    handle = ident.text
    value = handles.encode_record(ident, state, Binding(**BOUND), now=NOW, ttl=300)
    store.put(ident.key, value, NOW + 10**9)
    return handle


def test_verify_reads_a_record_and_once_takes_it() -> None:
    store = MemoryHandleStore()
    handle = filed_handle(store)
    claims = verify_handle(store, handle, now=NOW + 1, **BOUND)
    assert claims.state == "step=1" and claims.aud == "/mcp" and claims.exp == NOW + 300
    assert verify_handle(store, handle, now=NOW + 1, **BOUND).state == "step=1"  # only read
    assert verify_handle(store, handle, once=True, now=NOW + 1, **BOUND).state == "step=1"
    with pytest.raises(UnknownHandle):
        verify_handle(store, handle, once=True, now=NOW + 1, **BOUND)


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"principal": "bob"}, PrincipalMismatch),
        ({"principal": None}, PrincipalMismatch),
        ({"audience": "/other"}, AudienceMismatch),
        ({"arguments": {"env": "dev"}}, RequestMismatch),
    ],
)
@pytest.mark.parametrize("once", [False, True])
def test_verify_refuses_another_retry_and_leaves_the_record(
    change: dict[str, Any], error: type[Exception], once: bool
) -> None:
    store = MemoryHandleStore()
    handle = filed_handle(store)
    with pytest.raises(error):
        verify_handle(store, handle, once=once, now=NOW, **{**BOUND, **change})
    assert verify_handle(store, handle, once=True, now=NOW, **BOUND).state == "step=1"


def test_verify_takes_a_binding_or_the_keywords_never_both() -> None:
    store = MemoryHandleStore()
    handle = filed_handle(store)
    assert verify_handle(store, handle, expect=Binding(**BOUND), now=NOW).state == "step=1"
    with pytest.raises(ValueError, match="not both"):  # the audience was dropped before
        verify_handle(store, handle, expect=Binding(**BOUND), audience="/other", now=NOW)
    with pytest.raises(TypeError, match=r"must be a mrtr_state\.Binding"):
        verify_handle(store, handle, expect=BOUND, now=NOW)  # type: ignore[arg-type]
    assert verify_handle(store, handle, once=True, now=NOW, **BOUND).state == "step=1"


def test_verify_refuses_an_expired_record_and_what_is_no_handle() -> None:
    store = MemoryHandleStore()
    handle = filed_handle(store)
    with pytest.raises(ExpiredToken):
        verify_handle(store, handle, now=NOW + 301, **BOUND)
    with pytest.raises(MalformedToken):
        verify_handle(store, "mh1.AAAAAAAAAAAAAAAAAAAAAAAAAAA", now=NOW, **BOUND)
    with pytest.raises(UnknownHandle):
        verify_handle(store, handles.new_handle().text, now=NOW, **BOUND)


def test_verify_refuses_a_record_whose_lock_is_not_its_bindings() -> None:
    store = MemoryHandleStore()
    ident = handles.new_handle()
    handle = ident.text
    value = handles.encode_record(ident, "s", Binding(**BOUND), now=NOW, ttl=300)
    store.put(ident.key, b"x" * 43 + value[43:], NOW + 10**9)
    with pytest.raises(InvalidClaims, match="lock does not match"):
        verify_handle(store, handle, now=NOW, **BOUND)


def test_inspect_shows_the_record_and_the_state_only_when_asked() -> None:
    store = MemoryHandleStore()
    handle = filed_handle(store, "secret state")
    shown = inspect_handle(store, handle, now=NOW)
    assert shown["found"] and shown["aud"] == "/mcp" and not shown["expired"]
    assert shown["own"] and "alice" not in json.dumps(shown) and "state" not in shown
    assert inspect_handle(store, handle, show_state=True, now=NOW)["state"] == "secret state"
    assert inspect_handle(store, handle, now=NOW + 301)["expired"]
    missing = inspect_handle(store, handles.new_handle().text)
    assert missing["found"] is False and set(missing) == {"format", "ref", "found"}


def test_the_codec_refuses_a_record_whose_lock_was_written_over_every_time() -> None:
    """A store writer who rewrites a record's lock leaves a record the store never hands over
    (so never deletes): the codec refuses it, else it would open on every retry."""
    store = MemoryHandleStore()
    codec = HandleCodec(store)
    payload = json.dumps({"v": 1, "exp": 4102444800, "s": "x"}).encode()
    token = codec.seal(payload)
    ((key, (value, until)),) = store._records.items()
    store._records[key] = (b"x" * 43 + value[43:], until)
    for _ in range(2):
        with pytest.raises(InvalidRequestState, match="invalid_claims"):
            codec.unseal(token)
    store._records[key] = (value, until)  # the record as filed opens, once
    assert codec.unseal(token) == payload
