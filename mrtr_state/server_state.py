"""State kept server-side, as a library: verify and inspect a handle, and the SDK's codec.

:func:`verify_handle` and :func:`inspect_handle` are to handles what :func:`mrtr_state.verify`
and :func:`mrtr_state.inspect` are to tokens (the CLI's ``verify`` and ``inspect`` call them for
``mh1.`` text when given ``--state-store``); :class:`HandleCodec` is the Python SDK's
``RequestStateCodec`` protocol with the state kept server-side.

``RequestStateSecurity(codec=HandleCodec("redis://10.0.0.7:6379/0"))`` is the whole change to a
server: the SDK keeps stamping and checking its envelope (expiry, request, principal, audience),
and the codec files that envelope in the store and gives the client a handle
(:mod:`mrtr_state.handles`) instead of a token. No key exists to leak or rotate; the state never
leaves the server side; a handle opens once.

What the codec cannot do: bind the record to the principal and request. The SDK hands it bytes,
and checks the envelope only after the codec has opened it, so the record is taken on its first
presentation, by whoever presents it. Someone who has stolen a handle can spend it, never use it
(the SDK then refuses the envelope). The proxy, which sees the request, binds its records.

Both methods are synchronous (the SDK's protocol): each is one command to the store, on the
calling thread.
"""

from __future__ import annotations

import json
import logging
import math
import time
from typing import Any

from ._encoding import EncodingError, b64url_decode, b64url_encode
from .binding import binding_of
from .claims import Claims
from .errors import InvalidToken, StateStoreError, UnknownHandle
from .handle_store import open_handle_store
from .handles import (
    DEFAULT_MAX_STATE,
    decode_record,
    encode_record,
    lock_matches,
    lock_of,
    new_handle,
    read_handle,
    redeem,
)

__all__ = ["HandleCodec", "inspect_handle", "verify_handle"]

_log = logging.getLogger("mrtr_state")
_UNBOUND = binding_of()
#: How long a record is kept when its envelope names no expiry (the SDK's always does).
FALLBACK_TTL = 3600.0


class HandleCodec:
    """``HandleCodec(store)``: ``store`` a URL (``redis://``, ``redis+cluster://``,
    ``redis+sentinel://``, ``memory:``) or a store of :mod:`mrtr_state.handle_store`.
    ``max_state`` caps an envelope's size; ``max_skew`` is how long past its expiry a record
    is kept, so that no replica's clock within the bound finds it gone early."""

    def __init__(
        self,
        store: Any,
        *,
        max_state: int = DEFAULT_MAX_STATE,
        max_skew: float = 300.0,
    ) -> None:
        self._store = (
            open_handle_store(store, max_skew=max_skew) if isinstance(store, str) else store
        )
        self._max_state = max_state
        self._max_skew = max_skew

    @property
    def store(self) -> Any:
        """The store records are filed in (``probe()`` says whether it can be used now)."""
        return self._store

    def seal(self, payload: bytes) -> str:
        if len(payload) > self._max_state:
            raise ValueError(
                f"the state is {len(payload)} bytes, over the store's {self._max_state}"
            )
        now = time.time()
        ttl = _envelope_expiry(payload, now) - now
        handle = new_handle()
        value = encode_record(handle, b64url_encode(payload), _UNBOUND, now=now, ttl=ttl)
        self._store.put(handle.key, value, now + ttl + self._max_skew)
        return handle.text

    def unseal(self, token: str) -> bytes:
        from mcp.server.request_state import InvalidRequestState

        try:
            handle = read_handle(token)
            found = self._store.take(handle.key, lock_of(handle, _UNBOUND))
            if found is None:
                raise UnknownHandle("unknown handle: never issued, already used, or expired")
            record = redeem(handle, found.value, found.handed, _UNBOUND, now=time.time())
            return b64url_decode(record.state)
        except (InvalidToken, StateStoreError) as err:
            _log.warning("requestState refused: %s (%s)", err.code, err)
            raise InvalidRequestState(err.code) from None
        except EncodingError:
            _log.warning("requestState refused: the stored record's state is not base64url")
            raise InvalidRequestState("invalid_claims") from None


def verify_handle(
    store: Any,
    handle: str,
    *,
    principal: str | None = None,
    audience: str | None = None,
    request_id: str | None = None,
    method: str | None = None,
    target: str | None = None,
    arguments: Any = None,
    once: bool = False,
    now: float | None = None,
) -> Claims:
    """The claims of ``handle``'s record, checked as a retry stating these bindings would be:
    the same run of checks as the proxy's (:func:`mrtr_state.handles.redeem`). The record is only
    read, unless ``once``: then it is taken, as the retry takes it (it opens no second time).

    Raises the :class:`~mrtr_state.errors.InvalidToken` subclass that names the refusal, or
    :class:`~mrtr_state.errors.StateStoreError`. ``claims.state`` is the stored state (text);
    ``claims.sub`` is None (a handle's principal is shown only as a digest, as ``inspect`` does).
    """
    binding = binding_of(
        principal=principal,
        request_id=request_id,
        audience=audience,
        method=method,
        target=target,
        arguments=arguments,
    )
    opened = read_handle(handle)
    key, lock = opened.key, lock_of(opened, binding)
    if once:
        found = store.take(key, lock)
        value, handed = (None, False) if found is None else (found.value, found.handed)
    else:
        value = store.peek(key)
        handed = value is not None and lock_matches(value, lock)
    if value is None:
        raise UnknownHandle("unknown handle: never issued, already used, or expired")
    record = redeem(opened, value, handed, binding, now=time.time() if now is None else now)
    return Claims(record.state, record.iat, record.exp, None, None, record.aud, record.rid)


def inspect_handle(
    store: Any, handle: str, *, show_state: bool = False, now: float | None = None
) -> dict[str, Any]:
    """What the store holds for ``handle``, unverified (no binding is checked and nothing is
    taken): the record's owner digest, audience, request fingerprint and times, and its state
    only with ``show_state``. ``found`` is False for a handle the store does not hold."""
    opened = read_handle(handle)
    value = store.peek(opened.key)
    report: dict[str, Any] = {"format": "handle", "ref": opened.ref, "found": value is not None}
    if value is None:
        return report
    record = decode_record(opened, value)
    moment = time.time() if now is None else now
    report.update(record.to_dict(opened))
    report["expired"] = not moment <= record.exp
    if show_state:
        report["state"] = record.state
    return report


def _envelope_expiry(payload: bytes, now: float) -> float:
    """The SDK envelope's ``exp``, or an hour from now if it names none (fail towards keeping
    the record until the envelope is surely dead, never towards forgetting it early)."""
    try:
        exp = json.loads(payload).get("exp")
    except (ValueError, AttributeError):
        exp = None
    if (
        isinstance(exp, int | float)
        and not isinstance(exp, bool)
        and math.isfinite(exp)
        and exp > now
    ):
        return float(exp)
    return now + FALLBACK_TTL
