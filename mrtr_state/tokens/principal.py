"""Principal tags: how a readable token is bound to a principal without showing it.

A ``jws`` payload is base64, not encryption: anyone holding the token reads it. Writing the
principal there would leak user names or e-mail addresses into client logs. Instead the token
carries ``h1.`` + b64url(salt (8) ‖ HMAC-SHA256(key, label ‖ salt ‖ principal)[:16]). Only a
holder of the key can test a principal against it, the random salt keeps two tokens of the same
principal unlinkable, and the label keeps these MACs apart from the token signature made with the
same key. 128 bits of tag are far beyond what an online guesser could exhaust.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._encoding import EncodingError, b64url_decode, b64url_encode, compare_digest
from .._entropy import random_bytes
from .._primitives import Keyed, hmac_key

if TYPE_CHECKING:
    from ..keys.key import Key

__all__ = ["PREFIX", "principal_tag", "tag_matches"]

PREFIX = "h1."
_LABEL = b"mrtr-state/v1/principal-tag\x00"
_SALT = 8
_MAC = 16


def _keyed(secret: bytes) -> Keyed:
    return hmac_key(secret, _LABEL)


def principal_tag(key: Key, principal: str, salt: bytes | None = None) -> str:
    """A tag of ``principal`` under ``key``: with ``salt`` (8 bytes drawn fresh by the caller,
    or a stored tag's own), else a random one."""
    chosen = random_bytes(_SALT) if salt is None else salt
    state = key.prepared("principal-tag", _keyed).copy()
    state.update(chosen + principal.encode("utf-8"))
    return PREFIX + b64url_encode(chosen + state.finalize()[:_MAC])


def tag_matches(key: Key, stored: str, principal: str) -> bool:
    """Whether ``stored`` is a tag of ``principal`` under ``key`` (the MAC bytes compared in
    constant time). Anything that is not a well-formed tag matches nothing."""
    if not stored.startswith(PREFIX):
        return False
    try:
        raw = b64url_decode(stored[len(PREFIX) :])
    except EncodingError:
        return False
    if len(raw) != _SALT + _MAC:
        return False
    state = key.prepared("principal-tag", _keyed).copy()
    state.update(raw[:_SALT] + principal.encode("utf-8"))
    return compare_digest(state.finalize()[:_MAC], raw[_SALT:])
