"""The one format table: each entry names its wire, envelope and key algorithm once; detection
finds a token's shape; where formats share a shape, the key that opens a token names its format.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from typing import Any

import pytest

import mrtr_state as ms
from mrtr_state.keys.keyset import Key
from mrtr_state.tokens import registry
from mrtr_state.tokens.registry import (
    FORMAT_NAMES,
    KEY_ALGORITHMS,
    OWN_ALGORITHMS,
    format_named,
    key_algorithm_of,
    shape_of,
)

from .conftest import NOW
from .helpers import run

REQUEST: dict[str, Any] = {"method": "tools/call", "target": "deploy"}
#: what each format binds when minted here (the Python and Ruby SDKs always bind a request)
BOUND: dict[str, dict[str, Any]] = {"mcp-py": REQUEST, "mcp-rb": REQUEST, "mcp-java": REQUEST}
STATES: dict[str, Any] = {"mcp-py": "s", "mcp-rb": "s", "mcp-php": {"k": 1}, "mcp-java": "s"}


def _everything() -> ms.Keyset:
    made = ms.Keyset.generate(
        (
            *OWN_ALGORITHMS,
            "mcp-py-v1",
            "mcp-ts-v1",
            "mcp-rb-v1",
            "mcp-rs-v1",
            "mcp-php-v1",
            "mcp-java-v1",
        ),
        now=NOW - 60,
    )
    return made.with_keys([*made, Key.generate("mcp-rs-v2", kid="", sdk_kid="ring")])


EVERYTHING = _everything()


def _token(fmt: str, keyset: ms.Keyset = EVERYTHING) -> str:
    return ms.mint(keyset, STATES.get(fmt, 1), format=fmt, now=NOW, **BOUND.get(fmt, {}))


def test_each_entry_names_its_parts_once_and_they_are_given_what_they_use() -> None:
    for name in FORMAT_NAMES:
        fmt = format_named(name)
        alg = key_algorithm_of(name)
        assert (fmt.name, fmt.alg, fmt.wire.name, fmt.wire.alg) == (name, alg, name, alg)
        assert fmt.envelope.name == name
        assert KEY_ALGORITHMS[alg].format == name
        assert fmt.confidential == fmt.wire.confidential
    assert OWN_ALGORITHMS == ("A256GCM", "HS256", "dir+A256GCM")
    with pytest.raises(ValueError, match="unknown format 'nope'"):
        format_named("nope")
    with pytest.raises(ValueError, match="unknown format 'nope'"):
        key_algorithm_of("nope")


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_every_token_is_detected_as_a_shape_its_format_is_written_in(fmt: str) -> None:
    token = _token(fmt)
    assert fmt in shape_of(token).names
    claims = ms.verify(EVERYTHING, token, now=NOW, **BOUND.get(fmt, {}))
    assert (claims.format, claims.kid) == (fmt, EVERYTHING.primary(key_algorithm_of(fmt)).kid)


def test_the_python_and_ruby_sdks_share_one_shape() -> None:
    shape = shape_of(_token("mcp-py"))
    assert shape is shape_of(_token("mcp-rb"))
    assert (shape.names, shape.name) == (("mcp-py", "mcp-rb"), "mcp-py or mcp-rb")
    # two shapes are shared: v1. blobs (mcp-py, mcp-rb) and eyJ pairs (mcp-php, mcp-java)
    assert len({id(shape_of(_token(name))) for name in FORMAT_NAMES}) == len(FORMAT_NAMES) - 2


@pytest.mark.parametrize("text", ["", "x", "ms2.abc", "a.b.c.d.e.f", "v1.a.b.c", "abc.def"])
def test_a_token_of_no_known_shape_is_refused_by_name(text: str) -> None:
    with pytest.raises(ms.MalformedToken, match="not a requestState token of any known format"):
        shape_of(text)


def test_the_key_that_opens_a_shared_shape_names_its_format() -> None:
    """A ``v1.`` blob is the Python SDK's when an mcp-py key's id opens it, else the Ruby SDK's
    when an mcp-rb key does; the key decides, in the table's order."""
    rb_only = ms.Keyset([k for k in EVERYTHING if k.alg == "mcp-rb-v1"])
    py_only = ms.Keyset([k for k in EVERYTHING if k.alg == "mcp-py-v1"])
    rb_token, py_token = _token("mcp-rb"), _token("mcp-py")
    assert ms.verify(rb_only, rb_token, now=NOW, **REQUEST).format == "mcp-rb"
    assert ms.verify(py_only, py_token, now=NOW, **REQUEST).format == "mcp-py"
    # a format whose keys cannot open the token is passed over; every one refusing it gives a
    # bad tag naming each format's reason when a key was tried ...
    with pytest.raises(ms.BadSignature, match=r"^mcp-py: unknown key id [0-9a-f]{8}; mcp-rb: "):
        ms.verify(rb_only, py_token, now=NOW, **REQUEST)
    # ... else the first format's own refusal, as it is
    with pytest.raises(ms.UnknownKey, match=r"^unknown key id [0-9a-f]{8}$"):
        ms.verify(py_only, rb_token, now=NOW, **REQUEST)
    # a stated format is checked against the one the key named
    with pytest.raises(ms.WrongFormat, match="expected a mcp-py token, got mcp-rb"):
        ms.verify(EVERYTHING, rb_token, now=NOW, format="mcp-py", **REQUEST)
    with pytest.raises(ms.WrongFormat, match="expected a aead token, got mcp-py or mcp-rb"):
        ms.verify(EVERYTHING, rb_token, now=NOW, format="aead", **REQUEST)


def test_the_php_and_java_sdks_share_one_shape_and_the_key_names_the_format() -> None:
    """The Java SDK's format joined the PHP SDK's shape through its entry alone: detection
    gives both, in the table's order, and the key that opens a token names it."""
    php_token, java_token = _token("mcp-php"), _token("mcp-java")
    shape = shape_of(java_token)
    assert shape is shape_of(php_token)
    assert (shape.names, shape.name) == (("mcp-php", "mcp-java"), "mcp-php or mcp-java")
    assert KEY_ALGORITHMS["mcp-java-v1"].format == "mcp-java"
    assert KEY_ALGORITHMS["mcp-java-v1"].kid is not None  # named by its secret: no id in tokens
    php_only = ms.Keyset([k for k in EVERYTHING if k.alg == "mcp-php-v1"])
    java_only = ms.Keyset([k for k in EVERYTHING if k.alg == "mcp-java-v1"])
    assert ms.verify(java_only, java_token, now=NOW, **REQUEST).format == "mcp-java"
    assert ms.verify(EVERYTHING, java_token, now=NOW, **REQUEST).format == "mcp-java"
    assert ms.verify(EVERYTHING, php_token, now=NOW).format == "mcp-php"
    # each format's keys tried, each MAC failing: a bad MAC naming both
    with pytest.raises(ms.BadSignature, match=r"^mcp-php: signature mismatch .*; mcp-java: "):
        ms.verify(php_only, java_token, now=NOW, **REQUEST)
    # a format with no key at all is passed over for the refusal of one that had keys: a
    # padded payload whose MAC the Java key checks is malformed, not "no mcp-php-v1 key"
    body = base64.urlsafe_b64encode(b'{"v":1}').decode()
    secret = java_only.primary("mcp-java-v1").secret
    mac = hmac.new(secret, body.encode(), hashlib.sha256).digest()
    forged = body + "." + base64.urlsafe_b64encode(mac).decode().rstrip("=")
    assert body.endswith("=") and shape_of(forged) is shape
    with pytest.raises(ms.MalformedToken, match=r"^mcp-java body: "):
        ms.verify(java_only, forged, now=NOW, **REQUEST)
    with pytest.raises(ms.UnknownKey, match="no usable mcp-php-v1 key"):
        ms.verify(ms.Keyset([k for k in EVERYTHING if k.alg == "A256GCM"]), java_token, now=NOW)


def test_key_algorithms_say_what_secrets_they_take_and_which_ids_they_imply() -> None:
    assert registry.secret_rule("A256GCM") == "exactly 32"
    assert registry.secret_rule("mcp-ts-v1") == "32..4096"
    assert registry.secret_length_ok("mcp-rb-v1", b"k" * 32)
    assert not registry.secret_length_ok("mcp-rb-v1", b"k" * 33)
    assert registry.derived_kid("A256GCM", b"k" * 32) is None
    secret = b"s" * 40
    assert registry.derived_kid("mcp-ts-v1", secret) == Key.from_secret("mcp-ts-v1", secret).kid
    assert registry.sdk_kid_problem("mcp-rs-v2", None) == (
        "mcp-rs-v2 keys need the SDK key id their tokens carry (sdk_kid)"
    )
    assert registry.sdk_kid_problem("A256GCM", "x", "--kid") == (
        "A256GCM keys carry no SDK key id (drop --kid)"
    )


def test_token_text_caps_and_normalises_before_anything_else() -> None:
    assert registry.token_text(b"ms1.abc", 64) == "ms1.abc"
    with pytest.raises(ms.OversizedToken):
        registry.token_text("x" * 65, 64)
    with pytest.raises(ms.MalformedToken, match="non-ASCII"):
        registry.token_text("ms1.é", 64)
    with pytest.raises(TypeError):
        registry.token_text(7, 64)  # type: ignore[arg-type]


def test_a_state_handle_given_as_a_token_is_told_apart_from_garbage() -> None:
    """Found by a review: `verify mh1...` without --state-store said only that the text is no
    token of any known format. The library names the remedy; the CLI words the option."""
    keyset = ms.Keyset.generate(("A256GCM",))
    handle = "mh1." + "A" * 27
    with pytest.raises(ms.MalformedToken, match="a state handle, not a token") as caught:
        ms.verify(keyset, handle, request_id="r")
    assert caught.value.remedy == ("use_state_store", {})
    with pytest.raises(ms.MalformedToken, match="not a requestState token of any known format"):
        ms.verify(keyset, "mh2." + "A" * 27, request_id="r")
    shown = run("inspect", handle, code=1)
    assert "a state handle, not a token" in shown.stderr and "--state-store URL" in shown.stderr
