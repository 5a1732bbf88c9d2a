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
:meth:`StateBackend.open_sync`. A backend writes each operation once, as the coroutine of its
async face, which awaits its store's asyncio face by default; the sync face calls that same
coroutine with the store's blocking face instead (wrapped by :func:`blocking`). A coroutine whose
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
    from ..tokens.binding import Binding
    from ..tokens.claims import Claims

__all__ = [
    "Opened",
    "Sealed",
    "StateBackend",
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

    async def seal(self, state: Any, binding: Binding, *, ttl: float | None = None) -> Sealed:
        """``state`` sealed under ``binding``, for ``ttl`` seconds (None: the backend's own
        lifetime); ``ValueError`` for a state it cannot seal (too large, not of the kind it
        keeps)."""
        ...

    async def open(self, carried: str, binding: Binding) -> Opened:
        """The state ``carried`` holds, if it was sealed under ``binding`` and is still good;
        else the library's error naming why."""
        ...

    def seal_sync(self, state: Any, binding: Binding, *, ttl: float | None = None) -> Sealed:
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


_WAITED: ContextVar[list[float] | None] = ContextVar("mrtr_state_store_waits", default=None)


def waited(seconds: float) -> None:
    """A store operation of the current task took ``seconds`` (a store's asyncio face says so
    when its operation ends, failed or not). Kept in the task's context, made on its first wait:
    a task that never waits on a store pays nothing for the count."""
    total = _WAITED.get()
    if total is None:
        _WAITED.set([seconds])
    else:
        total[0] += seconds


def store_waits() -> float:
    """How long the current task has waited on stores so far (seconds): the proxy takes it
    before and after a piece of work, to tell its own work from its stores' round trips."""
    total = _WAITED.get()
    return 0.0 if total is None else total[0]
