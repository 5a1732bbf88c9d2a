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
    ttl_cap = "1h"         # or "none": verifiers accept any lifetime (rotate refuses it)
    audience = "https://mcp.example.com"
    max_size = 8192
    propagation = "1h"     # how long a new key stays pending before rotate promotes it
    retention = "61m"      # default: ttl_cap + 60 s of clock skew
    rotate_every = "30d"   # how long a primary mints before rotate replaces it
    replay_store = "sqlite:////var/lib/mcp/replay.db"   # for verify --once
    max_skew = "5m"        # the most two replicas' (or the store's) clocks may differ
    kek = "passphrase:file:/run/secrets/keyset-passphrase"   # opens an encrypted keyset

A keyset may also come inline from ``MRTR_STATE_KEYSET_JSON`` (containers that get secrets through
the environment). It beats a keyset path from the environment or the file, not ``--keyset``, and
it is read-only: commands that write keys refuse it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .durations import parse_duration
from .errors import ConfigError
from .tokens.policy import (
    DEFAULT_FORMAT,
    DEFAULT_POLICY,
    DEFAULT_PROPAGATION,
    DEFAULT_ROTATE_EVERY,
    DEFAULT_TTL_CAP,
    Policy,
    default_retention,
)
from .tokens.registry import FORMAT_NAMES

if TYPE_CHECKING:
    from pathlib import Path

# DEFAULT_KEYSET comes from the module's __getattr__ (a Path, made on demand).
__all__ = ["DEFAULT_CONFIG_NAME", "DEFAULT_KEYSET", "Settings", "load_settings"]  # noqa: F822

#: replay.DEFAULT_MAX_SKEW, as a whole number of seconds (not imported: replay loads lazily)
DEFAULT_MAX_SKEW = 300
_DEFAULT_KEYSET_FILE = os.path.join("keys", "keyset.json")
DEFAULT_CONFIG_NAME = "mrtr-state.toml"
_INTEGERS = ("max_size",)
_DURATIONS = ("ttl", "ttl_cap", "propagation", "retention", "rotate_every", "max_skew")
_TEXTS = ("keyset", "format", "audience", "replay_store", "kek")
_KNOWN = frozenset({*_TEXTS, *_INTEGERS, *_DURATIONS})
KEYSET_JSON_ENV = "MRTR_STATE_KEYSET_JSON"
ENV_PREFIX = "MRTR_STATE_"


def __getattr__(name: str) -> Any:
    """``DEFAULT_KEYSET`` as a :class:`pathlib.Path`, made on demand: importing pathlib costs a
    command's start-up more than the rest of this module."""
    if name == "DEFAULT_KEYSET":
        from pathlib import Path

        return Path(_DEFAULT_KEYSET_FILE)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class Settings:
    """What flags, environment, config file and defaults decided, and where each came from.

    Immutable. A plain class (no dataclass machinery) because every command builds one at
    start-up. Paths are kept as text; :attr:`keyset_path` and :attr:`config_path` make
    :class:`pathlib.Path` objects for callers that want them.
    """

    __slots__ = (
        "audience",
        "config_file",
        "format",
        "kek",
        "keyset_file",
        "keyset_is_default",
        "keyset_json",
        "max_skew",
        "policy",
        "propagation",
        "replay_store",
        "retention",
        "rotate_every",
        "sources",
    )

    keyset_file: str
    keyset_is_default: bool
    format: str
    audience: str | None
    policy: Policy
    config_file: str | None
    propagation: int
    retention: int
    rotate_every: int
    keyset_json: str | None  # the inline keyset of MRTR_STATE_KEYSET_JSON, if in force
    replay_store: str
    #: The most two clocks that judge one token may differ: replay stores keep entries this long
    #: past a token's expiry.
    max_skew: int
    #: The URI of the KEK that opens an encrypted keyset (and that a plain one is refused
    #: under), or None.
    kek: str | None
    #: Where each setting that was given came from: "--flag", "MRTR_STATE_X" or the config file.
    sources: Mapping[str, str]

    def __init__(
        self,
        *,
        keyset_file: str,
        keyset_is_default: bool,
        format: str,
        audience: str | None,
        policy: Policy,
        config_file: str | None,
        propagation: int = DEFAULT_PROPAGATION,
        retention: int | None = None,
        rotate_every: int = DEFAULT_ROTATE_EVERY,
        keyset_json: str | None = None,
        replay_store: str = "memory:",
        max_skew: int = DEFAULT_MAX_SKEW,
        kek: str | None = None,
        sources: Mapping[str, str] | None = None,
    ) -> None:
        values = {
            "keyset_file": keyset_file,
            "keyset_is_default": keyset_is_default,
            "format": format,
            "audience": audience,
            "policy": policy,
            "config_file": config_file,
            "propagation": propagation,
            "retention": default_retention() if retention is None else retention,
            "rotate_every": rotate_every,
            "keyset_json": keyset_json,
            "replay_store": replay_store,
            "max_skew": max_skew,
            "kek": kek,
            "sources": {} if sources is None else sources,
        }
        for name, value in values.items():
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"Settings are immutable; cannot set {name}")

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"Settings({shown})"

    @property
    def keyset_path(self) -> Path:
        from pathlib import Path

        return Path(self.keyset_file)

    @property
    def config_path(self) -> Path | None:
        from pathlib import Path

        return None if self.config_file is None else Path(self.config_file)

    def source_of(self, name: str) -> str:
        """Where setting ``name`` was set, for messages that tell the user what to change."""
        return self.sources.get(name, "the default")

    @property
    def keyset_source(self) -> str:
        return KEYSET_JSON_ENV if self.keyset_json is not None else self.keyset_file


def _check_owner(path: str, handle: Any) -> None:
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


def _read_file(path: str) -> dict[str, Any]:
    import tomllib  # deferred: most runs have no config file

    try:
        with open(path, "rb") as handle:
            _check_owner(path, handle)
            data = tomllib.load(handle)
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except OSError as err:
        raise ConfigError(f"cannot read config file {path}: {err.strerror}") from None
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"config file {path} is not valid TOML: {err}") from None
    except UnicodeDecodeError as err:
        raise ConfigError(
            f"config file {path} is not UTF-8 text (byte {err.start}); TOML files are UTF-8"
        ) from None
    unknown = sorted(set(data) - _KNOWN)
    if unknown:
        from ._printable import printable  # a quoted TOML key may hold any text

        raise ConfigError(
            f"config file {path}: unknown setting {printable(', '.join(unknown), 200)}; "
            f"known: {', '.join(sorted(_KNOWN))}"
        )
    if isinstance(data.get("keyset"), str) and data["keyset"]:
        data["keyset"] = os.path.join(os.path.dirname(path), data["keyset"])
    return data


def _from_env(env: Mapping[str, str]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for name in _KNOWN:
        value = env.get(ENV_PREFIX + name.upper())
        if name == "kek" and value is not None and not value.strip():
            # an empty KEK must not quietly mean "no KEK": a Secret that failed to mount would
            # otherwise let a plain keyset through where an encrypted one is required
            raise ConfigError(f"{ENV_PREFIX}KEK is set but empty; unset it or give a KEK URI")
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
    cwd: str | os.PathLike[str] | None = None,
) -> Settings:
    """Resolve settings: ``flags`` (None values ignored) beat ``env`` beats the file beats defaults.

    The file is the first of: ``config``; ``$MRTR_STATE_CONFIG``; ``mrtr-state.toml`` beside the
    keyset when the keyset is named by a flag or ``$MRTR_STATE_KEYSET`` (so a cron job run from
    ``/`` finds the config kept with its keyset); ``mrtr-state.toml`` in ``cwd``. Only one file
    is read, and it must belong to the running user or root and be writable by nobody else.
    """
    env = os.environ if env is None else env
    folder = os.getcwd() if cwd is None else os.fspath(cwd)
    chosen = config if config is not None else env.get("MRTR_STATE_CONFIG") or None
    named_keyset = (flags or {}).get("keyset") or env.get("MRTR_STATE_KEYSET") or None
    beside = (
        os.path.join(os.path.dirname(os.fspath(named_keyset)), DEFAULT_CONFIG_NAME)
        if named_keyset
        else None
    )
    in_folder = os.path.join(folder, DEFAULT_CONFIG_NAME)
    config_path: str | None
    if chosen is not None:
        config_path = os.fspath(chosen)
        file_values = _read_file(config_path)
    elif beside is not None and os.path.isfile(beside):
        config_path = beside
        file_values = _read_file(config_path)
    elif os.path.isfile(in_folder):
        config_path = in_folder
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
    # ttl_cap "none" lifts the cap (a verifier of tokens that live long or never expire)
    uncapped = merged.get("ttl_cap") == "none"
    if uncapped:
        del merged["ttl_cap"]
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
    fmt = merged.get("format", DEFAULT_FORMAT)
    if fmt not in FORMAT_NAMES:
        raise ConfigError(f"unknown format {fmt!r}; known: {', '.join(FORMAT_NAMES)}")
    try:
        policy = Policy(
            ttl=merged.get("ttl", DEFAULT_POLICY.ttl),
            ttl_cap=None if uncapped else merged.get("ttl_cap", DEFAULT_TTL_CAP),
            max_size=merged.get("max_size", DEFAULT_POLICY.max_size),
        )
    except ValueError as err:
        raise ConfigError(f"invalid settings: {err}") from None
    keyset = merged.get("keyset")
    inline = env.get(KEYSET_JSON_ENV) or None
    flagged = (flags or {}).get("keyset") is not None
    return Settings(
        keyset_file=os.fspath(keyset) if keyset else _DEFAULT_KEYSET_FILE,
        keyset_is_default=keyset is None and inline is None,
        format=fmt,
        audience=merged.get("audience"),
        policy=policy,
        config_file=config_path,
        propagation=merged.get("propagation", DEFAULT_PROPAGATION),
        rotate_every=merged.get("rotate_every", DEFAULT_ROTATE_EVERY),
        retention=merged.get(
            "retention", default_retention(policy.ttl_cap or DEFAULT_TTL_CAP, policy.skew)
        ),
        keyset_json=None if flagged else inline,
        replay_store=merged.get("replay_store", "memory:"),
        max_skew=merged.get("max_skew", DEFAULT_MAX_SKEW),
        kek=merged.get("kek"),
        sources=sources,
    )
