"""Real Redis topologies on loopback, started by the tests: a 3-master Cluster, and a primary
with a replica watched by three Sentinels. Each process is this test run's own (its own ports
and folder), so a test may stop, kill or fail one over; everything is killed at the end.

They need Debian's ``redis-server`` (which also runs Sentinel) and ``redis-cli`` (which creates
the cluster); without them the tests that ask skip with the reason.
"""

from __future__ import annotations

import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .helpers import program
from .servers import free_port


def _binary(name: str) -> str:
    return program(name, "redis-server")


def _cluster_port() -> int:
    """A free port whose cluster bus port (the port + 10000) exists too."""
    while True:
        port = free_port()
        if port + 10000 < 65536:
            return port


def _wait_port(port: int, seconds: float = 15) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _cli(*args: str, port: int) -> str:
    done = subprocess.run(
        [_binary("redis-cli"), "-p", str(port), *args],
        capture_output=True,
        timeout=30,
        check=False,
    )
    return done.stdout.decode("utf-8", "replace").strip()  # a record's body is ciphertext


class Node:
    """One redis-server (or Sentinel) process of a topology."""

    def __init__(self, folder: Path, port: int, *extra: str, sentinel: bool = False) -> None:
        self.port = port
        self.folder = folder / str(port)
        self.folder.mkdir()
        config = self.folder / ("sentinel.conf" if sentinel else "redis.conf")
        config.write_text(
            "\n".join(
                [
                    f"port {port}",
                    "bind 127.0.0.1",
                    f"dir {self.folder}",
                    'save ""',
                    "appendonly no",
                    *extra,
                ]
            )
            + "\n"
        )
        command = [_binary("redis-server"), str(config)]
        if sentinel:
            command.append("--sentinel")
        self.process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        _wait_port(port)

    def cli(self, *args: str) -> str:
        return _cli(*args, port=self.port)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(10)


@contextmanager
def cluster(masters: int = 3) -> Iterator[tuple[list[Node], str]]:
    """A Redis Cluster of ``masters`` primaries (no replicas) on loopback, and its URL."""
    with tempfile.TemporaryDirectory(prefix="mrtr-cluster-") as folder:
        nodes: list[Node] = []
        try:
            for _ in range(masters):
                port = _cluster_port()
                nodes.append(
                    Node(
                        Path(folder),
                        port,
                        "cluster-enabled yes",
                        f"cluster-config-file nodes-{port}.conf",
                        "cluster-node-timeout 2000",
                    )
                )
            addresses = [f"127.0.0.1:{node.port}" for node in nodes]
            created = subprocess.run(
                [_binary("redis-cli"), "--cluster", "create", *addresses, "--cluster-yes"],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            assert created.returncode == 0, created.stdout + created.stderr
            deadline = time.monotonic() + 60
            # every node must see the cluster up: one that does not yet answers CLUSTERDOWN
            while not all("cluster_state:ok" in node.cli("cluster", "info") for node in nodes):
                assert time.monotonic() < deadline, [n.cli("cluster", "info") for n in nodes]
                time.sleep(0.1)
            yield nodes, "redis+cluster://" + ",".join(addresses)
        finally:
            for node in nodes:
                node.kill()


def _others(watcher: Node, service: str) -> int:
    """How many other Sentinels ``watcher`` knows of for ``service``."""
    lines = watcher.cli("sentinel", "master", service).splitlines()
    for name, value in zip(lines[::2], lines[1::2], strict=False):
        if name == "num-other-sentinels":
            return int(value)
    return 0


@contextmanager
def sentinel_watched(service: str = "mrtr") -> Iterator[tuple[Node, Node, list[Node], str]]:
    """A primary, one replica and three Sentinels watching them; and the Sentinel URL."""
    with tempfile.TemporaryDirectory(prefix="mrtr-sentinel-") as folder:
        started: list[Node] = []
        try:
            primary = Node(Path(folder), free_port())
            started.append(primary)
            replica = Node(Path(folder), free_port(), f"replicaof 127.0.0.1 {primary.port}")
            started.append(replica)
            deadline = time.monotonic() + 30
            while "master_link_status:up" not in replica.cli("info", "replication"):
                assert time.monotonic() < deadline, replica.cli("info", "replication")
                time.sleep(0.1)
            watchers = []
            for _ in range(3):
                watcher = Node(
                    Path(folder),
                    free_port(),
                    f"sentinel monitor {service} 127.0.0.1 {primary.port} 2",
                    f"sentinel down-after-milliseconds {service} 1000",
                    f"sentinel failover-timeout {service} 5000",
                    sentinel=True,
                )
                started.append(watcher)
                watchers.append(watcher)
            deadline = time.monotonic() + 30
            while not all(_others(w, service) == len(watchers) - 1 for w in watchers):
                assert time.monotonic() < deadline, "the Sentinels did not find each other"
                time.sleep(0.1)
            hosts = ",".join(f"127.0.0.1:{w.port}" for w in watchers)
            yield primary, replica, watchers, f"redis+sentinel://{hosts}/{service}"
        finally:
            for node in started:
                node.kill()
