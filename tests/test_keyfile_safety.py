"""The keyset file under crashes, failing system calls, concurrent writers and hostile folders."""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import mrtr_state as ms

from .conftest import NOW

ROOT = Path(__file__).resolve().parents[1]


def temporaries(path: Path) -> list[Path]:
    return sorted(path.parent.glob(f".{path.name}.*.tmp"))


def test_sigkill_at_random_moments_never_tears_or_loses_the_keyset(tmp_path: Path) -> None:
    path = tmp_path / "keyset.json"
    ms.Keyset.generate(("A256GCM",), now=int(time.time())).save(path)
    written: set[str] = {k.kid for k in ms.Keyset.load(path)}
    rng = random.Random(20261202)
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    # the kill moments spread over twice what one command takes on this machine now (a fixed
    # window let a loaded machine finish almost none, or an idle one kill almost none)
    timed = []
    for _ in range(3):
        began = time.monotonic()
        subprocess.run(
            [sys.executable, "-m", "mrtr_state", "--keyset", str(path), "keys", "add", "--json"],
            check=True,
            capture_output=True,
            env=environment,
        )
        timed.append(time.monotonic() - began)
    window = 2 * sorted(timed)[1]
    written = {k.kid for k in ms.Keyset.load(path)}
    completed = killed = 0
    for attempt in range(120):
        command = (
            ["keys", "add", "--json"] if attempt % 2 else ["rotate", "--propagation", "0", "--json"]
        )
        process = subprocess.Popen(
            [sys.executable, "-m", "mrtr_state", "--keyset", str(path), *command],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=environment,
        )
        time.sleep(rng.uniform(0.0, window))
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
        out, err = process.communicate()
        if process.returncode == 0:
            completed += 1
            report: dict[str, Any] = json.loads(out)
            kids = (
                [report["kid"]]
                if "kid" in report
                else [c["kid"] for c in report["changes"] if c["action"] in ("add", "promote")]
            )
            written.update(kids)
        else:
            assert process.returncode == -signal.SIGKILL, err.decode()
            killed += 1
        keyset = ms.Keyset.load(path)  # parses and validates after every kill
        missing = written - {k.kid for k in keyset}
        assert not missing, f"attempt {attempt}: keys written by completed commands lost"
    assert completed >= 10 and killed >= 10, (completed, killed)
    # a crashed writer's temporary file is never read, and the next writer removes it
    (tmp_path / ".keyset.json.leftover.tmp").write_text("{not json")
    ms.Keyset.update(path, lambda current: current.with_new_key("HS256")[0])
    assert temporaries(path) == []


class Boom(OSError):
    def __init__(self) -> None:
        super().__init__(28, "No space left on device")


def _fail_nth(original: Callable[..., Any], failing_call: int) -> Callable[..., Any]:
    calls = {"n": 0}

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == failing_call:
            raise Boom()
        return original(*args, **kwargs)

    return wrapper


class _FailingWrites:
    def __init__(self, handle: Any) -> None:
        self.handle = handle

    def __enter__(self) -> _FailingWrites:
        return self

    def __exit__(self, *exc: object) -> None:
        self.handle.close()

    def write(self, data: bytes) -> int:
        self.handle.write(data[: len(data) // 2])  # a torn write, then the failure
        raise Boom()

    def flush(self) -> None:
        self.handle.flush()

    def fileno(self) -> int:
        fd: int = self.handle.fileno()
        return fd


@pytest.mark.parametrize("step", ["open", "write", "fsync", "rename", "folder-fsync"])
def test_a_failing_write_step_leaves_the_old_or_the_new_keyset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    path = tmp_path / "keyset.json"
    ms.Keyset.generate(now=NOW).save(path)
    old = path.read_bytes()
    extra = ms.Key.generate("HS256", kid="0badf00d", status="pending", now=NOW)
    new = ms.Keyset.load(path).with_keys([*ms.Keyset.load(path), extra]).to_json().encode()

    # The write path calls these through their modules, so patching the module patches it; the
    # patch lasts only for the one update below.
    with monkeypatch.context() as patch:
        if step == "open":
            patch.setattr(tempfile, "mkstemp", _fail_nth(tempfile.mkstemp, 1))
        elif step == "write":
            real_fdopen = os.fdopen

            def torn(fd: int, mode: str = "r", **kwargs: Any) -> Any:
                handle = real_fdopen(fd, mode, **kwargs)
                return _FailingWrites(handle) if "w" in mode else handle

            patch.setattr(os, "fdopen", torn)
        elif step == "fsync":
            patch.setattr(os, "fsync", _fail_nth(os.fsync, 1))
        elif step == "rename":
            patch.setattr(os, "replace", _fail_nth(os.replace, 1))
        else:
            patch.setattr(os, "fsync", _fail_nth(os.fsync, 2))
        with pytest.raises(ms.KeysetError, match="No space left on device") as caught:
            ms.Keyset.update(path, lambda current: current.with_keys([*current, extra]))
    assert caught.value.exit_code == 6
    assert path.read_bytes() in (old, new)
    assert path.read_bytes() == (new if step == "folder-fsync" else old)
    assert temporaries(path) == []
    ms.Keyset.load(path)


def _add_keys(path: str, count: int) -> None:
    for _ in range(count):
        ms.Keyset.update(path, lambda current: current.with_new_key("A256GCM")[0])


def test_four_processes_adding_fifty_keys_each_lose_none(tmp_path: Path) -> None:
    path = tmp_path / "keyset.json"
    ms.Keyset.generate(("A256GCM",)).save(path)
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_add_keys, args=(str(path), 50)) for _ in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
        assert worker.exitcode == 0
    keyset = ms.Keyset.load(path)
    assert len(keyset) == 1 + 4 * 50
    assert [k.status for k in keyset].count("primary") == 1


def test_a_folder_others_can_write_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "shared"
    folder.mkdir()
    folder.chmod(0o777)
    with pytest.raises(ms.KeysetPermissions, match=f"chmod go-w {folder}"):
        ms.Keyset.generate().save(folder / "keyset.json")
    folder.chmod(0o1777)  # sticky, like /tmp: others cannot replace our files
    ms.Keyset.generate().save(folder / "keyset.json")


def test_a_symlink_planted_as_a_temporary_file_is_removed_not_followed(tmp_path: Path) -> None:
    path = tmp_path / "keyset.json"
    ms.Keyset.generate().save(path)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (tmp_path / ".keyset.json.planted.tmp").symlink_to(victim)
    ms.Keyset.update(path, lambda current: current.with_new_key("HS256")[0])
    assert victim.read_text() == "precious"
    assert temporaries(path) == []
    assert (path.stat().st_mode & 0o777) == 0o600
