"""The layout ``aead`` and ``mcp-py`` share: PREFIX + b64url(kid (4) | nonce (12) | sealed).

AES-256-GCM with the prefix and the 4 key-id bytes as associated data, so a ciphertext cannot be
moved under another key id or another format without failing its tag. The two formats differ only
in their prefix, their key algorithm and how a key's secret becomes the AES key.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from .._encoding import EncodingError, b64url_decode, b64url_encode
from .._entropy import random_bytes
from ..errors import BadSignature, MalformedToken, WrongFormat
from . import Anatomy
from ._primitives import AESGCM, TAG_MISMATCH, InvalidTag

if TYPE_CHECKING:
    from ..keyset import Key, Keyset

_HEADER = 4 + 12
_TAG = 16


class GcmBlobWire:
    """One AES-GCM blob wire; see the module docstring."""

    confidential = True
    associates = False

    def __init__(
        self,
        name: str,
        alg: str,
        prefix: str,
        cipher: Callable[[bytes], AESGCM],
        key_note: str = "",
        shared_with: str = "",
    ) -> None:
        self.name = name
        self.alg = alg
        self._prefix = prefix
        self._prefix_bytes = prefix.encode("ascii")
        self._cipher = cipher
        self._key_note = key_note
        self._routes_name = f"{name}-routes"
        self._build_routes = self._routes  # one bound method, not one per verification
        self._sealer_name = f"{name}-sealer"
        # the module of another format whose tokens have this shape but carry no key id (the
        # Ruby SDK's): tried when no key of ours has the token's id
        self._shared_with = shared_with

    def _sealer(self, key: Key) -> tuple[bytes, AESGCM, bytes]:
        """(key id, cipher, associated data) of ``key``, built once per key."""
        key_id = key.key_id
        return key_id, key.prepared(self.alg, self._cipher), self._prefix_bytes + key_id

    def seal(self, key: Key, plaintext: bytes, nonce: bytes | None = None) -> str:
        sealer = key._prepared.get(self._sealer_name)
        if sealer is None:
            sealer = key._prepared[self._sealer_name] = self._sealer(key)
        key_id, cipher, associated = sealer
        if nonce is None:
            nonce = random_bytes(12)
        sealed = cipher.encrypt(nonce, plaintext, associated)
        return self._prefix + b64url_encode(key_id + nonce + sealed)

    def _split(self, token: str) -> bytes:
        prefix = self._prefix
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

    def _routes(self, keys: tuple[Key, ...]) -> dict[bytes, tuple[Key, AESGCM, bytes]]:
        """Each usable key's token id -> the key, its cipher and its associated data."""
        return {
            key.key_id: (key, key.prepared(self.alg, self._cipher), self._prefix_bytes + key.key_id)
            for key in keys
            if key.alg == self.alg and key.status != "retired"
        }

    def open(self, keyset: Keyset, token: str) -> tuple[Key, bytes]:
        try:
            raw = b64url_decode(token[len(self._prefix) :])
        except EncodingError:
            raw = b""
        if len(raw) < _HEADER + _TAG or not token.startswith(self._prefix):
            raw = self._split(token)  # names what is wrong with the body
        route = keyset.derived(self._routes_name, self._build_routes).get(raw[:4])
        if route is None:  # unknown, retired or another algorithm's: the precise refusal
            if self._shared_with:
                return self._open_shared(keyset, token, raw[:4].hex())
            keyset.verifying_key(raw[:4].hex(), self.alg)
            raise AssertionError("unreachable: verifying_key refuses what has no route")
        key, cipher, associated = route
        try:
            return key, cipher.decrypt(raw[4:_HEADER], raw[_HEADER:], associated)
        except InvalidTag:
            raise BadSignature(TAG_MISMATCH) from None

    def _open_shared(self, keyset: Keyset, token: str, kid: str) -> tuple[Key, bytes]:
        """No key of ours has the id ``kid``: the token may be the other format's (its first
        four bytes then are a random IV), if the keyset holds keys of it; else the refusal."""
        import importlib

        other = importlib.import_module(f"{__package__}.{self._shared_with}").WIRE
        if not other.has_keys(keyset):
            keyset.verifying_key(kid, self.alg)
            raise AssertionError("unreachable: verifying_key refuses what has no route")
        try:
            return other.open(keyset, token)  # type: ignore[no-any-return]
        except BadSignature as err:
            raise BadSignature(f"no {self.name} key has key id {kid}, and {err}") from None

    def anatomy(self, token: str) -> Anatomy:
        raw = self._split(token)
        body = token[len(self._prefix) :]
        # Base64 digits do not align with bytes; split at the digit where each part starts.
        cuts = [0] + [(n * 4 + 2) // 3 for n in (4, _HEADER, len(raw) - _TAG)] + [len(body)]
        labels = ("key id", "nonce", "ciphertext", "tag")
        segments: tuple[tuple[str, str], ...] = (("prefix", self._prefix),)
        segments += tuple((labels[i], body[cuts[i] : cuts[i + 1]]) for i in range(4))
        return Anatomy(
            format=self.name,
            kid=raw[:4].hex(),
            segments=segments,
            fields=(
                ("key id", raw[:4].hex() + self._key_note),
                ("nonce", raw[4:_HEADER].hex()),
                ("ciphertext", f"{len(raw) - _HEADER - _TAG} bytes (AES-256-GCM)"),
                ("tag", raw[-_TAG:].hex()),
            ),
            confidential=True,
        )
