"""One JSON shape per command (issue 46, item 3): with --json every outcome is one object, and
each command's object has the same members whatever happened, as docs/cli.md's table lists them.

Each command is run through its success and failure paths, a usage mistake click finds before
the command runs (a bad flag) and the keyset or config failures among them; the members of each
answer are compared with the command's documented set. verify's answer says "valid" on every
outcome, doctor's "ok" (with its settings and checks), audit's "clean"; every failure carries
"error" ({code, message, exit_code}) beside them, and is the only member of the other commands'.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import click
import pytest

import mrtr_state as ms
from mrtr_state.cli import cli

from .helpers import ROOT, mint, raw_secret, run

ERROR = {"error"}

#: command -> (members on success, members on failure)
SHAPES: dict[str, tuple[set[str], set[str]]] = {
    "audit": (
        {
            "lines",
            "messages",
            "exchanges",
            "passed",
            "unanswered",
            "clean",
            "findings_by_kind",
            "findings",
            "tokens_verified",
        },
        {"clean", "error"},
    ),
    "config show": ({"settings"}, ERROR),
    "probe": (
        {"target", "server", "format", "checks", "findings", "requests"},
        {"target", "server", "format", "checks", "findings", "requests", "error"},
    ),
    "doctor": ({"ok", "settings", "checks"}, {"ok", "settings", "checks", "error"}),
    "inspect": (
        {
            "format",
            "kid",
            "key_status",
            "confidential",
            "verified",
            "problem",
            "header",
            "fields",
            "envelope",
            "claims",
            "state",
            "sealed_bytes",
            "issued_at",
            "expires_at",
            "notes",
        },
        ERROR,
    ),
    "keys add": (
        {"keyset", "dry_run", "kid", "alg", "format", "status", "since", "sdk_kid"}
        | {"kid_chosen_at_run_time"},
        ERROR,
    ),
    "keys decrypt": ({"keyset", "encrypted", "kek"}, ERROR),
    "keys encrypt": ({"keyset", "encrypted", "kek"}, ERROR),
    "keys export": (
        {"keyset", "kid", "alg", "format", "encoding", "secret_bytes", "written_to", "secret"},
        ERROR,
    ),
    "keys import": ({"keyset", "kid", "alg", "format", "status", "since", "sdk_kid"}, ERROR),
    "keys init": ({"keyset", "kek", "keys"}, ERROR),
    "keys list": ({"keyset", "encrypted", "kek", "authenticated", "keys"}, ERROR),
    "keys promote": ({"keyset", "dry_run", "changes"}, ERROR),
    "keys prune": ({"keyset", "dry_run", "changes"}, ERROR),
    "keys retire": (
        {"keyset", "dry_run", "action", "kid", "alg", "detail", "cut_off_seconds"}
        | {"no_primary_left"},
        ERROR,
    ),
    "keys rewrap": ({"keyset", "encrypted", "kek"}, ERROR),
    "mint": ({"token", "kid", "format", "expires_at"}, ERROR),
    "rotate": ({"keyset", "dry_run", "changes", "next_due"}, ERROR),
    "seal": ({"token", "format", "kid", "payload_bytes"}, ERROR),
    "unseal": ({"payload_base64url", "payload_bytes", "format", "kid"}, ERROR),
    "verify": ({"valid", "taken", "claims"}, {"valid", "error"}),
    "version": ({"mrtr_state", "python", "cryptography", "openssl", "commit"}, ERROR),
}

#: The members of "error", on every failure of every command (plus the error's own facts,
#: such as promote's seconds_left).
ERROR_MEMBERS = {"code", "message", "exit_code"}


def leaf_commands_with_json() -> set[str]:
    """Every command that takes --json, found by walking the click tree."""

    def walk(command: click.Command, path: list[str], ctx: click.Context) -> set[str]:
        if isinstance(command, click.Group):
            found: set[str] = set()
            for name in command.list_commands(ctx):
                sub = command.get_command(ctx, name)
                assert sub is not None
                found |= walk(sub, [*path, name], click.Context(sub, parent=ctx, info_name=name))
            return found
        options = {name for param in command.params for name in getattr(param, "opts", ())}
        return {" ".join(path)} if "--json" in options else set()

    return walk(cli, [], click.Context(cli, info_name="mrtr-state"))


def test_every_command_with_json_has_its_shape_here_and_in_the_docs() -> None:
    assert set(SHAPES) == leaf_commands_with_json()
    page = (ROOT / "docs" / "cli.md").read_text()
    section = page.split("### One JSON object per outcome", 1)[1]
    table = next(block for block in section.split("\n\n") if block.startswith("| command"))
    documented: dict[str, tuple[set[str], set[str]]] = {}
    for row in table.splitlines()[2:]:
        command, success, failure = (cell.strip() for cell in row.strip("|").split("|"))
        # the members named in backquotes, leaving out what parentheses say of them
        plain = [re.sub(r"\([^)]*\)", "", cell) for cell in (success, failure)]
        members = [set(re.findall(r"`([a-z0-9_]+)`", cell)) for cell in plain]
        documented[command.strip("`").removeprefix("mrtr-state ")] = (members[0], members[1])
    assert documented == SHAPES


def answer(
    command: str, args: list[str], code: int, *, env: dict[str, str] | None = None, **extra: Any
) -> dict[str, Any]:
    """Run ``mrtr-state ... COMMAND ... --json``; its one object, whose members are checked
    against the command's shape (the success members at exit 0, else the failure members)."""
    done = run(*args, "--json", code=code, env=env, **extra)
    lines = done.stdout.splitlines()
    assert len(lines) == 1, done.stdout  # one object, on one line
    found: dict[str, Any] = json.loads(lines[0])
    success, failure = SHAPES[command]
    if "error" in found or code != 0:
        if command == "audit" and code == 1 and "error" not in found:
            assert set(found) == success and found["clean"] is False  # findings: the report
            return found
        assert set(found) == failure, (command, args, found)
        assert set(found["error"]) >= ERROR_MEMBERS and found["error"]["exit_code"] == code
        assert done.stderr.splitlines()[-1] == "error: " + found["error"]["message"]
        for member, value in _verdicts(command).items():
            assert found[member] == value
    else:
        assert set(found) == success, (command, args, found)
    return found


def _verdicts(command: str) -> dict[str, Any]:
    return {"verify": {"valid": False}, "doctor": {"ok": False}, "audit": {"clean": False}}.get(
        command, {}
    )


@pytest.fixture
def ks(tmp_path: Path) -> Path:
    path = tmp_path / "keyset.json"
    run("--keyset", str(path), "keys", "init")
    return path


def _usage_and_missing_keyset(
    command: str, words: list[str], tmp_path: Path, *, keyset_needed: bool = True
) -> None:
    """The two failures every command shares: a bad flag (2, before the command runs, also
    with --json before the command's name), and a named keyset that is not there (6)."""
    answer(command, [*words, "--no-such-flag"], 2)
    answer(command, ["--no-such-flag", *words], 2)
    if keyset_needed:
        answer(command, ["--keyset", str(tmp_path / "none.json"), *words], 6)


# --- each command, through its paths -------------------------------------------------------------


def test_verify(ks: Path, tmp_path: Path) -> None:
    k = ["--keyset", str(ks), "verify"]
    token = mint(ks, "--principal", "alice", "--request-id", "r", "--state", '{"n":1}')
    found = answer("verify", [*k, "-p", "alice", "-r", "r", token], 0)
    assert found["valid"] is True and found["taken"] is False and found["claims"]["st"] == {"n": 1}
    answer("verify", [*k, "-p", "alice", "-r", "r", token[:-3] + "AAA"], 1)
    expired = ms.mint(ms.Keyset.load(ks), 1, ttl=60, now=time.time() - 3600)
    answer("verify", [*k, expired], 3)
    answer("verify", [*k, "-p", "bob", "-r", "r", token], 4)
    store = f"sqlite:///{tmp_path / 'replay.db'}"
    once = [*k, "--once", "--replay-store", store, "-p", "alice", "-r", "r"]
    assert answer("verify", [*once, token], 0)["taken"] is True
    answer("verify", [*once, token], 5)
    answer("verify", [*k, ""], 2)  # no token at all
    answer("verify", [*k, "--replay-store", store, token], 2)  # a flag that needs --once
    down = [*k, "--once", "--replay-store", "redis://127.0.0.1:1/0", "-p", "alice", "-r", "r"]
    answer("verify", [*down, token], 6)
    answer("verify", [*k, "-"], 2, input="")  # an empty stdin: no token
    answer("verify", [*k, "--jsonl", token], 2)  # --jsonl reads stdin
    jsonl = run(*k, "--jsonl", "--json", "-", input='{"token": "x", "nope": 1}\n', code=2)
    assert set(json.loads(jsonl.stdout)) == {"line", "valid", "error"}
    _usage_and_missing_keyset("verify", ["verify", token], tmp_path)
    answer("verify", ["verify", token], 6, env={"MRTR_STATE_CONFIG": str(tmp_path / "no.toml")})
    # a batch: one object per line, each with "valid"; a batch with no token adds its failure
    batch = [*k, "-p", "alice", "-r", "r", "--json", "-"]
    lines = run(*batch, input=f"{token}\nnot-a-token\n", code=1).stdout.splitlines()
    assert [set(json.loads(line)) for line in lines] == [
        {"line", "valid", "taken", "claims"},
        {"line", "valid", "error"},
    ]


def test_verify_state_handles(ks: Path, tmp_path: Path) -> None:
    k = ["--keyset", str(ks), "verify", "--state-store", "memory:"]
    answer("verify", [*k, "mh1.AAAA"], 1)  # not a handle it can read: refused, valid false
    answer("verify", [*k, "--bind", "x", "mh1.AAAA"], 2)
    from mrtr_state.state import records as handles

    handle = handles.new_handle().text  # a handle of the right shape, its store down
    answer("verify", ["verify", "--state-store", "redis://127.0.0.1:1/0", handle], 6)


def test_inspect(ks: Path, tmp_path: Path) -> None:
    token = mint(ks, "--state", "1")
    answer("inspect", ["--keyset", str(ks), "inspect", token], 0)
    answer("inspect", ["inspect", token], 0)  # without a keyset: the same members
    answer("inspect", ["--keyset", str(ks), "inspect", "not-a-token"], 1)
    answer("inspect", ["--keyset", str(ks), "inspect", ""], 2)
    answer("inspect", ["--keyset", str(ks), "inspect", "--show-state", token], 2)
    _usage_and_missing_keyset("inspect", ["inspect", token], tmp_path)


def test_mint_seal_unseal(ks: Path, tmp_path: Path) -> None:
    k = ["--keyset", str(ks)]
    answer("mint", [*k, "mint", "--state", "1"], 0)
    answer("mint", [*k, "mint", "--ttl", "2h"], 2)
    answer("mint", [*k, "mint", "--format", "mcp-ts"], 6)  # no primary key of the format
    answer("mint", [*k, "mint", "--state", "{"], 2)
    _usage_and_missing_keyset("mint", ["mint"], tmp_path)
    sealed = answer("seal", [*k, "seal"], 0, input=b"bytes")
    answer("seal", [*k, "seal"], 2, input=b"x" * 9000)
    answer("seal", [*k, "seal", "--format", "mcp-py"], 2, input=b"x")
    _usage_and_missing_keyset("seal", ["seal"], tmp_path)
    answer("unseal", [*k, "unseal", sealed["token"]], 0)
    answer("unseal", [*k, "unseal", sealed["token"][:-2] + "AA"], 1)
    answer("unseal", [*k, "unseal", ""], 2)
    _usage_and_missing_keyset("unseal", ["unseal", sealed["token"]], tmp_path)


def test_keys_that_add_and_move(ks: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    k = ["--keyset", str(ks), "keys"]
    answer("keys add", [*k, "add", "--alg", "HS256", "--dry-run"], 0)
    added = answer("keys add", [*k, "add", "--alg", "HS256"], 0)
    answer("keys add", [*k, "add", "--alg", "nope"], 2)
    inline = {"MRTR_STATE_KEYSET_JSON": ks.read_text()}
    answer("keys add", ["keys", "add"], 6, env=inline)  # an inline keyset is read-only
    _usage_and_missing_keyset("keys add", ["keys", "add"], tmp_path)
    answer("keys promote", [*k, "promote", added["kid"]], 75)  # not yet
    answer("keys promote", [*k, "promote", "deadbeef"], 2)
    answer("keys promote", [*k, "promote", "--wait", "--force", added["kid"]], 2)
    answer("keys promote", [*k, "promote", "--force", "--dry-run", added["kid"]], 0)
    answer("keys promote", [*k, "promote", "--force", added["kid"]], 0)
    _usage_and_missing_keyset("keys promote", ["keys", "promote", added["kid"]], tmp_path)
    old = next(key for key in ms.Keyset.load(ks) if key.status == "active")
    answer("keys retire", [*k, "retire", old.kid], 0)
    answer("keys retire", [*k, "retire", added["kid"]], 2, input="")  # the primary: --yes
    answer("keys retire", [*k, "retire", "deadbeef", "--yes"], 2)
    answer("keys promote", [*k, "promote", old.kid], 6)  # retired: cannot be promoted
    _usage_and_missing_keyset("keys retire", ["keys", "retire", old.kid], tmp_path)
    answer("keys prune", [*k, "prune", "--retention", "0s"], 0)
    answer("keys prune", [*k, "prune", "--retention", "soon"], 2)
    _usage_and_missing_keyset("keys prune", ["keys", "prune"], tmp_path)
    answer("rotate", ["--keyset", str(ks), "rotate", "--dry-run"], 0)
    answer("rotate", ["--keyset", str(ks), "rotate"], 0)
    fresh = ["--keyset", str(tmp_path / "fresh.json"), "rotate", "--init-if-missing"]
    assert answer("rotate", [*fresh, "--dry-run"], 0)["changes"][0]["kid"] is None
    answer("rotate", fresh, 0)
    answer("rotate", ["--keyset", str(ks), "rotate", "--every", "1s"], 2)
    answer("rotate", ["--keyset", str(ks), "rotate"], 6, env={"MRTR_STATE_TTL_CAP": "none"})
    _usage_and_missing_keyset("rotate", ["rotate"], tmp_path)


def test_keys_that_make_read_and_export(ks: Path, tmp_path: Path) -> None:
    fresh = tmp_path / "new.json"
    answer("keys init", ["--keyset", str(fresh), "keys", "init"], 0)
    answer("keys init", ["--keyset", str(fresh), "keys", "init"], 6)  # exists
    _usage_and_missing_keyset("keys init", ["keys", "init"], tmp_path, keyset_needed=False)
    answer("keys list", ["--keyset", str(ks), "keys", "list"], 0)
    _usage_and_missing_keyset("keys list", ["keys", "list"], tmp_path)
    imported = tmp_path / "imported.json"
    answer("keys import", keys_import_args(imported, tmp_path, raw_secret(32)), 0)
    answer("keys import", keys_import_args(imported, tmp_path, b"short"), 2)
    answer("keys import", ["--keyset", str(imported), "keys", "import", "--alg", "HS256"], 2)
    answer(
        "keys import", ["keys", "import", "--alg", "HS256", "--secret-env", "X"], 2, env={"X": ""}
    )
    _usage_and_missing_keyset(
        "keys import", ["keys", "import", "--alg", "HS256"], tmp_path, keyset_needed=False
    )
    kid = ms.Keyset.load(ks).primary("A256GCM").kid
    out = tmp_path / "exported"
    k = ["--keyset", str(ks), "keys", "export", kid]
    assert answer("keys export", [*k, "--out", str(out)], 0)["secret"] is None
    answer("keys export", [*k, "--stdout", "--encoding", "hex"], 0)
    answer("keys export", [*k, "--out", str(out)], 2)  # exists
    answer("keys export", [*k, "--stdout"], 2)  # raw bytes in JSON
    answer("keys export", [*k[:-1], "deadbeef", "--stdout", "--encoding", "hex"], 2)
    _usage_and_missing_keyset("keys export", ["keys", "export", kid, "--out", str(out)], tmp_path)


def keys_import_args(path: Path, folder: Path, secret: bytes) -> list[str]:
    secret_file = folder / "import.secret"
    secret_file.write_bytes(secret)
    return [
        "--keyset",
        str(path),
        "keys",
        "import",
        "--alg",
        "HS256",
        "--secret-file",
        str(secret_file),
    ]


def test_keys_encrypt_decrypt_rewrap(ks: Path, tmp_path: Path) -> None:
    env = {"A": "passphrase one, long enough", "B": "passphrase two, long enough"}
    k = ["--keyset", str(ks), "keys"]
    kek_a, kek_b = "passphrase:env:A", "passphrase:env:B"
    answer("keys encrypt", [*k, "encrypt"], 2, env=env)  # no KEK given
    answer("keys encrypt", [*k, "encrypt", "--kek", kek_a, "--kdf-cost", "10"], 0, env=env)
    answer("keys encrypt", [*k, "encrypt", "--kek", kek_a, "--kdf-cost", "10"], 6, env=env)
    answer("keys list", ["--keyset", str(ks), "keys", "list"], 0)  # unauthenticated: the same
    answer("keys rewrap", [*k, "rewrap", "--from-kek", kek_b, "--kek", kek_a], 6, env=env)
    rewrap = [*k, "rewrap", "--from-kek", kek_a, "--kek", kek_b, "--kdf-cost", "10"]
    answer("keys rewrap", rewrap, 0, env=env)
    answer("keys decrypt", [*k, "decrypt", "--kek", kek_b], 2, env=env)  # without --yes
    answer("keys decrypt", [*k, "decrypt", "--yes", "--kek", kek_a], 6, env=env)
    answer("keys decrypt", [*k, "decrypt", "--yes", "--kek", kek_b], 0, env=env)
    none = ["--keyset", str(tmp_path / "none.json"), "keys"]
    for command, more in (
        ("encrypt", ["--kek", kek_a]),
        ("decrypt", ["--yes", "--kek", kek_a]),
        ("rewrap", ["--from-kek", kek_a, "--kek", kek_b]),
    ):
        _usage_and_missing_keyset(
            f"keys {command}", ["keys", command], tmp_path, keyset_needed=False
        )
        answer(f"keys {command}", [*none, command, *more], 6, env=env)


def test_version_config_doctor_audit(ks: Path, tmp_path: Path) -> None:
    answer("version", ["version"], 0)
    answer("version", ["version", "--no-such-flag"], 2)
    answer("config show", ["--keyset", str(ks), "config", "show"], 0)
    answer("config show", ["config", "show", "--config", str(tmp_path / "none.toml")], 6)
    answer("config show", ["config", "show"], 6, env={"MRTR_STATE_TTL": "5 min"})
    answer("config show", ["config", "show", "--no-such-flag"], 2)
    assert answer("doctor", ["--keyset", str(ks), "doctor"], 0)["ok"] is True
    ks.chmod(0o644)
    failed = answer("doctor", ["--keyset", str(ks), "doctor"], 6)  # failed checks
    assert failed["error"]["code"] == "doctor_failed" and failed["checks"]
    ks.chmod(0o600)
    early = answer("doctor", ["doctor", "--config", str(tmp_path / "none.toml")], 6)
    assert early["settings"] == early["checks"] == []  # none read, none run
    answer("doctor", ["doctor", "--no-such-flag"], 2)
    answer("doctor", ["--keyset", str(ks), "doctor", "--state-store", "ftp://x"], 6)
    capture = tmp_path / "capture.jsonl"
    capture.write_text('{"jsonrpc":"2.0","id":1,"method":"ping"}\n')
    assert answer("audit", ["--keyset", str(ks), "audit", str(capture)], 0)["clean"] is True
    token = mint(ks, "--state", "1")
    reused = [
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "t"}},
        {
            "jsonrpc": "2.0",
            "id": 1,
            "result": {"resultType": "input_required", "requestState": token},
        },
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "t", "requestState": token},
        },
    ]
    capture.write_text("".join(json.dumps(line) + "\n" for line in reused))
    answer("audit", ["--keyset", str(ks), "audit", str(capture)], 1)  # findings: the report
    answer("audit", ["audit", str(tmp_path / "none.jsonl")], 2)
    _usage_and_missing_keyset("audit", ["audit", str(capture)], tmp_path)


def test_probe(tmp_path: Path) -> None:
    """The probe's report on every outcome (a probe run whole is in tests/test_probe*.py):
    a usage mistake, an unreachable server (8), and a plan (--dry-run)."""
    from .servers import free_port

    nobody = f"http://127.0.0.1:{free_port()}/mcp"
    answer("probe", ["probe", "nourl", "--tool", "deploy"], 2)
    answer("probe", ["probe", nobody, "--tool", "deploy", "--arguments", "{bad"], 2)
    answer("probe", ["probe", nobody, "--tool", "deploy", "--no-such-flag"], 2)
    unreached = answer("probe", ["probe", nobody, "--tool", "deploy", "--timeout", "2s"], 8)
    assert unreached["target"] == nobody and unreached["findings"] == []
    assert all(check["result"] == "skipped" for check in unreached["checks"])


# --- the JSON of a usage mistake is the command's, wherever --json stands ---------------------


@pytest.mark.parametrize(
    "args",
    [
        ["verify", "--json", "--bogus"],
        ["--bogus", "verify", "--json"],
        ["--keyset", "verify", "verify", "--json", "--bogus"],  # a keyset file named verify
        ["-k", "x.json", "verify", "--ttl-cap", "soon", "--json", "t"],
        ["--config=none.toml", "verify", "--json", "t"],
    ],
)
def test_verify_says_valid_false_however_it_fails(args: list[str], tmp_path: Path) -> None:
    done = run(*args, code=2 if "--config=none.toml" not in args else 6)
    assert set(json.loads(done.stdout)) == {"valid", "error"}
    assert json.loads(done.stdout)["valid"] is False


def test_a_value_that_looks_like_a_command_is_not_one() -> None:
    from mrtr_state.cli._group import _command_named

    assert _command_named(["--keyset", "doctor", "verify"]) == "verify"
    assert _command_named(["-k", "verify", "--config", "doctor", "doctor"]) == "doctor"
    assert _command_named(["--keyset=verify", "doctor"]) == "doctor"
    assert _command_named(["--json"]) is None
