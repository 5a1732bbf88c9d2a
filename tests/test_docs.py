"""The README is a quick start and the docs site carries the rest; what they promise holds:
every link reaches a file, every error code has its troubleshooting entry, every command is named.
(``make test`` builds the site itself with ``mkdocs build --strict``: a broken link fails.)"""

from __future__ import annotations

import re
import tomllib
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


def project_urls() -> dict[str, str]:
    urls: dict[str, str] = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]
    return urls


def test_every_link_of_the_readme_is_absolute_and_reaches_a_file() -> None:
    """The README is the package index's page too, where a relative link leads nowhere: every
    link is the repository's address (pyproject.toml's Source) and names a file of this tree."""
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README)
    assert len(links) >= 15
    blob = project_urls()["Source"] + "/blob/main/"
    for link in links:
        assert link.startswith(blob), link
        assert (ROOT / link.removeprefix(blob)).is_file(), link


def test_the_project_address_is_written_once() -> None:
    urls = project_urls()
    source = urls["Source"]
    assert re.fullmatch(r"https://github\.com/[\w.-]+/[\w.-]+", source)
    for name, url in urls.items():
        assert url == source or url.startswith(source + "/"), name
    assert f"repo_url: {source}\n" in (ROOT / "mkdocs.yml").read_text()


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


def test_every_extra_is_installed_in_the_readme_and_listed_whole() -> None:
    """Each extra has its `pip install '.[NAME]'` line in the README; every line of the README
    and the docs that installs an extra and lists what it brings lists all of it."""
    from packaging.requirements import Requirement

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    pages = [README] + [page.read_text() for page in sorted((ROOT / "docs").glob("*.md"))]
    for extra, specs in extras.items():
        assert f"pip install '.[{extra}]'" in README, extra
        packages = [Requirement(spec).name for spec in specs]
        listing = [
            line
            for page in pages
            for line in page.splitlines()
            if re.search(rf"\[{extra}\]'", line) and any(p in line for p in packages)
        ]
        assert listing, extra
        for line in listing:
            assert all(p in line for p in packages), (extra, line)


def environment_variables_read() -> set[str]:
    """Every environment variable mrtr_state reads by a fixed name: each literal handed to
    ``os.environ.get``/``os.getenv``/``os.environ[...]`` (or to ``env.get``, the config's view of
    the environment) and each click ``envvar=``, plus the settings' variables, which the config
    derives from the names of the settings (``MRTR_STATE_`` and the name in capitals)."""
    import ast

    import mrtr_state.config as config

    found = {config.ENV_PREFIX + name.upper() for name in config._KNOWN}
    for path in (ROOT / "mrtr_state").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names: list[ast.expr] = []
            if isinstance(node, ast.Call):
                called = ast.unparse(node.func)
                if called in ("os.environ.get", "os.getenv", "environ.get", "env.get"):
                    names = node.args[:1]
                names += [k.value for k in node.keywords if k.arg == "envvar"]
            elif isinstance(node, ast.Subscript) and ast.unparse(node.value) == "os.environ":
                names = [node.slice]
            for name in names:
                elements = name.elts if isinstance(name, ast.List | ast.Tuple) else [name]
                for element in elements:
                    if isinstance(element, ast.Constant) and isinstance(element.value, str):
                        found.add(element.value)
                    elif isinstance(element, ast.Name) and hasattr(config, element.id):
                        found.add(getattr(config, element.id))  # KEYSET_JSON_ENV and the like
    return found


def test_every_environment_variable_the_code_reads_is_documented() -> None:
    page = (ROOT / "docs" / "configuration.md").read_text()
    read = environment_variables_read()
    assert {"MRTR_STATE_ROTATE_EVERY", "MRTR_STATE_CONFIG", "MRTR_STATE_KEYSET_JSON"} <= read
    assert {"NO_COLOR", "TERM"} <= read
    missing = sorted(name for name in read if not re.search(rf"`{name}(=[^`]*)?`", page))
    assert missing == []
