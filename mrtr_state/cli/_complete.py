"""Shell completion of key ids, for ``keys promote``, ``keys retire`` and ``keys export``.

Completion runs on every Tab press, before the command runs and with nothing on a terminal to
ask: it reads only what needs no secret (an encrypted keyset's clear metadata, or a plain
keyset's key ids), offers ids and statuses, never a secret, and offers nothing rather than fail.
"""

from __future__ import annotations

from typing import Any

import click
from click.shell_completion import CompletionItem


def _given(ctx: click.Context, name: str) -> str | None:
    """The value of a global option (--keyset, --config) as typed so far: on this command or
    any group above it, the one closest to the command winning, as when it runs."""
    remembered = ctx.meta.get(f"mrtr_state.{name}")  # given after a command
    if isinstance(remembered, str):
        return remembered
    current: click.Context | None = ctx
    while current is not None:
        value = current.params.get(name)
        if isinstance(value, str):
            return value
        current = current.parent
    return None


def _listed(ctx: click.Context) -> list[Any]:
    """The keys of the keyset the command would use, read without any secret."""
    from .._cli_api import listed_without_kek, load_settings

    settings = load_settings(
        {"keyset": _given(ctx, "keyset"), "kek": _given(ctx, "kek")},
        config=_given(ctx, "config"),
    )
    if settings.keyset_json is not None:
        return []  # an inline keyset lives in the environment: nothing to offer
    listed = listed_without_kek(settings.keyset_file)
    if listed is not None:  # encrypted: its clear metadata, no KEK asked
        return list(listed[1])
    from .. import Keyset

    return list(Keyset.load(settings.keyset_file, reload_interval=None))


def complete_kid(
    ctx: click.Context, param: click.Parameter, incomplete: str
) -> list[CompletionItem]:
    """click ``shell_complete`` callback: the key ids starting with ``incomplete``."""
    del param
    try:
        keys = _listed(ctx)
    except Exception:
        return []
    return [
        CompletionItem(key.kid, help=f"{key.status} {key.alg}")
        for key in keys
        if key.kid.startswith(incomplete)
    ]
