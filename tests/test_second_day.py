"""A new user's second day (issue 22): fail-closed input, batches that report every line,
exit codes that say what happened, and input checks. One test per item, named after it."""

from __future__ import annotations

import json
import os
import platform
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import jwt
import pytest

import mrtr_state as ms
from mrtr_state.keys import lifecycle
from mrtr_state.keys.keyset import Key
from mrtr_state.tokens.registry import format_named

from .helpers import keys_import, mint, run

ROOT = Path(__file__).resolve().parents[1]


# --- 1. no token is exit 2, everywhere -------------------------------------------------------


@pytest.mark.parametrize("command", ["verify", "verify --json", "inspect", "unseal"])
@pytest.mark.parametrize(
    ("where", "stdin"),
    [
        ("empty argument", None),
        ("empty stdin", ""),
        ("blank lines only", "\n \n\t\n"),
        ("empty @FILE", None),
    ],
)
def test_no_token_is_exit_2_with_no_token_everywhere(
    ks: Path, tmp_path: Path, command: str, where: str, stdin: str | None
) -> None:
    empty = tmp_path / "empty.txt"
    empty.write_text("\n")
    args = {"empty argument": [""], "empty @FILE": [f"@{empty}"]}.get(where, ["-"])
    if command == "unseal" and args == ["-"]:
        args = []  # unseal reads stdin when TOKEN is omitted
    result = run("-k", str(ks), *command.split(), *args, input=stdin, code=2)
    assert "no token" in result.stderr
    assert "verified" not in result.stdout.lower() or command.startswith("verify")


def test_no_token_from_a_shell_test_is_never_success(ks: Path) -> None:
    """``if mrtr-state verify ... <<<"$TOKEN"`` with an empty $TOKEN."""
    done = subprocess.run(
        [sys.executable, "-m", "mrtr_state", "-k", str(ks), "verify", "-p", "alice"],
        input="\n",
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert done.returncode == 2 and "no token" in done.stderr


def test_audit_of_an_empty_capture_is_a_finding_not_clean(ks: Path, tmp_path: Path) -> None:
    capture = tmp_path / "capture.jsonl"
    capture.write_text("\n\n")
    text = run("-k", str(ks), "audit", str(capture), code=1).stdout
    assert "empty_capture" in text and "clean" not in text
    report = json.loads(run("-k", str(ks), "audit", "--json", "-", input="", code=1).stdout)
    assert report["findings_by_kind"] == {"empty_capture": 1} and report["clean"] is False


# --- 3. inspect - reports every line -------------------------------------------------------


def test_inspect_batch_reports_every_line_with_its_number_and_the_first_failure(ks: Path) -> None:
    good = mint(ks, "-p", "alice")
    lines = f"{good}\nnot-a-token\n\n{good}\n"
    text = run("-k", str(ks), "inspect", "-", input=lines, code=1).stdout
    assert "line 1:" in text and "line 2: rejected:" in text and "line 3: rejected: empty line"
    assert text.count("VERIFIED") == 2 and "line 4:" in text
    objects = [
        json.loads(line)
        for line in run("-k", str(ks), "inspect", "--json", "-", input=lines, code=1).stdout.split(
            "\n"
        )
        if line
    ]
    assert [o["line"] for o in objects] == [1, 2, 3, 4]
    assert objects[0]["verified"] and objects[3]["verified"]
    assert objects[1]["error"]["code"] == "malformed" and objects[2]["error"]["code"] == "no_token"
    empty_first = run("-k", str(ks), "inspect", "--json", "-", input=f"\n{good}\n", code=2).stdout
    assert [json.loads(line)["line"] for line in empty_first.splitlines()] == [1, 2]


# --- 4. verify - keeps one output line per input line --------------------------------------


def test_verify_batch_answers_an_empty_line_in_its_place(ks: Path) -> None:
    good = mint(ks, "-p", "alice", "--state", '{"n":1}')
    lines = f"{good}\n\n{good}\n"
    text = run("-k", str(ks), "verify", "-p", "alice", "-", input=lines, code=2).stdout
    assert text.splitlines() == ['{"n":1}', "rejected: empty line", '{"n":1}']
    out = run("-k", str(ks), "verify", "-p", "alice", "--json", "-", input=lines, code=2).stdout
    answers = [json.loads(line) for line in out.splitlines()]
    assert [a["line"] for a in answers] == [1, 2, 3]
    assert answers[1] == {
        "line": 2,
        "valid": False,
        "error": {"code": "no_token", "message": "empty line", "exit_code": 2},
    }


# --- 5. verify --jsonl: each line with its own bindings ------------------------------------


def test_verify_jsonl_checks_each_line_with_its_own_bindings(ks: Path) -> None:
    alice = mint(ks, "-p", "alice", "-r", "req-1", "--state", '"a"')
    bob = mint(
        ks,
        *("-p", "bob", "--method", "tools/call", "--target", "deploy"),
        *("--arguments", '{"env":"prod"}', "--state", '"b"'),
    )
    lines = [
        {"token": alice, "principal": "alice", "request_id": "req-1"},
        {
            "token": bob,
            "principal": "bob",
            "method": "tools/call",
            "target": "deploy",
            "arguments": {"env": "prod"},
        },
        {"token": bob, "principal": "alice", "method": "tools/call", "target": "deploy"},
        {"token": alice, "principal": "alice", "request_id": "req-1", "colour": "blue"},
        {"principal": "alice"},
    ]
    stdin = "\n".join(json.dumps(line) for line in lines) + "\nnot json\n"
    text = run("-k", str(ks), "verify", "--jsonl", "-", input=stdin, code=4).stdout.splitlines()
    assert text[:2] == ['"a"', '"b"']
    assert text[2] == "rejected: principal mismatch"
    assert text[3] == "rejected: unknown member colour"
    assert text[4] == "rejected: no token" and text[5].startswith("rejected: not a JSON object")
    out = run("-k", str(ks), "verify", "--jsonl", "--json", "-", input=stdin, code=4).stdout
    answers = [json.loads(line) for line in out.splitlines()]
    assert [a["valid"] for a in answers] == [True, True, False, False, False, False]
    assert answers[2]["error"]["code"] == "principal_mismatch"
    # issue 38: a line that is not the request it should be is malformed input; one that
    # names no token is no_token; both exit 2, below the principal mismatch (4)
    assert answers[3]["error"]["code"] == "malformed_input"
    assert answers[4]["error"]["code"] == "no_token"
    assert answers[5]["error"]["code"] == "malformed_input"
    # options on the command line are defaults that a line's own members replace
    defaults = json.dumps({"token": alice, "request_id": "req-1"}) + "\n"
    assert run("-k", str(ks), "verify", "--jsonl", "-p", "alice", "-", input=defaults).stdout
    run("-k", str(ks), "verify", "--jsonl", alice, code=2)


# --- 6. exit codes that say what happened ------------------------------------------------


def _wait_reading_stdin(pid: int, timeout: float = 30) -> None:
    """Until process ``pid`` blocks in read(0, ...): past start-up, however loaded the machine
    (a fixed sleep let a slow start-up swallow the signal). Linux's /proc/PID/syscall gives
    the call a process is blocked in; elsewhere, a generous sleep."""
    where = Path(f"/proc/{pid}/syscall")
    read = {"x86_64": "0", "aarch64": "63"}.get(platform.machine())
    if read is None or not where.exists():
        time.sleep(3)
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            call = where.read_text().split()
        except (OSError, PermissionError):
            call = []
        if call[:2] == [read, "0x0"]:  # read, on fd 0
            time.sleep(0.1)
            return
        time.sleep(0.05)
    raise AssertionError("verify - never started reading stdin")


def test_ctrl_c_exits_130_without_a_traceback(ks: Path) -> None:
    """Ctrl-C while ``verify -`` waits for input: 130 (128 + SIGINT), one line, no traceback."""
    process = subprocess.Popen(
        [sys.executable, "-m", "mrtr_state", "-k", str(ks), "verify", "-"],
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    _wait_reading_stdin(process.pid)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=20)
    assert process.returncode == 130, err
    assert b"Traceback" not in err and b"Aborted" not in err


@pytest.mark.parametrize("module", ["click", "cryptography.hazmat.primitives.ciphers.aead"])
def test_ctrl_c_during_start_up_imports_exits_130_without_a_traceback(
    module: str, tmp_path: Path
) -> None:
    """A Ctrl-C that lands while the CLI's modules are still loading (simulated exactly: the
    import of ``module`` raises KeyboardInterrupt)."""
    probe = (
        "import importlib.abc, sys\n"
        "class Interrupt(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        f"        if name == {module!r}:\n"
        "            raise KeyboardInterrupt\n"
        "        return None\n"
        "sys.meta_path.insert(0, Interrupt())\n"
        "sys.argv = ['mrtr-state', 'inspect', 'ms1.' + 'A' * 60]\n"
        "from mrtr_state._launch import main\n"
        "main()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode == 130, done.stderr
    assert "Traceback" not in done.stderr and "interrupted" in done.stderr


def test_an_oversized_token_is_exit_1_from_argument_file_or_stdin(ks: Path, tmp_path: Path) -> None:
    big = "ms1." + "A" * 9000
    path = tmp_path / "big.txt"
    path.write_text(big)
    for args, stdin in (([big], None), ([f"@{path}"], None), (["-"], big), ([], big)):
        for command in ("verify", "inspect", "unseal"):
            if command == "unseal" and args == ["-"]:
                continue
            result = run("-k", str(ks), command, *args, input=stdin, code=1)
            assert "size cap" in result.stderr + result.stdout, (command, args)


def test_a_directory_given_as_keyset_is_a_keyset_error(tmp_path: Path) -> None:
    result = run("-k", str(tmp_path), "verify", "ms1.AAAA", code=6)
    assert "is not a regular file" in result.stderr
    run("-k", str(tmp_path), "keys", "list", code=6)


def test_a_config_that_is_not_utf8_is_a_config_error_naming_the_file(
    ks: Path, tmp_path: Path
) -> None:
    config = tmp_path / "mrtr-state.toml"
    config.write_bytes(b'audience = "caf\xe9"\n')
    config.chmod(0o600)
    result = run("--config", str(config), "-k", str(ks), "mint", code=6)
    assert str(config) in result.stderr and "not UTF-8" in result.stderr


# --- 7. input checks -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "kind"),
    [
        ("[1,2]", "an array"),
        ('"x"', "a string"),
        ("3", "a number"),
        ("null", "a literal"),
        ("true", "a literal"),
    ],
)
def test_arguments_must_be_a_json_object(ks: Path, arguments: str, kind: str) -> None:
    binding = ("--method", "tools/call", "--target", "deploy", "--arguments", arguments)
    result = run("-k", str(ks), "mint", *binding, code=2)
    assert "arguments must be a JSON object" in result.stderr
    assert f"not {kind}" in result.stderr
    with pytest.raises(ValueError, match="arguments must be a JSON object"):
        ms.mint(
            ms.Keyset.load(ks),
            1,
            method="tools/call",
            target="x",
            arguments=json.loads(arguments) or [],
        )


@pytest.mark.parametrize("state", [{1: 2}, {"a": [{None: 1}]}, {(1, 2): 3}, [{True: "x"}]])
def test_state_member_names_must_be_text(ks: Path, state: Any) -> None:
    with pytest.raises(ValueError, match="member name"):
        ms.mint(ms.Keyset.load(ks), state)


@pytest.mark.parametrize("token", [None, 42, ["ms1.x"], {"token": "x"}])
def test_verifying_something_that_is_not_a_token_is_a_type_error(ks: Path, token: Any) -> None:
    with pytest.raises(TypeError, match="token must be str or bytes"):
        ms.verify(ms.Keyset.load(ks), token)
    with pytest.raises(TypeError, match="token must be str or bytes"):
        ms.inspect(token)


# --- 8. promote waits for propagation -------------------------------------------------------


def test_promoting_a_key_before_its_propagation_time_needs_force(ks: Path) -> None:
    added = json.loads(run("-k", str(ks), "keys", "add", "--alg", "A256GCM", "--json").stdout)
    kid = added["kid"] if "kid" in added else added["changes"][0]["kid"]
    result = run("-k", str(ks), "keys", "promote", kid, code=75)  # not yet: retry later
    assert "pending for" in result.stderr and "--force" in result.stderr
    assert ms.Keyset.load(ks).get(kid).status == "pending"  # type: ignore[union-attr]
    run("-k", str(ks), "keys", "promote", kid, "--force")
    assert ms.Keyset.load(ks).get(kid).status == "primary"  # type: ignore[union-attr]
    keyset, key = ms.Keyset.load(ks).with_new_key("HS256", now=1000)
    with pytest.raises(ValueError, match="pending for 10s"):
        lifecycle.promote(keyset, key.kid, now=1010, propagation=3600)
    promoted, _ = lifecycle.promote(keyset, key.kid, now=4600, propagation=3600)
    assert promoted.primary("HS256").kid == key.kid


# --- 9. --bind-file carries what a flag cannot ---------------------------------------------


def test_bind_file_carries_bytes_a_flag_cannot(tmp_path: Path) -> None:
    """The TypeScript SDK documents a bind of the form `${method}\\0${clientId}`: a NUL byte,
    which no command-line argument can hold. --bind-file takes the file's bytes exactly."""
    ks = tmp_path / "keyset.json"
    keys_import(ks, "mcp-ts-v1", b"s" * 40)
    bind = tmp_path / "bind"
    bind.write_bytes(b"tools/call\x00client-7")
    token = mint(ks, "--format", "mcp-ts", "--bind-file", str(bind), "--state", '{"n":1}')
    assert run("-k", str(ks), "verify", "--bind-file", str(bind), token).stdout == '{"n":1}\n'
    other = tmp_path / "other"
    other.write_bytes(b"tools/call\x00client-8")
    assert (
        "bind mismatch"
        in run("-k", str(ks), "verify", "--bind-file", str(other), token, code=4).stderr
    )
    keyset = ms.Keyset([Key.from_secret("mcp-ts-v1", b"s" * 40)])
    assert ms.verify(keyset, token, bind="tools/call\x00client-7").state == {"n": 1}
    run("-k", str(ks), "verify", "--bind", "x", "--bind-file", str(bind), token, code=2)


# --- 10. seal names the real size ---------------------------------------------------------


def test_seal_over_the_cap_reports_the_size_that_does_not_fit(ks: Path) -> None:
    sizes = {}
    for size in (6500, 7000):
        result = run("-k", str(ks), "seal", input=b"x" * size, code=2)
        sizes[size] = result.stderr
        assert "size cap" in result.stderr
    assert sizes[6500] != sizes[7000]  # each names its own token size
    huge = run("-k", str(ks), "seal", input=b"x" * 100_000, code=2).stderr
    assert "the payload is over 8192 bytes" in huge


# --- 11. inspect shows a KeysetCodec state -------------------------------------------------


def test_inspect_of_a_keyset_codec_token_shows_its_state(ks: Path) -> None:
    from mrtr_state._entropy import fresh
    from mrtr_state.sdk.codec import KeysetCodec
    from mrtr_state.tokens.binding import Binding

    codec = KeysetCodec(ms.Keyset.load(ks))
    binding = Binding(method="tools/call", target="deploy", arguments={})
    key = codec.keyset.primary("A256GCM")
    sdk = format_named("mcp-py").envelope
    envelope, _document = sdk.pack("step-2", binding, key, time.time(), 60, fresh(36))
    token = codec.seal(envelope)
    view = json.loads(run("-k", str(ks), "inspect", "--json", token).stdout)
    assert view["envelope"] == "mcp-py" and view["state"] == "step-2"
    text = run("-k", str(ks), "inspect", token).stdout
    assert 'state     "step-2"' in text or '"step-2"' in text.split("state", 1)[1].splitlines()[0]


# --- 12. an audience list from another JWT library ----------------------------------------


def test_a_jws_whose_audience_is_a_list_is_accepted_when_it_names_ours(ks: Path) -> None:
    keyset = ms.Keyset.load(ks)
    key = keyset.primary("HS256")
    now = int(time.time())
    claims = {"iat": now, "exp": now + 60, "jti": "j1", "aud": ["fleet", "other"], "st": 1}
    token = jwt.encode(
        claims,
        key.secret,
        algorithm="HS256",
        headers={"kid": key.kid, "typ": "mrtr-state+jwt"},
    )
    assert ms.verify(keyset, token, audience="fleet").aud == ["fleet", "other"]
    assert ms.verify(keyset, token, audience="other").state == 1
    with pytest.raises(ms.AudienceMismatch):
        ms.verify(keyset, token, audience="elsewhere")
    with pytest.raises(ms.AudienceMismatch):
        ms.verify(keyset, token)  # bound to audiences, none stated: refused
    for bad in ([], ["fleet", 1], ["fleet", ""], [["fleet"]]):
        forged = jwt.encode(
            {**claims, "aud": bad},
            key.secret,
            algorithm="HS256",
            headers={"kid": key.kid, "typ": "mrtr-state+jwt"},
        )
        with pytest.raises(ms.InvalidClaims, match="claim aud"):
            ms.verify(keyset, forged, audience="fleet")
