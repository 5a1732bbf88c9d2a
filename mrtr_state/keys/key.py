"""Keys, and the invariants every version of a keyset keeps.

A keyset is a JWK Set (RFC 7517) of symmetric keys. Each key serves exactly one algorithm, so a
key made for one format can never be fed to another (algorithm confusion needs a key that two
formats accept). Key ids are 4 bytes, written as 8 hex digits, carried in every token so that
verification finds its key in one dictionary look-up instead of trying each key in turn.

Invariants, checked whenever a version of a keyset is built (:class:`KeyTable`, as in Tink):
unique key ids, at most one primary per algorithm, known algorithms (the format table's,
:data:`mrtr_state.tokens.registry.KEY_ALGORITHMS`), secrets of the right length, ids that follow
from their secrets where an SDK's do, known statuses. A keyset that breaks one is refused with a
message saying what is wrong; it is never repaired silently.

Secrets never appear in ``repr``, ``str`` or error messages.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from .._encoding import b64url_encode, is_kid
from ..errors import KeysetInvalid
from ..tokens.registry import (
    KEY_ALGORITHMS,
    SDK_SECRET_BYTES,
    derived_kid,
    sdk_kid_problem,
    secret_as_used,
    secret_length_ok,
    secret_rule,
    shape_peers,
)

__all__ = ["LAST_SECOND", "STATUSES", "Key", "KeyTable", "changed_key"]

T = TypeVar("T")

STATUSES = ("pending", "primary", "active", "retired")
#: The latest ``since`` a key may carry, 9999-12-31T23:59:59Z: any later one is damage (every
#: writer records the time of a change), and could not be shown as a date.
LAST_SECOND = 253_402_300_799


class Key:
    """One secret key. ``since`` maps each lifecycle status the key entered to when (unix s).

    Immutable, compared by identity, and the secret never shown. A plain class rather than a
    dataclass: the dataclass machinery would be most of a command's start-up work.
    """

    __slots__ = ("_prepared", "alg", "key_id", "kid", "sdk_kid", "secret", "since", "status")

    kid: str
    #: the key id the SDK's own tokens carry (rmcp's keyring ids), for algorithms that have one
    sdk_kid: str | None
    alg: str
    secret: bytes
    status: str
    since: Mapping[str, int]
    #: The 4 raw bytes that tokens carry (empty for an id that is not 8 hex digits, which no
    #: keyset admits).
    key_id: bytes
    _prepared: dict[str, Any]

    def __init__(
        self,
        kid: str,
        alg: str,
        secret: bytes,
        status: str = "primary",
        since: Mapping[str, int] | None = None,
        _prepared: dict[str, Any] | None = None,
        sdk_kid: str | None = None,
    ) -> None:
        setter = object.__setattr__
        setter(self, "kid", kid)
        setter(self, "key_id", bytes.fromhex(kid) if is_kid(kid) else b"")
        setter(self, "sdk_kid", sdk_kid)
        setter(self, "alg", alg)
        setter(self, "secret", secret)
        setter(self, "status", status)
        setter(self, "since", {} if since is None else since)
        setter(self, "_prepared", {} if _prepared is None else _prepared)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"keys are immutable; cannot set {name}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"keys are immutable; cannot delete {name}")

    def __repr__(self) -> str:
        return (
            f"Key(kid={self.kid!r}, alg={self.alg!r}, status={self.status!r}, since={self.since!r})"
        )

    def _changed(self, *, prepared: dict[str, Any] | None = None, **changes: Any) -> Key:
        """A copy with ``changes``, starting with no built primitives unless given ``prepared``
        (those of a key with the same secret)."""
        fields: dict[str, Any] = {
            "kid": self.kid,
            "alg": self.alg,
            "secret": self.secret,
            "status": self.status,
            "since": self.since,
            "sdk_kid": self.sdk_kid,
        }
        fields.update(changes)
        return Key(**fields, _prepared=prepared)

    @property
    def format(self) -> str:
        """The format this key's algorithm serves (``?`` for an algorithm the table lacks)."""
        algorithm = KEY_ALGORITHMS.get(self.alg)
        return "?" if algorithm is None else algorithm.format

    def prepared(self, purpose: str, build: Callable[[bytes], T]) -> T:
        """A primitive built from this key's secret once and reused (an AESGCM or HMAC object)."""
        try:
            return self._prepared[purpose]  # type: ignore[no-any-return]
        except KeyError:
            made = self._prepared[purpose] = build(self.secret)
            return made

    def derived(self, purpose: str, build: Callable[[Key], T]) -> T:
        """A value built from this key once and reused, e.g. a wire's sealer (the key's id
        bytes, header or associated data, beside its cipher). ``purpose`` names it, apart from
        every other value kept on the key."""
        try:
            return self._prepared[purpose]  # type: ignore[no-any-return]
        except KeyError:
            made = self._prepared[purpose] = build(self)
            return made

    def to_jwk(self) -> dict[str, Any]:
        """The key as a JWK, secret included: only for writing the keyset file."""
        jwk: dict[str, Any] = {
            "kty": "oct",
            "kid": self.kid,
            "alg": self.alg,
            "k": b64url_encode(self.secret),
            "status": self.status,
            "since": dict(self.since),
        }
        if self.sdk_kid is not None:
            jwk["sdk_kid"] = self.sdk_kid
        return jwk

    def describe(self) -> dict[str, Any]:
        """Everything about the key except its secret (for listings and ``--json``), the same
        members for every key: ``sdk_kid`` is None but for keys whose SDK names them."""
        return {
            "kid": self.kid,
            "alg": self.alg,
            "format": self.format,
            "status": self.status,
            "since": dict(self.since),
            "sdk_kid": self.sdk_kid,
        }

    @classmethod
    def from_secret(
        cls,
        alg: str,
        secret: bytes,
        *,
        kid: str | None = None,
        status: str = "primary",
        now: int | None = None,
        sdk_kid: str | None = None,
    ) -> Key:
        """A key of ``alg`` for ``secret``; SDK keys take the id their secret (or, for rmcp's
        keyring, the ``sdk_kid`` its tokens carry) implies."""
        if alg not in KEY_ALGORITHMS:
            raise ValueError(f"unknown key algorithm {alg!r}; known: {', '.join(KEY_ALGORITHMS)}")
        problem = sdk_kid_problem(alg, sdk_kid)
        if problem is not None:
            raise ValueError(problem)
        chosen = derived_kid(alg, secret, sdk_kid) or kid
        if chosen is None:
            raise ValueError(f"a {alg} key needs a key id")
        at = int(time.time() if now is None else now)  # whole seconds, as the file stores them
        return cls(
            kid=chosen, alg=alg, secret=secret, status=status, since={status: at}, sdk_kid=sdk_kid
        )

    @classmethod
    def generate(
        cls,
        alg: str,
        *,
        kid: str,
        status: str = "primary",
        now: int | None = None,
        sdk_kid: str | None = None,
    ) -> Key:
        """A key of ``alg`` with a fresh random secret."""
        algorithm = KEY_ALGORITHMS.get(alg)
        if algorithm is None:
            raise ValueError(f"unknown key algorithm {alg!r}; known: {', '.join(KEY_ALGORITHMS)}")
        size = algorithm.exact or SDK_SECRET_BYTES[0]
        if sdk_kid is None and algorithm.sdk_kid:
            # a fresh key for an SDK keyring (rmcp's) gets a fresh id too, shown by
            # ``keys list``: give the ring the key under it
            sdk_kid = "mrtr-" + os.urandom(4).hex()
        return cls.from_secret(
            alg, os.urandom(size), kid=kid, status=status, now=now, sdk_kid=sdk_kid
        )


def changed_key(key: Key, **changes: Any) -> Key:
    """A copy of ``key`` with ``changes`` (a status and its time, say), starting with no built
    primitives."""
    return key._changed(**changes)


class KeyTable:
    """One validated version of a keyset: its keys and the look-ups built from them.

    A keyset swaps its table whole when a followed file changes, so a reader sees one version
    or the next, never a mix of the two. ``derived`` holds what wires build from a version
    (routes by key id, exact headers), dropped with it.
    """

    __slots__ = ("by_kid", "derived", "keys", "primary")

    def __init__(
        self,
        keys: Iterable[Key],
        source: str,
        previous: KeyTable | None = None,
        *,
        secrets: bool = True,
    ) -> None:
        self.keys: tuple[Key, ...] = ()
        self.by_kid: dict[str, Key] = {}
        self.primary: dict[str, Key] = {}
        self.derived: dict[str, Any] = {}
        admitted = []
        for key in keys:
            if previous is not None:
                key = _keep_prepared(key, previous.by_kid.get(key.kid))
            self._admit(key, source, secrets)
            admitted.append(key)
        self.keys = tuple(admitted)
        if secrets:
            _one_secret_per_shape(self.keys, source)

    def _admit(self, key: Key, source: str, secrets: bool) -> None:
        """Check one key against the keyset's invariants. Without ``secrets`` (the clear list
        of an encrypted file, read without its KEK) the checks that need the secret are left
        out, and every other one holds, so nothing unchecked reaches the key table."""
        where = f"{source}: key {key.kid!r}"
        if not is_kid(key.kid):
            raise KeysetInvalid(f"{where}: a key id must be 8 lowercase hex digits")
        if key.alg not in KEY_ALGORITHMS:
            raise KeysetInvalid(
                f"{where}: unknown alg {key.alg!r}; use one of {', '.join(KEY_ALGORITHMS)}"
            )
        if secrets and not secret_length_ok(key.alg, key.secret):
            raise KeysetInvalid(
                f"{where}: {key.alg} needs a secret of {secret_rule(key.alg)} bytes, this one "
                f"has {len(key.secret)}"
            ).needing("replace_key", alg=key.alg)
        problem = sdk_kid_problem(key.alg, key.sdk_kid)
        if problem is not None:
            raise KeysetInvalid(f"{where}: {problem}")
        implied = derived_kid(key.alg, key.secret, key.sdk_kid) if secrets else None
        if implied is not None and implied != key.kid:
            raise KeysetInvalid(
                f"{where}: the id of a {key.alg} key is derived from its secret ({implied})"
            ).needing("reimport_key")
        if key.status not in STATUSES:
            raise KeysetInvalid(
                f"{where}: unknown status {key.status!r}; use one of {', '.join(STATUSES)}"
            )
        if key.kid in self.by_kid:
            raise KeysetInvalid(
                f"{source}: key id {key.kid} appears twice; key ids must be unique "
                "(remove or regenerate one of them)"
            )
        if key.status == "primary":
            if key.alg in self.primary:
                raise KeysetInvalid(
                    f"{source}: keys {self.primary[key.alg].kid} and {key.kid} are both "
                    f"primary for {key.alg}; at most one may be (mark the older one active)"
                )
            self.primary[key.alg] = key
        self.by_kid[key.kid] = key


def _one_secret_per_shape(keys: tuple[Key, ...], source: str) -> None:
    """Refuse one secret held under two algorithms whose tokens share a shape (mcp-php-v1 and
    mcp-java-v1, say): the first key whose MAC opens a token names its format, so the other
    format's tokens would all be read as the first's and refused."""
    seen: dict[bytes, Key] = {}
    for key in keys:
        if not shape_peers(key.alg):
            continue
        # as the primitive takes it: HMAC keys K and K + b"\0" alike, so they are one secret
        used = secret_as_used(key.alg, key.secret)
        other = seen.get(used)
        if other is not None and other.alg in shape_peers(key.alg):
            raise KeysetInvalid(
                f"{source}: keys {other.kid} ({other.alg}) and {key.kid} ({key.alg}) hold the "
                "same secret (as their MAC uses it), and their tokens look alike: the key that "
                "opens a token names its format, so one secret can serve only one of them (keep "
                "the key of the SDK that uses it)"
            )
        seen.setdefault(used, key)


def _keep_prepared(key: Key, before: Key | None) -> Key:
    """``key``, sharing the primitives already built for the same secret (a status change)."""
    if before is None or before.alg != key.alg or before.secret != key.secret:
        return key
    return key._changed(prepared=before._prepared)
