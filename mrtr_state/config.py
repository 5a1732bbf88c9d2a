"""Settings from flags, environment and one TOML file, in that order of precedence.

One file only (``--config``, else ``MRTR_STATE_CONFIG``, else ``mrtr-state.toml`` beside a keyset
named by ``--keyset`` or ``MRTR_STATE_KEYSET``, else ``mrtr-state.toml`` in the working folder),
owned by the running user or root and writable by nobody else, flat keys, unknown keys refused:
a typo such as ``tll = 30`` must not silently leave the default TTL in force. A relative
``keyset`` path in the file is taken relative to the file, so a config works the same from any
working folder.

    keyset = "keys/keyset.json"
    format = "aead"
    ttl = "5m"             # durations or whole seconds
    ttl_cap = "1h"
    audience = "https://mcp.example.com"
    max_size = 8192
    propagation = "1h"     # how long a new key stays pending before rotate promotes it
    retention = "61m"      # default: ttl_cap + 60 s of clock skew
    rotate_every = "30d"   # how long a primary mints before rotate replaces it
    replay_store = "sqlite:////var/lib/mcp/replay.db"   # for verify --once

A keyset may also come inline from ``MRTR_STATE_KEYSET_JSON`` (containers that get secrets through
the environment). It beats a keyset path from the environment or the file, not ``--keyset``, and
it is read-only: commands that write keys refuse it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .durations import parse_duration
from .errors import ConfigError
from .formats import FORMAT_NAMES
from .policy import (
    DEFAULT_POLICY,
    DEFAULT_PROPAGATION,
    DEFAULT_ROTATE_EVERY,
    Policy,
    default_retention,
)

__all__ = ["DEFAULT_CONFIG_NAME", "DEFAULT_KEYSET", "Settings", "load_settings"]

DEFAULT_KEYSET = Path("keys/keyset.json")
DEFAULT_CONFIG_NAME = "mrtr-state.toml"
_INTEGERS = ("max_size",)
_DURATIONS = ("ttl", "ttl_cap", "propagation", "retention", "rotate_every")
_TEXTS = ("keyset", "format", "audience", "replay_store")
_KNOWN = frozenset({*_TEXTS, *_INTEGERS, *_DURATIONS})
KEYSET_JSON_ENV = "MRTR_STATE_KEYSET_JSON"
ENV_PREFIX = "MRTR_STATE_"


@dataclass(frozen=True)
class Settings:
    keyset_path: Path
    keyset_is_default: bool
    format: str
    audience: str | None
    policy: Policy
    config_path: Path | None
    propagation: int = DEFAULT_PROPAGATION
    retention: int = default_retention()
    rotate_every: int = DEFAULT_ROTATE_EVERY
    keyset_json: str | None = None  # the inline keyset of MRTR_STATE_KEYSET_JSON, if in force
    replay_store: str = "memory:"
    #: Where each setting that was given came from: "--flag", "MRTR_STATE_X" or the config file.
    sources: Mapping[str, str] = field(default_factory=dict)

    def source_of(self, name: str) -> str:
        """Where setting ``name`` was set, for messages that tell the user what to change."""
        return self.sources.get(name, "the default")

    @property
    def keyset_source(self) -> str:
        return KEYSET_JSON_ENV if self.keyset_json is not None else str(self.keyset_path)


def _check_owner(path: Path, handle: Any) -> None:
    """Refuse a config file another user could have written: it chooses the keyset and the caps.

    Owned by the running user or by root, and writable by nobody else (a config in a shared
    folder such as /tmp, or a group-writable one, could point verification at a keyset of the
    writer's choosing or raise ttl_cap).
    """
    info = os.fstat(handle.fileno())
    euid = os.geteuid()
    if info.st_uid not in (euid, 0):
        raise ConfigError(
            f"config file {path} belongs to uid {info.st_uid}, not to you (uid {euid}) or root: "
            "refused, since it decides which keyset to trust"
        )
    if info.st_mode & 0o022:
        raise ConfigError(
            f"config file {path} is writable by group or others (mode "
            f"{info.st_mode & 0o777:04o}): refused; fix with: chmod go-w {path}"
        )


def _read_file(path: Path) -> dict[str, Any]:
    import tomllib  # deferred: most runs have no config file

    try:
        with path.open("rb") as handle:
            _check_owner(path, handle)
            data = tomllib.load(handle)
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except OSError as err:
        raise ConfigError(f"cannot read config file {path}: {err.strerror}") from None
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"config file {path} is not valid TOML: {err}") from None
    unknown = sorted(set(data) - _KNOWN)
    if unknown:
        raise ConfigError(
            f"config file {path}: unknown setting {', '.join(unknown)}; "
            f"known: {', '.join(sorted(_KNOWN))}"
        )
    if isinstance(data.get("keyset"), str) and data["keyset"]:
        data["keyset"] = str(path.parent / data["keyset"])
    return data


def _from_env(env: Mapping[str, str]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for name in _KNOWN:
        value = env.get(ENV_PREFIX + name.upper())
        if value is None or value == "":
            continue
        if name in _INTEGERS:
            try:
                found[name] = int(value)
            except ValueError:
                raise ConfigError(
                    f"{ENV_PREFIX}{name.upper()}={value!r} is not a whole number"
                ) from None
        else:
            found[name] = value
    return found


def load_settings(
    flags: Mapping[str, Any] | None = None,
    *,
    config: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> Settings:
    """Resolve settings: ``flags`` (None values ignored) beat ``env`` beats the file beats defaults.

    The file is the first of: ``config``; ``$MRTR_STATE_CONFIG``; ``mrtr-state.toml`` beside the
    keyset when the keyset is named by a flag or ``$MRTR_STATE_KEYSET`` (so a cron job run from
    ``/`` finds the config kept with its keyset); ``mrtr-state.toml`` in ``cwd``. Only one file
    is read, and it must belong to the running user or root and be writable by nobody else.
    """
    env = os.environ if env is None else env
    folder = Path.cwd() if cwd is None else cwd
    chosen = config if config is not None else env.get("MRTR_STATE_CONFIG") or None
    named_keyset = (flags or {}).get("keyset") or env.get("MRTR_STATE_KEYSET") or None
    beside = Path(named_keyset).parent / DEFAULT_CONFIG_NAME if named_keyset else None
    config_path: Path | None
    if chosen is not None:
        config_path = Path(chosen)
        file_values = _read_file(config_path)
    elif beside is not None and beside.is_file():
        config_path = beside
        file_values = _read_file(config_path)
    elif (folder / DEFAULT_CONFIG_NAME).is_file():
        config_path = folder / DEFAULT_CONFIG_NAME
        file_values = _read_file(config_path)
    else:
        config_path, file_values = None, {}
    from_env = _from_env(env)
    given_flags = {k: v for k, v in (flags or {}).items() if v is not None}
    merged: dict[str, Any] = {**file_values, **from_env, **given_flags}
    sources = dict.fromkeys(file_values, f"config file {config_path}")
    sources.update({name: ENV_PREFIX + name.upper() for name in from_env})
    sources.update({name: "--" + name.replace("_", "-") for name in given_flags})

    for name in _INTEGERS:
        if name in merged and type(merged[name]) is not int:
            raise ConfigError(f"setting {name} must be a whole number, got {merged[name]!r}")
    for name in _DURATIONS:
        value = merged.get(name)
        if isinstance(value, str):
            try:
                merged[name] = parse_duration(value)
            except ValueError as err:
                where = sources.get(name, "?")
                raise ConfigError(f"setting {name} (from {where}): {err}") from None
        elif value is not None and (type(value) is not int or value < 0):
            raise ConfigError(f"setting {name} must be a duration, got {value!r}")
    for name in _TEXTS:
        if name in merged and (not isinstance(merged[name], str) or not merged[name]):
            raise ConfigError(f"setting {name} must be a non-empty string")
    fmt = merged.get("format", "aead")
    if fmt not in FORMAT_NAMES:
        raise ConfigError(f"unknown format {fmt!r}; known: {', '.join(FORMAT_NAMES)}")
    try:
        policy = Policy(
            ttl=merged.get("ttl", DEFAULT_POLICY.ttl),
            ttl_cap=merged.get("ttl_cap", DEFAULT_POLICY.ttl_cap),
            max_size=merged.get("max_size", DEFAULT_POLICY.max_size),
        )
    except ValueError as err:
        raise ConfigError(f"invalid settings: {err}") from None
    keyset = merged.get("keyset")
    inline = env.get(KEYSET_JSON_ENV) or None
    flagged = (flags or {}).get("keyset") is not None
    return Settings(
        keyset_path=Path(keyset) if keyset else DEFAULT_KEYSET,
        keyset_is_default=keyset is None and inline is None,
        format=fmt,
        audience=merged.get("audience"),
        policy=policy,
        config_path=config_path,
        propagation=merged.get("propagation", DEFAULT_PROPAGATION),
        rotate_every=merged.get("rotate_every", DEFAULT_ROTATE_EVERY),
        retention=merged.get("retention", default_retention(policy.ttl_cap, policy.skew)),
        keyset_json=None if flagged else inline,
        replay_store=merged.get("replay_store", "memory:"),
        sources=sources,
    )
