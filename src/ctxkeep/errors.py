"""ctxkeep's exceptions.

CtxkeepError
├── FormatError          a transcript cannot be read (.path, .line)
│   └── UnknownFormatError   no importer recognises the file
├── MessageError         a message cannot join the live context (.index): orphan result, repeated id
├── TokenizerError       an encoding or tokenizer.json cannot be loaded
├── WorkspaceError       a workspace cannot be used (.path)
│   ├── StorageError         a file cannot be read or written (.errno): disk full, read-only, ...
│   └── WorkspaceLockedError another process holds the workspace
├── PinnedOverBudgetError   pinned messages alone exceed the compaction budget
└── SummaryError         a summarizer returned no usable summary
"""

from __future__ import annotations

__all__ = [
    "CtxkeepError",
    "FormatError",
    "MessageError",
    "PinnedOverBudgetError",
    "StorageError",
    "SummaryError",
    "TokenizerError",
    "UnknownFormatError",
    "WorkspaceError",
    "WorkspaceLockedError",
]


class CtxkeepError(Exception):
    """Base class of every error ctxkeep raises on purpose."""


class FormatError(CtxkeepError):
    """A transcript file is malformed. `path` and `line` (1-based, or None) say where."""

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None) -> None:
        self.path = path
        self.line = line
        self.reason = message
        where = path or "<input>"
        if line is not None:
            where += f":{line}"
        super().__init__(f"{where}: {message}")


class UnknownFormatError(FormatError):
    """No importer recognises the file; pass the format explicitly."""


class TokenizerError(CtxkeepError):
    """An encoding or tokenizer file cannot be loaded."""


class WorkspaceError(CtxkeepError):
    """A workspace folder cannot be used. `path` names the folder or file."""

    def __init__(self, message: str, *, path: str | None = None) -> None:
        self.path = path
        super().__init__(message)


class StorageError(WorkspaceError):
    """A file cannot be read or written (disk full, read-only, permissions). `errno` is the OS code.

    Whatever step raised it left the live context as it was.
    """

    def __init__(self, message: str, *, path: str | None = None, errno: int | None = None) -> None:
        self.errno = errno
        super().__init__(message, path=path)


class WorkspaceLockedError(WorkspaceError):
    """Another process holds the workspace."""


class PinnedOverBudgetError(CtxkeepError):
    """Pinned messages alone do not fit in the compaction budget. `pinned` and `budget` are token counts."""

    def __init__(self, message: str, *, pinned: int, budget: int) -> None:
        self.pinned = pinned
        self.budget = budget
        super().__init__(message)


class SummaryError(CtxkeepError):
    """A summarizer returned no usable summary; the previous summary and the messages are unchanged."""


class MessageError(CtxkeepError):
    """A message cannot join the live context. `index` is its position in the batch given."""

    def __init__(self, message: str, *, index: int | None = None) -> None:
        self.index = index
        super().__init__(message)
