"""The encrypted keyset file: secrets under a data key, the data key under a KEK.

    {
      "mrtr-state-encrypted-keyset": 1,
      "id": B64URL(16 random bytes),           the keyset's identity, bound into the wrap
      "kek": "passphrase:env:MRTR_STATE_PASSPHRASE",
      "data_key": {... the KEK provider's record: the wrapped data key and its parameters ...},
      "keys": [ {"kty": "oct", "kid": ..., "alg": ..., "status": ..., "since": {...}}, ... ],
      "secrets": {"nonce": B64URL(12 bytes), "ciphertext": B64URL(AES-256-GCM(...))}
    }

``keys`` is the plain keyset without its ``k`` members, so ``keys list`` works without the KEK.
The secrets (the JSON list of ``k`` values, in the order of ``keys``) are encrypted under the data
key with AES-256-GCM, and the associated data is every other member of the file, serialised
canonically: a status flipped, a key id added or removed, a KEK URI or data key record swapped,
each fails authentication, where Tink's keyset info is left unauthenticated. The wrap binds
``id``, so a data key record copied from another keyset does not unwrap here.

What it cannot stop (docs/encrypted-keysets.md says so): someone who can write the file can
replace it with an older version encrypted under the same KEK and data key (a rollback), or
delete it; no file format can tell an old good version from the current one.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from .._encoding import EncodingError, b64url_decode, b64url_encode, json_dumps, json_loads
from .._printable import printable
from ..errors import KekRefused, KekRequired, KeysetInvalid, KeysetTampered
from .kek import Kek

__all__ = [
    "MARKER",
    "Sealing",
    "is_encrypted",
    "metadata_of",
    "new_sealing",
    "open_document",
    "seal_keys",
]

MARKER = "mrtr-state-encrypted-keyset"
VERSION = 1
_MEMBERS = {MARKER, "id", "kek", "data_key", "keys", "secrets"}
_AD_PREFIX = b"mrtr-state encrypted keyset v1\n"
_WRAP_CONTEXT = b"mrtr-state keyset data key v1\n"


class Sealing:
    """How one keyset file is encrypted: its KEK, identity, wrapped and unwrapped data key.

    Kept beside a keyset read from an encrypted file, so that writing it back (a rotation)
    re-encrypts under the same data key, with a fresh nonce, and never calls the KEK again.
    """

    __slots__ = ("_data_key", "kek", "keyset_id", "record")

    def __init__(self, kek: Kek, keyset_id: str, record: dict[str, Any], data_key: bytes) -> None:
        self.kek = kek
        self.keyset_id = keyset_id
        self.record = record
        self._data_key = data_key

    def __repr__(self) -> str:  # never the data key
        return f"<Sealing {self.kek.uri} id={self.keyset_id}>"


def is_encrypted(document: Any) -> bool:
    """Whether a parsed keyset document is an encrypted keyset (it carries the marker)."""
    return isinstance(document, dict) and MARKER in document


def new_sealing(kek: Kek, *, rewrapping: Sealing | None = None) -> Sealing:
    """A sealing under ``kek``: a fresh data key and identity, or (``rewrapping``) the same
    data key and identity wrapped by a new KEK, which is all a KEK rotation changes."""
    if rewrapping is None:
        keyset_id, data_key = b64url_encode(os.urandom(16)), os.urandom(32)
    else:
        keyset_id, data_key = rewrapping.keyset_id, rewrapping._data_key
    record = kek.wrap(data_key, _WRAP_CONTEXT + keyset_id.encode("ascii"))
    return Sealing(kek, keyset_id, record, data_key)


def seal_keys(jwks: list[dict[str, Any]], sealing: Sealing) -> str:
    """The encrypted keyset file text for these JWKs (each with its ``k``)."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    metadata = [{name: value for name, value in jwk.items() if name != "k"} for jwk in jwks]
    header = {
        MARKER: VERSION,
        "id": sealing.keyset_id,
        "kek": sealing.kek.uri,
        "data_key": sealing.record,
        "keys": metadata,
    }
    nonce = os.urandom(12)
    secrets = json_dumps([jwk["k"] for jwk in jwks]).encode("utf-8")
    ciphertext = AESGCM(sealing._data_key).encrypt(nonce, secrets, _associated_data(header))
    lines = [
        f'  "{MARKER}": {VERSION},',
        f'  "id": {json_dumps(sealing.keyset_id)},',
        f'  "kek": {json_dumps(sealing.kek.uri)},',
        f'  "data_key": {json_dumps(sealing.record)},',
        '  "keys": [' + ",".join("\n    " + json_dumps(item) for item in metadata) + "\n  ],",
        '  "secrets": '
        + json_dumps({"nonce": b64url_encode(nonce), "ciphertext": b64url_encode(ciphertext)}),
    ]
    return "{\n" + "\n".join(lines) + "\n}\n"


def metadata_of(document: Mapping[str, Any], source: str) -> tuple[str, list[Any]]:
    """The KEK URI and the key metadata of an encrypted keyset document, checked for shape only
    (they are authenticated only by :func:`open_document`)."""
    _check_shape(document, source)
    return document["kek"], list(document["keys"])


class NeedsKek(Exception):
    """Raised instead of calling the KEK when the caller may not wait on it (a reload noticed
    on a request's path); the look that may wait (``Keyset.check``, ``reload``) opens it."""


def open_document(
    document: Mapping[str, Any], source: str, kek: Kek | None, *, may_call_kek: bool = True
) -> tuple[list[dict[str, Any]], Sealing]:
    """The JWKs (secrets restored) of an encrypted keyset document, authenticated, and the
    sealing to write it back with. Each failure names what failed, without the KEK's secrets.
    Without ``may_call_kek`` a data key the KEK has not opened before raises :class:`NeedsKek`."""
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    _check_shape(document, source)
    recorded = printable(document["kek"])  # the file's text: inert in messages and logs
    if kek is None:
        raise KekRequired(
            f"keyset {source} is encrypted (KEK {recorded}); give its KEK with --kek URI, "
            "MRTR_STATE_KEK or the config's kek"
        )
    keyset_id = document["id"]
    context = _WRAP_CONTEXT + keyset_id.encode("ascii")
    if not may_call_kek and not kek.remembers(document["data_key"], context):
        raise NeedsKek(source)
    try:
        data_key = kek.unwrap(document["data_key"], context)
    except KekRefused as err:
        # The recorded URI is a hint, never a choice: the same KEK may be reached by another
        # URI here (a PIN file mounted elsewhere), so it is tried; on failure, name the likely
        # cause.
        if kek.uri == document["kek"]:
            raise
        raise KekRefused(
            f"keyset {source} was encrypted under KEK {recorded}, and {kek.uri} does not "
            f"open it ({err}); use that KEK, or keys rewrap the keyset to this one"
        ) from None
    if len(data_key) != 32:
        raise KekRefused(f"the KEK of {source} returned a data key of {len(data_key)} bytes")
    header = {name: document[name] for name in (MARKER, "id", "kek", "data_key", "keys")}
    secrets = document["secrets"]
    try:
        plain = AESGCM(data_key).decrypt(
            b64url_decode(secrets["nonce"]),
            b64url_decode(secrets["ciphertext"]),
            _associated_data(header),
        )
    except InvalidTag:
        raise KeysetTampered(
            f"keyset {source} fails authentication: its key metadata (ids, algorithms, statuses, "
            "times), KEK record or secrets were changed without the KEK; restore it from the "
            "source of truth"
        ) from None
    values = json_loads(plain.decode("utf-8"))
    keys = document["keys"]
    if not isinstance(values, list) or len(values) != len(keys):
        raise KeysetTampered(f"keyset {source}: the secrets do not match the key list")
    jwks = [{**metadata, "k": value} for metadata, value in zip(keys, values, strict=True)]
    return jwks, Sealing(kek, keyset_id, dict(document["data_key"]), data_key)


def _associated_data(header: Mapping[str, Any]) -> bytes:
    return _AD_PREFIX + json_dumps(_canonical(header)).encode("utf-8")


def _canonical(value: Any) -> Any:
    """``value`` with every object's members sorted: one serialisation for writer and reader."""
    if isinstance(value, dict):
        return {name: _canonical(value[name]) for name in sorted(value)}
    if isinstance(value, list):
        return [_canonical(item) for item in value]
    return value


def _check_shape(document: Mapping[str, Any], source: str) -> None:
    """Refuse an encrypted keyset document that is not exactly the format's shape."""
    members = set(document)
    if members != _MEMBERS:
        extra, missing = sorted(members - _MEMBERS), sorted(_MEMBERS - members)
        said = "; ".join(
            part
            for part in (
                f"unknown members {printable(', '.join(extra))}" if extra else "",
                f"missing {', '.join(missing)}" if missing else "",
            )
            if part
        )
        raise KeysetInvalid(f"encrypted keyset {source}: {said}")
    if type(document[MARKER]) is not int or document[MARKER] != VERSION:
        raise KeysetInvalid(
            f"encrypted keyset {source} is version {document[MARKER]!r}; this mrtr-state reads "
            f"version {VERSION} (a newer mrtr-state wrote it?)"
        )
    if not isinstance(document["id"], str) or not _is_b64(document["id"], 16):
        raise KeysetInvalid(f"encrypted keyset {source}: id must be 16 bytes of base64url")
    if not isinstance(document["kek"], str) or not document["kek"]:
        raise KeysetInvalid(f"encrypted keyset {source}: kek must be the KEK's URI")
    if not isinstance(document["data_key"], dict):
        raise KeysetInvalid(f"encrypted keyset {source}: data_key must be an object")
    keys = document["keys"]
    if not isinstance(keys, list) or not all(isinstance(item, dict) for item in keys):
        raise KeysetInvalid(f"encrypted keyset {source}: keys must be a list of objects")
    if any("k" in item for item in keys):
        raise KeysetInvalid(
            f"encrypted keyset {source}: a key in the clear list carries its secret (k)"
        )
    secrets = document["secrets"]
    if (
        not isinstance(secrets, dict)
        or set(secrets) != {"nonce", "ciphertext"}
        or not _is_b64(secrets["nonce"], 12)
        or not _is_b64(secrets["ciphertext"], None)
    ):
        raise KeysetInvalid(
            f"encrypted keyset {source}: secrets must hold a 12-byte nonce and a ciphertext "
            "(truncated or edited?)"
        )


def _is_b64(value: Any, length: int | None) -> bool:
    if not isinstance(value, str):
        return False
    try:
        decoded = b64url_decode(value)
    except EncodingError:
        return False
    return len(decoded) == length if length is not None else len(decoded) >= 16
