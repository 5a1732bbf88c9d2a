"""``version``, ``config show`` and ``doctor``: what is installed, what is set, what works."""

from __future__ import annotations

from typing import Any

import click

from .._cli_api import build_info, diagnose, effective_settings
from ._common import App, ErrorMappingGroup, emit_json, fail, json_option, pass_app

#: The exit code of a doctor run with a failed check: that of a keyset, config or store error.
DOCTOR_FAILED = 6


@click.command("version")
@json_option
def version_cmd(as_json: bool) -> None:
    """Print the versions of mrtr-state, Python, cryptography and OpenSSL, and the git commit.

    The commit is known when mrtr-state runs from a git checkout, "unknown" otherwise.

    \b
    Example:
      mrtr-state version --json
    """
    info = build_info()
    if as_json:
        emit_json(info)
        return
    click.echo(f"mrtr-state   {info['mrtr_state']}")
    click.echo(f"python       {info['python']}")
    click.echo(f"cryptography {info['cryptography']}")
    click.echo(f"openssl      {info['openssl']}")
    click.echo(f"commit       {info['commit']}")


@click.group("config", cls=ErrorMappingGroup)
def config_group() -> None:
    """Show the settings in force and where each came from."""


@config_group.command("show")
@json_option
@pass_app
def config_show(app: App, as_json: bool) -> None:
    """Print each effective setting, its value and where it came from: a flag, the
    environment, the config file, or the default. Durations are shown as they are written
    (5m, 1h30m), and in whole seconds with --json. Secrets never appear here (a KEK is a URI
    that names where its secret is; a store URL is shown without its password).

    \b
    Examples:
      mrtr-state config show
      MRTR_STATE_TTL=2m mrtr-state --config /etc/mcp/mrtr-state.toml config show --json
    """
    settings = app.settings()
    shown = effective_settings(settings)
    if as_json:
        emit_json({"settings": [item.to_dict() for item in shown]})
        return
    from .._cli_api import printable

    width = max(len(item.name) for item in shown)
    for item in shown:
        text = item.text
        value = "-" if text is None else printable(text)
        click.echo(f"{item.name:<{width}}  {value}  ({printable(item.source)})")


@click.command("doctor")
@click.option(
    "--state-store",
    metavar="URL",
    help="Check this state-handle store too, as proxy --state-store uses it: redis://..., "
    "redis+cluster://..., redis+sentinel://..., unix://...",
)
@json_option
@pass_app
def doctor_cmd(app: App, state_store: str | None, as_json: bool) -> None:
    """Check the keyset, its file mode and primary keys, the KEK, the replay store and the clock.

    The keyset must load (under its KEK, if any), its file be mode 0600, the configured format
    have a primary key, the replay store answer, and this host's clock agree with the store's
    within max_skew. With --state-store URL, the state-handle store too: it must answer, keep
    records until they expire (maxmemory-policy noeviction, or no maxmemory), and have a clock
    within max_skew of this host's; its round-trip time is reported. Every check runs; exit 6
    when any fails.

    Reads, never writes: a missing sqlite replay store is reported, not created.

    \b
    Examples:
      mrtr-state doctor
      mrtr-state -k /etc/mcp/keyset.json doctor --json | jq '.checks[] | select(.status=="failed")'
      mrtr-state doctor --state-store redis://10.0.0.7:6379/0
    """
    settings = app.settings()
    checks = diagnose(settings, app.kek(settings), state_store=state_store)
    failed = [check for check in checks if check.status == "failed"]
    problem = None
    if failed:
        names = ", ".join(check.name for check in failed)
        counted = "1 check" if len(failed) == 1 else f"{len(failed)} checks"
        problem = f"doctor: {counted} failed: {names}"
    if as_json:
        report: dict[str, Any] = {
            "ok": not failed,
            "settings": [item.to_dict() for item in effective_settings(settings)],
            "checks": [check.to_dict() for check in checks],
        }
        if problem is not None:  # a failure's object says so, as every command's does
            report["error"] = {
                "code": "doctor_failed",
                "message": problem,
                "exit_code": DOCTOR_FAILED,
            }
        emit_json(report)
    else:
        from .._cli_api import printable

        marks = {"ok": click.style("ok", fg="green"), "failed": click.style("FAILED", fg="red")}
        width = max(12, *(len(check.name) for check in checks))
        for check in checks:
            mark = marks.get(check.status, check.status)
            click.echo(f"{check.name:<{width}}  {mark}  {printable(check.detail)}")
    if problem is not None:
        fail(problem, DOCTOR_FAILED, "doctor_failed")
