"""mrtr-state: mint, verify, inspect and rotate keys for MCP requestState tokens.

import mrtr_state as ms
ks = ms.Keyset.load("keys/keyset.json")
token = ms.mint(ks, {"step": 2}, principal="alice", request_id="req-42", ttl=60)
claims = ms.verify(ks, token, principal="alice", request_id="req-42")
assert claims.state == {"step": 2}
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .binding import Binding
    from .claims import Claims, arguments_digest, request_id
    from .errors import (
        PUBLIC_MESSAGE,
        AudienceMismatch,
        BadSignature,
        BindingMismatch,
        ConfigError,
        ExpiredToken,
        InvalidClaims,
        InvalidToken,
        KekRefused,
        KekRequired,
        KekUnavailable,
        KeyRetired,
        KeysetError,
        KeysetExists,
        KeysetInvalid,
        KeysetLocked,
        KeysetNotFound,
        KeysetPermissions,
        KeysetTampered,
        LifetimeBeyondStore,
        MalformedToken,
        MrtrStateError,
        NoPrimaryKey,
        NotYetValid,
        OversizedToken,
        PrincipalMismatch,
        ProbeFailed,
        PropagationPending,
        Replayed,
        ReplayStoreError,
        RequestMismatch,
        StateStoreError,
        TimeWindowError,
        UnknownHandle,
        UnknownKey,
        UnknownKeyId,
        WrongFormat,
    )
    from .keyset import Key, Keyset
    from .policy import DEFAULT_POLICY, Policy
    from .replay import ReplayStore, open_store
    from .tokens import (
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

# Each name is imported from its module on first use (PEP 562): a command that verifies one aead
# token then loads the modules it runs, not the replay stores, SDK envelopes or key lifecycle.
_WHERE = {
    "AudienceMismatch": "errors",
    "BadSignature": "errors",
    "Binding": "binding",
    "BindingMismatch": "errors",
    "Claims": "claims",
    "ConfigError": "errors",
    "DEFAULT_POLICY": "policy",
    "ExpiredToken": "errors",
    "Inspection": "tokens",
    "InvalidClaims": "errors",
    "InvalidToken": "errors",
    "KekRefused": "errors",
    "KekRequired": "errors",
    "KekUnavailable": "errors",
    "Key": "keyset",
    "KeyRetired": "errors",
    "Keyset": "keyset",
    "KeysetError": "errors",
    "KeysetExists": "errors",
    "KeysetInvalid": "errors",
    "KeysetLocked": "errors",
    "KeysetNotFound": "errors",
    "KeysetPermissions": "errors",
    "KeysetTampered": "errors",
    "LifetimeBeyondStore": "errors",
    "MalformedToken": "errors",
    "Minted": "tokens",
    "MrtrStateError": "errors",
    "NoPrimaryKey": "errors",
    "NotYetValid": "errors",
    "OversizedToken": "errors",
    "PUBLIC_MESSAGE": "errors",
    "Policy": "policy",
    "PrincipalMismatch": "errors",
    "ProbeFailed": "errors",
    "PropagationPending": "errors",
    "ReplayStore": "replay",
    "ReplayStoreError": "errors",
    "Replayed": "errors",
    "RequestMismatch": "errors",
    "StateStoreError": "errors",
    "TimeWindowError": "errors",
    "UnknownHandle": "errors",
    "UnknownKey": "errors",
    "UnknownKeyId": "errors",
    "WrongFormat": "errors",
    "arguments_digest": "claims",
    "inspect": "tokens",
    "issue": "tokens",
    "mint": "tokens",
    "open_store": "replay",
    "request_id": "claims",
    "seal": "tokens",
    "unseal": "tokens",
    "verify": "tokens",
    "verify_for_output": "tokens",
}


_SUBMODULES = frozenset(
    {"audit", "binding", "claims", "config", "envelopes", "errors", "formats", "inspection"}
    | {"key_derivation", "keyfile", "keyset", "keyset_store", "keyset_watch", "keytable"}
    | {"lifecycle", "mcp", "policy", "registry", "replay", "sdk_codec", "tokens"}
    | {"handles", "handle_store", "server_state"}
)


def __getattr__(name: str) -> Any:
    import importlib

    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'mrtr_state' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


__version__ = "0.1.0"

__all__ = [
    "DEFAULT_POLICY",
    "PUBLIC_MESSAGE",
    "AudienceMismatch",
    "BadSignature",
    "Binding",
    "BindingMismatch",
    "Claims",
    "ConfigError",
    "ExpiredToken",
    "Inspection",
    "InvalidClaims",
    "InvalidToken",
    "KekRefused",
    "KekRequired",
    "KekUnavailable",
    "Key",
    "KeyRetired",
    "Keyset",
    "KeysetError",
    "KeysetExists",
    "KeysetInvalid",
    "KeysetLocked",
    "KeysetNotFound",
    "KeysetPermissions",
    "KeysetTampered",
    "LifetimeBeyondStore",
    "MalformedToken",
    "Minted",
    "MrtrStateError",
    "NoPrimaryKey",
    "NotYetValid",
    "OversizedToken",
    "Policy",
    "PrincipalMismatch",
    "ProbeFailed",
    "PropagationPending",
    "ReplayStore",
    "ReplayStoreError",
    "Replayed",
    "RequestMismatch",
    "StateStoreError",
    "TimeWindowError",
    "UnknownHandle",
    "UnknownKey",
    "UnknownKeyId",
    "WrongFormat",
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
