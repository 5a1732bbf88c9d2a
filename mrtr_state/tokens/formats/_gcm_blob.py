"""The layout ``aead`` and ``mcp-py`` share: PREFIX + b64url(kid (4) | nonce (12) | sealed).

AES-256-GCM with the prefix and the 4 key-id bytes as associated data, so a ciphertext cannot be
moved under another key id or another format without failing its tag. The two formats differ only
in their prefix and in how a key's secret becomes the AES key (each a small subclass).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from ..._encoding import EncodingError, b64url_decode, b64url_encode
from ..._entropy import random_bytes
from ..._primitives import AESGCM, TAG_MISMATCH, InvalidTag
from ...errors import BadSignature, MalformedToken, WrongFormat
from . import Anatomy, Routes, refusal, usable

if TYPE_CHECKING:
    from ...keys.key import Key
    from ...keys.keyset import Keyset

_HEADER = 4 + 12
_TAG = 16

#: (key, its cipher, the associated data of its tokens)
Route = tuple["Key", AESGCM, bytes]


class GcmBlobWire:
    """One AES-GCM blob wire; see the module docstring. Subclasses set the prefix and how a
    secret becomes the AES cipher."""

    confidential = True
    associates = False
    prefix: ClassVar[str]
    #: said of the key id by ``inspect``
    key_note: ClassVar[str] = ""

    @staticmethod
    def cipher(secret: bytes) -> AESGCM:
        raise NotImplementedError

    def __init__(self, name: str, alg: str) -> None:
        self.name = name
        self.alg = alg
        self._prefix_bytes = self.prefix.encode("ascii")
        self._skip = len(self.prefix)
        self._routes_name = f"{name}-routes"
        self._sealer_name = f"{name}-sealer"
        # bound once, not once per call
        self._build_routes = self._routes
        self._build_sealer = self._sealer

    def _sealer(self, key: Key) -> tuple[bytes, AESGCM, bytes]:
        """(key id, cipher, associated data) of ``key``, built once per key."""
        key_id = key.key_id
        return key_id, key.prepared(self.alg, self.cipher), self._prefix_bytes + key_id

    def seal(self, key: Key, plaintext: bytes, nonce: bytes = b"", associated: bytes = b"") -> str:
        key_id, cipher, associated_data = key.derived(self._sealer_name, self._build_sealer)
        if not nonce:
            nonce = random_bytes(12)
        sealed = cipher.encrypt(nonce, plaintext, associated_data)
        return self.prefix + b64url_encode(key_id + nonce + sealed)

    def _split(self, token: str) -> bytes:
        prefix = self.prefix
        try:
            if not token.startswith(prefix):
                raise EncodingError("wrong prefix")
            raw = b64url_decode(token[len(prefix) :])
        except EncodingError as err:
            # Worked out only on failure: a foreign token is the wrong format, not a bad body.
            if not token.startswith(prefix) or token.count(".") != prefix.count("."):
                raise WrongFormat(
                    f"not an {self.name} token ({prefix} and one base64url segment)"
                ) from None
            raise MalformedToken(f"{self.name} token body: {err}") from None
        if len(raw) < _HEADER + _TAG:
            raise MalformedToken(f"{self.name} token is truncated ({len(raw)} bytes decoded)")
        return raw

    def _routes(self, keys: tuple[Key, ...]) -> Routes[bytes, Route]:
        """Each usable key's token id -> the key, its cipher and its associated data."""
        return Routes(
            {
                key.key_id: (
                    key,
                    key.prepared(self.alg, self.cipher),
                    self._prefix_bytes + key.key_id,
                )
                for key in usable(keys, self.alg)
            },
            keys,
        )

    def open(self, keyset: Keyset, token: str, associated: bytes = b"") -> tuple[Key, bytes]:
        try:
            raw = b64url_decode(token[self._skip :])
        except EncodingError:
            raw = b""
        if len(raw) < _HEADER + _TAG or not token.startswith(self.prefix):
            raw = self._split(token)  # names what is wrong with the token
        routes = keyset.derived(self._routes_name, self._build_routes)
        route = routes.usable.get(raw[:4])
        if route is None:  # unknown, retired or another algorithm's: the precise refusal
            raise refusal(routes.by_kid, raw[:4].hex(), self.alg)
        key, cipher, associated_data = route
        try:
            return key, cipher.decrypt(raw[4:_HEADER], raw[_HEADER:], associated_data)
        except InvalidTag:
            raise BadSignature(TAG_MISMATCH) from None

    def anatomy(self, token: str) -> Anatomy:
        raw = self._split(token)
        body = token[self._skip :]
        # Base64 digits do not align with bytes; split at the digit where each part starts.
        cuts = [0] + [(n * 4 + 2) // 3 for n in (4, _HEADER, len(raw) - _TAG)] + [len(body)]
        labels = ("key id", "nonce", "ciphertext", "tag")
        segments: tuple[tuple[str, str], ...] = (("prefix", self.prefix),)
        segments += tuple((labels[i], body[cuts[i] : cuts[i + 1]]) for i in range(4))
        return Anatomy(
            format=self.name,
            kid=raw[:4].hex(),
            segments=segments,
            fields=(
                ("key id", raw[:4].hex() + self.key_note),
                ("nonce", raw[4:_HEADER].hex()),
                ("ciphertext", f"{len(raw) - _HEADER - _TAG} bytes (AES-256-GCM)"),
                ("tag", raw[-_TAG:].hex()),
            ),
            confidential=True,
        )
