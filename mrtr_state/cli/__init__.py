"""The ``mrtr-state`` command: a thin shell over the library.

Each command parses its options, calls one library function and renders the result as text or
``--json``. Every library error maps to the exit code of its class (see ``errors.py``) with one
line on stderr; nothing here decides whether a token is valid.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

import click

from ._group import (
    CONFIG_HELP,
    KEK_HELP,
    KEYSET_HELP,
    OUTPUT,
    App,
    ErrorMappingGroup,
    report_failure,
    show_click_error,
    with_global_options,
)

# Each command's module is imported only when that command runs: `mrtr-state verify` in a shell
# loop should not pay for the key-lifecycle code.
_COMMANDS = {
    "audit": "audit:audit_cmd",
    "keys": "keys:keys",
    "rotate": "keys:rotate",
    "mint": "tokens:mint",
    "verify": "tokens:verify_cmd",
    "inspect": "tokens:inspect_cmd",
    "seal": "tokens:seal_cmd",
    "unseal": "tokens:unseal_cmd",
    "proxy": "proxy:proxy_cmd",
    "probe": "probe:probe_cmd",
    "version": "diagnostics:version_cmd",
    "config": "diagnostics:config_group",
    "doctor": "diagnostics:doctor_cmd",
}
# What `mrtr-state --help` lists, so that listing imports no command module. A test checks that
# each line is the start of its command's own help.
SUMMARIES = {
    "audit": "Audit a captured MCP session (JSON Lines).",
    "config": "Show the settings in force and where each came from.",
    "doctor": "Check the keyset, its file mode and primary keys, the KEK, the replay store and "
    "the clock.",
    "inspect": "Show what TOKEN (or stdin) is made of, verified if a keyset is found.",
    "keys": "Create, list and move keys through their lifecycle.",
    "mint": "Mint a requestState token; print it alone on stdout.",
    "probe": "Check how a live MCP server guards its requestState: tampered, forged, misbound and "
    "replayed states, tried from outside.",
    "proxy": "Serve a reverse proxy that seals every requestState the upstream emits.",
    "rotate": "Advance key rotation by one safe step; made for cron.",
    "seal": "Seal the bytes of FILE (or stdin) into a token (no claims).",
    "unseal": "Check TOKEN (or stdin) and write its sealed payload to stdout.",
    "verify": "Verify TOKEN (or each line of stdin); print its state.",
    "version": "Print the versions of mrtr-state, Python, cryptography and OpenSSL, and the git "
    "commit.",
}


class LazyGroup(ErrorMappingGroup):
    """The top-level group: commands listed up front, their modules loaded on demand."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(_COMMANDS)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(name, SUMMARIES[name]) for name in self.list_commands(ctx)])

    def main(  # type: ignore[override]
        self,
        args: list[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        """click's main, except that every failure is said one way (``error:`` on stderr, and
        one JSON object on stdout with --json), Ctrl-C exits 130 (never 1, which means
        "rejected") and a closed stdout ends a batch quietly."""
        argv = list(sys.argv[1:] if args is None else args)
        OUTPUT.reset(argv)
        try:
            code = super().main(argv, prog_name, complete_var, standalone_mode=False, **extra)
        except (KeyboardInterrupt, click.exceptions.Abort):
            sys.stderr.write("\n")
            report_failure("interrupted", "interrupted", INTERRUPTED)
            code = INTERRUPTED
        except click.ClickException as err:
            show_click_error(err)
            code = err.exit_code
        except BrokenPipeError:  # `mrtr-state verify - < big | head` closes our stdout early
            sys.stderr.close()
            code = 1
        code = code if isinstance(code, int) else 0
        if standalone_mode:
            sys.exit(code)
        return code

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = _COMMANDS.get(cmd_name)
        if target is None:
            return None
        module_name, attribute = target.split(":")
        module = importlib.import_module(f"{__name__}.{module_name}")
        command: click.Command = getattr(module, attribute)
        return with_global_options(command)


# --- the group ------------------------------------------------------------------------------

#: The last thing ``mrtr-state --help`` says (and the man page's SHELL COMPLETION): how to turn
#: on click's completion, as docs/cli.md gives it.
COMPLETION_HELP = """\b
Shell completion of commands, options and key ids:
  bash, in ~/.bashrc:  eval "$(_MRTR_STATE_COMPLETE=bash_source mrtr-state)"
  zsh, in ~/.zshrc:    eval "$(_MRTR_STATE_COMPLETE=zsh_source mrtr-state)"
  fish:  _MRTR_STATE_COMPLETE=fish_source mrtr-state \\
           > ~/.config/fish/completions/mrtr-state.fish
"""


@click.group(
    cls=LazyGroup,
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog=COMPLETION_HELP,
)
@click.option(
    "--keyset",
    "-k",
    metavar="PATH",
    help=KEYSET_HELP + " Also accepted after any command.",
)
@click.option(
    "--config",
    metavar="PATH",
    help=CONFIG_HELP + " Also accepted after any command.",
)
@click.option(
    "--kek",
    metavar="URI",
    help=KEK_HELP + " Also accepted after any command.",
)
@click.version_option(None, "-V", "--version", package_name="mrtr-state")
@click.pass_context
def cli(ctx: click.Context, keyset: str | None, config: str | None, kek: str | None) -> None:
    """Mint, verify, inspect and seal MCP requestState tokens, and manage their keys.

    \b
    Start with:
      mrtr-state keys init
      TOKEN=$(mrtr-state mint --principal alice --request-id req-42 --state '{"step":2}')
      mrtr-state verify --principal alice --request-id req-42 "$TOKEN"
      mrtr-state inspect "$TOKEN"

    Exit codes: 0 valid, 1 rejected, 2 usage, 3 expired or not yet valid, 4 binding mismatch,
    5 replayed, 6 keyset, config or store error, 7 proxy cannot listen, 8 probe could not probe
    the server, 75 not yet (retry later), 130 interrupted.
    """
    ctx.obj = App(keyset_flag=keyset, config_flag=config, kek_flag=kek)
    from .._cli_api import set_kek_prompter

    set_kek_prompter(_ask_at_terminal)  # passphrase:prompt asks here, and only here
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        ctx.color = False  # no-color.org; every sub-command's context inherits it


def _ask_at_terminal(what: str, twice: bool) -> bytes:
    """A secret typed at the terminal, never echoed (``passphrase:prompt``); refused when no
    person is there to type it (stdin is not a terminal: a pipe, a CronJob, a CI step)."""
    import sys

    from .. import KekUnavailable

    if not sys.stdin.isatty():
        raise KekUnavailable(
            f"the {what} is asked at a terminal, and stdin is not one; in scripts give it as "
            "passphrase:env:NAME or passphrase:file:PATH"
        )
    while True:
        typed = _typed(what[:1].upper() + what[1:], what)
        if not twice or _typed("Repeat for confirmation", what) == typed:
            return typed.encode("utf-8")
        click.echo("The two entries do not match: type it again.", err=True)


def _typed(label: str, what: str) -> str:
    """One hidden answer at the terminal, asked again while it is empty (Enter alone is no
    secret); Ctrl-D (end of input) or Ctrl-C ends the command, exit 130, nothing written."""
    while True:
        # a default of "" lets an empty answer reach this loop, which says why it asks again
        answer: str = click.prompt(label, hide_input=True, err=True, default="", show_default=False)
        if answer:
            return answer
        click.echo(f"An empty {what} protects nothing: type it, or Ctrl-D to stop.", err=True)


#: The exit code of a command interrupted with Ctrl-C (128 + SIGINT, as shells report it).
INTERRUPTED = 130


def main() -> None:
    """Run the CLI (see :meth:`LazyGroup.main` for how it ends)."""
    cli.main(prog_name="mrtr-state")
