"""The official SDKs' wire formats: tokens captured from mcp 2.3.0 and @modelcontextprotocol/server
2.4.0, through the library and the CLI, and our own mcp-py/mcp-ts tokens checked by the recipe."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

import mrtr_state as ms
from mrtr_state._encoding import b64url_decode
from mrtr_state.keyset import Key

from .conftest import shared_vector
from .helpers import run
from .test_contract import mutations

#: The captured tokens were minted with a TTL of years (to stay verifiable): a verifier must raise
#: its ttl_cap to accept them, as the default cap refuses such lifetimes.
CAPTURE = ms.Policy(ttl_cap=400_000_000)
CAPTURE_ENV = {"MRTR_STATE_TTL_CAP": "400000000"}


def captured() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(shared_vector("mcp-sdk", "captured-tokens.json").read_text())
    return data


def sdk_keyset(secrets: list[str], alg: str) -> ms.Keyset:
    keys = []
    for n, secret in enumerate(secrets):
        keys.append(Key.from_secret(alg, secret.encode(), status="active" if n else "primary"))
    return ms.Keyset(keys)


def py_binding(entry: dict[str, Any]) -> dict[str, Any]:
    return {
        "method": entry["method"],
        "target": entry["tool"],
        "arguments": entry["arguments"],
        "audience": entry["audience"],
    }


# --- Python SDK (mcp-py) -------------------------------------------------------------------


def test_captured_python_sdk_tokens_give_their_expected_result() -> None:
    for entry in captured()["python_sdk"]:
        keyset = sdk_keyset(entry["secrets"], "mcp-py-v1")
        assert ms.inspect(entry["token"]).format == "mcp-py"
        if entry["ttl"] <= 2:
            with pytest.raises(ms.ExpiredToken):
                ms.verify(keyset, entry["token"], policy=CAPTURE, **py_binding(entry))
            continue
        claims = ms.verify(keyset, entry["token"], policy=CAPTURE, **py_binding(entry))
        assert claims.state == entry["state"], entry["name"]
        assert claims.to_dict()["m"] == "tools/call"


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"method": "prompts/get"}, ms.RequestMismatch),
        ({"target": "destroy"}, ms.RequestMismatch),
        ({"arguments": {"env": "dev"}}, ms.RequestMismatch),
        ({"arguments": {}}, ms.RequestMismatch),
        ({"method": None, "target": None, "arguments": None}, ms.RequestMismatch),
        ({"audience": "other"}, ms.AudienceMismatch),
        ({"audience": None}, ms.AudienceMismatch),
        ({"principal": "alice"}, ms.PrincipalMismatch),
    ],
)
def test_captured_python_sdk_token_with_any_binding_changed_is_refused(
    change: dict[str, Any], error: type[ms.InvalidToken]
) -> None:
    entry = captured()["python_sdk"][0]
    keyset = sdk_keyset(entry["secrets"], "mcp-py-v1")
    with pytest.raises(error):
        ms.verify(keyset, entry["token"], policy=CAPTURE, **{**py_binding(entry), **change})


def test_captured_python_sdk_token_with_any_character_changed_is_refused() -> None:
    entry = captured()["python_sdk"][0]
    keyset = sdk_keyset(entry["secrets"], "mcp-py-v1")
    for mutated in mutations(entry["token"]):
        with pytest.raises(ms.InvalidToken):
            ms.verify(keyset, mutated, policy=CAPTURE, **py_binding(entry))


def test_a_ring_key_that_did_not_seal_is_refused_when_it_is_the_only_one() -> None:
    entry = next(e for e in captured()["python_sdk"] if e["name"] == "py-c")
    only_old = sdk_keyset([entry["secrets"][1]], "mcp-py-v1")
    with pytest.raises(ms.UnknownKey):
        ms.verify(only_old, entry["token"], policy=CAPTURE, **py_binding(entry))


def _open_like_the_sdk(secret: bytes, token: str) -> dict[str, Any]:
    key = HKDF(
        algorithm=hashes.SHA256(), length=32, salt=None, info=b"mcp/request-state/v1/aes-256-gcm"
    ).derive(secret)
    raw = b64url_decode(token.removeprefix("v1."))
    assert raw[:4] == hashlib.sha256(b"mcp/request-state/v1/kid:" + key).digest()[:4]
    document: dict[str, Any] = json.loads(
        AESGCM(key).decrypt(raw[4:16], raw[16:], b"v1." + raw[:4])
    )
    return document


def test_our_mcp_py_tokens_follow_the_sdk_recipe_and_bind_like_it() -> None:
    secret = b"our-own-operator-secret-of-at-least-32-bytes"
    keyset = sdk_keyset([secret.decode()], "mcp-py-v1")
    request: dict[str, Any] = {
        "method": "tools/call",
        "target": "deploy",
        "arguments": {"env": "prod", "é": 1},
    }
    token = ms.mint(
        keyset,
        "state-text",
        format="mcp-py",
        audience="fleet",
        principal="alice",
        ttl=60,
        **request,
    )
    envelope = _open_like_the_sdk(secret, token)
    assert list(envelope) == ["v", "iat", "exp", "m", "t", "a", "s", "aud", "p"]
    assert isinstance(envelope["iat"], float) and envelope["exp"] == envelope["iat"] + 60
    assert envelope["a"] == ms.arguments_digest(request["arguments"])
    salt_and_tag = b64url_decode(envelope["p"])
    assert (
        salt_and_tag[8:]
        == hashlib.sha256(b"mcp/request-state/principal:" + salt_and_tag[:8] + b"alice").digest()[
            :16
        ]
    )
    claims = ms.verify(keyset, token, audience="fleet", principal="alice", **request)
    assert claims.state == "state-text"
    with pytest.raises(ms.PrincipalMismatch):
        ms.verify(keyset, token, audience="fleet", principal="bob", **request)
    with pytest.raises(ValueError, match="string"):
        ms.mint(keyset, {"not": "a string"}, format="mcp-py", **request)
    with pytest.raises(ValueError, match="bind a request"):
        ms.mint(keyset, "x", format="mcp-py")
    with pytest.raises(ValueError, match="SDK's requestStates, not sealed payloads"):
        ms.seal(keyset, b"raw codec bytes", format="mcp-py")  # it would pass for a requestState
    with pytest.raises(ms.WrongFormat, match="not sealed payloads; verify"):
        ms.unseal(keyset, token)


def test_sdk_numbers_must_be_real_numbers() -> None:
    secret = b"x" * 40
    keyset = sdk_keyset([secret.decode()], "mcp-py-v1")
    key = keyset.primary("mcp-py-v1")
    from mrtr_state.registry import format_named

    fmt = format_named("mcp-py")
    base = {"v": 1, "m": "tools/call", "t": "t", "a": ms.arguments_digest({}), "s": "x"}
    for iat, exp in ((True, time.time() + 60), (time.time(), True), (time.time(), "9e9")):
        token = fmt.seal(key, json.dumps({**base, "iat": iat, "exp": exp}).encode())
        with pytest.raises(ms.TimeWindowError):
            ms.verify(keyset, token, method="tools/call", target="t")
    nan = fmt.seal(key, json.dumps({**base, "iat": time.time(), "exp": float("nan")}).encode())
    with pytest.raises(ms.InvalidClaims):
        ms.verify(keyset, nan, method="tools/call", target="t")


# --- TypeScript SDK (mcp-ts) ---------------------------------------------------------------


def test_captured_typescript_sdk_tokens_give_their_expected_result() -> None:
    for entry in captured()["typescript_sdk"]:
        keyset = sdk_keyset([entry["key"]], "mcp-ts-v1")
        bind = entry["bind"]
        if entry["ttlSeconds"] <= 2:
            with pytest.raises(ms.ExpiredToken):
                ms.verify(keyset, entry["token"], policy=CAPTURE, bind=bind)
            continue
        assert (
            ms.verify(keyset, entry["token"], policy=CAPTURE, bind=bind).state
            == entry["verified_payload"]
        )
        if bind is not None:
            with pytest.raises(ms.RequestMismatch, match="bind"):
                ms.verify(keyset, entry["token"], policy=CAPTURE, bind=bind + "x")
            with pytest.raises(ms.RequestMismatch, match="bind"):
                ms.verify(keyset, entry["token"], policy=CAPTURE)
        else:
            with pytest.raises(ms.RequestMismatch, match="bind"):
                ms.verify(keyset, entry["token"], policy=CAPTURE, bind="tools/call")
        for mutated in mutations(entry["token"]):
            with pytest.raises(ms.InvalidToken):
                ms.verify(keyset, mutated, policy=CAPTURE, bind=bind)
        wrong_key = sdk_keyset(["z" * 40], "mcp-ts-v1")
        with pytest.raises(ms.BadSignature):
            ms.verify(wrong_key, entry["token"], policy=CAPTURE, bind=bind)


def test_our_mcp_ts_tokens_follow_the_sdk_recipe() -> None:
    secret = "k1-" + "a" * 61
    keyset = sdk_keyset([secret], "mcp-ts-v1")
    token = ms.mint(keyset, {"step": 2}, format="mcp-ts", bind="tools/call", ttl=60)
    prefix, body, mac = token.split(".")
    expected = hmac.new(secret.encode(), f"{prefix}.{body}".encode(), "sha256").digest()
    assert base64.urlsafe_b64encode(expected).rstrip(b"=").decode() == mac
    document = json.loads(b64url_decode(body))
    assert list(document) == ["p", "exp", "b"] and document["p"] == {"step": 2}
    tag = hmac.new(secret.encode(), b"mcp.requestState.bind:tools/call", "sha256").digest()[:16]
    assert document["b"] == base64.urlsafe_b64encode(tag).rstrip(b"=").decode()
    assert ms.verify(keyset, token, bind="tools/call").state == {"step": 2}
    with pytest.raises(ValueError, match="mcp-ts"):
        ms.mint(keyset, 1, format="mcp-ts", principal="alice")


# --- through the CLI -----------------------------------------------------------------------


def test_captured_tokens_through_the_cli(tmp_path: Path) -> None:
    path = tmp_path / "keyset.json"
    data = captured()
    for secret in data["python_sdk"][1]["secrets"]:  # py-c's ring: k2 then k1
        (tmp_path / "secret").write_text(secret + "\n")
        run(
            "--keyset",
            str(path),
            "keys",
            "import",
            "--alg",
            "mcp-py-v1",
            "--secret-file",
            str(tmp_path / "secret"),
        )
    (tmp_path / "ts-secret").write_text(data["typescript_sdk"][0]["key"])
    run(
        "--keyset",
        str(path),
        "keys",
        "import",
        "--alg",
        "mcp-ts-v1",
        "--secret-file",
        str(tmp_path / "ts-secret"),
    )
    for entry in data["python_sdk"]:
        flags = [
            "--method",
            entry["method"],
            "--target",
            entry["tool"],
            "--arguments",
            json.dumps(entry["arguments"]),
            "--audience",
            entry["audience"],
        ]
        if entry["ttl"] <= 2:
            run("--keyset", str(path), "verify", *flags, entry["token"], code=3, env=CAPTURE_ENV)
            continue
        over_cap = run("--keyset", str(path), "verify", *flags, entry["token"], code=1)
        assert "exceeds this verifier's ttl_cap of 3600 s" in over_cap.stderr
        out = run("--keyset", str(path), "verify", *flags, entry["token"], env=CAPTURE_ENV)
        assert out.stdout == json.dumps(entry["state"]) + "\n"
        run(
            *("--keyset", str(path), "verify", *flags[:-1], "elsewhere", entry["token"]),
            code=4,
            env=CAPTURE_ENV,
        )
        inspected = run("--keyset", str(path), "inspect", "--json", entry["token"], env=CAPTURE_ENV)
        view = json.loads(inspected.stdout)
        assert view["format"] == "mcp-py" and view["verified"] is True
        assert view["claims"]["s"] == entry["state"]
    for entry in data["typescript_sdk"]:
        bind = ["--bind", entry["bind"]] if entry["bind"] else []
        expected_code = 3 if entry["ttlSeconds"] <= 2 else 0
        out = run(
            *("--keyset", str(path), "verify", "--json", *bind, entry["token"]),
            code=expected_code,
            env=CAPTURE_ENV,
        )
        if expected_code == 0:
            assert json.loads(out.stdout)["claims"]["p"] == entry["verified_payload"]
    minted = run(
        "--keyset",
        str(path),
        "mint",
        "--format",
        "mcp-py",
        "--method",
        "tools/call",
        "--target",
        "deploy",
        "--arguments",
        '{"env":"prod"}',
        "--audience",
        "fleet",
        "--state",
        '"from-cli"',
    ).stdout.strip()
    assert (
        run(
            "--keyset",
            str(path),
            "verify",
            "--method",
            "tools/call",
            "--target",
            "deploy",
            "--arguments",
            '{"env":"prod"}',
            "--audience",
            "fleet",
            minted,
        ).stdout
        == '"from-cli"\n'
    )
    short = run(
        "--keyset",
        str(path),
        "keys",
        "import",
        "--alg",
        "mcp-py-v1",
        "--secret-file",
        "-",
        input="too-short",
        code=2,
    )
    assert "32..4096" in short.stderr


def test_sdk_tokens_refuse_bindings_they_cannot_carry() -> None:
    ts = sdk_keyset(["k1-" + "a" * 61], "mcp-ts-v1")
    token = ms.mint(ts, {"x": 1}, format="mcp-ts", ttl=60)
    refusals: list[tuple[dict[str, Any], type[ms.InvalidToken]]] = [
        ({"principal": "alice"}, ms.PrincipalMismatch),
        ({"audience": "fleet"}, ms.AudienceMismatch),
        ({"request_id": "r"}, ms.RequestMismatch),
        ({"method": "tools/call", "target": "t"}, ms.RequestMismatch),
    ]
    for extra, error in refusals:
        with pytest.raises(error, match="mcp-ts tokens"):
            ms.verify(ts, token, **extra)
    py = sdk_keyset(["p" * 40], "mcp-py-v1")
    py_token = ms.mint(py, "s", format="mcp-py", method="tools/call", target="t")
    with pytest.raises(ms.RequestMismatch, match="mcp-py tokens carry no request id"):
        ms.verify(py, py_token, request_id="r")
    # a token chosen by the client never turns a verifier's binding into a crash
    with pytest.raises(ms.RequestMismatch, match="mcp-py tokens carry no bind value"):
        ms.verify(py, py_token, method="tools/call", target="t", bind="b")


_LATER = 1_900_000_000
#: mcp-ts bodies only a holder of the secret could sign, and what verify makes of each when
#: nothing is stated and when a bind value is: each refusal is named, as text and as bytes.
CRAFTED_TS_BODIES: list[tuple[bytes, Any, Any]] = [
    # authenticated: read as the SDK's JSON.parse reads it, the last of two members winning
    (b'{"p":1,"exp":1,"exp":%d}' % _LATER, None, ms.RequestMismatch),
    (b'{"p":1,"exp":%d,"exp":1}' % _LATER, ms.ExpiredToken, ms.ExpiredToken),
    (b'{"p":1,"exp":%d,"b":null}' % _LATER, None, ms.RequestMismatch),  # as the SDK: no tag
    (b'{"p":1,"exp":%d,"x":1}' % _LATER, ms.InvalidClaims, ms.InvalidClaims),
    (b'{"p":1,"exp":%d.5}' % _LATER, None, ms.RequestMismatch),  # a float exp, as in JS
    (b'{"p":1,"exp":NaN}', ms.InvalidClaims, ms.InvalidClaims),
    (b'{"p":1,"exp":%d}' % (_LATER + 10**6), ms.InvalidClaims, ms.InvalidClaims),  # over the cap
    (b'{"p":1,"exp":%d}' % (_LATER - 10**6), ms.ExpiredToken, ms.ExpiredToken),
    (b'{"p":1,"exp":true}', ms.ExpiredToken, ms.ExpiredToken),  # not a number: never valid
    (b'{"exp":%d}' % _LATER, ms.InvalidClaims, ms.InvalidClaims),
    (
        b'{"p":' + b"[" * 2000 + b"]" * 2000 + b',"exp":%d}' % _LATER,
        ms.MalformedToken,
        ms.MalformedToken,
    ),
    (b' {"p":1,"exp":%d}' % _LATER, ms.InvalidClaims, ms.InvalidClaims),
    (b"[1]", ms.InvalidClaims, ms.InvalidClaims),
    (b'{"p":1,"exp":%d,"b":"\xc3\xbcn\xc3\xaf"}' % _LATER, ms.RequestMismatch, ms.RequestMismatch),
    (b'{"p":1,"exp":%d,"b":7}' % _LATER, ms.RequestMismatch, ms.RequestMismatch),
]


@pytest.mark.parametrize(("body", "unbound", "bound"), CRAFTED_TS_BODIES)
def test_crafted_mcp_ts_bodies_meet_their_named_fate(body: bytes, unbound: Any, bound: Any) -> None:
    keyset = ms.Keyset([Key.from_secret("mcp-ts-v1", b"t" * 32)])
    token = ms.registry.format_named("mcp-ts").seal(keyset.primary("mcp-ts-v1"), body)
    now = _LATER - 60
    cases: list[tuple[dict[str, Any], Any]] = [({}, unbound), ({"bind": "alice"}, bound)]
    for stated, expected in cases:
        for form in (token, token.encode()):
            if expected is None:
                assert ms.verify(keyset, form, now=now, **stated).state == 1
            else:
                with pytest.raises(expected) as caught:
                    ms.verify(keyset, form, now=now, **stated)
                assert type(caught.value) is expected, (body, stated, caught.value)
