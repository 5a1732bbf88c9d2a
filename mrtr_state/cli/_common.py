"""What every mrtr-state command shares: settings, the keyset, options, errors, output.

Each command parses its options, calls one library function and renders the result as text or
``--json``. Every library error maps to the exit code of its class (see ``errors.py``) with one
line on stderr; nothing here decides whether a token is valid.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click

from .._encoding import EncodingError, json_dumps, json_loads
from ..config import KEYSET_JSON_ENV, Settings, load_settings
from ..durations import parse_duration
from ..errors import KeysetError, MrtrStateError
from ..formats import FORMAT_NAMES
from ..keyset import Keyset

F = TypeVar("F", bound=Callable[..., Any])


KEYSET_HELP = "Keyset file [env MRTR_STATE_KEYSET; config; default keys/keyset.json]."
CONFIG_HELP = "TOML config file [env MRTR_STATE_CONFIG; default ./mrtr-state.toml]."


def _remember_flag(ctx: click.Context, param: click.Parameter, value: Path | None) -> None:
    """Option callback: a --keyset or --config given here beats one given further out."""
    app = ctx.find_object(App)
    if value is not None and app is not None:
        setattr(app, f"{param.name}_flag", value)


def with_global_options(command: click.Command) -> click.Command:
    """Give ``command`` the global --keyset and --config, so that they work after it too.

    Scripts written from the CLI contract put them anywhere (``mrtr-state verify --keyset prod.json
    TOKEN``); the one closest to the command wins, as with kubectl or gh.
    """
    names = {name for param in command.params for name in getattr(param, "opts", ())}
    if "--keyset" not in names:
        path = click.Path(dir_okay=False, path_type=Path)
        command.params += [
            click.Option(
                ["--keyset", "-k"],
                type=path,
                expose_value=False,
                callback=_remember_flag,
                help=KEYSET_HELP,
            ),
            click.Option(
                ["--config"],
                type=path,
                expose_value=False,
                callback=_remember_flag,
                help=CONFIG_HELP,
            ),
        ]
    return command


class ErrorMappingGroup(click.Group):
    """A group that turns library errors into one stderr line and the documented exit code.

    Every command added to it takes the global options too (see :func:`with_global_options`).
    """

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        super().add_command(with_global_options(cmd), name)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except MrtrStateError as err:
            click.echo(f"error: {err}", err=True)
            ctx.exit(err.exit_code)
        except ValueError as err:  # the library's word for a bad argument: a usage error
            raise click.UsageError(str(err)) from None


@dataclass
class App:
    """What the top-level options decided; commands ask it for settings and the keyset."""

    keyset_flag: Path | None
    config_flag: Path | None

    def settings(self, **flags: Any) -> Settings:
        keyset = None if self.keyset_flag is None else str(self.keyset_flag)
        return load_settings({"keyset": keyset, **flags}, config=self.config_flag)

    def keyset(self, settings: Settings) -> Keyset:
        """The keyset to read: inline from the environment, else the file."""
        if settings.keyset_json is not None:
            return Keyset.from_json(settings.keyset_json, source=KEYSET_JSON_ENV)
        return Keyset.load(settings.keyset_path)

    def writable_path(self, settings: Settings) -> Path:
        """The keyset file a command may write; refuses the read-only inline keyset."""
        if settings.keyset_json is not None:
            raise KeysetError(
                f"the keyset comes from {KEYSET_JSON_ENV}, which is read-only; "
                "write to a keyset file with --keyset PATH"
            )
        return settings.keyset_path


def emit_json(value: Any) -> None:
    click.echo(json_dumps(value))


def fail(message: str, code: int) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    raise click.exceptions.Exit(code)


# --- shared options -------------------------------------------------------------------------


def json_option(func: F) -> F:
    return click.option(
        "--json", "as_json", is_flag=True, help="Print one JSON object instead of text."
    )(func)


def format_option(default_help: str) -> Callable[[F], F]:
    def decorate(func: F) -> F:
        return click.option(
            "--format", "-f", "fmt", type=click.Choice(FORMAT_NAMES), help=default_help
        )(func)

    return decorate


def binding_options(func: F) -> F:
    """--principal, --audience and the request binding (an id, or method/target/arguments)."""
    options = [
        click.option(
            "--principal", "-p", metavar="P", help="Authenticated principal the token is bound to."
        ),
        click.option(
            "--audience",
            "-a",
            metavar="A",
            help="Audience (this server or fleet); default from config.",
        ),
        click.option(
            "--request-id", "-r", metavar="R", help="Identifier of the originating request."
        ),
        click.option(
            "--method",
            metavar="M",
            help="Request method (tools/call, prompts/get, resources/read).",
        ),
        click.option("--target", metavar="T", help="Tool name, prompt name or resource URI."),
        click.option("--arguments", metavar="JSON", help="Request arguments as a JSON object."),
        click.option("--bind", metavar="VALUE", help="mcp-ts only: the SDK's bind value."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def request_binding(
    request_id: str | None,
    method: str | None,
    target: str | None,
    arguments: str | None,
    bind: str | None = None,
) -> dict[str, Any]:
    """The request-binding keyword arguments of mint and verify, from the command line."""
    if request_id is not None and (method or target or arguments):
        raise click.UsageError("give --request-id or --method/--target/--arguments, not both")
    if (method is None) != (target is None):
        raise click.UsageError("a request binding needs both --method and --target")
    if arguments is not None and method is None:
        raise click.UsageError("--arguments needs --method and --target")
    return {
        "request_id": request_id,
        "method": method,
        "target": target,
        "arguments": None if arguments is None else parse_json(arguments, "--arguments"),
        "bind": bind,
    }


def parse_json(text: str, what: str) -> Any:
    try:
        return json_loads(text.strip())
    except EncodingError as err:
        raise click.UsageError(f"{what} is not valid JSON: {err}") from None


def read_state(value: str | None) -> Any:
    if value is None:
        return None
    if value == "-":
        return parse_json(sys.stdin.read(), "the state on stdin")
    if value.startswith("@"):
        path = Path(value[1:])
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            raise click.UsageError(f"cannot read state file {path}: {err}") from None
        return parse_json(text, f"state file {path}")
    return parse_json(value, "--state")


def single_token(token: str) -> str:
    """The token argument, or the one token on stdin for ``-``."""
    if token != "-":
        return token
    text = sys.stdin.read().strip()
    if not text:
        raise click.UsageError("no token on stdin")
    return text


pass_app = click.make_pass_decorator(App)


def _to_seconds(ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    """Option callback: ``90s``, ``15m``, ``1h30m``, ``7d`` or plain seconds."""
    del ctx
    if value is None:
        return None
    try:
        return parse_duration(value)
    except ValueError as err:
        raise click.BadParameter(str(err), param=param) from None


def duration_option(name: str, help: str) -> Callable[[F], F]:
    """An option whose value is a duration, handed to the command in whole seconds."""

    def decorate(func: F) -> F:
        return click.option(name, metavar="DURATION", callback=_to_seconds, help=help)(func)

    return decorate
