"""The tokens API beyond the per-format contract: defaults, request ids, time, errors."""

from __future__ import annotations

import copy
import pickle

import pytest

import mrtr_state as ms
from mrtr_state._encoding import b64url_decode, b64url_encode

from .conftest import NOW


def test_issue_reports_kid_format_and_expiry(keyset: ms.Keyset) -> None:
    minted = ms.issue(keyset, 1, now=NOW, ttl=30)
    assert minted.kid == keyset.primary("A256GCM").kid
    assert (minted.format, minted.expires_at) == ("aead", NOW + 30)
    assert b64url_decode(minted.token[4:])[:4].hex() == minted.kid


def test_every_token_has_a_fresh_nonce_and_jti(keyset: ms.Keyset) -> None:
    tokens = [ms.mint(keyset, "same", now=NOW) for _ in range(50)]
    nonces = {b64url_decode(t[4:])[4:16] for t in tokens}
    jtis = {ms.verify(keyset, t, now=NOW).jti for t in tokens}
    assert len(nonces) == len(jtis) == 50


def test_non_canonical_base64_of_a_valid_token_is_refused(keyset: ms.Keyset) -> None:
    token = ms.mint(keyset, "x", now=NOW)
    body = token[4:]
    for variant in (
        body + "=" * (-len(body) % 4 or 4),
        body.replace("-", "+"),
        body.replace("_", "/"),
        body[:10] + "\n" + body[10:],
    ):
        if variant != body:
            with pytest.raises(ms.MalformedToken):
                ms.verify(keyset, "ms1." + variant, now=NOW)


# --- time ----------------------------------------------------------------------------------


def test_a_nan_clock_fails_closed(keyset: ms.Keyset) -> None:
    token = ms.mint(keyset, "x", now=NOW)
    with pytest.raises(ms.TimeWindowError):
        ms.verify(keyset, token, now=float("nan"))


def test_lifetime_over_the_cap_is_refused_at_mint_and_verify(keyset: ms.Keyset) -> None:
    with pytest.raises(ValueError, match="ttl must be"):
        ms.mint(keyset, "x", ttl=3601, now=NOW)
    with pytest.raises(ValueError, match="ttl must be"):
        ms.mint(keyset, "x", ttl=0, now=NOW)
    long_lived = ms.mint(keyset, "x", ttl=7200, now=NOW, policy=ms.Policy(ttl_cap=7200))
    with pytest.raises(ms.InvalidClaims, match="minted under a higher cap"):
        ms.verify(keyset, long_lived, now=NOW)
    assert ms.verify(keyset, long_lived, now=NOW, policy=ms.Policy(ttl_cap=7200)).state == "x"


# --- binding -------------------------------------------------------------------------------


def test_messages_name_the_binding(keyset: ms.Keyset) -> None:
    token = ms.mint(keyset, "x", now=NOW, principal="alice")
    with pytest.raises(ms.PrincipalMismatch, match=r"^principal mismatch$"):
        ms.verify(keyset, token, now=NOW, principal="bob")


def test_request_fingerprint_binds_method_target_and_arguments(keyset: ms.Keyset) -> None:
    rid = ms.request_id(method="tools/call", target="deploy", arguments={"env": "prod"})
    token = ms.mint(keyset, "x", request_id=rid, now=NOW)
    same = ms.request_id(method="tools/call", target="deploy", arguments={"env": "prod"})
    ms.verify(keyset, token, request_id=same, now=NOW)
    for other in (
        ms.request_id(method="tools/call", target="deploy", arguments={"env": "dev"}),
        ms.request_id(method="tools/call", target="destroy", arguments={"env": "prod"}),
        ms.request_id(method="prompts/get", target="deploy", arguments={"env": "prod"}),
    ):
        with pytest.raises(ms.RequestMismatch):
            ms.verify(keyset, token, request_id=other, now=NOW)


def test_request_id_helper() -> None:
    assert ms.request_id("req-42") == "req-42"
    fingerprint = ms.request_id(method="m", target="t", arguments={"b": 1, "a": "é"})
    assert fingerprint.startswith("mcp1:")
    assert fingerprint == ms.request_id(method="m", target="t", arguments={"a": "é", "b": 1})
    with pytest.raises(ValueError, match="either"):
        ms.request_id("x", method="m")
    with pytest.raises(ValueError, match="method and a target"):
        ms.request_id(method="m")
    with pytest.raises(ValueError, match="non-empty"):
        ms.request_id("")


def test_arguments_digest_escapes_non_ascii_like_python_json() -> None:
    import hashlib

    expected = hashlib.sha256(b'{"a":"\\u00e9","b":[1,2]}').digest()[:16]
    assert ms.arguments_digest({"b": [1, 2], "a": "é"}) == b64url_encode(expected)


# --- keys and formats ----------------------------------------------------------------------


def test_a_key_id_moved_onto_another_key_fails_the_tag(keyset: ms.Keyset) -> None:
    token = ms.mint(keyset, "x", now=NOW)
    raw = b64url_decode(token[4:])
    impostor = ms.Key(kid=raw[:4].hex(), alg="A256GCM", secret=bytes(32))
    with pytest.raises(ms.BadSignature):
        ms.verify(ms.Keyset([impostor]), token, now=NOW)


def test_asking_for_another_format_is_refused(keyset: ms.Keyset) -> None:
    token = ms.mint(keyset, "x", now=NOW)
    assert ms.verify(keyset, token, format="aead", now=NOW).state == "x"
    with pytest.raises(ValueError, match="unknown format"):
        ms.verify(keyset, token, format="nope", now=NOW)
    with pytest.raises(ms.MalformedToken, match="not a requestState token"):
        ms.verify(keyset, "hello", now=NOW)


def test_oversized_input_is_refused_before_decoding(keyset: ms.Keyset) -> None:
    with pytest.raises(ms.OversizedToken, match="over the 8192-byte size cap"):
        ms.verify(keyset, "ms1." + "A" * 8189, now=NOW)
    with pytest.raises(ms.OversizedToken):
        ms.verify(keyset, b"ms1." + b"\xff" * 10_000_000, now=NOW)
    small = ms.Policy(max_size=100)
    with pytest.raises(ValueError, match="over the 100-byte size cap"):
        ms.mint(keyset, "x" * 100, now=NOW, policy=small)
    with pytest.raises(ms.OversizedToken):
        ms.verify(keyset, ms.mint(keyset, "x" * 100, now=NOW), now=NOW, policy=small)


def test_bytes_tokens_are_accepted_and_non_ascii_refused(keyset: ms.Keyset) -> None:
    token = ms.mint(keyset, "x", now=NOW)
    assert ms.verify(keyset, token.encode(), now=NOW).state == "x"
    with pytest.raises(ms.MalformedToken, match="non-ASCII"):
        ms.verify(keyset, token[:-1] + "é", now=NOW)
    with pytest.raises(ms.MalformedToken, match="non-ASCII"):
        ms.verify(keyset, token.encode()[:-1] + b"\xff", now=NOW)


def test_minting_needs_a_primary_key() -> None:
    with pytest.raises(ms.NoPrimaryKey, match="no primary A256GCM key"):
        ms.mint(ms.Keyset([]), "x")


def test_state_that_cannot_be_written_is_refused_at_mint(keyset: ms.Keyset) -> None:
    for bad in (float("nan"), {1, 2}, "\ud800"):
        with pytest.raises(ValueError, match=r"."):
            ms.mint(keyset, bad, now=NOW)


# --- inspect -------------------------------------------------------------------------------


def test_inspect_refuses_what_is_not_a_token() -> None:
    with pytest.raises(ms.MalformedToken):
        ms.inspect("ms1.!!!")
    with pytest.raises(ms.OversizedToken):
        ms.inspect("x" * 10_000)


# --- the error table -----------------------------------------------------------------------


def test_every_error_has_a_stable_code_and_exit_code() -> None:
    table = {
        ms.MalformedToken: ("malformed", 1),
        ms.OversizedToken: ("oversized", 1),
        ms.WrongFormat: ("wrong_format", 1),
        ms.UnknownKey: ("unknown_key", 1),
        ms.KeyRetired: ("key_retired", 1),
        ms.BadSignature: ("bad_signature", 1),
        ms.InvalidClaims: ("invalid_claims", 1),
        ms.ExpiredToken: ("expired", 3),
        ms.NotYetValid: ("not_yet_valid", 3),
        ms.PrincipalMismatch: ("principal_mismatch", 4),
        ms.RequestMismatch: ("request_mismatch", 4),
        ms.AudienceMismatch: ("audience_mismatch", 4),
        ms.Replayed: ("replayed", 5),
        ms.KeysetNotFound: ("keyset_not_found", 6),
        ms.KeysetInvalid: ("keyset_invalid", 6),
        ms.KeysetPermissions: ("keyset_permissions", 6),
        ms.ConfigError: ("config_error", 6),
        ms.NoPrimaryKey: ("no_primary_key", 6),
    }
    for cls, (code, exit_code) in table.items():
        assert (cls.code, cls.exit_code) == (code, exit_code)
        assert cls.public_message == ms.PUBLIC_MESSAGE
    codes = [cls.code for cls in table]
    assert len(set(codes)) == len(codes)


def test_a_request_is_bound_one_way_only(keyset: ms.Keyset) -> None:
    with pytest.raises(ValueError, match="not both"):
        ms.mint(keyset, 1, request_id="r", method="tools/call", target="t")
    with pytest.raises(ValueError, match="not both"):
        ms.verify(keyset, ms.mint(keyset, 1), request_id="r", method="tools/call", target="t")
    with pytest.raises(ValueError, match="aead tokens cannot carry a bind value"):
        ms.mint(keyset, 1, bind="x")


def test_a_binding_cannot_be_changed_once_made() -> None:
    """A value set afterwards would escape the checks and the kinds they record: a principal
    set on an empty Binding would be dropped by every format that binds none."""
    keyset = ms.Keyset.generate(now=NOW)
    bound = ms.Binding()
    with pytest.raises(AttributeError, match="cannot be changed"):
        bound.principal = "alice"
    with pytest.raises(AttributeError, match="cannot be changed"):
        del bound.kinds
    again = pickle.loads(pickle.dumps(ms.Binding(principal="alice", request_id="r")))
    token = ms.mint(keyset, 1, now=NOW, principal="alice", request_id="r")
    assert ms.verify(keyset, token, now=NOW, expect=again).state == 1
    assert copy.deepcopy(again).kinds == again.kinds


def test_the_inspect_binding_is_never_a_callers() -> None:
    from mrtr_state.tokens.binding import UNCHECKED

    keyset = ms.Keyset.generate(now=NOW)
    token = ms.mint(keyset, 1, now=NOW, principal="alice")
    with pytest.raises(ValueError, match="inspect's binding"):
        ms.verify(keyset, token, now=NOW, expect=UNCHECKED)
    with pytest.raises(ValueError, match="inspect's binding"):
        ms.mint(keyset, 1, now=NOW, binding=UNCHECKED)


def test_an_empty_target_is_a_request_mismatch_whatever_else_the_token_binds() -> None:
    """mrtr-state's formats never bind an empty target (minting refuses it), so a token checked
    against one is bound to another request: refused as such before or after the principal."""
    keyset = ms.Keyset.generate(now=NOW)
    with pytest.raises(ValueError, match="non-empty target"):
        ms.mint(keyset, 1, now=NOW, method="tools/call", target="")
    for principal in (None, "alice"):
        token = ms.mint(keyset, 1, now=NOW, principal=principal, method="tools/call", target="x")
        with pytest.raises(ms.RequestMismatch):
            ms.verify(keyset, token, now=NOW, principal=principal, method="tools/call", target="")
