"""The file operations a local workspace folder is built on: private modes, never through a link, durable
writes, and an `OSError` turned into a `StorageError` that names the file and says what to do."""

from __future__ import annotations

import errno
import logging
import os
import stat
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .errors import StorageError

log = logging.getLogger("ctxkeep")

ADVICE = {
    errno.ENOSPC: "the disk is full; free some space and try again",
    errno.EDQUOT: "the disk quota is exhausted; free some space and try again",
    errno.EROFS: "the file system is read-only; use a writable workspace folder",
    errno.EACCES: "permission denied; make the workspace folder writable for this user",
    errno.EPERM: "operation not permitted; make the workspace folder writable for this user",
}

FILE_MODE = 0o600
FOLDER_MODE = 0o700
# Never through a link; never stuck opening a FIFO someone left where a file of ours belongs.
FILE_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def storage_error(exc: OSError, action: str, path: Path) -> StorageError:
    """The `StorageError` for `exc`, naming the file and what to do about it."""
    advice = ADVICE.get(exc.errno or 0, exc.strerror or str(exc))
    return StorageError(f"cannot {action} {path}: {advice}", path=str(path), errno=exc.errno)


def refusal(exc: OSError, action: str, path: Path) -> StorageError:
    """The error for an open that failed, naming a link or a file found where the workspace has its own."""
    if exc.errno in (errno.ELOOP, errno.ENOTDIR) and path.is_symlink():
        return StorageError(
            f"cannot {action} {path}: it is a symbolic link, and ctxkeep never follows links inside a workspace;"
            " put the real file or folder there, or remove the link",
            path=str(path),
            errno=errno.ELOOP,
        )
    if exc.errno == errno.ENOTDIR:
        return StorageError(
            f"cannot {action} {path}: it is not a folder; move it out of the workspace", path=str(path), errno=exc.errno
        )
    return storage_error(exc, action, path)


def not_a_link(folder: int, base: str, path: Path, action: str) -> None:
    """Refuse a link where a file of the workspace belongs (a missing file is fine)."""
    try:
        st = os.stat(base, dir_fd=folder, follow_symlinks=False)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise storage_error(exc, action, path) from exc
    if stat.S_ISLNK(st.st_mode):
        raise refusal(OSError(errno.ELOOP, "is a symbolic link"), action, path)


def private(fd: int, mode: int) -> None:
    """Give what ctxkeep just created its private mode, whatever the umask took off."""
    if stat.S_IMODE(os.fstat(fd).st_mode) != mode:
        os.fchmod(fd, mode)


def datasync(fd: int) -> None:
    """fdatasync where the system has it (Linux): it skips the inode times an fsync would also flush."""
    if hasattr(os, "fdatasync"):
        os.fdatasync(fd)
    else:  # macOS
        os.fsync(fd)


# Syncs in flight at once in `sync_together`. Measured (bench/README.md, "one durable commit"): 23 new files
# and 2 folders on ext4 took 16-90 ms synced one after the other, 3.5-4 ms with 4 threads (8, 16 and 32 were
# no faster).
SYNC_THREADS = 4
# ... but where syncs cost nothing (tmpfs, a disk with nothing to flush) starting threads is the cost: 0.3 ms
# for a compaction's syncs one by one on tmpfs, 4-6 ms with the threads on a loaded machine. So syncs run one
# by one until they have taken this long, and the rest at once.
SYNC_ALONE_SECONDS = 0.001


def sync_together(syncs: Sequence[Callable[[], None]]) -> None:
    """Run the syncs `syncs` make, at once on a few threads once they prove slow, and return when all are done.

    Syncs that wait together for the disk share its journal commits and cache flushes: a compaction's files
    become durable in about the time of one, where one after the other each paid its own. They run one by
    one while that is cheap (`SYNC_ALONE_SECONDS` in all). The first failure (in the order given) is raised,
    and no sync is still running then.
    """
    start = time.perf_counter()
    at = 0
    while at < len(syncs) and (at == len(syncs) - 1 or time.perf_counter() - start < SYNC_ALONE_SECONDS):
        syncs[at]()
        at += 1
    if at == len(syncs):
        return
    with ThreadPoolExecutor(min(SYNC_THREADS, len(syncs) - at), thread_name_prefix="ctxkeep-sync") as pool:
        done = [pool.submit(sync) for sync in syncs[at:]]
    for future in done:
        future.result()


def write_all(fd: int, data: bytes) -> None:
    """Write all of `data` (`os.write` may take less than it is given)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def still_at(fd: int, path: str | Path) -> bool:
    """True when `path` is still the file `fd` has open (not removed, nor replaced by another)."""
    try:
        st = os.stat(path, follow_symlinks=False)
    except (FileNotFoundError, NotADirectoryError):
        return False
    held = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (held.st_dev, held.st_ino)


def cut_back(fd: int, size: int, path: Path) -> None:
    """Cut a refused append back to `size`; a failure is logged, and the next open repairs the torn line."""
    try:
        os.ftruncate(fd, size)
        os.fsync(fd)
    except OSError as exc:
        # The session drops a torn line when it next opens the workspace; say why it will.
        log.warning("cannot cut %s back to its last complete line (%s); it is repaired when next opened", path, exc)
