"""Text renderings for the CLI: the inspect view, the key table, human durations.

Pure functions from library values to strings, so they are easy to test and the click commands
stay thin. Styling goes through ``click.style``; ``click.echo`` strips it when the output is not
a terminal, so pipes and files get plain text.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from typing import Any

import click

from .. import Inspection, Key
from .._cli_api import format_duration, printable

_SEGMENT_COLOURS = ("bright_black", "cyan", "yellow", "magenta", "green", "blue")


def timestamp(at: float, now: float) -> str:
    """UTC clock time, with the date when it is not today's."""
    stamp = time.gmtime(at)
    today = time.gmtime(now)
    if stamp[:3] == today[:3]:
        return time.strftime("%H:%M:%S UTC", stamp)
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", stamp)


def _row(label: str, value: str) -> str:
    return f"{label:<11}{value}"


def inspection(view: Inspection, *, now: float, keyset_source: str | None) -> str:
    """The human view of :func:`mrtr_state.inspect`: anatomy, claims, time line, verdict."""
    anatomy = view.anatomy
    lines = [
        _row(
            "format",
            f"{anatomy.format} "
            f"({'encrypted' if anatomy.confidential else 'signed, readable by anyone'})",
        )
    ]
    if view.key_status is None:
        key_note = "no keyset loaded"
    elif view.key_status == "unknown":
        key_note = f"not in {keyset_source}"
    else:
        key_note = f"{view.key_status} key in {keyset_source}"
    lines.append(_row("key id", f"{anatomy.kid} ({key_note})"))
    coloured = "".join(
        click.style(text, fg=_SEGMENT_COLOURS[n % len(_SEGMENT_COLOURS)])
        for n, (_label, text) in enumerate(anatomy.segments)
    )
    lines.append(_row("token", coloured))
    legend = "  ".join(
        click.style(label, fg=_SEGMENT_COLOURS[n % len(_SEGMENT_COLOURS)])
        for n, (label, _text) in enumerate(anatomy.segments)
        if label != "."
    )
    lines.append(_row("", legend))
    for label, value in anatomy.fields:
        lines.append(_row("", f"{label}: {value}"))
    if anatomy.header is not None:
        lines.append(_row("header", json.dumps(anatomy.header, separators=(",", ":"))))
    if view.sealed_bytes is not None:
        lines.append(_row("payload", f"sealed, {view.sealed_bytes} bytes (use unseal)"))
    claims = view.claims
    if claims is not None:
        state_member = view.state_member
        shown = {k: v for k, v in claims.items() if k != state_member}
        # json escapes C0 controls but not DEL, C1 or bidi overrides: those are escaped here
        lines.append(_row("claims", printable(json.dumps(shown, ensure_ascii=False))))
        state = json.dumps(claims.get(state_member), ensure_ascii=False)
        lines.append(_row("state", printable(state)))
        lines.extend(_time_line(claims, now))
    elif anatomy.confidential and view.key_status in (None, "unknown"):
        lines.append(_row("claims", "encrypted; a keyset holding this key can read them"))
    if view.verified:
        verdict = click.style("VERIFIED", fg="green", bold=True)
    else:
        verdict = click.style("NOT VERIFIED", fg="red", bold=True)
    reason = f": {printable(str(view.problem))}" if view.problem is not None else ""
    lines.append(_row("result", verdict + reason))
    lines.extend(_row("", f"note: {note}") for note in view.notes)
    return "\n".join(lines)


def _time_line(claims: dict[str, Any], now: float) -> list[str]:
    iat, exp = claims.get("iat"), claims.get("exp")
    if not isinstance(exp, int | float) or not isinstance(iat, int | float | None):
        return []
    if now < exp:
        left = click.style(f"expires in {format_duration(exp - now)}", fg="green")
    else:
        left = click.style(f"expired {format_duration(now - exp)} ago", fg="red")
    lines = [] if iat is None else [_row("issued", timestamp(iat, now))]
    lifetime = "" if iat is None else f", lifetime {format_duration(exp - iat)}"
    lines.append(_row("expires", f"{timestamp(exp, now)} ({left}{lifetime})"))
    return lines


def key_table(keys: Iterable[Key], *, now: float, timeline: Callable[[Key], str]) -> str:
    """One line per key: id, algorithm, format, status, age in that status, and what is next."""
    rows = [("KID", "ALG", "FORMAT", "STATUS", "SINCE", "LIFECYCLE")]
    for key in keys:
        entered = key.since.get(key.status)
        since = "-" if entered is None else timestamp(entered, now)
        # rmcp's keyring ids are the operator's text: shown escaped (once), never raw
        kid = key.kid if key.sdk_kid is None else f"{key.kid} rmcp:'{printable(key.sdk_kid)}'"
        rows.append((kid, key.alg, key.format, key.status, since, timeline(key)))
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    return "\n".join(
        "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:5])) + "  " + row[5]
        for row in rows
    )


def handle_record(report: dict[str, Any], *, now: float) -> str:
    """The human view of :func:`mrtr_state.server_state.inspect_handle`'s report."""
    lines = [_row("format", "state handle (the state is in the store, not in the handle)")]
    lines.append(_row("record", f"...{report['ref']} (the last 8 characters of its store key)"))
    owner = report.get("own")
    shown = "none (anonymous)" if owner is None else f"{owner} (a digest of the principal)"
    lines.append(_row("owner", shown))
    lines.append(_row("audience", printable(str(report.get("aud") or "none"))))
    lines.append(_row("request", printable(str(report.get("rid") or "none"))))
    lines.extend(_time_line({"iat": report.get("iat"), "exp": report.get("exp")}, now))
    if "state" in report:
        lines.append(_row("state", printable(json.dumps(report["state"], ensure_ascii=False))))
    else:
        lines.append(_row("state", "kept in the store (--show-state prints it)"))
    verdict = click.style("NOT VERIFIED", fg="red", bold=True)
    lines.append(_row("result", f"{verdict}: no binding checked; verify does that"))
    return "\n".join(lines)
