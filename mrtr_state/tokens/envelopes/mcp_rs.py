"""rmcp's body (``mcp-rs`` and ``mcp-rs2``), checked as rmcp checks it.

    expiry (big-endian i64, milliseconds since the epoch; 0: never) ‖ payload

The payload is the application's bytes: rmcp's ``seal_with`` takes them as they are, and
``seal_json_with`` writes a value with ``serde_json`` (compact, object keys sorted). Minting
here does the same: bytes are the payload, any other state is JSON written compactly with
sorted keys and UTF-8 left raw. Verifying returns the payload as JSON when it is strict JSON,
else as the bytes it is.

The wire has already checked the tag over the body and the associated data (the bind value),
so the binding is checked there: what this envelope adds is rmcp's own order after the tag (a
body of at least 8 bytes, then ``now_ms > expiry`` is expired, so a negative expiry is) and,
beyond rmcp, the verifier's ``ttl_cap``: a token that never expires is refused unless the cap
is lifted (``ttl_cap`` none), and so is one whose expiry lies further ahead than the cap.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ..._encoding import (
    EncodingError,
    authenticated_json,
    b64url_encode,
    one_shot_encoder,
    utf8,
    written,
)
from ...errors import InvalidClaims, MalformedToken
from ..binding import BIND, Binding
from ..claims import Claims, new_claims
from . import UNCHECKED, Carried, RequestStateOnly, check_lifetime

if TYPE_CHECKING:
    from ..._entropy import Fresh
    from ...keys.key import Key
    from ..policy import Policy

__all__ = ["McpRsEnvelope", "payload_of"]

# serde_json's to_vec of a Value: compact, keys sorted (no preserve_order), UTF-8 raw
_encode_payload = one_shot_encoder(
    json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False, sort_keys=True)
)
_NEVER = 0


def payload_of(state: Any) -> bytes:
    """The payload rmcp would carry for ``state``: bytes as given, else its JSON."""
    if isinstance(state, bytes | bytearray | memoryview):
        return bytes(state)
    return utf8(written(_encode_payload, state))


def _state(payload: bytes) -> Any:
    """The payload as JSON when it is JSON (read plainly: the tag covered it), else the bytes."""
    try:
        return authenticated_json(payload)
    except EncodingError:
        return payload


def _shown(expiry: int, state: Any) -> dict[str, Any]:
    """The body as ``--json`` and ``inspect`` show it: a payload that is not JSON as
    base64url."""
    if isinstance(state, bytes):
        return {"expiry_ms": expiry, "payload_base64url": b64url_encode(state)}
    return {"expiry_ms": expiry, "payload": state}


def _now_ms(now: float) -> int:
    return int(now * 1000) if now >= 0 else -int(-now * 1000)


class McpRsEnvelope(RequestStateOnly):
    """See the module docstring."""

    kind = "mcp-rs"
    state_member = "payload"
    # the tag covers the binding: inspect checks it as empty, and says so when that fails
    binds = ""
    carries = BIND
    fresh_bytes = 0  # a signed body: no id, no nonce, no salt

    def shown(self, plaintext: bytes) -> dict[str, Any] | None:
        if len(plaintext) < 8:
            return None
        return _shown(int.from_bytes(plaintext[:8], "big", signed=True), _state(plaintext[8:]))

    def pack(
        self, state: Any, binding: Binding, key: Key, now: float, ttl: int, fresh: Fresh
    ) -> tuple[bytes, dict[str, Any]]:
        payload = payload_of(state)
        expiry = _now_ms(now) + ttl * 1000
        return expiry.to_bytes(8, "big", signed=True) + payload, {
            "expiry_ms": expiry,
            "payload": payload,
        }

    def accept(
        self, plaintext: bytes, key: Key, binding: Binding, now: float, policy: Policy, out: Carried
    ) -> Claims:
        # rmcp's order after the tag: a body with its expiry, then 0 never expires, else
        # now_ms <= expiry; beyond rmcp, the verifier's cap on what lies ahead
        if len(plaintext) < 8:
            raise MalformedToken(
                f"{self.name} body is {len(plaintext)} bytes, shorter than its 8-byte expiry"
            )
        expiry = int.from_bytes(plaintext[:8], "big", signed=True)
        if expiry == _NEVER:
            if policy.ttl_cap is not None:
                raise InvalidClaims(
                    f"this {self.name} token never expires (rmcp expiry 0); a verifier accepts "
                    "it only with its ttl_cap lifted (ttl_cap none)"
                )
        else:
            left = (expiry - _now_ms(now)) / 1000
            check_lifetime(left >= 0, -left, left, policy, to_the_ms=True)
        # no binding but the bind value, which the wire's tag covered
        if binding is not UNCHECKED:
            self._carried(binding.kinds)
        return self._claims(expiry, _state(plaintext[8:]), key.kid)

    def _claims(self, expiry: int, state: Any, kid: str) -> Claims:
        exp = None if expiry == _NEVER else expiry / 1000
        return new_claims(
            state=state, exp=exp, raw=_shown(expiry, state), kid=kid, format=self.name
        )

    def claims_of(self, document: dict[str, Any], kid: str) -> Claims:
        return self._claims(document["expiry_ms"], _state(document["payload"]), kid)
