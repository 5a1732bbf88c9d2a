"""The pkcs11: KEK against a real PKCS#11 token: SoftHSM2, with an AES key that never leaves it.

``.ci/run`` installs SoftHSM2 from Debian; under the CI profile a missing SoftHSM2 fails the run
instead of skipping, so these tests cannot silently stop running.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import mrtr_state as ms
from mrtr_state.errors import KekRefused, KekUnavailable
from mrtr_state.keys.keyset import Keyset

from .conftest import NOW

MODULE = "/usr/lib/softhsm/libsofthsm2.so"
TOKEN = "mrtr-test"

if not (shutil.which("softhsm2-util") and os.path.isfile(MODULE)):
    if os.environ.get("MRTR_STATE_TEST_PROFILE") == "ci":
        raise RuntimeError("CI needs SoftHSM2 (apt-get install softhsm2) for the pkcs11: tests")
    pytest.skip("SoftHSM2 is not installed (apt-get install softhsm2)", allow_module_level=True)
pytest.importorskip("pkcs11")


class Hsm:
    """A SoftHSM2 token for this test session, its PIN in a 0600 file."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.pin_file = folder / "pin"

    def uri(self, obj: str = "kek", pin: Path | None = None, token: str = TOKEN) -> str:
        return (
            f"pkcs11:token={token};object={obj}"
            f"?module-path={MODULE}&pin-source=file:{pin or self.pin_file}"
        )


@pytest.fixture(scope="session")
def hsm() -> Iterator[Hsm]:
    folder = Path(tempfile.mkdtemp(prefix="mrtr-softhsm-"))
    (folder / "tokens").mkdir()
    conf = folder / "softhsm2.conf"
    conf.write_text(f"directories.tokendir = {folder}/tokens\nobjectstore.backend = file\n")
    os.environ["SOFTHSM2_CONF"] = str(conf)  # read once, when the library initialises
    subprocess.run(
        [
            "softhsm2-util",
            "--init-token",
            "--free",
            "--label",
            TOKEN,
            "--pin",
            "4321",
            "--so-pin",
            "87654321",
        ],
        check=True,
        capture_output=True,
    )
    found = Hsm(folder)
    found.pin_file.write_text("4321\n")
    found.pin_file.chmod(0o600)
    import pkcs11

    from mrtr_state.keys.kek.pkcs11 import _library

    lib = _library(MODULE, "setup")
    with lib.get_token(token_label=TOKEN).open(user_pin="4321", rw=True) as session:
        for label in ("kek", "other", "twin", "twin"):
            session.generate_key(
                pkcs11.KeyType.AES,
                256,
                label=label,
                store=True,
                template={
                    pkcs11.Attribute.EXTRACTABLE: False,
                    pkcs11.Attribute.SENSITIVE: True,
                },
            )
    yield found
    shutil.rmtree(folder, ignore_errors=True)


def test_a_keyset_round_trips_through_the_hsm(tmp_path: Path, hsm: Hsm) -> None:
    path = tmp_path / "keyset.json"
    original = Keyset.generate(now=NOW)
    original.save(path, kek=hsm.uri())
    record = json.loads(path.read_text())["data_key"]
    assert record["mechanism"] == "CKM_AES_GCM"
    loaded = Keyset.load(path, kek=hsm.uri())
    assert [k.to_jwk() for k in loaded] == [k.to_jwk() for k in original]
    token = ms.mint(loaded, {"hsm": True}, principal="p", request_id="r", ttl=60)
    assert ms.verify(original, token, principal="p", request_id="r").state == {"hsm": True}


def test_the_kek_never_leaves_the_token(hsm: Hsm) -> None:
    import pkcs11

    from mrtr_state.keys.kek.pkcs11 import _library

    with _library(MODULE, "t").get_token(token_label=TOKEN).open(user_pin="4321") as session:
        key = session.get_key(label="kek", object_class=pkcs11.ObjectClass.SECRET_KEY)
        assert key[pkcs11.Attribute.EXTRACTABLE] is False
        assert key[pkcs11.Attribute.SENSITIVE] is True
        with pytest.raises(pkcs11.exceptions.AttributeSensitive):
            key[pkcs11.Attribute.VALUE]


def test_rewrap_moves_a_passphrase_keyset_into_the_hsm(
    tmp_path: Path, hsm: Hsm, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MRTR_TEST_PASSPHRASE", "correct horse battery staple")
    from mrtr_state.keys.kek import kek_from_uri

    path = tmp_path / "keyset.json"
    Keyset.generate(now=NOW).save(
        path, kek=kek_from_uri("passphrase:env:MRTR_TEST_PASSPHRASE", kdf_log_n=10)
    )
    Keyset.convert(path, kek="passphrase:env:MRTR_TEST_PASSPHRASE", to_kek=hsm.uri())
    assert len(Keyset.load(path, kek=hsm.uri())) == 3


def test_a_wrong_pin_is_refused_by_the_token(tmp_path: Path, hsm: Hsm) -> None:
    path = tmp_path / "keyset.json"
    Keyset.generate().save(path, kek=hsm.uri())
    wrong = tmp_path / "wrong-pin"
    wrong.write_text("0000")
    wrong.chmod(0o600)
    doc = json.loads(path.read_text())
    doc["kek"] = hsm.uri(pin=wrong)  # the same key, reached with another PIN
    with pytest.raises(KekUnavailable, match="refused the PIN"):
        Keyset.from_json(json.dumps(doc), kek=hsm.uri(pin=wrong))


def test_a_missing_object_or_token_is_unavailable(tmp_path: Path, hsm: Hsm) -> None:
    with pytest.raises(KekUnavailable, match="holds no AES secret key"):
        Keyset.generate().save(tmp_path / "a.json", kek=hsm.uri(obj="no-such-key"))
    with pytest.raises(KekUnavailable, match="no token matches"):
        Keyset.generate().save(tmp_path / "b.json", kek=hsm.uri(token="no-such-token"))
    assert not list(tmp_path.glob("*.json"))


def test_an_ambiguous_key_is_unavailable(tmp_path: Path, hsm: Hsm) -> None:
    with pytest.raises(KekUnavailable, match="several AES keys match"):
        Keyset.generate().save(tmp_path / "k.json", kek=hsm.uri(obj="twin"))


def test_a_missing_library_is_unavailable(tmp_path: Path, hsm: Hsm) -> None:
    uri = hsm.uri().replace(MODULE, str(tmp_path / "libnothing.so"))
    with pytest.raises(KekUnavailable, match="no PKCS#11 library"):
        Keyset.generate().save(tmp_path / "k.json", kek=uri)


def test_without_python_pkcs11_the_extra_is_named(
    tmp_path: Path, hsm: Hsm, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "pkcs11", None)  # as if the extra were not installed
    with pytest.raises(KekUnavailable, match=r"mrtr-state\[pkcs11\]"):
        Keyset.generate().save(tmp_path / "k.json", kek=hsm.uri())


def test_a_record_from_another_keyset_is_refused_inside_the_hsm(tmp_path: Path, hsm: Hsm) -> None:
    mine, theirs = tmp_path / "a.json", tmp_path / "b.json"
    Keyset.generate().save(mine, kek=hsm.uri())
    Keyset.generate().save(theirs, kek=hsm.uri())
    doc = json.loads(mine.read_text())
    doc["data_key"] = json.loads(theirs.read_text())["data_key"]
    mine.write_text(json.dumps(doc))
    with pytest.raises(KekRefused, match="does not open this keyset's data key"):
        Keyset.load(mine, kek=hsm.uri())


def test_the_cli_verifies_with_an_hsm_kek_in_a_fresh_process(tmp_path: Path, hsm: Hsm) -> None:
    path = tmp_path / "keyset.json"
    env = {**os.environ, "MRTR_STATE_KEK": hsm.uri(), "MRTR_STATE_KEYSET": str(path)}
    cli = [sys.executable, "-m", "mrtr_state"]
    subprocess.run([*cli, "keys", "init"], env=env, check=True, capture_output=True)
    token = subprocess.run(
        [*cli, "mint", "--principal", "p", "--request-id", "r"],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    done = subprocess.run(
        [*cli, "verify", "--principal", "p", "--request-id", "r", token],
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    env["MRTR_STATE_KEK"] = hsm.uri(obj="other")
    done = subprocess.run(
        [*cli, "verify", "--principal", "p", "--request-id", "r", token],
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 6 and "was encrypted under KEK" in done.stderr


def test_a_pin_that_is_not_text_is_unavailable(tmp_path: Path, hsm: Hsm) -> None:
    pin = tmp_path / "pin"
    pin.write_bytes(b"\xff\xfe")
    pin.chmod(0o600)
    with pytest.raises(KekUnavailable, match="PIN is not UTF-8"):
        Keyset.generate().save(tmp_path / "k.json", kek=hsm.uri(pin=pin))


def test_a_record_of_another_kind_of_kek_is_refused_before_the_token_is_asked(
    tmp_path: Path, hsm: Hsm
) -> None:
    from mrtr_state.keys.kek import kek_from_uri

    with pytest.raises(KekRefused, match="not a PKCS#11 AES-GCM record"):
        kek_from_uri(hsm.uri()).unwrap({"wrapped": "AAAA"}, b"context")
