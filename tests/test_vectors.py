"""Published vectors: Wycheproof through our primitive wrappers and verifiers, RFC 7520 5.6."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest

import mrtr_state as ms
from mrtr_state._encoding import b64url_decode
from mrtr_state._primitives import AESGCM, gcm_open, hmac_key, mac_matches
from mrtr_state.tokens.formats import decode_segment
from mrtr_state.tokens.formats._jose import split_compact
from mrtr_state.tokens.formats.jwe import decrypt_compact

from .conftest import NOW, VECTOR_REPORT, shared_vector


def wycheproof(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(shared_vector("wycheproof", name).read_text())
    return data


def test_wycheproof_hmac_sha256_through_our_mac_check() -> None:
    outcome: Counter[str] = Counter()
    for group in wycheproof("hmac_sha256_test.json")["testGroups"]:
        if group["keySize"] != 256 or group["tagSize"] != 256:
            continue
        for case in group["tests"]:
            keyed = hmac_key(bytes.fromhex(case["key"]))
            matches = mac_matches(keyed, bytes.fromhex(case["msg"]), bytes.fromhex(case["tag"]))
            assert matches == (case["result"] == "valid"), case["tcId"]
            outcome[case["result"]] += 1
    assert outcome["valid"] > 0
    assert outcome["invalid"] > 0
    VECTOR_REPORT.append(
        f"wycheproof HMAC-SHA256 (256-bit key and tag): {sum(outcome.values())} "
        f"run, {outcome['valid']} accepted, {outcome['invalid']} rejected"
    )


def test_wycheproof_aes_gcm_through_our_open_wrapper() -> None:
    outcome: Counter[str] = Counter()
    for group in wycheproof("aes_gcm_test.json")["testGroups"]:
        if (group["keySize"], group["ivSize"], group["tagSize"]) != (256, 96, 128):
            continue
        for case in group["tests"]:
            cipher = AESGCM(bytes.fromhex(case["key"]))
            sealed = bytes.fromhex(case["ct"]) + bytes.fromhex(case["tag"])
            arguments = (bytes.fromhex(case["iv"]), sealed, bytes.fromhex(case["aad"]))
            if case["result"] == "valid":
                assert gcm_open(cipher, *arguments) == bytes.fromhex(case["msg"]), case["tcId"]
            else:
                with pytest.raises(ms.BadSignature):
                    gcm_open(cipher, *arguments)
            outcome[case["result"]] += 1
    assert set(outcome) <= {"valid", "invalid"}
    assert outcome["invalid"] > 0
    VECTOR_REPORT.append(
        f"wycheproof AES-256-GCM (96-bit IV, 128-bit tag): "
        f"{sum(outcome.values())} run, {outcome['valid']} decrypted, "
        f"{outcome['invalid']} rejected"
    )


def _jws_signature_holds(token: str, secret: bytes) -> bool:
    """The HS256 compact checks our jws format runs, without its exact-header rule."""
    try:
        header, payload, signature = split_compact(token, 3, "jws")
        decode_segment(header, "header")
        decode_segment(payload, "payload")
        mac = decode_segment(signature, "signature")
    except ms.InvalidToken:
        return False
    return len(mac) == 32 and mac_matches(
        hmac_key(secret), f"{header}.{payload}".encode("ascii"), mac
    )


def test_wycheproof_jws() -> None:
    keyset = ms.Keyset.generate(now=NOW)
    counts: Counter[str] = Counter()
    known_defects = {367, 370, 372, 373}  # see tests/vectors/published/README.md
    for group in wycheproof("json_web_signature_test.json")["testGroups"]:
        private = group.get("private", {})
        hs256 = private.get("alg") == "HS256" and private.get("kty") == "oct"
        secret = b64url_decode(private["k"]) if hs256 else b""
        for case in group["tests"]:
            token = case["jws"]
            # Our verifier: none of these headers is ours, so every one is refused, never raised
            # as anything but InvalidToken.
            with pytest.raises(ms.InvalidToken):
                ms.verify(keyset, token, now=NOW)
            counts["refused by verify"] += 1
            if hs256 and case["tcId"] not in known_defects:
                assert _jws_signature_holds(token, secret) == (case["result"] == "valid"), (
                    case["tcId"],
                    case["comment"],
                )
                counts[f"HS256 signature check {case['result']}"] += 1
    assert counts["HS256 signature check valid"] >= 1
    VECTOR_REPORT.append(
        f"wycheproof JWS: {counts['refused by verify']} cases, all refused by verify "
        "(foreign headers); HS256 compact signature check: "
        f"{counts['HS256 signature check valid']} valid accepted, "
        f"{counts['HS256 signature check invalid']} invalid rejected"
    )


def test_wycheproof_jwe_is_refused_before_any_key_use() -> None:
    keyset = ms.Keyset.generate(now=NOW)
    refused: Counter[str] = Counter()
    for group in wycheproof("json_web_encryption_test.json")["testGroups"]:
        for case in group["tests"]:
            with pytest.raises(ms.MalformedToken):
                ms.verify(keyset, case["jwe"], now=NOW)
            refused[case["result"]] += 1
    VECTOR_REPORT.append(
        f"wycheproof JWE: {sum(refused.values())} cases "
        f"({refused['invalid']} invalid, {refused['valid']} valid of algorithms "
        "we never accept), all refused by their header"
    )


def test_rfc7520_section_5_6_decrypts_through_our_jwe_decoder() -> None:
    vector = json.loads(shared_vector("jose", "rfc7520-5.6-dir-a128gcm.json").read_text())
    secret = b64url_decode(vector["key"]["k"])
    header, plaintext = decrypt_compact(vector["compact"], secret, allowed_enc={"A128GCM"})
    assert plaintext.decode("utf-8") == vector["plaintext"]
    assert header == vector["protected"]
    with pytest.raises(ms.MalformedToken, match="A128GCM is not accepted"):
        decrypt_compact(vector["compact"], secret)  # the default allows A256GCM only
    tampered = vector["compact"][:-3] + ("AAA" if vector["compact"][-3:] != "AAA" else "BAA")
    with pytest.raises(ms.InvalidToken):
        decrypt_compact(tampered, secret, allowed_enc={"A128GCM"})
    VECTOR_REPORT.append("RFC 7520 5.6 (dir + A128GCM): decrypted to the published plaintext")
