"""Checks from outside the request path: a captured MCP session against the spec (:mod:`.capture`,
``mrtr-state audit``) and a deployment's settings, keyset, KEK, stores and clock (:mod:`.doctor`,
``mrtr-state doctor``). The capture auditor's names are handed on here too, as in 0.1.0."""

from typing import Any


def __getattr__(name: str) -> Any:
    from . import capture

    if name not in capture.__all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(capture, name)
