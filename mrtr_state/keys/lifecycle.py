"""Key lifecycle: pending -> primary -> active -> retired -> pruned, and the rotation step.

Every function here is pure: it takes a keyset and ``now`` and returns a new keyset plus the list
of changes it made, so the same code serves ``--dry-run``, the CLI and the state-machine tests.

Two delays keep in-flight round trips alive on a fleet whose replicas load the keyset file at
different moments:

* **propagation**: a new key stays *pending* (verifies, never mints) until every replica has it;
  only then may it become primary, or a retry reaching a slow replica would meet an unknown key;
* **retention** (default: TTL cap + clock skew): a former primary stays *active* (verifies) until
  no token it minted can still be unexpired; only then may rotation retire it, and a retired key
  is kept that long again so that ``inspect`` can still name it before it is pruned.

``retire`` by hand skips the wait on purpose: it is the revocation of a compromised key.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from ..durations import format_duration as ago
from ..errors import KeysetInvalid, PropagationPending, UnknownKeyId
from ..tokens.policy import (
    DEFAULT_PROPAGATION,
    DEFAULT_ROTATE_EVERY,
    DEFAULT_TTL_CAP,
    default_retention,
)
from .keyset import ALGORITHMS, Key, Keyset

__all__ = [
    "DEFAULT_PROPAGATION",
    "DEFAULT_ROTATE_EVERY",
    "Change",
    "check_period",
    "check_retention",
    "default_retention",
    "due_list",
    "next_due",
    "promote",
    "prune",
    "retire",
    "rotate",
    "timeline",
]


@dataclass(frozen=True)
class Change:
    """One transition, as ``rotate --json`` and the other key commands report it."""

    action: str  # add, promote, demote, retire, prune
    kid: str
    alg: str
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return {"action": self.action, "kid": self.kid, "alg": self.alg, "detail": self.detail}


def _entered(key: Key, status: str, now: int) -> Key:
    return key._changed(status=status, since={**key.since, status: now})


def _replace(keyset: Keyset, changed: dict[str, Key]) -> Keyset:
    return keyset.with_keys(changed.get(key.kid, key) for key in keyset)


def _find(keyset: Keyset, kid: str) -> Key:
    key = keyset.get(kid)
    if key is None:
        raise UnknownKeyId(f"{keyset.source} has no key {kid}").needing("list_keys")
    return key


def promote(
    keyset: Keyset, kid: str, *, now: int, propagation: int | None = None
) -> tuple[Keyset, list[Change]]:
    """Make ``kid`` (pending, or active as a roll-back) the primary of its algorithm.

    The previous primary becomes active: it stops minting but keeps verifying its tokens. With
    ``propagation``, a pending key younger than that is refused (:class:`PropagationPending`,
    also a ``ValueError``, saying when it may be promoted): replicas that have not loaded it yet
    would refuse every token it mints.
    """
    key = _find(keyset, kid)
    if key.status == "primary":
        return keyset, []
    if key.status == "retired":
        raise KeysetInvalid(f"key {kid} is retired and cannot be promoted; add a new key")
    pending_since = key.since.get("pending")
    if propagation is not None and key.status == "pending" and pending_since is not None:
        waited = now - pending_since
        if waited < propagation:
            raise PropagationPending(
                f"not yet: key {kid} has been pending for {ago(max(0, waited))}, less than "
                f"the propagation delay of {ago(propagation)}, and replicas that have not "
                f"loaded it yet would refuse its tokens; retry in {ago(propagation - waited)}",
                kid=kid,
                promotable_at=pending_since + propagation,
                now=now,
            ).needing("promote_later", key=kid)
    changes = [Change("promote", kid, key.alg, f"{key.status} -> primary: mints from now on")]
    changed = {kid: _entered(key, "primary", now)}
    old = next((k for k in keyset if k.alg == key.alg and k.status == "primary"), None)
    if old is not None:
        changed[old.kid] = _entered(old, "active", now)
        changes.append(Change("demote", old.kid, old.alg, "primary -> active: verifies only"))
    return _replace(keyset, changed), changes


def unexpired_window(key: Key, *, now: int, retention: int) -> int:
    """Seconds from ``now`` during which tokens minted by ``key`` may still be unexpired."""
    if key.status == "primary":
        return retention
    if key.status == "active":
        stopped = key.since.get("active", now)
        return max(0, stopped + retention - now)
    return 0  # pending keys never minted; retired keys are refused already


def retire(keyset: Keyset, kid: str, *, now: int, retention: int) -> tuple[Keyset, Change, int]:
    """Revoke ``kid`` at once. Returns the change and how many seconds of tokens it cuts off."""
    key = _find(keyset, kid)
    if key.status == "retired":
        return keyset, Change("retire", kid, key.alg, "already retired"), 0
    cut = unexpired_window(key, now=now, retention=retention)
    detail = f"{key.status} -> retired: its tokens are refused from now on"
    return (
        _replace(keyset, {kid: _entered(key, "retired", now)}),
        Change("retire", kid, key.alg, detail),
        cut,
    )


def prune(
    keyset: Keyset, *, now: int, retention: int, algs: tuple[str, ...] | None = None
) -> tuple[Keyset, list[Change]]:
    """Delete retired keys (of ``algs``, default all) retired at least ``retention`` s ago."""
    gone = [
        k
        for k in keyset
        if k.status == "retired"
        and k.since.get("retired", now) + retention <= now
        and (algs is None or k.alg in algs)
    ]
    if not gone:
        return keyset, []
    kids = {k.kid for k in gone}
    return keyset.with_keys(k for k in keyset if k.kid not in kids), [
        Change("prune", k.kid, k.alg, "retired key deleted") for k in gone
    ]


def check_retention(retention: int, ttl_cap: int) -> None:
    """Refuse (``ValueError``) a retention shorter than the ttl cap: rotation would retire keys
    whose tokens are still valid."""
    if retention < ttl_cap:
        raise ValueError(
            f"retention {ago(retention)} is shorter than the ttl cap {ago(ttl_cap)}: rotation "
            "would retire keys whose tokens are still valid"
        )


def check_period(every: int, propagation: int) -> None:
    """Refuse (``ValueError``) a rotation period shorter than the propagation delay: a new key
    could be promoted before every replica has it."""
    if every < propagation:
        raise ValueError(
            f"the rotation period {ago(every)} is shorter than the propagation delay "
            f"{ago(propagation)}: a new key could be promoted before replicas have it"
        )


def rotate(
    keyset: Keyset,
    *,
    algs: tuple[str, ...] | None = None,
    now: int,
    propagation: int,
    retention: int,
    every: int = DEFAULT_ROTATE_EVERY,
    ttl_cap: int = DEFAULT_TTL_CAP,
) -> tuple[Keyset, list[Change]]:
    """One safe rotation step for each algorithm (all algorithms in use unless ``algs``).

    Cleanups first (prune retired keys past retention, retire active keys past retention), then
    one move: promote the pending key once it is older than ``propagation``, or add a pending
    key when the primary is due for replacement. The primary is replaced ``every`` seconds: its
    successor is added ``propagation`` before that, so that it is everywhere when promoted. An
    algorithm with no primary gets one at once. Every transition is safe on its own, so running
    this twice in a row (or every 15 minutes from two cron jobs) only ever moves the keyset
    forward, and no faster than the period.

    Refused (``ValueError``), because no step would then be safe: a ``retention`` shorter than
    ``ttl_cap`` (keys would be retired while their tokens are still valid) and a period
    ``every`` shorter than ``propagation`` (a key could be promoted before replicas have it).
    """
    check_retention(retention, ttl_cap)
    check_period(every, propagation)
    chosen = algs or tuple(alg for alg in ALGORITHMS if any(k.alg == alg for k in keyset))
    for alg in chosen:
        if alg not in ALGORITHMS:
            raise ValueError(f"unknown key algorithm {alg!r}")
    keyset, changes = prune(keyset, now=now, retention=retention, algs=chosen)
    for alg in chosen:
        for key in [k for k in keyset if k.alg == alg and k.status == "active"]:
            if key.since.get("active", now) + retention <= now:
                keyset, _change, _cut = retire(keyset, key.kid, now=now, retention=retention)
                changes.append(
                    Change(
                        "retire", key.kid, alg, "active -> retired: its last tokens have expired"
                    )
                )
        pending = [k for k in keyset if k.alg == alg and k.status == "pending"]
        if not pending:
            primary = next((k for k in keyset if k.alg == alg and k.status == "primary"), None)
            if primary is None or _successor_due(primary, every, propagation) <= now:
                keyset, key = keyset.with_new_key(alg, now=now)
                changes.append(Change("add", key.kid, alg, f"new {key.status} key"))
            continue
        oldest = min(pending, key=lambda k: k.since.get("pending", now))
        if oldest.since.get("pending", now) + propagation <= now:
            keyset, promoted = promote(keyset, oldest.kid, now=now)
            changes += promoted
    return keyset, changes


def _successor_due(primary: Key, every: int, propagation: int) -> int:
    """When rotation adds the successor of ``primary`` (so that it is promoted at ``every``)."""
    since = primary.since.get("primary", 0)
    return since + max(every - propagation, 0)


def next_due(
    key: Key, *, propagation: int, retention: int, every: int = DEFAULT_ROTATE_EVERY
) -> tuple[str, int] | None:
    """The next step rotation takes for ``key``, and from when (unix seconds).

    primary: ``add`` its successor; pending: ``promote``; active: ``retire``; retired: ``prune``.
    """
    if key.status == "primary":
        return "add", _successor_due(key, every, propagation)
    status_since = key.since.get(key.status, 0)
    if key.status == "pending":
        return "promote", status_since + propagation
    if key.status == "active":
        return "retire", status_since + retention
    if key.status == "retired":
        return "prune", status_since + retention
    return None


def due_list(
    keyset: Keyset, *, propagation: int, retention: int, every: int = DEFAULT_ROTATE_EVERY
) -> list[dict[str, Any]]:
    """Every key's next rotation step as machine-readable times, soonest first.

    A primary's successor is added only while no key is pending, so that entry is left out then.
    """
    pending_algs = {k.alg for k in keyset if k.status == "pending"}
    due = []
    for key in keyset:
        step = next_due(key, propagation=propagation, retention=retention, every=every)
        if step is None or (key.status == "primary" and key.alg in pending_algs):
            continue
        action, at = step
        due.append({"kid": key.kid, "alg": key.alg, "action": action, **stamp(at)})
    return sorted(due, key=lambda item: (item["at"], item["kid"]))


def stamp(at: int) -> dict[str, Any]:
    """A time as JSON wants it twice: unix seconds and RFC 3339 UTC."""
    return {"at": at, "at_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))}


def timeline(key: Key, *, now: int, propagation: int, retention: int) -> str:
    """A short line saying what the key does and when that changes (for ``keys list``)."""
    since = key.since.get(key.status)
    for_how_long = "" if since is None else f" since {ago(now - since)}"
    if key.status == "primary":
        return f"mints{for_how_long}"
    if key.status == "pending":
        if since is None:
            return "verifies; not yet minting"
        left = since + propagation - now
        return "verifies; promotable now" if left <= 0 else f"verifies; promotable in {ago(left)}"
    if key.status == "active":
        left = unexpired_window(key, now=now, retention=retention)
        return (
            f"verifies until {time.strftime('%H:%M', time.gmtime(now + left))} UTC "
            f"({ago(left)} more)"
            if left > 0
            else "verifies; retirable now (no unexpired tokens)"
        )
    left = (since if since is not None else now) + retention - now
    return f"refused{for_how_long}; " + (
        "prunable now" if left <= 0 else f"prunable in {ago(left)}"
    )
