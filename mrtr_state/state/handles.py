"""Handles as a state backend: the state stays in a store, the client carries a handle to it.

Sealing files a record (:func:`mrtr_state.state.records.encode_record`: the state sealed under
the handle's own key, with the binding and expiry) and only then gives the handle out, so no
handle ever names a record the store did not accept. Opening takes the record out of the store
for the retry's lock (the handle's id and the retry's binding), then runs the one accepting path
of a record (:func:`mrtr_state.state.records.redeem`). A record is handed over once: handles are
single use by construction.

:func:`verify_handle` and :func:`inspect_handle` are to handles what :func:`mrtr_state.verify`
and :func:`mrtr_state.inspect` are to tokens (the CLI's ``verify`` and ``inspect`` call them
for ``mh1.`` text given ``--state-store``): the same checks, a record read rather than taken
unless asked.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from .._encoding import EncodingError, b64url_decode, b64url_encode
from ..errors import InvalidClaims, UnknownHandle
from ..tokens.binding import Binding, stated
from ..tokens.claims import Claims, new_claims
from ..tokens.policy import DEFAULT_POLICY, Policy
from .backend import Opened, Sealed, blocking, finish
from .records import (
    DEFAULT_MAX_STATE,
    decode_record,
    encode_record,
    lock_matches,
    lock_of,
    new_handle,
    read_handle,
    redeem,
)

if TYPE_CHECKING:
    from .handle_store import Taken

__all__ = ["HandleBackend", "inspect_handle", "verify_handle"]

Put = Callable[[str, bytes, float], Awaitable[None]]
Take = Callable[[str, str], Awaitable["Taken | None"]]


class HandleBackend:
    """``HandleBackend(store)``: states kept in ``store`` (:mod:`mrtr_state.state.handle_store`)
    for ``ttl`` seconds (the policy's by default), at most ``max_state`` bytes each; a record
    stays ``max_skew`` seconds past its expiry, so that no replica's clock within that bound
    finds it gone early. States are text; with ``raw``, bytes (an SDK's own envelope, kept as
    base64url text). ``clock`` gives the time (tests pass their own)."""

    name = "handle"
    #: what names a sealed state in a log line: its record's reference (never the handle)
    ref_name = "ref"

    def __init__(
        self,
        store: Any,
        *,
        ttl: int | None = None,
        policy: Policy = DEFAULT_POLICY,
        max_state: int = DEFAULT_MAX_STATE,
        max_skew: float = 300.0,
        raw: bool = False,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.ttl = policy.ttl if ttl is None else ttl
        self.max_state = max_state
        self.max_skew = max_skew
        self.raw = raw
        self.clock = clock

    async def seal(
        self, state: Any, binding: Binding, *, ttl: float | None = None, put: Put | None = None
    ) -> Sealed:
        """The async face (``ttl``: this state's lifetime, else the backend's; ``put``: the
        store's, by default its asyncio face: the sync face hands its blocking one and runs
        this same coroutine)."""
        if self.raw:
            if not isinstance(state, bytes):
                raise ValueError(f"this backend keeps bytes, not {type(state).__name__}")
            size = len(state)
            state = b64url_encode(state)
        elif type(state) is str:
            size = len(state.encode("utf-8", "surrogatepass"))
        else:
            raise ValueError(f"a handle's record keeps text, not {type(state).__name__}")
        if size > self.max_state:
            raise ValueError(f"the state is {size} bytes, over the store's {self.max_state}")
        lifetime = self.ttl if ttl is None else ttl
        handle = new_handle()
        now = self.clock()
        value = encode_record(handle, state, binding, now=now, ttl=lifetime)
        await (put or self.store.aput)(handle.key, value, now + lifetime + self.max_skew)
        return Sealed(handle.text, handle.ref)  # the ref names the record in logs, never it

    def seal_sync(self, state: Any, binding: Binding, *, ttl: float | None = None) -> Sealed:
        return finish(self.seal(state, binding, ttl=ttl, put=blocking(self.store.put)))

    async def open(self, carried: str, binding: Binding, *, take: Take | None = None) -> Opened:
        """The async face (``take`` as ``put`` for :meth:`seal`)."""
        handle = read_handle(carried)
        found = await (take or self.store.atake)(handle.key, lock_of(handle, binding))
        if found is None:
            raise UnknownHandle("unknown handle: never issued, already used, or expired")
        record = redeem(handle, found.value, found.handed, binding, now=self.clock())
        if not self.raw:
            return Opened(record.state, handle.ref)
        try:
            return Opened(b64url_decode(record.state), handle.ref)
        except EncodingError:
            raise InvalidClaims("the stored record's state is not base64url") from None

    def open_sync(self, carried: str, binding: Binding) -> Opened:
        return finish(self.open(carried, binding, take=blocking(self.store.take)))

    async def aprobe(self) -> str | None:
        problem: str | None = await self.store.aprobe()
        return None if problem is None else f"state store: {problem}"

    async def aclose(self) -> None:
        await self.store.aclose()


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
    expect: Binding | None = None,
    once: bool = False,
    now: float | None = None,
) -> Claims:
    """The claims of ``handle``'s record, checked as a retry stating these bindings would be
    (the keywords, or ``expect``): the same run of checks as the proxy's
    (:func:`mrtr_state.state.records.redeem`). The record is only read, unless ``once``: then
    it is taken, as the retry takes it (it opens no second time).

    Raises the :class:`~mrtr_state.errors.InvalidToken` subclass that names the refusal, or
    :class:`~mrtr_state.errors.StateStoreError`. ``claims.state`` is the stored state (text);
    ``claims.sub`` is None (a handle's principal is shown only as a digest, as ``inspect`` does).
    """
    binding = stated(expect, principal, request_id, audience, method, target, arguments, None)
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
    return new_claims(
        state=record.state, iat=record.iat, exp=record.exp, aud=record.aud, rid=record.rid
    )


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
