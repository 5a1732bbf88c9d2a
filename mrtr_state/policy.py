"""The numeric limits every operation obeys, in one frozen value.

Kept apart from the claims so that configuration, formats and the CLI can share it without
importing claim logic.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "DEFAULT_POLICY",
    "DEFAULT_PROPAGATION",
    "DEFAULT_ROTATE_EVERY",
    "Policy",
    "default_retention",
]


@dataclass(frozen=True)
class Policy:
    """Lifetimes (seconds) and the token size cap (bytes).

    ``ttl`` is the default lifetime of a minted token and ``ttl_cap`` the longest one allowed:
    minting refuses more, and verifying refuses a token whose ``exp - iat`` exceeds it, so a
    leaked key cannot be used to mint long-lived state that newer policy would not have issued.
    ``skew`` is how far in the future an ``iat`` may lie (clocks of replicas differ); ``exp`` gets
    no tolerance. ``max_size`` bounds every token before any decoding.
    """

    ttl: int = 300
    ttl_cap: int = 3600
    skew: int = 60
    max_size: int = 8192

    def __post_init__(self) -> None:
        for name in ("ttl", "ttl_cap", "skew", "max_size"):
            value = getattr(self, name)
            if type(value) is not int or value < 0 or (value == 0 and name != "skew"):
                raise ValueError(f"{name} must be a positive whole number, got {value!r}")
        if self.ttl > self.ttl_cap:
            raise ValueError(f"ttl {self.ttl} s exceeds the ttl cap {self.ttl_cap} s")
        if self.max_size < 64:
            raise ValueError(f"max_size {self.max_size} is too small for any token")


DEFAULT_POLICY = Policy()

#: How long a new key stays pending before rotation promotes it (see mrtr_state.lifecycle).
DEFAULT_PROPAGATION = 3600
#: How long a primary mints before rotation replaces it: 30 days.
DEFAULT_ROTATE_EVERY = 30 * 86400


def default_retention(
    ttl_cap: int = DEFAULT_POLICY.ttl_cap, skew: int = DEFAULT_POLICY.skew
) -> int:
    """How long after it stops minting a key may still have unexpired tokens out there."""
    return ttl_cap + skew
