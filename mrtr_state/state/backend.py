"""The state contract: seal a state under a :class:`~mrtr_state.Binding` into what the client
carries, and open what the client sends back under a binding, or refuse.

Every user of requestState protection needs exactly these two operations: the proxy, the SDK
codec, the CLI. Each is handed a backend when it is made and never asks which one it has, so a
third backend (a database, a KMS-wrapped record) is a new class here and nothing else:

* :class:`~mrtr_state.state.tokens.TokenBackend`: the state travels in a token sealed under a
  keyset (``aead`` by default), optionally redeemed once in a replay store;
* :class:`~mrtr_state.state.handles.HandleBackend`: the state stays in a store and the client
  carries a handle to it, taken once.

Two faces, one implementation. The proxy awaits :meth:`StateBackend.seal` and
:meth:`StateBackend.open` on its event loop, where nothing may wait on a store; the Python SDK's
codec and the CLI are synchronous and call :meth:`StateBackend.seal_sync` and
:meth:`StateBackend.open_sync`. A backend writes each operation once, as a coroutine that
awaits its store through the one function it is handed: the store's asyncio face for the async
call, or its blocking face wrapped by :func:`blocking` for the sync call. A coroutine whose
every await completes at once never suspends, and :func:`finish` runs it to its end without an
event loop: the sync face is the same code, not a copy of it.

Refusals are the library's errors: a subclass of :class:`~mrtr_state.InvalidToken` naming why
(malformed, expired, principal mismatch, replayed...), or the store's
:class:`~mrtr_state.ReplayStoreError` / :class:`~mrtr_state.StateStoreError` when it cannot be
used (fail closed: never an accepted state).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, TypeVar

if TYPE_CHECKING:
    from ..binding import Binding
    from ..claims import Claims

__all__ = [
    "Opened",
    "Sealed",
    "StateBackend",
    "StoreWaits",
    "blocking",
    "finish",
    "store_waits",
    "waited",
]

T = TypeVar("T")


class Sealed(NamedTuple):
    """A sealed state: ``carried``, the text the client gets as its requestState, and ``ref``,
    what names it in logs (the key id of a token, the record reference of a handle; never the
    text itself)."""

    carried: str
    ref: str | None


class Opened(NamedTuple):
    """An opened state: the ``state`` sealed, ``ref`` as for :class:`Sealed`, and the token's
    ``claims`` when a token carried it (None for a handle)."""

    state: Any
    ref: str | None
    claims: Claims | None = None


class StateBackend(Protocol):
    """What the proxy, the SDK codec and the CLI are handed."""

    #: What clients carry, for logs and metrics: a token format (``aead``...) or ``handle``.
    name: str
    #: The name a log line gives :attr:`Sealed.ref` (``kid``, ``ref``).
    ref_name: str

    async def seal(self, state: Any, binding: Binding) -> Sealed:
        """``state`` sealed under ``binding``; ``ValueError`` for a state it cannot seal (too
        large, not text where text is required)."""
        ...

    async def open(self, carried: str, binding: Binding) -> Opened:
        """The state ``carried`` holds, if it was sealed under ``binding`` and is still good;
        else the library's error naming why."""
        ...

    def seal_sync(self, state: Any, binding: Binding) -> Sealed:
        """:meth:`seal` for a blocking caller."""
        ...

    def open_sync(self, carried: str, binding: Binding) -> Opened:
        """:meth:`open` for a blocking caller."""
        ...

    async def aprobe(self) -> str | None:
        """Why the backend cannot be used now (readiness), or None."""
        ...

    async def aclose(self) -> None: ...


def blocking(function: Callable[..., T]) -> Callable[..., Awaitable[T]]:
    """A store's blocking operation as an awaitable that completes at once: what a backend's
    sync face hands its one implementation."""

    async def now(*args: Any, **kwargs: Any) -> T:
        return function(*args, **kwargs)

    return now


def finish(operation: Coroutine[Any, Any, T]) -> T:
    """Run ``operation`` to its result without an event loop. It must never suspend: every
    await in it is of a :func:`blocking` function (or of nothing at all)."""
    try:
        operation.send(None)
    except StopIteration as done:
        result: T = done.value
        return result
    operation.close()
    raise RuntimeError("a state backend's sync face was handed a store operation that waits")


class StoreWaits:
    """How many times, and how long in all, one task waited on a store since it started
    counting (:func:`store_waits`): the proxy tells its own work from its stores' round trips."""

    __slots__ = ("count", "seconds")

    def __init__(self) -> None:
        self.count = 0
        self.seconds = 0.0

    def total(self) -> float:
        return self.seconds


_WAITS: ContextVar[StoreWaits | None] = ContextVar("mrtr_state_store_waits", default=None)


def store_waits() -> StoreWaits:
    """Count, from now on, the current task's waits on stores (a fresh count)."""
    waits = StoreWaits()
    _WAITS.set(waits)
    return waits


def waited(seconds: float) -> None:
    """A store operation of the current task took ``seconds`` (a store's asyncio face says so
    when its operation ends, failed or not)."""
    waits = _WAITS.get()
    if waits is not None:
        waits.count += 1
        waits.seconds += seconds
