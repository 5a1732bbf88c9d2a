"""Each envelope's one accepting path, held to two promises (issues 24 and 36).

1. Every token every format mints is accepted under the binding it was minted with, and under
   any other binding refused with the reason a model of that envelope's checks names.
2. Every refusal an envelope can give is reached by a case here: the refusals are read out of
   the envelope modules' source, so a new one without a test fails this file. (There is no
   fallback refusal to reach: each check raises its own error where it fails.)
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mrtr_state as ms
from mrtr_state import errors
from mrtr_state.keys.keyset import OWN_ALGORITHMS, Key
from mrtr_state.tokens import facade as tokens
from mrtr_state.tokens.envelopes.mcp_rb import ruby_arguments_digest
from mrtr_state.tokens.registry import FORMAT_NAMES, format_named

from .conftest import NOW

PACKAGE = Path(ms.__file__).resolve().parent
_GENERATED = ms.Keyset.generate(
    (
        *OWN_ALGORITHMS,
        "mcp-py-v1",
        "mcp-ts-v1",
        "mcp-rb-v1",
        "mcp-rs-v1",
        "mcp-php-v1",
        "mcp-java-v1",
    ),
    now=NOW - 3600,
)
KEYSET = _GENERATED.with_keys(
    [*_GENERATED, Key.generate("mcp-rs-v2", kid="", sdk_kid="ring-1", now=NOW - 3600)]
)
#: the state each format carries here (the Python and Ruby SDKs' is a string)
STATES: dict[str, Any] = {"mcp-py": "the state", "mcp-rb": "the state", "mcp-java": "the state"}


# --- 1. accepted as minted, refused with the named reason otherwise -------------------------

texts = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=8)
arguments = st.none() | st.dictionaries(st.text(max_size=4), st.integers() | st.text(max_size=4))
requests = st.one_of(
    st.just({}),
    st.builds(lambda value: {"request_id": value}, texts),
    st.builds(
        lambda method, target, args: {"method": method, "target": target, "arguments": args},
        texts,
        texts,
        arguments,
    ),
)


@st.composite
def bindings(draw: st.DrawFn) -> dict[str, Any]:
    stated: dict[str, Any] = dict(draw(requests))
    for name, values in (("principal", texts), ("audience", texts), ("bind", texts | st.binary())):
        value = draw(st.none() | values)
        if value is not None:
            stated[name] = value
    return stated


def _mintable(fmt: str, stated: dict[str, Any]) -> dict[str, Any]:
    """What of ``stated`` a format can carry (mcp-py and mcp-rb always bind a request)."""
    if fmt in ("mcp-ts", "mcp-rs", "mcp-rs2"):
        return {name: value for name, value in stated.items() if name == "bind"}
    if fmt == "mcp-php":
        return {}
    if fmt == "mcp-java":  # the principal, and a request without arguments
        carried = ("principal", "method", "target")
        kept: dict[str, Any] = {name: stated[name] for name in carried if name in stated}
        if "method" not in kept:
            kept.update(method="tools/call", target="deploy")
        return kept
    kept = {name: value for name, value in stated.items() if name not in ("bind",)}
    if fmt == "mcp-rb":
        kept.pop("principal", None)
    if fmt in ("mcp-py", "mcp-rb") and "method" not in kept:
        kept.pop("request_id", None)
        kept.update(method="tools/call", target="deploy", arguments=None)
    return kept


def _request(stated: dict[str, Any]) -> Any:
    if "request_id" in stated:
        return stated["request_id"]
    if "method" in stated:
        return ms.request_id(
            method=stated["method"], target=stated["target"], arguments=stated["arguments"]
        )
    return None


def _bind(value: str | bytes | None) -> bytes | None:
    return value.encode("utf-8") if isinstance(value, str) else value


#: The checks of each envelope in its order: (what is compared, the refusal when it differs).
Check = tuple[Callable[[dict[str, Any]], Any], type[ms.InvalidToken]]
ORDER: dict[str, list[Check]] = {
    "own": [
        (lambda b: b.get("principal"), ms.PrincipalMismatch),
        (lambda b: b.get("audience"), ms.AudienceMismatch),
        (_request, ms.RequestMismatch),
    ],
    "mcp-py": [
        (lambda b: "method" in b, ms.RequestMismatch),
        (
            lambda b: (
                (b.get("method"), b.get("target"), ms.arguments_digest(b.get("arguments") or {}))
                if "method" in b
                else None
            ),
            ms.RequestMismatch,
        ),
        (lambda b: b.get("audience"), ms.AudienceMismatch),
        (lambda b: b.get("principal"), ms.PrincipalMismatch),
    ],
    "mcp-ts": [(lambda b: _bind(b.get("bind")), ms.RequestMismatch)],
    "mcp-rb": [
        (lambda b: "method" in b, ms.RequestMismatch),
        (
            lambda b: (
                (b.get("method"), b.get("target"), ruby_arguments_digest(b.get("arguments")))
                if "method" in b
                else None
            ),
            ms.RequestMismatch,
        ),
        (lambda b: b.get("audience"), ms.AudienceMismatch),
    ],
    "mcp-java": [
        (lambda b: b.get("principal"), ms.PrincipalMismatch),
        (lambda b: "method" in b, ms.RequestMismatch),
        (lambda b: b.get("arguments") is not None, ms.RequestMismatch),
        (lambda b: (b.get("method"), b.get("target")), ms.RequestMismatch),
    ],
    # the tag covers the bind value (checked by the wire, before anything else: see below)
    "mcp-rs": [],
    "mcp-php": [],
}
CARRIES = {
    "own": {"principal", "audience", "request_id", "method"},
    "mcp-py": {"principal", "audience", "method"},
    "mcp-ts": {"bind"},
    "mcp-rb": {"audience", "method"},
    "mcp-rs": {"bind"},
    "mcp-php": set(),
    "mcp-java": {"principal", "method"},
}
#: the envelope each format carries
ENVELOPE_OF = {"aead": "own", "jws": "own", "jwe": "own", "mcp-rs2": "mcp-rs"}
#: A stated kind the format cannot carry, in the order refuse_uncarried names them (lowest bit).
UNCARRIED: list[tuple[str, type[ms.InvalidToken]]] = [
    ("principal", ms.PrincipalMismatch),
    ("audience", ms.AudienceMismatch),
    ("request_id", ms.RequestMismatch),
    ("method", ms.RequestMismatch),
    ("bind", ms.RequestMismatch),
]


def expected_refusal(fmt: str, minted: dict[str, Any], stated: dict[str, Any]) -> Any:
    envelope = ENVELOPE_OF.get(fmt, fmt)
    # rmcp's tag covers the bind value as associated data (none and empty alike): another one
    # fails the tag, as a forgery would
    if envelope == "mcp-rs" and (_bind(minted.get("bind")) or b"") != (
        _bind(stated.get("bind")) or b""
    ):
        return ms.BadSignature
    for kind, error in UNCARRIED:
        if kind in stated and kind not in CARRIES[envelope]:
            return error
    for compared, error in ORDER[envelope]:
        if compared(minted) != compared(stated):
            return error
    return None


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fmt=st.sampled_from(FORMAT_NAMES), minted=bindings(), stated=bindings())
def test_a_token_is_accepted_as_minted_and_refused_by_name_under_any_other_binding(
    fmt: str, minted: dict[str, Any], stated: dict[str, Any]
) -> None:
    minted = _mintable(fmt, minted)
    state = STATES.get(fmt, {"step": 2})
    token = ms.mint(KEYSET, state, format=fmt, now=NOW, **minted)
    assert ms.verify(KEYSET, token, now=NOW, **minted).state == state
    expected = expected_refusal(fmt, minted, stated)
    if expected is None:
        assert ms.verify(KEYSET, token, now=NOW, **stated).state == state
    else:
        with pytest.raises(ms.InvalidToken) as refused:
            ms.verify(KEYSET, token, now=NOW, **stated)
        assert type(refused.value) is expected, (minted, stated, refused.value)


def test_a_binding_a_format_cannot_carry_is_refused_at_mint() -> None:
    cases: list[tuple[str, dict[str, Any]]] = [
        ("aead", {"bind": "x"}),
        ("mcp-ts", {"principal": "alice"}),
        ("mcp-py", {"request_id": "r", "principal": "alice"}),
    ]
    for fmt, stated in cases:
        with pytest.raises(ValueError, match="cannot carry"):
            ms.mint(KEYSET, "s", format=fmt, now=NOW, **stated)


# --- 2. every refusal reached ---------------------------------------------------------------

REFUSING = [
    "tokens/envelopes/own.py",
    "tokens/envelopes/mcp_py.py",
    "tokens/envelopes/mcp_ts.py",
    "tokens/envelopes/mcp_rb.py",
    "tokens/envelopes/mcp_rs.py",
    "tokens/envelopes/mcp_php.py",
    "tokens/envelopes/mcp_java.py",
    "tokens/envelopes/__init__.py",
]
ERRORS = {
    name
    for name in dir(errors)
    if isinstance(getattr(errors, name), type)
    and issubclass(getattr(errors, name), ms.InvalidToken)
}


def _regex(node: ast.expr) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return re.escape(node.value).replace(r"\{\}", ".*?")
    if isinstance(node, ast.JoinedStr):
        return "".join(
            re.escape(str(part.value)) if isinstance(part, ast.Constant) else ".*?"
            for part in node.values
        )
    return None


def refusals() -> dict[str, str]:
    """Every refusal message the envelope modules can build: {where: regex}."""
    found: dict[str, str] = {}
    for module in REFUSING:
        tree = ast.parse((PACKAGE / module).read_text())
        for function in ast.walk(tree):
            if isinstance(function, ast.FunctionDef) and function.name == "over_cap":
                (returned,) = [n for n in ast.walk(function) if isinstance(n, ast.Return)]
                assert returned.value is not None
                found[f"{module}:{function.lineno}"] = _regex(returned.value) or ""
        for node in ast.walk(tree):
            where = f"{module}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.args:
                if node.func.id not in ERRORS | {"error"}:
                    continue
                regex = _regex(node.args[0])
                if regex is not None:
                    found[where] = regex
                else:  # over_cap's message, or the uncarried table's (both read elsewhere)
                    first = node.args[0]
                    assert (
                        isinstance(first, ast.Call)
                        and isinstance(first.func, ast.Name)
                        and first.func.id == "over_cap"
                    ) or (
                        isinstance(first, ast.BinOp) and module == "tokens/envelopes/__init__.py"
                    ), where
            elif (
                isinstance(node, ast.Tuple)
                and len(node.elts) == 2
                and isinstance(node.elts[0], ast.Name)
                and node.elts[0].id in ERRORS
            ):
                regex = _regex(node.elts[1])
                assert regex is not None, where
                found[where] = regex + ", but one was stated"
    return found


def _forge(fmt: str, plaintext: bytes | str) -> str:
    """A token a key holder could make, sealing any plaintext in ``fmt``'s wire."""
    wire = format_named(fmt)
    data = plaintext.encode() if isinstance(plaintext, str) else plaintext
    return wire.seal(KEYSET.primary(wire.alg), data)


def _claims(**members: Any) -> str:
    body = {"iat": NOW, "exp": NOW + 60, "jti": "j", **members, "st": 1}
    return json.dumps({k: v for k, v in body.items() if v is not ...})


def _sdk(**members: Any) -> str:
    body: dict[str, Any] = {"v": 1, "iat": NOW, "exp": NOW + 60.0, "m": "tools/call"}
    body.update(t="deploy", a=ms.arguments_digest({}), s="s")
    body.update(members)
    return json.dumps({k: v for k, v in body.items() if v is not ...}, separators=(",", ":"))


REQUEST = {"method": "tools/call", "target": "deploy"}
TS = {"p": 1, "exp": NOW + 60}
PHP = {"exp": NOW + 60, "data": {"step": 2}}
JAVA: dict[str, Any] = {"v": 1, "s": "s", "exp": (NOW + 60) * 1000, "p": None, "m": "tools/call"}
JAVA["n"] = "deploy"


def _java(**members: Any) -> str:
    body = {**JAVA, **members}
    return json.dumps({k: v for k, v in body.items() if v is not ...}, separators=(",", ":"))


def _rb(**members: Any) -> str:
    body: dict[str, Any] = {"v": 1, "exp": NOW + 60, "m": "tools/call", "t": "deploy"}
    body.update(a=ruby_arguments_digest(None), s="s")
    body.update(members)
    return json.dumps({k: v for k, v in body.items() if v is not ...}, separators=(",", ":"))


def _rs(expiry_ms: int, payload: bytes = b"{}") -> bytes:
    return expiry_ms.to_bytes(8, "big", signed=True) + payload


def _verify(fmt: str, plaintext: bytes | str, **stated: Any) -> Callable[[], object]:
    return lambda: ms.verify(KEYSET, _forge(fmt, plaintext), now=NOW, **stated)


def _minted(
    fmt: str, state: Any = 1, *, stated: dict[str, Any], **minted: Any
) -> Callable[[], object]:
    token = ms.mint(KEYSET, state, format=fmt, now=NOW, **minted)
    return lambda: ms.verify(KEYSET, token, now=NOW, **stated)


def _problem(fmt: str, plaintext: bytes | str) -> Callable[[], object]:
    def run() -> object:
        problem = ms.inspect(_forge(fmt, plaintext), keyset=KEYSET, now=NOW).problem
        assert problem is not None
        raise problem

    return run


CASES: list[Callable[[], object]] = [
    # own claims: shape
    _verify("aead", b'{"st":1,"st":2}'),
    _problem("aead", b"{bad"),
    _verify("aead", _claims(x=1)),
    _verify("aead", _claims(jti=...)),
    _verify("aead", _claims(iat=1.5)),
    _verify("jws", _claims(jti="")),
    _verify("jwe", _claims(aud=[])),
    # own claims: lifetime
    _verify("aead", _claims(exp=NOW)),
    _verify("aead", _claims(exp=NOW + 10**6)),
    _verify("aead", _claims(iat=NOW + 1000, exp=NOW + 1060)),
    _verify("aead", _claims(iat=NOW - 120, exp=NOW - 60)),
    # own claims: bindings, both ways
    _minted("aead", stated={"principal": "alice"}),
    _minted("aead", stated={"audience": "fleet"}),
    _minted("aead", stated={"request_id": "r"}),
    _minted("jws", principal="alice", stated={}),
    _minted("aead", audience="fleet", stated={}),
    _minted("jwe", request_id="r", stated={}),
    _minted("jws", principal="alice", stated={"principal": "mallory"}),
    _minted("aead", audience="fleet", stated={"audience": "other"}),
    _minted("aead", **REQUEST, stated={**REQUEST, "arguments": {"x": 1}}),
    _minted("aead", stated={"bind": "b"}),
    # own plaintexts that are not claims
    _verify("aead", b"\x02{}"),  # an unknown marker
    _verify("aead", b'{"iat":1,"st":' + b"[" * 2000 + b"]" * 2000 + b"}"),  # beyond the reader
    lambda: ms.verify(KEYSET, ms.seal(KEYSET, b"raw")),
    lambda: ms.unseal(KEYSET, ms.mint(KEYSET, 1)),
    lambda: ms.unseal(
        KEYSET, tokens.seal_envelope(KEYSET, b"{}", format="aead", policy=ms.DEFAULT_POLICY)
    ),
    lambda: tokens.open_envelope(KEYSET, ms.mint(KEYSET, 1), format=None, policy=ms.DEFAULT_POLICY),
    # mcp-py
    _verify("mcp-py", b"[1]", **REQUEST),
    _verify("mcp-py", _sdk(x=1), **REQUEST),
    _verify("mcp-py", _sdk(v=2), **REQUEST),
    _verify("mcp-py", _sdk(iat=NOW + 1000.0, exp=NOW + 1060.0), **REQUEST),
    _verify("mcp-py", _sdk(iat=NOW - 120.0, exp=NOW - 60.0), **REQUEST),
    _verify("mcp-py", _sdk(exp=NOW + 10.0**6), **REQUEST),
    _verify("mcp-py", _sdk(exp="soon"), **REQUEST),
    _verify("mcp-py", _sdk(iat=None), **REQUEST),
    _verify("mcp-py", _sdk(v=True), **REQUEST),
    _verify("mcp-py", _sdk()),
    _verify("mcp-py", _sdk(t="other"), **REQUEST),
    _verify("mcp-py", _sdk(), **REQUEST, audience="fleet"),
    _minted("mcp-py", "s", **REQUEST, stated={**REQUEST, "principal": "alice"}),
    _minted("mcp-py", "s", **REQUEST, principal="alice", stated=REQUEST),
    _minted("mcp-py", "s", **REQUEST, principal="alice", stated={**REQUEST, "principal": "bob"}),
    _minted("mcp-py", "s", **REQUEST, stated={"request_id": "r"}),
    # mcp-ts
    _verify("mcp-ts", b"[1]"),
    _verify("mcp-ts", json.dumps({**TS, "x": 1})),
    _verify("mcp-ts", json.dumps({"exp": NOW + 60})),
    _verify("mcp-ts", json.dumps({**TS, "exp": NOW - 60})),
    _verify("mcp-ts", json.dumps({**TS, "exp": NOW + 10**6})),
    _verify("mcp-ts", json.dumps({**TS, "exp": "soon"})),
    _minted("mcp-ts", stated={"bind": "b"}),
    _minted("mcp-ts", bind="b", stated={}),
    _minted("mcp-ts", bind="b", stated={"bind": "c"}),
    _minted("mcp-ts", stated={"principal": "alice"}),
    _minted("mcp-ts", stated={"audience": "fleet"}),
    _minted("mcp-ts", stated=REQUEST),
    # mcp-rb
    _verify("mcp-rb", b"{bad", **REQUEST),
    _verify("mcp-rb", _rb(x=1), **REQUEST),
    _verify("mcp-rb", _rb(v=2), **REQUEST),
    _verify("mcp-rb", _rb(exp=NOW + 60.0), **REQUEST),
    _verify("mcp-rb", _rb(s=...), **REQUEST),
    _verify("mcp-rb", _rb(exp=NOW - 60), **REQUEST),
    _verify("mcp-rb", _rb(exp=NOW + 10**6), **REQUEST),
    _minted("mcp-rb", "s", **REQUEST, stated={}),
    _minted("mcp-rb", "s", **REQUEST, stated={**REQUEST, "method": "prompts/get"}),
    _minted("mcp-rb", "s", **REQUEST, stated={**REQUEST, "target": "other"}),
    _minted("mcp-rb", "s", **REQUEST, stated={**REQUEST, "arguments": {"x": 1.0}}),
    _minted("mcp-rb", "s", **REQUEST, audience="fleet", stated=REQUEST),
    _minted("mcp-rb", "s", **REQUEST, stated={**REQUEST, "principal": "alice"}),
    # mcp-rs (the tag over the bind value is the wire's: see test_mcp_rs.py)
    _verify("mcp-rs", b"short"),
    _problem("mcp-rs2", b"short"),
    _verify("mcp-rs", _rs(0)),
    _verify("mcp-rs2", _rs((NOW - 60) * 1000)),
    _verify("mcp-rs", _rs((NOW + 10**6) * 1000)),
    _minted("mcp-rs", stated={"principal": "alice"}),
    # mcp-php
    _verify("mcp-php", b"{bad"),
    _verify("mcp-php", json.dumps({**PHP, "x": 1})),
    _verify("mcp-php", json.dumps({**PHP, "exp": str(NOW + 60)})),
    _verify("mcp-php", json.dumps({**PHP, "data": "s"})),
    _verify("mcp-php", json.dumps({**PHP, "exp": NOW - 60})),
    _verify("mcp-php", json.dumps({**PHP, "exp": NOW + 10**6})),
    _minted("mcp-php", {"k": 1}, stated={"audience": "fleet"}),
    # mcp-java
    _verify("mcp-java", b"{bad", **REQUEST),
    _verify("mcp-java", _java(x=1), **REQUEST),
    _verify("mcp-java", _java(p=...), **REQUEST),
    _verify("mcp-java", _java(v=2), **REQUEST),
    _verify("mcp-java", _java(s=None), **REQUEST),
    _verify("mcp-java", _java(exp=str((NOW + 60) * 1000)), **REQUEST),
    _verify("mcp-java", _java(n=["deploy"]), **REQUEST),
    _verify("mcp-java", _java()[:-1] + ',"s":"t"}', **REQUEST),
    _verify("mcp-java", _java(exp=NOW * 1000 - 1), **REQUEST),
    _verify("mcp-java", _java(exp=(NOW + 10**6) * 1000), **REQUEST),
    _minted("mcp-java", "s", **REQUEST, stated={**REQUEST, "audience": "fleet"}),
    _minted("mcp-java", "s", **REQUEST, stated={**REQUEST, "principal": "alice"}),
    _minted("mcp-java", "s", **REQUEST, principal="alice", stated=REQUEST),
    _minted("mcp-java", "s", **REQUEST, principal="alice", stated={**REQUEST, "principal": "b"}),
    _minted("mcp-java", "s", **REQUEST, stated={}),
    _minted("mcp-java", "s", **REQUEST, stated={**REQUEST, "arguments": {}}),
    _minted("mcp-java", "s", **REQUEST, stated={**REQUEST, "method": "prompts/get"}),
    _minted("mcp-java", "s", **REQUEST, stated={**REQUEST, "target": "other"}),
    lambda: ms.unseal(KEYSET, ms.mint(KEYSET, 1, format="mcp-ts")),
    lambda: tokens.open_envelope(
        KEYSET, ms.mint(KEYSET, 1, format="mcp-ts"), format=None, policy=ms.DEFAULT_POLICY
    ),
]


def _message(case: Callable[[], object]) -> str:
    with pytest.raises(ms.InvalidToken) as refused:
        case()
    return str(refused.value)


def test_every_refusal_of_every_envelope_is_reached_by_a_case() -> None:
    messages = [_message(case) for case in CASES]
    unreached = {
        where: regex
        for where, regex in refusals().items()
        if not any(re.fullmatch(regex, message, re.DOTALL) for message in messages)
    }
    assert not unreached, f"refusals no case reaches: {unreached}"


def test_the_refusal_catalogue_is_read_from_the_source() -> None:
    found = refusals()
    # the catalogue would be vacuous if reading it failed quietly
    assert len(found) >= 45, found
    assert any(re.fullmatch(regex, "principal mismatch") for regex in found.values())


def test_no_envelope_works_out_afterwards_which_check_refused() -> None:
    """The structure the catalogue relies on: each envelope's checks raise where they fail, so
    no module keeps a second copy of them to explain a refusal, nor a fallback for a refusal it
    could not explain."""
    for module in REFUSING:
        source = (PACKAGE / module).read_text()
        tree = ast.parse(source)
        names = {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}
        assert not any(name.endswith("_refusal") for name in names), module
        assert "not reached" not in source, module
