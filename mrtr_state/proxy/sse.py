"""Server-Sent Events, framed as the WHATWG HTML standard frames them, rewritten as they arrive.

A line ends at CRLF, LF or a lone CR; an event ends at a blank line, or at the end of the
stream. Each byte is looked at once (a CR that ends one chunk is remembered, so the LF that may
start the next is taken as its pair rather than as a blank line), so a long event costs time in
proportion to its length, however it is cut into chunks.

Every event with ``data`` must hold strict JSON (a JSON-RPC message or batch): it is handed to
the rewrite callback, and goes out byte for byte when the callback returns it unchanged, rebuilt
(its other fields in order, one ``data`` line) when it does not, and not at all when it returns
:data:`DROP`. An event the proxy cannot inspect (a field name the standard does not define, a
NUL, bytes that are not UTF-8, data that is not strict JSON, or an event over ``max_event``
bytes) is dropped whole and reported to ``dropped``: a client never sees what the proxy did not
read.

The framing is written once; the callback is called (:meth:`EventStream.feed`) or awaited
(:meth:`EventStream.afeed`, the proxy's relay, whose sealing may wait on a store).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any

from .._encoding import EncodingError, encode_wire, json_loads
from .jsonrpc import MAX_BODY_DEPTH

__all__ = ["DROP", "MAX_EVENT", "EventStream"]

#: The largest event the proxy reads (its bytes, fields and line ends included).
MAX_EVENT = 4 << 20

_LINE_END = re.compile(rb"\r\n?|\n")
_BOM = b"\xef\xbb\xbf"
#: What a rewrite callback returns for an event that must not reach the client.
DROP: Any = object()


class _Event:
    """An event holding a message, waiting for the callback's verdict on it: sent as received
    when the message comes back unchanged (and holds no line separator some client splits at),
    rebuilt around the rewritten message otherwise, or not at all (:data:`DROP`)."""

    __slots__ = ("_lines", "as_received", "clean", "message", "raw")

    def __init__(self, message: Any, raw: bytes, lines: list[bytes], data: list[bytes]) -> None:
        self.message = message
        self.raw = raw
        self._lines = lines
        self.clean = _BREAKS.search(b"".join(data)) is None
        #: how it went out: as received (True) or rebuilt or dropped (False); None: not yet
        self.as_received: bool | None = None

    def render(self, rewritten: Any) -> bytes:
        if rewritten is DROP:
            self.as_received = False
            return b""
        if rewritten is self.message and self.clean:
            self.as_received = True
            return self.raw
        # rewritten, or holding in a string a character some clients split lines at (U+2028):
        # written back as ASCII JSON, which holds none
        self.as_received = False
        kept = [line for line in self._lines if _field(line) != b"data"]
        encoded = encode_wire(rewritten)
        return b"\n".join([*kept, b"data: " + encoded]) + b"\n\n"  # ends with a blank line


Piece = bytes | _Event


class EventStream:
    """One ``text/event-stream`` body: feed it chunks, send on what each call returns.

    ``rewrite`` is called with each event's message (:meth:`feed`, :meth:`close`) or awaited
    (:meth:`afeed`, :meth:`aclose`): one stream uses one pair."""

    def __init__(
        self,
        rewrite: Callable[[Any], Any] | Callable[[Any], Awaitable[Any]],
        dropped: Callable[[str], None],
        *,
        max_event: int = MAX_EVENT,
    ) -> None:
        self._rewrite = rewrite
        self._dropped = dropped
        self._max_event = max_event
        self._raw = bytearray()  # the current event's bytes as received, line ends included
        self._lines: list[bytes] = []  # its complete lines, without line ends
        self._partial = bytearray()  # the line being received
        self._after_cr = False  # the last byte seen was a CR: an LF next completes its CRLF
        self._oversized = False  # the current event passed max_event: skipped to its end
        self._started = False  # a leading byte order mark has been dealt with
        #: whether the last event went out as received (else rewritten, dropped), or the event
        #: whose rendering will say
        self._passed_raw: bool | _Event = True

    def feed(self, chunk: bytes) -> bytes:
        """The bytes to send on for ``chunk``: every event it completes, rewritten."""
        return self._render(self._pieces(chunk))

    async def afeed(self, chunk: bytes) -> bytes:
        """:meth:`feed`, awaiting the rewrite callback."""
        return await self._arender(self._pieces(chunk))

    def close(self) -> bytes:
        """The end of the stream ends the event in progress, which is rewritten like any other."""
        return self._render(self._end())

    async def aclose(self) -> bytes:
        """:meth:`close`, awaiting the rewrite callback."""
        return await self._arender(self._end())

    def _render(self, pieces: list[Piece]) -> bytes:
        rewrite = self._rewrite
        return b"".join(
            piece if type(piece) is bytes else piece.render(rewrite(piece.message))  # type: ignore[union-attr]
            for piece in pieces
        )

    async def _arender(self, pieces: list[Piece]) -> bytes:
        out = []
        for piece in pieces:
            if type(piece) is bytes:
                out.append(piece)
            else:
                assert isinstance(piece, _Event)
                out.append(piece.render(await self._rewrite(piece.message)))
        return b"".join(out)

    def _pieces(self, chunk: bytes) -> list[Piece]:
        """What ``chunk`` completes: bytes to send as they are, and events to render."""
        out: list[Piece] = []
        position = 0
        if not self._started:
            if len(self._partial) + len(chunk) < len(_BOM) and _BOM.startswith(
                bytes(self._partial) + chunk
            ):
                self._partial += chunk  # too short to tell yet
                return []
            chunk, self._started = bytes(self._partial) + chunk, True
            self._partial.clear()
            if chunk.startswith(_BOM):  # the standard drops one; so does every client
                out.append(_BOM)
                position = len(_BOM)
        if self._after_cr:
            self._after_cr = False
            if chunk[position : position + 1] == b"\n":  # the second half of a CRLF
                self._keep(b"\n", out)
                position += 1
        end = len(chunk)
        while position < end:
            found = _LINE_END.search(chunk, position)
            if found is None:
                self._keep_partial(chunk[position:])
                break
            stop = found.end()
            if stop == end and chunk[stop - 1] == 0x0D:
                self._after_cr = True  # may be half of a CRLF split across chunks
            self._line(chunk[position : found.start()], chunk[found.start() : stop], out)
            position = stop
        return out

    def _end(self) -> list[Piece]:
        out: list[Piece] = []
        if not self._started and self._partial:
            self._started = True
        if self._partial:
            line = bytes(self._partial)
            self._partial.clear()
            self._line(line, b"", out)
        if self._oversized:
            self._oversized = False
            self._dropped("an event over the size cap at the end of the stream")
        elif self._lines:
            out.append(self._dispatch())
        elif self._raw:
            out.append(bytes(self._raw))
        self._raw.clear()
        self._lines.clear()
        return out

    # --- one line at a time -----------------------------------------------------------------

    def _keep(self, data: bytes, out: list[Piece]) -> None:
        """Bytes that belong to no new line: the LF of a CRLF split across chunks."""
        if self._oversized:
            return
        if self._raw or self._lines:
            self._raw += data
        elif self._went_as_received():
            out.append(data)  # the end of an event passed on as it came: passed on too

    def _went_as_received(self) -> bool:
        last = self._passed_raw  # an event is rendered before the next chunk is fed
        return last if isinstance(last, bool) else bool(last.as_received)

    def _keep_partial(self, piece: bytes) -> None:
        if self._oversized:
            return
        self._partial += piece
        if len(self._raw) + len(self._partial) > self._max_event:
            self._start_skipping()

    def _start_skipping(self) -> None:
        self._oversized = True
        self._raw.clear()
        self._lines.clear()
        self._partial.clear()

    def _line(self, piece: bytes, ending: bytes, out: list[Piece]) -> None:
        if self._partial:
            piece = bytes(self._partial) + piece
            self._partial.clear()
        if self._oversized:
            if not piece:  # the blank line that ends the skipped event
                self._oversized = False
                self._passed_raw = False
                self._dropped("an event over the size cap")
            return
        if not piece:
            if self._lines:
                self._raw += ending
                out.append(self._dispatch())
            else:  # a blank line with no event before it: nothing to dispatch
                self._raw += ending
                out.append(bytes(self._raw))
                self._raw.clear()
                self._passed_raw = True
            return
        self._raw += piece
        self._raw += ending
        self._lines.append(piece)
        if len(self._raw) > self._max_event:
            self._start_skipping()

    def _dispatch(self) -> Piece:
        """What to send for the event just completed: bytes (possibly none), or the event to
        render once its message has been rewritten."""
        raw, lines = bytes(self._raw), self._lines
        self._raw.clear()
        self._lines = []
        unread = _unread(raw, lines)
        if unread is not None:
            self._passed_raw = False
            self._dropped(unread)
            return b""
        data = [_value(line) for line in lines if _field(line) == b"data"]
        self._passed_raw = True
        if not data:
            return raw  # comments, id, retry: nothing a client reads as a message
        try:
            message = json_loads(b"\n".join(data), max_depth=MAX_BODY_DEPTH)
        except EncodingError as err:
            self._passed_raw = False
            self._dropped(f"an event whose data is not strict JSON ({err})")
            return b""
        event = _Event(message, raw, lines, data)
        self._passed_raw = event
        return event


#: The field names the standard reads (b"" is a comment); a client ignores any other, or
#: (a lenient one) reads ``data :`` as data: the proxy passes on neither reading.
_FIELDS = frozenset({b"", b"data", b"event", b"id", b"retry"})


#: Characters a line splitter may break a line at besides CR and LF (Python's str.splitlines,
#: used by some SSE clients: VT, FF, FS, GS, RS, U+0085, U+2028, U+2029), and the other
#: control characters: a comment or ``id`` holding one may hide a ``data:`` line from the proxy.
_BREAKS = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]|\xc2\x85|\xe2\x80[\xa8\xa9]")


def _unread(raw: bytes, lines: list[bytes]) -> str | None:
    """Why the proxy cannot be sure it reads an event as every client does, or None.

    A field name the standard does not define (``data :``, `` data``, ``Data``) is ignored by a
    browser and may be data to another reader; a comment or ``id`` holding a control character or
    a Unicode line separator may be split into a ``data:`` line by a client that splits lines as
    Python's ``str.splitlines`` does; a NUL makes a browser drop an ``id``; bytes that are not
    UTF-8 are decoded with replacements. Such an event is dropped whole. (Data holding a line
    separator inside a JSON string is written back as ASCII JSON instead.)
    """
    for line in lines:
        name = _field(line)
        if name not in _FIELDS:
            return f"an event with a field the proxy does not read ({name[:32]!r})"
        if name != b"data" and _BREAKS.search(line) is not None:
            return "an event with a control character or line separator outside its data"
    if b"\x00" in raw:
        return "an event holding a NUL byte"
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return "an event that is not UTF-8"
    return None


def _field(line: bytes) -> bytes:
    """The field name of a line (a comment's is the empty name)."""
    return line.partition(b":")[0]


def _value(line: bytes) -> bytes:
    """The value of a field line: after the first colon, less one leading space."""
    _name, colon, value = line.partition(b":")
    if not colon:
        return b""
    return value[1:] if value[:1] == b" " else value
