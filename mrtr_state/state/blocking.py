"""Two bridges between blocking and asyncio code, so that each store is written once.

* :func:`run_blocking`: a blocking caller (the CLI, the Python SDK's synchronous codec) runs one
  operation of an asyncio store (the Redis stores, written once over the package's asyncio
  client) on an event loop of the package's own, on a daemon thread, and waits for it at most
  ``timeout`` seconds. That loop is not the caller's: a caller inside a running loop (the SDK's
  server calls its codec there) blocks only its own thread, never a loop it would need.
* :func:`off_loop`: an asyncio caller (the proxy) runs one operation of a blocking store (SQLite)
  on a small pool of threads, waiting at most ``timeout`` seconds, so that a locked file slows
  the requests that need it and nothing else on the event loop.

A timed-out operation may still complete later on its thread (a thread cannot be stopped): its
caller has already failed closed, so at worst a token is recorded that its client was told to
retry, and that retry is refused as a replay (never the reverse).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["BLOCKING_THREADS", "off_loop", "run_blocking"]

T = TypeVar("T")

#: Threads for blocking store operations awaited by the proxy (each holds a SQLite connection).
BLOCKING_THREADS = 4

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None
_pool: concurrent.futures.ThreadPoolExecutor | None = None


def _forget_after_fork() -> None:  # a child has neither the thread nor the pool's workers
    global _loop, _pool
    _loop = None
    _pool = None


os.register_at_fork(after_in_child=_forget_after_fork)


def _io_loop() -> asyncio.AbstractEventLoop:
    global _loop
    with _lock:
        if _loop is None:
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name="mrtr-state-io", daemon=True)
            thread.start()
            _loop = loop
        return _loop


def run_blocking(operation: Coroutine[Any, Any, T], timeout: float) -> T:
    """The result of ``operation`` (a coroutine of an asyncio store), run on the package's own
    loop; ``TimeoutError`` after ``timeout`` seconds (the operation is then cancelled)."""
    loop = _io_loop()
    future = asyncio.run_coroutine_threadsafe(operation, loop)
    try:
        return future.result(timeout)
    except concurrent.futures.TimeoutError:
        future.cancel()
        raise TimeoutError(f"no answer within {timeout:g} s") from None


def call_soon_on_io_loop(callback: Callable[[], Any]) -> None:
    """Run ``callback`` on the package's own loop, if it was started (closing what lives there)."""
    with _lock:
        loop = _loop
    if loop is not None and not loop.is_closed():
        loop.call_soon_threadsafe(callback)


async def off_loop(function: Callable[[], T], timeout: float) -> T:
    """``function()`` run on the blocking pool, awaited at most ``timeout`` seconds
    (``TimeoutError`` then)."""
    global _pool
    with _lock:
        if _pool is None:
            _pool = concurrent.futures.ThreadPoolExecutor(
                BLOCKING_THREADS, thread_name_prefix="mrtr-state-blocking"
            )
        pool = _pool
    running = asyncio.get_running_loop().run_in_executor(pool, function)
    try:
        return await asyncio.wait_for(running, timeout)
    except TimeoutError:
        raise TimeoutError(f"no answer within {timeout:g} s") from None
