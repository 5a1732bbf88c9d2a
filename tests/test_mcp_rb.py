"""The Ruby SDK's tokens (formats/mcp_rb.py, envelopes/mcp_rb.py): every vector the SDK made,
verified or refused as it was, and the envelopes we write byte for byte as the SDK's.
"""

from __future__ import annotations

from typing import Any

import pytest

import mrtr_state as ms
from mrtr_state._entropy import Fresh
from mrtr_state.tokens.binding import Binding
from mrtr_state.tokens.envelopes.mcp_rb import canonical_json, ruby_arguments_digest, ruby_float
from mrtr_state.tokens.registry import format_named

from .sdk_vectors import (
    LENIENT,
    RUBY,
    RUBY_ERRORS,
    UNCAPPED,
    _ids,
    _refused,
    _ruby_arguments,
    _ruby_keyset,
)


@pytest.mark.parametrize("case", RUBY, ids=_ids(RUBY))
def test_ruby_sdk_vector(case: dict[str, Any]) -> None:
    keyset = _ruby_keyset(case)
    arguments = _ruby_arguments(case)
    assert canonical_json({} if arguments is None else arguments) == case["canonical_json"]
    assert ruby_arguments_digest(arguments) == case["arguments_digest"]

    def check() -> ms.Claims:
        return ms.verify(
            keyset,
            case["token"],
            method=case["method"],
            target=case["target"],
            arguments=arguments,
            audience=case["audience"],
            policy=UNCAPPED,
        )

    result = case["result"]
    if ("ruby", case["name"]) in LENIENT:
        assert result["accepted"]
        assert _refused(check) is ms.MalformedToken
    elif result["accepted"]:
        assert check().state == result["state"]
        assert ms.inspect(case["token"], keyset=keyset, policy=UNCAPPED).anatomy.format == "mcp-rb"
    else:
        assert _refused(check) in RUBY_ERRORS[result["message"]], result


@pytest.mark.parametrize(
    "case",
    [c for c in RUBY if "sealed_claims_json" in c and c["result"]["accepted"]],
    ids=lambda c: c["name"],
)
def test_ruby_envelopes_we_write_are_the_sdks_byte_for_byte(case: dict[str, Any]) -> None:
    if case["exp"] is None or not isinstance(case["exp"], int):
        pytest.skip("sealed with a float TTL: the SDK's own envelope is not one it accepts")
    fmt = format_named("mcp-rb")
    binding = Binding(
        method=case["method"],
        target=case["target"],
        arguments=_ruby_arguments(case),
        audience=case["audience"],
    )
    key = _ruby_keyset(case).primary("mcp-rb-v1")
    ttl = case["ttl"] if isinstance(case["ttl"], int) else 1
    packed, _claims = fmt.envelope.pack(
        case["state"], binding, key, case["exp"] - ttl, ttl, Fresh(bytes(16), bytes(12), bytes(8))
    )
    assert packed.decode() == case["sealed_claims_json"]


@pytest.mark.parametrize(
    ("value", "spelled"),
    [
        (1.0, "1.0"),
        (1e20, "1.0e+20"),
        (1e15, "1.0e+15"),
        (123456789012345.0, "123456789012345.0"),
        (0.0001, "0.0001"),
        (0.00001, "1.0e-05"),
        (-0.0, "-0.0"),
        (100.0, "100.0"),
        (2.5, "2.5"),
        (1.5e-7, "1.5e-07"),
        (-1.25e300, "-1.25e+300"),
        (5e-324, "5.0e-324"),
        # the point at 16 digits: fixed only with a 17th digit (spellings from ruby -e 'p ...')
        (1000000000000000.5, "1000000000000000.5"),
        (1234567890123456.8, "1234567890123456.8"),
        (1234567890123456.0, "1.234567890123456e+15"),
        (9999999999999998.0, "9.999999999999998e+15"),
        (12345678901234568.0, "1.2345678901234568e+16"),
    ],
)
def test_floats_are_spelled_as_ruby_spells_them(value: float, spelled: str) -> None:
    assert ruby_float(value) == spelled
