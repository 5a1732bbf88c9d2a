"""What the SDK-format tests share: the captured Python and TypeScript SDK tokens, and the
vectors made by running the Ruby, Rust (rmcp) and PHP SDKs' own code, with their keysets and
how each SDK's refusals map to ours. (Not a test module: the tests of each format import it.)
"""

from __future__ import annotations

import base64
import json
from typing import Any

import mrtr_state as ms
from mrtr_state.keys.keyset import Key

from .conftest import shared_vector

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


UNCAPPED = ms.Policy(ttl_cap=None)


def _b64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _cases(*parts: str) -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = json.loads(shared_vector(*parts).read_text())["cases"]
    return cases


def _ids(cases: list[dict[str, Any]]) -> list[str]:
    return [case["name"] for case in cases]


def _json(data: bytes) -> Any:
    return json.loads(data)


def _refused(call: Any) -> type[ms.InvalidToken] | None:
    try:
        call()
    except ms.InvalidToken as err:
        return type(err)
    return None


#: Tokens an SDK accepts only because its base64 decoder is lenient: refused here, as malformed.
LENIENT = {
    ("ruby", "padding_added"),
    ("ruby", "standard_alphabet"),
    ("php", "mac_padding_added"),
    ("php", "mac_trailing_bits_set"),
    ("php", "mac_standard_alphabet"),
    ("php", "crafted_body_padded_valid_mac"),
    ("php", "crafted_body_standard_alphabet_valid_mac"),
}


#: Tokens both refuse, mrtr-state at decoding: the truncated MAC segment ends on non-zero
#: trailing bits, which the SDK's lenient decoder takes and its MAC check then refuses.
STRICTER = {("php", "mac_truncated_4_chars")}


RUBY = _cases("ruby-sdk", "vectors.json")


#: The Ruby SDK's messages -> our refusals. Its "expired" for a float exp is our "not the SDK's
#: envelope" (an integer exp is part of the shape): refused either way.
RUBY_ERRORS: dict[str, tuple[type[ms.InvalidToken], ...]] = {
    "authentication failed": (ms.BadSignature,),
    "malformed token": (ms.MalformedToken,),
    "malformed claims": (ms.InvalidClaims,),
    "unsupported version": (ms.InvalidClaims,),
    "missing state": (ms.InvalidClaims,),
    "expired": (ms.ExpiredToken, ms.InvalidClaims),
    "method mismatch": (ms.RequestMismatch,),
    "target mismatch": (ms.RequestMismatch,),
    "arguments mismatch": (ms.RequestMismatch,),
    "audience mismatch": (ms.AudienceMismatch,),
}


def _ruby_keyset(case: dict[str, Any]) -> ms.Keyset:
    return ms.Keyset([Key.from_secret("mcp-rb-v1", _b64(case["key"]))])


def _ruby_arguments(case: dict[str, Any]) -> Any:
    # the JSON text, not the parsed copy in the file: 1 and 1.0 digest differently
    text = case.get("arguments_json")
    return None if text is None else json.loads(text)


RMCP = _cases("rust-rmcp", "vectors.json") + _cases("rust-rmcp", "vectors-pr1128.json")


#: rmcp's RequestStateError variants -> our refusals.
RMCP_ERRORS: dict[str, type[ms.InvalidToken]] = {
    "IntegrityCheckFailed": ms.BadSignature,
    "InvalidEncoding": ms.MalformedToken,
    "MalformedFormat": ms.MalformedToken,
    "InvalidKeyId": ms.MalformedToken,
    "UnknownKeyId": ms.UnknownKey,
    "Expired": ms.ExpiredToken,
}


def _rmcp_keyset(case: dict[str, Any]) -> ms.Keyset:
    """A single key is an mcp-rs-v1 key; a ring's keys are mcp-rs-v2 keys under their rmcp ids,
    and the keys it opens (or signs) rs1 tokens with are mcp-rs-v1 keys as well."""
    if "key" in case:
        return ms.Keyset([Key.from_secret("mcp-rs-v1", _b64(case["key"]))])
    ring = case["keyring"]
    keys = [
        Key.from_secret(
            "mcp-rs-v2",
            _b64(secret),
            sdk_kid=kid,
            status="primary" if kid == ring["active_kid"] else "active",
        )
        for kid, secret in ring["keys"].items()
    ]
    rs1 = list(ring.get("rs1_fallbacks", []))
    if "rs1_signing" in ring:
        rs1.append(ring["rs1_signing"])
    for n, kid in enumerate(dict.fromkeys(rs1)):
        status = "primary" if n == 0 else "active"
        keys.append(Key.from_secret("mcp-rs-v1", _b64(ring["keys"][kid]), status=status))
    return ms.Keyset(keys)


PHP = _cases("php-sdk", "vectors.json")


PHP_ERRORS: dict[str, tuple[type[ms.InvalidToken], ...]] = {
    "mac": (ms.BadSignature,),
    "malformed": (ms.MalformedToken, ms.InvalidClaims),
    "expired": (ms.ExpiredToken,),
}


def _php_keyset(case: dict[str, Any]) -> ms.Keyset:
    return ms.Keyset([Key.from_secret("mcp-php-v1", _b64(case["key"]))])


JAVA = _cases("java-sdk", "vectors.json")
_JAVA_MEMBERS = ("exp", "m", "n", "p", "s", "v")


def _canonical_b64url(text: str) -> bool:
    """Whether ``text`` is the one unpadded base64url spelling of the bytes it decodes to."""
    try:
        data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except ValueError:
        return False
    return base64.urlsafe_b64encode(data).decode().rstrip("=") == text


def java_leniency(token: str) -> str | None:
    """What the Java SDK could take this token only through: Java's lenient base64 decoder or
    Jackson's lenient mapping of its record (None: the token is spelled as the SDK's seal
    writes one). Worked out from the token alone, by the SDK's stated rules, so a set of
    vectors the tests have never seen is judged the same way."""
    parts = token.split(".")
    if len(parts) != 2:
        return None  # the SDK reads its last dot: a MAC over "a.b" is nothing we must take
    if not all(_canonical_b64url(part) for part in parts):
        return "base64: padding or non-zero trailing bits"
    try:
        text = _b64(parts[0]).decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        return "a payload that is not UTF-8"
    try:
        pairs = json.loads(text, object_pairs_hook=lambda pairs: pairs)
    except json.JSONDecodeError:
        try:
            json.JSONDecoder().raw_decode(text)
        except json.JSONDecodeError:
            return None  # not JSON at all: the SDK refuses it too
        return "text after the object"
    if not isinstance(pairs, list):
        return None
    names = sorted(name for name, _value in pairs)
    if len(names) != len(set(names)):
        return "a member repeated"
    if names != sorted(_JAVA_MEMBERS):
        return "a member missing or unknown"
    values = dict(pairs)
    if type(values["v"]) is not int or values["v"] != 1:
        return "v other than 1"
    if type(values["s"]) is not str or type(values["exp"]) is not int:
        return "a state or exp of another type"
    if not all(type(values[name]) in (str, type(None)) for name in ("p", "m", "n")):
        return "a binding of another type"
    return None


def java_binding(case: dict[str, Any]) -> dict[str, Any] | None:
    """The binding the opening request of a Java case states, as mrtr-state is given it (the
    SDK's null primitive is the empty target), or None when mrtr-state cannot state it: an
    empty principal or name (not null, and not statable), or no method."""
    principal = case["principal"] if case["principal_extractor"] else None
    primitive = case["primitive_name"]
    if principal == "" or primitive == "" or not case["method"]:
        return None
    binding: dict[str, Any] = {"method": case["method"], "target": primitive or ""}
    if principal is not None:
        binding["principal"] = principal
    return binding


def java_keyset(case: dict[str, Any]) -> ms.Keyset | None:
    """The case's key as an mcp-java-v1 key, or None when it is under the 32 bytes mrtr-state
    holds an SDK key to (the SDK takes any non-empty key)."""
    secret = _b64(case["key"])
    if len(secret) < 32:
        return None
    return ms.Keyset([Key.from_secret("mcp-java-v1", secret)])
