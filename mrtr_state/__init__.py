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


#: The package's modules, reached as attributes (``ms.keys``): the wings; 0.1.0's modules kept
#: as files that warn per name (``ms.mcp``); and 0.1.0's other modules under their old names,
#: which warn and hand on their new place (``ms.keyset``: :mod:`mrtr_state.keys.keyset`).
_WINGS = frozenset({"audit", "cli", "config", "errors", "keys", "probe", "proxy", "sdk", "state"})
_WINGS = _WINGS | {"tokens", "mcp", "replay", "sdk_codec", "server_state"}
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
    "policy": "tokens.policy",
    "registry": "tokens.registry",
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


class _MovedModules:
    """Imports 0.1.0's module paths (``import mrtr_state.keyset``, ``from mrtr_state.formats.jws
    import JwsWire``) as deprecated aliases: a module of the old name whose every name is handed
    on from the new module with a ``DeprecationWarning`` naming it. First on ``sys.meta_path``,
    and only for those paths, so that no module is ever loaded twice under two names."""

    @staticmethod
    def find_spec(fullname: str, path: Any = None, target: Any = None) -> Any:
        head, _, rest = fullname.partition(".")
        if head != __name__ or not rest:
            return None
        first, _, deeper = rest.partition(".")
        moved = _MOVED_MODULES.get(first)
        if moved is None:
            return None
        import importlib.util

        home = f"{__name__}.{moved}" + (f".{deeper}" if deeper else "")
        return importlib.util.spec_from_loader(fullname, _MovedModuleLoader(home))  # type: ignore[arg-type]


class _MovedModuleLoader:
    def __init__(self, home: str) -> None:
        self.home = home

    def create_module(self, spec: Any) -> Any:
        import importlib
        import types

        home = importlib.import_module(self.home)  # ImportError: no such module there either
        alias = types.ModuleType(spec.name, f"Deprecated since 0.2.0: {self.home}.")
        if hasattr(home, "__path__"):
            alias.__path__ = []  # its submodules: found here too
        if hasattr(home, "__all__"):
            vars(alias)["__all__"] = list(home.__all__)  # (star imports: each name warns)
        getattr_, dir_ = _moved(spec.name, dict.fromkeys(_public(home), self.home))
        alias.__getattr__ = getattr_  # type: ignore[method-assign]
        alias.__dir__ = dir_  # type: ignore[method-assign]
        return alias

    def exec_module(self, module: Any) -> None:
        pass


def _public(module: Any) -> list[str]:
    names = getattr(module, "__all__", None)
    if names is None:
        names = [name for name in vars(module) if not name.startswith("__")]
    return list(names)


def _install_moved_modules() -> None:
    import sys

    if not any(isinstance(finder, type) and finder is _MovedModules for finder in sys.meta_path):
        sys.meta_path.insert(0, _MovedModules)


_install_moved_modules()


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
