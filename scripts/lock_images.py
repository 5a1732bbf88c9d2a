"""Write the container images' requirement locks: every distribution an image installs, pinned
to one version, with the SHA-256 of each wheel pip may choose for it.

    python scripts/lock_images.py          # rewrite both locks (make lock)

An image installs its lock with ``pip install --require-hashes --only-binary=:all:``, then the
checkout with ``--no-deps --no-build-isolation``, so the same commit gives the same image: no
range is resolved at build time, no source distribution is built, and a file whose digest is
not listed is refused. The versions are resolved by pip itself (``install --dry-run --report``)
for each Python and machine the lock serves, and must agree across them; the digests are the
ones the index publishes for the files pip picked.

The images run CPython 3.12 (deploy/container/Dockerfile, deploy/kubernetes/ops.Dockerfile) on
x86_64 or aarch64; CPython 3.11, the oldest Python mrtr-state supports, is in the lock too, so
that tests/test_install.py installs the very lock on this machine and runs the proxy from it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYTHONS = ("3.11", "3.12")
MACHINES = ("x86_64", "aarch64")
#: glibc baselines pip may pick a wheel for; bookworm (the images' Debian) has glibc 2.36
GLIBC = ("manylinux2014", "manylinux_2_17", "manylinux_2_28", "manylinux_2_34")


def _project() -> dict[str, object]:
    data: dict[str, object] = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return data


def image_requirements(extras: tuple[str, ...]) -> list[str]:
    """What an image needs: the runtime dependencies, the extras it names, and the build
    backend that turns the checkout into a wheel (installed from the lock, not fetched)."""
    project = _project()
    meta = project["project"]
    assert isinstance(meta, dict)
    wanted: list[str] = list(meta["dependencies"])
    for extra in extras:
        wanted += [spec.split(";")[0].strip() for spec in meta["optional-dependencies"][extra]]
    build = project["build-system"]
    assert isinstance(build, dict)
    return wanted + list(build["requires"])


LOCKS: dict[Path, tuple[str, ...]] = {
    ROOT / "deploy" / "container" / "proxy-requirements.txt": ("proxy",),
    ROOT / "deploy" / "kubernetes" / "ops-requirements.txt": (),
}


def resolve(requirements: list[str], python: str, machine: str) -> dict[str, tuple[str, str]]:
    """``{name: (version, sha256)}`` as pip resolves ``requirements`` for one Python and machine."""
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "report.json"
        platforms = [arg for tag in GLIBC for arg in ("--platform", f"{tag}_{machine}")]
        subprocess.run(  # noqa: S603 (pip, with the requirements of pyproject.toml)
            [
                sys.executable,
                *("-m", "pip", "install", "--quiet", "--dry-run", "--ignore-installed"),
                *("--only-binary=:all:", "--implementation", "cp", "--python-version", python),
                *platforms,
                *("--target", str(Path(scratch) / "target"), "--report", str(report)),
                *requirements,
            ],
            check=True,
        )
        installed = json.loads(report.read_text())["install"]
    resolved: dict[str, tuple[str, str]] = {}
    for item in installed:
        name = item["metadata"]["name"].lower().replace("_", "-")
        digest = item["download_info"]["archive_info"]["hashes"]["sha256"]
        resolved[name] = (item["metadata"]["version"], digest)
    return resolved


def lock_text(extras: tuple[str, ...]) -> str:
    requirements = image_requirements(extras)
    versions: dict[str, str] = {}
    digests: dict[str, set[str]] = {}
    for python in PYTHONS:
        for machine in MACHINES:
            for name, (version, digest) in resolve(requirements, python, machine).items():
                if versions.setdefault(name, version) != version:
                    sys.exit(f"{name}: {versions[name]} for one target, {version} for another")
                digests.setdefault(name, set()).add(digest)
    lines = [
        "# Written by scripts/lock_images.py (make lock) from pyproject.toml: do not edit.",
        f"# For: {', '.join(requirements)}",
        f"# CPython {' and '.join(PYTHONS)} on Linux {' and '.join(MACHINES)}; "
        "install with --require-hashes --only-binary=:all:",
    ]
    for name in sorted(versions):
        lines.append(f"{name}=={versions[name]} \\")
        hashes = [f"    --hash=sha256:{digest}" for digest in sorted(digests[name])]
        lines += [line + " \\" for line in hashes[:-1]] + hashes[-1:]
    return "\n".join(lines) + "\n"


def main() -> int:
    for path, extras in LOCKS.items():
        path.write_text(lock_text(extras))
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
