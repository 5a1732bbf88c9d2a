"""The ``mrtr-state`` command: a thin shell over the library.

Each command parses its options, calls one library function and renders the result as text or
``--json``. Every library error maps to the exit code of its class (see ``errors.py``) with one
line on stderr; nothing here decides whether a token is valid.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click

from . import _render
from ._encoding import EncodingError, json_dumps, json_loads
from .claims import request_id as make_request_id
from .config import Settings, load_settings
from .errors import InvalidToken, KeysetNotFound, MrtrStateError
from .formats import FORMAT_NAMES, get_format
from .keyset import ALGORITHMS, Key, Keyset
from .tokens import inspect as inspect_token
from .tokens import issue, seal, unseal, verify

F = TypeVar("F", bound=Callable[..., Any])

EXIT_USAGE = 2


class _Group(click.Group):
    """A group that turns library errors into one stderr line and the documented exit code."""

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
        return Keyset.load(settings.keyset_path)


def _emit_json(value: Any) -> None:
    click.echo(json_dumps(value))


def _fail(message: str, code: int) -> NoReturn:
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
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _request_binding(
    request_id: str | None, method: str | None, target: str | None, arguments: str | None
) -> str | None:
    if request_id is not None and (method or target or arguments):
        raise click.UsageError("give --request-id or --method/--target/--arguments, not both")
    if request_id is not None:
        return request_id
    if method is None and target is None and arguments is None:
        return None
    if not method or not target:
        raise click.UsageError("a request fingerprint needs both --method and --target")
    parsed = None if arguments is None else _parse_json(arguments, "--arguments")
    return make_request_id(method=method, target=target, arguments=parsed)


def _parse_json(text: str, what: str) -> Any:
    try:
        return json_loads(text)
    except EncodingError as err:
        raise click.UsageError(f"{what} is not valid JSON: {err}") from None


def _read_state(value: str | None) -> Any:
    if value is None:
        return None
    if value == "-":
        return _parse_json(sys.stdin.read(), "the state on stdin")
    if value.startswith("@"):
        path = Path(value[1:])
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            raise click.UsageError(f"cannot read state file {path}: {err}") from None
        return _parse_json(text, f"state file {path}")
    return _parse_json(value, "--state")


def _single_token(token: str) -> str:
    """The token argument, or the one token on stdin for ``-``."""
    if token != "-":
        return token
    text = sys.stdin.read().strip()
    if not text:
        raise click.UsageError("no token on stdin")
    return text


# --- the group ------------------------------------------------------------------------------


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--keyset",
    "-k",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Keyset file [env MRTR_STATE_KEYSET; config; default keys/keyset.json].",
)
@click.option(
    "--config",
    type=click.Path(dir_okay=False, path_type=Path),
    help="TOML config file [env MRTR_STATE_CONFIG; default ./mrtr-state.toml].",
)
@click.version_option(package_name="mrtr-state")
@click.pass_context
def cli(ctx: click.Context, keyset: Path | None, config: Path | None) -> None:
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
    ctx.obj = App(keyset_flag=keyset, config_flag=config)


pass_app = click.make_pass_decorator(App)


# --- keys -----------------------------------------------------------------------------------


@cli.group(cls=_Group)
def keys() -> None:
    """Create and list the keys in the keyset file (secrets are never printed)."""


@keys.command("init")
@click.option(
    "--alg",
    "algs",
    multiple=True,
    type=click.Choice(list(ALGORITHMS)),
    help="Algorithm of a primary key to create (repeatable) [default: one of each].",
)
@click.option("--force", is_flag=True, help="Replace an existing keyset (its keys are lost).")
@json_option
@pass_app
def keys_init(app: App, algs: tuple[str, ...], force: bool, as_json: bool) -> None:
    """Create a new keyset file, mode 0600, with one primary key per algorithm.

    By default one key for each format: A256GCM (aead), HS256 (jws) and dir+A256GCM (jwe).

    \b
    Examples:
      mrtr-state keys init
      mrtr-state --keyset /etc/mcp/keyset.json keys init --alg A256GCM
    """
    settings = app.settings()
    keyset = Keyset.generate(algs or tuple(ALGORITHMS))
    keyset.save(settings.keyset_path, overwrite=force)
    if as_json:
        _emit_json(
            {"keyset": str(settings.keyset_path), "keys": [key.describe() for key in keyset]}
        )
        return
    click.echo(f"created {settings.keyset_path} (mode 0600) with {len(keyset)} key(s):")
    for key in keyset:
        click.echo(f"  {key.kid}  {key.alg:<12} {key.format:<5} {key.status}")


@keys.command("add")
@click.option(
    "--alg",
    type=click.Choice(list(ALGORITHMS)),
    help="Algorithm of the new key [default: that of the configured format].",
)
@json_option
@pass_app
def keys_add(app: App, alg: str | None, as_json: bool) -> None:
    """Add a new key: primary if its algorithm has none, else pending (verify-only).

    \b
    Examples:
      mrtr-state keys add --alg HS256
      mrtr-state keys add --json | jq -r .kid
    """
    settings = app.settings()
    chosen = alg or get_format(settings.format).alg
    added: list[Key] = []

    def add(current: Keyset) -> Keyset:
        changed, key = current.with_new_key(chosen)
        added.append(key)
        return changed

    Keyset.update(settings.keyset_path, add)
    key = added[-1]
    if as_json:
        _emit_json({"keyset": str(settings.keyset_path), **key.describe()})
    else:
        click.echo(f"added {key.status} {key.alg} key {key.kid} to {settings.keyset_path}")


@keys.command("list")
@json_option
@pass_app
def keys_list(app: App, as_json: bool) -> None:
    """List the keys: id, algorithm, format, status and since when.

    \b
    Example:
      mrtr-state keys list --json | jq -r '.keys[] | select(.status=="primary") | .kid'
    """
    settings = app.settings()
    keyset = app.keyset(settings)
    if as_json:
        _emit_json(
            {"keyset": str(settings.keyset_path), "keys": [key.describe() for key in keyset]}
        )
        return
    click.echo(_render.key_table(keyset, now=time.time()))


# --- tokens ---------------------------------------------------------------------------------


@cli.command()
@format_option("Token format [config 'format'; default aead].")
@binding_options
@click.option(
    "--ttl",
    type=click.IntRange(min=1),
    metavar="SECONDS",
    help="Lifetime in seconds [config 'ttl'; default 300; cap 'ttl_cap'].",
)
@click.option(
    "--state",
    "-s",
    metavar="JSON|@FILE|-",
    help="State to carry: JSON text, @file, or - for stdin [default: null].",
)
@json_option
@pass_app
def mint(
    app: App,
    fmt: str | None,
    principal: str | None,
    audience: str | None,
    request_id: str | None,
    method: str | None,
    target: str | None,
    arguments: str | None,
    ttl: int | None,
    state: str | None,
    as_json: bool,
) -> None:
    """Mint a requestState token; print it alone on stdout.

    \b
    Examples:
      mrtr-state mint --principal alice --request-id req-42 --state '{"step":2}'
      mrtr-state mint -p alice --method tools/call --target deploy \\
          --arguments '{"env":"prod"}' --ttl 60 --state @state.json --json
    """
    settings = app.settings(format=fmt, audience=audience)
    rid = _request_binding(request_id, method, target, arguments)
    carried = _read_state(state)
    keyset = app.keyset(settings)
    minted = issue(
        keyset,
        carried,
        principal=principal,
        request_id=rid,
        ttl=ttl,
        audience=settings.audience,
        format=settings.format,
        policy=settings.policy,
    )
    if as_json:
        _emit_json(
            {
                "token": minted.token,
                "kid": minted.kid,
                "format": minted.format,
                "expires_at": minted.expires_at,
            }
        )
    else:
        click.echo(minted.token)


def _verify_result(claims_dict: dict[str, Any]) -> dict[str, Any]:
    return {"valid": True, "claims": claims_dict}


@cli.command("verify")
@format_option("Accept only this format [default: any, detected].")
@binding_options
@json_option
@click.argument("token")
@pass_app
def verify_cmd(
    app: App,
    fmt: str | None,
    principal: str | None,
    audience: str | None,
    request_id: str | None,
    method: str | None,
    target: str | None,
    arguments: str | None,
    as_json: bool,
    token: str,
) -> None:
    """Verify TOKEN (or each line of stdin for -); print its state.

    Text output is the state as JSON; --json prints every claim. A rejection names its reason on
    stderr and exits 1 (invalid), 3 (expired), 4 (binding mismatch) or 6 (keyset problem). With -
    each input line gives one output line, the state or "rejected: REASON", and the exit code is
    that of the first rejection.

    \b
    Examples:
      mrtr-state verify -p alice -r req-42 "$TOKEN"
      mrtr-state verify --json --audience fleet - < captured-tokens.txt
    """
    settings = app.settings(audience=audience)
    rid = _request_binding(request_id, method, target, arguments)
    keyset = app.keyset(settings)

    def check(text: str) -> dict[str, Any]:
        claims = verify(
            keyset,
            text,
            principal=principal,
            request_id=rid,
            audience=settings.audience,
            format=fmt,
            policy=settings.policy,
        )
        return claims.to_dict()

    if token == "-":
        raise click.exceptions.Exit(_verify_lines(check, sys.stdin, as_json))
    try:
        claims = check(token)
    except InvalidToken as err:
        if as_json:
            _emit_json({"valid": False, "error": {"code": err.code, "message": str(err)}})
        _fail(str(err), err.exit_code)
    if as_json:
        _emit_json(_verify_result(claims))
    else:
        click.echo(json_dumps(claims["st"]))


def _verify_lines(
    check: Callable[[str], dict[str, Any]], lines: Iterator[str] | Any, as_json: bool
) -> int:
    """Verify one token per line; one result line each. Returns the exit code."""
    first_failure = 0
    out = sys.stdout
    for number, line in enumerate(lines, start=1):
        text = line.strip()
        if not text:
            continue
        try:
            claims = check(text)
        except InvalidToken as err:
            first_failure = first_failure or err.exit_code
            if as_json:
                out.write(
                    json_dumps(
                        {
                            "line": number,
                            "valid": False,
                            "error": {"code": err.code, "message": str(err)},
                        }
                    )
                    + "\n"
                )
            else:
                out.write(f"rejected: {err}\n")
            continue
        if as_json:
            out.write(json_dumps({"line": number, **_verify_result(claims)}) + "\n")
        else:
            out.write(json_dumps(claims["st"]) + "\n")
    out.flush()
    return first_failure


@cli.command("inspect")
@json_option
@click.argument("token")
@pass_app
def inspect_cmd(app: App, as_json: bool, token: str) -> None:
    """Show what TOKEN (or - for stdin) is made of, verified only if a keyset can verify it.

    Works without a key: format, key id, and for readable formats the claims, all marked NOT
    VERIFIED. With the keyset at hand it also checks the tag and lifetime (not the bindings).

    \b
    Examples:
      mrtr-state inspect "$TOKEN"
      mrtr-state inspect --json - < token.txt | jq .verified
    """
    settings = app.settings()
    text = _single_token(token)
    try:
        keyset: Keyset | None = app.keyset(settings)
    except KeysetNotFound:
        if not settings.keyset_is_default:
            raise
        keyset = None  # no keyset at the default path: inspect works without one
    now = time.time()
    view = inspect_token(text, keyset=keyset, now=now, policy=settings.policy)
    if as_json:
        _emit_json(view.to_dict())
    else:
        click.echo(
            _render.inspection(
                view, now=now, keyset_source=None if keyset is None else str(settings.keyset_path)
            )
        )


@cli.command("seal")
@format_option("Token format [config 'format'; default aead].")
@pass_app
def seal_cmd(app: App, fmt: str | None) -> None:
    """Seal the bytes on stdin into a token (no claims, no expiry, no binding).

    Prefer mint: sealed tokens never expire and bind nothing. seal is for payloads that carry
    their own rules.

    \b
    Example:
      printf 'opaque bytes' | mrtr-state seal > sealed.txt
    """
    settings = app.settings(format=fmt)
    payload = sys.stdin.buffer.read(settings.policy.max_size + 1)
    click.echo(seal(app.keyset(settings), payload, format=settings.format, policy=settings.policy))


@cli.command("unseal")
@format_option("Accept only this format [default: any, detected].")
@click.argument("token")
@pass_app
def unseal_cmd(app: App, fmt: str | None, token: str) -> None:
    """Check TOKEN (or - for stdin) and write its sealed payload bytes to stdout.

    \b
    Example:
      mrtr-state unseal - < sealed.txt > payload.bin
    """
    settings = app.settings()
    payload = unseal(app.keyset(settings), _single_token(token), format=fmt, policy=settings.policy)
    sys.stdout.buffer.write(payload)
    sys.stdout.buffer.flush()


def main() -> None:
    """Console-script entry point."""
    try:
        cli.main(prog_name="mrtr-state")
    except BrokenPipeError:  # `mrtr-state verify - < big | head` closes our stdout early
        sys.stderr.close()
        sys.exit(1)
