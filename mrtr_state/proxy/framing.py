"""Strict HTTP/1.1 request framing (RFC 9112), read before uvicorn's parser sees a byte.

Why a reader of our own in front of a trusted parser: framing is where two readers of one byte
stream disagree, and a disagreement is a request one of them never inspected. llhttp and h11
each take some malformed requests their own way (h11 frames ``Content-Length`` with
``Transfer-Encoding`` as chunked and keeps the connection; uvicorn's httptools protocol adds
chunked trailer fields to the request's headers), and a front proxy may read them a third way.
So every byte a client sends passes :class:`RequestFramer` first. It hands the parser only
requests whose framing has exactly one reading under RFC 9112, and refuses the first one that
has not (:class:`FramingRefusal`): nothing of it, and nothing after it on that connection,
reaches the parser, the app or the upstream.

Refused, with the reason named:

* a line not ended by CRLF (a bare LF or CR), a line folded onto the one before (obs-fold),
  a field name that is not a token or is followed by white space, a control character in a
  field value, a request line that is not ``METHOD SP target SP HTTP/1.x``;
* ``Content-Length`` with ``Transfer-Encoding``; ``Content-Length`` repeated, a list, signed or
  not digits; ``Transfer-Encoding`` repeated or anything but ``chunked``, or sent in HTTP/1.0;
* a chunk line that is not hex digits with well-formed extensions, chunk data not followed by
  CRLF, and any trailer field (the proxy takes nothing from the end of a body);
* an HTTP/1.1 request without exactly one ``Host``; ``Proxy-Connection`` (llhttp reads it as
  ``Connection``, h11 does not); more than :data:`MAX_CHUNKS` chunks in one body;
* a method other than ``POST``, ``GET`` and ``DELETE`` (405; ``CONNECT``'s bytes are a tunnel);
* a head over :data:`MAX_HEAD` bytes or :data:`MAX_FIELDS` fields (431), a body over the
  proxy's limit (413), told by ``Content-Length`` or by the chunks' sizes before any is read.

What it hands on: each head as received once every line of it has been checked, or written
canonically (``name: value``) where a framing field has white space llhttp refuses or there is
an ``Upgrade`` field, which is left out (the proxy switches no protocol, RFC 9110 section 7.8
lets it ignore the field, and llhttp stops parsing at one); bodies as received; chunk lines
written back as bare hex sizes (no extension reaches the parser), and the chunked body's end
held back until the (empty) trailer section has been seen. After a request that closes the
connection, nothing more is read. The checks run on the whole head at C speed (counts, one
translate, one regular expression for every field line) and read only the fields that frame
the request one by one.
Nothing here does I/O: :mod:`mrtr_state.proxy.server` feeds it from the socket.
"""

from __future__ import annotations

import re

__all__ = ["MAX_FIELDS", "MAX_HEAD", "FramingRefusal", "RequestFramer"]

#: The largest request head (request line and header section) read, in bytes.
MAX_HEAD = 32 << 10
#: The most header fields a request may carry.
MAX_FIELDS = 128
#: The longest chunk line (size and extensions) read.
MAX_CHUNK_LINE = 1024
#: The most chunks one body may come in: each costs the framer and the parser work of its own
#: (a body sent a byte per chunk would buy seconds of CPU with a few megabytes).
MAX_CHUNKS = 4096
#: The methods the proxy serves (RFC 9110: case-sensitive); llhttp refuses some other tokens
#: (``post``) itself and h11 none, so the framer answers every other one, the same way.
METHODS = (b"POST", b"GET", b"DELETE")

_TCHAR = rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]"
_REQUEST_LINE = re.compile(rb"(" + _TCHAR + rb"+) ([\x21-\x7e]+) HTTP/1\.([01])")
_TOKEN = re.compile(_TCHAR + rb"+")
# the bytes a head may hold: visible ASCII, obs-text, SP, HTAB and the CRLFs (counted apart);
# deleting them leaves the control characters, which no head may hold (RFC 9110 section 5.5)
_HEAD_BYTES = bytes(range(0x20, 0x7F)) + bytes(range(0x80, 0x100)) + b"\t\r\n"
# every line of a header section, after its CRLF: field-name ":" and a value
_FIELD_LINES = re.compile(rb"(?:\r\n" + _TCHAR + rb"++:[^\r\n]*+)*+\r\n")
# the fields that frame a request or the connection, in the lowered header section
_FRAMING_FIELD = re.compile(
    rb"\r\n(content-length|transfer-encoding|host|connection|upgrade|proxy-connection)"
    rb":([^\r\n]*+)"
)
# RFC 9112 section 7.1.1: chunk-ext = *( BWS ";" BWS name [ BWS "=" BWS token/quoted-string ] )
_QUOTED = rb'"(?:[\t \x21\x23-\x5b\x5d-\x7e\x80-\xff]|\\[\t \x21-\x7e\x80-\xff])*+"'
_CHUNK_LINE = re.compile(
    rb"([0-9A-Fa-f]{1,16})(?:[ \t]*+;[ \t]*+"
    + _TCHAR
    + rb"++(?:[ \t]*+=[ \t]*+(?:"
    + _TCHAR
    + rb"++|"
    + _QUOTED
    + rb"))?+)*+"
)
# uri-host [ ":" port ], loosely: the characters a reg-name, an IPv4 or an IP literal may hold
_HOST_BYTES = b"abcdefghijklmnopqrstuvwxyz0123456789-._~!$&'()*+,;=%:[]"

# a LF without its CR, or a CR followed by anything but LF (one at the very end may yet be paired)
_BARE = re.compile(rb"(?<!\r)\n|\r(?=[^\n])")
_BARE_LINE_END = "a line of the request does not end with CRLF"

_HEAD, _BODY, _CHUNK_SIZE, _CHUNK_DATA, _CHUNK_END, _TRAILER, _CLOSED, _REFUSED = range(8)


class FramingRefusal(Exception):
    """A request whose framing the proxy will not read: answered ``status``, then closed."""

    def __init__(self, status: int, kind: str, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        #: a short, bounded name for metrics and logs
        self.kind = kind

    @property
    def reason(self) -> str:
        return str(self)


def _bad(reason: str, kind: str = "bad_framing") -> FramingRefusal:
    return FramingRefusal(400, kind, reason)


class RequestFramer:
    """One connection's request stream: :meth:`feed` it what the socket delivers.

    ``max_body`` is the largest body accepted (the proxy's ``--max-body``), ``methods`` those
    served (405 for any other). Counters say how far
    the stream has gone, for a protocol that must answer a refusal only after the requests
    before it: :attr:`begun` heads handed on, :attr:`complete` requests handed on whole.
    """

    __slots__ = (
        "_buffer",
        "_chunked_total",
        "_chunks",
        "_closing",
        "_remaining",
        "_scanned",
        "_state",
        "begun",
        "complete",
        "max_body",
        "methods",
        "refusal",
    )

    def __init__(self, max_body: int, methods: tuple[bytes, ...] = METHODS) -> None:
        self.max_body = max_body
        #: the methods served (the admin listener's are GET and HEAD)
        self.methods = methods
        self.begun = 0
        self.complete = 0
        #: why the stream was refused, once it was: nothing more is read
        self.refusal: FramingRefusal | None = None
        self._state = _HEAD
        self._buffer = bytearray()
        self._remaining = 0
        self._chunked_total = 0
        self._chunks = 0
        self._closing = False
        self._scanned = 0

    @property
    def closed(self) -> bool:
        """A request that ends the connection was handed on, or the stream was refused: the
        rest is not read."""
        return self._state >= _CLOSED

    @property
    def partial(self) -> bool:
        """A request has been handed on in part (its head, some of its body)."""
        return self.begun > self.complete

    def feed(self, data: bytes) -> bytes:
        """The bytes to hand the parser for ``data``: every whole request (and the part of a
        body) it completes, possibly none. At the first request that cannot be handed on,
        :attr:`refusal` says why; what came before it is still returned, nothing after it."""
        if self._state >= _CLOSED:
            return b""
        self._buffer += data
        out = bytearray()
        try:
            self._consume(out)
        except FramingRefusal as refusal:
            self.refuse(refusal)
        return bytes(out)

    def refuse(self, refusal: FramingRefusal) -> None:
        """Refuse the stream from here on (a refusal found by the caller: a head too slow)."""
        self.refusal = refusal
        self._state = _REFUSED
        self._buffer.clear()

    def _consume(self, out: bytearray) -> None:
        buffer = self._buffer
        while buffer:
            state = self._state
            if state in (_BODY, _CHUNK_DATA):
                take = min(self._remaining, len(buffer))
                out += buffer[:take]
                del buffer[:take]
                self._remaining -= take
                if self._remaining:
                    break
                if state == _BODY:
                    self._finish()
                else:
                    self._state = _CHUNK_END
            elif state == _HEAD:
                while buffer[:2] == b"\r\n":  # RFC 9112 s2.2: empty lines before a request
                    del buffer[:2]
                    self._scanned = max(0, self._scanned - 2)
                # from where the last look stopped: a head sent a byte at a time costs linear time
                stop = buffer.find(b"\r\n\r\n", max(0, self._scanned - 3), MAX_HEAD + 4)
                if stop < 0 or stop + 4 > MAX_HEAD:
                    if stop >= 0 or len(buffer) > MAX_HEAD:
                        raise FramingRefusal(431, "head_too_large", "the request head is too large")
                    if _BARE.search(buffer, max(0, self._scanned - 1)) is not None:
                        raise _bad(_BARE_LINE_END, "bare_line_end")  # at once: no end may come
                    self._scanned = len(buffer)
                    break
                self._scanned = 0
                head = bytes(buffer[:stop])
                del buffer[: stop + 4]
                out += self._head(head)
            elif state == _CHUNK_END:
                if len(buffer) < 2:
                    break
                if buffer[:2] != b"\r\n":
                    raise _bad("chunk data is not followed by CRLF", "bad_chunk")
                del buffer[:2]
                out += b"\r\n"
                self._state = _CHUNK_SIZE
            elif state in (_CHUNK_SIZE, _TRAILER):
                stop = buffer.find(b"\r\n", 0, MAX_CHUNK_LINE + 2)
                if stop < 0:
                    if len(buffer) > MAX_CHUNK_LINE:
                        raise _bad("a chunk line is too long", "bad_chunk")
                    if b"\n" in buffer or b"\r" in buffer[:-1]:
                        raise _bad(_BARE_LINE_END, "bare_line_end")
                    break
                line = bytes(buffer[:stop])
                del buffer[: stop + 2]
                if b"\n" in line or b"\r" in line:
                    raise _bad(_BARE_LINE_END, "bare_line_end")
                if state == _CHUNK_SIZE:
                    out += self._chunk_line(line)
                elif line:
                    raise _bad("a chunked body ends with trailer fields", "trailer")
                else:
                    out += b"0\r\n\r\n"
                    self._finish()
            else:  # closed: what follows is never read
                buffer.clear()

    def _finish(self) -> None:
        self.complete += 1
        self._state = _CLOSED if self._closing else _HEAD

    def _head(self, head: bytes) -> bytes:
        """Check one request head; return it as the parser gets it, and set up its body.

        Whole-head checks first, each one scan at C speed (line ends, folding, control
        characters, every field line's shape); then only the fields that frame the request are
        looked at one by one. A head without ``Upgrade`` goes on as it came, checked.
        """
        pairs = head.count(b"\r\n")
        if head.count(b"\n") != pairs or head.count(b"\r") != pairs:
            raise _bad(_BARE_LINE_END, "bare_line_end")
        end = head.find(b"\r\n")
        request_line = _REQUEST_LINE.fullmatch(head if end < 0 else head[:end])
        if request_line is None:
            raise _bad("the request line is not METHOD SP target SP HTTP/1.0 or HTTP/1.1")
        method, minor = request_line.group(1), request_line.group(3)
        if method not in self.methods:  # CONNECT among them: its bytes are a tunnel
            shown = method[:16].decode("ascii")
            raise FramingRefusal(405, "method_not_allowed", f"method not allowed ({shown!r})")
        if pairs > MAX_FIELDS:
            raise FramingRefusal(431, "head_too_large", "the request has too many header fields")
        # the header section, each line after its CRLF: "\r\nname:value" ... "\r\n"
        block = b"\r\n" if end < 0 else head[end:] + b"\r\n"
        if head.translate(None, _HEAD_BYTES):
            raise _bad("a header field value holds a control character", "bad_header")
        if _FIELD_LINES.fullmatch(block) is None:
            raise _field_problem(block)
        lengths: list[bytes] = []
        codings: list[bytes] = []
        hosts: list[bytes] = []
        options: list[bytes] = []
        rewrite = False
        # names are case-insensitive, and so is every value read here: read the lowered text
        for name, raw in _FRAMING_FIELD.findall(block.lower()):
            value = raw.strip(b" \t")
            # llhttp refuses some white space RFC 9110 allows (``chunked \t``): a framing
            # field with more than one SP before its value is handed on written canonically
            rewrite = rewrite or (raw != value and raw != b" " + value)
            if name == b"content-length":
                lengths.append(value)
            elif name == b"transfer-encoding":
                codings.append(value)
            elif name == b"host":
                hosts.append(value)
            elif name == b"connection":
                options += (option.strip() for option in value.split(b","))
            elif name == b"proxy-connection":  # llhttp reads it as Connection; h11 ignores it
                raise _bad("Proxy-Connection is not HTTP/1.1; send Connection", "proxy_connection")
            else:  # Upgrade: never handed on
                rewrite = True
        if lengths and codings:
            raise _bad("the request has both Content-Length and Transfer-Encoding", "cl_and_te")
        if len(lengths) > 1:
            raise _bad("Content-Length appears more than once", "repeated_length")
        if lengths and not (lengths[0].isdigit() and len(lengths[0]) <= 15):
            raise _bad("Content-Length is not a plain decimal number", "bad_length")
        if len(codings) > 1:
            raise _bad("Transfer-Encoding appears more than once", "bad_coding")
        if codings and codings[0] != b"chunked":
            raise _bad("Transfer-Encoding must be exactly chunked", "bad_coding")
        if codings and minor == b"0":
            raise _bad("an HTTP/1.0 request cannot be chunked", "bad_coding")
        if len(hosts) > 1 or (minor == b"1" and not hosts):
            raise _bad("an HTTP/1.1 request needs exactly one Host field", "bad_host")
        if hosts and hosts[0].translate(None, _HOST_BYTES):
            raise _bad("the Host field is not a host and port", "bad_host")
        size = int(lengths[0]) if lengths else 0
        if size > self.max_body:
            raise FramingRefusal(413, "body_too_large", "request body too large")
        # uvicorn keeps no HTTP/1.0 connection alive, whatever it asks for
        self._closing = b"close" in options or minor == b"0"
        self.begun += 1
        if codings:
            self._chunked_total = self._chunks = 0
            self._state = _CHUNK_SIZE
        elif size:
            self._remaining = size
            self._state = _BODY
        else:
            self._finish()
        if rewrite:
            return _canonical(head)
        return head + b"\r\n\r\n"

    def _chunk_line(self, line: bytes) -> bytes:
        match = _CHUNK_LINE.fullmatch(line)
        if match is None:
            raise _bad("a chunk line is not a hex size with well-formed extensions", "bad_chunk")
        size = int(match.group(1), 16)
        if size == 0:
            self._state = _TRAILER  # the end is handed on once the trailer section is seen
            return b""
        self._chunked_total += size
        self._chunks += 1
        if self._chunked_total > self.max_body:
            raise FramingRefusal(413, "body_too_large", "request body too large")
        if self._chunks > MAX_CHUNKS:
            raise _bad(f"a chunked body in more than {MAX_CHUNKS} chunks", "too_many_chunks")
        self._remaining = size
        self._state = _CHUNK_DATA
        return b"%x\r\n" % size


def _canonical(head: bytes) -> bytes:
    """A checked head written as ``name: value`` lines, without OWS or ``Upgrade``."""
    lines = head.split(b"\r\n")
    out = [lines[0]]
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        if name.lower() != b"upgrade":
            out.append(name + b": " + value.strip(b" \t"))
    return b"\r\n".join(out) + b"\r\n\r\n"


def _field_problem(block: bytes) -> FramingRefusal:
    """Why a header section whose lines did not all parse is refused (one line did not)."""
    line = next(
        line
        for line in block.split(b"\r\n")[1:-1]
        if b":" not in line or _TOKEN.fullmatch(line.partition(b":")[0]) is None
    )
    name, colon, _ = line.partition(b":")
    if line[:1] in (b" ", b"\t"):
        return _bad("a header field is folded onto the line before (obs-fold)", "obs_fold")
    if not colon:
        return _bad("a header line has no colon", "bad_header")
    if name[-1:] in (b" ", b"\t"):
        return _bad("a header field name is followed by white space", "bad_header")
    return _bad("a header field name is not a token", "bad_header")
