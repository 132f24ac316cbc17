"""What a local folder adds to the memory part of the `Store` seam: a lock across processes and a place for
the search index, both on this machine's disk.

`LocalFolder.memory_lock` is a ``flock`` on ``memory/.lock`` (separate from the session's lock, which a
session holds for its whole life while the agent, a CLI and a scheduler all write memory), and
`LocalFolder.index_path` is ``index/memory.sqlite``: private modes, never through a link.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import stat
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Protocol

from .errors import StorageError
from .store import MEMORY_DIR, MEMORY_FILE

LOCK_FILE = f"{MEMORY_DIR}/.lock"
INDEX_FILE = "index/memory.sqlite"
# What is written only under the memory lock, by folder: MEMORY.md, the consolidation's state and backups.
_LOCKED_WRITES = {
    "": re.compile(re.escape(MEMORY_FILE)),
    MEMORY_DIR: re.compile(r"consolidated\.json"),
    f"{MEMORY_DIR}/backup": re.compile(r"MEMORY-[0-9T]+\.md"),
}


class Local(Protocol):
    """The part of `LocalFolder` these need (a protocol, so this module does not import the folder)."""

    root: Path

    def append(self, name: str, data: bytes) -> int: ...

    def remove_temporaries(self, replaced_in: Mapping[str, re.Pattern[str]]) -> None: ...


@contextlib.contextmanager
def memory_lock(folder: Local) -> Iterator[None]:
    """Hold the memory files against every other writer, in this process or another, until the block ends."""
    folder.append(LOCK_FILE, b"")  # creates memory/ and the lock file privately, through no link
    path = folder.root / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        why = f"cannot open the memory lock {path}: {exc.strerror}"
        raise StorageError(why, path=str(path), errno=exc.errno) from exc
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise StorageError(f"{path} is not a regular file; remove it", path=str(path), errno=errno.EINVAL)
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            folder.remove_temporaries(_LOCKED_WRITES)  # what a killed writer left: none is writing now
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def index_path(folder: Local) -> str:
    """``index/memory.sqlite`` of the folder, made private when missing; `StorageError` when a link is in the way."""
    where = folder.root / "index"
    folder.append(LOCK_FILE, b"")  # makes the workspace folder, privately, when missing
    try:
        os.mkdir(where, 0o700)
        os.chmod(where, 0o700, follow_symlinks=False)
    except FileExistsError:
        pass
    except OSError as exc:
        raise StorageError(f"cannot create {where}: {exc.strerror}", path=str(where), errno=exc.errno) from exc
    if not stat.S_ISDIR(os.lstat(where).st_mode):
        raise StorageError(
            f"{where} is not a folder (a link?): ctxkeep never follows links inside a workspace; remove it",
            path=str(where),
            errno=errno.ELOOP,
        )
    path = folder.root / INDEX_FILE
    for name in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        with contextlib.suppress(FileNotFoundError):
            if not stat.S_ISREG(os.lstat(name).st_mode):
                raise StorageError(
                    f"{name} is not a regular file (a link?): ctxkeep never follows links inside a workspace;"
                    " remove it (the index is rebuilt)",
                    path=str(name),
                    errno=errno.ELOOP,
                )
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        os.fchmod(fd, 0o600)
        os.close(fd)
    except OSError as exc:
        raise StorageError(f"cannot create {path}: {exc.strerror}", path=str(path), errno=exc.errno) from exc
    return str(path)
