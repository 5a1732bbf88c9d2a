"""The TypeScript SDK's tokens (formats/mcp_ts.py, envelopes/mcp_ts.py): tokens captured from
@modelcontextprotocol/server 2.4.0, ours by the recipe, and crafted bodies' named fates.
"""

from __future__ import annotations

import base64
import hmac
import json
from typing import Any

import pytest

import mrtr_state as ms
from mrtr_state._encoding import b64url_decode
from mrtr_state.keys.keyset import Key
from mrtr_state.tokens.registry import format_named

from .sdk_vectors import (
    CAPTURE,
    captured,
    sdk_keyset,
)
from .test_contract import mutations


def test_captured_typescript_sdk_tokens_give_their_expected_result() -> None:
    for entry in captured()["typescript_sdk"]:
        keyset = sdk_keyset([entry["key"]], "mcp-ts-v1")
        bind = entry["bind"]
        if entry["ttlSeconds"] <= 2:
            with pytest.raises(ms.ExpiredToken):
                ms.verify(keyset, entry["token"], policy=CAPTURE, bind=bind)
            continue
        assert (
            ms.verify(keyset, entry["token"], policy=CAPTURE, bind=bind).state
            == entry["verified_payload"]
        )
        if bind is not None:
            with pytest.raises(ms.RequestMismatch, match="bind"):
                ms.verify(keyset, entry["token"], policy=CAPTURE, bind=bind + "x")
            with pytest.raises(ms.RequestMismatch, match="bind"):
                ms.verify(keyset, entry["token"], policy=CAPTURE)
        else:
            with pytest.raises(ms.RequestMismatch, match="bind"):
                ms.verify(keyset, entry["token"], policy=CAPTURE, bind="tools/call")
        for mutated in mutations(entry["token"]):
            with pytest.raises(ms.InvalidToken):
                ms.verify(keyset, mutated, policy=CAPTURE, bind=bind)
        wrong_key = sdk_keyset(["z" * 40], "mcp-ts-v1")
        with pytest.raises(ms.BadSignature):
            ms.verify(wrong_key, entry["token"], policy=CAPTURE, bind=bind)


def test_our_mcp_ts_tokens_follow_the_sdk_recipe() -> None:
    secret = "k1-" + "a" * 61
    keyset = sdk_keyset([secret], "mcp-ts-v1")
    token = ms.mint(keyset, {"step": 2}, format="mcp-ts", bind="tools/call", ttl=60)
    prefix, body, mac = token.split(".")
    expected = hmac.new(secret.encode(), f"{prefix}.{body}".encode(), "sha256").digest()
    assert base64.urlsafe_b64encode(expected).rstrip(b"=").decode() == mac
    document = json.loads(b64url_decode(body))
    assert list(document) == ["p", "exp", "b"] and document["p"] == {"step": 2}
    tag = hmac.new(secret.encode(), b"mcp.requestState.bind:tools/call", "sha256").digest()[:16]
    assert document["b"] == base64.urlsafe_b64encode(tag).rstrip(b"=").decode()
    assert ms.verify(keyset, token, bind="tools/call").state == {"step": 2}
    with pytest.raises(ValueError, match="mcp-ts"):
        ms.mint(keyset, 1, format="mcp-ts", principal="alice")


_LATER = 1_900_000_000


#: mcp-ts bodies only a holder of the secret could sign, and what verify makes of each when
#: nothing is stated and when a bind value is: each refusal is named, as text and as bytes.
CRAFTED_TS_BODIES: list[tuple[bytes, Any, Any]] = [
    # authenticated: read as the SDK's JSON.parse reads it, the last of two members winning
    (b'{"p":1,"exp":1,"exp":%d}' % _LATER, None, ms.RequestMismatch),
    (b'{"p":1,"exp":%d,"exp":1}' % _LATER, ms.ExpiredToken, ms.ExpiredToken),
    (b'{"p":1,"exp":%d,"b":null}' % _LATER, None, ms.RequestMismatch),  # as the SDK: no tag
    (b'{"p":1,"exp":%d,"x":1}' % _LATER, ms.InvalidClaims, ms.InvalidClaims),
    (b'{"p":1,"exp":%d.5}' % _LATER, None, ms.RequestMismatch),  # a float exp, as in JS
    (b'{"p":1,"exp":NaN}', ms.InvalidClaims, ms.InvalidClaims),
    (b'{"p":1,"exp":%d}' % (_LATER + 10**6), ms.InvalidClaims, ms.InvalidClaims),  # over the cap
    (b'{"p":1,"exp":%d}' % (_LATER - 10**6), ms.ExpiredToken, ms.ExpiredToken),
    (b'{"p":1,"exp":true}', ms.ExpiredToken, ms.ExpiredToken),  # not a number: never valid
    (b'{"exp":%d}' % _LATER, ms.InvalidClaims, ms.InvalidClaims),
    (
        b'{"p":' + b"[" * 2000 + b"]" * 2000 + b',"exp":%d}' % _LATER,
        ms.MalformedToken,
        ms.MalformedToken,
    ),
    (b' {"p":1,"exp":%d}' % _LATER, ms.InvalidClaims, ms.InvalidClaims),
    (b"[1]", ms.InvalidClaims, ms.InvalidClaims),
    (b'{"p":1,"exp":%d,"b":"\xc3\xbcn\xc3\xaf"}' % _LATER, ms.RequestMismatch, ms.RequestMismatch),
    (b'{"p":1,"exp":%d,"b":7}' % _LATER, ms.RequestMismatch, ms.RequestMismatch),
]


@pytest.mark.parametrize(("body", "unbound", "bound"), CRAFTED_TS_BODIES)
def test_crafted_mcp_ts_bodies_meet_their_named_fate(body: bytes, unbound: Any, bound: Any) -> None:
    keyset = ms.Keyset([Key.from_secret("mcp-ts-v1", b"t" * 32)])
    token = format_named("mcp-ts").seal(keyset.primary("mcp-ts-v1"), body)
    now = _LATER - 60
    cases: list[tuple[dict[str, Any], Any]] = [({}, unbound), ({"bind": "alice"}, bound)]
    for stated, expected in cases:
        for form in (token, token.encode()):
            if expected is None:
                assert ms.verify(keyset, form, now=now, **stated).state == 1
            else:
                with pytest.raises(expected) as caught:
                    ms.verify(keyset, form, now=now, **stated)
                assert type(caught.value) is expected, (body, stated, caught.value)
