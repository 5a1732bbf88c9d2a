"""``exec:COMMAND [ARG...]``: a helper program holds the KEK (a KMS, Vault Transit, an HSM CLI).

As git credential helpers and sops key services do, mrtr-state runs the helper (no shell: the
command is split like a shell line and executed directly) and speaks one JSON object each way:

    stdin:  {"protocol": "mrtr-state-kek/1", "op": "wrap", "kek": URI,
             "context": B64URL, "plaintext": B64URL}
    stdout: {"ciphertext": B64URL}

    stdin:  {"protocol": "mrtr-state-kek/1", "op": "unwrap", "kek": URI,
             "context": B64URL, "ciphertext": B64URL}
    stdout: {"plaintext": B64URL}

Exit 0 with that object is success; exit 3 means the KEK refused the input (a decryption that
failed authentication), any other exit means it could not be used. The helper should bind
``context`` as associated data (KMS encryption context, Transit ``associated_data``); the keyset's
own encryption authenticates its metadata either way. The helper's environment is ours (cloud
credentials reach it); its stderr is shown, one line, when it fails.
"""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Mapping
from typing import Any

from .._encoding import EncodingError, b64url_decode, b64url_encode, json_dumps, json_loads
from .._printable import printable
from ..errors import ConfigError, KekRefused, KekUnavailable
from . import Kek, record_bytes

PROTOCOL = "mrtr-state-kek/1"
TIMEOUT_SECONDS = 30.0
#: Exit status with which a helper says "the KEK refuses this input".
REFUSED_EXIT = 3
_MAX_OUTPUT = 64 * 1024


class HelperKek(Kek):
    """A KEK behind a helper program, called once per wrap or unwrap."""

    kind = "exec"

    def __init__(self, uri: str) -> None:
        super().__init__(uri)
        try:
            self.argv = shlex.split(uri[len("exec:") :])
        except ValueError as err:
            raise ConfigError(f"KEK {uri}: the command does not parse: {err}") from None
        if not self.argv:
            raise ConfigError(f"KEK {uri} names no command; write exec:/path/to/helper [ARG...]")

    def wrap(self, data_key: bytes, context: bytes) -> dict[str, Any]:
        wrapped = self._call("wrap", "plaintext", data_key, context, answer="ciphertext")
        return {"wrapped": b64url_encode(wrapped)}

    def _unwrap(self, record: Mapping[str, Any], context: bytes) -> bytes:
        if set(record) != {"wrapped"}:
            raise KekRefused(
                "the data key record is not a helper record (members "
                f"{', '.join(sorted(record))}); was the keyset encrypted under another kind of KEK?"
            )
        wrapped = record_bytes(record, "wrapped")
        data_key = self._call("unwrap", "ciphertext", wrapped, context, answer="plaintext")
        if len(data_key) != 32:
            raise KekRefused(
                f"KEK helper {self.argv[0]} unwrapped a data key of {len(data_key)} bytes, not 32"
            )
        return data_key

    def _call(self, op: str, field: str, value: bytes, context: bytes, *, answer: str) -> bytes:
        request = {
            "protocol": PROTOCOL,
            "op": op,
            "kek": self.uri,
            "context": b64url_encode(context),
            field: b64url_encode(value),
        }
        name = self.argv[0]
        try:
            done = subprocess.run(  # noqa: S603 - the operator's own command, never a shell
                self.argv,
                input=json_dumps(request).encode("utf-8"),
                capture_output=True,
                timeout=TIMEOUT_SECONDS,
                check=False,
            )
        except FileNotFoundError:
            raise KekUnavailable(f"KEK helper {name} not found; check the exec: URI") from None
        except PermissionError:
            raise KekUnavailable(f"KEK helper {name} is not executable (chmod +x?)") from None
        except subprocess.TimeoutExpired:
            raise KekUnavailable(
                f"KEK helper {name} did not answer {op} within {TIMEOUT_SECONDS:.0f} s"
            ) from None
        except OSError as err:
            raise KekUnavailable(f"KEK helper {name} cannot be run: {err.strerror}") from None
        if done.returncode != 0:
            said = _last_line(done.stderr)
            if done.returncode == REFUSED_EXIT:
                raise KekRefused(f"KEK helper {name} refused to {op} the data key{said}")
            raise KekUnavailable(f"KEK helper {name} failed to {op} (exit {done.returncode}){said}")
        return _answer(done.stdout, answer, name, op)


def _answer(stdout: bytes, member: str, name: str, op: str) -> bytes:
    """The bytes of ``{"<member>": B64URL}``, the only answer a helper may print."""
    garbage = KekUnavailable(
        f"KEK helper {name} printed no valid answer to {op}: expected one JSON object "
        f'{{"{member}": "<base64url>"}} on stdout'
    )
    if len(stdout) > _MAX_OUTPUT:
        raise garbage
    try:
        answer = json_loads(stdout.decode("utf-8").strip())
    except (UnicodeDecodeError, EncodingError):
        raise garbage from None
    if not isinstance(answer, dict) or set(answer) != {member}:
        raise garbage
    value = answer[member]
    try:
        if not isinstance(value, str) or not value:
            raise EncodingError("empty")
        return b64url_decode(value)
    except EncodingError:
        raise garbage from None


def _last_line(stderr: bytes) -> str:
    lines = [line for line in stderr.decode("utf-8", "replace").splitlines() if line.strip()]
    if not lines:
        return ""
    return ": " + printable(lines[-1].strip()[:300])
