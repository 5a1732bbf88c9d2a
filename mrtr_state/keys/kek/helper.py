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

A helper is a program we do not control, so what it can cost is bounded: at most
:data:`_MAX_OUTPUT` bytes of its stdout are ever read (one more says it printed too much) and the
last :data:`_MAX_OUTPUT` of its stderr are kept; it runs in a process group of its own, and the
whole group is ended when the helper exits, when it prints too much, and at the timeout, so a
child it leaves behind holding the pipes open neither makes the call hang nor outlives it.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import shlex
import signal
import subprocess
import time
from collections.abc import Mapping
from typing import Any

from ..._encoding import EncodingError, b64url_decode, b64url_encode, json_dumps, json_loads
from ..._printable import printable
from ...errors import ConfigError, KekRefused, KekUnavailable
from . import Kek, record_bytes, record_members

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
                f"{record_members(record)}); was the keyset encrypted under another kind of KEK?"
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
            helper = subprocess.Popen(  # noqa: S603 - the operator's own command, never a shell
                self.argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,  # its own process group, ended as a whole
            )
        except FileNotFoundError:
            raise KekUnavailable(f"KEK helper {name} not found; check the exec: URI") from None
        except PermissionError:
            raise KekUnavailable(f"KEK helper {name} is not executable (chmod +x?)") from None
        except OSError as err:
            raise KekUnavailable(f"KEK helper {name} cannot be run: {err.strerror}") from None
        try:
            outcome, stdout, stderr = _converse(helper, json_dumps(request).encode("utf-8"))
        finally:
            _end_group(helper)
        if outcome == _TIMED_OUT:
            raise KekUnavailable(
                f"KEK helper {name} did not answer {op} within {TIMEOUT_SECONDS:.0f} s"
            )
        if outcome == _TOO_MUCH:
            raise KekUnavailable(
                f"KEK helper {name} printed no valid answer to {op}: more than {_MAX_OUTPUT} "
                "bytes on stdout, where the answer is one small JSON object"
            )
        if helper.returncode != 0:
            said = _last_line(stderr)
            if helper.returncode == REFUSED_EXIT:
                raise KekRefused(f"KEK helper {name} refused to {op} the data key{said}")
            code = helper.returncode
            raise KekUnavailable(f"KEK helper {name} failed to {op} (exit {code}){said}")
        return _answer(stdout, answer, name, op)


_EXITED, _TIMED_OUT, _TOO_MUCH = "exited", "timed out", "too much"
#: What is read from the pipes once the helper has exited: what it wrote is in them already
#: (a pipe holds 64 KiB, 1 MiB at most when enlarged), and a child it left may write forever.
_AFTER_EXIT = 2 * 1024 * 1024


def _converse(helper: subprocess.Popen[bytes], request: bytes) -> tuple[str, bytes, bytes]:
    """Send ``request`` and read the helper's answer: (outcome, stdout, stderr).

    The conversation ends when the helper exits, not when its pipes close: a child it left
    behind may hold them open. Stdout is read up to :data:`_MAX_OUTPUT` + 1 bytes (more is
    :data:`_TOO_MUCH`); stderr keeps its last :data:`_MAX_OUTPUT` bytes.
    """
    stdin, stdout, stderr = helper.stdin, helper.stdout, helper.stderr
    assert stdin is not None and stdout is not None and stderr is not None  # noqa: PT018
    try:
        stdin.write(request)  # a few hundred bytes: the pipe holds them all
        stdin.close()
    except BrokenPipeError:
        pass  # it exited without reading: its exit status says why
    deadline = time.monotonic() + TIMEOUT_SECONDS
    out, err = bytearray(), bytearray()
    after_exit = 0
    with selectors.DefaultSelector() as watch:
        watch.register(stdout, selectors.EVENT_READ, out)
        watch.register(stderr, selectors.EVENT_READ, err)
        while True:
            exited = _has_exited(helper)  # if so, all it wrote is in the pipes by now
            left = deadline - time.monotonic()
            if left <= 0:
                return _TIMED_OUT, bytes(out), bytes(err)
            if not watch.get_map():  # both pipes closed: its exit is a moment away
                if exited:
                    return _EXITED, bytes(out), bytes(err)
                time.sleep(min(left, 0.005))
                continue
            ready = watch.select(0 if exited else min(left, 0.05))
            if exited and (not ready or after_exit > _AFTER_EXIT):
                return _EXITED, bytes(out), bytes(err)
            for handle, _events in ready:
                kept: bytearray = handle.data
                chunk = os.read(handle.fd, _MAX_OUTPUT + 1 - len(out) if kept is out else 65536)
                if not chunk:
                    watch.unregister(handle.fileobj)
                    continue
                kept += chunk
                after_exit += len(chunk) if exited else 0
                if len(out) > _MAX_OUTPUT:
                    return _TOO_MUCH, bytes(out), bytes(err)
                if len(err) > _MAX_OUTPUT:
                    del err[: len(err) - _MAX_OUTPUT]


def _has_exited(helper: subprocess.Popen[bytes]) -> bool:
    """Whether the helper has exited, without reaping it: until it is reaped, its process id
    (its group's id) cannot be given to another process, so ending the group stays safe."""
    try:
        found = os.waitid(os.P_PID, helper.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return found is not None


def _end_group(helper: subprocess.Popen[bytes]) -> None:
    """End the helper's process group (the helper, and any child it left), then reap it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):  # the group is gone
        os.killpg(helper.pid, signal.SIGKILL)
    for pipe in (helper.stdin, helper.stdout, helper.stderr):
        if pipe is not None:
            pipe.close()
    helper.wait()


def _answer(stdout: bytes, member: str, name: str, op: str) -> bytes:
    """The bytes of ``{"<member>": B64URL}``, the only answer a helper may print."""
    garbage = KekUnavailable(
        f"KEK helper {name} printed no valid answer to {op}: expected one JSON object "
        f'{{"{member}": "<base64url>"}} on stdout'
    )
    if len(stdout) > _MAX_OUTPUT:  # not reached: _converse stops at one byte more
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
