"""``mrtr-state probe``: check how a live MCP server guards its requestState, from outside."""

from __future__ import annotations

import os
from typing import Any

import click

from .. import ProbeFailed
from .._cli_api import printable
from ._common import emit_json, failure_json, json_option, parse_json, read_small_file
from ._group import report_failure

#: Exit code when the server could not be probed (see docs/cli.md).
UNPROBED = 8
#: The largest file of headers read (@FILE).
MAX_HEADER_FILE = 1 << 16
_MARKS = {"pass": ("pass", "green"), "fail": ("FAIL", "red"), "skipped": ("skip", "yellow")}


def _seconds(ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    """Option callback: a duration of at least one second."""
    from .._cli_api import parse_duration

    if value is None:
        return None
    try:
        seconds = parse_duration(value)
    except ValueError as err:
        raise click.BadParameter(str(err), param=param) from None
    if seconds < 1:
        raise click.BadParameter("must be at least 1s", param=param)
    return seconds


def _headers(values: tuple[str, ...], option: str) -> list[tuple[str, str]]:
    """Each 'Name: value', or @FILE holding one per line (credentials stay off the command
    line, where other users and shell history see them)."""
    from .._cli_api import parse_header

    lines: list[tuple[str, str]] = []  # (where it was given, the text)
    for number, value in enumerate(values, 1):
        if value.startswith("@"):
            data = read_small_file(value[1:], MAX_HEADER_FILE, f"{option} file")
            for line_number, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
                if line.strip():
                    lines.append((f"{value[1:]}, line {line_number}", line))
        else:
            lines.append((f"the {_ordinal(number)} given", value))
    parsed: list[tuple[str, str]] = []
    for where, line in lines:
        try:
            parsed.append(parse_header(line))
        except ValueError as err:
            raise click.UsageError(f"{option} ({where}): {err}") from None
    return parsed


def _ordinal(number: int) -> str:
    suffix = (
        "th" if 10 <= number % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(number % 10, "th")
    )
    return f"{number}{suffix}"


def _object(text: str | None, option: str) -> dict[str, Any] | None:
    if text is None:
        return None
    value = parse_json(text, option)
    if not isinstance(value, dict):
        raise click.UsageError(f"{option} must be a JSON object")
    return value


@click.command("probe")
@click.argument("url", required=False)
@click.option(
    "--stdio",
    "command",
    metavar="'COMMAND ...'",
    help="Start this MCP server and speak over its "
    "stdin and stdout instead of a URL (split as a shell would; no shell runs it).",
)
@click.option("--tool", required=True, metavar="NAME", help="A tool that answers input_required.")
@click.option(
    "--arguments", metavar="JSON", default="{}", show_default=True, help="The tool's arguments."
)
@click.option(
    "--header",
    "headers",
    multiple=True,
    metavar="'Name: value'|@FILE",
    help="A header sent on every request, as principal A (authentication); repeatable. @FILE "
    "reads one per line, so credentials stay off the command line.",
)
@click.option(
    "--other",
    "others",
    multiple=True,
    metavar="'Name: value'|@FILE",
    help="Principal B: replaces the same-named --header on B's requests. Without it the "
    "cross-principal check is skipped.",
)
@click.option(
    "--answer",
    metavar="JSON",
    help="The inputResponses to send [default: made from each input request: an elicitation "
    "accepted with the least its schema allows, a sampling answer, an empty roots list].",
)
@click.option(
    "--wait",
    metavar="DURATION",
    callback=_seconds,
    help="Send an issued state back after this long (state-long-lived); skipped without it.",
)
@json_option
@click.option(
    "--sarif",
    metavar="FILE",
    type=click.Path(dir_okay=False),
    help="Also write the report as SARIF 2.1.0 (for code-scanning dashboards).",
)
@click.option(
    "--fail-on",
    type=click.Choice(["high", "medium", "low", "none"]),
    default="high",
    show_default=True,
    help="Exit 1 when a finding is this severe or more (none: never).",
)
@click.option(
    "--max-requests",
    type=click.IntRange(min=1),
    default=40,
    show_default=True,
    help="Send at most this many requests (one at a time); checks beyond it are skipped.",
)
@click.option(
    "--timeout",
    metavar="DURATION",
    default="10s",
    show_default=True,
    callback=_seconds,
    help="The longest a request may take, from sending to the last byte of its answer.",
)
@click.option("--dry-run", is_flag=True, help="Print the checks and requests; send nothing.")
def probe_cmd(
    url: str | None,
    command: str | None,
    tool: str,
    arguments: str,
    headers: tuple[str, ...],
    others: tuple[str, ...],
    answer: str | None,
    wait: int | None,
    as_json: bool,
    sarif: str | None,
    fail_on: str,
    max_requests: int,
    timeout: int,
    dry_run: bool,
) -> None:
    """Check how a live MCP server guards its requestState: tampered, forged, misbound and
    replayed states, tried from outside.

    Calls TOOL at URL (Streamable HTTP) or over --stdio, completes one honest round, then sends
    back altered states and reports each check as pass, fail or skipped (never pass for what it
    did not try): tamper-accepted, forged-accepted, cross-request-accepted,
    cross-principal-accepted (high), replay-accepted, state-long-lived, state-readable,
    state-oversized (low/medium), error-leaks (low). Header values are never printed.

    \b
    Examples:
      mrtr-state probe http://127.0.0.1:8000/mcp --tool deploy --arguments '{"env":"prod"}'
      mrtr-state probe https://mcp.example.com/mcp --tool deploy --arguments '{"env":"prod"}' \\
          --header @alice.headers --other @bob.headers --wait 10m --sarif probe.sarif
      mrtr-state probe --stdio 'python server.py' --tool star --arguments '{"repo":"a/b"}'

    Exit codes: 0 no finding at or above --fail-on, 1 findings, 2 usage, 8 the server could not
    be probed (unreachable, handshake failed, the tool never asked for input).
    """
    from .._cli_api import ProbeSettings, ProbeTarget

    if url is not None and "://" not in url:
        raise click.UsageError(
            f"the server URL needs its scheme: http://{url} or https://{url} (got {url!r})"
        )
    try:
        target = ProbeTarget(
            url=url,
            command=command,
            headers=_headers(headers, "--header"),
            other=_headers(others, "--other"),
        )
        settings = ProbeSettings(
            tool,
            _object(arguments, "--arguments"),
            answer=_object(answer, "--answer"),
            wait=wait,
            max_requests=max_requests,
            timeout=float(timeout if timeout is not None else 10),
        )
    except ValueError as err:
        raise click.UsageError(str(err)) from None
    if sarif is not None:
        folder = os.path.dirname(os.path.abspath(sarif))
        if not os.path.isdir(folder):
            raise click.UsageError(f"--sarif: no folder {folder} to write {sarif} in")
    if dry_run:
        _show_plan(target, settings, as_json)
        return
    _run(target, settings, as_json=as_json, sarif=sarif, fail_on=fail_on)


def _run(target: Any, settings: Any, *, as_json: bool, sarif: str | None, fail_on: str) -> None:
    from .._cli_api import run_probe, sarif_log

    try:
        report = run_probe(target, settings)
    except ProbeFailed as err:
        said = f"the server could not be probed: {err}"
        if sarif is not None and err.report is not None:
            _write_sarif(sarif, sarif_log(err.report, settings.tool, failure=str(err)))
        if as_json and err.report is not None:
            emit_json({**err.report.to_dict(), "error": {**failure_json(err), "message": said}})
        report_failure(said, err.code, UNPROBED)
        raise click.exceptions.Exit(UNPROBED) from None
    if sarif is not None:
        _write_sarif(sarif, sarif_log(report, settings.tool))
    failing = report.at_or_above(fail_on)
    if as_json:
        emit_json(report.to_dict())
    else:
        click.echo(_text(report, settings.tool, fail_on, len(failing)))
    if failing:
        raise click.exceptions.Exit(1)


def _write_sarif(path: str, log: dict[str, Any]) -> None:
    import json

    try:
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(log, handle, indent=2, ensure_ascii=False)
            handle.write("\n")
    except OSError as err:
        raise click.UsageError(f"--sarif: cannot write {path}: {err.strerror or err}") from None


def _text(report: Any, tool: str, fail_on: str, failing: int) -> str:
    from .._cli_api import PROBE_CHECKS

    severity = {check.id: check.severity for check in PROBE_CHECKS}
    severity.update({finding.id: finding.severity for finding in report.findings})
    server = report.server or {}
    named = " ".join(str(part) for part in (server.get("name"), server.get("version")) if part)
    lines = [
        f"probe    {printable(report.target)}, tool {printable(tool)}",
        f"server   {printable(named or 'unnamed')} (MCP {printable(str(server.get('protocol')))})",
        f"format   {printable(report.format or 'not one mrtr-state recognises')}",
    ]
    width = max(len(check.id) for check in PROBE_CHECKS)
    for result in report.checks:
        mark, colour = _MARKS[result.result]
        lines.append(
            f"  {click.style(mark, fg=colour, bold=mark == 'FAIL')}  {result.id:<{width}}  "
            f"{severity[result.id]:<6}  {printable(result.why)}"
        )
    for finding in report.findings:
        lines += ["", f"{finding.id} ({finding.severity}): {finding.title}"]
        lines += [f"    {printable(line)}" for line in finding.evidence]
        lines.append(f"  fix: {finding.remedy}")
    found = len(report.findings)
    verdict = (
        f"{failing} at or above --fail-on {fail_on}" if fail_on != "none" else "--fail-on none"
    )
    lines += ["", f"{report.requests} requests; {found} finding(s), {verdict}"]
    return "\n".join(lines)


def _show_plan(target: Any, settings: Any, as_json: bool) -> None:
    from .._cli_api import PROBE_CHECKS, probe_plan

    steps = probe_plan(target, settings)
    if as_json:
        emit_json(
            {
                "target": target.label,
                "server": None,
                "format": None,
                "checks": [
                    {"id": check.id, "result": "planned", "why": check.tries}
                    for check in PROBE_CHECKS
                ],
                "findings": [],
                "requests": 0,
                "dry_run": True,
                "plan": [{"step": step, "requests": requests} for step, requests in steps],
                "max_requests": settings.max_requests,
                "timeout": settings.timeout,
            }
        )
        return
    header_names = sorted({name for name, _ in target.headers})
    lines = [
        f"plan for {printable(target.label)}, tool {printable(settings.tool)}: at most "
        f"{settings.max_requests} requests, one at a time, each within {settings.timeout:g}s "
        "(--dry-run: nothing is sent)",
    ]
    if header_names:
        lines.append(f"  headers as A: {', '.join(header_names)} (values not shown)")
    tries = {check.id: (check.severity, check.tries) for check in PROBE_CHECKS}
    for step, requests in steps:
        if step in tries:
            level, what = tries[step]
            lines.append(f"  {step} ({level}): {what}")
        else:
            lines.append(f"  {step}")
        lines += [f"      {request}" for request in requests]
    click.echo("\n".join(lines))
