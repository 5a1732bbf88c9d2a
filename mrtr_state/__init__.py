"""mrtr-state: mint, verify, inspect and rotate keys for MCP requestState tokens.

import mrtr_state as ms
ks = ms.Keyset.load("keys/keyset.json")
token = ms.mint(ks, {"step": 2}, principal="alice", request_id="req-42", ttl=60)
claims = ms.verify(ks, token, principal="alice", request_id="req-42")
assert claims.state == {"step": 2}
"""

from typing import TYPE_CHECKING, Any

from . import errors as _errors

# the whole error tree, eagerly (one small module of classes): every name of errors.__all__
from .errors import *  # noqa: F403

if TYPE_CHECKING:
    from .keys.keyset import Key, Keyset
    from .state.replay import ReplayStore, open_store
    from .tokens.binding import Binding
    from .tokens.claims import Claims, arguments_digest, request_id
    from .tokens.facade import (
        Inspection,
        Minted,
        inspect,
        issue,
        mint,
        seal,
        unseal,
        verify,
        verify_for_output,
    )
    from .tokens.policy import DEFAULT_POLICY, Policy

# Each name is imported from its module on first use (PEP 562): a command that verifies one aead
# token then loads the modules it runs, not the replay stores, SDK envelopes or key lifecycle.
_WHERE = {
    "Binding": "tokens.binding",
    "Claims": "tokens.claims",
    "DEFAULT_POLICY": "tokens.policy",
    "Inspection": "tokens.facade",
    "Key": "keys.keyset",
    "Keyset": "keys.keyset",
    "Minted": "tokens.facade",
    "Policy": "tokens.policy",
    "ReplayStore": "state.replay",
    "arguments_digest": "tokens.claims",
    "inspect": "tokens.facade",
    "issue": "tokens.facade",
    "mint": "tokens.facade",
    "open_store": "state.replay",
    "request_id": "tokens.claims",
    "seal": "tokens.facade",
    "unseal": "tokens.facade",
    "verify": "tokens.facade",
    "verify_for_output": "tokens.facade",
}


#: The package's modules, reached as attributes (``ms.keys``): the wings, and the modules of
#: 0.1.0 under their old names, which now warn and name their new place.
_WINGS = frozenset({"audit", "cli", "config", "errors", "keys", "probe", "proxy", "sdk", "state"})
_WINGS = _WINGS | {"tokens"}
_MOVED_MODULES = {
    "binding": "tokens.binding",
    "claims": "tokens.claims",
    "encrypted_keyset": "keys.encryption",
    "envelopes": "tokens.envelopes",
    "formats": "tokens.formats",
    "handle_store": "state.handle_store",
    "handles": "state.records",
    "inspection": "tokens.inspection",
    "kek": "keys.kek",
    "key_derivation": "keys.derivation",
    "keyfile": "keys.file",
    "keyset": "keys.keyset",
    "keyset_store": "keys.store",
    "keyset_watch": "keys.watch",
    "keytable": "keys.key",
    "lifecycle": "keys.lifecycle",
    "mcp": "sdk.mcp",
    "policy": "tokens.policy",
    "registry": "tokens.registry",
    "replay": "state.replay",
    "sdk_codec": "sdk.codec",
    "server_state": "state.handles",
}


def __getattr__(name: str) -> Any:
    import importlib

    if name in _WINGS:
        return importlib.import_module(f"{__name__}.{name}")
    moved = _MOVED_MODULES.get(name)
    if moved is not None:
        import warnings

        warnings.warn(
            f"mrtr_state.{name} is deprecated: it is mrtr_state.{moved}",
            DeprecationWarning,
            stacklevel=2,
        )
        return importlib.import_module(f"{__name__}.{moved}")
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'mrtr_state' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def _moved(module: str, homes: dict[str, str]) -> tuple[Any, Any]:
    """The ``__getattr__`` and ``__dir__`` of a deprecated 0.1.0 module whose names now live in
    ``homes`` (name -> module): each name is handed on from its new home, with a
    ``DeprecationWarning`` that names it."""
    import importlib
    import warnings

    def __getattr__(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        warnings.warn(
            f"{module}.{name} is deprecated: import it from {home}",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(home), name)

    def __dir__() -> list[str]:
        return sorted(homes)

    return __getattr__, __dir__


def __dir__() -> list[str]:
    return sorted(__all__)


__version__ = "0.2.0"

__all__ = [
    "DEFAULT_POLICY",
    "Binding",
    "Claims",
    "Inspection",
    "Key",
    "Keyset",
    "Minted",
    "Policy",
    "ReplayStore",
    "__version__",
    "arguments_digest",
    "inspect",
    "issue",
    "mint",
    "open_store",
    "request_id",
    "seal",
    "unseal",
    "verify",
    "verify_for_output",
]
__all__ += _errors.__all__
