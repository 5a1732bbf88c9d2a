"""Checks from outside the request path: a captured MCP session against the spec (:mod:`.capture`,
``mrtr-state audit``) and a deployment's settings, keyset, KEK, stores and clock (:mod:`.doctor`,
``mrtr-state doctor``). The capture auditor's names are handed on here too, as in 0.1.0."""

from typing import Any


def __getattr__(name: str) -> Any:
    import importlib

    # importlib rather than "from . import": that asks this very __getattr__ for the module
    module = importlib.import_module(f"{__name__}.capture")
    if name not in module.__all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(module, name)
