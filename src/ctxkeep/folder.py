"""A folder of files, the default home of a workspace: `LocalFolder`, and `MemoryFolder` for tests.

Both implement the `Store` seam through `FileStore` (`ctxkeep.store`). `LocalFolder` makes its writes
durable as its `DurabilitySettings` say (``"step"``, the default: before each returns). `write` replaces a
file atomically (temporary file, fsync, rename, fsync of the directory) and `append` fdatasyncs, or cuts a
refused append back to where it started. A compaction is one durable commit: the offloaded originals saved
since the last one and the archive appended to are written without a sync, and `start_live` makes them
durable together with the next generation's live log (one fdatasync per file, one fsync per folder, all
at once on a few threads, so they share the disk's journal commits), before the state commit; until then
the live log still holds the originals' full texts and the state does not name the archive's new bytes.
The copy of the summary for people (summary.md) is replaced without a sync: the next open rewrites it
when a power loss lost it. While its lock is held it keeps the live log
it last appended to open, so a step's append is one write and one fdatasync (``"batch"``: a thread's
fdatasync for the steps of a window; ``"off"``: none), closed when the file is replaced, cut or removed,
and when the lock is released. Its files are private (0600, folders 0700) and nothing inside it is reached
through a symbolic link. An `OSError` becomes a `StorageError` that names the file and says what to do
(disk full, read-only, no permission, a link). The opens below the root, the writes in place and the
atomic replacements are `ConfinedFolder`'s (`ctxkeep.confined`); this module says when they are synced.
`MemoryFolder` keeps files in a dict.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import logging
import os
import re
import stat
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path

from . import disk, fileops
from .confined import TEMPORARY, ConfinedFolder
from .errors import StorageError, WorkspaceLockedError
from .groupcommit import GroupCommit
from .settings import DurabilitySettings
from .store import FAILED_DIR, LIVE_DIR, ORIGINAL_NAME, SUMMARY, TOOL_RESULT_DIR, FileInfo, FileStore, live_name
from .swap import recover

log = logging.getLogger("ctxkeep")


# What `write` replaces in each folder of a workspace: only a temporary that would have become one
# of these is ctxkeep's to remove.
_REPLACED = {
    "": re.compile(r"state\.json|summary\.md"),
    LIVE_DIR: re.compile(r"[0-9]{8,}\.jsonl"),
    FAILED_DIR: re.compile(r"[^/]+\.json"),
    TOOL_RESULT_DIR: ORIGINAL_NAME,
}


class LocalFolder(FileStore):
    """A folder on the local file system, private to its user (folders 0700, files 0600). Writes are durable.

    Nothing inside is reached through a symbolic link: a link where a file or folder of the workspace
    belongs is refused with a `StorageError` naming it. The folder itself may be reached through a link;
    it is resolved once, here. `durability` (a mode's name or `DurabilitySettings`) says what a power loss
    may take: see `DurabilitySettings`.
    """

    def __init__(self, root: str | os.PathLike[str], *, durability: DurabilitySettings | str = "step") -> None:
        self._tree = ConfinedFolder(Path(root))  # every open below the root: no link followed
        self.root = self._tree.root
        self._root_text = str(self.root)
        self._lock_path = os.path.join(self._root_text, ".lock")  # looked at before every write: a string, once
        self.durability = DurabilitySettings.of(durability)
        self._syncs = self.durability.mode != "off"
        # Written but not yet synced, made durable together by the next `start_live` (the compaction's
        # commit): offloaded originals and archive appends, and the folders whose entries they changed.
        self._unsynced: set[str] = set()
        self._unsynced_folders: set[str] = set()
        # "batch": the thread that syncs the live log's appends (started with the first, stopped with the lock).
        self._group: GroupCommit | None = None
        # While the lock is held, the live log appended to last stays open (name, fd, size): a step's
        # append is one write and one fdatasync, without opening the folders and the file again.
        self._held = False
        self._lock_fd: int | None = None  # the lock file's descriptor, while held: see `_in_place`
        self._log: tuple[str, int, int] | None = None

    def __repr__(self) -> str:
        return f"LocalFolder({str(self.root)!r})"

    def read(self, name: str) -> bytes | None:
        *folders, base = self._tree.parts(name)
        path = self.root / name
        with self._tree.folder(folders, create=False) as d:
            fd = None if d is None else self._tree.open_file(d, base, path, os.O_RDONLY, "read")
        if fd is None:
            return None
        try:
            with os.fdopen(fd, "rb") as f:
                return f.read()
        except OSError as exc:
            raise fileops.storage_error(exc, "read", path) from exc

    def write(self, name: str, data: bytes) -> None:
        self._replace(name, data, durable=True)

    def save_original(self, name: str, data: bytes) -> None:
        """Keep an offloaded result's full text; durable with the next `start_live`, the compaction's commit.

        Until a compaction starts the next live log, the log still holds the full text (the result as
        added), and a session reopening after a power loss (or a kill mid-write) rewrites an original it
        finds cut short; so a step pays no fsync for it. A new original is written in place, without a
        temporary file and a rename: no reader knows its name before the step that saves it returns.
        """
        if not self._write_new(name, data):
            self._replace(name, data, durable=False)  # one there already: readers may have it open
        self._unsynced.add(name)
        self._unsynced_folders.add(TOOL_RESULT_DIR)

    def append_archive(self, name: str, data: bytes) -> int:
        """Append compacted messages to an archive file; durable with the next `start_live`, the compaction's
        commit (until the state names them, recovery cuts them off)."""
        return self._append(name, data, durable=False)

    def write_summary(self, data: bytes) -> None:
        """Replace summary.md atomically, without a sync: a copy for people, which the next open rewrites
        when it differs from the committed summary (a power loss took it)."""
        self._replace(SUMMARY, data, durable=False)

    def stream_original(self, name: str, parts: Iterable[bytes]) -> None:
        """`save_original` of the bytes `parts` make, written as they come: a big output is never held encoded
        whole (`ctxkeep.offload` calls it where a store has it)."""
        if not self._write_new(name, parts):
            self._replace(name, parts, durable=False)  # one there already: readers may have it open
        self._unsynced.add(name)
        self._unsynced_folders.add(TOOL_RESULT_DIR)

    def start_live(self, generation: int, data: bytes) -> None:
        """Write a generation's live log whole, durable with everything written since the last commit.

        The next generation's log (no file yet) is written in place: no reader opens it before the state
        names its generation, and recovery removes one a crash left half-written. An existing log (the
        committed generation's, rewritten) is replaced atomically.
        """
        name = live_name(generation)
        if self._write_new(name, data):
            self._unsynced.add(name)
            self._unsynced_folders.add(LIVE_DIR)
            self.sync_pending()
        else:
            self.sync_pending()  # its replaced lines held the full texts of originals saved since
            self.write(name, data)

    def sync_pending(self) -> None:
        """Make the files written without a sync since the last call durable: each file's data and each changed
        folder once, all at once (`fileops.sync_together`), and returns when every one is."""
        names, changed = sorted(self._unsynced), set(self._unsynced_folders)
        if not self._syncs:
            names, changed = [], set()
        by_folder: dict[str, list[str]] = {}
        for name in names:
            folder, _, base = name.rpartition("/")
            by_folder.setdefault(folder, []).append(base)
        with contextlib.ExitStack() as held:  # the folders stay open until their files' syncs are done
            syncs = []
            for folder in sorted(changed | set(by_folder)):
                d = held.enter_context(self._tree.folder(folder.split("/") if folder else [], create=False))
                if d is None:
                    continue
                where = self.root / folder
                syncs += [self._file_sync(d, base, where / base) for base in by_folder.get(folder, [])]
                if folder in changed:  # a name made or replaced in it
                    syncs.append(functools.partial(self._folder_sync, d, where))
            fileops.sync_together(syncs)
        self._unsynced.clear()
        self._unsynced_folders.clear()

    def _file_sync(self, folder: int, base: str, path: Path) -> Callable[[], None]:
        """The sync of a file written without one: opened, fdatasynced and closed by the thread that runs it, so
        a commit of thousands of originals holds a few descriptors at a time."""

        def sync() -> None:
            fd = self._tree.open_file(folder, base, path, os.O_RDONLY, "sync")
            if fd is None:
                return  # removed since (retention, a cut archive): nothing to make durable
            try:
                fileops.datasync(fd)
            except OSError as exc:
                raise fileops.storage_error(exc, "sync", path) from exc
            finally:
                os.close(fd)

        return sync

    @staticmethod
    def _folder_sync(folder: int, path: Path) -> None:
        try:
            os.fsync(folder)
        except OSError as exc:
            raise fileops.storage_error(exc, "sync", path) from exc

    def append(self, name: str, data: bytes) -> int:
        return self._append(name, data, durable=True)

    def _append(self, name: str, data: bytes, *, durable: bool) -> int:
        """`append`; without `durable` the file (and its folder, when it is made) waits for `sync_pending`."""
        *folders, base = self._tree.parts(name)
        self._in_place()
        if self._held and folders == [LIVE_DIR]:
            return self._append_log(name, data)
        path = self.root / name
        self._close_log(name)
        with self._tree.folder(folders, create=True) as d:
            assert d is not None
            fd, made = self._tree.create_file(d, base, path, os.O_WRONLY | os.O_APPEND, "append to")
            try:
                start = os.fstat(fd).st_size
                try:
                    fileops.write_all(fd, data)
                    if not durable:
                        self._unsynced.add(name)
                        if made:
                            self._unsynced_folders.add("/".join(folders))
                    elif self._syncs:
                        fileops.datasync(fd)  # the size is flushed too: what reading the data back needs
                        if made:
                            os.fsync(d)
                    return os.fstat(fd).st_size
                except OSError as exc:
                    # A full disk may have taken part of the data: cut it back, so the file still ends
                    # with its last complete line and the next append does not follow a torn one.
                    fileops.cut_back(fd, start, path)
                    raise fileops.storage_error(exc, "append to", path) from exc
            except OSError as exc:
                raise fileops.storage_error(exc, "append to", path) from exc
            finally:
                os.close(fd)

    def _append_log(self, name: str, data: bytes) -> int:
        """`append` to a live log through the descriptor kept open while the lock is held (opened when needed)."""
        if self._log is None or self._log[0] != name:
            path = self.root / name
            self._close_log()
            *folders, base = self._tree.parts(name)
            with self._tree.folder(folders, create=True) as d:
                assert d is not None
                fd, made = self._tree.create_file(d, base, path, os.O_WRONLY | os.O_APPEND, "append to")
                try:
                    if made and self._syncs:
                        os.fsync(d)  # the new file's name is durable before anything is acknowledged in it
                    self._log = (name, fd, os.fstat(fd).st_size)
                except OSError as exc:
                    os.close(fd)
                    raise fileops.storage_error(exc, "append to", path) from exc
        _, fd, start = self._log
        try:
            if self._group is not None:
                self._group.check()  # a batch the thread could not sync: say so before acknowledging more
            fileops.write_all(fd, data)
            if self.durability.mode == "step":
                fileops.datasync(fd)  # the size is flushed too: what reading the data back needs
            elif self.durability.mode == "batch":
                if self._group is None:
                    self._group = GroupCommit(self.durability.window)
                self._group.written(fd)
        except OSError as exc:
            path = self.root / name  # (built only here: a step's append names no path)
            fileops.cut_back(fd, start, path)  # as in `append`: the file still ends with its last complete line
            self._close_log()  # reopened (and its size read again) by the next append
            raise fileops.storage_error(exc, "append to", path) from exc
        self._log = (name, fd, start + len(data))
        return start + len(data)

    def _write_new(self, name: str, data: bytes | Iterable[bytes]) -> bool:
        """Write a file that does not exist yet in place, without a sync; False when it exists."""
        self._in_place()
        return self._tree.write_new(name, data)

    def _replace(self, name: str, data: bytes | Iterable[bytes], *, durable: bool) -> None:
        self._in_place()
        self._close_log(name)  # the file it has open is about to be replaced
        self._tree.replace(name, data, sync=durable and self._syncs)

    def _in_place(self) -> None:
        """Refuse to write once the workspace held was moved or deleted: a write would go to the folder
        elsewhere, to deleted files, or to a new folder made at the path without the lock, where another
        process could get in. Its lock file still at its path, the same file, says the folder is."""
        if self._lock_fd is None or fileops.still_at(self._lock_fd, self._lock_path):
            return
        self._close_log()
        raise StorageError(
            f"the workspace {self.root} was moved or deleted while this session had it open; nothing more is"
            " written: open it again where it is now",
            path=str(self.root),
        )

    def _close_log(self, name: str | None = None) -> None:
        """Close the kept live log (only when it is `name`, if given): it is about to be replaced, cut or removed."""
        if self._log is not None and (name is None or self._log[0] == name):
            held, fd = self._log[:2]
            self._log = None
            try:
                if self._group is not None:
                    self._group.settle()  # what the steps appended is durable before the file goes
            except OSError as exc:
                raise fileops.storage_error(exc, "sync", self.root / held) from exc
            finally:
                os.close(fd)

    def size(self, name: str) -> int:
        *folders, base = self._tree.parts(name)
        path = self.root / name
        with self._tree.folder(folders, create=False) as d:
            if d is None:
                return 0
            try:
                st = os.stat(base, dir_fd=d, follow_symlinks=False)
            except FileNotFoundError:
                return 0
            except OSError as exc:
                raise fileops.storage_error(exc, "read the size of", path) from exc
        if stat.S_ISLNK(st.st_mode):
            raise fileops.refusal(OSError(errno.ELOOP, "is a symbolic link"), "read the size of", path)
        return st.st_size

    def truncate(self, name: str, size: int) -> None:
        if size == 0:
            self.remove(name)
            return
        self._close_log(name)
        *folders, base = self._tree.parts(name)
        path = self.root / name
        with self._tree.folder(folders, create=False) as d:
            fd = None if d is None else self._tree.open_file(d, base, path, os.O_WRONLY, "truncate")
            if fd is None:
                raise fileops.storage_error(OSError(errno.ENOENT, "No such file or directory"), "truncate", path)
            try:
                os.ftruncate(fd, size)
                if self._syncs:
                    os.fsync(fd)
            except OSError as exc:
                raise fileops.storage_error(exc, "truncate", path) from exc
            finally:
                os.close(fd)

    def remove(self, name: str) -> None:
        *folders, base = self._tree.parts(name)
        path = self.root / name
        self._close_log(name)
        with self._tree.folder(folders, create=False) as d:
            if d is None:
                return
            fileops.not_a_link(d, base, path, "remove")
            try:
                os.unlink(base, dir_fd=d)
            except FileNotFoundError:
                pass
            except OSError as exc:
                raise fileops.storage_error(exc, "remove", path) from exc

    def list(self, prefix: str) -> list[FileInfo]:
        folder, _, start = prefix.rpartition("/")
        base = self.root / folder if folder else self.root
        out: list[FileInfo] = []
        with self._tree.folder(self._tree.parts(folder) if folder else [], create=False) as d:
            if d is None:
                return []
            try:
                with os.scandir(d) as entries:
                    for entry in entries:
                        # Regular files only: a link is never followed, not even to read its size.
                        if (
                            entry.name.startswith(start)
                            and not entry.name.startswith(".")
                            and entry.is_file(follow_symlinks=False)
                        ):
                            st = entry.stat(follow_symlinks=False)
                            name = f"{folder}/{entry.name}" if folder else entry.name
                            out.append(FileInfo(name, st.st_size, st.st_mtime))
            except OSError as exc:
                raise fileops.storage_error(exc, "list", base) from exc
        return sorted(out, key=lambda f: f.name)

    def location(self, name: str) -> str:
        self._tree.parts(name)
        return os.path.join(self._root_text, name)  # what `self.root / name` spells, without building a Path

    @contextlib.contextmanager
    def lock(self, timeout: float) -> Iterator[None]:
        path = self.root / ".lock"
        deadline = time.monotonic() + timeout
        while True:
            if not self._recovered(deadline):
                continue
            with self._tree.folder([], create=True) as d:
                assert d is not None
                fd, _ = self._tree.create_file(d, ".lock", path, os.O_RDWR, "open the lock file")
            try:
                self._wait_for(fd, deadline)
            except BaseException:
                os.close(fd)
                raise
            if fileops.still_at(fd, path):
                break
            # The workspace was replaced while we waited (`compact --replace` swaps in a new folder): the
            # lock we got is the old folder's, so take the new one's.
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
        try:
            try:
                # Held now: no write of ours is in progress, so every temporary of ours is a killed one's.
                self._remove_temporaries()
                self._held, self._lock_fd = True, fd
                yield
            finally:
                self._held, self._lock_fd = False, None
                try:
                    try:
                        self._close_log()
                    finally:
                        group, self._group = self._group, None
                        if group is not None:
                            group.close()
                finally:
                    fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def _recovered(self, deadline: float) -> bool:
        """Whether no swap of this workspace (``compact --replace``) is pending: one a kill interrupted is
        finished or undone now, before the folder is created (between its two moves the workspace is not at
        its path); False after a short wait while one is under way."""
        try:
            done = recover(self.root)
        except WorkspaceLockedError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.02)
            return False
        if done is not None:
            log.warning("%s", done)
        return True

    def _wait_for(self, fd: int, deadline: float) -> None:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise WorkspaceLockedError(
                        f"the workspace {self.root} is in use by another process; wait for it to finish"
                        " or pass a longer lock timeout",
                        path=str(self.root),
                    ) from None
                time.sleep(0.05)

    def memory_lock(self) -> contextlib.AbstractContextManager[None]:
        return disk.memory_lock(self)  # across processes: the agent, a CLI and a scheduler all write memory

    def index_path(self) -> str | None:
        return disk.index_path(self)

    def _remove_temporaries(self) -> None:
        """Remove the temporary files a killed `write` left: only names ctxkeep gives them, only regular files."""
        self.remove_temporaries(_REPLACED)

    def remove_temporaries(self, replaced_in: Mapping[str, re.Pattern[str]]) -> None:
        """Remove the temporary files a killed `write` of a name `replaced_in` matches (by folder) left.

        Only while holding what keeps every writer of those names out (the workspace's lock, the memory lock):
        a temporary then is a killed process's, never one being written.
        """
        removed = 0
        for folder, replaced in replaced_in.items():
            where = self.root / folder
            try:
                with self._tree.folder(folder.split("/") if folder else [], create=False) as d:
                    if d is None:
                        continue
                    with os.scandir(d) as entries:
                        stale = [
                            e.name
                            for e in entries
                            if (m := TEMPORARY.fullmatch(e.name)) is not None
                            and replaced.fullmatch(m["name"]) is not None
                            and e.is_file(follow_symlinks=False)
                        ]
                    for name in stale:
                        os.unlink(name, dir_fd=d)
                        removed += 1
            except (OSError, StorageError) as exc:
                log.warning("cannot remove the temporary files a stopped process left in %s: %s", where, exc)
        if removed:
            log.info("removed %d temporary files a stopped process left in %s", removed, self.root)


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
