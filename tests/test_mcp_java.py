"""The Java SDK's tokens (formats/mcp_java.py, envelopes/mcp_java.py): every vector the SDK
made, verified or refused as it was, and the tokens we mint byte for byte.

Each case is judged from its token and the SDK's rules (``java_leniency``), never from its
name, so another set made the same way is judged the same: a token the SDK accepted is accepted
here with the same state unless it is spelled as the SDK's seal never writes one (then refused
as ``malformed`` or ``invalid_claims``, and counted); a token the SDK refused, or on which its
``open`` threw, is refused. Two more kinds of case cannot be stated here and are counted apart:
a key under 32 bytes (mrtr-state will not hold one) and an opening request with an empty
principal or name (not null, and not a binding mrtr-state takes).
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest

import mrtr_state as ms
from mrtr_state.errors import KeysetInvalid
from mrtr_state.keyset import Key

from .conftest import VECTOR_REPORT
from .sdk_vectors import JAVA, UNCAPPED, _b64, _ids, java_binding, java_keyset, java_leniency

#: What each case came to, for the summary line (filled as the cases run).
OUTCOMES: Counter[str] = Counter()


def _verdict(case: dict[str, Any]) -> str:
    """Our verdict on ``case`` against the SDK's, checked; returns the bucket it counts in."""
    result = case["result"]
    sdk_accepted = bool(result["accepted"])
    keyset = java_keyset(case)
    binding = java_binding(case)
    if keyset is None or binding is None:
        # nothing mrtr-state can be asked: the key is refused at import, or the binding at the
        # command line; either way no token is accepted
        if keyset is None:
            with pytest.raises(KeysetInvalid, match=r"needs a secret of 32\.\.4096 bytes"):
                ms.Keyset([Key.from_secret("mcp-java-v1", _b64(case["key"]))])
        return "unstatable-accepted" if sdk_accepted else "refused"
    now_ms = case.get("verify_now_ms")
    now = None if now_ms is None else now_ms / 1000

    def check() -> ms.Claims:
        return ms.verify(keyset, case["token"], now=now, policy=UNCAPPED, **binding)

    lenient = java_leniency(case["token"])
    if not sdk_accepted:
        with pytest.raises(ms.InvalidToken):
            check()
        return "refused"
    if lenient is not None:
        with pytest.raises((ms.MalformedToken, ms.InvalidClaims)):
            check()
        return "lenient"
    assert check().state == result["state"]
    return "accepted"


@pytest.mark.parametrize("case", JAVA, ids=_ids(JAVA))
def test_java_sdk_vector(case: dict[str, Any]) -> None:
    OUTCOMES[_verdict(case)] += 1


def test_java_vector_report() -> None:
    outcomes = Counter(_verdict(case) for case in JAVA)
    assert sum(outcomes.values()) == len(JAVA)
    # the published set holds one of each kind: the checks above are not vacuous
    assert all(outcomes[kind] for kind in ("accepted", "refused", "lenient")), outcomes
    VECTOR_REPORT.append(
        f"Java SDK requestState vectors: {len(JAVA)} cases, {outcomes['accepted']} accepted as "
        f"the SDK did, {outcomes['refused']} refused as it did, {outcomes['lenient']} the SDK "
        "took only through a lenient decoder or mapper refused, "
        f"{outcomes['unstatable-accepted']} it took under a key or binding mrtr-state does not "
        "take (a key under 32 bytes, an empty principal or name)"
    )


def test_the_lenient_cases_are_the_ones_the_readme_names() -> None:
    """The published set's SDK-only acceptances, each for the reason its README gives."""
    lenient = {
        case["name"]: java_leniency(case["token"])
        for case in JAVA
        if case["result"]["accepted"] and java_leniency(case["token"]) is not None
    }
    assert lenient == {
        "mac_padded": "base64: padding or non-zero trailing bits",
        "mac_nonzero_trailing_bits": "base64: padding or non-zero trailing bits",
        "crafted_payload_padded": "base64: padding or non-zero trailing bits",
        "crafted_duplicate_member_last_wins": "a member repeated",
        "crafted_version_2": "v other than 1",
        "crafted_trailing_garbage": "text after the object",
    }


@pytest.mark.parametrize(
    "case",
    [
        c
        for c in JAVA
        if c["result"]["accepted"]
        and c["sealed_by"] == "seal"
        and "mutation" not in c
        and java_keyset(c) is not None
    ],
    ids=lambda c: c["name"],
)
def test_java_tokens_we_mint_are_the_sdks_byte_for_byte(case: dict[str, Any]) -> None:
    seal = case["seal"]
    binding: dict[str, Any] = {"method": seal["method"], "target": seal["primitive_name"] or ""}
    if seal["principal_extractor"]:
        binding["principal"] = seal["principal"]
    ttl_ms = seal["ttl_ms"] or 600_000
    keyset = java_keyset(case)
    assert keyset is not None
    minted = ms.mint(
        keyset,
        seal["state"],
        format="mcp-java",
        ttl=ttl_ms // 1000,
        now=seal["now_ms"] / 1000,
        policy=UNCAPPED,
        **binding,
    )
    assert minted == case["token"]
    assert json.loads(case["payload_json"])["exp"] == seal["now_ms"] + ttl_ms
