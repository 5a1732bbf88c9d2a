"""Where a requestState lives between two rounds: the backends, their stores, and Redis.

:mod:`~mrtr_state.state.backend` is the contract (seal a state under a binding into what the
client carries; open it again, or refuse), :mod:`~mrtr_state.state.tokens` and
:mod:`~mrtr_state.state.handles` its two implementations, :mod:`~mrtr_state.state.redis` the one
Redis client every store uses, and :mod:`~mrtr_state.state.blocking` the bridges that let each
store and backend be written once for blocking and asyncio callers alike.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .backend import Opened, Sealed, StateBackend
    from .handles import HandleBackend
    from .tokens import TokenBackend

__all__ = ["HandleBackend", "Opened", "Sealed", "StateBackend", "TokenBackend"]

_WHERE = {
    "HandleBackend": "handles",
    "Opened": "backend",
    "Sealed": "backend",
    "StateBackend": "backend",
    "TokenBackend": "tokens",
}


def __getattr__(name: str) -> Any:
    import importlib

    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'mrtr_state.state' has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
