"""``inspect``: what a token shows without a key, and what its key confirms.

Kept apart from verification (:mod:`mrtr_state.tokens.facade`, which re-exports it) because it is a
report, not a step on a token's accepting path: ``verified`` is true only if every check that
ran passed, and :meth:`Inspection.to_dict` is the JSON shape ``mrtr-state inspect --json``
prints (never key material).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from .._encoding import MAX_DEPTH, EncodingError, json_loads
from ..errors import BadSignature, InvalidToken, MalformedToken
from .policy import DEFAULT_POLICY, Policy
from .registry import Shape, shape_of, token_text
from .surrogates import refuse_lone_surrogate

if TYPE_CHECKING:
    from ..keys.keyset import Keyset
    from .formats import Anatomy
    from .registry import Format

__all__ = ["Inspection", "inspect"]


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


def inspect(
    token: str | bytes,
    *,
    keyset: Keyset | None = None,
    now: float | None = None,
    policy: Policy = DEFAULT_POLICY,
) -> Inspection:
    """Describe a token. Without a keyset nothing is verified and the result says so.

    With a keyset the tag or MAC, the claim types and the lifetime are checked; bindings are not
    (inspect is not told which principal or request to expect), and the notes say so.
    """
    text = token_text(token, policy.max_size)
    shape = shape_of(text)
    fmt, anatomy = _drawn(shape, keyset, text)
    readable = _readable_claims(anatomy)
    told = False  # whether the body told a shared shape's formats apart (not verified)
    if len(shape.formats) > 1 and readable is not None:
        # a readable shared shape is shown as the one of its formats whose state member the
        # body holds, if only one does (else as the first)
        holders = [one for one in shape.formats if one.envelope.state_member in readable]
        if len(holders) == 1:
            fmt, told = holders[0], True
            anatomy = fmt.anatomy(text)
    envelope = fmt.envelope
    if readable is not None:
        readable = envelope.unverified(readable)
    notes = fmt.notes
    if len(shape.formats) > 1:
        notes = (*notes, _shared_note(shape, keyset, fmt.name if told else None))
    if keyset is None:
        return Inspection(
            anatomy=anatomy,
            verified=False,
            envelope=envelope.kind,
            state_member=envelope.state_member,
            claims=readable,
            notes=("no keyset: nothing was verified", *notes),
        )
    known = keyset.get(anatomy.kid) if anatomy.kid else None
    try:
        # the tag of a wire that covers a binding inspect is not given is checked with none
        if shape.only is not None:
            opened = shape.only
            key, plaintext = opened.open(keyset, text, b"")
        else:
            opened, key, plaintext = shape.open(keyset, text, b"")
    except InvalidToken as err:
        if any(one.associates for one in shape.formats) and isinstance(err, BadSignature):
            notes = (*notes, _UNSTATED_ASSOCIATED)
        return Inspection(
            anatomy=anatomy,
            verified=False,
            envelope=envelope.kind,
            state_member=envelope.state_member,
            key_status="unknown" if known is None else known.status,
            claims=readable,
            problem=err,
            notes=notes,
        )
    if len(shape.formats) > 1:  # one shape, several formats: the key that opened it names one
        if opened is not fmt:
            fmt = opened
            anatomy = fmt.anatomy(text)
        notes = (*fmt.notes, f"{fmt.name}: opened by its key {key.kid}")
    if not anatomy.kid:  # a token that names no key: the one that opened it
        anatomy.kid = key.kid
    view = fmt.envelope.view(plaintext, key, time.time() if now is None else now, policy)
    refuse_lone_surrogate(plaintext, view.claims, "the claims")
    return Inspection(
        anatomy=anatomy,
        verified=view.problem is None,
        envelope=view.kind,
        state_member=view.state_member,
        key_status=key.status,
        claims=view.claims,
        sealed_bytes=view.sealed_bytes,
        problem=view.problem,
        notes=(*notes, *view.notes),
    )


def _drawn(shape: Shape, keyset: Keyset | None, text: str) -> tuple[Format, Anatomy]:
    """The anatomy of ``text``, drawn by the first format of ``shape``. A token too malformed
    to draw is refused naming its format: of a shared shape, the one whose keys the keyset
    holds (the one its key would have opened it as), else the shape ("mcp-php or mcp-java"),
    never the first of them by default."""
    fmt = shape.formats[0]
    try:
        return fmt, fmt.anatomy(text)
    except MalformedToken as err:
        if len(shape.formats) == 1:
            raise
        held = [
            one
            for one in shape.formats
            if keyset is not None
            and any(k.alg == one.alg and k.status != "retired" for k in keyset)
        ]
        if len(held) != 1:
            raise type(err)(str(err).replace(fmt.name, shape.name, 1)) from None
        if held[0] is fmt:
            raise
        return held[0], held[0].anatomy(text)  # its own refusal, naming it


_UNSTATED_ASSOCIATED = (
    "the tag covers associated data (the server's binding), which inspect checks as empty: "
    "a token minted with a bind value fails here; verifying with that bind value checks it"
)


def _shared_note(shape: Shape, keyset: Keyset | None, by_body: str | None) -> str:
    if keyset is not None:
        return f"this shape is {shape.name}; the keyset's key that opens it tells which"
    note = f"this shape is {shape.name}; without a keyset it cannot tell which"
    if by_body is not None:
        note += f" (shown as {by_body}: its body holds that format's state member, unverified)"
    return note


def _readable_claims(anatomy: Anatomy) -> dict[str, Any] | None:
    """Claims a readable format shows anyone, parsed but not trusted; a lone surrogate in them
    is :class:`MalformedToken` (see ``_surrogates``), said before any key is looked at.

    One level deeper than a token's own cap: rmcp's view wraps the payload in an object."""
    if anatomy.readable is None or anatomy.readable[:1] != b"{":
        return None
    try:
        document = json_loads(anatomy.readable, MAX_DEPTH + 1)
    except EncodingError:
        return None
    refuse_lone_surrogate(anatomy.readable, document, "the readable claims")
    return document if isinstance(document, dict) else None
