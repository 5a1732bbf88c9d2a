"""Installing for users: a wheel built from the repository holds the package and nothing else,
and installs into a clean virtual environment (what ``pipx install .`` makes) whose CLI works;
with the ``proxy`` extra, so does the proxy."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(out), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    (built,) = out.glob("mrtr_state-*.whl")
    return built


def venv_with(tmp_path: Path, requirement: str) -> Path:
    """A fresh virtual environment with ``requirement`` installed; its bin folder."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", requirement],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return venv / "bin"


def test_the_wheel_holds_the_package_and_nothing_else(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    assert all(n.startswith(("mrtr_state/", "mrtr_state-")) for n in names), names
    assert "mrtr_state/py.typed" in names and "mrtr_state/proxy/app.py" in names
    for unwanted in ("tests/", "keys/", "vectors", "keyset.json", "bench/", "docs/", "deploy/"):
        assert not [n for n in names if unwanted in n], unwanted
    entry = next(n for n in names if n.endswith("entry_points.txt"))
    assert "mrtr-state = mrtr_state._launch:main" in zipfile.ZipFile(wheel).read(entry).decode()


def test_a_clean_environment_runs_the_cli_from_the_wheel(wheel: Path, tmp_path: Path) -> None:
    bin_dir = venv_with(tmp_path, str(wheel))
    cli = str(bin_dir / "mrtr-state")
    keyset = str(tmp_path / "keys" / "keyset.json")

    def run(*args: str) -> str:
        done = subprocess.run(
            [cli, "--keyset", keyset, *args], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert "mrtr-state" in run("--version")
    run("keys", "init")
    token = run("mint", "--principal", "alice", "--state", '{"step":2}').strip()
    assert run("verify", "--principal", "alice", token) == '{"step":2}\n'
    # the core pulls in click and cryptography only: no HTTP stack, no SDK
    probe = (
        "import importlib.util as u; "
        "print([m for m in ('httptools', 'uvicorn', 'mcp', 'redis') if u.find_spec(m)])"
    )
    listed = subprocess.run(
        [str(bin_dir / "python"), "-c", probe], capture_output=True, text=True, check=True
    )
    assert listed.stdout.strip() == "[]"


def test_the_proxy_extra_brings_what_the_proxy_needs(wheel: Path, tmp_path: Path) -> None:
    bin_dir = venv_with(tmp_path, f"{wheel}[proxy]")
    done = subprocess.run(
        [str(bin_dir / "mrtr-state"), "proxy", "--help"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and "--principal-header" in done.stdout
    imported = subprocess.run(
        [str(bin_dir / "python"), "-c", "import mrtr_state.proxy.app, httptools, uvicorn"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert imported.returncode == 0, imported.stderr
