"""The README's order (issue 46): ``make demo`` writes ``keys/keyset.json`` in the checkout, then
``make test`` runs the suite there, perhaps from a shell that exports ``MRTR_STATE_KEYSET``. No
test may see either: the autouse ``isolated`` fixture (tests/conftest.py) gives each test an
empty working folder and an environment without the caller's settings."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from .helpers import run

ROOT = Path(__file__).resolve().parents[1]
#: The test that failed after ``make demo`` (it inspects a token with no keyset named and read
#: the demo's), one that reads the default keyset path the same way, and this file's own checks
#: of what a test and a fixture that outlives it see.
READERS_OF_THE_DEFAULTS = (
    "tests/test_mcp_java.py::test_without_a_keyset_inspect_names_the_format_whose_body_it_is",
    "tests/test_sdk_vectors.py",
    "tests/test_readme_order.py::test_a_test_starts_in_an_empty_folder_of_its_own_with_none_of_"
    "the_callers_settings",
    "tests/test_readme_order.py::test_a_fixture_that_outlives_a_test_starts_isolated_too",
)


def _leaked() -> list[str]:
    return [n for n in os.environ if n.startswith("MRTR_STATE_") and "_TEST_" not in n]


def test_a_test_starts_in_an_empty_folder_of_its_own_with_none_of_the_callers_settings(
    isolated: Path,
) -> None:
    assert Path.cwd() == isolated and not any(isolated.iterdir())
    assert ROOT not in isolated.parents and isolated != ROOT
    assert _leaked() == []


@pytest.fixture(scope="module")
def seen_by_a_module_fixture() -> tuple[Path, list[str]]:
    """What a fixture started once for a file (a proxy, a peer) sees when it starts."""
    return Path.cwd(), _leaked()


def test_a_fixture_that_outlives_a_test_starts_isolated_too(
    seen_by_a_module_fixture: tuple[Path, list[str]],
) -> None:
    folder, leaked = seen_by_a_module_fixture
    assert ROOT not in folder.parents and folder != ROOT and leaked == []
    assert not (folder / "keys").exists() and not (folder / "mrtr-state.toml").exists()


def test_the_suite_passes_after_make_demo_in_a_shell_that_exports_settings(
    tmp_path: Path,
) -> None:
    """pytest run as a newcomer runs it after ``make demo``: from a folder holding a demo's
    keyset and a ``mrtr-state.toml`` naming it, with ``MRTR_STATE_KEYSET``, ``MRTR_STATE_CONFIG``
    and a short ``MRTR_STATE_TTL_CAP`` exported. Without the fixture the first test fails (the
    inspect it runs finds the demo's keyset)."""
    checkout = tmp_path / "checkout"
    demo_keyset = checkout / "keys" / "keyset.json"
    run("--keyset", str(demo_keyset), "keys", "init")
    config = checkout / "mrtr-state.toml"
    config.write_text(f'keyset = "{demo_keyset}"\nttl = "2m"\n')
    config.chmod(0o600)
    env = {
        **os.environ,
        "MRTR_STATE_KEYSET": str(demo_keyset),
        "MRTR_STATE_CONFIG": str(config),
        "MRTR_STATE_TTL_CAP": "1m",
    }
    done = subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"),
            *("--rootdir", str(ROOT), "-c", str(ROOT / "pyproject.toml")),
            *(str(ROOT / name) for name in READERS_OF_THE_DEFAULTS),
        ],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and " failed" not in done.stdout
