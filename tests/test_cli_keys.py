"""The key lifecycle through the CLI: add, promote, retire, prune, import, list, rotate."""

from __future__ import annotations

import json
import os
import re
import stat
import time
from pathlib import Path
from typing import Any

import pytest

import mrtr_state as ms
from mrtr_state.keys.keyset import Key

from .helpers import raw_secret, run


@pytest.fixture
def path(tmp_path: Path) -> Path:
    keyset = tmp_path / "keyset.json"
    run("--keyset", str(keyset), "keys", "init", "--alg", "A256GCM")
    return keyset


def keys(path: Path) -> list[dict[str, Any]]:
    listed: list[dict[str, Any]] = json.loads(
        run("--keyset", str(path), "keys", "list", "--json").stdout
    )["keys"]
    return listed


def test_add_promote_and_the_old_primary_keeps_verifying(path: Path) -> None:
    first = keys(path)[0]["kid"]
    token = run("--keyset", str(path), "mint", "--state", '"old"').stdout.strip()
    added = json.loads(run("--keyset", str(path), "keys", "add", "--json").stdout)
    assert added["status"] == "pending"
    promoted = run("--keyset", str(path), "keys", "promote", added["kid"], "--force")
    assert promoted.stdout.splitlines() == [
        f"promote {added['kid']} (A256GCM): pending -> primary: mints from now on",
        f"demote {first} (A256GCM): primary -> active: verifies only",
    ]
    assert [(k["kid"], k["status"]) for k in keys(path)] == [
        (first, "active"),
        (added["kid"], "primary"),
    ]
    assert run("--keyset", str(path), "verify", token).stdout == '"old"\n'
    new_token = run("--keyset", str(path), "mint", "--json").stdout
    assert json.loads(new_token)["kid"] == added["kid"]
    assert (
        "no key 00000000"
        in run("--keyset", str(path), "keys", "promote", "00000000", code=2).stderr
    )


def test_retire_revokes_at_once_and_says_what_it_cuts_off(path: Path) -> None:
    kid = keys(path)[0]["kid"]
    token = run("--keyset", str(path), "mint").stdout.strip()
    refused = run("--keyset", str(path), "keys", "retire", kid, code=2)  # no terminal: no prompt
    assert f"{kid} is the primary A256GCM key; give --yes" in refused.stderr
    dry = run("--keyset", str(path), "keys", "retire", kid, "--dry-run")
    assert dry.stdout.startswith(f"would retire {kid} (A256GCM)")
    run("--keyset", str(path), "verify", token)  # the dry run changed nothing
    result = run("--keyset", str(path), "keys", "retire", kid, "--yes")
    assert result.stdout.splitlines() == [
        f"retired {kid} (A256GCM): primary -> retired: its tokens are refused from now on",
        "this cuts off up to 1h 1m of still-valid tokens",
    ]
    assert "no primary A256GCM key left" in result.stderr
    assert "mrtr-state keys add --alg A256GCM" in result.stderr and "keys init" not in result.stderr
    assert run("--keyset", str(path), "verify", token, code=1).stderr == (
        f"error: key {kid} is retired; its tokens are no longer accepted\n"
    )
    view = json.loads(run("--keyset", str(path), "inspect", "--json", token).stdout)
    assert view["key_status"] == "retired"
    assert view["problem"]["code"] == "key_retired"
    run("--keyset", str(path), "mint", code=6)
    again = json.loads(run("--keyset", str(path), "keys", "retire", kid, "--json").stdout)
    assert again["detail"] == "already retired"
    assert again["cut_off_seconds"] == 0


def test_prune_keeps_recently_retired_keys(path: Path) -> None:
    kid = keys(path)[0]["kid"]
    run("--keyset", str(path), "keys", "retire", kid, "--yes")
    assert run("--keyset", str(path), "keys", "prune").stdout == f"nothing to do in {path}\n"
    dry = run("--keyset", str(path), "keys", "prune", "--retention", "0", "--dry-run")
    assert dry.stdout == f"would prune {kid} (A256GCM): retired key deleted\n"
    assert len(keys(path)) == 1
    done = json.loads(
        run("--keyset", str(path), "keys", "prune", "--retention", "0s", "--json").stdout
    )
    assert [c["kid"] for c in done["changes"]] == [kid]
    assert keys(path) == []
    assert (
        "not a duration"
        in run("--keyset", str(path), "keys", "prune", "--retention", "soon", code=2).stderr
    )


def test_import_from_a_file_and_stdin(tmp_path: Path) -> None:
    path = tmp_path / "new" / "keyset.json"
    secret_file = tmp_path / "secret.bin"
    secret_file.write_bytes(os.urandom(31) + b"\n")  # a newline: the key's byte or an editor's?
    refused = run(
        *("--keyset", str(path), "keys", "import", "--alg", "HS256"),
        *("--secret-file", str(secret_file)),
        code=2,
    )
    assert "ends with a newline" in refused.stderr and not path.exists()
    secret_file.write_bytes(os.urandom(31) + b"k")  # exactly the key's bytes
    first = json.loads(
        run(
            "--keyset",
            str(path),
            "keys",
            "import",
            "--alg",
            "HS256",
            "--secret-file",
            str(secret_file),
            "--json",
        ).stdout
    )
    assert first["status"] == "primary"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    loaded = ms.Keyset.load(path).get(first["kid"])
    assert loaded is not None
    assert loaded.secret == secret_file.read_bytes()
    second = run(
        "--keyset",
        str(path),
        "keys",
        "import",
        "--alg",
        "HS256",
        "--secret-file",
        "-",
        input=raw_secret(32),
    )
    assert re.fullmatch(r"imported HS256 key [0-9a-f]{8} as pending into .*\n", second.stdout)
    third = json.loads(
        run(
            "--keyset",
            str(path),
            "keys",
            "import",
            "--alg",
            "HS256",
            "--secret-file",
            "-",
            "--primary",
            "--json",
            input=raw_secret(32),
        ).stdout
    )
    assert third["status"] == "primary"
    assert [k["status"] for k in keys(path)] == ["active", "pending", "primary"]
    short = run(
        "--keyset",
        str(path),
        "keys",
        "import",
        "--alg",
        "A256GCM",
        "--secret-file",
        "-",
        input=b"c2hvcnQ=",
        code=2,
    )
    assert "A256GCM needs exactly 32 secret bytes; - holds 8" in short.stderr
    missing = run(
        "--keyset",
        str(path),
        "keys",
        "import",
        "--alg",
        "HS256",
        "--secret-file",
        str(tmp_path / "nope"),
        code=2,
    )
    assert "cannot read secret file" in missing.stderr
    assert "--secret-file or --secret-env" in run("keys", "import", "--alg", "HS256", code=2).stderr
    from_env = json.loads(
        run(
            "--keyset",
            str(path),
            "keys",
            "import",
            "--alg",
            "mcp-py-v1",
            "--secret-env",
            "SDK_SECRET",
            "--json",
            env={"SDK_SECRET": "operator-secret-" + "x" * 20},
        ).stdout
    )
    assert from_env["status"] == "primary" and from_env["alg"] == "mcp-py-v1"
    assert (
        "SDK_SECRET is not set"
        in run(
            "--keyset",
            str(path),
            "keys",
            "import",
            "--alg",
            "mcp-ts-v1",
            "--secret-env",
            "SDK_SECRET",
            code=2,
        ).stderr
    )


def test_list_shows_the_lifecycle_time_line(path: Path) -> None:
    run("--keyset", str(path), "keys", "add")
    table = run("--keyset", str(path), "keys", "list").stdout.splitlines()
    assert table[0].split() == ["KID", "ALG", "FORMAT", "STATUS", "SINCE", "LIFECYCLE"]
    assert re.search(r"mints since [0-9]s$", table[1])
    assert re.search(r"verifies; promotable in (59m|1h)", table[2])
    listed = keys(path)
    assert listed[1]["timeline"].startswith("verifies; promotable in")


def test_rotate_is_one_safe_step_and_says_what_it_did(path: Path) -> None:
    fresh = json.loads(run("--keyset", str(path), "rotate", "--json").stdout)
    assert fresh["changes"] == []  # a new primary is not due for 30 days
    (due,) = fresh["next_due"]
    assert due["action"] == "add" and due["at"] - time.time() > 29 * 86400
    dry = json.loads(
        run("--keyset", str(path), "rotate", "--every", "1h", "--dry-run", "--json").stdout
    )
    assert dry["changes"][0]["kid"] is None and dry["changes"][0]["kid_chosen_at_run_time"]
    text = run("--keyset", str(path), "rotate", "--every", "1h", "--dry-run").stdout
    assert text.startswith("would add (chosen at run time) (A256GCM): new pending key")
    first = run("--keyset", str(path), "rotate", "--every", "1h", "--json")
    changes = json.loads(first.stdout)["changes"]
    assert [c["action"] for c in changes] == ["add"]
    assert json.loads(first.stdout)["dry_run"] is False
    listed = json.loads(run("--keyset", str(path), "keys", "list", "--json").stdout)["keys"]
    pending = next(k for k in listed if k["status"] == "pending")
    assert pending["kid"] == changes[0]["kid"] and pending["next_due"]["action"] == "promote"
    assert next(k for k in listed if k["status"] == "primary")["next_due"] is None
    short = run("--keyset", str(path), "rotate", "--every", "10m", code=2)
    assert "shorter than the propagation delay" in short.stderr
    again = run("--keyset", str(path), "rotate")
    assert again.stdout.startswith(f"nothing to do in {path}\nnext: promote ")  # 1h not over
    dry_promote = run("--keyset", str(path), "rotate", "--propagation", "0", "--dry-run")
    assert dry_promote.stdout.startswith("would promote ")
    assert [k["status"] for k in keys(path)] == ["primary", "pending"]
    run("--keyset", str(path), "rotate", "--propagation", "0")
    assert [k["status"] for k in keys(path)] == ["active", "primary"]
    # issue 38: a bad value on the command line is a usage error (2); the same value read from
    # the config file is the operator's configuration (6)
    too_short = run("--keyset", str(path), "rotate", "--retention", "10m", code=2)
    assert "shorter than the ttl cap" in too_short.stderr
    bad = run(
        "--keyset", str(path), "rotate", "--every", "2s", "--propagation", "1s",
        "--retention", "2s", "--json", code=2,
    )  # fmt: skip
    assert json.loads(bad.stdout)["error"]["exit_code"] == 2
    config = path.parent / "mrtr-state.toml"
    config.write_text('retention = "10m"\n')
    config.chmod(0o600)
    from_config = run("--keyset", str(path), "--config", str(config), "rotate", code=6)
    assert "shorter than the ttl cap" in from_config.stderr
    config.write_text('rotate_every = "10m"\n')
    run("--keyset", str(path), "--config", str(config), "rotate", code=6)
    assert [k["status"] for k in keys(path)] == ["active", "primary"]  # nothing was changed


def test_an_inline_keyset_from_the_environment_is_read_only(path: Path, tmp_path: Path) -> None:
    inline = {"MRTR_STATE_KEYSET_JSON": path.read_text()}
    token = run("mint", "--state", "1", env=inline).stdout.strip()
    assert run("verify", token, env=inline).stdout == "1\n"
    assert json.loads(run("keys", "list", "--json", env=inline).stdout)["keyset"] == (
        "MRTR_STATE_KEYSET_JSON"
    )
    for command in (["keys", "add"], ["rotate"], ["keys", "init"], ["keys", "prune"]):
        refused = run(*command, env=inline, code=6)
        assert "MRTR_STATE_KEYSET_JSON, which is read-only" in refused.stderr
    # an explicit --keyset wins over the environment
    other = tmp_path / "other.json"
    run("--keyset", str(other), "keys", "init", env=inline)
    run("--keyset", str(other), "verify", token, env=inline, code=1)
    broken = run("verify", token, env={"MRTR_STATE_KEYSET_JSON": "{"}, code=6)
    assert broken.stderr.startswith("error: MRTR_STATE_KEYSET_JSON is not valid JSON")


def test_import_refuses_a_secret_hmac_takes_for_one_already_held(tmp_path: Path) -> None:
    """A Java SDK key K, then K + 0x00 for the PHP SDK: HMAC keys both alike (issue 44), so the
    import is refused as the equal-secret case is, and the keyset file is left as it was."""
    from .helpers import keys_import

    keyset = tmp_path / "keyset.json"
    secret = raw_secret(32)
    keys_import(keyset, "mcp-java-v1", secret)
    before = keyset.read_bytes()
    refused = keys_import(keyset, "mcp-php-v1", secret + b"\x00", code=6)
    assert "hold the same secret (as their MAC uses it)" in refused.stderr
    assert keyset.read_bytes() == before


# --- the SDKs' text secrets: mcp-py-v1 and mcp-ts-v1 -------------------------------------------

#: What `openssl rand -hex 32` or the Python SDK's `secrets.token_hex(32)` prints: the SDKs use
#: these 64 characters themselves as the secret, never the 32 bytes they spell.
SDK_TEXT = "3f9a" * 16


def _import_text(path: Path, alg: str, data: bytes, *extra: str, code: int = 0) -> Any:
    secret = path.parent / "sdk-secret.txt"
    secret.write_bytes(data)
    command = ("keys", "import", "--alg", alg, "--secret-file", str(secret), *extra)
    return run("--keyset", str(path), *command, code=code), secret


@pytest.mark.parametrize("alg", ["mcp-py-v1", "mcp-ts-v1"])
@pytest.mark.parametrize(("ending", "named"), [(b"\n", "LF"), (b"\r\n", "CRLF"), (b"", None)])
def test_a_text_secret_files_final_line_break_is_dropped_with_a_note(
    tmp_path: Path, alg: str, ending: bytes, named: str | None
) -> None:
    path = tmp_path / "keyset.json"
    done, secret = _import_text(path, alg, SDK_TEXT.encode() + ending, "--json")
    note = (
        f"note: dropped the line break ({named}) that ends {secret}: an {alg} secret is the "
        "text the SDK is given\n"
    )
    assert done.stderr == (note if named else "")
    kid = json.loads(done.stdout)["kid"]
    key = ms.Keyset.load(path).get(kid)
    assert key is not None and key.secret == SDK_TEXT.encode()
    assert kid == ms.Keyset([Key.from_secret(alg, SDK_TEXT.encode())]).primary(alg).kid


def test_a_text_secret_on_stdin_and_in_the_environment(tmp_path: Path) -> None:
    path = tmp_path / "keyset.json"
    command = ("--keyset", str(path), "keys", "import", "--alg", "mcp-ts-v1")
    piped = run(*command, "--secret-file", "-", input=SDK_TEXT + "\n")
    assert piped.stderr == (
        "note: dropped the line break (LF) that ends stdin: an mcp-ts-v1 secret is the text the "
        "SDK is given\n"
    )
    # a variable is taken exactly as the SDK reads it: a line break it holds is the SDK's too
    held = SDK_TEXT + "0\n"
    env = run(*command, "--secret-env", "SDK_KEY", "--json", env={"SDK_KEY": held})
    assert env.stderr == ""
    key = ms.Keyset.load(path).get(json.loads(env.stdout)["kid"])
    assert key is not None and key.secret == held.encode()


def test_a_text_secret_is_refused_where_what_the_sdk_was_given_cannot_be_told(
    tmp_path: Path,
) -> None:
    path = tmp_path / "keyset.json"
    done, secret = _import_text(path, "mcp-py-v1", SDK_TEXT.encode() + b"\n\n", code=2)
    assert done.stderr.splitlines()[-1] == (
        f"error: the secret text in {secret} ends with more than one line break: write the "
        'SDK\'s secret on one line (echo "$SECRET" > FILE)'
    )
    done, secret = _import_text(path, "mcp-ts-v1", b"\r\n", code=2)
    assert done.stderr.splitlines()[-1] == f"error: the secret in {secret} is empty"
    # too short: no --encoding advice, which would make another key than the SDK's
    done, secret = _import_text(path, "mcp-py-v1", b"0123456789abcdef\n", "--json", code=2)
    message = (
        f"mcp-py-v1 needs 32..4096 secret bytes; {secret} holds 16 (the SDK uses the secret's "
        "text itself, so import exactly the text it is given; make one with: openssl rand -hex "
        "32)"
    )
    assert done.stderr.splitlines()[-1] == f"error: {message}"
    assert "--encoding" not in done.stderr
    assert json.loads(done.stdout) == {
        "error": {"code": "usage", "message": message, "exit_code": 2}
    }
    assert not path.exists()
    # a raw key's length error still names --encoding: decoding such text gives that key
    done, secret = _import_text(path, "A256GCM", SDK_TEXT.encode(), code=2)
    assert done.stderr.splitlines()[-1] == (
        f"error: A256GCM needs exactly 32 secret bytes; {secret} holds 64 (if it holds base64 "
        "or hex text, say so with --encoding base64 or --encoding hex)"
    )


def test_a_text_secret_given_to_its_sdk_as_bytes_is_imported_with_its_encoding(
    tmp_path: Path,
) -> None:
    """A server given `bytes.fromhex(...)` uses the 32 bytes: --encoding hex is that key."""
    path = tmp_path / "keyset.json"
    done, _secret = _import_text(path, "mcp-py-v1", SDK_TEXT.encode() + b"\n", "--encoding", "hex")
    assert done.stderr == ""
    assert ms.Keyset.load(path).primary("mcp-py-v1").secret == bytes.fromhex(SDK_TEXT)


# --- promote: not yet (75), or --wait -------------------------------------------------------


NOW = 1_800_000_000


@pytest.fixture
def pending(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str]:
    """A keyset whose A256GCM key went pending 10 minutes before the CLI's clock (fixed at
    NOW), under the default propagation delay of 1 hour."""
    from mrtr_state.cli import keys as keys_cli

    monkeypatch.setattr(keys_cli, "_now", lambda: NOW)
    keyset, key = ms.Keyset.generate(("A256GCM",), now=NOW - 86400).with_new_key(
        "A256GCM", now=NOW - 600
    )
    path = tmp_path / "keyset.json"
    keyset.save(path)
    return path, key.kid


def test_promoting_before_the_propagation_delay_is_not_yet_exit_75(
    pending: tuple[Path, str],
) -> None:
    path, kid = pending
    before = path.read_bytes()
    message = (
        f"not yet: key {kid} has been pending for 10m, less than the propagation delay of 1h, "
        "and replicas that have not loaded it yet would refuse its tokens; retry in 50m; wait "
        f"for it with: mrtr-state keys promote --wait {kid} (or promote it now with --force)"
    )
    for dry in ((), ("--dry-run",)):
        text = run("--keyset", str(path), "keys", "promote", *dry, kid, code=75)
        assert text.stderr == f"error: {message}\n" and text.stdout == ""
        answer = json.loads(
            run("--keyset", str(path), "keys", "promote", kid, "--json", code=75).stdout
        )
        assert answer == {
            "error": {
                "code": "propagation_pending",
                "message": message,
                "exit_code": 75,
                "kid": kid,
                "seconds_left": 3000,
                "promotable_at": NOW + 3000,
                "promotable_at_utc": "2027-01-15T08:50:00Z",
            }
        }
    assert path.read_bytes() == before
    done = json.loads(
        run("--keyset", str(path), "keys", "promote", "--force", kid, "--json").stdout
    )
    assert [change["action"] for change in done["changes"]] == ["promote", "demote"]


def test_the_library_says_when_a_key_may_be_promoted(pending: tuple[Path, str]) -> None:
    from mrtr_state.keys import lifecycle

    path, kid = pending
    keyset = ms.Keyset.load(path)
    with pytest.raises(ms.PropagationPending) as early:
        lifecycle.promote(keyset, kid, now=NOW + 2999, propagation=3600)
    assert (early.value.seconds_left, early.value.promotable_at) == (1, NOW + 3000)
    assert early.value.exit_code == 75 and isinstance(early.value, ValueError)
    promoted, _changes = lifecycle.promote(keyset, kid, now=NOW + 3000, propagation=3600)
    assert promoted.primary("A256GCM").kid == kid


def test_promote_wait_is_a_wait_not_a_force(pending: tuple[Path, str]) -> None:
    path, kid = pending
    for flag in ("--force", "--dry-run"):
        refused = run("--keyset", str(path), "keys", "promote", "--wait", flag, kid, code=2)
        assert refused.stderr.splitlines()[-1] == (
            f"error: --wait waits out the propagation delay and then writes: give it without {flag}"
        )
    unknown = run("--keyset", str(path), "keys", "promote", "--wait", "deadbeef", code=2)
    assert unknown.stderr == f"error: {path} has no key deadbeef; see: mrtr-state keys list\n"


def test_promote_wait_promotes_at_once_a_key_that_may_be_promoted(
    pending: tuple[Path, str],
) -> None:
    path, kid = pending
    env = {"MRTR_STATE_PROPAGATION": "10m"}
    done = run("--keyset", str(path), "keys", "promote", "--wait", kid, env=env)
    assert done.stderr == "" and f"promote {kid} (A256GCM)" in done.stdout
    assert ms.Keyset.load(path).primary("A256GCM").kid == kid


def test_promote_wait_sleeps_out_the_delay_then_promotes(tmp_path: Path) -> None:
    path = tmp_path / "keyset.json"
    env = {"MRTR_STATE_PROPAGATION": "2s"}
    run("--keyset", str(path), "keys", "init", "--alg", "A256GCM")
    added = json.loads(run("--keyset", str(path), "keys", "add", "--json", env=env).stdout)
    started = time.monotonic()
    done = run("--keyset", str(path), "keys", "promote", "--wait", added["kid"], "--json", env=env)
    waited = time.monotonic() - started
    assert 0.5 < waited < 4, waited
    assert re.fullmatch(
        r"waiting [12]s \(until \d\d:\d\d:\d\d UTC\) for the propagation delay of key "
        + added["kid"]
        + r"; Ctrl-C stops and writes nothing\n",
        done.stderr,
    )
    report = json.loads(done.stdout)
    assert set(report) == {"keyset", "dry_run", "changes"}
    assert report["changes"][0] == {
        "action": "promote",
        "kid": added["kid"],
        "alg": "A256GCM",
        "detail": "pending -> primary: mints from now on",
    }
    assert ms.Keyset.load(path).primary("A256GCM").kid == added["kid"]


def test_ctrl_c_during_promote_wait_is_130_and_writes_nothing(tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys

    from .helpers import ROOT

    path = tmp_path / "keyset.json"
    run("--keyset", str(path), "keys", "init", "--alg", "A256GCM")
    kid = json.loads(run("--keyset", str(path), "keys", "add", "--json").stdout)["kid"]
    before, stamp = path.read_bytes(), path.stat().st_mtime_ns
    environment = {k: v for k, v in os.environ.items() if not k.startswith("MRTR_STATE_")}
    command = ["--keyset", str(path), "keys", "promote", "--wait", kid, "--json"]
    waiting = subprocess.Popen(
        [sys.executable, "-m", "mrtr_state", *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**environment, "PYTHONPATH": str(ROOT)},
    )
    assert waiting.stderr is not None
    told = waiting.stderr.readline()  # once it says it waits, it is asleep
    assert told.startswith("waiting 1h (until ") or told.startswith("waiting 59m"), told
    waiting.send_signal(signal.SIGINT)
    stdout, stderr = waiting.communicate(timeout=30)
    assert waiting.returncode == 130
    assert stderr.splitlines()[-1] == "error: interrupted"
    assert json.loads(stdout)["error"]["exit_code"] == 130
    assert path.read_bytes() == before and path.stat().st_mtime_ns == stamp
    assert ms.Keyset.load(path).get(kid).status == "pending"  # type: ignore[union-attr]
