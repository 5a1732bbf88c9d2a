"""The CLI contract: exit codes, one-line errors, --json output, help for every command."""

from __future__ import annotations

import json
import re
import stat
import subprocess
import sys
import time
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

import mrtr_state as ms
from mrtr_state.cli import cli

from .helpers import CLEAN_ENV, mint, raw_secret, run

ROOT = Path(__file__).resolve().parents[1]


# --- help ----------------------------------------------------------------------------------


_CTX = click.Context(cli)


def _command(path: tuple[str, ...]) -> click.Command:
    command: click.Command = cli
    for name in path:
        assert isinstance(command, click.Group)
        found = command.get_command(_CTX, name)
        assert found is not None
        command = found
    return command


def _commands(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = []
    for name in group.list_commands(_CTX):
        found.append((*prefix, name))
        command = group.get_command(_CTX, name)
        if isinstance(command, click.Group):
            found.extend(_commands(command, (*prefix, name)))
    return found


def test_every_command_is_listed() -> None:
    # 13 top-level commands, the keys group and its 11, the config group and its show
    assert len(_commands(cli)) == 25


@pytest.mark.parametrize("path", _commands(cli), ids=" ".join)
def test_every_command_has_help_with_an_example_and_is_in_the_readme(path: tuple[str, ...]) -> None:
    result = run(*path, "--help")
    assert "Usage: " in result.stdout
    if not isinstance(_command(path), click.Group):
        assert "Example" in result.stdout
    readme = (ROOT / "README.md").read_text()
    assert f"mrtr-state {' '.join(path)}" in readme


def test_python_dash_m_and_version() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "mrtr_state", "--version"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert ms.__version__ in out.stdout


# --- keys ----------------------------------------------------------------------------------


def test_keys_init_creates_a_private_keyset_and_refuses_to_overwrite(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "keyset.json"
    result = run("--keyset", str(path), "keys", "init", "--json")
    described = json.loads(result.stdout)
    assert [k["alg"] for k in described["keys"]] == ["A256GCM", "HS256", "dir+A256GCM"]
    assert {k["status"] for k in described["keys"]} == {"primary"}
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    before = path.read_bytes()
    again = run("--keyset", str(path), "keys", "init", code=6)
    assert again.stderr == f"error: a keyset already exists at {path}; pass --force to replace it\n"
    assert path.read_bytes() == before
    run("--keyset", str(path), "keys", "init", "--force")
    assert path.read_bytes() != before


def test_keys_list_never_prints_secrets(ks: Path) -> None:
    secret = json.loads(ks.read_text())["keys"][0]["k"]
    text = run("--keyset", str(ks), "keys", "list").stdout
    listed = json.loads(run("--keyset", str(ks), "keys", "list", "--json").stdout)
    kid = listed["keys"][0]["kid"]
    assert re.search(
        rf"^{kid}\s+A256GCM\s+aead\s+primary\s+\S+ UTC\s+mints since \d+s$", text, re.MULTILINE
    )
    assert secret not in text
    assert secret not in json.dumps(listed)
    assert "k" not in listed["keys"][0]


# --- mint and verify -----------------------------------------------------------------------


def test_mint_prints_the_token_alone_and_verify_prints_the_state(ks: Path) -> None:
    result = run(
        "--keyset", str(ks), "mint", "-p", "alice", "-r", "req-42", "--state", '{"step":2}'
    )
    token = result.stdout.strip()
    assert result.stdout == token + "\n"
    assert token.startswith("ms1.")
    assert result.stderr == ""
    verified = run("--keyset", str(ks), "verify", "-p", "alice", "-r", "req-42", token)
    assert verified.stdout == '{"step":2}\n'


def test_mint_json_and_verify_json(ks: Path) -> None:
    before = int(time.time())
    minted = json.loads(
        run("--keyset", str(ks), "mint", "--json", "--ttl", "60", "--state", "[1]").stdout
    )
    assert set(minted) == {"token", "kid", "format", "expires_at"}
    assert minted["format"] == "aead"
    assert before + 60 <= minted["expires_at"] <= int(time.time()) + 60
    out = json.loads(run("--keyset", str(ks), "verify", "--json", minted["token"]).stdout)
    assert out["valid"] is True
    assert out["claims"]["st"] == [1]
    assert out["claims"]["exp"] == minted["expires_at"]


def test_state_from_a_file_and_from_stdin(ks: Path, tmp_path: Path) -> None:
    state_file = tmp_path / "state.json"
    state_file.write_text('{"from":"file"}')
    token = mint(ks, "--state", f"@{state_file}")
    assert run("--keyset", str(ks), "verify", token).stdout == '{"from":"file"}\n'
    piped = run("--keyset", str(ks), "mint", "--state", "-", input='{"from":"stdin"}')
    assert run("--keyset", str(ks), "verify", piped.stdout.strip()).stdout == '{"from":"stdin"}\n'


def test_request_fingerprint_flags(ks: Path) -> None:
    flags = ["--method", "tools/call", "--target", "deploy", "--arguments", '{"env":"prod"}']
    token = mint(ks, *flags)
    run("--keyset", str(ks), "verify", *flags, token)
    wrong = run("--keyset", str(ks), "verify", *flags[:-1], '{"env":"dev"}', token, code=4)
    assert wrong.stderr == "error: request mismatch\n"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--state", "{bad"], "--state is not valid JSON"),
        (["--state", '{"a":1,"a":2}'], "duplicate member"),
        (["--state", "@/nonexistent/state.json"], "cannot read state file"),
        (["--ttl", "3601"], "is over the ttl_cap of 1h (set by the default)"),
        (["--ttl", "0"], "--ttl must be at least 1s"),
        (["--format", "zip"], "'zip' is not"),
        (["--request-id", "r", "--method", "m"], "not both"),
        (["--method", "tools/call"], "method and target together"),
        (["--method", "m", "--target", "t", "--arguments", "NaN"], "--arguments is not valid"),
    ],
)
def test_mint_usage_errors_exit_2(ks: Path, args: list[str], message: str) -> None:
    result = run("--keyset", str(ks), "mint", *args, code=2)
    assert message in result.stderr


def test_every_rejection_reason_and_exit_code(ks: Path, tmp_path: Path) -> None:
    keyset = ms.Keyset.load(ks)
    now = time.time()
    bound = mint(ks, "-p", "alice", "-r", "req-42", "-a", "fleet")
    cases: list[tuple[list[str], str, int, str | re.Pattern[str]]] = [
        (
            [],
            bound,
            4,
            "error: principal mismatch: the token is bound to a principal; give it to verify",
        ),
        (["-p", "bob", "-r", "req-42", "-a", "fleet"], bound, 4, "error: principal mismatch"),
        (["-p", "alice", "-r", "req-1", "-a", "fleet"], bound, 4, "error: request mismatch"),
        (["-p", "alice", "-r", "req-42", "-a", "other"], bound, 4, "error: audience mismatch"),
        (
            [],
            ms.mint(keyset, "x", ttl=60, now=now - 102),
            3,
            re.compile(r"error: expired 4[23] s ago"),
        ),
        (
            [],
            ms.mint(keyset, "x", now=now + 3600),
            3,
            re.compile(
                r"error: not yet valid: issued 3(599|600) s in the future, beyond the 60 s allowed "
                "clock skew"
            ),
        ),
        (
            [],
            ms.mint(ms.Keyset([ms.Key("1a2b3c4d", "A256GCM", bytes(32))]), "x"),
            1,
            "error: unknown key id 1a2b3c4d",
        ),
        (
            [],
            bound[:-3] + ("AAA" if bound[-3:] != "AAA" else "BAA"),
            1,
            "error: authentication tag mismatch (tampered, truncated or forged)",
        ),
        ([], "ms1.AAAAA", 1, "error: aead token body: base64url text has an impossible length"),
        (
            [],
            bound + "=",
            1,
            "error: aead token body: base64url text holds a character outside A-Z a-z 0-9 - _",
        ),
        ([], "ms1.AAAA", 1, "error: aead token is truncated (3 bytes decoded)"),
        ([], "nonsense", 1, "error: not a requestState token of any known format"),
        ([], "ms1." + "A" * 9000, 1, "error: token is 9004 bytes, over the 8192-byte size cap"),
        (
            [],
            "eyJhbGciOiJub25lIn0.e30.",
            1,
            "error: jws header alg 'none' is not accepted (only HS256)",
        ),
        (["--format", "jws"], bound, 1, "error: expected a jws token, got aead"),
        (["--format", "jwe"], bound, 1, "error: expected a jwe token, got aead"),
    ]
    for flags, token, code, message in cases:
        result = run("--keyset", str(ks), "verify", *flags, token, code=code)
        assert result.stdout == ""
        pattern = message if isinstance(message, re.Pattern) else re.escape(message)
        assert re.fullmatch(pattern, result.stderr.rstrip("\n")), (flags, token[:20])


def test_verify_json_reports_the_error_code(ks: Path) -> None:
    token = mint(ks, "-p", "alice")
    result = run("--keyset", str(ks), "verify", "--json", "-p", "bob", token, code=4)
    assert json.loads(result.stdout) == {
        "valid": False,
        "error": {"code": "principal_mismatch", "message": "principal mismatch", "exit_code": 4},
    }
    assert result.stderr == "error: principal mismatch\n"


def test_verify_reads_one_token_per_line_from_stdin(ks: Path) -> None:
    good = mint(ks, "--state", '"ok"')
    bound = mint(ks, "-p", "alice")
    lines = f"{good}\n{bound}\ngarbage\n{good}\n"
    text = run("--keyset", str(ks), "verify", "-", input=lines, code=4)
    assert text.stdout.splitlines() == [
        '"ok"',
        "rejected: principal mismatch: the token is bound to a principal; give it to verify",
        "rejected: not a requestState token of any known format",
        '"ok"',
    ]
    as_json = run("--keyset", str(ks), "verify", "--json", "-", input=lines, code=4)
    results = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert [(r["line"], r["valid"]) for r in results] == [
        (1, True),
        (2, False),
        (3, False),
        (4, True),
    ]
    assert results[2]["error"]["code"] == "malformed"
    assert run("--keyset", str(ks), "verify", "-", input=f"{good}\n").stdout == '"ok"\n'


# --- keyset and config problems ------------------------------------------------------------


def test_keyset_problems_exit_6_with_a_fix(ks: Path, tmp_path: Path) -> None:
    missing = run("--keyset", str(tmp_path / "none.json"), "mint", code=6)
    assert "mrtr-state keys init" in missing.stderr
    ks.chmod(0o644)
    loose = run("--keyset", str(ks), "mint", code=6)
    assert loose.stderr.startswith(f"error: keyset {ks} has mode 0644 (owner ")
    assert "others may read it" in loose.stderr
    assert loose.stderr.endswith(f"; fix it with: chmod 600 {ks}\n")
    ks.chmod(0o600)
    link = tmp_path / "link.json"
    link.symlink_to(ks)
    run("--keyset", str(link), "mint")  # reading follows the link and judges the file reached
    assert "is a symlink" in run("--keyset", str(link), "keys", "add", code=6).stderr
    ks.write_text('{"keys": [')
    assert "is not valid JSON" in run("--keyset", str(ks), "keys", "list", code=6).stderr


def test_keyset_from_environment_and_config(ks: Path, tmp_path: Path) -> None:
    token = run("mint", env={"MRTR_STATE_KEYSET": str(ks)}).stdout.strip()
    config = tmp_path / "c.toml"
    config.write_text(f'keyset = "{ks.name}"\naudience = "fleet"\nttl = 30\n')
    minted = json.loads(run("--config", str(config), "mint", "--json").stdout)
    claims = json.loads(run("--config", str(config), "verify", "--json", minted["token"]).stdout)[
        "claims"
    ]
    assert claims["aud"] == "fleet"
    assert claims["exp"] - claims["iat"] == 30
    # the configured audience is expected on verify too: an unbound token is refused
    run("--config", str(config), "verify", token, code=4)
    overridden = run(
        "--config",
        str(config),
        "verify",
        "--json",
        "-a",
        "fleet",
        minted["token"],
        env={"MRTR_STATE_AUDIENCE": "other"},
    )
    assert json.loads(overridden.stdout)["valid"] is True
    run(
        "--config",
        str(config),
        "verify",
        minted["token"],
        env={"MRTR_STATE_AUDIENCE": "other"},
        code=4,
    )


def test_config_errors_exit_6(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text("tll = 3\n")
    result = run("--config", str(config), "keys", "list", code=6)
    assert result.stderr.startswith(f"error: config file {config}: unknown setting tll")


# --- inspect, seal, unseal -----------------------------------------------------------------


def test_inspect_without_a_keyset_says_not_verified(
    ks: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = mint(ks, "--state", '"x"')
    monkeypatch.chdir(tmp_path)  # no keys/keyset.json here
    result = run("inspect", token)
    assert "NOT VERIFIED" in result.stdout
    assert "no keyset loaded" in result.stdout
    assert "\x1b[" not in result.stdout  # not a terminal: no colour


def test_inspect_with_the_keyset_verifies_and_shows_the_time_line(ks: Path) -> None:
    token = mint(ks, "-p", "alice", "--ttl", "300", "--state", '{"step":2}')
    text = run("--keyset", str(ks), "inspect", token).stdout
    assert "result     VERIFIED" in text
    assert "NOT VERIFIED" not in text
    assert re.search(r"expires in 4m 5\ds|expires in 5m", text)
    assert '"sub": "alice"' in text
    assert 'state      {"step": 2}' in text
    view = json.loads(run("--keyset", str(ks), "inspect", "--json", "-", input=token).stdout)
    assert view["verified"] is True
    assert view["format"] == "aead"
    assert view["claims"]["st"] == {"step": 2}
    assert view["key_status"] == "primary"


def test_inspect_of_a_bad_token_and_an_explicit_missing_keyset(ks: Path, tmp_path: Path) -> None:
    run("--keyset", str(ks), "inspect", "garbage", code=1)
    token = mint(ks)
    run("--keyset", str(tmp_path / "none.json"), "inspect", token, code=6)
    expired = ms.mint(ms.Keyset.load(ks), "x", ttl=5, now=time.time() - 3600)
    text = run("--keyset", str(ks), "inspect", expired).stdout
    assert "NOT VERIFIED: expired" in text
    assert "expired 59m" in text


def test_seal_and_unseal(ks: Path) -> None:
    sealed = run("--keyset", str(ks), "seal", input=b"\x00\x01raw bytes\xff").stdout.strip()
    runner = CliRunner()
    result = runner.invoke(cli, ["--keyset", str(ks), "unseal", sealed], env=CLEAN_ENV)
    assert result.exit_code == 0
    assert result.stdout_bytes == b"\x00\x01raw bytes\xff"
    assert (
        run("--keyset", str(ks), "unseal", "-", input=sealed + "\n").stdout_bytes
        == b"\x00\x01raw bytes\xff"
    )
    claims_token = mint(ks)
    assert "use verify" in run("--keyset", str(ks), "unseal", claims_token, code=1).stderr
    assert "use unseal" in run("--keyset", str(ks), "verify", sealed, code=1).stderr


def test_unseal_of_nothing_on_stdin_is_a_usage_error(ks: Path) -> None:
    run("--keyset", str(ks), "unseal", "-", input="", code=2)


# --- every format through the CLI ----------------------------------------------------------


@pytest.mark.parametrize("fmt", ["aead", "jws", "jwe"])
def test_each_format_mints_verifies_inspects_and_seals(ks: Path, fmt: str) -> None:
    token = mint(ks, "--format", fmt, "-p", "alice", "--state", '{"f":1}')
    assert run("--keyset", str(ks), "verify", "-p", "alice", token).stdout == '{"f":1}\n'
    assert run("--keyset", str(ks), "verify", "-p", "bob", token, code=4).stderr == (
        "error: principal mismatch\n"
    )
    view = json.loads(run("--keyset", str(ks), "inspect", "--json", token).stdout)
    assert (view["format"], view["verified"]) == (fmt, True)
    other = "jws" if fmt != "jws" else "aead"
    wrong = run("--keyset", str(ks), "verify", "--format", other, "-p", "alice", token, code=1)
    assert wrong.stderr == f"error: expected a {other} token, got {fmt}\n"
    sealed = run("--keyset", str(ks), "seal", "--format", fmt, input=b"bytes").stdout.strip()
    assert run("--keyset", str(ks), "unseal", sealed).stdout_bytes == b"bytes"


def test_format_from_config(ks: Path, tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text(f'keyset = "{ks.name}"\nformat = "jwe"\n')
    minted = json.loads(run("--config", str(config), "mint", "--json").stdout)
    assert minted["format"] == "jwe"
    assert minted["token"].count(".") == 4


def test_keys_add_makes_a_primary_only_when_none_exists(tmp_path: Path) -> None:
    path = tmp_path / "keyset.json"
    run("--keyset", str(path), "keys", "init", "--alg", "A256GCM")
    first = json.loads(run("--keyset", str(path), "keys", "add", "--alg", "HS256", "--json").stdout)
    assert (first["alg"], first["status"]) == ("HS256", "primary")
    second = run("--keyset", str(path), "keys", "add", "--alg", "HS256").stdout
    assert re.fullmatch(
        rf"added pending HS256 key [0-9a-f]{{8}} to {re.escape(str(path))}\n", second
    )
    default = json.loads(run("--keyset", str(path), "keys", "add", "--json").stdout)
    assert (default["alg"], default["status"]) == ("A256GCM", "pending")
    statuses = [
        (k["alg"], k["status"])
        for k in json.loads(run("--keyset", str(path), "keys", "list", "--json").stdout)["keys"]
    ]
    assert statuses == [
        ("A256GCM", "primary"),
        ("HS256", "primary"),
        ("HS256", "pending"),
        ("A256GCM", "pending"),
    ]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    run("--keyset", str(tmp_path / "none.json"), "keys", "add", code=6)


def test_inspect_colours_the_token_on_a_terminal(ks: Path) -> None:
    token = mint(ks, "--state", "1")
    result = CliRunner().invoke(
        cli, ["--keyset", str(ks), "inspect", token], env=CLEAN_ENV, color=True
    )
    assert result.exit_code == 0
    assert token not in result.stdout  # split into coloured segments...
    assert token in click.unstyle(result.stdout)  # ...that join back to the token


# --- global options anywhere ----------------------------------------------------------------


def _leaf_commands() -> list[tuple[str, ...]]:
    return [path for path in _commands(cli) if not isinstance(_command(path), click.Group)]


@pytest.mark.parametrize("path", _commands(cli), ids=" ".join)
def test_every_command_takes_keyset_and_config_after_it(path: tuple[str, ...]) -> None:
    names = {opt for param in _command(path).params for opt in getattr(param, "opts", ())}
    assert {"--keyset", "-k", "--config"} <= names


def _after_the_command(ks: Path, tmp_path: Path) -> dict[tuple[str, ...], list[str]]:
    """For each leaf command, arguments that do real work on ``ks`` (given after the command)."""
    token = mint(ks, "--principal", "alice")
    kid = json.loads(run("--keyset", str(ks), "keys", "add", "--json").stdout)["kid"]
    secret = tmp_path / "secret.bin"
    secret.write_bytes(raw_secret(32))
    secret.chmod(0o600)
    capture = tmp_path / "capture.jsonl"
    capture.write_text('{"jsonrpc":"2.0","id":1,"method":"ping"}\n')
    return {  # in the order they run: init last, retire after what needs the primary
        ("audit",): [str(capture)],
        ("inspect",): [token],
        ("verify",): ["--principal", "alice", token],
        ("mint",): [],
        ("seal",): [],
        ("unseal",): ["-"],
        ("proxy",): ["--upstream", "ftp://nowhere", "--allow-anonymous"],  # fails after the keyset
        ("probe",): ["http://127.0.0.1:1/mcp", "--tool", "t", "--dry-run"],  # reads no keyset
        ("keys", "add"): ["--alg", "HS256"],
        ("keys", "import"): ["--alg", "A256GCM", "--secret-file", str(secret)],
        ("keys", "list"): [],
        ("version",): [],
        ("config", "show"): [],
        ("doctor",): [],
        ("keys", "export"): [kid, "--stdout"],
        ("keys", "promote"): [kid, "--force"],
        ("keys", "prune"): ["--dry-run"],
        ("rotate",): ["--dry-run"],
        ("keys", "retire"): [kid, "--yes"],
        ("keys", "encrypt"): ["--kek", "passphrase:env:MRTR_TEST_A", "--kdf-cost", "10"],
        ("keys", "rewrap"): [
            "--from-kek",
            "passphrase:env:MRTR_TEST_A",
            "--kek",
            "passphrase:env:MRTR_TEST_B",
            "--kdf-cost",
            "10",
        ],
        ("keys", "decrypt"): ["--yes", "--kek", "passphrase:env:MRTR_TEST_B"],
        ("keys", "init"): ["--force"],
    }


def test_keyset_after_each_command_is_the_one_used(
    ks: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``mrtr-state CMD ... --keyset PATH`` uses PATH, even with a wrong keyset before CMD."""
    monkeypatch.setenv("MRTR_TEST_A", "passphrase one, long enough")
    monkeypatch.setenv("MRTR_TEST_B", "passphrase two, long enough")
    calls = _after_the_command(ks, tmp_path)
    assert set(calls) == set(_leaf_commands())
    elsewhere = str(tmp_path / "nowhere.json")
    config = tmp_path / "c.toml"
    config.write_text('audience = "from-config"\n')
    config.chmod(0o600)
    sealed = ""
    for path, args in calls.items():
        input_ = None
        if path == ("seal",):
            input_ = "payload"
        if path == ("unseal",):
            input_ = sealed
        code = 2 if path == ("proxy",) else 0
        result = run(
            "--keyset", elsewhere, *path, *args, "--keyset", str(ks), input=input_, code=code
        )
        if path == ("proxy",):
            assert "--upstream must be an http(s) URL" in result.stderr
        if path == ("seal",):
            sealed = result.stdout.strip()
        assert not Path(elsewhere).exists(), path
    # --config after the command, and -k, too
    token = run("mint", "-k", str(ks), "--config", str(config)).stdout.strip()
    run("verify", token, "--keyset", str(ks), code=4)  # the token says an audience; no verifier
    run("verify", token, "--config", str(config), "-k", str(ks))


def test_the_option_closest_to_the_command_wins(ks: Path, tmp_path: Path) -> None:
    other = tmp_path / "other.json"
    run("--keyset", str(other), "keys", "init")
    token = mint(other)
    run("--keyset", str(ks), "verify", "--keyset", str(other), token)
    run("--keyset", str(other), "verify", "--keyset", str(ks), token, code=1)
    run("keys", "--keyset", str(ks), "list", "--keyset", str(other))
    listed = json.loads(run("keys", "--keyset", str(other), "list", "--json").stdout)
    assert listed["keyset"] == str(other)
    # the environment is the fallback of every position
    run("verify", token, env={"MRTR_STATE_KEYSET": str(other)})
    run("verify", token, "--keyset", str(other), env={"MRTR_STATE_KEYSET": str(ks)})


def test_the_command_list_says_what_each_commands_own_help_says() -> None:
    """`mrtr-state --help` lists commands without importing them; its lines must not drift."""
    from mrtr_state.cli import SUMMARIES

    assert set(SUMMARIES) == set(cli.list_commands(_CTX))
    for name, summary in SUMMARIES.items():
        words = re.findall(r"[a-z]+", summary.lower())[:3]
        own = " ".join(re.findall(r"[a-z]+", (_command((name,)).help or "").lower()))
        assert own.startswith(" ".join(words)), (name, summary)


#: What a verify never needs: other commands, writers' tools (pathlib, fcntl, tempfile), and
#: the dataclass machinery, whose set-up would be most of the command's own work (issue 13).
VERIFY_NEVER_IMPORTS = [
    "mrtr_state.cli.keys",
    "mrtr_state.keys.lifecycle",
    "mrtr_state.state.replay",
    "logging",
    "mrtr_state.tokens.envelopes.mcp_py",
    "mrtr_state.tokens.envelopes.mcp_ts",
    "mrtr_state.cli._render",
    "hashlib",
    "hmac",
    "pathlib",
    "dataclasses",
    "fcntl",
    "tempfile",
    "urllib.parse",
    "ipaddress",
    "tomllib",
    "_hashlib",  # a second OpenSSL binding: HMAC and SHA-256 come from cryptography's
]


def test_help_and_verify_import_no_command_they_do_not_run(ks: Path) -> None:
    # SDK keys in the keyset (a fleet moving between codecs) are checked on load, too
    run("--keyset", str(ks), "keys", "add", "--alg", "mcp-py-v1")
    tokens = [mint(ks, "--format", fmt) for fmt in ("aead", "jws", "jwe")]
    probe = (
        "import sys\n"
        "from mrtr_state.cli import main\n"
        "sys.argv = ['mrtr-state'] + sys.argv[1:]\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print(' '.join(sorted(sys.modules)), file=sys.stderr)\n"
    )
    for args, absent in (
        (["--help"], ["mrtr_state.cli.keys", "mrtr_state.cli.tokens", "mrtr_state.tokens.facade"]),
        *((["--keyset", str(ks), "verify", t], VERIFY_NEVER_IMPORTS) for t in tokens),
    ):
        done = subprocess.run(
            [sys.executable, "-c", probe, *args], capture_output=True, text=True, check=True
        )
        loaded = set(done.stderr.split()[-1000:])
        assert not loaded & set(absent), (args, sorted(loaded & set(absent)))


def test_proxy_usage_errors(ks: Path) -> None:
    upstream = ["--upstream", "http://127.0.0.1:9/mcp", "--allow-anonymous"]
    both = run(
        "proxy", *upstream, "--principal-header", "X-U", "--principal-from", "bearer", code=2
    )
    assert "not both" in both.stderr
    once = run("--keyset", str(ks), "proxy", *upstream, "--once", code=2)
    assert "--once needs --replay-store" in once.stderr
    store = run("--keyset", str(ks), "proxy", *upstream, "--replay-store", "memory:", code=2)
    assert "only with --once" in store.stderr
    listen = run("--keyset", str(ks), "proxy", *upstream, "--listen", "nowhere", code=2)
    assert "HOST:PORT" in listen.stderr


# --- output a terminal cannot be steered by ------------------------------------------------

HOSTILE_STATE = {"msg": "\x1b]0;pwned\x07 \u009b31m \u202egnp.exe \x7f \u2066 \u2028 ok \u00e9"}
TERMINAL_ACTIVE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]"
)


@pytest.mark.parametrize("fmt", ["aead", "jws", "jwe"])
def test_verify_and_inspect_print_states_with_controls_escaped(ks: Path, fmt: str) -> None:
    """C1 controls, DEL and bidirectional overrides in a state are written as \\u escapes in
    every output (text and --json, one token and a batch): still the same JSON, inert on a
    terminal."""
    token = ms.mint(ms.Keyset.load(ks), HOSTILE_STATE, principal="alice", format=fmt)
    outputs = {
        "verify": run("-k", str(ks), "verify", "-p", "alice", token).stdout,
        "verify --json": run("-k", str(ks), "verify", "-p", "alice", "--json", token).stdout,
        "verify -": run("-k", str(ks), "verify", "-p", "alice", "-", input=token + "\n").stdout,
        "verify --json -": run(
            "-k", str(ks), "verify", "-p", "alice", "--json", "-", input=token + "\n"
        ).stdout,
        "inspect --json": run("-k", str(ks), "inspect", "--json", token).stdout,
    }
    for name, out in outputs.items():
        assert not TERMINAL_ACTIVE.search(out.rstrip("\n")), name
        parsed = json.loads(out)
        if name in ("verify", "verify -"):
            assert parsed == HOSTILE_STATE, name
        else:
            assert parsed["claims"]["st"] == HOSTILE_STATE, name
    assert "\\u009b" in outputs["verify"] and "\\u202e" in outputs["verify"]
    assert "\u00e9" in outputs["verify"]  # printable non-ASCII stays as it is


def test_proxy_asks_where_the_principal_comes_from(ks: Path) -> None:
    result = run("-k", str(ks), "proxy", "--upstream", "http://127.0.0.1:9/mcp", code=2)
    assert "--principal-header NAME" in result.stderr and "--allow-anonymous" in result.stderr


def test_proxy_on_an_address_in_use_exits_7_with_a_clear_error(ks: Path) -> None:
    import socket

    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        result = run(
            *("-k", str(ks), "proxy", "--upstream", "http://127.0.0.1:9/mcp"),
            *("--allow-anonymous", "--listen", f"127.0.0.1:{port}"),
            code=7,
        )
    assert result.stderr.startswith(f"error: cannot listen on 127.0.0.1:{port}: ")
    assert "in use" in result.stderr
