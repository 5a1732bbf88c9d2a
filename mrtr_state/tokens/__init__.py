"""Tokens: what a requestState token is, how it is made and checked.

The wing holds the claims and the binding a token carries (:mod:`.claims`, :mod:`.binding`), the
policy bounding them (:mod:`.policy`), one module per wire format (:mod:`.formats`) and one
accepting run per envelope (:mod:`.envelopes`), the table pairing them (:mod:`.registry`), and
the facade where keyset, format and envelope meet (:mod:`.facade`: mint, verify, inspect, seal,
unseal), whose names this package hands on too (``mrtr_state.tokens.mint``, as in 0.1.0).
"""

from typing import Any


def __getattr__(name: str) -> Any:
    # imported on first use (PEP 562): a module of the wing that needs only the claims does not
    # load every format through the facade
    import importlib

    # importlib rather than "from . import": that asks this very __getattr__ for the module
    module = importlib.import_module(f"{__name__}.facade")
    if name not in module.__all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(module, name)
