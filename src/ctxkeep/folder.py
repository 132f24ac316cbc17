"""Where a workspace is kept: the `Store` seam, and a folder of files as its default implementation.

The steps and the session speak to a `Store` in the workspace's own terms (the state, the live
log of a generation, the archive, the offloaded originals, the records), so another backend (a
database for fleets of agents) implements those and never pretends to be a file system.
`FileStore` implements them over the nine file operations of a `Folder`; names are relative, with
``/`` separators (``tool_result/<uuid>.txt``).

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


STATE = "state.json"
SUMMARY = "summary.md"
RECORDS = "compactions.jsonl"
LIVE_DIR = "live"
FAILED_DIR = "failed"
DIALOG_DIR = "dialog"
TOOL_RESULT_DIR = "tool_result"


class Store(Protocol):
    """What a workspace keeps, in its own terms. Every write is durable when it returns."""

    def lock(self, timeout: float) -> contextlib.AbstractContextManager[None]:
        """Hold the workspace for one process; wait up to `timeout` seconds, then `WorkspaceLockedError`."""
        ...

    def where(self, name: str) -> str:
        """Where a person (or the agent, with its own tools) finds `name`: a path for a local folder."""
        ...

    # The state: the commit point of a session.
    def read_state(self) -> bytes | None:
        """The committed state, or None for a new workspace."""
        ...

    def commit_state(self, data: bytes) -> None:
        """Replace the state atomically: readers see the old or the new, never a mix."""
        ...

    # The live log: one per generation, appended to between compactions.
    def live_generations(self) -> list[int]:
        """The generations that have a live log, oldest first."""
        ...

    def read_live(self, generation: int) -> bytes:
        """The generation's live log (empty when it has none)."""
        ...

    def start_live(self, generation: int, data: bytes) -> None:
        """Write a generation's live log whole."""
        ...

    def append_live(self, generation: int, data: bytes) -> None:
        """Append lines to a generation's live log."""
        ...

    def cut_live(self, generation: int, size: int) -> None:
        """Cut a live log back to `size` bytes (a line a crash left half-written)."""
        ...

    def drop_live(self, generation: int) -> None:
        """Remove a generation's live log."""
        ...

    # The archive: the compacted messages, by file (``dialog/YYYY-MM-DD.jsonl``).
    def archive_files(self) -> list[FileInfo]:
        """The archive files with their sizes, oldest first."""
        ...

    def append_archive(self, name: str, data: bytes) -> int:
        """Append to an archive file; its new size."""
        ...

    def cut_archive(self, name: str, size: int) -> None:
        """Cut an archive file back to its committed `size` (0 removes it)."""
        ...

    # The originals of offloaded tool results (``tool_result/<uuid>.txt``).
    def save_original(self, name: str, data: bytes) -> None:
        """Keep an offloaded result's full text."""
        ...

    def originals(self) -> list[FileInfo]:
        """The kept originals, with their sizes and ages."""
        ...

    def drop_original(self, name: str) -> None:
        """Remove a kept original."""
        ...

    # What happened: the compaction records, refused summaries, the summary for people.
    def append_record(self, data: bytes) -> None:
        """Append a line to the compaction records."""
        ...

    def read_records(self) -> bytes:
        """The compaction records (empty when none)."""
        ...

    def save_failure(self, name: str, data: bytes) -> None:
        """Keep what a summarizer was asked and answered when its summary was refused."""
        ...

    def read_summary(self) -> bytes | None:
        """The copy of the summary kept for people."""
        ...

    def write_summary(self, data: bytes) -> None:
        """Replace the copy of the summary kept for people."""
        ...


def live_name(generation: int) -> str:
    """The live log of a generation in a folder."""
    return f"{LIVE_DIR}/{generation:08d}.jsonl"


class FileStore:
    """A `Store` over the nine file operations of a `Folder`: what `LocalFolder` and `MemoryFolder` are built on."""

    def where(self: Folder, name: str) -> str:
        return self.location(name)

    def read_state(self: Folder) -> bytes | None:
        return self.read(STATE)

    def commit_state(self: Folder, data: bytes) -> None:
        self.write(STATE, data)

    def live_generations(self: Folder) -> list[int]:
        gens = []
        for info in self.list(f"{LIVE_DIR}/"):
            stem = info.name[len(LIVE_DIR) + 1 :].removesuffix(".jsonl")
            if stem.isdigit():
                gens.append(int(stem))
        return sorted(gens)

    def read_live(self: Folder, generation: int) -> bytes:
        return self.read(live_name(generation)) or b""

    def start_live(self: Folder, generation: int, data: bytes) -> None:
        self.write(live_name(generation), data)

    def append_live(self: Folder, generation: int, data: bytes) -> None:
        self.append(live_name(generation), data)

    def cut_live(self: Folder, generation: int, size: int) -> None:
        self.truncate(live_name(generation), size)

    def drop_live(self: Folder, generation: int) -> None:
        self.remove(live_name(generation))

    def archive_files(self: Folder) -> list[FileInfo]:
        return self.list(f"{DIALOG_DIR}/")

    def append_archive(self: Folder, name: str, data: bytes) -> int:
        return self.append(name, data)

    def cut_archive(self: Folder, name: str, size: int) -> None:
        if size == 0:
            self.remove(name)
        else:
            self.truncate(name, size)

    def save_original(self: Folder, name: str, data: bytes) -> None:
        self.write(name, data)

    def originals(self: Folder) -> list[FileInfo]:
        return self.list(f"{TOOL_RESULT_DIR}/")

    def drop_original(self: Folder, name: str) -> None:
        self.remove(name)

    def append_record(self: Folder, data: bytes) -> None:
        self.append(RECORDS, data)

    def read_records(self: Folder) -> bytes:
        return self.read(RECORDS) or b""

    def save_failure(self: Folder, name: str, data: bytes) -> None:
        self.write(f"{FAILED_DIR}/{name}", data)

    def read_summary(self: Folder) -> bytes | None:
        return self.read(SUMMARY)

    def write_summary(self: Folder, data: bytes) -> None:
        self.write(SUMMARY, data)


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


class LocalFolder(FileStore):
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


class MemoryFolder(FileStore):
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
