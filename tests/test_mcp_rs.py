"""rmcp's tokens, rs1 and the keyring's rs2 (formats/mcp_rs.py, mcp_rs2.py, envelopes/mcp_rs.py):
every vector rmcp made, verified or refused as it was, and the tokens we mint byte for byte.
"""

from __future__ import annotations

from typing import Any

import pytest

import mrtr_state as ms
from mrtr_state.tokens.envelopes.mcp_rs import payload_of

from .sdk_vectors import (
    RMCP,
    RMCP_ERRORS,
    UNCAPPED,
    _b64,
    _ids,
    _json,
    _refused,
    _rmcp_keyset,
)


@pytest.mark.parametrize("case", RMCP, ids=_ids(RMCP))
def test_rmcp_vector(case: dict[str, Any]) -> None:
    keyset = _rmcp_keyset(case)
    associated = _b64(case["associated_data"])

    def check() -> ms.Claims:
        claims = ms.verify(keyset, case["token"], bind=associated, policy=UNCAPPED)
        # open_json_with is open_with, then a JSON reading of the payload
        if case["open_with"] == "open_json_with" and isinstance(claims.state, bytes):
            raise ms.InvalidClaims("the payload is not JSON")
        return claims

    result = case["result"]
    if result["accepted"]:
        claims = check()
        if "payload" in result:  # open_with: the payload bytes
            payload = _b64(result["payload"])
            assert claims.state == (payload if isinstance(claims.state, bytes) else _json(payload))
        else:  # open_json_with: the value read
            assert claims.state == result["payload_json"]
    elif result["error"] == "Deserialization":
        assert _refused(check) is ms.InvalidClaims
    else:
        assert _refused(check) is RMCP_ERRORS[result["error"]], result


@pytest.mark.parametrize(
    "case",
    [
        c
        for c in RMCP
        if c["result"]["accepted"]
        and c.get("ttl_ms")
        and "mutation" not in c
        and "sealed_with" not in c  # sealed under another ring than the one that opens it
    ],
    ids=lambda c: c["name"],
)
def test_rmcp_tokens_we_mint_are_the_sdks_byte_for_byte(case: dict[str, Any]) -> None:
    keyset = _rmcp_keyset(case)
    fmt = "mcp-rs2" if case["token"].startswith("rs2.") else "mcp-rs"
    if case.get("sealed_by") == "seal_json_with":
        state: Any = case["payload_json"]
        assert payload_of(state) == _b64(case["payload"])  # serde_json's bytes, keys sorted
    else:
        state = _b64(case["payload"])
    # the moment rmcp sealed it, half a millisecond in (a float of whole milliseconds may fall
    # just short of them)
    now = (case["expiry_ms"] - case["ttl_ms"]) / 1000 + 0.0005
    token = ms.mint(
        keyset,
        state,
        format=fmt,
        bind=_b64(case["associated_data"]),
        ttl=case["ttl_ms"] // 1000,
        now=now,
        policy=UNCAPPED,
    )
    assert token == case["token"]


def test_every_ring_key_is_32_bytes_at_least_as_rmcp_requires() -> None:
    """rmcp 3.2.0 refuses a keyring holding any key under 32 bytes; so does a keyset, for the
    ring's keys and the rs1 keys beside them."""
    from mrtr_state.errors import KeysetInvalid
    from mrtr_state.keys.keyset import Key

    rings: tuple[tuple[str, dict[str, Any]], ...] = (
        ("mcp-rs-v2", {"sdk_kid": "2026-12"}),
        ("mcp-rs-v1", {}),
    )
    for alg, extra in rings:
        with pytest.raises(
            KeysetInvalid, match=r"needs a secret of 32\.\.4096 bytes, this one has 31"
        ):
            ms.Keyset([Key.from_secret(alg, b"k" * 31, **extra)])
        assert ms.Keyset([Key.from_secret(alg, b"k" * 32, **extra)])


def test_the_rs1_signing_key_of_a_ring_opens_rs1_tokens_as_rmcp_adds_it_to_the_fallbacks() -> None:
    """``with_rs1_signing(kid)`` makes a ring sign rs1 under that key and open rs1 under it too:
    the keyset of such a ring holds the key as an mcp-rs-v1 key, which verifies the rs1 tokens
    the ring emitted."""
    case = next(c for c in RMCP if c["name"] == "rs1_emitted_by_ring_with_rs1_signing")
    ring = case["keyring"]
    keyset = _rmcp_keyset(case)
    rs1 = [key for key in keyset if key.alg == "mcp-rs-v1"]
    assert [key.secret for key in rs1] == [_b64(ring["keys"][ring["rs1_signing"]])]
    bind = _b64(case["associated_data"])
    assert ms.verify(keyset, case["token"], bind=bind, policy=UNCAPPED).state == b"plain state"
