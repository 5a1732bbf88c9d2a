"""``mrtr-state audit``: check every multi round-trip exchange of a captured MCP session."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import BinaryIO

import click

from .. import Keyset, KeysetNotFound
from .._cli_api import FINDING_KINDS, audit_capture
from ._common import App, emit_json, json_option, pass_app, ttl_cap_option

_PROGRESS_FROM_BYTES = 1 << 20
#: The longest capture line read; a longer one is skipped as it arrives (and is a finding).
MAX_LINE_BYTES = 16 << 20


def _lines(handle: BinaryIO, size: int, progress: bool) -> Iterator[str]:
    """The capture's lines, each read only up to MAX_LINE_BYTES (memory stays bounded)."""
    from ._stdin import read_lines

    with contextlib.ExitStack() as stack:
        bar = (
            stack.enter_context(click.progressbar(length=size, label="auditing", file=sys.stderr))
            if progress
            else None
        )
        for line in read_lines(handle, MAX_LINE_BYTES):
            if bar is not None:
                bar.update(MAX_LINE_BYTES if line is None else len(line) + 1)
            # an oversized line stands in as text no JSON reader accepts: a finding, not a crash
            yield "\x00 line over the size cap" if line is None else line.decode("utf-8", "replace")


@click.command("audit")
@click.option("--audience", "-a", metavar="A", help="Audience the tokens must carry.")
@click.option("--principal", "-p", metavar="P", help="Principal the tokens must be bound to.")
@ttl_cap_option
@json_option
@click.argument(
    "capture", type=click.Path(exists=True, dir_okay=False, readable=True, allow_dash=True)
)
@pass_app
def audit_cmd(
    app: App,
    audience: str | None,
    principal: str | None,
    ttl_cap: int | str | None,
    as_json: bool,
    capture: str,
) -> None:
    """Audit a captured MCP session (JSON Lines, or - for stdin); exit 1 on any finding.

    Each line is a JSON-RPC message, bare or wrapped as {"ts": ..., "dir": "c2s"|"s2c",
    "msg": {...}}. Every input_required result is paired with its retry and checked: requestState
    echoed byte for byte, a new JSON-RPC id, inputResponses answering inputRequests, the token
    valid under the keyset for the retry's own request (and audience/principal when given) at the
    retry's time, only declared input-request kinds, only the three allowed methods, and no state
    reused on another request. Without a keyset the tokens themselves are not verified.

    \b
    Examples:
      mrtr-state audit --audience fleet capture.jsonl
      mrtr-state audit --json - < capture.jsonl | jq .findings_by_kind
    """
    settings = app.settings(audience=audience, ttl_cap=ttl_cap)
    keyset: Keyset | None
    try:
        keyset = app.keyset(settings)
    except KeysetNotFound:
        if not settings.keyset_is_default:
            raise
        keyset = None
    with contextlib.ExitStack() as stack:
        handle: BinaryIO = (
            sys.stdin.buffer if capture == "-" else stack.enter_context(open(capture, "rb"))
        )
        size = os.fstat(handle.fileno()).st_size if capture != "-" else 0
        progress = not as_json and size >= _PROGRESS_FROM_BYTES and sys.stderr.isatty()
        report = audit_capture(
            _lines(handle, size, progress),
            keyset=keyset,
            audience=settings.audience,
            principal=principal,
            policy=settings.policy,
        )
    if as_json:
        emit_json({**report.to_dict(), "tokens_verified": keyset is not None})
    else:
        verdict = (
            click.style("clean", fg="green")
            if report.clean
            else click.style(f"{len(report.findings)} finding(s)", fg="red", bold=True)
        )
        click.echo(
            f"{report.messages} messages, {report.exchanges} input_required exchange(s), "
            f"{report.passed} passed, {report.unanswered} never retried: {verdict}"
        )
        if keyset is None:
            click.echo("note: no keyset, so the tokens themselves were not verified")
        for kind, count in sorted(report.by_kind().items()):
            click.echo(f"  {kind}: {count} ({FINDING_KINDS[kind]})")
        for finding in report.findings:
            lines_text = ", ".join(str(n) for n in finding.lines)
            where = f"line {lines_text}: " if finding.lines else ""
            click.echo(f"{where}{finding.kind}: {finding.message}")
    if not report.clean:
        raise click.exceptions.Exit(1)
