"""Key-encryption keys (KEKs): what wraps the data key of an encrypted keyset file.

An encrypted keyset (:mod:`mrtr_state.keys.encryption`) holds its secrets under a random data
key, and the data key wrapped by a KEK that lives somewhere else: derived from a passphrase, inside
an HSM, or behind a helper program that calls a KMS. Every provider is one small class with two
operations, :meth:`Kek.wrap` and :meth:`Kek.unwrap`; the record a wrap returns is stored in the
keyset file and is all an unwrap gets back. The ``context`` bytes of both are associated data:
a wrapped data key moved to another keyset does not unwrap there.

A KEK is named by a URI, always by the operator (``--kek``, ``MRTR_STATE_KEK``, the config's
``kek``) and never taken from the keyset file: a file that named its own helper program would let
whoever can write the file run code. Secrets a provider needs (a passphrase, a PIN) come from an
environment variable or a file, never from the URI or the command line.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from ...errors import ConfigError, KekRefused, KekUnavailable, KeysetError

__all__ = [
    "KEK_ENV",
    "Kek",
    "Prompter",
    "kek_from_uri",
    "read_secret_source",
    "record_bytes",
    "record_members",
    "set_prompter",
]

#: The environment variable naming the KEK, as ``--kek`` and the config's ``kek`` do.
KEK_ENV = "MRTR_STATE_KEK"

#: The most bytes a passphrase or PIN file may hold.
SECRET_SOURCE_LIMIT = 4096

_SCHEMES = ("passphrase:", "pkcs11:", "exec:")

#: Asks a person for a secret: (what is asked, whether to ask twice) -> the bytes typed.
Prompter = Callable[[str, bool], bytes]

#: Who answers a ``prompt`` secret source: set by a front end that has a person at a terminal
#: (the CLI); None, as in a server or a proxy under an orchestrator, refuses such a source.
_prompter: Prompter | None = None


def set_prompter(prompter: Prompter | None) -> None:
    """Let ``prompt`` secret sources (``passphrase:prompt``) ask through ``prompter``; the
    library never reads a terminal on its own."""
    global _prompter
    _prompter = prompter


class Kek:
    """One key-encryption key: wraps and unwraps 32-byte data keys.

    Subclasses implement :meth:`wrap` and :meth:`_unwrap`; :meth:`unwrap` remembers what it
    opened, so a process that reads the keyset again (a reload after a rotation, a command that
    reads then writes) asks the KEK once: scrypt's cost or a KMS round trip is paid once per
    wrapped key and process, never per token.
    """

    #: The provider's name in messages and in ``keys list``.
    kind = "kek"

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self._opened: dict[tuple[str, bytes], bytes] = {}

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.uri}>"

    def wrap(self, data_key: bytes, context: bytes) -> dict[str, Any]:
        """Wrap ``data_key`` bound to ``context``; the record returned goes into the file."""
        raise NotImplementedError

    def unwrap(self, record: Mapping[str, Any], context: bytes) -> bytes:
        """The data key of ``record`` (as :meth:`wrap` made it), or :class:`KekRefused`."""
        from ..._encoding import json_dumps

        remembered = (json_dumps(dict(record)), context)
        opened = self._opened.get(remembered)
        if opened is None:
            opened = self._unwrap(record, context)
            if len(self._opened) >= 8:
                self._opened.clear()
            self._opened[remembered] = opened
        return opened

    def remembers(self, record: Mapping[str, Any], context: bytes) -> bool:
        """Whether :meth:`unwrap` of this record would answer from memory, without the KEK."""
        from ..._encoding import json_dumps

        return (json_dumps(dict(record)), context) in self._opened

    def _unwrap(self, record: Mapping[str, Any], context: bytes) -> bytes:
        raise NotImplementedError


def kek_from_uri(uri: str, *, kdf_log_n: int | None = None) -> Kek:
    """The KEK a URI names (nothing is contacted or read until it is used).

    ``passphrase:env:NAME`` or ``passphrase:file:PATH`` (scrypt; ``kdf_log_n`` sets the cost of
    new wraps), ``pkcs11:...`` (an RFC 7512 URI with ``module-path`` and ``pin-source``),
    ``exec:COMMAND [ARG...]`` (a helper program, see docs/encrypted-keysets.md).
    """
    if not isinstance(uri, str) or not uri.strip():
        raise ConfigError(
            "the KEK URI is empty; give one such as passphrase:env:MRTR_STATE_PASSPHRASE"
        )
    if kdf_log_n is not None and not uri.startswith("passphrase:"):
        raise ConfigError("--kdf-cost applies to passphrase: KEKs only")
    if uri.startswith("passphrase:"):
        from .passphrase import PassphraseKek

        return PassphraseKek(uri, log_n=kdf_log_n)
    if uri.startswith("pkcs11:"):
        from .pkcs11 import Pkcs11Kek

        return Pkcs11Kek(uri)
    if uri.startswith("exec:"):
        from .helper import HelperKek

        return HelperKek(uri)
    raise ConfigError(
        f"KEK URI {uri!r} names no known provider; it must start with one of {', '.join(_SCHEMES)}"
    )


def read_secret_source(spec: str, what: str, uri: str, *, confirm: bool = False) -> bytes:
    """The bytes ``env:NAME``, ``file:PATH`` or ``prompt`` leads to: a passphrase or a PIN.

    A file must pass the keyset's permission rule; one trailing newline is stripped. Empty is
    refused: an unset variable must never become an empty passphrase. ``prompt`` asks the
    person at the terminal through the front end's prompter (twice with ``confirm``, for a
    secret about to protect something new), and is refused where there is none.
    """
    if spec == "prompt":
        if _prompter is None:
            raise KekUnavailable(
                f"KEK {uri} asks for its {what} at a terminal, and nothing here can ask; "
                "give it as env:NAME or file:PATH instead"
            )
        typed = _prompter(f"{what} for KEK {uri}", confirm)
        if not typed:
            raise KekUnavailable(f"no {what} was typed for KEK {uri}")
        return typed
    kind, _, where = spec.partition(":")
    if kind == "env" and where:
        value = os.environ.get(where)
        if not value:
            raise KekUnavailable(
                f"the {what} of KEK {uri} comes from environment variable {where}, which is "
                "not set or empty; set it (from a Secret, not a command line)"
            )
        # the bytes the environment holds (an undecodable byte round-trips, never raises)
        return value.encode("utf-8", "surrogateescape")
    if kind == "file" and where:
        from ..file import read_private_file

        try:
            data = read_private_file(where, what + " file", SECRET_SOURCE_LIMIT)
        except KeysetError as err:
            raise KekUnavailable(f"KEK {uri}: {err}") from None
        if data.endswith(b"\n"):
            data = data[:-1]
        if data.endswith(b"\r"):
            data = data[:-1]
        if not data:
            raise KekUnavailable(f"the {what} file {where} of KEK {uri} is empty")
        return data
    raise ConfigError(
        f"KEK {uri}: the {what} must come from env:NAME, file:PATH or prompt, not {spec!r} "
        "(never write a secret into the URI)"
    )


def record_members(record: Mapping[str, Any]) -> str:
    """The member names of a data key record, for a message: they are the file's text, read
    before anything authenticated them, so they are made inert for terminals and logs."""
    from ..._printable import printable

    return printable(", ".join(sorted(record)), 200)


def record_bytes(record: Mapping[str, Any], name: str, length: int | None = None) -> bytes:
    """Member ``name`` of a data key record, decoded from canonical base64url (of ``length``
    bytes when given), or :class:`KekRefused` naming it."""
    from ..._encoding import EncodingError, b64url_decode

    value = record.get(name)
    try:
        if not isinstance(value, str):
            raise EncodingError("not a string")
        decoded = b64url_decode(value)
    except EncodingError:
        raise KekRefused(f"the data key record's {name} is not base64url text") from None
    if length is not None and len(decoded) != length:
        raise KekRefused(f"the data key record's {name} is {len(decoded)} bytes, not {length}")
    return decoded
