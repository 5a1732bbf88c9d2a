"""Installing for users: the sdist and the wheel built from the repository (``python -m build``,
the wheel made from the sdist, as an index would) hold the package, its LICENSE and metadata that
pins nothing; the wheel installs into a clean virtual environment (what ``pipx install .`` makes)
whose CLI works; with the ``proxy`` extra, so does the proxy; and each container image's lock
installs as its Dockerfile installs it, hashes checked."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from email.parser import HeaderParser
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from .helpers import program

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return out


@pytest.fixture(scope="module")
def wheel(dist: Path) -> Path:
    (built,) = dist.glob("mrtr_state-*.whl")
    return built


def venv_with(tmp_path: Path, *requirements: str) -> Path:
    """A fresh virtual environment with each of ``requirements`` installed in turn (a list of
    pip arguments, split on spaces); its bin folder."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    for requirement in requirements:
        done = subprocess.run(
            [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", *requirement.split()],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-2000:]
    return venv / "bin"


def test_the_wheel_holds_the_package_its_licence_and_nothing_else(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    assert all(n.startswith(("mrtr_state/", "mrtr_state-")) for n in names), names
    assert "mrtr_state/py.typed" in names and "mrtr_state/proxy/app.py" in names
    for unwanted in ("tests/", "vectors", "keyset.json", "bench/", "docs/", "deploy/"):
        assert not [n for n in names if unwanted in n], unwanted
    # the package's keys/ wing is code; the checkout's keys/ folder (keysets) is never packaged
    assert not [
        n for n in names if n.startswith("keys/") or "/keys/" in n.removeprefix("mrtr_state/keys/")
    ], names
    assert all(n.endswith(".py") for n in names if n.startswith("mrtr_state/keys/")), names
    entry = next(n for n in names if n.endswith("entry_points.txt"))
    assert "mrtr-state = mrtr_state._launch:main" in zipfile.ZipFile(wheel).read(entry).decode()
    (licence,) = [n for n in names if n.endswith(".dist-info/licenses/LICENSE")]
    assert zipfile.ZipFile(wheel).read(licence) == (ROOT / "LICENSE").read_bytes()


def test_the_wheels_metadata_pins_nothing_and_names_the_project(wheel: Path) -> None:
    """Users get ranges: the development pins (requirements/*.txt) are not extras."""
    archive = zipfile.ZipFile(wheel)
    text = archive.read(next(n for n in archive.namelist() if n.endswith("METADATA"))).decode()
    metadata = HeaderParser().parsestr(text)

    def every(field: str) -> list[str]:
        return metadata.get_all(field) or []

    assert metadata["License-Expression"] == "Apache-2.0"
    assert metadata.get_all("License-File") == ["LICENSE"]
    assert sorted(every("Provides-Extra")) == ["mcp", "pkcs11", "proxy", "redis"]
    requires = [Requirement(text) for text in every("Requires-Dist")]
    pinned = [str(r) for r in requires for s in r.specifier if s.operator in ("==", "===")]
    assert requires and pinned == []
    named = {r.name for r in requires}
    assert named == {"click", "cryptography", "mcp", "python-pkcs11", "hiredis"} | {
        "uvicorn",
        "httptools",
        "uvloop",
        "prometheus-client",
    }
    urls: dict[str, str] = {}
    for entry in every("Project-URL"):
        name, url = entry.split(", ", 1)
        urls[name] = url
    assert urls == PROJECT["urls"]
    # the page the index shows is the README, whose links are absolute (tests/test_docs.py)
    assert "](docs/" not in metadata.get_payload()


def test_the_sdist_holds_what_builds_the_wheel_and_the_licence(dist: Path) -> None:
    (sdist,) = dist.glob("mrtr_state-*.tar.gz")
    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
        member = archive.extractfile(f"{sdist.name.removesuffix('.tar.gz')}/LICENSE")
        assert member is not None and member.read() == (ROOT / "LICENSE").read_bytes()
    assert {"LICENSE", "README.md", "pyproject.toml", "mrtr_state/__init__.py"} <= names
    man = {"docs", "docs/man", "docs/man/mrtr-state.1"}  # the wheel's man page is built from it
    assert man <= names
    assert not [n for n in names - man if n.startswith(("tests/", "keys/", "docs", "deploy/"))]


def test_the_wheel_installs_the_man_page_where_man_finds_it(wheel: Path, tmp_path: Path) -> None:
    """Issue 46: ``pip install`` left the man page behind. The wheel carries it as data for
    ``share/man/man1``, so a virtual environment has it under its prefix, and ``man
    mrtr-state`` finds and shows it with MANPATH set as docs/cli.md says."""
    page = (ROOT / "docs" / "man" / "mrtr-state.1").read_bytes()
    archive = zipfile.ZipFile(wheel)
    (member,) = [
        n for n in archive.namelist() if n.endswith(".data/data/share/man/man1/mrtr-state.1")
    ]
    assert archive.read(member) == page
    bin_dir = venv_with(tmp_path, f"--no-deps {wheel}")
    prefix = bin_dir.parent
    installed = prefix / "share" / "man" / "man1" / "mrtr-state.1"
    assert installed.read_bytes() == page
    told = 'export MANPATH="$VIRTUAL_ENV/share/man:"'
    assert told in (ROOT / "docs" / "cli.md").read_text()
    man = program("man", "man-db")
    env = {**os.environ, "VIRTUAL_ENV": str(prefix), "MANPAGER": "cat", "MANWIDTH": "100"}
    env["MANPATH"] = f"{prefix}/share/man:"
    found = subprocess.run(
        [man, "-w", "mrtr-state"], capture_output=True, text=True, env=env, timeout=60
    )
    assert found.returncode == 0 and found.stdout.strip() == str(installed), found.stderr
    shown = subprocess.run([man, "mrtr-state"], capture_output=True, text=True, env=env, timeout=60)
    assert shown.returncode == 0, shown.stderr
    text = " ".join(shown.stdout.split())
    assert "MRTR-STATE(1)" in text and "mrtr-state - mint, verify, inspect and seal" in text
    assert "SHELL COMPLETION" in text and "_MRTR_STATE_COMPLETE=bash_source" in text


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
    # issue 38, as a user of the installed wheel runs it: version says "unknown" for a commit it
    # cannot know; a usage error with --json is one object on stdout and exit 2; a dry run
    # writes nothing; doctor passes a fresh keyset
    shown_version = json.loads(run("version", "--json"))
    assert shown_version["commit"] == "unknown" and shown_version["mrtr_state"] != "unknown"
    for args in (("keys", "promote", "--json", "deadbeef"), ("verify", "--json", "")):
        refused = subprocess.run(
            [cli, "--keyset", keyset, *args], capture_output=True, text=True, timeout=60
        )
        assert refused.returncode == 2, refused.stderr
        assert json.loads(refused.stdout)["error"]["exit_code"] == 2
        assert refused.stderr.splitlines()[-1].startswith("error: ")
    before = Path(keyset).read_bytes()
    assert run("keys", "add", "--dry-run").startswith("would add a pending A256GCM key")
    assert Path(keyset).read_bytes() == before
    assert "primary keys  ok" in run("doctor")
    # the core pulls in click and cryptography only: no HTTP stack, no SDK, no dev tool
    probe = (
        "import importlib.util as u; print([m for m in "
        "('httptools', 'uvicorn', 'mcp', 'redis', 'pytest', 'mypy') if u.find_spec(m)])"
    )
    listed = subprocess.run(
        [str(bin_dir / "python"), "-c", probe], capture_output=True, text=True, check=True
    )
    assert listed.stdout.strip() == "[]"
    # the installed distribution carries its licence, as a user's tools (pip-licenses) read it
    licence = (
        "import importlib.metadata as m; d = m.distribution('mrtr-state'); "
        "print(d.metadata['License-Expression']); "
        "print(next(f for f in d.files if f.name == 'LICENSE').read_text())"
    )
    shown = subprocess.run(
        [str(bin_dir / "python"), "-c", licence], capture_output=True, text=True, check=True
    )
    assert shown.stdout.startswith("Apache-2.0\n") and "Apache License" in shown.stdout
    assert "Version 2.0, January 2004" in shown.stdout


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


def copied_to_src(dockerfile: str, src: Path) -> Path:
    """``src`` filled as the Dockerfile's ``COPY ... /src...`` lines fill /src, from the
    repository (the build context): a file the build needs and the image leaves out fails."""
    import shutil

    for line in re.findall(r"^COPY (.+)$", dockerfile, re.MULTILINE):
        *sources, destination = line.split()
        if not destination.startswith("/src"):
            continue
        target = src / destination.removeprefix("/src").lstrip("/")
        for source in sources:
            origin = ROOT / source
            place = target / origin.name if destination.endswith("/") else target
            place.parent.mkdir(parents=True, exist_ok=True)
            if origin.is_dir():
                shutil.copytree(origin, place, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copyfile(origin, place)
    assert (src / "pyproject.toml").is_file()
    return src


@pytest.mark.parametrize(
    ("dockerfile", "command"),
    [("deploy/container/Dockerfile", "proxy"), ("deploy/kubernetes/ops.Dockerfile", "rotate")],
    ids=["proxy-image", "ops-image"],
)
def test_each_images_lock_installs_as_its_dockerfile_installs_it(
    dockerfile: str, command: str, tmp_path: Path
) -> None:
    """The Dockerfile's two pip commands, run here: the lock alone, hashes required and wheels
    only (pip refuses any dependency the lock does not pin), then the checkout as its COPY
    lines fill /src (nothing else of the repository), built offline with the locked
    setuptools. The command the image runs then works."""
    text = (ROOT / dockerfile).read_text()
    installs = re.findall(r"pip install --no-cache-dir ([^&\n]+?)\s*(?:\\\n|&&|$)", text)
    assert len(installs) == 2
    src = copied_to_src(text, tmp_path / "src")
    lock = installs[0].split()
    lock[-1] = lock[-1].replace("/src", str(src))
    checkout = installs[1].replace("/src", str(src))
    bin_dir = venv_with(tmp_path, " ".join(lock), checkout)
    done = subprocess.run(
        [str(bin_dir / "mrtr-state"), command, "--help"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr


def test_the_uvicorn_range_is_one_fact_tested_at_both_ends() -> None:
    """pyproject.toml's uvicorn range, the range the proxy checks at start-up, the lowest
    release .ci/run tests on and the highest (requirements/dev.txt's pin) all agree."""
    from packaging.requirements import Requirement
    from packaging.version import Version

    from mrtr_state.proxy.server import UVICORN_RANGE

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    (spec,) = [
        Requirement(text)
        for text in project["project"]["optional-dependencies"]["proxy"]
        if text.startswith("uvicorn")
    ]
    bounds = {s.operator: Version(s.version) for s in spec.specifier}
    low, high = UVICORN_RANGE
    assert bounds[">="].release[:2] == low and bounds["<"].release[:2] == high
    lowest = re.search(r"^UVICORN_LOWEST=(\S+)$", (ROOT / ".ci" / "run").read_text(), re.M)
    assert lowest is not None and Version(lowest.group(1)) == bounds[">="]
    pinned = re.search(r"^uvicorn==(\S+)$", (ROOT / "requirements" / "dev.txt").read_text(), re.M)
    assert pinned is not None and Version(pinned.group(1)) in spec.specifier
