"""The package's layers: imports point down only, and nothing imports in a circle.

Read from the source (every import a module runs, at its top or inside a function; imports made
only for type checking are left out), so a new import that runs back up a layer fails here
rather than in a reviewer's head. The layers are those of docs/development.md.
"""

from __future__ import annotations

import ast
from pathlib import Path

import mrtr_state

PACKAGE = Path(mrtr_state.__file__).resolve().parent

#: Lowest first. A module may import from its own layer's other modules only where listed in
#: SIDEWAYS, and from any layer below. Units are the package's top-level modules and, inside a
#: wing (SPLIT), its modules and sub-packages: a wing spans several layers.
LAYERS: list[set[str]] = [
    {"errors", "_entropy", "_printable", "durations", "about", "tokens.policy"}
    | {"state.blocking", "state.backend"},
    {"_encoding", "tokens.surrogates", "state.redis"},
    {"_primitives", "keys.derivation"},
    {"tokens.claims", "tokens.binding", "tokens.principal"},
    {"tokens.formats", "tokens.envelopes"},  # siblings: neither imports the other
    {"tokens.registry"},  # the one format table: pairs wires with envelopes
    {"keys.key"},
    {
        "keys.file",
        "keys.kek",
        "keys.encryption",
        "keys.store",
        "keys.watch",
        "state.replay",
        "state.records",
        "state.handle_store",
    },
    {"keys.keyset"},
    {"tokens.inspection"},
    {"tokens.facade", "tokens"},
    {"sdk.mcp", "keys.lifecycle", "config", "state.tokens", "state.handles", "state", "keys"},
    {"sdk.codec", "sdk", "audit.capture", "audit.doctor", "audit", "proxy", "probe"},
    {"_cli_api", "__init__", "__main__", "_launch"},
    # the deprecated 0.1.0 paths: the package's alias helper; what moved, only when asked for
    {"mcp", "replay", "sdk_codec", "server_state"},
    {"cli"},
]
#: Imports within one layer that are allowed (importer, imported).
SIDEWAYS = {
    ("tokens.binding", "tokens.claims"),
    ("keys.encryption", "keys.kek"),
    ("keys.kek", "keys.file"),
    ("state.replay", "keys.file"),
    ("keys.store", "keys.file"),
    ("keys.store", "keys.encryption"),
    ("keys.store", "keys.kek"),
    ("keys.watch", "keys.file"),
    ("keys.watch", "keys.store"),
    ("keys.watch", "keys.encryption"),
    # a wing's __init__ hands on its facade's names, imported on first use
    ("tokens", "tokens.facade"),
    ("audit", "audit.capture"),
    ("__main__", "_launch"),
    ("_launch", "cli"),
}
#: The wings whose modules sit in layers of their own: their unit is two names deep.
SPLIT = {"keys", "tokens", "state", "sdk", "audit"}


def _unit(module: str) -> str:
    """The layer unit of a module: its top-level name under the package (``proxy`` for
    ``proxy.app``), or two names within a wing (``tokens.formats`` for
    ``tokens.formats.jws``, ``state.redis`` for ``state.redis.client``)."""
    if not module:
        return "__init__"
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] in SPLIT else parts[0]


def _layer(unit: str) -> int:
    for index, layer in enumerate(LAYERS):
        if unit in layer:
            return index
    raise AssertionError(f"{unit} is in no layer: add it to LAYERS (and docs/development.md)")


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def _imports(name: str, path: Path) -> set[str]:
    """The package modules ``name`` imports when it runs (not those it imports for types)."""
    tree = ast.parse(path.read_text())
    typing_only: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            typing_only.update(id(sub) for sub in ast.walk(node))
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = set()
    for node in ast.walk(tree):
        if id(node) in typing_only or not isinstance(node, ast.ImportFrom) or not node.level:
            continue
        base = package[: len(package) - (node.level - 1)]
        target = ".".join([*base, *([node.module] if node.module else [])])
        for alias in node.names:
            full = f"{target}.{alias.name}".strip(".")
            found.add(full if full in _MODULES else target.strip("."))
    found.discard(name)
    return found


_MODULES = _modules()


def test_imports_point_down_only() -> None:
    upward = []
    for name, path in _MODULES.items():
        unit = _unit(name)
        for imported in _imports(name, path):
            other = _unit(imported)
            if other == unit or (unit, other) in SIDEWAYS:
                continue
            if _layer(other) >= _layer(unit):
                upward.append(f"{name} -> {imported}")
    assert not upward, upward


def test_nothing_imports_in_a_circle() -> None:
    graph = {name: _imports(name, path) for name, path in _MODULES.items()}
    circles = []
    for start in graph:
        stack: list[tuple[str, tuple[str, ...]]] = [(start, (start,))]
        seen: set[str] = set()
        while stack:
            node, trail = stack.pop()
            for nxt in graph.get(node, ()):
                if nxt == start:
                    circles.append(" -> ".join((*trail, nxt)))
                elif nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, (*trail, nxt)))
    # the kek package's __init__ and its providers (a package-init pattern, outside the token
    # path) are the one circle left; see docs/development.md
    assert all(circle.startswith("keys.kek") for circle in circles), circles


def test_formats_and_envelopes_never_import_each_other_or_the_table() -> None:
    for name, path in _MODULES.items():
        unit = _unit(name)
        if unit not in ("tokens.formats", "tokens.envelopes"):
            continue
        other = "tokens.envelopes" if unit == "tokens.formats" else "tokens.formats"
        above = (other, "tokens.registry", "keys.keyset", "keys.key")
        for imported in _imports(name, path):
            assert _unit(imported) not in above, (
                name,
                imported,
            )


def test_the_layer_test_sees_imports_inside_functions() -> None:
    """The control: a function-level import counts (the tokens facade imports the replay store
    inside a function), so the test above cannot pass by looking only at module tops."""
    facade = PACKAGE / "tokens" / "facade.py"
    assert "state.replay" in {_unit(imported) for imported in _imports("tokens.facade", facade)}


def test_the_cli_uses_the_public_api_and_its_one_internal_door() -> None:
    """The command line imports ``mrtr_state`` (the public API) and ``mrtr_state._cli_api``
    (docs/development.md, "The CLI's boundary"), and its own modules; nothing else."""
    beyond = {
        f"{name} -> {imported}"
        for name, path in _MODULES.items()
        if _unit(name) == "cli"
        for imported in _imports(name, path)
        if _unit(imported) not in ("cli", "__init__", "_cli_api")
    }
    assert not beyond, beyond
