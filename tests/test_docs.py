"""The README is a quick start and the docs site carries the rest; what they promise holds:
every link reaches a file, every error code has its troubleshooting entry, every command is named.
(``make test`` builds the site itself with ``mkdocs build --strict``: a broken link fails.)"""

from __future__ import annotations

import re
from pathlib import Path

import mrtr_state.errors as errors
from mrtr_state.cli import _COMMANDS

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def test_the_readme_is_a_quick_start_under_12_kb() -> None:
    assert len(README.encode()) < 12 * 1024
    for section in ("## Install", "## Set-up: two commands", "## The CLI in five minutes"):
        assert section in README
    assert "## The library in five lines" in README and "## Documentation" in README
    assert "make demo" in README and "make test" in README


def test_every_link_of_the_readme_reaches_a_file() -> None:
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README)
    assert len(links) >= 15
    for link in links:
        assert (ROOT / link).is_file(), link


def test_every_docs_page_is_in_the_navigation() -> None:
    nav = (ROOT / "mkdocs.yml").read_text()
    for page in sorted((ROOT / "docs").glob("*.md")):
        assert f": {page.name}" in nav, page.name


def test_every_error_code_has_its_troubleshooting_entry() -> None:
    page = (ROOT / "docs" / "troubleshooting.md").read_text()
    codes = {
        cls.code
        for cls in vars(errors).values()
        if isinstance(cls, type) and issubclass(cls, errors.MrtrStateError)
    }
    codes -= {"error", "invalid_token", "time_window", "binding_mismatch"}  # bases only
    codes |= {"no_token"}  # the CLI's own, for a batch line holding no token
    missing = sorted(code for code in codes if f"`{code}`" not in page)
    assert missing == []


def test_the_readme_names_every_command() -> None:
    for name in _COMMANDS:
        assert f"mrtr-state {name}" in README, name
