"""Shared fixtures: keysets made fresh for each test, a fixed clock, the shared vectors folder."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

import mrtr_state as ms

# CI runs the property tests on a fixed seed, so a run that lands is a run that can be repeated;
# everywhere else each run draws new examples (and so, over time, finds what a fixed seed cannot).
settings.register_profile("ci", derandomize=True)
if os.environ.get("MRTR_STATE_TEST_PROFILE") == "ci":
    settings.load_profile("ci")

NOW = 1_800_000_000  # a fixed "now" (2027-01-15) so that times in tests are exact
#: Published vectors, copied into the repository (sources and licences in their README).
VECTORS = Path(__file__).resolve().parent / "vectors" / "published"


@pytest.fixture
def keyset() -> ms.Keyset:
    return ms.Keyset.generate(now=NOW - 3600)


@pytest.fixture
def ks(tmp_path: Path) -> Path:
    """A keyset file made by ``mrtr-state keys init``, as a new user makes one."""
    from .helpers import run

    path = tmp_path / "keyset.json"
    run("--keyset", str(path), "keys", "init")
    return path


@pytest.fixture
def keyset_path(tmp_path: Path, keyset: ms.Keyset) -> Path:
    path = tmp_path / "keys" / "keyset.json"
    keyset.save(path)
    return path


@pytest.fixture
def keyset_file(tmp_path: Path) -> Path:
    """A keyset file holding one primary aead key, as a proxy or SDK server would load."""
    path = tmp_path / "keyset.json"
    ms.Keyset.generate(("A256GCM",)).save(path)
    return path


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A folder other users can traverse (pytest's tmp_path sits under a 0700 folder of root)."""
    folder = Path(tempfile.mkdtemp(prefix="mrtr-mounts-", dir="/tmp"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder)


def shared_vector(*parts: str) -> Path:
    """A published vector file from tests/vectors/published (it is part of every clone)."""
    path = VECTORS.joinpath(*parts)
    assert path.exists(), f"published test vector missing: {path}"
    return path


#: Lines that vector-driven tests report, printed in the terminal summary of every run.
VECTOR_REPORT: list[str] = []


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if VECTOR_REPORT:
        terminalreporter.section("test vectors run")
        for line in VECTOR_REPORT:
            terminalreporter.write_line(line)
