"""A folder's files reached by descriptor from its root, never through a symbolic link: `ConfinedFolder`.

The mechanism under `LocalFolder` (`ctxkeep.folder`), which adds the policy (when a write is synced, the
lock, the live log kept open). Every folder below the root is opened relative to its parent with
``O_NOFOLLOW``, so a link planted where a file or folder belongs is refused with a `StorageError` naming
it, never followed; what is made here is private (files 0600, folders 0700), and a file or folder that was
already there keeps its mode. A file is written either in place, when it does not exist yet (`write_new`),
or replaced atomically through a temporary file with an unpredictable name (`replace`), whose names
`TEMPORARY` matches for the cleanup of a killed writer's.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path

from . import fileops
from .errors import StorageError, WorkspaceError

# `replace`'s temporary file: `.<name>.<16 random hex digits>.tmp` (before: `.<name>.<pid>.tmp`).
TEMPORARY = re.compile(r"\.(?P<name>.+)\.(?:[0-9a-f]{16}|[0-9]+)\.tmp")


class ConfinedFolder:
    """The files and folders under `root` (resolved once, here: the root itself may be reached through a link)."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()

    def parts(self, name: str) -> list[str]:
        """The folders and base name of a workspace file's `name`; a `WorkspaceError` when it leaves the root."""
        parts = name.split("/")
        if not name or "\x00" in name or any(p in ("", ".", "..") for p in parts):
            # A ctxkeep error, not a ValueError: a damaged state or an imported record can name such a file.
            raise WorkspaceError(
                f"a workspace file name must be relative and stay inside the folder; got {name!r}",
                path=str(self.root),
            )
        return parts

    def open_folder(self, parent: int | None, name: str | Path, path: Path, *, create: bool) -> int | None:
        """A folder of the workspace, opened without following a link; made (private) when missing and `create`."""
        made = False
        try:
            fd = os.open(name, fileops.FOLDER_FLAGS, dir_fd=parent)
        except FileNotFoundError:
            if not create:
                return None
            try:
                if parent is None:
                    path.parent.mkdir(parents=True, exist_ok=True)
                os.mkdir(name, fileops.FOLDER_MODE, dir_fd=parent)
                made = True
            except FileExistsError:
                pass
            except OSError as exc:
                raise fileops.storage_error(exc, "create the folder", path) from exc
            try:
                fd = os.open(name, fileops.FOLDER_FLAGS, dir_fd=parent)
            except OSError as exc:
                raise fileops.refusal(exc, "open the folder", path) from exc
        except OSError as exc:
            raise fileops.refusal(exc, "open the folder", path) from exc
        if made:  # never the mode of a folder ctxkeep did not create
            try:
                fileops.private(fd, fileops.FOLDER_MODE)
            except OSError as exc:
                os.close(fd)
                raise fileops.storage_error(exc, "make private", path) from exc
        return fd

    @contextlib.contextmanager
    def folder(self, parts: list[str], *, create: bool) -> Iterator[int | None]:
        """The open folder `parts` of the workspace (the root when empty), or None when it is missing."""
        fd = self.open_folder(None, self.root, self.root, create=create)
        path = self.root
        try:
            for part in parts:
                if fd is None:
                    break
                path = path / part
                parent, fd = fd, None
                try:
                    fd = self.open_folder(parent, part, path, create=create)
                finally:
                    os.close(parent)
            yield fd
        finally:
            if fd is not None:
                os.close(fd)

    def open_file(self, folder: int, base: str, path: Path, flags: int, action: str) -> int | None:
        """A regular file of the workspace, opened without following a link; None when it is missing."""
        try:
            fd = os.open(base, flags | fileops.FILE_FLAGS, fileops.FILE_MODE, dir_fd=folder)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise fileops.refusal(exc, action, path) from exc
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise StorageError(
                f"cannot {action} {path}: it is not a regular file; move it out of the workspace", path=str(path)
            )
        return fd

    def create_file(self, folder: int, base: str, path: Path, flags: int, action: str) -> tuple[int, bool]:
        """A regular file of the workspace, made (private) when missing; and whether it was made now."""
        try:
            fd = os.open(base, flags | os.O_CREAT | os.O_EXCL | fileops.FILE_FLAGS, fileops.FILE_MODE, dir_fd=folder)
        except FileExistsError:
            existing = self.open_file(folder, base, path, flags, action)
            if existing is None:
                raise fileops.storage_error(OSError(errno.ENOENT, "removed while opening"), action, path) from None
            return existing, False
        except OSError as exc:
            raise fileops.refusal(exc, action, path) from exc
        try:
            fileops.private(fd, fileops.FILE_MODE)
        except OSError as exc:
            os.close(fd)
            raise fileops.storage_error(exc, action, path) from exc
        return fd, True

    def write_new(self, name: str, data: bytes | Iterable[bytes]) -> bool:
        """Write a file that does not exist yet in place, without a sync; False when it exists."""
        *folders, base = self.parts(name)
        path = self.root / name
        with self.folder(folders, create=True) as d:
            assert d is not None
            try:
                fd = os.open(
                    base, os.O_WRONLY | os.O_CREAT | os.O_EXCL | fileops.FILE_FLAGS, fileops.FILE_MODE, dir_fd=d
                )
            except FileExistsError:
                return False
            except OSError as exc:
                raise fileops.refusal(exc, "write", path) from exc
            try:
                try:
                    fileops.private(fd, fileops.FILE_MODE)
                    for part in (data,) if isinstance(data, bytes) else data:
                        fileops.write_all(fd, part)
                finally:
                    os.close(fd)
            except OSError as exc:
                with contextlib.suppress(OSError):
                    os.unlink(base, dir_fd=d)  # never a part of a file for a reader to find
                raise fileops.storage_error(exc, "write", path) from exc
        return True

    def replace(self, name: str, data: bytes | Iterable[bytes], *, sync: bool) -> None:
        """Replace a file (or make it) atomically: a reader finds the old bytes or the new, never a part.
        With `sync`, the file is fsynced before the rename and its folder after."""
        *folders, base = self.parts(name)
        path = self.root / name
        with self.folder(folders, create=True) as d:
            assert d is not None
            fileops.not_a_link(d, base, path, "write")
            # An unpredictable name, created exclusively: nothing planted there is ever written through.
            tmp = f".{base}.{secrets.token_hex(8)}.tmp"
            made = False
            try:
                fd = os.open(
                    tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | fileops.FILE_FLAGS, fileops.FILE_MODE, dir_fd=d
                )
                made = True
                try:
                    fileops.private(fd, fileops.FILE_MODE)
                    for part in (data,) if isinstance(data, bytes) else data:
                        fileops.write_all(fd, part)
                    if sync:
                        os.fsync(fd)
                finally:
                    os.close(fd)
                os.rename(tmp, base, src_dir_fd=d, dst_dir_fd=d)
                if sync:
                    os.fsync(d)
            except OSError as exc:
                if made:
                    with contextlib.suppress(OSError):
                        os.unlink(tmp, dir_fd=d)
                raise fileops.storage_error(exc, "write", path) from exc
