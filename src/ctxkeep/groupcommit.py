"""Group commit: the appends to one open file made durable together by a thread, at most `window` seconds
after the first of them not yet synced. What `LocalFolder` does with its live log at ``durability="batch"``.

A step's append returns once its bytes are written (in the system's cache, which a killed process does not
lose); the thread fdatasyncs them with the appends of the next `window` seconds, so a power loss loses at
most that window. A sync that fails is kept and raised by the next `check` (the folder's next write), since
the steps it covered were already acknowledged.
"""

from __future__ import annotations

import threading
import time

from . import fileops


class GroupCommit:
    """One thread that fdatasyncs the file appended to, at most `window` seconds after each unsynced append."""

    def __init__(self, window: float) -> None:
        self._window = window
        self._cond = threading.Condition()
        self._fd: int | None = None  # the file appended to since the last sync
        self._since: float | None = None  # when its first unsynced append was written (monotonic)
        self._syncing = False  # the thread is in fdatasync: the descriptor must stay open until it is out
        self._error: OSError | None = None  # a sync of the thread's that failed, not yet reported
        self._stopped = False
        self._thread: threading.Thread | None = None

    def written(self, fd: int) -> None:
        """Note an append to `fd` that is not durable yet: the thread syncs it within the window."""
        with self._cond:
            if self._fd is not None and self._fd != fd and self._since is not None:
                self._settle_locked()  # another file's appends first: one file at a time
            self._fd = fd
            if self._since is None:
                self._since = time.monotonic()
                self._cond.notify_all()
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="ctxkeep-group-commit", daemon=True)
                self._thread.start()

    def check(self) -> None:
        """Raise the error of a sync the thread could not make (once); the steps it covered may be lost."""
        with self._cond:
            error, self._error = self._error, None
        if error is not None:
            raise error

    def settle(self) -> None:
        """Make every noted append durable now: before its file is closed, replaced, or the lock released.
        Raises the error of a sync the thread could not make, if `check` has not."""
        with self._cond:
            self._settle_locked()

    def close(self) -> None:
        """Settle, then stop the thread."""
        with self._cond:
            try:
                self._settle_locked()
            finally:
                self._stopped = True
                self._cond.notify_all()
                thread, self._thread = self._thread, None
        if thread is not None:
            thread.join()

    def _settle_locked(self) -> None:
        while self._syncing:
            self._cond.wait()
        fd, since, error = self._fd, self._since, self._error
        self._since, self._error = None, None
        if fd is not None and since is not None:
            fileops.datasync(fd)
        if error is not None:
            raise error  # a later sync that succeeds does not bring back what an earlier one lost

    def _run(self) -> None:
        with self._cond:
            while True:
                if self._stopped:
                    return
                if self._since is None:
                    self._cond.wait()
                    continue
                delay = self._since + self._window - time.monotonic()
                if delay > 0:
                    self._cond.wait(delay)
                    continue
                fd, self._since, self._syncing = self._fd, None, True
                assert fd is not None
                self._cond.release()  # appends go on while the disk syncs
                error: OSError | None = None
                try:
                    fileops.datasync(fd)
                except OSError as exc:
                    error = exc
                finally:
                    self._cond.acquire()
                    self._syncing = False
                    self._error = self._error or error
                    self._cond.notify_all()
