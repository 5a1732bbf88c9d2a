"""The CLI's contract with scripts (issue 38 part B): exit codes, --json, help, dry runs,
completion. Every check runs the real command line, as a user or a script would."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

import mrtr_state as ms
from mrtr_state.cli import cli

from .helpers import CLEAN_ENV, keys_import, mint, raw_secret, run

# --- a wrong bind value, in every format that takes one --------------------------------------

#: format -> (key algorithm, extra import flags, exit code of a wrong or missing bind, its code).
#: mcp-ts carries the bind value's digest in its signed body, so the verifier sees the tag pass
#: and the bind differ: a binding mismatch (4). rmcp's formats feed the bind value to the tag as
#: associated data: a wrong one fails the tag exactly as a forgery does, and nothing on the wire
#: can tell them apart (1, bad_signature). docs/cli.md says so.
BIND_FORMATS = {
    "mcp-ts": ("mcp-ts-v1", (), 4, "request_mismatch"),
    "mcp-rs": ("mcp-rs-v1", (), 1, "bad_signature"),
    "mcp-rs2": ("mcp-rs-v2", ("--kid", "2026-12"), 1, "bad_signature"),
}


@pytest.mark.parametrize("fmt", sorted(BIND_FORMATS))
def test_a_wrong_bind_value_exits_as_the_wire_allows(ks: Path, fmt: str) -> None:
    alg, extra, code, reason = BIND_FORMATS[fmt]
    keys_import(ks, alg, raw_secret(32), *extra)
    token = mint(ks, "--format", fmt, "--bind", "session-1", "--state", '{"n":1}')
    k = ("--keyset", str(ks), "verify", "--ttl-cap", "none")
    assert run(*k, "--bind", "session-1", token).stdout == '{"n":1}\n'
    for wrong in (("--bind", "session-2"), ("--bind", ""), ()):
        refused = run(*k, *wrong, token, code=code)
        assert refused.stderr.startswith("error: ") and refused.stdout == ""
        answer = json.loads(run(*k, *wrong, "--json", token, code=code).stdout)
        assert answer["valid"] is False
        assert answer["error"]["code"] == reason and answer["error"]["exit_code"] == code
    # and a token minted with no bind value, checked with one
    unbound = mint(ks, "--format", fmt, "--state", '{"n":2}')
    run(*k, "--bind", "session-1", unbound, code=code)


# --- an unknown key id is a usage error --------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        ("keys", "promote", "deadbeef"),
        ("keys", "promote", "--dry-run", "deadbeef"),
        ("keys", "retire", "--yes", "deadbeef"),
        ("keys", "retire", "--dry-run", "deadbeef"),
        ("keys", "export", "--stdout", "deadbeef"),
    ],
)
def test_an_unknown_key_id_is_exit_2(ks: Path, command: tuple[str, ...]) -> None:
    before = ks.read_bytes()
    refused = run("--keyset", str(ks), *command, code=2)
    assert f"{ks} has no key deadbeef; see: mrtr-state keys list" in refused.stderr
    assert refused.stdout == ""
    as_json = ("--json", "--encoding", "hex") if command[1] == "export" else ("--json",)
    answer = json.loads(run("--keyset", str(ks), *command, *as_json, code=2).stdout)
    assert answer["error"]["code"] == "unknown_key_id"
    assert ks.read_bytes() == before


# --- batches: the most severe failure sets the exit code ---------------------------------------


def _expired(ks: Path) -> str:
    keyset = ms.Keyset.load(ks)
    return ms.mint(keyset, 1, principal="alice", ttl=60, now=time.time() - 3600)


@pytest.mark.parametrize(
    ("lines", "code"),
    [
        (["", "MISMATCH"], 4),  # an empty line never hides a real principal mismatch
        (["MISMATCH", ""], 4),
        (["EXPIRED", "", "GOOD"], 3),
        (["", "EXPIRED", "GARBAGE"], 1),
        (["GARBAGE", "MISMATCH", "EXPIRED", ""], 4),
        (["GOOD", ""], 2),
        (["GOOD", "GOOD"], 0),
    ],
)
def test_a_batch_exits_with_its_most_severe_failure(ks: Path, lines: list[str], code: int) -> None:
    tokens = {
        "GOOD": mint(ks, "-p", "alice"),
        "MISMATCH": mint(ks, "-p", "mallory"),
        "EXPIRED": _expired(ks),
        "GARBAGE": "ms1.not-a-token",
        "": "",
    }
    stdin = "".join(tokens[name] + "\n" for name in lines)
    done = run("--keyset", str(ks), "verify", "-p", "alice", "-", input=stdin, code=code)
    assert len(done.stdout.splitlines()) == len(lines)
    answers = run(
        "--keyset", str(ks), "verify", "--json", "-p", "alice", "-", input=stdin, code=code
    )
    assert [json.loads(line)["line"] for line in answers.stdout.splitlines()] == list(
        range(1, len(lines) + 1)
    )
    # inspect takes the same rule (it checks no binding: a mismatch is no failure there)
    run("--keyset", str(ks), "inspect", "-", input=stdin, code=_inspect_code(lines))


def _inspect_code(lines: list[str]) -> int:
    """inspect's batch code: garbage (1) and empty lines (2) fail, the most severe first."""
    for code, name in ((1, "GARBAGE"), (2, "")):
        if name in lines:
            return code
    return 0


def test_a_jsonl_line_that_is_not_json_is_malformed_input(ks: Path) -> None:
    token = mint(ks, "-p", "alice")
    stdin = "not json\n[1]\n" + json.dumps({"token": token, "principal": "alice"}) + "\n"
    done = run("--keyset", str(ks), "verify", "--jsonl", "--json", "-", input=stdin, code=2)
    first, second, third = (json.loads(line) for line in done.stdout.splitlines())
    assert first["error"]["code"] == second["error"]["code"] == "malformed_input"
    assert third["valid"] is True
    empty = run("--keyset", str(ks), "verify", "--jsonl", "--json", "-", input="{}\n", code=2)
    assert json.loads(empty.stdout)["error"]["code"] == "no_token"


# --- --json: every outcome is one JSON object on stdout ----------------------------------------


def _one_object(stdout: str) -> dict[str, object]:
    assert stdout.endswith("\n") and stdout.count("\n") == 1, stdout
    found = json.loads(stdout)
    assert isinstance(found, dict)
    return found


def _pending(ks: Path) -> str:
    return str(json.loads(run("--keyset", str(ks), "keys", "add", "--json").stdout)["kid"])


#: Each command that has --json: (arguments for a success, arguments for a failure, its code).
JSON_COMMANDS = {
    "mint": (["mint", "--state", "1"], ["mint", "--ttl", "2h"], 2),
    "verify": (["verify", "TOKEN"], ["verify", ""], 2),
    "verify-rejected": (["verify", "TOKEN"], ["verify", "-p", "bob", "TOKEN"], 4),
    "inspect": (["inspect", "TOKEN"], ["inspect", "ms1.x"], 1),
    "audit": (["audit", "CAPTURE"], ["audit", "MISSING"], 2),
    "keys init": (["keys", "init", "--force"], ["keys", "init"], 6),
    "keys add": (["keys", "add"], ["keys", "add", "--alg", "nope"], 2),
    "keys promote": (["keys", "promote", "--force", "PENDING"], ["keys", "promote", "nope"], 2),
    "keys retire": (["keys", "retire", "--dry-run", "PENDING"], ["keys", "retire", "x"], 2),
    "keys prune": (["keys", "prune"], ["keys", "prune", "--retention", "soon"], 2),
    "keys list": (["keys", "list"], ["keys", "list", "--keyset", "MISSING"], 6),
    "keys import": (["keys", "import", "--alg", "HS256", "--secret-env", "SECRET"],
                    ["keys", "import", "--alg", "HS256", "--secret-env", "NONE"], 2),
    "keys encrypt": (["keys", "encrypt", "--kek", "KEK", "--kdf-cost", "10"],
                     ["keys", "encrypt"], 2),
    "keys decrypt": (["keys", "decrypt", "--yes"], ["keys", "decrypt"], 2),
    "keys rewrap": (["keys", "rewrap", "--kek", "KEK"], ["keys", "rewrap"], 2),
    "rotate": (["rotate"], ["rotate", "--every", "1s"], 2),
    "version": (["version"], ["version", "--bogus"], 2),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(JSON_COMMANDS))
def test_every_command_with_json_prints_one_object_on_success_and_failure(
    ks: Path, tmp_path: Path, name: str
) -> None:
    ok, bad, code = JSON_COMMANDS[name]
    env = {"SECRET": "s" * 32, "PASS": "correct horse battery staple"}
    capture = tmp_path / "capture.jsonl"
    capture.write_text('{"jsonrpc":"2.0","id":1,"method":"ping"}\n')
    words = {
        "TOKEN": mint(ks, "-p", "alice"),
        "CAPTURE": str(capture),
        "MISSING": str(tmp_path / "missing"),
        "KEK": "passphrase:env:PASS",
    }
    if "PENDING" in ok + bad:
        words["PENDING"] = _pending(ks)
    if name in ("keys decrypt", "keys rewrap"):  # these need an encrypted keyset
        run("--keyset", str(ks), "keys", "encrypt", "--kek", "passphrase:env:PASS",
            "--kdf-cost", "10", env=env)  # fmt: skip
        env["MRTR_STATE_KEK"] = "passphrase:env:PASS"
    if name == "verify-rejected" or name == "verify":
        ok = [*ok, "-p", "alice"]
    args = ["--keyset", str(ks)]
    success = run(*args, *[words.get(w, w) for w in ok], "--json", env=env)
    assert "error" not in _one_object(success.stdout)
    if name == "keys rewrap":
        env.pop("MRTR_STATE_KEK")
    failure = run(*args, *[words.get(w, w) for w in bad], "--json", env=env, code=code)
    error = _one_object(failure.stdout)["error"]
    assert isinstance(error, dict) and error["exit_code"] == code
    assert str(error["message"]) in failure.stderr
    assert failure.stderr.rstrip("\n").splitlines()[-1].startswith("error: ")


def test_a_batch_with_no_token_says_so_in_json(ks: Path) -> None:
    done = run("--keyset", str(ks), "verify", "--json", "-", input="", code=2)
    assert _one_object(done.stdout)["error"] == {
        "code": "no_token",
        "message": "no token on stdin",
        "exit_code": 2,
    }


# --- help and wording --------------------------------------------------------------------------


def test_the_top_level_help_lists_every_exit_code() -> None:
    shown = " ".join(run("--help").stdout.split())
    for code in ("0 valid", "1 rejected", "2 usage", "3 expired", "4 binding", "5 replayed"):
        assert code in shown
    assert "6 keyset, config or store error" in shown
    assert "7 proxy cannot listen" in shown and "130 interrupted" in shown


def test_the_bind_help_names_every_format_that_takes_it() -> None:
    shown = " ".join(run("verify", "--help").stdout.split())
    assert "mcp-ts only" not in shown
    assert "mcp-ts, mcp-rs and mcp-rs2" in shown


def test_keys_help_lists_its_commands_whole() -> None:
    shown = run("keys", "--help").stdout
    commands = shown.split("Commands:")[1]
    assert "..." not in commands
    assert "Add a new key: pending (verify-only) while its algorithm has a primary, else" in (
        " ".join(commands.split())
    )


def test_every_failure_is_spelt_error_in_lower_case(ks: Path) -> None:
    for args, code in (
        (("verify", "--bogus"), 2),
        (("--keyset", str(ks), "verify", ""), 2),
        (("--keyset", str(ks), "keys", "promote", "nope"), 2),
        (("--keyset", str(ks.parent / "none.json"), "keys", "list"), 6),
    ):
        done = run(*args, code=code)
        assert "Error:" not in done.stderr
        assert done.stderr.splitlines()[-1].startswith("error: ")


# --- --dry-run writes nothing ------------------------------------------------------------------


def test_keys_add_and_promote_dry_runs_leave_the_file_as_it_was(ks: Path) -> None:
    k = ("--keyset", str(ks))
    before = ks.read_bytes()
    said = run(*k, "keys", "add", "--alg", "HS256", "--dry-run").stdout
    assert said == f"would add a pending HS256 key (chosen at run time) to {ks}\n"
    shown = json.loads(run(*k, "keys", "add", "--dry-run", "--json").stdout)
    assert shown["dry_run"] is True and shown["kid"] is None
    assert ks.read_bytes() == before
    pending = _pending(ks)
    before = ks.read_bytes()
    said = run(*k, "keys", "promote", "--force", "--dry-run", pending).stdout
    assert said.startswith(f"would promote {pending} (A256GCM): pending -> primary")
    changes = json.loads(
        run(*k, "keys", "promote", "--force", "--dry-run", "--json", pending).stdout
    )
    assert changes["dry_run"] is True and changes["changes"][0]["kid"] == pending
    # the refusal a real run would meet is met by the dry run too
    run(*k, "keys", "promote", "--dry-run", pending, code=75)  # not yet
    assert ks.read_bytes() == before
    run(*k, "keys", "promote", "--force", pending)
    assert ks.read_bytes() != before


# --- --json for keys export, seal and unseal ---------------------------------------------------


def test_keys_export_json_says_what_was_written_where_and_never_the_secret_unasked(
    ks: Path, tmp_path: Path
) -> None:
    key = ms.Keyset.load(ks).primary("A256GCM")
    out = tmp_path / "exported.hex"
    written = run("--keyset", str(ks), "keys", "export", key.kid, "--out", str(out))
    assert written.stderr == f"wrote the secret of A256GCM key {key.kid} to {out} (mode 0600)\n"
    out.unlink()
    done = run(
        *("--keyset", str(ks), "keys", "export", key.kid, "--out", str(out)),
        *("--encoding", "hex", "--json"),
    )
    assert json.loads(done.stdout) == {
        "keyset": str(ks),
        "kid": key.kid,
        "alg": "A256GCM",
        "format": "aead",
        "encoding": "hex",
        "secret_bytes": 32,
        "written_to": str(out),
        "secret": None,
    }
    assert done.stderr == "" and key.secret.hex() not in done.stdout
    assert out.read_text() == key.secret.hex() + "\n" and out.stat().st_mode & 0o777 == 0o600
    asked = run(
        "--keyset", str(ks), "keys", "export", key.kid, "--stdout", "--json", "--encoding", "hex"
    )
    assert json.loads(asked.stdout) == {
        **json.loads(done.stdout),
        "written_to": "stdout",
        "secret": key.secret.hex(),
    }
    raw = run("--keyset", str(ks), "keys", "export", key.kid, "--stdout", "--json", code=2)
    message = (
        "--json --stdout puts the secret in a JSON string, which raw bytes are not: give "
        "--encoding base64 or --encoding hex"
    )
    assert raw.stderr.splitlines()[-1] == f"error: {message}"
    assert json.loads(raw.stdout) == {
        "error": {"code": "usage", "message": message, "exit_code": 2}
    }
    again = run("--keyset", str(ks), "keys", "export", key.kid, "--out", str(out), "--json", code=2)
    assert json.loads(again.stdout)["error"]["message"] == (
        f"{out} exists; exported secrets never overwrite a file"
    )
    assert out.read_text() == key.secret.hex() + "\n"


def test_seal_and_unseal_json(ks: Path) -> None:
    keyset = ms.Keyset.load(ks)
    sealed = json.loads(run("--keyset", str(ks), "seal", "--json", input=b"\x00opaque\xff").stdout)
    assert set(sealed) == {"token", "format", "kid", "payload_bytes"}
    assert sealed["format"] == "aead" and sealed["payload_bytes"] == 8
    assert sealed["kid"] == keyset.primary("A256GCM").kid
    assert ms.unseal(keyset, sealed["token"]) == b"\x00opaque\xff"
    opened = json.loads(run("--keyset", str(ks), "unseal", "--json", sealed["token"]).stdout)
    assert opened == {
        "payload_base64url": "AG9wYXF1Zf8",
        "payload_bytes": 8,
        "format": "aead",
        "kid": sealed["kid"],
    }
    jws = json.loads(run("--keyset", str(ks), "seal", "-f", "jws", "--json", input=b"x").stdout)
    assert jws["kid"] == keyset.primary("HS256").kid
    assert (
        json.loads(run("--keyset", str(ks), "unseal", "--json", jws["token"]).stdout)["format"]
        == "jws"
    )
    # failures: one object, the error's
    forged = sealed["token"][:-2] + ("AA" if not sealed["token"].endswith("AA") else "BB")
    refused = run("--keyset", str(ks), "unseal", "--json", forged, code=1)
    assert json.loads(refused.stdout)["error"]["code"] == "bad_signature"
    too_big = run("--keyset", str(ks), "seal", "--json", input=b"x" * 9000, code=2)
    assert json.loads(too_big.stdout)["error"]["code"] == "usage"


# --- shell completion of key ids ---------------------------------------------------------------


def _complete(words: str, env: dict[str, str] | None = None) -> list[str]:
    """What bash's completion asks of ``mrtr-state`` for the command line ``words``."""
    line = words.split(" ")
    done = CliRunner().invoke(
        cli,
        [],
        prog_name="mrtr-state",
        env={
            **CLEAN_ENV,
            "_MRTR_STATE_COMPLETE": "bash_complete",
            "COMP_WORDS": words,
            "COMP_CWORD": str(len(line) - 1),
            **(env or {}),
        },
    )
    assert done.exit_code == 0 and done.stderr == "", done.stderr
    return [item.split(",", 1)[1] for item in done.stdout.splitlines() if item]


@pytest.mark.parametrize("command", ["promote", "retire", "export"])
def test_key_ids_complete_without_printing_a_secret(ks: Path, command: str) -> None:
    kids = sorted(key.kid for key in ms.Keyset.load(ks))
    offered = _complete(f"mrtr-state --keyset {ks} keys {command} ")
    assert sorted(offered) == kids
    assert _complete(f"mrtr-state keys {command} --keyset {ks} {kids[0][:6]}") == [
        kid for kid in kids if kid.startswith(kids[0][:6])
    ]
    # from the environment too, and nothing at all (never a traceback) for a missing keyset
    assert sorted(_complete(f"mrtr-state keys {command} ", {"MRTR_STATE_KEYSET": str(ks)})) == kids
    assert _complete(f"mrtr-state keys {command} --keyset {ks.parent / 'no.json'} ") == []


def test_completion_reads_an_encrypted_keyset_without_its_kek(tmp_path: Path) -> None:
    path = tmp_path / "keyset.json"
    env = {"PASS": "correct horse battery staple"}
    run("--keyset", str(path), "--kek", "passphrase:env:PASS", "keys", "init", "--kdf-cost", "10",
        env=env)  # fmt: skip
    listed = json.loads(run("--keyset", str(path), "keys", "list", "--json").stdout)["keys"]
    offered = _complete(f"mrtr-state --keyset {path} keys promote ")
    assert sorted(offered) == sorted(key["kid"] for key in listed)


# --- version, config show, doctor --------------------------------------------------------------


def test_version_names_every_part_and_never_fails() -> None:
    shown = json.loads(run("version", "--json").stdout)
    assert set(shown) == {"mrtr_state", "python", "cryptography", "openssl", "commit"}
    assert shown["mrtr_state"] == ms.__version__
    assert shown["openssl"].startswith("OpenSSL") and shown["commit"] != ""
    # from this checkout the commit is its HEAD (a wheel says "unknown": tests/test_install.py),
    # asked of the checkout the tests are in, not of the test's working folder
    import shutil
    import subprocess

    from .helpers import ROOT

    git = shutil.which("git")  # a checkout unpacked from an archive, on a machine without git
    asked = [git, "rev-parse", "HEAD"] if git else None
    head = (
        subprocess.run(asked, capture_output=True, text=True, check=False, cwd=ROOT).stdout.strip()
        if asked
        else ""
    )
    assert shown["commit"] in (head, "unknown")
    assert "cryptography " + shown["cryptography"] in " ".join(run("version").stdout.split())


def test_config_show_says_where_each_setting_came_from(ks: Path, tmp_path: Path) -> None:
    config = tmp_path / "mrtr-state.toml"
    config.write_text('ttl = "2m"\naudience = "from-file"\n')
    config.chmod(0o600)
    env = {"MRTR_STATE_TTL_CAP": "30m"}
    shown = run("--keyset", str(ks), "config", "show", "--json", "--config", str(config), env=env)
    found = {item["name"]: item for item in json.loads(shown.stdout)["settings"]}
    assert found["keyset"] == {"name": "keyset", "value": str(ks), "source": "--keyset"}
    assert found["ttl"]["value"] == 120 and found["ttl"]["source"] == f"config file {config}"
    assert found["ttl_cap"] == {"name": "ttl_cap", "value": 1800, "source": "MRTR_STATE_TTL_CAP"}
    assert found["format"] == {"name": "format", "value": "aead", "source": "default"}
    assert found["config"]["value"] == str(config)
    text = run("--keyset", str(ks), "config", "show", "--config", str(config), env=env).stdout
    assert "ttl_cap       30m  (MRTR_STATE_TTL_CAP)" in text


def test_config_show_writes_durations_as_a_config_file_does_and_json_in_seconds(
    ks: Path,
) -> None:
    from mrtr_state.durations import parse_duration

    env = {"MRTR_STATE_RETENTION": "3661", "MRTR_STATE_ROTATE_EVERY": "7d"}
    text = run("--keyset", str(ks), "config", "show", env=env).stdout
    rows = {line.split()[0]: line.split()[1] for line in text.splitlines()}
    shown = json.loads(run("--keyset", str(ks), "config", "show", "--json", env=env).stdout)
    seconds = {item["name"]: item["value"] for item in shown["settings"]}
    durations = ("ttl", "ttl_cap", "propagation", "retention", "rotate_every", "max_skew")
    assert {name: rows[name] for name in durations} == {
        "ttl": "5m",
        "ttl_cap": "1h",
        "propagation": "1h",
        "retention": "1h1m1s",
        "rotate_every": "7d",
        "max_skew": "5m",
    }
    for name in durations:  # each as it is written, and read back as the seconds --json gives
        assert type(seconds[name]) is int and parse_duration(rows[name]) == seconds[name]
    assert rows["max_size"] == "8192" and seconds["max_size"] == 8192  # bytes, not a duration
    uncapped = run("--keyset", str(ks), "config", "show", env={"MRTR_STATE_TTL_CAP": "none"})
    assert "ttl_cap       none  (MRTR_STATE_TTL_CAP)" in uncapped.stdout


def test_config_show_never_prints_a_store_password(ks: Path) -> None:
    env = {"MRTR_STATE_REPLAY_STORE": "redis://:hunter2secret@127.0.0.1:1/0"}
    for args in (("config", "show"), ("config", "show", "--json")):
        assert "hunter2secret" not in run("--keyset", str(ks), *args, env=env).stdout


def test_doctor_passes_a_healthy_deployment_and_names_what_fails(ks: Path) -> None:
    report = json.loads(run("--keyset", str(ks), "doctor", "--json").stdout)
    statuses = {check["name"]: check["status"] for check in report["checks"]}
    assert report["ok"] is True and statuses == {
        "keyset": "ok",
        "keyset mode": "ok",
        "primary keys": "ok",
        "kek": "skipped",
        "replay store": "ok",
        "clock": "skipped",
    }
    # a loose mode fails the keyset and its mode; every check still runs; exit 6, one object
    ks.chmod(0o644)
    loose = run("--keyset", str(ks), "doctor", "--json", code=6)
    report = _one_object(loose.stdout)
    checks: list[dict[str, str]] = report["checks"]  # type: ignore[assignment]
    statuses = {check["name"]: check["status"] for check in checks}
    assert report["ok"] is False and statuses["keyset"] == statuses["keyset mode"] == "failed"
    assert len(statuses) == 6
    assert "error: doctor: 3 checks failed: keyset, keyset mode, primary keys" in loose.stderr
    ks.chmod(0o600)
    # a format with no primary key, and a replay store that cannot be reached
    env = {"MRTR_STATE_FORMAT": "mcp-ts", "MRTR_STATE_REPLAY_STORE": "redis://127.0.0.1:1/0"}
    text = run("--keyset", str(ks), "doctor", env=env, code=6)
    assert "no primary mcp-ts-v1 key to mint mcp-ts tokens" in text.stdout
    assert "doctor: 2 checks failed: primary keys, replay store" in text.stderr


def test_doctor_passes_a_keyset_of_sdk_keys_only_unless_the_default_format_is_asked_for(
    tmp_path: Path,
) -> None:
    """A keyset made for one SDK's tokens (here Java's) mints none of the default format: that
    is its purpose, not a fault, until a format its keys cannot mint is configured."""
    ks = tmp_path / "keyset.json"
    run("--keyset", str(ks), "keys", "init", "--alg", "mcp-java-v1")
    report = json.loads(run("--keyset", str(ks), "doctor", "--json").stdout)
    check = next(c for c in report["checks"] if c["name"] == "primary keys")
    assert report["ok"] is True and check["status"] == "ok"
    assert "none mints aead, the default format" in check["detail"]
    env = {"MRTR_STATE_FORMAT": "aead"}
    text = run("--keyset", str(ks), "doctor", env=env, code=6)
    assert "no primary A256GCM key to mint aead tokens" in text.stdout


def test_doctor_checks_the_kek_and_the_clock_of_a_redis_store(tmp_path: Path) -> None:
    from .helpers import private_redis

    path = tmp_path / "keyset.json"
    env = {"PASS": "correct horse battery staple", "MRTR_STATE_KEK": "passphrase:env:PASS"}
    run("--keyset", str(path), "keys", "init", "--kdf-cost", "10", env=env)
    with private_redis() as (_server, url):
        report = json.loads(
            run("--keyset", str(path), "doctor", "--json",
                env={**env, "MRTR_STATE_REPLAY_STORE": url}).stdout
        )  # fmt: skip
    statuses = {check["name"]: check["status"] for check in report["checks"]}
    assert statuses["kek"] == statuses["replay store"] == statuses["clock"] == "ok"
    wrong = {**env, "PASS": "a wrong but long passphrase"}
    refused = json.loads(run("--keyset", str(path), "doctor", "--json", env=wrong, code=6).stdout)
    statuses = {check["name"]: check["status"] for check in refused["checks"]}
    assert statuses["kek"] == "failed" and statuses["keyset"] == "failed"


# --- the man page ------------------------------------------------------------------------------


def test_the_man_page_is_what_the_click_commands_make_now() -> None:
    """docs/man/mrtr-state.1 is made by scripts/man.py (make man) from the commands' own help:
    a command, option or help text changed without `make man` fails here."""
    import importlib.util

    from .helpers import ROOT

    spec = importlib.util.spec_from_file_location("man_script", ROOT / "scripts" / "man.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    page = script.render()
    assert (ROOT / "docs" / "man" / "mrtr-state.1").read_text(encoding="utf-8") == page, (
        "the man page is stale: run make man"
    )
    for needed in (".TH MRTR\\-STATE 1", '.SS "mrtr-state keys promote"', "\\-\\-dry\\-run"):
        assert needed in page
    assert ".SH EXIT STATUS" in page and "130" in page


# --- doctor --state-store: the state-handle store, as the replay store is checked ---------------


def _checks(report: dict[str, object]) -> dict[str, dict[str, str]]:
    checks: list[dict[str, str]] = report["checks"]  # type: ignore[assignment]
    return {check["name"]: check for check in checks}


def test_doctor_checks_a_state_store_on_a_real_redis(ks: Path) -> None:
    import re

    import redis

    from .helpers import private_redis

    k = ("--keyset", str(ks), "doctor")
    with private_redis() as (_server, url):
        healthy = json.loads(run(*k, "--state-store", url, "--json").stdout)
        found = _checks(healthy)
        assert healthy["ok"] is True and list(found)[-2:] == ["state store", "state store clock"]
        assert found["state store"]["status"] == "ok"
        assert re.fullmatch(
            re.escape(url) + r" reachable, keeps records until they expire, round trip "
            r"\d+\.\d\d ms",
            found["state store"]["detail"],
        )
        assert found["state store clock"]["status"] == "ok"
        assert re.search(
            r"; [+-]\d\.\d{3} s from the state store's$", found["state store clock"]["detail"]
        )
        text = run(*k, "--state-store", url).stdout
        assert re.search(r"^state store        ok  ", text, re.MULTILINE)
        assert re.search(r"^keyset             ok  ", text, re.MULTILINE)
        # a clock beyond max_skew (none allowed: no two clocks read the same microsecond)
        skewed = run(*k, "--state-store", url, "--json", env={"MRTR_STATE_MAX_SKEW": "0"}, code=6)
        found = _checks(json.loads(skewed.stdout))
        assert found["state store clock"]["status"] == "failed"
        assert re.search(
            r"the state store's clock reads [+-]0\.0 s from this host's, beyond max_skew 0 s: "
            r"fix the clocks \(NTP\)$",
            found["state store clock"]["detail"],
        )
        assert found["state store"]["detail"].startswith(
            f"state store {url}: cannot keep records: the server's clock reads "
        )
        # an eviction policy that could drop a record before its retry
        admin = redis.Redis.from_url(url)
        admin.config_set("maxmemory", "100mb")
        admin.config_set("maxmemory-policy", "allkeys-lru")
        admin.close()
        evicting = run(*k, "--state-store", url, "--json", code=6)
        found = _checks(json.loads(evicting.stdout))
        assert found["state store"] == {
            "name": "state store",
            "status": "failed",
            "detail": f"state store {url}: cannot keep records: the server may evict records "
            "before they expire (maxmemory 104857600, maxmemory-policy allkeys-lru); set "
            "maxmemory-policy noeviction",
        }
        assert found["state store clock"]["status"] == "ok"  # read all the same
        assert evicting.stderr == "error: doctor: 1 check failed: state store\n"
    # the server gone: unreachable, and no clock to read
    gone = run(*k, "--state-store", url, "--json", code=6)
    found = _checks(json.loads(gone.stdout))
    assert found["state store"]["status"] == "failed"
    assert found["state store"]["detail"].startswith(f"state store {url}: cannot be reached: ")
    assert found["state store clock"] == {
        "name": "state store clock",
        "status": "skipped",
        "detail": "the state store's clock could not be read",
    }


@pytest.mark.parametrize(
    ("url", "detail"),
    [
        (
            "redis://127.0.0.1:6379/abc",
            "state store redis://127.0.0.1:6379/abc: the database must be a number",
        ),
        ("ftp://nowhere", "unknown state store 'ftp://nowhere': use memory: or a redis:// URL"),
    ],
)
def test_doctor_refuses_a_state_store_url_it_cannot_use(ks: Path, url: str, detail: str) -> None:
    done = run("--keyset", str(ks), "doctor", "--state-store", url, "--json", code=6)
    found = _checks(json.loads(done.stdout))
    assert found["state store"] == {"name": "state store", "status": "failed", "detail": detail}
    assert found["state store clock"]["status"] == "skipped"


def test_doctor_without_a_state_store_lists_no_state_store_check(ks: Path) -> None:
    plain = _checks(json.loads(run("--keyset", str(ks), "doctor", "--json").stdout))
    assert "state store" not in plain and len(plain) == 6
    memory = json.loads(
        run("--keyset", str(ks), "doctor", "--state-store", "memory:", "--json").stdout
    )
    assert _checks(memory)["state store"]["status"] == "ok"
    assert _checks(memory)["state store clock"]["status"] == "skipped"
