"""mrtr-state: mint, verify, inspect and rotate keys for MCP requestState tokens.

import mrtr_state as ms
ks = ms.Keyset.load("keys/keyset.json")
token = ms.mint(ks, {"step": 2}, principal="alice", request_id="req-42", ttl=60)
claims = ms.verify(ks, token, principal="alice", request_id="req-42")
assert claims.state == {"step": 2}
"""

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
    KeyRetired,
    KeysetError,
    KeysetExists,
    KeysetInvalid,
    KeysetLocked,
    KeysetNotFound,
    KeysetPermissions,
    MalformedToken,
    MrtrStateError,
    NoPrimaryKey,
    NotYetValid,
    OversizedToken,
    PrincipalMismatch,
    Replayed,
    ReplayStoreError,
    RequestMismatch,
    TimeWindowError,
    UnknownKey,
    WrongFormat,
)
from .keyset import Key, Keyset
from .policy import DEFAULT_POLICY, Policy
from .replay import ReplayStore, open_store
from .tokens import Inspection, Minted, inspect, issue, mint, seal, unseal, verify

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_POLICY",
    "PUBLIC_MESSAGE",
    "AudienceMismatch",
    "BadSignature",
    "BindingMismatch",
    "Claims",
    "ConfigError",
    "ExpiredToken",
    "Inspection",
    "InvalidClaims",
    "InvalidToken",
    "Key",
    "KeyRetired",
    "Keyset",
    "KeysetError",
    "KeysetExists",
    "KeysetInvalid",
    "KeysetLocked",
    "KeysetNotFound",
    "KeysetPermissions",
    "MalformedToken",
    "Minted",
    "MrtrStateError",
    "NoPrimaryKey",
    "NotYetValid",
    "OversizedToken",
    "Policy",
    "PrincipalMismatch",
    "ReplayStore",
    "ReplayStoreError",
    "Replayed",
    "RequestMismatch",
    "TimeWindowError",
    "UnknownKey",
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
]
