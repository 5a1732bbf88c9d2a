"""The probe's parts that need no server: the states it sends (tampered, forged), what it reads
in a state (readable, its format), the answers it makes, what a refusal must not say, the
header rules; and SSE framing as the WHATWG spec frames it, through a real socket."""

from __future__ import annotations

import base64
import json
import socket
from typing import Any

import pytest

import mrtr_state as ms
from mrtr_state.keys.keyset import Key
from mrtr_state.probe.answers import default_answers
from mrtr_state.probe.http import header_value
from mrtr_state.probe.leaks import leaks_in
from mrtr_state.probe.recognise import format_of
from mrtr_state.probe.states import State, changed_value
from mrtr_state.probe.target import parse_header

from .helpers import run
from .probe_servers import RawServer, read_request

NAIVE = base64.b64encode(json.dumps({"step": 1, "env": "prod"}).encode()).decode()


def _segments(text: str) -> list[bytes]:
    """Each segment of ``text`` decoded strictly (url alphabet, canonical), or its text."""
    out = []
    for part in text.split("."):
        try:
            filled = part + "=" * (-len(part) % 4)
            data = base64.urlsafe_b64decode(filled)
            assert base64.urlsafe_b64encode(data).decode().rstrip("=") == part.rstrip("=")
            out.append(data)
        except (ValueError, AssertionError):
            out.append(part.encode())
    return out


@pytest.mark.parametrize(
    "issued",
    [
        NAIVE,  # padded standard base64 of JSON
        ms.mint(ms.Keyset.generate(("HS256",)), {"n": 1}, format="jws"),  # three url segments
        ms.mint(ms.Keyset.generate(("A256GCM",)), {"n": 1}, format="aead"),  # prefix + binary
        "deadbeef" * 8,  # hex
        '{"step":1,"env":"prod"}',  # JSON as it is
    ],
    ids=["base64-json", "jws", "aead", "hex", "raw-json"],
)
def test_a_tampered_state_differs_in_its_bytes_and_keeps_a_valid_encoding(issued: str) -> None:
    variants = State(issued).tampered()
    assert variants
    for variant in variants:
        assert variant.text != issued
        assert len(variant.text) == len(issued)  # one byte changed, the encoding kept
        assert variant.text.count(".") == issued.count(".")
        if issued.startswith("{"):
            json.loads(variant.text)  # still JSON
        elif issued == NAIVE:
            before, after = base64.b64decode(issued), base64.b64decode(variant.text, validate=True)
            assert base64.b64encode(after).decode() == variant.text  # canonical
            assert sum(a != b for a, b in zip(before, after, strict=True)) == 1
            assert json.loads(after) != json.loads(before)  # a value changed, still JSON
        elif set(issued) <= set("0123456789abcdef"):
            assert bytes.fromhex(variant.text) != bytes.fromhex(issued)
        else:
            changed = [
                (a, b)
                for a, b in zip(_segments(issued), _segments(variant.text), strict=True)
                if a != b
            ]
            assert len(changed) == 1  # one segment, its decoded bytes
            a, b = changed[0]
            assert len(a) == len(b) and sum(x != y for x, y in zip(a, b, strict=True)) == 1


def test_the_naive_state_is_tampered_inside_its_value_not_its_names() -> None:
    decoded = {base64.b64decode(v.text) for v in State(NAIVE).tampered()}
    assert decoded == {b'{"step": 1, "env": "proe"}'}  # the one string value, its last letter


def test_forged_states_keep_the_shape_and_the_readable_one_changes_one_value() -> None:
    keyset = ms.Keyset([Key.from_secret("mcp-ts-v1", b"t" * 40)])
    issued = ms.mint(keyset, {"env": "prod"}, format="mcp-ts")
    state = State(issued)
    random = state.forged_random()
    assert random.text.startswith("v1.") and random.text.count(".") == 2
    assert len(random.text) == len(issued) and random.text != issued
    readable = state.forged_readable()
    assert readable is not None
    body, issued_body = json.loads(_segments(readable.text)[1]), json.loads(_segments(issued)[1])
    # the first value of the outermost object (its expiry, here) changed; the rest as issued
    assert body == {**issued_body, "exp": issued_body["exp"] + 1}
    assert readable.text.rsplit(".", 1)[1] == issued.rsplit(".", 1)[1]
    with pytest.raises(ms.InvalidToken):
        ms.verify(keyset, readable.text)
    encrypted = State(ms.mint(ms.Keyset.generate(("A256GCM",)), {"n": 1}, format="aead"))
    assert encrypted.readable() is None and encrypted.forged_readable() is None


def test_changed_value_changes_the_first_string_or_number_outermost_first() -> None:
    assert changed_value({"env": "prod", "n": 1}) == (
        {"env": "proe", "n": 1},
        '["env"] changed from "prod" to "proe"',
    )
    assert changed_value({"n": 9}) == ({"n": 10}, '["n"] changed from 9 to 10')
    assert changed_value({"a": {"b": [True]}})[0] == {"a": {"b": [False]}}  # type: ignore[index]
    assert changed_value({"p": {"env": "prod"}, "exp": 5})[0] == {"p": {"env": "prod"}, "exp": 6}  # type: ignore[index]
    assert changed_value({"a": "!"})[0] == {"a": "!x"}  # type: ignore[index]
    assert changed_value({}) is None and changed_value({"a": None}) is None


def test_the_format_is_named_by_the_packages_own_detection() -> None:
    assert format_of(ms.mint(ms.Keyset.generate(("A256GCM",)), 1, format="aead")) == "aead"
    assert format_of(ms.mint(ms.Keyset.generate(("HS256",)), 1, format="jws")) == "jws"
    assert format_of(ms.mint(ms.Keyset.generate(("dir+A256GCM",)), 1, format="jwe")) == "jwe"
    ts = ms.Keyset([Key.from_secret("mcp-ts-v1", b"t" * 40)])
    assert format_of(ms.mint(ts, {"a": 1}, format="mcp-ts")) == "mcp-ts"
    py = ms.Keyset([Key.from_secret("mcp-py-v1", b"p" * 32)])
    token = ms.mint(py, "s", format="mcp-py", method="tools/call", target="t", arguments={})
    assert format_of(token) == "mcp-py or mcp-rb"  # one shape, two SDKs: the key would tell
    assert format_of("mh1." + "a" * 40) == "mrtr-state handle"
    assert format_of(NAIVE) is None and format_of("v1.not-a-token!") is None


def test_default_answers_give_the_least_each_schema_allows() -> None:
    schema = {
        "type": "object",
        "properties": {
            "ok": {"type": "boolean"},
            "name": {"type": "string", "minLength": 3},
            "age": {"type": "integer", "minimum": 18},
            "colour": {"type": "string", "enum": ["red", "blue"]},
            "mail": {"type": "string", "format": "email"},
            "optional": {"type": "string"},
        },
        "required": ["ok", "name", "age", "colour", "mail"],
    }
    requests = {
        "form": {"method": "elicitation/create", "params": {"requestedSchema": schema}},
        "link": {"method": "elicitation/create", "params": {"mode": "url", "url": "https://x"}},
        "llm": {"method": "sampling/createMessage", "params": {"messages": []}},
        "roots": {"method": "roots/list"},
    }
    answers = default_answers(requests)
    assert answers["form"] == {
        "action": "accept",
        "content": {"ok": False, "name": "aaa", "age": 18, "colour": "red",
                    "mail": "probe@example.com"},
    }  # fmt: skip
    assert answers["link"] == {"action": "accept"}
    assert answers["llm"]["role"] == "assistant" and answers["llm"]["content"]["type"] == "text"
    assert answers["roots"] == {"roots": []}
    assert default_answers(None) == {}


def test_a_refusal_leaks_what_names_the_servers_insides_and_not_the_uniform_error() -> None:
    assert leaks_in('{"code":-32602,"message":"Invalid or expired requestState"}', []) == []
    assert leaks_in("Internal Server Error", []) == []
    python = 'Traceback (most recent call last):\n  File "/srv/app/server.py", line 9\nKeyError: x'
    kinds = {kind for kind, _ in leaks_in(python, [])}
    assert {"a Python stack trace", "a Python stack frame", "an exception class name"} <= kinds
    assert "a file path" in kinds
    node = "TypeError: x\n    at verify (/app/node_modules/codec/index.js:12:7)"
    assert "a JavaScript stack frame" in {kind for kind, _ in leaks_in(node, [])}
    java = "at com.example.Codec.open(Codec.java:41)"
    assert "a Java stack frame" in {kind for kind, _ in leaks_in(java, [])}
    assert leaks_in("-----BEGIN PRIVATE KEY-----", [])[0][0] == "a PEM private key"
    assert leaks_in('hmac_key = "0123456789abcdef"', [])[0][0] == "a named secret"
    state = "ab" * 40  # a long hex state the server echoes is not key material
    assert leaks_in(f"unknown state {state}", [state]) == []
    assert leaks_in(f"unknown state {state}", [])[0][0] == "a long hex string (key material?)"


def test_headers_are_name_colon_value_and_mcp_name_survives_http() -> None:
    assert parse_header("Authorization:  Bearer x \t") == ("Authorization", "Bearer x")
    assert parse_header("X-Empty:") == ("X-Empty", "")
    for bad in ("NoColon", ": x", "Bad Name: x", "X: a\nb"):
        with pytest.raises(ValueError, match="header"):
            parse_header(bad)
    assert header_value("deploy") == "deploy"
    assert header_value(" padded") == "=?base64?IHBhZGRlZA==?="
    assert header_value("café") == "=?base64?" + base64.b64encode("café".encode()).decode() + "?="
    assert header_value("=?base64?eA==?=") != "=?base64?eA==?="  # never read as the sentinel


def _sse_server(framing: bytes, ended_inside: bool) -> Any:
    """Answers every request with SSE: a notification, then the response, lines ended by
    ``framing``; the last event cut by the end of the stream when ``ended_inside``."""

    def handle(conn: socket.socket) -> None:
        request = read_request(conn)
        body = json.loads(request.partition(b"\r\n\r\n")[2] or b"{}")
        if "id" not in body:
            conn.sendall(b"HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n")
            conn.close()
            return
        if body["method"] == "server/discover":
            result: dict[str, Any] = {
                "supportedVersions": ["2026-07-28"],
                "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "cr", "version": "1"}},
            }
        else:
            result = {"content": []}  # the tool never asks for input
        answer = json.dumps({"jsonrpc": "2.0", "id": body["id"], "result": result}).encode()
        note = b'data: {"jsonrpc":"2.0","method":"notifications/message","params":{}}'
        events = b": comment" + framing + note + framing + framing
        events += b"event: message" + framing + b"data: " + answer
        events += b"" if ended_inside else framing + framing
        conn.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
            + events
        )
        conn.close()

    return handle


@pytest.mark.parametrize("framing", [b"\n", b"\r\n", b"\r"], ids=["lf", "crlf", "cr"])
@pytest.mark.parametrize("ended_inside", [False, True], ids=["blank-line", "end-of-stream"])
def test_sse_answers_are_framed_as_whatwg_frames_them(framing: bytes, ended_inside: bool) -> None:
    with RawServer(_sse_server(framing, ended_inside)) as server:
        done = run("probe", server.url, "--tool", "t", "--json", "--timeout", "2s", code=8)
    report = json.loads(done.stdout)
    assert report["server"] == {"name": "cr", "version": "1", "protocol": "2026-07-28"}
    assert "tool t did not ask for input (result" in report["error"]["message"]
