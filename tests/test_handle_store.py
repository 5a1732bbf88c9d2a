"""The stores of state-handle records, against real servers: one Redis, a 3-master Cluster and a
Sentinel-watched primary started by the tests; memory for one process. Each operation is one
command, and every failure of the store (down, read-only, evicting, a clock beyond the bound)
fails closed with :class:`StateStoreError`."""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mrtr_state.state import records as handles
from mrtr_state.state.handle_store import (
    MemoryHandleStore,
    StateStoreError,
    open_handle_store,
)
from mrtr_state.tokens.binding import Binding

from .helpers import private_redis, program
from .redis_topologies import cluster, sentinel_watched

BOUND = Binding(principal="alice", audience="/mcp", method="tools/call", target="deploy")
OTHER = Binding(principal="bob", audience="/mcp", method="tools/call", target="deploy")


def filed(store: Any, state: str = "s", ttl: float = 300) -> handles.Handle:
    """A record filed in ``store``; its handle."""
    ident = handles.new_handle()
    now = time.time()
    value = handles.encode_record(ident, state, BOUND, now=now, ttl=ttl)
    store.put(ident.key, value, now + ttl + 1)
    return ident


def take(store: Any, ident: handles.Handle, binding: Any = BOUND) -> Any:
    return store.take(ident.key, handles.lock_of(ident, binding))


@pytest.fixture(params=["memory", "redis"])
def store(request: pytest.FixtureRequest) -> Iterator[Any]:
    if request.param == "memory":
        yield MemoryHandleStore()
        return
    with private_redis() as (_, url):
        opened = open_handle_store(url)
        yield opened
        opened.close()


def test_a_record_is_handed_over_once_to_its_lock(store: Any) -> None:
    ident = filed(store, "the state")
    assert store.peek(ident.key) is not None  # inspect reads without taking
    refused = take(store, ident, OTHER)
    assert refused is not None and not refused.handed  # another's lock: read, left in place
    taken = take(store, ident)
    assert taken.handed and handles.decode_record(ident, taken.value).state == "the state"
    assert take(store, ident) is None  # used
    assert store.peek(ident.key) is None


def test_an_unknown_handle_finds_nothing(store: Any) -> None:
    ident = handles.new_handle()
    assert take(store, ident) is None


def test_a_record_is_gone_after_the_time_it_was_filed_until(store: Any) -> None:
    ident = handles.new_handle()
    now = time.time()
    value = handles.encode_record(ident, "s", BOUND, now=now, ttl=0.2)
    store.put(ident.key, value, now + 0.3)
    time.sleep(0.5)
    assert take(store, ident) is None


def test_the_memory_store_forgets_exactly_the_records_whose_time_is_up() -> None:
    """Purging pops expiries in order: a record taken before its time leaves an entry that is
    passed over, and records filed for later stay."""
    store = MemoryHandleStore()
    now = time.time()
    soon = [(f"soon{n}", now + 0.2 + n / 1000) for n in range(50)]
    later = [(f"later{n}", now + 300) for n in range(50)]
    for key, until in soon + later:
        store.put(key, b"L" * 43 + b"\n{}", until)
    assert store.take("soon0", "L" * 43) is not None  # taken early: its heap entry remains
    assert len(store) == 99
    time.sleep(0.35)
    assert len(store) == 50 and all(store.peek(key) is not None for key, _ in later)
    assert store.peek("soon1") is None


def test_a_large_state_round_trips(store: Any) -> None:
    ident = filed(store, "x" * (256 << 10))
    assert len(handles.decode_record(ident, take(store, ident).value).state) == 256 << 10


def test_an_unreachable_server_fails_closed() -> None:
    with private_redis() as (server, url):
        store = open_handle_store(url)
        ident = filed(store)
        server.kill()
        server.wait(10)
        with pytest.raises(StateStoreError, match="cannot take a record"):
            take(store, ident)
        with pytest.raises(StateStoreError):
            filed(store)
        assert store.probe() is not None


def test_a_server_that_may_evict_records_is_refused_before_a_handle_is_given() -> None:
    with private_redis() as (_, url):
        import redis

        admin = redis.Redis.from_url(url)
        admin.config_set("maxmemory", "100mb")
        admin.config_set("maxmemory-policy", "allkeys-lru")
        store = open_handle_store(url)
        with pytest.raises(StateStoreError, match="may evict records"):
            filed(store)
        assert "may evict" in (store.probe() or "")
        admin.config_set("maxmemory-policy", "noeviction")
        store._checked_at = -1e9  # the next minute's look, now
        filed(store)


def test_a_read_only_replica_is_refused() -> None:
    with private_redis() as (_, primary_url), private_redis() as (_, replica_url):
        import redis

        port = int(primary_url.split(":")[2].split("/")[0])
        redis.Redis.from_url(replica_url).replicaof("127.0.0.1", port)
        store = open_handle_store(replica_url)
        with pytest.raises(StateStoreError, match=r"READONLY|read only"):
            filed(store)


def test_the_asyncio_store_does_the_same_in_one_command_each() -> None:
    async def run(url: str) -> None:
        store = open_handle_store(url)
        ident = handles.new_handle()
        now = time.time()
        key = ident.key
        await store.aput(key, handles.encode_record(ident, "s", BOUND, now=now, ttl=60), now + 61)
        other = await store.atake(key, handles.lock_of(ident, OTHER))
        assert other is not None and not other.handed
        taken = await store.atake(key, handles.lock_of(ident, BOUND))
        assert taken is not None and taken.handed
        assert await store.atake(key, handles.lock_of(ident, BOUND)) is None
        assert await store.aprobe() is None
        await store.aclose()

    with private_redis() as (_, url):
        asyncio.run(run(url))


def test_a_cluster_spreads_records_over_its_masters_and_takes_each_once() -> None:
    with cluster() as (nodes, url):
        store = open_handle_store(url)
        assert store.probe() is None
        idents = [filed(store, f"s{n}") for n in range(200)]
        counts = [int(node.cli("dbsize")) for node in nodes]
        assert sum(counts) == 200 and all(counts)  # every master holds some
        assert all(take(store, ident).handed for ident in idents)
        assert all(take(store, ident) is None for ident in idents)


def test_sentinel_finds_the_primary_and_a_failover_fails_closed_then_recovers() -> None:
    with sentinel_watched() as (primary, replica, _, url):
        store = open_handle_store(url)
        ident = filed(store, "before")
        deadline = time.monotonic() + 10
        while replica.cli("get", ident.key) == "":  # replicated
            assert time.monotonic() < deadline
            time.sleep(0.05)
        primary.kill()
        failures = 0
        deadline = time.monotonic() + 60
        while True:
            try:
                taken = take(store, ident)
                break
            except StateStoreError:  # the primary is gone: refused, never accepted
                failures += 1
                assert time.monotonic() < deadline
                time.sleep(0.5)
        assert failures and taken is not None and taken.handed  # on the promoted replica
        filed(store, "after")


# --- the asyncio client (mrtr_state.state.redis.client), on the same real topologies ------------


def run_async(store_url: str, scenario: Any) -> Any:
    async def main() -> Any:
        store = open_handle_store(store_url)
        try:
            return await scenario(store)
        finally:
            await store.aclose()

    return asyncio.run(main())


async def afiled(store: Any, state: str = "s") -> handles.Handle:
    ident = handles.new_handle()
    now = time.time()
    value = handles.encode_record(ident, state, BOUND, now=now, ttl=300)
    await store.aput(ident.key, value, now + 301)
    return ident


async def atake(store: Any, ident: handles.Handle, binding: Any = BOUND) -> Any:
    return await store.atake(ident.key, handles.lock_of(ident, binding))


def test_the_slot_of_a_key_is_redis_clusters() -> None:
    from mrtr_state.state.redis.client import slot_of

    # values Redis's CLUSTER KEYSLOT gives (and its {hash tag} rule)
    assert slot_of(b"foo") == 12182 and slot_of(b"bar") == 5061
    assert slot_of(b"{user1000}.following") == slot_of(b"user1000")
    assert slot_of(b"foo{}{bar}") == slot_of(b"foo{}{bar}") and slot_of(b"") == 0


def test_the_proxys_client_on_a_cluster_follows_a_moved_slot() -> None:
    with cluster() as (nodes, url):
        for node in nodes:  # the real slots, from the cluster itself
            assert int(node.cli("cluster", "keyslot", "foo")) == 12182

        async def scenario(store: Any) -> None:
            idents = [await afiled(store, f"s{n}") for n in range(60)]
            # the map goes stale (as after a resharding): every slot said to be on one node
            router, _ = store._link()
            slots = await router._map()
            router._slots = [slots[0]] * 16384
            taken = [await atake(store, ident) for ident in idents]
            assert all(found is not None and found.handed for found in taken)
            assert [await atake(store, ident) for ident in idents] == [None] * len(idents)

        run_async(url, scenario)


def test_the_proxys_client_follows_a_sentinel_failover() -> None:
    with sentinel_watched() as (primary, replica, _, url):

        async def scenario(store: Any) -> int:
            ident = await afiled(store, "before")
            deadline = time.monotonic() + 10
            while replica.cli("get", ident.key) == "":
                assert time.monotonic() < deadline
                await asyncio.sleep(0.05)
            primary.kill()
            failures = 0
            deadline = time.monotonic() + 60
            while True:
                try:
                    taken = await atake(store, ident)
                    break
                except StateStoreError:
                    failures += 1
                    assert time.monotonic() < deadline
                    await asyncio.sleep(0.5)
            assert taken is not None and taken.handed
            await afiled(store, "after")
            return failures

        assert run_async(url, scenario) > 0  # refused while the failover ran, never accepted


def test_the_proxys_client_fails_closed_and_reconnects() -> None:
    with private_redis() as (server, url):

        async def scenario(store: Any) -> None:
            ident = await afiled(store)
            assert await store.aprobe() is None
            assert (await atake(store, ident, OTHER)).handed is False
            server.kill()
            server.wait(10)
            with pytest.raises(StateStoreError):
                await atake(store, ident)
            with pytest.raises(StateStoreError):
                await afiled(store)
            assert "cannot be reached" in (await store.aprobe() or "")

        run_async(url, scenario)


def test_the_proxys_client_loads_its_script_where_it_is_missing() -> None:
    with private_redis() as (_, url):
        import redis

        async def scenario(store: Any) -> None:
            ident = await afiled(store)
            redis.Redis.from_url(url).script_flush()  # as after a restart or a promotion
            assert (await atake(store, ident)).handed

        run_async(url, scenario)


def test_a_redis_url_whose_database_is_not_a_number_is_refused() -> None:
    """redis-py reads redis://HOST/abc as database 0; a typo must not quietly pick another
    database (found by a review)."""
    with pytest.raises(StateStoreError, match="the database must be a number"):
        open_handle_store("redis://127.0.0.1:6379/abc")


def test_the_proxys_client_fails_a_silent_server_closed_then_opens_a_new_link() -> None:
    """A server that takes the connection and never answers (stopped, or a black hole): each
    command fails within the timeout, those queued behind it too, and the link is dropped,
    so the next command opens a new one (which this server answers)."""
    from mrtr_state.state.redis.client import Node, StoreFailure

    async def scenario() -> None:
        links: list[asyncio.Event] = []

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            done = asyncio.Event()
            links.append(done)
            answering = len(links) > 1  # the first link is a black hole
            try:
                while await reader.read(4096):
                    if answering:
                        writer.write(b"+PONG\r\n")
            finally:
                writer.close()
                done.set()

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        node = Node("127.0.0.1", port, password=None, db=0, tls=False, timeout=0.3)
        started = time.monotonic()
        late = [asyncio.ensure_future(node.call("PING")) for _ in range(3)]
        outcomes = await asyncio.wait_for(asyncio.gather(*late, return_exceptions=True), 5)
        assert all(isinstance(o, StoreFailure) and "timed out" in str(o) for o in outcomes)
        assert 0.25 < time.monotonic() - started < 2.0
        assert await node.call("PING") == b"PONG" and len(links) == 2
        node.close()
        for done in links:  # each link's end seen by the server (the first, at the timeout)
            await asyncio.wait_for(done.wait(), 5)
        server.close()
        await server.wait_closed()

    asyncio.run(scenario())


def test_an_error_reply_fails_its_command_and_keeps_the_link() -> None:
    with private_redis() as (_, url):
        from mrtr_state.state.redis.client import StoreFailure, router_for

        async def scenario() -> None:
            router = router_for(url, timeout=2.0)
            try:
                with pytest.raises(StoreFailure, match="unknown command"):
                    await router.call(b"k", "NOSUCHCOMMAND")
                assert await router.call(b"k", "PING") in (b"PONG", "PONG")
                assert len(await router.nodes()) == 1
            finally:
                router.close()

        asyncio.run(scenario())


def test_a_refused_password_or_database_leaves_no_connection_open() -> None:
    """AUTH or SELECT refused while a link opens: the command fails closed and the connection
    is closed too (each round used to leave one open on both sides; found by a review)."""
    import redis

    from mrtr_state.state.redis.client import StoreFailure, router_for

    with private_redis() as (_, url):
        admin = redis.Redis.from_url(url)
        admin.config_set("requirepass", "sekrit")
        admin = redis.Redis.from_url(url.replace("redis://", "redis://:sekrit@"))
        port = url.rsplit(":", 1)[1].split("/")[0]

        async def scenario() -> None:
            for bad in (
                f"redis://:wrong@127.0.0.1:{port}/0",
                f"redis://:sekrit@127.0.0.1:{port}/99",
            ):
                router = router_for(bad, timeout=2.0)
                try:
                    for _ in range(20):
                        with pytest.raises(StoreFailure):
                            await router.call(b"k", "PING")
                finally:
                    router.close()
            await asyncio.sleep(0.2)  # the server sees the closes

        asyncio.run(scenario())
        assert int(admin.info("clients")["connected_clients"]) == 1  # the admin's own


def test_the_memory_store_refuses_a_time_that_is_not_finite_and_keeps_its_heap_bounded() -> None:
    store = MemoryHandleStore()
    for bad in (float("nan"), float("inf")):
        with pytest.raises(ValueError, match="finite time"):
            store.put("k", b"L" * 43 + b"\n{}", bad)
    later = time.time() + 300
    for n in range(5000):  # filed and taken at once, as a busy server's rounds are
        store.put(f"k{n}", b"L" * 43 + b"\n{}", later)
        assert store.take(f"k{n}", "L" * 43) is not None
    store.put("kept", b"L" * 43 + b"\n{}", later)
    assert len(store._expiries) <= 1024 + 2 and store.peek("kept") is not None


def test_the_watchdog_fires_once_per_late_command_under_uvloop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """uvloop's timers count whole milliseconds and may fire just before a float deadline: the
    watchdog must take that as the deadline, not re-arm in a spin (found by a review: 200 runs
    in 2 ms)."""
    uvloop = pytest.importorskip("uvloop")
    from mrtr_state.state.redis import client as _resp

    runs: list[float] = []
    watch = _resp._Link._watch

    def counted(link: Any) -> None:
        runs.append(time.monotonic())
        watch(link)

    monkeypatch.setattr(_resp._Link, "_watch", counted)

    async def scenario() -> None:
        async def first_only(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            answered = False
            while await reader.read(4096):
                if not answered:  # the first command on a link is answered, later ones not
                    writer.write(b"+PONG\r\n")
                    answered = True
            writer.close()

        server = await asyncio.start_server(first_only, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        for trial in range(20):
            node = _resp.Node(
                "127.0.0.1", port, password=None, db=0, tls=False, timeout=0.0505
            )  # no whole ms
            assert await node.call("PING") == b"PONG"  # arms the watchdog for its deadline
            # the late command's deadline falls between the loop's milliseconds: the watchdog
            # re-arms for it when the first command's deadline passes
            await asyncio.sleep(0.0003 + trial * 0.00037)
            with pytest.raises(_resp.StoreFailure, match="timed out"):
                await node.call("PING")
            node.close()
        server.close()
        await server.wait_closed()

    uvloop.run(scenario())
    assert len(runs) <= 3 * 20  # per trial: the first deadline, the late one's (a third, rarely)


def test_the_proxys_client_reaches_a_redis_on_its_unix_socket(tmp_path: Path) -> None:
    """A Redis beside the proxy (a sidecar, a shared volume): unix:///PATH?db=N, with a
    password; a socket nobody listens on fails closed."""
    binary = program("redis-server", "redis-server")
    sock = tmp_path / "redis.sock"
    server = subprocess.Popen(
        [
            *(binary, "--port", "0", "--unixsocket", str(sock), "--unixsocketperm", "700"),
            *("--save", "", "--appendonly", "no", "--requirepass", "s3cret"),
            *("--dir", str(tmp_path)),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    async def run() -> None:
        store = open_handle_store(f"unix://:s3cret@{sock}?db=2")
        ident = await afiled(store, "beside")
        taken = await atake(store, ident)
        assert taken.handed and handles.decode_record(ident, taken.value).state == "beside"
        assert await atake(store, ident) is None and await store.aprobe() is None
        await store.aclose()
        wrong = open_handle_store(f"unix://:wrong@{sock}")
        assert "WRONGPASS" in str(await wrong.aprobe()) or "invalid" in str(await wrong.aprobe())
        await wrong.aclose()
        gone = open_handle_store(f"unix://{tmp_path}/nobody.sock")
        with pytest.raises(StateStoreError, match="unreachable"):
            await afiled(gone)
        await gone.aclose()

    try:
        deadline = time.monotonic() + 10
        while not sock.exists():
            assert time.monotonic() < deadline and server.poll() is None
            time.sleep(0.05)
        asyncio.run(run())
        import redis  # what the CLI and library servers use on the same URL: the same record

        client = redis.Redis(unix_socket_path=str(sock), password="s3cret", db=2)
        assert client.dbsize() == 0  # taken: nothing left behind
    finally:
        server.kill()
        server.wait(10)
    for url in ("unix://relative/redis.sock", f"unix://{sock}?db=two"):
        with pytest.raises(
            StateStoreError, match=r"unix://\[:PASSWORD@\]/PATH|database must be a number"
        ):
            open_handle_store(url)


def test_the_proxy_reads_a_unix_url_as_the_cli_does_or_refuses_it() -> None:
    """The proxy's client and redis-py (the CLI's) must reach the same socket with the same
    credentials: a form only one of them would read is refused at start-up."""
    from mrtr_state.state.redis.client import router_for

    for url in (
        "unix:///tmp/redis.sock?password=s3cret",  # redis-py would authenticate; refused here
        "unix:///tmp/redis.sock?db=\u00b2",  # str.isdigit() takes a superscript two
        "unix:///tmp/redis.sock?db=\u0661",  # and an Arabic-Indic one
        "redis://127.0.0.1:6379/\u0661",
    ):
        with pytest.raises(ValueError, match=r"unix://\[:PASSWORD@\]|database must be a number"):
            router_for(url, timeout=1.0)
    router = router_for("unix:///tmp/a%20b.sock?db=3", timeout=1.0)
    node = asyncio.run(router.nodes())[0]
    assert node._path == "/tmp/a b.sock" and node._db == 3  # percent-decoded, as redis-py does
