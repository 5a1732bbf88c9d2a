"""Every error message mrtr-state can print, found by reading its source.

A message is the text given to an error when it is made: the first argument of a call to one of
the library's error classes (``InvalidClaims("...")``, wherever it is built: raised, returned by
an envelope's ``_refusal``, kept for later), of ``ValueError`` and the strict JSON reader's
``EncodingError`` (the CLI prints both), of click's ``UsageError``/``BadParameter``/
``ClickException``, and of the CLI's ``fail()``. Its text is a literal, an f-string, a
concatenation, a choice (``a if c else b``: each branch is a message of its own), a module's
constant, a local variable assigned any of those, or a call of a function of the package that
returns one. What a placeholder holds (a path, a number, another error's text) is not known here;
each message becomes its *fixed parts*, the literal runs between placeholders, in order.

Left out, each for its reason: ``mrtr_state/proxy/`` (what the running proxy refuses goes to the
client as an HTTP status and JSON-RPC error and to its log, not to a terminal; its start-up
errors are in ``cli/proxy.py``, which is read); ``TypeError``, ``AttributeError`` and
``AssertionError`` (a Python caller's mistake or an internal invariant, never printed by the
CLI).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import mrtr_state.errors as errors

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "mrtr_state"
SKIPPED = ("proxy",)

#: A placeholder between two fixed parts.
HOLE = object()

_ERROR_CLASSES = {
    name
    for name, value in vars(errors).items()
    if isinstance(value, type) and issubclass(value, Exception)
}
_OTHER_CLASSES = {
    "ValueError",
    "EncodingError",
    "ConfigError",
    "_Unusable",
    "_MalformedInput",
    "NoToken",
}
_CLICK = {"UsageError", "BadParameter", "ClickException"}


@dataclass(frozen=True)
class Message:
    """One message as the code can make it: where, and its fixed parts in order."""

    path: str
    line: int
    kind: str
    parts: tuple[str, ...]

    def __str__(self) -> str:
        return " ... ".join(self.parts)


def _is_message_call(node: ast.Call) -> bool:
    func = node.func
    name = (
        func.id
        if isinstance(func, ast.Name)
        else func.attr
        if isinstance(func, ast.Attribute)
        else ""
    )
    if name == "fail" and isinstance(func, ast.Name):
        return True
    if name in _CLICK:
        return ast.unparse(func).startswith("click.")
    return name in _ERROR_CLASSES or name in _OTHER_CLASSES


class _Module:
    """One source file: its constants and functions, to resolve names a message uses."""

    def __init__(self, path: Path, functions: dict[str, list[ast.expr]]) -> None:
        self.path = path
        self.tree = ast.parse(path.read_text())
        self.functions = functions
        self.constants: dict[str, ast.expr] = {}
        for node in self.tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                target = node.targets[0]
                if isinstance(target, ast.Name) and _stringish(node.value):
                    self.constants[target.id] = node.value
            elif (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and node.value is not None
                and _stringish(node.value)
            ):
                self.constants[node.target.id] = node.value


def _stringish(node: ast.expr) -> bool:
    return (isinstance(node, ast.Constant) and isinstance(node.value, str)) or isinstance(
        node, ast.JoinedStr | ast.BinOp | ast.IfExp
    )


def _variants(
    node: ast.expr, module: _Module, local: dict[str, list[ast.expr]], depth: int = 0
) -> list[list[object]]:
    """Every sequence of fixed parts and holes ``node`` can evaluate to."""
    if depth > 6:
        return [[HOLE]]
    again = depth + 1
    if isinstance(node, ast.Constant):
        return [[node.value]] if isinstance(node.value, str) else [[HOLE]]
    if isinstance(node, ast.JoinedStr):
        out: list[list[object]] = [[]]
        for value in node.values:
            pieces: list[list[object]]
            if isinstance(value, ast.Constant):
                pieces = [[value.value]]
            else:
                assert isinstance(value, ast.FormattedValue)
                inner = value.value
                resolvable = isinstance(inner, ast.Name | ast.Call) and value.format_spec is None
                pieces = _variants(inner, module, local, again) if resolvable else [[HOLE]]
            out = [a + b for a in out for b in pieces]
        return out
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left = _variants(node.left, module, local, again)
        right = _variants(node.right, module, local, again)
        return [a + b for a in left for b in right]
    if isinstance(node, ast.IfExp):
        # each branch is a message of its own, unless one is unknown: then so is the choice
        branches = _variants(node.body, module, local, again) + _variants(
            node.orelse, module, local, again
        )
        return [[HOLE]] if [HOLE] in branches else branches
    if isinstance(node, ast.Name):
        if node.id in local:
            found = [v for value in local[node.id] for v in _variants(value, module, {}, again)]
            return found or [[HOLE]]
        if node.id in module.constants:
            return _variants(module.constants[node.id], module, {}, again)
        return [[HOLE]]
    if isinstance(node, ast.Call):
        func = node.func
        name = func.id if isinstance(func, ast.Name) else ""
        returns = module.functions.get(name, [])
        found = [v for value in returns for v in _variants(value, module, {}, again)]
        # a helper that words part of a message (``_fix``), not one that formats a value
        # (``format_duration``: "5 min"): each of its texts has a part of three words or more
        if found and all(any(len(p.split()) >= 3 for p in _parts(v)) for v in found):
            return found
    return [[HOLE]]


def _parts(sequence: list[object]) -> tuple[str, ...]:
    """The fixed parts of one variant: adjacent literals joined, whitespace runs made one space,
    parts with no letter in them (``": "``, ``")"``) dropped."""
    parts: list[str] = []
    current = ""
    for item in [*sequence, HOLE]:
        if item is HOLE:
            text = " ".join(current.split()).strip(" ;,:").removeprefix(")").strip(" ;,:")
            if any(c.isalpha() for c in text):
                parts.append(text)
            current = ""
        else:
            assert isinstance(item, str)
            current += item
    return tuple(parts)


def _function_returns(trees: list[ast.Module]) -> dict[str, list[ast.expr]]:
    """What each function of the package returns, when it returns text: a message helper."""
    returns: dict[str, list[ast.expr]] = {}
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef):
                for inner in ast.walk(node):
                    if (
                        isinstance(inner, ast.Return)
                        and inner.value is not None
                        and _stringish(inner.value)
                    ):
                        returns.setdefault(node.name, []).append(inner.value)
    return returns


def _sources() -> list[Path]:
    return [
        path
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.relative_to(PACKAGE).parts[0] not in SKIPPED
    ]


def messages() -> Iterator[Message]:
    paths = _sources()
    functions = _function_returns([ast.parse(path.read_text()) for path in paths])
    for path in paths:
        module = _Module(path, functions)
        for function in [module.tree, *ast.walk(module.tree)]:
            if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef | ast.Module):
                continue
            local: dict[str, list[ast.expr]] = {}
            body = list(ast.walk(function)) if not isinstance(function, ast.Module) else []
            for node in body:
                if isinstance(node, ast.Assign) and len(node.targets) == 1:
                    target = node.targets[0]
                    if isinstance(target, ast.Name) and _stringish(node.value):
                        local.setdefault(target.id, []).append(node.value)
            calls = (
                node
                for node in body
                if isinstance(node, ast.Call) and _is_message_call(node) and node.args
            )
            for call in calls:
                for variant in _variants(call.args[0], module, local):
                    parts = _parts(variant)
                    if parts:
                        relative = str(path.relative_to(ROOT))
                        kind = ast.unparse(call.func).rsplit(".", 1)[-1]
                        yield Message(relative, call.lineno, kind, parts)


def unique_messages() -> list[Message]:
    """Each distinct message once (the first place that makes it)."""
    seen: dict[tuple[str, ...], Message] = {}
    for message in messages():
        seen.setdefault(message.parts, message)
    return list(seen.values())


def _normal(text: str) -> str:
    return " ".join(text.split())


def entries(page: str) -> list[str]:
    """The places a message may be documented in: each table row, and each paragraph; a code
    span's backticks and a table cell's escaped pipe read as the text they stand for."""
    found: list[str] = []
    paragraph: list[str] = []
    for line in [*page.splitlines(), ""]:
        if line.startswith("|"):
            found.append(line)
        elif line.strip():
            paragraph.append(line)
            continue
        if paragraph:
            found.append(" ".join(paragraph))
            paragraph = []
    return [_normal(entry.replace("\\|", "|").replace("`", "")) for entry in found]


def documented(message: Message, places: list[str]) -> bool:
    """Whether one entry holds every fixed part of ``message``, verbatim and in order."""
    for place in places:
        at = 0
        for part in message.parts:
            at = place.find(part, at)
            if at < 0:
                break
            at += len(part)
        else:
            return True
    return False
