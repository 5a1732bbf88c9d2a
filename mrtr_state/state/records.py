"""Server-side requestState: the state kept in a store, the client given a handle to it.

A token carries the state to the client and back, so every replica needs the key and the state's
size is the client's to carry. A handle carries nothing: ``mh1.`` + b64url(id (16 random bytes)
‖ check (4 bytes)), 31 characters whatever the state. The state waits in a store shared by the
fleet (:mod:`mrtr_state.state.handle_store`), in a record that names the request it answers; the
retry takes it out, once. What that gives, and costs (docs/handles.md has the table):

* no key to distribute or rotate, and nothing for a client to decrypt, even with a leaked key;
* single use by construction: the record is taken atomically, and a second retry finds nothing;
* state of any size (up to the store's limit) that never leaves the server side;
* but the store must be reachable on every round trip: when it is not, the round fails closed.

What a store holds lets its reader neither use a handle nor read a state. The id is the one
secret: one SHA-512 over it (with a label) gives the handle's check value, the store key its
record is filed under, and the AES-256-GCM key its record is sealed with. A dump of the store
names no live handle (a key is a digest) and holds only ciphertext (the record's key is derived
from an id the store never sees), and whoever can write to the store cannot alter a record, or
move one under another handle, without its tag failing. The sealed record says what the state is
bound to (principal, audience, request) and its expiry; the store keeps it until the expiry plus
``max_skew``, the bound on the difference between any two clocks that judge it (as the replay
stores do), and the verifier refuses it after the expiry by its own clock.

The lock makes taking atomic *and* bound: it is SHA-256 over the handle's id and the binding the
retry states (principal, audience, request fingerprint), stored in clear ahead of the sealed
record because the store compares it. The store hands the record over (and deletes it) only when
the retry's lock is the record's; a record presented by another principal or for another request
stays where it is, for its rightful retry, and the verifier opens it only to name the reason.
Without the id nobody can compute a lock, so the lock in a dump gives a guesser nothing to test
principals against.

The sealed record is a fixed binary layout, not JSON: its state can be a mebibyte, and a layout
of lengths copies it where JSON would escape it on the way in and scan it on the way out. It is
read only after its tag has authenticated it, with ``struct`` (C); its lengths are checked all
the same (one reader, whatever wrote the bytes).

Nothing here does I/O: it makes handles, locks and records, and checks a record taken from a
store against a retry, one ordered run of checks each raising its specific error.
"""

from __future__ import annotations

import hashlib
import math
import struct
from typing import Any, NamedTuple

from .._encoding import EncodingError, b64url_decode, b64url_encode, compare_digest, encode_wire
from .._entropy import random_bytes
from .._primitives import AESGCM, InvalidTag
from ..errors import (
    AudienceMismatch,
    ExpiredToken,
    InvalidClaims,
    MalformedToken,
    PrincipalMismatch,
    RequestMismatch,
)
from ..tokens.binding import Binding
from ..tokens.registry import HANDLE_PREFIX

__all__ = [
    "DEFAULT_MAX_STATE",
    "HANDLE_LENGTH",
    "PREFIX",
    "Handle",
    "Record",
    "accept",
    "decode_record",
    "encode_record",
    "is_handle",
    "lock_matches",
    "lock_of",
    "new_handle",
    "owner_digest",
    "read_handle",
    "redeem",
]

PREFIX = HANDLE_PREFIX
_ID = 16
_CHECK = 4
#: Every handle has this many characters.
HANDLE_LENGTH = len(PREFIX) + 27
#: The largest state a record holds by default (1 MiB).
DEFAULT_MAX_STATE = 1 << 20
_DERIVE_LABEL = b"mrtr-state/handle/v1/derive\x00"
_LOCK_LABEL = b"mrtr-state/handle/v1/lock\x00"
_OWNER_LABEL = b"mrtr-state/handle/v1/owner\x00"
#: The associated data of every sealed record: its format and version.
_SEAL_AAD = b"mrtr-state/handle/v1/record"
_NONCE = 12
_TAG = 16
#: A stored value's lock: 43 base64url characters, then a newline, then the sealed record.
_LOCK = 43
_SEALED_AT = _LOCK + 1
#: Where records live in the store.
KEY_PREFIX = "mrtr-state:state:"
#: The sealed record's header: version, iat and exp (ms), then the lengths of its principal,
#: audience and request fingerprint (_ABSENT for none); the three, then the state, follow.
_HEADER = struct.Struct(">BqqIII")
_VERSION = 1
_ABSENT = 0xFFFFFFFF
#: Times (s) past which iat or exp in milliseconds would not fit the header's 64 bits.
_LATEST = 9e15


class Handle:
    """A handle and what its id derives: the store key of its record and the record's key.

    Not a tuple: nothing may unpack or ``_asdict()`` the id and key into a log line; its repr
    names the record by its ``ref`` only."""

    __slots__ = ("ident", "key", "secret", "text")

    def __init__(self, text: str, ident: bytes, key: str, secret: bytes) -> None:
        self.text = text
        self.ident = ident
        #: where the record lives in the store (a digest of the id, never the id)
        self.key = key
        #: AES-256-GCM key of the record (never stored)
        self.secret = secret

    @property
    def ref(self) -> str:
        """Names the record in logs: the last 8 characters of its key (never the handle)."""
        return self.key[-8:]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Handle) and compare_digest(self.ident, other.ident)

    def __hash__(self) -> int:
        return hash(self.key)

    def __repr__(self) -> str:  # a traceback or a log line must not show the id or the key
        return f"Handle(ref={self.ref!r})"


def _handle(ident: bytes, derived: bytes) -> Handle:
    text = PREFIX + b64url_encode(ident + derived[:_CHECK])
    return Handle(text, ident, KEY_PREFIX + b64url_encode(derived[4:28]), derived[32:])


def _derive(ident: bytes) -> bytes:
    """Check value [0:4], store key [4:28] and record key [32:64], from one hash of the id."""
    return hashlib.sha512(_DERIVE_LABEL + ident).digest()


def is_handle(text: str) -> bool:
    """Whether ``text`` claims to be a handle (its prefix); :func:`read_handle` says if it is."""
    return text.startswith(PREFIX)


def new_handle() -> Handle:
    """A fresh handle: 128 random bits, drawn from the OS."""
    ident = random_bytes(_ID)
    return _handle(ident, _derive(ident))


def read_handle(text: str) -> Handle:
    """The handle ``text`` is, read strictly: exact length, canonical base64url, a check value
    that matches (so mistyped or made-up text is refused without asking the store)."""
    if len(text) != HANDLE_LENGTH or not text.startswith(PREFIX):
        raise MalformedToken(
            f"not a state handle: a handle is {HANDLE_LENGTH} characters, {PREFIX} and "
            f"{HANDLE_LENGTH - len(PREFIX)} more"
        )
    try:
        raw = b64url_decode(text[len(PREFIX) :])
    except EncodingError as err:
        raise MalformedToken(f"not a state handle: {err}") from None
    ident = raw[:_ID]
    derived = _derive(ident)
    if not compare_digest(raw[_ID:], derived[:_CHECK]):
        raise MalformedToken("not a state handle: its check value does not match")
    return _handle(ident, derived)


def lock_of(handle: Handle, binding: Binding) -> str:
    """What a retry must present for the store to hand the record over: SHA-256 over the
    handle's id and the binding stated (43 base64url characters)."""
    parts = encode_wire([binding.principal, binding.audience, binding.fingerprint()])
    return b64url_encode(hashlib.sha256(_LOCK_LABEL + handle.ident + parts).digest())


def owner_digest(handle: Handle, principal: str | None) -> str | None:
    """What ``inspect`` shows of a record's principal: a digest keyed by the handle's id, so
    that it neither links one principal's records nor lets a name be guessed without the
    handle."""
    if principal is None:
        return None
    text = principal.encode("utf-8", "surrogatepass")
    return b64url_encode(hashlib.sha256(_OWNER_LABEL + handle.ident + text).digest()[:16])


class Record(NamedTuple):
    """What a store keeps for one handle, opened. ``sub`` is the principal bound (or None)."""

    state: str
    iat: float
    exp: float
    sub: str | None
    aud: str | None
    rid: str | None

    def to_dict(self, handle: Handle) -> dict[str, Any]:
        """For ``inspect``: every member but the state, the principal as a digest only."""
        return {
            "iat": self.iat,
            "exp": self.exp,
            "own": owner_digest(handle, self.sub),
            "aud": self.aud,
            "rid": self.rid,
        }

    def __repr__(self) -> str:  # neither the state nor the principal in a traceback
        return f"Record(iat={self.iat!r}, exp={self.exp!r}, aud={self.aud!r}, rid={self.rid!r})"


def _utf8(text: str | None) -> bytes:
    return b"" if text is None else text.encode("utf-8", "surrogatepass")


def encode_record(handle: Handle, state: str, binding: Binding, *, now: float, ttl: float) -> bytes:
    """The bytes a store keeps for ``handle``: its lock, a newline, then the record sealed under
    the handle's key (a random 12-byte nonce, then ciphertext and tag)."""
    if not (math.isfinite(now) and math.isfinite(ttl) and abs(now) + abs(ttl) < _LATEST):
        raise ValueError(
            f"a record is made at a finite time for a finite ttl within range, not {now}, {ttl}"
        )
    texts = [_utf8(binding.principal), _utf8(binding.audience), _utf8(binding.fingerprint())]
    sub = _ABSENT if binding.principal is None else len(texts[0])
    aud = _ABSENT if binding.audience is None else len(texts[1])
    rid = _ABSENT if binding.fingerprint() is None else len(texts[2])
    iat_ms = math.floor(now * 1000)
    exp_ms = math.floor((now + ttl) * 1000)  # never later than the ttl says
    header = _HEADER.pack(_VERSION, iat_ms, exp_ms, sub, aud, rid)
    plaintext = b"".join((header, *texts, _utf8(state)))
    nonce = random_bytes(_NONCE)
    sealed = AESGCM(handle.secret).encrypt(nonce, plaintext, _SEAL_AAD)
    return lock_of(handle, binding).encode("ascii") + b"\n" + nonce + sealed


def _text(plaintext: bytes, start: int, length: int) -> tuple[str | None, int]:
    if length == _ABSENT:
        return None, start
    end = start + length
    if end > len(plaintext):
        raise InvalidClaims("the stored record's lengths overrun it")
    return plaintext[start:end].decode("utf-8", "surrogatepass"), end


def decode_record(handle: Handle, value: bytes) -> Record:
    """The record of ``handle`` as a store returned it, or :class:`InvalidClaims` naming what is
    wrong. It is authenticated under the handle's key first: a record altered in the store,
    filed under another handle's key, or not made by mrtr-state opens as nothing."""
    if len(value) < _SEALED_AT + _NONCE + _TAG or value[_LOCK:_SEALED_AT] != b"\n":
        raise InvalidClaims("the stored record is not a version 1 state record")
    try:
        plaintext = AESGCM(handle.secret).decrypt(
            value[_SEALED_AT : _SEALED_AT + _NONCE], value[_SEALED_AT + _NONCE :], _SEAL_AAD
        )
    except InvalidTag:
        raise InvalidClaims(
            "the stored record does not open under its handle's key (altered in the store, or "
            "not filed for this handle)"
        ) from None
    if len(plaintext) < _HEADER.size or plaintext[0] != _VERSION:
        raise InvalidClaims("the stored record is not a version 1 state record")
    _, iat_ms, exp_ms, *lengths = _HEADER.unpack_from(plaintext)
    try:
        sub, at = _text(plaintext, _HEADER.size, lengths[0])
        aud, at = _text(plaintext, at, lengths[1])
        rid, at = _text(plaintext, at, lengths[2])
        state = plaintext[at:].decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        raise InvalidClaims("the stored record's text is not UTF-8") from None
    return Record(state, iat_ms / 1000, exp_ms / 1000, sub, aud, rid)


def accept(record: Record, binding: Binding, *, now: float) -> str:
    """The state of ``record``, once every check passes; else the specific error.

    The store handed the record over only if the retry's lock matched, so on that path every
    binding matches by construction; the checks still run in order, the same for a record read
    on a mismatch (to name the reason) or peeked at by ``verify``. Expiry first: a record past its
    ``exp`` by this verifier's clock is refused whoever presents it.
    """
    if not now <= record.exp:  # a NaN fails too
        raise ExpiredToken(f"the state expired {now - record.exp:.0f} s ago")
    if (record.sub is None) != (binding.principal is None):
        stated = "the record is bound to none" if record.sub is None else "none was given"
        raise PrincipalMismatch(f"principal mismatch: {stated}")
    if record.sub is not None and not compare_digest(_utf8(record.sub), _utf8(binding.principal)):
        raise PrincipalMismatch("principal mismatch")
    if record.aud != binding.audience:
        raise AudienceMismatch("audience mismatch")
    if record.rid != binding.fingerprint():
        raise RequestMismatch("request mismatch: the state answers another request")
    return record.state


def lock_matches(value: bytes, lock: str) -> bool:
    """Whether a stored value was filed with ``lock``: what the store's take compares, for a
    reader that only peeked."""
    return value[:_LOCK] == lock.encode("ascii")


def redeem(handle: Handle, value: bytes, handed: bool, binding: Binding, *, now: float) -> Record:
    """The record of ``handle`` as a store gave it, once every check passes, in order: it opens
    under the handle's key, :func:`accept`'s checks, and it was ``handed`` over for the retry's
    lock. The one accepting path of the proxy, the SDK codec and ``verify``.

    A record whose bindings all match but whose lock does not was written over in the store: it
    is refused (the store did not delete it, so taking it would not be single use)."""
    record = decode_record(handle, value)
    accept(record, binding, now=now)
    if not handed:
        raise InvalidClaims("the stored record's lock does not match its bindings")
    return record
