"""The top-level group's machinery, kept light: ``mrtr-state --help`` and every command load it.

Nothing here imports the keyset, config or token code at module level; the :class:`App` asks for
them when a command needs settings or keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import click

from .. import KeysetError, MrtrStateError
from .._cli_api import printable

if TYPE_CHECKING:
    from pathlib import Path

    from .. import Keyset
    from .._cli_api import Kek, Settings

KEYSET_HELP = "Keyset file [env MRTR_STATE_KEYSET; config; default keys/keyset.json]."
CONFIG_HELP = "TOML config file [env MRTR_STATE_CONFIG; default ./mrtr-state.toml]."
KEK_HELP = (
    "KEK of an encrypted keyset, e.g. passphrase:env:NAME, pkcs11:..., exec:HELPER "
    "[env MRTR_STATE_KEK; config kek]."
)


def _remember_flag(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    """Option callback: a --keyset or --config given here beats one given further out."""
    app = ctx.find_object(App)
    if value is not None:
        # shell completion parses without running the group, so no App exists: it reads these
        ctx.meta[f"mrtr_state.{param.name}"] = value
        if app is not None:
            setattr(app, f"{param.name}_flag", value)


def with_global_options(command: click.Command) -> click.Command:
    """Give ``command`` the global --keyset and --config, so that they work after it too.

    Scripts written from the CLI contract put them anywhere (``mrtr-state verify --keyset prod.json
    TOKEN``); the one closest to the command wins, as with kubectl or gh.
    """
    names = {name for param in command.params for name in getattr(param, "opts", ())}
    if "--kek" not in names:  # keys rewrap has its own --kek: the new KEK
        command.params.append(_global_option(["--kek"], "URI", KEK_HELP))
    if "--keyset" not in names:
        command.params += [
            _global_option(["--keyset", "-k"], "PATH", KEYSET_HELP),
            _global_option(["--config"], "PATH", CONFIG_HELP),
        ]
    return command


def _global_option(names: list[str], metavar: str, help: str) -> click.Option:
    """A global option repeated on a command: remembered on the App, not passed to it."""
    return click.Option(
        names, metavar=metavar, expose_value=False, callback=_remember_flag, help=help
    )


#: How the CLI words each remedy a library error names (see ``mrtr_state.errors.REMEDIES``):
#: the library says what is wrong, the command line says which command puts it right.
_REMEDIES = {
    "create_keyset": "create one with: mrtr-state keys init (or pass --keyset)",
    "add_key": (
        "add one with: mrtr-state keys add --alg {alg}, or promote a pending one with: "
        "mrtr-state keys promote KID"
    ),
    "replace_key": "generate a new key with: mrtr-state keys add --alg {alg}",
    "reimport_key": "re-import the secret with: mrtr-state keys import",
    "import_key": "import it with: mrtr-state keys import --alg {alg}{kid} --secret-file FILE",
    "encrypt_keyset": "if this is intended, encrypt it with: mrtr-state keys encrypt --kek {kek}",
    "list_keys": "see: mrtr-state keys list",
    "use_state_store": "give the store's URL with --state-store URL",
    "promote_later": (
        "wait for it with: mrtr-state keys promote --wait {key} (or promote it now with --force)"
    ),
}


def error_text(err: MrtrStateError) -> str:
    """A library error as the CLI says it: its message, and the command that puts it right
    when the error names a remedy."""
    if err.remedy is None:
        return str(err)
    action, facts = err.remedy
    hint = _REMEDIES[action].format(
        alg=facts.get("alg", "ALG"),
        kek=facts.get("kek", "URI"),
        kid=" --kid KID" if facts.get("sdk_kid") else "",
        key=facts.get("key", "KID"),
    )
    return f"{err}; {hint}"


#: The members a command's --json keeps on every outcome, as a failure gives them (beside its
#: "error"): its verdict, so that a script reads one member whatever happened. Every other
#: command's failure is {"error": {...}} alone (docs/cli.md lists each command's shape).
FAILURE_MEMBERS: dict[str, dict[str, Any]] = {
    "verify": {"valid": False},
    "doctor": {"ok": False, "settings": [], "checks": []},  # none read, none run
    "audit": {"clean": False},
    # the report's members, empty: a server not probed at all (a usage error) reads as one
    # probed not at all
    "probe": {
        "target": None,
        "server": None,
        "format": None,
        "checks": [],
        "findings": [],
        "requests": 0,
    },
}

#: The top-level options that take a value (the word after them is not the command).
_VALUED = ("--keyset", "-k", "--config", "--kek")


class Output:
    """What this run has promised its caller on stdout: with ``--json``, exactly one JSON object
    per outcome, a failure included, in the command's shape. Reset at the start of every run
    (tests run many in one process)."""

    __slots__ = ("command", "emitted", "json")

    def __init__(self) -> None:
        self.json = False  # --json was asked for
        self.emitted = False  # a JSON object has been written for this outcome
        self.command: str | None = None  # the command named, as typed

    def reset(self, args: list[str]) -> None:
        # --json and the command are seen in the arguments as typed, so that a mistake click
        # finds while parsing (before any option's value is known) is answered in the
        # command's JSON shape too
        before_end = args[: args.index("--")] if "--" in args else args
        self.json = "--json" in before_end
        self.emitted = False
        self.command = _command_named(before_end)


def _command_named(args: list[str]) -> str | None:
    """The command in ``args``: the first word that is neither an option nor the value of a
    top-level option (the group takes no other arguments)."""
    words = iter(args)
    for word in words:
        if word in _VALUED:
            next(words, None)
        elif not word.startswith("-"):
            return word
    return None


OUTPUT = Output()


def failure_object(failure: Mapping[str, Any]) -> dict[str, Any]:
    """The one --json object of a failed outcome of this run's command: its verdict member
    (:data:`FAILURE_MEMBERS`), if it has one, beside ``error``."""
    return {**FAILURE_MEMBERS.get(OUTPUT.command or "", {}), "error": dict(failure)}


def report_failure(
    message: str, code: str, exit_code: int, details: Mapping[str, Any] | None = None
) -> None:
    """Say a failure: one ``error:`` line on stderr, and with --json one object on stdout
    (unless the command has already written its own object for this outcome). ``details``:
    the error's facts for scripts, beside its code in the JSON (e.g. how long to wait)."""
    shown = printable(message)
    click.echo(f"error: {shown}", err=True)
    if OUTPUT.json and not OUTPUT.emitted:
        from .._cli_api import json_dumps, terminal_json

        failure = {"code": code, "message": shown, "exit_code": exit_code, **(details or {})}
        click.echo(terminal_json(json_dumps(failure_object(failure))))
        OUTPUT.emitted = True


def show_click_error(err: click.ClickException) -> None:
    """A click error (a usage mistake, mostly) as every other failure is said: ``error:`` in
    lower case, after click's usage line and hint, and as JSON with --json."""
    if isinstance(err, click.exceptions.NoArgsIsHelpError):  # no arguments: the help, exit 2
        err.show()
        return
    if isinstance(err, click.UsageError) and err.ctx is not None:
        ctx = err.ctx
        hint = ""
        if ctx.command.get_help_option(ctx) is not None:
            option = max(ctx.command.get_help_option_names(ctx), key=len)
            hint = f"Try '{ctx.command_path} {option}' for help.\n"
        click.echo(f"{ctx.get_usage()}\n{hint}", err=True, color=ctx.color)
    code = getattr(err, "code", None) or ("usage" if err.exit_code == 2 else "error")
    report_failure(err.format_message(), code, err.exit_code)


class ErrorMappingGroup(click.Group):
    """A group that turns library errors into one stderr line and the documented exit code.

    Every command added to it takes the global options too (see :func:`with_global_options`).
    """

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        super().add_command(with_global_options(cmd), name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """Each command with its whole first sentence: click cuts them at 45 characters."""
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit=200)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except MrtrStateError as err:
            report_failure(error_text(err), err.code, err.exit_code, err.details)
            ctx.exit(err.exit_code)
        except ValueError as err:  # the library's word for a bad argument: a usage error
            raise click.UsageError(printable(str(err))) from None


class App:
    """What the top-level options decided; commands ask it for settings and the keyset."""

    __slots__ = ("_kek", "config_flag", "kek_flag", "keyset_flag")

    def __init__(
        self, keyset_flag: str | None, config_flag: str | None, kek_flag: str | None = None
    ) -> None:
        self.keyset_flag = keyset_flag
        self.config_flag = config_flag
        self.kek_flag = kek_flag
        self._kek: tuple[str, Kek] | None = None

    def settings(self, **flags: Any) -> Settings:
        from .._cli_api import load_settings

        given = {"keyset": self.keyset_flag, "kek": self.kek_flag, **flags}
        return load_settings(given, config=self.config_flag)

    def kek(self, settings: Settings) -> Kek | None:
        """The configured KEK, one object per process: what it unwrapped is remembered, so a
        command that reads then writes the keyset asks the KEK (scrypt, an HSM, a helper) once."""
        if settings.kek is None:
            return None
        if self._kek is None or self._kek[0] != settings.kek:
            from .._cli_api import kek_from_uri

            self._kek = (settings.kek, kek_from_uri(settings.kek))
        return self._kek[1]

    def keyset(self, settings: Settings) -> Keyset:
        """The keyset to read: inline from the environment, else the file."""
        from .. import Keyset
        from .._cli_api import KEYSET_JSON_ENV

        kek = self.kek(settings)
        if settings.keyset_json is not None:
            return Keyset.from_json(settings.keyset_json, source=KEYSET_JSON_ENV, kek=kek)
        return Keyset.load(settings.keyset_file, kek=kek)

    def writable_path(self, settings: Settings) -> Path:
        """The keyset file a command may write; refuses the read-only inline keyset."""
        if settings.keyset_json is not None:
            raise KeysetError(
                "the keyset comes from MRTR_STATE_KEYSET_JSON, which is read-only; "
                "write to a keyset file with --keyset PATH"
            )
        return settings.keyset_path
