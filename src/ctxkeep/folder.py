"""Where a workspace's files live: one small interface, a local folder by default.

Every step that keeps something on disk (offloaded tool results, the dialog archive, the session
state) goes through `Folder`, so another backend (a database for fleets of agents) is one new
class, not a rewrite. Names are relative, with ``/`` separators (``tool_result/<uuid>.txt``).

`LocalFolder` makes every write durable before it returns: `write` replaces a file atomically
(temporary file, fsync, rename, fsync of the directory) and `append` fsyncs. An `OSError` becomes a
`StorageError` that names the file and says what to do (disk full, read-only, no permission).
`MemoryFolder` keeps files in a dict, for tests.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from .errors import StorageError, WorkspaceLockedError

__all__ = ["FileInfo", "Folder", "LocalFolder", "MemoryFolder"]


@dataclass(frozen=True, slots=True)
class FileInfo:
    """A stored file: its relative name, size in bytes and modification time (epoch seconds)."""

    name: str
    size: int
    mtime: float


class Folder(Protocol):
    """The storage a workspace needs. Names are relative paths with ``/``."""

    def read(self, name: str) -> bytes | None:
        """The file's bytes, or None when it does not exist."""
        ...

    def write(self, name: str, data: bytes) -> None:
        """Replace the file atomically: readers see the old bytes or the new, never a mix."""
        ...

    def append(self, name: str, data: bytes) -> int:
        """Append durably and return the file's new size."""
        ...

    def size(self, name: str) -> int:
        """The file's size in bytes (0 when it does not exist)."""
        ...

    def truncate(self, name: str, size: int) -> None:
        """Cut the file back to `size` bytes (used to undo an append that was never committed)."""
        ...

    def remove(self, name: str) -> None:
        """Delete the file if it exists."""
        ...

    def list(self, prefix: str) -> list[FileInfo]:
        """Files whose name starts with `prefix`, sorted by name."""
        ...

    def location(self, name: str) -> str:
        """Where an agent can read the file with its own tools (an absolute path for a local folder)."""
        ...

    def lock(self, timeout: float) -> contextlib.AbstractContextManager[None]:
        """Hold the workspace for one process; wait up to `timeout` seconds, then `WorkspaceLockedError`."""
        ...


_ADVICE = {
    errno.ENOSPC: "the disk is full; free some space and try again",
    errno.EDQUOT: "the disk quota is exhausted; free some space and try again",
    errno.EROFS: "the file system is read-only; use a writable workspace folder",
    errno.EACCES: "permission denied; make the workspace folder writable for this user",
    errno.EPERM: "operation not permitted; make the workspace folder writable for this user",
}


def _storage_error(exc: OSError, action: str, path: Path) -> StorageError:
    advice = _ADVICE.get(exc.errno or 0, exc.strerror or str(exc))
    return StorageError(f"cannot {action} {path}: {advice}", path=str(path), errno=exc.errno)


class LocalFolder:
    """A folder on the local file system. Writes are durable when they return."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).absolute()

    def __repr__(self) -> str:
        return f"LocalFolder({str(self.root)!r})"

    def _path(self, name: str) -> Path:
        if not name or name.startswith("/") or ".." in name.split("/"):
            raise ValueError(f"a workspace file name must be relative and stay inside the folder; got {name!r}")
        return self.root / name

    def _mkdir(self, path: Path) -> None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise _storage_error(exc, "create the folder", path.parent) from exc

    def read(self, name: str) -> bytes | None:
        path = self._path(name)
        try:
            return path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise _storage_error(exc, "read", path) from exc

    def write(self, name: str, data: bytes) -> None:
        path = self._path(name)
        self._mkdir(path)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
            _fsync_dir(path.parent)
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise _storage_error(exc, "write", path) from exc

    def append(self, name: str, data: bytes) -> int:
        path = self._path(name)
        self._mkdir(path)
        try:
            new = not path.exists()
            with open(path, "ab") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
                size = f.tell()
            if new:
                _fsync_dir(path.parent)
            return size
        except OSError as exc:
            raise _storage_error(exc, "append to", path) from exc

    def size(self, name: str) -> int:
        try:
            return self._path(name).stat().st_size
        except FileNotFoundError:
            return 0

    def truncate(self, name: str, size: int) -> None:
        path = self._path(name)
        try:
            if size == 0:
                path.unlink(missing_ok=True)
                return
            with open(path, "r+b") as f:
                f.truncate(size)
                os.fsync(f.fileno())
        except OSError as exc:
            raise _storage_error(exc, "truncate", path) from exc

    def remove(self, name: str) -> None:
        path = self._path(name)
        try:
            path.unlink(missing_ok=True)
        except OSError as exc:
            raise _storage_error(exc, "remove", path) from exc

    def list(self, prefix: str) -> list[FileInfo]:
        folder, _, start = prefix.rpartition("/")
        base = self.root / folder if folder else self.root
        out: list[FileInfo] = []
        try:
            entries = list(os.scandir(base))
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise _storage_error(exc, "list", base) from exc
        for entry in entries:
            if entry.name.startswith(start) and not entry.name.startswith(".") and entry.is_file():
                st = entry.stat()
                name = f"{folder}/{entry.name}" if folder else entry.name
                out.append(FileInfo(name, st.st_size, st.st_mtime))
        return sorted(out, key=lambda f: f.name)

    def location(self, name: str) -> str:
        return str(self._path(name))

    @contextlib.contextmanager
    def lock(self, timeout: float) -> Iterator[None]:
        path = self._path(".lock")
        self._mkdir(path)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise _storage_error(exc, "open the lock file", path) from exc
        try:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise WorkspaceLockedError(
                            f"the workspace {self.root} is in use by another process; wait for it to finish"
                            " or pass a longer lock timeout",
                            path=str(self.root),
                        ) from None
                    time.sleep(0.05)
            try:
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class MemoryFolder:
    """Files in a dict: for tests and for callers that keep nothing on disk."""

    def __init__(self) -> None:
        self.files: dict[str, bytearray] = {}
        self.mtimes: dict[str, float] = {}
        self._locked = False

    def _touch(self, name: str) -> None:
        self.mtimes[name] = time.time()

    def read(self, name: str) -> bytes | None:
        data = self.files.get(name)
        return None if data is None else bytes(data)

    def write(self, name: str, data: bytes) -> None:
        self.files[name] = bytearray(data)
        self._touch(name)

    def append(self, name: str, data: bytes) -> int:
        self.files.setdefault(name, bytearray()).extend(data)
        self._touch(name)
        return len(self.files[name])

    def size(self, name: str) -> int:
        return len(self.files.get(name, b""))

    def truncate(self, name: str, size: int) -> None:
        if name in self.files:
            del self.files[name][size:]

    def remove(self, name: str) -> None:
        self.files.pop(name, None)
        self.mtimes.pop(name, None)

    def list(self, prefix: str) -> list[FileInfo]:
        return [
            FileInfo(n, len(d), self.mtimes.get(n, 0.0)) for n, d in sorted(self.files.items()) if n.startswith(prefix)
        ]

    def location(self, name: str) -> str:
        return name

    @contextlib.contextmanager
    def lock(self, timeout: float) -> Iterator[None]:
        if self._locked:
            raise WorkspaceLockedError("the in-memory workspace is already held", path=None)
        self._locked = True
        try:
            yield
        finally:
            self._locked = False
