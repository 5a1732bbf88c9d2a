"""Deprecated since 0.2.0: ``mrtr_state.replay``, the replay stores, moved to
:mod:`mrtr_state.state.replay` (``open_store`` and ``ReplayStore`` are in :mod:`mrtr_state` too).
This module keeps the 0.1.0 import working and warns, naming each name's new home; it goes in a
later release."""

from . import _moved

_HOMES = {
    "DEFAULT_HORIZON": "mrtr_state.state.replay",
    "DEFAULT_MAX_SKEW": "mrtr_state.state.replay",
    "MemoryStore": "mrtr_state.state.replay",
    "RedisStore": "mrtr_state.state.replay",
    "ReplayStore": "mrtr_state.state.replay",
    "SqliteStore": "mrtr_state.state.replay",
    "open_store": "mrtr_state.state.replay",
    "token_key": "mrtr_state.state.replay",
}

__getattr__, __dir__ = _moved(__name__, _HOMES)
