"""The Ruby, Rust (rmcp rs1, and rs2: the keyring of #1128, in rmcp 3.2.0) and PHP SDKs'
requestState tokens (the Java SDK's are in test_mcp_java.py).

Every case of ``tests/vectors/published/{ruby-sdk,rust-rmcp,php-sdk}`` was made by running the
SDK's own code, with its own verdict. Each verifies here, or is refused, as the SDK did, with the
bindings the case gives; the error the SDK named maps to ours. The one deliberate difference:
where an SDK's decoder is lenient (padding, the standard alphabet, non-zero trailing bits),
mrtr-state keeps one spelling per token and refuses (:data:`LENIENT`, said in the docs).

The SDKs cap no lifetime and the valid vectors live ten years, so the vectors run under a
verifier whose ``ttl_cap`` is lifted (``Policy(ttl_cap=None)``); the default cap refusing them,
by name, is a test of its own.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import mrtr_state as ms
from mrtr_state.keys.keyset import Key

from .conftest import VECTOR_REPORT, shared_vector
from .helpers import keys_import, run
from .sdk_vectors import (
    LENIENT,
    PHP,
    RMCP,
    RUBY,
    UNCAPPED,
    _b64,
    _php_keyset,
    _rmcp_keyset,
    _ruby_arguments,
    _ruby_keyset,
)

# --- Ruby -----------------------------------------------------------------------------------


# --- rmcp -----------------------------------------------------------------------------------


# --- PHP ------------------------------------------------------------------------------------


# --- lifetimes beyond the SDKs, and the report ------------------------------------------------


def test_the_default_cap_refuses_long_lived_and_never_expiring_sdk_tokens_by_name() -> None:
    ruby = RUBY[0]
    with pytest.raises(ms.InvalidClaims, match="ttl_cap"):
        ms.verify(
            _ruby_keyset(ruby),
            ruby["token"],
            method=ruby["method"],
            target=ruby["target"],
            arguments=_ruby_arguments(ruby),
        )
    never = next(c for c in RMCP if c["name"] == "no_ad_no_ttl_expiry_zero")
    with pytest.raises(ms.InvalidClaims, match="never expires"):
        ms.verify(_rmcp_keyset(never), never["token"])
    assert ms.verify(_rmcp_keyset(never), never["token"], policy=UNCAPPED).exp is None
    php = PHP[0]
    with pytest.raises(ms.InvalidClaims, match="ttl_cap"):
        ms.verify(_php_keyset(php), php["token"])


def test_vector_report() -> None:
    for name, cases in (("Ruby SDK", RUBY), ("rmcp", RMCP), ("PHP SDK", PHP)):
        accepted = sum(1 for c in cases if c["result"]["accepted"])
        lenient = sum(1 for c in cases if (name.split()[0].lower(), c["name"]) in LENIENT)
        VECTOR_REPORT.append(
            f"{name} requestState vectors: {len(cases)} cases, {accepted - lenient} accepted as "
            f"the SDK did, {len(cases) - accepted} refused as it did, {lenient} the SDK took "
            "only through a lenient decoder refused"
        )
    assert Path(shared_vector("ruby-sdk", "README.md")).exists()


# --- the CLI --------------------------------------------------------------------------------


def test_captured_sdk_tokens_through_the_cli(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # no keyset at the default path: inspect works without one
    ks = tmp_path / "keyset.json"
    k = ("--keyset", str(ks))
    ruby = RUBY[0]
    keys_import(ks, "mcp-rb-v1", _b64(ruby["key"]))
    rb = ["--method", ruby["method"], "--target", ruby["target"]]
    rb += ["--arguments", ruby["arguments_json"]]
    # ten years ahead: over the default cap, by name, until the cap is lifted for the run
    refused = run(*k, "verify", *rb, ruby["token"], code=1)
    assert "ttl_cap" in refused.stderr
    assert json.loads(run(*k, "verify", "--ttl-cap", "none", *rb, ruby["token"]).stdout) == "step-1"
    assert (
        "ttl_cap of 2592000 s"
        in run(*k, "verify", "--ttl-cap", "30d", *rb, ruby["token"], code=1).stderr
    )
    shown = json.loads(run(*k, "inspect", "--json", "--ttl-cap", "none", ruby["token"]).stdout)
    assert shown["format"] == "mcp-rb" and shown["verified"] is True
    assert any("opened by its key" in note for note in shown["notes"])
    unknown = json.loads(run("inspect", "--json", ruby["token"]).stdout)
    assert any("cannot tell" in note for note in unknown["notes"])

    ring = next(c for c in RMCP if c["name"] == "rs2_single_key_ring")
    ((kid, secret),) = ring["keyring"]["keys"].items()
    imported = keys_import(ks, "mcp-rs-v2", _b64(secret), "--kid", kid, "--json")
    assert json.loads(imported.stdout)["sdk_kid"] == kid
    assert f"rmcp:'{kid}'" in run(*k, "keys", "list").stdout
    bind = ring["associated_data_utf8"]
    out = run(*k, "verify", "--ttl-cap", "none", "--bind", bind, ring["token"])
    assert out.stdout.strip() == ring["payload"]  # not JSON: base64url, and said so
    assert "not JSON" in out.stderr
    assert "bind" in run(*k, "verify", "--ttl-cap", "none", ring["token"], code=1).stderr
    # a binding the format cannot carry: refused at mint (a usage error naming the format)
    php = PHP[0]
    keys_import(ks, "mcp-php-v1", _b64(php["key"]))
    assert "mcp-php" in run(*k, "mint", "--format", "mcp-php", "-p", "alice", code=2).stderr
    assert json.loads(run(*k, "verify", "--ttl-cap", "none", php["token"]).stdout) == php["data"]
    # rotation needs a finite cap
    config = tmp_path / "mrtr-state.toml"
    config.write_text('ttl_cap = "none"\n')
    config.chmod(0o600)
    assert "finite" in run(*k, "--config", str(config), "rotate", code=6).stderr


def test_keys_import_kid_is_for_rmcp_keyring_keys_only(tmp_path: Path) -> None:
    ks = tmp_path / "keyset.json"
    assert "--kid" in keys_import(ks, "mcp-rs-v2", b"k" * 32, code=2).stderr
    assert "drop --kid" in keys_import(ks, "mcp-rs-v1", b"k" * 32, "--kid", "x", code=2).stderr
    assert "1-255" in keys_import(ks, "mcp-rs-v2", b"k" * 32, "--kid", "x" * 256, code=2).stderr
    assert not ks.exists()  # nothing written by a refused import


def test_rotation_steps_sdk_keys_and_gives_new_rmcp_ring_keys_an_id() -> None:
    from mrtr_state.keys import lifecycle as life

    start = [
        Key.from_secret("mcp-rs-v2", b"k" * 32, sdk_kid="2026-12", now=0),
        Key.from_secret("mcp-rb-v1", b"r" * 32, now=0),
        Key.from_secret("mcp-php-v1", b"h" * 32, now=0),
    ]
    keyset = ms.Keyset(start)
    day = 86400
    moments = (40 * day, 40 * day + 4000, 40 * day + 9000)
    for moment in moments:
        keyset, _changes = life.rotate(keyset, now=moment, propagation=3600, retention=3660)
    primaries = {key.alg: key for key in keyset if key.status == "primary"}
    assert set(primaries) == {"mcp-rs-v2", "mcp-rb-v1", "mcp-php-v1"}
    assert all(key.status == "retired" for key in keyset if key in start or key.since.get("active"))
    ring_key = primaries["mcp-rs-v2"]
    assert ring_key.sdk_kid is not None and ring_key.sdk_kid.startswith("mrtr-")
    for fmt in ("mcp-rs2", "mcp-php"):
        token = ms.mint(keyset, {"a": 1}, format=fmt)
        assert ms.verify(keyset, token).state == {"a": 1}
    # the old ring key is retired: its tokens are refused by name
    old = ms.mint(ms.Keyset(start[:1]), {"a": 1}, format="mcp-rs2")
    with pytest.raises(ms.KeyRetired):
        ms.verify(keyset, old)
