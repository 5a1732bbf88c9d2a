"""The proxy in production: the admin listener (liveness, readiness, Prometheus metrics), a
keyset that fails to load made visible everywhere, graceful shutdown, start-up errors, and two
proxies sharing one keyset and one Redis replay store."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

import mrtr_state as ms

from .helpers import ROOT, ProxyProcess, call, request, send_raw
from .servers import ScriptedUpstream, free_port, serving


def admin_get(port: int, path: str) -> tuple[int, bytes, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as answer:
            return answer.status, answer.read(), answer.headers["content-type"]
    except urllib.error.HTTPError as err:
        with err:
            return err.code, err.read(), err.headers["content-type"]


def eventually(condition: Callable[[], bool], seconds: float = 20) -> None:
    """Wait until ``condition`` holds (the proxy looks at its keyset every second; a loaded
    machine may take longer than a fixed sleep)."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "the condition did not come true in time"
        time.sleep(0.1)


def samples(port: int) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """Every sample of /metrics: name -> sorted labels -> value."""
    status, text, kind = admin_get(port, "/metrics")
    assert status == 200 and kind.startswith("text/plain")
    found: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text.decode()):
        for sample in family.samples:
            found.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return found


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[tuple[ProxyProcess, ScriptedUpstream, int, Path]]:
    keyset = tmp_path / "keyset.json"
    ms.Keyset.generate(("A256GCM",)).save(keyset)
    upstream = ScriptedUpstream()
    admin = free_port()
    with serving(upstream) as upstream_url:
        proxy = ProxyProcess(keyset, upstream_url, "--admin-listen", str(admin), "--drain", "5s")
        try:
            yield proxy, upstream, admin, keyset
        finally:
            proxy.stop()
    assert not any("Traceback" in line for line in proxy.stderr), "".join(proxy.stderr)


def test_the_admin_listener_serves_liveness_readiness_and_metrics(
    rig: tuple[ProxyProcess, ScriptedUpstream, int, Path],
) -> None:
    proxy, _, admin, keyset = rig
    assert admin_get(admin, "/healthz")[:2] == (200, b'{"status":"alive"}')
    status, body, _ = admin_get(admin, "/readyz")
    assert status == 200 and json.loads(body) == {"status": "ready"}
    first = send_raw(proxy.port, request(body=call("deploy", id_=1))).json()
    token = first["result"]["requestState"]
    send_raw(proxy.port, request(body=call("deploy", id_=2, requestState=token)))
    send_raw(proxy.port, request(body=call("deploy", id_=3, requestState=token[:-2] + "AA")))
    send_raw(proxy.port, request(b"PUT", body=call("deploy")))
    send_raw(proxy.port, request(body=call("object-state", id_=4)))
    found = samples(admin)
    states = found["mrtr_state_proxy_states_total"]
    assert states[(("event", "sealed"), ("format", "aead"), ("reason", "ok"))] == 1
    assert states[(("event", "opened"), ("format", "aead"), ("reason", "ok"))] == 1
    assert states[(("event", "refused"), ("format", "aead"), ("reason", "bad_signature"))] == 1
    assert states[(("event", "refused"), ("format", "aead"), ("reason", "not_a_string"))] == 1
    refused = found["mrtr_state_proxy_refused_requests_total"]
    assert refused[(("reason", "method_not_allowed"), ("status", "405"))] == 1
    assert found["mrtr_state_proxy_work_seconds_count"][()] == 4
    assert found["mrtr_state_proxy_upstream_seconds_count"][()] == 3  # one refused here
    kid = ms.Keyset.load(keyset).primary("A256GCM").kid
    keys = found["mrtr_state_keyset_keys"]
    assert keys == {(("alg", "A256GCM"), ("kid", kid), ("status", "primary")): 1}
    assert found["mrtr_state_keyset_reload_error"][()] == 0
    assert admin_get(admin, "/nowhere")[0] == 404
    request_post = urllib.request.Request(f"http://127.0.0.1:{admin}/metrics", method="POST")
    with pytest.raises(urllib.error.HTTPError) as refused_post:
        urllib.request.urlopen(request_post, timeout=10)
    refused_post.value.close()
    assert refused_post.value.code == 405


def test_a_keyset_that_fails_to_load_is_never_silent(
    rig: tuple[ProxyProcess, ScriptedUpstream, int, Path],
) -> None:
    """A rotation that retires a key, published with a bad mode: the old keyset stays in force
    (availability), and /readyz, /metrics and the log all say so until a good file loads."""
    proxy, _, admin, keyset = rig
    keyset.chmod(0o644)
    time.sleep(2.5)  # the proxy looks every second, with or without traffic
    status, body, _ = admin_get(admin, "/readyz")
    assert status == 503
    reasons = json.loads(body)["reasons"]
    assert any("mode 0644" in r and "the last good keyset is in force" in r for r in reasons)
    found = samples(admin)
    assert found["mrtr_state_keyset_reload_error"][()] == 1
    assert found["mrtr_state_proxy_ready"][()] == 0
    assert found["mrtr_state_keyset_reload_failures_total"][()] >= 2
    warnings = [line for line in proxy.log if line["event"] == "keyset_reload_failed"]
    assert len(warnings) >= 2  # repeated at each check, not said once
    assert all("mode 0644" in line["reason"] and line["level"] == "warning" for line in warnings)
    keyset.chmod(0o600)
    time.sleep(1.5)
    assert admin_get(admin, "/readyz")[0] == 200
    assert samples(admin)["mrtr_state_keyset_reload_error"][()] == 0


def test_the_log_and_the_metrics_name_each_event_alike(
    rig: tuple[ProxyProcess, ScriptedUpstream, int, Path],
) -> None:
    """Issue 46: the proxy's ``--json-log`` lines and its metrics use one word per event. A
    state sealed, opened and refused: each line's event, format and result are the labels of
    the sample it counted. The keyset rewritten valid, then invalid, then repaired: each
    ``keyset_reloaded`` and ``keyset_reload_failed`` line names the keys in force (the
    failure its reason too), and the two keyset counters count exactly those lines."""
    proxy, _, admin, keyset = rig
    first = send_raw(proxy.port, request(body=call("deploy", id_=1))).json()
    token = first["result"]["requestState"]
    send_raw(proxy.port, request(body=call("deploy", id_=2, requestState=token)))
    send_raw(proxy.port, request(body=call("deploy", id_=3, requestState=token[:-2] + "AA")))
    states = samples(admin)["mrtr_state_proxy_states_total"]
    for event, result in (("sealed", "ok"), ("opened", "ok"), ("refused", "bad_signature")):
        line = proxy.logged("event", event)
        assert (line["format"], line["result"]) == ("aead", result)
        labels = (("event", event), ("format", line["format"]), ("reason", line["result"]))
        assert states[labels] == 1, (event, states)
    assert not [line for line in proxy.log if line["event"] in ("verified", "server")]

    old = ms.Keyset.load(keyset).primary("A256GCM").kid
    ms.Keyset.update(keyset, lambda ks: ks.with_new_key("A256GCM")[0])  # rewritten, valid
    in_force = [key.kid for key in ms.Keyset.load(keyset)]
    reloaded = proxy.logged("event", "keyset_reloaded")
    assert reloaded["level"] == "info" and reloaded["kids"] == in_force and old in in_force
    assert reloaded["keyset"] == str(keyset) and reloaded["changed"] is True
    assert samples(admin)["mrtr_state_keyset_reloads_total"][()] == 1

    good = keyset.read_bytes()
    keyset.write_text('{"keys": [')  # rewritten, invalid (a torn write)
    failed = proxy.logged("event", "keyset_reload_failed")
    assert failed["level"] == "warning" and failed["kids"] == in_force  # the last good, in force
    assert "keyset" in failed["reason"] and failed["keyset"] == str(keyset)
    assert samples(admin)["mrtr_state_keyset_reload_failures_total"][()] >= 1

    keyset.write_bytes(good)  # repaired: one more reload, and the counts settle
    eventually(lambda: len([e for e in proxy.log if e["event"] == "keyset_reloaded"]) == 2)
    found = samples(admin)
    said = [line["event"] for line in proxy.log]
    assert found["mrtr_state_keyset_reloads_total"][()] == said.count("keyset_reloaded") == 2
    failures = found["mrtr_state_keyset_reload_failures_total"][()]
    eventually(lambda: [e["event"] for e in proxy.log].count("keyset_reload_failed") == failures)
    assert found["mrtr_state_keyset_reload_error"][()] == 0


def test_readiness_follows_the_upstream(tmp_path: Path) -> None:
    keyset = tmp_path / "keyset.json"
    ms.Keyset.generate(("A256GCM",)).save(keyset)
    admin, upstream_port = free_port(), free_port()
    proxy = ProxyProcess(
        keyset, f"http://127.0.0.1:{upstream_port}", "--admin-listen", f"127.0.0.1:{admin}"
    )
    try:
        deadline = time.monotonic() + 10
        while not (warned := [e for e in proxy.log if e["event"] == "upstream_unreachable"]):
            assert time.monotonic() < deadline, proxy.stderr
            time.sleep(0.02)
        assert warned[0]["level"] == "warning"  # at start-up
        status, body, _ = admin_get(admin, "/readyz")
        assert status == 503 and "upstream: http://127.0.0.1" in body.decode()
        assert samples(admin)["mrtr_state_proxy_ready"][()] == 0  # the scrape asks the same
        with serving(ScriptedUpstream(), port=upstream_port):
            assert admin_get(admin, "/readyz")[0] == 200
            assert samples(admin)["mrtr_state_proxy_ready"][()] == 1
        assert samples(admin)["mrtr_state_proxy_ready"][()] == 0  # gone again: not a cache
    finally:
        assert proxy.stop() == 0


def test_sigterm_drains_requests_in_flight_then_exits_0(
    rig: tuple[ProxyProcess, ScriptedUpstream, int, Path],
) -> None:
    proxy, _, admin, _ = rig
    answers: list[Any] = []
    slow = threading.Thread(
        target=lambda: answers.append(
            send_raw(proxy.port, request(body=call("slow", arguments={"seconds": 1.5})))
        )
    )
    slow.start()
    time.sleep(0.5)  # the request is with the upstream
    proxy.process.terminate()
    time.sleep(0.3)
    status, body, _ = admin_get(admin, "/readyz")  # still answering, and saying why not ready
    assert status == 503 and "shutting down" in body.decode()
    with pytest.raises(ConnectionRefusedError):  # no new connection is accepted
        socket.create_connection(("127.0.0.1", proxy.port), timeout=1).close()
    slow.join(10)
    assert answers and answers[0].json()["result"]["content"][0]["text"] == "slow done"
    assert proxy.process.wait(15) == 0


def test_a_stream_longer_than_the_drain_is_closed_and_the_proxy_exits_0(
    rig: tuple[ProxyProcess, ScriptedUpstream, int, Path],
) -> None:
    proxy, upstream, _, _ = rig
    sock = socket.create_connection(("127.0.0.1", proxy.port), timeout=20)
    sock.sendall(request(b"GET", headers=b"X-Forwarded-User: a\r\nAccept: text/event-stream\r\n"))
    assert b"200 OK" in sock.recv(4096)
    started = time.monotonic()
    proxy.process.terminate()
    assert proxy.process.wait(20) == 0
    assert 4 <= time.monotonic() - started < 15  # --drain 5s
    sock.close()
    deadline = time.monotonic() + 10
    while upstream.streams and time.monotonic() < deadline:
        time.sleep(0.05)
    assert upstream.streams == 0


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mrtr_state", "proxy", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )


def test_start_up_errors_are_clear_and_have_their_exit_codes(tmp_path: Path) -> None:
    keyset = tmp_path / "keyset.json"
    ms.Keyset.generate(("A256GCM",)).save(keyset)
    base = ("--keyset", str(keyset), "--upstream", "http://127.0.0.1:9/mcp", "--allow-anonymous")
    bad = run_cli(*base, "--admin-listen", "nowhere:port")
    assert bad.returncode == 2 and "--admin-listen" in bad.stderr
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        busy = run_cli(*base, "--admin-listen", str(port), "--listen", f"127.0.0.1:{free_port()}")
    assert busy.returncode == 7 and f"cannot listen on 127.0.0.1:{port}" in busy.stderr
    with socket.create_server(("127.0.0.1", 0)) as taken:  # the admin port free, --listen taken
        port = taken.getsockname()[1]
        main = run_cli(*base, "--admin-listen", str(free_port()), "--listen", f"127.0.0.1:{port}")
    assert main.returncode == 7 and f"cannot listen on 127.0.0.1:{port}:" in main.stderr
    missing = run_cli("--keyset", str(tmp_path / "none.json"), *base[2:])
    assert missing.returncode == 6 and "no keyset at" in missing.stderr
    keyset.chmod(0o644)
    loose = run_cli(*base)
    assert loose.returncode == 6 and "mode 0644" in loose.stderr
    for result in (bad, busy, main, missing, loose):
        assert "Traceback" not in result.stderr


def test_two_proxies_share_one_keyset_and_one_replay_store(tmp_path: Path, redis_url: str) -> None:
    """A fleet of two: a retry that lands on the other proxy is served; a replay is refused on
    either, whichever served the retry."""
    keyset = tmp_path / "keyset.json"
    ms.Keyset.generate(("A256GCM",)).save(keyset)
    upstream = ScriptedUpstream()
    with serving(upstream) as upstream_url:
        fleet = [
            ProxyProcess(keyset, upstream_url, "--once", "--replay-store", redis_url)
            for _ in range(2)
        ]
        try:
            a, b = (proxy.port for proxy in fleet)
            for first_on, retry_on in ((a, b), (b, a)):
                token = send_raw(first_on, request(body=call("deploy", id_=1))).json()["result"][
                    "requestState"
                ]
                retry = request(body=call("deploy", id_=2, requestState=token))
                done = send_raw(retry_on, retry).json()
                assert done["result"]["content"][0]["text"].startswith("PLAIN-STATE")
                for replay_on in (a, b):
                    again = send_raw(replay_on, retry).json()
                    assert again["error"]["code"] == -32602
            # each proxy's log is read by a thread: give the last lines a moment to arrive
            deadline = time.monotonic() + 5
            while True:
                refusals = [
                    line for p in fleet for line in p.log if line.get("result") == "replayed"
                ]
                if len(refusals) >= 4 or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            assert len(refusals) == 4
        finally:
            for proxy in fleet:
                proxy.stop()


def test_the_proxy_runs_on_an_encrypted_keyset_and_reports_a_kek_it_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--kek opens the keyset at start; a rotation written meanwhile is followed without the KEK
    (same data key); a rewrap to a KEK the replica lacks keeps the last good keyset in force and
    /readyz says why, until the file it can open is back."""
    monkeypatch.setenv("MRTR_TEST_PASSPHRASE", "the proxy's passphrase, long enough")
    monkeypatch.setenv("MRTR_TEST_OTHER", "another passphrase, long enough")
    kek = "passphrase:env:MRTR_TEST_PASSPHRASE"
    keyset = tmp_path / "keyset.json"
    ms.Keyset.generate(("A256GCM",)).save(keyset, kek=kek)
    admin = free_port()
    with serving(ScriptedUpstream()) as upstream_url:
        proxy = ProxyProcess(keyset, upstream_url, "--admin-listen", str(admin), "--kek", kek)
        try:
            assert admin_get(admin, "/readyz")[0] == 200
            first = send_raw(proxy.port, request(body=call("deploy", id_=1))).json()
            token = first["result"]["requestState"]
            retry = call("deploy", id_=2, requestState=token)
            assert "error" not in send_raw(proxy.port, request(body=retry)).json()
            ms.Keyset.update(keyset, lambda ks: ks.with_new_key("A256GCM")[0], kek=kek)
            eventually(lambda: len(samples(admin)["mrtr_state_keyset_keys"]) == 2)  # followed
            before = keyset.read_bytes()
            ms.Keyset.convert(keyset, kek=kek, to_kek="passphrase:env:MRTR_TEST_OTHER")
            eventually(lambda: admin_get(admin, "/readyz")[0] == 503)
            status, body, _ = admin_get(admin, "/readyz")
            assert status == 503
            assert any(
                "was encrypted under KEK passphrase:env:MRTR_TEST_OTHER" in r
                for r in json.loads(body)["reasons"]
            )
            again = call("deploy", id_=3)  # still sealing and opening with the last good keyset
            assert "requestState" in send_raw(proxy.port, request(body=again)).json()["result"]
            keyset.write_bytes(before)
            eventually(lambda: admin_get(admin, "/readyz")[0] == 200)
        finally:
            proxy.stop()
    assert not any("Traceback" in line for line in proxy.stderr), "".join(proxy.stderr)


def test_the_proxy_refuses_to_start_without_the_kek_of_its_keyset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    keyset = tmp_path / "keyset.json"
    monkeypatch.setenv("MRTR_TEST_PASSPHRASE", "a passphrase for this test only")
    ms.Keyset.generate(("A256GCM",)).save(keyset, kek="passphrase:env:MRTR_TEST_PASSPHRASE")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mrtr_state",
            "proxy",
            "--keyset",
            str(keyset),
            "--upstream",
            "http://127.0.0.1:9/mcp",
            "--allow-anonymous",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=60,
    )
    assert done.returncode == 6 and "is encrypted (KEK passphrase:env:" in done.stderr


def test_a_uvicorn_without_the_hooks_the_proxy_extends_is_refused_naming_the_range(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The proxy subclasses uvicorn's HTTP protocols (no public interface does what its framer
    needs): a release that drops a hook it overrides stops it at start-up, exit 6, saying
    which release range it is tested on, rather than failing on the first request."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    from mrtr_state.proxy import server

    from .helpers import run

    keyset = tmp_path / "keyset.json"
    ms.Keyset.generate(("A256GCM",)).save(keyset)
    assert server.check_uvicorn() is None and server.uvicorn_untested() is None
    monkeypatch.delattr(H11Protocol, "on_response_complete")
    problem = server.check_uvicorn()
    assert problem is not None and "H11Protocol.on_response_complete" in problem
    assert "uvicorn>=0.36,<0.56" in problem
    refused = run(
        "--keyset", str(keyset), "proxy", "--upstream", "http://127.0.0.1:9/mcp",
        "--allow-anonymous", "--listen", "127.0.0.1:0", code=6,
    )  # fmt: skip
    assert "pip install 'uvicorn>=0.36,<0.56'" in refused.stderr


def test_a_uvicorn_outside_the_tested_range_is_said_at_start_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import uvicorn

    from mrtr_state.proxy import server

    monkeypatch.setattr(uvicorn, "__version__", "0.99.0")
    untested = server.uvicorn_untested()
    assert untested is not None and "outside the range the proxy is tested on" in untested
    monkeypatch.setattr(uvicorn, "__version__", "0.36.0")
    assert server.uvicorn_untested() is None
