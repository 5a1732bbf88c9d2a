"""The ``mrtr-state`` command: a thin shell over the library.

Each command parses its options, calls one library function and renders the result as text or
``--json``. Every library error maps to the exit code of its class (see ``errors.py``) with one
line on stderr; nothing here decides whether a token is valid.
"""

from __future__ import annotations

import importlib
import os
import sys

import click

from ._group import (
    CONFIG_HELP,
    KEK_HELP,
    KEYSET_HELP,
    App,
    ErrorMappingGroup,
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
}
# What `mrtr-state --help` lists, so that listing imports no command module. A test checks that
# each line is the start of its command's own help.
SUMMARIES = {
    "audit": "Audit a captured MCP session (JSON Lines).",
    "inspect": "Show what TOKEN (or stdin) is made of, verified if a keyset is found.",
    "keys": "Create, list and move keys through their lifecycle.",
    "mint": "Mint a requestState token; print it alone on stdout.",
    "proxy": "Serve a reverse proxy that seals every requestState the upstream emits.",
    "rotate": "Advance key rotation by one safe step; made for cron.",
    "seal": "Seal the bytes on stdin into a token (no claims).",
    "unseal": "Check TOKEN (or stdin) and write its sealed payload to stdout.",
    "verify": "Verify TOKEN (or each line of stdin); print its state.",
}


class LazyGroup(ErrorMappingGroup):
    """The top-level group: commands listed up front, their modules loaded on demand."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(_COMMANDS)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(name, SUMMARIES[name]) for name in self.list_commands(ctx)])

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = _COMMANDS.get(cmd_name)
        if target is None:
            return None
        module_name, attribute = target.split(":")
        module = importlib.import_module(f"{__name__}.{module_name}")
        command: click.Command = getattr(module, attribute)
        return with_global_options(command)


# --- the group ------------------------------------------------------------------------------


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
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
    5 replayed, 6 keyset or config error.
    """
    ctx.obj = App(keyset_flag=keyset, config_flag=config, kek_flag=kek)
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        ctx.color = False  # no-color.org; every sub-command's context inherits it


#: The exit code of a command interrupted with Ctrl-C (128 + SIGINT, as shells report it).
INTERRUPTED = 130


def main() -> None:
    """Run the CLI: click's own handling, except that Ctrl-C exits 130 (never 1, which means
    "rejected") and a closed stdout ends a batch quietly."""
    try:
        code = cli.main(prog_name="mrtr-state", standalone_mode=False)
    except (KeyboardInterrupt, click.exceptions.Abort):
        sys.stderr.write("\ninterrupted\n")
        sys.exit(INTERRUPTED)
    except click.ClickException as err:
        err.show()
        sys.exit(err.exit_code)
    except BrokenPipeError:  # `mrtr-state verify - < big | head` closes our stdout early
        sys.stderr.close()
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)
