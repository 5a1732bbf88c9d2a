"""What every mrtr-state command shares: settings, the keyset, options, errors, output.

Each command parses its options, calls one library function and renders the result as text or
``--json``. Every library error maps to the exit code of its class (see ``errors.py``) with one
line on stderr; nothing here decides whether a token is valid.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import click

from .._encoding import EncodingError, json_dumps, json_loads
from ..durations import parse_duration
from ..formats import FORMAT_NAMES

# The group machinery, re-exported: command modules take everything shared from here.
from ._group import App as App
from ._group import ErrorMappingGroup as ErrorMappingGroup

F = TypeVar("F", bound=Callable[..., Any])


def emit_json(value: Any) -> None:
    """Print ``value`` as one line of JSON, inert on a terminal (see ``_printable``)."""
    from .._printable import terminal_json

    click.echo(terminal_json(json_dumps(value)))


def fail(message: str, code: int) -> NoReturn:
    from .._printable import printable

    click.echo(f"error: {printable(message)}", err=True)
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


#: The most state text read from stdin or a file: far over what fits in any token.
MAX_STATE_BYTES = 1 << 20


def read_state(value: str | None) -> Any:
    if value is None:
        return None
    if value == "-":
        from ._stdin import read_bounded

        data = read_bounded(sys.stdin.buffer, MAX_STATE_BYTES)
        if data is None:
            raise click.UsageError(f"the state on stdin is over {MAX_STATE_BYTES} bytes")
        return parse_json(data.decode("utf-8", "replace"), "the state on stdin")
    if value.startswith("@"):
        path = value[1:]
        try:
            with open(path, encoding="utf-8") as handle:
                text = handle.read()
        except (OSError, UnicodeDecodeError) as err:
            raise click.UsageError(f"cannot read state file {path}: {err}") from None
        return parse_json(text, f"state file {path}")
    return parse_json(value, "--state")


def token_source(token: str | None) -> str:
    """Where TOKEN comes from: "-" for stdin (also when it is omitted and stdin is a pipe or a
    file), "@PATH" for a file, else the argument itself."""
    if token is None:
        if sys.stdin.isatty():
            raise click.UsageError("give TOKEN, @FILE, or - to read tokens from stdin")
        return "-"
    return token


def single_token(token: str | None, limit: int) -> str:
    """The one token given as an argument, @FILE or on stdin, stripped of surrounding
    whitespace (terminals and editors add newlines). Input is read only up to ``limit``."""
    from ._stdin import read_bounded

    source = token_source(token)
    if source == "-":
        data = read_bounded(sys.stdin.buffer, limit)
        where = "stdin"
    elif source.startswith("@"):
        where = source[1:]
        try:
            with open(where, "rb") as handle:
                data = read_bounded(handle, limit)
        except OSError as err:
            raise click.UsageError(f"cannot read token file {where}: {err.strerror}") from None
    else:
        return source.strip()
    if data is None:
        raise click.UsageError(f"the token in {where} is over the {limit}-byte size cap")
    text = data.decode("ascii", "replace").strip()
    if not text:
        raise click.UsageError(f"no token in {where}")
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
