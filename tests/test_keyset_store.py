"""Keyset persistence (mrtr_state/keyset_store.py, on keyfile.py): file content refused with
what is wrong, permissions, symlinks, corruption, atomic writes and the writer lock."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

import mrtr_state as ms
from mrtr_state._encoding import b64url_encode
from mrtr_state.keys.file import keyset_lock

from .conftest import NOW


def jwk(
    kid: str = "0a0b0c0d",
    *,
    alg: str = "A256GCM",
    status: str = "primary",
    secret: bytes = b"\x01" * 32,
    **extra: object,
) -> dict[str, object]:
    return {
        "kty": "oct",
        "kid": kid,
        "alg": alg,
        "k": b64url_encode(secret),
        "status": status,
        **extra,
    }


def write_keyset(path: Path, document: object, mode: int = 0o600) -> Path:
    path.write_text(json.dumps(document))
    path.chmod(mode)
    return path


def test_generate_save_and_load_round_trip(tmp_path: Path) -> None:
    keyset = ms.Keyset.generate(("A256GCM", "HS256"), now=NOW)
    path = tmp_path / "keyset.json"
    keyset.save(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    loaded = ms.Keyset.load(path)
    assert [(k.kid, k.alg, k.secret, k.status, dict(k.since)) for k in loaded] == [
        (k.kid, k.alg, k.secret, k.status, {"primary": NOW}) for k in keyset
    ]
    assert loaded.primary("A256GCM").alg == "A256GCM"


def test_save_refuses_to_overwrite_unless_asked(keyset_path: Path) -> None:
    before = keyset_path.read_bytes()
    with pytest.raises(ms.KeysetExists, match="--force"):
        ms.Keyset.generate().save(keyset_path)
    assert keyset_path.read_bytes() == before
    ms.Keyset.generate().save(keyset_path, overwrite=True)
    assert keyset_path.read_bytes() != before


@pytest.mark.parametrize(
    ("name", "document", "message"),
    [
        ("not-json", "{", "not valid JSON"),
        ("not-a-set", {"kid": "x"}, '"keys" list'),
        ("keys-not-list", {"keys": {}}, '"keys" list'),
        ("key-not-object", {"keys": [1]}, "not a JSON object"),
        ("duplicate-json-member", '{"keys":[],"keys":[]}', "duplicate"),
        ("wrong-kty", {"keys": [jwk(kty="RSA")]}, "kty"),
        ("bad-kid", {"keys": [jwk(kid="../../etc/passwd")]}, "8 lowercase hex"),
        ("uppercase-kid", {"keys": [jwk(kid="0A0B0C0D")]}, "8 lowercase hex"),
        ("unknown-alg", {"keys": [jwk(alg="HS512")]}, "unknown alg 'HS512'"),
        ("short-key", {"keys": [jwk(secret=b"\x01" * 16)]}, "needs a secret of exactly 32 bytes"),
        ("long-key", {"keys": [jwk(secret=b"\x01" * 33)]}, "needs a secret of exactly 32 bytes"),
        ("padded-k", {"keys": [{**jwk(), "k": b64url_encode(b"\x01" * 32) + "="}]}, "canonical"),
        ("unknown-status", {"keys": [jwk(status="spare")]}, "unknown status"),
        ("unknown-member", {"keys": [jwk(use="sig")]}, "unknown members use"),
        ("bad-since", {"keys": [jwk(since={"primary": "yesterday"})]}, "since"),
        ("duplicate-kid", {"keys": [jwk(), jwk(alg="HS256")]}, "appears twice"),
        (
            "two-primaries",
            {"keys": [jwk("00000001"), jwk("00000002", secret=b"\x02" * 32)]},
            "both primary",
        ),
    ],
)
def test_invalid_keysets_are_refused_with_a_fix(
    tmp_path: Path, name: str, document: object, message: str
) -> None:
    path = tmp_path / "keyset.json"
    if isinstance(document, str):
        path.write_text(document)
        path.chmod(0o600)
    else:
        write_keyset(path, document)
    with pytest.raises(ms.KeysetInvalid, match=message) as caught:
        ms.Keyset.load(path)
    assert caught.value.exit_code == 6
    assert b64url_encode(b"\x01" * 32) not in str(caught.value)


def test_a_symlinked_keyset_reads_but_is_never_written(tmp_path: Path) -> None:
    real = write_keyset(tmp_path / "real.json", {"keys": [jwk()]})
    link = tmp_path / "link.json"
    link.symlink_to(real)
    assert ms.Keyset.load(link).get("0a0b0c0d") is not None
    with pytest.raises(ms.KeysetPermissions, match="is a symlink"):
        ms.Keyset.generate().save(link, overwrite=True)
    with pytest.raises(ms.KeysetPermissions, match="is a symlink"):
        ms.Keyset.update(link, lambda current: current)
    assert ms.Keyset.load(real).get("0a0b0c0d") is not None
    assert not (tmp_path / "link.json.lock").exists()  # refused before taking the lock


def test_a_folder_or_missing_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ms.KeysetNotFound, match="no keyset at") as missing:
        ms.Keyset.load(tmp_path / "absent.json")
    # the library names no command; it names the remedy, which the CLI words as its own
    assert "mrtr-state" not in str(missing.value)
    assert missing.value.remedy == ("create_keyset", {})
    folder = tmp_path / "dir.json"
    folder.mkdir(mode=0o700)
    with pytest.raises(ms.KeysetPermissions, match="not a regular file"):
        ms.Keyset.load(folder)


def test_update_is_atomic_and_keeps_mode(keyset_path: Path) -> None:
    def add_key(current: ms.Keyset) -> ms.Keyset:
        return current.with_new_key("HS256", now=NOW)[0]

    before = len(ms.Keyset.load(keyset_path))
    ms.Keyset.update(keyset_path, add_key)
    after = ms.Keyset.load(keyset_path)
    assert len(after) == before + 1
    assert [k.status for k in after if k.alg == "HS256"] == ["primary", "pending"]
    assert stat.S_IMODE(keyset_path.stat().st_mode) == 0o600
    leftovers = [
        p.name
        for p in keyset_path.parent.iterdir()
        if p.name not in ("keyset.json", "keyset.json.lock")
    ]
    assert leftovers == []


def test_a_failed_change_leaves_the_file_untouched(keyset_path: Path) -> None:
    before = keyset_path.read_bytes()

    def break_it(current: ms.Keyset) -> ms.Keyset:
        key = next(iter(current))
        return current.with_keys([key, key])  # duplicate kid: refused

    with pytest.raises(ms.KeysetInvalid):
        ms.Keyset.update(keyset_path, break_it)
    assert keyset_path.read_bytes() == before


def test_the_lock_times_out_while_another_writer_holds_it(keyset_path: Path) -> None:
    # flock locks belong to the open file, so a second open in this process contends too
    with (
        keyset_lock(keyset_path),
        pytest.raises(ms.KeysetLocked, match="another process"),
        keyset_lock(keyset_path, timeout=0.1),
    ):
        pass


def test_new_keyset_folders_are_private(tmp_path: Path) -> None:
    path = tmp_path / "fresh" / "keyset.json"
    ms.Keyset.generate().save(path)
    assert stat.S_IMODE(path.parent.stat().st_mode) & 0o077 == 0
    assert stat.S_IMODE(os.stat(str(path) + ".lock").st_mode) == 0o600


def test_a_keyset_generated_at_a_fractional_time_saves_and_loads(tmp_path: Path) -> None:
    """Found while benchmarking: now=1.8e9 wrote float times that the loader then refused."""
    keyset = ms.Keyset.generate(now=1_800_000_000.7)  # type: ignore[arg-type]
    keyset.save(tmp_path / "keyset.json")
    loaded = ms.Keyset.load(tmp_path / "keyset.json")
    assert {key.since["primary"] for key in loaded if "primary" in key.since} == {1_800_000_000}
