"""Tokens as a state backend: the state travels to the client sealed under a keyset.

Sealing mints a token of one format (``aead`` by default: confidential, the smallest) bound to
the :class:`~mrtr_state.Binding`; opening verifies it against the retry's binding with the
facade's one accepting path (:func:`mrtr_state.tokens.facade.verify`), then, with a replay store,
redeems it there last, so a token refused for any other reason is never recorded.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ..tokens.facade import issue, open_envelope, seal_envelope, verify
from ..tokens.policy import DEFAULT_FORMAT, DEFAULT_POLICY, Policy
from .backend import Opened, Sealed, blocking, finish
from .replay import redemption, replayed

if TYPE_CHECKING:
    from ..keys.keyset import Keyset
    from ..tokens.binding import Binding
    from .replay import ReplayStore

__all__ = ["TokenBackend"]

Redeem = Callable[..., Awaitable[bool]]


class TokenBackend:
    """``TokenBackend(keyset, format="aead", replay=None)``: states in tokens of ``format``,
    each minted for ``ttl`` seconds (the policy's by default) and, with ``replay`` (a store
    of :mod:`mrtr_state.state.replay`), accepted once. ``clock`` gives the time (tests pass their
    own)."""

    def __init__(
        self,
        keyset: Keyset,
        *,
        format: str = DEFAULT_FORMAT,
        replay: ReplayStore | None = None,
        policy: Policy = DEFAULT_POLICY,
        ttl: int | None = None,
        raw: bool = False,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.keyset = keyset
        self.raw = raw
        self.name = format
        #: what names a sealed state in a log line: the key id of its token
        self.ref_name = "kid"
        self.replay = replay
        self.policy = policy
        self.ttl = ttl
        self.clock = clock

    async def seal(self, state: Any, binding: Binding, *, ttl: float | None = None) -> Sealed:
        """``ttl``: this state's lifetime in whole seconds, else the backend's (a raw state
        carries its own). No store is touched: the sync face runs this very coroutine."""
        if self.raw:
            if binding.kinds:
                raise ValueError("a raw state carries its own bindings, none of this backend's")
            token = seal_envelope(self.keyset, state, format=self.name, policy=self.policy)
            return Sealed(token, None)
        minted = issue(
            self.keyset,
            state,
            binding=binding,
            ttl=self.ttl if ttl is None else int(ttl),
            policy=self.policy,
            format=self.name,
            now=self.clock(),
        )
        return Sealed(minted.token, minted.kid)

    def seal_sync(self, state: Any, binding: Binding, *, ttl: float | None = None) -> Sealed:
        return finish(self.seal(state, binding, ttl=ttl))

    async def open(self, carried: str, binding: Binding, *, redeem: Redeem | None = None) -> Opened:
        """The async face (``redeem``: the replay store's, by default its asyncio face; the
        sync face hands its blocking one, and runs this same coroutine)."""
        if self.raw:
            if binding.kinds:
                raise ValueError("a raw state carries its own bindings, none of this backend's")
            _, payload = open_envelope(self.keyset, carried, format=self.name, policy=self.policy)
            return Opened(payload, None)
        moment = self.clock()
        claims = verify(
            self.keyset, carried, expect=binding, format=self.name, policy=self.policy, now=moment
        )
        replay = self.replay
        if replay is not None:
            key, exp = redemption(claims.exp, claims.jti, carried, replay, moment)
            if not await (redeem or replay.aredeem)(key, exp, now=moment):
                raise replayed()
        return Opened(claims.state, claims.kid, claims)

    def open_sync(self, carried: str, binding: Binding) -> Opened:
        redeem = None if self.replay is None else blocking(self.replay.redeem)
        return finish(self.open(carried, binding, redeem=redeem))

    async def aprobe(self) -> str | None:
        """Why the replay store cannot be used now, or None (a keyset is the caller's to
        check: its reload may need a KEK, which must not run on the event loop)."""
        from ..errors import ReplayStoreError

        probing = getattr(self.replay, "aprobe", None)
        if probing is None:  # memory and SQLite: a failure shows on the redemption itself
            return None
        try:
            await probing()
        except ReplayStoreError as err:
            return str(err)
        return None

    async def aclose(self) -> None:
        if self.replay is not None:
            self.replay.close()
