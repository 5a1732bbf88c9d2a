"""An operator's day with the CLI: tokens from the SDK codec, token input habits, durations,
colour, and the defects a new user hit (each asserted with its exit code and output)."""

from __future__ import annotations

import base64
import json
import os
import stat
from pathlib import Path

import anyio
import click
import pytest
from click.testing import CliRunner

import mrtr_state as ms
from mrtr_state.cli import cli
from mrtr_state.sdk.codec import KeysetCodec

from .helpers import CLEAN_ENV, mint, run
from .test_mcp import _accept, elicitation_server

mcp = pytest.importorskip("mcp", reason="the official SDK (mcp==2.3.0) is a test dependency")

from mcp import Client  # noqa: E402
from mcp.server.request_state import RequestStateSecurity  # noqa: E402
from mcp_types import InputRequiredResult  # noqa: E402

# --- 1. what the recommended SDK integration emits can be checked -------------------------


def codec_token(path: Path) -> str:
    """A requestState the official SDK server emits through our KeysetCodec."""
    server = elicitation_server(
        RequestStateSecurity(codec=KeysetCodec(path, format="aead"), bind_principal=None), []
    )

    async def first_round() -> str:
        async with Client(server, elicitation_callback=_accept) as client:
            first = await client.session.call_tool(
                "deploy", {"env": "prod"}, allow_input_required=True
            )
            assert isinstance(first, InputRequiredResult) and first.request_state is not None
            return first.request_state

    return anyio.run(first_round)


def test_verify_and_inspect_check_what_keyset_codec_emits(ks: Path) -> None:
    token = codec_token(ks)
    request = ["--method", "tools/call", "--target", "deploy", "--arguments", '{"env":"prod"}']
    out = run("--keyset", str(ks), "verify", *request, "--audience", "fleet", token)
    assert out.stdout == '"awaiting-confirm"\n'
    verified = json.loads(
        run("--keyset", str(ks), "verify", "--json", *request, "-a", "fleet", token).stdout
    )
    assert verified["claims"]["m"] == "tools/call" and verified["claims"]["aud"] == "fleet"
    other = ["--method", "tools/call", "--target", "deploy", "--arguments", '{"env":"dev"}']
    assert (
        "request mismatch"
        in run("--keyset", str(ks), "verify", *other, "-a", "fleet", token, code=4).stderr
    )
    run("--keyset", str(ks), "verify", *request, "-a", "elsewhere", token, code=4)
    run("--keyset", str(ks), "verify", *request, token, code=4)  # the audience is bound
    run("--keyset", str(ks), "verify", *request, "-a", "fleet", "-p", "alice", token, code=4)
    view = json.loads(run("--keyset", str(ks), "inspect", "--json", token).stdout)
    assert view["verified"] is True and view["claims"]["t"] == "deploy"
    assert isinstance(view["expires_at"], float)
    assert any("KeysetCodec" in note for note in view["notes"])
    text = run("--keyset", str(ks), "inspect", token).stdout
    assert "no claims" not in text and "expires in" in text
    refused = run("--keyset", str(ks), "unseal", token, code=1)
    assert "SDK requestState envelope; use verify or inspect" in refused.stderr


def test_bytes_sealed_for_another_purpose_never_pass_for_a_request_state(ks: Path) -> None:
    envelope = json.dumps({"v": 1, "iat": 0, "exp": 9e9, "m": "tools/call", "s": "x"}).encode()
    sealed = run("--keyset", str(ks), "seal", input=envelope).stdout.strip()
    refused = run("--keyset", str(ks), "verify", sealed, code=1)
    assert "sealed payload, not claims; use unseal" in refused.stderr
    assert (
        "mcp-py tokens are the SDK's requestStates"
        in run("--keyset", str(ks), "seal", "--format", "mcp-py", input=b"x", code=2).stderr
    )


# --- 4. token input as people type it -----------------------------------------------------


def test_a_token_comes_from_the_argument_a_file_or_stdin(ks: Path, tmp_path: Path) -> None:
    token = mint(ks, "--state", '"hi"')
    assert run("--keyset", str(ks), "verify", f"  {token}\n").stdout == '"hi"\n'
    saved = tmp_path / "token.txt"
    saved.write_text(token + "\r\n")
    assert run("--keyset", str(ks), "verify", f"@{saved}").stdout == '"hi"\n'
    assert run("--keyset", str(ks), "verify", input=f"{token}\n").stdout == '"hi"\n'
    missing = run("--keyset", str(ks), "verify", f"@{tmp_path / 'none'}", code=2)
    assert "cannot read token file" in missing.stderr
    assert run("--keyset", str(ks), "unseal", input="\n", code=2).stderr.endswith(
        "no token on stdin\n"
    )


def test_inspect_reads_each_line_and_seal_reads_a_file(ks: Path, tmp_path: Path) -> None:
    tokens = [mint(ks, "--state", str(n)) for n in range(3)]
    lines = run("--keyset", str(ks), "inspect", "--json", "-", input="\n".join(tokens) + "\n")
    views = [json.loads(line) for line in lines.stdout.splitlines()]
    assert [v["claims"]["st"] for v in views] == [0, 1, 2]
    text = run("--keyset", str(ks), "inspect", input=tokens[0] + "\n" + tokens[1]).stdout
    assert text.count("VERIFIED") == 2
    payload = tmp_path / "payload.bin"
    payload.write_bytes(b"\x00\x01binary")
    sealed = run("--keyset", str(ks), "seal", str(payload)).stdout.strip()
    unsealed = CliRunner().invoke(cli, ["--keyset", str(ks), "unseal", sealed], env=CLEAN_ENV)
    assert unsealed.exit_code == 0 and unsealed.stdout_bytes == b"\x00\x01binary"


# --- 5. durations -------------------------------------------------------------------------


def test_ttl_takes_durations_and_the_cap_names_where_it_is_set(ks: Path, tmp_path: Path) -> None:
    token = mint(ks, "--ttl", "5m")
    claims = ms.verify(ms.Keyset.load(ks), token)
    assert claims.iat is not None and claims.exp - claims.iat == 300
    over = run("--keyset", str(ks), "mint", "--ttl", "2h", code=2)
    assert "--ttl 2h is over the ttl_cap of 1h (set by the default)" in over.stderr
    config = tmp_path / "c.toml"
    config.write_text('ttl_cap = "90m"\n')
    config.chmod(0o600)
    capped = run("--keyset", str(ks), "--config", str(config), "mint", "--ttl", "2h", code=2)
    assert f"ttl_cap of 1h 30m (set by config file {config})" in capped.stderr
    env_cap = run(
        "--keyset", str(ks), "mint", "--ttl", "3h", env={"MRTR_STATE_TTL_CAP": "2h"}, code=2
    )
    assert "(set by MRTR_STATE_TTL_CAP)" in env_cap.stderr
    long_lived = run(
        "--keyset", str(ks), "mint", "--ttl", "2h", env={"MRTR_STATE_TTL_CAP": "2h"}
    ).stdout.strip()
    refused = run("--keyset", str(ks), "verify", long_lived, code=1)
    assert "exceeds this verifier's ttl_cap of 3600 s: it was minted under a higher cap" in (
        refused.stderr
    )
    run("--keyset", str(ks), "verify", long_lived, env={"MRTR_STATE_TTL_CAP": "2h"})


# --- 6. colour and version ----------------------------------------------------------------


@pytest.mark.parametrize("env", [{"NO_COLOR": "1"}, {"TERM": "dumb"}], ids=["NO_COLOR", "dumb"])
def test_no_colour_when_asked(ks: Path, env: dict[str, str]) -> None:
    token = mint(ks)
    coloured = CliRunner().invoke(
        cli, ["--keyset", str(ks), "inspect", token], env=CLEAN_ENV, color=True
    )
    assert coloured.stdout != click.unstyle(coloured.stdout)
    plain = CliRunner().invoke(
        cli, ["--keyset", str(ks), "inspect", token], env={**CLEAN_ENV, **env}, color=True
    )
    assert plain.exit_code == 0 and plain.stdout == click.unstyle(plain.stdout)
    assert token in plain.stdout


def test_version_short_and_long() -> None:
    assert run("-V").stdout == run("--version").stdout
    assert ms.__version__ in run("-V").stdout


# --- 7. defects ---------------------------------------------------------------------------


def test_audit_of_a_missing_file_is_a_usage_error(ks: Path) -> None:
    missing = run("--keyset", str(ks), "audit", "nope.jsonl", code=2)
    assert "nope.jsonl" in missing.stderr and "does not exist" in missing.stderr


def test_once_needs_a_store_that_outlives_the_process(ks: Path, tmp_path: Path) -> None:
    token = mint(ks)
    memory = run("--keyset", str(ks), "verify", "--once", token, code=2)
    assert "protects nothing across runs" in memory.stderr
    alone = run("--keyset", str(ks), "verify", "--replay-store", "memory:", token, code=2)
    assert "--replay-store is used only with --once" in alone.stderr
    store = f"sqlite:///{tmp_path / 'replay.db'}"
    run("--keyset", str(ks), "verify", "--once", "--replay-store", store, token)
    run("--keyset", str(ks), "verify", "--once", "--replay-store", store, token, code=5)
    batch = run("--keyset", str(ks), "verify", "--once", "-", input=f"{token}\n{token}\n", code=5)
    assert batch.stdout.splitlines()[1].startswith("rejected: replayed")  # one run: memory works


def test_import_takes_encodings_and_refuses_a_secret_twice(ks: Path, tmp_path: Path) -> None:
    secret = os.urandom(32)
    b64 = tmp_path / "key.b64"
    b64.write_text(base64.b64encode(secret).decode() + "\n")
    imported = json.loads(
        run(
            *("--keyset", str(ks), "keys", "import", "--alg", "A256GCM"),
            *("--encoding", "base64", "--secret-file", str(b64), "--json"),
        ).stdout
    )
    hexed = tmp_path / "key.hex"
    hexed.write_text(secret.hex())
    again = run(
        *("--keyset", str(ks), "keys", "import", "--alg", "A256GCM"),
        *("--encoding", "hex", "--secret-file", str(hexed)),
        code=2,
    )
    assert f"already in {ks} as pending key {imported['kid']}" in again.stderr
    bad = tmp_path / "bad.b64"
    bad.write_text("not base64!")
    refused = run(
        *("--keyset", str(ks), "keys", "import", "--alg", "HS256"),
        *("--encoding", "base64", "--secret-file", str(bad)),
        code=2,
    )
    assert "is not valid base64 text" in refused.stderr
    assert sum(1 for key in ms.Keyset.load(ks) if key.secret == secret) == 1


def test_export_writes_only_where_told(ks: Path, tmp_path: Path) -> None:
    kid = ms.Keyset.load(ks).primary("HS256").kid
    secret = ms.Keyset.load(ks).primary("HS256").secret
    nowhere = run("--keyset", str(ks), "keys", "export", kid, code=2)
    assert "give exactly one of --out FILE or --stdout" in nowhere.stderr and not nowhere.stdout
    out = tmp_path / "exported.key"
    run("--keyset", str(ks), "keys", "export", kid, "--out", str(out))
    assert out.read_bytes() == secret and stat.S_IMODE(out.stat().st_mode) == 0o600
    again = run("--keyset", str(ks), "keys", "export", kid, "--out", str(out), code=2)
    assert "never overwrite" in again.stderr
    printed = run("--keyset", str(ks), "keys", "export", kid, "--stdout", "--encoding", "hex")
    assert printed.stdout == secret.hex() + "\n"
    listing = run("--keyset", str(ks), "keys", "list", "--json").stdout
    assert secret.hex() not in listing  # only export shows a secret


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_the_readmes_shell_completion_works(shell: str) -> None:
    import subprocess
    import sys

    reference = (Path(__file__).resolve().parents[1] / "docs" / "cli.md").read_text()
    assert f"_MRTR_STATE_COMPLETE={shell}_source mrtr-state" in reference
    done = subprocess.run(
        [sys.executable, "-c", "from mrtr_state.cli import main; main()"],
        env={**os.environ, "_MRTR_STATE_COMPLETE": f"{shell}_source"},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0 and "mrtr" in done.stdout and "complete" in done.stdout.lower()


def test_help_ends_with_how_to_enable_completion() -> None:
    """Issue 46: completion was explained in docs/cli.md alone. ``--help`` ends with a line
    for each shell, the line docs/cli.md gives (which the test above runs)."""
    shown = run("--help").stdout.rstrip().splitlines()
    reference = (Path(__file__).resolve().parents[1] / "docs" / "cli.md").read_text()
    commands = next(n for n, line in enumerate(shown) if line.startswith("Commands:"))
    told = next(n for n, line in enumerate(shown) if "Shell completion" in line)
    assert commands < told and len(shown) - told == 5  # the last lines, after the commands
    bash = 'eval "$(_MRTR_STATE_COMPLETE=bash_source mrtr-state)"'
    zsh = 'eval "$(_MRTR_STATE_COMPLETE=zsh_source mrtr-state)"'
    fish = "_MRTR_STATE_COMPLETE=fish_source mrtr-state"
    for line, said in zip(shown[told + 1 :], (bash, zsh, fish), strict=False):
        assert line.rstrip(" \\").endswith(said) and said in reference, line
    assert shown[-1].strip() == "> ~/.config/fish/completions/mrtr-state.fish"
    assert "~/.config/fish/completions/mrtr-state.fish" in reference


@pytest.mark.parametrize(
    "args", [["verify", "-"], ["inspect", "-"], ["unseal", "-"], ["mint", "--state", "-"], ["seal"]]
)
def test_stdin_is_read_in_bounded_pieces(ks: Path, args: list[str]) -> None:
    """Issue 16.9: a 300 MB line was read whole (615 MB RSS). 64 MiB in, little memory used."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    # VmHWM, the process's peak resident size (ru_maxrss would carry the parent's across exec)
    code = (
        "import sys\n"
        "from mrtr_state.cli import main\n"
        "try:\n    main()\n"
        "finally:\n"
        "    status = open('/proc/self/status').read().split('VmHWM:')[1].split()[0]\n"
        "    print(status, file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, "--keyset", str(ks), *args],
        input=b"A" * (64 << 20) + b"\n",
        capture_output=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(root)},
        check=False,
    )
    assert done.returncode in (1, 2), done.stderr[-300:]
    peak_kib = int(done.stderr.split()[-1])
    assert peak_kib < 60 * 1024, peak_kib  # the interpreter and libraries, not the input
    assert b"Traceback" not in done.stderr
