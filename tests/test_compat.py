"""Released interfaces keep working (issue 45): every import a released doc showed, and every
import the docs show now.

0.1.0's public names are all still ``mrtr_state``'s. Its module paths that docs showed (the MCP
helpers, both SDK codecs, the replay store) still import, and warn, naming each name's new home.
And every ``from mrtr_state... import ...`` in README.md, docs/ and examples/ is imported here,
so that no page can show a path that fails.
"""

from __future__ import annotations

import importlib
import re
import sys
import warnings
from pathlib import Path

import pytest

import mrtr_state as ms

from .helpers import ROOT

#: ``mrtr_state.__all__`` as 0.1.0 released it (git show 81e3010:mrtr_state/__init__.py).
RELEASED_NAMES = [
    "AudienceMismatch",
    "BadSignature",
    "BindingMismatch",
    "Claims",
    "ConfigError",
    "DEFAULT_POLICY",
    "ExpiredToken",
    "Inspection",
    "InvalidClaims",
    "InvalidToken",
    "KekRefused",
    "KekRequired",
    "KekUnavailable",
    "Key",
    "KeyRetired",
    "Keyset",
    "KeysetError",
    "KeysetExists",
    "KeysetInvalid",
    "KeysetLocked",
    "KeysetNotFound",
    "KeysetPermissions",
    "KeysetTampered",
    "LifetimeBeyondStore",
    "MalformedToken",
    "Minted",
    "MrtrStateError",
    "NoPrimaryKey",
    "NotYetValid",
    "OversizedToken",
    "PUBLIC_MESSAGE",
    "Policy",
    "PrincipalMismatch",
    "ReplayStore",
    "ReplayStoreError",
    "Replayed",
    "RequestMismatch",
    "StateStoreError",
    "TimeWindowError",
    "UnknownHandle",
    "UnknownKey",
    "UnknownKeyId",
    "WrongFormat",
    "__version__",
    "arguments_digest",
    "inspect",
    "issue",
    "mint",
    "open_store",
    "request_id",
    "seal",
    "unseal",
    "verify",
    "verify_for_output",
]

#: The 0.1.0 module paths docs showed -> the names imported from each, and where each lives now.
MOVED = {
    "mrtr_state.mcp": {
        "KeysetCodec": "mrtr_state.sdk.codec",
        "HandleCodec": "mrtr_state.sdk.codec",
        "CAPABILITIES_META_KEY": "mrtr_state.sdk.mcp",
        "INPUT_REQUIRED_METHODS": "mrtr_state.sdk.mcp",
        "CapabilityMissing": "mrtr_state.sdk.mcp",
        "check_capabilities": "mrtr_state.sdk.mcp",
        "input_required_result": "mrtr_state.sdk.mcp",
        "open_retry": "mrtr_state.sdk.mcp",
        "request_fingerprint": "mrtr_state.sdk.mcp",
        "request_target": "mrtr_state.sdk.mcp",
        "retry_target": "mrtr_state.sdk.mcp",
        "verify_retry": "mrtr_state.sdk.mcp",
        "wire_error": "mrtr_state.sdk.mcp",
    },
    "mrtr_state.server_state": {
        "HandleCodec": "mrtr_state.sdk.codec",
        "verify_handle": "mrtr_state.state.handles",
        "inspect_handle": "mrtr_state.state.handles",
    },
    "mrtr_state.sdk_codec": {
        "KeysetCodec": "mrtr_state.sdk.codec",
        "ReplayGuard": "mrtr_state.sdk.codec",
    },
    "mrtr_state.replay": {
        "open_store": "mrtr_state.state.replay",
        "ReplayStore": "mrtr_state.state.replay",
        "MemoryStore": "mrtr_state.state.replay",
        "SqliteStore": "mrtr_state.state.replay",
        "RedisStore": "mrtr_state.state.replay",
    },
}


def test_every_released_public_name_is_still_public() -> None:
    missing = [name for name in RELEASED_NAMES if name not in ms.__all__]
    assert missing == []
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # none of them warns: they did not move
        for name in RELEASED_NAMES:
            getattr(ms, name)


@pytest.mark.parametrize(
    ("module", "name", "home"),
    [(module, name, home) for module, names in MOVED.items() for name, home in names.items()],
    ids=lambda value: str(value).removeprefix("mrtr_state."),
)
def test_a_moved_name_still_imports_and_warns_naming_its_new_home(
    module: str, name: str, home: str
) -> None:
    old = importlib.import_module(module)
    with pytest.warns(DeprecationWarning, match=rf"{re.escape(module)}\.{name} .*{home}"):
        value = getattr(old, name)
    assert value is getattr(importlib.import_module(home), name)


def test_a_moved_module_reached_as_an_attribute_warns_too() -> None:
    with pytest.warns(DeprecationWarning, match=r"mrtr_state\.keyset .*mrtr_state\.keys\.keyset"):
        module = ms.keyset
    assert module.Keyset is ms.Keyset
    with pytest.raises(AttributeError):
        ms.nothing_here  # noqa: B018


#: 0.1.0's other modules (besides the four kept as files) and where each went.
MOVED_MODULES = {
    "binding": "tokens.binding",
    "claims": "tokens.claims",
    "encrypted_keyset": "keys.encryption",
    "envelopes": "tokens.envelopes",
    "formats": "tokens.formats",
    "formats.jws": "tokens.formats.jws",
    "handle_store": "state.handle_store",
    "handles": "state.records",
    "inspection": "tokens.inspection",
    "kek": "keys.kek",
    "kek.passphrase": "keys.kek.passphrase",
    "key_derivation": "keys.derivation",
    "keyfile": "keys.file",
    "keyset": "keys.keyset",
    "keyset_store": "keys.store",
    "keyset_watch": "keys.watch",
    "keytable": "keys.key",
    "lifecycle": "keys.lifecycle",
    "policy": "tokens.policy",
    "registry": "tokens.registry",
}


@pytest.mark.parametrize(("old", "new"), MOVED_MODULES.items())
def test_a_moved_module_imports_by_its_0_1_0_path_and_warns_per_name(old: str, new: str) -> None:
    """``from mrtr_state.keyset import Keyset`` (0.1.0's docs) still works: each name is the
    one of its new module (never a second copy of it), with a warning naming that module."""
    home = importlib.import_module(f"mrtr_state.{new}")
    alias = importlib.import_module(f"mrtr_state.{old}")
    assert alias is not home
    names = getattr(home, "__all__", None) or [n for n in vars(home) if not n.startswith("_")]
    said = rf"mrtr_state\.{re.escape(old)}\.(\w+) .*mrtr_state\.{re.escape(new)}$"
    for name in names:
        with pytest.warns(DeprecationWarning, match=said.replace(r"(\w+)", name)):
            assert getattr(alias, name) is getattr(home, name)
    copies = [m for m in sys.modules.values() if getattr(m, "__file__", 0) == home.__file__]
    assert copies == [home]


def test_the_0_1_0_modules_kept_as_files_are_what_an_attribute_reaches() -> None:
    """``ms.server_state`` and ``ms.mcp`` are the alias modules (their names are 0.1.0's), not
    where most of those names went."""
    with pytest.warns(DeprecationWarning, match=r"mrtr_state\.server_state\.HandleCodec"):
        assert (
            ms.server_state.HandleCodec
            is importlib.import_module("mrtr_state.sdk.codec").HandleCodec
        )
    with pytest.warns(DeprecationWarning, match=r"mrtr_state\.mcp\.KeysetCodec"):
        assert ms.mcp.KeysetCodec is importlib.import_module("mrtr_state.sdk.codec").KeysetCodec


def test_a_path_that_never_was_is_still_no_module() -> None:
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("mrtr_state.keyset.nothing_here")
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("mrtr_state.no_such_module")


def test_the_old_paths_work_as_0_1_0_code_used_them() -> None:
    """A server written against the 0.1.0 docs runs unchanged (with warnings)."""
    keyset = ms.Keyset.generate()
    with pytest.warns(DeprecationWarning, match=r"mrtr_state\.mcp\."):
        from mrtr_state.mcp import KeysetCodec, request_fingerprint
    codec = KeysetCodec(keyset)
    assert codec.keyset is keyset
    assert request_fingerprint("tools/call", {"name": "deploy", "arguments": {}}).startswith(
        "mcp1:"
    )
    with pytest.warns(DeprecationWarning, match=r"mrtr_state\.replay\.open_store"):
        from mrtr_state.replay import open_store
    store = open_store("memory:")
    token = ms.mint(keyset, "s")
    ms.verify(keyset, token, once=store)
    with pytest.raises(ms.Replayed):
        ms.verify(keyset, token, once=store)


# --- what the docs show -------------------------------------------------------------------------

_IMPORT = re.compile(r"^\s*from (mrtr_state[\w.]*) import \(?([\w ,\n]+?)\)?\s*(?:#.*)?$", re.M)


def documented_imports() -> list[tuple[str, str, str]]:
    """Every ``from mrtr_state... import NAME`` in README.md, docs/*.md and examples/*.py:
    (page, module, name)."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    pages += sorted((ROOT / "examples").rglob("*.py"))
    found = []
    for page in pages:
        for match in _IMPORT.finditer(page.read_text()):
            module, names = match.group(1), match.group(2)
            for name in names.replace("\n", " ").split(","):
                name = name.strip().partition(" as ")[0]
                if name:
                    found.append((str(page.relative_to(ROOT)), module, name))
    return found


def test_the_docs_import_something() -> None:
    """The control: the finder finds imports (the test below cannot pass by finding none)."""
    found = documented_imports()
    assert len(found) >= 10
    assert ("docs/library.md", "mrtr_state.state", "TokenBackend") in found


@pytest.mark.parametrize(
    ("page", "module", "name"), documented_imports(), ids=lambda value: str(value)
)
def test_every_import_the_docs_show_works_without_a_warning(
    page: str, module: str, name: str
) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a page shows the new paths, never a deprecated one
        imported = importlib.import_module(module)
        assert hasattr(imported, name) or _is_module(f"{module}.{name}"), (page, module, name)


def _is_module(dotted: str) -> bool:
    try:
        importlib.import_module(dotted)
    except ImportError:
        return False
    return True


def test_no_page_names_a_module_path_that_does_not_exist() -> None:
    """``mrtr_state.x.y`` written in a page (``:::`` references, prose) names a module or a
    name in one."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    problems = []
    for page in pages:
        for dotted in set(re.findall(r"\bmrtr_state(?:\.[a-z_][\w]*)+", page.read_text())):
            if not _resolves(dotted):
                problems.append(f"{page.name}: {dotted}")
    assert problems == []


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        module = ".".join(parts[:cut])
        if _is_module(module):
            value: object = importlib.import_module(module)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                for attribute in parts[cut:]:
                    if not hasattr(value, attribute):
                        return False
                    value = getattr(value, attribute)
            return True
    return False


def test_old_module_files_are_only_aliases() -> None:
    """The deprecated paths hold no code of their own: each hands its names on."""
    for name in ("mcp", "sdk_codec", "server_state", "replay"):
        text = (Path(ms.__file__).parent / f"{name}.py").read_text()
        assert "__getattr__, __dir__ = _moved(__name__, _HOMES)" in text
        assert "def " not in text and "class " not in text
