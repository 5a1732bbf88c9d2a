"""The bodies the proxy forwards: every rule of ``proxy/jsonrpc.py`` refused by name, and a
differential test that whatever is forwarded reads the same to the proxy and to the upstream's
JSON readers (Python's lenient ``json``, Node's ``JSON.parse``, Go's case-insensitive member
matching)."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import random
import subprocess
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

import mrtr_state as ms
from mrtr_state.proxy.jsonrpc import Refusal, check_routing_headers, id_key, parse_body
from mrtr_state.proxy.rewrite import Exchange

from .helpers import program, token_guard

CALL = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "t"}}


def refused(body: bytes) -> Refusal:
    with pytest.raises(Refusal) as caught:
        parse_body(body)
    return caught.value


@pytest.mark.parametrize(
    ("body", "code", "reason"),
    [
        pytest.param(b"", -32700, "parse error: the body is empty", id="empty"),
        pytest.param(b" \r\n\t", -32700, "parse error: the body is empty", id="blank"),
        pytest.param(b"{oops", -32700, "parse error: not valid JSON", id="not-json"),
        pytest.param(b"\xef\xbb\xbf{}", -32700, "parse error", id="byte-order-mark"),
        pytest.param(b"\x0c{}", -32700, "parse error", id="form-feed-is-not-json-space"),
        pytest.param(b'{"a":1,"a":2}', -32700, "parse error: JSON has a duplicate", id="dup"),
        pytest.param(b"[NaN]", -32700, "parse error: JSON constant NaN", id="nan"),
        pytest.param(b"{} {}", -32700, "parse error: not valid JSON", id="trailing"),
        pytest.param(b"[]", -32600, "invalid request: an empty batch", id="empty-batch"),
        pytest.param(b"[1]", -32600, "invalid request: a message is not a JSON object", id="num"),
        pytest.param(b'"x"', -32600, "invalid request: a message is not a JSON object", id="str"),
        pytest.param(
            b'{"jsonrpc":"1.0","id":1,"method":"ping"}',
            -32600,
            'invalid request: jsonrpc must be "2.0"',
            id="jsonrpc-1.0",
        ),
        pytest.param(
            b'{"id":1,"method":"ping"}', -32600, "invalid request: jsonrpc", id="no-jsonrpc"
        ),
        pytest.param(
            b'{"jsonrpc":"2.0","id":1,"method":7}',
            -32600,
            "invalid request: method must be a non-empty string",
            id="method-number",
        ),
        pytest.param(
            b'{"jsonrpc":"2.0","id":1,"method":""}',
            -32600,
            "invalid request: method must be a non-empty string",
            id="method-empty",
        ),
        pytest.param(
            b'{"jsonrpc":"2.0","id":1,"method":"ping","result":{}}',
            -32600,
            "invalid request: a request carries a result or error",
            id="request-with-result",
        ),
        pytest.param(
            b'{"jsonrpc":"2.0","id":true,"method":"ping"}',
            -32600,
            "a request id must be a string or a number",
            id="id-bool",
        ),
        pytest.param(
            b'{"jsonrpc":"2.0","id":null,"method":"ping"}',
            -32600,
            "a request id must be a string or a number",
            id="id-null",
        ),
        pytest.param(
            b'{"jsonrpc":"2.0","id":{},"method":"ping"}',
            -32600,
            "a request id must be a string or a number",
            id="id-object",
        ),
        pytest.param(
            b'{"jsonrpc":"2.0","id":1' + b"0" * 400 + b',"method":"ping"}',
            -32600,
            "a request id is a number too large",
            id="id-too-large",
        ),
        pytest.param(
            b'{"jsonrpc":"2.0","id":1,"method":"ping","params":null}',
            -32600,
            "invalid request: params must be an object or array",
            id="params-null",
        ),
        pytest.param(
            b'{"jsonrpc":"2.0","id":1,"method":"ping","params":"x"}',
            -32600,
            "invalid request: params must be an object or array",
            id="params-string",
        ),
        pytest.param(
            b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":["deploy",{}]}',
            -32600,
            "invalid request: params of tools/call must be an object",
            id="positional-tool-call",
        ),
        pytest.param(
            b'{"jsonrpc":"2.0","id":1}',
            -32600,
            "invalid request: a message is neither a request nor a response",
            id="neither",
        ),
        pytest.param(
            b'{"jsonrpc":"2.0","id":1,"result":{},"error":{}}',
            -32600,
            "invalid request: a message is neither a request nor a response",
            id="result-and-error",
        ),
        pytest.param(
            b'{"jsonrpc":"2.0","id":[1],"result":{}}',
            -32600,
            "a request id must be a string or a number",
            id="response-id-array",
        ),
        pytest.param(
            b'{"jsonrpc":"2.0","method":"tools/call","params":{"name":"t","requestState":"x"}}',
            -32600,
            "invalid request: a notification carries requestState",
            id="notification-with-state",
        ),
        pytest.param(
            b'{"jsonrpc":"2.0","method":"notifications/x","params":{"requestState":"x"}}',
            -32600,
            "invalid request: a notification carries requestState",
            id="other-notification-with-state",
        ),
        pytest.param(
            b'{"jsonrpc":"2.0","id":1,"Method":"tools/call","method":"ping"}',
            -32600,
            "invalid request: a message has a member 'Method'",
            id="method-case-variant",
        ),
        pytest.param(
            b'{"jsonrpc":"2.0","id":1,"method":"ping","PARAMS":{}}',
            -32600,
            "invalid request: a message has a member 'PARAMS'",
            id="params-case-variant",
        ),
        pytest.param(
            b'{"jsonrpc":"2.0","id":1,"method":"tools/call",'
            b'"params":{"name":"t","RequestState":"forged"}}',
            -32600,
            "invalid request: params has a member 'RequestState'",
            id="state-case-variant",
        ),
        pytest.param(
            b'{"jsonrpc":"2.0","id":1,"method":"tools/call",'
            b'"params":{"name":"t","reque\\u017ftState":"forged"}}',
            -32600,
            "invalid request: params has a member 'reque\u017ftState'",
            id="state-long-s-variant",
        ),
        pytest.param(
            b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"NAME":"x","name":"t"}}',
            -32600,
            "invalid request: params has a member 'NAME'",
            id="name-case-variant",
        ),
    ],
)
def test_a_body_the_proxy_does_not_understand_is_refused_whole(
    body: bytes, code: int, reason: str
) -> None:
    refusal = refused(body)
    assert refusal.status == 400 and refusal.code == code
    assert refusal.reason.startswith(reason)
    assert refusal.body() == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": code, "message": refusal.reason},
    }


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("1", "1"),
        ("1", "1.0"),
        ("1", "1e0"),
        ("1", "10e-1"),
        ("0", "-0"),
        ('"a"', '"\\u0061"'),
        ("9007199254740992", "9007199254740993"),  # one double: a JavaScript server confuses them
    ],
)
def test_two_requests_of_a_batch_with_one_id_are_refused(first: str, second: str) -> None:
    body = (
        f'[{{"jsonrpc":"2.0","id":{first},"method":"tools/call","params":{{"name":"deploy",'
        f'"arguments":{{"env":"prod"}}}}}},{{"jsonrpc":"2.0","id":{second},"method":"tools/call",'
        f'"params":{{"name":"deploy","arguments":{{"env":"dev"}}}}}}]'
    ).encode()
    assert "share an id" in refused(body).reason


def test_ids_that_differ_as_json_values_stay_apart() -> None:
    body = parse_body(
        b'[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":"1","method":"ping"},'
        b'{"jsonrpc":"2.0","method":"notifications/x"},{"jsonrpc":"2.0","id":1,"result":{}}]'
    )
    assert len(body.messages) == 4 and body.batch
    assert id_key(1) == id_key(1.0) != id_key("1")


# --- differential: what the proxy forwards reads the same to every upstream --------------------

KEYSET = ms.Keyset.generate(("A256GCM",))
GUARD = token_guard(KEYSET, ttl=300)
VALID = ms.mint(
    KEYSET,
    "the server's own state",
    method="tools/call",
    target="deploy",
    arguments={"env": "prod"},
    format="aead",
)
MESSAGE_KEYS = ("jsonrpc", "id", "method", "params", "result", "error")
PARAMS_KEYS = ("requestState", "name", "arguments", "uri", "inputResponses", "_meta")

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=6),
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
)
params = st.dictionaries(
    st.sampled_from(
        [
            *PARAMS_KEYS,
            "RequestState",
            "requestSTATE",
            "reque\u017ftState",
            "NAME",
            "Arguments",
            "requestState ",
            "other",
        ]
    ),
    st.one_of(
        st.sampled_from([VALID, "deploy", "forged", "ms1.AAAA"]),
        st.just({"env": "prod"}),
        values,
    ),
    max_size=4,
)
ids = st.one_of(st.integers(-(2**60), 2**60), st.floats(-1e6, 1e6), st.text(max_size=4))
methods = st.sampled_from(["tools/call", "prompts/get", "resources/read", "ping", "tasks/get"])
odd_members = st.dictionaries(
    st.sampled_from(["Method", "PARAMS", "iD", "extra", "Result"]), values, max_size=1
)
requests = st.builds(
    lambda id_, method, p, odd: {"jsonrpc": "2.0", "id": id_, "method": method, "params": p, **odd},
    ids,
    methods,
    params,
    odd_members | st.just({}),
)
retries = st.builds(
    lambda id_, extra: {
        "jsonrpc": "2.0",
        "id": id_,
        "method": "tools/call",
        "params": {"name": "deploy", "arguments": {"env": "prod"}, "requestState": VALID, **extra},
    },
    ids,
    st.dictionaries(
        st.sampled_from(["inputResponses", "_meta", "Arguments", "x"]), values, max_size=1
    ),
)
notifications = st.builds(
    lambda p: {"jsonrpc": "2.0", "method": "notifications/x", "params": p}, params
)
responses = st.builds(lambda id_, r: {"jsonrpc": "2.0", "id": id_, "result": r}, ids, values)
wild = st.dictionaries(
    st.sampled_from([*MESSAGE_KEYS, "Method", "PARAMS", "iD", "extra"]),
    st.one_of(methods, st.integers(-3, 3), params, values),
    max_size=5,
).map(lambda m: {"jsonrpc": "2.0", **m})
messages = st.one_of(requests, retries, retries, notifications, responses, wild)


@st.composite
def bodies(draw: st.DrawFn) -> bytes:
    """A JSON-RPC body, written as a hostile client might: escapes, spaces, duplicates."""
    batch = draw(st.booleans())
    chosen = draw(st.lists(messages, min_size=1, max_size=3)) if batch else [draw(messages)]
    value: Any = chosen if batch else chosen[0]
    rng = draw(st.randoms(use_true_random=True))
    text = _write(value, rng)
    if draw(st.integers(0, 9)) == 9:  # a duplicate member somewhere
        text = text.replace("{", '{"method":"x",', 1).replace('{"method":"x",}', "{}")
    return text.encode("utf-8", "surrogatepass")


def _write(value: Any, rng: random.Random) -> str:
    """JSON text of ``value`` with random whitespace and \\u escapes in strings and names."""
    space = rng.choice(["", "", " ", "\n", "\t", "\r\n "])
    if isinstance(value, dict):
        members = [f"{_string(k, rng)}{space}:{_write(v, rng)}" for k, v in value.items()]
        return "{" + space + ("," + space).join(members) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_write(v, rng) for v in value) + space + "]"
    if isinstance(value, str):
        return _string(value, rng)
    if isinstance(value, float) and rng.random() < 0.3:
        return repr(value).replace("e+", "E")  # another spelling of the same number
    return json.dumps(value)


def _string(text: str, rng: random.Random) -> str:
    out = []
    for char in text:
        if char in '"\\' or ord(char) < 0x20 or rng.random() < 0.2:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def inspected(body: bytes) -> tuple[Exchange, bytes] | None:
    """What the proxy makes of ``body``: the exchange and the bytes it forwards, or None."""
    try:
        exchange = asyncio.run(Exchange.build(GUARD, parse_body(body), None))
    except Refusal:
        return None
    forwarded = exchange.forward_body(body)
    return (exchange, forwarded) if forwarded is not None else None


def go_member(document: dict[str, Any], name: str) -> Any:
    """The value Go's encoding/json binds to a struct field ``name``: the exact member, else the
    last member whose name matches it case-insensitively (Unicode folding)."""
    if name in document:
        return document[name]
    folded = [v for k, v in document.items() if k.casefold() == name.casefold()]
    return folded[-1] if folded else None


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(bodies())
# shapes no request has, around a state (once raised ValueError out of the guard)
@example(
    b'{"jsonrpc":"2.0","id":0,"method":"tools/call","params":{"name":{"env":"prod"},'
    b'"arguments":"ms1.AAAA","requestState":"ms1.AAAA"}}'
)
@example(
    b'{"jsonrpc":"2.0","id":0,"method":"resources/read","params":{"uri":[1],'
    b'"requestState":"ms1.AAAA"}}'
)
def test_what_the_proxy_forwards_reads_the_same_to_the_upstream(body: bytes) -> None:
    seen = inspected(body)
    if seen is None:
        return  # refused whole: nothing reaches the upstream
    exchange, forwarded = seen
    upstream = json.loads(forwarded)  # lenient: duplicates, NaN... would all be accepted here
    assert isinstance(upstream, list) == exchange.batch
    read = upstream if exchange.batch else [upstream]
    assert read == exchange.forward
    for message in read:
        for name in MESSAGE_KEYS:
            assert go_member(message, name) == message.get(name)
        if isinstance(message.get("params"), dict):
            for name in PARAMS_KEYS:
                assert go_member(message["params"], name) == message["params"].get(name)
        params = message.get("params")
        state = params.get("requestState") if isinstance(params, dict) else None
        if state is not None:
            assert state == "the server's own state"  # only what the proxy itself verified


NODE_READER = """
const lines = require('fs').readFileSync(0, 'utf8').trim().split('\\n');
for (const line of lines) {
  const parsed = JSON.parse(Buffer.from(line, 'base64').toString('utf8'));
  const list = Array.isArray(parsed) ? parsed : [parsed];
  const seen = list.map(m => {
    const p = (m && typeof m.params === 'object' && m.params) || {};
    return [m.method ?? null, m.id ?? null, p.requestState ?? null, p.name ?? null, p.uri ?? null];
  });
  console.log(JSON.stringify([Array.isArray(parsed), seen]));
}
"""


def as_doubles(value: Any) -> Any:
    """``value`` with every number as the double JavaScript reads (1 and 1.0 alike; an integer
    past 2**53 rounded), for comparing what both languages parsed."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, list):
        return [as_doubles(item) for item in value]
    return {key: as_doubles(item) for key, item in value.items()}


@pytest.fixture(scope="module")
def node() -> str:
    """Node.js, or the test skips before hypothesis draws anything (naming the package)."""
    return program("node", "nodejs")


@settings(
    max_examples=15,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],  # a node run per shrink step: too slow
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.large_base_example,
        HealthCheck.data_too_large,
    ],
    deadline=None,
)
@given(st.lists(bodies(), min_size=20, max_size=20))
# ids holding the characters JSON.stringify leaves raw and str.splitlines breaks lines at
@example(
    [
        json.dumps(
            {"jsonrpc": "2.0", "id": f"a{c}b", "method": "ping"}, ensure_ascii=False
        ).encode()
        for c in "\x85\u2028\u2029\x1c\x1d\x1e\x0b\x0c"
    ]
    * 3
)
def test_what_the_proxy_forwards_reads_the_same_to_a_javascript_server(
    node: str, batch: list[bytes]
) -> None:
    forwarded = [seen for seen in map(inspected, batch) if seen is not None]
    if not forwarded:
        return
    lines = b"\n".join(base64.b64encode(f) for _, f in forwarded)
    out = subprocess.run(
        [node, "-e", NODE_READER],
        input=lines,
        capture_output=True,
        check=True,
        timeout=60,
        env={**os.environ, "NODE_OPTIONS": ""},
    ).stdout.decode()
    # one line per body, split at "\n" alone: JSON.stringify leaves U+0085, U+2028 and U+2029
    # raw, and str.splitlines would break a line at each
    for (exchange, _), line in zip(forwarded, out.rstrip("\n").split("\n"), strict=True):
        is_batch, seen = json.loads(line)
        assert is_batch == exchange.batch
        for message, (method, id_, state, name, uri) in zip(exchange.forward, seen, strict=True):
            params = message.get("params") if isinstance(message.get("params"), dict) else {}
            assert method == message.get("method")
            ours = message.get("id")
            assert (id_key(id_) == id_key(ours)) if ours is not None else id_ is None
            assert as_doubles([state, name, uri]) == as_doubles(
                [params.get("requestState"), params.get("name"), params.get("uri")]
            )


# --- routing headers ----------------------------------------------------------------------------

TOOL_CALL = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "déploy"}}


@pytest.mark.parametrize(
    ("headers", "reason"),
    [
        pytest.param([(b"mcp-method", b"tools/list")], "Mcp-Method is not", id="other-method"),
        pytest.param([(b"mcp-name", b"destroy")], "Mcp-Name is not", id="other-name"),
        pytest.param(
            [(b"mcp-name", b"=?base64?ZGVzdHJveQ==?=")], "Mcp-Name is not", id="other-name-b64"
        ),
        pytest.param(
            [(b"mcp-name", b"=?base64?ZMOpcGxveQ=?=")], "Mcp-Name is not", id="malformed-b64"
        ),
        pytest.param(
            [(b"mcp-method", b"tools/call"), (b"mcp-method", b"tools/call")],
            "mcp-method appears twice",
            id="method-twice",
        ),
        pytest.param(
            [(b"mcp-param-env", b"prod"), (b"mcp-param-env", b"dev")],
            "mcp-param-env appears twice",
            id="param-twice",
        ),
        pytest.param(
            [(b"mcp-protocol-version", b"2026-07-28")] * 2,
            "mcp-protocol-version appears twice",
            id="version-twice",
        ),
    ],
)
def test_routing_headers_that_disagree_with_the_body_are_refused(
    headers: list[tuple[bytes, bytes]], reason: str
) -> None:
    body = parse_body(json.dumps(TOOL_CALL).encode())
    with pytest.raises(Refusal) as caught:
        check_routing_headers(headers, body)
    assert caught.value.status == 400 and caught.value.code == -32020
    assert reason in caught.value.reason


def test_routing_headers_that_agree_with_the_body_pass() -> None:
    body = parse_body(json.dumps(TOOL_CALL).encode())
    # a non-ASCII name travels base64-wrapped, as MCP requires
    wrapped = [(b"mcp-method", b"tools/call"), (b"mcp-name", b"=?base64?ZMOpcGxveQ==?=")]
    check_routing_headers(wrapped, body)
    plain = parse_body(json.dumps({**TOOL_CALL, "params": {"name": "deploy"}}).encode())
    check_routing_headers([(b"mcp-method", b"tools/call"), (b"mcp-name", b"deploy")], plain)
    batch = parse_body(json.dumps([TOOL_CALL, {**TOOL_CALL, "id": 2}]).encode())
    check_routing_headers([(b"accept", b"*/*")], batch)
    with pytest.raises(Refusal, match="routing headers on a batch"):
        check_routing_headers([(b"mcp-method", b"tools/call")], batch)
