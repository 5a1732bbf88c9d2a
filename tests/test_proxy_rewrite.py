"""The proxy's core, without a socket: sealing and opening states, one JSON-RPC message at a time
(the body rules are in test_proxy_jsonrpc, the event streams in test_proxy_sse)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

import mrtr_state as ms
from mrtr_state.proxy.jsonrpc import Body, parse_body
from mrtr_state.proxy.rewrite import Exchange, StateGuard, bearer_principal

from .helpers import handle_guard, token_guard

CALL: dict[str, Any] = {
    "jsonrpc": "2.0",
    "id": 7,
    "method": "tools/call",
    "params": {"name": "deploy", "arguments": {"env": "prod"}},
}
STATE = "eyJzdGVwIjogMX0="  # what a naive server emits: base64 JSON


def input_required(id_: Any = 7, state: str = STATE) -> dict[str, Any]:
    result = {"resultType": "input_required", "inputRequests": {}, "requestState": state}
    return {"jsonrpc": "2.0", "id": id_, "result": result}


def retry_of(token: str, **params: Any) -> dict[str, Any]:
    return {
        **CALL,
        "id": 8,
        "params": {**CALL["params"], "inputResponses": {}, "requestState": token, **params},
    }


class Clock:
    """A clock the tests move by hand."""

    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def guard(keyset: ms.Keyset) -> StateGuard:
    return token_guard(keyset, audience="fleet", ttl=60)


def seal(guard: StateGuard, answer: Any, request: Any, principal: str | None) -> Any:
    """The guard's sealing of ``answer``, awaited (its backend may wait on a store)."""
    return asyncio.run(guard.seal_response(answer, request, principal))


def opened(guard: StateGuard, message: Any, principal: str | None) -> Any:
    """The guard's opening of ``message``: (what to forward, the refusal)."""
    return asyncio.run(guard.open_request(message, principal))


def exchange_of(guard: StateGuard, body: Body, principal: str | None) -> Exchange:
    return asyncio.run(Exchange.build(guard, body, principal))


def rewritten(exchange: Exchange, message: Any) -> Any:
    return asyncio.run(exchange.rewrite(message))


def body_of(*messages: Any) -> Body:
    """A checked POST body of ``messages`` (a batch when more than one)."""
    value = list(messages) if len(messages) != 1 else messages[0]
    return parse_body(json.dumps(value).encode())


def sealed_token(guard: StateGuard, principal: str | None = "alice") -> str:
    out = seal(guard, input_required(), CALL, principal)
    token: str = out["result"]["requestState"]
    return token


def test_an_input_required_state_is_sealed_and_opens_to_the_original(guard: StateGuard) -> None:
    token = sealed_token(guard)
    assert token.startswith("ms1.") and STATE not in token
    forward, refusal = opened(guard, retry_of(token), "alice")
    assert refusal is None and forward is not None
    assert forward["params"]["requestState"] == STATE
    assert forward["params"]["inputResponses"] == {} and forward["id"] == 8


@pytest.mark.parametrize(
    ("change", "principal"),
    [
        pytest.param({"arguments": {"env": "staging"}}, "alice", id="other-arguments"),
        pytest.param({"name": "destroy"}, "alice", id="other-tool"),
        pytest.param({}, "mallory", id="other-principal"),
        pytest.param({}, None, id="no-principal"),
    ],
)
def test_a_retry_that_does_not_match_is_refused_with_the_uniform_error(
    guard: StateGuard, change: dict[str, Any], principal: str | None
) -> None:
    token = sealed_token(guard)
    forward, refusal = opened(guard, retry_of(token, **change), principal)
    assert forward is None and refusal is not None
    assert refusal == {
        "jsonrpc": "2.0",
        "id": 8,
        "error": {
            "code": -32602,
            "message": "Invalid or expired requestState",
            "data": {"reason": "invalid_request_state"},
        },
    }


def test_the_log_names_the_specific_reason_and_never_the_state(keyset: ms.Keyset) -> None:
    lines: list[dict[str, Any]] = []
    guard = token_guard(keyset, ttl=60, log=lines.append)
    token = sealed_token(guard)
    opened(guard, retry_of(token), "alice")
    middle = len(token) // 2  # a changed ciphertext character (never the same one again)
    tampered = token[:middle] + ("B" if token[middle] == "A" else "A") + token[middle + 1 :]
    opened(guard, retry_of(tampered), "alice")
    opened(guard, retry_of(token), "bob")
    assert [line["event"] for line in lines] == ["sealed", "opened", "refused", "refused"]
    primary = keyset.primary("A256GCM").kid
    assert lines[0]["kid"] == primary and lines[0]["format"] == "aead"
    assert lines[1]["kid"] == primary  # the opened state names the key it opened under
    assert lines[2]["result"] == "bad_signature" and lines[3]["result"] == "principal_mismatch"
    assert all(isinstance(line["latency_ms"], float) for line in lines)
    assert STATE not in json.dumps(lines)


def test_a_plain_or_foreign_state_never_reaches_the_server(guard: StateGuard) -> None:
    for state in (STATE, 42, None, "", "v1.abc"):
        forward, refusal = opened(guard, retry_of(state), "alice")  # type: ignore[arg-type]
        assert forward is None and refusal is not None and refusal["error"]["code"] == -32602


def test_expired_and_replayed_states_are_refused(keyset: ms.Keyset) -> None:
    clock = Clock()
    guard = token_guard(keyset, ttl=60, once=ms.open_store("memory:"), clock=clock)
    token = sealed_token(guard)
    assert opened(guard, retry_of(token), "alice")[1] is None
    assert opened(guard, retry_of(token), "alice")[1] is not None  # replayed
    lines: list[dict[str, Any]] = []
    expired = token_guard(keyset, ttl=60, clock=clock, log=lines.append)
    token = sealed_token(expired)
    clock.now += 60
    assert opened(expired, retry_of(token), "alice")[1] is not None
    assert lines[-1]["result"] == "expired"


def test_other_messages_pass_as_they_are(guard: StateGuard) -> None:
    for message in (
        {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {**CALL, "params": {"name": "deploy", "arguments": {}}},  # a first round
        {"jsonrpc": "2.0", "id": 2, "method": "sampling/createMessage", "params": {}},
        "not even an object",
    ):
        assert opened(guard, message, None) == (message, None)
    for answer in (
        {"jsonrpc": "2.0", "id": 7, "result": {"content": []}},
        {"jsonrpc": "2.0", "id": 7, "error": {"code": 1, "message": "x"}},
        {"jsonrpc": "2.0", "id": 7, "result": {"resultType": "input_required"}},  # no state
        {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"requestState": "x"}},
    ):
        assert seal(guard, answer, CALL, None) is answer


def test_a_state_with_no_matching_request_is_withheld(guard: StateGuard) -> None:
    out = seal(guard, input_required(), None, "alice")
    assert "result" not in out and out["error"]["code"] == -32603 and STATE not in json.dumps(out)


@pytest.mark.parametrize(
    ("result", "reason"),
    [
        pytest.param(
            {"resultType": "complete", "requestState": STATE},
            "requestState outside an input_required result",
            id="not-input-required",
        ),
        pytest.param(
            {"content": [], "requestState": STATE},
            "requestState outside an input_required result",
            id="no-result-type",
        ),
        pytest.param(
            {"resultType": "input_required", "requestState": {"plain": STATE}},
            "requestState is not a string",
            id="an-object",
        ),
        pytest.param(
            {"resultType": "input_required", "requestState": None},
            "requestState is not a string",
            id="null",
        ),
        pytest.param(
            {"resultType": "input_required", "RequestState": STATE},
            "the response has a member 'RequestState'",
            id="case-variant",
        ),
        pytest.param(
            {"resultType": "input_required", "requeſtState": STATE},  # noqa: RUF001
            "the response has a member 'requeſtState'",  # noqa: RUF001
            id="long-s-variant",
        ),
        pytest.param(
            {"resulttype": "input_required", "requestState": STATE},
            "the response has a member 'resulttype'",
            id="result-type-variant",
        ),
    ],
)
def test_a_state_the_proxy_cannot_seal_is_replaced_by_an_error(
    keyset: ms.Keyset, result: dict[str, Any], reason: str
) -> None:
    """Whatever shape the upstream's state takes, its plain value never reaches the client."""
    lines: list[dict[str, Any]] = []
    guard = token_guard(keyset, ttl=60, log=lines.append)
    answer = {"jsonrpc": "2.0", "id": 7, "result": result}
    out = seal(guard, answer, CALL, "alice")
    assert out == {
        "jsonrpc": "2.0",
        "id": 7,
        "error": {"code": -32603, "message": "the proxy could not protect requestState"},
    }
    assert lines[-1]["event"] == "refused" and lines[-1]["reason"].startswith(reason)


def test_a_response_member_spelled_in_another_case_is_not_passed_on(guard: StateGuard) -> None:
    answer = {"jsonrpc": "2.0", "id": 7, "Result": input_required()["result"]}
    out = seal(guard, answer, CALL, "alice")
    assert "error" in out and STATE not in json.dumps(out)


def test_a_state_on_a_method_that_cannot_carry_one_is_refused(guard: StateGuard) -> None:
    token = sealed_token(guard)
    message = {"jsonrpc": "2.0", "id": 3, "method": "tasks/get", "params": {"requestState": token}}
    forward, refusal = opened(guard, message, "alice")
    assert forward is None and refusal is not None and refusal["error"]["code"] == -32602


def test_an_oversized_state_is_withheld(keyset: ms.Keyset) -> None:
    lines: list[dict[str, Any]] = []
    guard = token_guard(keyset, ttl=60, log=lines.append)
    out = seal(guard, input_required(state="x" * 9000), CALL, "alice")
    assert out["error"]["code"] == -32603 and "size cap" in lines[-1]["reason"]


@pytest.mark.parametrize("id_", [0, "7", "a/b", 1.5, -3], ids=repr)
def test_ids_of_any_type_match_their_own_request_only(guard: StateGuard, id_: Any) -> None:
    call = {**CALL, "id": id_}
    other = {**CALL, "id": "x", "params": {"name": "other"}}
    exchange = exchange_of(guard, body_of(other, call), "alice")
    answered = rewritten(exchange, [input_required(id_)])
    token = answered[0]["result"]["requestState"]
    forward, _ = opened(guard, retry_of(token), "alice")
    assert forward is not None  # bound to deploy, the request with this id


def test_a_response_matches_its_request_by_numeric_value(guard: StateGuard) -> None:
    """A server may answer request 1 with id 1.0: the same id, the same request."""
    exchange = exchange_of(guard, body_of({**CALL, "id": 1}), "alice")
    answered = rewritten(exchange, input_required(1.0))
    assert answered["result"]["requestState"].startswith("ms1.")


def test_a_batch_forwards_what_passes_and_answers_what_is_refused(guard: StateGuard) -> None:
    token = sealed_token(guard)
    batch = [
        retry_of(token),
        {**retry_of("ms1.AAAA"), "id": 9},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
    ]
    exchange = exchange_of(guard, body_of(*batch), "alice")
    assert exchange.batch and exchange.changed
    assert [m.get("id") for m in exchange.forward] == [8, None]
    assert exchange.forward[0]["params"]["requestState"] == STATE
    assert [r["id"] for r in exchange.refusals] == [9]
    forwarded = exchange.forward_body(b"ignored")
    assert forwarded is not None and json.loads(forwarded) == exchange.forward
    single = exchange_of(guard, body_of(retry_of("ms1.AAAA")), "alice")
    assert single.forward_body(b"x") is None and len(single.refusals) == 1


def test_an_unchanged_body_is_forwarded_byte_for_byte(guard: StateGuard) -> None:
    original = b'{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"x":1.50}}'
    exchange = exchange_of(guard, parse_body(original), "alice")
    assert exchange.forward_body(original) is original


def test_requests_left_unanswered_by_a_dropped_event_get_an_error(guard: StateGuard) -> None:
    exchange = exchange_of(guard, body_of({**CALL, "id": 1}, {**CALL, "id": 2}), "alice")
    rewritten(exchange, input_required(1))
    assert exchange.missing_answers() == []  # nothing dropped: the stream may resume
    exchange.dropped("an event over the size cap")
    assert [m["id"] for m in exchange.missing_answers()] == [2]


def test_the_bearer_principal_is_a_digest_of_the_credential() -> None:
    alice = bearer_principal("Bearer abc.def")
    assert alice is not None and alice.startswith("bearer:") and "abc" not in alice
    assert bearer_principal("bearer abc.def") == alice
    assert bearer_principal("Bearer other") != alice
    assert bearer_principal(None) is None and bearer_principal("Basic dXNlcg==") is None
    assert bearer_principal("Bearer ") is None


def test_a_stored_record_whose_lock_is_not_its_bindings_is_refused_by_the_proxy() -> None:
    """The proxy's own path (verify_handle's has its test): a record whose bindings match the
    retry but whose lock does not (written over in the store) is refused, and stays."""
    from mrtr_state.state.handle_store import MemoryHandleStore

    store = MemoryHandleStore()
    lines: list[dict[str, Any]] = []
    guard = handle_guard(store, audience="fleet", log=lines.append)

    async def run() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        exchange = await Exchange.build(guard, body_of(CALL), "alice", "fleet")
        handle = (await exchange.rewrite(input_required()))["result"]["requestState"]
        assert handle.startswith("mh1.")  # filed before it was given out
        (key,) = store._records
        value, until = store._records[key]
        store._records[key] = (b"x" * 43 + value[43:], until)  # the lock, written over
        again = await Exchange.build(guard, body_of(retry_of(handle)), "alice", "fleet")
        store._records[key] = (value, until)  # the record as filed opens for the same retry
        fine = await Exchange.build(guard, body_of(retry_of(handle)), "alice", "fleet")
        return again.refusals, fine.forward

    refusals, forwarded = asyncio.run(run())
    assert refusals and refusals[0]["error"]["code"] == -32602
    refused = [line for line in lines if line["event"] == "refused"]
    assert [line["result"] for line in refused] == ["invalid_claims"]
    assert "lock does not match" in refused[0]["reason"]
    assert forwarded and forwarded[0]["params"]["requestState"] == STATE
