"""``mrtr-state proxy --state-store``: the upstream's state kept in Redis, the client given a
handle. The real CLI process, real Redis servers started by the tests (one server, two proxies
sharing it, a 3-master Cluster), and the faults a fleet meets (Redis down, evicting, read-only):
each fails closed, with an error to the client, never the upstream's plain state and never a
handle the store did not file."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from .helpers import ProxyProcess, private_redis
from .redis_topologies import cluster
from .servers import NaiveServer, free_port, serving

ACCEPT = "application/json, text/event-stream"
NO_KEYSET = Path("/nonexistent/keyset.json")  # handles need none: a proxy must not read it


def call(id_: Any, env: str = "prod", **params: Any) -> dict[str, Any]:
    arguments = {"env": env}
    return {
        "jsonrpc": "2.0",
        "id": id_,
        "method": "tools/call",
        "params": {"name": "deploy", "arguments": arguments, **params},
    }


def messages(answer: httpx.Response) -> list[dict[str, Any]]:
    if answer.headers.get("content-type", "").startswith("text/event-stream"):
        return [
            json.loads(line[len("data: ") :])
            for line in answer.text.splitlines()
            if line.startswith("data: ")
        ]
    body = answer.json()
    return body if isinstance(body, list) else [body]


class Side:
    """One proxy giving out handles, and how to talk to it."""

    def __init__(self, proxy: ProxyProcess, path: str = "/mcp") -> None:
        self.proxy = proxy
        self.url = f"http://127.0.0.1:{proxy.port}{path}"

    def post(self, body: Any, user: str = "alice") -> dict[str, Any]:
        headers = {"X-Forwarded-User": user, "Accept": ACCEPT}
        return messages(httpx.post(self.url, json=body, headers=headers, timeout=20))[0]

    def first_round(self, id_: Any = 1, env: str = "prod", user: str = "alice") -> str:
        state: str = self.post(call(id_, env), user)["result"]["requestState"]
        return state

    def retry(self, handle: str, env: str = "prod", user: str = "alice") -> dict[str, Any]:
        return self.post(call(2, env, requestState=handle), user)


def admin_get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as err:
        with err:
            return err.code, err.read().decode()


def commands(url: str) -> dict[str, int]:
    """How many times the server ran each command so far (INFO commandstats)."""
    stats = redis.Redis.from_url(url).info("commandstats")
    return {name.removeprefix("cmdstat_"): int(value["calls"]) for name, value in stats.items()}


@pytest.fixture(params=["json", "sse"])
def rig(request: pytest.FixtureRequest) -> Iterator[tuple[Side, NaiveServer, str, int]]:
    upstream = NaiveServer(mode=request.param)
    admin = free_port()
    with private_redis() as (_, store), serving(upstream) as upstream_url:
        proxy = ProxyProcess(
            NO_KEYSET, upstream_url, "--state-store", store, "--admin-listen", str(admin)
        )
        try:
            yield Side(proxy), upstream, store, admin
        finally:
            assert proxy.stop() == 0
    assert not any("Traceback" in line for line in proxy.stderr), "".join(proxy.stderr)


def test_a_round_trip_keeps_the_state_server_side(rig: tuple[Side, NaiveServer, str, int]) -> None:
    side, upstream, store, _ = rig
    side.retry(side.first_round(id_=0))  # the first loads the script and reads the server
    before = commands(store)
    handle = side.first_round()
    assert handle.startswith("mh1.") and len(handle) == 31
    done = side.retry(handle)
    assert done["result"]["content"][0]["text"] == "deployed prod"
    assert upstream.retries()[-1]["params"]["requestState"] != handle  # the server's own state
    after = commands(store)
    # two commands per round trip, nothing else: SET to file the record, a script to take it
    # (its GET and DEL run inside it, on the server); HELLO and INFO are this test's own
    ran = {name: calls - before.get(name, 0) for name, calls in after.items()}
    sent = {name: n for name, n in ran.items() if n and name not in ("hello", "info")}
    assert sent == {"set": 1, "evalsha": 1, "get": 1, "del": 1}
    again = side.retry(handle)  # single use
    assert again["error"]["code"] == -32602
    assert side.proxy.logged("result", "unknown_handle")["event"] == "refused"


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"user": "mallory"}, "principal_mismatch"),
        ({"env": "dev"}, "request_mismatch"),
    ],
)
def test_another_principal_or_request_is_refused_and_the_rightful_retry_still_works(
    rig: tuple[Side, NaiveServer, str, int], change: dict[str, str], reason: str
) -> None:
    side, upstream, _, _ = rig
    handle = side.first_round(env="prod")
    refused = side.retry(handle, **change)
    assert refused["error"]["code"] == -32602 and refused["error"]["message"].startswith("Invalid")
    assert side.proxy.logged("result", reason)["event"] == "refused"
    assert upstream.retries() == []
    assert side.retry(handle)["result"]["content"][0]["text"] == "deployed prod"


@pytest.mark.parametrize(
    "state",
    [
        "mh1.AAAAAAAAAAAAAAAAAAAAAAAAAAA",  # a check value that does not match
        "mh1.short",
        "ms1.AAAAAAAAAAAAAAAAAAAAAAAA",  # a token where a handle is expected
        "eyJzdGVwIjogMX0=",  # the upstream's own plain state
    ],
)
def test_garbage_is_refused_without_asking_the_store(
    rig: tuple[Side, NaiveServer, str, int], state: str
) -> None:
    side, upstream, store, _ = rig
    before = commands(store)
    refused = side.retry(state)
    assert refused["error"]["code"] == -32602 and upstream.retries() == []
    assert commands(store).get("evalsha", 0) == before.get("evalsha", 0)


def test_a_state_is_bound_to_the_path_and_never_shows_in_logs_or_metrics(
    rig: tuple[Side, NaiveServer, str, int],
) -> None:
    side, _, store, admin = rig
    handle = side.first_round()
    record = redis.Redis.from_url(store).keys("mrtr-state:state:*")
    assert record and all(handle[4:].encode() not in key for key in record)
    status, metrics = admin_get(admin, "/metrics")
    assert status == 200 and 'format="handle"' in metrics
    assert side.retry(handle)["result"]
    written = "".join(side.proxy.stderr)
    assert handle not in written and handle[4:] not in written and handle not in metrics


def test_a_large_state_round_trips_behind_a_short_handle(tmp_path: Path) -> None:
    """256 KB of state, never seen by the client: a 31-character handle."""
    big = "s" * (256 << 10)

    class Big(NaiveServer):
        def answer(self, message: dict[str, Any]) -> dict[str, Any] | None:
            if message.get("params", {}).get("requestState") == big:
                return {"jsonrpc": "2.0", "id": message["id"], "result": {"content": []}}
            answered = super().answer(message)
            if answered is not None and "requestState" in answered.get("result", {}):
                answered["result"]["requestState"] = big
            return answered

    upstream = Big()
    with private_redis() as (_, store), serving(upstream) as upstream_url:
        proxy = ProxyProcess(NO_KEYSET, upstream_url, "--state-store", store)
        try:
            side = Side(proxy)
            handle = side.first_round()
            assert len(handle) < 100
            assert side.retry(handle)["result"] == {"content": []}
            assert upstream.retries()[-1]["params"]["requestState"] == big
        finally:
            proxy.stop()
        small = ProxyProcess(NO_KEYSET, upstream_url, "--state-store", store, "--max-state", "1000")
        try:
            withheld = Side(small).post(call(1))
            assert withheld["error"]["code"] == -32603 and big not in json.dumps(withheld)
            assert "over the store's 1000" in small.logged("result", "unsealable")["reason"]
        finally:
            small.stop()


def test_redis_down_fails_closed_and_says_so_until_it_is_back() -> None:
    upstream = NaiveServer()
    admin = free_port()
    with private_redis() as (server, store), serving(upstream) as upstream_url:
        port = store.split(":")[2].split("/")[0]
        proxy = ProxyProcess(
            NO_KEYSET, upstream_url, "--state-store", store, "--admin-listen", str(admin)
        )
        try:
            side = Side(proxy)
            handle = side.first_round()
            assert admin_get(admin, "/readyz")[0] == 200
            server.kill()
            server.wait(10)
            withheld = side.post(call(3))  # no handle the store did not file, no plain state
            assert withheld["error"]["code"] == -32603 and "result" not in withheld
            refused = side.retry(handle)
            assert (
                refused["error"]["code"] == -32603 and "state store" in refused["error"]["message"]
            )
            assert upstream.retries() == []
            status, body = admin_get(admin, "/readyz")
            assert status == 503 and "state store" in body
            _, metrics = admin_get(admin, "/metrics")
            failures = [
                line
                for line in metrics.splitlines()
                if line.startswith("mrtr_state_proxy_state_store_failures_total ")
            ]
            assert failures and float(failures[0].split()[1]) >= 2
            assert "\nmrtr_state_proxy_ready 0.0\n" in metrics  # as /readyz says, at the scrape
        finally:
            proxy.stop()
        # the same port again, empty: the proxy recovers, and the old handle is unknown
        import subprocess

        again = subprocess.Popen(
            [
                "redis-server",
                "--port",
                port,
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            proxy = ProxyProcess(NO_KEYSET, upstream_url, "--state-store", store)
            try:
                side = Side(proxy)
                assert side.retry(handle)["error"]["code"] == -32602
                assert side.retry(side.first_round())["result"]
            finally:
                proxy.stop()
        finally:
            again.kill()
            again.wait(10)


def test_a_store_that_may_evict_or_is_read_only_gets_no_record() -> None:
    upstream = NaiveServer()
    with private_redis() as (_, store), private_redis() as (_, replica), serving(upstream) as url:
        evicting = redis.Redis.from_url(store)
        evicting.config_set("maxmemory", "100mb")
        evicting.config_set("maxmemory-policy", "volatile-lru")
        primary_port = int(store.split(":")[2].split("/")[0])
        redis.Redis.from_url(replica).replicaof("127.0.0.1", primary_port)
        for target, why in ((store, "may evict"), (replica, "read only")):
            proxy = ProxyProcess(NO_KEYSET, url, "--state-store", target)
            try:
                withheld = Side(proxy).post(call(1))
                assert withheld["error"]["code"] == -32603
                deadline = time.monotonic() + 10  # the line is written after the answer
                while not any(why in e.get("reason", "").lower() for e in proxy.log):
                    assert time.monotonic() < deadline, proxy.log
                    time.sleep(0.01)
            finally:
                proxy.stop()
        assert evicting.keys("mrtr-state:state:*") == []


def test_two_proxies_share_one_redis() -> None:
    upstream = NaiveServer()
    with private_redis() as (_, store), serving(upstream) as upstream_url:
        first = ProxyProcess(NO_KEYSET, upstream_url, "--state-store", store)
        second = ProxyProcess(NO_KEYSET, upstream_url, "--state-store", store, parser="h11")
        try:
            one, two = Side(first), Side(second)
            handle = one.first_round()
            assert two.retry(handle)["result"]["content"][0]["text"] == "deployed prod"
            assert one.retry(handle)["error"]["code"] == -32602  # taken on the other replica
        finally:
            first.stop()
            second.stop()


def test_two_proxies_share_a_cluster() -> None:
    """Handles spread over the cluster's slots, issued by one replica or the other and retried
    on the other: each opens once, and a second retry on either replica is refused."""
    upstream = NaiveServer()
    with cluster() as (_, store), serving(upstream) as upstream_url:
        first = ProxyProcess(NO_KEYSET, upstream_url, "--state-store", store)
        second = ProxyProcess(NO_KEYSET, upstream_url, "--state-store", store, parser="h11")
        try:
            sides = (Side(first), Side(second))
            handles = [sides[n % 2].first_round(id_=n, env=f"e{n}") for n in range(40)]
            for n, handle in enumerate(handles):
                assert sides[(n + 1) % 2].retry(handle, env=f"e{n}")["result"]
                for side in sides:
                    assert side.retry(handle, env=f"e{n}")["error"]["code"] == -32602
        finally:
            first.stop()
            second.stop()


def test_state_store_and_once_are_not_both_given(tmp_path: Path) -> None:
    from .helpers import run

    done = run(
        "proxy",
        "--upstream",
        "http://127.0.0.1:9/mcp",
        "--allow-anonymous",
        "--state-store",
        "memory:",
        "--once",
        "--replay-store",
        "memory:",
        code=2,
    )
    assert "single use already" in done.stderr
