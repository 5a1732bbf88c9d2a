"""Request fingerprints and argument digests, checked against a token the MCP Python SDK made."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

import mrtr_state as ms
from mrtr_state._encoding import b64url_decode

from .conftest import shared_vector


def _sdk_plaintext(secret: str, token: str) -> dict[str, object]:
    """Open an mcp 2.3.0 requestState token by the recipe in DESIGN section 3."""
    key = HKDF(
        algorithm=hashes.SHA256(), length=32, salt=None, info=b"mcp/request-state/v1/aes-256-gcm"
    ).derive(secret.encode())
    raw = b64url_decode(token.removeprefix("v1."))
    assert raw[:4] == hashlib.sha256(b"mcp/request-state/v1/kid:" + key).digest()[:4]
    document: dict[str, object] = json.loads(
        AESGCM(key).decrypt(raw[4:16], raw[16:], b"v1." + raw[:4])
    )
    return document


def test_arguments_digest_matches_the_python_sdk() -> None:
    vectors = json.loads(shared_vector("mcp-sdk", "captured-tokens.json").read_text())
    checked = 0
    for entry in vectors["python_sdk"]:
        plaintext = _sdk_plaintext(entry["sealing_secret"], entry["token"])
        assert plaintext["a"] == ms.arguments_digest(entry["arguments"])
        assert plaintext["m"] == entry["method"]
        assert plaintext["t"] == entry["tool"]
        checked += 1
    assert checked >= 3


def test_fingerprints_differ_for_every_changed_part() -> None:
    base: dict[str, Any] = {
        "method": "tools/call",
        "target": "deploy",
        "arguments": {"env": "prod"},
    }
    changes: list[dict[str, Any]] = [
        {"method": "prompts/get"},
        {"target": "deploy2"},
        {"arguments": {"env": "prod "}},
        {"arguments": {"env": "prod", "x": None}},
        {"arguments": {}},
    ]
    seen = {ms.request_id(**base)}
    for change in changes:
        seen.add(ms.request_id(**{**base, **change}))
    assert len(seen) == 1 + len(changes)


def test_fingerprint_is_not_fooled_by_separator_games() -> None:
    assert ms.request_id(method="a", target="b:c") != ms.request_id(method="a:b", target="c")
