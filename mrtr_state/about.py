"""What this installation is: its version, and the versions of what it runs on.

A bug report, an audit or a fleet inventory needs these together (``mrtr-state version``): the
package, Python, the ``cryptography`` wheel and the OpenSSL it links (the AES-GCM and HMAC that
every token goes through), and the git commit when running from a checkout. Each answer is
"unknown" rather than an error: asking what is installed must work on a broken installation too.
"""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["UNKNOWN", "build_info", "package_version"]

UNKNOWN = "unknown"
_COMMIT = re.compile(r"[0-9a-f]{40}")


def build_info() -> dict[str, str]:
    """``{"mrtr_state", "python", "cryptography", "openssl", "commit"}``, each a string."""
    return {
        "mrtr_state": _package_version(),
        "python": _python_version(),
        "cryptography": _cryptography_version(),
        "openssl": _openssl_version(),
        "commit": _commit(),
    }


def package_version() -> str:
    """The installed mrtr-state's version (what a client names itself with), or "unknown"."""
    return _package_version()


def _package_version() -> str:
    try:
        from importlib.metadata import version

        return version("mrtr-state")
    except Exception:
        return UNKNOWN


def _python_version() -> str:
    import platform

    return f"{platform.python_version()} ({platform.python_implementation()})"


def _cryptography_version() -> str:
    try:
        import cryptography

        return str(cryptography.__version__)
    except Exception:
        return UNKNOWN


def _openssl_version() -> str:
    try:
        from cryptography.hazmat.backends.openssl import backend

        return str(backend.openssl_version_text())
    except Exception:
        return UNKNOWN


def _commit() -> str:
    """The checkout's HEAD, when this package runs from a git checkout of mrtr-state (an
    editable install); "unknown" for a wheel, even one installed into some other repository's
    virtual environment, and whenever git is absent or fails."""
    root = Path(__file__).resolve().parent.parent
    try:
        project = (root / "pyproject.toml").read_text(encoding="utf-8")
    except OSError:
        return UNKNOWN
    if not re.search(r'(?m)^name\s*=\s*"mrtr-state"', project) or not (root / ".git").exists():
        return UNKNOWN
    import subprocess

    try:
        done = subprocess.run(  # noqa: S603 - fixed arguments, no shell
            ["git", "-C", str(root), "rev-parse", "HEAD"],  # noqa: S607 - git from PATH
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return UNKNOWN
    head = done.stdout.strip()
    return head if done.returncode == 0 and _COMMIT.fullmatch(head) else UNKNOWN
