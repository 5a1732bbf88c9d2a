"""The PHP SDK's tokens (formats/mcp_php.py, envelopes/mcp_php.py): every vector the SDK made,
verified or refused as it was, and the tokens we mint byte for byte.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

import mrtr_state as ms

from .sdk_vectors import (
    LENIENT,
    PHP,
    PHP_ERRORS,
    STRICTER,
    UNCAPPED,
    _ids,
    _php_keyset,
    _refused,
)


@pytest.mark.parametrize("case", PHP, ids=_ids(PHP))
def test_php_sdk_vector(case: dict[str, Any]) -> None:
    keyset = _php_keyset(case)
    now = case.get("verify_now")

    def check() -> ms.Claims:
        return ms.verify(keyset, case["token"], now=now, policy=UNCAPPED)

    result = case["result"]
    if ("php", case["name"]) in LENIENT:
        assert result["accepted"]
        assert _refused(check) is ms.MalformedToken
    elif result["accepted"]:
        assert check().state == result["data"]
    elif ("php", case["name"]) in STRICTER:
        assert _refused(check) is ms.MalformedToken
    else:
        assert _refused(check) in PHP_ERRORS[result["message"]], result


def _spelled_otherwise_by_php(value: Any) -> bool:
    """Whether PHP's json_encode writes ``value`` otherwise than JSON does: a float (1.0 as
    1) or an empty object (as [], a PHP array). Readers take both spellings alike."""
    if isinstance(value, dict):
        return not value or any(_spelled_otherwise_by_php(v) for v in value.values())
    if isinstance(value, list):
        return any(_spelled_otherwise_by_php(v) for v in value)
    return isinstance(value, float)


@pytest.mark.parametrize(
    "case",
    [
        c
        for c in PHP
        if c["result"]["accepted"]
        and "mutation" not in c
        and "data_json" in c
        and not _spelled_otherwise_by_php(json.loads(c["data_json"]))
    ],
    ids=lambda c: c["name"],
)
def test_php_tokens_we_mint_are_the_sdks_byte_for_byte(case: dict[str, Any]) -> None:
    minted = ms.mint(
        _php_keyset(case),
        json.loads(case["data_json"]),
        format="mcp-php",
        ttl=case["ttl"],
        now=case["exp"] - case["ttl"],
        policy=UNCAPPED,
    )
    assert minted == case["token"]
