"""``mrtr-state keys ...`` and ``mrtr-state rotate``: the keyset file and its lifecycle.

Every writing command reads, changes and writes the keyset under its lock (``Keyset.update``),
so two deploy scripts running at once never lose each other's keys.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from .. import Key, Keyset, KeysetError, PropagationPending, UnknownKeyId
from .. import _cli_api as life
from .._cli_api import (
    KEY_ALGORITHMS,
    OWN_ALGORITHMS,
    SDK_SECRET_BYTES,
    Kek,
    decode_secret,
    encode_secret,
    format_duration,
    key_algorithm_of,
    listed_without_kek,
    read_secret,
    sdk_kid_problem,
    secret_length_ok,
    secret_rule,
    text_secret,
    write_secret_file,
)
from . import _render
from ._common import (
    App,
    ErrorMappingGroup,
    duration_option,
    emit_json,
    json_option,
    kdf_cost_option,
    pass_app,
    wrapping_kek,
)
from ._complete import complete_kid
from .keys_encryption import keys_decrypt, keys_encrypt, keys_rewrap

_ALG = click.Choice(list(KEY_ALGORITHMS))


def _encoding_option(help: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """--encoding raw|base64|hex, for secrets read (keys import) or written (keys export)."""
    return click.option(
        "--encoding",
        type=click.Choice(["raw", "base64", "hex"]),
        default="raw",
        show_default=True,
        help=help,
    )


def _now() -> int:
    return int(time.time())


_RUN_TIME_KID = "(chosen at run time)"


def _report(
    changes: list[life.Change],
    *,
    path: str,
    dry_run: bool,
    as_json: bool,
    due: list[dict[str, Any]] | None = None,
) -> None:
    # A dry run cannot know the id a real run will draw for a new key: it says so.
    added = {c.kid for c in changes if c.action == "add"} if dry_run else set()
    if as_json:
        listed = []
        for change in changes:
            item = change.to_dict()
            if change.kid in added:
                item["kid"], item["kid_chosen_at_run_time"] = None, True
            listed.append(item)
        report: dict[str, Any] = {"keyset": path, "dry_run": dry_run, "changes": listed}
        if due is not None:
            report["next_due"] = [d for d in due if d["kid"] not in added]
        emit_json(report)
        return
    verb = "would " if dry_run else ""
    if not changes:
        click.echo(f"nothing to do in {path}")
    for change in changes:
        kid = _RUN_TIME_KID if change.kid in added else change.kid
        detail = change.detail.replace(change.kid, kid)
        click.echo(f"{verb}{change.action} {kid} ({change.alg}): {detail}")
    if due:
        first = next((d for d in due if d["kid"] not in added), None)
        if first is not None:
            click.echo(
                f"next: {first['action']} ({first['kid']}, {first['alg']}) from {first['at_utc']}"
            )


def _step(
    path: Path,
    step: Callable[[Keyset], tuple[Keyset, list[life.Change]]],
    *,
    dry_run: bool,
    as_json: bool,
    due: Callable[[Keyset], list[dict[str, Any]]] | None = None,
    before: list[life.Change] | None = None,
    kek: Kek | None = None,
) -> None:
    """Apply one lifecycle step under the keyset lock (or only report it) and print the changes
    (after ``before``, changes made earlier in the same command)."""
    changes: list[life.Change] = list(before or ())

    def change(current: Keyset) -> Keyset:
        changed, made = step(current)
        changes.extend(made)
        return changed

    if dry_run:
        after = change(Keyset.load(path, reload_interval=None, kek=kek))
    else:
        after = Keyset.update(path, change, kek=kek)
    upcoming = None if due is None else due(after)
    _report(changes, path=str(path), dry_run=dry_run, as_json=as_json, due=upcoming)


@click.group(cls=ErrorMappingGroup)
def keys() -> None:
    """Create, list and move keys through their lifecycle (secrets are never printed).

    pending (verifies) -> primary (mints) -> active (verifies) -> retired (refused) -> pruned.
    """


@keys.command("init")
@click.option(
    "--alg",
    "algs",
    multiple=True,
    type=_ALG,
    help="Algorithm of a primary key to create (repeatable) [default: one of each].",
)
@click.option("--force", is_flag=True, help="Replace an existing keyset (its keys are lost).")
@kdf_cost_option
@json_option
@pass_app
def keys_init(
    app: App, algs: tuple[str, ...], force: bool, kdf_cost: int | None, as_json: bool
) -> None:
    """Create a new keyset file, mode 0600, with one primary key per algorithm.

    By default one key for each format: A256GCM (aead), HS256 (jws) and dir+A256GCM (jwe).
    With --kek (or MRTR_STATE_KEK, or the config's kek) the file is encrypted under that KEK.

    \b
    Examples:
      mrtr-state keys init
      mrtr-state --keyset /etc/mcp/keyset.json keys init --alg A256GCM
      read -rs MRTR_STATE_PASSPHRASE && export MRTR_STATE_PASSPHRASE   # never in argv
      mrtr-state keys init --kek passphrase:env:MRTR_STATE_PASSPHRASE
    """
    settings = app.settings()
    path = app.writable_path(settings)
    kek = wrapping_kek(app, settings, kdf_cost)
    keyset = Keyset.generate(algs or OWN_ALGORITHMS)
    keyset.save(path, overwrite=force, kek=kek)
    if as_json:
        emit_json(
            {
                "keyset": str(path),
                "kek": None if kek is None else kek.uri,
                "keys": [key.describe() for key in keyset],
            }
        )
        return
    sealed = "" if kek is None else f", encrypted under {kek.uri}"
    click.echo(f"created {path} (mode 0600{sealed}) with {len(keyset)} key(s):")
    for key in keyset:
        click.echo(f"  {key.kid}  {key.alg:<12} {key.format:<5} {key.status}")


@keys.command("add")
@click.option(
    "--alg", type=_ALG, help="Algorithm of the new key [default: that of the configured format]."
)
@click.option("--dry-run", is_flag=True, help="Say what would be added; write nothing.")
@json_option
@pass_app
def keys_add(app: App, alg: str | None, dry_run: bool, as_json: bool) -> None:
    """Add a new key: pending (verify-only) while its algorithm has a primary, else primary.

    Roll the keyset out to every replica, then promote the pending key.

    \b
    Examples:
      mrtr-state keys add --alg HS256 --dry-run
      mrtr-state keys add --alg HS256
      KID=$(mrtr-state keys add --json | jq -r .kid)
    """
    settings = app.settings()
    path = app.writable_path(settings)
    chosen = alg or key_algorithm_of(settings.format)
    added: list[Key] = []

    def add(current: Keyset) -> Keyset:
        changed, key = current.with_new_key(chosen, now=_now())
        added.append(key)
        return changed

    if dry_run:
        add(Keyset.load(path, reload_interval=None, kek=app.kek(settings)))
    else:
        Keyset.update(path, add, kek=app.kek(settings))
    key = added[-1]
    if dry_run:  # the id is drawn from the new secret: a real run draws another
        if as_json:
            described = {**key.describe(), "kid": None, "kid_chosen_at_run_time": True}
            emit_json({"keyset": str(path), "dry_run": True, **described})
        else:
            click.echo(f"would add a {key.status} {key.alg} key {_RUN_TIME_KID} to {path}")
    elif as_json:
        described = {**key.describe(), "kid_chosen_at_run_time": False}
        emit_json({"keyset": str(path), "dry_run": False, **described})
    else:
        click.echo(f"added {key.status} {key.alg} key {key.kid} to {path}")


@keys.command("import")
@click.option("--alg", type=_ALG, required=True, help="Algorithm the secret is for.")
@click.option(
    "--secret-file",
    metavar="FILE|-",
    help="File holding the secret, or - for stdin: raw bytes exactly (mcp-py-v1 and mcp-ts-v1: "
    "the text the SDK is given, one final line break dropped), or text as --encoding says.",
)
@click.option(
    "--secret-env",
    metavar="NAME",
    help="Environment variable holding the secret (as SDK operators often pass it).",
)
@_encoding_option(
    "How the secret is written: raw bytes, base64 (standard or url-safe) or hex text."
)
@click.option(
    "--kid",
    "sdk_kid",
    metavar="KID",
    help="mcp-rs-v2 only: the key id rmcp's keyring gives this key (1-255 bytes of UTF-8), "
    "which its tokens carry.",
)
@click.option("--primary", is_flag=True, help="Make it the primary at once.")
@json_option
@pass_app
def keys_import(
    app: App,
    alg: str,
    secret_file: str | None,
    secret_env: str | None,
    encoding: str,
    sdk_kid: str | None,
    primary: bool,
    as_json: bool,
) -> None:
    """Import a secret made elsewhere; creates the keyset if it is missing.

    The key becomes primary when its algorithm has none (or with --primary), pending otherwise.
    Secrets are read from a file or stdin, never from the command line. The Python and
    TypeScript SDKs (mcp-py-v1, mcp-ts-v1) use their secret's text as it is: import that text,
    not a decoding of it (a file's final line break is dropped, with a note).

    \b
    Examples:
      head -c 32 /dev/urandom > secret.bin
      mrtr-state keys import --alg A256GCM --secret-file secret.bin
      vault kv get -field=key secret/mcp | mrtr-state keys import --alg HS256 --secret-file -
      mrtr-state keys import --alg mcp-py-v1 --secret-env MCP_REQUEST_STATE_KEY
      mrtr-state keys import --alg A256GCM --encoding base64 --secret-file key.b64
      mrtr-state keys import --alg mcp-rs-v2 --kid 2026-12 --secret-env RMCP_STATE_KEY
    """
    settings = app.settings()
    path = app.writable_path(settings)
    if (secret_file is None) == (secret_env is None):
        raise click.UsageError("give exactly one of --secret-file or --secret-env")
    problem = sdk_kid_problem(alg, sdk_kid, "--kid")
    if problem is not None:
        raise click.UsageError(problem)
    limit = SDK_SECRET_BYTES[1] * 2 + 2  # room for hex or base64 text of the longest secret
    source = secret_file or f"${secret_env}"
    text = KEY_ALGORITHMS[alg].text and encoding == "raw"
    if secret_file is not None:
        secret = read_secret(secret_file, sys.stdin.buffer, limit)
        if text:  # the SDK's text, as its environment variable holds it: no final line break
            secret, dropped = text_secret(secret, _named(secret_file))
            if dropped is not None:
                click.echo(
                    f"note: dropped the line break ({dropped}) that ends {_named(secret_file)}: "
                    f"an {alg} secret is the text the SDK is given",
                    err=True,
                )
    else:  # taken as the SDK would read it: the variable's text exactly
        secret = _env_secret(str(secret_env))
    if not text:
        secret = decode_secret(secret, encoding, source)
    if not secret_length_ok(alg, secret):
        raise click.UsageError(
            f"{alg} needs {secret_rule(alg)} secret bytes; {source} holds {len(secret)}"
            + _length_hint(alg, encoding)
        )
    imported: list[Key] = []

    def add(current: Keyset) -> Keyset:
        now = _now()
        changed, key = current.with_new_key(alg, secret=secret, now=now, sdk_kid=sdk_kid)
        if primary and key.status != "primary":
            changed, _changes = life.promote(changed, key.kid, now=now)
        imported.append(changed.get(key.kid) or key)
        return changed

    Keyset.update(path, add, create=True, kek=app.kek(settings))
    key = imported[-1]
    if as_json:
        emit_json({"keyset": str(path), **key.describe()})
    else:
        named = "" if key.sdk_kid is None else f" (rmcp key id {key.sdk_kid!r})"
        click.echo(f"imported {key.alg} key {key.kid}{named} as {key.status} into {path}")


def _named(secret_file: str) -> str:
    """A secret file as messages name it (``-`` is stdin)."""
    return "stdin" if secret_file == "-" else secret_file


def _length_hint(alg: str, encoding: str) -> str:
    """What to try when a secret has the wrong length: ``--encoding`` only where decoding the
    text gives the key its SDK uses (a raw key written down as text), never for an SDK that is
    given the text itself, whose key those characters are."""
    if KEY_ALGORITHMS[alg].text:
        return (
            " (the SDK uses the secret's text itself, so import exactly the text it is given; "
            "make one with: openssl rand -hex 32)"
        )
    if encoding == "raw":
        return " (if it holds base64 or hex text, say so with --encoding base64 or --encoding hex)"
    return ""


def _env_secret(name: str) -> bytes:
    value = os.environ.get(name)
    if not value:
        raise click.UsageError(f"environment variable {name} is not set or empty")
    return value.encode("utf-8")


@keys.command("export")
@click.argument("kid", shell_complete=complete_kid)
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the secret to this new file (created 0600; never overwritten).",
)
@click.option("--stdout", "to_stdout", is_flag=True, help="Write the secret to stdout instead.")
@_encoding_option("How to write it: raw bytes, base64url text or hex text.")
@json_option
@pass_app
def keys_export(
    app: App, kid: str, out: Path | None, to_stdout: bool, encoding: str, as_json: bool
) -> None:
    """Export the secret of key KID, for an interoperability check or an SDK's key ring.

    A secret leaves the keyset only where you say: a new 0600 file (--out) or stdout (--stdout),
    never by default. Prefer importing it where it is needed over keeping exported copies.
    --json says what was written where; the secret is in it ("secret", as --encoding base64 or
    hex writes it) only with --stdout.

    \b
    Examples:
      mrtr-state keys export 1a2b3c4d --out /run/secrets/sdk-key
      mrtr-state keys export 1a2b3c4d --stdout --encoding base64 | kubectl create secret ...
      mrtr-state keys export 1a2b3c4d --out key.hex --encoding hex --json
    """
    if (out is None) == (not to_stdout):
        raise click.UsageError("give exactly one of --out FILE or --stdout")
    if as_json and to_stdout and encoding == "raw":
        raise click.UsageError(
            "--json --stdout puts the secret in a JSON string, which raw bytes are not: "
            "give --encoding base64 or --encoding hex"
        )
    settings = app.settings()
    keyset = app.keyset(settings)
    key = keyset.get(kid)
    if key is None:
        raise UnknownKeyId(f"{settings.keyset_source} has no key {kid}").needing("list_keys")
    data = encode_secret(key.secret, encoding)
    report: dict[str, Any] = {
        "keyset": settings.keyset_source,
        "kid": kid,
        "alg": key.alg,
        "format": key.format,
        "encoding": encoding,
        "secret_bytes": len(key.secret),
        "written_to": "stdout" if out is None else str(out),
        "secret": None,  # never, unless --stdout asked for the secret itself
    }
    if to_stdout:
        if as_json:
            emit_json({**report, "secret": data.decode("ascii").strip()})
            return
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
        return
    assert out is not None
    write_secret_file(out, data)
    if as_json:
        emit_json(report)
        return
    click.echo(f"wrote the secret of {key.alg} key {kid} to {out} (mode 0600)", err=True)


@keys.command("promote")
@click.argument("kid", shell_complete=complete_kid)
@click.option(
    "--force",
    is_flag=True,
    help="Promote a pending key before its propagation delay has passed.",
)
@click.option(
    "--wait",
    is_flag=True,
    help="If KID's propagation delay has not passed yet, sleep until it has, then promote "
    "(Ctrl-C stops the wait and writes nothing).",
)
@click.option("--dry-run", is_flag=True, help="Say what would change; write nothing.")
@json_option
@pass_app
def keys_promote(app: App, kid: str, force: bool, wait: bool, dry_run: bool, as_json: bool) -> None:
    """Make pending key KID the primary; the old primary becomes active (verify-only).

    Promote only once every replica has the keyset that holds KID: a key pending for less than
    the propagation delay (config 'propagation', default 1h) is not promoted yet, exit 75 (retry
    later, with the time left), unless --force; --wait sleeps until then and promotes. An
    active key (a roll-back) is promoted at once.

    \b
    Examples:
      mrtr-state keys promote 1a2b3c4d --dry-run
      mrtr-state keys promote 1a2b3c4d
      mrtr-state keys promote --wait "$(mrtr-state keys add --json | jq -r .kid)"
    """
    if wait and (force or dry_run):
        raise click.UsageError(
            "--wait waits out the propagation delay and then writes: give it without "
            f"{'--force' if force else '--dry-run'}"
        )
    settings = app.settings()
    path = app.writable_path(settings)
    delay = None if force else settings.propagation
    if wait:
        _wait_until_promotable(path, kid, delay, app.kek(settings))
    _step(
        path,
        lambda current: life.promote(current, kid, now=_now(), propagation=delay),
        dry_run=dry_run,
        as_json=as_json,
        kek=app.kek(settings),
    )


def _wait_until_promotable(path: Path, kid: str, delay: int | None, kek: Kek | None) -> None:
    """Sleep until pending key ``kid`` may be promoted (at once if it may be now). Nothing is
    written while waiting, so Ctrl-C (exit 130) leaves the keyset as it was; any other refusal
    (an unknown or retired key) ends the wait at once."""
    told = False
    while True:
        keyset = Keyset.load(path, reload_interval=None, kek=kek)
        try:
            life.promote(keyset, kid, now=_now(), propagation=delay)
        except PropagationPending as early:
            if not told:
                until = time.strftime("%H:%M:%S UTC", time.gmtime(early.promotable_at))
                click.echo(
                    f"waiting {format_duration(early.seconds_left)} (until {until}) for the "
                    f"propagation delay of key {kid}; Ctrl-C stops and writes nothing",
                    err=True,
                )
                told = True
            time.sleep(early.seconds_left)
            continue
        return


@keys.command("retire")
@click.argument("kid", shell_complete=complete_kid)
@click.option("--yes", "-y", is_flag=True, help="Retire even the primary without asking.")
@click.option("--dry-run", is_flag=True, help="Say what would happen; change nothing.")
@json_option
@pass_app
def keys_retire(app: App, kid: str, yes: bool, dry_run: bool, as_json: bool) -> None:
    """Revoke key KID now: every token it made is refused from this moment.

    For a compromised key. Routine rotation retires keys only once their tokens have expired
    (see rotate). The output says how much time of still-valid tokens this cuts off.

    \b
    Retiring the primary stops minting for its algorithm until another key is added or promoted,
    so it asks first (or give --yes; in a script without a terminal it refuses without --yes).

    \b
    Examples:
      mrtr-state keys retire 1a2b3c4d --dry-run
      mrtr-state keys retire 1a2b3c4d --yes
    """
    settings = app.settings()
    path = app.writable_path(settings)
    if not dry_run:
        from .._cli_api import check_writable

        check_writable(path)  # a deployed copy is refused before any question is asked
    current = Keyset.load(path, reload_interval=None, kek=app.kek(settings))
    target = current.get(kid)
    if target is not None and target.status == "primary" and not (yes or dry_run):
        question = (
            f"{kid} is the primary {target.alg} key: nothing can mint {target.format} tokens "
            "until another key is added or promoted. Retire it?"
        )
        if not sys.stdin.isatty():
            raise click.UsageError(
                f"{kid} is the primary {target.alg} key; give --yes to retire it"
            )
        click.confirm(question, abort=True, err=True)
    results: list[tuple[life.Change, int, str]] = []

    def change(current: Keyset) -> Keyset:
        before = current.get(kid)
        changed, made, cut = life.retire(current, kid, now=_now(), retention=settings.retention)
        status = before.status if before is not None else "?"
        results.append((made, cut, status))
        return changed

    keyset = change(current) if dry_run else Keyset.update(path, change, kek=app.kek(settings))
    made, cut, was = results[-1]
    no_primary = was == "primary" and not any(
        k.alg == made.alg and k.status == "primary" for k in keyset
    )
    if as_json:
        emit_json(
            {
                "keyset": str(path),
                "dry_run": dry_run,
                **made.to_dict(),
                "cut_off_seconds": cut,
                "no_primary_left": no_primary,
            }
        )
        return
    click.echo(f"{'would retire' if dry_run else 'retired'} {kid} ({made.alg}): {made.detail}")
    if cut:
        click.echo(f"this cuts off up to {format_duration(cut)} of still-valid tokens")
    if no_primary:
        click.echo(
            f"warning: no primary {made.alg} key left; to mint again: mrtr-state keys add "
            f"--alg {made.alg} (a new primary at once), or mrtr-state keys promote KID "
            "(a pending key)",
            err=True,
        )


@keys.command("prune")
@duration_option(
    "--retention", "Keep retired keys this long [config 'retention'; default ttl_cap + 60s]."
)
@click.option("--dry-run", is_flag=True, help="Say what would be deleted; change nothing.")
@json_option
@pass_app
def keys_prune(app: App, retention: int | None, dry_run: bool, as_json: bool) -> None:
    """Delete retired keys retired longer ago than the retention window.

    \b
    Example:
      mrtr-state keys prune --retention 2h --dry-run
    """
    settings = app.settings()
    path = app.writable_path(settings)
    keep = settings.retention if retention is None else retention
    _step(
        path,
        lambda current: life.prune(current, now=_now(), retention=keep),
        dry_run=dry_run,
        as_json=as_json,
        kek=app.kek(settings),
    )


@keys.command("list")
@json_option
@pass_app
def keys_list(app: App, as_json: bool) -> None:
    """List the keys: id, algorithm, format, status, since when, and what comes next.

    \b
    Example:
      mrtr-state keys list --json | jq -r '.keys[] | select(.status=="primary") | .kid'
    """
    settings = app.settings()
    now = _now()

    def line(key: Key) -> str:
        return life.timeline(
            key, now=now, propagation=settings.propagation, retention=settings.retention
        )

    if settings.kek is None and settings.keyset_json is None:
        listed = listed_without_kek(settings.keyset_file)
        if listed is not None:
            _list_unauthenticated(settings.keyset_file, *listed, line=line, as_json=as_json)
            return
    keyset = app.keyset(settings)
    if as_json:
        due = {
            item["kid"]: item
            for item in life.due_list(
                keyset,
                propagation=settings.propagation,
                retention=settings.retention,
                every=settings.rotate_every,
            )
        }

        def next_step(key: Key) -> dict[str, Any] | None:
            found = due.get(key.kid)
            return None if found is None else {k: found[k] for k in ("action", "at", "at_utc")}

        emit_json(
            {
                "keyset": settings.keyset_source,
                "encrypted": keyset.kek_uri is not None,
                "kek": keyset.kek_uri,
                "authenticated": True,
                "keys": [
                    {**key.describe(), "timeline": line(key), "next_due": next_step(key)}
                    for key in keyset
                ],
            }
        )
        return
    click.echo(_render.key_table(keyset, now=now, timeline=line))
    if keyset.kek_uri is not None:
        click.echo(f"encrypted under {keyset.kek_uri}; metadata authenticated", err=True)


def _list_unauthenticated(
    path: str, kek_uri: str, keys: list[Key], *, line: Callable[[Key], str], as_json: bool
) -> None:
    """``keys list`` of an encrypted keyset without its KEK: the clear metadata, said to be
    unauthenticated (only the KEK proves nobody changed it)."""
    from .._cli_api import printable

    warning = (
        f"encrypted under {printable(kek_uri)}; listed without the KEK, so not authenticated "
        "(give --kek to check it)"
    )
    if as_json:
        emit_json(
            {
                "keyset": path,
                "encrypted": True,
                "kek": kek_uri,
                "authenticated": False,
                "keys": [
                    {**key.describe(), "timeline": line(key), "next_due": None} for key in keys
                ],
            }
        )
        return
    click.echo(_render.key_table(keys, now=_now(), timeline=line))
    click.echo(warning, err=True)


@click.command()
@click.option(
    "--alg",
    "algs",
    multiple=True,
    type=_ALG,
    help="Rotate only this algorithm (repeatable) [default: every one in use].",
)
@duration_option(
    "--propagation", "How long a pending key waits before promotion [config; default 1h]."
)
@duration_option(
    "--retention",
    "How long keys stay verifiable after they stop minting, and retired keys "
    "are kept [config; default ttl_cap + 60s].",
)
@duration_option(
    "--every",
    "How long a primary mints before it is replaced [config 'rotate_every'; default 30d].",
)
@click.option("--dry-run", is_flag=True, help="Say what would change; change nothing.")
@click.option(
    "--init-if-missing",
    is_flag=True,
    help="Create the keyset (one primary per --alg, else per format) if the file does not exist; "
    "an existing keyset is never replaced. For the first run of a rotation job.",
)
@json_option
@pass_app
def rotate(
    app: App,
    algs: tuple[str, ...],
    propagation: int | None,
    retention: int | None,
    every: int | None,
    dry_run: bool,
    init_if_missing: bool,
    as_json: bool,
) -> None:
    """Advance key rotation by one safe step; made for cron and deploy scripts.

    For each algorithm: prune retired keys past retention, retire active keys past retention
    (their tokens have all expired), then promote the pending key once it is older than the
    propagation delay, or add a pending key once the primary is due for replacement (every 30
    days by default, less the propagation delay). Run it as often as you like (every 15 minutes
    is fine): it moves no faster than --every. --json includes next_due, when each next step
    falls due. Exit 0 when done (or nothing to do), 6 on a keyset problem.

    \b
    Examples:
      mrtr-state rotate --dry-run
      mrtr-state rotate --every 7d --json | jq .next_due
      */15 * * * *  mrtr-state -k /etc/mcp/keyset.json rotate --json >> /var/log/rotate.log 2>&1
    """
    settings = app.settings()
    path = app.writable_path(settings)
    if settings.policy.ttl_cap is None:
        raise KeysetError(
            f"ttl_cap is none (set by {settings.source_of('ttl_cap')}): rotation needs a "
            "finite cap to know when no token of a retired key can still be valid"
        )
    ttl_cap = settings.policy.ttl_cap
    wait = settings.propagation if propagation is None else propagation
    keep = settings.retention if retention is None else retention
    period = settings.rotate_every if every is None else every
    # checked here too (rotate refuses them as well) so that nothing is created first, each
    # with its exit code: a flag on this command line is a usage error (2), a setting from the
    # config or the environment a config error (6)
    try:
        life.check_period(period, wait)
    except ValueError as err:
        if every is not None or propagation is not None:
            raise click.UsageError(str(err)) from None
        raise KeysetError(str(err)) from None
    try:
        life.check_retention(keep, ttl_cap)
    except ValueError as err:
        # a --retention on this command line is the caller's mistake; one from the config
        # or the environment is the operator's
        if retention is not None:
            raise click.UsageError(str(err)) from None
        raise KeysetError(str(err)) from None
    created: list[life.Change] = []
    if init_if_missing and not path.exists():
        if dry_run:
            _would_create(path, algs or OWN_ALGORITHMS, as_json)
            return
        created = _create_if_missing(path, algs or OWN_ALGORITHMS, app.kek(settings))
    schedule = {"propagation": wait, "retention": keep, "every": period}
    _step(
        path,
        lambda current: life.rotate(
            current, algs=algs or None, now=_now(), ttl_cap=ttl_cap, **schedule
        ),
        dry_run=dry_run,
        as_json=as_json,
        due=lambda keyset: life.due_list(keyset, **schedule),
        before=created,
        kek=app.kek(settings),
    )


def _would_create(path: Path, algs: tuple[str, ...], as_json: bool) -> None:
    """``rotate --init-if-missing --dry-run`` with no keyset: what a real run would create (a
    primary per algorithm, under ids a real run draws), in rotate's own shape."""
    if not as_json:
        click.echo(f"would create {path}", err=True)
        return
    changes = [
        {
            "action": "init",
            "kid": None,
            "kid_chosen_at_run_time": True,
            "alg": alg,
            "detail": "new primary: mints",
        }
        for alg in algs
    ]
    emit_json({"keyset": str(path), "dry_run": True, "changes": changes, "next_due": []})


def _create_if_missing(path: Path, algs: tuple[str, ...], kek: Kek | None) -> list[life.Change]:
    """A new keyset at ``path``, unless one appeared meanwhile (checked again under the lock:
    of two jobs racing to create it, one creates and the other keeps what it finds)."""
    made: list[life.Change] = []

    def create(current: Keyset) -> Keyset:
        if len(current):
            return current
        fresh = Keyset.generate(algs, now=_now())
        made.extend(life.Change("init", k.kid, k.alg, "new primary: mints") for k in fresh)
        return current.with_keys(fresh)

    Keyset.update(path, create, create=True, kek=kek)
    return made


# The commands that encrypt, decrypt and rewrap a keyset, in their own module.
for _command in (keys_encrypt, keys_decrypt, keys_rewrap):
    keys.add_command(_command)
