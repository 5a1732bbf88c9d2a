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

import base64
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import mrtr_state as ms
from mrtr_state.errors import KeysetInvalid
from mrtr_state.keys.keyset import Key

from .conftest import VECTOR_REPORT
from .helpers import keys_import, mint, run
from .sdk_vectors import (
    CAPTURE_ENV,
    JAVA,
    UNCAPPED,
    _b64,
    _ids,
    java_binding,
    java_keyset,
    java_leniency,
)

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


# --- the library's edges, and the command line ----------------------------------------------

SECRET = b"\x11" * 32
KEYSET = ms.Keyset([Key.from_secret("mcp-java-v1", SECRET)])
REQUEST: dict[str, Any] = {"method": "tools/call", "target": "deploy"}


def test_exp_is_milliseconds_and_exp_equal_to_now_is_still_good() -> None:
    now = 1_796_428_800.0
    token = ms.mint(KEYSET, "s", format="mcp-java", ttl=600, now=now, **REQUEST)
    exp_ms = 1_796_429_400_000
    assert json.loads(_b64(token.split(".")[0]))["exp"] == exp_ms
    assert ms.verify(KEYSET, token, now=exp_ms / 1000, **REQUEST).exp == exp_ms / 1000
    with pytest.raises(ms.ExpiredToken, match=r"^expired 0\.001 s ago$"):
        ms.verify(KEYSET, token, now=(exp_ms + 1) / 1000, **REQUEST)


def test_the_empty_target_is_the_sdks_null_primitive_and_an_empty_name_matches_nothing() -> None:
    token = ms.mint(KEYSET, "s", format="mcp-java", method="tools/call", target="")
    assert json.loads(_b64(token.split(".")[0]))["n"] is None
    assert ms.verify(KEYSET, token, method="tools/call", target="").state == "s"
    with pytest.raises(ms.RequestMismatch, match="target"):
        ms.verify(KEYSET, token, method="tools/call", target="deploy")


def test_what_mcp_java_cannot_carry_is_refused_at_mint() -> None:
    for stated, message in (
        ({}, "mcp-java tokens bind a request: give method and target"),
        ({**REQUEST, "arguments": {}}, "mcp-java tokens bind method and target, not arguments"),
        ({**REQUEST, "audience": "fleet"}, "mcp-java tokens cannot carry an audience"),
    ):
        with pytest.raises(ValueError, match=message):
            ms.mint(KEYSET, "s", format="mcp-java", **stated)
    with pytest.raises(ValueError, match="mcp-java state is a string"):
        ms.mint(KEYSET, {"step": 2}, format="mcp-java", **REQUEST)
    with pytest.raises(ValueError, match="lone surrogate"):
        ms.mint(KEYSET, "\ud800", format="mcp-java", **REQUEST)


def test_keys_import_refuses_a_key_under_32_bytes(tmp_path: Path) -> None:
    ks = tmp_path / "keyset.json"
    refused = keys_import(ks, "mcp-java-v1", b"short", code=2)
    assert "mcp-java-v1 needs 32..4096 secret bytes;" in refused.stderr
    assert "holds 5" in refused.stderr
    assert not ks.exists()
    keys_import(ks, "mcp-java-v1", SECRET)
    assert ms.Keyset.load(ks).primary("mcp-java-v1").kid == KEYSET.primary("mcp-java-v1").kid


def test_mint_verify_and_inspect_through_the_cli(tmp_path: Path) -> None:
    ks = tmp_path / "keyset.json"
    keys_import(ks, "mcp-java-v1", SECRET)
    flags = ["--method", "tools/call", "--target", "deploy", "--principal", "alice"]
    token = mint(ks, "--format", "mcp-java", "--state", '"step-2"', *flags)
    payload = json.loads(_b64(token.split(".")[0]))
    assert list(payload) == ["v", "s", "exp", "p", "m", "n"]
    assert payload["p"] == "alice"  # in clear
    verified = run("--keyset", str(ks), "verify", *flags, token)
    assert verified.stdout == '"step-2"\n'
    # the principal, both ways, and the request
    run("--keyset", str(ks), "verify", *flags[:4], token, code=4)
    run("--keyset", str(ks), "verify", *flags[:-1], "bob", token, code=4)
    run("--keyset", str(ks), "verify", "--principal", "alice", token, code=4)
    inspected = run("--keyset", str(ks), "inspect", token).stdout
    assert "readable by anyone holding the token" in inspected
    assert '"p": "alice"' in inspected and "VERIFIED" in inspected
    shown = json.loads(run("--keyset", str(ks), "inspect", "--json", token).stdout)
    assert shown["format"] == "mcp-java" and shown["claims"]["exp_ms"] == payload["exp"]
    # a token the SDK sealed, verified through the command line
    sdk = next(case for case in JAVA if case["name"] == "tools_call_with_principal")
    assert sdk["key"] == _b64url(SECRET)
    got = run("--keyset", str(ks), "verify", *flags, sdk["token"], env=CAPTURE_ENV)
    assert got.stdout == '"step=2;env=prod"\n'


def test_without_a_keyset_inspect_names_the_format_whose_body_it_is(tmp_path: Path) -> None:
    """PHP's and Java's tokens share a shape; without a key, the body's state member tells
    them apart for the reader, and a Java expiry stays in milliseconds (``exp_ms``) rather
    than being read as seconds some 50,000 years out (found by a review)."""
    ks = tmp_path / "keyset.json"
    keys_import(ks, "mcp-java-v1", SECRET)
    keys_import(ks, "mcp-php-v1", bytes(range(32)))
    java = mint(
        ks, "--format", "mcp-java", "--state", '"s"', "--method", "tools/call", "--target", "deploy"
    )
    php = mint(ks, "--format", "mcp-php", "--state", '{"step": 2}')
    shown = json.loads(run("inspect", "--json", java).stdout)
    assert shown["format"] == "mcp-java" and shown["verified"] is False
    assert "exp" not in shown["claims"] and shown["claims"]["exp_ms"] > 10**12
    assert shown["expires_at"] is None and shown["state"] == "s"
    text = run("inspect", java).stdout
    assert "mcp-java tokens carry no key id" in text and "expires" not in text
    assert json.loads(run("inspect", "--json", php).stdout)["format"] == "mcp-php"
    assert "(shown as mcp-java: its body holds that format's state member" in text
    # with the keyset, the key that opened it names the format, whichever the body suggested
    opened = json.loads(run("--keyset", str(ks), "inspect", "--json", java).stdout)
    assert opened["verified"] is True and opened["format"] == "mcp-java"
    assert any(note.startswith("mcp-java: opened by its key ") for note in opened["notes"])


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _java_token(secret: bytes, payload: bytes) -> str:
    """A token as the SDK's seal lays it out, around any payload: base64url of the payload, a
    dot, base64url of the HMAC-SHA256 of that first segment's text."""
    import hashlib
    import hmac

    body = _b64url(payload)
    return body + "." + _b64url(hmac.digest(secret, body.encode(), hashlib.sha256))


@pytest.mark.parametrize("exp", [2**63, 10**30, -(2**63) - 1])
def test_an_exp_no_java_long_holds_is_refused_even_without_a_ttl_cap(exp: int) -> None:
    """The SDK reads exp into a `long`: its mapper refuses a number outside it, so even a
    verifier that caps no lifetime refuses the token (found by a review: 2**63 was accepted
    with ttl_cap none)."""
    secret = b"\x42" * 32
    keyset = ms.Keyset([Key.from_secret("mcp-java-v1", secret)])
    payload = f'{{"v":1,"s":"x","exp":{exp},"p":null,"m":"tools/call","n":"t"}}'.encode()
    with pytest.raises(ms.InvalidClaims, match="a Java long"):
        ms.verify(
            keyset,
            _java_token(secret, payload),
            method="tools/call",
            target="t",
            policy=ms.Policy(ttl_cap=None),
        )
    longest = payload.replace(str(exp).encode(), str(2**63 - 1).encode())
    claims = ms.verify(
        keyset,
        _java_token(secret, longest),
        method="tools/call",
        target="t",
        policy=ms.Policy(ttl_cap=None),
    )
    assert claims.state == "x"


def test_a_malformed_java_token_is_refused_naming_mcp_java(tmp_path: Path) -> None:
    """The PHP and Java SDKs share a shape: a Java token whose MAC is misspelt was refused as an
    "mcp-php MAC" (the first format of the shape, which the keyset holds no key of). The
    format whose keys would read it names it; with no key to tell, the shape does."""
    ks = tmp_path / "keyset.json"
    keys_import(ks, "mcp-java-v1", SECRET)
    request = ("--method", "tools/call", "--target", "deploy")
    token = mint(ks, "--format", "mcp-java", "--state", '"s"', *request)
    padded = token + "="  # Java's decoder takes padding; mrtr-state keeps one spelling
    line = "error: mcp-java MAC: base64url text holds a character outside A-Z a-z 0-9 - _\n"
    for only in ((), ("--format", "mcp-java")):
        refused = run("--keyset", str(ks), "verify", *only, *request, padded, code=1)
        assert refused.stderr == line
        answer = json.loads(
            run("--keyset", str(ks), "verify", "--json", *request, padded, code=1).stdout
        )
        assert answer["error"]["code"] == "malformed"
    assert run("--keyset", str(ks), "inspect", padded, code=1).stderr == line
    shape_line = line.replace("mcp-java MAC", "mcp-php or mcp-java MAC")
    unkeyed = tmp_path / "php-only.json"
    keys_import(unkeyed, "mcp-php-v1", bytes(range(32)))
    keys_import(unkeyed, "mcp-java-v1", SECRET[::-1])
    assert run("--keyset", str(unkeyed), "inspect", padded, code=1).stderr == shape_line
    with pytest.raises(ms.MalformedToken, match=r"^mcp-php or mcp-java MAC: "):
        ms.inspect(padded)


def test_a_configured_audience_is_refused_for_mcp_java_saying_how_to_mint(
    tmp_path: Path,
) -> None:
    ks = tmp_path / "keyset.json"
    keys_import(ks, "mcp-java-v1", SECRET)
    command = ["--keyset", str(ks), "mint", "--format", "mcp-java", "--state", '"s"']
    command += ["--method", "tools/call", "--target", "deploy"]
    library = (
        "mcp-java tokens cannot carry an audience (they bind a principal, a method and a target, "
        "as the Java SDK does): state none when you mint or verify them"
    )
    with pytest.raises(ValueError, match=r"^" + re.escape(library) + "$"):
        ms.mint(KEYSET, "s", format="mcp-java", audience="fleet", **REQUEST)
    flagged = run(*command, "--audience", "fleet", code=2)
    assert flagged.stderr.splitlines()[-1] == f"error: {library}"
    from_env = run(*command, env={"MRTR_STATE_AUDIENCE": "fleet"}, code=2)
    assert from_env.stderr.splitlines()[-1] == (
        "error: mcp-java tokens cannot carry an audience, and MRTR_STATE_AUDIENCE sets one "
        "('fleet'): mint them where none is set, e.g. env -u MRTR_STATE_AUDIENCE mrtr-state "
        "mint ..."
    )
    config = tmp_path / "mrtr-state.toml"
    config.write_text('audience = "fleet"\n')
    config.chmod(0o600)
    from_file = run(*command, "--config", str(config), "--json", code=2)
    message = (
        f"mcp-java tokens cannot carry an audience, and config file {config} sets one "
        "('fleet'): mint them where none is set, e.g. mrtr-state --config FILE mint ..., "
        "naming a config file that sets no audience"
    )
    assert from_file.stderr.splitlines()[-1] == f"error: {message}"
    assert json.loads(from_file.stdout)["error"]["message"] == message
    # the formats that carry one take the configured audience as before
    run("--keyset", str(ks), "keys", "add", "--alg", "A256GCM", env={"MRTR_STATE_AUDIENCE": "x"})
    run("--keyset", str(ks), "mint", "--state", "1", env={"MRTR_STATE_AUDIENCE": "fleet"})
