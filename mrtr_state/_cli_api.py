"""The command line's one door into the library beyond its public API (``mrtr_state``).

``mrtr_state.cli`` imports ``mrtr_state`` (the public API) and this module, nothing else of the
package: everything an operator's commands need that a library user does not (reading settings
and secrets, key lifecycle steps, the strict reader for what is typed, the proxy's parts) is
named here once, so the boundary is one list to read and change. docs/development.md says so.

Each name is imported from its module on first use (PEP 562), as in ``mrtr_state``: a command
loads what it runs, and ``mrtr-state --help`` loads none of it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._encoding import EncodingError, json_dumps, json_loads, report_json
    from ._printable import printable, terminal_json
    from .about import build_info
    from .audit.capture import FINDING_KINDS, audit_capture
    from .audit.doctor import diagnose, effective_settings
    from .config import KEYSET_JSON_ENV, Settings, load_settings
    from .durations import format_duration, parse_duration
    from .errors import UnknownHandle
    from .keys.file import (
        check_writable,
        decode_secret,
        encode_secret,
        read_secret,
        text_secret,
        write_secret_file,
    )
    from .keys.kek import Kek, kek_from_uri
    from .keys.kek import set_prompter as set_kek_prompter
    from .keys.lifecycle import (
        Change,
        check_period,
        check_retention,
        due_list,
        promote,
        prune,
        retire,
        rotate,
        timeline,
    )
    from .keys.store import listed_without_kek
    from .probe import CHECKS as PROBE_CHECKS
    from .probe import ProbeSettings, parse_header, run_probe, sarif_log
    from .probe import Target as ProbeTarget
    from .probe import plan as probe_plan
    from .proxy import server as proxy_server
    from .proxy.admin import AdminApp
    from .proxy.app import ProxyApp
    from .proxy.log import json_lines
    from .proxy.metrics import ProxyMetrics
    from .proxy.rewrite import StateGuard
    from .server_state import inspect_handle, verify_handle
    from .state.handle_store import open_handle_store
    from .state.handles import HandleBackend
    from .state.redis.url import shown as url_shown
    from .state.tokens import TokenBackend
    from .tokens.binding import binding_of
    from .tokens.registry import (
        FORMAT_NAMES,
        KEY_ALGORITHMS,
        OWN_ALGORITHMS,
        SDK_SECRET_BYTES,
        carries_audience,
        key_algorithm_of,
        sdk_kid_problem,
        secret_length_ok,
        secret_rule,
    )

__all__ = [
    "FINDING_KINDS",
    "FORMAT_NAMES",
    "KEYSET_JSON_ENV",
    "KEY_ALGORITHMS",
    "OWN_ALGORITHMS",
    "PROBE_CHECKS",
    "SDK_SECRET_BYTES",
    "AdminApp",
    "Change",
    "EncodingError",
    "HandleBackend",
    "Kek",
    "ProbeSettings",
    "ProbeTarget",
    "ProxyApp",
    "ProxyMetrics",
    "Settings",
    "StateGuard",
    "TokenBackend",
    "UnknownHandle",
    "audit_capture",
    "binding_of",
    "build_info",
    "carries_audience",
    "check_period",
    "check_retention",
    "check_writable",
    "decode_secret",
    "diagnose",
    "due_list",
    "effective_settings",
    "encode_secret",
    "format_duration",
    "inspect_handle",
    "json_dumps",
    "json_lines",
    "json_loads",
    "kek_from_uri",
    "key_algorithm_of",
    "listed_without_kek",
    "load_settings",
    "open_handle_store",
    "parse_duration",
    "parse_header",
    "printable",
    "probe_plan",
    "promote",
    "proxy_server",
    "prune",
    "read_secret",
    "report_json",
    "retire",
    "rotate",
    "run_probe",
    "sarif_log",
    "sdk_kid_problem",
    "secret_length_ok",
    "secret_rule",
    "set_kek_prompter",
    "terminal_json",
    "text_secret",
    "timeline",
    "url_shown",
    "verify_handle",
    "write_secret_file",
]

#: name -> (module, name in that module)
_WHERE = {
    "report_json": ("_encoding", "report_json"),
    "EncodingError": ("_encoding", "EncodingError"),
    "json_dumps": ("_encoding", "json_dumps"),
    "json_loads": ("_encoding", "json_loads"),
    "printable": ("_printable", "printable"),
    "terminal_json": ("_printable", "terminal_json"),
    "url_shown": ("state.redis.url", "shown"),
    "HandleBackend": ("state.handles", "HandleBackend"),
    "TokenBackend": ("state.tokens", "TokenBackend"),
    "build_info": ("about", "build_info"),
    "UnknownHandle": ("errors", "UnknownHandle"),
    "diagnose": ("audit.doctor", "diagnose"),
    "effective_settings": ("audit.doctor", "effective_settings"),
    "inspect_handle": ("state.handles", "inspect_handle"),
    "verify_handle": ("state.handles", "verify_handle"),
    "FINDING_KINDS": ("audit.capture", "FINDING_KINDS"),
    "audit_capture": ("audit.capture", "audit_capture"),
    "binding_of": ("tokens.binding", "binding_of"),
    "KEYSET_JSON_ENV": ("config", "KEYSET_JSON_ENV"),
    "Settings": ("config", "Settings"),
    "load_settings": ("config", "load_settings"),
    "format_duration": ("durations", "format_duration"),
    "parse_duration": ("durations", "parse_duration"),
    "open_handle_store": ("state.handle_store", "open_handle_store"),
    "Kek": ("keys.kek", "Kek"),
    "kek_from_uri": ("keys.kek", "kek_from_uri"),
    "set_kek_prompter": ("keys.kek", "set_prompter"),
    "check_writable": ("keys.file", "check_writable"),
    "decode_secret": ("keys.file", "decode_secret"),
    "encode_secret": ("keys.file", "encode_secret"),
    "read_secret": ("keys.file", "read_secret"),
    "text_secret": ("keys.file", "text_secret"),
    "write_secret_file": ("keys.file", "write_secret_file"),
    "listed_without_kek": ("keys.store", "listed_without_kek"),
    "Change": ("keys.lifecycle", "Change"),
    "check_period": ("keys.lifecycle", "check_period"),
    "check_retention": ("keys.lifecycle", "check_retention"),
    "due_list": ("keys.lifecycle", "due_list"),
    "promote": ("keys.lifecycle", "promote"),
    "prune": ("keys.lifecycle", "prune"),
    "retire": ("keys.lifecycle", "retire"),
    "rotate": ("keys.lifecycle", "rotate"),
    "timeline": ("keys.lifecycle", "timeline"),
    "PROBE_CHECKS": ("probe", "CHECKS"),
    "ProbeSettings": ("probe", "ProbeSettings"),
    "ProbeTarget": ("probe", "Target"),
    "parse_header": ("probe", "parse_header"),
    "probe_plan": ("probe", "plan"),
    "run_probe": ("probe", "run_probe"),
    "sarif_log": ("probe", "sarif_log"),
    "proxy_server": ("proxy", "server"),
    "AdminApp": ("proxy.admin", "AdminApp"),
    "ProxyApp": ("proxy.app", "ProxyApp"),
    "json_lines": ("proxy.log", "json_lines"),
    "ProxyMetrics": ("proxy.metrics", "ProxyMetrics"),
    "StateGuard": ("proxy.rewrite", "StateGuard"),
    "FORMAT_NAMES": ("tokens.registry", "FORMAT_NAMES"),
    "KEY_ALGORITHMS": ("tokens.registry", "KEY_ALGORITHMS"),
    "OWN_ALGORITHMS": ("tokens.registry", "OWN_ALGORITHMS"),
    "SDK_SECRET_BYTES": ("tokens.registry", "SDK_SECRET_BYTES"),
    "key_algorithm_of": ("tokens.registry", "key_algorithm_of"),
    "carries_audience": ("tokens.registry", "carries_audience"),
    "sdk_kid_problem": ("tokens.registry", "sdk_kid_problem"),
    "secret_length_ok": ("tokens.registry", "secret_length_ok"),
    "secret_rule": ("tokens.registry", "secret_rule"),
}


def __getattr__(name: str) -> Any:
    import importlib

    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, attribute = where
    if module == "proxy" and attribute == "server":  # a module, not a name in one
        value = importlib.import_module(f"{__package__}.proxy.server")
    else:
        value = getattr(importlib.import_module(f"{__package__}.{module}"), attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
