"""What a minter binds a token to, or a verifier expects it to be bound to: checked once.

A token may be bound to the authenticated ``principal``, an ``audience`` (this server or fleet)
and the originating request, given as the caller's ``request_id`` or as the request itself
(``method``, ``target`` and ``arguments``, fingerprinted; never the JSON-RPC id, which changes on
retry); the TypeScript SDK binds a ``bind`` value instead. :func:`binding_of` validates what
the caller stated into one :class:`Binding` that every envelope receives. An envelope declares what
it can carry (a mask of the kinds below), and a binding stated but not carried is never silently
dropped: minting refuses it (``ValueError``), verifying refuses the token.

The kinds are bits, so "stated but not carried" is one ``&`` on the path of every verification.
"""

from __future__ import annotations

from typing import Any

from .claims import arguments_digest
from .claims import request_id as fingerprint

__all__ = [
    "AUDIENCE",
    "BIND",
    "KIND_NAMES",
    "PRINCIPAL",
    "REQUEST",
    "REQUEST_ID",
    "UNCHECKED",
    "Binding",
    "binding_of",
    "check_text",
    "stated",
]

#: The kinds of binding a token may carry, as bits.
PRINCIPAL, AUDIENCE, REQUEST_ID, REQUEST, BIND = 1, 2, 4, 8, 16
#: How each kind is named in messages.
KIND_NAMES = {
    PRINCIPAL: "a principal",
    AUDIENCE: "an audience",
    REQUEST_ID: "a request id",
    REQUEST: "method, target and arguments",
    BIND: "a bind value",
}


def check_text(name: str, value: Any) -> str:
    """``value`` if it is non-empty text UTF-8 can carry, else the ``ValueError`` naming it."""
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


class Binding:
    """What a state is bound to, validated once: ``Binding(principal="alice", method=
    "tools/call", target="deploy", arguments={"env": "prod"}, audience="https://mcp.example")``.

    ``principal``: the authenticated caller. ``audience``: this server or fleet. The originating
    request, as the caller's ``request_id`` or as the request itself (``method``, ``target``:
    tool name, prompt name or resource uri, and ``arguments``, fingerprinted; never the JSON-RPC
    id, which changes on retry). ``bind``: the TypeScript SDK's bind value. A value of the
    wrong type, text a token cannot carry, a request half stated: ``ValueError`` here, once.

    Give one to :func:`mrtr_state.mint` (``binding=``), :func:`mrtr_state.verify`
    (``expect=``) and a state backend (:mod:`mrtr_state.state`). Besides the values it holds
    ``kinds`` (the bits of those stated), ``rid`` (the request identifier mrtr-state's claims
    carry when one was stated as a string) and ``associated`` (the bind value as bytes).
    Immutable: a value set after it is made would escape the checks (and the kinds they
    set), so setting one raises ``AttributeError``; make another. The request fingerprint and the
    SDK's arguments digest are worked out on first use and kept (verifying an ``mcp-py`` token
    needs the digest but no fingerprint).
    """

    __slots__ = (
        "_digest",
        "arguments",
        "associated",
        "audience",
        "bind",
        "kinds",
        "method",
        "principal",
        "request_id",
        "rid",
        "target",
    )

    principal: str | None
    audience: str | None
    request_id: str | None
    method: str | None
    target: str | None
    arguments: Any
    bind: str | bytes | None
    #: the bind value's bytes (UTF-8 of text), for a wire whose tag covers it as associated
    #: data (rmcp's); empty when no bind value was stated
    associated: bytes
    kinds: int
    rid: str | None
    _digest: str | None

    def __new__(
        cls,
        *,
        principal: str | None = None,
        request_id: str | None = None,
        audience: str | None = None,
        method: str | None = None,
        target: str | None = None,
        arguments: Any = None,
        bind: str | bytes | None = None,
    ) -> Binding:
        # made (and checked) by binding_of, the one constructor: no __init__ runs after it
        return binding_of(principal, request_id, audience, method, target, arguments, bind)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"a Binding cannot be changed (its {name}): make another")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"a Binding cannot be changed (its {name}): make another")

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        # copied and pickled as what was stated, made (and checked) again
        return binding_of, (
            self.principal,
            self.request_id,
            self.audience,
            self.method,
            self.target,
            self.arguments,
            self.bind,
        )

    def fingerprint(self) -> str | None:
        """The request identifier of mrtr-state's claims: the caller's ``request_id``, or the
        fingerprint of method, target and arguments (see :func:`mrtr_state.request_id`)."""
        if self.rid is None and self.method is not None:
            if not self.target:
                raise ValueError("a request fingerprint needs a method and a non-empty target")
            _keep(
                self,
                "rid",
                fingerprint(method=self.method, target=self.target, arguments=self.arguments),
            )
        return self.rid

    def digest(self) -> str:
        """The MCP Python SDK's digest of the arguments (``{}`` when none were given)."""
        digest = self._digest
        if digest is None:
            digest = arguments_digest({} if self.arguments is None else self.arguments)
            _keep(self, "_digest", digest)
        return digest

    def __repr__(self) -> str:
        shown = ", ".join(name for bit, name in KIND_NAMES.items() if self.kinds & bit)
        return f"Binding({shown or 'nothing'})"


def binding_of(
    principal: str | None,
    request_id: str | None,
    audience: str | None,
    method: str | None,
    target: str | None,
    arguments: Any,
    bind: str | bytes | None,
) -> Binding:
    """The validated :class:`Binding` of what a caller stated, or the ``ValueError`` naming
    the caller's mistake: the one place a binding is checked. Every value in the order of
    :class:`Binding`'s keywords, positionally: on the path of every mint and verify, where a
    class call with keywords (``Binding(...)``) costs twice as much."""
    # the common case (ASCII text) costs a type test and ``isascii`` per value;
    # check_text names the rest
    kinds = 0
    if principal is not None:
        if type(principal) is not str or not principal or not principal.isascii():
            check_text("principal", principal)
        kinds = PRINCIPAL
    if audience is not None:
        if type(audience) is not str or not audience or not audience.isascii():
            check_text("audience", audience)
        kinds |= AUDIENCE
    if request_id is not None:
        if type(request_id) is not str or not request_id or not request_id.isascii():
            check_text("request_id", request_id)
        if method is not None or target is not None or arguments is not None:
            raise ValueError("give request_id or method/target/arguments, not both")
        kinds |= REQUEST_ID
    elif method is not None or target is not None or arguments is not None:
        # a binding stated but not carried would mint (or accept) an unbound token
        if method is None or target is None:
            raise ValueError("a request is bound by its method and target together")
        if type(method) is not str or not method or not method.isascii():
            check_text("method", method)
        if type(target) is not str:
            raise ValueError(f"target must be a string, got {target!r}")
        if arguments is not None and not isinstance(arguments, dict):
            raise ValueError(
                "arguments must be a JSON object (MCP tool and prompt arguments are "
                f"objects), not {_json_kind(arguments)}"
            )
        kinds |= REQUEST
    if bind is not None:
        if isinstance(bind, str):
            if not bind.isascii():  # may be empty, as the SDK's may
                check_text("bind", bind)
        elif not isinstance(bind, bytes):
            raise ValueError(f"bind must be text or bytes, not {type(bind).__name__}")
        kinds |= BIND
    # made as a layout twin that may be filled, then made a Binding
    binding: Binding = _new(_Filling)  # type: ignore[assignment]
    binding.principal = principal
    binding.audience = audience
    binding.request_id = request_id
    binding.rid = request_id
    binding.method = method
    binding.target = target
    binding.arguments = arguments
    binding.bind = bind
    binding.associated = (
        b"" if bind is None else bind.encode("utf-8") if isinstance(bind, str) else bind
    )
    binding.kinds = kinds
    binding._digest = None
    binding.__class__ = Binding
    return binding


class _Filling:
    """A :class:`Binding` while :func:`binding_of` fills it: the same slots, and no refusal to
    set them (a ``Binding``'s own ``__setattr__``, called once per value, would cost a verify
    some 2%)."""

    __slots__ = Binding.__slots__


_new = object.__new__
#: sets a value a Binding keeps once worked out (its fingerprint, its digest)
_keep = object.__setattr__
_UNSTATED = (None,) * 7


#: The binding ``inspect`` hands an envelope's accepting path: shape and lifetime are checked,
#: and the path returns before any binding (inspect is not told which principal or request to
#: expect). Never a caller's: :func:`stated` refuses it.
UNCHECKED = Binding()


def stated(given: Binding | None, *values: Any) -> Binding:
    """The :class:`Binding` a call states: built from its binding keywords (``values``, in
    :func:`binding_of`'s order), or given whole, never both (the API's two spellings of one
    binding: a call uses one)."""
    if given is None:
        return binding_of(*values)
    if type(given) is not Binding:
        raise TypeError(f"a binding must be a mrtr_state.Binding, not {type(given).__name__}")
    if given is UNCHECKED:  # it would skip every binding check
        raise ValueError("UNCHECKED is inspect's binding, never a caller's: state a Binding")
    if values != _UNSTATED:  # (item by item, identity first)
        raise ValueError("give a Binding or the binding keywords (principal=...), not both")
    return given


def _json_kind(value: Any) -> str:
    if isinstance(value, list | tuple):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if value is None or isinstance(value, bool):
        return "a literal"
    if isinstance(value, int | float):
        return "a number"
    return f"a {type(value).__name__}"
