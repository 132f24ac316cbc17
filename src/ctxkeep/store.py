"""The storage seam: what a workspace keeps, in its own terms, and where it keeps it in a folder.

The steps, the session and memory speak to a `Store` (the state, the live log of a generation, the
archive, the offloaded originals, the records, the memory files and where memory's search index may live),
so another backend (a database for fleets of agents) implements those and never pretends to be a file
system. `FileStore` implements them over the nine file operations of a `Folder` (`ctxkeep.folder`);
names are relative, with ``/`` separators (``tool_result/<uuid>.txt``).
"""

from __future__ import annotations

import contextlib
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable


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
# An offloaded original's name in TOOL_RESULT_DIR: the UUID `messages.make_id` gives (version 5,
# lowercase) and ".txt". Retention cleanup removes only these: other files there are not ctxkeep's.
ORIGINAL_NAME = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}\.txt")
# Where a message notes that its full text is an original in TOOL_RESULT_DIR (`ctxkeep.offload.OffloadRecord`):
# a tool result's `extra`, or the `extra` of a user message that is a command's output.
OFFLOAD_KEY = "ctxkeep_offload"


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

    def read_archive(self, name: str) -> bytes:
        """An archive file's bytes (empty when it has none)."""
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

    # Memory: ``MEMORY.md``, the day logs ``memory/YYYY-MM-DD.md`` and memory's own state under ``memory/``,
    # and the workspace's ``AGENTS.md``, each by its workspace-relative name.
    def read_memory(self, name: str) -> bytes | None:
        """A memory file's bytes, or None when it does not exist."""
        ...

    def write_memory(self, name: str, data: bytes) -> None:
        """Replace a memory file atomically."""
        ...

    def append_memory(self, name: str, data: bytes) -> int:
        """Append to a memory file durably; its new size."""
        ...

    def memory_files(self) -> list[FileInfo]:
        """``MEMORY.md`` and the files under ``memory/``, sorted by name."""
        ...

    def memory_lock(self) -> contextlib.AbstractContextManager[None]:
        """Hold the memory files against every other writer (the agent, a CLI, a scheduler) until the block ends.

        Separate from `lock`: a session holds that one for its whole life, while others write memory."""
        ...

    def index_path(self) -> str | None:
        """Where memory's SQLite search index lives on this machine, or None when the store keeps no local
        files: the index is then built in memory from the files at each search (full text and vectors alike)."""
        ...


@runtime_checkable
class IndexDatabase(Protocol):
    """A store whose database keeps memory's search index itself (PostgreSQL), shared by every process that opens
    the workspace, instead of a SQLite file on one machine (`Store.index_path`)."""

    @property
    def workspace_id(self) -> int:
        """The workspace's key in the database's tables."""
        ...

    def connection(self, doing: str) -> contextlib.AbstractContextManager[Any]:
        """A database connection for the block; errors become a `StorageError` that says what `doing` failed."""
        ...


MEMORY_FILE = "MEMORY.md"
MEMORY_DIR = "memory"
AGENTS_FILE = "AGENTS.md"
# The memory files a store without processes of its own holds with a thread lock, by store.
_memory_locks: dict[int, threading.Lock] = {}
_memory_guard = threading.Lock()


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

    def read_archive(self: Folder, name: str) -> bytes:
        return self.read(name) or b""

    def append_archive(self: Folder, name: str, data: bytes) -> int:
        return self.append(name, data)

    def cut_archive(self: Folder, name: str, size: int) -> None:
        if size == 0:
            self.remove(name)
        else:
            self.truncate(name, size)

    def save_original(self: Folder, name: str, data: bytes) -> None:
        self.write(name, data)

    def read_original(self: Folder, name: str) -> bytes | None:
        """A kept original's full text, or None when it is not kept (removed by retention, never saved).

        Optional for a `Store` (the engine asks for it with getattr, so stores written before it keep
        working): without it a summary judges an offloaded output by the head it keeps.
        """
        # only a name ctxkeep gives (a record in an imported message may say anything)
        folder, _, base = name.partition("/")
        return self.read(name) if folder == TOOL_RESULT_DIR and ORIGINAL_NAME.fullmatch(base) else None

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

    def read_memory(self: Folder, name: str) -> bytes | None:
        return self.read(name)

    def write_memory(self: Folder, name: str, data: bytes) -> None:
        self.write(name, data)

    def append_memory(self: Folder, name: str, data: bytes) -> int:
        return self.append(name, data)

    def memory_files(self: Folder) -> list[FileInfo]:
        return [*self.list(MEMORY_FILE), *self.list(f"{MEMORY_DIR}/")]

    def memory_lock(self) -> contextlib.AbstractContextManager[None]:
        # A store with no file system of its own (MemoryFolder) lives in one process: a thread lock is enough.
        # `LocalFolder` overrides this with a lock across processes.
        with _memory_guard:
            lock = _memory_locks.setdefault(id(self), threading.Lock())
        return _held(lock)

    def index_path(self) -> str | None:
        return None


@contextlib.contextmanager
def _held(lock: threading.Lock) -> Iterator[None]:
    with lock:
        yield
