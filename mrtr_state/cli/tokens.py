"""``mint``, ``verify``, ``inspect``, ``seal`` and ``unseal``: one library call each."""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Callable
from typing import Any, BinaryIO, TypeVar

import click

from .. import (
    Claims,
    InvalidToken,
    Keyset,
    KeysetNotFound,
    MrtrStateError,
    OversizedToken,
    issue,
    seal,
    unseal,
    verify,
    verify_for_output,
)
from .. import inspect as inspect_token
from .._cli_api import format_duration, printable, terminal_json
from ._common import (
    NO_TOKEN,
    App,
    Stated,
    binding_options,
    duration_option,
    emit_json,
    error_text,
    fail,
    failure_json,
    format_option,
    json_option,
    json_report,
    most_severe,
    pass_app,
    read_state,
    request_binding,
    single_token,
    token_source,
    ttl_cap_option,
)
from ._stdin import read_lines

# --- tokens ---------------------------------------------------------------------------------


T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


def state_store_option(func: F) -> F:
    """--state-store URL: TOKEN is a state handle whose record is in that store."""
    return click.option(
        "--state-store",
        metavar="URL",
        help="TOKEN is a state handle (mh1.) kept in this store: redis://..., "
        "redis+cluster://..., redis+sentinel://... (as proxy --state-store).",
    )(func)


@click.command()
@format_option("Token format [config 'format'; default aead].")
@binding_options
@duration_option(
    "--ttl", "Lifetime: 90s, 5m, 1h or seconds [config 'ttl'; default 5m; cap 'ttl_cap' 1h]."
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
    app: App, fmt: str | None, stated: Stated, ttl: int | None, state: str | None, as_json: bool
) -> None:
    """Mint a requestState token; print it alone on stdout.

    \b
    Examples:
      mrtr-state mint --principal alice --request-id req-42 --state '{"step":2}'
      mrtr-state mint -p alice --method tools/call --target deploy \\
          --arguments '{"env":"prod"}' --ttl 60 --state @state.json --json
    """
    settings = app.settings(format=fmt, audience=stated.audience)
    cap = settings.policy.lifetime_cap
    if ttl is not None and not 0 < ttl <= cap:
        raise click.UsageError(
            f"--ttl {format_duration(ttl)} is over the ttl_cap of {format_duration(int(cap))} "
            f"(set by {settings.source_of('ttl_cap')}). Raise ttl_cap there only if every "
            "verifier raises it too: they refuse tokens that live longer than their own cap"
            if ttl > 0
            else "--ttl must be at least 1s"
        )
    request = stated.request()
    if stated.audience is None and settings.audience is not None:
        _no_configured_audience(settings)
    carried = read_state(state)
    keyset = app.keyset(settings)
    minted = issue(
        keyset,
        carried,
        principal=stated.principal,
        **request,
        ttl=ttl,
        audience=settings.audience,
        format=settings.format,
        policy=settings.policy,
    )
    if as_json:
        emit_json(
            {
                "token": minted.token,
                "kid": minted.kid,
                "format": minted.format,
                "expires_at": minted.expires_at,
            }
        )
    else:
        click.echo(minted.token)


def _no_configured_audience(settings: Any) -> None:
    """Refuse, saying how to mint without it, an audience the settings give (the environment
    or the config file, not --audience) to a format whose tokens carry none: the operator set
    it for the fleet's own tokens, and an SDK format of this fleet cannot hold it."""
    from .._cli_api import carries_audience

    fmt = settings.format
    if carries_audience(fmt):
        return
    source = settings.source_of("audience")
    way = (
        f"env -u {source} mrtr-state mint ..."
        if source.startswith("MRTR_STATE_")
        else "mrtr-state --config FILE mint ..., naming a config file that sets no audience"
    )
    raise click.UsageError(
        f"{fmt} tokens cannot carry an audience, and {source} sets one "
        f"({printable(settings.audience)!r}): mint them where none is set, e.g. {way}"
    )


def _verify_result(claims_dict: dict[str, Any], taken: bool) -> dict[str, Any]:
    """verify's --json answer for an accepted token: ``taken`` says whether this verification
    used it up (--once: redeemed in the replay store; a handle: taken from its store)."""
    return {"valid": True, "taken": taken, "claims": claims_dict}


class _Unusable(MrtrStateError):
    """A line of a batch that holds no token to check: empty, or (with --jsonl) an object
    without one. Answered in its place like a rejection, but with the usage exit code."""

    code = "no_token"
    exit_code = 2


class _MalformedInput(_Unusable):
    """A --jsonl line that is not the request it should be: not JSON, not an object, an unknown
    member, a binding no token can carry. The input is wrong, not a token: exit 2 too."""

    code = "malformed_input"


@click.command("verify")
@format_option("Accept only this format [default: any, detected].")
@binding_options
@click.option("--once", is_flag=True, help="Single use: refuse (exit 5) a token seen before.")
@click.option(
    "--replay-store",
    metavar="URL",
    help="Where --once records tokens: memory:, sqlite:///PATH or redis://HOST:PORT/DB "
    "[env MRTR_STATE_REPLAY_STORE; config 'replay_store'; default memory:].",
)
@click.option(
    "--jsonl",
    is_flag=True,
    help="Each stdin line is a JSON object: the token and its own bindings (principal, "
    "audience, request_id or method/target/arguments, bind); options given here are defaults.",
)
@state_store_option
@ttl_cap_option
@json_option
@click.argument("token", required=False)
@pass_app
def verify_cmd(
    app: App,
    fmt: str | None,
    stated: Stated,
    once: bool,
    replay_store: str | None,
    jsonl: bool,
    state_store: str | None,
    ttl_cap: int | str | None,
    as_json: bool,
    token: str | None,
) -> None:
    """Verify TOKEN (or each line of stdin for -); print its state.

    Text output is the state as JSON; --json prints every claim. With --state-store URL, TOKEN
    is a state handle (mh1.): its record is read from that store and checked as a retry stating
    these bindings would be, and taken (single use) only with --once. A rejection names its
    reason on stderr and exits 1 (invalid), 3 (expired), 4 (binding mismatch) or 6 (keyset
    problem); no token at all (an empty argument, empty stdin) exits 2. With - each input line
    gives one output line, the state or "rejected: REASON" (an empty line is "rejected: empty
    line"), and the exit code is the most severe of the rejections: 6, 5, 4, 1, 3, then 2. TOKEN
    may also be @FILE; with no TOKEN, a pipe or file on stdin is read as with -. With --jsonl
    each line carries its own token and bindings, for a capture whose tokens belong to different
    principals and requests. With --once a token already redeemed exits 5: give --replay-store
    sqlite:///PATH or redis://... so that what one run redeems binds the next (memory: spans a
    single "verify -" run only); an unreachable store exits 6.

    \b
    Examples:
      mrtr-state verify -p alice -r req-42 "$TOKEN"
      pbpaste | mrtr-state verify -p alice -r req-42
      mrtr-state verify --json --audience fleet - < captured-tokens.txt
      mrtr-state verify --jsonl --json - < checks.jsonl
      mrtr-state verify --once --replay-store sqlite:////var/lib/mcp/replay.db "$TOKEN"
      mrtr-state verify --state-store redis://10.0.0.7:6379/0 -p alice --audience /mcp \\
          --method tools/call --target deploy --arguments '{"env":"prod"}' "$HANDLE"
    """
    if state_store is not None:
        _verify_handle(
            app,
            state_store,
            token,
            once=once,
            stated=stated,
            refused={
                "--format": fmt,
                "--bind": stated.bind,
                "--bind-file": stated.bind_file,
                "--replay-store": replay_store,
                "--jsonl": jsonl or None,
            },
            as_json=as_json,
        )
        return
    if replay_store is not None and not once:
        raise click.UsageError("--replay-store is used only with --once")
    source = token_source(token)
    if jsonl and source != "-":
        raise click.UsageError("--jsonl reads its lines from stdin: give - (or pipe them in)")
    settings = app.settings(audience=stated.audience, replay_store=replay_store, ttl_cap=ttl_cap)
    if once and source != "-" and settings.replay_store == "memory:":
        raise click.UsageError(
            "--once with the memory: store protects nothing across runs: give --replay-store "
            "sqlite:///PATH or redis://HOST:PORT/DB (or replay_store in the config)"
        )
    request = stated.request()
    keyset = app.keyset(settings)
    store = None
    if once:
        from .. import open_store

        store = open_store(settings.replay_store, max_skew=settings.max_skew)

    given = {
        "principal": stated.principal,
        **request,
        "audience": settings.audience,
        "format": fmt,
        "policy": settings.policy,
        "once": store,
    }
    # verify's defaults are None: passing only what was stated keeps each call of a batch cheap
    options = {name: value for name, value in given.items() if value is not None}
    checked: Callable[[str | bytes], Claims] = functools.partial(verify, keyset, **options)
    printed: Callable[[str | bytes], tuple[Claims, str]] = functools.partial(
        verify_for_output, keyset, **options
    )

    # a line may carry surrounding whitespace: allow a little over the token cap
    limit = settings.policy.max_size + 256
    json_line = _JsonLine(taken=store is not None)
    if source == "-":
        if jsonl:
            per_line = _JsonlChecks(keyset, options, as_json)
            code = _verify_lines(
                per_line.check, limit * 2, json_line if as_json else _state_line, raw=True
            )
        elif as_json:
            code = _verify_lines(checked, limit, json_line)
        else:
            code = _verify_lines(printed, limit, _state_line)
        raise click.exceptions.Exit(code)
    text = single_token(source, limit)
    try:
        if as_json:
            claims = checked(text)
        else:
            claims, shown = printed(text)
    except InvalidToken as err:
        if as_json:
            emit_json({"valid": False, "error": failure_json(err)})
        fail(error_text(err), err.exit_code, err.code)
    if as_json:
        emit_json(_verify_result(claims.to_dict(), taken=store is not None))
    else:
        if isinstance(claims.state, bytes):
            click.echo("note: the payload is not JSON; printed as base64url", err=True)
        click.echo(terminal_json(shown))


class _JsonLine:
    """A batch line's --json answer for an accepted token, under its line number."""

    def __init__(self, *, taken: bool) -> None:
        self.taken = taken

    def __call__(self, result: Any, number: int) -> str:
        claims = result[0] if type(result) is tuple else result  # (claims, text) or claims
        return json_report({"line": number, **_verify_result(claims.to_dict(), self.taken)})


def _state_line(result: tuple[Claims, str], number: int) -> str:
    return result[1]


#: What a --jsonl line may hold besides its token, and the verify keyword each one sets.
_JSONL_MEMBERS = {
    "principal": "principal",
    "audience": "audience",
    "request_id": "request_id",
    "method": "method",
    "target": "target",
    "arguments": "arguments",
    "bind": "bind",
}
_REQUEST_MEMBERS = ("request_id", "method", "target", "arguments", "bind")


class _JsonlChecks:
    """``verify --jsonl``: one JSON object per line, each with its token and its own bindings."""

    def __init__(self, keyset: Keyset, defaults: dict[str, Any], as_json: bool) -> None:
        self.keyset = keyset
        self.defaults = defaults
        self.as_json = as_json

    def check(self, line: bytes) -> Any:
        from .._cli_api import EncodingError, json_loads

        try:
            document = json_loads(line.decode("utf-8"))
        except (EncodingError, UnicodeDecodeError) as err:
            raise _MalformedInput(f"not a JSON object: {err}") from None
        if not isinstance(document, dict):
            raise _MalformedInput("not a JSON object")
        unknown = sorted(set(document) - {"token", *_JSONL_MEMBERS})
        if unknown:
            raise _MalformedInput(f"unknown member {', '.join(unknown)}")
        token = document.get("token")
        if not isinstance(token, str) or not token.strip():
            raise _Unusable("no token")
        options = dict(self.defaults)
        if any(name in document for name in _REQUEST_MEMBERS):
            for name in _REQUEST_MEMBERS:  # the line's request binding replaces the default
                options.pop(name, None)
        for name, keyword in _JSONL_MEMBERS.items():
            if name in document:
                options[keyword] = document[name]
        try:
            if self.as_json:
                return verify(self.keyset, token.strip(), **options)
            return verify_for_output(self.keyset, token.strip(), **options)
        except ValueError as err:  # a binding the token's format cannot carry, and the like
            raise _MalformedInput(str(err)) from None


def _verify_lines(
    check: Callable[[Any], T],
    limit: int,
    render: Callable[[T, int], str],
    *,
    raw: bool = False,
) -> int:
    """Verify one token per line of stdin; one result line each. Returns the exit code.

    Results go to stdout's byte stream: a batch of a million tokens should spend its time
    verifying, not in the text layer's per-write encoding. ``raw`` hands each line to ``check``
    as bytes (``--jsonl``). Stdin with no token on any line is a usage error (exit 2).
    """
    as_json = isinstance(render, _JsonLine)
    worst = 0
    tokens = 0
    sys.stdout.flush()
    out = sys.stdout.buffer
    answers: list[str] = []  # at most one chunk of input's worth, written before each read

    def write_answers() -> None:
        if answers:
            text = terminal_json("\n".join(answers) + "\n")
            out.write(text.encode("utf-8", "surrogatepass"))
            answers.clear()
        out.flush()

    answer = answers.append
    try:  # answers given so far are written even if a store or the output fails
        for number, line in enumerate(read_lines(sys.stdin.buffer, limit, write_answers), start=1):
            try:
                if line is None:
                    tokens += 1
                    raise OversizedToken(f"line {number} is over the {limit}-byte size cap")
                text = line.strip()
                if not text:
                    raise _Unusable("empty line")
                tokens += 1
                if raw:
                    result = check(text)
                else:
                    try:  # verify's common case is text; bytes not ASCII get its reason
                        result = check(text.decode("ascii"))
                    except UnicodeDecodeError:
                        result = check(text)
            except (InvalidToken, _Unusable) as err:
                worst = most_severe(worst, err.exit_code)
                if as_json:
                    failure = failure_json(err)
                    answer(json_report({"line": number, "valid": False, "error": failure}))
                else:
                    answer(f"rejected: {printable(error_text(err))}")
                continue
            answer(render(result, number))
    finally:
        write_answers()
    if not tokens:
        fail(f"{NO_TOKEN} on stdin", 2, "no_token")
    return worst


@click.command("inspect")
@state_store_option
@click.option(
    "--show-state",
    is_flag=True,
    help="With --state-store: print the stored state too (it may hold secrets).",
)
@ttl_cap_option
@json_option
@click.argument("token", required=False)
@pass_app
def inspect_cmd(
    app: App,
    state_store: str | None,
    show_state: bool,
    ttl_cap: int | str | None,
    as_json: bool,
    token: str | None,
) -> None:
    """Show what TOKEN (or stdin) is made of, verified only if a keyset can verify it.

    Works without a key: format, key id, and for readable formats the claims, all marked NOT
    VERIFIED. With the keyset at hand it also checks the tag and lifetime (not the bindings).
    TOKEN may be @FILE; - (or no TOKEN with a pipe on stdin) inspects every line, each under its
    line number (with --json one JSON object per line, with "line"); a line that is not a token
    is reported in its place, and the exit code is the most severe of those lines (as for
    verify -: 6, 5, 4, 1, 3, then 2 for an empty one), after all lines are done. A token shown
    NOT VERIFIED is not a failure (exit 0): inspect reports, verify judges. With
    --state-store URL, TOKEN is a state handle (mh1.): what the store holds for it is shown, the
    owner as a digest, the state only with --show-state; nothing is taken.

    \b
    Examples:
      mrtr-state inspect "$TOKEN"
      mrtr-state inspect --json - < tokens.txt | jq .verified
      mrtr-state inspect --ttl-cap none "$RMCP_TOKEN"
      mrtr-state inspect --state-store redis://10.0.0.7:6379/0 "$HANDLE"
    """
    if state_store is not None:
        _inspect_handle(app, state_store, token, show_state=show_state, as_json=as_json)
        return
    if show_state:
        raise click.UsageError("--show-state is for a state handle: give --state-store URL")
    settings = app.settings(ttl_cap=ttl_cap)
    source = token_source(token)
    limit = settings.policy.max_size + 256
    try:
        keyset: Keyset | None = app.keyset(settings)
    except KeysetNotFound:
        if not settings.keyset_is_default:
            raise
        keyset = None  # no keyset at the default path: inspect works without one
    keyset_source = None if keyset is None else settings.keyset_file
    if source != "-":
        text = single_token(source, limit)
        click.echo(_inspected(text, keyset, keyset_source, settings, as_json, None))
        return
    worst, tokens = 0, 0
    for number, line in enumerate(read_lines(sys.stdin.buffer, limit), start=1):
        try:
            if line is None:
                tokens += 1
                raise OversizedToken(f"line {number} is over the {limit}-byte size cap")
            text = line.decode("ascii", "replace").strip()
            if not text:
                raise _Unusable("empty line")
            tokens += 1
            shown = _inspected(text, keyset, keyset_source, settings, as_json, number)
        except (InvalidToken, _Unusable) as err:
            worst = most_severe(worst, err.exit_code)
            if as_json:
                failure = failure_json(err)
                shown = terminal_json(json_report({"line": number, "error": failure}))
            else:
                shown = f"line {number}: rejected: {printable(error_text(err))}"
        if number > 1 and not as_json:
            click.echo()
        click.echo(shown)
    if not tokens:
        fail(f"{NO_TOKEN} on stdin", 2, "no_token")
    raise click.exceptions.Exit(worst)


def _inspected(
    text: str,
    keyset: Keyset | None,
    keyset_source: str | None,
    settings: Any,
    as_json: bool,
    number: int | None,
) -> str:
    """One token's inspection, as it is printed (``number``: its line in a batch)."""
    now = time.time()
    view = inspect_token(text, keyset=keyset, now=now, policy=settings.policy)
    if as_json:
        found = view.to_dict() if number is None else {"line": number, **view.to_dict()}
        return terminal_json(json_report(found))
    from . import _render  # only inspect draws

    drawn = _render.inspection(view, now=now, keyset_source=keyset_source)
    return drawn if number is None else f"line {number}:\n{drawn}"


@click.command("seal")
@format_option("Token format [config 'format'; default aead].")
@json_option
@click.argument("file", required=False, type=click.File("rb"))
@pass_app
def seal_cmd(app: App, fmt: str | None, as_json: bool, file: BinaryIO | None) -> None:
    """Seal the bytes of FILE (or stdin) into a token (no claims, no expiry, no binding).

    Prefer mint: sealed tokens never expire and bind nothing. seal is for payloads that carry
    their own rules. --json gives the token with its format, key id and payload size.

    \b
    Examples:
      printf 'opaque bytes' | mrtr-state seal > sealed.txt
      mrtr-state seal payload.bin > sealed.txt
      mrtr-state seal --json payload.bin | jq -r .token
    """
    settings = app.settings(format=fmt)
    source = file if file is not None else sys.stdin.buffer
    cap = settings.policy.max_size
    payload = source.read(cap + 1)  # a payload this long makes a token over the cap anyway
    if len(payload) > cap:
        raise click.UsageError(
            f"the payload is over {cap} bytes, and a token holding it would be over the "
            f"{cap}-byte size cap that verification enforces"
        )
    keyset = app.keyset(settings)
    token = seal(keyset, payload, format=settings.format, policy=settings.policy)
    if not as_json:
        click.echo(token)
        return
    from .._cli_api import key_algorithm_of

    emit_json(
        {
            "token": token,
            "format": settings.format,
            "kid": keyset.primary(key_algorithm_of(settings.format)).kid,
            "payload_bytes": len(payload),
        }
    )


@click.command("unseal")
@format_option("Accept only this format [default: any, detected].")
@json_option
@click.argument("token", required=False)
@pass_app
def unseal_cmd(app: App, fmt: str | None, as_json: bool, token: str | None) -> None:
    """Check TOKEN (or stdin, or @FILE) and write its sealed payload bytes to stdout.

    With --json the payload is in one JSON object instead, as base64url ("payload_base64url"),
    with the token's format and key id.

    \b
    Examples:
      mrtr-state unseal - < sealed.txt > payload.bin
      mrtr-state unseal --json @sealed.txt | jq -r .payload_base64url
    """
    settings = app.settings()
    text = single_token(token, settings.policy.max_size + 256)
    payload = unseal(app.keyset(settings), text, format=fmt, policy=settings.policy)
    if not as_json:
        sys.stdout.buffer.write(payload)
        sys.stdout.buffer.flush()
        return
    import base64

    anatomy = inspect_token(text).anatomy  # structure only: the tag was checked just now
    emit_json(
        {
            "payload_base64url": base64.urlsafe_b64encode(payload).rstrip(b"=").decode("ascii"),
            "payload_bytes": len(payload),
            "format": anatomy.format,
            "kid": anatomy.kid,
        }
    )


# --- state handles (mh1.): the record lives in a store, not in the token ---------------------


def _open_handle_store(app: App, url: str) -> Any:
    from .._cli_api import open_handle_store

    settings = app.settings()
    return open_handle_store(url, max_skew=settings.max_skew)


def _verify_handle(
    app: App,
    url: str,
    token: str | None,
    *,
    once: bool,
    stated: Stated,
    refused: dict[str, Any],
    as_json: bool,
) -> None:
    """``verify --state-store``: the record checked as a retry stating these bindings, read
    (or with --once taken) through the library's one path for handles."""
    from .._cli_api import verify_handle

    given = sorted(name for name, value in refused.items() if value is not None)
    if given:
        raise click.UsageError(
            f"{', '.join(given)} cannot be used with --state-store: a handle's record binds the "
            "principal, audience and request, and is single use by itself (--once takes it)"
        )
    request = request_binding(stated.request_id, stated.method, stated.target, stated.arguments)
    audience = app.settings(audience=stated.audience).audience
    text = single_token(token, 256)
    store = _open_handle_store(app, url)
    try:
        claims = verify_handle(
            store,
            text,
            principal=stated.principal,
            audience=audience,
            request_id=request["request_id"],
            method=request["method"],
            target=request["target"],
            arguments=request["arguments"],
            once=once,
        )
    except InvalidToken as err:
        if as_json:
            emit_json({"valid": False, "error": failure_json(err)})
        fail(error_text(err), err.exit_code, err.code)
    finally:
        store.close()
    if as_json:
        emit_json(_verify_result(claims.to_dict(), taken=once))
    else:
        from .._cli_api import json_dumps

        click.echo(terminal_json(json_dumps(claims.state)))


def _inspect_handle(
    app: App, url: str, token: str | None, *, show_state: bool, as_json: bool
) -> None:
    """``inspect --state-store``: what the store holds for the handle, unverified."""
    from .._cli_api import UnknownHandle, inspect_handle

    text = single_token(token, 256)
    store = _open_handle_store(app, url)
    try:
        report = inspect_handle(store, text, show_state=show_state)
    finally:
        store.close()
    if not report["found"]:
        raise UnknownHandle("unknown handle: never issued, already used, or expired")
    if as_json:
        emit_json(report)
        return
    from . import _render

    click.echo(_render.handle_record(report, now=time.time()))
