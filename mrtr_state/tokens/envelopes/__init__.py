"""Envelopes: what a token's plaintext means, and the one path that accepts it.

A token is a wire (``formats/``: bytes in, bytes out, under a key) carrying an envelope: our
claims, an SDK's claims, or sealed bytes. Each envelope accepts in one ordered run of plain
checks, each raising its specific error where it fails (shape, then lifetime, then binding:
"expired" and "principal mismatch" are only ever said of tokens that came from a key holder).
There is no second, quicker path to keep in agreement with it, and nothing works out afterwards
which check refused.

The plaintext has just been authenticated by the wire's tag or MAC, so it is read with the plain
JSON reader (:func:`mrtr_state._encoding.authenticated_object`): a key holder wrote it.

An envelope is made by the format table (:mod:`mrtr_state.tokens.registry`) for each format that
carries it, given what it uses: the format's ``name`` (for messages) and whether its wire is
``confidential`` (our claims write the principal in clear only there). It declares the bindings
it can carry (:attr:`Envelope.carries`, bits of :mod:`mrtr_state.tokens.binding`). A binding stated
but not carried is never dropped: a verifier that states one gets the token refused
(:func:`refuse_uncarried`), a minter a ``ValueError`` (:func:`refuse_to_mint`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from ..._encoding import EncodingError, NestingError, authenticated_object
from ...errors import (
    AudienceMismatch,
    BindingMismatch,
    ExpiredToken,
    InvalidClaims,
    InvalidToken,
    MalformedToken,
    PrincipalMismatch,
    RequestMismatch,
    WrongFormat,
)
from ..binding import (
    AUDIENCE,
    BIND,
    KIND_NAMES,
    PRINCIPAL,
    REQUEST,
    REQUEST_ID,
    UNCHECKED,
    Binding,
)

if TYPE_CHECKING:
    from ..._entropy import Fresh
    from ...keys.key import Key
    from ..claims import Claims
    from ..policy import Policy

__all__ = [
    "UNCHECKED",
    "Carried",
    "Document",
    "Envelope",
    "RequestStateOnly",
    "View",
    "both_ways",
    "bound_mismatch",
    "check_lifetime",
    "over_cap",
    "read_document",
    "refuse_to_mint",
    "refuse_uncarried",
    "request_members",
    "unbound_mismatch",
    "unreadable",
]

_UNCARRIED: dict[int, tuple[type[BindingMismatch], str]] = {
    PRINCIPAL: (PrincipalMismatch, "principal mismatch: {} are not bound to a principal"),
    AUDIENCE: (AudienceMismatch, "audience mismatch: {} are not bound to an audience"),
    REQUEST_ID: (RequestMismatch, "request mismatch: {} carry no request id"),
    REQUEST: (RequestMismatch, "request mismatch: {} do not bind method, target and arguments"),
    BIND: (RequestMismatch, "bind mismatch: {} carry no bind value"),
}


#: An SDK's JSON, as read from an authenticated plaintext.
Document = dict[str, Any]
#: Where an accepting path puts the state's own JSON text, when it can be printed as is (None:
#: the caller prints nothing).
Carried = list[str] | None


class View:
    """What ``inspect`` shows of an opened envelope: its kind, its members as read, the member
    that holds the state, notes, and the problem its shape or lifetime has (None: sound)."""

    __slots__ = ("claims", "kind", "notes", "problem", "sealed_bytes", "state_member")

    def __init__(
        self,
        kind: str,
        claims: dict[str, Any] | None,
        state_member: str,
        notes: tuple[str, ...] = (),
        problem: InvalidToken | None = None,
        sealed_bytes: int | None = None,
    ) -> None:
        self.kind = kind
        self.claims = claims
        self.state_member = state_member
        self.notes = notes
        self.problem = problem
        self.sealed_bytes = sealed_bytes


class Envelope(Protocol):
    """The contract of every envelope; the table makes one per format, as
    ``EnvelopeClass(format name, whether its wire is confidential)``."""

    #: the format's name, for messages
    name: str
    #: what ``inspect`` calls it, and the claim that holds the state
    kind: str
    state_member: str
    #: the binding kinds it can carry (bits)
    carries: int
    #: what its tokens bind, as a refusal to mint says it, where the kinds of :attr:`carries`
    #: would say it wrongly (empty: they say it)
    mint_binds: str
    #: how many random bytes :meth:`pack` is given (0, 28 or 36: see
    #: :class:`mrtr_state._entropy.Fresh`), for what it and its wire use
    fresh_bytes: int

    def pack(
        self, state: Any, binding: Binding, key: Key, now: float, ttl: int, fresh: Fresh
    ) -> tuple[bytes, dict[str, Any]]:
        """The plaintext of a new token and the claims it holds. ``binding`` holds only kinds
        :attr:`carries` names (the caller checked); ``fresh``: random bytes drawn for this
        token alone; ``ttl`` is within the policy."""
        ...

    def accept(
        self, plaintext: bytes, key: Key, binding: Binding, now: float, policy: Policy, out: Carried
    ) -> Claims:
        """The claims of an authenticated plaintext, or the specific refusal. With a list for
        ``out``, the state's own JSON text is appended to it when it can be printed as is. Under
        :data:`UNCHECKED` it returns once shape and lifetime passed."""
        ...

    def view(self, plaintext: bytes, key: Key, now: float, policy: Policy) -> View:
        """What ``inspect`` shows: the members as read, and the verdict of :meth:`accept`
        under :data:`UNCHECKED`."""
        ...

    def claims_of(self, document: dict[str, Any], kid: str) -> Claims:
        """The claims of a document :meth:`pack` made under the key ``kid``."""
        ...

    def unverified(self, document: dict[str, Any]) -> dict[str, Any]:
        """The members of a readable body as ``inspect`` shows them before any key has checked
        it (read strictly by the caller), named as :meth:`view` names them."""
        ...

    def sealed(self, payload: bytes) -> bytes:
        """The plaintext that carries raw ``payload`` (no claims), or ``ValueError``."""
        ...

    def unsealed(self, plaintext: bytes) -> bytes:
        """The payload :meth:`sealed` wrapped, or :class:`WrongFormat`."""
        ...

    def codec_plaintext(self, envelope: bytes) -> bytes:
        """The plaintext that carries an MCP Python SDK envelope for ``KeysetCodec``."""
        ...

    def codec_envelope(self, plaintext: bytes) -> bytes:
        """The SDK envelope :meth:`codec_plaintext` wrapped, or :class:`WrongFormat`."""
        ...


def read_document(plaintext: bytes, what: str) -> dict[str, Any]:
    """The JSON object of an authenticated ``plaintext`` (read plainly: see
    :func:`~mrtr_state._encoding.authenticated_object`), or its refusal
    (:func:`unreadable`; ``what``: the envelope, for the message)."""
    try:
        return authenticated_object(plaintext)
    except EncodingError as err:
        raise unreadable(what, err) from None


def unreadable(what: str, err: EncodingError) -> InvalidToken:
    """The refusal of an authenticated plaintext that is not the JSON object ``what`` holds:
    nesting beyond the reader is a malformed token, anything else breaks the envelope's
    rules."""
    if isinstance(err, NestingError):
        return MalformedToken(f"{what}: {err}")
    return InvalidClaims(f"{what}: {err}")


def check_lifetime(
    alive: bool, ago: float, lifetime: float, policy: Policy, *, to_the_ms: bool = False
) -> None:
    """An SDK envelope's lifetime: the SDK's own test (``alive``, stated as the SDK states it,
    so that a NaN fails), then, beyond the SDK, the verifier's cap on the ``lifetime`` the
    token claims (seconds). ``ago``: how long ago it expired, for the message, to the
    millisecond where the SDK counts milliseconds (``to_the_ms``)."""
    if not alive:
        if to_the_ms:
            raise ExpiredToken(f"expired {ago:.3f} s ago")
        raise ExpiredToken(f"expired {int(ago)} s ago")
    if not lifetime <= policy.lifetime_cap:
        raise InvalidClaims(over_cap(lifetime, policy.lifetime_cap))


def over_cap(lifetime: float, ttl_cap: float) -> str:
    """The refusal of a lifetime over the verifier's cap, in the SDK envelopes' words."""
    return (
        f"token lifetime {lifetime:.0f} s exceeds this verifier's ttl_cap of {ttl_cap:.0f} s; "
        "raise ttl_cap on the verifier if the issuer really mints tokens this long-lived"
    )


class RequestStateOnly:
    """An official SDK's envelope: its tokens are requestStates, never sealed payloads.

    Its accepting path (:meth:`accept`) is one run for every SDK whose tokens hold JSON: the
    members, then the SDK's own checks of shape and lifetime (:meth:`checked`), then, unless
    ``inspect`` asks, the bindings the tokens carry, each both ways (:meth:`bound`), in the
    SDK's order. Its view shows the members as read and takes its verdict from that path
    (bindings unchecked).
    """

    kind = ""
    state_member = ""
    #: what the SDK binds, for inspect's note (empty: nothing inspect leaves unchecked)
    binds = ""
    mint_binds = ""
    carries = 0
    #: what the SDK calls the JSON its tokens carry ("envelope", "payload", "body")
    document = "envelope"
    #: the members that JSON may hold, whether it must hold every one, and what the SDK's
    #: shape is called when it does not
    members: frozenset[str] = frozenset()
    every_member = False
    shape = "claims object"

    def __init__(self, name: str, confidential: bool) -> None:
        self.name = name
        self.confidential = confidential
        #: "mcp-py tokens", for messages
        self.tokens = f"{name} tokens"
        #: "mcp-rb envelope", for messages
        self.what = f"{name} {self.document}"

    def claims_of(self, document: dict[str, Any], kid: str) -> Claims:
        raise NotImplementedError

    def _requested(self, state: Any, binding: Binding, give: str) -> None:
        """Minting: the state is the SDK's requestState (a string) and the request is bound
        (``give``: what the caller gives for it)."""
        if not isinstance(state, str):
            raise ValueError(
                f"{self.kind} state is a string (the SDK's requestState); JSON-encode it first"
            )
        if not binding.kinds & REQUEST:
            raise ValueError(f"{self.tokens} bind a request: give {give}")

    def _carried(self, kinds: int) -> None:
        """Verifying: the stated binding ``kinds`` are all ones these tokens carry."""
        if kinds & ~self.carries:
            raise refuse_uncarried(kinds & ~self.carries, self.tokens)

    def _request_stated(self, kinds: int, give: str) -> None:
        """Verifying tokens bound to their request: the verifier stated it (``give``: what)."""
        if not kinds & REQUEST:
            raise RequestMismatch(
                f"request mismatch: {self.tokens} are bound to their request; give the {give}"
            )

    def accept(
        self, plaintext: bytes, key: Key, binding: Binding, now: float, policy: Policy, out: Carried
    ) -> Claims:
        document = read_document(plaintext, self.what)
        names = document.keys()
        if not (names == self.members if self.every_member else names <= self.members):
            raise InvalidClaims(f"{self.what} is not the SDK's {self.shape}")
        self.checked(document, plaintext, now, policy)
        if binding is not UNCHECKED:
            self._carried(binding.kinds)
            self.bound(document, key, binding)
        return self.claims_of(document, key.kid)

    def checked(self, document: Document, plaintext: bytes, now: float, policy: Policy) -> None:
        """The SDK's own checks of an authenticated document of its members: the types of its
        members, then its lifetime (:func:`check_lifetime`)."""
        raise NotImplementedError

    def bound(self, document: Document, key: Key, binding: Binding) -> None:
        """The bindings the SDK's tokens carry, each both ways, in the SDK's order (the stated
        kinds are ones they carry: the caller checked)."""

    def _version_one(self, document: dict[str, Any]) -> None:
        """The SDK's version member: the integer 1."""
        version = document.get("v")
        if type(version) is not int or version != 1:
            raise InvalidClaims(f"{self.what}: unsupported version (v must be 1)")

    def shown(self, plaintext: bytes) -> dict[str, Any] | None:
        """The members ``inspect`` shows of an opened plaintext: the JSON object as read (it
        was authenticated, not vouched for), or None."""
        try:
            return self.unverified(authenticated_object(plaintext))
        except EncodingError:
            return None

    def unverified(self, document: dict[str, Any]) -> dict[str, Any]:
        return document

    def view(self, plaintext: bytes, key: Key, now: float, policy: Policy) -> View:
        notes = (f"the SDK's bindings ({self.binds}) were not checked",) if self.binds else ()
        shown = self.shown(plaintext)
        try:
            self.accept(plaintext, key, UNCHECKED, now, policy, None)
        except InvalidToken as err:
            return View(self.kind, shown, self.state_member, notes, err)
        return View(self.kind, shown, self.state_member, notes)

    def sealed(self, payload: bytes) -> bytes:
        raise ValueError(
            f"{self.tokens} are the SDK's requestStates, not sealed payloads; seal in "
            "aead, jws or jwe, or mint an SDK token"
        )

    def unsealed(self, plaintext: bytes) -> bytes:
        raise WrongFormat(f"{self.tokens} are SDK requestStates, not sealed payloads; verify")

    def codec_plaintext(self, envelope: bytes) -> bytes:
        raise ValueError("the codec needs a confidential format: aead, jwe or mcp-py")

    def codec_envelope(self, plaintext: bytes) -> bytes:
        raise WrongFormat("this token does not hold an SDK requestState envelope")


def unbound_mismatch(what: str, error: type[BindingMismatch]) -> BindingMismatch:
    """The refusal of a token not bound to ``what`` (a principal, an audience) when the
    verifier states one."""
    article = "an" if what[0] in "aeiou" else "a"
    return error(f"{what} mismatch: the token is not bound to {article} {what}, but one was given")


def bound_mismatch(what: str, error: type[BindingMismatch]) -> BindingMismatch:
    """The refusal of a token bound to ``what`` when the verifier states none."""
    article = "an" if what[0] in "aeiou" else "a"
    return error(f"{what} mismatch: the token is bound to {article} {what}; give it to verify")


def both_ways(carried: object, stated: object, what: str, error: type[BindingMismatch]) -> bool:
    """Whether the token carries ``what`` and the verifier states it, to be compared. A value
    on one side only is refused (:func:`unbound_mismatch`, :func:`bound_mismatch`); on
    neither, it passes."""
    if carried is None:
        if stated is not None:
            raise unbound_mismatch(what, error)
        return False
    if stated is None:
        raise bound_mismatch(what, error)
    return True


def request_members(binding: Binding, digest: str) -> dict[str, Any]:
    """The members with which the Python and Ruby SDKs bind the request: its method (``m``),
    its target (``t``) and the digest of its arguments (``a``), each SDK's own."""
    return {"m": binding.method, "t": binding.target, "a": digest}


def refuse_uncarried(kinds: int, what: str) -> BindingMismatch:
    """The refusal of a token that cannot carry the stated binding ``kinds`` (the lowest bit
    first): it is not bound as required, so this is a mismatch (fail closed), never a pass.
    ``what`` names the tokens, as in "mcp-ts tokens"."""
    lowest = kinds & -kinds
    error, message = _UNCARRIED[lowest]
    return error(message.format(what) + ", but one was stated")


def refuse_to_mint(kinds: int, carries: int, format_name: str, binds: str = "") -> ValueError:
    """The ``ValueError`` of a caller asking for bindings a format cannot carry, saying what
    its tokens bind (``binds``, else the kinds of ``carries``) and that the caller states no
    other when minting or verifying them (a verifier stating one refuses them: fail closed)."""
    names = ", ".join(name for bit, name in KIND_NAMES.items() if kinds & bit)
    can = binds or ", ".join(name for bit, name in KIND_NAMES.items() if carries & bit) or "nothing"
    return ValueError(
        f"{format_name} tokens cannot carry {names} (they bind {can}): state none when you "
        "mint or verify them"
    )
