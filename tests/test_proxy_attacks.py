"""``mrtr-state proxy`` attacked as an attacker would: raw bytes on a socket, not an HTTP client
library (which would normalise the very requests under test), against the real CLI process,
under both of uvicorn's HTTP parsers (httptools and h11).

Every attack asserts what matters at a boundary: the upstream recorded nothing it should not
have, no other host was contacted, the client got no plain state, the refusal was logged with
its reason, and nothing printed a traceback.
"""

from __future__ import annotations

import json
import signal
import socket
import threading
import time
from collections.abc import Iterator

import pytest

import mrtr_state as ms

from .helpers import USER, ProxyProcess, call, request, send_raw
from .servers import PLAIN, ScriptedUpstream, serving

FORGED = call("deploy", requestState="eyJzZWNyZXQiOnRydWV9")
#: A second path the rig's proxy serves (--path), besides the upstream URL's /mcp.
SERVED = "/mcp/a%2Fb;p=1"


class Evil:
    """A listener standing for another host: counts every connection it is offered."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            connection.close()


@pytest.fixture(scope="module", params=["httptools", "h11"])
def rig(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ProxyProcess, ScriptedUpstream, Evil]]:
    keyset = tmp_path_factory.mktemp("attacks") / "keyset.json"
    ms.Keyset.generate(("A256GCM",)).save(keyset)
    upstream = ScriptedUpstream()
    with serving(upstream, http="h11") as upstream_url:  # h11 takes any method token
        proxy = ProxyProcess(keyset, upstream_url, "--path", SERVED, parser=request.param)
        try:
            yield proxy, upstream, Evil()
        finally:
            proxy.stop()
    assert not any("Traceback" in line for line in proxy.stderr), "".join(proxy.stderr)


def untouched(upstream: ScriptedUpstream, before: int) -> bool:
    time.sleep(0.05)
    return len(upstream.requests) == before


@pytest.mark.parametrize(
    "method",
    [
        *(b"post", b"Post", b"pOST", b"get", b"delete", b"PUT", b"PATCH", b"OPTIONS", b"HEAD"),
        *(b"TRACE", b"PROPFIND", b"QUERY", b"X-POST"),
    ],
)
def test_a_method_other_than_post_get_delete_never_reaches_the_upstream(
    rig: tuple[ProxyProcess, ScriptedUpstream, Evil], method: bytes
) -> None:
    proxy, upstream, _ = rig
    for body in (FORGED, call("deploy")):  # a forged retry; a first round whose state is plain
        before, logged = len(upstream.requests), len(proxy.log)
        reply = send_raw(proxy.port, request(method, body=body))
        assert reply.status in (400, 405) and PLAIN.encode() not in reply.raw
        if reply.status == 405:
            assert reply.headers[b"allow"] == b"POST, GET, DELETE"
        assert untouched(upstream, before)
        (line,) = proxy.last_log(logged + 1)[-1:]
        assert line["event"] == "refused" and line["status"] == reply.status


@pytest.mark.parametrize("method", [b"POST", b"GET"])
@pytest.mark.parametrize(
    "target",
    [
        b"@127.0.0.1:{evil}/mcp",
        b"http://127.0.0.1:{evil}/mcp",
        b"http://127.0.0.1:{evil}",
        b"//127.0.0.1:{evil}/mcp",
        b"127.0.0.1:{evil}",
        b"*",
        b"mcp",
        b"/mcp#fragment",
        b"/mcp%zz",
        b"/mc\\p",
        b"/mcp?q=[1]",
    ],
)
def test_a_target_that_is_not_origin_form_is_refused(
    rig: tuple[ProxyProcess, ScriptedUpstream, Evil], method: bytes, target: bytes
) -> None:
    proxy, upstream, evil = rig
    before, logged = len(upstream.requests), len(proxy.log)
    body = call("deploy") if method == b"POST" else None
    reply = send_raw(
        proxy.port, request(method, target.replace(b"{evil}", b"%d" % evil.port), body)
    )
    assert reply.status == 400 and PLAIN.encode() not in reply.raw
    assert untouched(upstream, before) and evil.accepted == 0
    assert proxy.last_log(logged + 1)[-1]["status"] == 400


def test_an_origin_form_target_goes_to_the_configured_upstream_as_sent(
    rig: tuple[ProxyProcess, ScriptedUpstream, Evil],
) -> None:
    proxy, upstream, evil = rig
    target = SERVED.encode() + b"?x=1&y=%20&z=@:/?"
    reply = send_raw(proxy.port, request(b"POST", target, {"jsonrpc": "2.0", "method": "n/x"}))
    assert reply.status == 202 and upstream.requests[-1] == ("POST", target)
    assert evil.accepted == 0


@pytest.mark.parametrize(
    ("first", "second"), [(b"1", b"1.0"), (b"1", b"1e0"), (b'"a"', b'"\\u0061"')]
)
def test_a_batch_whose_ids_collide_is_refused_before_anything_is_forwarded(
    rig: tuple[ProxyProcess, ScriptedUpstream, Evil], first: bytes, second: bytes
) -> None:
    proxy, upstream, _ = rig
    prod = json.dumps(call("deploy", arguments={"env": "prod"})).encode()
    dev = json.dumps(call("deploy", arguments={"env": "dev"})).encode()
    batch = b"[" + prod.replace(b'"id": 1', b'"id": ' + first) + b","
    batch += dev.replace(b'"id": 1', b'"id": ' + second) + b"]"
    before = len(upstream.requests)
    reply = send_raw(proxy.port, request(body=batch))
    assert reply.status == 400 and "share an id" in reply.json()["error"]["message"]
    assert untouched(upstream, before)


@pytest.mark.parametrize(
    "tool",
    [
        *("big-sse", "cr-eof", "unterminated", "gzip", "dup-json", "text-json"),
        *("object-state", "case-state", "two-types", "listed-type", "no-type", "latin1-json"),
        *("sse-data-space", "sse-space-data", "sse-upper", "sse-nul", "sse-not-utf8"),
        *("sse-ls-comment", "sse-ps-comment", "sse-nel-comment", "sse-ff-comment"),
        *("sse-vt-comment", "sse-rs-comment", "sse-ls-id"),
        *("method-null", "method-number", "method-null-sse", "id-upper", "id-upper-sse"),
        "id-upper-batch",
    ],
)
def test_a_state_the_proxy_cannot_seal_never_reaches_the_client(
    rig: tuple[ProxyProcess, ScriptedUpstream, Evil], tool: str
) -> None:
    proxy, _, _ = rig
    reply = send_raw(proxy.port, request(body=call(tool, id_=41)))
    assert PLAIN.encode() not in reply.raw and b"PLAIN" not in reply.raw
    refused_whole = ("gzip", "dup-json", "text-json", "two-types", "listed-type", "no-type")
    if tool in (*refused_whole, "latin1-json"):  # compressed, typed or read two ways: a 502
        assert reply.status == 502 and reply.json()["error"]["code"] == -32603
        return
    assert reply.status == 200
    text = reply.body.decode()
    if tool.startswith(("method-", "id-upper")):  # no id the proxy could trust: id null
        assert "could not protect requestState" in text and "PLAIN" not in text
        return
    assert '"id":41' in text.replace(" ", "")
    if tool in ("cr-eof", "unterminated"):  # framed oddly but read whole: sealed
        assert '"requestState":"ms1.' in text
    else:  # over the event cap, or a state no client may see: an error in its place
        assert "could not protect requestState" in text
    if tool == "cr-eof":
        assert text.startswith(": first\r\r")  # the untouched comment event passes byte for byte


def test_a_round_trip_still_works_and_seals_the_plain_state(
    rig: tuple[ProxyProcess, ScriptedUpstream, Evil],
) -> None:
    proxy, upstream, _ = rig
    first = send_raw(proxy.port, request(body=call("deploy", id_=7)))
    token = first.json()["result"]["requestState"]
    assert token.startswith("ms1.") and PLAIN.encode() not in first.raw
    done = send_raw(proxy.port, request(body=call("deploy", id_=8, requestState=token)))
    assert done.json()["result"]["content"][0]["text"] == PLAIN  # the server got its own state
    assert upstream.received[-1]["params"]["requestState"] == PLAIN


def test_a_notification_carrying_state_is_refused_not_a_500(
    rig: tuple[ProxyProcess, ScriptedUpstream, Evil],
) -> None:
    proxy, upstream, _ = rig
    note = {"jsonrpc": "2.0", "method": "tools/call", "params": FORGED["params"]}
    for body in (note, [note, call("deploy", id_=9)]):
        before = len(upstream.requests)
        reply = send_raw(proxy.port, request(body=body))
        assert reply.status == 400 and "notification carries requestState" in reply.body.decode()
        assert untouched(upstream, before)


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        (b"X-Forwarded-User: alice\r\nX-Forwarded-User: mallory\r\n", 400),
        (b"X-Forwarded-User: alice\r\nx-forwarded-user: alice\r\n", 400),
        (b"", 401),
        (b"X-Forwarded-User: \r\n", 401),
    ],
    ids=["two-values", "twice-same-value", "absent", "empty"],
)
def test_the_principal_header_must_be_there_exactly_once(
    rig: tuple[ProxyProcess, ScriptedUpstream, Evil], headers: bytes, status: int
) -> None:
    proxy, upstream, _ = rig
    before = len(upstream.requests)
    reply = send_raw(proxy.port, request(body=call("deploy"), headers=headers))
    assert reply.status == status and PLAIN.encode() not in reply.raw
    assert untouched(upstream, before)


@pytest.mark.parametrize(
    "framing",
    [
        b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        b"Content-Length: 5\r\nContent-Length: 6\r\n\r\n{}",
        b"Transfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n",
    ],
    ids=["te-and-cl", "two-lengths", "odd-coding"],
)
def test_a_request_framed_two_ways_is_refused(
    rig: tuple[ProxyProcess, ScriptedUpstream, Evil], framing: bytes
) -> None:
    proxy, upstream, _ = rig
    before = len(upstream.requests)
    raw = b"POST /mcp HTTP/1.1\r\nHost: p\r\nConnection: close\r\n" + USER + framing
    reply = send_raw(proxy.port, raw)
    assert reply.status in (400, 501) and untouched(upstream, before)


def test_a_get_or_delete_with_a_body_is_refused(
    rig: tuple[ProxyProcess, ScriptedUpstream, Evil],
) -> None:
    proxy, upstream, _ = rig
    for method in (b"GET", b"DELETE"):
        before = len(upstream.requests)
        reply = send_raw(proxy.port, request(method, body=FORGED))
        assert reply.status == 400 and untouched(upstream, before)


def test_dropped_streams_release_their_upstream_connections_and_sigterm_still_works(
    rig: tuple[ProxyProcess, ScriptedUpstream, Evil],
) -> None:
    """The conformance suite's server-stateless case: clients open GET streams and vanish."""
    proxy, upstream, _ = rig
    clients = []
    for _ in range(100):
        sock = socket.create_connection(("127.0.0.1", proxy.port), timeout=10)
        sock.sendall(request(b"GET", headers=USER + b"Accept: text/event-stream\r\n"))
        clients.append(sock)
    for sock in clients:
        received = b""
        while b": open" not in received:  # each stream is live, end to end
            chunk = sock.recv(4096)
            assert chunk, received
            received += chunk
    assert upstream.streams == 100
    for sock in clients:
        sock.close()
    deadline = time.monotonic() + 20
    while upstream.streams and time.monotonic() < deadline:
        time.sleep(0.05)
    assert upstream.streams == 0  # every upstream stream was closed when its client went
    reply = send_raw(proxy.port, request(body={"jsonrpc": "2.0", "method": "n/x"}))
    assert reply.status == 202
    proxy.process.send_signal(signal.SIGTERM)
    assert proxy.process.wait(20) == 0
