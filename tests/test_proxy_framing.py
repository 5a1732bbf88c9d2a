"""The proxy's HTTP layer is untrusted too: framing, trailers, content types and paths.

Attacked over raw sockets (a client library would normalise the very requests under test), the
real CLI process in front of an upstream that records what reaches it, under both HTTP parsers
the proxy runs on. Each finding of issue 35 has its test here, sent in one packet and cut into
reads; the differential fuzzer (:mod:`tests.framing_cases`) then checks the whole invariant on
random streams. The framer's own rules are tested first, without a socket.
"""

from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import mrtr_state as ms
from mrtr_state.proxy.framing import MAX_FIELDS, MAX_HEAD, RequestFramer

from .framing_cases import build_case, forwarded_headers, send_case, statuses
from .helpers import ROOT, ProxyProcess, Reply, call
from .servers import NaiveServer, RecordingUpstream, free_port, serving

#: what a client of the proxy sends with each POST: its principal and the body's media type
SENDER = b"X-Forwarded-User: alice\r\nContent-Type: application/json\r\n"
NOTE = json.dumps({"jsonrpc": "2.0", "method": "notifications/m", "params": {}}).encode()


def head(*fields: bytes, line: bytes = b"POST /mcp HTTP/1.1") -> bytes:
    return line + b"\r\n" + b"".join(f + b"\r\n" for f in fields) + b"\r\n"


def framer_verdict(stream: bytes, cuts: list[int] | None = None) -> tuple[bytes, Any]:
    framer = RequestFramer(1 << 20)
    out = b""
    start = 0
    for cut in [*(cuts or []), len(stream)]:
        out += framer.feed(stream[start:cut])
        start = cut
    refusal = framer.refusal
    return out, None if refusal is None else (refusal.status, refusal.kind)


# --- the framer alone ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stream", "expected"),
    [
        (
            head(b"Host: p", b"Content-Length: 2") + b"{}",
            head(b"Host: p", b"Content-Length: 2") + b"{}",
        ),
        # any letter case in a name is read and handed on as sent; so is a value after one SP
        (
            head(b"hOsT: p", b"content-length:2", b"X-A:\t b \t") + b"{}",
            head(b"hOsT: p", b"content-length:2", b"X-A:\t b \t") + b"{}",
        ),
        # other white space around a framing field's value: the head is written canonically
        (
            head(b"hOsT:\t p \t", b"content-length:2", b"X-A:\t b \t") + b"{}",
            head(b"hOsT: p", b"content-length: 2", b"X-A: b") + b"{}",
        ),
        # chunk extensions, leading zeros and upper-case hex read; sizes handed on bare
        (
            head(b"Host: p", b"Transfer-Encoding: Chunked")
            + b'0002 ; a = "b c";d\r\n{}\r\n0;x\r\n\r\n',
            head(b"Host: p", b"Transfer-Encoding: Chunked") + b"2\r\n{}\r\n0\r\n\r\n",
        ),
        # empty lines before a request (RFC 9112 s2.2) are skipped
        (b"\r\n\r\n" + head(b"Host: p"), head(b"Host: p")),
        # HTTP/1.0 needs no Host; it closes the connection: what follows is never read
        (
            head(line=b"POST /mcp HTTP/1.0") + b"GET /x HTTP/1.1\r\n\r\n",
            head(line=b"POST /mcp HTTP/1.0"),
        ),
        (
            head(b"Host: p", b"Connection: close") + b"garbage",
            head(b"Host: p", b"Connection: close"),
        ),
        # Upgrade is not handed on: the proxy switches no protocol
        (
            head(b"Host: p", b"Connection: Upgrade", b"Upgrade: h2c"),
            head(b"Host: p", b"Connection: Upgrade"),
        ),
    ],
    ids=[
        *("plain", "case", "ows-rewritten", "chunk-extensions", "leading-crlf", "http10"),
        *("close", "upgrade"),
    ],
)
def test_the_framer_hands_on_what_it_has_read(stream: bytes, expected: bytes) -> None:
    assert framer_verdict(stream) == (expected, None)


@pytest.mark.parametrize(
    ("stream", "status", "kind"),
    [
        (head(b"Host: p", b"Content-Length: 2", b"Transfer-Encoding: chunked"), 400, "cl_and_te"),
        (head(b"Host: p", b"Transfer-Encoding: chunked", b"Content-Length: 0"), 400, "cl_and_te"),
        (head(b"Host: p", b"Content-Length: 2", b"Content-Length: 2"), 400, "repeated_length"),
        (head(b"Host: p", b"Content-Length: 2, 2"), 400, "bad_length"),
        (head(b"Host: p", b"Content-Length: +2"), 400, "bad_length"),
        (head(b"Host: p", b"Content-Length: 1 2"), 400, "bad_length"),
        (head(b"Host: p", b"Content-Length: 9999999999999999"), 400, "bad_length"),
        (head(b"Host: p", b"Transfer-Encoding: chunked, identity"), 400, "bad_coding"),
        (head(b"Host: p", b"Transfer-Encoding: gzip"), 400, "bad_coding"),
        (
            head(b"Host: p", b"Transfer-Encoding: chunked", b"Transfer-Encoding: chunked"),
            400,
            "bad_coding",
        ),
        (head(b"Transfer-Encoding: chunked", line=b"POST /mcp HTTP/1.0"), 400, "bad_coding"),
        (head(b"Host: p", b"Transfer-Encoding:", b" chunked"), 400, "obs_fold"),
        (head(b"Host: p", b"X-Forwarded-User: a", b"\tvictim"), 400, "obs_fold"),
        (b"POST /mcp HTTP/1.1\nHost: p\r\n\r\n", 400, "bare_line_end"),
        (b"POST /mcp HTTP/1.1\r\nHost: p\rX: y\r\n\r\n", 400, "bare_line_end"),
        (b"POST /mcp HTTP/1.1\r\nHost: p\n\nPOST /smuggled HTTP/1.1", 400, "bare_line_end"),
        (head(b"Host : p"), 400, "bad_header"),
        (head(b"Host: p", b"X-A\t: b"), 400, "bad_header"),
        (head(b"Host: p", b"X(A): b"), 400, "bad_header"),
        (head(b"Host: p", b"no colon"), 400, "bad_header"),
        (head(b"Host: p", b"X-A: b\x00c"), 400, "bad_header"),
        (head(b"Host: p", b"X-A: b\x0bc"), 400, "bad_header"),
        (head(b"Host: p", b"X-A: b\x7f"), 400, "bad_header"),
        (head(), 400, "bad_host"),
        (head(b"Host: p", b"Host: q"), 400, "bad_host"),
        (head(b"Host: p/q"), 400, "bad_host"),
        (head(b"Host: p", line=b"POST  /mcp HTTP/1.1"), 400, "bad_framing"),
        (head(b"Host: p", line=b"POST /mcp HTTP/1.2"), 400, "bad_framing"),
        (head(b"Host: p", line=b"POST /mcp HTTP/2.0"), 400, "bad_framing"),
        (head(b"Host: p", line=b"POST /m\x80cp HTTP/1.1"), 400, "bad_framing"),
        (head(b"Host: p", line=b"CONNECT p:443 HTTP/1.1"), 405, "method_not_allowed"),
        (head(b"Host: p", line=b"post /mcp HTTP/1.1"), 405, "method_not_allowed"),
        (head(b"Host: p", line=b"PUT /mcp HTTP/1.1"), 405, "method_not_allowed"),
        (head(b"Host: p", b"Proxy-Connection: close"), 400, "proxy_connection"),
        (
            head(b"Host: p", b"Transfer-Encoding: chunked") + b"1\r\nx\r\n" * 4097,
            400,
            "too_many_chunks",
        ),
        (
            head(b"Host: p", b"Transfer-Encoding: chunked")
            + b"2\r\n{}\r\n0\r\nX-Forwarded-User: v\r\n\r\n",
            400,
            "trailer",
        ),
        (head(b"Host: p", b"Transfer-Encoding: chunked") + b"zz\r\n", 400, "bad_chunk"),
        (head(b"Host: p", b"Transfer-Encoding: chunked") + b"2 \r\n{}\r\n", 400, "bad_chunk"),
        (head(b"Host: p", b"Transfer-Encoding: chunked") + b"2;a=\r\n{}\r\n", 400, "bad_chunk"),
        (head(b"Host: p", b"Transfer-Encoding: chunked") + b'2;a="b\r\n{}\r\n', 400, "bad_chunk"),
        (head(b"Host: p", b"Transfer-Encoding: chunked") + b"2\r\n{}XX", 400, "bad_chunk"),
        (head(b"Host: p", b"Transfer-Encoding: chunked") + b"2\n{}\r\n", 400, "bare_line_end"),
        (head(b"Host: p", b"Transfer-Encoding: chunked") + b"1" * 1100, 400, "bad_chunk"),
        (head(b"Host: p", b"Content-Length: %d" % ((1 << 20) + 1)), 413, "body_too_large"),
        (head(b"Host: p", b"Transfer-Encoding: chunked") + b"100001\r\n", 413, "body_too_large"),
        (b"POST /mcp HTTP/1.1\r\nHost: p\r\nX: " + b"a" * MAX_HEAD, 431, "head_too_large"),
        (head(b"Host: p", *[b"X-%d: v" % n for n in range(MAX_FIELDS)]), 431, "head_too_large"),
    ],
)
def test_the_framer_refuses_what_has_two_readings(stream: bytes, status: int, kind: str) -> None:
    assert framer_verdict(stream)[1] == (status, kind)
    # the same, a byte at a time: a refusal never waits for an end that may not come
    assert framer_verdict(stream, list(range(1, len(stream))))[1] == (status, kind)


def test_requests_before_a_refused_one_are_handed_on_and_nothing_after() -> None:
    good = head(b"Host: p", b"Content-Length: 2") + b"{}"
    bad = head(b"Host: p", b"Content-Length: 2", b"Transfer-Encoding: chunked")
    framer = RequestFramer(1 << 20)
    assert framer.feed(good + bad + good) == good
    assert framer.refusal is not None and (framer.begun, framer.complete) == (1, 1)
    assert framer.feed(good) == b"" and framer.closed


def test_a_chunked_end_is_held_back_until_the_trailer_section_is_seen() -> None:
    framer = RequestFramer(1 << 20)
    out = framer.feed(head(b"Host: p", b"Transfer-Encoding: chunked") + b"2\r\n{}\r\n0\r\n")
    assert out.endswith(b"{}\r\n") and framer.partial  # no "0" yet: the parser cannot finish
    assert framer.feed(b"X-Forwarded-User: victim\r\n\r\n") == b""
    assert framer.refusal is not None and framer.refusal.kind == "trailer"


@given(st.integers(min_value=0, max_value=2**32), st.data())
def test_any_cut_of_a_stream_reads_as_the_whole_stream(seed: int, data: st.DataObject) -> None:
    """Split reads and one packet get the same verdict and hand on the same bytes."""
    stream = build_case(random.Random(seed), 0).stream
    cuts = data.draw(st.lists(st.integers(1, max(1, len(stream) - 1)), max_size=8))
    assert framer_verdict(stream, sorted(set(cuts))) == framer_verdict(stream)


# --- the proxy, over raw sockets, under both parsers ----------------------------------------


@pytest.fixture(scope="module", params=["httptools", "h11"])
def rig(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ProxyProcess, RecordingUpstream]]:
    keyset = tmp_path_factory.mktemp("framing") / "keyset.json"
    ms.Keyset.generate(("A256GCM",)).save(keyset)
    upstream = RecordingUpstream()
    with serving(upstream, http="h11") as upstream_url:
        proxy = ProxyProcess(keyset, upstream_url, parser=request.param)
        try:
            yield proxy, upstream
        finally:
            proxy.stop()
    assert not any("Traceback" in line for line in proxy.stderr), "".join(proxy.stderr)


def exchange(port: int, stream: bytes, cut: bool) -> list[int]:
    """Send ``stream`` (in one packet, or a byte at a time up to its body) and return the
    statuses of what came back before the proxy closed the connection."""
    from .framing_cases import Case, Request

    cuts = list(range(1, min(len(stream), 400))) if cut else []
    case = Case(0, [Request(stream, "", None, True)], cuts)
    return statuses(send_case(port, case))


def settle(upstream: RecordingUpstream, before: int) -> int:
    time.sleep(0.05)
    return len(upstream.requests) - before


CHUNKED = b"Transfer-Encoding: chunked\r\n"


def chunked(body: bytes, trailer: bytes = b"") -> bytes:
    return b"%x\r\n" % len(body) + body + b"\r\n0\r\n" + trailer + b"\r\n"


@pytest.mark.parametrize("cut", [False, True], ids=["one-packet", "split"])
@pytest.mark.parametrize(
    "trailer",
    [b"X-Forwarded-User: victim\r\n", b"Mcp-Session-Id: stolen\r\n", b"X-Anything: at-all\r\n"],
    ids=["principal", "session", "other"],
)
def test_a_trailer_is_refused_before_anything_reaches_the_upstream(
    rig: tuple[ProxyProcess, RecordingUpstream], trailer: bytes, cut: bool
) -> None:
    """Finding 1 (high): under httptools a trailer sent with the head named the principal."""
    proxy, upstream = rig
    before = len(upstream.requests)
    stream = head(b"Host: p", CHUNKED.strip(), line=b"POST /mcp HTTP/1.1") + chunked(NOTE, trailer)
    # refused (401 when the app saw the head without a principal before the trailer came),
    # then the connection closed
    assert exchange(proxy.port, stream, cut) in ([400], [401])
    with_principal = head(b"Host: p", SENDER.strip(), CHUNKED.strip()) + chunked(NOTE, trailer)
    assert exchange(proxy.port, with_principal, cut) == [400]
    assert settle(upstream, before) == 0
    refused = [e for e in proxy.log if e.get("kind") == "trailer"]
    assert refused and refused[-1]["status"] == 400 and refused[-1]["level"] == "warning"


SMUGGLED = head(b"Host: p", b"X-Forwarded-User: victim", b"Content-Length: %d" % len(NOTE)) + NOTE


@pytest.mark.parametrize("cut", [False, True], ids=["one-packet", "split"])
@pytest.mark.parametrize(
    "framing",
    [
        b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n",
        b"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n",
        b"Content-Length: 5\r\nTransfer-Encoding:\r\n chunked\r\n",
        b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\tX-Folded: y\r\n",
        b"Transfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n",
        b"Transfer-Encoding: identity, chunked\r\n",
        b"Content-Length: 5\r\nContent-Length: 5\r\n",
        b"Content-Length: 5, 5\r\n",
    ],
    ids=[
        "cl-te",
        "te-cl",
        "te-folded",
        "other-folded",
        "te-twice",
        "te-list",
        "cl-twice",
        "cl-list",
    ],
)
def test_framing_with_two_readings_is_refused_and_nothing_after_it_is_read(
    rig: tuple[ProxyProcess, RecordingUpstream], framing: bytes, cut: bool
) -> None:
    """Finding 2 (medium): h11 framed CL + TE as chunked and read what followed as a request."""
    proxy, upstream = rig
    before = len(upstream.requests)
    stream = b"POST /mcp HTTP/1.1\r\nHost: p\r\n" + SENDER + framing + b"\r\n" + chunked(NOTE)
    assert exchange(proxy.port, stream + SMUGGLED, cut) == [400]
    assert settle(upstream, before) == 0


def test_requests_before_a_refused_one_are_answered_first(
    rig: tuple[ProxyProcess, RecordingUpstream],
) -> None:
    proxy, upstream = rig
    before = len(upstream.requests)
    good = head(b"Host: p", SENDER.strip(), b"Content-Length: %d" % len(NOTE)) + NOTE
    bad = (
        b"POST /mcp HTTP/1.1\r\nHost: p\r\n" + SENDER + b"Content-Length: 2\r\n" + CHUNKED + b"\r\n"
    )
    assert exchange(proxy.port, good + good + bad + SMUGGLED, cut=False) == [202, 202, 400]
    assert settle(upstream, before) == 2
    assert all(b"victim" not in value for r in upstream.requests for _, value in r[2])


def test_the_upstream_gets_the_header_section_and_never_an_upgrade(
    rig: tuple[ProxyProcess, RecordingUpstream],
) -> None:
    proxy, upstream = rig
    before = len(upstream.requests)
    sent = [
        b"Host: p",
        SENDER.strip(),
        b"X-Trace:  t-1 ",
        b"Connection: Upgrade, X-Hop",
        b"X-Hop: h",
    ]
    stream = head(*sent, b"Upgrade: h2c", b"Content-Length: %d" % len(NOTE)) + NOTE
    last = head(b"Host: p", SENDER.strip(), b"Connection: close", b"Content-Length: 2") + b"{}"
    assert exchange(proxy.port, stream + last, cut=True) == [202, 400]  # "{}" is no JSON-RPC
    assert settle(upstream, before) == 1
    got = [(n, v) for n, v in upstream.requests[-1][2] if n not in (b"host", b"content-length")]
    assert got == [
        (b"x-forwarded-user", b"alice"),
        (b"content-type", b"application/json"),
        (b"x-trace", b"t-1"),
        (b"accept-encoding", b"identity"),
    ]


def test_the_framing_fuzzer(rig: tuple[ProxyProcess, RecordingUpstream]) -> None:
    """Random streams (tests/framing_cases.py), a fixed seed: the upstream gets exactly what a
    strict reading accepts, with the header section sent; the client gets its answers, then the
    refusal. ``MRTR_STATE_TEST_FRAMING_CASES`` sets how many and ``MRTR_STATE_TEST_FRAMING_SEED``
    the seed (``make fuzz`` runs many more cases on a new seed)."""
    proxy, upstream = rig
    count = int(os.environ.get("MRTR_STATE_TEST_FRAMING_CASES", "200"))
    rng = random.Random(int(os.environ.get("MRTR_STATE_TEST_FRAMING_SEED", "35")))
    problems = run_cases(proxy.port, upstream, rng, count)
    assert problems == [], "\n".join(problems[:10])


def run_cases(port: int, upstream: RecordingUpstream, rng: random.Random, count: int) -> list[str]:
    """Run ``count`` random cases against the proxy on ``port``; what broke the invariant."""
    problems: list[str] = []
    for number in range(count):
        case = build_case(rng, number)
        expected, refusal = case.expected()
        before = len(upstream.requests)
        got = statuses(send_case(port, case))
        want = [request.status for request in expected]
        if refusal is not None:
            want.append(refusal)
        deadline = time.monotonic() + 2
        while len(upstream.requests) - before < len(expected) and time.monotonic() < deadline:
            time.sleep(0.005)
        arrived = upstream.requests[before:]
        markers = [json.loads(body)["params"]["marker"] for _, _, _, body in arrived]
        defects = [r.defect for r in case.requests]
        if got != want or markers != [r.marker for r in expected]:
            problems.append(f"case {number} {defects}: answers {got} != {want}, got {markers}")
            continue
        for request, (_, _, headers, _) in zip(expected, arrived, strict=True):
            seen = [(n, v) for n, v in headers if n not in (b"host", b"content-length")]
            if seen != [*forwarded_headers(request.fields), (b"accept-encoding", b"identity")]:
                problems.append(f"case {number}: headers {seen} for {request.fields}")
    return problems


# --- answers, paths, start-up -------------------------------------------------------------


def test_only_the_paths_served_are_forwarded(tmp_path: Path) -> None:
    keyset = tmp_path / "keyset.json"
    ms.Keyset.generate(("A256GCM",)).save(keyset)
    upstream = RecordingUpstream()
    with serving(upstream, http="h11") as upstream_url:
        proxy = ProxyProcess(keyset, upstream_url, "--path", "/extra", upstream_path="/api/mcp")
        try:
            start = next(e for e in proxy.last_log(1) if e["event"] == "start")
            assert start["upstream"] == upstream_url + "/api/mcp"
            assert start["paths"] == ["/api/mcp", "/extra"]
            for target in (b"/mcp", b"/admin/secret", b"/api/mcp/", b"/api/%6Dcp", b"/API/mcp"):
                raw = (
                    head(
                        b"Host: p",
                        SENDER.strip(),
                        b"Content-Length: %d" % len(NOTE),
                        line=b"POST " + target + b" HTTP/1.1",
                    )
                    + NOTE
                )
                assert Reply(send_raw_close(proxy.port, raw)).status == 404, target
            assert upstream.requests == []
            for target in (b"/api/mcp", b"/api/mcp?x=1", b"/extra"):
                raw = (
                    head(
                        b"Host: p",
                        SENDER.strip(),
                        b"Content-Length: %d" % len(NOTE),
                        line=b"POST " + target + b" HTTP/1.1",
                    )
                    + NOTE
                )
                assert Reply(send_raw_close(proxy.port, raw)).status == 202, target
            assert [r[1] for r in upstream.requests] == [b"/api/mcp", b"/api/mcp?x=1", b"/extra"]
        finally:
            proxy.stop()


def send_raw_close(port: int, raw: bytes) -> bytes:
    """One request, with Connection: close added, and all that came back."""
    raw = raw.replace(b"\r\n", b"\r\nConnection: close\r\n", 1)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(raw)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    return received


def test_a_state_is_bound_to_the_path_it_was_issued_on(tmp_path: Path) -> None:
    """A state sealed on /mcp/tenant-a is refused on /mcp/tenant-b, and the upstream never
    sees the retry."""
    import httpx

    keyset = tmp_path / "keyset.json"
    ms.Keyset.generate(("A256GCM",)).save(keyset)
    upstream = NaiveServer()
    with serving(upstream) as upstream_url:
        proxy = ProxyProcess(
            keyset, upstream_url, "--path", "/mcp/tenant-b", upstream_path="/mcp/tenant-a"
        )
        try:
            base = f"http://127.0.0.1:{proxy.port}"
            user = {"X-Forwarded-User": "alice", "Accept": "application/json, text/event-stream"}
            first = call("deploy", arguments={"env": "prod"})
            token = httpx.post(base + "/mcp/tenant-a", json=first, headers=user).json()["result"][
                "requestState"
            ]
            retry = call("deploy", id_=2, arguments={"env": "prod"}, requestState=token)
            other = httpx.post(base + "/mcp/tenant-b", json=retry, headers=user).json()
            assert other["error"]["code"] == -32602 and upstream.retries() == []
            assert proxy.logged("result", "audience_mismatch")["event"] == "refused"
            same = httpx.post(base + "/mcp/tenant-a", json=retry, headers=user).json()
            assert same["result"]["content"][0]["text"] == "deployed prod"
            claims = ms.verify(
                ms.Keyset.load(keyset),
                token,
                principal="alice",
                audience="/mcp/tenant-a",
                method="tools/call",
                target="deploy",
                arguments={"env": "prod"},
            )
            assert claims.aud == "/mcp/tenant-a"
        finally:
            proxy.stop()


def test_a_principal_header_on_a_public_address_is_warned_of_at_start_up(tmp_path: Path) -> None:
    keyset = tmp_path / "keyset.json"
    ms.Keyset.generate(("A256GCM",)).save(keyset)
    with serving(RecordingUpstream(), http="h11") as upstream_url:
        exposed = ProxyProcess(keyset, upstream_url, listen_host="0.0.0.0")
        try:
            lines = exposed.last_log(2)
        finally:
            assert exposed.stop() == 0
        loopback = ProxyProcess(keyset, upstream_url)
        try:
            quiet = loopback.last_log(1)
        finally:
            assert loopback.stop() == 0
    warned = [e for e in lines if e["event"] == "principal_header_exposed"]
    assert warned and warned[0]["level"] == "warning" and warned[0]["header"] == "X-Forwarded-User"
    assert not any(e["event"] == "principal_header_exposed" for e in loopback.log)
    assert quiet[0]["event"] == "start"
    # every line written, start-up and shutdown included, is JSON with ts, level and event
    for proxy in (exposed, loopback):
        written = [line for line in proxy.stderr if line.strip()]
        assert all(line.startswith("{") for line in written), written
        events = [json.loads(line) for line in written]
        assert all(list(e)[:3] == ["ts", "level", "event"] for e in events)
        assert events[0]["event"] == "start" and events[-1]["event"] == "stop"


def test_a_proxy_that_cannot_start_says_why_in_json(tmp_path: Path) -> None:
    keyset = tmp_path / "keyset.json"
    ms.Keyset.generate(("A256GCM",)).save(keyset)
    taken = socket.create_server(("127.0.0.1", 0))
    port = taken.getsockname()[1]
    common = [sys.executable, "-m", "mrtr_state", "proxy", "--keyset", str(keyset), "--json-log"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    try:
        busy = subprocess.run(
            [
                *common,
                "--upstream",
                "http://127.0.0.1:9/mcp",
                "--listen",
                f"127.0.0.1:{port}",
                "--allow-anonymous",
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
    finally:
        taken.close()
    assert busy.returncode == 7
    line = json.loads(busy.stderr.strip().splitlines()[-1])
    assert (
        line["level"] == "error" and line["event"] == "error" and "cannot listen" in line["reason"]
    )
    missing = subprocess.run(
        [
            *common,
            "--keyset",
            str(tmp_path / "none.json"),
            "--upstream",
            "http://127.0.0.1:9/mcp",
            "--allow-anonymous",
            "--listen",
            f"127.0.0.1:{free_port()}",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert missing.returncode == 6
    assert json.loads(missing.stderr.strip().splitlines()[-1])["exit"] == 6
    query = subprocess.run(
        [*common, "--upstream", "http://127.0.0.1:9/mcp?x=1", "--allow-anonymous"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert (
        query.returncode == 2
        and "query" in json.loads(query.stderr.strip().splitlines()[-1])["reason"]
    )


# --- what an attacker's review found (each was reproduced, then fixed) -----------------------


def test_a_state_is_bound_to_the_query_too(tmp_path: Path) -> None:
    """A state sealed on /mcp is refused on /mcp?tenant=b: an upstream may route on the query."""
    import httpx

    keyset = tmp_path / "keyset.json"
    ms.Keyset.generate(("A256GCM",)).save(keyset)
    upstream = NaiveServer()
    with serving(upstream) as upstream_url:
        proxy = ProxyProcess(keyset, upstream_url)
        try:
            base = f"http://127.0.0.1:{proxy.port}/mcp"
            user = {"X-Forwarded-User": "alice", "Accept": "application/json, text/event-stream"}
            first = call("deploy", arguments={"env": "prod"})
            answer = httpx.post(base, json=first, headers=user).json()
            retry = call("deploy", id_=2, arguments={"env": "prod"})
            retry["params"]["requestState"] = answer["result"]["requestState"]
            other = httpx.post(base + "?tenant=b", json=retry, headers=user).json()
            assert other["error"]["code"] == -32602 and upstream.retries() == []
            assert httpx.post(base, json=retry, headers=user).json()["result"]
        finally:
            proxy.stop()


@pytest.mark.parametrize(
    ("fields", "kind"),
    [
        ((b"Mcp-Session-Id: a", b"Mcp-Session-Id: b"), "header_twice"),
        (
            (b"MCP-Protocol-Version: 2026-07-28", b"mcp-protocol-version: 2025-06-18"),
            "header_twice",
        ),
        ((b"Authorization: Bearer a", b"Authorization: Bearer b"), "header_twice"),
        ((b"X_Forwarded_User: bob",), "principal_spelled_twice"),
        ((b"Connection: x-forwarded-user",), "principal_hop_by_hop"),
    ],
    ids=["session-twice", "version-twice", "credential-twice", "underscore", "hop-by-hop"],
)
def test_headers_the_upstream_could_read_otherwise_are_refused(
    rig: tuple[ProxyProcess, RecordingUpstream], fields: tuple[bytes, ...], kind: str
) -> None:
    proxy, upstream = rig
    before = len(upstream.requests)
    stream = head(b"Host: p", SENDER.strip(), *fields, b"Content-Length: %d" % len(NOTE)) + NOTE
    assert (
        exchange(
            proxy.port,
            stream.replace(b"Host: p", b"Host: p\r\nConnection: close", 1)
            if b"Connection:" not in stream
            else stream,
            cut=False,
        )[0]
        == 400
    )
    assert settle(upstream, before) == 0
    assert proxy.logged("kind", kind)["status"] == 400


def raw_upstream(answer: bytes) -> tuple[socket.socket, str]:
    """An upstream that answers every connection with ``answer`` (raw bytes), then closes."""
    import threading

    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                connection, _ = server.accept()
            except OSError:
                return
            with connection:
                connection.settimeout(5)
                received = b""
                while b"\r\n\r\n" not in received:
                    chunk = connection.recv(65536)
                    if not chunk:
                        break
                    received += chunk
                head, _, body = received.partition(b"\r\n\r\n")
                if b"content-length:" not in head.lower():
                    continue  # the proxy's start-up probe: a connection and no request
                length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                while len(body) < length:
                    body += connection.recv(65536)
                connection.sendall(answer)

    threading.Thread(target=serve, daemon=True).start()
    return server, f"http://127.0.0.1:{server.getsockname()[1]}"


PLAIN_ANSWER = (
    b'{"jsonrpc":"2.0","id":1,"result":{"resultType":"input_required","requestState":"PLAIN"}}'
)


@pytest.mark.parametrize(
    "answer",
    [
        b"HTTP/1.1 999 X\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
        % (len(PLAIN_ANSWER), PLAIN_ANSWER),
        b"HTTP/1.1 600 X\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
        % (len(PLAIN_ANSWER), PLAIN_ANSWER),
        # a text/plain answer, then a second response head in the same write: the first
        # response's own type decides (a 502), not the second's
        b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s"
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 0\r\n\r\n"
        % (len(PLAIN_ANSWER), PLAIN_ANSWER),
    ],
    ids=["status-999", "status-600", "two-responses"],
)
@pytest.mark.parametrize("parser", ["httptools", "h11"])
def test_an_upstream_answer_outside_http_is_a_502(
    tmp_path: Path, answer: bytes, parser: str
) -> None:
    keyset = tmp_path / "keyset.json"
    ms.Keyset.generate(("A256GCM",)).save(keyset)
    server, url = raw_upstream(answer)
    proxy = ProxyProcess(keyset, url, parser=parser)
    try:
        body = json.dumps(call("deploy")).encode()
        raw = head(
            b"Host: p", SENDER.strip(), b"Connection: close", b"Content-Length: %d" % len(body)
        )
        reply = Reply(send_raw_close(proxy.port, raw.replace(b"Connection: close\r\n", b"") + body))
        assert reply.status == 502 and b"PLAIN" not in reply.raw
    finally:
        proxy.stop()
        server.close()
    assert not any("Traceback" in line or "KeyError" in line for line in proxy.stderr)


def test_a_connection_that_sends_no_request_is_closed(tmp_path: Path) -> None:
    """An idle connection, a head sent a byte at a time, and empty lines sent now and then
    (which held uvicorn's keep-alive timer off): none holds a connection for ever."""
    keyset = tmp_path / "keyset.json"
    ms.Keyset.generate(("A256GCM",)).save(keyset)
    with serving(RecordingUpstream(), http="h11") as upstream_url:
        proxy = ProxyProcess(keyset, upstream_url, "--head-timeout", "1s")
        try:
            idle = socket.create_connection(("127.0.0.1", proxy.port), timeout=10)
            slow = socket.create_connection(("127.0.0.1", proxy.port), timeout=10)
            slow.sendall(b"POST /mcp HTTP/1.1\r\nHost:")
            started = time.monotonic()
            for sock in (idle, slow):
                received = b""
                while chunk := sock.recv(4096):
                    received += chunk
                assert received.startswith(b"HTTP/1.1 408 ")
                sock.close()
            assert time.monotonic() - started < 8
            # after an answer, empty lines do not keep the connection open (keep-alive: 5 s)
            kept = socket.create_connection(("127.0.0.1", proxy.port), timeout=15)
            kept.sendall(head(b"Host: p", SENDER.strip(), b"Content-Length: %d" % len(NOTE)) + NOTE)
            assert kept.recv(4096).startswith(b"HTTP/1.1 202")
            kept.settimeout(0.5)
            closed_at = None
            deadline = time.monotonic() + 12
            while closed_at is None and time.monotonic() < deadline:
                try:
                    kept.sendall(b"\r\n")
                    if kept.recv(4096) == b"":
                        closed_at = time.monotonic()
                except TimeoutError:
                    pass
                except OSError:
                    closed_at = time.monotonic()
            kept.close()
            assert closed_at is not None, "empty lines held the connection open"
        finally:
            proxy.stop()
    refused = [e for e in proxy.log if e.get("kind") == "head_timeout"]
    assert len(refused) == 2 and refused[0]["status"] == 408
