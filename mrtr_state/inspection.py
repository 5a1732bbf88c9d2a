"""What :func:`mrtr_state.inspect` reports about a token: a value for people and for scripts.

Kept apart from :mod:`mrtr_state.tokens` because it is a report, not a step of verification:
``verified`` is true only if every check that ran passed, and :meth:`Inspection.to_dict` is the
JSON shape ``mrtr-state inspect --json`` prints (never key material).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .errors import InvalidToken
    from .formats import Anatomy

__all__ = ["Inspection"]


class Inspection:
    """What :func:`inspect` found. ``verified`` is true only if every check that ran passed."""

    __slots__ = (
        "anatomy",
        "claims",
        "envelope",
        "key_status",
        "notes",
        "problem",
        "sealed_bytes",
        "state_member",
        "verified",
    )

    def __init__(
        self,
        *,
        anatomy: Anatomy,
        verified: bool,
        envelope: str,
        state_member: str,
        key_status: str | None = None,
        claims: dict[str, Any] | None = None,
        sealed_bytes: int | None = None,
        problem: InvalidToken | None = None,
        notes: tuple[str, ...] = (),
    ) -> None:
        self.anatomy = anatomy
        #: what the plaintext is: "claims", "sealed", or an SDK's envelope ("mcp-py", ...)
        self.envelope = envelope
        #: the claim that carries the state: ``st`` in ours, ``s`` or ``p`` in the SDKs'
        self.state_member = state_member
        self.verified = verified
        self.key_status = key_status
        self.claims = claims
        self.sealed_bytes = sealed_bytes
        self.problem = problem
        self.notes = notes

    def __repr__(self) -> str:
        return (
            f"Inspection(format={self.format!r}, kid={self.kid!r}, verified={self.verified!r}, "
            f"problem={self.problem!r})"
        )

    @property
    def format(self) -> str:
        return self.anatomy.format

    @property
    def kid(self) -> str:
        return self.anatomy.kid

    @property
    def state(self) -> Any:
        """The state the claims carry (None when they could not be read)."""
        return None if self.claims is None else self.claims.get(self.state_member)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready view; never holds key material."""
        claims = self.claims
        return {
            "format": self.anatomy.format,
            "kid": self.anatomy.kid,
            "key_status": self.key_status,
            "confidential": self.anatomy.confidential,
            "verified": self.verified,
            "problem": None
            if self.problem is None
            else {"code": self.problem.code, "message": str(self.problem)},
            "header": self.anatomy.header,
            "fields": dict(self.anatomy.fields),
            "envelope": self.envelope,
            "claims": claims,
            "state": self.state,
            "sealed_bytes": self.sealed_bytes,
            "issued_at": claims.get("iat") if claims else None,
            "expires_at": claims.get("exp") if claims else None,
            "notes": list(self.notes),
        }
