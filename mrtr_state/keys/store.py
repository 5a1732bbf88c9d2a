"""Keyset persistence: a keyset file's text to keys and back, plain or encrypted.

Reading takes a file that passes the permission rule (:mod:`mrtr_state.keys.file`), parses it with
the strict JSON reader (a keyset file is not a token: it is read as untrusted input), checks each
key's shape (the invariants across keys are :class:`mrtr_state.keys.key.KeyTable`'s) and opens an
encrypted keyset with its KEK (:mod:`mrtr_state.keys.encryption`). Writing is atomic, 0600 and
under the writer lock (:mod:`mrtr_state.keys.file`). :class:`mrtr_state.keys.keyset.Keyset` is the
public face of all of it: ``load``, ``save``, ``update`` and ``convert``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from .._encoding import EncodingError, b64url_decode, json_dumps, json_loads
from ..errors import KekRequired, KeysetInvalid
from .file import keyset_lock, read_keyset_file, write_keyset_text
from .key import LAST_SECOND, STATUSES, Key, KeyTable

if TYPE_CHECKING:
    from .encryption import Sealing
    from .kek import Kek

__all__ = [
    "file_text",
    "key_from_jwk",
    "keyset_lock",
    "listed_without_kek",
    "new_sealing",
    "plain_text",
    "read_keys",
    "read_keyset_file",
    "resolve_kek",
    "write_keyset_text",
]

_KEY_MEMBERS = frozenset({"kty", "kid", "alg", "k", "status", "since", "sdk_kid"})


def plain_text(keys: Iterable[Key]) -> str:
    """A plain keyset file's content, secrets included: one key per line."""
    text = ",\n    ".join(json_dumps(key.to_jwk()) for key in keys)
    return '{\n  "keys": [\n    ' + text + "\n  ]\n}\n" if text else '{\n  "keys": []\n}\n'


def file_text(keys: Iterable[Key], sealing: Sealing | None) -> str:
    """A keyset file's content: plain JSON, or encrypted under ``sealing``."""
    if sealing is None:
        return plain_text(keys)
    from .encryption import seal_keys

    return seal_keys([key.to_jwk() for key in keys], sealing)


def read_keys(
    text: str, source: str, kek: Kek | None, *, may_call_kek: bool = True
) -> tuple[list[Key], Sealing | None]:
    """The keys of a keyset file's text, each checked for shape (the table checks invariants),
    and how the file is encrypted. With a KEK the file must be encrypted; without, plain."""
    try:
        document = json_loads(text.strip())
    except EncodingError as err:
        raise KeysetInvalid(f"{source} is not valid JSON: {err}") from None
    sealing = None
    if isinstance(document, dict) and "mrtr-state-encrypted-keyset" in document:
        from .encryption import open_document

        jwks, sealing = open_document(document, source, kek, may_call_kek=may_call_kek)
    elif kek is not None:
        raise KekRequired(
            f"keyset {source} is not encrypted, but a KEK ({kek.uri}) is configured: refusing a "
            "plain keyset where an encrypted one is expected"
        ).needing("encrypt_keyset", kek=kek.uri)
    elif not isinstance(document, dict) or not isinstance(document.get("keys"), list):
        raise KeysetInvalid(f'{source} must be a JSON object with a "keys" list (a JWK Set)')
    else:
        jwks = document["keys"]
    return [key_from_jwk(jwk, source, n) for n, jwk in enumerate(jwks)], sealing


def resolve_kek(kek: Kek | str | None) -> Kek | None:
    """A KEK given as a URI, made; one given as an object, as it is."""
    if kek is None or not isinstance(kek, str):
        return kek
    from .kek import kek_from_uri

    return kek_from_uri(kek)


def new_sealing(kek: Kek, rewrapping: Sealing | None = None) -> Sealing:
    """A fresh data key wrapped by ``kek`` (or, rewrapping, the same data key wrapped anew)."""
    from .encryption import new_sealing as sealing_under

    return sealing_under(kek, rewrapping=rewrapping)


def key_from_jwk(jwk: Any, source: str, index: int) -> Key:
    where = f"{source}: keys[{index}]"
    if not isinstance(jwk, dict):
        raise KeysetInvalid(f"{where} is not a JSON object")
    unknown = sorted(set(jwk) - _KEY_MEMBERS)
    if unknown:
        from .._printable import printable  # the file's text: inert in messages and logs

        names = printable(", ".join(unknown), 200)
        raise KeysetInvalid(f"{where} has unknown members {names}; remove them")
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
        name in STATUSES and type(at) is int and 0 <= at <= LAST_SECOND
        for name, at in since.items()
    ):
        raise KeysetInvalid(
            f"{where} (kid {jwk['kid']!r}): since must map statuses to unix seconds "
            "(0 to the end of year 9999)"
        )
    sdk_kid = jwk.get("sdk_kid")
    if sdk_kid is not None and not isinstance(sdk_kid, str):
        raise KeysetInvalid(f"{where} (kid {jwk['kid']!r}): sdk_kid must be a string")
    return Key(
        kid=jwk["kid"], alg=jwk["alg"], secret=secret, status=status, since=since, sdk_kid=sdk_kid
    )


def listed_without_kek(path: str | os.PathLike[str]) -> tuple[str, list[Key]] | None:
    """For ``keys list`` without a KEK: the KEK URI and the keys of an encrypted keyset file as
    its clear metadata says, each with an empty secret (so none can ever mint or verify, and
    none is ever in a :class:`Keyset`); None for a plain file. Unauthenticated: only opening the
    file with its KEK proves the metadata unchanged."""
    target = os.fspath(path)
    text, _stamp = read_keyset_file(target)
    try:
        document = json_loads(text.strip())
    except EncodingError as err:
        raise KeysetInvalid(f"{target} is not valid JSON: {err}") from None
    from .encryption import is_encrypted, metadata_of

    if not is_encrypted(document):
        return None
    kek_uri, metadata = metadata_of(document, target)
    keys = [key_from_jwk({**jwk, "k": ""}, target, n) for n, jwk in enumerate(metadata)]
    # every invariant a loaded keyset holds, bar those that need the secrets: a damaged or
    # hostile clear list is a one-line KeysetInvalid, and what is listed is ids, algorithms and
    # statuses this program knows (nothing a terminal would act on)
    return kek_uri, list(KeyTable(keys, target, secrets=False).keys)
