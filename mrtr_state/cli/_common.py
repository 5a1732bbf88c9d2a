"""What every mrtr-state command shares: settings, the keyset, options, errors, output.

Command modules take all of it from here (the group machinery of ``_group`` included), so that
an option, a way of reading a token or of printing a result is written once and behaves alike
in every command.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple, NoReturn, TypeVar

import click

from .._cli_api import (
    FORMAT_NAMES,
    EncodingError,
    json_loads,
    parse_duration,
    report_json,
)

# The group machinery, re-exported: command modules take everything shared from here.
from ._group import OUTPUT, report_failure
from ._group import App as App
from ._group import ErrorMappingGroup as ErrorMappingGroup
from ._group import error_text as error_text

if TYPE_CHECKING:
    from .. import MrtrStateError
    from .._cli_api import Kek, Settings

F = TypeVar("F", bound=Callable[..., Any])


def json_report(value: Any) -> str:
    """``value`` as compact JSON for --json output: reports wrap what a token held, at any
    depth its reader accepted (see ``report_json``)."""
    return report_json(value)


def emit_json(value: Any) -> None:
    """Print ``value`` as one line of JSON, inert on a terminal (see ``_printable``): the one
    object of this outcome, so a failure after it adds no second one."""
    from .._cli_api import terminal_json

    click.echo(terminal_json(json_report(value)))
    OUTPUT.emitted = True


def fail(message: str, exit_code: int, code: str = "usage") -> NoReturn:
    """End the command: ``message`` on stderr (and as JSON with --json), exit ``exit_code``."""
    report_failure(message, code, exit_code)
    raise click.exceptions.Exit(exit_code)


def failure_json(err: MrtrStateError) -> dict[str, Any]:
    """The ``error`` member of a --json answer that reports ``err``."""
    return {"code": err.code, "message": str(err), "exit_code": err.exit_code, **err.details}


#: Which exit code a batch (``verify -``, ``inspect -``) ends with when its lines failed in
#: different ways: the most severe, first here. A store or keyset that failed mid-batch means
#: lines went unchecked; a replay or a binding mismatch is an authentic token in the wrong hands;
#: a rejection (forged, malformed, unknown key) outranks an expiry, and a line that held no token
#: at all (2) ranks last, so an empty line never hides a real refusal.
SEVERITY = (6, 5, 4, 1, 3, 2)


def most_severe(current: int, new: int) -> int:
    """The exit code of a batch after a line that failed with ``new`` (see :data:`SEVERITY`)."""
    if current == 0:
        return new
    rank = {code: n for n, code in enumerate(SEVERITY)}
    return new if rank.get(new, 0) < rank.get(current, 0) else current


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


class Stated(NamedTuple):
    """The binding a command line states, as given: what :func:`binding_options` hands its
    command, as one value (``stated``)."""

    principal: str | None
    audience: str | None
    request_id: str | None
    method: str | None
    target: str | None
    arguments: str | None
    bind: str | None
    bind_file: str | None

    def request(self) -> dict[str, Any]:
        """The request binding's keyword arguments, checked (see :func:`request_binding`)."""
        return request_binding(
            self.request_id, self.method, self.target, self.arguments, self.bind, self.bind_file
        )


def binding_options(func: F) -> F:
    """--principal, --audience and the request binding (an id, or method/target/arguments),
    handed to the command as one :class:`Stated` (its ``stated`` argument)."""

    @functools.wraps(func)
    def stating(*args: Any, **values: Any) -> Any:
        stated = Stated(*(values.pop(name) for name in Stated._fields))
        return func(*args, stated=stated, **values)

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
        click.option(
            "--bind",
            metavar="VALUE",
            help="mcp-ts, mcp-rs and mcp-rs2: the SDK's bind value (mcp-rs and mcp-rs2 "
            "authenticate it with the tag, so a wrong one is refused as a bad signature).",
        ),
        click.option(
            "--bind-file",
            metavar="FILE",
            help="The bind value as the bytes of FILE, exactly (NUL bytes and newlines "
            "included; nothing is stripped).",
        ),
    ]
    command: Any = stating
    for option in reversed(options):
        command = option(command)
    return command  # type: ignore[no-any-return]


#: The most bytes a bind value file may hold.
MAX_BIND_BYTES = 1 << 16


def request_binding(
    request_id: str | None,
    method: str | None,
    target: str | None,
    arguments: str | None,
    bind: str | None = None,
    bind_file: str | None = None,
) -> dict[str, Any]:
    """The request-binding keyword arguments of mint and verify, from the command line.

    The rules of a binding are the library's (:class:`mrtr_state.Binding`), checked
    here once so that a mistake is a usage error (exit 2) before any keyset is read.
    """
    if bind is not None and bind_file is not None:
        raise click.UsageError("give --bind or --bind-file, not both")
    parsed = None if arguments is None else parse_json(arguments, "--arguments")
    if arguments is not None and parsed is None:
        # JSON null would read as "no arguments" below; stated on the command line, it is a mistake
        raise click.UsageError(
            "arguments must be a JSON object (MCP tool and prompt arguments are objects), "
            "not a literal"
        )
    bound: str | bytes | None = bind
    if bind_file is not None:
        bound = read_small_file(bind_file, MAX_BIND_BYTES, "bind file")
    request: dict[str, Any] = {
        "request_id": request_id,
        "method": method,
        "target": target,
        "arguments": parsed,
        "bind": bound,
    }
    from .. import Binding

    try:
        Binding(**request)
    except ValueError as err:
        raise click.UsageError(str(err)) from None
    return request


def read_small_file(path: str, limit: int, what: str) -> bytes:
    """The bytes of ``path`` exactly, refused (usage error) when unreadable or over ``limit``."""
    from ._stdin import read_bounded

    try:
        with open(path, "rb") as handle:
            data = read_bounded(handle, limit)
    except OSError as err:
        raise click.UsageError(f"cannot read {what} {path}: {err.strerror}") from None
    if data is None:
        raise click.UsageError(f"{what} {path} is over {limit} bytes")
    return data


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


NO_TOKEN = "no token"


class NoToken(click.UsageError):
    """No token at all where one was needed: a usage error, said as ``no_token`` in --json."""

    code = "no_token"


def single_token(token: str | None, limit: int) -> str:
    """The one token given as an argument, @FILE or on stdin, stripped of surrounding
    whitespace (terminals and editors add newlines). Input is read only up to ``limit``.

    No token (an empty argument, empty stdin, an empty file) is a usage error, never a token
    checked and found wanting: ``if mrtr-state verify ...`` must not pass on nothing.
    """
    from .. import OversizedToken
    from ._stdin import read_bounded

    source = token_source(token)
    if source == "-":
        data = read_bounded(sys.stdin.buffer, limit)
        where = "on stdin"
    elif source.startswith("@"):
        where = f"in {source[1:]}"
        try:
            with open(source[1:], "rb") as handle:
                data = read_bounded(handle, limit)
        except OSError as err:
            raise click.UsageError(f"cannot read token file {source[1:]}: {err.strerror}") from None
    else:
        text = source.strip()
        if not text:
            raise NoToken(f"{NO_TOKEN}: the TOKEN argument is empty")
        return text
    if data is None:  # the same refusal as a long argument: a token, and too long
        raise OversizedToken(f"the token {where} is over the {limit}-byte size cap")
    text = data.decode("ascii", "replace").strip()
    if not text:
        raise NoToken(f"{NO_TOKEN} {where}")
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


def _to_cap(ctx: click.Context, param: click.Parameter, value: str | None) -> int | str | None:
    """Option callback: a duration, or ``none`` (no cap)."""
    if value is not None and value.strip().lower() == "none":
        return "none"
    return _to_seconds(ctx, param, value)


def ttl_cap_option(func: F) -> F:
    """``--ttl-cap DURATION|none``: the longest lifetime a verifier accepts, for this run."""
    return click.option(
        "--ttl-cap",
        metavar="DURATION|none",
        callback=_to_cap,
        help="Refuse tokens that live longer than this; none accepts any lifetime, and tokens "
        "that never expire (rmcp's expiry 0) [config 'ttl_cap'; default 1h].",
    )(func)


def duration_option(name: str, help: str) -> Callable[[F], F]:
    """An option whose value is a duration, handed to the command in whole seconds."""

    def decorate(func: F) -> F:
        return click.option(name, metavar="DURATION", callback=_to_seconds, help=help)(func)

    return decorate


def kdf_cost_option(func: F) -> F:
    """--kdf-cost N: scrypt's cost (log2 N) for a passphrase KEK that wraps a data key now."""
    return click.option(
        "--kdf-cost",
        type=click.IntRange(10, 20),
        metavar="LOG2N",
        help="passphrase: KEKs only: scrypt cost as log2 of N (15 = 32 MiB, ~0.1 s per process "
        "start; each +1 doubles both) [default: 15].",
    )(func)


def wrapping_kek(app: App, settings: Settings, kdf_cost: int | None) -> Kek | None:
    """The configured KEK (None if there is none), as a command that wraps a new data key
    uses it: at ``kdf_cost`` when given."""
    if settings.kek is None:
        if kdf_cost is not None:
            raise click.UsageError("--kdf-cost needs a passphrase: KEK (--kek)")
        return None
    if kdf_cost is None:
        return app.kek(settings)
    from .._cli_api import kek_from_uri

    return kek_from_uri(settings.kek, kdf_log_n=kdf_cost)
