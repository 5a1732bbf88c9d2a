"""``KeysetCodec`` (mrtr_state/sdk_codec.py): the Python SDK's RequestStateCodec backed by a
keyset, in live round trips with the official SDK server, across rotation and single use."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

import mrtr_state as ms
from mrtr_state.keys import lifecycle
from mrtr_state.sdk.codec import KeysetCodec
from mrtr_state.state.replay import MemoryStore

mcp = pytest.importorskip("mcp", reason="the official SDK (mcp==2.3.0) is a test dependency")

from mcp import Client  # noqa: E402
from mcp.server.request_state import RequestStateSecurity  # noqa: E402
from mcp.shared.exceptions import MCPError  # noqa: E402
from mcp_types import ElicitResult, InputRequiredResult, InputResponses  # noqa: E402

from .test_mcp import _accept, elicitation_server  # noqa: E402


def test_our_codec_completes_round_trips_across_rotation_and_refuses_retired_keys(
    tmp_path: Path,
) -> None:
    path = tmp_path / "keyset.json"
    ms.Keyset.generate(("A256GCM",)).save(path)
    codec = KeysetCodec(path, format="aead", once=MemoryStore())
    seen: list[str] = []
    server = elicitation_server(
        RequestStateSecurity(codec=codec, bind_principal=None), seen, [codec.replay_guard()]
    )

    async def round_trip(between: Any = None) -> Any:
        async with Client(server, elicitation_callback=_accept) as client:
            first = await client.session.call_tool(
                "deploy", {"env": "prod"}, allow_input_required=True
            )
            assert isinstance(first, InputRequiredResult) and first.request_state is not None
            assert first.request_state.startswith("ms1.")
            if between is not None:
                between()
            responses: InputResponses = {
                "confirm": ElicitResult(action="accept", content={"ok": True})
            }
            done = await client.session.call_tool(
                "deploy",
                {"env": "prod"},
                request_state=first.request_state,
                input_responses=responses,
            )
            with pytest.raises(MCPError, match="Invalid or expired requestState"):
                await client.session.call_tool(  # the same token again: single use
                    "deploy",
                    {"env": "prod"},
                    request_state=first.request_state,
                    input_responses=responses,
                )
            return done

    assert "deployed prod" in json.dumps(anyio.run(round_trip).model_dump(mode="json"))

    def rotate() -> None:
        def add_and_promote(current: ms.Keyset) -> ms.Keyset:
            changed, key = current.with_new_key("A256GCM")
            return lifecycle.promote(changed, key.kid, now=int(__import__("time").time()))[0]

        ms.Keyset.update(path, add_and_promote)
        assert codec.keyset.reload() is True  # what the reload interval does within a second

    anyio.run(round_trip, rotate)  # minted under the old primary, opened after the promotion
    assert seen == ["awaiting-confirm", "awaiting-confirm"]

    def retire_primary() -> None:
        keyset = ms.Keyset.load(path)
        primary = keyset.primary("A256GCM").kid
        ms.Keyset.update(
            path,
            lambda current: lifecycle.retire(current, primary, now=0, retention=3660)[
                0
            ].with_new_key("A256GCM")[0],
        )
        # the codec would see the change within its one-second reload interval; a server that
        # revokes a key by hand can make it take effect at once
        assert codec.keyset.reload() is True

    async def retired_round() -> None:
        async with Client(server, elicitation_callback=_accept) as client:
            first = await client.session.call_tool(
                "deploy", {"env": "prod"}, allow_input_required=True
            )
            assert isinstance(first, InputRequiredResult)
            retire_primary()
            with pytest.raises(MCPError, match="Invalid or expired requestState"):
                await client.session.call_tool(
                    "deploy",
                    {"env": "prod"},
                    request_state=first.request_state,
                    input_responses={
                        "confirm": ElicitResult(action="accept", content={"ok": True})
                    },
                )

    anyio.run(retired_round)


def test_a_refused_attempt_does_not_burn_the_rightful_retry(tmp_path: Path) -> None:
    """Issue 16.2: redeeming inside unseal let a mismatched attempt consume the token first."""
    path = tmp_path / "keyset.json"
    ms.Keyset.generate(("A256GCM",)).save(path)
    codec = KeysetCodec(path, format="aead", once=MemoryStore())
    seen: list[str] = []
    server = elicitation_server(
        RequestStateSecurity(codec=codec, bind_principal=None), seen, [codec.replay_guard()]
    )
    answers: InputResponses = {"confirm": ElicitResult(action="accept", content={"ok": True})}

    async def rounds() -> None:
        async with Client(server, elicitation_callback=_accept) as client:
            first = await client.session.call_tool(
                "deploy", {"env": "prod"}, allow_input_required=True
            )
            assert isinstance(first, InputRequiredResult) and first.request_state is not None
            state = first.request_state
            with pytest.raises(MCPError, match="Invalid or expired requestState"):
                await client.session.call_tool(  # another request's arguments: refused
                    "deploy", {"env": "staging"}, request_state=state, input_responses=answers
                )
            done = await client.session.call_tool(  # the rightful retry still passes
                "deploy", {"env": "prod"}, request_state=state, input_responses=answers
            )
            assert "deployed prod" in json.dumps(done.model_dump(mode="json"))
            with pytest.raises(MCPError, match="Invalid or expired requestState"):
                await client.session.call_tool(  # and only once
                    "deploy", {"env": "prod"}, request_state=state, input_responses=answers
                )

    anyio.run(rounds)
    assert seen == ["awaiting-confirm"]


def test_a_single_use_codec_without_its_guard_refuses_rather_than_protect_nothing(
    tmp_path: Path,
) -> None:
    path = tmp_path / "keyset.json"
    ms.Keyset.generate(("A256GCM",)).save(path)
    codec = KeysetCodec(path, format="aead", once=MemoryStore())
    token = codec.seal(b'{"v":1}')
    from mcp.server.request_state import InvalidRequestState

    with pytest.raises(InvalidRequestState, match="replay guard not installed"):
        codec.unseal(token)
    with pytest.raises(ValueError, match="once="):
        KeysetCodec(path).replay_guard()
