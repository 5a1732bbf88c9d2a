"""Server-side requestState: the state kept in a store, the client given a handle to it.

A token carries the state to the client and back, so every replica needs the key and the state's
size is the client's to carry. A handle carries nothing: ``mh1.`` + b64url(id (16 random bytes)
‖ check (4 bytes)), 31 characters whatever the state. The state waits in a store shared by the
fleet (:mod:`mrtr_state.handle_store`), in a record that names the request it answers; the retry
takes it out, once. What that gives, and costs (docs/handles.md has the table):

* no key to distribute or rotate, and nothing for a client to decrypt, even with a leaked key;
* single use by construction: the record is taken atomically, and a second retry finds nothing;
* state of any size (up to the store's limit) that never leaves the server side;
* but the store must be reachable on every round trip: when it is not, the round fails closed.

What a store holds cannot let its reader use a handle: a record is filed under a digest of the
handle's id (a different label from the lock below), so a dump of the store names no live
handle. It keeps the owner only as a salted digest of the principal. The record says what the
state is bound to (owner, audience, request) and its expiry; the store keeps it until the expiry
plus ``max_skew``, the bound on the difference between any two clocks that judge it (as the
replay stores do), and the verifier refuses it after the expiry by its own clock.

The lock makes taking atomic *and* bound: it is SHA-256 over the handle's id and the binding the
retry states (principal, audience, request fingerprint). The store hands the record over (and
deletes it) only when the retry's lock is the record's; a record presented by another principal
or for another request stays where it is, for its rightful retry, and the verifier reads it only
to name the reason. Without the id nobody can compute a lock, so the lock in a dump gives a
guesser nothing to test principals against.

Nothing here does I/O: it makes handles, locks and records, and checks a record taken from a
store against a retry, one ordered run of checks each raising its specific error. Records come
from a store, not from an authenticated token, so they are read with the strict JSON reader.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any, NamedTuple

from ._encoding import (
    EncodingError,
    b64url_decode,
    b64url_encode,
    compare_digest,
    encode_wire,
    json_loads,
)
from ._entropy import random_bytes
from .binding import Binding
from .errors import (
    AudienceMismatch,
    ExpiredToken,
    InvalidClaims,
    MalformedToken,
    PrincipalMismatch,
    RequestMismatch,
)
from .registry import HANDLE_PREFIX

__all__ = [
    "DEFAULT_MAX_STATE",
    "HANDLE_LENGTH",
    "PREFIX",
    "Record",
    "accept",
    "decode_record",
    "encode_record",
    "handle_id",
    "is_handle",
    "lock_of",
    "new_handle",
    "record_key",
]

PREFIX = HANDLE_PREFIX
_ID = 16
_CHECK = 4
#: Every handle has this many characters.
HANDLE_LENGTH = len(PREFIX) + 27
#: The largest state a record holds by default (1 MiB).
DEFAULT_MAX_STATE = 1 << 20
_CHECK_LABEL = b"mrtr-state/handle/v1/check\x00"
_KEY_LABEL = b"mrtr-state/handle/v1/key\x00"
_LOCK_LABEL = b"mrtr-state/handle/v1/lock\x00"
_OWNER_LABEL = b"mrtr-state/handle/v1/owner\x00"
#: Where records live in the store.
KEY_PREFIX = "mrtr-state:state:"
_SALT = 8
_RECORD_MEMBERS = frozenset({"v", "st", "iat", "exp", "own", "aud", "rid"})


def is_handle(text: str) -> bool:
    """Whether ``text`` claims to be a handle (its prefix); :func:`handle_id` says if it is."""
    return text.startswith(PREFIX)


def new_handle() -> tuple[str, bytes]:
    """A fresh handle and its id: 128 random bits, drawn from the OS."""
    ident = random_bytes(_ID)
    return PREFIX + b64url_encode(ident + _check(ident)), ident


def _check(ident: bytes) -> bytes:
    return hashlib.sha256(_CHECK_LABEL + ident).digest()[:_CHECK]


def handle_id(text: str) -> bytes:
    """The id a handle carries, read strictly: exact length, canonical base64url, a check value
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
    if not compare_digest(raw[_ID:], _check(ident)):
        raise MalformedToken("not a state handle: its check value does not match")
    return ident


def record_key(ident: bytes) -> str:
    """The store key of a handle's record: a digest of its id, never the id itself."""
    return KEY_PREFIX + b64url_encode(hashlib.sha256(_KEY_LABEL + ident).digest())


def _binding_parts(binding: Binding) -> list[str | None]:
    return [binding.principal, binding.audience, binding.fingerprint()]


def lock_of(ident: bytes, binding: Binding) -> str:
    """What a retry must present for the store to hand the record over: SHA-256 over the
    handle's id and the binding stated (43 base64url characters)."""
    parts = encode_wire(_binding_parts(binding))
    return b64url_encode(hashlib.sha256(_LOCK_LABEL + ident + parts).digest())


def _owner(principal: str, salt: bytes) -> str:
    digest = hashlib.sha256(_OWNER_LABEL + salt + principal.encode("utf-8")).digest()[:16]
    return b64url_encode(salt + digest)


class Record(NamedTuple):
    """What a store keeps for one handle. ``own`` is a salted digest of the principal."""

    state: str
    iat: float
    exp: float
    own: str | None
    aud: str | None
    rid: str | None

    def to_dict(self) -> dict[str, Any]:
        """For ``inspect``: every member but the state."""
        return {"iat": self.iat, "exp": self.exp, "own": self.own, "aud": self.aud, "rid": self.rid}


def encode_record(ident: bytes, state: str, binding: Binding, *, now: float, ttl: float) -> bytes:
    """The bytes a store keeps for handle ``ident``: its lock, a newline, the record's JSON."""
    owner = None if binding.principal is None else _owner(binding.principal, random_bytes(_SALT))
    document = {
        "v": 1,
        "iat": now,
        "exp": now + ttl,
        "own": owner,
        "aud": binding.audience,
        "rid": binding.fingerprint(),
        "st": state,
    }
    return lock_of(ident, binding).encode("ascii") + b"\n" + encode_wire(document)


def decode_record(value: bytes) -> Record:
    """A record as a store returned it, read strictly (the store is not a token: nothing
    authenticated these bytes), or :class:`InvalidClaims` naming what is wrong."""
    _lock, newline, body = value.partition(b"\n")
    try:
        document = json_loads(body) if newline else None
    except EncodingError as err:
        raise InvalidClaims(f"the stored record is not strict JSON ({err})") from None
    if type(document) is not dict or set(document) != _RECORD_MEMBERS or document["v"] != 1:
        raise InvalidClaims("the stored record is not a version 1 state record")
    state, iat, exp = document["st"], document["iat"], document["exp"]
    if type(state) is not str:
        raise InvalidClaims("the stored record's state is not a string")
    for name in ("iat", "exp"):
        number = document[name]
        if type(number) not in (int, float) or not math.isfinite(number):
            raise InvalidClaims(f"the stored record's {name} is not a finite number")
    for name in ("own", "aud", "rid"):
        if document[name] is not None and type(document[name]) is not str:
            raise InvalidClaims(f"the stored record's {name} is not a string or null")
    return Record(state, float(iat), float(exp), document["own"], document["aud"], document["rid"])


def accept(record: Record, binding: Binding, *, now: float) -> str:
    """The state of ``record``, once every check passes; else the specific error.

    The store handed the record over only if the retry's lock matched, so on that path every
    binding matches by construction; the checks still run in order, the same for a record read
    on a mismatch (to name the reason) or peeked at by ``verify``. Expiry first: a record past its
    ``exp`` by this verifier's clock is refused whoever presents it.
    """
    if not now <= record.exp:  # a NaN fails too
        raise ExpiredToken(f"the state expired {now - record.exp:.0f} s ago")
    if (record.own is None) != (binding.principal is None):
        stated = "the record is bound to none" if record.own is None else "none was given"
        raise PrincipalMismatch(f"principal mismatch: {stated}")
    if record.own is not None and binding.principal is not None:
        try:
            salt = b64url_decode(record.own)[:_SALT]
        except EncodingError:
            salt = b""
        if not compare_digest(_owner(binding.principal, salt), record.own):
            raise PrincipalMismatch("principal mismatch")
    if record.aud != binding.audience:
        raise AudienceMismatch("audience mismatch")
    if record.rid != binding.fingerprint():
        raise RequestMismatch("request mismatch: the state answers another request")
    return record.state
