"""Wires: one module per token layout, each a page long and checkable against its specification.

A wire turns plaintext into a token string under one key, and back: it takes the key id from
the token, looks the key up by that id (one dictionary look-up, never a trial of every key; an
SDK whose tokens carry no id gets its few keys tried, primary first) and takes the algorithm
from the key, never from the token. It knows nothing of claims, lifetimes or bindings: the
envelope its format pairs it with (:mod:`mrtr_state.tokens.registry`) reads the plaintext. A wire is
given its format's name and key algorithm by the table; it imports neither the table nor any
envelope.

What every wire shares is here: the :class:`Wire` contract, :class:`Anatomy` (what ``inspect``
reads without a key), the look-ups a wire builds once per keyset version, and
:class:`KeylessWire`, the part of the SDK wires whose tokens name no key.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

from ..._encoding import EncodingError, b64url_decode, compare_digest
from ...errors import KeyRetired, MalformedToken, UnknownKey, WrongFormat

if TYPE_CHECKING:
    from ..._primitives import Keyed
    from ...keys.key import Key
    from ...keys.keyset import Keyset

__all__ = [
    "Anatomy",
    "KeylessWire",
    "Routes",
    "Wire",
    "candidates",
    "decode_segment",
    "mac_signer",
    "no_keys",
    "refusal",
    "usable",
]

K = TypeVar("K", bytes, str)
R = TypeVar("R")


class Anatomy:
    """What can be read from a token without its key.

    ``kid`` is the keyset's id of the key the token names: derived from what it carries, or,
    for a token that names none, set by ``inspect`` to the key that opened it (empty until
    then). ``segments`` split the token text itself, in order, into labelled pieces that join
    back to the token (for colouring). ``fields`` are decoded facts (key id, nonce, sizes).
    ``readable`` holds the payload bytes when the format does not encrypt them.

    A plain record (no dataclass machinery, which would cost every command's start-up).
    """

    __slots__ = ("confidential", "fields", "format", "header", "kid", "readable", "segments")

    def __init__(
        self,
        *,
        format: str,
        kid: str,
        segments: tuple[tuple[str, str], ...],
        fields: tuple[tuple[str, str], ...],
        confidential: bool,
        header: dict[str, object] | None = None,
        readable: bytes | None = None,
    ) -> None:
        self.format = format
        self.kid = kid
        self.segments = segments
        self.fields = fields
        self.confidential = confidential
        self.header = header
        self.readable = readable

    def __repr__(self) -> str:
        return f"Anatomy(format={self.format!r}, kid={self.kid!r}, fields={self.fields!r})"


class Wire(Protocol):
    """The contract every wire class fulfils; the table makes one per format, as
    ``WireClass(format name, key algorithm)``."""

    name: str
    alg: str
    confidential: bool
    #: whether the tag also covers associated data the verifier states (rmcp's wires)
    associates: bool

    def seal(self, key: Key, plaintext: bytes, nonce: bytes = b"", associated: bytes = b"") -> str:
        """Protect ``plaintext`` under ``key`` (a key of :attr:`alg`).

        ``nonce``: 12 random bytes drawn for this token alone (minting draws a token's random
        bytes in one system call), or empty to draw them here; wires without a nonce ignore it.
        ``associated``: the bind value's bytes, which the tag also covers when the wire
        :attr:`associates`; every other wire ignores it (its envelope carries a bind value
        itself, or refuses one as a binding it does not carry).
        """
        ...

    def open(self, keyset: Keyset, token: str, associated: bytes = b"") -> tuple[Key, bytes]:
        """Authenticate (and decrypt) ``token``: the key that opened it and the plaintext, or
        the specific refusal. ``associated`` as for :meth:`seal`."""
        ...

    def anatomy(self, token: str) -> Anatomy:
        """Parse the structure of ``token`` without any key (nothing here is trusted)."""
        ...


class Routes(Generic[K, R]):
    """A wire's look-ups for one version of a keyset (built once per version by
    ``keyset.derived``): ``usable`` maps what a token carries to the route of each key that
    may verify it; ``by_kid`` holds every key of that version, so that a token whose id has no
    route is refused for the true reason (:func:`refusal`)."""

    __slots__ = ("by_kid", "usable")

    def __init__(self, usable: dict[K, R], keys: Iterable[Key]) -> None:
        self.usable: dict[K, R] = usable
        self.by_kid: Mapping[str, Key] = {key.kid: key for key in keys}


def usable(keys: Iterable[Key], alg: str) -> list[Key]:
    """The keys of ``alg`` that may verify tokens (not retired), in the keyset's order."""
    return [key for key in keys if key.alg == alg and key.status != "retired"]


def candidates(keys: Iterable[Key], alg: str, build: Callable[[Key], R]) -> list[R]:
    """For tokens that carry no key id: each usable key of ``alg`` (primary first, then in the
    keyset's order), built into what the wire tries it with."""
    ordered = sorted(usable(keys, alg), key=lambda key: key.status != "primary")
    return [build(key) for key in ordered]


def refusal(by_kid: Mapping[str, Key], kid: str, alg: str) -> UnknownKey | WrongFormat | KeyRetired:
    """Why a token naming ``kid`` has no route among the usable keys of ``alg`` in a keyset
    version whose keys are ``by_kid``: no such key, a key of another algorithm, or a retired
    one (the only keys of ``alg`` a route table leaves out)."""
    key = by_kid.get(kid)
    if key is None:
        return UnknownKey(f"unknown key id {kid}")
    if key.alg != alg:
        return WrongFormat(f"key {kid} is a {key.alg} key ({key.format} format), not {alg}")
    return KeyRetired(f"key {kid} is retired; its tokens are no longer accepted")


def no_keys(alg: str, what: str = "") -> UnknownKey:
    """The refusal of a token of an SDK whose tokens carry no key id when the keyset holds no
    usable key of ``alg``; it names the remedy (import the SDK's key)."""
    return UnknownKey(f"the keyset holds no usable {alg} key{what}").needing("import_key", alg=alg)


def decode_segment(segment: str, what: str) -> bytes:
    """One base64url segment of a token (``what`` names it), or the malformed-token refusal."""
    try:
        return b64url_decode(segment)
    except EncodingError as err:
        raise MalformedToken(f"{what}: {err}") from None


def mac_signer(tried: Iterable[tuple[Key, Keyed]], signed: bytes, mac: bytes) -> Key | None:
    """The key among ``tried`` whose HMAC of ``signed`` is ``mac`` (each compared in constant
    time; a MAC of another length never matches), or None."""
    for key, keyed in tried:
        state = keyed.copy()
        state.update(signed)
        if compare_digest(state.finalize(), mac):
            return key
    return None


class KeylessWire(Generic[R]):
    """What the wires of SDKs whose tokens carry no key id share: their keys are tried, usable
    ones only, primary first (:func:`candidates`), each prepared once per keyset version into
    what the wire checks a token with (``R``: a keyed HMAC state, an AES-GCM cipher).

    A subclass says how a key is prepared (:meth:`_keyed`) and does its own sealing, opening
    and anatomy; it asks :meth:`_tried` for the keys to try.
    """

    associates = False

    def __init__(self, name: str, alg: str) -> None:
        self.name = name
        self.alg = alg
        self._candidates_name = f"{name}-candidates"
        self._retired_name = f"{name}-retired"
        # bound once, not once per call
        self._build_candidates = self._candidates
        self._build_retired = self._retired

    def _keyed(self, key: Key) -> tuple[Key, R]:
        raise NotImplementedError

    def _candidates(self, keys: tuple[Key, ...]) -> list[tuple[Key, R]]:
        return candidates(keys, self.alg, self._keyed)

    def _retired(self, keys: tuple[Key, ...]) -> bool:
        return any(key.alg == self.alg and key.status == "retired" for key in keys)

    def _tried(self, keyset: Keyset) -> list[tuple[Key, R]]:
        """The keys to try on a token, primary first. None usable is refused: as retired when
        the keyset holds keys of the algorithm and every one is, else naming the remedy."""
        tried: list[tuple[Key, R]] = keyset.derived(self._candidates_name, self._build_candidates)
        if not tried:
            if keyset.derived(self._retired_name, self._build_retired):
                raise KeyRetired(
                    f"every {self.alg} key is retired; its tokens are no longer accepted"
                )
            raise no_keys(self.alg)
        return tried

    def _signed_anatomy(
        self, before: tuple[tuple[str, str], ...], body: str, mac: str, keyed: str
    ) -> Anatomy:
        """The anatomy of a token whose body is signed, not encrypted (anyone can read it):
        ``before`` the body (a prefix), then the body and its HMAC-SHA256 (``keyed``: under
        what key, and over what)."""
        readable = decode_segment(body, f"{self.name} body")
        decode_segment(mac, f"{self.name} MAC")
        return Anatomy(
            format=self.name,
            kid="",
            segments=(*before, ("body", body), (".", "."), ("MAC", mac)),
            fields=(
                self.no_kid(),
                ("body", f"{len(readable)} bytes, readable by anyone"),
                ("MAC", f"HMAC-SHA256 {keyed}"),
            ),
            confidential=False,
            readable=readable,
        )

    def no_kid(self) -> tuple[str, str]:
        """The anatomy's key id field of a token that names none."""
        return ("key id", f"none ({self.name} tokens carry no key id)")
