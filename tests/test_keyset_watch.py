"""A loaded keyset follows its file: picked up within the interval, last good kept, errors once."""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

import mrtr_state as ms
from mrtr_state.keys import lifecycle

from .mounts import KubeletVolume, verify_in_a_loop

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def path(tmp_path: Path) -> Path:
    target = tmp_path / "keyset.json"
    ms.Keyset.generate(("A256GCM",)).save(target)
    return target


def add_pending(path: Path) -> ms.Key:
    added: list[ms.Key] = []

    def change(current: ms.Keyset) -> ms.Keyset:
        changed, key = current.with_new_key("A256GCM")
        added.append(key)
        return changed

    ms.Keyset.update(path, change)
    return added[0]


def test_a_change_is_seen_after_the_interval_and_not_before(path: Path) -> None:
    loaded = ms.Keyset.load(path, reload_interval=0.3)
    assert loaded.path == path and loaded.reload_error is None
    key = add_pending(path)
    assert loaded.get(key.kid) is None  # within the interval: not even a stat
    time.sleep(0.35)
    assert loaded.get(key.kid) is not None
    assert loaded.reload() is False  # unchanged since: nothing to do


def test_reload_on_demand_ignores_the_interval(path: Path) -> None:
    loaded = ms.Keyset.load(path, reload_interval=3600)
    key = add_pending(path)
    assert loaded.get(key.kid) is None
    assert loaded.reload() is True
    assert loaded.get(key.kid) is not None


def test_a_keyset_loaded_once_or_built_in_memory_never_changes(path: Path) -> None:
    once = ms.Keyset.load(path, reload_interval=None)
    built = ms.Keyset.generate()
    key = add_pending(path)
    assert once.reload() is False and built.reload() is False
    assert once.get(key.kid) is None and once.path is None
    with pytest.raises(ValueError, match="reload_interval"):
        ms.Keyset.load(path, reload_interval=-1)


@pytest.mark.parametrize("breakage", ["invalid-json", "two-primaries", "missing", "loose-mode"])
def test_an_unusable_file_never_replaces_the_good_keyset_and_is_reported_at_each_check(
    path: Path, breakage: str, caplog: pytest.LogCaptureFixture
) -> None:
    loaded = ms.Keyset.load(path, reload_interval=0)
    token = ms.mint(loaded, "kept")
    good = path.read_text()
    if breakage == "invalid-json":
        path.write_text(good[: len(good) // 2])  # a torn, non-atomic write
    elif breakage == "two-primaries":
        keys = json.loads(good)["keys"]
        path.write_text(json.dumps({"keys": [keys[0], {**keys[0], "kid": "0badf00d"}]}))
    elif breakage == "missing":
        path.unlink()  # the instant of a swap in which the file is gone
    else:
        path.chmod(0o644)
    with caplog.at_level(logging.WARNING, logger="mrtr_state"):
        for _ in range(5):
            assert ms.verify(loaded, token).state == "kept"  # each checks the file again
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 5, [r.getMessage() for r in warnings]  # never silent: every look
    assert all("still using the keyset loaded before" in w.getMessage() for w in warnings)
    assert isinstance(loaded.reload_error, ms.KeysetError) and loaded.reload_failures == 5
    assert loaded.check() is loaded.reload_error  # a monitor's look, without raising
    assert loaded.reload_failures == 6
    with pytest.raises(ms.KeysetError):
        loaded.reload()  # on demand, the reason is raised; the good keyset stays
    assert ms.verify(loaded, token).state == "kept"
    # repaired: picked up again, the problem cleared
    path.write_text(good)
    path.chmod(0o600)
    key = add_pending(path)
    assert loaded.get(key.kid) is not None
    assert loaded.reload_error is None


def _point(link: Path, target: Path) -> None:
    """Swap ``link`` to ``target`` atomically, as the kubelet swaps a Secret's ``..data``."""
    fresh = link.with_name(link.name + ".new")
    fresh.symlink_to(target)
    fresh.replace(link)


def test_each_look_is_one_record_naming_its_event_counted_as_it_is_named(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 46: a reload that failed is ``keyset_reload_failed`` (warning, the reason, the
    keys still in force) and counted in ``reload_failures``; one that left a good keyset in
    force, after a change or with the file back as it was, is ``keyset_reloaded`` (info, the
    keys now in force) and counted in ``reloads``: the proxy's log and metrics say these."""
    good, bad = tmp_path / "a" / "keyset.json", tmp_path / "b" / "keyset.json"
    ms.Keyset.generate(("A256GCM",)).save(good)
    bad.parent.mkdir()
    bad.write_text('{"keys": [')
    bad.chmod(0o600)
    link = tmp_path / "keyset.json"
    link.symlink_to(good)
    loaded = ms.Keyset.load(link, reload_interval=0)
    first = [key.kid for key in loaded]
    with caplog.at_level(logging.INFO, logger="mrtr_state"):
        assert loaded.check() is None  # nothing changed: nothing said, nothing counted
        _point(link, bad)
        problem = loaded.check()
        _point(link, good)  # back as it was: the same file, good again
        assert loaded.check() is None
        added = add_pending(good)
        assert loaded.check() is None
    said = [
        (r.levelno, getattr(r, "event", None), getattr(r, "facts", None)) for r in caplog.records
    ]
    assert problem is not None and said == [
        (
            logging.WARNING,
            "keyset_reload_failed",
            {"keyset": str(link), "reason": str(problem), "kids": first},
        ),
        (logging.INFO, "keyset_reloaded", {"keyset": str(link), "changed": False, "kids": first}),
        (
            logging.INFO,
            "keyset_reloaded",
            {"keyset": str(link), "changed": True, "kids": [*first, added.kid]},
        ),
    ]
    assert (loaded.reload_failures, loaded.reloads) == (1, 2)
    assert "still using the keyset loaded before" in caplog.records[0].getMessage()


def test_a_status_change_keeps_the_primitives_already_built(path: Path) -> None:
    loaded = ms.Keyset.load(path, reload_interval=0)
    primary = loaded.primary("A256GCM")
    ms.mint(loaded, "warm")  # builds the AES-GCM object of the key
    cipher = primary.prepared("A256GCM", lambda secret: None)
    key = add_pending(path)
    ms.Keyset.update(path, lambda current: lifecycle.promote(current, key.kid, now=0)[0])
    demoted = loaded.get(primary.kid)
    assert demoted is not None and demoted.status == "active"
    assert demoted.prepared("A256GCM", lambda secret: None) is cipher


def test_a_retired_keys_tokens_are_refused_within_the_interval(path: Path) -> None:
    loaded = ms.Keyset.load(path, reload_interval=0.2)
    token = ms.mint(loaded, "x")
    kid = loaded.primary("A256GCM").kid
    ms.Keyset.update(path, lambda current: lifecycle.retire(current, kid, now=0, retention=0)[0])
    time.sleep(0.25)
    with pytest.raises(ms.KeyRetired):
        ms.verify(loaded, token)


def _versions(count: int) -> tuple[list[ms.Keyset], ms.Keyset, list[str], str]:
    """Keyset versions as a rotation produces them, tokens whose keys all keep, and a revoked one.

    Every version holds the primary A and the active key R; each adds another pending key. The
    last version retires R.
    """
    base = ms.Keyset.generate(("A256GCM",))
    r_only = ms.Keyset.generate(("A256GCM",))
    r_key = next(iter(r_only))
    revoked = ms.mint(r_only, "revoked")
    with_r = base.with_keys([*base, ms.Key(r_key.kid, "A256GCM", r_key.secret, status="active")])
    tokens = [ms.mint(with_r, {"n": n}) for n in range(4)]
    versions = []
    current = with_r
    for _ in range(count):
        current, _pending = current.with_new_key("A256GCM")
        versions.append(current)
    final = lifecycle.retire(versions[-1], r_key.kid, now=0, retention=0)[0]
    return versions, final, tokens, revoked


def test_replicas_verifying_while_the_kubelet_swaps_the_secret_see_no_false_rejection(
    tmp_path: Path,
) -> None:
    versions, final, tokens, revoked = _versions(12)
    volume = KubeletVolume(tmp_path / "secret")
    volume.project({"keyset.json": versions[0].to_json().encode()})
    mounted = str(volume.path("keyset.json"))
    stop = tmp_path / "stop"
    context = multiprocessing.get_context("spawn")
    reports = [tmp_path / f"replica-{n}.json" for n in range(3)]
    replicas = [
        context.Process(
            target=verify_in_a_loop, args=(mounted, tokens, revoked, str(stop), str(report))
        )
        for report in reports
    ]
    for replica in replicas:
        replica.start()
    time.sleep(1.5)  # let every replica load and start verifying
    swaps = 0
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline:
        volume.project({"keyset.json": versions[swaps % len(versions)].to_json().encode()})
        swaps += 1
        time.sleep(0.01)
    volume.project({"keyset.json": final.to_json().encode()})
    revoked_at = time.monotonic()
    time.sleep(2.0)
    stop.touch()
    for replica in replicas:
        replica.join(60)
        assert replica.exitcode == 0
    assert swaps >= 100
    for report in reports:
        outcome = json.loads(report.read_text())
        assert outcome["checks"] > 1000, outcome
        assert outcome["rejections"] == {}, outcome  # zero false rejections across every swap
        assert outcome["revoked_accepted"] > 0  # R verified while it was active
        refused_after = outcome["revoked_refused_at"] - revoked_at
        assert refused_after <= 1.0 + 0.5, outcome  # within the reload interval (+ scheduling)


def test_a_verify_batch_follows_the_keyset_file(path: Path) -> None:
    loaded = ms.Keyset.load(path)
    token = ms.mint(loaded, "batch")
    kid = loaded.primary("A256GCM").kid
    batch = subprocess.Popen(
        [sys.executable, "-m", "mrtr_state", "verify", "--keyset", str(path), "-"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert batch.stdin is not None and batch.stdout is not None

    def answer(line: str) -> str:
        assert batch.stdin is not None and batch.stdout is not None
        batch.stdin.write(line + "\n")
        batch.stdin.flush()
        ready, _, _ = select.select([batch.stdout], [], [], 10)
        assert ready, "the batch did not answer"
        return batch.stdout.readline().strip()

    assert answer(token) == '"batch"'
    ms.Keyset.update(path, lambda current: lifecycle.retire(current, kid, now=0, retention=0)[0])
    time.sleep(1.1)
    assert answer(token) == f"rejected: key {kid} is retired; its tokens are no longer accepted"
    batch.stdin.close()
    assert batch.wait(10) == 1  # the exit code of the first rejection
    batch.stdout.close()
    assert batch.stderr is not None
    batch.stderr.close()


@pytest.mark.parametrize(
    "hostile",
    [
        {"x\x1b]0;owned\x07\u202e": 1},  # a member name
        {"kid": "\x1b[2J\u2066"},  # a key id
        {"alg": "HS256\x1b]8;;http://x\x07"},  # an algorithm
        {"status": "\u202eyramirp"},  # a status
    ],
    ids=["member-name", "kid", "alg", "status"],
)
def test_a_reload_refusal_reaches_the_log_inert(
    path: Path, hostile: dict[str, object], caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 35: the file's text reaches the log of every replica that follows it (and the
    proxy's /readyz): the refusal names it escaped, never with the escape sequence or the
    bidi control a log viewer would obey."""
    loaded = ms.Keyset.load(path, reload_interval=0)
    doc = json.loads(path.read_text())
    doc["keys"][0].update(hostile)
    path.write_text(json.dumps(doc))
    with caplog.at_level(logging.WARNING, logger="mrtr_state"):
        assert loaded.reload_error is None
        loaded.check()
    said = [r.getMessage() for r in caplog.records] + [str(loaded.reload_error)]
    assert isinstance(loaded.reload_error, ms.KeysetError)
    for message in said:
        assert not {"\x1b", "\x07", "\u202e", "\u2066"} & set(message), message
