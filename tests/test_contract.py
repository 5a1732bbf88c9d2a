"""The library contract, run over every format: the same promises, whatever the wire looks like."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mrtr_state as ms
from mrtr_state._encoding import b64url_encode
from mrtr_state.keys.keyset import ALGORITHMS
from mrtr_state.tokens.registry import OWN_FORMAT_NAMES, format_named

from .conftest import NOW
from .test_encoding import json_values

BOUND: dict[str, Any] = {"principal": "alice", "request_id": "req-42", "audience": "fleet"}
FIXTURE_CHECKS = [HealthCheck.function_scoped_fixture]


@pytest.fixture(params=OWN_FORMAT_NAMES)
def fmt(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


def forge(keyset: ms.Keyset, plaintext: bytes | str, fmt: str) -> str:
    """A token with a valid tag or MAC around arbitrary plaintext: the test holds the key."""
    data = plaintext.encode() if isinstance(plaintext, str) else plaintext
    format_ = format_named(fmt)
    return format_.seal(keyset.primary(format_.alg), data)


def claims_json(**overrides: Any) -> str:
    claims: dict[str, Any] = {"iat": NOW, "exp": NOW + 300, "jti": "j", "st": None}
    claims.update(overrides)
    return json.dumps({k: v for k, v in claims.items() if v is not ...}, separators=(",", ":"))


def mutations(token: str) -> list[str]:
    """The token with each character in turn replaced by another base64url character."""
    swaps = {c: ("B" if c == "A" else "A") for c in token}
    swaps["."] = "_"
    return [token[:i] + swaps[token[i]] + token[i + 1 :] for i in range(len(token))]


def test_mint_and_verify_round_trip(keyset: ms.Keyset, fmt: str) -> None:
    minted = ms.issue(keyset, {"step": 2}, ttl=60, now=NOW, format=fmt, **BOUND)
    assert ms.inspect(minted.token).format == fmt == minted.format
    assert minted.kid == keyset.primary(format_named(fmt).alg).kid
    claims = ms.verify(keyset, minted.token, now=NOW + 59, **BOUND)
    assert claims.state == {"step": 2}
    assert (claims.rid, claims.aud, claims.iat, claims.exp) == ("req-42", "fleet", NOW, NOW + 60)
    assert claims.sub == "alice" if format_named(fmt).confidential else claims.sub != "alice"


@settings(max_examples=60, suppress_health_check=FIXTURE_CHECKS)
@given(state=json_values)
def test_any_json_state_round_trips(keyset: ms.Keyset, fmt: str, state: Any) -> None:
    try:
        token = ms.mint(keyset, state, now=NOW, format=fmt, **BOUND)
    except ValueError:
        return  # refused at mint (lone surrogate): never a token we could not read back
    assert ms.verify(keyset, token, now=NOW, format=fmt, **BOUND).state == state


def test_a_changed_character_anywhere_is_refused(keyset: ms.Keyset, fmt: str) -> None:
    token = ms.mint(keyset, {"k": "v"}, now=NOW, format=fmt, **BOUND)
    for mutated in mutations(token):
        with pytest.raises(ms.InvalidToken) as caught:
            ms.verify(keyset, mutated, now=NOW, **BOUND)
        assert caught.value.exit_code == 1


@settings(max_examples=100, suppress_health_check=FIXTURE_CHECKS)
@given(position=st.integers(min_value=0), replacement=st.characters(codec="ascii"))
def test_any_single_substitution_is_refused(
    keyset: ms.Keyset, fmt: str, position: int, replacement: str
) -> None:
    token = ms.mint(keyset, "x", now=NOW, format=fmt)
    position %= len(token)
    mutated = token[:position] + replacement + token[position + 1 :]
    if mutated != token:
        with pytest.raises(ms.InvalidToken):
            ms.verify(keyset, mutated, now=NOW)


def test_truncated_and_extended_tokens_are_refused(keyset: ms.Keyset, fmt: str) -> None:
    token = ms.mint(keyset, "x", now=NOW, format=fmt)
    for cut in range(len(token)):
        with pytest.raises(ms.InvalidToken):
            ms.verify(keyset, token[:cut], now=NOW)
    for extra in ("A", "AA", "AAAA", "=", ".", ".A", " ", "\n"):
        with pytest.raises(ms.InvalidToken):
            ms.verify(keyset, token + extra, now=NOW)


def test_expiry_and_skew(keyset: ms.Keyset, fmt: str) -> None:
    token = ms.mint(keyset, "x", ttl=60, now=NOW, format=fmt)
    ms.verify(keyset, token, now=NOW + 59.999)
    ms.verify(keyset, token, now=NOW - 60)
    with pytest.raises(ms.ExpiredToken, match="expired 0 s ago"):
        ms.verify(keyset, token, now=NOW + 60)
    with pytest.raises(ms.ExpiredToken, match="expired 42 s ago"):
        ms.verify(keyset, token, now=NOW + 102)
    with pytest.raises(ms.NotYetValid, match="61 s in the future"):
        ms.verify(keyset, token, now=NOW - 61)


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"principal": "mallory"}, ms.PrincipalMismatch),
        ({"principal": None}, ms.PrincipalMismatch),
        ({"request_id": "req-43"}, ms.RequestMismatch),
        ({"request_id": None}, ms.RequestMismatch),
        ({"audience": "other-fleet"}, ms.AudienceMismatch),
        ({"audience": None}, ms.AudienceMismatch),
    ],
)
def test_binding_mismatch_in_either_direction(
    keyset: ms.Keyset, fmt: str, change: dict[str, Any], error: type[ms.BindingMismatch]
) -> None:
    bound = ms.mint(keyset, "x", now=NOW, format=fmt, **BOUND)
    with pytest.raises(error) as caught:
        ms.verify(keyset, bound, now=NOW, **{**BOUND, **change})
    assert caught.value.exit_code == 4
    # and the reverse: a token minted without the binding, verified by someone who states it
    unbound = ms.mint(keyset, "x", now=NOW, format=fmt, **{**BOUND, **dict.fromkeys(change)})
    with pytest.raises(error, match="not bound"):
        ms.verify(keyset, unbound, now=NOW, **BOUND)


def test_unknown_and_retired_keys_are_refused(keyset: ms.Keyset, fmt: str) -> None:
    token = ms.mint(keyset, "x", now=NOW, format=fmt)
    key = keyset.primary(format_named(fmt).alg)
    with pytest.raises(ms.UnknownKey, match=f"^unknown key id {key.kid}$"):
        ms.verify(ms.Keyset.generate(), token, now=NOW)
    with pytest.raises(ms.KeyRetired):
        ms.verify(keyset.replace_key(key, status="retired"), token, now=NOW)
    for status in ("pending", "active"):
        assert ms.verify(keyset.replace_key(key, status=status), token, now=NOW).state == "x"


def test_a_key_of_another_algorithm_under_the_same_kid_is_refused(
    keyset: ms.Keyset, fmt: str
) -> None:
    token = ms.mint(keyset, "x", now=NOW, format=fmt)
    key = keyset.primary(format_named(fmt).alg)
    other_alg = next(alg for alg in ALGORITHMS if alg != key.alg)
    impostor = ms.Keyset([ms.Key(key.kid, other_alg, key.secret)])
    with pytest.raises(ms.WrongFormat, match=f"key {key.kid} is a {other_alg} key"):
        ms.verify(impostor, token, now=NOW)


def test_oversized_input_is_refused_before_decoding(keyset: ms.Keyset, fmt: str) -> None:
    with pytest.raises(ValueError, match="over the 200-byte size cap"):
        ms.mint(keyset, "x" * 200, now=NOW, format=fmt, policy=ms.Policy(max_size=200))
    token = ms.mint(keyset, "x" * 200, now=NOW, format=fmt)
    with pytest.raises(ms.OversizedToken):
        ms.verify(keyset, token, now=NOW, policy=ms.Policy(max_size=200))


@pytest.mark.parametrize(
    ("name", "plaintext", "message"),
    [
        (  # authenticated JSON is read as json.loads reads it: the last exp is the one checked
            "duplicate-exp-last-wins",
            '{"iat":1800000000,"exp":1800000300,"exp":1900000000,"jti":"j","st":1}',
            "ttl_cap of 3600 s",
        ),
        ("nan-exp", claims_json(exp=float("nan")), "NaN"),
        ("infinity-exp", claims_json(exp=float("inf")), "Infinity"),
        ("overflow-exp", claims_json(exp=1).replace('"exp":1', '"exp":1e400'), "overflows"),
        ("float-exp", claims_json(exp=1800000300.5), "whole number"),
        ("bool-exp", claims_json(exp=True), "whole number"),
        ("string-exp", claims_json(exp="1800000300"), "whole number"),
        ("bool-iat", claims_json(iat=False), "whole number"),
        ("negative-iat", claims_json(iat=-1), "whole number"),
        ("huge-exp", claims_json(exp=2**60), "whole number"),
        ("5000-digits", claims_json(exp=1).replace('"exp":1', '"exp":' + "9" * 5000), "digits"),
        ("missing-exp", claims_json(exp=...), "lack exp"),
        ("missing-iat", claims_json(iat=...), "lack iat"),
        ("missing-jti", claims_json(jti=...), "lack jti"),
        ("missing-state", claims_json(st=...), "lack st"),
        ("unknown-claim", claims_json(admin=True), "unknown members admin"),
        ("empty-sub", claims_json(sub=""), "claim sub"),
        ("number-sub", claims_json(sub=7), "claim sub"),
        ("null-aud", claims_json(aud=None), "claim aud"),
        ("exp-before-iat", claims_json(exp=NOW - 1), "lifetime"),
        ("lifetime-over-cap", claims_json(exp=NOW + 3601), "ttl_cap of 3600 s"),
        ("not-an-object", "[1,2]", "JSON object"),
        ("not-utf8", b'{"iat":1,"exp":2,"jti":"\xff","st":1}', "UTF-8"),
    ],
)
def test_authentic_tokens_with_hostile_claims_are_refused(
    keyset: ms.Keyset, fmt: str, name: str, plaintext: str | bytes, message: str
) -> None:
    token = forge(keyset, plaintext, fmt)
    with pytest.raises(ms.InvalidClaims, match=message) as caught:
        ms.verify(keyset, token, now=NOW)
    assert caught.value.exit_code == 1


def test_authenticated_claims_are_read_as_json_loads_reads_them(
    keyset: ms.Keyset, fmt: str
) -> None:
    """The plaintext a tag has just authenticated was written by a key holder: it is read
    plainly (RFC 7515 section 5.2 allows the last of two members to win), nested only as deep
    as the reader goes, and what is deeper is a malformed token named as such."""
    twice = claims_json(st=1)[:-1] + ',"st":2}'
    assert ms.verify(keyset, forge(keyset, twice, fmt), now=NOW).state == 2
    nested = 40
    deep = claims_json(st=1).replace('"st":1', '"st":' + "[" * nested + "]" * nested)
    assert ms.verify(keyset, forge(keyset, deep, fmt), now=NOW).state is not None
    deeper = claims_json(st=1).replace('"st":1', '"st":' + "[" * 3000 + "]" * 3000)
    with pytest.raises(ms.MalformedToken, match="nests deeper than this reader goes"):
        ms.verify(keyset, forge(keyset, deeper, fmt), now=NOW, policy=ms.Policy(max_size=1 << 16))


def test_the_forging_helper_makes_acceptable_tokens(keyset: ms.Keyset, fmt: str) -> None:
    # The control for the table above: without the hostile change, the forged token passes.
    assert ms.verify(keyset, forge(keyset, claims_json(st=5), fmt), now=NOW).state == 5


def test_cross_format_confusion_is_wrong_format(keyset: ms.Keyset, fmt: str) -> None:
    token = ms.mint(keyset, "x", now=NOW, format=fmt)
    for other in OWN_FORMAT_NAMES:
        if other == fmt:
            continue
        with pytest.raises(ms.WrongFormat, match=f"expected a {other} token, got {fmt}"):
            ms.verify(keyset, token, now=NOW, format=other)
        with pytest.raises(ms.WrongFormat, match=f"not an? {other} token"):
            format_named(other).open(keyset, token)


@settings(max_examples=40, suppress_health_check=FIXTURE_CHECKS)
@given(payload=st.binary(max_size=512))
def test_seal_unseal_round_trip(keyset: ms.Keyset, fmt: str, payload: bytes) -> None:
    assert ms.unseal(keyset, ms.seal(keyset, payload, format=fmt)) == payload


def test_sealed_payloads_and_claims_never_pass_for_each_other(keyset: ms.Keyset, fmt: str) -> None:
    sealed = ms.seal(keyset, claims_json(st="looks like claims").encode(), format=fmt)
    with pytest.raises(ms.WrongFormat, match="use unseal"):
        ms.verify(keyset, sealed, now=NOW)
    with pytest.raises(ms.WrongFormat, match="use verify"):
        ms.unseal(keyset, ms.mint(keyset, "x", now=NOW, format=fmt))
    for mutated in mutations(sealed):
        with pytest.raises(ms.InvalidToken):
            ms.unseal(keyset, mutated)


def test_inspect_without_a_keyset_verifies_nothing(keyset: ms.Keyset, fmt: str) -> None:
    token = ms.mint(keyset, {"a": 1}, now=NOW, format=fmt, principal="alice")
    view = ms.inspect(token)
    kid = keyset.primary(format_named(fmt).alg).kid
    assert (view.format, view.kid, view.verified, view.key_status) == (fmt, kid, False, None)
    assert "".join(text for _label, text in view.anatomy.segments) == token
    assert view.to_dict()["verified"] is False
    if format_named(fmt).confidential:
        assert view.claims is None
    else:  # readable, but the principal only as a keyed tag
        assert view.claims is not None
        assert view.claims["st"] == {"a": 1}
        assert view.claims["sub"].startswith("h1.")
        assert "alice" not in json.dumps(view.to_dict())
        assert any("never the principal" in note for note in view.notes)


def test_inspect_with_the_keyset_verifies(keyset: ms.Keyset, fmt: str) -> None:
    token = ms.mint(keyset, {"a": 1}, now=NOW, ttl=10, format=fmt)
    view = ms.inspect(token, keyset=keyset, now=NOW)
    assert view.verified
    assert view.key_status == "primary"
    assert view.problem is None
    assert view.claims is not None
    assert view.claims["st"] == {"a": 1}
    assert any("not checked" in note for note in view.notes)
    secret = b64url_encode(keyset.primary(format_named(fmt).alg).secret)
    assert secret not in json.dumps(view.to_dict())
    expired = ms.inspect(token, keyset=keyset, now=NOW + 10)
    assert not expired.verified
    assert isinstance(expired.problem, ms.ExpiredToken)
    assert expired.claims is not None
    unknown = ms.inspect(token, keyset=ms.Keyset.generate(), now=NOW)
    assert unknown.key_status == "unknown"
    assert isinstance(unknown.problem, ms.UnknownKey)
    sealed = ms.inspect(ms.seal(keyset, b"abc", format=fmt), keyset=keyset)
    assert sealed.verified
    assert sealed.sealed_bytes == 3


def test_non_ascii_bindings_match_exactly(keyset: ms.Keyset, fmt: str) -> None:
    """Non-ASCII text cannot go through the constant-time str comparison; it must still match
    exactly, in both directions, and never be accepted for a look-alike."""
    token = ms.mint(keyset, "s", principal="élise", audience="ünï", request_id="ré", format=fmt)
    claims = ms.verify(keyset, token, principal="élise", audience="ünï", request_id="ré")
    assert claims.state == "s"
    for wrong, error in (
        ({"principal": "elise"}, ms.PrincipalMismatch),
        ({"principal": "élisé"}, ms.PrincipalMismatch),
        ({"audience": "uni"}, ms.AudienceMismatch),
        ({"request_id": "re"}, ms.RequestMismatch),
        ({"principal": None}, ms.PrincipalMismatch),
    ):
        stated: dict[str, Any] = {
            "principal": "élise",
            "audience": "ünï",
            "request_id": "ré",
            **wrong,
        }
        with pytest.raises(error):
            ms.verify(keyset, token, **stated)


# Plaintexts only a key holder could seal, and what verify (stating no binding) makes of each.
CRAFTED_PLAINTEXTS: list[tuple[bytes, type[Exception] | None]] = [
    # authenticated JSON is read as json.loads reads it: the last of two members wins
    (b'{"iat":%d,"exp":%d,"jti":"j","st":2,"st":1}', None),
    (b'{"iat":%d,"exp":%d,"jti":"","jti":"j","st":1}', None),
    (b'{"iat":%d, "exp":%d,"jti":"j","st":1}', None),  # inner whitespace: JSON still
    (b' {"iat":%d,"exp":%d,"jti":"j","st":1}', ms.InvalidClaims),  # leading whitespace
    (b'{"iat":%d,"exp":%d,"jti":"j","st":1} ', ms.InvalidClaims),  # trailing whitespace
    (b'{"iat":%d.0,"exp":%d,"jti":"j","st":1}', ms.InvalidClaims),  # a float time
    (b'{"iat":%d,"exp":%d,"jti":"j","st":NaN}', ms.InvalidClaims),
    (b'{"iat":%d,"exp":%d,"jti":"j","st":1e400}', ms.InvalidClaims),
    (b'{"iat":%d,"exp":%d,"jti":"","st":1}', ms.InvalidClaims),  # empty jti
    (b'{"iat":%d,"exp":%d,"jti":"j","st":1,"sub":null}', ms.InvalidClaims),
    (b'{"iat":%d,"exp":%d,"jti":"j","st":1,"x":1}', ms.InvalidClaims),  # unknown member
    (b'{"iat":%d,"exp":%d,"jti":"j"}', ms.InvalidClaims),  # no state
    # nested beyond the reader (the token size cap bounds how deep anything can go)
    (b'{"iat":%d,"exp":%d,"jti":"j","st":' + b"[" * 2000 + b"]" * 2000 + b"}", ms.MalformedToken),
    (b'{"iat":%d,"exp":%d,"jti":"j","st":"\xff"}', ms.InvalidClaims),  # not UTF-8
    (
        b'{"iat":%d,"exp":%d,"jti":"j","st":1,"sub":"h1.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}',
        ms.PrincipalMismatch,
    ),
    (b'{"iat":%d,"exp":%d,"jti":"j","st":1,"aud":"\\u00e9"}', ms.AudienceMismatch),
    (b'{"iat":%d,"exp":%d,"jti":"j","st":1,"rid":"r"}', ms.RequestMismatch),
    (b'{"iat":%d,"exp":%d,"jti":"j","st":1,"aud":[]}', ms.InvalidClaims),  # empty audience list
    (b'{"iat":%d,"exp":%d,"jti":"j","st":1,"sub":"x"}', ms.PrincipalMismatch),
    (b"", ms.InvalidClaims),
    (b"[]", ms.InvalidClaims),
    (b"\x02{}", ms.InvalidClaims),  # an unknown marker
]


def _crafted(keyset: ms.Keyset, fmt: str, plaintext: bytes) -> str:
    """A token a key holder could make by sealing ``plaintext`` (its times filled in)."""
    filled = plaintext.replace(b"%d", str(NOW).encode(), 1).replace(
        b"%d", str(NOW + 60).encode(), 1
    )
    return forge(keyset, filled, fmt)


def _jwe_byte_moved(keyset: ms.Keyset) -> str:
    """A jwe token whose last ciphertext byte was moved into its tag segment: the same bytes
    reach AES-GCM, so only the segment length checks refuse it."""
    from mrtr_state._encoding import b64url_decode

    header, empty, iv, ciphertext, tag = ms.mint(keyset, {"x": 1}, format="jwe", now=NOW).split(".")
    body, mac = b64url_decode(ciphertext), b64url_decode(tag)
    return ".".join((header, empty, iv, b64url_encode(body[:-1]), b64url_encode(body[-1:] + mac)))


@pytest.mark.parametrize(("plaintext", "expected"), CRAFTED_PLAINTEXTS)
def test_crafted_plaintexts_meet_their_named_fate(
    keyset: ms.Keyset, fmt: str, plaintext: bytes, expected: type[Exception] | None
) -> None:
    """Sealed under a real key, so only the envelope's accepting path stands between each and
    acceptance: each is refused with its own reason (or accepted), as text and as bytes."""
    token = _crafted(keyset, fmt, plaintext)
    for form in (token, token.encode()):
        if expected is None:
            assert ms.verify(keyset, form, now=NOW).state == 1
        else:
            with pytest.raises(expected) as caught:
                ms.verify(keyset, form, now=NOW)
            assert type(caught.value) is expected, caught.value


def test_a_jwe_byte_moved_into_the_tag_is_refused(keyset: ms.Keyset) -> None:
    with pytest.raises(ms.MalformedToken, match="jwe"):
        ms.verify(keyset, _jwe_byte_moved(keyset), now=NOW)


def test_every_mutation_of_a_token_is_refused_as_text_and_as_bytes(
    keyset: ms.Keyset, fmt: str
) -> None:
    token = ms.mint(keyset, {"x": 1}, now=NOW, format=fmt, **BOUND)
    for mutated in mutations(token):
        for form in (mutated, mutated.encode()):
            with pytest.raises(ms.InvalidToken):
                ms.verify(keyset, form, now=NOW, **BOUND)


@settings(max_examples=80, suppress_health_check=FIXTURE_CHECKS)
@given(state=json_values)
def test_the_printed_state_is_the_state_we_would_encode(
    keyset: ms.Keyset, fmt: str, state: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """verify_for_output prints the state's own text from our tokens (it never encodes it
    again): exactly what encoding the verified state would print (nested "st" keys and strings
    holding '"st":' included)."""
    from mrtr_state._encoding import encode_parsed
    from mrtr_state.tokens import facade as tokens
    from mrtr_state.tokens.facade import verify_for_output

    def never(value: Any) -> str:
        raise AssertionError("the state of our own token was encoded again")

    monkeypatch.setattr(tokens, "encode_parsed", never)

    for wrapped in (state, {"st": state, "x": '"st":1'}, ['"st":', {"st": {"st": state}}]):
        try:
            token = ms.mint(keyset, wrapped, now=NOW, format=fmt, **BOUND)
        except ValueError:
            return  # refused at mint (lone surrogate)
        claims, text = verify_for_output(keyset, token, **BOUND, now=NOW)
        assert claims == ms.verify(keyset, token, now=NOW, **BOUND)
        assert text == encode_parsed(claims.state)


def test_a_state_carried_oddly_is_printed_on_one_line_as_its_value(
    keyset: ms.Keyset, fmt: str
) -> None:
    """Claims another minter wrote (st not last, its key escaped, whitespace, newlines): the
    printed text is always one line of JSON holding exactly the verified state."""
    from mrtr_state.tokens.facade import verify_for_output

    head = f'"iat":{NOW},"exp":{NOW + 60},"jti":"j"'
    bodies = [
        "{" + head + ',"st":{"st":{"a":1}}}',  # nested st keys
        '{"st":{"b":2},' + head + "}",  # st first
        "{" + head + ',"\\u0073t":{"st":{"c":3}}}',  # escaped top-level key, plain nested one
        "{" + head + ',"st": {"d": [1, 2]} }',  # spaces
        "{" + head + ',"st":{"e":\n1}\n}',  # newlines
        "{" + head + ',"st":"{\\"st\\":4}"}',  # a string holding an object's text
        '{"jti":"a{b",' + f'"iat":{NOW},"exp":{NOW + 60}' + ',"st":{"f":5}}',  # a brace in a string
    ]
    for body in bodies:
        token = forge(keyset, body, fmt)
        claims, text = verify_for_output(keyset, token, now=NOW)
        assert "\n" not in text and "\r" not in text, body
        assert json.loads(text) == claims.state == json.loads(body)["st"], body


def test_verify_for_output_refuses_as_verify_does(keyset: ms.Keyset, fmt: str) -> None:
    from mrtr_state.tokens.facade import verify_for_output

    token = ms.mint(keyset, {"x": 1}, now=NOW, format=fmt, **BOUND)
    tampered = mutations(token)[len(token) // 2]
    cases: list[tuple[str, dict[str, Any], float, type[Exception] | None]] = [
        (token, BOUND, NOW, None),
        (token, {**BOUND, "principal": "bob"}, NOW, ms.PrincipalMismatch),
        (token, {**BOUND, "request_id": "r-2"}, NOW, ms.RequestMismatch),
        (token, {**BOUND, "audience": "other"}, NOW, ms.AudienceMismatch),
        (token, BOUND, NOW + 3600, ms.ExpiredToken),
        (tampered, BOUND, NOW, ms.InvalidToken),
    ]
    for candidate, stated, moment, expected in cases:
        for call in (ms.verify, verify_for_output):
            if expected is None:
                call(keyset, candidate, now=moment, **stated)
            else:
                with pytest.raises(expected):
                    call(keyset, candidate, now=moment, **stated)
