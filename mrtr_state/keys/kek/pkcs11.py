"""``pkcs11:token=...;object=...?module-path=...&pin-source=...``: a KEK inside an HSM.

The KEK is an AES key that never leaves the token (a hardware HSM, a cloud HSM's PKCS#11
library, SoftHSM2 in tests); the data key is wrapped by AES-GCM performed by the token, with the
context as associated data. The URI follows RFC 7512: path attributes ``token`` (label),
``serial``, ``object`` (the key's label) and ``id`` (its CKA_ID, percent-encoded) pick the key;
query attributes ``module-path`` (the PKCS#11 library) and ``pin-source`` (``file:PATH`` or
``env:NAME``) say how to reach it. ``pin-value`` is refused: the URI is written into the keyset
file and into configs, where a PIN must not be.

python-pkcs11 is imported only here, when a pkcs11: KEK is used (``pip install
'mrtr-state[pkcs11]'``).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote_to_bytes

from ..._encoding import b64url_encode
from ...errors import ConfigError, KekRefused, KekUnavailable
from . import Kek, read_secret_source, record_bytes, record_members

_PATH_ATTRIBUTES = {"token", "serial", "object", "id", "type"}
_QUERY_ATTRIBUTES = {"module-path", "pin-source"}
_NONCE_BYTES = 12
_LIBRARIES: dict[str, Any] = {}  # python-pkcs11 loads (and initialises) a module once per process
_LIBRARIES_LOCK = threading.Lock()


def parse_pkcs11_uri(uri: str) -> tuple[dict[str, bytes], dict[str, str]]:
    """The path and query attributes of an RFC 7512 URI (values percent-decoded)."""
    body = uri[len("pkcs11:") :]
    path_part, _, query_part = body.partition("?")
    path: dict[str, bytes] = {}
    query: dict[str, str] = {}
    for part, table, known in ((path_part, path, _PATH_ATTRIBUTES), (query_part, query, None)):
        separator = ";" if table is path else "&"
        for item in filter(None, part.split(separator)):
            name, equals, value = item.partition("=")
            if not equals:
                raise ConfigError(f"KEK {uri}: attribute {name!r} has no value")
            if name in table:
                raise ConfigError(f"KEK {uri}: attribute {name!r} is given twice")
            if name == "pin-value":
                raise ConfigError(
                    f"KEK {uri}: pin-value would write the PIN into the keyset file and configs; "
                    "use pin-source=file:PATH or pin-source=env:NAME"
                )
            allowed = known if known is not None else _QUERY_ATTRIBUTES
            if name not in allowed:
                raise ConfigError(
                    f"KEK {uri}: attribute {name!r} is not supported; use "
                    f"{', '.join(sorted(allowed))}"
                )
            decoded = unquote_to_bytes(value)
            if table is path:
                path[name] = decoded
            else:
                try:
                    query[name] = decoded.decode("utf-8", "strict")
                except UnicodeDecodeError:
                    raise ConfigError(f"KEK {uri}: {name}= is not UTF-8 once decoded") from None
    return path, query


class Pkcs11Kek(Kek):
    """An AES key on a PKCS#11 token; wrap and unwrap are CKM_AES_GCM inside the token."""

    kind = "pkcs11"

    def __init__(self, uri: str) -> None:
        super().__init__(uri)
        self.path, self.query = parse_pkcs11_uri(uri)
        if "module-path" not in self.query:
            raise ConfigError(f"KEK {uri}: give the PKCS#11 library as ?module-path=/path/lib.so")
        if "pin-source" not in self.query:
            raise ConfigError(f"KEK {uri}: give the user PIN as pin-source=file:PATH or env:NAME")
        pin_source = self.query["pin-source"]
        if not pin_source.startswith(("env:", "file:")) or pin_source.endswith(":"):
            raise ConfigError(
                f"KEK {uri}: pin-source must be env:NAME or file:PATH, not {pin_source!r}"
            )
        if "token" not in self.path and "serial" not in self.path:
            raise ConfigError(f"KEK {uri}: name the token with token=LABEL or serial=SERIAL")
        if "object" not in self.path and "id" not in self.path:
            raise ConfigError(f"KEK {uri}: name the key with object=LABEL or id=%XX...")
        if self.path.get("type", b"secret-key") != b"secret-key":
            raise ConfigError(f"KEK {uri}: the KEK must be a secret-key object (an AES key)")
        for name in ("token", "object", "serial"):
            try:
                _text(self.path.get(name))
            except UnicodeDecodeError:
                raise ConfigError(f"KEK {uri}: {name}= is not UTF-8 once decoded") from None

    def wrap(self, data_key: bytes, context: bytes) -> dict[str, Any]:
        nonce = os.urandom(_NONCE_BYTES)
        wrapped = self._with_key(
            lambda key, p11: key.encrypt(data_key, **_gcm(p11, nonce, context))
        )
        return {
            "mechanism": "CKM_AES_GCM",
            "nonce": b64url_encode(nonce),
            "wrapped": b64url_encode(wrapped),
        }

    def _unwrap(self, record: Mapping[str, Any], context: bytes) -> bytes:
        if set(record) != {"mechanism", "nonce", "wrapped"} or record["mechanism"] != "CKM_AES_GCM":
            raise KekRefused(
                "the data key record is not a PKCS#11 AES-GCM record (members "
                f"{record_members(record)}); was the keyset encrypted under another kind of KEK?"
            )
        nonce = record_bytes(record, "nonce", _NONCE_BYTES)
        wrapped = record_bytes(record, "wrapped", 32 + 16)

        def unwrap(key: Any, p11: Any) -> bytes:
            try:
                opened: bytes = key.decrypt(wrapped, **_gcm(p11, nonce, context))
            except p11.exceptions.PKCS11Error as err:
                raise KekRefused(
                    f"the HSM key of {self.uri} does not open this keyset's data key "
                    f"({type(err).__name__}): another key, or a record from another keyset"
                ) from None
            return opened

        data_key: bytes = self._with_key(unwrap)
        return data_key

    def _with_key(self, operation: Any) -> Any:
        """Run ``operation(key, pkcs11_module)`` in a logged-in session on the KEK's token."""
        p11 = _import()
        lib = _library(self.query["module-path"], self.uri)
        try:
            pin = read_secret_source(self.query["pin-source"], "PIN", self.uri).decode("utf-8")
        except UnicodeDecodeError:
            raise KekUnavailable(f"KEK {self.uri}: the PIN is not UTF-8 text") from None
        errors = p11.exceptions
        try:
            token = lib.get_token(
                token_label=_text(self.path.get("token")), token_serial=self.path.get("serial")
            )
        except (errors.NoSuchToken, errors.MultipleTokensReturned) as err:
            raise KekUnavailable(
                f"KEK {self.uri}: "
                f"{'no' if isinstance(err, errors.NoSuchToken) else 'more than one'} token "
                "matches; check token= or serial= (softhsm2-util --show-slots lists them)"
            ) from None
        try:
            with token.open(user_pin=pin) as session:
                # every match, the search run to its end (a search left open makes the
                # session's close fail), then exactly one is wanted
                search = {
                    p11.Attribute.CLASS: p11.ObjectClass.SECRET_KEY,
                    p11.Attribute.KEY_TYPE: p11.KeyType.AES,
                }
                if "object" in self.path:
                    search[p11.Attribute.LABEL] = _text(self.path["object"])
                if "id" in self.path:
                    search[p11.Attribute.ID] = self.path["id"]
                found = list(session.get_objects(search))
                if not found:
                    raise KekUnavailable(
                        f"KEK {self.uri}: the token holds no AES secret key with that "
                        "object=/id=; create it in the HSM (see docs/encrypted-keysets.md)"
                    )
                if len(found) > 1:
                    raise KekUnavailable(
                        f"KEK {self.uri}: several AES keys match; name one by object= and id="
                    )
                (key,) = found
                return operation(key, p11)
        except (errors.PinIncorrect, errors.PinLenRange, errors.PinLocked) as err:
            raise KekUnavailable(
                f"KEK {self.uri}: the token refused the PIN from {self.query['pin-source']} "
                f"({type(err).__name__})"
            ) from None
        except errors.PKCS11Error as err:
            raise KekUnavailable(
                f"KEK {self.uri}: the token failed: {type(err).__name__}"
            ) from None


def _gcm(p11: Any, nonce: bytes, context: bytes) -> dict[str, Any]:
    from pkcs11.mechanisms import GCMParams

    return {"mechanism": p11.Mechanism.AES_GCM, "mechanism_param": GCMParams(nonce, context, 128)}


def _text(value: bytes | None) -> str | None:
    return None if value is None else value.decode("utf-8", "strict")


def _import() -> Any:
    try:
        import pkcs11
        import pkcs11.exceptions
    except ImportError:
        raise KekUnavailable(
            "a pkcs11: KEK needs python-pkcs11: pip install 'mrtr-state[pkcs11]'"
        ) from None
    return pkcs11


def _library(module_path: str, uri: str) -> Any:
    import pkcs11

    with _LIBRARIES_LOCK:
        lib = _LIBRARIES.get(module_path)
        if lib is None:
            if not os.path.isfile(module_path):
                raise KekUnavailable(f"KEK {uri}: no PKCS#11 library at {module_path}")
            try:
                lib = _LIBRARIES[module_path] = pkcs11.lib(module_path)
            except Exception as err:  # the library's own failure, reported whole
                raise KekUnavailable(
                    f"KEK {uri}: the PKCS#11 library {module_path} cannot be loaded: {err}"
                ) from None
        return lib
