"""The proxy's core, without a socket: one JSON-RPC message or one SSE event at a time."""

from __future__ import annotations

import json
from typing import Any

import pytest

import mrtr_state as ms
from mrtr_state.proxy.rewrite import EventStream, Exchange, StateGuard, bearer_principal

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


@pytest.fixture
def guard(keyset: ms.Keyset) -> StateGuard:
    return StateGuard(keyset, audience="fleet", ttl=60)


def sealed_token(guard: StateGuard, principal: str | None = "alice") -> str:
    out = guard.seal_response(input_required(), CALL, principal)
    token: str = out["result"]["requestState"]
    return token


def test_an_input_required_state_is_sealed_and_opens_to_the_original(guard: StateGuard) -> None:
    token = sealed_token(guard)
    assert token.startswith("ms1.") and STATE not in token
    forward, refusal = guard.open_request(retry_of(token), "alice")
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
    forward, refusal = guard.open_request(retry_of(token, **change), principal)
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
    guard = StateGuard(keyset, ttl=60, log=lines.append)
    token = sealed_token(guard)
    guard.open_request(retry_of(token), "alice")
    middle = len(token) // 2  # a changed ciphertext character (never the same one again)
    tampered = token[:middle] + ("B" if token[middle] == "A" else "A") + token[middle + 1 :]
    guard.open_request(retry_of(tampered), "alice")
    guard.open_request(retry_of(token), "bob")
    assert [line["event"] for line in lines] == ["sealed", "verified", "refused", "refused"]
    primary = keyset.primary("A256GCM").kid
    assert lines[0]["kid"] == primary and lines[0]["format"] == "aead"
    assert lines[1]["kid"] == primary  # the verified state names the key it opened under
    assert lines[2]["result"] == "bad_signature" and lines[3]["result"] == "principal_mismatch"
    assert all(isinstance(line["latency_ms"], float) for line in lines)
    assert STATE not in json.dumps(lines)


def test_a_plain_or_foreign_state_never_reaches_the_server(guard: StateGuard) -> None:
    for state in (STATE, 42, None, "", "v1.abc"):
        forward, refusal = guard.open_request(retry_of(state), "alice")  # type: ignore[arg-type]
        assert forward is None and refusal is not None and refusal["error"]["code"] == -32602


def test_expired_and_replayed_states_are_refused(keyset: ms.Keyset) -> None:
    once = ms.open_store("memory:")
    guard = StateGuard(keyset, ttl=1, once=once)
    token = sealed_token(guard)
    assert guard.open_request(retry_of(token), "alice")[1] is None
    assert guard.open_request(retry_of(token), "alice")[1] is not None  # replayed
    expired = StateGuard(keyset, ttl=1)
    token = sealed_token(expired)
    import time

    time.sleep(2.1)
    assert expired.open_request(retry_of(token), "alice")[1] is not None


def test_other_messages_pass_as_they_are(guard: StateGuard) -> None:
    for message in (
        {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {**CALL, "params": {"name": "deploy", "arguments": {}}},  # a first round
        {"jsonrpc": "2.0", "id": 2, "method": "sampling/createMessage", "params": {}},
        "not even an object",
    ):
        assert guard.open_request(message, None) == (message, None)
    ordinary = {"jsonrpc": "2.0", "id": 7, "result": {"content": []}}
    assert guard.seal_response(ordinary, CALL, None) is ordinary
    error = {"jsonrpc": "2.0", "id": 7, "error": {"code": 1, "message": "x"}}
    assert guard.seal_response(error, CALL, None) is error


def test_a_state_with_no_matching_request_is_withheld(guard: StateGuard) -> None:
    out = guard.seal_response(input_required(), None, "alice")
    assert "result" not in out and out["error"]["code"] == -32603 and STATE not in json.dumps(out)


@pytest.mark.parametrize("id_", [0, "7", "a/b", None, 1.5, -3], ids=repr)
def test_ids_of_any_type_match_their_own_request_only(guard: StateGuard, id_: Any) -> None:
    call = {**CALL, "id": id_}
    other = {**CALL, "id": "x" if id_ != "x" else "y", "params": {"name": "other"}}
    exchange = Exchange(guard, [other, call], "alice")
    answered = exchange.rewrite([input_required(id_)])
    token = answered[0]["result"]["requestState"]
    forward, _ = guard.open_request(retry_of(token), "alice")
    assert forward is not None  # bound to deploy, the request with this id


def test_a_batch_forwards_what_passes_and_answers_what_is_refused(guard: StateGuard) -> None:
    token = sealed_token(guard)
    batch = [
        retry_of(token),
        {**retry_of("ms1.AAAA"), "id": 9},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
    ]
    exchange = Exchange(guard, batch, "alice")
    assert exchange.batch and exchange.changed and exchange.forward is not None
    assert [m.get("id") for m in exchange.forward] == [8, None]
    assert exchange.forward[0]["params"]["requestState"] == STATE
    assert [r["id"] for r in exchange.refusals] == [9]
    single = Exchange(guard, retry_of("ms1.AAAA"), "alice")
    assert single.forward is None and len(single.refusals) == 1


def test_the_bearer_principal_is_a_digest_of_the_credential() -> None:
    alice = bearer_principal("Bearer abc.def")
    assert alice is not None and alice.startswith("bearer:") and "abc" not in alice
    assert bearer_principal("bearer abc.def") == alice
    assert bearer_principal("Bearer other") != alice
    assert bearer_principal(None) is None and bearer_principal("Basic dXNlcg==") is None
    assert bearer_principal("Bearer ") is None


# --- SSE ----------------------------------------------------------------------------------


def events_of(stream: EventStream, data: bytes, step: int) -> bytes:
    out = b""
    for start in range(0, len(data), step):
        for event in stream.feed(data[start : start + step]):
            out += event
    return out + stream.close()


@pytest.mark.parametrize("step", [1, 2, 3, 7, 1000])
@pytest.mark.parametrize("newline", [b"\n", b"\r\n", b"\r"], ids=["lf", "crlf", "cr"])
def test_events_split_anywhere_come_out_whole_and_untouched_unless_rewritten(
    step: int, newline: bytes
) -> None:
    n = newline
    untouched = b": comment" + n + b"retry: 10" + n + n + b"data: not json" + n + n
    rewritten = b"id: 1" + n + b"event: message" + n + b'data: {"a":' + n + b"data: 1}" + n + n
    stream = EventStream(lambda message: {"b": 2} if message == {"a": 1} else message)
    out = events_of(stream, untouched + rewritten + b"data: tail", step)
    expected = b"id: 1" + n + b"event: message" + n + b'data: {"b":2}' + n + n
    if n == b"\r":  # CR-only streams are rewritten with LF (both are valid line ends)
        expected = expected.replace(b"\r", b"\n")
    assert out == untouched + expected + b"data: tail"


def test_an_event_stream_seals_the_state_in_each_event(guard: StateGuard) -> None:
    exchange = Exchange(guard, CALL, "alice")
    body = b"data: " + json.dumps(input_required()).encode() + b"\n\n"
    out = events_of(EventStream(exchange.rewrite), body, 5)
    message = json.loads(out.removeprefix(b"data: "))
    assert message["result"]["requestState"].startswith("ms1.")
