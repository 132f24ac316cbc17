"""`SyncClock`: counts os.fsync and os.fdatasync calls while active, and the wall time spent in them.
`Floor`: what no durable step can go below, its bytes appended to a file of their own and fdatasynced.

Standard library only: bench/reme_worker.py imports it in ReMe's own virtual environment too (ReMe is
Python, so its files go through the same calls).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


class SyncClock:
    """Counts os.fsync and os.fdatasync calls while active, and the time spent in them (summed over calls:
    syncs run at once on several threads add up to more than the wall time they took)."""

    def __init__(self) -> None:
        self.count = 0
        self.seconds = 0.0
        self._lock = threading.Lock()  # syncs may come from several threads at once
        self._saved = (os.fsync, getattr(os, "fdatasync", None))

    def __enter__(self) -> SyncClock:
        def timed(fn: Callable[[int], None]) -> Callable[[int], None]:
            def call(fd: int) -> None:
                t = time.perf_counter()
                try:
                    fn(fd)
                finally:
                    with self._lock:
                        self.count += 1
                        self.seconds += time.perf_counter() - t

            return call

        os.fsync = timed(self._saved[0])
        if self._saved[1] is not None:
            os.fdatasync = timed(self._saved[1])
        return self

    def __exit__(self, *exc: Any) -> None:
        os.fsync = self._saved[0]
        if self._saved[1] is not None:
            os.fdatasync = self._saved[1]


class Floor:
    """The floor of a durable step: its bytes appended to a file of their own, then one fdatasync.

    Measured right after each step, in the same folder, so step and floor see the same disk and load.
    """

    def __init__(self, path: Path) -> None:
        self._path = path
        self._fd = -1

    def __enter__(self) -> Floor:
        self._fd = os.open(self._path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        return self

    def __exit__(self, *exc: object) -> None:
        os.close(self._fd)
        self._path.unlink(missing_ok=True)

    def append(self, size: int) -> float:
        """Seconds to append `size` bytes and make them durable."""
        data = b"x" * size
        t = time.perf_counter()
        os.write(self._fd, data)
        (getattr(os, "fdatasync", None) or os.fsync)(self._fd)
        return time.perf_counter() - t


def live_size(workspace: Path) -> int:
    """The size of a ctxkeep workspace's newest live log (what a step appends to)."""
    logs = sorted((workspace / "live").glob("*.jsonl"))
    return logs[-1].stat().st_size if logs else 0
