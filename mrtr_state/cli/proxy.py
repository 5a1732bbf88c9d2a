"""``mrtr-state proxy``: protect the requestState of an MCP server without changing its code."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from ._common import App, duration_option, pass_app


def _listen(value: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise click.BadParameter(f"expected HOST:PORT, got {value!r}", param_hint="--listen")
    return host.strip("[]"), int(port)


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
    help="Header carrying the authenticated principal (set by your authenticating front proxy).",
)
@click.option(
    "--principal-from",
    type=click.Choice(["bearer"]),
    help="Bind states to a digest of the request's bearer credential.",
)
@click.option("--audience", "-a", metavar="A", help="Audience bound into every state [config].")
@duration_option("--ttl", "Lifetime of a sealed state [config ttl; default 300s].")
@click.option("--once", is_flag=True, help="Accept each state at most once (needs --replay-store).")
@click.option("--replay-store", metavar="URL", help="sqlite:///PATH or redis://HOST:PORT/DB.")
@click.option(
    "--max-body",
    type=click.IntRange(min=1024),
    default=4 << 20,
    show_default=True,
    help="Refuse request bodies over this many bytes (413) before parsing them.",
)
@click.option(
    "--json-log", is_flag=True, help="One JSON line per sealed, verified or refused state."
)
@pass_app
def proxy_cmd(
    app: App,
    upstream: str,
    listen: str,
    principal_header: str | None,
    principal_from: str | None,
    audience: str | None,
    ttl: int | None,
    once: bool,
    replay_store: str | None,
    max_body: int,
    json_log: bool,
) -> None:
    """Serve a reverse proxy that seals every requestState the upstream MCP server emits.

    Each input_required result leaving the server gets its requestState sealed into an aead
    token bound to the principal, the request (method, target, arguments) and a short TTL. Each
    retry's state is verified and unsealed before it reaches the server; a refused one never
    does, and the client gets JSON-RPC error -32602. Everything else passes through untouched.
    The keyset is followed live: rotate keys without restarting.

    \b
    Examples:
      mrtr-state proxy --upstream http://127.0.0.1:8000/mcp --listen 0.0.0.0:8080 \\
          --principal-header X-Forwarded-User --audience mcp.example.com --json-log
      mrtr-state proxy --upstream http://10.0.0.5:8000/mcp --principal-from bearer \\
          --once --replay-store redis://127.0.0.1:6379/0
    """
    if principal_header and principal_from:
        raise click.UsageError("give --principal-header or --principal-from, not both")
    if once and not replay_store:
        raise click.UsageError(
            "--once needs --replay-store sqlite:///PATH or redis://...: replicas and restarts "
            "must share what was redeemed"
        )
    if replay_store and not once:
        raise click.UsageError("--replay-store is used only with --once")
    try:
        import uvicorn

        from ..proxy.app import ProxyApp
    except ImportError as err:
        raise click.UsageError(
            f"the proxy needs its extra: pip install 'mrtr-state[proxy]' ({err.name} is missing)"
        ) from None
    from ..proxy.rewrite import StateGuard
    from ..replay import open_store

    settings = app.settings(audience=audience, ttl=ttl)
    keyset = app.keyset(settings)
    keyset.primary("A256GCM")  # fail now, not at the first input_required result
    host, port = _listen(listen)

    def log(line: dict[str, Any]) -> None:
        sys.stderr.write(json.dumps(line, separators=(",", ":")) + "\n")
        sys.stderr.flush()

    guard = StateGuard(
        keyset,
        audience=settings.audience,
        ttl=settings.policy.ttl,
        policy=settings.policy,
        once=open_store(replay_store) if once and replay_store else None,
        log=log if json_log else None,
    )
    proxy = ProxyApp(
        guard,
        upstream=upstream,
        principal_header=principal_header,
        principal_from_bearer=principal_from == "bearer",
        max_body=max_body,
    )
    click.echo(
        f"mrtr-state proxy: http://{listen} -> {proxy.origin} (keyset {keyset.source})", err=True
    )
    uvicorn.run(proxy, host=host, port=port, log_level="warning", lifespan="on")
