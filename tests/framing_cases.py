"""Random raw HTTP/1.1 request streams with the verdict a strict RFC 9112 reading gives each,
for the proxy's framing differential test (tests/test_proxy_framing.py) and ``make fuzz``.

A verdict comes from how a request was built, never from the proxy's own framer: each request is
put together from parts (header fields in any order and letter case, a framing, body chunks with
or without extensions, white space a strict reading allows) and, half of the time, one defect
chosen knowing that RFC 9112 refuses it (two framings, a trailer naming the principal, obs-fold,
a bare LF, ...). A connection carries one to three requests, pipelined, sent in one packet or
cut at random points into several reads.

The invariant checked for every connection, under each HTTP parser the proxy runs on: the
upstream receives exactly the requests before the first defective one (and none after one that
closes the connection), each with the header section the client sent less its hop-by-hop fields,
and the client gets their answers, then the refusal, then the end of the connection.
"""

from __future__ import annotations

import json
import random
import socket
import time
from dataclasses import dataclass, field

#: Header fields the proxy never forwards (hop-by-hop, or framing it sets itself).
HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
        b"host",
        b"content-length",
        b"accept-encoding",
        b"expect",
        b"http2-settings",
    }
)

#: Defects a strict reading refuses, each with the status the proxy answers.
DEFECTS = {
    "cl_and_te": 400,
    "cl_and_te_folded": 400,
    "te_not_chunked": 400,
    "te_twice": 400,
    "cl_twice": 400,
    "cl_list": 400,
    "cl_not_digits": 400,
    "obs_fold": 400,
    "bare_lf": 400,
    "bare_cr": 400,
    "space_before_colon": 400,
    "control_in_value": 400,
    "trailer": 400,
    "bad_chunk_size": 400,
    "chunk_without_crlf": 400,
    "no_host": 400,
    "two_hosts": 400,
    "bad_request_line": 400,
    "http10_chunked": 400,
    "proxy_connection": 400,
    "method_not_served": 405,
}


@dataclass
class Request:
    """One request of a case: its bytes, and what a strict reading makes of it."""

    raw: bytes
    marker: str
    defect: str | None
    closes: bool
    #: the status the upstream answers it with: 200 for a JSON-RPC request, 202 for a notification
    status: int = 202
    #: the header fields as the client sent them, (name, value), value without OWS
    fields: list[tuple[bytes, bytes]] = field(default_factory=list)


@dataclass
class Case:
    """One connection: its requests and how the stream is cut into reads."""

    number: int
    requests: list[Request]
    cuts: list[int]

    @property
    def stream(self) -> bytes:
        return b"".join(request.raw for request in self.requests)

    def expected(self) -> tuple[list[Request], int | None]:
        """The requests the upstream must get, and the status of the refusal (None: none)."""
        forwarded: list[Request] = []
        for request in self.requests:
            if request.defect is not None:
                return forwarded, DEFECTS[request.defect]
            forwarded.append(request)
            if request.closes:
                break
        return forwarded, None


def _case_of(name: bytes, rng: random.Random) -> bytes:
    """A header name in a random mix of letter case (names are case-insensitive)."""
    choice = rng.random()
    if choice < 0.5:
        return name
    if choice < 0.7:
        return name.lower()
    if choice < 0.8:
        return name.upper()
    return bytes(c ^ 0x20 if chr(c).isalpha() and rng.random() < 0.5 else c for c in name)


def _ows(rng: random.Random) -> bytes:
    return rng.choice([b"", b"", b"", b" ", b"\t", b"  ", b" \t"])


def _chunks(body: bytes, rng: random.Random) -> list[bytes]:
    pieces: list[bytes] = []
    position = 0
    while position < len(body):
        size = rng.randint(1, max(1, len(body) - position))
        pieces.append(body[position : position + size])
        position += size
    return pieces


def _size_line(size: int, rng: random.Random) -> bytes:
    digits = b"%x" % size
    if rng.random() < 0.2:
        digits = digits.upper()
    if rng.random() < 0.15:
        digits = b"00" + digits
    extension = rng.choice(
        [b"", b"", b"", b";ext", b";a=b", b';name="quoted value"', b" ; a = b", b";x;y=1"]
    )
    return digits + extension + b"\r\n"


def build_request(rng: random.Random, marker: str, last: bool) -> Request:
    """One request, with a defect half of the time."""
    defect = rng.choice(list(DEFECTS)) if rng.random() < 0.5 else None
    version = b"1.0" if defect is None and rng.random() < 0.08 else b"1.1"
    if defect == "http10_chunked":
        version = b"1.0"
    chunked = version == b"1.1" and rng.random() < 0.5
    if defect in (
        "cl_and_te",
        "cl_and_te_folded",
        "te_not_chunked",
        "te_twice",
        "trailer",
        "bad_chunk_size",
        "chunk_without_crlf",
        "http10_chunked",
    ):
        chunked = True
    if defect in ("cl_twice", "cl_list", "cl_not_digits"):
        chunked = False
    message: dict[str, object] = {"jsonrpc": "2.0", "method": "notifications/m"}
    if rng.random() < 0.5:
        message = {"jsonrpc": "2.0", "id": marker, "method": "ping"}
    message["params"] = {"marker": marker}
    body = json.dumps(message).encode()
    closes = last or version == b"1.0" or rng.random() < 0.1
    fields: list[tuple[bytes, bytes]] = [
        (b"Host", b"proxy:8080"),
        (b"X-Forwarded-User", f"user-{marker}".encode()),
        (b"Content-Type", b"application/json"),
        (b"Accept", b"application/json, text/event-stream"),
    ]
    if rng.random() < 0.5:
        fields.append((b"X-Trace", f"t-{rng.randrange(10**6)}".encode()))
    if rng.random() < 0.3:
        fields.append((b"Mcp-Session-Id", f"s-{marker}".encode()))
    if defect == "proxy_connection":
        fields.append((b"Proxy-Connection", rng.choice([b"close", b"keep-alive"])))
    if closes and version == b"1.1":
        fields.append((b"Connection", b"close"))
    elif rng.random() < 0.2:
        fields.append((b"Connection", b"keep-alive"))
    rng.shuffle(fields)
    if defect == "no_host":
        fields = [f for f in fields if f[0] != b"Host"]
    if defect == "two_hosts":
        fields.append((b"Host", b"other"))
    framing: list[tuple[bytes, bytes]] = []
    if chunked:
        coding = rng.choice([b"chunked", b"chunked", b"Chunked", b"CHUNKED"])
        if defect == "te_not_chunked":
            coding = rng.choice(
                [b"chunked, identity", b"identity", b"gzip, chunked", b"xchunked", b'"chunked"']
            )
        framing.append((b"Transfer-Encoding", coding))
        if defect == "te_twice":
            framing.append((b"Transfer-Encoding", b"chunked"))
        if defect in ("cl_and_te", "cl_and_te_folded"):
            framing.append((b"Content-Length", b"%d" % len(body)))
    else:
        length = b"%d" % len(body)
        framing.append((b"Content-Length", length))
        if defect == "cl_twice":
            framing.append((b"Content-Length", length))
        elif defect == "cl_list":
            framing[-1] = (b"Content-Length", length + b", " + length)
        elif defect == "cl_not_digits":
            framing[-1] = (b"Content-Length", rng.choice([b"+", b"0x", b"-"]) + length)
    all_fields = fields + framing
    rng.shuffle(all_fields)
    lines: list[bytes] = []
    for name, value in all_fields:
        shown = _case_of(name, rng)
        lines.append(shown + b":" + _ows(rng) + value + _ows(rng))
    if defect in ("obs_fold", "cl_and_te_folded"):
        # fold the principal (or, with two framings, the coding) onto a continuation line
        target = b"transfer-encoding" if defect == "cl_and_te_folded" else b"x-forwarded-user"
        for index, line in enumerate(lines):
            if line.lower().startswith(target):
                name, _, value = line.partition(b":")
                lines[index] = name + b":\r\n" + rng.choice([b" ", b"\t"]) + value.strip()
                break
    if defect == "space_before_colon":
        index = rng.randrange(len(lines))
        name, _, value = lines[index].partition(b":")
        lines[index] = name + rng.choice([b" ", b"\t"]) + b":" + value
    if defect == "control_in_value":
        index = rng.randrange(len(lines))
        lines[index] = lines[index] + rng.choice([b"\x01", b"\x7f", b"\x00", b"\x0b"]) + b"x"
    request_line = b"POST /mcp HTTP/" + version
    if defect == "method_not_served":
        request_line = (
            rng.choice([b"post", b"Post", b"PUT", b"PATCH", b"OPTIONS"]) + request_line[4:]
        )
    if defect == "bad_request_line":
        request_line = rng.choice(
            [b"POST  /mcp HTTP/1.1", b"POST /mcp HTTP/1.2", b"POST /mcp  HTTP/1.1", b"POST /mcp"]
        )
    ends = [b"\r\n"] * (len(lines) + 1)
    if defect in ("bare_lf", "bare_cr"):
        ends[rng.randrange(len(ends))] = b"\n" if defect == "bare_lf" else b"\r"
    head = request_line + ends[0]
    for line, end in zip(lines, ends[1:], strict=True):
        head += line + end
    head = (b"\r\n" if rng.random() < 0.05 else b"") + head + b"\r\n"
    if chunked:
        content = b""
        for piece in _chunks(body, rng):
            line = _size_line(len(piece), rng)
            if defect == "bad_chunk_size" and not content:
                line = rng.choice([b"zz\r\n", b"-1\r\n", b"0x10\r\n", b"a \r\n", b"\r\n"])
            after = b"XX" if defect == "chunk_without_crlf" and not content else b"\r\n"
            content += line + piece + after
        trailer = b""
        if defect == "trailer":
            trailer = rng.choice(
                [b"X-Forwarded-User: victim\r\n", b"Mcp-Session-Id: stolen\r\n", b"X-A: b\r\n"]
            )
        content += b"0" + rng.choice([b"", b";end"]) + b"\r\n" + trailer + b"\r\n"
    else:
        content = body
    sent = [(name, value.strip(b" \t")) for name, value in all_fields]
    status = 200 if "id" in message else 202
    return Request(head + content, marker, defect, closes, status, sent)


def build_case(rng: random.Random, number: int) -> Case:
    count = rng.choice([1, 1, 2, 3])
    requests = [
        build_request(rng, f"c{number}r{index}", index == count - 1) for index in range(count)
    ]
    case = Case(number, requests, [])
    size = len(case.stream)
    if rng.random() < 0.5 and size > 1:
        case.cuts = sorted(rng.sample(range(1, size), min(size - 1, rng.randint(1, 6))))
    return case


def forwarded_headers(fields: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The header fields the upstream must see for a request the client sent with ``fields``."""
    lowered = [(name.lower(), value) for name, value in fields]
    listed = {
        option.strip().lower()
        for name, value in lowered
        if name == b"connection"
        for option in value.split(b",")
    }
    return [(n, v) for n, v in lowered if n not in HOP_BY_HOP and n not in listed]


def send_case(port: int, case: Case, timeout: float = 10.0) -> bytes:
    """Send the case's stream, cut as it says, and read until the proxy closes."""
    stream = case.stream
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        start = 0
        try:
            for cut in [*case.cuts, len(stream)]:
                sock.sendall(stream[start:cut])
                start = cut
                if cut < len(stream):
                    time.sleep(0.002)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the proxy closed after a refusal: what it answered is still to be read
        received = b""
        while True:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            received += chunk
    return received


def statuses(received: bytes) -> list[int]:
    """The statuses of the responses in ``received`` (each framed by Content-Length)."""
    found: list[int] = []
    rest = received
    while rest:
        head, separator, rest = rest.partition(b"\r\n\r\n")
        if not separator:
            raise AssertionError(f"a truncated response: {head[:200]!r}")
        lines = head.split(b"\r\n")
        found.append(int(lines[0].split(b" ")[1]))
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value.strip())
        rest = rest[length:]
    return found
