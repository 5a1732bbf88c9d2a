"""The Java SDK's payload (``HmacRequestStateCodec``), checked as the SDK checks it.

    {"v":1,"s":state string,"exp":Unix milliseconds,"p":principal|null,"m":method,"n":name|null}

written compact, in that order, nulls included (Jackson 2's serialisation of the SDK's record).
``p`` is the principal **in clear**: the MAC keeps it from being changed, not from being read.
``n`` is the tool or prompt name, or the resource URI; the SDK writes null for a request that
names none, which mrtr-state states as the empty target (``--target ''``), the value its request
helpers give such a request. An empty principal or name is not null, and no binding matches it.

The SDK refuses a token only once ``exp < now`` in milliseconds (still good in the millisecond
``exp`` names; no skew either way), then compares ``p``, ``m`` and ``n`` with the opener's. Here
the same order, both ways, with what the SDK takes only through its JSON mapper refused as not
the SDK's payload (``invalid_claims``): a ``v`` other than the integer 1 or missing, a state,
expiry or binding of another type (Jackson turns ``"exp":"123"`` into a number and ``"s":5``
into text), a member missing, unknown or repeated (Jackson keeps the last), text after the
object (the plain reader refuses it). A null or missing state, on which the SDK's ``open``
throws, is refused the same way. The SDK binds no arguments, audience, request id or bind
value: stating one refuses the token rather than pass it unchecked. Beyond the SDK, ``exp`` may
lie at most the verifier's ``ttl_cap`` ahead.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..._encoding import skeleton, utf8
from ...errors import InvalidClaims, PrincipalMismatch, RequestMismatch
from ..binding import PRINCIPAL, REQUEST, Binding
from ..claims import Claims, new_claims
from . import Document, RequestStateOnly, both_ways, check_lifetime

if TYPE_CHECKING:
    from ..._entropy import Fresh
    from ...keys.key import Key
    from ..policy import Policy

__all__ = ["McpJavaEnvelope", "jackson_string"]

_MEMBERS = frozenset({"v", "s", "exp", "p", "m", "n"})
_CARRIES = PRINCIPAL | REQUEST
_NULLABLE = (str, type(None))
#: the range of the SDK's ``long exp``: its mapper refuses a number outside it
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1

# Jackson 2's string escapes: the quote, the backslash, \b \t \n \f \r, the other C0 controls as
# \u00XX with upper-case digits; everything else (non-ASCII, "/", U+2028, DEL) as it is.
_ESCAPES: dict[int, str] = {code: f"\\u{code:04X}" for code in range(0x20)}
_ESCAPES.update(
    {0x22: '\\"', 0x5C: "\\\\", 0x08: "\\b", 0x09: "\\t", 0x0A: "\\n", 0x0C: "\\f", 0x0D: "\\r"}
)


def jackson_string(text: str | None) -> str:
    """``text`` as Jackson 2 writes a string (``null`` for None), so minted tokens are the
    SDK's byte for byte."""
    return "null" if text is None else '"' + text.translate(_ESCAPES) + '"'


def _now_ms(now: float) -> int:
    """``now`` in whole milliseconds, as Java's ``Clock.millis()`` gives it: rounded, so that a
    millisecond given in float seconds (``1796429400.001``) is that millisecond."""
    return round(now * 1000)


class McpJavaEnvelope(RequestStateOnly):
    """See the module docstring."""

    kind = "mcp-java"
    state_member = "s"
    binds = "principal, method, target"
    mint_binds = "a principal, a method and a target, as the Java SDK does"
    carries = _CARRIES
    document = "payload"
    members, every_member, shape = _MEMBERS, True, "record (exactly v, s, exp, p, m, n)"
    fresh_bytes = 0  # signed: no id, no nonce, no salt

    def unverified(self, document: dict[str, Any]) -> dict[str, Any]:
        """The payload as read, its ``exp`` shown as ``exp_ms``: the unit is the SDK's, and a
        reader taking ``exp`` for seconds (as every other format's is) would put the expiry
        some 50,000 years out."""
        if "exp" not in document:
            return document
        return {("exp_ms" if name == "exp" else name): value for name, value in document.items()}

    def pack(
        self, state: Any, binding: Binding, key: Key, now: float, ttl: int, fresh: Fresh
    ) -> tuple[bytes, dict[str, Any]]:
        self._requested(state, binding, "method and target")
        if binding.arguments is not None:
            raise ValueError(f"{self.tokens} bind method and target, not arguments")
        document: dict[str, Any] = {
            "v": 1,
            "s": state,
            "exp": _now_ms(now) + ttl * 1000,
            "p": binding.principal,
            "m": binding.method,
            "n": binding.target or None,
        }
        text = (
            f'{{"v":1,"s":{jackson_string(state)},"exp":{document["exp"]},'
            f'"p":{jackson_string(binding.principal)},"m":{jackson_string(binding.method)},'
            f'"n":{jackson_string(document["n"])}}}'
        )
        return utf8(text), document

    def checked(self, document: Document, plaintext: bytes, now: float, policy: Policy) -> None:
        # the SDK's record, as its seal writes it: six members of their types, each once
        what = self.what
        self._version_one(document)
        get = document.get
        if type(get("s")) is not str:
            raise InvalidClaims(f"{what}: missing state (s must be a string)")
        exp: Any = get("exp")
        if type(exp) is not int or not _LONG_MIN <= exp <= _LONG_MAX:  # the SDK's `long exp`
            raise InvalidClaims(f"{what}: exp must be an integer (Unix milliseconds, a Java long)")
        if not (
            isinstance(get("p"), _NULLABLE)
            and isinstance(get("m"), _NULLABLE)
            and isinstance(get("n"), _NULLABLE)
        ):
            raise InvalidClaims(f"{what}: p, m and n must be strings or null")
        # six scalar members spell six colons outside strings: more is a member repeated
        if skeleton(plaintext).count(b":") != 6:
            raise InvalidClaims(f"{what}: a member is repeated")
        # the SDK's lifetime (refused once exp < now, in milliseconds), then beyond the SDK
        # exp - now <= ttl_cap
        left = (exp - _now_ms(now)) / 1000
        check_lifetime(left >= 0, -left, left, policy, to_the_ms=True)

    def bound(self, document: Document, key: Key, binding: Binding) -> None:
        # the principal, the method and the target, in the SDK's order, both ways
        principal, stated = document["p"], binding.principal
        if both_ways(principal, stated, "principal", PrincipalMismatch) and principal != stated:
            raise PrincipalMismatch("principal mismatch")
        self._request_stated(binding.kinds, "method and target")
        if binding.arguments is not None:
            raise RequestMismatch(
                f"request mismatch: {self.tokens} do not bind arguments, but some were given"
            )
        if document["m"] != binding.method:
            raise RequestMismatch("request mismatch: method")
        if document["n"] != (binding.target or None):
            raise RequestMismatch("request mismatch: target")

    def claims_of(self, document: dict[str, Any], kid: str) -> Claims:
        get = document.get
        return new_claims(
            state=document["s"],
            exp=document["exp"] / 1000,
            sub=get("p"),
            rid=f"{get('m')} {get('n')}",
            raw=document,
            kid=kid,
            format=self.name,
        )
