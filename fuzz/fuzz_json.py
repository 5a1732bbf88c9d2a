"""Differential fuzzing of both JSON readers (``make fuzz``).

    python fuzz/fuzz_json.py -atheris_runs=1000000

The strict reader (for unauthenticated bytes) counts each object's members as the C scanner
builds it and reads how many the text wrote, and how deeply it nests, from a skeleton made at C
speed. This checks every verdict against a reference that takes none of those shortcuts: the
standard library's pure-Python scanner, keeping every member pair, walked for repeated names and
depth. Both must accept the same documents (and read the same value) and refuse the same ones.
The plain reader (for authenticated plaintext) is held to ``json.loads`` with the same refusal
of non-finite numbers and of whitespace around the object. Inputs start from documents holding
what the skeleton must see through: escapes, quotes, brackets and colons in strings,
whitespace, repeated names at every level.
"""

from __future__ import annotations

import json
import math
from json import scanner
from typing import Any

import atheris
from _harness import run

with atheris.instrument_imports():
    from mrtr_state._encoding import MAX_DEPTH, EncodingError, authenticated_object, json_loads

SEEDS = [
    b'{"a":1,"b":[true,null,{"c":"x:y"}]}',
    b'{"iat":1,"exp":2,"st":{"u":"https://h/p?q=[1]","e":"a\\\\\\"b\\\\"}}',
    b'{ "a" : 1 , "a" : 2 }',
    b'{"x":[{"k":1,"k":1}]}',
    b'["\\\\","\\"",":",",","{","[]"]',
    b'{"":{"":{"":[]}}}',
]


class Refused(Exception):
    pass


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    if len({name for name, _ in pairs}) != len(pairs):
        raise Refused("duplicate")
    return dict(pairs)


def _constant(name: str) -> Any:
    raise Refused(name)


def _int(text: str) -> int:
    if not text.isascii():  # the pure-Python scanner's \d takes any Unicode digit; JSON does not
        raise Refused("digit")
    return int(text)


def _float(text: str) -> float:
    if not text.isascii():
        raise Refused("digit")
    value = float(text)
    if not math.isfinite(value):
        raise Refused("overflow")
    return value


_REFERENCE = json.JSONDecoder(
    object_pairs_hook=_pairs, parse_constant=_constant, parse_float=_float, parse_int=_int
)
_REFERENCE.scan_once = scanner.py_make_scanner(_REFERENCE)  # type: ignore[attr-defined]


def _depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


def reference(data: bytes) -> Any:
    """The value ``data`` holds under the strict rules, or :class:`Refused`."""
    try:
        text = data.decode("utf-8")
        value, end = _REFERENCE.scan_once(text, 0)  # type: ignore[attr-defined]
    except (ValueError, StopIteration, RecursionError, Refused) as err:
        raise Refused(str(err)) from None
    if end != len(text) or _depth(value) > MAX_DEPTH:
        raise Refused("trailing data or too deep")
    return value


def one_input(raw: bytes) -> None:
    provider = atheris.FuzzedDataProvider(raw)
    if provider.ConsumeBool():  # a seed with bytes spliced in, so most inputs are near-JSON
        base = SEEDS[provider.ConsumeIntInRange(0, len(SEEDS) - 1)]
        at = provider.ConsumeIntInRange(0, len(base))
        cut = provider.ConsumeIntInRange(0, 4)
        spliced = provider.ConsumeBytes(provider.ConsumeIntInRange(0, 6))
        data = base[:at] + spliced + base[at + cut :]
    else:
        data = provider.ConsumeBytes(provider.remaining_bytes())
    check(data)


def check(data: bytes) -> None:
    try:
        expected: Any = reference(data)
    except Refused:
        expected = Refused
    try:
        got: Any = json_loads(data)
    except EncodingError:
        got = Refused
    if expected is Refused or got is Refused:
        assert got is expected, (data, got, expected)
    else:
        assert got == expected or (got != got and expected != expected), (data, got)
    if data[:1] == b"{":
        try:
            plain: Any = authenticated_object(data)
        except EncodingError:
            plain = Refused
        loaded = plain_reference(data)
        if plain is Refused or loaded is Refused:
            assert plain is loaded, (data, plain, loaded)
        else:
            assert plain == loaded or (plain != plain and loaded != loaded), (data, plain)


def plain_reference(data: bytes) -> Any:
    """``json.loads`` of an object that a tag authenticated, as the plain reader reads it:
    last of two members wins, non-finite numbers refused, nothing around the object."""
    try:
        text = data.decode("utf-8")
        if text != text.rstrip(" \t\n\r"):
            return Refused
        return json.loads(text, parse_constant=_constant, parse_float=_finite)
    except (ValueError, RecursionError, Refused):
        return Refused


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise Refused("overflow")
    return value


def main() -> None:
    for seed in SEEDS:
        check(seed)
    run("json", one_input)


if __name__ == "__main__":
    main()
