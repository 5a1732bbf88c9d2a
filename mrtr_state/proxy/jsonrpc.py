"""What a POST body must be before the proxy forwards any of it: JSON-RPC 2.0 it fully understands.

The proxy is a boundary. If it read a body one way and the server another, a forged
``requestState`` could pass it unseen, so a body is refused whole (HTTP 400) unless:

* it is strict JSON (no duplicate members, NaN or trailing data: see ``_encoding``), one message
  object or a non-empty batch of them;
* every message is a JSON-RPC 2.0 request, notification or response, with an id that is a string
  or a number;
* no two requests of a batch share an id once numbers are compared as numbers (``1``, ``1.0`` and
  ``1e0`` are one id to most servers): otherwise the state minted for one request could be
  bound to the other;
* no notification carries ``requestState`` (it can neither be verified against a request nor
  answered);
* no member the proxy reads (``method``, ``params``, ``requestState``, ``name``...) is also
  present under another spelling of its name that differs only in case: Go's ``encoding/json``
  matches member names case-insensitively (``"RequestState"``, even with U+017F, the long s, in
  place of an s), so a server in Go would read a state the proxy never saw.

Nothing here does I/O or cryptography; :mod:`mrtr_state.proxy.rewrite` works on what passes.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

from .._encoding import EncodingError, json_loads
from ..sdk.mcp import INPUT_REQUIRED_METHODS

__all__ = [
    "MAX_BODY_DEPTH",
    "Body",
    "Refusal",
    "check_routing_headers",
    "id_key",
    "parse_body",
]

#: How deeply a request body may nest (tool arguments nest more than tokens do).
MAX_BODY_DEPTH = 128

#: JSON-RPC error codes the proxy answers with (-32020: MCP's HeaderMismatch).
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
HEADER_MISMATCH = -32020

# The members the proxy reads, by the object they sit in, and their case-folded spellings.
_MESSAGE_MEMBERS = ("jsonrpc", "id", "method", "params", "result", "error")
_PARAMS_MEMBERS = ("requestState", "name", "arguments", "uri", "inputResponses", "_meta")
_RESULT_MEMBERS = ("resultType", "requestState", "inputRequests")
_FOLDED = {
    "message": {name.casefold(): name for name in _MESSAGE_MEMBERS},
    "params": {name.casefold(): name for name in _PARAMS_MEMBERS},
    "result": {name.casefold(): name for name in _RESULT_MEMBERS},
}
_EXACT = {where: frozenset(names.values()) for where, names in _FOLDED.items()}
_KIND_OF_STATUS = {
    405: "method_not_allowed",
    401: "no_principal",
    413: "body_too_large",
    502: "upstream",
}
_KIND_OF_CODE = {-32700: "parse_error", -32020: "header_mismatch"}
_JSON_SPACE = b" \t\r\n"
#: C0 control characters (U+0000-U+001F): none may appear in a member name (see parse_body)
_C0 = re.compile(r"[\x00-\x1f]")


class Refusal(Exception):
    """A request the proxy answers itself without contacting the upstream.

    ``status`` is the HTTP status, ``code`` the JSON-RPC error code, ``str(refusal)`` the reason
    (for the log and the client: it names what was wrong with the request, never a secret).
    """

    def __init__(self, status: int, code: int, reason: str, kind: str | None = None) -> None:
        super().__init__(reason)
        self.status = status
        self.code = code
        #: a short, bounded name for metrics and logs
        self.kind = (
            kind or _KIND_OF_STATUS.get(status) or _KIND_OF_CODE.get(code, "invalid_request")
        )

    @property
    def reason(self) -> str:
        return str(self)

    def body(self) -> dict[str, Any]:
        """The JSON-RPC error response the client gets."""
        return {"jsonrpc": "2.0", "id": None, "error": {"code": self.code, "message": self.reason}}


def ambiguous_member(document: dict[str, Any], where: str) -> str | None:
    """A member of ``document`` whose name folds to one the proxy reads without being it."""
    folded = _FOLDED[where]
    exact = _EXACT[where]
    for name in document:
        if name in exact:  # the common case: a name spelled as the proxy reads it
            continue
        canonical = folded.get(name.casefold())
        if canonical is not None:
            return name
    return None


def id_key(value: Any) -> tuple[str, Any]:
    """A dictionary key for a JSON-RPC id under which ids a server may confuse are equal.

    Strings stay themselves; numbers become the double a JSON parser would read (``1``, ``1.0``
    and ``1e0`` are one id; so are two integers beyond 2**53 that round to the same double).
    Raises :class:`Refusal` for any other type and for a number no double can hold.
    """
    kind = type(value)
    if kind is str:
        return ("s", value)
    if kind is int or kind is float:
        try:
            return ("n", float(value))
        except OverflowError:
            raise Refusal(400, INVALID_REQUEST, "a request id is a number too large") from None
    raise Refusal(400, INVALID_REQUEST, "a request id must be a string or a number")


class Body:
    """A POST body that passed every rule of the module docstring.

    ``messages`` in order; ``batch`` says whether the body was an array (the answer must be one).
    """

    __slots__ = ("batch", "messages")

    def __init__(self, messages: list[dict[str, Any]], batch: bool) -> None:
        self.messages = messages
        self.batch = batch


def parse_body(body: bytes) -> Body:
    """The messages of a POST body, or the :class:`Refusal` that answers it."""
    text = body.strip(_JSON_SPACE)
    if not text:
        raise Refusal(400, PARSE_ERROR, "parse error: the body is empty")
    try:
        parsed = json_loads(text, max_depth=MAX_BODY_DEPTH)
    except EncodingError as err:
        raise Refusal(400, PARSE_ERROR, f"parse error: {err}") from None
    if b"\\" in text:  # only an escape can write a control character into a name
        _refuse_control_in_names(parsed)
    batch = isinstance(parsed, list)
    messages = parsed if batch else [parsed]
    if not messages:
        raise Refusal(400, INVALID_REQUEST, "invalid request: an empty batch")
    seen: set[tuple[str, Any]] = set()
    for message in messages:
        _check_message(message)
        if "method" in message and "id" in message:
            key = id_key(message["id"])
            if key in seen:
                raise Refusal(
                    400,
                    INVALID_REQUEST,
                    "invalid request: two requests of the batch share an id "
                    "(numbers are compared as numbers)",
                )
            seen.add(key)
    return Body(messages, batch)


def _refuse_control_in_names(document: Any) -> None:
    """Refuse a body holding a member name with NUL or another C0 control character, anywhere.

    Readers differ on such a name: a C parser (cJSON and its kind) ends a name at its NUL, so
    ``"requestState\\u0000"`` is ``requestState`` to it and a stranger to the proxy. No MCP
    message needs one; a body that has one is refused whole (400), never forwarded.
    """
    stack = [document]
    while stack:
        item = stack.pop()
        if type(item) is dict:
            for name, member in item.items():
                if _C0.search(name) is not None:
                    raise Refusal(
                        400,
                        INVALID_REQUEST,
                        "invalid request: a member name holds a control character",
                        "control_in_name",
                    )
                if type(member) is dict or type(member) is list:
                    stack.append(member)
        elif type(item) is list:
            stack.extend(member for member in item if type(member) in (dict, list))


def _check_message(message: Any) -> None:
    if type(message) is not dict:
        raise Refusal(400, INVALID_REQUEST, "invalid request: a message is not a JSON object")
    odd = ambiguous_member(message, "message")
    if odd is not None:
        raise Refusal(400, INVALID_REQUEST, f"invalid request: a message has a member {odd!r}")
    if message.get("jsonrpc") != "2.0":
        raise Refusal(400, INVALID_REQUEST, 'invalid request: jsonrpc must be "2.0"')
    if "method" in message:
        _check_request(message)
        return
    # a response to a request of the server (the client answering it)
    if "id" not in message or ("result" in message) == ("error" in message):
        raise Refusal(
            400, INVALID_REQUEST, "invalid request: a message is neither a request nor a response"
        )
    if message["id"] is not None:
        id_key(message["id"])


def _check_request(message: dict[str, Any]) -> None:
    method = message["method"]
    if type(method) is not str or not method:
        raise Refusal(400, INVALID_REQUEST, "invalid request: method must be a non-empty string")
    if "result" in message or "error" in message:
        raise Refusal(400, INVALID_REQUEST, "invalid request: a request carries a result or error")
    if "id" in message:
        id_key(message["id"])
    params = message.get("params")
    if params is None and "params" in message:
        raise Refusal(400, INVALID_REQUEST, "invalid request: params must be an object or array")
    if type(params) is dict:
        odd = ambiguous_member(params, "params")
        if odd is not None:
            raise Refusal(400, INVALID_REQUEST, f"invalid request: params has a member {odd!r}")
        if "requestState" in params and "id" not in message:
            raise Refusal(
                400,
                INVALID_REQUEST,
                "invalid request: a notification carries requestState (it cannot be verified "
                "against a request or answered)",
            )
    elif params is not None and (type(params) is not list or method in INPUT_REQUIRED_METHODS):
        raise Refusal(
            400,
            INVALID_REQUEST,
            f"invalid request: params of {method} must be an object"
            if method in INPUT_REQUIRED_METHODS
            else "invalid request: params must be an object or array",
        )


# --- routing headers ---------------------------------------------------------------------------

#: MCP's routing headers: intermediaries route on them, so they must say what the body says.
_ROUTING = (b"mcp-protocol-version", b"mcp-method", b"mcp-name")
_NAMED = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}


def check_routing_headers(headers: list[tuple[bytes, bytes]], body: Body) -> None:
    """Refuse a request whose MCP routing headers disagree with its body, or appear twice.

    A load balancer, a gateway or the server itself may route on ``Mcp-Method`` and ``Mcp-Name``
    (MCP 2026-07-28) while the proxy binds states to the body's method and target. The two are
    held to one value, as the spec requires of servers; a header given twice (one reader takes
    the first, another the last) is refused. ``Mcp-Param-*`` headers, which mirror arguments,
    must appear once each too.
    """
    seen: dict[bytes, bytes] = {}
    for name, value in headers:
        if name in _ROUTING or name.startswith(b"mcp-param-"):
            if name in seen:
                raise Refusal(
                    400, HEADER_MISMATCH, f"header mismatch: {name.decode('latin-1')} appears twice"
                )
            seen[name] = value
    method_header, name_header = seen.get(b"mcp-method"), seen.get(b"mcp-name")
    if method_header is None and name_header is None:
        return
    requests = [m for m in body.messages if "method" in m]
    if body.batch or len(requests) != 1:
        raise Refusal(400, HEADER_MISMATCH, "header mismatch: routing headers on a batch")
    (message,) = requests
    method = message["method"]
    if method_header is not None and method_header.decode("latin-1") != method:
        raise Refusal(400, HEADER_MISMATCH, "header mismatch: Mcp-Method is not the body's method")
    member = _NAMED.get(method)
    if name_header is not None:
        params = message.get("params")
        named = params.get(member) if member is not None and type(params) is dict else None
        if named is None or _header_text(name_header) != named:
            raise Refusal(
                400, HEADER_MISMATCH, "header mismatch: Mcp-Name is not the body's name or uri"
            )


def _header_text(value: bytes) -> str | None:
    """A routing header's text: as sent, or the UTF-8 inside MCP's ``=?base64?...?=`` form
    (None when that form is malformed, so that it matches nothing)."""
    if value.startswith(b"=?base64?") and value.endswith(b"?=") and len(value) >= 11:
        payload = value[9:-2]
        try:
            decoded = base64.b64decode(payload, validate=True)
        except binascii.Error:
            return None
        if base64.b64encode(decoded) != payload:  # one spelling only
            return None
        try:
            return decoded.decode("utf-8")
        except UnicodeDecodeError:
            return None
    return value.decode("latin-1")
