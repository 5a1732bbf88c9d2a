"""Deprecated since 0.2.0: ``mrtr_state.mcp``, the MCP helpers, moved to :mod:`mrtr_state.sdk.mcp`
(``KeysetCodec`` and ``HandleCodec``: :mod:`mrtr_state.sdk.codec`). This module keeps the 0.1.0
import working and warns, naming each name's new home; it goes in a later release."""

from . import _moved

_HOMES = {
    "CAPABILITIES_META_KEY": "mrtr_state.sdk.mcp",
    "CapabilityMissing": "mrtr_state.sdk.mcp",
    "HandleCodec": "mrtr_state.sdk.codec",
    "INPUT_REQUIRED_METHODS": "mrtr_state.sdk.mcp",
    "KeysetCodec": "mrtr_state.sdk.codec",
    "ReplayGuard": "mrtr_state.sdk.codec",
    "check_capabilities": "mrtr_state.sdk.mcp",
    "input_required_result": "mrtr_state.sdk.mcp",
    "open_retry": "mrtr_state.sdk.mcp",
    "request_fingerprint": "mrtr_state.sdk.mcp",
    "request_target": "mrtr_state.sdk.mcp",
    "retry_binding": "mrtr_state.sdk.mcp",
    "retry_target": "mrtr_state.sdk.mcp",
    "verify_retry": "mrtr_state.sdk.mcp",
    "wire_error": "mrtr_state.sdk.mcp",
}

__getattr__, __dir__ = _moved(__name__, _HOMES)
