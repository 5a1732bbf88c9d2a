"""The whole error tree of mrtr-state, on one screen.

Every refusal has its own class so that callers never match on message text, and every class
carries a stable ``code`` (for logs and ``--json``) and the ``exit_code`` the CLI returns for it.
The message (``str(err)``) is specific and meant for operators; ``err.public_message`` is the
one uniform sentence to put on the wire, so that a client probing a server cannot tell an
unknown key from a forged tag.

Caller mistakes (a negative TTL, an unknown format name passed by code) are plain ``TypeError``
or ``ValueError``, as in Fernet: they are bugs in the calling program, not hostile input.

The library says what is wrong and never names a command: an error the operator can put right
carries a :attr:`~MrtrStateError.remedy`, the action by name with the facts it needs, and a front
end words it as its own command (the CLI: "add one with: mrtr-state keys add --alg A256GCM").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Self

PUBLIC_MESSAGE = "invalid or expired request state"

__all__ = [
    "PUBLIC_MESSAGE",
    "REMEDIES",
    "AudienceMismatch",
    "BadSignature",
    "BindingMismatch",
    "CapabilityMissing",
    "ConfigError",
    "ExpiredToken",
    "InvalidClaims",
    "InvalidToken",
    "KekRefused",
    "KekRequired",
    "KekUnavailable",
    "KeyRetired",
    "KeysetError",
    "KeysetExists",
    "KeysetInvalid",
    "KeysetLocked",
    "KeysetNotFound",
    "KeysetPermissions",
    "KeysetTampered",
    "LifetimeBeyondStore",
    "MalformedToken",
    "MrtrStateError",
    "NoPrimaryKey",
    "NotYetValid",
    "OversizedToken",
    "PrincipalMismatch",
    "ProbeFailed",
    "PropagationPending",
    "ReplayStoreError",
    "Replayed",
    "RequestMismatch",
    "StateStoreError",
    "TimeWindowError",
    "UnknownHandle",
    "UnknownKey",
    "UnknownKeyId",
    "WrongFormat",
]


#: The remedies an error may name, for a front end to word (each with the facts it needs):
#: ``create_keyset``; ``add_key`` (alg: the algorithm has no primary); ``replace_key`` (alg: a key
#: whose secret cannot be used); ``reimport_key`` (a key id that is not its secret's);
#: ``import_key`` (alg, and sdk_kid "needed" for keyring keys: the keyset holds no usable key of
#: an SDK's algorithm); ``encrypt_keyset`` (kek: a plain keyset where a KEK is configured);
#: ``list_keys`` (a key id the keyset does not hold); ``use_state_store`` (a state handle given
#: where a token was expected); ``promote_later`` (key: a pending key promoted before its
#: propagation delay).
REMEDIES = frozenset(
    {
        "create_keyset",
        "add_key",
        "replace_key",
        "reimport_key",
        "import_key",
        "encrypt_keyset",
        "list_keys",
        "use_state_store",
        "promote_later",
    }
)


class MrtrStateError(Exception):
    """Base of every error this library raises on purpose."""

    code: ClassVar[str] = "error"
    exit_code: ClassVar[int] = 1
    public_message: ClassVar[str] = PUBLIC_MESSAGE
    #: What would put it right, if the operator can: an action of :data:`REMEDIES` and the
    #: facts it needs (e.g. ``("add_key", {"alg": "A256GCM"})``), or None.
    remedy: tuple[str, Mapping[str, str]] | None = None

    @property
    def details(self) -> dict[str, Any]:
        """Facts of this error for a machine to act on (a front end's JSON), beyond its code and
        message: none, unless the class says otherwise."""
        return {}

    def needing(self, action: str, **facts: str) -> Self:
        """This error, naming the remedy ``action`` (one of :data:`REMEDIES`) with ``facts``:
        ``raise NoPrimaryKey(message).needing("add_key", alg=alg)``."""
        if action not in REMEDIES:
            raise AssertionError(f"unknown remedy {action!r}")  # a programming error
        self.remedy = (action, facts)
        return self


# --- token rejections: hostile or stale input (exit 1, 3, 4, 5) -------------------------------


class InvalidToken(MrtrStateError):
    """The token was refused. Catch this to refuse every bad requestState at once."""

    code = "invalid_token"
    exit_code = 1


class MalformedToken(InvalidToken):
    """Not a well-formed token: bad prefix, segment count, base64url or JSON."""

    code = "malformed"


class OversizedToken(MalformedToken):
    """Longer than the size cap; refused before any decoding work."""

    code = "oversized"


class WrongFormat(InvalidToken):
    """A well-formed token of another format than the one asked for, or a key of another kind."""

    code = "wrong_format"


class UnknownKey(InvalidToken):
    """The key id names no key in the keyset."""

    code = "unknown_key"


class KeyRetired(InvalidToken):
    """The key id names a retired (revoked) key."""

    code = "key_retired"


class BadSignature(InvalidToken):
    """The MAC or AEAD tag does not verify: tampered, truncated or forged."""

    code = "bad_signature"


class InvalidClaims(InvalidToken):
    """Authentic, but its claims break the rules: missing, mistyped or an over-long lifetime."""

    code = "invalid_claims"


class TimeWindowError(InvalidToken):
    """Authentic and well-formed, but outside its validity window."""

    code = "time_window"
    exit_code = 3


class ExpiredToken(TimeWindowError):
    """``now`` is at or past ``exp``. Only raised after the tag or MAC has verified."""

    code = "expired"


class NotYetValid(TimeWindowError):
    """``iat`` lies further in the future than the allowed clock skew."""

    code = "not_yet_valid"


class BindingMismatch(InvalidToken):
    """Authentic and fresh, but bound to a different principal, request or audience."""

    code = "binding_mismatch"
    exit_code = 4


class PrincipalMismatch(BindingMismatch):
    code = "principal_mismatch"


class RequestMismatch(BindingMismatch):
    code = "request_mismatch"


class AudienceMismatch(BindingMismatch):
    code = "audience_mismatch"


class LifetimeBeyondStore(InvalidClaims):
    """Single use was asked for a token that outlives what the replay store remembers.

    A token that never expires, or expires further ahead than the store's ``horizon``, would be
    forgotten while still acceptable; it is refused rather than recorded.
    """

    code = "lifetime_beyond_store"


class Replayed(InvalidToken):
    """A single-use token presented a second time."""

    code = "replayed"
    exit_code = 5


class UnknownHandle(InvalidToken):
    """A state handle whose record the store does not hold: never issued, already taken (a
    handle is single use), or expired. The store cannot tell which, by design: it forgets."""

    code = "unknown_handle"


# --- keyset and configuration problems: the operator's to fix (exit 6) -------------------------


class KeysetError(MrtrStateError):
    """The keyset or configuration cannot be used; the message says how to fix it."""

    code = "keyset_error"
    exit_code = 6


class KeysetNotFound(KeysetError):
    code = "keyset_not_found"


class KeysetExists(KeysetError):
    code = "keyset_exists"


class UnknownKeyId(KeysetError):
    """A key id the caller named (to promote, retire or export) that the keyset does not hold.

    The caller's mistake, not the keyset's: the CLI exits 2 (usage), as for any argument that
    names nothing. Still a :class:`KeysetError`, so code catching those keeps working.
    """

    code = "unknown_key_id"
    exit_code = 2


class KeysetPermissions(KeysetError):
    """Group- or world-accessible file, a symlink, or not a regular file."""

    code = "keyset_permissions"


class KeysetInvalid(KeysetError):
    """The file is not a valid keyset: bad JSON, a short key, two primaries, a duplicate kid..."""

    code = "keyset_invalid"


class KeysetLocked(KeysetError):
    """Another writer held the keyset lock for too long."""

    code = "keyset_locked"


class KeysetTampered(KeysetInvalid):
    """An encrypted keyset whose metadata (key ids, statuses, algorithms, times, the KEK record)
    or secrets fail authentication: someone changed the file without the key-encryption key."""

    code = "keyset_tampered"


class KekRequired(KeysetError):
    """An encrypted keyset with no KEK configured, or a plain keyset where one is configured (a
    keyset swapped for a plain one must not be accepted as if nothing happened)."""

    code = "kek_required"


class KekUnavailable(KeysetError):
    """The key-encryption key cannot be used: an unset variable, an unreadable file, a helper
    that fails, an HSM without the object or with another PIN, a library not installed."""

    code = "kek_unavailable"


class KekRefused(KeysetError):
    """The KEK was reached but does not open this keyset's data key: a wrong passphrase, another
    KEK, or a wrapped data key taken from elsewhere."""

    code = "kek_refused"


class NoPrimaryKey(KeysetError):
    """Minting needs a primary key of the format's algorithm and the keyset has none."""

    code = "no_primary_key"


class ConfigError(KeysetError):
    code = "config_error"


class ReplayStoreError(MrtrStateError):
    """The single-use store cannot be reached or written: verification fails closed.

    Not a token problem, so not an :class:`InvalidToken`; the operator must fix the store.
    """

    code = "replay_store_error"
    exit_code = 6


# --- not yet: the same call succeeds later (exit 75, EX_TEMPFAIL) ------------------------------


class PropagationPending(MrtrStateError, ValueError):
    """A pending key asked to become primary before its propagation delay has passed: replicas
    that have not loaded it yet would refuse every token it mints. Nothing is wrong, it is early:
    the same promotion succeeds in :attr:`seconds_left` seconds (at :attr:`promotable_at`).

    Also a ``ValueError``, what :func:`mrtr_state.keys.lifecycle.promote` raised for it before.
    """

    code = "propagation_pending"
    exit_code = 75

    def __init__(self, message: str, *, kid: str, promotable_at: int, now: int) -> None:
        super().__init__(message)
        self.kid = kid
        #: Unix seconds from which the key may be promoted.
        self.promotable_at = promotable_at
        #: How long that is from the ``now`` the promotion was tried at (at least 1).
        self.seconds_left = max(1, promotable_at - now)

    @property
    def details(self) -> dict[str, Any]:
        import time

        at_utc = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.promotable_at))
        return {
            "kid": self.kid,
            "seconds_left": self.seconds_left,
            "promotable_at": self.promotable_at,
            "promotable_at_utc": at_utc,
        }


#: The JSON-RPC error code of a missing client capability (MCP 2026-07-28).
MISSING_REQUIRED_CLIENT_CAPABILITY = -32021


class StateStoreError(MrtrStateError):
    """The state-handle store cannot be used now (unreachable, read-only, evicting, a clock
    beyond the bound): the round fails closed, and no handle is given out."""

    code = "state_store_error"
    exit_code = 6


class CapabilityMissing(MrtrStateError):
    """The server tried to send an input request of a kind the client did not declare."""

    code = "capability_missing"
    exit_code = 2

    def __init__(self, message: str, required: Mapping[str, Any]) -> None:
        super().__init__(message)
        self.required = dict(required)

    def to_error(self) -> dict[str, Any]:
        """The spec's -32021 JSON-RPC error object."""
        return {
            "code": MISSING_REQUIRED_CLIENT_CAPABILITY,
            "message": "Missing required client capability",
            "data": {"requiredCapabilities": self.required},
        }


# --- probing a live server (exit 8) ------------------------------------------------------------


class ProbeFailed(MrtrStateError):
    """``probe`` could not judge the server: it is unreachable, its handshake failed, the tool
    never asked for input, an honest retry was refused, or an answer was unreadable, late or cut
    off. Never a verdict on the server's requestState handling: a probe that cannot tell says so
    rather than pass.

    ``report`` is what the probe had established before it stopped (a
    :class:`mrtr_state.probe.Report`), or None.
    """

    code = "probe_failed"
    exit_code = 8

    def __init__(self, message: str, report: Any = None) -> None:
        super().__init__(message)
        self.report = report
