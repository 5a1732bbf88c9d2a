"""What the proxy forwards means one thing to every body reader behind it (issue 44).

The proxy opens a ``requestState`` only where *its* JSON reader finds one; an upstream reads the
same bytes with its own. Where the two readings differ, a state the proxy never opened reaches a
handler: a body sent as ``charset=utf-7`` with the member spelled ``+AHI-equestState`` is a first
call to the proxy and a retry to ``express.json()``. So this is a differential harness over the
class, not the instances: a table of ways to spell a request body (:data:`VARIANTS`), each sent
over a raw socket through the real ``mrtr-state proxy`` process, under both HTTP parsers and in
both modes (tokens; handles with ``--state-store``), to three real body readers
(:mod:`tests.body_readers`): ``express.json()`` in Node, Starlette's ``Request.json()``, and a
reader that cuts member names at NUL as C parsers do.

For every variant, reader, parser and mode:

* a *refused* variant (the proxy must not forward it: the contract is 415 for a media type,
  charset or Content-Encoding, 400 for a member name holding NUL or another C0 control) is sent
  twice, with a forged state (base64 JSON ``{"env": "FORGED-prod"}``, which no one sealed) and
  with an honest sealed state from a first call sent plainly; neither reaches the reader at all
  (not even as a first call), the forged state never runs, and each answer is the contract's
  4xx with a JSON-RPC error;
* a *legit* variant round-trips: a first call spelled that way gets a sealed state, the retry
  spelled that way runs the handler on exactly the state it issued (its nonce included); and a
  forged state, or one sealed for another principal, spelled that way is refused by the proxy
  itself, never reaching the reader.

Without the proxy, each reader is sent each variant's forged state directly, and the table says
which of them run it (``read_by``): the readers a forwarded variant would fool, kept true as the
readers change. Each proxy and reader is started once per configuration (module-scoped fixtures),
not per case: the whole file takes about ten seconds.
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import uuid
import zlib
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import mrtr_state as ms

from .body_readers import (
    CASE_HEADER,
    ServedReader,
    c_string_reader,
    express_folder,
    served_express,
    served_in_process,
    starlette_reader,
)
from .helpers import ProxyProcess, Reply, send_raw

#: A state no one sealed: what an attacker would like the tool to run on.
FORGED = base64.b64encode(json.dumps({"env": "FORGED-prod"}).encode()).decode()
NO_KEYSET = Path("/nonexistent/keyset.json")  # handle mode needs none: it must not read one

Message = dict[str, Any]

# --- the table of variants ----------------------------------------------------------------------

#: The refusals the issue's contract names: 415 for a media type, charset or encoding; 400 for
#: member names. A body that is not UTF-8 JSON under a plain ``application/json`` (a sniffed
#: UTF-16 or UTF-32 body) and a Content-Type sent twice are refused by rules that predate the
#: issue (a body that is not strict JSON, a header given twice: 400); either status is the
#: contract's there.
MEDIA = frozenset({415})
NAMES = frozenset({400})
UNREADABLE = frozenset({400, 415})


def _same(value: Any) -> Any:
    return value


@dataclass(frozen=True)
class Variant:
    """One way to spell a JSON-RPC request: its Content-Type (None: no header), other header
    lines, the message reshaped before it is written (member names), the JSON text rewritten
    (escapes), and the UTF-8 text turned into the body's bytes (charsets, compression).
    ``refused``: the statuses the contract allows, or None for a spelling that must work.
    ``read_by``: the readers that, sent a forged state spelled this way directly (no proxy),
    run it: where the proxy's reading differs, these are the readers a forwarded body fools."""

    name: str
    refused: frozenset[int] | None
    read_by: frozenset[str]
    content_type: bytes | None = b"application/json"
    headers: tuple[bytes, ...] = ()
    reshape: Callable[[Message], Message] = _same
    rewrite: Callable[[str], str] = _same
    encode: Callable[[bytes], bytes] = _same

    def write(self, message: Message) -> tuple[bytes, bytes]:
        """(header lines, body) of ``message`` spelled this way."""
        text = self.rewrite(json.dumps(self.reshape(message)))
        body = self.encode(text.encode("utf-8"))
        lines = b"".join(line + b"\r\n" for line in self.headers)
        if self.content_type is not None:
            lines = b"Content-Type: " + self.content_type + b"\r\n" + lines
        return lines, body


def _utf7(body: bytes) -> bytes:
    """UTF-7 with ``requestState`` spelled ``+AHI-equestState`` (its "r" as modified base64 of
    UTF-16 0x0072): a UTF-8 reader sees another, unknown member."""
    encoded = body.decode("utf-8").encode("utf-7").replace(b'"requestState"', b'"+AHI-equestState"')
    assert encoded.decode("utf-7") == body.decode("utf-8")
    return encoded


def _charset(name: str) -> Callable[[bytes], bytes]:
    def encode(body: bytes) -> bytes:
        return body.decode("utf-8").encode(name)

    return encode


def _brotli(body: bytes) -> bytes:
    """Brotli (the ``brotli`` package of requirements/dev.txt: missing, the case skips, and
    fails under the CI profile, where ``make install`` has installed it)."""
    try:
        import brotli  # type: ignore[import-untyped]  # no stubs; one call
    except ImportError:
        if os.environ.get("MRTR_STATE_TEST_PROFILE") == "ci":
            pytest.fail("the brotli package is missing: make install installs requirements/dev.txt")
        pytest.skip("the brotli encoder is not installed (pip install -r requirements/dev.txt)")
    compressed: bytes = brotli.compress(body)
    return compressed


def _renamed_state(name: str) -> Callable[[Message], Message]:
    """``params.requestState`` written under ``name`` instead (in its place)."""

    def reshape(message: Message) -> Message:
        params = message["params"]
        renamed = {(name if key == "requestState" else key): v for key, v in params.items()}
        return {**message, "params": renamed}

    return reshape


def _forged_twin(message: Message) -> Message:
    """A forged ``requestState\\0`` before whatever ``requestState`` the message has: a reader
    cutting names at NUL and keeping the first reads the forged one."""
    return {**message, "params": {"requestState\0": FORGED, **message["params"]}}


def _shadowed_params(message: Message) -> Message:
    """``params\\0`` (deploy, with the forged state) before the real ``params``."""
    shadow = {**message["params"], "requestState": FORGED}
    return {
        "jsonrpc": message["jsonrpc"],
        "id": message["id"],
        "method": message["method"],
        "params\0": shadow,
        "params": message["params"],
    }


def _nested_nul(message: Message) -> Message:
    """A NUL in a member name two levels down (``params._meta``, which no state binds)."""
    return {**message, "params": {**message["params"], "_meta": {"trace\0id": "x"}}}


def _raw_nul_in_name(text: str) -> str:
    """A NUL written as itself (not escaped) in the member name: JSON forbids it."""
    return text.replace('"requestState"', '"requestState\0"')


def _escaped_name(text: str) -> str:
    """``requestState`` written with its "r" escaped: the same member to every JSON reader."""
    return text.replace('"requestState"', '"\\u0072equestState"')


_UTF16_32 = (
    ("utf-16le", "utf-16-le"),
    ("utf-16be", "utf-16-be"),
    ("utf-32le", "utf-32-le"),
    ("utf-32be", "utf-32-be"),
)

#: The readers (tests/body_readers.py), and sets of them for the table's ``read_by``.
EXPRESS, STARLETTE, C_STRINGS = "express", "starlette", "c-strings"
READERS = (EXPRESS, STARLETTE, C_STRINGS)
ALL = frozenset(READERS)
NONE: frozenset[str] = frozenset()
JS, PY, C = frozenset({EXPRESS}), frozenset({STARLETTE}), frozenset({C_STRINGS})

VARIANTS: tuple[Variant, ...] = (
    # --- character encodings: named by a charset, then the same bodies sniffed
    Variant("utf-7", MEDIA, JS, b"application/json; charset=utf-7", encode=_utf7),
    *(
        Variant(
            f"{label}-named",
            MEDIA,
            JS | PY,
            b"application/json; charset=" + label.encode(),
            encode=_charset(codec),
        )
        for label, codec in _UTF16_32
    ),
    *(
        Variant(f"{label}-sniffed", UNREADABLE, PY, encode=_charset(codec))
        for label, codec in _UTF16_32
    ),
    Variant("utf-8-bom", MEDIA, JS | PY, encode=lambda body: b"\xef\xbb\xbf" + body),
    # --- charset parameters: two (express takes the first), quoted, upper case, listed, other
    Variant(
        "charset-utf-7-then-utf-8",
        MEDIA,
        JS,
        b"application/json; charset=utf-7; charset=utf-8",
        encode=_utf7,
    ),
    Variant(
        "charset-utf-8-then-utf-7",
        MEDIA,
        NONE,
        b"application/json; charset=utf-8; charset=utf-7",
        encode=_utf7,
    ),
    Variant("charset-quoted-utf-7", MEDIA, JS, b'application/json; charset="utf-7"', encode=_utf7),
    Variant(
        "charset-UTF-7-upper-case", MEDIA, JS, b"application/json; charset=UTF-7", encode=_utf7
    ),
    Variant("charset-utf-8-twice", MEDIA, ALL, b"application/json; charset=utf-8; charset=utf-8"),
    Variant("charset-iso-8859-1", MEDIA, PY | C, b"application/json; charset=iso-8859-1"),
    Variant(
        "charset-utf-8-and-a-listed-type",
        MEDIA,
        PY | C,
        b"application/json; charset=utf-8, text/plain",
    ),
    # --- Content-Encoding: the compressed body carries the state
    Variant("gzip", MEDIA, JS, headers=(b"Content-Encoding: gzip",), encode=gzip.compress),
    Variant("deflate", MEDIA, JS, headers=(b"Content-Encoding: deflate",), encode=zlib.compress),
    Variant("br", MEDIA, JS, headers=(b"Content-Encoding: br",), encode=_brotli),
    Variant(
        "gzip-upper-case", MEDIA, JS, headers=(b"Content-Encoding: GZIP",), encode=gzip.compress
    ),
    Variant("gzip-label-on-a-plain-body", MEDIA, PY | C, headers=(b"Content-Encoding: gzip",)),
    Variant(
        "identity-then-gzip",
        MEDIA,
        NONE,
        headers=(b"Content-Encoding: identity", b"Content-Encoding: gzip"),
        encode=gzip.compress,
    ),
    # --- other media types, and none
    Variant("text-plain", MEDIA, PY | C, b"text/plain"),
    Variant("form-urlencoded", MEDIA, PY | C, b"application/x-www-form-urlencoded"),
    Variant("json-patch", MEDIA, PY | C, b"application/json-patch+json"),
    Variant("no-content-type", MEDIA, PY | C, None),
    Variant(
        "content-type-twice",
        UNREADABLE,
        ALL,
        None,
        headers=(b"Content-Type: application/json", b"Content-Type: text/plain"),
    ),
    # --- NUL and other C0 controls in member names
    Variant("requestState-nul", NAMES, C, reshape=_renamed_state("requestState\0")),
    Variant("requestState-soh", NAMES, NONE, reshape=_renamed_state("requestState\x01")),
    Variant("requestState-us", NAMES, NONE, reshape=_renamed_state("requestState\x1f")),
    Variant("requestState-tab", NAMES, NONE, reshape=_renamed_state("requestState\t")),
    Variant("requestState-raw-nul-byte", NAMES, NONE, rewrite=_raw_nul_in_name),
    # (the forged state under its own name too, here: the sealed retry is the one that fools)
    Variant("forged-nul-twin-before-the-state", NAMES, ALL, reshape=_forged_twin),
    Variant("params-nul-shadowing-params", NAMES, ALL, reshape=_shadowed_params),
    Variant("nul-in-a-nested-name", NAMES, ALL, reshape=_nested_nul),
    # --- spellings that must keep working
    Variant("plain", None, ALL),
    Variant("charset-utf-8", None, ALL, b"application/json; charset=utf-8"),
    Variant("charset-utf-8-no-space", None, ALL, b"application/json;charset=utf-8"),
    Variant("charset-quoted-UTF-8", None, ALL, b'application/json; charset="UTF-8"'),
    Variant("CHARSET-UTF-8", None, ALL, b"application/json; CHARSET=UTF-8"),
    Variant("content-encoding-identity", None, ALL, headers=(b"Content-Encoding: identity",)),
    Variant("escaped-requestState", None, ALL, rewrite=_escaped_name),
)
REFUSED = [pytest.param(v, id=v.name) for v in VARIANTS if v.refused is not None]
LEGIT = [pytest.param(v, id=v.name) for v in VARIANTS if v.refused is None]


def call(env: str, state: str | None = None) -> Message:
    params: dict[str, Any] = {"name": "deploy", "arguments": {"env": env}}
    if state is not None:
        params["requestState"] = state
    return {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params}


PLAIN = next(v for v in VARIANTS if v.name == "plain")


def new_case(label: str) -> str:
    return f"{label}-{uuid.uuid4().hex[:12]}"


def post(port: int, variant: Variant, message: Message, case: str, user: str = "alice") -> Reply:
    """``message`` spelled as ``variant`` says, from ``user``, over a raw socket, one request
    on its own connection, labelled with its case for the reader's records."""
    lines, body = variant.write(message)
    head = (
        b"POST /mcp HTTP/1.1\r\nHost: proxy\r\nConnection: close\r\n"
        b"Accept: application/json, text/event-stream\r\n"
        + b"X-Forwarded-User: "
        + user.encode()
        + b"\r\n"
        + CASE_HEADER.encode()
        + b": "
        + case.encode()
        + b"\r\n"
        + lines
        + b"Content-Length: %d\r\n\r\n" % len(body)
    )
    return send_raw(port, head + body)


# --- the rigs: three readers, each behind a proxy per parser and mode ---------------------------

PARSERS = ("httptools", "h11")
MODES = ("tokens", "handles")
RIGS = [f"{reader}-{parser}-{mode}" for reader in READERS for parser in PARSERS for mode in MODES]


class Readers:
    """The three readers, each started on first use and stopped with the module."""

    def __init__(self, stack: ExitStack) -> None:
        self.stack = stack
        self.started: dict[str, ServedReader] = {}

    def get(self, name: str) -> ServedReader:
        if name not in self.started:
            if name == EXPRESS:
                folder, why = express_folder(os.environ.get("MRTR_STATE_TEST_TS_SDK"))
                if folder is None:
                    pytest.skip(f"express.json() reader: {why}")
                served = served_express(folder)
            elif name == STARLETTE:
                served = served_in_process(name, starlette_reader)
            else:
                served = served_in_process(name, c_string_reader)
            self.started[name] = self.stack.enter_context(served)
        return self.started[name]


@pytest.fixture(scope="module")
def readers() -> Iterator[Readers]:
    with ExitStack() as stack:
        yield Readers(stack)


class Rig:
    """One reader behind one proxy process, and how a test talks to both."""

    def __init__(self, reader: ServedReader, proxy: ProxyProcess, mode: str) -> None:
        self.reader = reader
        self.proxy = proxy
        self.prefix = "ms1." if mode == "tokens" else "mh1."

    def send(self, variant: Variant, message: Message, case: str, user: str = "alice") -> Reply:
        return post(self.proxy.port, variant, message, case, user)

    def sealed_state(self, env: str, case: str, user: str = "alice") -> str:
        """A first call sent plainly: the state the proxy sealed for it."""
        reply = self.send(PLAIN, call(env), case, user)
        assert reply.status == 200, reply.raw
        state: str = reply.json()["result"]["requestState"]
        assert state.startswith(self.prefix), state
        return state


@pytest.fixture(scope="module", params=RIGS, ids=RIGS)
def rig(
    request: pytest.FixtureRequest, readers: Readers, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Rig]:
    reader_name, parser, mode = str(request.param).rsplit("-", 2)
    reader = readers.get(reader_name)
    if mode == "tokens":
        keyset = tmp_path_factory.mktemp("readers") / "keyset.json"
        ms.Keyset.generate(("A256GCM",)).save(keyset)
        proxy = ProxyProcess(keyset, reader.url, parser=parser)
    else:
        proxy = ProxyProcess(NO_KEYSET, reader.url, "--state-store", "memory:", parser=parser)
    try:
        yield Rig(reader, proxy, mode)
    finally:
        code = proxy.stop()
    assert code == 0 and not any("Traceback" in line for line in proxy.stderr), proxy.stderr


# --- what is checked ----------------------------------------------------------------------------


def ran_forged(events: list[dict[str, Any]]) -> bool:
    return any(
        e["event"] == "retried"
        and (e["requestState"] == FORGED or e["state"] == {"env": "FORGED-prod"})
        for e in events
    )


def refusal_problems(rig: Rig, variant: Variant, reply: Reply, case: str) -> list[str]:
    """Why this answer to a refused variant breaks the contract (none: it holds)."""
    assert variant.refused is not None
    problems = []
    events = rig.reader.events(case)
    if ran_forged(events):
        problems.append(f"the forged state ran in the {rig.reader.name} handler")
    if any(str(e.get("requestState")).startswith(rig.prefix) for e in events):
        problems.append(f"the {rig.reader.name} handler was handed the sealed state unopened")
    if events:
        seen = ",".join(e["event"] for e in events)
        problems.append(f"forwarded: {rig.reader.name} recorded {seen}")
    if not 400 <= reply.status < 500:
        problems.append(f"answered {reply.status}, not a 4xx")
    elif reply.status not in variant.refused:
        expected = "/".join(map(str, sorted(variant.refused)))
        problems.append(f"answered {reply.status}, the contract says {expected}")
    try:
        answer = reply.json()
    except ValueError:
        answer = None
    error = answer.get("error") if isinstance(answer, dict) else None
    if not (isinstance(error, dict) and isinstance(error.get("code"), int)):
        problems.append("no JSON-RPC error in the answer")
    return problems


# --- the tests ----------------------------------------------------------------------------------


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("variant", [pytest.param(v, id=v.name) for v in VARIANTS])
def test_each_spelling_fools_the_readers_the_table_says(
    readers: Readers, reader: str, variant: Variant
) -> None:
    """Without the proxy: which readers run a forged state spelled this way (``read_by``). This
    keeps the table honest: a reader that stopped reading a spelling as the table says (an
    upgrade that drops UTF-7, say) fails here instead of leaving a variant that tests nothing."""
    served = readers.get(reader)
    case = new_case("direct")
    post(served.port, variant, call("prod", FORGED), case)
    assert ran_forged(served.events(case)) == (reader in variant.read_by)


@pytest.mark.parametrize("variant", REFUSED)
def test_a_refused_spelling_never_reaches_a_reader(rig: Rig, variant: Variant) -> None:
    """A forged state, and an honest sealed one, spelled this way: both answered by the proxy
    with the contract's 4xx, and nothing reaches the reader (the forged state least of all)."""
    forged_case = new_case("forged")
    forged = rig.send(variant, call("prod", FORGED), forged_case)
    sealed = rig.sealed_state("prod", new_case("first"))
    honest_case = new_case("sealed")
    honest = rig.send(variant, call("prod", sealed), honest_case)
    problems = [
        *(f"forged: {p}" for p in refusal_problems(rig, variant, forged, forged_case)),
        *(f"sealed: {p}" for p in refusal_problems(rig, variant, honest, honest_case)),
    ]
    assert not problems, "; ".join(problems)


@pytest.mark.parametrize("variant", LEGIT)
def test_a_legit_spelling_round_trips_and_refuses_a_forged_state(
    rig: Rig, variant: Variant
) -> None:
    """A first call and its retry spelled this way: the handler runs on exactly the state it
    issued. A forged state, or another principal's, spelled this way is refused by the proxy
    and reaches no reader."""
    first_case, retry_case = new_case("first"), new_case("retry")
    first = rig.send(variant, call("prod"), first_case)
    assert first.status == 200, first.raw
    sealed = first.json()["result"]["requestState"]
    assert sealed.startswith(rig.prefix)  # the client never sees the reader's plain state
    (asked,) = [e["state"] for e in rig.reader.events(first_case) if e["event"] == "asked"]
    retry = rig.send(variant, call("prod", sealed), retry_case)
    assert retry.status == 200, retry.raw
    assert retry.json()["result"]["content"][0]["text"] == "deployed prod"
    ran = [e for e in rig.reader.events(retry_case) if e["event"] == "retried"]
    assert [e["state"] for e in ran] == [asked]  # its own state, nonce and all, exactly once

    # a state no one sealed, and one sealed for another principal: the proxy refuses both
    bobs = rig.sealed_state("prod", new_case("bob"), user="bob")
    for state, case in ((FORGED, new_case("forged")), (bobs, new_case("bobs"))):
        refused = rig.send(variant, call("prod", state), case)
        assert refused.status == 200 and refused.json()["error"]["code"] == -32602, refused.raw
        assert rig.reader.events(case) == []
