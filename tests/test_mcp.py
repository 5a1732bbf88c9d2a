"""MCP integration: the dict helpers, and live round trips with the official Python SDK."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

import mrtr_state as ms
from mrtr_state.keys.keyset import Key
from mrtr_state.sdk.mcp import (
    CapabilityMissing,
    check_capabilities,
    input_required_result,
    open_retry,
    request_fingerprint,
    wire_error,
)

from .helpers import keys_import, run

ELICIT_FORM = {
    "method": "elicitation/create",
    "params": {
        "mode": "form",
        "message": "Your GitHub login?",
        "requestedSchema": {"type": "object"},
    },
}
CAPS: dict[str, Any] = {"io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}}}


def call(arguments: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"name": "whoami", "arguments": arguments, "_meta": CAPS, **extra}


# --- helpers without the SDK ---------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["aead", "jws", "jwe"])
def test_input_required_result_and_retry_round_trip(keyset: ms.Keyset, fmt: str) -> None:
    result = input_required_result(
        keyset,
        method="tools/call",
        params=call({"repo": "x"}),
        state={"step": 1},
        input_requests={"login": ELICIT_FORM},
        principal="alice",
        audience="fleet",
        format=fmt,
    )
    assert result["resultType"] == "input_required" and "login" in result["inputRequests"]
    retry = call(
        {"repo": "x"},
        requestState=result["requestState"],
        inputResponses={"login": {"action": "accept"}},
    )
    state = open_retry(
        keyset, method="tools/call", params=retry, principal="alice", audience="fleet"
    )
    assert state == {"step": 1}
    for changed, error in (
        ({"params": call({"repo": "y"}, requestState=result["requestState"])}, ms.RequestMismatch),
        ({"method": "prompts/get"}, ms.RequestMismatch),
        ({"principal": "mallory"}, ms.PrincipalMismatch),
        ({"audience": "other"}, ms.AudienceMismatch),
    ):
        arguments: dict[str, Any] = {
            "method": "tools/call",
            "params": retry,
            "principal": "alice",
            "audience": "fleet",
            **changed,
        }
        with pytest.raises(error):
            open_retry(keyset, **arguments)


@pytest.mark.parametrize(
    ("method", "params", "reason"),
    [
        ("tools/call", {"name": {"env": "prod"}}, "no name string"),
        ("tools/call", {"name": ""}, "no name string"),
        ("tools/call", {}, "no name string"),
        ("resources/read", {"uri": 7}, "no uri string"),
        ("tools/call", {"name": "deploy", "arguments": "ms1.AAAA"}, "arguments are not an object"),
        ("prompts/get", {"name": "p", "arguments": [1]}, "arguments are not an object"),
        ("tools/call", {"name": "deploy", "arguments": 0}, "arguments are not an object"),
    ],
)
def test_a_retry_of_a_shape_no_request_has_is_a_mismatch_not_an_exception(
    keyset: ms.Keyset, method: str, params: dict[str, Any], reason: str
) -> None:
    # found by the proxy's differential fuzzing: a string for arguments raised ValueError
    token = ms.mint(keyset, "s", method=method, target="deploy")
    with pytest.raises(ms.RequestMismatch, match=reason):
        open_retry(keyset, method=method, params={**params, "requestState": token})


def test_the_fingerprint_ignores_the_json_rpc_id_and_meta() -> None:
    first = request_fingerprint("tools/call", {"name": "t", "arguments": {"a": 1}, "_meta": {}})
    retry = request_fingerprint(
        "tools/call",
        {"name": "t", "arguments": {"a": 1}, "requestState": "x", "inputResponses": {}},
    )
    assert first == retry
    assert request_fingerprint("resources/read", {"uri": "file:///a"}) != request_fingerprint(
        "resources/read", {"uri": "file:///b"}
    )


def test_only_the_three_methods_may_ask_for_input(keyset: ms.Keyset) -> None:
    with pytest.raises(ValueError, match="cannot answer input_required"):
        input_required_result(keyset, method="tools/list", params={}, state=1)
    with pytest.raises(ms.MalformedToken, match="no requestState"):
        open_retry(keyset, method="tools/call", params={"name": "t"})


@pytest.mark.parametrize(
    ("declared", "input_request", "missing"),
    [
        ({}, ELICIT_FORM, {"elicitation": {"form": {}}}),
        ({"elicitation": {}}, ELICIT_FORM, None),
        ({"elicitation": {"form": {}}}, ELICIT_FORM, None),
        (
            {"elicitation": {"form": {}}},
            {"method": "elicitation/create", "params": {"mode": "url", "url": "https://x"}},
            {"elicitation": {"url": {}}},
        ),
        ({"elicitation": {}}, {"method": "sampling/createMessage", "params": {}}, {"sampling": {}}),
        ({"roots": {}}, {"method": "roots/list"}, None),
        ({"sampling": {}}, {"method": "roots/list"}, {"roots": {}}),
    ],
)
def test_capability_check(
    declared: dict[str, Any], input_request: dict[str, Any], missing: dict[str, Any] | None
) -> None:
    meta = {"io.modelcontextprotocol/clientCapabilities": declared}
    if missing is None:
        check_capabilities(meta, {"r": input_request})
        return
    with pytest.raises(CapabilityMissing) as caught:
        check_capabilities(meta, {"r": input_request})
    assert caught.value.to_error() == {
        "code": -32021,
        "message": "Missing required client capability",
        "data": {"requiredCapabilities": missing},
    }


def test_wire_error_is_uniform() -> None:
    assert (
        wire_error(ms.ExpiredToken("expired 3 s ago"))
        == wire_error(ms.BadSignature("x"))
        == {
            "code": -32602,
            "message": "Invalid or expired requestState",
            "data": {"reason": "invalid_request_state"},
        }
    )


# --- live round trips with the official Python SDK -----------------------------------------

mcp = pytest.importorskip("mcp", reason="the official SDK (mcp==2.3.0) is a test dependency")

from mcp import Client  # noqa: E402
from mcp.server.mcpserver import Context, MCPServer  # noqa: E402
from mcp.server.request_state import RequestStateSecurity  # noqa: E402
from mcp.shared.exceptions import MCPError  # noqa: E402
from mcp_types import (  # noqa: E402
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitResult,
    InputRequiredResult,
)

SECRET = "live-" + "s" * 59


def elicitation_server(
    security: RequestStateSecurity, seen: list[str], middleware: list[Any] | None = None
) -> MCPServer:
    server = MCPServer("fleet", request_state_security=security, middleware=middleware)

    @server.tool()
    async def deploy(env: str, ctx: Context) -> str | InputRequiredResult:
        if ctx.input_responses is None:
            form = ElicitRequestFormParams(
                message="Deploy?",
                requested_schema={"type": "object", "properties": {"ok": {"type": "boolean"}}},
            )
            return InputRequiredResult(
                input_requests={"confirm": ElicitRequest(params=form)},
                request_state="awaiting-confirm",
            )
        seen.append(str(ctx.request_state))
        return f"deployed {env}"

    return server


def mcp_error(error: BaseException) -> MCPError | None:
    """The MCPError in ``error``, unwrapping the exception groups of the SDK's task groups."""
    if isinstance(error, MCPError):
        return error
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            found = mcp_error(inner)
            if found is not None:
                return found
    return None


def refused(run_it: Any, *args: Any) -> str:
    """Run an SDK exchange that must be refused; return the error message the client saw."""
    try:
        anyio.run(run_it, *args)
    except BaseException as error:
        found = mcp_error(error)
        if found is None:
            raise
        return str(found)
    raise AssertionError("the SDK accepted what it should have refused")


async def _accept(context: Any, params: Any) -> ElicitResult:
    return ElicitResult(action="accept", content={"ok": True})


def sdk_keyset() -> ms.Keyset:
    return ms.Keyset([Key.from_secret("mcp-py-v1", SECRET.encode())])


BINDING: dict[str, Any] = {
    "method": "tools/call",
    "target": "deploy",
    "arguments": {"env": "prod"},
    "audience": "fleet",
}


def test_a_token_the_sdk_server_minted_verifies_with_our_library_and_cli(tmp_path: Path) -> None:
    seen: list[str] = []
    server = elicitation_server(RequestStateSecurity(keys=[SECRET], bind_principal=None), seen)

    async def first_round() -> str:
        async with Client(server, elicitation_callback=_accept) as client:
            first = await client.session.call_tool(
                "deploy", {"env": "prod"}, allow_input_required=True
            )
            assert isinstance(first, InputRequiredResult) and first.request_state is not None
            return first.request_state

    token = anyio.run(first_round)
    assert ms.verify(sdk_keyset(), token, **BINDING).state == "awaiting-confirm"
    keyset_path = tmp_path / "keyset.json"
    keys_import(keyset_path, "mcp-py-v1", SECRET)
    out = run(
        "--keyset",
        str(keyset_path),
        "verify",
        "--method",
        "tools/call",
        "--target",
        "deploy",
        "--arguments",
        '{"env":"prod"}',
        "--audience",
        "fleet",
        token,
    )
    assert out.stdout == '"awaiting-confirm"\n'


def test_the_sdk_server_accepts_a_token_we_minted(keyset: ms.Keyset) -> None:
    seen: list[str] = []
    server = elicitation_server(RequestStateSecurity(keys=[SECRET], bind_principal=None), seen)
    ours = ms.mint(sdk_keyset(), "minted-by-mrtr-state", format="mcp-py", **BINDING)

    async def retry_with(token: str) -> Any:
        async with Client(server, elicitation_callback=_accept) as client:
            return await client.session.call_tool(
                "deploy",
                {"env": "prod"},
                request_state=token,
                input_responses={"confirm": ElicitResult(action="accept", content={"ok": True})},
            )

    result = anyio.run(retry_with, ours)
    assert "deployed prod" in json.dumps(result.model_dump(mode="json"))
    assert seen == ["minted-by-mrtr-state"]
    forged = ms.mint(sdk_keyset(), "x", format="mcp-py", **{**BINDING, "target": "other"})
    assert refused(retry_with, forged) == "Invalid or expired requestState"


# --- the SDK's secret is text; its default principal is compact JSON -------------------------


def echoed(folder: Path, text: str) -> Path:
    """A secret file as operators write one, ``echo "$SECRET" > FILE``: the text and a newline."""
    import os
    import subprocess

    path = folder / "sdk-secret.txt"
    subprocess.run(
        ["sh", "-c", 'umask 077 && echo "$SECRET" > "$FILE"'],
        env={"SECRET": text, "FILE": str(path), "PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        check=True,
    )
    assert path.read_bytes() == text.encode() + b"\n"
    return path


async def _first_round(server: MCPServer) -> str:
    async with Client(server, elicitation_callback=_accept) as client:
        first = await client.session.call_tool("deploy", {"env": "prod"}, allow_input_required=True)
        assert isinstance(first, InputRequiredResult) and first.request_state is not None
        return first.request_state


def test_a_secret_echoed_into_a_file_is_the_key_the_python_sdk_uses(tmp_path: Path) -> None:
    """The SDK suggests `secrets.token_hex(32)` and uses those 64 characters as they are: the
    file `echo` wrote imports as that text (its newline dropped, with a note), and the key is
    the SDK's both ways: its codec opens what the CLI mints, the CLI opens what its server mints."""
    import secrets

    from mcp.server.request_state import AESGCMRequestStateCodec

    secret = secrets.token_hex(32)
    ks = tmp_path / "keyset.json"
    imported = run(
        *("--keyset", str(ks), "keys", "import", "--alg", "mcp-py-v1"),
        *("--secret-file", str(echoed(tmp_path, secret))),
    )
    assert imported.stderr.startswith("note: dropped the line break (LF) that ends ")
    flags = ["--method", "tools/call", "--target", "deploy", "--arguments", '{"env":"prod"}']
    flags += ["--audience", "fleet"]
    token = run(
        "--keyset", str(ks), "mint", "--format", "mcp-py", *flags, "--state", '"from-the-cli"'
    ).stdout.strip()
    envelope = json.loads(AESGCMRequestStateCodec([secret]).unseal(token))
    assert envelope["s"] == "from-the-cli" and envelope["aud"] == "fleet"
    seen: list[str] = []
    server = elicitation_server(RequestStateSecurity(keys=[secret], bind_principal=None), seen)

    async def retry_with(token: str) -> Any:
        async with Client(server, elicitation_callback=_accept) as client:
            return await client.session.call_tool(
                "deploy",
                {"env": "prod"},
                request_state=token,
                input_responses={"confirm": ElicitResult(action="accept", content={"ok": True})},
            )

    assert "deployed prod" in json.dumps(anyio.run(retry_with, token).model_dump(mode="json"))
    assert seen == ["from-the-cli"]
    minted = anyio.run(_first_round, server)
    out = run("--keyset", str(ks), "verify", *flags, minted)
    assert out.stdout == '"awaiting-confirm"\n'
    # what `--encoding hex` made of the same file is another key: none of the SDK's tokens open
    other = tmp_path / "hex.json"
    run(
        *("--keyset", str(other), "keys", "import", "--alg", "mcp-py-v1", "--encoding", "hex"),
        *("--secret-file", str(tmp_path / "sdk-secret.txt")),
    )
    refused = run("--keyset", str(other), "verify", *flags, minted, code=1)
    assert refused.stderr.startswith("error: unknown key id ")


def test_the_documented_principal_verifies_what_the_sdk_bound_to_an_oauth_user(
    tmp_path: Path,
) -> None:
    """docs/polyglot.md's `verify --principal` example, run as written on a token the SDK's
    server minted for an authenticated request under its default principal binding."""
    from mcp.server.auth.middleware.auth_context import auth_context_var
    from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
    from mcp.server.auth.provider import AccessToken

    from .helpers import documented_example

    server = elicitation_server(RequestStateSecurity(keys=[SECRET]), [])
    user = AccessToken(
        token="opaque",
        client_id="deploy-bot",
        scopes=[],
        subject="alice",
        claims={"iss": "https://auth.example.com"},
    )

    async def as_the_user() -> str:
        auth_context_var.set(AuthenticatedUser(user))  # what the SDK's auth middleware sets
        return await _first_round(server)

    token = anyio.run(as_the_user)
    ks = tmp_path / "keyset.json"
    keys_import(ks, "mcp-py-v1", SECRET)
    argv, shown = documented_example("polyglot.md", "Python (`mcp-py`)", "mrtr-state verify")
    args = argv[1:]
    assert "--principal" in args and args[-1] == "$CAPTURED"
    out = run("--keyset", str(ks), *args[:-1], token)
    assert out.stdout.splitlines() == shown == ['"awaiting-confirm"']
    principal = args[args.index("--principal") + 1]
    assert principal == json.dumps(["deploy-bot", "https://auth.example.com", "alice"]).replace(
        " ", ""
    )
    for wrong in (("--principal", "alice"), ()):
        stated = [a for a in args[:-1] if a not in ("--principal", principal)] + list(wrong)
        refused = run("--keyset", str(ks), *stated, "--json", token, code=4)
        assert json.loads(refused.stdout)["error"]["code"] == "principal_mismatch"
