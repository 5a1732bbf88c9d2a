"""``mcp-ts``: the requestState tokens of the TypeScript SDK's ``createRequestStateCodec``.

    v1. + b64url(body JSON) + . + b64url(HMAC-SHA256(secret, "v1." + b64url(body JSON)))

Signed, not encrypted: the client can read the body. The secret is used raw. The token carries
no key id (the SDK has one key), so the verifier checks the MAC under each usable mcp-ts key of
the keyset, primary first; there is rarely more than one, and never more than rotation makes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._encoding import b64url_encode, compare_digest
from ..errors import BadSignature, MalformedToken, UnknownKey, WrongFormat
from . import Anatomy
from ._jose import decode_segment, split_compact
from ._primitives import Keyed, hmac_key, hmac_sha256

if TYPE_CHECKING:
    from ..keyset import Key, Keyset

PREFIX = "v1."


class McpTsWire:
    name = "mcp-ts"
    alg = "mcp-ts-v1"
    confidential = False
    associates = False

    def __init__(self) -> None:
        self._build_candidates = self._candidates  # one bound method, not one per verification

    def seal(self, key: Key, plaintext: bytes, nonce: bytes | None = None) -> str:
        signed = PREFIX + b64url_encode(plaintext)
        mac = hmac_sha256(key.prepared(self.alg, hmac_key), signed.encode("ascii"))
        return signed + "." + b64url_encode(mac)

    def _split(self, token: str) -> tuple[str, str]:
        if not token.startswith(PREFIX) or token.count(".") != 2:
            raise WrongFormat("not an mcp-ts token (v1.BODY.MAC)")
        _prefix, body, mac = split_compact(token, 3, "mcp-ts")
        return body, mac

    def _candidates(self, keys: tuple[Key, ...]) -> list[tuple[Key, Keyed]]:
        """The usable mcp-ts keys with their keyed HMAC states, primary first (tokens carry no
        key id: see DESIGN)."""
        usable = [k for k in keys if k.alg == self.alg and k.can_verify]
        ordered = sorted(usable, key=lambda k: k.status != "primary")
        return [(key, key.prepared(self.alg, hmac_key)) for key in ordered]

    def open(self, keyset: Keyset, token: str) -> tuple[Key, bytes]:
        signed, _dot, mac_text = token.rpartition(".")
        if not (signed.startswith(PREFIX) and "." not in signed[len(PREFIX) :]):
            self._split(token)  # names what is wrong with the structure
            raise WrongFormat("not an mcp-ts token (v1.BODY.MAC)")  # fail closed
        mac = decode_segment(mac_text, "mcp-ts MAC")
        if len(mac) != 32:
            raise MalformedToken(f"mcp-ts MAC is {len(mac)} bytes, HMAC-SHA256 makes 32")
        candidates = keyset.derived("mcp-ts-candidates", self._build_candidates)
        if not candidates:
            raise UnknownKey(
                "the keyset holds no mcp-ts-v1 key; import the SDK secret with: "
                "mrtr-state keys import --alg mcp-ts-v1 --secret-file FILE"
            )
        key = _signer(candidates, signed.encode("ascii"), mac)
        if key is None:
            raise BadSignature("signature mismatch (tampered, truncated, forged or another key)")
        return key, decode_segment(signed[len(PREFIX) :], "mcp-ts body")

    def anatomy(self, token: str) -> Anatomy:
        body, mac = self._split(token)
        readable = decode_segment(body, "mcp-ts body")
        decode_segment(mac, "mcp-ts MAC")
        return Anatomy(
            format=self.name,
            kid="",
            segments=(("prefix", PREFIX), ("body", body), (".", "."), ("MAC", mac)),
            fields=(
                ("key id", "none (mcp-ts tokens carry no key id)"),
                ("body", f"{len(readable)} bytes, readable by anyone"),
                ("MAC", "HMAC-SHA256 under the raw SDK secret"),
            ),
            confidential=False,
            readable=readable,
        )


def _signer(candidates: list[tuple[Key, Keyed]], signed: bytes, mac: bytes) -> Key | None:
    """The candidate key whose HMAC of ``signed`` is ``mac`` (compared in constant time)."""
    for key, keyed in candidates:
        state = keyed.copy()
        state.update(signed)
        if compare_digest(state.finalize(), mac):
            return key
    return None


WIRE = McpTsWire()
