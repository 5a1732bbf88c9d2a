"""Write docs/man/mrtr-state.1, the man page, from the click commands themselves (``make man``).

The page is made from what ``--help`` shows (each command's help text, usage and options), so
the two cannot drift apart; tests/test_cli_contract.py checks that the committed page is what
this script makes now. Plain troff (man(7) macros), no dependency beyond click.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "man" / "mrtr-state.1"


def _escape(text: str) -> str:
    """Text as troff prints it: backslashes doubled, a leading dot or quote made inert."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    return "\n".join(
        "\\&" + line if line.startswith((".", "'")) else line for line in text.split("\n")
    )


def _paragraphs(help_text: str) -> list[str]:
    """click's help text as man paragraphs: \\b blocks kept line by line (.nf), others joined."""
    out: list[str] = []
    for block in help_text.strip().split("\n\n"):
        lines = block.split("\n")
        if lines[0].strip() == "\b":
            body = "\n".join(line.rstrip() for line in lines[1:])
            out.append(".nf\n" + _escape(body) + "\n.fi")
        else:
            out.append(_escape(" ".join(line.strip() for line in lines)))
    return out


def _command_section(path: list[str], command: click.Command, ctx: click.Context) -> list[str]:
    lines = [f'.SS "{" ".join(path)}"']
    usage = " ".join(command.collect_usage_pieces(ctx))
    lines += [".B mrtr\\-state " + _escape(" ".join(path[1:])), _escape(usage), ".PP"]
    for paragraph in _paragraphs(command.help or ""):
        lines += [paragraph, ".PP"]
    for param in command.get_params(ctx):
        record = param.get_help_record(ctx) if isinstance(param, click.Option) else None
        if record is None:
            continue
        names, help_text = record
        lines += [".TP", f".B {_escape(names)}", _escape(help_text)]
    return lines


def _walk(
    command: click.Command, path: list[str], parent: click.Context | None
) -> list[tuple[list[str], click.Command, click.Context]]:
    # as the CLI makes its contexts: the root's settings (-h as well as --help) are inherited
    ctx = click.Context(command, info_name=path[-1], parent=parent, **command.context_settings)
    found = [(path, command, ctx)]
    if isinstance(command, click.Group):
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                found += _walk(sub, [*path, name], ctx)
    return found


def render() -> str:
    from mrtr_state import __version__
    from mrtr_state.cli import cli

    everything = _walk(cli, ["mrtr-state"], None)
    _top_path, top, top_ctx = everything[0]
    lines = [
        '.\\" Made by scripts/man.py from the click commands (make man); do not edit.',
        f'.TH MRTR\\-STATE 1 "" "mrtr\\-state {__version__}" "User Commands"',
        ".SH NAME",
        "mrtr\\-state \\- mint, verify, inspect and seal MCP requestState tokens, and manage "
        "their keys",
        ".SH SYNOPSIS",
        ".B mrtr\\-state",
        "[\\fIOPTIONS\\fR] \\fICOMMAND\\fR [\\fIARGS\\fR]...",
        ".SH DESCRIPTION",
    ]
    for paragraph in _paragraphs(top.help or ""):
        lines += [paragraph, ".PP"]
    lines.append(".SH OPTIONS")
    for param in top.get_params(top_ctx):
        record = param.get_help_record(top_ctx)
        if record is not None:
            lines += [".TP", f".B {_escape(record[0])}", _escape(record[1])]
    if top.epilog:  # what --help ends with: how to turn on shell completion
        lines.append(".SH SHELL COMPLETION")
        for paragraph in _paragraphs(top.epilog):
            lines += [paragraph, ".PP"]
    lines.append(".SH COMMANDS")
    for path, command, ctx in everything[1:]:
        if isinstance(command, click.Group):
            continue  # its commands have their own sections
        lines += _command_section(path, command, ctx)
    lines += [
        ".SH EXIT STATUS",
        "0 valid or done; 1 rejected; 2 usage error; 3 expired or not yet valid; 4 binding "
        "mismatch; 5 replayed; 6 keyset, config or store error; 7 proxy cannot listen; 75 not "
        "yet, retry later; 130 interrupted. A batch exits with its most severe line: 6, 5, 4, "
        "1, 3, then 2.",
        ".SH SEE ALSO",
        "docs/cli.md and docs/troubleshooting.md in the mrtr\\-state repository.",
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    PAGE.parent.mkdir(parents=True, exist_ok=True)
    PAGE.write_text(render(), encoding="utf-8")
    print(f"wrote {PAGE.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
