"""Handles as a state backend: the state stays in a store, the client carries a handle to it.

Sealing files a record (:func:`mrtr_state.handles.encode_record`: the state sealed under the
handle's own key, with the binding and expiry) and only then gives the handle out, so no handle
ever names a record the store did not accept. Opening takes the record out of the store for the
retry's lock (the handle's id and the retry's binding), then runs the one accepting path of a
record (:func:`mrtr_state.handles.redeem`). A record is handed over once: handles are single use
by construction.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ..errors import UnknownHandle
from ..handles import DEFAULT_MAX_STATE, encode_record, lock_of, new_handle, read_handle, redeem
from ..policy import DEFAULT_POLICY, Policy
from .backend import Opened, Sealed, blocking, finish

if TYPE_CHECKING:
    from ..binding import Binding
    from ..handle_store import Taken

__all__ = ["HandleBackend"]

Put = Callable[[str, bytes, float], Awaitable[None]]
Take = Callable[[str, str], Awaitable["Taken | None"]]


class HandleBackend:
    """``HandleBackend(store)``: states kept in ``store`` (:mod:`mrtr_state.handle_store`) for
    ``ttl`` seconds (the policy's by default), at most ``max_state`` bytes each; a record stays
    ``max_skew`` seconds past its expiry, so that no replica's clock within that bound finds it
    gone early. ``clock`` gives the time (tests pass their own)."""

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
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.ttl = policy.ttl if ttl is None else ttl
        self.max_state = max_state
        self.max_skew = max_skew
        self.clock = clock

    async def seal(self, state: Any, binding: Binding, put: Put | None = None) -> Sealed:
        """The async face (``put``: the store's, by default its asyncio face; the sync face
        hands its blocking one, and runs this same coroutine)."""
        if type(state) is not str:
            raise ValueError(f"a handle's record keeps text, not {type(state).__name__}")
        size = len(state.encode("utf-8", "surrogatepass"))
        if size > self.max_state:
            raise ValueError(f"the state is {size} bytes, over the store's {self.max_state}")
        handle = new_handle()
        now = self.clock()
        value = encode_record(handle, state, binding, now=now, ttl=self.ttl)
        await (put or self.store.aput)(handle.key, value, now + self.ttl + self.max_skew)
        return Sealed(handle.text, handle.ref)  # the ref names the record in logs, never it

    def seal_sync(self, state: Any, binding: Binding) -> Sealed:
        return finish(self.seal(state, binding, blocking(self.store.put)))

    async def open(self, carried: str, binding: Binding, take: Take | None = None) -> Opened:
        """The async face (``take`` as ``put`` for :meth:`seal`)."""
        handle = read_handle(carried)
        found = await (take or self.store.atake)(handle.key, lock_of(handle, binding))
        if found is None:
            raise UnknownHandle("unknown handle: never issued, already used, or expired")
        record = redeem(handle, found.value, found.handed, binding, now=self.clock())
        return Opened(record.state, handle.ref)

    def open_sync(self, carried: str, binding: Binding) -> Opened:
        return finish(self.open(carried, binding, blocking(self.store.take)))

    async def aprobe(self) -> str | None:
        problem: str | None = await self.store.aprobe()
        return None if problem is None else f"state store: {problem}"

    async def aclose(self) -> None:
        await self.store.aclose()
