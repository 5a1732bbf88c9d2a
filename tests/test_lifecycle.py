"""Key lifecycle: promote, retire, prune, rotate, and a state machine over all of them."""

from __future__ import annotations

import itertools
import time
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import mrtr_state as ms
from mrtr_state.keys import lifecycle as life

from .conftest import NOW

RETENTION = life.default_retention()  # 3660 s
PROPAGATION = 600


def aead_keys(keyset: ms.Keyset) -> list[tuple[str, str]]:
    return [(k.kid, k.status) for k in keyset if k.alg == "A256GCM"]


def one_alg() -> ms.Keyset:
    return ms.Keyset.generate(("A256GCM",), now=NOW)


def test_promote_demotes_the_old_primary_which_keeps_verifying() -> None:
    keyset = one_alg()
    old = keyset.primary("A256GCM")
    token = ms.mint(keyset, "x", now=NOW)
    keyset, new = keyset.with_new_key("A256GCM", now=NOW)
    assert new.status == "pending"
    keyset, changes = life.promote(keyset, new.kid, now=NOW + 10)
    assert [(c.action, c.kid) for c in changes] == [("promote", new.kid), ("demote", old.kid)]
    assert keyset.primary("A256GCM").kid == new.kid
    demoted = keyset.get(old.kid)
    assert demoted is not None
    assert demoted.status == "active"
    assert dict(demoted.since) == {"primary": NOW, "active": NOW + 10}
    assert ms.verify(keyset, token, now=NOW + 20).state == "x"
    assert life.promote(keyset, new.kid, now=NOW + 30) == (keyset, [])


def test_promote_refuses_unknown_and_retired_keys() -> None:
    keyset = one_alg()
    with pytest.raises(ms.UnknownKeyId, match="no key 00000000") as refused:
        life.promote(keyset, "00000000", now=NOW)
    assert isinstance(refused.value, ms.KeysetError) and refused.value.exit_code == 2
    kid = keyset.primary("A256GCM").kid
    retired, _change, _cut = life.retire(keyset, kid, now=NOW, retention=RETENTION)
    with pytest.raises(ms.KeysetInvalid, match="retired and cannot be promoted"):
        life.promote(retired, kid, now=NOW)


def test_retire_is_immediate_and_reports_what_it_cuts_off() -> None:
    keyset = one_alg()
    key = keyset.primary("A256GCM")
    token = ms.mint(keyset, "x", now=NOW)
    retired, change, cut = life.retire(keyset, key.kid, now=NOW + 5, retention=RETENTION)
    assert change.action == "retire"
    assert cut == RETENTION
    with pytest.raises(ms.KeyRetired):
        ms.verify(retired, token, now=NOW + 6)
    # an active key only cuts off what is left of its window; a pending key nothing
    keyset, new = keyset.with_new_key("A256GCM", now=NOW)
    keyset, _ = life.promote(keyset, new.kid, now=NOW + 100)
    _k, _c, cut_active = life.retire(keyset, key.kid, now=NOW + 1100, retention=RETENTION)
    assert cut_active == RETENTION - 1000
    keyset, pending = keyset.with_new_key("A256GCM", now=NOW)
    assert life.retire(keyset, pending.kid, now=NOW, retention=RETENTION)[2] == 0


def test_prune_waits_for_the_retention_window() -> None:
    keyset = one_alg()
    kid = keyset.primary("A256GCM").kid
    keyset, _c, _cut = life.retire(keyset, kid, now=NOW, retention=RETENTION)
    assert life.prune(keyset, now=NOW + RETENTION - 1, retention=RETENTION)[1] == []
    pruned, changes = life.prune(keyset, now=NOW + RETENTION, retention=RETENTION)
    assert [c.action for c in changes] == ["prune"]
    assert pruned.get(kid) is None


def test_rotate_walks_the_whole_lifecycle_one_safe_step_at_a_time() -> None:
    keyset = one_alg()
    first = keyset.primary("A256GCM").kid
    # a period as short as the propagation delay: a successor is due as soon as it can be
    step: dict[str, Any] = {
        "propagation": PROPAGATION,
        "retention": RETENTION,
        "every": PROPAGATION,
    }

    keyset, changes = life.rotate(keyset, now=NOW, **step)
    assert [c.action for c in changes] == ["add"]
    second = changes[0].kid
    # before the propagation delay: nothing to do, however often it runs
    for offset in (1, 300, PROPAGATION - 1):
        assert life.rotate(keyset, now=NOW + offset, **step)[1] == []
    keyset, changes = life.rotate(keyset, now=NOW + PROPAGATION, **step)
    assert [(c.action, c.kid) for c in changes] == [("promote", second), ("demote", first)]
    # the next run adds the next pending key; the old primary stays active for the retention
    keyset, changes = life.rotate(keyset, now=NOW + PROPAGATION, **step)
    assert [c.action for c in changes] == ["add"]
    demoted_at = NOW + PROPAGATION
    keyset, changes = life.rotate(keyset, now=demoted_at + RETENTION - 1, **step)
    assert "retire" not in [c.action for c in changes]
    keyset, changes = life.rotate(keyset, now=demoted_at + RETENTION, **step)
    assert ("retire", first) in [(c.action, c.kid) for c in changes]
    keyset, changes = life.rotate(keyset, now=demoted_at + 2 * RETENTION, **step)
    assert ("prune", first) in [(c.action, c.kid) for c in changes]
    assert keyset.get(first) is None


def test_rotate_refuses_settings_under_which_no_step_is_safe() -> None:
    """A library caller gets the invariants the CLI enforces: keys retired while their tokens
    are valid, or promoted before replicas have them, are refused before anything changes."""
    keyset = one_alg()
    with pytest.raises(ValueError, match="retention 10m is shorter than the ttl cap 1h"):
        life.rotate(keyset, now=NOW, propagation=60, retention=600, ttl_cap=3600)
    with pytest.raises(ValueError, match="rotation period 5m is shorter than the propagation"):
        life.rotate(keyset, now=NOW, propagation=600, retention=RETENTION, every=300)
    # at the limits, both are allowed
    life.rotate(keyset, now=NOW, propagation=600, retention=3600, every=600, ttl_cap=3600)


def test_rotate_has_a_cadence_however_often_it_runs() -> None:
    """A 15-minute cron with a 7-day period makes a new primary every 7 days, not every hour."""
    every, quarter = 7 * 86400, 300  # every - PROPAGATION and PROPAGATION are whole ticks
    keyset = one_alg()
    step: dict[str, Any] = {"propagation": PROPAGATION, "retention": RETENTION, "every": every}
    primaries = [(NOW, keyset.primary("A256GCM").kid)]
    added_at = []
    for tick in range(NOW, NOW + 30 * 86400, quarter):
        keyset, changes = life.rotate(keyset, now=tick, **step)
        added_at += [tick for c in changes if c.action == "add"]
        for change in changes:
            if change.action == "promote":
                primaries.append((tick, change.kid))
    starts = [at for at, _kid in primaries]
    assert len(primaries) == 5  # the first, and one new primary each 7 days of 30
    assert all(b - a == every for a, b in itertools.pairwise(starts))
    assert all(at - s == every - PROPAGATION for at, s in zip(added_at, starts, strict=False))
    due = life.due_list(keyset, propagation=PROPAGATION, retention=RETENTION, every=every)
    primary = keyset.primary("A256GCM")
    mine = next(d for d in due if d["kid"] == primary.kid)
    assert mine["action"] == "add" and mine["at"] == starts[-1] + every - PROPAGATION
    assert mine["at_utc"].endswith("Z") and "T" in mine["at_utc"]
    assert [d["at"] for d in due] == sorted(d["at"] for d in due)


def test_an_algorithm_without_a_primary_gets_one_at_once() -> None:
    keyset = one_alg()
    kid = keyset.primary("A256GCM").kid
    keyset = life.retire(keyset, kid, now=NOW, retention=RETENTION)[0]
    keyset, changes = life.rotate(keyset, now=NOW, propagation=PROPAGATION, retention=RETENTION)
    assert [c.action for c in changes] == ["add"] and changes[0].detail == "new primary key"


def test_rotate_touches_only_the_algorithms_asked_for() -> None:
    keyset = ms.Keyset.generate(now=NOW)
    rotated, changes = life.rotate(
        keyset, algs=("HS256",), now=NOW, propagation=1, retention=RETENTION, every=1
    )
    assert {c.alg for c in changes} == {"HS256"}
    with pytest.raises(ValueError, match="unknown key algorithm"):
        life.rotate(keyset, algs=("HS1",), now=NOW, propagation=1, retention=RETENTION)
    assert len(rotated) == len(keyset) + 1


def test_timeline_says_what_each_key_does_next() -> None:
    keyset = one_alg()
    first = keyset.primary("A256GCM").kid
    keyset, pending = keyset.with_new_key("A256GCM", now=NOW)

    def line(kid: str, at: int) -> str:
        key = keyset.get(kid)
        assert key is not None
        return life.timeline(key, now=at, propagation=PROPAGATION, retention=RETENTION)

    assert line(first, NOW + 3 * 86400) == "mints since 3d"
    assert line(pending.kid, NOW + 120) == "verifies; promotable in 8m"
    assert line(pending.kid, NOW + PROPAGATION) == "verifies; promotable now"
    keyset, _ = life.promote(keyset, pending.kid, now=NOW + PROPAGATION)
    until = time.strftime("%H:%M", time.gmtime(NOW + PROPAGATION + RETENTION))
    assert line(first, NOW + PROPAGATION + 60) == f"verifies until {until} UTC (1h more)"
    assert line(first, NOW + PROPAGATION + RETENTION) == (
        "verifies; retirable now (no unexpired tokens)"
    )
    keyset, _c, _cut = life.retire(keyset, first, now=NOW, retention=RETENTION)
    assert line(first, NOW + 60) == "refused since 1m; prunable in 1h"


class RotationMachine(RuleBasedStateMachine):
    """Random interleavings of rotation, manual steps, time and traffic.

    Invariants: a token minted by a key that nobody retired by hand verifies until its exp;
    rotation never retires or prunes a key that might still verify an unexpired token; the
    keyset always satisfies its invariants and keeps a primary for every algorithm.
    """

    def __init__(self) -> None:
        super().__init__()
        self.now = NOW
        self.keyset = ms.Keyset.generate(("A256GCM", "HS256"), now=NOW)
        self.hand_retired: set[str] = set()
        self.tokens: list[tuple[str, str, float]] = []  # token, kid, exp

    @rule(seconds=st.sampled_from([1, 59, 300, PROPAGATION, 1800, 3599, RETENTION]))
    def time_passes(self, seconds: int) -> None:
        self.now += seconds

    @rule(fmt=st.sampled_from(["aead", "jws"]), ttl=st.sampled_from([1, 60, 300, 3600]))
    def mint(self, fmt: str, ttl: int) -> None:
        minted = ms.issue(self.keyset, {"n": len(self.tokens)}, format=fmt, ttl=ttl, now=self.now)
        self.tokens.append((minted.token, minted.kid, minted.expires_at))

    @rule()
    def rotate(self) -> None:
        before = {k.kid: k for k in self.keyset}
        self.keyset, changes = life.rotate(
            self.keyset,
            now=self.now,
            propagation=PROPAGATION,
            retention=RETENTION,
            every=PROPAGATION,
        )
        for change in changes:
            if change.action in ("retire", "prune"):
                self._no_live_tokens(change.kid, before)

    @rule(alg=st.sampled_from(["A256GCM", "HS256"]))
    def add(self, alg: str) -> None:
        self.keyset, _key = self.keyset.with_new_key(alg, now=self.now)

    @precondition(lambda self: any(k.status == "pending" for k in self.keyset))
    @rule(data=st.data())
    def promote_by_hand(self, data: Any) -> None:
        pending = [k.kid for k in self.keyset if k.status == "pending"]
        self.keyset, _ = life.promote(
            self.keyset, data.draw(st.sampled_from(pending)), now=self.now
        )

    @precondition(lambda self: any(k.status == "active" for k in self.keyset))
    @rule(data=st.data())
    def retire_by_hand(self, data: Any) -> None:
        active = [k.kid for k in self.keyset if k.status == "active"]
        kid = data.draw(st.sampled_from(active))
        self.keyset, _change, _cut = life.retire(
            self.keyset, kid, now=self.now, retention=RETENTION
        )
        self.hand_retired.add(kid)

    @rule()
    def prune(self) -> None:
        before = {k.kid: k for k in self.keyset}
        self.keyset, changes = life.prune(self.keyset, now=self.now, retention=RETENTION)
        for change in changes:
            self._no_live_tokens(change.kid, before)

    def _no_live_tokens(self, kid: str, before: dict[str, ms.Key]) -> None:
        if kid in self.hand_retired:
            return
        live = [exp for _t, token_kid, exp in self.tokens if token_kid == kid and exp > self.now]
        assert not live, f"{kid} ({before[kid].status}) left while its tokens live until {live}"

    @invariant()
    def unexpired_tokens_of_unrevoked_keys_verify(self) -> None:
        for token, kid, exp in self.tokens:
            if exp > self.now and kid not in self.hand_retired:
                ms.verify(self.keyset, token, now=self.now)

    @invariant()
    def every_algorithm_keeps_a_primary(self) -> None:
        for alg in ("A256GCM", "HS256"):
            assert self.keyset.primary(alg).status == "primary"


TestRotationMachine = RotationMachine.TestCase
TestRotationMachine.settings = settings(max_examples=150, stateful_step_count=50, deadline=None)
