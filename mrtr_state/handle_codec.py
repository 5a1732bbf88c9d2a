"""The Python SDK's ``RequestStateCodec`` protocol, with the state kept server-side.

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
from .errors import InvalidToken, StateStoreError, UnknownHandle
from .handle_store import open_handle_store
from .handles import (
    DEFAULT_MAX_STATE,
    accept,
    decode_record,
    encode_record,
    handle_id,
    lock_of,
    new_handle,
    record_key,
)

__all__ = ["HandleCodec"]

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
        handle, ident = new_handle()
        value = encode_record(ident, b64url_encode(payload), _UNBOUND, now=now, ttl=ttl)
        self._store.put(record_key(ident), value, now + ttl + self._max_skew)
        return handle

    def unseal(self, token: str) -> bytes:
        from mcp.server.request_state import InvalidRequestState

        try:
            ident = handle_id(token)
            found = self._store.take(record_key(ident), lock_of(ident, _UNBOUND))
            if found is None:
                raise UnknownHandle("unknown handle: never issued, already used, or expired")
            state = accept(decode_record(found.value), _UNBOUND, now=time.time())
            return b64url_decode(state)
        except (InvalidToken, StateStoreError) as err:
            _log.warning("requestState refused: %s (%s)", err.code, err)
            raise InvalidRequestState(err.code) from None
        except EncodingError:
            _log.warning("requestState refused: the stored record's state is not base64url")
            raise InvalidRequestState("invalid_claims") from None


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
