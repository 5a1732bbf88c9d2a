"""Generate tests/vectors/{aead,jws,jwe}.json: published test vectors for mrtr-state's formats.

    python scripts/make_vectors.py          # rewrites the files; the test suite checks them

Every random byte (nonces, jti, principal-tag salts) comes from a seeded stream through the
private ``mrtr_state._entropy.deterministic`` seam, and keys are fixed, so the output is the same
on every run and machine. Implementations in other languages can verify each ``token`` with
``key`` at ``now`` under ``bindings`` and must reach ``expected``: ``"ok"`` with exactly
``claims``, or the refusal named by an error code of DESIGN section 6.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import mrtr_state as ms
from mrtr_state._encoding import b64url_decode
from mrtr_state._entropy import deterministic
from mrtr_state.tokens.registry import format_named

NOW = 1_800_000_000
KIDS = {"aead": "0a0b0c0d", "jws": "1a1b1c1d", "jwe": "2a2b2c2d"}
STATE = {"step": 2, "draft": {"env": "prod", "replicas": 3}, "note": "Grüße"}
BOUND: dict[str, Any] = {
    "principal": "alice@example.com",
    "request_id": "mcp1:5bS-N2PHtWUGHTbaGUxi3g",
    "audience": "https://mcp.example.com",
}


def fixed_key(fmt: str) -> ms.Key:
    alg = format_named(fmt).alg
    secret = hashlib.sha256(f"mrtr-state published vectors {alg}".encode()).digest()
    return ms.Key(kid=KIDS[fmt], alg=alg, secret=secret)


def nonce_of(fmt: str, token: str) -> str | None:
    """The nonce (IV) a token carries, for readers checking their own encryption."""
    try:
        if fmt == "aead":
            return b64url_decode(token[4:])[4:16].hex()
        if fmt == "jwe":
            return b64url_decode(token.split(".")[2]).hex()
    except ValueError:
        return None  # a deliberately malformed token
    return None


def flip(token: str, position: int) -> str:
    swapped = "B" if token[position] == "A" else "A"
    return token[:position] + swapped + token[position + 1 :]


def cases_for(fmt: str) -> list[dict[str, Any]]:
    key = fixed_key(fmt)
    keyset = ms.Keyset([key])
    out: list[dict[str, Any]] = []

    def case(
        name: str,
        token: str,
        bindings: dict[str, Any],
        now: int,
        expected: str,
        claims: dict[str, Any] | None = None,
    ) -> None:
        out.append(
            {
                "name": f"{fmt}-{name}",
                "format": fmt,
                "expect_fail": expected != "ok",
                "key": key.to_jwk() | {"status": "primary", "since": {}},
                "nonce": nonce_of(fmt, token),
                "token": token,
                "claims": claims,
                "bindings": bindings,
                "now": now,
                "expected": expected,
            }
        )

    with deterministic(f"mrtr-state vectors {fmt}".encode()):
        plain = ms.issue(keyset, STATE, format=fmt, ttl=300, now=NOW)
        bound = ms.issue(keyset, STATE, format=fmt, ttl=60, now=NOW, **BOUND)
        fmt_obj = format_named(fmt)

        def forge(document: str) -> str:
            return fmt_obj.seal(key, document.encode())

        base = '"iat":1800000000,"exp":1800000300,"jti":"vector-jti","st":1'
        forged = {
            "duplicate-exp": ("{" + base + ',"exp":1900000000}', "invalid_claims"),
            "nan-exp": ('{"iat":1800000000,"exp":NaN,"jti":"j","st":1}', "invalid_claims"),
            "huge-exp": ('{"iat":1800000000,"exp":1e400,"jti":"j","st":1}', "invalid_claims"),
            "bool-iat": ('{"iat":true,"exp":1800000300,"jti":"j","st":1}', "invalid_claims"),
            "missing-exp": ('{"iat":1800000000,"jti":"j","st":1}', "invalid_claims"),
            "lifetime-over-cap": (
                '{"iat":1800000000,"exp":1800007200,"jti":"j","st":1}',
                "invalid_claims",
            ),
        }
        forged_tokens = {name: (forge(doc), code) for name, (doc, code) in forged.items()}
    middle = len(plain.token) // 2
    case("valid", plain.token, {}, NOW + 10, "ok", plain.claims.to_dict())
    case("valid-bound", bound.token, BOUND, NOW + 10, "ok", bound.claims.to_dict())
    case("valid-last-second", plain.token, {}, NOW + 299, "ok", plain.claims.to_dict())
    case("expired-at-exp", plain.token, {}, NOW + 300, "expired")
    case("not-yet-valid", plain.token, {}, NOW - 61, "not_yet_valid")
    case("tampered", flip(plain.token, middle), {}, NOW, "bad_signature")
    case("truncated", plain.token[:-4], {}, NOW, "malformed")
    case("padded", plain.token + "=", {}, NOW, "malformed")
    case(
        "unbound-principal-given",
        plain.token,
        {"principal": "alice@example.com"},
        NOW,
        "principal_mismatch",
    )
    case(
        "wrong-principal", bound.token, {**BOUND, "principal": "mallory"}, NOW, "principal_mismatch"
    )
    case(
        "wrong-request", bound.token, {**BOUND, "request_id": "req-other"}, NOW, "request_mismatch"
    )
    case(
        "wrong-audience",
        bound.token,
        {**BOUND, "audience": "https://other.example"},
        NOW,
        "audience_mismatch",
    )
    case("missing-bindings", bound.token, {}, NOW, "principal_mismatch")
    for name, (token, code) in forged_tokens.items():
        case(name, token, {}, NOW, code)
    return out


def fix_tampered_codes(cases: list[dict[str, Any]]) -> None:
    """A flipped character may also break canonical base64; record what really happens."""
    for entry in cases:
        keyset = ms.Keyset(
            [
                ms.Key(
                    kid=entry["key"]["kid"],
                    alg=entry["key"]["alg"],
                    secret=b64url_decode(entry["key"]["k"]),
                )
            ]
        )
        try:
            ms.verify(keyset, entry["token"], now=entry["now"], **entry["bindings"])
            outcome = "ok"
        except ms.InvalidToken as err:
            outcome = err.code
        assert (outcome == "ok") != entry["expect_fail"], entry["name"]
        entry["expected"] = outcome


def build() -> dict[str, dict[str, Any]]:
    files = {}
    for fmt in ("aead", "jws", "jwe"):
        cases = cases_for(fmt)
        fix_tampered_codes(cases)
        files[fmt] = {
            "description": f"mrtr-state {fmt} test vectors; see scripts/make_vectors.py",
            "format": fmt,
            "ttl_cap": ms.DEFAULT_POLICY.ttl_cap,
            "skew": ms.DEFAULT_POLICY.skew,
            "cases": cases,
        }
    return files


def main() -> None:
    folder = ROOT / "tests" / "vectors"
    folder.mkdir(exist_ok=True)
    for fmt, content in build().items():
        (folder / f"{fmt}.json").write_text(
            json.dumps(content, indent=1, ensure_ascii=False) + "\n"
        )
        print(f"wrote tests/vectors/{fmt}.json ({len(content['cases'])} cases)")


if __name__ == "__main__":
    main()
