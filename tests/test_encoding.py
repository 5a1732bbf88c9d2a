"""The strict encoding layer: canonical base64url and strict JSON."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mrtr_state import _encoding
from mrtr_state._encoding import (
    MAX_DEPTH,
    EncodingError,
    b64url_decode,
    b64url_encode,
    json_bytes,
    json_dumps,
    json_loads,
)


@given(st.binary(max_size=200))
def test_base64url_round_trips_and_matches_the_stdlib(data: bytes) -> None:
    text = b64url_encode(data)
    assert text == base64.urlsafe_b64encode(data).rstrip(b"=").decode()
    assert b64url_decode(text) == data


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("padding", "YQ=="),
        ("padding-one", "YWI="),
        ("plus", "a+b_"),
        ("slash", "a/b_"),
        ("space", "YW Jj"),
        ("newline", "YWJj\n"),
        ("impossible-length", "YWJjZ"),
        ("trailing-bits-2", "YR"),  # "YQ" is canonical for b"a"
        ("trailing-bits-3", "YWJ"),  # "YWI" is canonical for b"ab"
        ("non-ascii", "YWJj\u00e9"),
        ("fullwidth-digit", "YWJ\uff11"),
    ],
)
def test_base64url_refuses_non_canonical_spellings(name: str, text: str) -> None:
    with pytest.raises(EncodingError):
        b64url_decode(text)


def test_base64url_accepts_exactly_the_canonical_last_characters() -> None:
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    # One byte leaves 4 spare bits in the last digit (4 of 64 digits canonical), two leave 2 (16).
    for prefix, canonical_count in (("Y", 4), ("YW", 16)):
        accepted = []
        for last in alphabet:
            text = prefix + last
            try:
                decoded = b64url_decode(text)
            except EncodingError:
                continue
            assert b64url_encode(decoded) == text
            accepted.append(last)
        assert len(accepted) == canonical_count


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("duplicate-key", '{"a":1,"a":2}'),
        ("nested-duplicate", '{"x":{"b":1,"b":1}}'),
        ("nan", '{"a":NaN}'),
        ("infinity", '{"a":Infinity}'),
        ("minus-infinity", "-Infinity"),
        ("overflowing-float", '{"a":1e400}'),
        ("huge-integer", "1" * 5000),
        ("too-deep", "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1)),
        ("very-deep", "[" * 100_000 + "]" * 100_000),
        ("trailing-garbage", '{"a":1} x'),
        ("bom", '\ufeff{"a":1}'),
        ("single-quotes", "{'a':1}"),
    ],
)
def test_json_refuses(name: str, text: str) -> None:
    with pytest.raises(EncodingError):
        json_loads(text)


def test_json_refuses_invalid_utf8_and_other_encodings() -> None:
    with pytest.raises(EncodingError):
        json_loads(b'{"a":"\xff"}')
    with pytest.raises(EncodingError):
        json_loads('{"a":1}'.encode("utf-16"))


def test_json_accepts_the_deepest_allowed_nesting_and_brackets_in_strings() -> None:
    deep = "[" * MAX_DEPTH + "]" * MAX_DEPTH
    assert json_loads(deep) is not None
    assert json_loads(json.dumps({"s": "[" * 200})) == {"s": "[" * 200}


# strings made of the bytes the depth measure reads (brackets, quotes, backslashes) and others
_tricky_text = st.text(alphabet=st.sampled_from(list('ab[]{}"\\\u00e9\U0001f600 ')), max_size=6)
_tricky_values = st.recursive(
    st.none() | st.booleans() | st.integers() | _tricky_text,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(_tricky_text, children, max_size=3)
    ),
    max_leaves=60,
)


def _reference(text: str) -> tuple[int, int]:
    """(members written, depth) of ``text``, read by the pure-Python parser with every pair
    kept: the measure the skeleton must agree with, by another route."""
    from json import scanner

    decoder = json.JSONDecoder(object_pairs_hook=lambda pairs: ("object", pairs))
    decoder.scan_once = scanner.py_make_scanner(decoder)  # type: ignore[attr-defined]
    value = decoder.decode(text)

    def walk(node: object) -> tuple[int, int]:
        if isinstance(node, tuple) and node[:1] == ("object",):
            pairs = node[1]
            inner = [walk(child) for _name, child in pairs]
            deepest = max((d for _m, d in inner), default=0)
            return len(pairs) + sum(m for m, _d in inner), 1 + deepest
        if isinstance(node, list):
            inner = [walk(child) for child in node]
            return sum(m for m, _d in inner), 1 + max((d for _m, d in inner), default=0)
        return 0, 0

    return walk(value)


def _spaced(value: object, indent: int | None, ascii_only: bool) -> str:
    # compact, or spread over lines with ": " separators: the skeleton must not depend on it
    separators = (",", ":") if indent is None else (", ", " : ")
    return json.dumps(value, ensure_ascii=ascii_only, indent=indent, separators=separators)


@given(_tricky_values, st.sampled_from([None, 0, 2]), st.booleans())
def test_the_skeleton_counts_members_and_depth_as_a_full_parse_does(
    value: object, indent: int | None, ascii_only: bool
) -> None:
    # whatever brackets, quotes, colons, commas or escapes the strings hold, and however the
    # text is spaced, the skeleton's colons are the members and its brackets the nesting
    text = _spaced(value, indent, ascii_only)
    structure = _encoding.skeleton(text.encode("utf-8", "surrogatepass"))
    members, depth = _reference(text)
    assert structure.count(b":") == members
    assert _encoding.nesting_depth(structure, 64) == min(depth, 65)


_names = st.text(alphabet=st.sampled_from(list('ab:,"\\[{ ')), max_size=4)


@given(
    st.lists(st.tuples(_names, _tricky_values), min_size=1, max_size=4),
    st.integers(0, 3),
    st.integers(0, 2),
    st.sampled_from([None, 0, 2]),
)
def test_a_repeated_member_name_is_refused_at_any_level(
    members: list[tuple[str, object]], at: int, nest: int, indent: int | None
) -> None:
    # the pairs written as text by hand (a dict cannot hold a duplicate), the name repeated
    name, child = members[at % len(members)]
    pairs = [*members, (name, child)]
    separator = ":" if indent is None else " : "
    body = ",".join(
        json.dumps(key) + separator + _spaced(item, indent, False) for key, item in pairs
    )
    text = "{" + body + "}"
    for _ in range(nest):
        text = '{"outer":[' + text + "]}"
    with pytest.raises(EncodingError, match="duplicate member"):
        json_loads(text)


@given(_tricky_values, st.sampled_from([None, 0, 2]))
def test_what_has_no_repeated_name_is_read_back_whole(value: object, indent: int | None) -> None:
    text = _spaced(value, indent, False)
    if _reference(text)[1] <= MAX_DEPTH:
        assert json_loads(text) == json.loads(text)


def test_each_thread_counts_its_own_members() -> None:
    # parses running at once in several threads: each sees only its own objects' members
    import threading

    wide = json.dumps({f"k{i}": {"a": 1, "b": [1, {"c": 2}]} for i in range(300)})
    duplicated = '{"x":[' + ",".join(['{"a":1,"a":2}'] * 200) + "]}"
    failures: list[str] = []

    def run(text: str, ok: bool) -> None:
        for _ in range(200):
            try:
                json_loads(text)
                accepted = True
            except EncodingError:
                accepted = False
            if accepted != ok:
                failures.append(text[:20])

    threads = [threading.Thread(target=run, args=(wide, True)) for _ in range(3)]
    threads += [threading.Thread(target=run, args=(duplicated, False)) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []


@pytest.mark.parametrize("levels", [MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1, MAX_DEPTH + 8])
@pytest.mark.parametrize(
    "filler",
    [{}, {"k": "plain"}, {"k": "]]]"}, {"k": 'a\\"['}],
    ids=["empty", "plain-string", "brackets-in-a-string", "escape"],
)
def test_depth_cap_holds_whatever_the_strings_hold(levels: int, filler: object) -> None:
    # wide as well as deep, so the bracket count alone never decides
    value: object = [filler] * 40  # two levels: the list and the filler object
    for _ in range(levels - 2):
        value = [value, filler]
    text = json.dumps(value)
    assert _reference(text)[1] == levels
    if levels > MAX_DEPTH:
        with pytest.raises(EncodingError, match="deeper"):
            json_loads(text)
    else:
        assert json_loads(text) == value


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63)
    | st.text()
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)


@given(json_values)
def test_what_json_dumps_writes_json_loads_reads_back(value: object) -> None:
    try:
        data = json_bytes(value)
    except ValueError:
        return  # lone surrogates: refused at write time, never minted
    assert json_loads(data) == value


@pytest.mark.parametrize(
    "value",
    [float("nan"), float("inf"), {"x": object()}, 10**5000],
    ids=["nan", "inf", "object", "long-int"],
)
def test_json_dumps_refuses_what_the_reader_would_refuse(value: object) -> None:
    with pytest.raises(ValueError, match=r"."):
        json_dumps(value)


def test_json_dumps_refuses_over_deep_values() -> None:
    value: object = []
    for _ in range(MAX_DEPTH + 1):
        value = [value]
    with pytest.raises(ValueError, match="deeper"):
        json_dumps(value)


class _Mapping(dict):  # type: ignore[type-arg]
    pass


class _Sequence(list):  # type: ignore[type-arg]
    pass


@pytest.mark.parametrize("levels", [1, MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1, MAX_DEPTH + 8])
@pytest.mark.parametrize(
    "wrap",
    [
        lambda inner: {"k": inner, "n": 1},
        lambda inner: [1, "s", inner],
        lambda inner: ("t", inner),
        lambda inner: _Mapping(k=inner),
        lambda inner: _Sequence([None, inner]),
    ],
    ids=["object", "array", "tuple", "dict-subclass", "list-subclass"],
)
def test_the_writer_caps_depth_as_the_reader_does(levels: int, wrap: Any) -> None:
    value: object = [1, 2]
    for _ in range(levels - 1):
        value = wrap(value)
    if levels > MAX_DEPTH:
        with pytest.raises(ValueError, match="deeper"):
            json_dumps(value)
    else:
        assert json_loads(json_dumps(value)) == json.loads(json.dumps(value))


@pytest.mark.parametrize("name", [1, 1.5, True, None], ids=["int", "float", "bool", "null"])
@pytest.mark.parametrize("levels", [1, 2, MAX_DEPTH])
@pytest.mark.parametrize("outer", [dict, _Mapping], ids=["dict", "dict-subclass"])
def test_the_writer_refuses_a_member_name_that_is_not_text_at_any_depth(
    name: object, levels: int, outer: Any
) -> None:
    value: object = outer({"fine": 1, name: 2})
    for level in range(levels - 1):  # arrays and objects in turn, each one level
        value = [{"ok": "x"}, value] if level % 2 else {"k": value, "n": None}
    with pytest.raises(ValueError, match="member name"):
        json_dumps(value)


def test_the_writer_refuses_a_value_that_contains_itself() -> None:
    value: dict[str, object] = {"a": 1}
    value["self"] = value
    with pytest.raises(ValueError, match="deeper"):
        json_dumps(value)


# --- the plain reader, for plaintext a tag or MAC has just authenticated ---------------------


def test_the_plain_reader_reads_as_json_loads_does() -> None:
    """A key holder wrote it: the last of two members wins (RFC 7515 section 5.2), as in
    json.loads, and the object is read at the C scanner's speed, with no member count."""
    text = b'{"a":1,"b":{"c":[true,null,"x:y"]},"a":2}'
    assert (
        _encoding.authenticated_object(text)
        == json.loads(text)
        == {"a": 2, "b": json.loads(b'{"c":[true,null,"x:y"]}')}
    )


@pytest.mark.parametrize(
    ("name", "data", "why"),
    [
        ("nan", b'{"a":NaN}', "NaN"),
        ("infinity", b'{"a":-Infinity}', "Infinity"),
        ("overflow", b'{"a":1e400}', "overflows"),
        ("5000 digits", b'{"a":' + b"9" * 5000 + b"}", "digits"),
        ("not an object", b"[1]", "not a JSON object"),
        ("leading space", b' {"a":1}', "not a JSON object"),
        ("trailing space", b'{"a":1} ', "unexpected data"),
        ("two values", b'{"a":1}{}', "unexpected data"),
        ("not UTF-8", b'{"a":"\xff"}', "UTF-8"),
        ("truncated", b'{"a":', "not valid JSON"),
    ],
)
def test_the_plain_reader_still_refuses(name: str, data: bytes, why: str) -> None:
    with pytest.raises(EncodingError, match=why):
        _encoding.authenticated_object(data)


def test_the_plain_reader_names_nesting_beyond_it_and_never_raises_recursion() -> None:
    """Depth is bounded by the token size cap and the interpreter's recursion limit, which is
    refused by name (a NestingError, that envelopes give as a malformed token)."""
    deep = b'{"a":' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    with pytest.raises(_encoding.NestingError, match="nests deeper"):
        _encoding.authenticated_object(deep)
    with pytest.raises(_encoding.NestingError):
        _encoding.authenticated_json(b"[" * 100_000 + b"]" * 100_000)
    assert _encoding.authenticated_object(b'{"a":' + b"[" * 200 + b"]" * 200 + b"}")


def test_a_value_s_end_is_found_where_the_reader_ends_it() -> None:
    text = '{"iat":1,"st":{"a":[1,"}"]}}'
    assert text[_encoding.json_value_end(text, 14) :] == "}"
    assert _encoding.json_value_end(text, 13) is None  # a member name's closing quote
