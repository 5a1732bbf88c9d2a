"""``mcp-php``: the requestState tokens of the PHP SDK (main, ``RequestStateCodec``).

    b64url(body JSON) + . + b64url(HMAC-SHA256(key, the body segment's text))

No prefix and no key id: the verifier checks the MAC under each usable ``mcp-php-v1`` key,
primary first. The MAC covers the body *text* as it arrives, so any re-encoding of the body
fails it. Where the SDK decodes leniently (``=`` padding, the standard alphabet, non-zero
trailing bits, in the MAC and, under a MAC made over such text, in the body), mrtr-state keeps
its canonical rule and refuses: a token has exactly one spelling. Signed, not encrypted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._encoding import EncodingError, b64url_decode, b64url_encode, compare_digest
from ..errors import BadSignature, MalformedToken, UnknownKey
from . import Anatomy
from ._primitives import Keyed, hmac_key

if TYPE_CHECKING:
    from ..keyset import Key, Keyset

__all__ = ["WIRE"]


def _decode(segment: str, what: str) -> bytes:
    try:
        return b64url_decode(segment)
    except EncodingError as err:
        raise MalformedToken(f"{what}: {err}") from None


class PhpWire:
    name = "mcp-php"
    alg = "mcp-php-v1"
    confidential = False
    associates = False

    def __init__(self) -> None:
        self._build_candidates = self._candidates

    def _candidates(self, keys: tuple[Key, ...]) -> list[tuple[Key, Keyed]]:
        usable = sorted(
            (k for k in keys if k.alg == self.alg and k.can_verify),
            key=lambda k: k.status != "primary",
        )
        return [(key, key.prepared(self.alg, hmac_key)) for key in usable]

    def seal(self, key: Key, plaintext: bytes, nonce: bytes | None = None) -> str:
        body = b64url_encode(plaintext)
        state = key.prepared(self.alg, hmac_key).copy()
        state.update(body.encode("ascii"))
        return body + "." + b64url_encode(state.finalize())

    def _split(self, token: str) -> tuple[str, str]:
        sections = token.split(".")
        if len(sections) != 2:
            raise MalformedToken(
                f"not an mcp-php token: BODY.MAC has 2 sections, this has {len(sections)}"
            )
        return sections[0], sections[1]

    def open(self, keyset: Keyset, token: str) -> tuple[Key, bytes]:
        body, mac_text = self._split(token)
        mac = _decode(mac_text, "mcp-php MAC")
        candidates = keyset.derived("mcp-php-candidates", self._build_candidates)
        if not candidates:
            raise UnknownKey(
                "the keyset holds no mcp-php-v1 key; import the server's key with: "
                "mrtr-state keys import --alg mcp-php-v1 --secret-file FILE"
            )
        signed = body.encode("ascii")
        for key, keyed in candidates:
            state = keyed.copy()
            state.update(signed)
            if compare_digest(state.finalize(), mac):
                return key, _decode(body, "mcp-php body")
        raise BadSignature("signature mismatch (tampered, truncated, forged or another key)")

    def anatomy(self, token: str) -> Anatomy:
        body, mac = self._split(token)
        readable = _decode(body, "mcp-php body")
        _decode(mac, "mcp-php MAC")
        return Anatomy(
            format=self.name,
            kid="",
            segments=(("body", body), (".", "."), ("MAC", mac)),
            fields=(
                ("key id", "none (mcp-php tokens carry no key id)"),
                ("body", f"{len(readable)} bytes, readable by anyone"),
                ("MAC", "HMAC-SHA256 of the body text under the raw SDK key"),
            ),
            confidential=False,
            readable=readable,
        )


WIRE = PhpWire()
