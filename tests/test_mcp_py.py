"""The Python SDK's tokens (formats/mcp_py.py, envelopes/mcp_py.py): tokens captured from mcp
2.3.0 give their expected result, and ours follow the SDK's recipe and bind as it binds.
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

import mrtr_state as ms
from mrtr_state._encoding import b64url_decode
from mrtr_state.tokens.registry import format_named

from .sdk_vectors import (
    CAPTURE,
    captured,
    py_binding,
    sdk_keyset,
)
from .test_contract import mutations


def test_captured_python_sdk_tokens_give_their_expected_result() -> None:
    for entry in captured()["python_sdk"]:
        keyset = sdk_keyset(entry["secrets"], "mcp-py-v1")
        assert ms.inspect(entry["token"]).format == "mcp-py"
        if entry["ttl"] <= 2:
            with pytest.raises(ms.ExpiredToken):
                ms.verify(keyset, entry["token"], policy=CAPTURE, **py_binding(entry))
            continue
        claims = ms.verify(keyset, entry["token"], policy=CAPTURE, **py_binding(entry))
        assert claims.state == entry["state"], entry["name"]
        assert claims.to_dict()["m"] == "tools/call"


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"method": "prompts/get"}, ms.RequestMismatch),
        ({"target": "destroy"}, ms.RequestMismatch),
        ({"arguments": {"env": "dev"}}, ms.RequestMismatch),
        ({"arguments": {}}, ms.RequestMismatch),
        ({"method": None, "target": None, "arguments": None}, ms.RequestMismatch),
        ({"audience": "other"}, ms.AudienceMismatch),
        ({"audience": None}, ms.AudienceMismatch),
        ({"principal": "alice"}, ms.PrincipalMismatch),
    ],
)
def test_captured_python_sdk_token_with_any_binding_changed_is_refused(
    change: dict[str, Any], error: type[ms.InvalidToken]
) -> None:
    entry = captured()["python_sdk"][0]
    keyset = sdk_keyset(entry["secrets"], "mcp-py-v1")
    with pytest.raises(error):
        ms.verify(keyset, entry["token"], policy=CAPTURE, **{**py_binding(entry), **change})


def test_captured_python_sdk_token_with_any_character_changed_is_refused() -> None:
    entry = captured()["python_sdk"][0]
    keyset = sdk_keyset(entry["secrets"], "mcp-py-v1")
    for mutated in mutations(entry["token"]):
        with pytest.raises(ms.InvalidToken):
            ms.verify(keyset, mutated, policy=CAPTURE, **py_binding(entry))


def test_a_ring_key_that_did_not_seal_is_refused_when_it_is_the_only_one() -> None:
    entry = next(e for e in captured()["python_sdk"] if e["name"] == "py-c")
    only_old = sdk_keyset([entry["secrets"][1]], "mcp-py-v1")
    with pytest.raises(ms.UnknownKey):
        ms.verify(only_old, entry["token"], policy=CAPTURE, **py_binding(entry))


def _open_like_the_sdk(secret: bytes, token: str) -> dict[str, Any]:
    key = HKDF(
        algorithm=hashes.SHA256(), length=32, salt=None, info=b"mcp/request-state/v1/aes-256-gcm"
    ).derive(secret)
    raw = b64url_decode(token.removeprefix("v1."))
    assert raw[:4] == hashlib.sha256(b"mcp/request-state/v1/kid:" + key).digest()[:4]
    document: dict[str, Any] = json.loads(
        AESGCM(key).decrypt(raw[4:16], raw[16:], b"v1." + raw[:4])
    )
    return document


def test_our_mcp_py_tokens_follow_the_sdk_recipe_and_bind_like_it() -> None:
    secret = b"our-own-operator-secret-of-at-least-32-bytes"
    keyset = sdk_keyset([secret.decode()], "mcp-py-v1")
    request: dict[str, Any] = {
        "method": "tools/call",
        "target": "deploy",
        "arguments": {"env": "prod", "é": 1},
    }
    token = ms.mint(
        keyset,
        "state-text",
        format="mcp-py",
        audience="fleet",
        principal="alice",
        ttl=60,
        **request,
    )
    envelope = _open_like_the_sdk(secret, token)
    assert list(envelope) == ["v", "iat", "exp", "m", "t", "a", "s", "aud", "p"]
    assert isinstance(envelope["iat"], float) and envelope["exp"] == envelope["iat"] + 60
    assert envelope["a"] == ms.arguments_digest(request["arguments"])
    salt_and_tag = b64url_decode(envelope["p"])
    assert (
        salt_and_tag[8:]
        == hashlib.sha256(b"mcp/request-state/principal:" + salt_and_tag[:8] + b"alice").digest()[
            :16
        ]
    )
    claims = ms.verify(keyset, token, audience="fleet", principal="alice", **request)
    assert claims.state == "state-text"
    with pytest.raises(ms.PrincipalMismatch):
        ms.verify(keyset, token, audience="fleet", principal="bob", **request)
    with pytest.raises(ValueError, match="string"):
        ms.mint(keyset, {"not": "a string"}, format="mcp-py", **request)
    with pytest.raises(ValueError, match="bind a request"):
        ms.mint(keyset, "x", format="mcp-py")
    with pytest.raises(ValueError, match="SDK's requestStates, not sealed payloads"):
        ms.seal(keyset, b"raw codec bytes", format="mcp-py")  # it would pass for a requestState
    with pytest.raises(ms.WrongFormat, match="not sealed payloads; verify"):
        ms.unseal(keyset, token)


def test_sdk_numbers_must_be_real_numbers() -> None:
    secret = b"x" * 40
    keyset = sdk_keyset([secret.decode()], "mcp-py-v1")
    key = keyset.primary("mcp-py-v1")

    fmt = format_named("mcp-py")
    base = {"v": 1, "m": "tools/call", "t": "t", "a": ms.arguments_digest({}), "s": "x"}
    # an expiry that is not a number is expired, as the SDK says; an issue time that is not
    # one (the SDK takes True for 1) is not the SDK's claims
    for iat, exp in ((time.time(), True), (time.time(), "9e9")):
        token = fmt.seal(key, json.dumps({**base, "iat": iat, "exp": exp}).encode())
        with pytest.raises(ms.TimeWindowError):
            ms.verify(keyset, token, method="tools/call", target="t")
    for odd in (True, "1", None):
        token = fmt.seal(key, json.dumps({**base, "iat": odd, "exp": time.time() + 60}).encode())
        with pytest.raises(ms.InvalidClaims, match="iat must be a number"):
            ms.verify(keyset, token, method="tools/call", target="t")
    nan = fmt.seal(key, json.dumps({**base, "iat": time.time(), "exp": float("nan")}).encode())
    with pytest.raises(ms.InvalidClaims):
        ms.verify(keyset, nan, method="tools/call", target="t")
