"""A one-line progress bar on standard error, for the commands that read a long transcript."""

from __future__ import annotations

import time

TYPE_CHECKING = False  # not `typing`'s: the command line imports no `typing` before it must
if TYPE_CHECKING:
    from typing import TextIO

__all__ = ["PROGRESS_MIN_BYTES", "Progress"]

# Below this many bytes a progress bar would only flicker.
PROGRESS_MIN_BYTES = 2_000_000


class Progress:
    """A one-line progress bar on stderr (`inspect` and `compact`)."""

    def __init__(self, stream: TextIO, verb: str, unit: str) -> None:
        self.stream = stream
        self.verb = verb
        self.unit = unit
        self.started = time.monotonic()
        self.shown = 0.0

    def stage(self, name: str) -> None:
        """Name what is being done before there is anything to count."""
        self.stream.write(f"\r{name}...")
        self.stream.flush()

    def update(self, done: int, total: int) -> None:
        """Redraw the bar at `done` of `total`."""
        now = time.monotonic()
        if done < total and now - self.shown < 0.1:  # redraw at most ten times a second
            return
        self.shown = now
        width = 30
        filled = width * done // total if total else width
        self.stream.write(f"\r{self.verb} [{'#' * filled}{'.' * (width - filled)}] {done:,}/{total:,} {self.unit}")
        self.stream.flush()

    def close(self) -> None:
        """End the line with the time it all took."""
        self.stream.write(f"\rdone in {time.monotonic() - self.started:.2f} s" + " " * 40 + "\n")
        self.stream.flush()
