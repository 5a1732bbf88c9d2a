"""``mcp-rs``: the requestState tokens of the Rust SDK (rmcp 3.1.4, ``RequestStateCodec``).

    rs1. + b64url(body) + . + b64url(HMAC-SHA256(key, DOMAIN ‖ u64be(len ad) ‖ ad ‖ body))

with DOMAIN ``rmcp/mrtr/request-state/v1`` and body = expiry (big-endian i64, milliseconds, 0:
never) ‖ payload. The associated data ``ad`` is the application's binding (who, which
request): mixed into the tag and never carried, so a verifier must state the same bytes
(``--bind``) or the tag fails, exactly as if the token had been forged. Empty associated data
still contributes its 8-byte zero length. Signed, not encrypted: anyone can read the body.

rmcp 3.2.0's keyring (#1128, ``rs2``, :mod:`.mcp_rs2`) adds the key's id to the token and to the
tag; ``rs1`` tokens carry none, so the verifier checks the tag under each usable ``mcp-rs-v1``
key, primary first (there are as many as rotation makes, rarely more than two).

This module only seals and opens; the body's expiry and payload are read by
:mod:`mrtr_state.tokens.envelopes.mcp_rs`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..._encoding import EncodingError, b64url_encode, encode_wire, json_loads
from ..._primitives import Keyed, hmac_key
from ...errors import BadSignature, KeyRetired, MalformedToken, UnknownKey
from ...keys.derivation import mcp_rs2_kid
from . import Anatomy, KeylessWire, Routes, decode_segment, mac_signer, usable

if TYPE_CHECKING:
    from ...keys.key import Key
    from ...keys.keyset import Keyset

__all__ = ["RmcpWire", "mac_input"]

_MAC_BYTES = 32
# rmcp refuses a key id segment longer than 340 characters (255 bytes, base64url) before
# decoding it
_KID_SEGMENT_MAX = 340


def _u64(size: int) -> bytes:
    return size.to_bytes(8, "big")


def mac_input(domain: bytes, associated: bytes, body: bytes, sdk_kid: bytes | None = None) -> bytes:
    """What the tag covers: the domain, then the key id (rs2) and the associated data, each
    after its length as a big-endian u64, then the body."""
    kid_part = b"" if sdk_kid is None else _u64(len(sdk_kid)) + sdk_kid
    return domain + kid_part + _u64(len(associated)) + associated + body


class RmcpWire(KeylessWire["Keyed"]):
    """rmcp's HMAC wire, ``rs1`` (this class: no key id, its keys tried) or, with key ids,
    ``rs2`` (:mod:`.mcp_rs2`); see the module docstring."""

    confidential = False
    #: the tag covers associated data the verifier states (the facade passes the bind value)
    associates = True
    version = "rs1"

    def __init__(self, name: str, alg: str) -> None:
        super().__init__(name, alg)
        self._keyring = self.version == "rs2"
        self._prefix = self.version + "."
        self._sections = 4 if self._keyring else 3
        self._domain = f"rmcp/mrtr/request-state/{'v2' if self._keyring else 'v1'}".encode()
        self._layout = (
            "rs2.KID.BODY.TAG (rmcp's keyring)" if self._keyring else "rs1.BODY.TAG (rmcp)"
        )
        self._routes_name = f"{name}-routes"
        self._build_routes = self._routes  # bound once, not once per call

    # --- keys ------------------------------------------------------------------------------

    def _keyed(self, key: Key) -> tuple[Key, Keyed]:
        return key, key.prepared(self.alg, hmac_key)

    def _routes(self, keys: tuple[Key, ...]) -> Routes[str, tuple[Key, Keyed]]:
        """rs2: each usable key's rmcp key id -> the key and its keyed HMAC state; and every
        key of the algorithm by its rmcp key id, retired ones too (to refuse those by name)."""
        of_alg = [key for key in keys if key.alg == self.alg and key.sdk_kid is not None]
        routes: dict[str, tuple[Key, Keyed]] = {}
        for key in usable(of_alg, self.alg):
            assert key.sdk_kid is not None  # (of_alg holds none without one)
            routes[key.sdk_kid] = self._keyed(key)
        return Routes(routes, of_alg)

    # --- seal and open ---------------------------------------------------------------------

    def seal(self, key: Key, plaintext: bytes, nonce: bytes = b"", associated: bytes = b"") -> str:
        keyed = key.prepared(self.alg, hmac_key).copy()
        body = b64url_encode(plaintext)
        if self._keyring:
            if key.sdk_kid is None:  # the keyset refuses such a key; never mint without an id
                raise ValueError(f"key {key.kid} has no rmcp key id")
            kid = key.sdk_kid.encode("utf-8")
            keyed.update(mac_input(self._domain, associated, plaintext, kid))
            return f"{self._prefix}{b64url_encode(kid)}.{body}.{b64url_encode(keyed.finalize())}"
        keyed.update(mac_input(self._domain, associated, plaintext))
        return f"{self._prefix}{body}.{b64url_encode(keyed.finalize())}"

    def _split(self, token: str) -> list[str]:
        """The sections, in rmcp's order of checks: their count and the prefix first."""
        sections = token.split(".")
        if len(sections) != self._sections or sections[0] + "." != self._prefix:
            raise MalformedToken(
                f"not an {self.name} token: {self._layout} has {self._sections} sections, "
                f"this has {len(sections)}"
            )
        return sections

    def _kid(self, segment: str) -> str:
        """rs2: the key id a token names: 1-255 bytes of UTF-8, else refused before any key."""
        if len(segment) > _KID_SEGMENT_MAX:
            raise MalformedToken(f"{self.name} key id is longer than 255 bytes")
        raw = decode_segment(segment, f"{self.name} key id")
        try:
            kid = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise MalformedToken(f"{self.name} key id is not UTF-8") from None
        if not raw or len(raw) > 255:
            raise MalformedToken(f"{self.name} key id must be 1-255 bytes, this one is {len(raw)}")
        return kid

    def _keyring_key(self, keyset: Keyset, kid: str) -> tuple[Key, Keyed]:
        """rs2: the usable key under rmcp key id ``kid``, or the refusal naming why not."""
        routes = keyset.derived(self._routes_name, self._build_routes)
        route = routes.usable.get(kid)
        if route is not None:
            return route
        named = next((key for key in routes.by_kid.values() if key.sdk_kid == kid), None)
        if named is None:
            raise UnknownKey(f"no usable {self.alg} key has the rmcp key id {kid!r}").needing(
                "import_key", alg=self.alg, sdk_kid="needed"
            )
        raise KeyRetired(f"key {named.kid} (rmcp key id {kid!r}) is retired")

    def open(self, keyset: Keyset, token: str, associated: bytes = b"") -> tuple[Key, bytes]:
        sections = self._split(token)
        if self._keyring:
            kid = self._kid(sections[1])
            body = decode_segment(sections[2], f"{self.name} body")
            tag = decode_segment(sections[3], f"{self.name} tag")
            tried = [self._keyring_key(keyset, kid)]
            signed = mac_input(self._domain, associated, body, kid.encode("utf-8"))
        else:
            body = decode_segment(sections[1], f"{self.name} body")
            tag = decode_segment(sections[2], f"{self.name} tag")
            tried = self._tried(keyset)
            signed = mac_input(self._domain, associated, body)
        # a tag of another length never matches (rmcp: an integrity failure, as here)
        key = mac_signer(tried, signed, tag)
        if key is not None:
            return key, body
        raise BadSignature(
            "signature mismatch: tampered, forged, another key, or other associated data "
            "(the server's binding, stated as the bind value)"
        )

    def anatomy(self, token: str) -> Anatomy:
        sections = self._split(token)
        kid = self._kid(sections[1]) if self._keyring else ""
        body = decode_segment(sections[-2], f"{self.name} body")
        tag = decode_segment(sections[-1], f"{self.name} tag")
        expiry = int.from_bytes(body[:8], "big", signed=True) if len(body) >= 8 else None
        fields: tuple[tuple[str, str], ...] = (
            ("key id", repr(kid)) if kid else self.no_kid(),
            ("expiry", _expiry_text(expiry)),
            ("payload", f"{max(len(body) - 8, 0)} bytes, readable by anyone"),
            ("tag", f"{len(tag)} bytes, HMAC-SHA256 over the body and associated data"),
        )
        segments: tuple[tuple[str, str], ...] = (("prefix", self._prefix),)
        if self._keyring:
            segments += (("key id", sections[1]), (".", "."))
        segments += (("body", sections[-2]), (".", "."), ("tag", sections[-1]))
        return Anatomy(
            format=self.name,
            kid=mcp_rs2_kid(b"", kid) if kid else "",
            segments=segments,
            fields=fields,
            confidential=False,
            readable=None if expiry is None else _readable(expiry, body[8:]),
        )


def _readable(expiry: int, payload: bytes) -> bytes:
    """The body as inspect shows anyone (its expiry, and its payload as JSON if it is JSON,
    else as base64url), written as a JSON object."""
    try:
        shown: dict[str, object] = {"expiry_ms": expiry, "payload": json_loads(payload)}
    except EncodingError:
        shown = {"expiry_ms": expiry, "payload_base64url": b64url_encode(payload)}
    # what was just parsed, written again: no depth check (the wrapper adds a level), and a
    # lone surrogate kept as its escape, for inspect to refuse by name
    return encode_wire(shown)


def _expiry_text(expiry: int | None) -> str:
    if expiry is None:
        return "missing (the body is shorter than its 8-byte expiry)"
    if expiry == 0:
        return "0: never expires"
    return f"{expiry} ms after the epoch"
