"""Keyset file storage: read refusing unsafe files, write atomically under a lock, mode 0600.

A keyset is a deployment-wide secret. Reading refuses a symlink (someone could point it at a
file they control), anything but a regular file, and a file group or others can access, rather
than trusting it and fixing permissions later. Writing never leaves a torn or world-readable
file, even for an instant: the new content goes to a temporary file created 0600 in the same
folder, is fsynced, renamed over the old one, and the folder is fsynced so the rename survives a
crash. Concurrent writers (two deploy scripts, a cron job) serialise on an advisory lock file
beside the keyset; the lock is taken around the whole read-modify-write.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path

from .errors import (
    KeysetError,
    KeysetExists,
    KeysetInvalid,
    KeysetLocked,
    KeysetNotFound,
    KeysetPermissions,
)

__all__ = ["MAX_KEYSET_BYTES", "keyset_lock", "read_keyset_text", "write_keyset_text"]

MAX_KEYSET_BYTES = 4 * 1024 * 1024
LOCK_TIMEOUT_SECONDS = 10.0


def _lock_path(path: Path) -> Path:
    return path.with_name(path.name + ".lock")


@contextlib.contextmanager
def keyset_lock(path: Path, timeout: float = LOCK_TIMEOUT_SECONDS) -> Iterator[None]:
    """Hold the exclusive writer lock of the keyset at ``path``.

    The lock lives in ``<keyset>.lock`` (never the keyset itself, which is replaced by rename and
    so would lose a lock taken on its old inode). The kernel drops it if the holder dies.
    """
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


def read_keyset_text(path: Path) -> str:
    """Read a keyset file, refusing symlinks, non-regular files and loose permissions."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        raise KeysetNotFound(
            f"no keyset at {path}; create one with: mrtr-state keys init (or pass --keyset)"
        ) from None
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise KeysetPermissions(
                f"keyset {path} is a symlink, which is refused; point --keyset at the real file"
            ) from None
        raise KeysetPermissions(f"cannot read keyset {path}: {err.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise KeysetPermissions(f"keyset {path} is not a regular file")
        if info.st_uid not in (os.geteuid(), 0):
            raise KeysetPermissions(
                f"keyset {path} belongs to another user (uid {info.st_uid}); a keyset must be "
                "owned by the user that runs mrtr-state (or root)"
            )
        loose = stat.S_IMODE(info.st_mode) & 0o077
        if loose:
            raise KeysetPermissions(
                f"keyset {path} is accessible by group or others "
                f"(mode {stat.S_IMODE(info.st_mode):04o}); fix it with: chmod 600 {path}"
            )
        if info.st_size > MAX_KEYSET_BYTES:
            raise KeysetPermissions(
                f"keyset {path} is {info.st_size} bytes, over the {MAX_KEYSET_BYTES}-byte limit; "
                "prune retired keys"
            )
        with os.fdopen(fd, "rb", closefd=False) as handle:
            data = handle.read(MAX_KEYSET_BYTES + 1)
    finally:
        os.close(fd)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise KeysetInvalid(f"keyset {path} is not UTF-8 text") from None


def write_keyset_text(path: Path, text: str, *, overwrite: bool) -> None:
    """Atomically replace (or create) the keyset at ``path`` with ``text``, mode 0600.

    The caller must hold :func:`keyset_lock` (it read the content being replaced under it).
    """
    folder = path.parent
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    _check_folder(folder)
    if path.is_symlink():
        raise KeysetPermissions(f"keyset {path} is a symlink, which is refused")
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


def _check_folder(folder: Path) -> None:
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
