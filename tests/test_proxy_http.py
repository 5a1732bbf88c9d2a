"""``mrtr-state proxy`` over real HTTP on loopback: a naive server, the official Python SDK
server and client, refusals the upstream never sees, pass-through, rotation, concurrency."""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import mrtr_state as ms
from mrtr_state.keys import lifecycle
from mrtr_state.proxy.app import ProxyApp
from mrtr_state.proxy.rewrite import StateGuard, bearer_principal

from .helpers import token_guard
from .servers import NaiveServer, free_port, serving

CALL = {"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "deploy", "arguments": {}}}


class Fleet:
    """A naive upstream behind a proxy, both serving on loopback."""

    def __init__(self, upstream: NaiveServer, proxy_url: str, guard: StateGuard) -> None:
        self.upstream = upstream
        self.url = proxy_url + "/mcp"
        self.guard = guard
        self.log: list[dict[str, Any]] = []

    def post(self, body: Any, user: str | None = "alice", **headers: str) -> httpx.Response:
        if user is not None:
            headers["X-Forwarded-User"] = user
        headers.setdefault("Accept", "application/json, text/event-stream")
        return httpx.post(self.url, json=body, headers=headers, timeout=10)

    def first_round(self, env: str = "prod", user: str = "alice", id_: Any = 1) -> str:
        call = {**CALL, "id": id_, "params": {"name": "deploy", "arguments": {"env": env}}}
        message = messages_of(self.post(call, user))[0]
        state: str = message["result"]["requestState"]
        return state

    def retry(self, token: Any, env: str = "prod", user: str | None = "alice") -> dict[str, Any]:
        params = {"name": "deploy", "arguments": {"env": env}, "requestState": token}
        return messages_of(self.post({**CALL, "id": 2, "params": params}, user))[0]


def messages_of(response: httpx.Response) -> list[dict[str, Any]]:
    """The JSON-RPC messages of a JSON or SSE response."""
    assert response.status_code == 200, response.text
    if response.headers["content-type"].startswith("text/event-stream"):
        found = []
        for block in response.text.replace("\r\n", "\n").split("\n\n"):
            data = [line[5:].strip() for line in block.split("\n") if line.startswith("data:")]
            if data:
                found.append(json.loads("\n".join(data)))
        return found
    parsed = response.json()
    return parsed if isinstance(parsed, list) else [parsed]


@pytest.fixture(params=["json", "sse"])
def fleet(request: pytest.FixtureRequest, keyset_file: Path) -> Iterator[Fleet]:
    upstream = NaiveServer(mode=request.param)
    lines: list[dict[str, Any]] = []
    guard = token_guard(
        ms.Keyset.load(keyset_file, reload_interval=0),
        audience="fleet",
        ttl=60,
        once=ms.open_store("memory:"),
        log=lines.append,
    )
    with serving(upstream) as upstream_url:
        app = ProxyApp(guard, upstream=upstream_url + "/mcp", principal_header="X-Forwarded-User")
        with serving(app) as proxy_url:
            fleet = Fleet(upstream, proxy_url, guard)
            fleet.log = lines
            yield fleet


def test_a_round_trip_through_the_proxy(fleet: Fleet) -> None:
    token = fleet.first_round()
    assert token.startswith("ms1.")
    assert fleet.retry(token)["result"]["content"][0]["text"] == "deployed prod"
    (retry,) = fleet.upstream.retries()
    original = json.loads(base64.b64decode(retry["params"]["requestState"]))
    assert original == {"step": 1, "env": "prod"}  # the server got back exactly its own state
    assert [line["event"] for line in fleet.log] == ["sealed", "opened"]


@pytest.mark.parametrize(
    "attack",
    ["tampered", "plain", "other-principal", "other-arguments", "replayed"],
)
def test_a_refused_state_never_reaches_the_upstream(fleet: Fleet, attack: str) -> None:
    token = fleet.first_round()
    if attack == "replayed":
        assert "result" in fleet.retry(token)
    before = len(fleet.upstream.retries())
    answer = {
        "tampered": lambda: fleet.retry(token[:-3] + ("AAA" if token[-3:] != "AAA" else "BBB")),
        "plain": lambda: fleet.retry("eyJzdGVwIjogMX0="),
        "other-principal": lambda: fleet.retry(token, user="mallory"),
        "other-arguments": lambda: fleet.retry(token, env="staging"),
        "replayed": lambda: fleet.retry(token),
    }[attack]()
    assert answer["id"] == 2 and answer["error"]["code"] == -32602
    assert answer["error"]["message"] == "Invalid or expired requestState"
    assert len(fleet.upstream.retries()) == before  # the upstream saw nothing
    assert fleet.log[-1]["event"] == "refused"


def test_a_request_without_its_principal_is_refused_before_the_upstream(fleet: Fleet) -> None:
    token = fleet.first_round()
    params = {"name": "deploy", "arguments": {"env": "prod"}, "requestState": token}
    for body in ({**CALL, "id": 2, "params": params}, {**CALL, "id": 3}):
        before = len(fleet.upstream.received)
        answer = fleet.post(body, user=None)
        assert answer.status_code == 401 and answer.headers["www-authenticate"]
        assert answer.json()["error"]["message"] == "no authenticated principal on the request"
        assert len(fleet.upstream.received) == before
    assert fleet.log[-1]["event"] == "refused" and fleet.log[-1]["status"] == 401


def test_an_expired_state_is_refused(fleet: Fleet, keyset_file: Path) -> None:
    old = ms.mint(
        ms.Keyset.load(keyset_file),
        "x",
        principal="alice",
        audience="fleet",
        ttl=30,
        now=time.time() - 3600,
        method="tools/call",
        target="deploy",
        arguments={"env": "prod"},
    )
    answer = fleet.retry(old)
    assert answer["error"]["code"] == -32602 and fleet.upstream.retries() == []
    assert fleet.log[-1]["result"] == "expired"


def test_a_key_rotation_between_the_rounds_still_passes(fleet: Fleet, keyset_file: Path) -> None:
    token = fleet.first_round()
    ms.Keyset.update(keyset_file, lambda k: k.with_new_key("A256GCM")[0])
    pending = next(k for k in ms.Keyset.load(keyset_file) if k.status == "pending")
    ms.Keyset.update(keyset_file, lambda k: lifecycle.promote(k, pending.kid, now=0)[0])
    assert "result" in fleet.retry(token)  # the old primary still verifies (active)
    fresh = fleet.first_round()
    assert ms.inspect(fresh).kid == pending.kid  # the new primary seals, without a restart
    assert "result" in fleet.retry(fresh)


def test_everything_else_passes_through_untouched(fleet: Fleet) -> None:
    ping = fleet.post({"jsonrpc": "2.0", "id": "p", "method": "ping"})
    assert ping.headers["mcp-session-id"] == "s-1"
    assert messages_of(ping) == [{"jsonrpc": "2.0", "id": "p", "result": {}}]
    note = fleet.post({"jsonrpc": "2.0", "method": "notifications/initialized"})
    assert note.status_code == 202 and note.content == b""
    unknown = messages_of(fleet.post({"jsonrpc": "2.0", "id": 3, "method": "nope"}))
    assert unknown[0]["error"]["code"] == -32601
    alice = {"X-Forwarded-User": "alice"}
    with httpx.stream("GET", fleet.url, headers=alice, timeout=10) as stream:
        assert stream.status_code == 200 and stream.headers["mcp-session-id"] == "s-1"
        streamed = stream.read()
        assert b'data: {"jsonrpc":"2.0","method":"notifications/message","params":{}}\n\n' in (
            streamed  # untouched, byte for byte
        )
        # a replayed input_required response cannot be bound to its request: withheld
        assert (
            b"eyJzZWNyZXQiOiAxfQ" not in streamed and b"could not protect requestState" in streamed
        )
    assert httpx.delete(fleet.url, headers=alice, timeout=10).status_code == 204
    before = len(fleet.upstream.received)
    sent = {**alice, "Content-Type": "application/json"}
    for body in (b"{oops", b'{"jsonrpc":"2.0","id":1,"method":"ping","id":2}', b"[NaN]"):
        refused = httpx.post(fleet.url, content=body, headers=sent, timeout=10)
        assert refused.status_code == 400 and refused.json()["error"]["code"] == -32700
    assert len(fleet.upstream.received) == before  # never forwarded


def test_a_batch_mixes_answers_and_refusals(fleet: Fleet) -> None:
    token = fleet.first_round()
    batch = [
        {
            **CALL,
            "id": 10,
            "params": {"name": "deploy", "arguments": {"env": "prod"}, "requestState": token},
        },
        {**CALL, "id": 11, "params": {"name": "deploy", "arguments": {}, "requestState": "forged"}},
        {"jsonrpc": "2.0", "id": 12, "method": "ping"},
    ]
    answers = {m["id"]: m for m in messages_of(fleet.post(batch))}
    assert set(answers) == {10, 11, 12}
    assert answers[10]["result"]["content"][0]["text"] == "deployed prod"
    assert answers[11]["error"]["code"] == -32602
    assert all(m.get("id") != 11 for m in fleet.upstream.received)


def test_an_oversized_body_is_refused_before_parsing(keyset_file: Path) -> None:
    upstream = NaiveServer()
    guard = token_guard(ms.Keyset.load(keyset_file))
    with serving(upstream) as upstream_url:
        app = ProxyApp(guard, upstream=upstream_url + "/mcp", max_body=2048)
        with serving(app) as proxy_url:
            big = httpx.post(
                proxy_url + "/mcp",
                content=b"[" + b" " * 4096 + b"]",
                headers={"Content-Type": "application/json"},
                timeout=10,
            )
            assert big.status_code == 413 and big.json()["error"]["code"] == -32600
    assert upstream.received == []


def test_an_unreachable_upstream_is_a_502_not_a_hang(keyset_file: Path) -> None:
    guard = token_guard(ms.Keyset.load(keyset_file))
    app = ProxyApp(guard, upstream=f"http://127.0.0.1:{free_port()}/mcp", timeout=5)
    with serving(app) as proxy_url:
        answer = httpx.post(
            proxy_url + "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"}, timeout=20
        )
    assert answer.status_code == 502
    assert answer.json()["error"]["message"].startswith("upstream unreachable")


def test_concurrent_clients_get_their_own_answers(keyset_file: Path) -> None:
    """A bounded load on loopback: 16 clients x 15 round trips, no lost or mixed-up answers."""
    upstream = NaiveServer(mode="sse")
    guard = token_guard(ms.Keyset.load(keyset_file), ttl=60)
    failures: list[str] = []
    with serving(upstream) as upstream_url:
        app = ProxyApp(guard, upstream=upstream_url + "/mcp", principal_header="X-Forwarded-User")
        with serving(app) as proxy_url:
            fleet = Fleet(upstream, proxy_url, guard)

            def client(number: int) -> None:
                for round_ in range(15):
                    env, user = f"env-{number}-{round_}", f"user-{number}"
                    try:
                        token = fleet.first_round(env=env, user=user, id_=f"{number}:{round_}")
                        done = fleet.retry(token, env=env, user=user)
                        if done["result"]["content"][0]["text"] != f"deployed {env}":
                            failures.append(f"{env}: {done}")
                    except Exception as err:  # pragma: no cover - reported below
                        failures.append(f"{env}: {err!r}")

            threads = [threading.Thread(target=client, args=(n,)) for n in range(16)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(120)
    assert failures == []
    assert len(upstream.retries()) == 16 * 15


def test_the_cli_proxy_serves_binds_the_bearer_and_logs_json(keyset_file: Path) -> None:
    """`mrtr-state proxy` as the README runs it: a process, a bearer-bound round trip, the log."""
    import os
    import socket
    import subprocess
    import sys

    upstream = NaiveServer()
    port = free_port()
    root = Path(__file__).resolve().parents[1]
    with serving(upstream) as upstream_url:
        process = subprocess.Popen(
            [
                *(sys.executable, "-m", "mrtr_state", "proxy", "--keyset", str(keyset_file)),
                *("--upstream", upstream_url + "/mcp", "--listen", f"127.0.0.1:{port}"),
                *("--principal-from", "bearer", "--ttl", "2m", "--json-log"),
            ],
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(root)},
        )
        try:
            deadline = time.monotonic() + 20
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                    break
                except OSError:
                    assert time.monotonic() < deadline and process.poll() is None
                    time.sleep(0.05)
            fleet = Fleet(upstream, f"http://127.0.0.1:{port}", token_guard(ms.Keyset.generate()))
            alice, mallory = {"Authorization": "Bearer alice-token"}, {"Authorization": "Bearer x"}
            params = {"name": "deploy", "arguments": {"env": "prod"}}
            call = {**CALL, "id": 1, "params": params}
            token = messages_of(fleet.post(call, user=None, **alice))[0]["result"]["requestState"]
            claims = ms.verify(
                ms.Keyset.load(keyset_file),
                token,
                principal=bearer_principal("Bearer alice-token"),
                audience="/mcp",  # the path it was issued on
                method="tools/call",
                target="deploy",
                arguments={"env": "prod"},
            )
            assert claims.iat is not None and claims.exp - claims.iat == 120
            retry = {**CALL, "id": 2, "params": {**params, "requestState": token}}
            stolen = messages_of(fleet.post(retry, user=None, **mallory))[0]
            assert stolen["error"]["code"] == -32602
            done = messages_of(fleet.post(retry, user=None, **alice))[0]
            assert done["result"]["content"][0]["text"] == "deployed prod"
        finally:
            process.terminate()
            _, err = process.communicate(timeout=20)
    events = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    assert [e["event"] for e in events] == ["start", "sealed", "refused", "opened", "stop"]
    assert events[2]["result"] == "principal_mismatch"
    assert all(list(e)[:3] == ["ts", "level", "event"] for e in events)
    assert events[0]["upstream"] == upstream_url + "/mcp" and events[0]["paths"] == ["/mcp"]
    assert "alice-token" not in err


def test_refusals_beside_notifications_only_are_still_answered(fleet: Fleet) -> None:
    batch = [
        {**CALL, "id": 21, "params": {"name": "deploy", "arguments": {}, "requestState": "x"}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
    ]
    answered = fleet.post(batch)
    assert answered.status_code == 200
    assert [m["id"] for m in messages_of(answered)] == [21]
    assert any(m.get("method") == "notifications/initialized" for m in fleet.upstream.received)


def test_a_body_read_two_ways_never_smuggles_a_state(fleet: Fleet) -> None:
    """Duplicate members: were the proxy to read the last "params" and the server the first, a
    forged requestState would reach the server unverified. The proxy refuses such a body."""
    smuggled = (
        b'{"jsonrpc":"2.0","id":5,"method":"tools/call",'
        b'"params":{"name":"deploy","arguments":{},"requestState":"eyJmb3JnZWQiOiB0cnVlfQ=="},'
        b'"params":{"name":"deploy","arguments":{}}}'
    )
    sent = {"X-Forwarded-User": "a", "Content-Type": "application/json"}
    answer = httpx.post(fleet.url, content=smuggled, headers=sent, timeout=10)
    assert answer.status_code == 400 and "duplicate member" in answer.json()["error"]["message"]
    assert fleet.upstream.retries() == []
