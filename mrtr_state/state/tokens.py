"""Tokens as a state backend: the state travels to the client sealed under a keyset.

Sealing mints a token of one format (``aead`` by default: confidential, the smallest) bound to
the :class:`~mrtr_state.Binding`; opening verifies it against the retry's binding with the
facade's one accepting path (:func:`mrtr_state.tokens.verify`), then, with a replay store,
redeems it there last, so a token refused for any other reason is never recorded.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ..policy import DEFAULT_FORMAT, DEFAULT_POLICY, Policy
from ..replay import redemption, replayed
from ..tokens import issue, verify
from .backend import Opened, Sealed, blocking, finish

if TYPE_CHECKING:
    from ..binding import Binding
    from ..keyset import Keyset
    from ..replay import ReplayStore

__all__ = ["TokenBackend"]

Redeem = Callable[..., Awaitable[bool]]


class TokenBackend:
    """``TokenBackend(keyset, format="aead", replay=None)``: states in tokens of ``format``,
    each minted for ``ttl`` seconds (the policy's by default) and, with ``replay`` (a store
    of :mod:`mrtr_state.replay`), accepted once. ``clock`` gives the time (tests pass their
    own)."""

    def __init__(
        self,
        keyset: Keyset,
        *,
        format: str = DEFAULT_FORMAT,
        replay: ReplayStore | None = None,
        policy: Policy = DEFAULT_POLICY,
        ttl: int | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.keyset = keyset
        self.name = format
        #: what names a sealed state in a log line: the key id of its token
        self.ref_name = "kid"
        self.replay = replay
        self.policy = policy
        self.ttl = ttl
        self.clock = clock

    async def seal(self, state: Any, binding: Binding) -> Sealed:
        # no store is touched: the sync face runs this very coroutine, which never waits
        minted = issue(
            self.keyset,
            state,
            binding=binding,
            ttl=self.ttl,
            policy=self.policy,
            format=self.name,
            now=self.clock(),
        )
        return Sealed(minted.token, minted.kid)

    def seal_sync(self, state: Any, binding: Binding) -> Sealed:
        return finish(self.seal(state, binding))

    async def open(self, carried: str, binding: Binding, redeem: Redeem | None = None) -> Opened:
        """The async face (``redeem``: the replay store's, by default its asyncio face; the
        sync face hands its blocking one, and runs this same coroutine)."""
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
        return finish(self.open(carried, binding, redeem))

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
