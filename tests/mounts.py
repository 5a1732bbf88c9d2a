"""How fleets hand a keyset to a process, rebuilt in a temporary folder for tests.

* :class:`KubeletVolume` lays files out the way the kubelet's atomic writer lays out a Secret
  volume: the payload in a timestamped folder ``..2026_12_03_15_42_21.123456789``, a ``..data``
  symlink to it, and one user-visible symlink per file (``keyset.json -> ..data/keyset.json``).
  An update writes a new timestamped folder, points ``..data_tmp`` at it, renames ``..data_tmp``
  over ``..data`` (the one atomic step) and then deletes the old folder, in that order.
* :func:`as_user` runs a function in a forked child that has dropped root for another uid and
  groups, as a pod with ``runAsUser`` and ``fsGroup`` runs. Forking (not exec) keeps the already
  imported interpreter, which a non-root user could not load from root's home.
"""

from __future__ import annotations

import os
import pickle
import shutil
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import pytest

T = TypeVar("T")

IS_ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not IS_ROOT, reason="needs root to own files as others")


class KubeletVolume:
    """A Secret volume as the kubelet projects it into a pod."""

    def __init__(self, root: Path, *, mode: int = 0o400, gid: int | None = None) -> None:
        self.root = root
        self.mode = mode
        self.gid = gid
        self.updates = 0
        root.mkdir(parents=True, exist_ok=True)
        root.chmod(0o1777)  # what a pod sees: a sticky, world-writable tmpfs root

    def path(self, name: str) -> Path:
        return self.root / name

    def project(self, files: Mapping[str, bytes]) -> None:
        """Write one version of the Secret, swapping it in atomically."""
        stamp = time.strftime("..%Y_%m_%d_%H_%M_%S.", time.gmtime())
        self.updates += 1
        fresh = self.root / f"{stamp}{time.time_ns() % 10**9:09d}{self.updates}"
        fresh.mkdir(mode=0o755)
        for name, content in files.items():
            target = fresh / name
            target.write_bytes(content)
            if self.gid is not None:
                os.chown(target, 0, self.gid)
            target.chmod(self.mode)
        data = self.root / "..data"
        old = Path(os.readlink(data)) if data.is_symlink() else None
        staging = self.root / "..data_tmp"
        staging.symlink_to(fresh.name)
        os.rename(staging, data)
        for name in files:
            visible = self.root / name
            if not visible.is_symlink():
                visible.symlink_to(f"..data/{name}")
        if old is not None:
            shutil.rmtree(self.root / old)


def as_user(uid: int, groups: tuple[int, ...], function: Callable[[], T]) -> T:
    """``function()`` run as ``uid`` (primary group ``groups[0]``); its result or its exception."""
    if not IS_ROOT:
        pytest.skip("dropping to another user needs root")
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the child
        os.close(read_end)
        try:
            os.setgroups(list(groups))
            os.setgid(groups[0])
            os.setuid(uid)
            outcome: tuple[str, Any] = ("ok", function())
        except BaseException as err:
            outcome = ("error", err)
        with os.fdopen(write_end, "wb") as pipe:
            pipe.write(pickle.dumps(outcome))
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        data = pipe.read()
    os.waitpid(child, 0)
    kind, value = pickle.loads(data)
    if kind == "error":
        raise value
    result: T = value
    return result


def verify_in_a_loop(path: str, tokens: list[str], revoked: str, stop: str, report: str) -> None:
    """A replica: verify ``tokens`` (whose keys stay) and ``revoked`` over and over until ``stop``
    exists; write counts, and when ``revoked`` was first refused (monotonic), to ``report``."""
    import json

    import mrtr_state as ms

    keyset = ms.Keyset.load(path)  # the default one-second reload interval, as a server has it
    checks = 0
    rejections: dict[str, int] = {}
    revoked_accepted = 0
    revoked_refused_at: float | None = None
    while not os.path.exists(stop):
        for token in tokens:
            checks += 1
            try:
                ms.verify(keyset, token)
            except ms.InvalidToken as err:
                rejections[err.code] = rejections.get(err.code, 0) + 1
        try:
            ms.verify(keyset, revoked)
        except ms.KeyRetired:
            if revoked_refused_at is None:
                revoked_refused_at = time.monotonic()
        except ms.InvalidToken as err:
            rejections["revoked:" + err.code] = rejections.get("revoked:" + err.code, 0) + 1
        else:
            revoked_accepted += 1
            if revoked_refused_at is not None:  # once refused, a revoked key must stay refused
                rejections["revoked_accepted_again"] = 1
    Path(report).write_text(
        json.dumps(
            {
                "checks": checks,
                "rejections": rejections,
                "revoked_accepted": revoked_accepted,
                "revoked_refused_at": revoked_refused_at,
            }
        )
    )
