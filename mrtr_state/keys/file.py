"""Keyset file storage: read files that pass the permission rule, write atomically under a lock.

A keyset is a deployment-wide secret, delivered the ways fleets deliver secrets: a file the
server's user owns, a Kubernetes Secret mount (``keyset.json -> ..data/keyset.json``, swapped
atomically on every update, root-owned 0440 when the pod sets ``fsGroup``), a Docker secret under
``/run/secrets``. Reading therefore follows symlinks and judges the regular file it reaches, with
PostgreSQL's rule for its TLS key: owned by the running user and not accessible to group or others
(0600/0400), or owned by root and at most readable by its group (0640/0440). Anything looser, a
file of another user, or anything but a regular file is refused, and the message names the mode
found and the mode wanted. A symlink cannot smuggle a looser file past the rule: the rule is
applied to the file the open reached, through its descriptor.

Writing never leaves a torn or world-readable file, even for an instant: the new content goes to a
temporary file created 0600 in the same folder, is fsynced, renamed over the old one, and the
folder is fsynced so the rename survives a crash. Concurrent writers (two deploy scripts, a cron
job) serialise on an advisory lock file beside the keyset, taken around the whole
read-modify-write. A symlinked or read-only keyset is a copy some other system owns (a Secret, a
mount): writing refuses it and says to change the source of truth instead.
"""

from __future__ import annotations

import contextlib
import os
import stat
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, BinaryIO

from ..errors import (
    KeysetError,
    KeysetExists,
    KeysetInvalid,
    KeysetLocked,
    KeysetNotFound,
    KeysetPermissions,
)

if TYPE_CHECKING:  # writers get Path objects; readers take any path, and never import pathlib
    from pathlib import Path

__all__ = [
    "MAX_KEYSET_BYTES",
    "Stamp",
    "check_writable",
    "keyset_lock",
    "permission_problem",
    "read_keyset_file",
    "read_private_file",
    "stamp",
    "write_keyset_text",
]

MAX_KEYSET_BYTES = 4 * 1024 * 1024
LOCK_TIMEOUT_SECONDS = 10.0

#: What identifies one version of a file: device, inode, size, modification and change times.
#: A Kubernetes swap or an atomic rename changes the inode; an edit in place changes the times.
Stamp = tuple[int, int, int, int, int]


def _stamp_of(info: os.stat_result) -> Stamp:
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


def stamp(path: str | os.PathLike[str]) -> Stamp | None:
    """The stamp of the file ``path`` leads to now (symlinks followed), or None if there is none."""
    try:
        return _stamp_of(os.stat(path))
    except OSError:
        return None


def _lock_path(path: Path) -> Path:
    return path.with_name(path.name + ".lock")


@contextlib.contextmanager
def keyset_lock(path: Path, timeout: float = LOCK_TIMEOUT_SECONDS) -> Iterator[None]:
    """Hold the exclusive writer lock of the keyset at ``path`` (refusing a read-only keyset).

    The lock lives in ``<keyset>.lock`` (never the keyset itself, which is replaced by rename and
    so would lose a lock taken on its old inode). The kernel drops it if the holder dies.
    """
    import fcntl  # only writers lock

    check_writable(path)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    lock_file = _lock_path(path)
    try:
        fd = os.open(lock_file, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    except OSError as err:
        raise KeysetError(f"cannot open lock file {lock_file}: {err.strerror}") from None
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise KeysetLocked(
                        f"another process has held {lock_file} for over {timeout:.0f} s; "
                        "wait for it to finish, then try again"
                    ) from None
                time.sleep(0.02)
        yield
    finally:
        os.close(fd)  # closing releases the lock


_SOURCE_OF_TRUTH = (
    "keep the writable source of truth in a regular file of your own (mode 0600), run mrtr-state "
    "against that file and ship it again (see docs/deploying.md)"
)


def check_writable(path: Path) -> None:
    """Refuse to write a keyset that is a deployed copy: a symlink, a read-only file or mount.

    A Kubernetes Secret mount is a symlink on a read-only file system and a Docker secret is
    usually a read-only file; writing there would fail half-way, or succeed on one replica and be
    overwritten at the next sync. The keys must change where they come from.
    """
    if path.is_symlink():
        raise KeysetPermissions(
            f"keyset {path} is a symlink (to {os.readlink(path)}), as in a Kubernetes Secret "
            f"mount; mrtr-state writes only a regular file: {_SOURCE_OF_TRUTH}"
        )
    try:
        info = path.stat()
    except FileNotFoundError:
        info = None
    except OSError as err:
        raise KeysetError(f"cannot check keyset {path}: {err.strerror}") from None
    if info is not None and not info.st_mode & stat.S_IWUSR:
        raise KeysetPermissions(
            f"keyset {path} is read-only (mode {stat.S_IMODE(info.st_mode):04o}), as a deployed "
            f"copy is; {_SOURCE_OF_TRUTH}. If this file is the source of truth: chmod 600 {path}"
        )
    folder = next((p for p in (path.parent, *path.parent.parents) if p.exists()), None)
    if folder is not None and os.statvfs(folder).f_flag & os.ST_RDONLY:
        raise KeysetPermissions(
            f"keyset {path} is on a read-only file system (a secret mount?); {_SOURCE_OF_TRUTH}"
        )


def permission_problem(mode: int, owner: int, euid: int) -> str | None:
    """Why a regular file of this mode and owner may not hold a keyset for user ``euid``, or None.

    Owned by ``euid``: no access at all for group or others (0600, 0400). Owned by root: at most
    read access for the group (0640, 0440: a Kubernetes ``fsGroup`` mount). Nothing else.
    """
    bits = stat.S_IMODE(mode)
    if owner == 0 and not bits & 0o037:
        return None
    if owner == euid and not bits & 0o077:
        return None
    if owner not in (0, euid):
        return (
            f"belongs to uid {owner}, neither the user running mrtr-state (uid {euid}) nor root; "
            f"a keyset (or a KEK's passphrase or PIN) must be owned by one of them"
        )
    loose = _describe_access(bits & (0o037 if owner == 0 else 0o077))
    if owner == 0:
        return (
            f"has mode {bits:04o} (owner root), {loose}; a root-owned secret file may be at most "
            "group-readable: 0640 or 0440"
        )
    return (
        f"has mode {bits:04o} (owner uid {owner}), {loose}; a secret file owned by the user "
        "running mrtr-state must be 0600 or 0400"
    )


def _describe_access(bits: int) -> str:
    """``readable by others, writable by group``: who may do what, from permission bits."""
    parts = []
    for who, shift in (("group", 3), ("others", 0)):
        can = [
            verb for verb, bit in (("read", 4), ("write", 2), ("execute", 1)) if bits >> shift & bit
        ]
        if can:
            parts.append(f"{who} may {'/'.join(can)} it")
    return ", ".join(parts)


def read_keyset_file(path: str | os.PathLike[str]) -> tuple[str, Stamp]:
    """Read a keyset file that passes the permission rule; return its text and its stamp.

    Symlinks are followed and the file reached is judged through the open descriptor, so what is
    checked is exactly what is read, even while a Kubernetes swap replaces it.
    """
    try:
        data, info = _read_private(path, "keyset", MAX_KEYSET_BYTES)
    except FileNotFoundError:
        raise KeysetNotFound(f"no keyset at {path}").needing("create_keyset") from None
    try:
        return data.decode("utf-8"), _stamp_of(info)
    except UnicodeDecodeError:
        raise KeysetInvalid(f"keyset {path} is not UTF-8 text") from None


def read_private_file(path: str | os.PathLike[str], what: str, limit: int) -> bytes:
    """The bytes of a secret file other than the keyset (a passphrase, an HSM PIN), under the
    keyset's permission rule: a secret that others can read protects nothing."""
    try:
        return _read_private(path, what, limit)[0]
    except FileNotFoundError:
        raise KeysetNotFound(f"no {what} at {path}") from None


def _read_private(
    path: str | os.PathLike[str], what: str, limit: int
) -> tuple[bytes, os.stat_result]:
    """Open ``path`` (following symlinks), judge the file reached through its descriptor by the
    permission rule and size ``limit``, and read it. ``FileNotFoundError`` passes through."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        raise
    except OSError as err:
        raise KeysetPermissions(f"cannot read {what} {path}: {err.strerror}") from None
    try:
        info = os.fstat(fd)
        shown = _shown(path)
        if not stat.S_ISREG(info.st_mode):
            raise KeysetPermissions(f"{what} {shown} is not a regular file")
        problem = permission_problem(info.st_mode, info.st_uid, os.geteuid())
        if problem is not None:
            raise KeysetPermissions(f"{what} {shown} {problem}; {_fix(path, info.st_uid)}")
        if info.st_size > limit:
            raise KeysetPermissions(
                f"{what} {shown} is {info.st_size} bytes, over the {limit}-byte limit"
                + ("; prune retired keys" if what == "keyset" else "")
            )
        with os.fdopen(fd, "rb", closefd=False) as handle:
            data = handle.read(limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:  # it grew between the check and the read
        raise KeysetPermissions(f"{what} {path} is over the {limit}-byte limit")
    return data, info


def _fix(path: str | os.PathLike[str], owner: int) -> str:
    real = os.path.realpath(path)
    if owner == os.geteuid():
        return f"fix it with: chmod 600 {real}"
    if owner == 0:
        return (
            f"fix it with: chmod 640 {real} (for a Kubernetes Secret or a Docker secret, "
            "set its mode to 0400, or 0440 with fsGroup)"
        )
    return f"fix it with: chown {os.geteuid()} {real}, or run mrtr-state as uid {owner}"


def _shown(path: str | os.PathLike[str]) -> str:
    """``path``, and the file it leads to when that is another (a symlink, a Secret mount)."""
    real = os.path.realpath(path)
    return os.fspath(path) if real == os.path.abspath(path) else f"{path} (-> {real})"


def write_keyset_text(path: Path, text: str, *, overwrite: bool) -> None:
    """Atomically replace (or create) the keyset at ``path`` with ``text``, mode 0600.

    The caller must hold :func:`keyset_lock`, which refused a read-only keyset and serialises the
    read-modify-write.
    """
    folder = path.parent
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    check_folder(folder)
    _remove_stale_temporaries(path)
    if not overwrite and path.exists():
        raise KeysetExists(f"a keyset already exists at {path}; pass --force to replace it")
    import tempfile  # deferred: only writers need it, and it is slow to import

    try:
        fd, temp_name = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as err:
        raise KeysetError(f"cannot write in {folder}: {err.strerror}") from None
    try:
        try:
            os.fchmod(fd, 0o600)
            with os.fdopen(fd, "wb", closefd=False) as handle:
                handle.write(text.encode("utf-8"))
                handle.flush()
                os.fsync(handle.fileno())
        finally:
            os.close(fd)
        if not overwrite:
            # link() fails if the name appeared meanwhile, where rename() would clobber it.
            os.link(temp_name, path)
            os.unlink(temp_name)
        else:
            os.replace(temp_name, path)
        _fsync_folder(folder)
    except FileExistsError:
        _discard(temp_name)
        raise KeysetExists(
            f"a keyset already exists at {path}; pass --force to replace it"
        ) from None
    except OSError as err:
        _discard(temp_name)
        raise KeysetError(f"cannot write keyset {path}: {err.strerror}") from None


def check_folder(folder: Path) -> None:
    """Refuse a folder others may write in: they could swap the keyset between our checks."""
    info = folder.stat()
    if stat.S_IMODE(info.st_mode) & 0o022 and not info.st_mode & stat.S_ISVTX:
        raise KeysetPermissions(
            f"folder {folder} is writable by group or others, so they could replace the keyset; "
            f"fix it with: chmod go-w {folder}"
        )


def _remove_stale_temporaries(path: Path) -> None:
    """Delete temporary files a crashed writer left behind (we hold the lock, so none is live)."""
    for leftover in path.parent.glob(f".{path.name}.*.tmp"):
        with contextlib.suppress(FileNotFoundError):
            leftover.unlink()


def _discard(name: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(name)


def _fsync_folder(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# --- secrets in files: what keys import and export read and write --------------------------------

#: How secrets may be written down: raw bytes, base64 (standard or url-safe) or hex text.
SECRET_ENCODINGS = ("raw", "base64", "hex")


def read_secret(source: str, stdin: BinaryIO, limit: int) -> bytes:
    """The bytes of secret file ``source`` (or of ``stdin`` for ``-``), read only up to ``limit``
    and exactly as they are (:func:`decode_secret` says what a trailing newline means).
    ``ValueError`` says what is wrong."""
    try:
        if source == "-":
            data = stdin.read(limit + 1)
        else:
            with open(source, "rb") as handle:
                data = handle.read(limit + 1)
    except OSError as err:
        raise ValueError(f"cannot read secret file {source}: {err.strerror}") from None
    if len(data) > limit:
        raise ValueError(f"the secret in {source} is over {limit} bytes")
    if not data:
        raise ValueError(f"the secret in {source} is empty")
    return data


def decode_secret(data: bytes, encoding: str, source: str) -> bytes:
    """The raw secret from how it was written down (surrounding whitespace ignored for text).

    A raw secret is taken byte for byte, so a final newline cannot be told from the key's own
    last byte (one random key in 256 ends in 0x0a) or from one an editor or ``echo`` added:
    it is refused, never silently kept or dropped, and the message says how to write it."""
    if encoding == "raw":
        if data.endswith(b"\n"):
            raise ValueError(
                f"the raw secret in {source} ends with a newline, which may be the key's last "
                "byte or one an editor added: write it without one (printf '%s' \"$SECRET\"), "
                "or as base64 or hex text with --encoding base64 or --encoding hex"
            )
        return data
    import base64
    import binascii

    text = data.strip()
    try:
        if encoding == "hex":
            return bytes.fromhex(text.decode("ascii"))
        standard = text.replace(b"-", b"+").replace(b"_", b"/")
        decoded: bytes = base64.b64decode(standard + b"=" * (-len(standard) % 4), validate=True)
        return decoded
    except (ValueError, binascii.Error):
        raise ValueError(f"the secret in {source} is not valid {encoding} text") from None


def text_secret(data: bytes, source: str) -> tuple[bytes, str | None]:
    """A text secret from the bytes of its file: the text, and the line break dropped from its
    end ("LF", "CRLF"), if there was one.

    An SDK that takes its secret as text (``mcp-py-v1``, ``mcp-ts-v1``) is given it from an
    environment variable, which holds the text without the line break ``echo`` or an editor put
    after it in a file: one final LF or CRLF is the file's, not the secret's. More than one is
    refused (``ValueError``): what the SDK was given cannot be told then."""
    if data.endswith(b"\r\n"):
        text, dropped = data[:-2], "CRLF"
    elif data.endswith(b"\n"):
        text, dropped = data[:-1], "LF"
    else:
        return data, None
    if text.endswith((b"\n", b"\r")):
        raise ValueError(
            f"the secret text in {source} ends with more than one line break: write the SDK's "
            'secret on one line (echo "$SECRET" > FILE)'
        )
    if not text:
        raise ValueError(f"the secret in {source} is empty")
    return text, dropped


def encode_secret(secret: bytes, encoding: str) -> bytes:
    """A secret written down for export: raw bytes, or a line of base64url or hex text."""
    if encoding == "raw":
        return secret
    if encoding == "hex":
        return secret.hex().encode("ascii") + b"\n"
    import base64

    return base64.urlsafe_b64encode(secret).rstrip(b"=") + b"\n"


def write_secret_file(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to a new file, mode 0600 from the start, never over an existing file or
    through a symlink, and flushed to disk before returning."""
    try:
        handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        raise ValueError(f"{path} exists; exported secrets never overwrite a file") from None
    except OSError as err:
        raise ValueError(f"cannot create {path}: {err.strerror}") from None
    with os.fdopen(handle, "wb") as written:
        written.write(data)
        written.flush()
        os.fsync(written.fileno())
