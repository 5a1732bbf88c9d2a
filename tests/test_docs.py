"""The README is a quick start and the docs site carries the rest; what they promise holds:
every link reaches a file, every error code has its troubleshooting entry, every command is named.
(``make test`` builds the site itself with ``mkdocs build --strict``: a broken link fails.)"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

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


#: A snippet include as pymdownx.snippets reads it (a line of its own), and anything that was
#: meant as one: the form a formatter left (``--8 < --"examples/naive_upstream.py:answer"``).
INCLUDE = re.compile(r'--8<-- "([^":]+)(?::(\w+))?"')
MEANT_AS_INCLUDE = re.compile(r"-\s*-\s*8\s*<\s*-\s*-")


def test_every_snippet_include_is_written_as_the_docs_build_reads_it() -> None:
    """A mangled include is not an include: the build copies it as text and does not fail
    (issue 46 found one on docs/proxy.md). Every line meant as one is one, and names a file
    (and a section of it) that exists."""
    found = 0
    for page in sorted((ROOT / "docs").glob("*.md")):
        for number, line in enumerate(page.read_text().splitlines(), 1):
            if not MEANT_AS_INCLUDE.search(line):
                continue
            where = f"{page.name}:{number}: {line!r}"
            include = INCLUDE.fullmatch(line)
            assert include is not None, where
            target = ROOT / include[1]
            assert target.is_file(), where
            if include[2]:
                assert f"--8<-- [start:{include[2]}]" in target.read_text(), where
            found += 1
    assert found >= 20


def test_ruff_format_leaves_the_docs_alone() -> None:
    """ruff formats the Python code blocks of a Markdown file it is given, and so rewrote an
    include inside one; pyproject.toml keeps Markdown out of it, named or not."""
    ruff = Path(sys.executable).parent / "ruff"
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    done = subprocess.run(
        [str(ruff), "format", "--diff", *map(str, pages)],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
        timeout=60,
    )
    assert done.returncode == 0 and done.stdout == "", done.stdout[-2000:] + done.stderr
    alone = subprocess.run(
        [str(ruff), "format", "--diff", "."],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
        timeout=60,
    )
    assert alone.returncode == 0 and ".md" not in alone.stdout + alone.stderr, alone.stdout


def test_the_docs_build_fails_on_an_include_it_cannot_resolve() -> None:
    """mkdocs.yml's pymdownx.snippets settings (check_paths) make a missing file or section an
    error, which ``mkdocs build --strict`` (make docs) stops on; with them, every page's own
    includes resolve."""
    tools = "make docs installs the docs tools (requirements/docs.txt)"
    snippets = pytest.importorskip("pymdownx.snippets", reason=tools)
    markdown = pytest.importorskip("markdown", reason=tools)  # no stubs: make lint runs first
    import yaml

    extensions = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["markdown_extensions"]
    (settings,) = [e["pymdownx.snippets"] for e in extensions if "pymdownx.snippets" in e]
    assert settings["check_paths"] is True and settings["base_path"] == ["."]

    def convert(text: str) -> str:
        # base_path "." is the folder mkdocs runs in: the repository's root
        config = {**settings, "base_path": [str(ROOT)]}
        md = markdown.Markdown(
            extensions=["pymdownx.snippets"], extension_configs={"pymdownx.snippets": config}
        )
        return str(md.convert(text))

    assert "def answer" in convert('--8<-- "examples/naive_upstream.py:answer"')
    for broken in ('"examples/no_such_file.py"', '"examples/naive_upstream.py:no_such_part"'):
        with pytest.raises(snippets.SnippetMissingError):
            convert(f"```python\n--8<-- {broken}\n```\n")
    for page in sorted((ROOT / "docs").glob("*.md")):
        convert(page.read_text())


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
            if re.search(rf"\[{extra}\]'", line)
            and sum(p in line for p in packages) >= min(2, len(packages))  # a list, not a name
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


# --- every error message has its troubleshooting entry ---------------------------------------

TROUBLESHOOTING = (ROOT / "docs" / "troubleshooting.md").read_text()


def test_every_error_message_the_code_can_print_is_on_the_troubleshooting_page() -> None:
    """Each message (tests/messages.py finds them in the source) has one entry of the page, a
    table row or a paragraph, holding each of its fixed parts verbatim and in order."""
    from .messages import documented, entries, unique_messages

    places = entries(TROUBLESHOOTING)
    found = unique_messages()
    missing = [f"{m.path}:{m.line}: {m}" for m in found if not documented(m, places)]
    assert missing == [], "\n".join(missing)


def test_the_message_finder_finds_what_it_must() -> None:
    """The finder reads literals, f-strings, module constants, local variables, helper functions
    and both branches of a choice; and an entry must hold a message's parts in order."""
    from .messages import Message, documented, entries, unique_messages

    texts = {" ... ".join(m.parts) for m in unique_messages()}
    assert len(texts) > 300
    for expected in (
        "ttl ... s exceeds the ttl cap ... s",  # policy.py: an f-string
        "authentication tag mismatch (tampered, truncated or forged)",  # a module constant
        "no token: the TOKEN argument is empty",  # a constant inside an f-string
        "the token on stdin is over the ... -byte size cap",  # a local variable's two values
        "--ttl must be at least 1s",  # the other branch of a choice
        "fix it with: chmod 600",  # a helper function's return
        "single use refused: this token never expires, beyond the ... s the replay store remembers",
    ):
        assert expected in texts, expected
    message = Message("x.py", 1, "ValueError", ("a is", "b"))
    assert documented(message, entries("`a is 1 b`\n\nother"))
    assert not documented(message, entries("`b then a is`"))
    assert not documented(message, entries("`a is 1`\n\n`b`"))  # two entries are not one


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("MRTR_STATE_")}
    return subprocess.run(
        [sys.executable, "-m", "mrtr_state", *args],
        env={**environment, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _on_the_page(stderr: str, **placeholders: str) -> str:
    """The one error line of ``stderr``, with its variable parts spelled as the page spells
    them; it must be on the page as it is."""
    (line,) = [line for line in stderr.splitlines() if line.startswith("error: ")]
    message = line.removeprefix("error: ")
    for value, name in placeholders.items():
        message = message.replace(name, value)
    assert message in " ".join(TROUBLESHOOTING.replace("`", "").split()), message
    return message


def test_the_0644_keyset_message_is_on_the_page_verbatim(tmp_path: Path) -> None:
    keyset = tmp_path / "keyset.json"
    assert _cli("--keyset", str(keyset), "keys", "init").returncode == 0
    keyset.chmod(0o644)
    done = _cli("--keyset", str(keyset), "keys", "list")
    assert done.returncode == 6
    message = _on_the_page(done.stderr, P=str(keyset), **{"uid 1000": f"uid {os.geteuid()}"})
    assert "has mode 0644" in message and "fix it with: chmod 600 P" in message


def test_the_ttl_over_the_cap_message_is_on_the_page_verbatim(tmp_path: Path) -> None:
    keyset = tmp_path / "keyset.json"
    assert _cli("--keyset", str(keyset), "keys", "init").returncode == 0
    for command in (["mint", "--state", "1"], ["rotate"]):
        done = _cli("--keyset", str(keyset), *command, env={"MRTR_STATE_TTL": "2h"})
        assert done.returncode == 6, done.stderr
        message = _on_the_page(done.stderr)
        assert message == "invalid settings: ttl 7200 s exceeds the ttl cap 3600 s"
