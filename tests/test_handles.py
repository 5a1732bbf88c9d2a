"""State handles, without a store: their text, records, locks, and the one accepting path."""

from __future__ import annotations

import json

import pytest

from mrtr_state import handles
from mrtr_state.binding import binding_of
from mrtr_state.errors import (
    AudienceMismatch,
    ExpiredToken,
    InvalidClaims,
    MalformedToken,
    PrincipalMismatch,
    RequestMismatch,
)

NOW = 1_800_000_000.0
BOUND = binding_of(
    principal="alice",
    audience="https://mcp.example.com/mcp",
    method="tools/call",
    target="deploy",
    arguments={"env": "prod"},
)


def made(state: str = "step=1", ttl: float = 300) -> tuple[str, bytes, bytes]:
    handle, ident = handles.new_handle()
    return handle, ident, handles.encode_record(ident, state, BOUND, now=NOW, ttl=ttl)


def test_a_handle_is_short_random_and_reads_back_to_its_id() -> None:
    first, ident = handles.new_handle()
    second, _ = handles.new_handle()
    assert len(first) == handles.HANDLE_LENGTH == 31 and first.startswith("mh1.")
    assert first != second and handles.handle_id(first) == ident and len(ident) == 16


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
        handles.handle_id(text)


def test_one_changed_character_breaks_the_check_value() -> None:
    handle, _ = handles.new_handle()
    for position in range(4, len(handle) - 1):  # the last carries padding bits
        flipped = "B" if handle[position] != "B" else "C"
        with pytest.raises(MalformedToken):
            handles.handle_id(handle[:position] + flipped + handle[position + 1 :])


def test_the_store_key_and_the_lock_name_no_handle() -> None:
    handle, ident, value = made()
    key = handles.record_key(ident)
    lock = handles.lock_of(ident, BOUND)
    assert key.startswith("mrtr-state:state:") and handle[4:] not in key and len(lock) == 43
    assert value.startswith(lock.encode() + b"\n") and handle.encode() not in value
    assert b"alice" not in value  # the owner is a salted digest
    again = handles.encode_record(ident, "step=1", BOUND, now=NOW, ttl=300)
    assert again.split(b"\n")[1] != value.split(b"\n")[1]  # a fresh salt each time


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
    assert handles.lock_of(ident, binding_of(**stated)) != handles.lock_of(ident, BOUND)  # type: ignore[arg-type]


def test_a_record_is_accepted_for_its_own_retry() -> None:
    _, _, value = made()
    record = handles.decode_record(value)
    assert handles.accept(record, BOUND, now=NOW + 299) == "step=1"
    assert (
        record.to_dict()["aud"] == "https://mcp.example.com/mcp" and "state" not in record.to_dict()
    )


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
    _, _, value = made()
    retry = {
        "principal": "alice",
        "audience": "https://mcp.example.com/mcp",
        "method": "tools/call",
        "target": "deploy",
        "arguments": {"env": "prod"},
        **stated,
    }
    with pytest.raises(error):
        handles.accept(handles.decode_record(value), binding_of(**retry), now=NOW)  # type: ignore[arg-type]


def test_a_record_without_a_principal_is_refused_to_one() -> None:
    anonymous = binding_of(audience="/mcp", method="tools/call", target="deploy")
    _, ident = handles.new_handle()
    value = handles.encode_record(ident, "s", anonymous, now=NOW, ttl=60)
    assert handles.accept(handles.decode_record(value), anonymous, now=NOW) == "s"
    named = binding_of(principal="alice", audience="/mcp", method="tools/call", target="deploy")
    with pytest.raises(PrincipalMismatch, match="bound to none"):
        handles.accept(handles.decode_record(value), named, now=NOW)


def test_expiry_comes_first_whoever_presents_the_record() -> None:
    _, _, value = made(ttl=60)
    record = handles.decode_record(value)
    assert handles.accept(record, BOUND, now=NOW + 60) == "step=1"  # exp itself is still valid
    stranger = binding_of(principal="bob", method="tools/call", target="x")
    with pytest.raises(ExpiredToken):
        handles.accept(record, stranger, now=NOW + 61)


def _record(**members: object) -> bytes:
    document: dict[str, object] = {
        "v": 1,
        "iat": NOW,
        "exp": NOW + 60,
        "own": None,
        "aud": None,
        "rid": None,
        "st": "s",
    }
    document.update(members)
    return b"L" * 43 + b"\n" + json.dumps(document).encode()


@pytest.mark.parametrize(
    "value",
    [
        b"no newline at all",
        b"L" * 43 + b"\n{not json",
        b"L" * 43 + b'\n{"v":1,"v":1}',
        _record(v=2),
        _record(st={"not": "a string"}),
        _record(exp="1800000060"),
        _record(exp=True),
        _record(own=7),
        _record(extra=1),
        b"L" * 43 + b"\n" + json.dumps({"v": 1}).encode(),
    ],
)
def test_a_stored_record_is_read_strictly(value: bytes) -> None:
    with pytest.raises(InvalidClaims, match="stored record"):
        handles.decode_record(value)
