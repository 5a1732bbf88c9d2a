"""mint / verify / inspect / seal / unseal: the one place where keyset, format and claims meet.

Order of checks in :func:`verify`, and why:

1. size cap, before any decoding (an 8 KiB cap bounds all later work);
2. format detection and key routing by key id (unknown or retired keys stop here);
3. the tag or MAC, so nothing unauthenticated is ever parsed as claims;
4. claim shape and types, then lifetime, then binding: "expired" and "principal mismatch" are
   only ever said of tokens that really came from a holder of the key.

Sealed payloads (:func:`seal`) carry a leading 0x00 byte, which no claims JSON can start with, so
bytes sealed for some other purpose can never be accepted as a claims token and vice versa. The
Python SDK's envelopes sealed by :class:`mrtr_state.mcp.KeysetCodec` carry 0x01 instead: they are
requestStates, verified with the SDK's own checks, and never confused with either.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from ._encoding import (
    MAX_DEPTH,
    EncodingError,
    b64url_encode,
    claims_bytes,
    compare_digest,
    encode_parsed,
    json_loads,
    json_loads_object,
    nesting_depth,
    scan_json,
)
from ._entropy import random_bytes
from .claims import MAX_TIME as _MAX_TIME
from .claims import Claims, check_claims, check_lifetime, parse_claims
from .claims import request_id as make_request_id
from .errors import (
    AudienceMismatch,
    InvalidClaims,
    InvalidToken,
    MalformedToken,
    OversizedToken,
    PrincipalMismatch,
    Replayed,
    RequestMismatch,
    WrongFormat,
)
from .formats import Anatomy, Format, _loaded, detect_format, get_format
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
_SEALED = b"\x00"
_SDK_ENVELOPE = b"\x01"


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


_SDK: Any = None


def _sdk() -> Any:
    """The SDK envelope module, imported on first use (an import statement per call would cost
    more than the envelope checks themselves)."""
    global _SDK
    if _SDK is None:
        from . import sdk_envelopes

        _SDK = sdk_envelopes
    return _SDK


def _now(now: float | None) -> float:
    return time.time() if now is None else now


def _text(token: str | bytes, policy: Policy) -> str:
    """Size-check and normalise untrusted token input to ASCII text."""
    if not isinstance(token, str | bytes):
        raise TypeError(f"token must be str or bytes, not {type(token).__name__}")
    if len(token) > policy.max_size:
        raise OversizedToken(
            f"token is {len(token)} bytes, over the {policy.max_size}-byte size cap"
        )
    if isinstance(token, bytes):
        try:
            return token.decode("ascii")
        except UnicodeDecodeError:
            raise MalformedToken("token holds non-ASCII bytes") from None
    if not token.isascii():
        raise MalformedToken("token holds non-ASCII characters")
    return token


def _format_of(token: str, wanted: str | None) -> Format:
    found = detect_format(token)
    if wanted is not None and wanted != found:
        get_format(wanted)  # a caller's typo is a ValueError, not a rejected token
        raise WrongFormat(f"expected a {wanted} token, got {found}")
    return get_format(found)


def _open(
    keyset: Keyset, token: str | bytes, wanted: str | None, policy: Policy
) -> tuple[Format, Key, bytes]:
    # The common case (an ASCII str within the cap) is checked inline; _text says why not.
    if type(token) is str and len(token) <= policy.max_size and token.isascii():
        text = token
    else:
        text = _text(token, policy)
    fmt = _format_of(text, wanted)
    key, plaintext = fmt.open(keyset, text)
    return fmt, key, plaintext


def _claims_from(plaintext: bytes) -> Claims:
    try:
        return parse_claims(json_loads_object(plaintext))
    except EncodingError as err:
        if plaintext[:1] == _SEALED:
            raise WrongFormat("this token holds a sealed payload, not claims; use unseal") from None
        raise InvalidClaims(f"claims: {err}") from None


def _check_ttl(ttl: int | None, policy: Policy) -> int:
    chosen = policy.ttl if ttl is None else ttl
    if type(chosen) is not int or not 0 < chosen <= policy.ttl_cap:
        raise ValueError(
            f"ttl must be a whole number of seconds in 1..{policy.ttl_cap}, got {chosen!r}"
        )
    return chosen


def _fit(token: str, policy: Policy, what: str) -> str:
    if len(token) > policy.max_size:
        raise ValueError(
            f"{what} makes a {len(token)}-byte token, over the {policy.max_size}-byte size cap "
            "that verification enforces; carry less or raise max_size everywhere"
        )
    return token


_SDK_FORMATS = frozenset({"mcp-py", "mcp-ts"})
_new_tuple = tuple.__new__
_same = compare_digest  # constant time; TypeError for non-ASCII text (the general path decides)


def _seal_claims(
    keyset: Keyset,
    state: Any,
    principal: str | None,
    request_id: str | None,
    audience: str | None,
    ttl: int | None,
    format: str,
    now: float | None,
    policy: Policy,
    request: _Request | None = None,
) -> tuple[str, Key, dict[str, Any] | bytes]:
    """Build the claims and seal them: the whole of minting, kept lean for the hot path."""
    fmt = get_format(format)
    key = keyset.primary(fmt.alg)
    if format in _SDK_FORMATS:
        if request_id is not None:
            raise ValueError(
                f"{format} tokens cannot carry a request id: bind "
                + ("method, target and arguments" if format == "mcp-py" else "a bind value")
            )
        return _seal_sdk(fmt, key, state, principal, audience, ttl, now, policy, request)
    if request is not None:
        request_id = _own_request_id(request_id, request)
    iat = int(time.time() if now is None else now)
    # Every random byte this token needs, in one system call: the jti (16), then the nonce (12)
    # of an encrypted format or the salt (8) of a principal tag. Each token draws its own.
    fresh = random_bytes(28)
    claims: dict[str, Any] = {
        "iat": iat,
        "exp": iat + _check_ttl(ttl, policy),
        "jti": b64url_encode(fresh[:16]),
    }
    if principal is not None:
        _check_text("principal", principal)
        if fmt.confidential:
            claims["sub"] = principal
        else:
            claims["sub"] = _tags().principal_tag(key, principal, fresh[16:24])
    if audience is not None:
        claims["aud"] = _check_text("audience", audience)
    if request_id is not None:
        claims["rid"] = _check_text("request id", request_id)
    claims["st"] = state
    nonce = fresh[16:] if fmt.confidential else None
    plaintext = claims_bytes(claims, state)
    return _fit(fmt.seal(key, plaintext, nonce), policy, "this state"), key, claims


class _Request:
    """The request an SDK token binds (method, target, arguments) and the mcp-ts bind value."""

    __slots__ = ("arguments", "bind", "method", "target")

    def __init__(
        self,
        method: str | None = None,
        target: str | None = None,
        arguments: Any = None,
        bind: str | bytes | None = None,
    ) -> None:
        self.method, self.target, self.arguments, self.bind = method, target, arguments, bind


def _request(
    method: str | None, target: str | None, arguments: Any, bind: str | bytes | None
) -> _Request | None:
    if method is None and target is None and arguments is None and bind is None:
        return None
    if method is None and (target is not None or arguments is not None):
        # a binding stated but not carried would mint (or accept) an unbound token
        raise ValueError("target and arguments bind a request only together with its method")
    if arguments is not None and not isinstance(arguments, dict):
        raise ValueError(
            "arguments must be a JSON object (MCP tool and prompt arguments are objects), "
            f"not {type(arguments).__name__}"
        )
    if bind is not None and not isinstance(bind, str | bytes):
        raise ValueError(f"bind must be text or bytes, not {type(bind).__name__}")
    return _Request(method, target, arguments, bind)


def _own_request_id(request_id: str | None, request: _Request) -> str | None:
    """Our formats bind one request id: the caller's, or the fingerprint of the request."""
    if request.bind is not None:
        raise ValueError("a bind value applies to mcp-ts tokens only")
    if request.method is None:
        return request_id
    if request_id is not None:
        raise ValueError("give request_id or method/target/arguments, not both")
    return make_request_id(
        method=request.method, target=request.target, arguments=request.arguments
    )


def _seal_sdk(
    fmt: Format,
    key: Key,
    state: Any,
    principal: str | None,
    audience: str | None,
    ttl: int | None,
    now: float | None,
    policy: Policy,
    request: _Request | None,
) -> tuple[str, Key, bytes]:
    sdk = _sdk()

    moment = time.time() if now is None else now
    lifetime = _check_ttl(ttl, policy)
    wanted = request or _Request()
    if fmt.name == "mcp-py":
        if wanted.bind is not None:
            raise ValueError("a bind value applies to mcp-ts tokens only")
        plaintext = sdk.mcp_py_envelope(
            state,
            now=moment,
            ttl=lifetime,
            method=wanted.method,
            target=wanted.target,
            arguments=wanted.arguments,
            audience=audience,
            principal=principal,
        )
    else:
        if principal is not None or audience is not None or wanted.method is not None:
            raise ValueError("mcp-ts tokens bind nothing but a bind value (--bind)")
        plaintext = sdk.mcp_ts_envelope(state, key=key, now=moment, ttl=lifetime, bind=wanted.bind)
    # The envelope goes back unparsed: only issue() reads it, mint() needs just the token.
    return _fit(fmt.seal(key, plaintext), policy, "this state"), key, plaintext


def _check_text(name: str, value: str) -> str:
    if type(value) is not str or not value:
        raise ValueError(f"{name} must be a non-empty string or None, got {value!r}")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(
                f"{name} holds a lone surrogate, which UTF-8 (and so a token) cannot carry"
            ) from None
    return value


def _check_stated(principal: Any, request_id: Any, audience: Any, bind: Any) -> None:
    """Name the caller's mistake when a stated binding is not text (bytes, a lone surrogate):
    called only after such a value made a comparison fail, so verify pays nothing for it."""
    for name, value in (
        ("principal", principal),
        ("request_id", request_id),
        ("audience", audience),
        ("bind", bind),
    ):
        if value is not None and not (name == "bind" and isinstance(value, bytes)):
            _check_text(name, value)


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
    token, key, claims = _seal_claims(
        keyset,
        state,
        principal,
        request_id,
        audience,
        ttl,
        format,
        now,
        policy,
        _request(method, target, arguments, bind),
    )
    if isinstance(claims, bytes):  # an SDK envelope
        claims = json_loads(claims)
        parsed = Claims(
            state=claims.get("s", claims.get("p")),
            iat=claims.get("iat"),
            exp=claims["exp"],
            jti=None,
            aud=claims.get("aud"),
            raw=claims,
        )
    else:
        parsed = parse_claims(claims)
    return Minted(token=token, kid=key.kid, format=format, claims=parsed)


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
    optional ``bind`` value.
    """
    return _seal_claims(
        keyset,
        state,
        principal,
        request_id,
        audience,
        ttl,
        format,
        now,
        policy,
        _request(method, target, arguments, bind),
    )[0]


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
    lacks, or a bound value not stated) is refused. Tokens of the official SDKs are checked
    exactly as their SDKs check them (see :mod:`mrtr_state.sdk_envelopes`).

    With ``once`` (a store from :mod:`mrtr_state.replay`), a token is accepted at most once until
    it expires: the second presentation raises :class:`Replayed`. The store is consulted last,
    so a token refused for any other reason is never recorded.
    """
    claims = None
    if type(token) is str and len(token) <= policy.max_size:
        # The quick path, written out here rather than called: on a server it runs for every
        # retry. A valid token is accepted in one straight run (for our own formats: the
        # format's quick opening, then parse_claims and check_claims folded into one accepting
        # test). Anything else (a refusal, an exception) leaves claims None, and the general
        # path decides again and names the reason; so this accepts nothing the general path
        # would refuse. A test holds the two paths to the same outcomes.
        try:
            if token.startswith("v1."):
                claims = _sdk_quickly(
                    keyset,
                    token,
                    principal,
                    request_id,
                    audience,
                    format,
                    time.time() if now is None else now,
                    policy,
                    _Request(method, target, arguments, bind),
                )
            elif method is None and target is None and arguments is None and bind is None:
                claims = _own_quickly(
                    keyset, token, principal, request_id, audience, format, now, policy, None
                )
        except Exception:  # every failure is the general path's to explain
            claims = None
    if claims is None:
        claims = _verify_generally(
            keyset,
            token,
            principal,
            request_id,
            audience,
            format,
            now,
            policy,
            _request(method, target, arguments, bind),
        )
    if once is not None:
        text = token if isinstance(token, str) else token.decode("ascii")
        from .replay import token_key

        moment = time.time() if now is None else now
        if not once.redeem(token_key(claims.jti, text), claims.exp, now=moment):
            raise Replayed("replayed: this requestState was already redeemed")
    return claims


def _verify_generally(
    keyset: Keyset,
    token: str | bytes,
    principal: str | None,
    request_id: str | None,
    audience: str | None,
    format: str | None,
    now: float | None,
    policy: Policy,
    request: _Request | None,
) -> Claims:
    """Every check of :func:`verify`, each failure named: for every token the quick path did not
    accept (all rejections, the SDK formats, bytes)."""
    wanted = request or _Request()
    method, target, arguments, bind = wanted.method, wanted.target, wanted.arguments, wanted.bind
    fmt, key, plaintext = _open(keyset, token, format, policy)
    moment = time.time() if now is None else now
    try:
        if fmt.name not in _SDK_FORMATS and plaintext[:1] != _SDK_ENVELOPE:
            if request is not None:
                request_id = _own_request_id(request_id, request)
            claims = _claims_from(plaintext)
            if principal is not None and claims.sub is not None and not fmt.confidential:
                principal = _tags().expected_tag(key, claims.sub, principal)
            check_claims(claims, moment, policy, sub=principal, aud=audience, rid=request_id)
            return claims
        # an SDK token, or an SDK envelope sealed by KeysetCodec in one of our formats
        if fmt.name not in _SDK_FORMATS:
            fmt, plaintext = get_format("mcp-py"), plaintext[1:]
        return _verify_sdk(
            fmt,
            key,
            plaintext,
            moment,
            principal,
            request_id,
            audience,
            method,
            target,
            arguments,
            bind,
            policy,
        )
    except (TypeError, AttributeError, UnicodeError):
        _check_stated(principal, request_id, audience, bind)
        raise


def _sdk_quickly(
    keyset: Keyset,
    token: str,
    principal: str | None,
    request_id: str | None,
    audience: str | None,
    format: str | None,
    moment: float,
    policy: Policy,
    request: _Request,
) -> Claims | None:
    """An SDK token in the common case: opened and checked as the general path does, minus its
    dispatch. Returns None where a stated binding cannot apply (the general path names it);
    any exception, too, sends the caller to the general path."""
    if request_id is not None:
        return None
    if token.count(".") == 2:  # mcp-ts binds nothing but its bind value
        if format not in (None, "mcp-ts") or principal is not None or audience is not None:
            return None
        if request.method is not None or request.target is not None:
            return None
        if request.arguments is not None:
            return None
        fmt = _loaded.get("mcp-ts") or get_format("mcp-ts")
        opened = fmt.open_quickly(keyset, token)  # type: ignore[attr-defined]
        if opened is None:
            return None
        checked: Claims | None = _sdk().mcp_ts_accepted(
            opened[1], key=opened[0], now=moment, bind=request.bind, ttl_cap=policy.ttl_cap
        )
        return checked
    if format not in (None, "mcp-py") or request.bind is not None:
        return None
    fmt = _loaded.get("mcp-py") or get_format("mcp-py")
    opened = fmt.open_quickly(keyset, token)  # type: ignore[attr-defined]
    if opened is None:
        return None
    sealed: Claims = _sdk().check_mcp_py(
        opened[1],
        now=moment,
        method=request.method,
        target=request.target,
        arguments=request.arguments,
        audience=audience,
        principal=principal,
        ttl_cap=policy.ttl_cap,
    )
    return sealed


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
    **more: Any,
) -> tuple[Claims, str]:
    """:func:`verify`, and the verified state as one line of JSON text, for printing.

    The text is the state exactly as the token carries it when that is one line and the state
    is the claims' last member (as mrtr-state writes it), else the state encoded again. A batch
    (``mrtr-state verify -``) so spends its time verifying, not re-encoding every state. Takes
    every keyword :func:`verify` takes.
    """
    if (
        not more
        and type(token) is str
        and len(token) <= policy.max_size
        and not token.startswith("v1.")  # SDK tokens: verify's own quick path
    ):
        carried: list[str] = []
        try:
            claims = _own_quickly(
                keyset, token, principal, request_id, audience, format, now, policy, carried
            )
        except Exception:  # every failure is the general path's to explain
            claims = None
        if claims is None:  # not opened quickly here: verify would only try the same again
            claims = _verify_generally(
                keyset, token, principal, request_id, audience, format, now, policy, None
            )
        return claims, carried[0] if carried else encode_parsed(claims.state)
    claims = verify(
        keyset,
        token,
        principal=principal,
        request_id=request_id,
        audience=audience,
        format=format,
        now=now,
        policy=policy,
        **more,
    )
    return claims, encode_parsed(claims.state)


def _own_quickly(
    keyset: Keyset,
    token: str,
    principal: str | None,
    request_id: str | None,
    audience: str | None,
    format: str | None,
    now: float | None,
    policy: Policy,
    carried: list[str] | None,
) -> Claims | None:
    """A valid token of our own formats, opened and accepted in one straight run (exceptions
    may escape; None or an exception sends the caller to the general path)."""
    if token.startswith("ms1."):
        name = "aead"
    elif token.startswith("eyJ"):
        name = "jws" if token.count(".") == 2 else "jwe"
    else:
        return None
    if format is not None and format != name:
        return None
    fmt = _loaded.get(name) or get_format(name)
    opened = fmt.open_quickly(keyset, token)  # type: ignore[attr-defined]
    if opened is None or opened[1][:1] != b"{":  # a sealed payload or an SDK envelope
        return None
    key, plaintext = opened
    return _accepted_claims(
        key,
        plaintext.decode("utf-8"),
        fmt.confidential,
        principal,
        request_id,
        audience,
        time.time() if now is None else now,
        policy,
        carried,
    )


def _carried_state(text: str, document: dict[str, Any]) -> str | None:
    """The state's own JSON text in accepted claims ``text``, if it can be printed as is: the
    top-level ``st`` key written plainly and last, the value on one line. Else None.

    The first plain ``"st":`` is the top-level key when no object opens before it (the members
    before it are scalars, and a JSON string cannot hold a plain quote before a colon); claims
    with one ``st`` member, last, end with its value, then only whitespace and the brace.
    """
    at = text.find('"st":')
    if at < 0 or "{" in text[1:at] or next(reversed(document)) != "st":
        return None
    value = text[at + 5 : -1].strip(" \t")
    if not value or "\n" in value or "\r" in value:
        return None
    return value


def _accepted_claims(
    key: Key,
    text: str,
    confidential: bool,
    principal: str | None,
    request_id: str | None,
    audience: str | None,
    now: float,
    policy: Policy,
    carried: list[str] | None = None,
) -> Claims | None:
    """The claims in ``text`` if :func:`parse_claims` and :func:`check_claims` would accept
    them, else None (exceptions may escape): verify's quick path, one accepting test. With
    ``carried``, the state's own text is appended to it when it can be printed as is."""
    document, end = scan_json(text, 0)
    if end != len(text) or type(document) is not dict:
        return None
    if text.count("{") + text.count("[") > MAX_DEPTH and nesting_depth(document) > MAX_DEPTH:
        return None
    iat, exp, jti = document["iat"], document["exp"], document["jti"]
    get = document.get
    sub, aud, rid = get("sub"), get("aud"), get("rid")
    if (
        type(iat) is int
        and type(exp) is int
        and type(jti) is str
        and jti
        and iat >= 0
        and exp < _MAX_TIME
        and 0 < exp - iat <= policy.ttl_cap
        and iat <= now + policy.skew
        and now < exp
        and "st" in document
        and len(document) == 4 + (sub is not None) + (aud is not None) + (rid is not None)
        and (
            (aud is None and audience is None)
            or (type(aud) is str and aud and audience is not None and _same(aud, audience))
        )
        and (
            (rid is None and request_id is None)
            or (type(rid) is str and rid and request_id is not None and _same(rid, request_id))
        )
        and (
            (sub is None and principal is None)
            or (
                type(sub) is str
                and sub
                and principal is not None
                and (
                    _same(sub, principal)
                    if confidential
                    else _tags().tag_matches(key, sub, principal)
                )
            )
        )
    ):
        if carried is not None:
            value = _carried_state(text, document)
            if value is not None:
                carried.append(value)
        return _new_tuple(Claims, (document["st"], iat, exp, jti, sub, aud, rid, None))
    return None


_TAGS: Any = None


def _tags() -> Any:
    """The principal-tag module (readable formats only), imported on first use: an import
    statement on every call would cost more than the tag itself."""
    global _TAGS
    if _TAGS is None:
        from . import _principal

        _TAGS = _principal
    return _TAGS


def _verify_sdk(
    fmt: Format,
    key: Key,
    plaintext: bytes,
    moment: float,
    principal: str | None,
    request_id: str | None,
    audience: str | None,
    method: str | None,
    target: str | None,
    arguments: Any,
    bind: str | bytes | None,
    policy: Policy,
) -> Claims:
    """The envelope checks of the official SDKs, each exactly as its SDK makes them, plus the
    verifier's ttl_cap (which the SDKs lack)."""
    sdk = _sdk()

    if fmt.name == "mcp-py":
        if bind is not None:
            raise ValueError("a bind value applies to mcp-ts tokens only")
        if request_id is not None:
            raise RequestMismatch(
                "request mismatch: mcp-py tokens bind the method, target and arguments, "
                "not a request id"
            )
        checked: Claims = sdk.check_mcp_py(
            plaintext,
            now=moment,
            method=method,
            target=target,
            arguments=arguments,
            audience=audience,
            principal=principal,
            ttl_cap=policy.ttl_cap,
        )
        return checked
    # The TypeScript codec binds nothing but its bind value: a verifier that states any other
    # binding is refused rather than silently given less than it asked for.
    if principal is not None:
        raise PrincipalMismatch(
            "principal mismatch: mcp-ts tokens are not bound to a principal, but one was given"
        )
    if audience is not None:
        raise AudienceMismatch(
            "audience mismatch: mcp-ts tokens are not bound to an audience, but one was given"
        )
    if request_id is not None or method is not None:
        raise RequestMismatch(
            "request mismatch: mcp-ts tokens bind only the SDK's bind value; give bind"
        )
    signed: Claims = sdk.check_mcp_ts(
        plaintext, key=key, now=moment, bind=bind, ttl_cap=policy.ttl_cap
    )
    return signed


def seal(
    keyset: Keyset, payload: bytes, *, format: str = DEFAULT_FORMAT, policy: Policy = DEFAULT_POLICY
) -> str:
    """Protect raw ``payload`` bytes with no claims: no expiry, no binding. Prefer :func:`mint`.

    Only mrtr-state's own formats seal: an ``mcp-py`` token *is* the Python SDK's requestState,
    so bytes sealed in that format could be taken for one (use :func:`mint`, or
    :class:`mrtr_state.mcp.KeysetCodec` inside the SDK).
    """
    if not isinstance(payload, bytes | bytearray | memoryview):
        raise TypeError(f"payload must be bytes, not {type(payload).__name__}")
    fmt = get_format(format)
    if fmt.name in _SDK_FORMATS:
        raise ValueError(
            f"{fmt.name} tokens are the SDK's requestStates, not sealed payloads; seal in aead, "
            "jws or jwe, or mint an SDK token"
        )
    return _fit(fmt.seal(keyset.primary(fmt.alg), _SEALED + bytes(payload)), policy, "this payload")


def unseal(
    keyset: Keyset,
    token: str | bytes,
    *,
    format: str | None = None,
    policy: Policy = DEFAULT_POLICY,
) -> bytes:
    """The payload of a token made by :func:`seal`, after checking its tag or MAC."""
    fmt, _key, plaintext = _open(keyset, token, format, policy)
    if fmt.name in _SDK_FORMATS:
        raise WrongFormat(f"{fmt.name} tokens are SDK requestStates, not sealed payloads; verify")
    if plaintext[:1] == _SDK_ENVELOPE:
        raise WrongFormat("this token holds an SDK requestState envelope; use verify or inspect")
    if plaintext[:1] != _SEALED:
        raise WrongFormat("this token holds claims, not a sealed payload; use verify")
    return plaintext[1:]


def seal_envelope(keyset: Keyset, envelope: bytes, *, format: str, policy: Policy) -> str:
    """An SDK envelope sealed for :class:`mrtr_state.mcp.KeysetCodec` (not public API).

    In ``mcp-py`` the bytes go in as the SDK's own codec seals them (byte-compatible); in our
    formats they are marked 0x01, apart from claims (``{``) and sealed payloads (0x00).
    """
    fmt = get_format(format)
    if fmt.name == "mcp-ts":
        raise ValueError("the codec needs a confidential format: aead, jwe or mcp-py")
    marked = bytes(envelope) if fmt.name == "mcp-py" else _SDK_ENVELOPE + bytes(envelope)
    return _fit(fmt.seal(keyset.primary(fmt.alg), marked), policy, "this envelope")


def open_envelope(
    keyset: Keyset, token: str, *, format: str | None, policy: Policy
) -> tuple[str, bytes]:
    """The (format, SDK envelope) of a token made by :func:`seal_envelope` (not public API)."""
    fmt, _key, plaintext = _open(keyset, token, format, policy)
    if fmt.name == "mcp-py":
        return fmt.name, plaintext
    if fmt.name == "mcp-ts" or plaintext[:1] != _SDK_ENVELOPE:
        raise WrongFormat("this token does not hold an SDK requestState envelope")
    return fmt.name, plaintext[1:]


#: What a token's plaintext is, by format when the format decides it, and where the state sits.
_ENVELOPE_OF = {"mcp-py": "mcp-py", "mcp-ts": "mcp-ts"}
_STATE_MEMBER = {"mcp-py": "s", "mcp-ts": "p", "claims": "st"}


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
        "verified",
    )

    def __init__(
        self,
        *,
        anatomy: Anatomy,
        verified: bool,
        key_status: str | None = None,
        claims: dict[str, Any] | None = None,
        sealed_bytes: int | None = None,
        problem: InvalidToken | None = None,
        notes: tuple[str, ...] = (),
        envelope: str | None = None,
    ) -> None:
        self.anatomy = anatomy
        self.envelope = envelope or _ENVELOPE_OF.get(anatomy.format, "claims")
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
    def state_member(self) -> str:
        """The claim that carries the state: ``st`` in ours, ``s`` or ``p`` in the SDKs'."""
        return _STATE_MEMBER.get(self.envelope, "st")

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
    sdk = _sdk()

    text = _text(token, policy)
    fmt = get_format(detect_format(text))
    anatomy = fmt.anatomy(text)
    notes: list[str] = []
    sdk_format = fmt.name in _SDK_FORMATS
    if fmt.name == "jws":
        notes.append(
            "the payload is readable by anyone holding the token; its sub is a salted keyed "
            "tag of the principal, never the principal itself"
        )
    elif fmt.name == "mcp-ts":
        notes.append("signed, not encrypted: the client can read the payload")
    claims_view = _readable_claims(anatomy)
    if keyset is None:
        notes.insert(0, "no keyset: nothing was verified")
        return Inspection(anatomy=anatomy, verified=False, claims=claims_view, notes=tuple(notes))
    key = keyset.get(anatomy.kid)
    sealed_bytes: int | None = None
    problem: InvalidToken | None = None
    envelope: str | None = None
    try:
        key, plaintext = fmt.open(keyset, text)
        if sdk_format:
            document = json_loads(plaintext) if plaintext[:1] == b"{" else None
            claims_view = document if isinstance(document, dict) else None
            notes.append("the SDK's bindings (request, audience, principal) were not checked")
            found = sdk.lifetime_problem(claims_view, _now(now), policy.ttl_cap)
            if found is not None:
                raise found
        elif plaintext[:1] == _SDK_ENVELOPE:
            envelope = "mcp-py"
            document = json_loads(plaintext[1:])
            claims_view = document if isinstance(document, dict) else None
            notes.append(
                "an MCP Python SDK envelope sealed by KeysetCodec; its bindings (request, "
                "audience, principal) were not checked: use verify with them"
            )
            found = sdk.lifetime_problem(claims_view, _now(now), policy.ttl_cap)
            if found is not None:
                raise found
        elif plaintext[:1] == _SEALED:
            envelope = "sealed"
            sealed_bytes = len(plaintext) - 1
            notes.append("sealed payload: no claims, no expiry, no binding")
        else:
            claims = _claims_from(plaintext)
            claims_view = claims.to_dict()
            notes.append("bindings (principal, request, audience) were not checked")
            check_lifetime(claims, _now(now), policy)
    except InvalidToken as err:
        problem = err
    except EncodingError as err:
        problem = InvalidClaims(f"envelope: {err}")
    return Inspection(
        anatomy=anatomy,
        verified=problem is None,
        key_status="unknown" if key is None else key.status,
        claims=claims_view,
        sealed_bytes=sealed_bytes,
        problem=problem,
        notes=tuple(notes),
        envelope=envelope,
    )


def _readable_claims(anatomy: Anatomy) -> dict[str, Any] | None:
    """Claims a readable format shows anyone, parsed but not trusted."""
    if anatomy.readable is None or anatomy.readable[:1] == _SEALED:
        return None
    try:
        document = json_loads(anatomy.readable)
    except EncodingError:
        return None
    return document if isinstance(document, dict) else None
