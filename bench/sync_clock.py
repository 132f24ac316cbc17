"""`SyncClock`: counts os.fsync and os.fdatasync calls while active, and the wall time spent in them.

Standard library only: bench/reme_worker.py imports it in ReMe's own virtual environment too (ReMe is
Python, so its files go through the same calls).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any


class SyncClock:
    """Counts os.fsync and os.fdatasync calls while active, and the time spent in them."""

    def __init__(self) -> None:
        self.count = 0
        self.seconds = 0.0
        self._saved = (os.fsync, getattr(os, "fdatasync", None))

    def __enter__(self) -> SyncClock:
        def timed(fn: Callable[[int], None]) -> Callable[[int], None]:
            def call(fd: int) -> None:
                t = time.perf_counter()
                try:
                    fn(fd)
                finally:
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
