"""mint / verify / inspect / seal / unseal: the facade where keyset, format and envelope meet.

It knows no format by name (the table, :mod:`mrtr_state.tokens.registry`, does). A token is a wire
carrying an envelope; verification is, in this order:

1. the size cap, before any decoding (an 8 KiB cap bounds all later work);
2. detection, and the wire's ``open``: key routing by key id (unknown or retired keys stop
   here), then the tag or MAC, so nothing unauthenticated is ever parsed; where one shape
   serves two formats, the key that opens the token names its format;
3. the envelope's one accepting path: shape, lifetime, then the binding the caller stated
   (validated once, :mod:`mrtr_state.tokens.binding`), so "expired" and "principal mismatch" are
   only ever said of tokens that really came from a holder of the key;
4. the replay store, last, so a token refused for any other reason is never recorded.

The claims returned say which key verified the token and which format it was
(:attr:`Claims.kid`, :attr:`Claims.format`): no caller reads the token's bytes again for them.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from .._encoding import b64url_encode, encode_parsed
from .._entropy import fresh
from ..errors import WrongFormat
from .binding import Binding, binding_of, stated
from .claims import Claims
from .envelopes import refuse_to_mint
from .inspection import Inspection, inspect
from .policy import DEFAULT_FORMAT, DEFAULT_POLICY, Policy
from .registry import Format, format_named, shape_of, token_text
from .surrogates import BACKSLASH, refuse_lone_surrogate

if TYPE_CHECKING:
    from ..keys.key import Key
    from ..keys.keyset import Keyset
    from ..state.replay import ReplayStore

__all__ = [
    "Inspection",
    "Minted",
    "inspect",
    "issue",
    "mint",
    "seal",
    "unseal",
    "verify",
    "verify_for_output",
]


class Minted:
    """A freshly minted token and the facts a caller may want to log about it."""

    __slots__ = ("claims", "format", "kid", "token")

    def __init__(self, *, token: str, kid: str, format: str, claims: Claims) -> None:
        self.token = token
        self.kid = kid
        self.format = format
        self.claims = claims

    def __repr__(self) -> str:
        return f"Minted(kid={self.kid!r}, format={self.format!r}, expires_at={self.expires_at!r})"

    @property
    def expires_at(self) -> float:
        return self.claims.exp


def _open(
    keyset: Keyset, token: str | bytes, wanted: str | None, policy: Policy, associated: bytes
) -> tuple[Format, Key, bytes, str]:
    """Size cap, detection, the wire's ``open``: (format, key, plaintext, token text).

    ``wanted``: the only format to accept (None: any). ``associated``: the bind value's bytes,
    which a wire whose tag covers associated data (rmcp's) checks; the others' envelopes check
    the bind value themselves, or refuse it as a binding they do not carry."""
    # The common case (an ASCII str within the cap) is checked inline; token_text says why not.
    if type(token) is str and len(token) <= policy.max_size and token.isascii():
        text = token
    else:
        text = token_text(token, policy.max_size)
    shape = shape_of(text)
    if wanted is not None and wanted not in shape.names:
        format_named(wanted)  # a caller's typo is a ValueError, not a rejected token
        raise WrongFormat(f"expected a {wanted} token, got {shape.name}")
    fmt = shape.only
    if fmt is not None:
        key, plaintext = fmt.open(keyset, text, associated)
    else:  # one shape, several formats: the key that opens the token names its format
        fmt, key, plaintext = shape.open(keyset, text, associated)
    if wanted is not None and fmt.name != wanted:
        raise WrongFormat(f"expected a {wanted} token, got {fmt.name}")
    return fmt, key, plaintext, text


def _fit(token: str, policy: Policy, what: str) -> str:
    if len(token) > policy.max_size:
        raise ValueError(
            f"{what} makes a {len(token)}-byte token, over the {policy.max_size}-byte size cap "
            "that verification enforces; carry less or raise max_size everywhere"
        )
    return token


def _mint(
    keyset: Keyset,
    state: Any,
    binding: Binding,
    ttl: int | None,
    format: str,
    now: float | None,
    policy: Policy,
) -> tuple[str, Key, Format, dict[str, Any]]:
    """The whole of minting: (token, key, format, the claims it holds)."""
    fmt = format_named(format)
    envelope = fmt.envelope
    if binding.kinds & ~envelope.carries:
        raise refuse_to_mint(
            binding.kinds & ~envelope.carries, envelope.carries, format, envelope.mint_binds
        )
    lifetime = policy.ttl if ttl is None else ttl
    if type(lifetime) is not int or not 0 < lifetime <= policy.lifetime_cap:
        raise ValueError(
            f"ttl must be a whole number of seconds in 1..{policy.ttl_cap or 'any'}, "
            f"got {lifetime!r}"
        )
    key = keyset.primary(fmt.alg)
    # every random byte this token needs, in one system call (see mrtr_state._entropy.Fresh)
    drawn = fresh(envelope.fresh_bytes)
    moment = time.time() if now is None else now
    plaintext, claims = envelope.pack(state, binding, key, moment, lifetime, drawn)
    token = fmt.seal(key, plaintext, drawn.nonce, binding.associated)
    return _fit(token, policy, "this state"), key, fmt, claims


def issue(
    keyset: Keyset,
    state: Any = None,
    *,
    binding: Binding | None = None,
    principal: str | None = None,
    request_id: str | None = None,
    audience: str | None = None,
    ttl: int | None = None,
    format: str = DEFAULT_FORMAT,
    now: float | None = None,
    policy: Policy = DEFAULT_POLICY,
    method: str | None = None,
    target: str | None = None,
    arguments: Any = None,
    bind: str | bytes | None = None,
) -> Minted:
    """Like :func:`mint`, but returns the token with its key id, format and claims."""
    binding = (  # the keywords' path first: a call of its own would cost every verify
        binding_of(principal, request_id, audience, method, target, arguments, bind)
        if binding is None
        else stated(binding, principal, request_id, audience, method, target, arguments, bind)
    )
    token, key, fmt, claims = _mint(keyset, state, binding, ttl, format, now, policy)
    return Minted(
        token=token, kid=key.kid, format=fmt.name, claims=fmt.envelope.claims_of(claims, key.kid)
    )


def mint(
    keyset: Keyset,
    state: Any = None,
    *,
    binding: Binding | None = None,
    principal: str | None = None,
    request_id: str | None = None,
    audience: str | None = None,
    ttl: int | None = None,
    format: str = DEFAULT_FORMAT,
    now: float | None = None,
    policy: Policy = DEFAULT_POLICY,
    method: str | None = None,
    target: str | None = None,
    arguments: Any = None,
    bind: str | bytes | None = None,
) -> str:
    """Mint a requestState token carrying ``state`` (any JSON value) under the primary key.

    Bind it to everything the retry must match: the authenticated ``principal``, the originating
    request (``request_id``, or ``method``/``target``/``arguments``, which are fingerprinted; see
    :func:`mrtr_state.request_id`) and the ``audience`` (this server or fleet). It expires
    ``ttl`` seconds from ``now``. The SDK formats bind what their SDKs bind: ``mcp-py`` the
    method, target, arguments, audience and principal (its state is a string); ``mcp-ts`` an
    optional ``bind`` value. A binding the format cannot carry is a ``ValueError``.

    ``binding=Binding(...)`` states the same values as one object (:class:`Binding`), instead
    of the keywords; a call gives one or the other.
    """
    binding = (  # the keywords' path first: a call of its own would cost every verify
        binding_of(principal, request_id, audience, method, target, arguments, bind)
        if binding is None
        else stated(binding, principal, request_id, audience, method, target, arguments, bind)
    )
    return _mint(keyset, state, binding, ttl, format, now, policy)[0]


def verify(
    keyset: Keyset,
    token: str | bytes,
    *,
    expect: Binding | None = None,
    principal: str | None = None,
    request_id: str | None = None,
    audience: str | None = None,
    format: str | None = None,
    now: float | None = None,
    policy: Policy = DEFAULT_POLICY,
    once: ReplayStore | None = None,
    method: str | None = None,
    target: str | None = None,
    arguments: Any = None,
    bind: str | bytes | None = None,
) -> Claims:
    """Verify ``token`` and return its claims, or raise a subclass of :class:`InvalidToken`.

    State the same principal, request (``request_id``, or ``method``/``target``/``arguments``)
    and audience the token was minted with: a mismatch in either direction (a value the token
    lacks, or a bound value not stated) is refused, and so is a token whose format cannot
    carry a binding you state. Tokens of the official SDKs are checked exactly as their SDKs
    check them (see :mod:`mrtr_state.tokens.envelopes`). The claims name the key that verified the
    token (``claims.kid``) and its format (``claims.format``), for logs.

    With ``once`` (a store from :mod:`mrtr_state.state.replay`), a token is accepted at most once
    until it expires: the second presentation raises :class:`Replayed`. The store is consulted last,
    so a token refused for any other reason is never recorded.

    ``expect=Binding(...)`` states the expected binding as one object (:class:`Binding`),
    instead of the keywords; a call gives one or the other.
    """
    binding = (  # the keywords' path first: a call of its own would cost every verify
        binding_of(principal, request_id, audience, method, target, arguments, bind)
        if expect is None
        else stated(expect, principal, request_id, audience, method, target, arguments, bind)
    )
    return _verified(keyset, token, binding, format, now, policy, once, None)


def _verified(
    keyset: Keyset,
    token: str | bytes,
    binding: Binding,
    format: str | None,
    now: float | None,
    policy: Policy,
    once: ReplayStore | None,
    carried: list[str] | None,
) -> Claims:
    fmt, key, plaintext, text = _open(keyset, token, format, policy, binding.associated)
    moment = time.time() if now is None else now
    claims = fmt.envelope.accept(plaintext, key, binding, moment, policy, carried)
    if BACKSLASH in plaintext:  # only an escape can spell a lone surrogate (see _surrogates)
        refuse_lone_surrogate(plaintext, claims, "the claims")
    if once is not None:
        from ..state.replay import redemption, replayed

        entry, exp = redemption(claims.exp, claims.jti, text, once, moment)
        if not once.redeem(entry, exp, now=moment):
            raise replayed()
    return claims


def verify_for_output(
    keyset: Keyset,
    token: str | bytes,
    *,
    expect: Binding | None = None,
    principal: str | None = None,
    request_id: str | None = None,
    audience: str | None = None,
    format: str | None = None,
    now: float | None = None,
    policy: Policy = DEFAULT_POLICY,
    once: ReplayStore | None = None,
    method: str | None = None,
    target: str | None = None,
    arguments: Any = None,
    bind: str | bytes | None = None,
) -> tuple[Claims, str]:
    """:func:`verify`, and the verified state as one line of JSON text, for printing.

    The text is the state exactly as the token carries it when that is one line and the state
    is the claims' last member (as mrtr-state writes it), else the state encoded again; an
    rmcp payload that is not JSON is given as base64url (not JSON: the caller says so). A batch
    (``mrtr-state verify -``) so spends its time verifying, not re-encoding every state.
    """
    binding = (  # the keywords' path first: a call of its own would cost every verify
        binding_of(principal, request_id, audience, method, target, arguments, bind)
        if expect is None
        else stated(expect, principal, request_id, audience, method, target, arguments, bind)
    )
    carried: list[str] = []
    claims = _verified(keyset, token, binding, format, now, policy, once, carried)
    if carried:
        return claims, carried[0]
    if isinstance(claims.state, bytes):  # an rmcp payload that is not JSON
        return claims, b64url_encode(claims.state)
    return claims, encode_parsed(claims.state)


def seal(
    keyset: Keyset, payload: bytes, *, format: str = DEFAULT_FORMAT, policy: Policy = DEFAULT_POLICY
) -> str:
    """Protect raw ``payload`` bytes with no claims: no expiry, no binding. Prefer :func:`mint`.

    Only mrtr-state's own formats seal: an SDK token *is* that SDK's requestState, so bytes
    sealed in its format could be taken for one (use :func:`mint`, or
    :class:`mrtr_state.sdk.codec.KeysetCodec` inside the Python SDK).
    """
    if not isinstance(payload, bytes | bytearray | memoryview):
        raise TypeError(f"payload must be bytes, not {type(payload).__name__}")
    fmt = format_named(format)
    plaintext = fmt.envelope.sealed(bytes(payload))
    return _fit(fmt.seal(keyset.primary(fmt.alg), plaintext), policy, "this payload")


def unseal(
    keyset: Keyset,
    token: str | bytes,
    *,
    format: str | None = None,
    policy: Policy = DEFAULT_POLICY,
) -> bytes:
    """The payload of a token made by :func:`seal`, after checking its tag or MAC."""
    fmt, _key, plaintext, _text = _open(keyset, token, format, policy, b"")
    return fmt.envelope.unsealed(plaintext)


def seal_envelope(keyset: Keyset, envelope: bytes, *, format: str, policy: Policy) -> str:
    """An MCP Python SDK envelope sealed for :class:`mrtr_state.sdk.codec.KeysetCodec` (not
    public API): as the SDK's own codec seals it in ``mcp-py``, marked 0x01 in our formats."""
    fmt = format_named(format)
    plaintext = fmt.envelope.codec_plaintext(bytes(envelope))
    return _fit(fmt.seal(keyset.primary(fmt.alg), plaintext), policy, "this envelope")


def open_envelope(
    keyset: Keyset, token: str, *, format: str | None, policy: Policy
) -> tuple[str, bytes]:
    """The (format, SDK envelope) of a token made by :func:`seal_envelope` (not public API)."""
    fmt, _key, plaintext, _text = _open(keyset, token, format, policy, b"")
    return fmt.name, fmt.envelope.codec_envelope(plaintext)
