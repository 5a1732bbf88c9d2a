"""Keys and keysets: ids, algorithms, lifecycle status, and the invariants checked on load.

A keyset is a JWK Set (RFC 7517) of symmetric keys. Each key serves exactly one algorithm, so a
key made for one format can never be fed to another (algorithm confusion needs a key that two
formats accept). Key ids are 4 bytes, written as 8 hex digits, carried in every token so that
verification finds its key in one dictionary look-up instead of trying each key in turn.

Invariants, checked whenever a keyset is built (as in Tink): unique key ids, at most one primary
per algorithm, secrets of the right length, known statuses. A keyset that breaks one is refused
with a message saying how to fix it; it is never repaired silently.

Secrets never appear in ``repr``, ``str`` or error messages.
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

from . import keyfile
from ._encoding import EncodingError, b64url_decode, b64url_encode, json_dumps, json_loads
from .errors import (
    KeyRetired,
    KeysetInvalid,
    KeysetNotFound,
    NoPrimaryKey,
    UnknownKey,
    WrongFormat,
)

__all__ = ["ALGORITHMS", "OWN_ALGORITHMS", "STATUSES", "Key", "Keyset", "derived_kid"]

T = TypeVar("T")

#: Key algorithm -> (format that uses it, length of a generated secret in bytes).
ALGORITHMS: Mapping[str, tuple[str, int]] = {
    "A256GCM": ("aead", 32),
    "HS256": ("jws", 32),
    "dir+A256GCM": ("jwe", 32),
    "mcp-py-v1": ("mcp-py", 32),
    "mcp-ts-v1": ("mcp-ts", 32),
}
#: The algorithms of mrtr-state's own formats: what ``keys init`` makes by default.
OWN_ALGORITHMS = ("A256GCM", "HS256", "dir+A256GCM")
#: The official SDKs take operator secrets "as given", at least 32 bytes; our formats use keys.
SDK_SECRET_BYTES = (32, 4096)
_SDK_KDF_INFO = b"mcp/request-state/v1/aes-256-gcm"


def secret_length_ok(alg: str, secret: bytes) -> bool:
    if alg in OWN_ALGORITHMS:
        return len(secret) == ALGORITHMS[alg][1]
    low, high = SDK_SECRET_BYTES
    return low <= len(secret) <= high


def sdk_aes_key(secret: bytes) -> bytes:
    """The AES-256 key the MCP Python SDK derives from an operator secret (HKDF-SHA256)."""
    from cryptography.hazmat.primitives.hashes import SHA256
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    return HKDF(algorithm=SHA256(), length=32, salt=None, info=_SDK_KDF_INFO).derive(secret)


def derived_kid(alg: str, secret: bytes) -> str | None:
    """The key id an SDK secret implies (its tokens carry it, or it names the key), else None.

    mcp-py tokens carry SHA-256("mcp/request-state/v1/kid:" ‖ derived key)[:4], so the keyset must
    use the same id to route them; mcp-ts tokens carry none, and the id only names the key.
    """
    if alg == "mcp-py-v1":
        digest = hashlib.sha256(b"mcp/request-state/v1/kid:" + sdk_aes_key(secret)).digest()
    elif alg == "mcp-ts-v1":
        digest = hashlib.sha256(b"mrtr-state/mcp-ts/kid:" + secret).digest()
    else:
        return None
    return digest[:4].hex()


STATUSES = ("pending", "primary", "active", "retired")
_KID = re.compile(r"[0-9a-f]{8}")
_KEY_MEMBERS = frozenset({"kty", "kid", "alg", "k", "status", "since"})


@dataclass(frozen=True, eq=False)
class Key:
    """One secret key. ``since`` maps each lifecycle status the key entered to when (unix s)."""

    kid: str
    alg: str
    secret: bytes = field(repr=False)
    status: str = "primary"
    since: Mapping[str, int] = field(default_factory=dict)
    _prepared: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def key_id(self) -> bytes:
        """The 4 raw bytes that tokens carry."""
        return bytes.fromhex(self.kid)

    @property
    def format(self) -> str:
        return ALGORITHMS[self.alg][0]

    @property
    def can_verify(self) -> bool:
        return self.status != "retired"

    def prepared(self, purpose: str, build: Callable[[bytes], T]) -> T:
        """A primitive built from this key's secret once and reused (an AESGCM or HMAC object)."""
        try:
            return self._prepared[purpose]  # type: ignore[no-any-return]
        except KeyError:
            made = self._prepared[purpose] = build(self.secret)
            return made

    def to_jwk(self) -> dict[str, Any]:
        """The key as a JWK, secret included: only for writing the keyset file."""
        return {
            "kty": "oct",
            "kid": self.kid,
            "alg": self.alg,
            "k": b64url_encode(self.secret),
            "status": self.status,
            "since": dict(self.since),
        }

    def describe(self) -> dict[str, Any]:
        """Everything about the key except its secret (for listings and ``--json``)."""
        return {
            "kid": self.kid,
            "alg": self.alg,
            "format": self.format,
            "status": self.status,
            "since": dict(self.since),
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
    ) -> Key:
        """A key of ``alg`` for ``secret``; SDK keys take the id their secret implies."""
        if alg not in ALGORITHMS:
            raise ValueError(f"unknown key algorithm {alg!r}; known: {', '.join(ALGORITHMS)}")
        chosen = derived_kid(alg, secret) or kid
        if chosen is None:
            raise ValueError(f"a {alg} key needs a key id")
        at = int(time.time()) if now is None else now
        return cls(kid=chosen, alg=alg, secret=secret, status=status, since={status: at})

    @classmethod
    def generate(
        cls, alg: str, *, kid: str, status: str = "primary", now: int | None = None
    ) -> Key:
        """A key of ``alg`` with a fresh random secret."""
        if alg not in ALGORITHMS:
            raise ValueError(f"unknown key algorithm {alg!r}; known: {', '.join(ALGORITHMS)}")
        return cls.from_secret(alg, os.urandom(ALGORITHMS[alg][1]), kid=kid, status=status, now=now)


class Keyset:
    """An immutable, validated set of keys with O(1) routing by key id.

    Build one with :meth:`load`, :meth:`from_json` or :meth:`generate`; change one by making a new
    keyset (:meth:`with_keys`) and saving it under the file lock (:meth:`update`).
    """

    __slots__ = ("_by_kid", "_derived", "_keys", "_primary", "source")

    def __init__(self, keys: Iterable[Key], *, source: str = "keyset") -> None:
        self.source = source
        self._keys = tuple(keys)
        self._by_kid: dict[str, Key] = {}
        self._primary: dict[str, Key] = {}
        self._derived: dict[str, Any] = {}
        for key in self._keys:
            self._admit(key)

    def _admit(self, key: Key) -> None:
        where = f"{self.source}: key {key.kid!r}"
        if not isinstance(key.kid, str) or not _KID.fullmatch(key.kid):
            raise KeysetInvalid(f"{where}: a key id must be 8 lowercase hex digits")
        if key.alg not in ALGORITHMS:
            raise KeysetInvalid(
                f"{where}: unknown alg {key.alg!r}; use one of {', '.join(ALGORITHMS)}"
            )
        if not secret_length_ok(key.alg, key.secret):
            wanted = (
                f"a {ALGORITHMS[key.alg][1]}-byte"
                if key.alg in OWN_ALGORITHMS
                else "a {}..{}-byte".format(*SDK_SECRET_BYTES)
            )
            raise KeysetInvalid(
                f"{where}: {key.alg} needs {wanted} secret, this one has {len(key.secret)}; "
                "generate a new key with: mrtr-state keys add --alg " + key.alg
            )
        implied = derived_kid(key.alg, key.secret)
        if implied is not None and implied != key.kid:
            raise KeysetInvalid(
                f"{where}: the id of a {key.alg} key is derived from its secret ({implied}); "
                "re-import the secret with: mrtr-state keys import"
            )
        if key.status not in STATUSES:
            raise KeysetInvalid(
                f"{where}: unknown status {key.status!r}; use one of {', '.join(STATUSES)}"
            )
        if key.kid in self._by_kid:
            raise KeysetInvalid(
                f"{self.source}: key id {key.kid} appears twice; key ids must be unique "
                "(remove or regenerate one of them)"
            )
        if key.status == "primary":
            if key.alg in self._primary:
                raise KeysetInvalid(
                    f"{self.source}: keys {self._primary[key.alg].kid} and {key.kid} are both "
                    f"primary for {key.alg}; at most one may be (mark the older one active)"
                )
            self._primary[key.alg] = key
        self._by_kid[key.kid] = key

    # --- reading ---------------------------------------------------------------------------

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Keyset:
        """Load and validate the keyset file at ``path`` (refusing unsafe files)."""
        target = Path(path)
        return cls.from_json(keyfile.read_keyset_text(target), source=str(target))

    @classmethod
    def from_json(cls, text: str, *, source: str = "keyset") -> Keyset:
        """Parse a JWK Set document (the keyset file's content)."""
        try:
            document = json_loads(text.strip())
        except EncodingError as err:
            raise KeysetInvalid(f"{source} is not valid JSON: {err}") from None
        if not isinstance(document, dict) or not isinstance(document.get("keys"), list):
            raise KeysetInvalid(f'{source} must be a JSON object with a "keys" list (a JWK Set)')
        return cls(
            (_key_from_jwk(jwk, source, n) for n, jwk in enumerate(document["keys"])), source=source
        )

    def to_json(self) -> str:
        """The keyset file content, secrets included. Only :meth:`save` should need it."""
        keys = ",\n    ".join(json_dumps(key.to_jwk()) for key in self._keys)
        return '{\n  "keys": [\n    ' + keys + "\n  ]\n}\n" if keys else '{\n  "keys": []\n}\n'

    def save(self, path: str | os.PathLike[str], *, overwrite: bool = False) -> None:
        """Write the keyset atomically, mode 0600, under the writer lock."""
        target = Path(path)
        with keyfile.keyset_lock(target):
            keyfile.write_keyset_text(target, self.to_json(), overwrite=overwrite)

    @classmethod
    def update(
        cls,
        path: str | os.PathLike[str],
        change: Callable[[Keyset], Keyset],
        *,
        create: bool = False,
    ) -> Keyset:
        """Read, change and write back the keyset at ``path``, all under the writer lock.

        With ``create`` a missing file counts as an empty keyset (``keys import`` on a new host).
        """
        target = Path(path)
        with keyfile.keyset_lock(target):
            try:
                current = cls.load(target)
            except KeysetNotFound:
                if not create:
                    raise
                current = cls([], source=str(target))
            changed = change(current)
            keyfile.write_keyset_text(target, changed.to_json(), overwrite=True)
        return changed

    @classmethod
    def generate(cls, algs: Iterable[str] = OWN_ALGORITHMS, *, now: int | None = None) -> Keyset:
        """A new keyset holding one fresh primary key per algorithm."""
        keys: list[Key] = []
        for alg in algs:
            keys.append(Key.generate(alg, kid=_fresh_kid({k.kid for k in keys}), now=now))
        return cls(keys, source="new keyset")

    def fresh_kid(self) -> str:
        """A random key id that no key in this keyset uses."""
        return _fresh_kid(self._by_kid.keys())

    def with_new_key(
        self, alg: str, *, secret: bytes | None = None, now: int | None = None
    ) -> tuple[Keyset, Key]:
        """This keyset plus a key of ``alg`` (fresh, or for ``secret``): primary if ``alg`` has
        none, else pending.

        A pending key verifies but does not mint, so it can be rolled out to every replica
        before any token depends on it.
        """
        status = "pending" if alg in self._primary else "primary"
        if secret is None:
            key = Key.generate(alg, kid=self.fresh_kid(), status=status, now=now)
        else:
            key = Key.from_secret(alg, secret, kid=self.fresh_kid(), status=status, now=now)
        return self.with_keys([*self._keys, key]), key

    def with_keys(self, keys: Iterable[Key]) -> Keyset:
        return Keyset(keys, source=self.source)

    def replace_key(self, key: Key, **changes: Any) -> Keyset:
        changed = replace(key, _prepared={}, **changes)
        return self.with_keys(changed if k is key else k for k in self._keys)

    # --- lookups ---------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Key]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def __repr__(self) -> str:
        return f"Keyset({self.source!r}, {len(self._keys)} keys)"

    def derived(self, purpose: str, build: Callable[[Keyset], T]) -> T:
        """A lookup table built from this (immutable) keyset once, e.g. exact JOSE headers."""
        try:
            return self._derived[purpose]  # type: ignore[no-any-return]
        except KeyError:
            made = self._derived[purpose] = build(self)
            return made

    def get(self, kid: str) -> Key | None:
        return self._by_kid.get(kid)

    def primary(self, alg: str) -> Key:
        """The key that mints tokens of algorithm ``alg``."""
        try:
            return self._primary[alg]
        except KeyError:
            fmt = ALGORITHMS.get(alg, ("?",))[0]
            raise NoPrimaryKey(
                f"{self.source} has no primary {alg} key to mint {fmt} tokens; add one with: "
                f"mrtr-state keys init --alg {alg} (new keyset) or promote a pending key"
            ) from None

    def verifying_key(self, kid: str, alg: str) -> Key:
        """The key a token names, if it may verify tokens of ``alg``; else the precise refusal."""
        key = self._by_kid.get(kid)
        if key is None:
            raise UnknownKey(f"unknown key id {kid}")
        if key.alg != alg:
            raise WrongFormat(f"key {kid} is a {key.alg} key ({key.format} format), not {alg}")
        if key.status == "retired":
            raise KeyRetired(f"key {kid} is retired; its tokens are no longer accepted")
        return key


def _fresh_kid(taken: Iterable[str]) -> str:
    used = set(taken)
    while True:
        kid = os.urandom(4).hex()
        if kid not in used:
            return kid


def _key_from_jwk(jwk: Any, source: str, index: int) -> Key:
    where = f"{source}: keys[{index}]"
    if not isinstance(jwk, dict):
        raise KeysetInvalid(f"{where} is not a JSON object")
    unknown = sorted(set(jwk) - _KEY_MEMBERS)
    if unknown:
        raise KeysetInvalid(f"{where} has unknown members {', '.join(unknown)}; remove them")
    if jwk.get("kty") != "oct":
        raise KeysetInvalid(f'{where}: kty must be "oct" (a symmetric key)')
    for member in ("kid", "alg", "k"):
        if not isinstance(jwk.get(member), str):
            raise KeysetInvalid(f"{where}: {member} must be a string")
    try:
        secret = b64url_decode(jwk["k"])
    except EncodingError:
        raise KeysetInvalid(
            f"{where} (kid {jwk['kid']!r}): k is not canonical unpadded base64url"
        ) from None
    status = jwk.get("status", "primary")
    since = jwk.get("since", {})
    if not isinstance(since, dict) or not all(
        name in STATUSES and type(at) is int and at >= 0 for name, at in since.items()
    ):
        raise KeysetInvalid(
            f"{where} (kid {jwk['kid']!r}): since must map statuses to unix seconds"
        )
    return Key(kid=jwk["kid"], alg=jwk["alg"], secret=secret, status=status, since=since)
