"""mint / verify / inspect / seal / unseal: the facade where keyset, format and envelope meet.

It knows no format by name. A token's format (:mod:`mrtr_state.formats`) is a wire carrying
an envelope (:mod:`mrtr_state.envelopes`); verification is, in this order:

1. the size cap, before any decoding (an 8 KiB cap bounds all later work);
2. detection, and the wire's ``open``: key routing by key id (unknown or retired keys stop
   here), then the tag or MAC, so nothing unauthenticated is ever parsed;
3. the envelope's one accepting path: shape, lifetime, then the binding the caller stated
   (validated once, :mod:`mrtr_state.binding`), so "expired" and "principal mismatch" are only
   ever said of tokens that really came from a holder of the key;
4. the replay store, last, so a token refused for any other reason is never recorded.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from ._encoding import b64url_encode, encode_parsed
from ._entropy import random_bytes
from ._surrogates import BACKSLASH, refuse_lone_surrogate
from .binding import Binding, binding_of
from .claims import Claims
from .envelopes import refuse_to_mint
from .errors import LifetimeBeyondStore, Replayed, WrongFormat
from .formats import Format, format_for_alg, format_of, get_format, token_text
from .inspection import Inspection, inspect
from .policy import DEFAULT_POLICY, Policy

if TYPE_CHECKING:
    from .keyset import Key, Keyset
    from .replay import ReplayStore

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

DEFAULT_FORMAT = "aead"


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
    keyset: Keyset,
    token: str | bytes,
    wanted: str | None,
    policy: Policy,
    binding: Binding | None = None,
) -> tuple[Format, Key, bytes, str]:
    """Size cap, detection, the wire's ``open``: (format, key, plaintext, token text).

    A wire whose tag covers associated data (rmcp's) is given the bind value's bytes. Where one
    shape serves two formats, the key that opened the token names the format."""
    # The common case (an ASCII str within the cap) is checked inline; token_text says why not.
    if type(token) is str and len(token) <= policy.max_size and token.isascii():
        text = token
    else:
        text = token_text(token, policy.max_size)
    fmt = format_of(text)
    if wanted is not None and wanted != fmt.name:
        get_format(wanted)  # a caller's typo is a ValueError, not a rejected token
        if wanted not in fmt.shares:
            raise WrongFormat(f"expected a {wanted} token, got {fmt.name}")
        fmt = get_format(wanted)
    if fmt.associates:
        key, plaintext = fmt.open(keyset, text, associated_data(binding))  # type: ignore[call-arg]
    else:
        key, plaintext = fmt.open(keyset, text)
    if key.alg != fmt.alg:
        fmt = format_for_alg(key.alg)
        if wanted is not None and wanted != fmt.name:
            raise WrongFormat(f"expected a {wanted} token, got {fmt.name}")
    return fmt, key, plaintext, text


def associated_data(binding: Binding | None) -> bytes:
    """The associated data an rmcp tag covers: the bind value's bytes (UTF-8 of text), or
    none (rmcp's empty associated data) when no bind value was stated."""
    bind = None if binding is None else binding.bind
    if bind is None:
        return b""
    return bind.encode("utf-8") if isinstance(bind, str) else bind


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
    fmt = get_format(format)
    envelope = fmt.envelope
    if binding.kinds & ~envelope.carries:
        raise refuse_to_mint(binding.kinds & ~envelope.carries, envelope.carries, format)
    lifetime = policy.ttl if ttl is None else ttl
    if type(lifetime) is not int or not 0 < lifetime <= policy.lifetime_cap:
        raise ValueError(
            f"ttl must be a whole number of seconds in 1..{policy.ttl_cap or 'any'}, "
            f"got {lifetime!r}"
        )
    key = keyset.primary(fmt.alg)
    # every random byte this token needs, in one system call (see Envelope.fresh_bytes)
    fresh = random_bytes(envelope.fresh_bytes)
    moment = time.time() if now is None else now
    plaintext, claims = envelope.pack(state, binding, key, fmt, moment, lifetime, fresh)
    if fmt.associates:
        token = fmt.seal(key, plaintext, None, associated_data(binding))  # type: ignore[call-arg]
    else:
        token = fmt.seal(key, plaintext, fresh[16:28] or None)
    return _fit(token, policy, "this state"), key, fmt, claims


def issue(
    keyset: Keyset,
    state: Any = None,
    *,
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
    binding = binding_of(principal, request_id, audience, method, target, arguments, bind)
    token, key, fmt, claims = _mint(keyset, state, binding, ttl, format, now, policy)
    return Minted(token=token, kid=key.kid, format=fmt.name, claims=fmt.envelope.claims_of(claims))


def mint(
    keyset: Keyset,
    state: Any = None,
    *,
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
    """
    binding = binding_of(principal, request_id, audience, method, target, arguments, bind)
    return _mint(keyset, state, binding, ttl, format, now, policy)[0]


def verify(
    keyset: Keyset,
    token: str | bytes,
    *,
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
    check them (see :mod:`mrtr_state.envelopes`).

    With ``once`` (a store from :mod:`mrtr_state.replay`), a token is accepted at most once until
    it expires: the second presentation raises :class:`Replayed`. The store is consulted last,
    so a token refused for any other reason is never recorded.
    """
    binding = binding_of(principal, request_id, audience, method, target, arguments, bind)
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
    fmt, key, plaintext, text = _open(keyset, token, format, policy, binding)
    moment = time.time() if now is None else now
    claims = fmt.envelope.accept(plaintext, key, fmt, binding, moment, policy, carried)
    if BACKSLASH in plaintext:  # only an escape can spell a lone surrogate (see _surrogates)
        refuse_lone_surrogate(plaintext, claims, "the claims")
    if once is not None:
        from .replay import token_key

        exp = claims.exp
        if exp is None or not exp - moment <= once.horizon:
            raise LifetimeBeyondStore(
                "single use refused: this token "
                + ("never expires" if exp is None else f"lives {exp - moment:.0f} s more")
                + f", beyond the {once.horizon:.0f} s the replay store remembers"
            )
        if not once.redeem(token_key(claims.jti, text), exp, now=moment):
            raise Replayed("replayed: this requestState was already redeemed")
    return claims


def verify_for_output(
    keyset: Keyset,
    token: str | bytes,
    *,
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
    binding = binding_of(principal, request_id, audience, method, target, arguments, bind)
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
    :class:`mrtr_state.mcp.KeysetCodec` inside the Python SDK).
    """
    if not isinstance(payload, bytes | bytearray | memoryview):
        raise TypeError(f"payload must be bytes, not {type(payload).__name__}")
    fmt = get_format(format)
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
    fmt, _key, plaintext, _text = _open(keyset, token, format, policy)
    return fmt.envelope.unsealed(plaintext)


def seal_envelope(keyset: Keyset, envelope: bytes, *, format: str, policy: Policy) -> str:
    """An MCP Python SDK envelope sealed for :class:`mrtr_state.mcp.KeysetCodec` (not public
    API): as the SDK's own codec seals it in ``mcp-py``, marked 0x01 in our formats."""
    fmt = get_format(format)
    plaintext = fmt.envelope.codec_plaintext(bytes(envelope))
    return _fit(fmt.seal(keyset.primary(fmt.alg), plaintext), policy, "this envelope")


def open_envelope(
    keyset: Keyset, token: str, *, format: str | None, policy: Policy
) -> tuple[str, bytes]:
    """The (format, SDK envelope) of a token made by :func:`seal_envelope` (not public API)."""
    fmt, _key, plaintext, _text = _open(keyset, token, format, policy)
    return fmt.name, fmt.envelope.codec_envelope(plaintext)
