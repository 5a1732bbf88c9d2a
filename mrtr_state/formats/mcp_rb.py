"""``mcp-rb``: the requestState tokens of the Ruby SDK (1.3.0, ``RequestStateSecurity``).

    v1. + b64url( iv (12) | AES-256-GCM ciphertext | tag (16) ),  associated data ``v1.``

The raw 32-byte key is the AES key (no derivation) and the token carries no key id, so the
verifier tries each usable ``mcp-rb-v1`` key, primary first: AES-GCM's tag tells the right one
(a wrong key fails it like a forgery would). The prefix and shape are those of ``mcp-py``
tokens; detection routes a ``v1.`` token to an mcp-py key by its 4-byte key id first and tries
these keys only when none has it (see :mod:`mrtr_state.formats`). The Ruby SDK's decoder also
takes padding and the standard alphabet; mrtr-state refuses both (one spelling per token).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._encoding import EncodingError, b64url_decode, b64url_encode
from .._entropy import random_bytes
from ..errors import BadSignature, MalformedToken, UnknownKey
from . import Anatomy
from ._primitives import AESGCM, InvalidTag

if TYPE_CHECKING:
    from ..keyset import Key, Keyset

__all__ = ["WIRE"]

PREFIX = "v1."
_AAD = b"v1."
_IV, _TAG = 12, 16


class RubyWire:
    name = "mcp-rb"
    alg = "mcp-rb-v1"
    confidential = True
    associates = False

    def __init__(self) -> None:
        self._build_candidates = self._candidates

    def _candidates(self, keys: tuple[Key, ...]) -> list[tuple[Key, AESGCM]]:
        usable = sorted(
            (k for k in keys if k.alg == self.alg and k.can_verify),
            key=lambda k: k.status != "primary",
        )
        return [(key, key.prepared(self.alg, AESGCM)) for key in usable]

    def has_keys(self, keyset: Keyset) -> bool:
        return bool(keyset.derived("mcp-rb-candidates", self._build_candidates))

    def seal(self, key: Key, plaintext: bytes, nonce: bytes | None = None) -> str:
        iv = random_bytes(_IV) if nonce is None else nonce
        sealed = key.prepared(self.alg, AESGCM).encrypt(iv, plaintext, _AAD)
        return PREFIX + b64url_encode(iv + sealed)

    def _blob(self, token: str) -> bytes:
        if not token.startswith(PREFIX) or "." in token[len(PREFIX) :]:
            raise MalformedToken("not an mcp-rb token (v1. and one base64url segment)")
        try:
            raw = b64url_decode(token[len(PREFIX) :])
        except EncodingError as err:
            raise MalformedToken(f"mcp-rb token body: {err}") from None
        if len(raw) < _IV + _TAG:
            raise MalformedToken(f"mcp-rb token is truncated ({len(raw)} bytes decoded)")
        return raw

    def open(self, keyset: Keyset, token: str) -> tuple[Key, bytes]:
        raw = self._blob(token)
        candidates = keyset.derived("mcp-rb-candidates", self._build_candidates)
        if not candidates:
            raise UnknownKey(
                "the keyset holds no mcp-rb-v1 key; import the server's key with: "
                "mrtr-state keys import --alg mcp-rb-v1 --secret-file FILE"
            )
        iv, sealed = raw[:_IV], raw[_IV:]
        for key, cipher in candidates:
            try:
                return key, cipher.decrypt(iv, sealed, _AAD)
            except InvalidTag:
                continue
        raise BadSignature(
            "authentication tag mismatch under every mcp-rb key (tampered, truncated, forged "
            "or another key)"
        )

    def anatomy(self, token: str) -> Anatomy:
        raw = self._blob(token)
        body = token[len(PREFIX) :]
        cuts = [0, (_IV * 4 + 2) // 3, ((len(raw) - _TAG) * 4 + 2) // 3, len(body)]
        labels = ("iv", "ciphertext", "tag")
        segments: tuple[tuple[str, str], ...] = (("prefix", PREFIX),)
        segments += tuple((labels[i], body[cuts[i] : cuts[i + 1]]) for i in range(3))
        return Anatomy(
            format=self.name,
            kid="",
            segments=segments,
            fields=(
                ("key id", "none (mcp-rb tokens carry no key id)"),
                ("iv", raw[:_IV].hex()),
                ("ciphertext", f"{len(raw) - _IV - _TAG} bytes (AES-256-GCM, the raw key)"),
                ("tag", raw[-_TAG:].hex()),
            ),
            confidential=True,
        )


WIRE = RubyWire()
