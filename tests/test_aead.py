"""The aead wire format, checked against its specification with the raw primitive."""

from __future__ import annotations

import json
import os

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

import mrtr_state as ms
from mrtr_state._encoding import b64url_decode, b64url_encode

from .conftest import NOW


def spec_token(
    key: ms.Key, plaintext: bytes, *, aad: bytes | None = None, prefix: str = "ms1."
) -> str:
    """Build a token from DESIGN section 3 directly, without the format module."""
    nonce = os.urandom(12)
    associated = b"ms1." + key.key_id if aad is None else aad
    sealed = AESGCM(key.secret).encrypt(nonce, plaintext, associated)
    return prefix + b64url_encode(key.key_id + nonce + sealed)


def claims(**extra: object) -> bytes:
    return json.dumps({"iat": NOW, "exp": NOW + 60, "jti": "j", "st": "spec", **extra}).encode()


def test_a_token_built_from_the_specification_verifies(keyset: ms.Keyset) -> None:
    key = keyset.primary("A256GCM")
    token = spec_token(key, claims(sub="alice"))
    assert ms.verify(keyset, token, principal="alice", now=NOW).state == "spec"


def test_our_tokens_decrypt_with_the_raw_primitive(keyset: ms.Keyset) -> None:
    key = keyset.primary("A256GCM")
    token = ms.mint(keyset, {"a": 1}, principal="alice", now=NOW)
    raw = b64url_decode(token.removeprefix("ms1."))
    assert raw[:4] == key.key_id
    plaintext = AESGCM(key.secret).decrypt(raw[4:16], raw[16:], b"ms1." + raw[:4])
    assert json.loads(plaintext)["st"] == {"a": 1}
    assert len(raw) == 4 + 12 + len(plaintext) + 16


@pytest.mark.parametrize(
    "aad",
    [b"", b"ms1.", b"ms2.\x00\x00\x00\x00", b"ms1.\x00\x00\x00\x00"],
    ids=["empty", "prefix-only", "other-prefix", "other-key-id"],
)
def test_associated_data_binds_prefix_and_key_id(keyset: ms.Keyset, aad: bytes) -> None:
    token = spec_token(keyset.primary("A256GCM"), claims(), aad=aad)
    with pytest.raises(ms.BadSignature):
        ms.verify(keyset, token, now=NOW)


def test_a_ciphertext_moved_under_another_known_key_id_fails(keyset: ms.Keyset) -> None:
    first = keyset.primary("A256GCM")
    second = ms.Key("0badc0de", "A256GCM", first.secret, status="active")  # same secret!
    both = ms.Keyset([first, second])
    raw = b64url_decode(ms.mint(both, "x", now=NOW)[4:])
    moved = "ms1." + b64url_encode(second.key_id + raw[4:])
    with pytest.raises(ms.BadSignature):
        ms.verify(both, moved, now=NOW)


def test_anatomy_splits_the_token_into_its_parts(keyset: ms.Keyset) -> None:
    token = ms.mint(keyset, "x", now=NOW)
    view = ms.inspect(token)
    assert "".join(text for _label, text in view.anatomy.segments) == token
    assert [label for label, _ in view.anatomy.segments] == [
        "prefix",
        "key id",
        "nonce",
        "ciphertext",
        "tag",
    ]
    fields = dict(view.anatomy.fields)
    raw = b64url_decode(token[4:])
    assert fields["nonce"] == raw[4:16].hex()
    assert fields["tag"] == raw[-16:].hex()
