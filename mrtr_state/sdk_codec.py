"""Deprecated since 0.2.0: ``mrtr_state.sdk_codec``, the SDK codec, moved to
:mod:`mrtr_state.sdk.codec`. This module keeps the 0.1.0 import working and warns, naming each
name's new home; it goes in a later release."""

from . import _moved

_HOMES = {
    "KeysetCodec": "mrtr_state.sdk.codec",
    "ReplayGuard": "mrtr_state.sdk.codec",
}

__getattr__, __dir__ = _moved(__name__, _HOMES)
