"""``passphrase:prompt``: a KEK passphrase typed at a terminal, never echoed, never in argv.

The CLI runs on a real pseudo-terminal here (its controlling terminal, as a shell gives it), so
the prompt, the terminal's echo and the confirmation are what a person sees; the same commands
with a pipe for stdin, and the library with no front end, are refused with the way out.
"""

from __future__ import annotations

import fcntl
import os
import pty
import select
import subprocess
import sys
import termios
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

import mrtr_state as ms
from mrtr_state.keys.kek import kek_from_uri, set_prompter

from .helpers import ROOT

PASSPHRASE = "correct horse battery staple"
KEK = ("--kek", "passphrase:prompt")


def _take_terminal() -> None:  # in the child: a session whose controlling terminal is the pty
    os.setsid()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def on_terminal(
    keyset: Path, args: Sequence[str], answers: Sequence[str | bytes]
) -> tuple[int, str]:
    """Run the CLI with a pty as its terminal; type each answer when a prompt (a line ending
    in ':') is waiting: a line of text, or bytes as they are (b"\x04": Ctrl-D, end of input).
    Returns the exit code and everything the terminal showed."""
    main, child = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "mrtr_state", "--keyset", str(keyset), *args],
        stdin=child,
        stdout=child,
        stderr=child,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        preexec_fn=_take_terminal,
    )
    os.close(child)
    shown, pending, answered_at = b"", list(answers), 0
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            if not select.select([main], [], [], 0.1)[0]:
                if process.poll() is not None:
                    break
                continue
            try:
                chunk = os.read(main, 4096)
            except OSError:  # EIO: the child closed its side
                break
            shown += chunk
            waiting = shown[answered_at:].rstrip()  # a new prompt since the last answer
            if pending and waiting.endswith(b":"):
                answer = pending.pop(0)
                os.write(main, answer if isinstance(answer, bytes) else answer.encode() + b"\n")
                answered_at = len(shown)
        assert process.wait(30) is not None
    finally:
        os.close(main)
    return process.returncode, shown.decode("utf-8", "replace")


@pytest.fixture
def keyset(tmp_path: Path) -> Path:
    path = tmp_path / "keyset.json"
    code, shown = on_terminal(path, [*KEK, "keys", "init"], [PASSPHRASE, PASSPHRASE])
    assert code == 0, shown
    assert shown.count("Passphrase for KEK passphrase:prompt:") == 1
    assert "Repeat for confirmation:" in shown
    return path


def test_a_keyset_is_created_opened_and_changed_with_a_typed_passphrase(keyset: Path) -> None:
    text = keyset.read_text()
    assert '"kek": "passphrase:prompt"' in text and PASSPHRASE not in text
    assert keyset.stat().st_mode & 0o777 == 0o600
    code, shown = on_terminal(keyset, [*KEK, "mint", "--request-id", "r"], [PASSPHRASE])
    assert code == 0 and "ms1." in shown, shown
    assert PASSPHRASE not in shown  # the terminal did not echo it
    # a change opens the file and writes it again: asked once, the typed passphrase kept
    code, shown = on_terminal(keyset, [*KEK, "keys", "add", "--alg", "HS256"], [PASSPHRASE])
    assert code == 0 and shown.count("Passphrase for KEK") == 1, shown
    assert "Repeat" not in shown and PASSPHRASE not in shown


def test_a_wrong_passphrase_is_refused_and_the_file_is_untouched(keyset: Path) -> None:
    before = keyset.read_bytes()
    code, shown = on_terminal(keyset, [*KEK, "keys", "add", "--alg", "HS256"], ["not the one!!"])
    assert code == 6 and "does not open this keyset's data key" in shown, shown
    assert keyset.read_bytes() == before


def test_two_different_answers_are_asked_again(tmp_path: Path) -> None:
    path = tmp_path / "keyset.json"
    answers = [PASSPHRASE, "something else entirely", PASSPHRASE, PASSPHRASE]
    code, shown = on_terminal(path, [*KEK, "keys", "init"], answers)
    assert code == 0 and "do not match" in shown, shown
    code, shown = on_terminal(path, [*KEK, "keys", "list"], [PASSPHRASE])
    assert code == 0, shown


def test_an_empty_answer_is_asked_again(tmp_path: Path) -> None:
    path = tmp_path / "keyset.json"
    code, shown = on_terminal(path, [*KEK, "keys", "init"], ["", PASSPHRASE, "", PASSPHRASE])
    assert code == 0, shown
    empty = "An empty passphrase for KEK passphrase:prompt protects nothing: type it, or Ctrl-D"
    assert shown.count(empty) == 2, shown  # at the first prompt, and at the confirmation
    code, shown = on_terminal(path, [*KEK, "keys", "list"], ["", PASSPHRASE])
    assert code == 0 and shown.count(empty) == 1, shown


def test_ctrl_d_at_the_prompt_is_exit_130_and_writes_nothing(keyset: Path) -> None:
    fresh = keyset.parent / "fresh.json"
    ctrl_d: list[list[str | bytes]] = [[b"\x04"], ["", b"\x04"], [PASSPHRASE, b"\x04"]]
    for answers in ctrl_d:  # at the first prompt, after an empty answer, at the confirmation
        code, shown = on_terminal(fresh, [*KEK, "keys", "init"], answers)
        assert code == 130 and shown.rstrip().endswith("error: interrupted"), shown
        assert not fresh.exists()
    before = keyset.read_bytes()
    code, shown = on_terminal(keyset, [*KEK, "keys", "add", "--alg", "HS256"], [b"\x04"])
    assert code == 130 and "error: interrupted" in shown, shown
    assert keyset.read_bytes() == before


def test_a_passphrase_too_short_to_protect_anything_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "keyset.json"
    code, shown = on_terminal(path, [*KEK, "keys", "init"], ["short", "short"])
    assert code == 6 and "use at least 12" in shown, shown
    assert not path.exists()


def test_without_a_terminal_the_prompt_is_refused_with_the_way_out(keyset: Path) -> None:
    piped = subprocess.run(
        [sys.executable, "-m", "mrtr_state", "--keyset", str(keyset), *KEK, "keys", "list"],
        input=PASSPHRASE + "\n",
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert piped.returncode == 6
    assert "stdin is not one; in scripts give it as passphrase:env:NAME" in piped.stderr


def test_the_library_never_reads_a_terminal_itself() -> None:
    set_prompter(None)  # an in-process CLI test may have left the CLI's prompter in place
    kek = kek_from_uri("passphrase:prompt")
    with pytest.raises(ms.KekUnavailable, match="nothing here can ask; give it as env:NAME"):
        kek.wrap(os.urandom(32), b"context")
    typed: list[bool] = []

    def ask(what: str, twice: bool) -> bytes:
        typed.append(twice)
        return PASSPHRASE.encode()

    set_prompter(ask)
    try:
        fresh = kek_from_uri("passphrase:prompt", kdf_log_n=10)
        record = fresh.wrap(b"k" * 32, b"context")
        assert typed == [True]  # a new wrap asks twice
        opener = kek_from_uri("passphrase:prompt")
        assert opener.unwrap(record, b"context") == b"k" * 32
        assert typed == [True, False]  # opening asks once
    finally:
        set_prompter(None)
