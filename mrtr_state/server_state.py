"""Deprecated since 0.2.0: ``mrtr_state.server_state``, handles as a library, moved to
:mod:`mrtr_state.state.handles` (``verify_handle``, ``inspect_handle``) and
:mod:`mrtr_state.sdk.codec` (``HandleCodec``). This module keeps the 0.1.0 import working and warns,
naming each name's new home; it goes in a later release."""

from . import _moved

_HOMES = {
    "HandleCodec": "mrtr_state.sdk.codec",
    "inspect_handle": "mrtr_state.state.handles",
    "verify_handle": "mrtr_state.state.handles",
}

__getattr__, __dir__ = _moved(__name__, _HOMES)
