"""State handles, without a store: their text, records, locks, and the one accepting path."""

from __future__ import annotations

import json
import struct

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from mrtr_state.errors import (
    AudienceMismatch,
    ExpiredToken,
    InvalidClaims,
    MalformedToken,
    PrincipalMismatch,
    RequestMismatch,
)
from mrtr_state.state import records as handles
from mrtr_state.tokens.binding import Binding

NOW = 1_800_000_000.0
BOUND = Binding(
    principal="alice",
    audience="https://mcp.example.com/mcp",
    method="tools/call",
    target="deploy",
    arguments={"env": "prod"},
)


def made(state: str = "step=1", ttl: float = 300) -> tuple[str, handles.Handle, bytes]:
    ident = handles.new_handle()
    return ident.text, ident, handles.encode_record(ident, state, BOUND, now=NOW, ttl=ttl)


def test_a_handle_is_short_random_and_reads_back_to_its_id() -> None:
    first = handles.new_handle()
    second = handles.new_handle()
    assert len(first.text) == handles.HANDLE_LENGTH == 31 and first.text.startswith("mh1.")
    assert first.text != second.text and len(first.ident) == 16
    assert handles.read_handle(first.text) == first  # the same key and record key, derived again
    assert first.key != second.key and first.secret != second.secret and len(first.secret) == 32


@pytest.mark.parametrize(
    "text",
    [
        "",
        "mh1.",
        "ms1.AAAAAAAAAAAAAAAAAAAAAAAAAAA",  # another prefix
        "mh1.AAAAAAAAAAAAAAAAAAAAAAAAAA",  # one short
        "mh1.AAAAAAAAAAAAAAAAAAAAAAAAAAAA",  # one long
        "mh1.AAAAAAAAAAAAAAAAAAAAAAAAAA=",  # padding
        "mh1.AAAAAAAAAAAAAAAAAAAAAAAAAA+",  # outside the alphabet
        "mh1.AAAAAAAAAAAAAAAAAAAAAAAAAAB",  # non-zero trailing bits
        "mh1.AAAAAAAAAAAAAAAAAAAAAAAAAAA",  # a check value that does not match
    ],
)
def test_text_that_is_not_a_handle_is_refused_without_a_store(text: str) -> None:
    with pytest.raises(MalformedToken, match="not a state handle"):
        handles.read_handle(text)


def test_one_changed_character_breaks_the_check_value() -> None:
    handle = handles.new_handle().text
    for position in range(4, len(handle) - 1):  # the last carries padding bits
        flipped = "B" if handle[position] != "B" else "C"
        with pytest.raises(MalformedToken):
            handles.read_handle(handle[:position] + flipped + handle[position + 1 :])


def test_the_store_key_and_the_lock_name_no_handle() -> None:
    handle, ident, value = made()
    lock = handles.lock_of(ident, BOUND)
    assert ident.key.startswith("mrtr-state:state:") and handle[4:] not in ident.key
    assert len(lock) == 43 and ident.ref == ident.key[-8:]
    assert value.startswith(lock.encode() + b"\n") and handle.encode() not in value
    assert ident.secret not in value and ident.ident not in value
    again = handles.encode_record(ident, "step=1", BOUND, now=NOW, ttl=300)
    assert again[44:] != value[44:]  # a fresh nonce each time


def test_a_stored_record_shows_nothing_of_what_it_holds() -> None:
    """A dump of the store: ciphertext after the lock; no state, audience or request."""
    _, ident, value = made(state="the-secret-state-" * 4)
    assert value[43:44] == b"\n"
    for text in (
        b"the-secret-state",
        b"alice",
        b"mcp.example.com",
        str(BOUND.fingerprint()).encode(),
    ):
        assert text not in value
    assert handles.decode_record(ident, value).state == "the-secret-state-" * 4


@pytest.mark.parametrize(
    "other",
    [
        {"principal": "bob"},
        {"principal": None},
        {"audience": "https://mcp.example.com/other"},
        {"target": "destroy"},
        {"arguments": {"env": "dev"}},
    ],
)
def test_the_lock_depends_on_every_binding(other: dict[str, object]) -> None:
    _, ident, _ = made()
    stated = {
        "principal": "alice",
        "audience": "https://mcp.example.com/mcp",
        "method": "tools/call",
        "target": "deploy",
        "arguments": {"env": "prod"},
        **other,
    }
    assert handles.lock_of(ident, Binding(**stated)) != handles.lock_of(ident, BOUND)  # type: ignore[arg-type]


def test_a_record_is_accepted_for_its_own_retry() -> None:
    _, ident, value = made()
    record = handles.decode_record(ident, value)
    assert handles.accept(record, BOUND, now=NOW + 299) == "step=1"
    assert record.to_dict(ident)[
        "aud"
    ] == "https://mcp.example.com/mcp" and "state" not in record.to_dict(ident)


@pytest.mark.parametrize(
    ("stated", "error"),
    [
        ({"principal": "bob"}, PrincipalMismatch),
        ({"principal": None}, PrincipalMismatch),
        ({"audience": "https://mcp.example.com/other"}, AudienceMismatch),
        ({"audience": None}, AudienceMismatch),
        ({"arguments": {"env": "dev"}}, RequestMismatch),
        ({"target": "destroy"}, RequestMismatch),
    ],
)
def test_a_record_is_refused_for_another_retry(
    stated: dict[str, object], error: type[Exception]
) -> None:
    _, ident, value = made()
    retry = {
        "principal": "alice",
        "audience": "https://mcp.example.com/mcp",
        "method": "tools/call",
        "target": "deploy",
        "arguments": {"env": "prod"},
        **stated,
    }
    with pytest.raises(error):
        handles.accept(handles.decode_record(ident, value), Binding(**retry), now=NOW)  # type: ignore[arg-type]


def test_a_record_without_a_principal_is_refused_to_one() -> None:
    anonymous = Binding(audience="/mcp", method="tools/call", target="deploy")
    ident = handles.new_handle()
    value = handles.encode_record(ident, "s", anonymous, now=NOW, ttl=60)
    assert handles.accept(handles.decode_record(ident, value), anonymous, now=NOW) == "s"
    named = Binding(principal="alice", audience="/mcp", method="tools/call", target="deploy")
    with pytest.raises(PrincipalMismatch, match="bound to none"):
        handles.accept(handles.decode_record(ident, value), named, now=NOW)


def test_expiry_comes_first_whoever_presents_the_record() -> None:
    _, ident, value = made(ttl=60)
    record = handles.decode_record(ident, value)
    assert handles.accept(record, BOUND, now=NOW + 60) == "step=1"  # exp itself is still valid
    stranger = Binding(principal="bob", method="tools/call", target="x")
    with pytest.raises(ExpiredToken):
        handles.accept(record, stranger, now=NOW + 61)


IDENT = handles.read_handle(handles.new_handle().text)
_HEADER = struct.Struct(">BqqIII")
_ABSENT = 0xFFFFFFFF


def _sealed(plaintext: bytes, handle: handles.Handle = IDENT) -> bytes:
    """A record sealed as encode_record seals one (real AES-256-GCM under the handle's key)."""
    nonce = b"N" * 12  # fixed, so the cases below are the same bytes every run
    return b"L" * 43 + b"\n" + nonce + AESGCM(handle.secret).encrypt(nonce, plaintext, _AAD)


_AAD = b"mrtr-state/handle/v1/record"


def _record(
    *,
    version: int = 1,
    texts: tuple[bytes | None, ...] = (b"alice", None, b"rid"),
    state: bytes = b"s",
    lengths: tuple[int, ...] | None = None,
) -> bytes:
    """A record's plaintext, laid out as encode_record lays one out, then sealed."""
    if lengths is None:
        lengths = tuple(_ABSENT if text is None else len(text) for text in texts)
    header = _HEADER.pack(version, int(NOW * 1000), int((NOW + 60) * 1000), *lengths)
    return _sealed(header + b"".join(text or b"" for text in texts) + state)


def test_the_sealed_record_helper_makes_what_encode_record_makes() -> None:
    """So the malformed records below differ from a real one only where they say."""
    record = handles.decode_record(IDENT, _record(state="é".encode()))
    assert record == handles.Record("é", NOW, NOW + 60, "alice", None, "rid")
    real = handles.encode_record(IDENT, "é", BOUND, now=NOW, ttl=60)
    opened = handles.decode_record(IDENT, real)
    assert (opened.state, opened.sub, opened.aud) == ("é", "alice", BOUND.audience)


def test_texts_round_trip_exactly_whatever_they_hold() -> None:
    """States with lone surrogates (JSON can carry them), NUL, non-ASCII, or nothing."""
    odd = Binding(principal="é\x00", audience="/mcp\u2028", method="tools/call", target="t")
    for state in ("", "\udfff", "a\x00b", "é" * 1000):
        value = handles.encode_record(IDENT, state, odd, now=NOW, ttl=60)
        record = handles.decode_record(IDENT, value)
        assert (record.state, record.sub, record.aud) == (state, "é\x00", "/mcp\u2028")
        assert handles.accept(record, odd, now=NOW) == state


def test_times_are_kept_to_the_millisecond_never_later() -> None:
    value = handles.encode_record(IDENT, "s", BOUND, now=NOW + 0.0009, ttl=0.0019)
    record = handles.decode_record(IDENT, value)
    assert (record.iat, record.exp) == (NOW, NOW + 0.002)
    for now, ttl in ((float("nan"), 60.0), (NOW, float("inf")), (NOW, 1e17), (-1e16, 60.0)):
        with pytest.raises(ValueError, match="finite"):
            handles.encode_record(IDENT, "s", BOUND, now=now, ttl=ttl)


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (_sealed(b""), "not a version 1"),
        (_sealed(_HEADER.pack(1, 0, 0, 0, 0, 0)[:-1]), "not a version 1"),  # a header short
        (_record(version=2), "not a version 1"),
        (_record(version=0), "not a version 1"),
        (_record(lengths=(6, _ABSENT, 4)), "overrun"),  # past the end, into the state
        (_record(texts=(b"a", None, b"r"), lengths=(1, _ABSENT, 9), state=b""), "overrun"),
        (_record(texts=(b"\xff", None, b"rid")), "not UTF-8"),
        (_record(state=b"\xc3"), "not UTF-8"),
    ],
)
def test_an_authenticated_record_of_the_wrong_shape_is_refused(value: bytes, reason: str) -> None:
    with pytest.raises(InvalidClaims, match=reason):
        handles.decode_record(IDENT, value)


def _flip(value: bytes, position: int) -> bytes:
    return value[:position] + bytes([value[position] ^ 1]) + value[position + 1 :]


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (b"", "not a version 1"),
        (b"no newline at all" * 8, "not a version 1"),
        (b"L" * 43 + b"\n" + b"x" * 27, "not a version 1"),  # shorter than nonce and tag
        (b"L" * 42 + _record()[43:], "not a version 1"),  # the lock one short
        # what the store held before records were sealed: JSON after the lock
        (
            b"L" * 43
            + b"\n"
            + json.dumps(dict.fromkeys(["v", "iat", "exp", "own", "aud", "rid", "st"], 1)).encode(),
            "does not open",
        ),
        (_flip(_record(), 44), "does not open"),  # the nonce
        (_flip(_record(), 60), "does not open"),  # the ciphertext
        (_flip(_record(), len(_record()) - 1), "does not open"),  # the tag
        (_record()[:-1], "does not open"),  # truncated
        (_sealed(_record()[56:-16], handle=handles.new_handle()), "does not open"),  # another key
    ],
)
def test_a_record_that_does_not_open_under_its_handle_is_refused(value: bytes, reason: str) -> None:
    with pytest.raises(InvalidClaims, match=reason):
        handles.decode_record(IDENT, value)


def test_a_record_moved_under_another_handle_does_not_open() -> None:
    """Someone who can write to the store copies one handle's record under another's key."""
    _, ident, value = made()
    _, other, _ = made()
    with pytest.raises(InvalidClaims, match="does not open"):
        handles.decode_record(other, value)
    assert handles.decode_record(ident, value).state == "step=1"


def test_inspect_shows_the_principal_as_a_digest_only() -> None:
    _, ident, value = made()
    shown = handles.decode_record(ident, value).to_dict(ident)
    assert shown["own"] == handles.owner_digest(ident, "alice")
    assert "alice" not in json.dumps(shown) and handles.owner_digest(ident, None) is None
    assert handles.owner_digest(ident, "bob") != shown["own"]
    # keyed by the handle: one principal's records are not linked, nor is a name guessable
    _, other, _ = made()
    assert handles.owner_digest(other, "alice") != shown["own"]


def test_neither_a_handle_nor_a_record_shows_its_secrets_when_printed() -> None:
    handle, ident, value = made(state="the-state")
    record = handles.decode_record(ident, value)
    for shown in (repr(ident), str(ident), f"{ident}", repr(record), str([ident, record])):
        for secret in (handle, handle[4:], ident.key, "the-state", "alice"):
            assert secret not in shown
        assert ident.secret.hex() not in shown and repr(ident.ident) not in shown
    assert not hasattr(ident, "_asdict") and not hasattr(ident, "__dict__")
    assert handles.read_handle(handle) == ident and hash(handles.read_handle(handle)) == hash(ident)


def test_a_record_without_an_audience_is_refused_to_a_retry_that_states_one() -> None:
    bare = Binding(principal="alice", method="tools/call", target="deploy")
    value = handles.encode_record(IDENT, "s", bare, now=NOW, ttl=60)
    with pytest.raises(AudienceMismatch):
        handles.accept(handles.decode_record(IDENT, value), BOUND, now=NOW)
