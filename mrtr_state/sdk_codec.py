"""``KeysetCodec``: the official Python SDK's ``RequestStateCodec``, backed by a keyset.

The SDK (``mcp`` 2.x) seals its own requestState envelope and checks it on the retry (expiry,
request, audience, principal); a codec only seals and opens the bytes. This one opens them with
a mrtr-state keyset: key ids, staged rotation, a file every replica shares and follows, and a
choice of confidential formats. Nothing here imports the SDK at module level: the codec imports
the SDK's error class only when it has to raise it, and its middleware the SDK's error only
when a token is replayed.
"""

from __future__ import annotations

import contextvars
import logging
import os
import time
from typing import Any

from .errors import InvalidToken
from .keyset import Keyset
from .mcp import wire_error
from .policy import DEFAULT_FORMAT, DEFAULT_POLICY, Policy
from .registry import format_named
from .replay import ReplayStore, token_key
from .tokens import open_envelope, seal_envelope

__all__ = ["KeysetCodec", "ReplayGuard"]

_log = logging.getLogger("mrtr_state")


class KeysetCodec:
    """The Python SDK's ``RequestStateCodec`` protocol, backed by a mrtr-state keyset.

    Pass it as ``RequestStateSecurity(codec=KeysetCodec(...))``: the SDK keeps stamping and
    checking its envelope (expiry, request, audience, principal); the codec adds our keysets, key
    ids, staged rotation and formats. Given a path (or a keyset from :meth:`Keyset.load`), the
    keyset follows its file, so a key rolled out, promoted or revoked (``mrtr-state keys ...``,
    a Kubernetes Secret update) takes effect on a running server within a second, without a
    restart, and in-flight tokens of the previous primary still open. An encrypted keyset file
    opens with ``kek`` (a URI, e.g. ``os.environ["MRTR_STATE_KEK"]``), unwrapped once.

    With ``once``, each token is accepted at most once until its envelope expires. A token is
    redeemed only after the SDK has checked every binding, by the middleware
    :meth:`replay_guard` returns (``MCPServer(..., middleware=[codec.replay_guard()])``): were it
    redeemed in :meth:`unseal`, another principal's refused attempt would burn the rightful
    retry. Without that middleware every retry is refused (fail closed).
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
        self._format = format
        self._once = once
        self._policy = policy
        self._keyset = keyset if isinstance(keyset, Keyset) else Keyset.load(keyset, kek=kek)
        self._guarded = False
        # (store key, expiry, inner state) of the token this request's unseal opened; the guard
        # middleware runs in the same task once the SDK has accepted the round.
        self._opened: contextvars.ContextVar[tuple[str, float, Any] | None] = (
            contextvars.ContextVar(f"mrtr_state_opened_{id(self)}", default=None)
        )

    @property
    def keyset(self) -> Keyset:
        """The keyset in use; a loaded one follows its file (see :meth:`Keyset.load`)."""
        return self._keyset

    def seal(self, payload: bytes) -> str:
        return seal_envelope(self.keyset, payload, format=self._format, policy=self._policy)

    def unseal(self, token: str) -> bytes:
        from mcp.server.request_state import InvalidRequestState

        if self._once is not None and not self._guarded:
            _log.warning("requestState refused: once= needs middleware=[codec.replay_guard()]")
            raise InvalidRequestState("replay guard not installed")
        try:
            _fmt, payload = open_envelope(
                self.keyset, token, format=self._format, policy=self._policy
            )
        except InvalidToken as err:
            raise InvalidRequestState(err.code) from None
        if self._once is not None:
            self._opened.set((token_key(None, token), _envelope_expiry(payload), _inner(payload)))
        return payload

    def replay_guard(self) -> ReplayGuard:
        """The SDK middleware that redeems a token once the SDK accepted its round (see above)."""
        if self._once is None:
            raise ValueError("replay_guard() is for a codec made with once=")
        self._guarded = True
        return ReplayGuard(self._once, self._opened)


class ReplayGuard:
    """SDK server middleware: redeem the opened requestState, after every SDK check passed.

    It runs inside the SDK's request-state boundary, so it is reached only by rounds whose state
    the boundary accepted; a second presentation of the same token is refused with the SDK's own
    uniform error and logged as ``replayed``.
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
    import json

    try:
        return json.loads(payload).get("s")
    except (ValueError, AttributeError):
        return None


def _envelope_expiry(payload: bytes) -> float:
    """The SDK envelope's ``exp``, or an hour from now if it cannot be read (fail towards keeping
    the entry, never towards forgetting it early)."""
    import json

    try:
        exp = json.loads(payload).get("exp")
    except (ValueError, AttributeError):
        exp = None
    return float(exp) if isinstance(exp, int | float) else time.time() + 3600
