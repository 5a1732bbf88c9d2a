"""``keys encrypt``, ``keys decrypt`` and ``keys rewrap``: change how a keyset file is protected.

Each reads the keyset and writes it back under the writer lock, atomically: the file is always
either the old one or the new one. The token keys never change, so tokens minted before keep
verifying, and replicas that follow the file pick the new version up (given the new KEK).
"""

from __future__ import annotations

import click

from .. import KekRequired, Keyset
from .._cli_api import listed_without_kek
from ._common import App, emit_json, json_option, kdf_cost_option, pass_app, wrapping_kek


def _report(as_json: bool, path: str, kek: str | None, said: str) -> None:
    if as_json:
        emit_json({"keyset": path, "encrypted": kek is not None, "kek": kek})
    else:
        click.echo(said)


@click.command("encrypt")
@kdf_cost_option
@json_option
@pass_app
def keys_encrypt(app: App, kdf_cost: int | None, as_json: bool) -> None:
    """Encrypt a plain keyset file under a KEK (--kek, MRTR_STATE_KEK or the config's kek).

    The secrets go under a fresh data key wrapped by the KEK; key ids, algorithms, statuses
    and times stay readable (keys list works without the KEK) and are authenticated.
    Then give every replica the same KEK: with one configured, a plain keyset is refused.

    \b
    Examples:
      export MRTR_STATE_PASSPHRASE=$(openssl rand -base64 24)   # keep it in your secret store
      mrtr-state keys encrypt --kek passphrase:env:MRTR_STATE_PASSPHRASE
      mrtr-state keys encrypt --kek 'pkcs11:token=mcp;object=kek?module-path=/usr/lib/softhsm/libsofthsm2.so&pin-source=file:/run/secrets/pin'
      mrtr-state keys encrypt --kek 'exec:/usr/local/bin/kms-kek alias/mcp-keyset'
    """  # noqa: E501
    settings = app.settings()
    path = app.writable_path(settings)
    kek = wrapping_kek(app, settings, kdf_cost)
    if kek is None:
        raise click.UsageError("give the KEK to encrypt under: --kek URI (or MRTR_STATE_KEK)")
    if listed_without_kek(path) is not None:
        raise KekRequired(
            f"{path} is encrypted already; to change its KEK use: mrtr-state keys rewrap --kek URI"
        )
    keyset = Keyset.convert(path, kek=None, to_kek=kek)
    _report(as_json, str(path), kek.uri, f"encrypted {path} ({len(keyset)} keys) under {kek.uri}")


@click.command("decrypt")
@click.option("--yes", "-y", is_flag=True, help="Yes, write every secret in the clear.")
@json_option
@pass_app
def keys_decrypt(app: App, yes: bool, as_json: bool) -> None:
    """Write an encrypted keyset back as a plain JWK Set (needs its KEK and --yes).

    Anyone who can read the plain file can mint tokens every replica accepts: decrypt only to
    migrate, and unset the KEK on every replica (one configured refuses a plain keyset).

    \b
    Example:
      mrtr-state keys decrypt --yes --kek passphrase:env:MRTR_STATE_PASSPHRASE
    """
    settings = app.settings()
    path = app.writable_path(settings)
    if not yes:
        raise click.UsageError("decrypting writes every secret in the clear; pass --yes")
    kek = app.kek(settings)
    if kek is None:
        raise KekRequired("give the keyset's KEK to decrypt it: --kek URI (or MRTR_STATE_KEK)")
    keyset = Keyset.convert(path, kek=kek, to_kek=None)
    said = f"decrypted {path} ({len(keyset)} keys): now plain, mode 0600"
    _report(as_json, str(path), None, said)


@click.command("rewrap")
@click.option("--kek", "new_kek", metavar="URI", required=True, help="The new KEK.")
@click.option(
    "--from-kek",
    metavar="URI",
    help="The KEK the keyset is under now [default: MRTR_STATE_KEK, the config's kek, or the "
    "--kek given before 'keys'].",
)
@kdf_cost_option
@json_option
@pass_app
def keys_rewrap(
    app: App, new_kek: str, from_kek: str | None, kdf_cost: int | None, as_json: bool
) -> None:
    """Wrap the keyset's data key under a new KEK (KEK rotation); the token keys and the data
    key stay as they are, so nothing minted before is affected.

    Give replicas the new KEK with the new file: a replica still configured with the old one
    keeps its last good keyset and reports the mismatch until it gets the new KEK.

    \b
    Examples:
      MRTR_STATE_KEK=passphrase:env:OLD_PASS mrtr-state keys rewrap --kek passphrase:env:NEW_PASS
      mrtr-state keys rewrap --from-kek passphrase:file:/run/old --kek 'exec:/usr/local/bin/kms-kek'
    """
    settings = app.settings()
    path = app.writable_path(settings)
    if from_kek is not None:
        settings = app.settings(kek=from_kek)
    old = app.kek(settings)
    if old is None:
        raise KekRequired(
            "give the KEK the keyset is under now: --from-kek URI, MRTR_STATE_KEK or config kek"
        )
    from .._cli_api import kek_from_uri

    new = kek_from_uri(new_kek, kdf_log_n=kdf_cost)
    Keyset.convert(path, kek=old, to_kek=new)
    _report(as_json, str(path), new.uri, f"rewrapped {path}: data key now under {new.uri}")
