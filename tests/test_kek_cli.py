"""Encrypted keysets from the command line: every command with --kek, MRTR_STATE_KEK or the
config's kek; conversion commands; exit 6 with what to do; and SIGKILL during rewrap and rotate
never leaving anything but the old file or the new one."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from mrtr_state.cli import cli
from mrtr_state.errors import KekRefused
from mrtr_state.keys.keyset import Keyset

from .helpers import CLEAN_ENV, ROOT, raw_secret, run

URI = "passphrase:env:MRTR_TEST_PASSPHRASE"
OTHER = "passphrase:env:MRTR_TEST_OTHER"
ENV = {
    "MRTR_TEST_PASSPHRASE": "correct horse battery staple",
    "MRTR_TEST_OTHER": "a different long passphrase",
}


@pytest.fixture(autouse=True)
def passphrases(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)


@pytest.fixture
def sealed(tmp_path: Path) -> Path:
    path = tmp_path / "keyset.json"
    run("--keyset", str(path), "--kek", URI, "keys", "init", "--kdf-cost", "10")
    return path


def test_init_with_a_kek_writes_an_encrypted_keyset(sealed: Path) -> None:
    doc = json.loads(sealed.read_text())
    assert doc["kek"] == URI and doc["data_key"]["log_n"] == 10
    assert "k" not in doc["keys"][0]


def test_every_way_of_naming_the_kek_reaches_mint_and_verify(sealed: Path, tmp_path: Path) -> None:
    token = run(
        "--keyset", str(sealed), "mint", "--principal", "a", "--request-id", "r", "--kek", URI
    ).stdout.strip()
    verify = ("verify", "--principal", "a", "--request-id", "r", token)
    run("--keyset", str(sealed), *verify, env={"MRTR_STATE_KEK": URI})
    (tmp_path / "conf").mkdir()
    config = tmp_path / "conf" / "mrtr-state.toml"  # not beside the keyset: named explicitly
    config.write_text(f'kek = "{URI}"\n')
    config.chmod(0o600)
    run("--keyset", str(sealed), "--config", str(config), *verify)
    refused = run("--keyset", str(sealed), *verify, code=6)
    assert "is encrypted (KEK passphrase:env:MRTR_TEST_PASSPHRASE); give its KEK" in refused.stderr


def test_an_empty_kek_variable_is_an_error_not_no_kek(tmp_path: Path) -> None:
    path = tmp_path / "keyset.json"
    run("--keyset", str(path), "keys", "init")
    result = run("--keyset", str(path), "keys", "list", env={"MRTR_STATE_KEK": " "}, code=6)
    assert "MRTR_STATE_KEK is set but empty" in result.stderr


def test_a_plain_keyset_is_refused_where_a_kek_is_configured(tmp_path: Path) -> None:
    path = tmp_path / "keyset.json"
    run("--keyset", str(path), "keys", "init")
    token = run("--keyset", str(path), "mint", "--request-id", "r").stdout.strip()
    result = run("--keyset", str(path), "--kek", URI, "verify", "--request-id", "r", token, code=6)
    assert "keys encrypt --kek" in result.stderr


def test_lifecycle_commands_keep_the_keyset_encrypted(sealed: Path) -> None:
    before = json.loads(sealed.read_text())
    run("--keyset", str(sealed), "--kek", URI, "keys", "add", "--alg", "A256GCM")
    run("--keyset", str(sealed), "--kek", URI, "rotate", "--propagation", "0")
    added = json.loads(run("--keyset", str(sealed), "--kek", URI, "keys", "list", "--json").stdout)
    assert added["authenticated"] is True and added["kek"] == URI
    assert len(added["keys"]) == 4
    after = json.loads(sealed.read_text())
    assert after["data_key"] == before["data_key"] and after["id"] == before["id"]


def test_keys_list_without_the_kek_shows_the_metadata_and_says_it_is_unchecked(
    sealed: Path,
) -> None:
    shown = run("--keyset", str(sealed), "keys", "list")
    assert "not authenticated" in shown.stderr and "A256GCM" in shown.stdout
    listed = json.loads(run("--keyset", str(sealed), "keys", "list", "--json").stdout)
    assert listed["authenticated"] is False and len(listed["keys"]) == 3
    checked = run("--keyset", str(sealed), "--kek", URI, "keys", "list")
    assert "metadata authenticated" in checked.stderr


def test_encrypt_decrypt_and_rewrap_from_the_cli(tmp_path: Path) -> None:
    path = tmp_path / "keyset.json"
    run("--keyset", str(path), "keys", "init")
    token = run("--keyset", str(path), "mint", "--request-id", "r").stdout.strip()
    run("--keyset", str(path), "keys", "encrypt", "--kek", URI, "--kdf-cost", "10")
    again = run("--keyset", str(path), "keys", "encrypt", "--kek", URI, code=6)
    assert "encrypted already" in again.stderr
    run("--keyset", str(path), "keys", "rewrap", "--from-kek", URI, "--kek", OTHER)
    run("--keyset", str(path), "verify", "--request-id", "r", token, env={"MRTR_STATE_KEK": OTHER})
    # the old KEK given before 'keys', the new one to rewrap, both called --kek
    run("--keyset", str(path), "--kek", OTHER, "keys", "rewrap", "--kek", URI, "--kdf-cost", "10")
    assert json.loads(path.read_text())["kek"] == URI
    no = run("--keyset", str(path), "--kek", URI, "keys", "decrypt", code=2)
    assert "--yes" in no.stderr
    run("--keyset", str(path), "--kek", URI, "keys", "decrypt", "--yes")
    run("--keyset", str(path), "verify", "--request-id", "r", token)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("keys", "encrypt"), "give the KEK to encrypt under"),
        (("keys", "init", "--force", "--kdf-cost", "12"), "--kdf-cost needs a passphrase"),
    ],
)
def test_conversion_usage_errors(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    path = tmp_path / "keyset.json"
    run("--keyset", str(path), "keys", "init")
    assert message in run("--keyset", str(path), *args, code=2).stderr


def test_decrypt_and_rewrap_need_the_current_kek(sealed: Path) -> None:
    assert (
        "give the keyset's KEK"
        in run("--keyset", str(sealed), "keys", "decrypt", "--yes", code=6).stderr
    )
    assert (
        "give the KEK the keyset is under now"
        in run("--keyset", str(sealed), "keys", "rewrap", "--kek", OTHER, code=6).stderr
    )


def test_a_refused_kek_never_rewrites_the_keyset(sealed: Path) -> None:
    before = sealed.read_bytes()
    wrong = {"MRTR_TEST_PASSPHRASE": "not the passphrase at all"}
    for args in (
        ("rotate",),
        ("keys", "add"),
        ("keys", "rewrap", "--kek", OTHER),
        ("keys", "decrypt", "--yes"),
    ):
        result = run("--keyset", str(sealed), "--kek", URI, *args, env=wrong, code=6)
        assert "wrong passphrase" in result.stderr
    doc = json.loads(before)
    doc["keys"][0]["status"] = "retired"  # tampered: every writer refuses it too
    sealed.write_text(json.dumps(doc))
    tampered = sealed.read_bytes()
    result = run("--keyset", str(sealed), "--kek", URI, "rotate", code=6)
    assert "fails authentication" in result.stderr
    assert sealed.read_bytes() == tampered


def test_a_kek_that_cannot_be_reached_says_what_to_do(sealed: Path) -> None:
    result = run(
        "--keyset",
        str(sealed),
        "--kek",
        URI,
        "keys",
        "list",
        env={"MRTR_TEST_PASSPHRASE": ""},
        code=6,
    )
    assert "environment variable MRTR_TEST_PASSPHRASE, which is not set or empty" in result.stderr
    result = run("--keyset", str(sealed), "--kek", "vault:transit", "keys", "list", code=6)
    assert "must start with one of passphrase:, pkcs11:, exec:" in result.stderr


# --- SIGKILL during rewrap and rotate -----------------------------------------------------------


def _open_either(path: Path, keks: tuple[str, str]) -> tuple[str, Keyset]:
    for kek in keks:
        try:
            return kek, Keyset.load(path, reload_interval=None, kek=kek)
        except KekRefused:
            continue
    raise AssertionError(f"{path} opens under neither KEK")


def _kill_at_random(
    command: list[str], rng: random.Random, env: dict[str, str], span: float
) -> int:
    """Run ``command`` and SIGKILL it at a random moment within ``span`` seconds (about as long
    as a whole run takes on this machine, so that kills land all along it)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "mrtr_state", *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    time.sleep(rng.uniform(0.0, span))
    if process.poll() is None:
        process.send_signal(signal.SIGKILL)
    _out, err = process.communicate()
    assert process.returncode in (0, -signal.SIGKILL), err.decode()
    return process.returncode


def _duration(command: list[str], env: dict[str, str]) -> float:
    started = time.monotonic()
    subprocess.run(
        [sys.executable, "-m", "mrtr_state", *command], env=env, check=True, capture_output=True
    )
    return time.monotonic() - started


def test_sigkill_during_rewrap_leaves_the_old_or_the_new_file(tmp_path: Path) -> None:
    path = tmp_path / "keyset.json"
    env = {**os.environ, **ENV, "PYTHONPATH": str(ROOT)}
    run("--keyset", str(path), "--kek", URI, "keys", "init")  # default cost: ~0.1 s per scrypt
    secrets = [k.to_jwk() for k in Keyset.load(path, kek=URI)]
    rng = random.Random(20261205)
    outcomes = {0: 0, -signal.SIGKILL: 0}
    rewrap = ["--keyset", str(path), "keys", "rewrap", "--from-kek", URI, "--kek", OTHER]
    span = _duration(rewrap, env) * 1.2  # the keyset is under OTHER now
    for _ in range(24):
        current, _keyset = _open_either(path, (URI, OTHER))
        target = OTHER if current == URI else URI
        code = _kill_at_random(
            ["--keyset", str(path), "keys", "rewrap", "--from-kek", current, "--kek", target],
            rng,
            env,
            span,
        )
        outcomes[code] += 1
        span *= 1.15 if code else 0.9  # keep kills landing before, during and after the write
        now_under, keyset = _open_either(path, (URI, OTHER))
        assert [k.to_jwk() for k in keyset] == secrets  # never torn, never another key
        if code == 0:
            assert now_under == target
    assert outcomes[0] >= 3 and outcomes[-signal.SIGKILL] >= 3, outcomes


def test_sigkill_during_rotate_leaves_the_old_or_the_new_file(tmp_path: Path) -> None:
    path = tmp_path / "keyset.json"
    env = {**os.environ, **ENV, "PYTHONPATH": str(ROOT), "MRTR_STATE_KEK": URI}
    run("--keyset", str(path), "--kek", URI, "keys", "init", "--alg", "A256GCM")
    written: set[str] = {k.kid for k in Keyset.load(path, kek=URI)}
    rng = random.Random(202612051)
    outcomes = {0: 0, -signal.SIGKILL: 0}
    # every run writes: a zero propagation and period make rotate add or promote each time
    rotate = ["rotate", "--propagation", "0s", "--every", "0s"]
    span = _duration(["--keyset", str(path), *rotate], env) * 1.2
    for attempt in range(24):
        command = ["keys", "add", "--alg", "A256GCM"] if attempt % 2 else rotate
        code = _kill_at_random(["--keyset", str(path), *command], rng, env, span)
        outcomes[code] += 1
        span *= 1.15 if code else 0.9  # keep kills landing before, during and after the write
        keyset = Keyset.load(path, reload_interval=None, kek=URI)  # authenticates every time
        now = {k.kid for k in keyset}
        assert written <= now  # nothing a finished command wrote is lost
        written = now
    assert outcomes[0] >= 3 and outcomes[-signal.SIGKILL] >= 3, outcomes


def test_a_replica_keeps_its_last_good_keyset_when_the_kek_changes_under_it(
    sealed: Path,
) -> None:
    live = Keyset.load(sealed, reload_interval=0, kek=URI)
    run("--keyset", str(sealed), "--kek", URI, "keys", "rewrap", "--kek", OTHER, "--kdf-cost", "10")
    problem = live.check()
    assert problem is not None and "was encrypted under KEK " + OTHER in str(problem)
    assert len(live) == 3 and live.reload_failures >= 1
    record: Any = live._sealing
    assert record is not None and record.kek.uri == URI  # still the last good version


def test_a_kek_uri_in_the_file_reaches_no_terminal_raw(sealed: Path) -> None:
    """The file's text is an attacker's: an escape sequence in its kek member is shown inert
    by keys list and in every error, never obeyed by the terminal."""
    doc = json.loads(sealed.read_text())
    doc["kek"] = "passphrase:env:X\x1b[2J\x1b]0;owned\x07"
    sealed.write_text(json.dumps(doc))
    listed = run("--keyset", str(sealed), "keys", "list")
    refused = run("--keyset", str(sealed), "verify", "--request-id", "r", "x", code=6)
    for shown in (listed.stderr, refused.stderr):
        assert "\x1b" not in shown and "\x07" not in shown
        assert "\\x1b[2J" in shown


def test_keys_list_of_a_damaged_file_without_the_kek_is_an_error(sealed: Path) -> None:
    sealed.write_text(sealed.read_text()[:200])
    assert "not valid JSON" in run("--keyset", str(sealed), "keys", "list", code=6).stderr


# --- keys list of a damaged or hostile clear key list (issue 35) ------------------------------

#: What a terminal acts on, or cannot print: C0 controls but the newline, DEL, C1, the bidi
#: marks, embeddings, overrides and isolates, line and paragraph separators, lone surrogates.
TERMINAL_ACTIVE = {
    *map(chr, [*range(0x00, 0x0A), *range(0x0B, 0x20), 0x7F, *range(0x80, 0xA0)]),
    *map(chr, [0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)]),
    "\u2028",
    "\u2029",
    *map(chr, range(0xD800, 0xE000)),
}
HOSTILE = "\x1b[2J\x1b]0;owned\x07\u202e\u2066\u200f\u061c"


def assert_inert(*outputs: str) -> None:
    for shown in outputs:
        assert not TERMINAL_ACTIVE & set(shown), repr(shown)


def _plain(path: Path) -> Path:
    run("--keyset", str(path), "keys", "init")
    return path


def _damaged(path: Path, change: Any) -> None:
    doc = json.loads(path.read_text())
    change(doc["keys"])
    path.write_text(json.dumps(doc))


def _set(member: str, value: Any) -> Any:
    def change(keys: list[dict[str, Any]]) -> None:
        keys[0][member] = value

    return change


def _two_primaries(keys: list[dict[str, Any]]) -> None:
    keys.append({**keys[0], "kid": "0badc0de"})


def _duplicate(keys: list[dict[str, Any]]) -> None:
    keys.append({**keys[0], "status": "active"})


DAMAGES = {
    "unknown alg": (_set("alg", "RS256"), "unknown alg 'RS256'"),
    "alg not text": (_set("alg", ["HS256"]), "alg must be a string"),
    "hostile alg": (_set("alg", "HS256" + HOSTILE), "unknown alg 'HS256\\x1b[2J"),
    "status a list": (_set("status", ["primary"]), "unknown status ['primary']"),
    "status a number": (_set("status", 1), "unknown status 1"),
    "status an object": (_set("status", {"primary": 1}), "unknown status {'primary': 1}"),
    "unknown status": (_set("status", "live"), "unknown status 'live'"),
    "huge since": (_set("since", {"primary": 10**30}), "since must map statuses"),
    "since past year 9999": (_set("since", {"primary": 253_402_300_800}), "end of year 9999"),
    "negative since": (_set("since", {"primary": -1}), "since must map statuses"),
    "since a float": (_set("since", {"primary": 1.5}), "since must map statuses"),
    "since a list": (_set("since", [1]), "since must map statuses"),
    "since of an unknown status": (_set("since", {"live": 1}), "since must map statuses"),
    "hostile kid": (_set("kid", HOSTILE), "key '\\x1b[2J\\x1b]0;owned\\x07\\u202e"),
    "kid of a lone surrogate": (_set("kid", "\ud800"), "key '\\ud800'"),
    "kid not hex": (_set("kid", "ABCDEF12"), "8 lowercase hex digits"),
    "kid a number": (_set("kid", 12345678), "kid must be a string"),
    "hostile member name": (_set("x" + HOSTILE, 1), "unknown members x\\x1b[2J\\x1b]0;owned"),
    "kty": (_set("kty", "RSA"), 'kty must be "oct"'),
    "sdk_kid on an aead key": (_set("sdk_kid", HOSTILE), "carry no SDK key id"),
    "key not an object": (lambda keys: keys.append("k"), "keys must be a list of objects"),
    "two primaries": (_two_primaries, "are both primary for"),
    "a key id twice": (_duplicate, "appears twice"),
}


@pytest.mark.parametrize("encrypted", [True, False], ids=["encrypted-without-kek", "plain"])
@pytest.mark.parametrize("damage", list(DAMAGES))
def test_keys_list_of_a_damaged_member_is_one_error_line_and_exit_6(
    tmp_path: Path, damage: str, encrypted: bool
) -> None:
    """Issue 35: without the KEK, an unknown alg or a status that is not text reached the key
    table and the lifecycle line (a KeyError or TypeError traceback, exit 1), a huge since
    an OverflowError; a hostile kid or alg was printed raw. Every member is checked against
    the invariants a loaded keyset holds (all but the secrets'), in both kinds of file."""
    path = tmp_path / "keyset.json"
    if encrypted:
        run("--keyset", str(path), "--kek", URI, "keys", "init", "--kdf-cost", "10")
    else:
        _plain(path)
    change, message = DAMAGES[damage]
    _damaged(path, change)
    if not encrypted and damage == "key not an object":
        message = "is not a JSON object"
    for args in (("keys", "list"), ("keys", "list", "--json")):
        refused = run("--keyset", str(path), *args, code=6)
        if "--json" in args:  # with --json, the failure is one JSON object on stdout too
            assert refused.stdout.count("\n") == 1, refused.stdout
            failure = json.loads(refused.stdout)["error"]
            assert failure["exit_code"] == 6 and message in failure["message"]
        else:
            assert refused.stdout == ""
        lines = refused.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), refused.stderr
        assert message in lines[0]
        assert_inert(refused.stderr, refused.stdout)


def test_keys_list_shows_an_rmcp_key_id_inert_with_and_without_the_kek(sealed: Path) -> None:
    """An rmcp key id is the operator's text (1-255 bytes of UTF-8), and without the KEK it is
    anyone's who can write the file: escape sequences, BEL and bidi controls in it are shown
    escaped, in the table and in --json, read with the KEK or without."""
    secret = sealed.parent / "rmcp.key"
    secret.write_bytes(raw_secret(32))
    secret.chmod(0o600)
    run(
        "--keyset", str(sealed), "--kek", URI, "keys", "import", "--alg", "mcp-rs-v2",
        "--kid", HOSTILE, "--secret-file", str(secret),
    )  # fmt: skip
    for kek in ((), ("--kek", URI)):
        table = run("--keyset", str(sealed), *kek, "keys", "list")
        listed = run("--keyset", str(sealed), *kek, "keys", "list", "--json")
        assert_inert(table.stdout, table.stderr, listed.stdout)
        assert "\\x1b]0;owned\\x07" in table.stdout
        keys = json.loads(listed.stdout)["keys"]
        assert [k["sdk_kid"] for k in keys if k["alg"] == "mcp-rs-v2"] == [HOSTILE]


def test_keys_list_of_an_encrypted_file_with_a_hostile_kek_uri_is_inert(sealed: Path) -> None:
    doc = json.loads(sealed.read_text())
    doc["kek"] = "passphrase:env:X" + HOSTILE + "\ud800"
    sealed.write_text(json.dumps(doc))
    table = run("--keyset", str(sealed), "keys", "list")
    listed = run("--keyset", str(sealed), "keys", "list", "--json")
    assert_inert(table.stdout, table.stderr, listed.stdout)
    assert json.loads(listed.stdout)["kek"] == doc["kek"]  # the same text, escaped in JSON


def _json_values() -> Any:
    from hypothesis import strategies as st

    text = st.text(st.characters(exclude_categories=()), max_size=12)
    scalars = (
        st.none()
        | st.booleans()
        | st.integers(-(2**80), 2**80)
        | st.floats(allow_nan=False, allow_infinity=False)
        | text
        | st.sampled_from(
            ["primary", "active", "pending", "retired", "A256GCM", "HS256", "mcp-rs-v2",
             "0badc0de", HOSTILE, "\ud800", "", 253_402_300_799, 2**63]
        )
    )  # fmt: skip
    return st.recursive(
        scalars,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text | st.sampled_from(
            ["primary", "active", "pending", "retired"]), inner, max_size=3),
        max_leaves=6,
    )  # fmt: skip


@pytest.mark.parametrize("encrypted", [True, False], ids=["encrypted-without-kek", "plain"])
def test_keys_list_of_any_damage_to_the_key_list_is_exit_0_or_one_error_line(
    tmp_path: Path, encrypted: bool
) -> None:
    """Hypothesis: one to three members of the key list set to any JSON value (or removed, or
    a key added). keys list, as text and --json, either lists keys (exit 0) or says what is
    wrong on one line (exit 6); never a traceback, never a character a terminal acts on."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    path = tmp_path / "keyset.json"
    if encrypted:
        run("--keyset", str(path), "--kek", URI, "keys", "init", "--kdf-cost", "10")
    else:
        _plain(path)
    original = json.loads(path.read_text())
    members = ["kty", "kid", "alg", "status", "since", "sdk_kid", "k", "x" + HOSTILE]
    change = st.tuples(st.integers(0, 3), st.sampled_from(members), st.none() | _json_values())

    @settings(max_examples=150, deadline=None)
    @given(st.lists(change, min_size=1, max_size=3))
    def damaged_listing(changes: list[tuple[int, str, Any]]) -> None:
        doc = json.loads(json.dumps(original))
        keys = doc["keys"]
        for index, member, value in changes:
            if index >= len(keys):
                keys.append({"kty": "oct"})
            elif value is None:
                keys[index].pop(member, None)
            else:
                keys[index][member] = value
        path.write_text(json.dumps(doc))
        for args in (("keys", "list"), ("keys", "list", "--json")):
            result = CliRunner().invoke(cli, ["--keyset", str(path), *args], env=CLEAN_ENV)
            assert result.exception is None or isinstance(result.exception, SystemExit), (
                changes,
                result.exception,
            )
            assert result.exit_code in (0, 6), (changes, result.stderr)
            if result.exit_code == 6:
                assert len(result.stderr.splitlines()) == 1
                assert result.stderr.startswith("error: ")
            assert_inert(result.stdout, result.stderr)

    damaged_listing()
