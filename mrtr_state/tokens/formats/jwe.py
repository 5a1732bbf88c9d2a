"""``jwe``: an encrypted JWT, JWE compact serialisation (RFC 7516), ``dir`` + ``A256GCM``.

    b64url(header) . (empty key) . b64url(iv 12) . b64url(ciphertext) . b64url(tag 16)

The header is exactly ``{"alg":"dir","enc":"A256GCM","kid":KID,"typ":"mrtr-state+jwt"}`` and the
associated data is the ASCII of its base64url segment, as RFC 7516 section 5.1 requires. Direct
encryption means no key wrapping and no key derivation, and ``zip`` is never honoured, so a
hostile header cannot make the verifier inflate data or spend time deriving keys.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from ..._encoding import EncodingError, b64url_decode, b64url_encode, json_loads
from ..._entropy import random_bytes
from ..._primitives import AESGCM, TAG_MISMATCH, InvalidTag
from ...errors import BadSignature, MalformedToken, WrongFormat
from . import Anatomy, decode_segment
from ._jose import DANGEROUS_MEMBERS, ExactHeader, JoseWire, split_compact

if TYPE_CHECKING:
    from ...keys.key import Key
    from ...keys.keyset import Keyset

__all__ = ["JweWire", "decrypt_compact"]

HEADER = ExactHeader("jwe", (("alg", "dir"), ("enc", "A256GCM")))
_KEY_BYTES = {"A128GCM": 16, "A192GCM": 24, "A256GCM": 32}
_TAG = 16
#: (key, its cipher, the associated data of its tokens: the header segment's ASCII)
Route = tuple["Key", AESGCM, bytes]


def _decrypt(cipher: AESGCM, associated: bytes, iv: str, ciphertext: str, tag: str) -> bytes:
    try:
        # a 16-digit iv is 12 whole bytes, so it decodes with the ciphertext as it would alone;
        # a 22-digit tag is 16 bytes
        opened = b64url_decode(iv + ciphertext) if len(iv) == 16 else b""
        mac = b64url_decode(tag) if len(tag) == 22 else b""
    except EncodingError:
        opened = mac = b""
    if not opened or not mac:  # the precise refusal, segment by segment
        nonce = decode_segment(iv, "jwe iv")
        if len(nonce) != 12:
            raise MalformedToken(f"jwe iv is {len(nonce)} bytes, AES-GCM uses 12")
        mac = decode_segment(tag, "jwe tag")
        if len(mac) != _TAG:
            raise MalformedToken(f"jwe tag is {len(mac)} bytes, AES-GCM makes 16")
        opened = nonce + decode_segment(ciphertext, "jwe ciphertext")
    try:
        return cipher.decrypt(opened[:12], opened[12:] + mac, associated)
    except InvalidTag:
        raise BadSignature(TAG_MISMATCH) from None


class JweWire(JoseWire[Route, "tuple[str, AESGCM, bytes]"]):
    confidential = True
    header = HEADER

    def _sealer(self, key: Key) -> tuple[str, AESGCM, bytes]:
        """(header segment, cipher, associated data) of ``key``, built once per key."""
        header = HEADER.encode(key.kid)
        return header, key.prepared(self.alg, AESGCM), header.encode("ascii")

    def seal(self, key: Key, plaintext: bytes, nonce: bytes = b"", associated: bytes = b"") -> str:
        header, cipher, associated_data = key.derived(self._sealer_name, self._build_sealer)
        if not nonce:
            nonce = random_bytes(12)
        sealed = cipher.encrypt(nonce, plaintext, associated_data)
        return (
            f"{header}..{b64url_encode(nonce)}.{b64url_encode(sealed[:-_TAG])}."
            f"{b64url_encode(sealed[-_TAG:])}"
        )

    def _split(self, token: str) -> list[str]:
        if token.count(".") != 4:
            raise WrongFormat("not a jwe token (five segments, the first a JOSE header)")
        segments = split_compact(token, 5, "jwe")
        if segments[1]:
            HEADER.kid_of(segments[0])  # a foreign header is the better reason, if there is one
            raise MalformedToken("jwe encrypted key must be empty for alg dir")
        return segments

    def _route_of(self, key: Key) -> Route:
        """A route: the key, its cipher and the associated data of its tokens (the header
        segment's ASCII, RFC 7516 section 5.1)."""
        return key, key.prepared(self.alg, AESGCM), HEADER.encode(key.kid).encode("ascii")

    def open(self, keyset: Keyset, token: str, associated: bytes = b"") -> tuple[Key, bytes]:
        segments = token.split(".")
        if len(segments) != 5:
            raise WrongFormat("not a jwe token (five segments, the first a JOSE header)")
        header, encrypted_key, iv, ciphertext, tag = segments
        route = keyset.derived(self._routes_name, self._build_routes).usable.get(header)
        if route is None:
            raise self._no_route(keyset, header)
        key, cipher, associated_data = route
        if encrypted_key:
            raise MalformedToken("jwe encrypted key must be empty for alg dir")
        return key, _decrypt(cipher, associated_data, iv, ciphertext, tag)

    def anatomy(self, token: str) -> Anatomy:
        header, _key, iv, ciphertext, tag = self._split(token)
        kid = HEADER.kid_of(header)
        size = len(decode_segment(ciphertext, "jwe ciphertext"))
        labelled = (
            ("encrypted key (empty)", ""),
            ("iv", iv),
            ("ciphertext", ciphertext),
            ("tag", tag),
        )
        fields = (
            ("iv", decode_segment(iv, "jwe iv").hex()),
            ("ciphertext", f"{size} bytes (A256GCM)"),
            ("tag", decode_segment(tag, "jwe tag").hex()),
        )
        return self._anatomy(header, kid, labelled, fields)


def decrypt_compact(
    token: str, secret: bytes, *, allowed_enc: Collection[str] = ("A256GCM",)
) -> tuple[dict[str, Any], bytes]:
    """Decrypt any ``dir`` JWE whose ``enc`` is in ``allowed_enc``, with a raw key.

    For checking the decoding path against published vectors (RFC 7520 uses a foreign kid and
    A128GCM). Tokens of our format go through :class:`JweWire`, which accepts only its exact
    header. The header here is still parsed strictly and anything dangerous is refused before
    the key is used.
    """
    header, encrypted_key, iv, ciphertext, tag = split_compact(token, 5, "jwe")
    try:
        document = json_loads(decode_segment(header, "jwe header"))
    except EncodingError as err:
        raise MalformedToken(f"jwe header: {err}") from None
    if not isinstance(document, dict):
        raise MalformedToken("jwe header is not a JSON object")
    dangerous = sorted(DANGEROUS_MEMBERS & set(document))
    if dangerous:
        raise MalformedToken(f"jwe header has {', '.join(dangerous)}, never accepted")
    unknown = sorted(set(document) - {"alg", "enc", "kid", "typ", "cty"})
    if unknown:
        raise MalformedToken(f"jwe header has unknown members {', '.join(unknown)}")
    enc = document.get("enc")
    if document.get("alg") != "dir" or enc not in allowed_enc or enc not in _KEY_BYTES:
        raise MalformedToken(f"jwe alg/enc {document.get('alg')}/{enc} is not accepted")
    if encrypted_key:
        raise MalformedToken("jwe encrypted key must be empty for alg dir")
    if len(secret) != _KEY_BYTES[enc]:
        raise ValueError(f"{enc} needs a {_KEY_BYTES[enc]}-byte key")
    return document, _decrypt(AESGCM(secret), header.encode("ascii"), iv, ciphertext, tag)
