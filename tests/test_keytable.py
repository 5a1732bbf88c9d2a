"""Keys and the invariants every version of a keyset keeps (mrtr_state/keytable.py)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

import mrtr_state as ms
from mrtr_state._encoding import b64url_encode
from mrtr_state.errors import KeysetInvalid
from mrtr_state.keys.key import Key, KeyTable, changed_key

from .test_keyset_store import jwk, write_keyset


def test_a_key_keeps_what_is_built_from_it_under_its_own_names() -> None:
    """Wires keep a primitive (built from the secret) and a sealer (built from the key) on the
    key itself, each under its purpose, built once: no other class writes the key's state."""
    key = Key.generate("A256GCM", kid="0a0b0c0d")
    built: list[str] = []

    def sealer(of: Key) -> tuple[bytes, int]:
        built.append(of.kid)
        return of.key_id, len(of.secret)

    first = key.derived("sealer", sealer)
    again = key.derived("sealer", sealer)
    assert first == again == (bytes.fromhex("0a0b0c0d"), 32) and built == ["0a0b0c0d"]
    assert key.prepared("secret-length", len) == 32
    with pytest.raises(AttributeError, match="immutable"):
        key.kid = "00000000"


def test_a_changed_key_starts_without_the_primitives_of_the_old_one() -> None:
    key = Key.generate("A256GCM", kid="0a0b0c0d")
    key.prepared("secret-length", len)
    retired = changed_key(key, status="retired")
    assert (retired.status, retired.kid, retired.secret) == ("retired", key.kid, key.secret)
    assert retired.derived("fresh", lambda k: "built again") == "built again"


def test_a_new_version_of_the_same_keys_keeps_their_primitives() -> None:
    key = Key.generate("A256GCM", kid="0a0b0c0d")
    marker = key.derived("marker", lambda k: object())
    before = KeyTable([key], "t")
    after = KeyTable([changed_key(key, status="active")], "t", previous=before)
    assert after.by_kid["0a0b0c0d"].derived("marker", lambda k: object()) is marker


def test_secrets_never_appear_in_repr_or_errors(keyset: ms.Keyset) -> None:
    key = next(iter(keyset))
    secret_text = b64url_encode(key.secret)
    for shown in (repr(key), str(key), repr(keyset), str(key.describe())):
        assert secret_text not in shown
        assert key.secret.hex() not in shown
        assert repr(key.secret) not in shown


def test_one_primary_per_algorithm_is_allowed(tmp_path: Path) -> None:
    path = write_keyset(
        tmp_path / "k.json",
        {"keys": [jwk("00000001"), jwk("00000002", alg="HS256"), jwk("00000003", status="active")]},
    )
    keyset = ms.Keyset.load(path)
    assert keyset.primary("A256GCM").kid == "00000001"
    assert keyset.primary("HS256").kid == "00000002"
    with pytest.raises(ms.NoPrimaryKey, match="no primary dir\\+A256GCM key") as none:
        keyset.primary("dir+A256GCM")
    # the library says what is wrong; the remedy it names, the CLI words as its command
    assert "mrtr-state" not in str(none.value)
    assert none.value.remedy == ("add_key", {"alg": "dir+A256GCM"})


def test_a_key_whose_id_is_not_its_secret_s_names_the_remedy() -> None:
    secret = b"s" * 40
    with pytest.raises(ms.KeysetInvalid, match="derived from its secret") as wrong:
        ms.Keyset([Key(kid="0a0b0c0d", alg="mcp-ts-v1", secret=secret)])
    assert wrong.value.remedy == ("reimport_key", {})
    with pytest.raises(ms.KeysetInvalid, match="exactly 32 bytes") as short:
        ms.Keyset([Key(kid="0a0b0c0d", alg="A256GCM", secret=b"x")])
    assert short.value.remedy == ("replace_key", {"alg": "A256GCM"})


@pytest.mark.parametrize(
    ("first", "second"), [("mcp-php-v1", "mcp-java-v1"), ("mcp-py-v1", "mcp-rb-v1")]
)
def test_one_secret_is_not_held_under_two_algorithms_whose_tokens_look_alike(
    first: str, second: str
) -> None:
    """Found by a review: the same secret imported for the PHP and the Java SDK made every Java
    token fail, read as PHP (the first key whose MAC opens a token names its format). Algorithms
    whose tokens differ in shape may share one (rmcp's rs1 signing key is also a ring key)."""
    secret = b"\x33" * 32
    with pytest.raises(KeysetInvalid, match=r"hold the same secret \(as their MAC uses it\), and"):
        ms.Keyset([Key.from_secret(first, secret), Key.from_secret(second, secret)])
    ms.Keyset(
        [Key.from_secret("mcp-rs-v1", secret), Key.from_secret("mcp-rs-v2", secret, sdk_kid="r")]
    )
    ms.Keyset([Key.from_secret(first, secret), Key.from_secret(second, b"\x44" * 32)])


@pytest.mark.parametrize(
    ("java", "php"),
    [
        (b"\x35" * 32, b"\x35" * 32 + b"\x00"),  # HMAC pads with zeros: one key to it
        (b"\x35" * 40, b"\x35" * 40 + b"\x00" * 24),  # padded up to the block exactly
        (b"\x36" * 65, hashlib.sha256(b"\x36" * 65).digest()),  # longer than the block: hashed
    ],
    ids=["zero-byte", "to-the-block", "hashed"],
)
def test_secrets_hmac_takes_for_one_key_are_one_secret(java: bytes, php: bytes) -> None:
    """Found by an attack (issue 44): a Java SDK key K beside a PHP SDK key K + 0x00 passed the
    equal-secret check, yet HMAC keys both alike, so every Java token opened under the PHP key
    first and was read as PHP. Shown on real tokens, then refused at load."""
    at = 1_800_000_000
    java_key, php_key = Key.from_secret("mcp-java-v1", java), Key.from_secret("mcp-php-v1", php)
    assert java_key.secret != php_key.secret and java_key.kid != php_key.kid
    token = ms.mint(
        ms.Keyset([java_key]), "s", format="mcp-java", method="tools/call", target="t", now=at
    )
    php_only = ms.Keyset([php_key])
    # the PHP key's MAC opens the Java token: HMAC took the two secrets for one key
    with pytest.raises(ms.InvalidToken) as read_as_php:
        ms.verify(php_only, token, method="tools/call", target="t", now=at)
    assert read_as_php.value.code != "bad_signature"
    with pytest.raises(KeysetInvalid, match=r"hold the same secret \(as their MAC uses it\)"):
        ms.Keyset([java_key, php_key])
    with pytest.raises(KeysetInvalid, match=r"hold the same secret \(as their MAC uses it\)"):
        ms.Keyset([php_key, java_key])


def test_hmac_keys_that_differ_as_hmac_takes_them_may_share_a_keyset() -> None:
    ms.Keyset(
        [
            Key.from_secret("mcp-java-v1", b"\x35" * 32),
            Key.from_secret("mcp-php-v1", b"\x35" * 32 + b"\x01"),
            Key.from_secret("mcp-php-v1", b"\x35" * 65, status="active"),  # hashed, no prefix
        ]
    )
