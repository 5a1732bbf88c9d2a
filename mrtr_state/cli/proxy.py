"""``mrtr-state proxy``: protect the requestState of an MCP server without changing its code."""

from __future__ import annotations

import ipaddress
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import click

from .. import MrtrStateError
from .._cli_api import printable
from ._common import App, duration_option, pass_app

#: Exit code when the proxy cannot listen (address in use, not permitted); see docs/cli.md.
LISTEN_ERROR = 7
#: Exit code when what the proxy runs on cannot be used (here: a uvicorn without its hooks).
CONFIG_ERROR = 6


class _Say:
    """Every line the proxy writes: one JSON object (``--json-log``) or one line of text."""

    def __init__(self, json_log: bool) -> None:
        from .._cli_api import json_lines

        self.sink: Callable[[dict[str, Any]], None] | None = (
            json_lines(sys.stderr) if json_log else None
        )

    def __call__(self, event: str, text: str, level: str = "info", **facts: Any) -> None:
        if self.sink is not None:
            self.sink({"event": event, "level": level, **facts})
        elif level == "info":
            click.echo(f"mrtr-state proxy: {text}", err=True)
        else:
            click.echo(f"{level}: {printable(text)}", err=True)

    def fail(self, message: str, code: int) -> None:
        """Say why the proxy cannot start, then exit ``code``."""
        self("error", message, "error", reason=message, exit=code)
        raise click.exceptions.Exit(code)

    @contextmanager
    def failures(self) -> Iterator[None]:
        """With ``--json-log``, a library or usage error before serving is a JSON line too."""
        if self.sink is None:
            yield
            return
        try:
            yield
        except MrtrStateError as err:
            self.fail(str(err), err.exit_code)
        except (click.UsageError, ValueError) as err:
            self.fail(err.format_message() if isinstance(err, click.UsageError) else str(err), 2)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _listen(value: str, option: str = "--listen") -> tuple[str, int]:
    """HOST:PORT (or, for the admin listener, a PORT alone: loopback)."""
    host, _, port = value.rpartition(":")
    if not host and option == "--admin-listen":
        host = "127.0.0.1"
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise click.BadParameter(f"expected HOST:PORT, got {value!r}", param_hint=option)
    return host.strip("[]"), int(port)


def _bytes_option(flag: str, least: int, default: int, help: str) -> Callable[[Any], Any]:
    """An option giving a number of bytes, at least ``least``."""
    return click.option(
        flag, type=click.IntRange(min=least), default=default, show_default=True, help=help
    )


@click.command("proxy")
@click.option(
    "--upstream",
    required=True,
    metavar="URL",
    help="The MCP server's Streamable HTTP endpoint, e.g. http://127.0.0.1:8000/mcp.",
)
@click.option(
    "--listen",
    default="127.0.0.1:8080",
    show_default=True,
    metavar="HOST:PORT",
    help="Address to serve on.",
)
@click.option(
    "--principal-header",
    metavar="NAME",
    help="Header carrying the authenticated principal, set by your authenticating front proxy "
    "(which must overwrite any value a client sends). A request without it gets 401.",
)
@click.option(
    "--principal-from",
    type=click.Choice(["bearer"]),
    help="Bind states to a digest of the request's bearer credential (none: 401).",
)
@click.option(
    "--allow-anonymous",
    is_flag=True,
    help="Serve requests that carry no principal, binding their states to none.",
)
@click.option("--audience", "-a", metavar="A", help="Audience bound into every state [config].")
@duration_option("--ttl", "Lifetime of a sealed state [config ttl; default 300s].")
@click.option("--once", is_flag=True, help="Accept each state at most once (needs --replay-store).")
@click.option(
    "--state-store",
    metavar="URL",
    help="Keep each state server-side and give the client a handle: redis://HOST:PORT/DB, "
    "unix:///PATH?db=N, redis+cluster://HOST:PORT,..., redis+sentinel://HOST:PORT,.../SERVICE "
    "(or memory: for one process). No keyset is needed; handles are single use.",
)
@_bytes_option(
    "--max-state",
    1,
    1 << 20,
    "With --state-store: the largest state kept, in bytes (a larger one is withheld).",
)
@click.option(
    "--replay-store",
    metavar="URL",
    help="With --once: sqlite:///PATH, or Redis: redis://HOST:PORT/DB, unix:///PATH?db=N, "
    "redis+cluster://HOST:PORT,..., redis+sentinel://HOST:PORT,.../SERVICE.",
)
@_bytes_option(
    "--max-body",
    1024,
    4 << 20,
    "Refuse request bodies over this many bytes (413) before parsing them.",
)
@click.option(
    "--path",
    "paths",
    multiple=True,
    metavar="/PATH",
    help="Serve this path too (forwarded as sent); only the --upstream URL's own path is "
    "served otherwise, every other path is 404. Repeatable.",
)
@click.option(
    "--json-log",
    is_flag=True,
    help="Write every line as JSON (ts, level, event): start-up, warnings, shutdown, and one "
    "line per sealed, opened or refused state and per refused request.",
)
@click.option(
    "--admin-listen",
    metavar="[HOST:]PORT",
    help="Serve /healthz, /readyz and /metrics on this address (a port alone: loopback). Keep "
    "it off the network clients reach.",
)
@duration_option(
    "--head-timeout",
    "How long a new connection may take to send its first request head before it is answered "
    "408 and closed [default 10s].",
)
@duration_option(
    "--body-timeout",
    "How long a request's body may take to arrive after its head before the request is "
    "answered 408 and its connection closed [default 30s].",
)
@duration_option(
    "--drain",
    "On SIGTERM, how long requests in flight (streams too) may take to finish [default 10s].",
)
@click.option(
    "--http",
    "parser",
    type=click.Choice(["httptools", "h11"]),
    default="httptools",
    show_default=True,
    help="uvicorn's HTTP/1.1 parser (llhttp, or pure-Python h11).",
)
@pass_app
def proxy_cmd(app: App, /, json_log: bool, **options: Any) -> None:
    """Serve a reverse proxy that seals every requestState the upstream MCP server emits.

    Each input_required result leaving the server gets its requestState sealed into an aead
    token bound to the principal, the request (method, target, arguments) and a short TTL. Each
    retry's state is verified and unsealed before it reaches the server; a refused one never
    does, and the client gets JSON-RPC error -32602. Only POST, GET and DELETE to an
    origin-form target, with bodies the proxy can read, are forwarded; the rest is refused
    without contacting the server. The keyset is followed live: rotate keys without restarting.

    Say where the principal comes from. A --principal-header is trustworthy only if clients
    cannot reach the proxy except through the front proxy that sets it: keep the default
    loopback --listen, with that front proxy on the same host.

    \b
    Examples:
      mrtr-state proxy --upstream http://127.0.0.1:8000/mcp \\
          --principal-header X-Forwarded-User --audience mcp.example.com --json-log
      mrtr-state proxy --upstream http://10.0.0.5:8000/mcp --principal-from bearer \\
          --listen 0.0.0.0:8080 --once --replay-store redis://127.0.0.1:6379/0

    Exit codes: 2 usage, 6 keyset or config problem, 7 cannot listen on the address.
    """
    say = _Say(json_log)
    with say.failures():
        _run(app, say, **options)


def _run(
    app: App,
    say: _Say,
    *,
    upstream: str,
    listen: str,
    principal_header: str | None,
    principal_from: str | None,
    allow_anonymous: bool,
    audience: str | None,
    ttl: int | None,
    once: bool,
    replay_store: str | None,
    state_store: str | None,
    max_state: int,
    max_body: int,
    paths: tuple[str, ...],
    admin_listen: str | None,
    head_timeout: int | None,
    body_timeout: int | None,
    drain: int | None,
    parser: str,
) -> None:
    if principal_header and principal_from:
        raise click.UsageError("give --principal-header or --principal-from, not both")
    if not (principal_header or principal_from or allow_anonymous):
        raise click.UsageError(
            "say where the principal comes from: --principal-header NAME (set by your "
            "authenticating front proxy) or --principal-from bearer; or give --allow-anonymous "
            "to bind states to no principal"
        )
    if once and not replay_store:
        raise click.UsageError(
            "--once needs --replay-store sqlite:///PATH or redis://...: replicas and restarts "
            "must share what was redeemed"
        )
    if replay_store and not once:
        raise click.UsageError("--replay-store is used only with --once")
    if state_store and once:
        raise click.UsageError(
            "--state-store handles are single use already: drop --once and --replay-store"
        )
    try:
        from .._cli_api import ProxyApp
        from .._cli_api import proxy_server as server
    except ImportError as err:
        raise click.UsageError(
            f"the proxy needs its extra: pip install 'mrtr-state[proxy]' ({err.name} is missing)"
        ) from None
    from .. import open_store
    from .._cli_api import HandleBackend, StateGuard, TokenBackend

    unusable = server.check_uvicorn()
    if unusable is not None:
        say.fail(unusable, CONFIG_ERROR)
    untested = server.uvicorn_untested()
    if untested is not None:
        say("uvicorn_untested", untested, "warning", reason=untested)

    settings = app.settings(audience=audience, ttl=ttl)
    store = None
    keyset = None
    backend: Any
    if state_store is not None:
        from .._cli_api import open_handle_store

        store = open_handle_store(state_store, max_skew=settings.max_skew)
        backend = HandleBackend(
            store,
            ttl=settings.policy.ttl,
            policy=settings.policy,
            max_state=max_state,
            max_skew=settings.max_skew,
        )
    else:
        keyset = app.keyset(settings)
        keyset.primary("A256GCM")  # fail now, not at the first input_required result
        replay = None
        if once and replay_store:
            replay = open_store(replay_store, max_skew=settings.max_skew)
        backend = TokenBackend(
            keyset, format="aead", replay=replay, policy=settings.policy, ttl=settings.policy.ttl
        )
    host, port = _listen(listen)
    admin_address = None if admin_listen is None else _listen(admin_listen, "--admin-listen")
    log = say.sink
    metrics = None
    if admin_address is not None:
        from .._cli_api import ProxyMetrics

        metrics = ProxyMetrics(keyset)
    guard = StateGuard(backend, audience=settings.audience, log=log, metrics=metrics, keyset=keyset)
    proxy = ProxyApp(
        guard,
        upstream=upstream,
        principal_header=principal_header,
        principal_from_bearer=principal_from == "bearer",
        allow_anonymous=allow_anonymous,
        max_body=max_body,
        paths=paths,
    )
    admin = admin_sock = None
    server.hold_sigterm()  # from the moment clients can connect, a SIGTERM stops it cleanly
    where = listen
    try:
        # the admin listener first: once the proxy's own port accepts, its probes answer too
        if admin_address is not None and metrics is not None:
            from .._cli_api import AdminApp

            admin = AdminApp(keyset, proxy.upstream, metrics, backend=backend)
            where = ":".join(map(str, admin_address))
            admin_sock = server.bind(*admin_address)
            where = listen
        sock = server.bind(host, port)
    except OSError as err:
        if admin_sock is not None:
            admin_sock.close()
        say.fail(f"cannot listen on {where}: {err.strerror or err}", LISTEN_ERROR)
    served = sorted(path.decode("ascii") for path in proxy.paths)
    if store is not None:
        from .._cli_api import url_shown

        kept = {"state_store": url_shown(store.url)}
        where = f"state store {url_shown(store.url)}"
    else:
        assert keyset is not None
        kept = {"keyset": str(keyset.source)}
        where = f"keyset {keyset.source}"
    say(
        "start",
        f"http://{listen} -> {proxy.upstream.url} (serving {', '.join(served)}; {where})",
        listen=f"http://{listen}",
        upstream=proxy.upstream.url,
        paths=served,
        http=parser,
        **kept,
    )
    if principal_header and not _loopback(host):
        say(
            "principal_header_exposed",
            f"--principal-header {principal_header} with --listen {listen}, not a loopback "
            "address: any client that reaches this address can name any principal. Serve only "
            "behind the front proxy that sets the header (see docs/proxy.md).",
            "warning",
            header=principal_header,
            listen=listen,
        )
    unreachable = server.probe_once(proxy.upstream)
    if unreachable is not None:  # a sidecar's server may start later: serve, and say so
        say(
            "upstream_unreachable",
            f"{unreachable}; /readyz says not ready until it answers",
            "warning",
            reason=unreachable,
        )
    server.serve(
        proxy,
        sock,
        parser=parser,
        log=log,
        drain=10 if drain is None else max(1, drain),
        admin=admin,
        admin_sock=admin_sock,
        head_timeout=server.HEAD_TIMEOUT if head_timeout is None else max(1, head_timeout),
        body_timeout=server.BODY_TIMEOUT if body_timeout is None else max(1, body_timeout),
    )
    say("stop", "stopped", reason="signal")
