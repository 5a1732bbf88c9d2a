"""Interoperability with independent JOSE implementations: PyJWT for jws, joserfc for jwe."""

from __future__ import annotations

import json
import os
import time
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from joserfc import jwe as jose_jwe
from joserfc.jwk import OctKey

import mrtr_state as ms
from mrtr_state._encoding import b64url_encode
from mrtr_state._primitives import AESGCM, hmac_key, hmac_sha256
from mrtr_state.tokens.principal import principal_tag

STATES: list[Any] = [None, 0, "text", ["list", 1.5], {"nested": {"ü": [True, None]}}]


@pytest.fixture
def keyset() -> ms.Keyset:
    return ms.Keyset.generate()


def our_claims(**extra: Any) -> dict[str, Any]:
    now = int(time.time())
    return {"iat": now, "exp": now + 120, "jti": "interop", "st": {"from": "peer"}, **extra}


# --- PyJWT and jws -------------------------------------------------------------------------


@pytest.mark.parametrize("state", STATES)
def test_pyjwt_verifies_every_jws_we_mint(keyset: ms.Keyset, state: Any) -> None:
    key = keyset.primary("HS256")
    token = ms.mint(
        keyset, state, format="jws", principal="alice", audience="fleet", request_id="req-1"
    )
    decoded = jwt.decode(token, key.secret, algorithms=["HS256"], audience="fleet")
    assert (
        decoded
        == ms.verify(
            keyset, token, principal="alice", audience="fleet", request_id="req-1"
        ).to_dict()
    )
    assert decoded["st"] == state
    assert jwt.get_unverified_header(token) == {
        "alg": "HS256",
        "kid": key.kid,
        "typ": "mrtr-state+jwt",
    }


def test_a_token_pyjwt_signs_with_our_header_verifies_in_ours(keyset: ms.Keyset) -> None:
    key = keyset.primary("HS256")
    claims = our_claims(aud="fleet", sub=principal_tag(key, "alice"))
    token = jwt.encode(
        claims, key.secret, algorithm="HS256", headers={"kid": key.kid, "typ": "mrtr-state+jwt"}
    )
    verified = ms.verify(keyset, token, audience="fleet", principal="alice")
    assert verified.state == {"from": "peer"}
    with pytest.raises(ms.PrincipalMismatch):
        ms.verify(keyset, token, audience="fleet", principal="bob")


def _pyjwt_variants(kid: str, secret: bytes) -> dict[str, str]:
    claims = our_claims()
    ours = {"kid": kid, "typ": "mrtr-state+jwt"}
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    variants = {
        "alg-none": jwt.encode(claims, "", algorithm="none", headers=ours),
        # PyJWT wants longer keys for these; our header check refuses them regardless of the key.
        "alg-HS512": jwt.encode(claims, secret * 2, algorithm="HS512", headers=ours),
        "alg-HS384": jwt.encode(claims, secret * 2, algorithm="HS384", headers=ours),
        "alg-RS256": jwt.encode(claims, rsa_key, algorithm="RS256", headers=ours),
        "no-typ": jwt.encode(claims, secret, algorithm="HS256", headers={"kid": kid}),
        "typ-JWT": jwt.encode(
            claims, secret, algorithm="HS256", headers={"kid": kid, "typ": "JWT"}
        ),
        "no-kid": jwt.encode(claims, secret, algorithm="HS256"),
        "kid-injection": jwt.encode(
            claims,
            secret,
            algorithm="HS256",
            headers={"kid": "../../etc/passwd", "typ": "mrtr-state+jwt"},
        ),
    }
    for member, value in [
        ("jku", "https://attacker.example/jwks"),
        ("x5u", "https://a.example"),
        ("jwk", {"kty": "oct", "k": "AAAA"}),
        ("x5c", ["MIIB"]),
        ("crit", ["exp"]),
        ("zip", "DEF"),
        ("cty", "JWT"),
        ("foo", "bar"),
    ]:
        variants[f"extra-{member}"] = jwt.encode(
            claims, secret, algorithm="HS256", headers={**ours, member: value}
        )
    return variants


def test_pyjwt_tokens_with_any_other_header_are_refused(keyset: ms.Keyset) -> None:
    key = keyset.primary("HS256")
    for name, token in _pyjwt_variants(key.kid, key.secret).items():
        with pytest.raises(ms.MalformedToken, match="jws header") as caught:
            ms.verify(keyset, token)
        assert caught.value.exit_code == 1, name


def test_duplicate_and_reordered_header_members_are_refused(keyset: ms.Keyset) -> None:
    key = keyset.primary("HS256")
    payload = b64url_encode(json.dumps(our_claims()).encode())
    headers = {
        "duplicate-alg": f'{{"alg":"none","alg":"HS256","kid":"{key.kid}","typ":"mrtr-state+jwt"}}',
        "duplicate-kid": f'{{"alg":"HS256","kid":"00000000","kid":"{key.kid}",'
        '"typ":"mrtr-state+jwt"}',
        "reordered": f'{{"kid":"{key.kid}","alg":"HS256","typ":"mrtr-state+jwt"}}',
        "spaced": f'{{"alg": "HS256","kid":"{key.kid}","typ":"mrtr-state+jwt"}}',
    }
    for name, header in headers.items():
        signing_input = b64url_encode(header.encode()) + "." + payload
        token = (
            signing_input
            + "."
            + b64url_encode(hmac_sha256(hmac_key(key.secret), signing_input.encode()))
        )
        with pytest.raises(ms.MalformedToken, match="jws header") as caught:
            ms.verify(keyset, token)
        message = str(caught.value)
        assert ("duplicate" in message) == name.startswith("duplicate"), (name, message)


# --- joserfc and jwe -----------------------------------------------------------------------


@pytest.mark.parametrize("state", STATES)
def test_joserfc_decrypts_every_jwe_we_mint(keyset: ms.Keyset, state: Any) -> None:
    key = keyset.primary("dir+A256GCM")
    token = ms.mint(keyset, state, format="jwe", principal="alice", audience="fleet")
    opened = jose_jwe.decrypt_compact(token, OctKey.import_key(key.secret))
    assert opened.protected == {
        "alg": "dir",
        "enc": "A256GCM",
        "kid": key.kid,
        "typ": "mrtr-state+jwt",
    }
    assert opened.plaintext is not None
    claims = json.loads(opened.plaintext)
    assert claims == ms.verify(keyset, token, principal="alice", audience="fleet").to_dict()
    assert claims["sub"] == "alice"
    assert claims["st"] == state


def test_we_decrypt_what_joserfc_encrypts_with_our_header(keyset: ms.Keyset) -> None:
    key = keyset.primary("dir+A256GCM")
    header = {"alg": "dir", "enc": "A256GCM", "kid": key.kid, "typ": "mrtr-state+jwt"}
    token = jose_jwe.encrypt_compact(
        header, json.dumps(our_claims(sub="alice")), OctKey.import_key(key.secret)
    )
    assert ms.verify(keyset, token, principal="alice").state == {"from": "peer"}


def test_joserfc_tokens_with_other_headers_are_refused_before_any_key_use(
    keyset: ms.Keyset,
) -> None:
    key = keyset.primary("dir+A256GCM")
    ours = {"alg": "dir", "enc": "A256GCM", "kid": key.kid, "typ": "mrtr-state+jwt"}
    plaintext = json.dumps(our_claims())
    registry = jose_jwe.JWERegistry(
        algorithms=["dir", "A256GCM", "A128GCM", "A256KW", "DEF"], strict_check_header=False
    )
    short = OctKey.import_key(os.urandom(16))
    full = OctKey.import_key(key.secret)
    variants = {
        "zip-DEF": jose_jwe.encrypt_compact(
            {**ours, "zip": "DEF"}, plaintext, full, registry=registry
        ),
        "enc-A128GCM": jose_jwe.encrypt_compact(
            {**ours, "enc": "A128GCM"}, plaintext, short, registry=registry
        ),
        "alg-A256KW": jose_jwe.encrypt_compact(
            {**ours, "alg": "A256KW"}, plaintext, full, registry=registry
        ),
        "extra-cty": jose_jwe.encrypt_compact(
            {**ours, "cty": "JWT"}, plaintext, full, registry=registry
        ),
        "extra-unknown": jose_jwe.encrypt_compact(
            {**ours, "x-debug": 1}, plaintext, full, registry=registry
        ),
        "no-typ": jose_jwe.encrypt_compact(
            {k: v for k, v in ours.items() if k != "typ"}, plaintext, full, registry=registry
        ),
    }
    for name, token in variants.items():
        started = time.perf_counter()
        with pytest.raises(ms.MalformedToken, match="jwe header") as caught:
            ms.verify(keyset, token)
        assert time.perf_counter() - started < 0.05, name
        if name == "zip-DEF":
            assert "zip" in str(caught.value)


def test_hand_made_key_derivation_headers_are_refused_instantly(keyset: ms.Keyset) -> None:
    """PBES2 with a huge p2c, ECDH-ES, RSA1_5: refused on sight, nothing derived."""
    key = keyset.primary("dir+A256GCM")
    hostile: list[dict[str, Any]] = [
        {
            "alg": "PBES2-HS512+A256KW",
            "enc": "A256GCM",
            "p2c": 2_000_000_000,
            "p2s": "AAAAAAAAAAA",
            "kid": key.kid,
        },
        {
            "alg": "ECDH-ES",
            "enc": "A256GCM",
            "kid": key.kid,
            "epk": {"kty": "EC", "crv": "P-256", "x": "AA", "y": "AA"},
        },
        {"alg": "RSA1_5", "enc": "A256GCM", "kid": key.kid},
        {"alg": "A128KW", "enc": "A256GCM", "kid": key.kid},
    ]
    nonce = os.urandom(12)
    for header in hostile:
        segment = b64url_encode(json.dumps(header).encode())
        sealed = AESGCM(key.secret).encrypt(nonce, b"{}", segment.encode())
        token = ".".join(
            [
                segment,
                "AAAA",
                b64url_encode(nonce),
                b64url_encode(sealed[:-16]),
                b64url_encode(sealed[-16:]),
            ]
        )
        started = time.perf_counter()
        with pytest.raises(ms.MalformedToken, match="jwe header"):
            ms.verify(keyset, token)
        assert time.perf_counter() - started < 0.05, header["alg"]
