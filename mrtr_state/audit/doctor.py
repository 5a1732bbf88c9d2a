"""What a deployment is set to, and whether its parts work: ``config show`` and ``doctor``.

A verifier that refuses every token, or a rotation job that does nothing, is most often a setting
taken from somewhere the operator did not expect (an environment variable left in a unit file, a
config file beside the keyset) or a part that cannot be reached. :func:`effective_settings` says
each setting's value and where it came from; :func:`diagnose` runs each check the way the
commands themselves use that part (the same loader, the same store), reads and writes nothing
else, and reports every check rather than stopping at the first failure.
"""

from __future__ import annotations

import os
import stat
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import MrtrStateError

if TYPE_CHECKING:
    from ..config import Settings
    from ..keys.kek import Kek
    from ..keys.keyset import Keyset

__all__ = ["Check", "Setting", "diagnose", "effective_settings"]

#: The settings shown, in the order of docs/configuration.md.
SHOWN = (
    "keyset",
    "format",
    "ttl",
    "ttl_cap",
    "audience",
    "max_size",
    "propagation",
    "retention",
    "rotate_every",
    "replay_store",
    "max_skew",
    "kek",
)


class _Row:
    """A row of the report: given to --json as its fields, in their order."""

    def to_dict(self) -> dict[str, Any]:
        return dict(vars(self))


@dataclass(frozen=True)
class Setting(_Row):
    """A setting in force: its value, and where it came from."""

    name: str
    value: Any
    #: "--flag", "MRTR_STATE_X", "config file PATH" or "default"
    source: str

    @property
    def text(self) -> str | None:
        """The value as a config file would write it, or None: a duration (whole seconds in
        ``value`` and --json) as ``5m``, not 300."""
        if self.value is None:
            return None
        from ..config import _DURATIONS

        if self.name in _DURATIONS and type(self.value) is int:
            from ..durations import duration_as_written

            return duration_as_written(self.value)
        return str(self.value)


@dataclass(frozen=True)
class Check(_Row):
    """A part of the deployment, tried as the commands use it: whether it works, and what was
    found (or why it failed)."""

    name: str
    #: "ok", "failed" or "skipped" (nothing to check: no KEK configured, no reference clock)
    status: str
    detail: str


def effective_settings(settings: Settings) -> list[Setting]:
    """Each setting's value in force, and where it came from."""
    from ..config import KEYSET_JSON_ENV

    policy = settings.policy
    values: dict[str, Any] = {
        "keyset": settings.keyset_file,
        "format": settings.format,
        "ttl": policy.ttl,
        "ttl_cap": "none" if policy.ttl_cap is None else policy.ttl_cap,
        "audience": settings.audience,
        "max_size": policy.max_size,
        "propagation": settings.propagation,
        "retention": settings.retention,
        "rotate_every": settings.rotate_every,
        "replay_store": _without_password(settings.replay_store),
        "max_skew": settings.max_skew,
        "kek": settings.kek,
    }
    shown = []
    for name in SHOWN:
        source = settings.sources.get(name, "default")
        value = values[name]
        if name == "keyset" and settings.keyset_json is not None:
            value, source = "(inline)", KEYSET_JSON_ENV
        shown.append(Setting(name, value, source))
    config = settings.config_file
    shown.append(Setting("config", config, "no file found" if config is None else "read"))
    return shown


def _without_password(url: str) -> str:
    from ..state.redis.url import shown

    return shown(url) if url.startswith(("redis", "rediss", "unix")) else url


def diagnose(
    settings: Settings,
    kek: Kek | None,
    *,
    now: float | None = None,
    state_store: str | None = None,
) -> list[Check]:
    """Every check, in order: the keyset loads (under its KEK), its file's mode, its primary
    keys, the KEK, the replay store, and this host's clock against the store's; with
    ``state_store`` (a URL, as ``proxy --state-store`` takes it), that store and its clock too."""
    checks: list[Check] = []
    keyset, problem = _load(settings, kek)
    checks.append(
        Check("keyset", "ok", f"{settings.keyset_source}: {_count(keyset)} loaded")
        if keyset is not None
        else Check("keyset", "failed", str(problem))
    )
    checks.append(_mode(settings))
    checks.append(_primaries(settings, keyset))
    checks.append(_kek(settings, keyset, problem))
    store_check, offset = _store(settings)
    checks.append(store_check)
    at = time.time() if now is None else now
    checks.append(_clock(settings, offset, at))
    if state_store is not None:
        checks.extend(_state_store(settings, state_store, at))
    return checks


def _count(keyset: Keyset | None) -> str:
    count = 0 if keyset is None else len(keyset)
    return f"{count} key" if count == 1 else f"{count} keys"


def _load(settings: Settings, kek: Kek | None) -> tuple[Keyset | None, MrtrStateError | None]:
    from ..config import KEYSET_JSON_ENV
    from ..keys.keyset import Keyset

    try:
        if settings.keyset_json is not None:
            return Keyset.from_json(settings.keyset_json, source=KEYSET_JSON_ENV, kek=kek), None
        return Keyset.load(settings.keyset_file, reload_interval=None, kek=kek), None
    except MrtrStateError as err:
        return None, err


def _mode(settings: Settings) -> Check:
    if settings.keyset_json is not None:
        return Check("keyset mode", "skipped", "the keyset is inline (MRTR_STATE_KEYSET_JSON)")
    try:
        info = os.stat(settings.keyset_file)
    except OSError as err:
        return Check("keyset mode", "failed", f"{settings.keyset_file}: {err.strerror}")
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o077:
        return Check(
            "keyset mode",
            "failed",
            f"{settings.keyset_file} has mode {mode:04o}; fix it with: chmod 600 "
            f"{settings.keyset_file}",
        )
    return Check("keyset mode", "ok", f"{mode:04o}, owner uid {info.st_uid}")


def _primaries(settings: Settings, keyset: Keyset | None) -> Check:
    if keyset is None:
        return Check("primary keys", "failed", "no keyset loaded")
    from ..tokens.registry import key_algorithm_of

    primaries = {key.alg: key.kid for key in keyset if key.status == "primary"}
    listed = ", ".join(f"{alg} {kid}" for alg, kid in sorted(primaries.items())) or "none"
    needed = key_algorithm_of(settings.format)
    other_formats_only = bool(primaries) and not any(key.alg == needed for key in keyset)
    if other_formats_only and "format" not in settings.sources:
        # a keyset made for other formats (an SDK's, a verifier's), and nothing asked for the
        # default one: its purpose, not a fault
        return Check(
            "primary keys",
            "ok",
            f"{listed}; none mints {settings.format}, the default format: mint with --format, "
            "or set format in the config (the proxy's tokens are aead: it needs an A256GCM "
            "primary, or --state-store)",
        )
    if needed not in primaries:
        return Check(
            "primary keys",
            "failed",
            f"no primary {needed} key to mint {settings.format} tokens (primaries: {listed})",
        )
    return Check("primary keys", "ok", listed)


def _kek(settings: Settings, keyset: Keyset | None, problem: MrtrStateError | None) -> Check:
    if settings.kek is None:
        return Check("kek", "skipped", "no KEK configured (a plain keyset)")
    if keyset is not None:
        return Check("kek", "ok", f"{settings.kek} opened the keyset's data key")
    from ..errors import KekRefused, KekRequired, KekUnavailable

    if isinstance(problem, KekRefused | KekRequired | KekUnavailable):
        return Check("kek", "failed", str(problem))
    return Check("kek", "skipped", "the keyset did not load, so the KEK was not tried")


def _store(settings: Settings) -> tuple[Check, float | None]:
    """The replay store, reached as ``verify --once`` reaches it; for Redis also its clock's
    offset from this host's (None for the stores that have no clock of their own)."""
    url = settings.replay_store
    shown = _without_password(url)
    if url in ("memory:", "memory://"):
        return Check("replay store", "ok", "memory: (this process only)"), None
    if url.startswith("sqlite://"):
        path = url[len("sqlite://") :].partition("?")[0][1:]
        if not os.path.exists(path):  # doctor creates nothing: say what a first run would do
            folder = os.path.dirname(os.path.abspath(path))
            if os.access(folder, os.W_OK | os.X_OK):
                return Check("replay store", "ok", f"{shown}: made on first use"), None
            return Check("replay store", "failed", f"{shown}: cannot create {path}"), None
    from ..state.replay import open_store

    try:
        store = open_store(url, max_skew=settings.max_skew)
    except (MrtrStateError, ValueError) as err:
        return Check("replay store", "failed", str(err)), None
    try:
        offset = store.probe() if hasattr(store, "probe") else None
    except MrtrStateError as err:
        return Check("replay store", "failed", str(err)), None
    finally:
        store.close()
    return Check("replay store", "ok", f"{shown} reachable"), offset


def _clock(
    settings: Settings, offset: float | None, now: float, *, of: str = "replay store"
) -> Check:
    """This host's clock against the store's (``offset``: the store's minus this host's)."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(now))
    if offset is None:
        return Check("clock", "skipped", f"{stamp}; no store clock to compare it with")
    if not abs(offset) <= settings.max_skew:
        return Check(
            "clock",
            "failed",
            f"{stamp}; the {of}'s clock reads {offset:+.1f} s from this host's, beyond "
            f"max_skew {settings.max_skew} s: fix the clocks (NTP)",
        )
    return Check("clock", "ok", f"{stamp}; {offset:+.3f} s from the {of}'s")


def _state_store(settings: Settings, url: str, now: float) -> list[Check]:
    """The state-handle store, reached as ``proxy --state-store`` and ``verify --state-store``
    reach it (the package's Redis client), through its own readiness probe: it answers, it keeps
    records until they expire (no eviction policy that may drop one), its clock is within
    max_skew of this host's. Then its round-trip time (a read of a key no record has), and its
    clock. Reads and writes nothing else."""
    from ..errors import StateStoreError
    from ..state.handle_store import open_handle_store
    from ..state.redis.url import shown

    name, clock = "state store", "state store clock"
    if url in ("memory:", "memory://"):
        return [
            Check(name, "ok", "memory: (this process only: no other process reads its records)"),
            Check(clock, "skipped", "memory: has no clock of its own"),
        ]
    try:
        store = open_handle_store(url, max_skew=settings.max_skew)
    except (StateStoreError, ValueError) as err:
        return [Check(name, "failed", str(err)), Check(clock, "skipped", "no store to ask")]
    offset: float | None = None
    rtt: float | None = None
    try:
        problem = store.probe()  # reachable, evicting nothing, a clock within max_skew
        offset = store.clock_offset
        if problem is None:
            rtt = _round_trip(store)
    except StateStoreError as err:
        problem = str(err)
    finally:
        store.close()
    if offset is None:
        clock_check = Check(clock, "skipped", "the state store's clock could not be read")
    else:
        clock_check = _clock(settings, offset, now, of="state store")
        clock_check = Check(clock, clock_check.status, clock_check.detail)
    if problem is not None:
        return [Check(name, "failed", problem), clock_check]
    detail = f"{shown(url)} reachable, keeps records until they expire, round trip {rtt:.2f} ms"
    return [Check(name, "ok", detail), clock_check]


def _round_trip(store: Any) -> float:
    """The store's round-trip time in milliseconds: the quickest of three reads of a key no
    record is filed under (records' keys are digests), each one command."""
    times = []
    for _ in range(3):
        started = time.perf_counter()
        store.peek("mrtr-state:doctor:round-trip")
        times.append((time.perf_counter() - started) * 1000)
    return min(times)
