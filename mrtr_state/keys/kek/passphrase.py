"""``passphrase:env:NAME`` / ``passphrase:file:PATH`` / ``passphrase:prompt``: a KEK derived
from a passphrase by scrypt.

``prompt`` asks the person at the terminal (the CLI only; see :func:`set_prompter`), once per
process: a passphrase that has opened the keyset is kept for the writes that follow, and one
that would protect a keyset before opening it is asked twice.

The parameters (``log_n``, ``r``, ``p``, the salt) are stored in the wrap record, so a keyset
written at one cost opens at that cost whatever the reader's defaults. The cost is what guards a
weak passphrase from a stolen file, and it is paid on every cold start of a process that opens
the keyset: the default (N = 2^15, r = 8: 32 MiB, about 0.1 s here) is the interactive setting of
the scrypt paper's successors; ``--kdf-cost`` raises or lowers it. A record read from a file is
bounded (N <= 2^20, 1 GiB), so a tampered file cannot make a replica spend minutes or exhaust
memory before failing.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ..._encoding import b64url_encode
from ...errors import ConfigError, KekRefused, KekUnavailable
from . import Kek, read_secret_source, record_bytes, record_members

DEFAULT_LOG_N = 15
MIN_LOG_N = 10
MAX_LOG_N = 20
_R = 8
_MAX_P = 4
_SALT_BYTES = 16
_NONCE_BYTES = 12
#: Shortest passphrase accepted for a new wrap (a random 24+ characters is what to use).
MIN_PASSPHRASE_BYTES = 12
_MEMBERS = {"kdf", "log_n", "r", "p", "salt", "nonce", "wrapped"}


class PassphraseKek(Kek):
    """scrypt(passphrase, salt) -> AES-256-GCM key that wraps the data key with the context as
    associated data."""

    kind = "passphrase"

    def __init__(self, uri: str, *, log_n: int | None = None) -> None:
        super().__init__(uri)
        self._source = uri[len("passphrase:") :]
        if self._source != "prompt" and (
            not self._source.startswith(("env:", "file:")) or len(self._source) < 5
        ):
            raise ConfigError(
                f"KEK {uri}: write passphrase:env:NAME, passphrase:file:PATH or "
                "passphrase:prompt (the passphrase itself never goes into the URI)"
            )
        #: a typed passphrase, kept once it opened a data key or was typed twice
        self._typed: bytes | None = None
        if log_n is not None and not MIN_LOG_N <= log_n <= MAX_LOG_N:
            raise ConfigError(f"--kdf-cost must be {MIN_LOG_N}..{MAX_LOG_N} (log2 of scrypt's N)")
        self.log_n = DEFAULT_LOG_N if log_n is None else log_n

    def _passphrase(self, *, new: bool = False) -> bytes:
        """The passphrase; for ``new`` wraps, a prompted one is asked twice unless it has
        already opened this process's data key."""
        if self._typed is not None:
            return self._typed
        passphrase = read_secret_source(self._source, "passphrase", self.uri, confirm=new)
        if self._source == "prompt" and new:
            self._typed = passphrase
        return passphrase

    def wrap(self, data_key: bytes, context: bytes) -> dict[str, Any]:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        passphrase = self._passphrase(new=True)
        if len(passphrase) < MIN_PASSPHRASE_BYTES:
            raise KekUnavailable(
                f"the passphrase of KEK {self.uri} is {len(passphrase)} bytes; use at least "
                f"{MIN_PASSPHRASE_BYTES} (a random one: openssl rand -base64 24)"
            )
        salt, nonce = os.urandom(_SALT_BYTES), os.urandom(_NONCE_BYTES)
        key = _derive(passphrase, salt, self.log_n, 1)
        wrapped = AESGCM(key).encrypt(nonce, data_key, context)
        return {
            "kdf": "scrypt",
            "log_n": self.log_n,
            "r": _R,
            "p": 1,
            "salt": b64url_encode(salt),
            "nonce": b64url_encode(nonce),
            "wrapped": b64url_encode(wrapped),
        }

    def _unwrap(self, record: Mapping[str, Any], context: bytes) -> bytes:
        from cryptography.exceptions import InvalidTag
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        log_n, p, salt, nonce, wrapped = _checked(record)
        passphrase = self._passphrase()
        key = _derive(passphrase, salt, log_n, p)
        try:
            data_key = AESGCM(key).decrypt(nonce, wrapped, context)
        except InvalidTag:
            raise KekRefused(
                f"the passphrase of {self.uri} does not open this keyset's data key: a wrong "
                "passphrase, or a data key record taken from another keyset"
            ) from None
        if self._source == "prompt":
            self._typed = passphrase  # it opened the data key: the writes that follow use it
        return data_key


def _derive(passphrase: bytes, salt: bytes, log_n: int, p: int) -> bytes:
    from cryptography.hazmat.primitives.kdf.scrypt import Scrypt

    return Scrypt(salt=salt, length=32, n=1 << log_n, r=_R, p=p).derive(passphrase)


def _checked(record: Mapping[str, Any]) -> tuple[int, int, bytes, bytes, bytes]:
    """The record's parameters, each within bounds, or :class:`KekRefused` naming the member."""
    if set(record) != _MEMBERS or record.get("kdf") != "scrypt":
        raise KekRefused(
            "the data key record is not a scrypt passphrase record (members "
            f"{record_members(record)}); was the keyset encrypted under another kind of KEK?"
        )
    log_n, r, p = record["log_n"], record["r"], record["p"]
    if type(log_n) is not int or not MIN_LOG_N <= log_n <= MAX_LOG_N:
        raise KekRefused(f"the data key record's log_n must be {MIN_LOG_N}..{MAX_LOG_N}")
    if type(r) is not int or r != _R or type(p) is not int or not 1 <= p <= _MAX_P:
        raise KekRefused(f"the data key record's scrypt r must be {_R} and p 1..{_MAX_P}")
    salt = record_bytes(record, "salt", _SALT_BYTES)
    nonce = record_bytes(record, "nonce", _NONCE_BYTES)
    return log_n, p, salt, nonce, record_bytes(record, "wrapped", 32 + 16)
