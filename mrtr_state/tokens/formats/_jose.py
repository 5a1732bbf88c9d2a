"""What jws and jwe share: compact serialisation and the exact-header rule.

A JOSE header is an invitation to choose the algorithm (``alg: none``), fetch keys (``jku``,
``x5u``), embed keys (``jwk``, ``x5c``), require extensions (``crit``), inflate (``zip``) or derive
keys at attacker-chosen cost (``p2c``). mrtr-state reads none of it. The only header a verifier
accepts is the exact byte string the keyset would write for the token's key id; everything else is
refused before any key is looked up. The header is parsed only to say *why* it was refused.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Generic, TypeVar

from ..._encoding import EncodingError, b64url_encode, is_kid, json_loads
from ..._printable import printable
from ...errors import InvalidToken, MalformedToken
from . import Anatomy, Routes, decode_segment, refusal, usable

if TYPE_CHECKING:
    from ...keys.key import Key
    from ...keys.keyset import Keyset

R = TypeVar("R")
S = TypeVar("S")

TYP = "mrtr-state+jwt"
# Members that make a JOSE library fetch, embed, derive, inflate or extend; named in refusals.
DANGEROUS_MEMBERS = frozenset({"jku", "x5u", "jwk", "x5c", "crit", "zip", "p2s", "p2c", "epk"})


class ExactHeader:
    """The one header a format writes: fixed members around the key id, nothing else."""

    __slots__ = ("_prefix", "_suffix", "fixed", "what")

    def __init__(self, what: str, fixed: tuple[tuple[str, str], ...]) -> None:
        self.what = what  # "jws" or "jwe"
        self.fixed = fixed  # members before kid, in order, e.g. (("alg", "HS256"),)
        members = "".join(f'"{name}":"{value}",' for name, value in fixed)
        self._prefix = ("{" + members + '"kid":"').encode("ascii")
        self._suffix = f'","typ":"{TYP}"}}'.encode("ascii")

    def encode(self, kid: str) -> str:
        """The base64url header segment for ``kid``."""
        return b64url_encode(self._prefix + kid.encode("ascii") + self._suffix)

    def kid_of(self, segment: str) -> str:
        """The key id of an exact header segment; any other header is refused with its reason."""
        header = decode_segment(segment, f"{self.what} header")
        prefix, suffix = self._prefix, self._suffix
        if (
            len(header) == len(prefix) + 8 + len(suffix)
            and header.startswith(prefix)
            and (header.endswith(suffix))
        ):
            kid = header[len(prefix) : len(prefix) + 8].decode("ascii", "replace")
            if is_kid(kid):
                return kid
        raise MalformedToken(self._why_not(header))

    def _why_not(self, header: bytes) -> str:
        what = f"{self.what} header"
        try:
            document = json_loads(header)
        except EncodingError as err:
            return f"{what}: {err}"
        if not isinstance(document, dict):
            return f"{what} is not a JSON object"
        dangerous = sorted(DANGEROUS_MEMBERS & set(document))
        if dangerous:
            return f"{what} has {', '.join(dangerous)}, which mrtr-state never accepts"
        for name, value in self.fixed:
            if document.get(name) != value:
                shown = printable(str(document.get(name)), 40)
                return f"{what} {name} '{shown}' is not accepted (only {value})"
        allowed = {name for name, _ in self.fixed} | {"kid", "typ"}
        unknown = sorted(set(document) - allowed)
        if unknown:
            return f"{what} has unknown members {', '.join(printable(m, 20) for m in unknown)}"
        kid = document.get("kid")
        if not is_kid(kid):
            return f"{what} kid must be 8 lowercase hex digits"
        if document.get("typ") != TYP:
            return f"{what} typ must be {TYP}"
        return f"{what} is not byte for byte the header mrtr-state writes (order or spacing)"


def split_compact(token: str, parts: int, what: str) -> list[str]:
    segments = token.split(".")
    if len(segments) != parts:
        raise MalformedToken(f"a {what} token has {parts} segments, this one {len(segments)}")
    return segments


class JoseWire(Generic[R, S]):
    """What the jws and jwe wires share: the exact header (:attr:`header`) names the key, and a
    token's header segment is looked up as it stands among the segments of the usable keys
    (one dictionary look-up; anything else is refused for its true reason, :meth:`_no_route`).

    A subclass says what a route holds (``R``, from :meth:`_route_of`) and what sealing under
    a key needs (``S``, from :meth:`_sealer`); both are built once (per keyset version, per
    key) and kept.
    """

    associates = False
    confidential: bool
    header: ExactHeader

    def __init__(self, name: str, alg: str) -> None:
        self.name = name
        self.alg = alg
        self._routes_name = f"{name}-routes"
        self._sealer_name = f"{name}-sealer"
        # bound once, not once per call
        self._build_routes = self._routes
        self._build_sealer = self._sealer

    def _route_of(self, key: Key) -> R:
        raise NotImplementedError

    def _sealer(self, key: Key) -> S:
        raise NotImplementedError

    def _routes(self, keys: tuple[Key, ...]) -> Routes[str, R]:
        encode = self.header.encode
        return Routes(
            {encode(key.kid): self._route_of(key) for key in usable(keys, self.alg)}, keys
        )

    def _anatomy(
        self,
        header: str,
        kid: str,
        labelled: tuple[tuple[str, str], ...],
        fields: tuple[tuple[str, str], ...],
        readable: bytes | None = None,
    ) -> Anatomy:
        """The anatomy of a token whose ``header`` segment names ``kid``: the header, then the
        ``labelled`` segments, dot by dot; the key id, then ``fields``."""
        segments: tuple[tuple[str, str], ...] = (("header", header),)
        for label, text in labelled:
            segments += ((".", "."), (label, text))
        return Anatomy(
            format=self.name,
            kid=kid,
            segments=segments,
            fields=(("key id", kid), *fields),
            confidential=self.confidential,
            header={**dict(self.header.fixed), "kid": kid, "typ": TYP},
            readable=readable,
        )

    def _no_route(self, keyset: Keyset, header: str) -> InvalidToken:
        """Why a token's ``header`` segment is no usable key's (a wire looks its route up
        itself, ``keyset.derived(self._routes_name, ...).usable.get(header)``: one call less on
        every token): a foreign header, an unknown or a retired key, precisely."""
        routes = keyset.derived(self._routes_name, self._build_routes)
        return refusal(routes.by_kid, self.header.kid_of(header), self.alg)
