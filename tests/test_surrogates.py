"""Lone surrogates in a token's JSON, in every format: a token problem, never a codec crash.

Issue 35: ``inspect`` of a forged jws whose payload held ``"\\ud800"`` died with "'utf-8' codec
can't encode character" (exit 2). JSON can spell half a UTF-16 pair; UTF-8 cannot carry it, and
mrtr-state never writes one. So a token holding one is :class:`MalformedToken` (exit 1), in the
library and the CLI: ``inspect`` with and without a keyset, ``verify``, one token or a batch,
text or ``--json``; whether the token is forged (the readable claims hold it) or genuinely
sealed by a key holder (the authenticated claims do). A valid pair is text like any other.

Also here: what is printed or JSON-dumped from a token always can be: a state nested to the
JSON cap, inside the ``--json`` report's own object, and rmcp's payload one level further in.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import mrtr_state as ms
from mrtr_state._encoding import MAX_DEPTH
from mrtr_state.keys.keyset import ALGORITHMS
from mrtr_state.tokens.binding import Binding
from mrtr_state.tokens.facade import _open
from mrtr_state.tokens.policy import DEFAULT_POLICY
from mrtr_state.tokens.registry import FORMAT_NAMES
from mrtr_state.tokens.surrogates import lone_surrogate

from .helpers import run

#: What each format's tokens are minted with, and so verified with.
BINDINGS: dict[str, dict[str, Any]] = {
    "aead": {"request_id": "r"},
    "jws": {"request_id": "r"},
    "jwe": {"request_id": "r"},
    "mcp-py": {"method": "tools/call", "target": "t", "arguments": {}},
    "mcp-rb": {"method": "tools/call", "target": "t", "arguments": {}},
    "mcp-ts": {"bind": "b"},
    "mcp-rs": {"bind": "b"},
    "mcp-rs2": {"bind": "b"},
    "mcp-php": {},
    "mcp-java": {"method": "tools/call", "target": "t"},
}
#: The formats anyone can read without a key (their claims or payload are only signed).
READABLE = ("jws", "mcp-ts", "mcp-php", "mcp-java", "mcp-rs", "mcp-rs2")
#: Ways to put a surrogate in the JSON text where the state's marker was.
LONE = {
    "high": '"\\ud800"',
    "low": '"\\udfff"',
    "high-upper-case": '"\\uDBFF"',
    "low-then-high": '"\\udc00\\ud800"',
}
MARKER = b'"MARKER"'
#: The formats whose state is the SDK's string.
STRING_STATES = ("mcp-py", "mcp-rb", "mcp-java")


@pytest.fixture(scope="module")
def keyset() -> ms.Keyset:
    return ms.Keyset.generate(tuple(ALGORITHMS))


@pytest.fixture(scope="module")
def keyset_file(tmp_path_factory: pytest.TempPathFactory, keyset: ms.Keyset) -> Path:
    path = tmp_path_factory.mktemp("surrogates") / "keyset.json"
    keyset.save(path)
    return path


def _sealed(keyset: ms.Keyset, fmt: str, replacement: str, *, forged: bool = False) -> str:
    """A token of ``fmt`` sealed by its key around a plaintext whose state marker is replaced
    by ``replacement`` (JSON text); ``forged``: then its tag or MAC damaged."""
    state: Any = "MARKER" if fmt in STRING_STATES else {"m": "MARKER"}
    bound = BINDINGS[fmt]
    token = ms.mint(keyset, state, format=fmt, **bound)
    binding = Binding(**bound)
    opened, key, plaintext, _text = _open(keyset, token, None, DEFAULT_POLICY, binding.associated)
    assert plaintext.count(MARKER) == 1
    changed = plaintext.replace(MARKER, replacement.encode("ascii"))
    sealed = opened.seal(key, changed, associated=binding.associated)
    if forged:  # another last character: the tag no longer matches (a forgery)
        sealed = sealed[:-2] + ("A" if sealed[-2] != "A" else "Q") + sealed[-1]
    return sealed


@pytest.mark.parametrize("where", list(LONE))
@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_a_genuine_token_holding_a_lone_surrogate_is_malformed_in_verify_and_inspect(
    keyset: ms.Keyset, fmt: str, where: str
) -> None:
    token = _sealed(keyset, fmt, LONE[where])
    with pytest.raises(ms.MalformedToken, match=r"lone surrogate \(\\ud[89a-f]"):
        ms.verify(keyset, token, **BINDINGS[fmt])
    with pytest.raises(ms.MalformedToken, match="lone surrogate"):
        ms.inspect(token, keyset=keyset)
    if fmt in READABLE:
        with pytest.raises(ms.MalformedToken, match="readable claims hold a lone surrogate"):
            ms.inspect(token)
    else:  # nothing readable without the key: nothing to refuse
        assert ms.inspect(token).claims is None


@pytest.mark.parametrize("fmt", READABLE)
def test_a_forged_token_holding_a_lone_surrogate_is_malformed_before_any_key(
    keyset: ms.Keyset, fmt: str
) -> None:
    """The readable claims are refused by name, with or without a keyset, before the tag is
    looked at; verify refuses the forgery by its tag (exit 1 too)."""
    token = _sealed(keyset, fmt, LONE["high"], forged=True)
    for given in (None, keyset):
        with pytest.raises(ms.MalformedToken, match="readable claims hold a lone surrogate"):
            ms.inspect(token, keyset=given)
    with pytest.raises(ms.BadSignature):
        ms.verify(keyset, token, **BINDINGS[fmt])


def test_a_lone_surrogate_in_a_member_name_is_found_too(keyset: ms.Keyset) -> None:
    token = _sealed(keyset, "jws", '{"\\udc00":1}')
    with pytest.raises(ms.MalformedToken, match=r"\\udc00"):
        ms.verify(keyset, token, request_id="r")
    assert lone_surrogate({"a": [1, {"b": ("x", "\udc00")}]}) == "\udc00"
    assert lone_surrogate({"\ud800": 1}) == "\ud800"
    assert lone_surrogate(["é", "\U0001f600", 1.5, None, True]) is None


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_a_surrogate_pair_is_text_like_any_other(keyset: ms.Keyset, fmt: str) -> None:
    """Escapes that pair up are one character: accepted, printed, no false alarm."""
    token = _sealed(keyset, fmt, '"\\ud83d\\ude00 \\u00e9"')
    claims = ms.verify(keyset, token, **BINDINGS[fmt])
    shown = claims.state if isinstance(claims.state, str) else claims.state["m"]
    assert shown == "\U0001f600 é"
    view = ms.inspect(token, keyset=keyset)
    # rmcp's tag covers the bind value, which inspect is not given
    assert view.verified or isinstance(view.problem, ms.BadSignature)
    assert view.claims is not None


def _cli_cases(fmt: str) -> list[tuple[str, ...]]:
    bound = BINDINGS[fmt]
    options: list[str] = []
    for name, value in bound.items():
        flag = "--" + name.replace("_", "-")
        options += [flag, json.dumps(value) if name == "arguments" else value]
    return [
        ("inspect",),
        ("inspect", "--json"),
        ("verify", *options),
        ("verify", "--json", *options),
    ]


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_the_cli_says_malformed_with_exit_1_for_every_format(
    keyset_file: Path, keyset: ms.Keyset, fmt: str
) -> None:
    """One token and a batch of them (stdin), text and --json, with a keyset: exit 1 and the
    reason named, where the command died with a codec error (exit 2) before."""
    token = _sealed(keyset, fmt, LONE["high"])
    for args in _cli_cases(fmt):
        single = run("--keyset", str(keyset_file), *args, token, code=1)
        shown = single.stdout + single.stderr
        assert "lone surrogate (\\ud800)" in shown, shown
        if args[:2] == ("verify", "--json"):  # inspect says it on stderr, as for any malformed
            answer = json.loads(single.stdout)
            assert answer["error"]["code"] == "malformed"
        batch = run("--keyset", str(keyset_file), *args, "-", input=f"{token}\n{token}\n", code=1)
        assert batch.stdout.count("lone surrogate") == 2, batch.stdout


@pytest.mark.parametrize("fmt", READABLE)
def test_the_cli_inspects_a_forged_readable_token_without_a_keyset(
    tmp_path: Path, keyset: ms.Keyset, fmt: str
) -> None:
    token = _sealed(keyset, fmt, LONE["low"], forged=True)
    missing = tmp_path / "none.json"  # inspect works without a keyset
    for args in (("inspect",), ("inspect", "--json")):
        result = run("--keyset", str(missing), *args, token, code=6)  # a named keyset is needed
        assert "no keyset" in result.stderr
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(tmp_path)  # no keys/keyset.json here: the default path, so no keyset
        for args in (("inspect",), ("inspect", "--json")):
            result = run(*args, token, code=1)
            assert "error: the readable claims hold a lone surrogate (\\udfff)" in result.stderr


# --- what a token holds can always be written out ----------------------------------------------


def _deep(levels: int) -> str:
    return "[" * levels + "]" * levels


@pytest.mark.parametrize("fmt", [f for f in FORMAT_NAMES if f not in STRING_STATES])
def test_a_deeply_nested_authentic_state_is_printed_and_dumped_by_every_command(
    keyset_file: Path, keyset: ms.Keyset, fmt: str
) -> None:
    """Found with the surrogates: a state at the writer's nesting cap was a valid token, but
    --json put it one level deeper, past the writer's cap: exit 2, "value nests deeper than 32
    levels". Authenticated plaintext is now read plainly, bounded by the interpreter's recursion
    limit (docs/security.md), so a key holder's state may nest past our writer's 32 levels (PHP's
    json_encode goes to 512): whatever verify accepts, every command prints and dumps. A state
    nested beyond the reader's bound is refused by name. (mcp-py, mcp-rb and mcp-java states
    are strings.)"""
    for levels in (MAX_DEPTH + 1, 500):
        token = _sealed(keyset, fmt, _deep(levels))
        expected = json.loads(_deep(levels))
        state = ms.verify(keyset, token, **BINDINGS[fmt]).state
        assert state == {"m": expected}
        for args in _cli_cases(fmt):
            result = run("--keyset", str(keyset_file), *args, token)
            if fmt in ("mcp-rs", "mcp-rs2") and args[0] == "inspect":
                # inspect checks rmcp's tag without the bind value, so the payload it shows is
                # unauthenticated: read strictly, and past the strict reader's cap, shown as bytes
                assert "payload_base64url" in result.stdout
                continue
            assert "[" * levels + "]" * levels in result.stdout
            if "--json" in args:
                assert json.loads(result.stdout)
    beyond = _sealed(keyset, fmt, _deep(2000))
    if fmt in ("mcp-rs", "mcp-rs2"):  # rmcp's payload is bytes; JSON is only a view of it
        assert isinstance(ms.verify(keyset, beyond, **BINDINGS[fmt]).state, bytes)
        return
    with pytest.raises(ms.MalformedToken, match="JSON nests deeper than this reader goes"):
        ms.verify(keyset, beyond, **BINDINGS[fmt])
    for args in _cli_cases(fmt):  # inspect reports the verdict; verify refuses (exit 1)
        code = 0 if args[0] == "inspect" else 1
        result = run("--keyset", str(keyset_file), *args, beyond, code=code)
        assert "nests deeper than this reader goes" in result.stdout + result.stderr


def test_printed_text_and_json_escape_lone_surrogates_and_keep_everything_else() -> None:
    """The output layer's own guard: whatever reaches a terminal through printable() or
    terminal_json() can be encoded, and JSON keeps its value (the escape is how JSON writes a
    lone surrogate anyway)."""
    from mrtr_state._printable import printable, terminal_json

    assert printable("a\ud800b\x1b\u202e é\U0001f600") == "a\\ud800b\\x1b\\u202e é\U0001f600"
    value = {"\udc00": ["x\ud800y", "é", "\u2066"]}
    written = terminal_json(json.dumps(value, ensure_ascii=False))
    written.encode("utf-8")
    assert "\\udc00" in written and "\\u2066" in written and "é" in written
    assert json.loads(written) == value
