"""The official Python SDK's ``RequestStateCodec``, over any state backend.

The SDK (``mcp`` 2.x) seals its own requestState envelope and checks it on the retry (expiry,
request, audience, principal); a codec only seals and opens the envelope's bytes. :class:`
StateCodec` does that with a :mod:`mrtr_state.state` backend it is handed, and never asks which:

* :class:`KeysetCodec` is a ``StateCodec`` over tokens: the envelope sealed under a mrtr-state
  keyset (key ids, staged rotation, a file every replica shares and follows, a choice of
  confidential formats), ``mcp-py`` as the SDK's own codec seals it;
* :class:`HandleCodec` is one over handles: the envelope filed in a store (Redis), the client
  given a handle; no key to leak or rotate, and each handle opens once.

The SDK's codec interface is synchronous, so the codec calls the backends' blocking faces (a
Redis store's runs on the package's own event loop, never the SDK server's). Nothing here
imports the SDK at module level: the codec imports the SDK's error class only when it has to
raise it, and its middleware the SDK's error only when a token is replayed.
"""

from __future__ import annotations

import contextvars
import json
import logging
import math
import os
import time
from typing import TYPE_CHECKING, Any

from ..errors import InvalidToken, ReplayStoreError, StateStoreError
from ..keys.keyset import Keyset
from ..state.handle_store import open_handle_store
from ..state.handles import HandleBackend
from ..state.records import DEFAULT_MAX_STATE
from ..state.replay import ReplayStore, token_key
from ..state.tokens import TokenBackend
from ..tokens.binding import Binding
from ..tokens.policy import DEFAULT_FORMAT, DEFAULT_POLICY, Policy
from ..tokens.registry import format_named
from .mcp import wire_error

if TYPE_CHECKING:
    from ..state.backend import StateBackend

__all__ = ["HandleCodec", "KeysetCodec", "ReplayGuard", "StateCodec"]

_log = logging.getLogger("mrtr_state")
#: The SDK binds its envelope itself: the backend is asked to bind nothing of its own.
_UNBOUND = Binding()
#: How long a state is kept when its envelope names no expiry (the SDK's always does).
FALLBACK_TTL = 3600.0


class StateCodec:
    """``StateCodec(backend)``: the SDK's ``RequestStateCodec`` protocol over ``backend``, a
    state backend made ``raw`` (its states are the SDK's envelope bytes). Each state lives as
    long as its envelope says (its ``exp``).

    With ``once``, each state is accepted at most once until its envelope expires. A state is
    redeemed only after the SDK has checked every binding, by the middleware
    :meth:`replay_guard` returns (``MCPServer(..., middleware=[codec.replay_guard()])``): were
    it redeemed in :meth:`unseal`, another principal's refused attempt would burn the rightful
    retry. Without that middleware every retry is refused (fail closed). (A handle backend is
    single use by itself.)
    """

    def __init__(self, backend: StateBackend, *, once: ReplayStore | None = None) -> None:
        self._backend = backend
        self._once = once
        self._guarded = False
        # (store key, expiry, inner state) of the state this request's unseal opened; the guard
        # middleware runs in the same task once the SDK has accepted the round.
        self._opened: contextvars.ContextVar[tuple[str, float, Any] | None] = (
            contextvars.ContextVar(f"mrtr_state_opened_{id(self)}", default=None)
        )

    @property
    def backend(self) -> StateBackend:
        """The state backend the codec seals with."""
        return self._backend

    def seal(self, payload: bytes) -> str:
        now = time.time()
        ttl = _envelope_expiry(payload, now) - now
        return self._backend.seal_sync(payload, _UNBOUND, ttl=ttl).carried

    def unseal(self, token: str) -> bytes:
        from mcp.server.request_state import InvalidRequestState

        if self._once is not None and not self._guarded:
            _log.warning("requestState refused: once= needs middleware=[codec.replay_guard()]")
            raise InvalidRequestState("replay guard not installed")
        try:
            payload: bytes = self._backend.open_sync(token, _UNBOUND).state
        except (InvalidToken, StateStoreError, ReplayStoreError) as err:
            _log.warning("requestState refused: %s (%s)", err.code, err)
            raise InvalidRequestState(err.code) from None
        if self._once is not None:
            self._opened.set((token_key(None, token), _envelope_expiry(payload), _inner(payload)))
        return payload

    def replay_guard(self) -> ReplayGuard:
        """The SDK middleware that redeems a state once the SDK accepted its round (see above)."""
        if self._once is None:
            raise ValueError("replay_guard() is for a codec made with once=")
        self._guarded = True
        return ReplayGuard(self._once, self._opened)


class KeysetCodec(StateCodec):
    """``KeysetCodec(keyset)``: the SDK's codec over tokens of ``format`` (``aead``; ``jwe`` or
    ``mcp-py``, the SDK's own layout) under a mrtr-state keyset.

    Given a path (or a keyset from :meth:`Keyset.load`), the keyset follows its file, so a key
    rolled out, promoted or revoked (``mrtr-state keys ...``, a Kubernetes Secret update) takes
    effect on a running server within a second, without a restart, and in-flight tokens of the
    previous primary still open. An encrypted keyset file opens with ``kek`` (a URI, e.g.
    ``os.environ["MRTR_STATE_KEK"]``), unwrapped once. ``once``: see :class:`StateCodec`.
    """

    def __init__(
        self,
        keyset: Keyset | str | os.PathLike[str],
        *,
        format: str = DEFAULT_FORMAT,
        once: ReplayStore | None = None,
        policy: Policy = DEFAULT_POLICY,
        kek: str | None = None,
    ) -> None:
        if not format_named(format).confidential:
            raise ValueError(
                f"{format} is readable by clients; the codec needs aead, jwe or mcp-py"
            )
        loaded = keyset if isinstance(keyset, Keyset) else Keyset.load(keyset, kek=kek)
        backend = TokenBackend(loaded, format=format, policy=policy, raw=True)
        super().__init__(backend, once=once)
        self._keyset = loaded

    @property
    def keyset(self) -> Keyset:
        """The keyset in use; a loaded one follows its file (see :meth:`Keyset.load`)."""
        return self._keyset


class HandleCodec(StateCodec):
    """``HandleCodec(store)``: the SDK's codec over handles, ``store`` a URL (``redis://``,
    ``redis+cluster://``, ``redis+sentinel://``, ``unix://``, ``memory:``) or a store of
    :mod:`mrtr_state.state.handle_store`. ``max_state`` caps an envelope's size;
    ``max_skew`` is how long past its expiry a record is kept, so that no replica's clock
    within the bound finds it gone early.

    What it cannot do: bind the record to the principal and request. The SDK hands it bytes, and
    checks the envelope only after the codec has opened it, so the record is taken on its first
    presentation, by whoever presents it. Someone who has stolen a handle can spend it, never
    use it (the SDK then refuses the envelope). The proxy, which sees the request, binds its
    records.
    """

    def __init__(
        self,
        store: Any,
        *,
        max_state: int = DEFAULT_MAX_STATE,
        max_skew: float = 300.0,
    ) -> None:
        opened = open_handle_store(store, max_skew=max_skew) if isinstance(store, str) else store
        backend = HandleBackend(opened, max_state=max_state, max_skew=max_skew, raw=True)
        super().__init__(backend)
        self._store = opened

    @property
    def store(self) -> Any:
        """The store records are filed in (``probe()`` says whether it can be used now)."""
        return self._store


class ReplayGuard:
    """SDK server middleware: redeem the opened requestState, after every SDK check passed.

    It runs inside the SDK's request-state boundary, so it is reached only by rounds whose state
    the boundary accepted; a second presentation of the same state is refused with the SDK's
    own uniform error and logged as ``replayed``.
    """

    def __init__(
        self,
        store: ReplayStore,
        opened: contextvars.ContextVar[tuple[str, float, Any] | None],
    ) -> None:
        self._store = store
        self._opened = opened

    async def __call__(self, ctx: Any, call_next: Any) -> Any:
        pending = self._opened.get()
        if pending is not None:
            self._opened.set(None)
            key, expires, inner = pending
            params = getattr(ctx, "params", None) or {}
            accepted = params.get("requestState") == inner  # the round the boundary accepted
            # awaited: the SDK's server runs this on its event loop, which a store must not stall
            if accepted and not await self._store.aredeem(key, expires, now=time.time()):
                from mcp.shared.exceptions import MCPError

                _log.warning("requestState rejected on %s: replayed", ctx.method)
                raise MCPError(**wire_error())
        return await call_next(ctx)


def _inner(payload: bytes) -> Any:
    """The server's own state inside an SDK envelope (what the boundary hands on)."""
    try:
        return json.loads(payload).get("s")
    except (ValueError, AttributeError):
        return None


def _envelope_expiry(payload: bytes, now: float | None = None) -> float:
    """The SDK envelope's ``exp``, or an hour from now if it names none or cannot be read (fail
    towards keeping a record or a replay entry until the envelope is surely dead, never towards
    forgetting it early)."""
    moment = time.time() if now is None else now
    try:
        exp = json.loads(payload).get("exp")
    except (ValueError, AttributeError):
        exp = None
    if (
        isinstance(exp, int | float)
        and not isinstance(exp, bool)
        and math.isfinite(exp)
        and exp > moment
    ):
        return float(exp)
    return moment + FALLBACK_TTL
