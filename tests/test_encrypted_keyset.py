"""Encrypted keysets: round trips under each software KEK, and every way a file, a KEK or a
helper can be wrong refused with its own error, the keyset file never rewritten.

The KEKs are real (scrypt, AES-GCM, a helper program speaking the documented protocol); the
scrypt cost is lowered to 2^10 where a test wraps many times, which changes speed, not logic.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import mrtr_state as ms
from mrtr_state.errors import (
    ConfigError,
    KekRefused,
    KekRequired,
    KekUnavailable,
    KeysetInvalid,
    KeysetTampered,
)
from mrtr_state.keys.encryption import MARKER
from mrtr_state.keys.kek import Kek, kek_from_uri
from mrtr_state.keys.keyset import Keyset, listed_without_kek

from .conftest import NOW

HELPER = Path(__file__).resolve().parent / "kek_helper.py"
PASS_URI = "passphrase:env:MRTR_TEST_PASSPHRASE"


@pytest.fixture
def passphrase(monkeypatch: pytest.MonkeyPatch) -> Kek:
    monkeypatch.setenv("MRTR_TEST_PASSPHRASE", "correct horse battery staple")
    return kek_from_uri(PASS_URI, kdf_log_n=10)


@pytest.fixture
def helper_key(tmp_path: Path) -> Path:
    path = tmp_path / "helper-kek.bin"
    path.write_bytes(os.urandom(32))
    return path


def helper_uri(key: Path) -> str:
    return f"exec:{sys.executable} {HELPER} {key}"


def encrypted(tmp_path: Path, kek: Kek, name: str = "keyset.json") -> Path:
    path = tmp_path / name
    Keyset.generate(now=NOW).save(path, kek=kek)
    return path


def document(path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(path.read_text())
    return loaded


def rewrite(path: Path, doc: dict[str, Any]) -> None:
    path.write_text(json.dumps(doc))


# --- round trips --------------------------------------------------------------------------------


def test_a_passphrase_keyset_round_trips_and_hides_every_secret(
    tmp_path: Path, passphrase: Kek
) -> None:
    original = Keyset.generate(now=NOW)
    path = tmp_path / "keyset.json"
    original.save(path, kek=passphrase)
    text = path.read_text()
    for key in original:
        assert key.to_jwk()["k"] not in text
        assert key.kid in text  # the metadata stays readable
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    loaded = Keyset.load(path, kek=PASS_URI)  # a fresh KEK object from the URI alone
    assert [k.to_jwk() for k in loaded] == [k.to_jwk() for k in original]
    assert loaded.kek_uri == PASS_URI
    token = ms.mint(loaded, {"step": 2}, principal="alice", request_id="r1", ttl=60)
    assert ms.verify(original, token, principal="alice", request_id="r1").state == {"step": 2}


def test_a_helper_keyset_round_trips_through_the_protocol(tmp_path: Path, helper_key: Path) -> None:
    kek = kek_from_uri(helper_uri(helper_key))
    path = encrypted(tmp_path, kek)
    assert document(path)["data_key"].keys() == {"wrapped"}
    loaded = Keyset.load(path, kek=helper_uri(helper_key))
    assert len(loaded) == 3


def test_a_write_keeps_the_data_key_and_never_asks_the_kek_again(
    tmp_path: Path, helper_key: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "calls.log"
    monkeypatch.setenv("MRTR_TEST_KEK_LOG", str(log))
    kek = kek_from_uri(helper_uri(helper_key))
    path = encrypted(tmp_path, kek)
    record = document(path)["data_key"]
    for _ in range(3):
        Keyset.update(path, lambda ks: ks.with_new_key("HS256", now=NOW)[0], kek=kek)
    assert document(path)["data_key"] == record  # same wrapped data key
    assert len(Keyset.load(path, kek=kek)) == 6
    assert log.read_text().split() == ["wrap", "unwrap"]  # one unwrap for four reads


def test_a_followed_keyset_reloads_a_rotation_without_the_kek(
    tmp_path: Path, helper_key: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "calls.log"
    monkeypatch.setenv("MRTR_TEST_KEK_LOG", str(log))
    kek = kek_from_uri(helper_uri(helper_key))
    path = encrypted(tmp_path, kek)
    live = Keyset.load(path, reload_interval=0, kek=helper_uri(helper_key))
    writer = kek_from_uri(helper_uri(helper_key))
    Keyset.update(path, lambda ks: ks.with_new_key("A256GCM", now=NOW)[0], kek=writer)
    assert live.reload() is True
    assert len(live) == 4
    # the live keyset unwrapped once at load; the writer once to write: never per reload
    assert log.read_text().split() == ["wrap", "unwrap", "unwrap"]


def test_rewrap_changes_only_the_kek_and_keeps_every_token_valid(
    tmp_path: Path, passphrase: Kek, helper_key: Path
) -> None:
    path = encrypted(tmp_path, passphrase)
    before = Keyset.load(path, kek=passphrase)
    token = ms.mint(before, {"n": 1}, principal="p", request_id="r", ttl=60)
    old = document(path)
    Keyset.convert(path, kek=passphrase, to_kek=helper_uri(helper_key))
    new = document(path)
    assert new["id"] == old["id"] and new["keys"] == old["keys"]
    assert new["kek"] == helper_uri(helper_key) and new["data_key"] != old["data_key"]
    after = Keyset.load(path, kek=helper_uri(helper_key))
    assert ms.verify(after, token, principal="p", request_id="r").state == {"n": 1}
    with pytest.raises(KekRefused, match="was encrypted under KEK exec:"):
        Keyset.load(path, kek=passphrase)


def test_encrypt_and_decrypt_convert_a_keyset_without_changing_a_key(
    tmp_path: Path, passphrase: Kek
) -> None:
    path = tmp_path / "keyset.json"
    plain = Keyset.generate(now=NOW)
    plain.save(path)
    Keyset.convert(path, kek=None, to_kek=passphrase)
    assert MARKER in document(path)
    Keyset.convert(path, kek=passphrase, to_kek=None)
    assert [k.to_jwk() for k in Keyset.load(path)] == [k.to_jwk() for k in plain]


def test_an_inline_keyset_may_be_encrypted(tmp_path: Path, passphrase: Kek) -> None:
    path = encrypted(tmp_path, passphrase)
    assert len(Keyset.from_json(path.read_text(), kek=passphrase)) == 3


def test_keys_are_listed_from_the_clear_metadata_without_the_kek(
    tmp_path: Path, passphrase: Kek
) -> None:
    path = encrypted(tmp_path, passphrase)
    listed = listed_without_kek(path)
    assert listed is not None
    uri, keys = listed
    assert uri == PASS_URI
    assert [k.describe() for k in keys] == [k.describe() for k in Keyset.load(path, kek=passphrase)]
    assert all(k.secret == b"" for k in keys)
    plain = tmp_path / "plain.json"
    Keyset.generate().save(plain)
    assert listed_without_kek(plain) is None


# --- what a KEK must refuse ---------------------------------------------------------------------


def test_an_encrypted_keyset_without_a_kek_is_refused(tmp_path: Path, passphrase: Kek) -> None:
    path = encrypted(tmp_path, passphrase)
    with pytest.raises(KekRequired, match=f"encrypted \\(KEK {PASS_URI}\\)"):
        Keyset.load(path)


def test_a_plain_keyset_where_a_kek_is_configured_is_refused(
    tmp_path: Path, passphrase: Kek
) -> None:
    path = tmp_path / "keyset.json"
    Keyset.generate().save(path)
    with pytest.raises(KekRequired, match="is not encrypted, but a KEK"):
        Keyset.load(path, kek=passphrase)


def test_the_wrong_passphrase_is_refused(
    tmp_path: Path, passphrase: Kek, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = encrypted(tmp_path, passphrase)
    monkeypatch.setenv("MRTR_TEST_PASSPHRASE", "incorrect horse battery staple")
    with pytest.raises(KekRefused, match="wrong passphrase"):
        Keyset.load(path, kek=PASS_URI)


def test_an_unset_or_empty_passphrase_is_unavailable_not_empty(
    tmp_path: Path, passphrase: Kek, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = encrypted(tmp_path, passphrase)
    monkeypatch.setenv("MRTR_TEST_PASSPHRASE", "")
    with pytest.raises(KekUnavailable, match="not set or empty"):
        Keyset.load(path, kek=PASS_URI)
    monkeypatch.delenv("MRTR_TEST_PASSPHRASE")
    with pytest.raises(KekUnavailable, match="MRTR_TEST_PASSPHRASE"):
        Keyset.load(path, kek=PASS_URI)


def test_a_passphrase_file_must_be_private(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = tmp_path / "passphrase"
    secret.write_text("correct horse battery staple\n")
    secret.chmod(0o600)
    uri = f"passphrase:file:{secret}"
    path = encrypted(tmp_path, kek_from_uri(uri, kdf_log_n=10))
    assert len(Keyset.load(path, kek=uri)) == 3  # the trailing newline is not part of it
    secret.chmod(0o644)
    with pytest.raises(KekUnavailable, match="mode 0644"):
        Keyset.load(path, kek=uri)
    secret.unlink()
    with pytest.raises(KekUnavailable, match="no passphrase file"):
        Keyset.load(path, kek=uri)


def test_a_short_passphrase_never_wraps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MRTR_TEST_PASSPHRASE", "hunter2")
    with pytest.raises(KekUnavailable, match="at least 12"):
        Keyset.generate().save(tmp_path / "k.json", kek=PASS_URI)
    assert not (tmp_path / "k.json").exists()


@pytest.mark.parametrize(
    ("uri", "message"),
    [
        ("", "empty"),
        ("vault:transit/mcp", "no known provider"),
        ("passphrase:hunter2", "passphrase:env:NAME"),
        ("passphrase:env:", "passphrase:env:NAME"),
        ("exec:", "names no command"),
        ("exec:'unclosed", "does not parse"),
        ("pkcs11:token=a;object=b?module-path=/x.so&pin-value=1234", "pin-value"),
        ("pkcs11:token=a;object=b?pin-source=env:P", "module-path"),
        ("pkcs11:token=a;object=b?module-path=/x.so", "pin-source"),
        ("pkcs11:object=b?module-path=/x.so&pin-source=env:P", "token="),
        ("pkcs11:token=a?module-path=/x.so&pin-source=env:P", "object="),
        ("pkcs11:token=a;object=b;slot-id=3?module-path=/x.so&pin-source=env:P", "not supported"),
        ("pkcs11:token=a;token=b;object=c?module-path=/x.so&pin-source=env:P", "twice"),
        ("pkcs11:token=a;object=b;type=private?module-path=/x.so&pin-source=env:P", "secret-key"),
        ("pkcs11:token=a;object=b?module-path=/x.so&pin-source=1234", "env:NAME or file:PATH"),
    ],
)
def test_a_kek_uri_that_cannot_be_right_is_a_config_error(uri: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        kek_from_uri(uri)


def test_kdf_cost_is_for_passphrases_and_bounded() -> None:
    with pytest.raises(ConfigError, match="passphrase: KEKs only"):
        kek_from_uri("exec:/bin/true", kdf_log_n=12)
    with pytest.raises(ConfigError, match=r"10\.\.20"):
        kek_from_uri(PASS_URI, kdf_log_n=24)


# --- a file changed without the KEK -------------------------------------------------------------


def _flip_status(doc: dict[str, Any]) -> None:
    doc["keys"][0]["status"] = "retired"


def _add_key_id(doc: dict[str, Any]) -> None:
    doc["keys"].append({**doc["keys"][0], "kid": "0badc0de"})


def _drop_key(doc: dict[str, Any]) -> None:
    del doc["keys"][1]


def _move_time(doc: dict[str, Any]) -> None:
    doc["keys"][0]["since"] = {"primary": 1}


def _change_alg(doc: dict[str, Any]) -> None:
    doc["keys"][2]["alg"] = "A256GCM"


def _edit_secrets(doc: dict[str, Any]) -> None:
    text = doc["secrets"]["ciphertext"]
    doc["secrets"]["ciphertext"] = ("A" if text[0] != "A" else "B") + text[1:]


@pytest.mark.parametrize(
    "tamper", [_flip_status, _add_key_id, _drop_key, _move_time, _change_alg, _edit_secrets]
)
def test_metadata_or_secrets_changed_without_the_kek_fail_authentication(
    tmp_path: Path, passphrase: Kek, tamper: Any
) -> None:
    path = encrypted(tmp_path, passphrase)
    doc = document(path)
    tamper(doc)
    rewrite(path, doc)
    with pytest.raises(KeysetTampered, match="fails authentication"):
        Keyset.load(path, kek=passphrase)


def test_a_data_key_record_swapped_from_another_keyset_is_refused(
    tmp_path: Path, passphrase: Kek
) -> None:
    mine, theirs = (
        encrypted(tmp_path, passphrase, "a.json"),
        encrypted(tmp_path, passphrase, "b.json"),
    )
    doc = document(mine)
    doc["data_key"] = document(theirs)["data_key"]  # same passphrase, another keyset
    rewrite(mine, doc)
    with pytest.raises(KekRefused, match="another keyset"):
        Keyset.load(mine, kek=passphrase)


def test_a_whole_other_keyset_of_the_same_kek_is_not_this_one_spliced(
    tmp_path: Path, passphrase: Kek
) -> None:
    """Swapping id and data key together unwraps (it is the other file's pair), and then the
    secrets, bound to this file's header, fail."""
    mine, theirs = (
        encrypted(tmp_path, passphrase, "a.json"),
        encrypted(tmp_path, passphrase, "b.json"),
    )
    doc, other = document(mine), document(theirs)
    doc["id"], doc["data_key"] = other["id"], other["data_key"]
    rewrite(mine, doc)
    with pytest.raises(KeysetTampered):
        Keyset.load(mine, kek=passphrase)


def test_a_kek_uri_edited_in_the_file_is_never_run_and_fails_authentication(
    tmp_path: Path, passphrase: Kek
) -> None:
    path = encrypted(tmp_path, passphrase)
    doc = document(path)
    evidence = tmp_path / "ran"
    doc["kek"] = f"exec:touch {evidence}"
    rewrite(path, doc)
    with pytest.raises(KeysetTampered):
        Keyset.load(path, kek=passphrase)  # the configured KEK is used, never the file's
    assert not evidence.exists()


def test_the_same_kek_reached_by_another_uri_opens_the_keyset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rotation job and the replicas may mount the passphrase at different paths."""
    for folder in ("job", "replica"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "passphrase").write_text("one passphrase, two mounts")
        (tmp_path / folder / "passphrase").chmod(0o400)
    written_by = f"passphrase:file:{tmp_path}/job/passphrase"
    path = encrypted(tmp_path, kek_from_uri(written_by, kdf_log_n=10))
    assert len(Keyset.load(path, kek=f"passphrase:file:{tmp_path}/replica/passphrase")) == 3


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d.pop("secrets"), "missing secrets"),
        (lambda d: d.update(extra=1), "unknown members extra"),
        (lambda d: d.update({MARKER: 2}), "version 2"),
        (lambda d: d.update(id="short"), "id must be 16 bytes"),
        (lambda d: d.update(kek=""), "kek must be"),
        (lambda d: d.update(data_key=[]), "data_key must be an object"),
        (lambda d: d.update(keys={}), "keys must be a list"),
        (lambda d: d["keys"][0].update(k="AAAA"), "carries its secret"),
        (lambda d: d["secrets"].update(nonce="AAAA"), "12-byte nonce"),
        (lambda d: d["secrets"].pop("ciphertext"), "12-byte nonce"),
    ],
)
def test_a_malformed_encrypted_keyset_is_refused_by_shape(
    tmp_path: Path, passphrase: Kek, edit: Any, message: str
) -> None:
    path = encrypted(tmp_path, passphrase)
    doc = document(path)
    edit(doc)
    rewrite(path, doc)
    with pytest.raises(KeysetInvalid, match=message):
        Keyset.load(path, kek=passphrase)


def test_a_truncated_file_is_refused(tmp_path: Path, passphrase: Kek) -> None:
    path = encrypted(tmp_path, passphrase)
    path.write_text(path.read_text()[:300])
    with pytest.raises(KeysetInvalid, match="not valid JSON"):
        Keyset.load(path, kek=passphrase)


@pytest.mark.parametrize(
    ("member", "value", "message"),
    [
        ("log_n", 30, "log_n must be"),  # a tampered cost never runs: 2^30 would take 1 TiB
        ("log_n", 14.0, "log_n must be"),
        ("r", 1024, "r must be 8"),
        ("p", 64, "p 1..4"),
        ("kdf", "argon2id", "not a scrypt"),
        ("salt", "!!", "salt is not base64url"),
        ("wrapped", "AAAA", "wrapped is 3 bytes"),
    ],
)
def test_a_passphrase_record_out_of_bounds_is_refused_before_scrypt_runs(
    tmp_path: Path, passphrase: Kek, member: str, value: Any, message: str
) -> None:
    path = encrypted(tmp_path, passphrase)
    doc = document(path)
    doc["data_key"][member] = value
    rewrite(path, doc)
    with pytest.raises(KekRefused, match=message):
        Keyset.load(path, kek=passphrase)


# --- a helper that misbehaves -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "error", "message"),
    [
        ("fail", KekUnavailable, r"exit 1\): the KMS said: AccessDeniedException"),
        ("garbage", KekUnavailable, "printed no valid answer"),
        ("huge", KekUnavailable, "printed no valid answer"),
        ("extra", KekUnavailable, "printed no valid answer"),
        ("refuse", KekRefused, "refused to unwrap the data key: InvalidCiphertextException"),
        ("short", KekRefused, "data key of 16 bytes"),
    ],
)
def test_a_misbehaving_helper_is_refused_with_what_it_did(
    tmp_path: Path,
    helper_key: Path,
    monkeypatch: pytest.MonkeyPatch,
    mode: str,
    error: type[Exception],
    message: str,
) -> None:
    path = encrypted(tmp_path, kek_from_uri(helper_uri(helper_key)))
    monkeypatch.setenv("MRTR_TEST_KEK_MODE", mode)
    with pytest.raises(error, match=message):
        Keyset.load(path, kek=helper_uri(helper_key))


def test_a_helper_with_another_key_refuses_the_data_key(tmp_path: Path, helper_key: Path) -> None:
    path = encrypted(tmp_path, kek_from_uri(helper_uri(helper_key)))
    helper_key.write_bytes(os.urandom(32))  # the KMS key was replaced
    with pytest.raises(KekRefused, match="decryption failed"):
        Keyset.load(path, kek=helper_uri(helper_key))


def test_a_helper_that_cannot_run_is_unavailable(tmp_path: Path) -> None:
    script = tmp_path / "helper.sh"
    script.write_text("#!/bin/sh\nexit 0\n")
    script.chmod(0o600)
    for uri, message in [
        (f"exec:{tmp_path}/missing-helper", "not found"),
        (f"exec:{script}", "not executable"),
    ]:
        with pytest.raises(KekUnavailable, match=message):
            Keyset.generate().save(tmp_path / "k.json", kek=uri)
    assert not (tmp_path / "k.json").exists()


def test_a_helper_that_hangs_is_cut_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mrtr_state.keys.kek import helper

    monkeypatch.setattr(helper, "TIMEOUT_SECONDS", 0.5)
    with pytest.raises(KekUnavailable, match="did not answer wrap within"):
        Keyset.generate().save(tmp_path / "k.json", kek="exec:sleep 30")


def test_a_data_key_is_never_printed(tmp_path: Path, passphrase: Kek) -> None:
    path = encrypted(tmp_path, passphrase)
    loaded = Keyset.load(path, kek=passphrase)
    assert loaded._sealing is not None
    shown = repr(loaded._sealing) + repr(loaded) + repr(passphrase)
    assert loaded._sealing._data_key.hex() not in shown
    assert "correct horse" not in shown


def test_the_sdk_codec_opens_an_encrypted_keyset_with_its_kek(
    tmp_path: Path, passphrase: Kek
) -> None:
    pytest.importorskip("mcp")
    from mrtr_state.sdk.codec import KeysetCodec

    path = encrypted(tmp_path, passphrase)
    codec = KeysetCodec(path, kek=PASS_URI)
    assert codec.unseal(codec.seal(b"sdk state")) == b"sdk state"
    with pytest.raises(KekRequired):
        KeysetCodec(path)


def test_a_request_never_waits_on_the_kek_and_a_check_loads_the_change(
    tmp_path: Path, helper_key: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rewrap (same KEK URI, a new wrapped data key) noticed while verifying is not opened on
    that request's path; the next look that may wait (check, as the proxy's watcher makes every
    second in a thread) calls the KEK once and loads it."""
    log = tmp_path / "calls.log"
    monkeypatch.setenv("MRTR_TEST_KEK_LOG", str(log))
    uri = helper_uri(helper_key)
    path = encrypted(tmp_path, kek_from_uri(uri))
    live = Keyset.load(path, reload_interval=0, kek=uri)
    token = ms.mint(live, {"n": 1}, request_id="r", ttl=60)
    Keyset.convert(path, kek=kek_from_uri(uri), to_kek=kek_from_uri(uri))
    Keyset.update(path, lambda ks: ks.with_new_key("HS256")[0], kek=uri)
    calls = log.read_text().split()
    assert ms.verify(live, token, request_id="r").state == {"n": 1}  # the request's look
    assert log.read_text().split() == calls and len(live) == 3  # no KEK call, old version
    assert live.check() is None
    assert log.read_text().split() == [*calls, "unwrap"] and len(live) == 4


def test_a_kek_that_failed_on_a_file_is_not_asked_again_every_second(
    tmp_path: Path, helper_key: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "calls.log"
    monkeypatch.setenv("MRTR_TEST_KEK_LOG", str(log))
    uri = helper_uri(helper_key)
    path = encrypted(tmp_path, kek_from_uri(uri))
    live = Keyset.load(path, reload_interval=0, kek=uri)
    Keyset.convert(path, kek=kek_from_uri(uri), to_kek=kek_from_uri(uri))  # a new record
    monkeypatch.setenv("MRTR_TEST_KEK_MODE", "fail")  # the KMS is down
    before = len(log.read_text().split())
    for _ in range(5):
        assert isinstance(live.check(), KekUnavailable)
    assert len(log.read_text().split()) == before + 1  # asked once, reported five times
    assert live.reload_failures == 5 and len(live) == 3
    monkeypatch.setenv("MRTR_TEST_KEK_MODE", "")
    Keyset.update(path, lambda ks: ks.with_new_key("HS256")[0], kek=uri)  # the file changes
    assert live.check() is None and len(live) == 4  # tried at once, and loaded


@pytest.mark.parametrize(
    "uri",
    [
        "pkcs11:token=%FF;object=k?module-path=/x.so&pin-source=env:P",
        "pkcs11:token=t;object=%C3?module-path=/x.so&pin-source=env:P",
        "pkcs11:token=t;object=k?module-path=/x%FF.so&pin-source=env:P",
    ],
)
def test_a_pkcs11_uri_that_is_not_utf8_once_decoded_is_a_config_error(uri: str) -> None:
    with pytest.raises(ConfigError, match="not UTF-8 once decoded"):
        kek_from_uri(uri)


def test_a_passphrase_with_an_undecodable_byte_is_its_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MRTR_TEST_PASSPHRASE", "correct horse \udcff battery staple")
    path = encrypted(tmp_path, kek_from_uri(PASS_URI, kdf_log_n=10))
    assert len(Keyset.load(path, kek=PASS_URI)) == 3


def test_a_record_of_another_kind_of_kek_is_refused_by_kind(
    tmp_path: Path, passphrase: Kek, helper_key: Path
) -> None:
    helper = kek_from_uri(helper_uri(helper_key))
    by_passphrase = document(encrypted(tmp_path, passphrase, "p.json"))["data_key"]
    by_helper = document(encrypted(tmp_path, helper, "h.json"))["data_key"]
    with pytest.raises(KekRefused, match="not a helper record"):
        helper.unwrap(by_passphrase, b"context")
    with pytest.raises(KekRefused, match="not a scrypt passphrase record"):
        passphrase.unwrap(by_helper, b"context")


def test_secrets_that_do_not_match_the_key_list_are_refused(
    tmp_path: Path, passphrase: Kek
) -> None:
    """Only a KEK holder can write such a file (it authenticates); it is refused all the same."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    from mrtr_state._encoding import b64url_encode
    from mrtr_state.keys.encryption import _associated_data

    path = encrypted(tmp_path, passphrase)
    loaded = Keyset.load(path, kek=passphrase)
    sealing = loaded._sealing
    assert sealing is not None
    doc = document(path)
    header = {name: doc[name] for name in (MARKER, "id", "kek", "data_key", "keys")}
    nonce = os.urandom(12)
    one_secret = json.dumps(["AAAA"]).encode()  # three keys listed, one secret
    sealed = AESGCM(sealing._data_key).encrypt(nonce, one_secret, _associated_data(header))
    doc["secrets"] = {"nonce": b64url_encode(nonce), "ciphertext": b64url_encode(sealed)}
    rewrite(path, doc)
    with pytest.raises(KeysetTampered, match="do not match the key list"):
        Keyset.load(path, kek=passphrase)


def test_any_single_change_to_an_encrypted_file_is_refused_with_our_error_or_is_harmless(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hypothesis: one character of the file replaced by any other. Either the change does not
    alter the document (whitespace for whitespace) and the same keys load, or a KeysetError is
    raised; never another exception, never other keys."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    monkeypatch.setenv("MRTR_TEST_PASSPHRASE", "correct horse battery staple")
    kek = kek_from_uri(PASS_URI, kdf_log_n=10)
    path = encrypted(tmp_path, kek)
    text = path.read_text()
    original = [k.to_jwk() for k in Keyset.load(path, kek=kek)]

    @settings(max_examples=300, deadline=None)
    @given(st.integers(0, len(text) - 1), st.characters(codec="utf-8"))
    def one_change(at: int, char: str) -> None:
        changed = text[:at] + char + text[at + 1 :]
        try:
            loaded = Keyset.from_json(changed, kek=kek)
        except ms.KeysetError:
            return
        assert [k.to_jwk() for k in loaded] == original

    one_change()


# --- the clear key list, read without the KEK (issue 35) ---------------------------------------


@pytest.mark.parametrize(
    ("member", "value", "message"),
    [
        ("alg", "RS256", "unknown alg 'RS256'"),
        ("status", ["primary"], r"unknown status \['primary'\]"),
        ("status", 7, "unknown status 7"),
        ("since", {"primary": 10**30}, "since must map statuses to unix seconds"),
        ("kid", "\x1b]0;x\x07", r"key '\\x1b\]0;x\\x07': a key id must be 8 lowercase hex"),
        ("sdk_kid", "2026-12", "carry no SDK key id"),
        ("x\x1b[2J\u202e", 1, r"unknown members x\\x1b\[2J\\u202e; remove them"),
    ],
)
def test_the_clear_list_holds_every_invariant_but_the_secrets(
    tmp_path: Path, passphrase: Kek, member: str, value: Any, message: str
) -> None:
    """listed_without_kek is what keys list shows without the KEK: each key is checked as a
    loaded keyset's are (ids, algorithms, statuses, times, one primary per algorithm), all but
    what needs the secret, and a refusal's text is inert (it reaches logs as well)."""
    path = encrypted(tmp_path, passphrase)
    doc = document(path)
    doc["keys"][1][member] = value
    rewrite(path, doc)
    with pytest.raises(KeysetInvalid, match=message) as caught:
        listed_without_kek(path)
    assert not {"\x1b", "\x07", "\u202e"} & set(str(caught.value))


def test_the_clear_list_refuses_a_second_primary_and_a_repeated_id(
    tmp_path: Path, passphrase: Kek
) -> None:
    path = encrypted(tmp_path, passphrase)
    doc = document(path)
    keys = doc["keys"]
    rewrite(path, {**doc, "keys": [*keys, {**keys[0], "kid": "0badc0de"}]})
    with pytest.raises(KeysetInvalid, match="are both primary for A256GCM"):
        listed_without_kek(path)
    rewrite(path, {**doc, "keys": [*keys, {**keys[0], "status": "active"}]})
    with pytest.raises(KeysetInvalid, match="appears twice"):
        listed_without_kek(path)


# --- what a helper can cost: memory, time, processes left behind (issue 35) --------------------


def _ended(pid: int) -> bool:
    """Whether process ``pid`` is gone (or a zombie its new parent has yet to reap)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def _wait_ended(pid: int) -> bool:
    for _ in range(100):
        if _ended(pid):
            return True
        time.sleep(0.05)
    return False


def test_a_helper_flooding_stdout_is_cut_off_at_the_cap(tmp_path: Path, helper_key: Path) -> None:
    """300 MB on stdout took the process to 612 MB: the output was read whole, then refused.
    Now at most the cap and one byte are read, and the helper's group is ended; measured in a
    process of its own, whose peak memory is this call's (VmHWM, the high-water mark of its own
    memory map: ru_maxrss would carry over the forking pytest's)."""
    uri = helper_uri(helper_key)
    path = encrypted(tmp_path, kek_from_uri(uri))
    probe = (
        "import sys\n"
        "from mrtr_state.errors import KekUnavailable\n"
        "from mrtr_state.keys.keyset import Keyset\n"
        "try:\n"
        "    Keyset.load(sys.argv[1], kek=sys.argv[2])\n"
        "except KekUnavailable as err:\n"
        "    print(err)\n"
        "status = open('/proc/self/status').read()\n"
        "print(status.split('VmHWM:')[1].split()[0])\n"
    )
    env = {**os.environ, "MRTR_TEST_KEK_MODE": "flood"}
    done = subprocess.run(
        [sys.executable, "-c", probe, str(path), uri], capture_output=True, text=True, env=env
    )
    said, peak_kib = done.stdout.splitlines()
    assert "printed no valid answer to unwrap: more than 65536 bytes on stdout" in said
    assert int(peak_kib) < 150 * 1024, f"peak {int(peak_kib) // 1024} MiB"


def test_a_helper_flooding_stderr_keeps_its_last_line(
    tmp_path: Path, helper_key: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """20 MB of stderr: its last 64 KiB are kept, and the last line of those is the reason."""
    uri = helper_uri(helper_key)
    path = encrypted(tmp_path, kek_from_uri(uri))
    monkeypatch.setenv("MRTR_TEST_KEK_MODE", "stderr-flood")
    with pytest.raises(KekUnavailable, match=r"exit 1\): the KMS said: ThrottlingException$"):
        Keyset.load(path, kek=uri)


def test_a_helper_whose_child_holds_the_pipes_answers_at_once_and_leaves_nothing(
    tmp_path: Path, helper_key: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A helper that starts a child (a credential agent, a shell's &) which inherits stdout
    and stderr: the pipes stay open after the helper exits. Waiting for their end waited out
    the timeout and left the child running; the conversation now ends with the helper, and
    its process group (the child too) is ended."""
    from mrtr_state.keys.kek import helper

    monkeypatch.setattr(helper, "TIMEOUT_SECONDS", 10.0)  # far more than an answer takes
    uri = helper_uri(helper_key)
    path = encrypted(tmp_path, kek_from_uri(uri))
    child = tmp_path / "child.pid"
    monkeypatch.setenv("MRTR_TEST_KEK_CHILD", str(child))
    monkeypatch.setenv("MRTR_TEST_KEK_MODE", "orphan")
    assert len(Keyset.load(path, kek=uri)) == 3  # answered: not cut off by the timeout
    assert _wait_ended(int(child.read_text()))


def test_a_hanging_helper_and_its_child_are_ended_at_the_timeout(
    tmp_path: Path, helper_key: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mrtr_state.keys.kek import helper

    uri = helper_uri(helper_key)
    path = encrypted(tmp_path, kek_from_uri(uri))
    monkeypatch.setattr(helper, "TIMEOUT_SECONDS", 1.0)
    child = tmp_path / "child.pid"
    monkeypatch.setenv("MRTR_TEST_KEK_CHILD", str(child))
    monkeypatch.setenv("MRTR_TEST_KEK_MODE", "orphan-hang")
    with pytest.raises(KekUnavailable, match="did not answer unwrap within 1 s"):
        Keyset.load(path, kek=uri)
    assert _wait_ended(int(child.read_text()))
