"""Known attacks on token formats, one test per attack, every format, library and CLI.

Each attack must be refused with one of our errors (the right class and exit code, a specific
reason), never another exception and never a hang.
"""

from __future__ import annotations

import builtins
import contextlib
import json
import os
import time
import zlib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mrtr_state as ms
from mrtr_state._encoding import b64url_encode
from mrtr_state._primitives import AESGCM, hmac_key, hmac_sha256
from mrtr_state.keys.keyset import OWN_ALGORITHMS, Key
from mrtr_state.tokens.registry import FORMAT_NAMES, OWN_FORMAT_NAMES, format_named

from .conftest import NOW
from .helpers import run

TS_SECRET = b"t" * 40
PY_SECRET = b"p" * 40


@pytest.fixture
def everything() -> ms.Keyset:
    """A keyset that can mint every format, the SDK ones included."""
    own = list(ms.Keyset.generate(now=NOW))
    sdk = [
        Key.from_secret(alg, secret, sdk_kid="ring-1" if alg == "mcp-rs-v2" else None)
        for alg, secret in (
            ("mcp-py-v1", PY_SECRET),
            ("mcp-ts-v1", TS_SECRET),
            ("mcp-rb-v1", b"r" * 32),
            ("mcp-rs-v1", b"s" * 40),
            ("mcp-rs-v2", b"k" * 40),
            ("mcp-php-v1", b"h" * 40),
            ("mcp-java-v1", b"j" * 40),
        )
    ]
    return ms.Keyset([*own, *sdk])


SDK_REQUEST: dict[str, Any] = {"method": "tools/call", "target": "t", "arguments": {}}
#: the binding each format's tokens are minted with here (the SDKs bind differently)
BINDINGS: dict[str, dict[str, Any]] = {
    "mcp-py": SDK_REQUEST,
    "mcp-rb": SDK_REQUEST,
    "mcp-rs": {"bind": "user:alice"},
    "mcp-rs2": {"bind": "user:alice"},
    "mcp-java": {"method": "tools/call", "target": "t"},
}
#: formats whose tokens have the same shape: only the key that opens one tells them apart
SHARED_SHAPE = {frozenset({"mcp-py", "mcp-rb"}), frozenset({"mcp-php", "mcp-java"})}


def token_of(keyset: ms.Keyset, fmt: str, **extra: Any) -> str:
    state: Any = "s" if fmt in ("mcp-py", "mcp-rb", "mcp-java") else {"k": 1}
    return ms.mint(keyset, state, format=fmt, now=NOW, **BINDINGS.get(fmt, {}), **extra)


def verify_any(
    keyset: ms.Keyset, token: str | bytes, fmt: str | None = None, **extra: Any
) -> ms.Claims:
    binding = BINDINGS.get(fmt or "", {})
    return ms.verify(keyset, token, now=NOW, **{**binding, **extra})


def jose_token(keyset: ms.Keyset, header: dict[str, Any] | str, fmt: str = "jws") -> str:
    """A JOSE token with an arbitrary header, correctly MACed or encrypted under our own key."""
    text = header if isinstance(header, str) else json.dumps(header, separators=(",", ":"))
    segment = b64url_encode(text.encode())
    payload = json.dumps({"iat": NOW, "exp": NOW + 60, "jti": "j", "st": 1}).encode()
    if fmt == "jws":
        keyed = hmac_key(keyset.primary("HS256").secret)
        signing = segment + "." + b64url_encode(payload)
        return signing + "." + b64url_encode(hmac_sha256(keyed, signing.encode()))
    nonce = os.urandom(12)
    sealed = AESGCM(keyset.primary("dir+A256GCM").secret).encrypt(nonce, payload, segment.encode())
    return ".".join(
        [
            segment,
            "",
            b64url_encode(nonce),
            b64url_encode(sealed[:-16]),
            b64url_encode(sealed[-16:]),
        ]
    )


# --- JOSE header attacks -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "header"),
    [
        ("alg-none", {"alg": "none", "kid": "KID", "typ": "mrtr-state+jwt"}),
        ("alg-HS512", {"alg": "HS512", "kid": "KID", "typ": "mrtr-state+jwt"}),
        ("alg-RS256", {"alg": "RS256", "kid": "KID", "typ": "mrtr-state+jwt"}),
        ("jku", {"alg": "HS256", "kid": "KID", "typ": "mrtr-state+jwt", "jku": "https://a.b"}),
        ("x5u", {"alg": "HS256", "kid": "KID", "typ": "mrtr-state+jwt", "x5u": "https://a.b"}),
        ("jwk", {"alg": "HS256", "kid": "KID", "typ": "mrtr-state+jwt", "jwk": {"kty": "oct"}}),
        ("x5c", {"alg": "HS256", "kid": "KID", "typ": "mrtr-state+jwt", "x5c": ["MIIB"]}),
        ("crit", {"alg": "HS256", "kid": "KID", "typ": "mrtr-state+jwt", "crit": ["exp"]}),
        ("unknown-member", {"alg": "HS256", "kid": "KID", "typ": "mrtr-state+jwt", "x": 1}),
        ("duplicate-alg", '{"alg":"none","alg":"HS256","kid":"KID","typ":"mrtr-state+jwt"}'),
        ("duplicate-kid", '{"alg":"HS256","kid":"00000000","kid":"KID","typ":"mrtr-state+jwt"}'),
    ],
)
def test_jws_header_attacks(everything: ms.Keyset, name: str, header: Any) -> None:
    kid = everything.primary("HS256").kid
    header = (
        header.replace("KID", kid)
        if isinstance(header, str)
        else {k: (kid if v == "KID" else v) for k, v in header.items()}
    )
    token = jose_token(everything, header)
    with pytest.raises(ms.MalformedToken, match="jws header") as caught:
        ms.verify(everything, token, now=NOW)
    assert caught.value.exit_code == 1


@pytest.mark.parametrize(
    ("name", "header"),
    [
        (
            "zip",
            {"alg": "dir", "enc": "A256GCM", "kid": "KID", "typ": "mrtr-state+jwt", "zip": "DEF"},
        ),
        (
            "pbes2-huge-p2c",
            {
                "alg": "PBES2-HS512+A256KW",
                "enc": "A256GCM",
                "kid": "KID",
                "p2c": 2_000_000_000,
                "p2s": "AAAAAAAAAAA",
            },
        ),
        (
            "ecdh-es",
            {
                "alg": "ECDH-ES",
                "enc": "A256GCM",
                "kid": "KID",
                "epk": {"kty": "EC", "crv": "P-256", "x": "AA", "y": "AA"},
            },
        ),
        ("rsa1_5", {"alg": "RSA1_5", "enc": "A256GCM", "kid": "KID"}),
        ("a128kw", {"alg": "A128KW", "enc": "A256GCM", "kid": "KID"}),
        ("enc-A128GCM", {"alg": "dir", "enc": "A128GCM", "kid": "KID", "typ": "mrtr-state+jwt"}),
    ],
)
def test_jwe_header_attacks_are_refused_before_any_key_work(
    everything: ms.Keyset, name: str, header: dict[str, Any]
) -> None:
    kid = everything.primary("dir+A256GCM").kid
    token = jose_token(
        everything, {k: (kid if v == "KID" else v) for k, v in header.items()}, fmt="jwe"
    )
    started = time.perf_counter()
    with pytest.raises(ms.MalformedToken, match="jwe header"):
        ms.verify(everything, token, now=NOW)
    assert time.perf_counter() - started < 0.05


def test_a_jwe_zip_bomb_is_refused_before_decompression(everything: ms.Keyset) -> None:
    bomb = zlib.compress(b"\0" * 50_000_000, 9)  # about 50 KB inflating to 50 MB
    kid = everything.primary("dir+A256GCM").kid
    header = b64url_encode(
        json.dumps({"alg": "dir", "enc": "A256GCM", "kid": kid, "zip": "DEF"}).encode()
    )
    token = ".".join([header, "", "A" * 16, b64url_encode(bomb), "A" * 22])
    assert len(token) > 64_000
    started = time.perf_counter()
    with pytest.raises(ms.OversizedToken):
        ms.verify(everything, token, now=NOW)
    with pytest.raises(ms.MalformedToken, match="zip"):
        ms.verify(everything, token, now=NOW, policy=ms.Policy(max_size=1 << 20))
    assert time.perf_counter() - started < 0.05


@pytest.mark.parametrize(
    "kid",
    [
        "../../etc/passwd",
        "' OR 1=1--",
        "$(id)",
        "ab\r\ncd",
        "ab\x00cd",
        "a" * 1000,
        12345678,
        None,
        ["0a0b0c0d"],
    ],
    ids=["path", "sql", "shell", "crlf", "nul", "long", "number", "null", "list"],
)
@pytest.mark.parametrize("fmt", ["jws", "jwe"])
def test_kid_injection_is_refused_before_lookup_and_touches_no_file(
    everything: ms.Keyset, monkeypatch: pytest.MonkeyPatch, fmt: str, kid: Any
) -> None:
    header = (
        {"alg": "HS256", "kid": kid, "typ": "mrtr-state+jwt"}
        if fmt == "jws"
        else {"alg": "dir", "enc": "A256GCM", "kid": kid, "typ": "mrtr-state+jwt"}
    )
    token = jose_token(everything, header, fmt=fmt)

    def no_files(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"the file system was touched: {args!r}")

    monkeypatch.setattr(builtins, "open", no_files)
    monkeypatch.setattr(os, "open", no_files)
    monkeypatch.setattr(os, "stat", no_files)
    with pytest.raises(ms.MalformedToken, match=f"{fmt} header"):
        ms.verify(everything, token, now=NOW)


# --- encoding attacks, every format --------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_non_canonical_truncated_and_extended_tokens(everything: ms.Keyset, fmt: str) -> None:
    token = token_of(everything, fmt)
    variants = [
        token + "=",
        token + "==",
        token.replace("-", "+", 1) if "-" in token else token + "+",
        token.replace("_", "/", 1) if "_" in token else token + "/",
        token[:20] + " " + token[20:],
        token[:20] + "\n" + token[20:],
        token + "\n",
        token[:-1],
        token[:-5],
        token + "A",
        token + "AAAA",
        token + ".",
        "." + token,
    ]
    for variant in variants:
        with pytest.raises(ms.InvalidToken):
            verify_any(everything, variant, fmt)


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_a_changed_character_at_every_position(everything: ms.Keyset, fmt: str) -> None:
    token = token_of(everything, fmt)
    for position in range(len(token)):
        for replacement in {"A", "B", "_", "-", "."} - {token[position]}:
            mutated = token[:position] + replacement + token[position + 1 :]
            with pytest.raises(ms.InvalidToken):
                verify_any(everything, mutated, fmt)


@pytest.mark.parametrize("size", [1 << 20, 100 << 20], ids=["1MB", "100MB"])
def test_oversized_input_is_refused_in_well_under_10_ms(everything: ms.Keyset, size: int) -> None:
    text = "ms1." + "A" * size
    raw = text.encode()
    started = time.perf_counter()
    for token in (text, raw):
        with pytest.raises(ms.OversizedToken):
            ms.verify(everything, token, now=NOW)
        with pytest.raises(ms.OversizedToken):
            ms.inspect(token)
        with pytest.raises(ms.OversizedToken):
            ms.unseal(everything, token)
    assert (time.perf_counter() - started) / 6 < 0.01


# --- authentic tokens with hostile claims --------------------------------------------------


@pytest.mark.parametrize("fmt", OWN_FORMAT_NAMES)
def test_nesting_100000_deep_with_a_valid_tag(everything: ms.Keyset, fmt: str) -> None:
    fmt_obj = format_named(fmt)
    deep = (
        '{"iat":1800000000,"exp":1800000060,"jti":"j","st":' + "[" * 100_000 + "]" * 100_000 + "}"
    )
    token = fmt_obj.seal(everything.primary(fmt_obj.alg), deep.encode())
    # authenticated JSON nests as deep as the reader goes: deeper is malformed, by name
    with pytest.raises(ms.MalformedToken, match="nests deeper than this reader goes"):
        ms.verify(everything, token, now=NOW, policy=ms.Policy(max_size=1 << 20))
    with pytest.raises(ms.OversizedToken):
        ms.verify(everything, token, now=NOW)


# --- confusion -----------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_cross_format_confusion(everything: ms.Keyset, fmt: str) -> None:
    token = token_of(everything, fmt)
    for other in FORMAT_NAMES:
        if frozenset({fmt, other}) in SHARED_SHAPE:
            # mcp-py tried as mcp-rb fails the tag under the mcp-rb keys; mcp-rb tried as
            # mcp-py is opened by its mcp-rb key, which names it the wrong format
            with pytest.raises((ms.BadSignature, ms.WrongFormat)):
                verify_any(everything, token, fmt, format=other)
        elif other != fmt:
            with pytest.raises(ms.WrongFormat):
                verify_any(everything, token, fmt, format=other)
            with pytest.raises(ms.InvalidToken):
                format_named(other).open(everything, token)


@pytest.mark.parametrize("fmt", ["aead", "jws", "jwe", "mcp-py"])
def test_cross_key_confusion(everything: ms.Keyset, fmt: str) -> None:
    """Our key ids under another secret, and the same secret under another algorithm."""
    token = token_of(everything, fmt)
    key = everything.primary(format_named(fmt).alg)
    if fmt != "mcp-py":  # an mcp-py key id is derived from its secret: it cannot be moved
        other_secret = ms.Keyset([Key(kid=key.kid, alg=key.alg, secret=os.urandom(32))])
        with pytest.raises(ms.BadSignature):
            verify_any(other_secret, token, fmt)
    for alg in ("A256GCM", "HS256", "dir+A256GCM"):
        if alg != key.alg:
            confused = ms.Keyset([Key(kid=key.kid, alg=alg, secret=key.secret[:32])])
            with pytest.raises(ms.InvalidToken):
                verify_any(confused, token, fmt)


@pytest.mark.parametrize("fmt", OWN_FORMAT_NAMES)
def test_wrong_context_retired_key_and_exact_expiry(everything: ms.Keyset, fmt: str) -> None:
    token = ms.mint(
        everything,
        1,
        format=fmt,
        now=NOW,
        ttl=60,
        principal="alice",
        request_id="r1",
        audience="a1",
    )
    right: dict[str, Any] = {"principal": "alice", "request_id": "r1", "audience": "a1"}
    for change, error in (
        ({"principal": "bob"}, ms.PrincipalMismatch),
        ({"request_id": "r2"}, ms.RequestMismatch),
        ({"audience": "a2"}, ms.AudienceMismatch),
    ):
        with pytest.raises(error):
            ms.verify(everything, token, now=NOW, **{**right, **change})
    with pytest.raises(ms.ExpiredToken):
        ms.verify(everything, token, now=NOW + 60, **right)
    key = everything.primary(format_named(fmt).alg)
    with pytest.raises(ms.KeyRetired):
        ms.verify(everything.replace_key(key, status="retired"), token, now=NOW, **right)


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_a_token_of_a_retired_key_is_refused_as_retired(everything: ms.Keyset, fmt: str) -> None:
    """Every format, its key retired: refused as retired, also where tokens name no key (their
    format's keys are all retired) and where another format shares the shape (mcp-rb's tokens
    go to the mcp-py keys by an id first, and find none)."""
    token = token_of(everything, fmt)
    retired = everything.replace_key(everything.primary(format_named(fmt).alg), status="retired")
    with pytest.raises(ms.InvalidToken) as refused:
        verify_any(retired, token, fmt)
    if fmt in ("mcp-py", "mcp-php", "mcp-java"):  # a peer's key tried it too: a bad tag, and why
        assert isinstance(refused.value, ms.BadSignature | ms.KeyRetired), refused.value
        assert "retired" in str(refused.value)
    else:
        assert isinstance(refused.value, ms.KeyRetired), refused.value


# --- property: nothing but our errors ------------------------------------------------------


@settings(max_examples=400, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    data=st.one_of(
        st.binary(max_size=600),
        st.text(max_size=600),
        st.from_regex(r"(ms1\.|v1\.|eyJ)[A-Za-z0-9_.\-]{0,400}", fullmatch=True),
    )
)
def test_any_input_raises_only_our_errors(everything: ms.Keyset, data: str | bytes) -> None:
    for call in (
        lambda: ms.verify(everything, data, now=NOW, **SDK_REQUEST),
        lambda: ms.inspect(data, keyset=everything, now=NOW),
        lambda: ms.inspect(data),
        lambda: ms.unseal(everything, data),
    ):
        with contextlib.suppress(ms.InvalidToken):
            call()


# --- the same attacks through the CLI ------------------------------------------------------


def test_attacks_through_the_cli(tmp_path: Path) -> None:
    path = tmp_path / "keyset.json"
    run("--keyset", str(path), "keys", "init")
    keyset = ms.Keyset.load(path)
    hs_kid = keyset.primary("HS256").kid
    expectations = [
        (
            jose_token(keyset, {"alg": "none", "kid": hs_kid, "typ": "mrtr-state+jwt"}),
            1,
            "error: jws header alg 'none' is not accepted (only HS256)",
        ),
        (
            jose_token(
                keyset, {"alg": "HS256", "kid": "../../etc/passwd", "typ": "mrtr-state+jwt"}
            ),
            1,
            "error: jws header kid must be 8 lowercase hex digits",
        ),
        (
            jose_token(
                keyset,
                {
                    "alg": "dir",
                    "enc": "A256GCM",
                    "kid": keyset.primary("dir+A256GCM").kid,
                    "typ": "mrtr-state+jwt",
                    "zip": "DEF",
                },
                fmt="jwe",
            ),
            1,
            "error: jwe header has zip, which mrtr-state never accepts",
        ),
        ("ms1." + "A" * 20_000, 1, "error: token is 20004 bytes, over the 8192-byte size cap"),
        (
            ms.mint(keyset, 1, format="jws", ttl=60, now=time.time() - 60),
            3,
            "error: expired 0 s ago",
        ),
    ]
    for token, code, message in expectations:
        result = run("--keyset", str(path), "verify", token, code=code)
        assert result.stderr.startswith(
            message[: message.find(" s ago")] if "s ago" in message else message
        ), result.stderr
    aead = ms.mint(keyset, 1)
    assert (
        "expected a jws token, got aead"
        in run("--keyset", str(path), "verify", "--format", "jws", aead, code=1).stderr
    )


# --- issue 16.4: a binding a format cannot carry is refused, never dropped ------------------


@pytest.mark.parametrize(
    ("fmt", "binding"),
    [
        pytest.param("aead", {"target": "deploy"}, id="aead-target-without-method"),
        pytest.param("jws", {"arguments": {"env": "prod"}}, id="jws-arguments-without-method"),
        pytest.param("mcp-ts", {"request_id": "req-1"}, id="mcp-ts-request-id"),
        pytest.param("mcp-ts", {"method": "tools/call", "target": "t"}, id="mcp-ts-method"),
        pytest.param(
            "mcp-py",
            {"request_id": "req-1", "method": "tools/call", "target": "t"},
            id="mcp-py-request-id-beside-method",
        ),
        pytest.param(
            "mcp-py", {"method": "tools/call", "target": "t", "bind": "b"}, id="mcp-py-bind"
        ),
    ],
)
def test_a_binding_the_format_cannot_carry_is_refused_at_mint(
    fmt: str, binding: dict[str, Any]
) -> None:
    keyset = ms.Keyset.generate((*OWN_ALGORITHMS, "mcp-py-v1", "mcp-ts-v1"))
    with pytest.raises(ValueError):  # noqa: PT011 - the messages differ per case
        ms.mint(keyset, "s", format=fmt, **binding)


@pytest.mark.parametrize(
    "binding",
    [{"target": "deploy"}, {"arguments": {"env": "prod"}}],
    ids=["target-without-method", "arguments-without-method"],
)
def test_a_verifier_stating_half_a_request_binding_is_refused(binding: dict[str, Any]) -> None:
    keyset = ms.Keyset.generate()
    token = ms.mint(keyset, "s")
    with pytest.raises(ValueError, match="method and target together"):
        ms.verify(keyset, token, **binding)


# --- issue 16.6: client data of any shape gets a library answer, never a Python error -------


def test_a_retry_naming_no_target_is_a_request_mismatch() -> None:
    from mrtr_state.sdk.mcp import input_required_result, open_retry

    keyset = ms.Keyset.generate(("A256GCM",))
    first = input_required_result(
        keyset, method="tools/call", params={"name": "deploy", "arguments": {}}, state="s"
    )
    for params in ({"requestState": first["requestState"]}, {"name": "", "requestState": "x"}):
        with pytest.raises(ms.RequestMismatch, match="carries no name"):
            open_retry(keyset, method="tools/call", params=params)
    with pytest.raises(ms.RequestMismatch, match="carries no uri"):
        open_retry(keyset, method="resources/read", params={"requestState": "x"})
    with pytest.raises(ms.MalformedToken):
        open_retry(keyset, method="tools/call", params=["not", "an", "object"])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "meta",
    [
        ["a", "list"],
        "text",
        {"io.modelcontextprotocol/clientCapabilities": ["elicitation"]},
        {"io.modelcontextprotocol/clientCapabilities": {"elicitation": ["form"]}},
        {"io.modelcontextprotocol/clientCapabilities": {"elicitation": None}},
        {"io.modelcontextprotocol/clientCapabilities": 7},
    ],
    ids=["list", "text", "caps-list", "elicitation-list", "elicitation-null", "caps-number"],
)
def test_odd_capability_shapes_are_capability_missing_not_a_crash(meta: Any) -> None:
    from mrtr_state.sdk.mcp import CapabilityMissing, check_capabilities

    requests = {
        "ask": {"method": "elicitation/create", "params": {"mode": ["form"]}},
        "sample": {"method": "sampling/createMessage", "params": {}},
    }
    with pytest.raises(CapabilityMissing):
        check_capabilities(meta, requests)


@pytest.mark.parametrize("fmt", ["aead", "jws", "jwe"])
@pytest.mark.parametrize(
    "principal", [b"alice", "al\ud800ice", 7], ids=["bytes", "lone-surrogate", "number"]
)
def test_a_principal_that_is_not_text_is_a_value_error(fmt: str, principal: Any) -> None:
    keyset = ms.Keyset.generate()
    with pytest.raises(ValueError, match="principal"):
        ms.mint(keyset, "s", principal=principal, format=fmt)
    token = ms.mint(keyset, "s", principal="alice", format=fmt)
    with pytest.raises(ValueError, match="principal"):
        ms.verify(keyset, token, principal=principal)


# --- issue 16.7: nothing untrusted reaches a terminal as control sequences -------------------

ESC = "\x1b]0;pwned\x07\x1b[2J\x9b31m\u202e"


def test_a_hostile_jws_header_member_is_escaped_in_every_message() -> None:
    from mrtr_state._encoding import b64url_encode
    from mrtr_state.cli import cli

    keyset = ms.Keyset.generate(("HS256",))
    header = b64url_encode(json.dumps({"alg": "HS256", ESC: 1}).encode())
    token = f"{header}.e30.{b64url_encode(b'x' * 32)}"
    with pytest.raises(ms.MalformedToken) as caught:
        ms.verify(keyset, token)
    assert "\x1b" not in str(caught.value) and "\\x1b" in str(caught.value)
    from click.testing import CliRunner

    runner = CliRunner()
    result = runner.invoke(
        cli, ["inspect", token], env={"MRTR_STATE_KEYSET_JSON": keyset.to_json()}
    )
    shown = result.stdout + result.stderr
    assert not any(ch in shown for ch in ("\x1b", "\x07", "\x9b", "\u202e")), shown


def test_hostile_method_names_in_an_audit_are_escaped() -> None:
    from mrtr_state.audit.capture import audit_capture

    request = {"jsonrpc": "2.0", "id": 1, "method": ESC, "params": {}}
    result = {
        "jsonrpc": "2.0",
        "id": 1,
        "result": {"resultType": "input_required", "inputRequests": {ESC: {"method": ESC}}},
    }
    report = audit_capture([json.dumps(request), json.dumps(result)], keyset=None)
    text = json.dumps([f.to_dict() for f in report.findings], ensure_ascii=False)
    assert report.findings and not any(ch in text for ch in ("\x1b", "\x07", "\x9b", "\u202e"))
    assert "\\x1b" in report.findings[0].message
