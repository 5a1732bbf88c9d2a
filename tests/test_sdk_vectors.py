"""The Ruby, Rust (rmcp rs1 and the PR #1128 keyring, rs2) and PHP SDKs' requestState tokens.

Every case of ``tests/vectors/published/{ruby-sdk,rust-rmcp,php-sdk}`` was made by running the
SDK's own code, with its own verdict. Each verifies here, or is refused, as the SDK did, with the
bindings the case gives; the error the SDK named maps to ours. The one deliberate difference:
where an SDK's decoder is lenient (padding, the standard alphabet, non-zero trailing bits),
mrtr-state keeps one spelling per token and refuses (:data:`LENIENT`, said in the docs).

The SDKs cap no lifetime and the valid vectors live ten years, so the vectors run under a
verifier whose ``ttl_cap`` is lifted (``Policy(ttl_cap=None)``); the default cap refusing them,
by name, is a test of its own.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

import mrtr_state as ms
from mrtr_state._entropy import Fresh
from mrtr_state.envelopes.mcp_rb import canonical_json, ruby_arguments_digest, ruby_float
from mrtr_state.envelopes.mcp_rs import payload_of
from mrtr_state.keyset import Key
from mrtr_state.registry import format_named

from .conftest import VECTOR_REPORT, shared_vector
from .helpers import run

UNCAPPED = ms.Policy(ttl_cap=None)


def _b64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _cases(*parts: str) -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = json.loads(shared_vector(*parts).read_text())["cases"]
    return cases


def _ids(cases: list[dict[str, Any]]) -> list[str]:
    return [case["name"] for case in cases]


def _json(data: bytes) -> Any:
    return json.loads(data)


def _refused(call: Any) -> type[ms.InvalidToken] | None:
    try:
        call()
    except ms.InvalidToken as err:
        return type(err)
    return None


#: Tokens an SDK accepts only because its base64 decoder is lenient: refused here, as malformed.
LENIENT = {
    ("ruby", "padding_added"),
    ("ruby", "standard_alphabet"),
    ("php", "mac_padding_added"),
    ("php", "mac_trailing_bits_set"),
    ("php", "mac_standard_alphabet"),
    ("php", "crafted_body_padded_valid_mac"),
    ("php", "crafted_body_standard_alphabet_valid_mac"),
}
#: Tokens both refuse, mrtr-state at decoding: the truncated MAC segment ends on non-zero
#: trailing bits, which the SDK's lenient decoder takes and its MAC check then refuses.
STRICTER = {("php", "mac_truncated_4_chars")}


# --- Ruby -----------------------------------------------------------------------------------

RUBY = _cases("ruby-sdk", "vectors.json")
#: The Ruby SDK's messages -> our refusals. Its "expired" for a float exp is our "not the SDK's
#: envelope" (an integer exp is part of the shape): refused either way.
RUBY_ERRORS: dict[str, tuple[type[ms.InvalidToken], ...]] = {
    "authentication failed": (ms.BadSignature,),
    "malformed token": (ms.MalformedToken,),
    "malformed claims": (ms.InvalidClaims,),
    "unsupported version": (ms.InvalidClaims,),
    "missing state": (ms.InvalidClaims,),
    "expired": (ms.ExpiredToken, ms.InvalidClaims),
    "method mismatch": (ms.RequestMismatch,),
    "target mismatch": (ms.RequestMismatch,),
    "arguments mismatch": (ms.RequestMismatch,),
    "audience mismatch": (ms.AudienceMismatch,),
}


def _ruby_keyset(case: dict[str, Any]) -> ms.Keyset:
    return ms.Keyset([Key.from_secret("mcp-rb-v1", _b64(case["key"]))])


def _ruby_arguments(case: dict[str, Any]) -> Any:
    # the JSON text, not the parsed copy in the file: 1 and 1.0 digest differently
    text = case.get("arguments_json")
    return None if text is None else json.loads(text)


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
    binding = ms.binding.binding_of(
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


# --- rmcp -----------------------------------------------------------------------------------

RMCP = _cases("rust-rmcp", "vectors.json") + _cases("rust-rmcp", "vectors-pr1128.json")
#: rmcp's RequestStateError variants -> our refusals.
RMCP_ERRORS: dict[str, type[ms.InvalidToken]] = {
    "IntegrityCheckFailed": ms.BadSignature,
    "InvalidEncoding": ms.MalformedToken,
    "MalformedFormat": ms.MalformedToken,
    "InvalidKeyId": ms.MalformedToken,
    "UnknownKeyId": ms.UnknownKey,
    "Expired": ms.ExpiredToken,
}


def _rmcp_keyset(case: dict[str, Any]) -> ms.Keyset:
    """A single key is an mcp-rs-v1 key; a ring's keys are mcp-rs-v2 keys under their rmcp ids,
    and the keys it opens (or signs) rs1 tokens with are mcp-rs-v1 keys as well."""
    if "key" in case:
        return ms.Keyset([Key.from_secret("mcp-rs-v1", _b64(case["key"]))])
    ring = case["keyring"]
    keys = [
        Key.from_secret(
            "mcp-rs-v2",
            _b64(secret),
            sdk_kid=kid,
            status="primary" if kid == ring["active_kid"] else "active",
        )
        for kid, secret in ring["keys"].items()
    ]
    rs1 = list(ring.get("rs1_fallbacks", []))
    if "rs1_signing" in ring:
        rs1.append(ring["rs1_signing"])
    for n, kid in enumerate(dict.fromkeys(rs1)):
        status = "primary" if n == 0 else "active"
        keys.append(Key.from_secret("mcp-rs-v1", _b64(ring["keys"][kid]), status=status))
    return ms.Keyset(keys)


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


# --- PHP ------------------------------------------------------------------------------------

PHP = _cases("php-sdk", "vectors.json")
PHP_ERRORS: dict[str, tuple[type[ms.InvalidToken], ...]] = {
    "mac": (ms.BadSignature,),
    "malformed": (ms.MalformedToken, ms.InvalidClaims),
    "expired": (ms.ExpiredToken,),
}


def _php_keyset(case: dict[str, Any]) -> ms.Keyset:
    return ms.Keyset([Key.from_secret("mcp-php-v1", _b64(case["key"]))])


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


# --- lifetimes beyond the SDKs, and the report ------------------------------------------------


def test_the_default_cap_refuses_long_lived_and_never_expiring_sdk_tokens_by_name() -> None:
    ruby = RUBY[0]
    with pytest.raises(ms.InvalidClaims, match="ttl_cap"):
        ms.verify(
            _ruby_keyset(ruby),
            ruby["token"],
            method=ruby["method"],
            target=ruby["target"],
            arguments=_ruby_arguments(ruby),
        )
    never = next(c for c in RMCP if c["name"] == "no_ad_no_ttl_expiry_zero")
    with pytest.raises(ms.InvalidClaims, match="never expires"):
        ms.verify(_rmcp_keyset(never), never["token"])
    assert ms.verify(_rmcp_keyset(never), never["token"], policy=UNCAPPED).exp is None
    php = PHP[0]
    with pytest.raises(ms.InvalidClaims, match="ttl_cap"):
        ms.verify(_php_keyset(php), php["token"])


def test_vector_report() -> None:
    for name, cases in (("Ruby SDK", RUBY), ("rmcp", RMCP), ("PHP SDK", PHP)):
        accepted = sum(1 for c in cases if c["result"]["accepted"])
        lenient = sum(1 for c in cases if (name.split()[0].lower(), c["name"]) in LENIENT)
        VECTOR_REPORT.append(
            f"{name} requestState vectors: {len(cases)} cases, {accepted - lenient} accepted as "
            f"the SDK did, {len(cases) - accepted} refused as it did, {lenient} the SDK took "
            "only through a lenient decoder refused"
        )
    assert Path(shared_vector("ruby-sdk", "README.md")).exists()


# --- the CLI --------------------------------------------------------------------------------


def _import(ks: Path, alg: str, secret: bytes, *extra: str, code: int = 0) -> Any:
    secret_file = ks.parent / f"{alg}.bin"
    secret_file.write_bytes(secret)
    command = ("keys", "import", "--alg", alg, "--secret-file", str(secret_file), *extra)
    return run("--keyset", str(ks), *command, code=code)


def test_captured_sdk_tokens_through_the_cli(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # no keyset at the default path: inspect works without one
    ks = tmp_path / "keyset.json"
    k = ("--keyset", str(ks))
    ruby = RUBY[0]
    _import(ks, "mcp-rb-v1", _b64(ruby["key"]))
    rb = ["--method", ruby["method"], "--target", ruby["target"]]
    rb += ["--arguments", ruby["arguments_json"]]
    # ten years ahead: over the default cap, by name, until the cap is lifted for the run
    refused = run(*k, "verify", *rb, ruby["token"], code=1)
    assert "ttl_cap" in refused.stderr
    assert json.loads(run(*k, "verify", "--ttl-cap", "none", *rb, ruby["token"]).stdout) == "step-1"
    assert (
        "ttl_cap of 2592000 s"
        in run(*k, "verify", "--ttl-cap", "30d", *rb, ruby["token"], code=1).stderr
    )
    shown = json.loads(run(*k, "inspect", "--json", "--ttl-cap", "none", ruby["token"]).stdout)
    assert shown["format"] == "mcp-rb" and shown["verified"] is True
    assert any("opened by its key" in note for note in shown["notes"])
    unknown = json.loads(run("inspect", "--json", ruby["token"]).stdout)
    assert any("cannot tell" in note for note in unknown["notes"])

    ring = next(c for c in RMCP if c["name"] == "rs2_single_key_ring")
    ((kid, secret),) = ring["keyring"]["keys"].items()
    imported = _import(ks, "mcp-rs-v2", _b64(secret), "--kid", kid, "--json")
    assert json.loads(imported.stdout)["sdk_kid"] == kid
    assert f"rmcp:'{kid}'" in run(*k, "keys", "list").stdout
    bind = ring["associated_data_utf8"]
    out = run(*k, "verify", "--ttl-cap", "none", "--bind", bind, ring["token"])
    assert out.stdout.strip() == ring["payload"]  # not JSON: base64url, and said so
    assert "not JSON" in out.stderr
    assert "bind" in run(*k, "verify", "--ttl-cap", "none", ring["token"], code=1).stderr
    # a binding the format cannot carry: refused at mint (a usage error naming the format)
    php = PHP[0]
    _import(ks, "mcp-php-v1", _b64(php["key"]))
    assert "mcp-php" in run(*k, "mint", "--format", "mcp-php", "-p", "alice", code=2).stderr
    assert json.loads(run(*k, "verify", "--ttl-cap", "none", php["token"]).stdout) == php["data"]
    # rotation needs a finite cap
    config = tmp_path / "mrtr-state.toml"
    config.write_text('ttl_cap = "none"\n')
    config.chmod(0o600)
    assert "finite" in run(*k, "--config", str(config), "rotate", code=6).stderr


def test_keys_import_kid_is_for_rmcp_keyring_keys_only(tmp_path: Path) -> None:
    ks = tmp_path / "keyset.json"
    assert "--kid" in _import(ks, "mcp-rs-v2", b"k" * 32, code=2).stderr
    assert "drop --kid" in _import(ks, "mcp-rs-v1", b"k" * 32, "--kid", "x", code=2).stderr
    assert "1-255" in _import(ks, "mcp-rs-v2", b"k" * 32, "--kid", "x" * 256, code=2).stderr
    assert not ks.exists()  # nothing written by a refused import


def test_rotation_steps_sdk_keys_and_gives_new_rmcp_ring_keys_an_id() -> None:
    from mrtr_state import lifecycle as life

    start = [
        Key.from_secret("mcp-rs-v2", b"k" * 32, sdk_kid="2026-12", now=0),
        Key.from_secret("mcp-rb-v1", b"r" * 32, now=0),
        Key.from_secret("mcp-php-v1", b"h" * 32, now=0),
    ]
    keyset = ms.Keyset(start)
    day = 86400
    moments = (40 * day, 40 * day + 4000, 40 * day + 9000)
    for moment in moments:
        keyset, _changes = life.rotate(keyset, now=moment, propagation=3600, retention=3660)
    primaries = {key.alg: key for key in keyset if key.status == "primary"}
    assert set(primaries) == {"mcp-rs-v2", "mcp-rb-v1", "mcp-php-v1"}
    assert all(key.status == "retired" for key in keyset if key in start or key.since.get("active"))
    ring_key = primaries["mcp-rs-v2"]
    assert ring_key.sdk_kid is not None and ring_key.sdk_kid.startswith("mrtr-")
    for fmt in ("mcp-rs2", "mcp-php"):
        token = ms.mint(keyset, {"a": 1}, format=fmt)
        assert ms.verify(keyset, token).state == {"a": 1}
    # the old ring key is retired: its tokens are refused by name
    old = ms.mint(ms.Keyset(start[:1]), {"a": 1}, format="mcp-rs2")
    with pytest.raises(ms.KeyRetired):
        ms.verify(keyset, old)
