"""The settings every operation falls back on: the numeric limits, in one frozen value, and
the default token format.

Kept apart from the claims so that configuration, formats and the CLI can share it without
importing claim logic.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "DEFAULT_FORMAT",
    "DEFAULT_POLICY",
    "DEFAULT_PROPAGATION",
    "DEFAULT_ROTATE_EVERY",
    "DEFAULT_TTL_CAP",
    "Policy",
    "default_retention",
]


class Policy:
    """Lifetimes (seconds) and the token size cap (bytes).

    ``ttl`` is the default lifetime of a minted token and ``ttl_cap`` the longest one allowed:
    minting refuses more, and verifying refuses a token whose ``exp - iat`` exceeds it, so a
    leaked key cannot be used to mint long-lived state that newer policy would not have issued.
    ``ttl_cap=None`` lifts the cap, for a verifier that must accept tokens its issuer mints
    with long or no lifetimes (the Rust SDK's tokens may never expire); minting keeps ``ttl``.
    ``lifetime_cap`` is the cap as a number (infinite when lifted), what the checks compare.

    ``skew`` is how far in the future an ``iat`` may lie (clocks of replicas differ); ``exp`` gets
    no tolerance. ``max_size`` bounds every token before any decoding.

    Immutable, equal by value. A plain class: every command builds one at start-up, where the
    dataclass machinery would cost more than the command's own work.
    """

    __slots__ = ("lifetime_cap", "max_size", "skew", "ttl", "ttl_cap")

    ttl: int
    ttl_cap: int | None
    lifetime_cap: float
    skew: int
    max_size: int

    def __init__(
        self, ttl: int = 300, ttl_cap: int | None = 3600, skew: int = 60, max_size: int = 8192
    ) -> None:
        checked: tuple[tuple[str, Any], ...] = (
            ("ttl", ttl),
            ("skew", skew),
            ("max_size", max_size),
        )
        if ttl_cap is not None:
            checked += (("ttl_cap", ttl_cap),)
        object.__setattr__(self, "ttl_cap", None)
        object.__setattr__(self, "lifetime_cap", float("inf") if ttl_cap is None else ttl_cap)
        for name, value in checked:
            if type(value) is not int or value < 0 or (value == 0 and name != "skew"):
                raise ValueError(f"{name} must be a positive whole number, got {value!r}")
            object.__setattr__(self, name, value)
        if ttl_cap is not None and ttl > ttl_cap:
            raise ValueError(f"ttl {ttl} s exceeds the ttl cap {ttl_cap} s")
        if max_size < 64:
            raise ValueError(f"max_size {max_size} is too small for any token")

    def _values(self) -> tuple[int, int | None, int, int]:
        return (self.ttl, self.ttl_cap, self.skew, self.max_size)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"a Policy is immutable; cannot set {name}")

    def __eq__(self, other: object) -> bool:
        if type(other) is not Policy:
            return NotImplemented
        return self._values() == other._values()

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        return "Policy(ttl={}, ttl_cap={}, skew={}, max_size={})".format(*self._values())


DEFAULT_POLICY = Policy()
#: The format minted when none is named (by code, ``--format`` or the config's ``format``):
#: ``aead``, the smallest and fastest confidential one.
DEFAULT_FORMAT = "aead"
#: The default lifetime cap, in seconds.
DEFAULT_TTL_CAP = 3600

#: How long a new key stays pending before rotation promotes it (see mrtr_state.keys.lifecycle).
DEFAULT_PROPAGATION = 3600
#: How long a primary mints before rotation replaces it: 30 days.
DEFAULT_ROTATE_EVERY = 30 * 86400


def default_retention(ttl_cap: int = DEFAULT_TTL_CAP, skew: int = DEFAULT_POLICY.skew) -> int:
    """How long after it stops minting a key may still have unexpired tokens out there."""
    return ttl_cap + skew
