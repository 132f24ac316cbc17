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
├── ProviderError        a model provider call failed (.provider, .status_code, .retryable, .attempts)
└── SummaryError         a summarizer returned no usable summary (.request, .response)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


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


class ProviderError(CtxkeepError):
    """A call to a model provider failed; the message says what to do about it.

    `provider` names it ("openai", "anthropic"), `status_code` is the HTTP status (None for a
    timeout, a refused connection or a missing key), `retryable` says whether trying again may
    help, `retry_after` is the wait in seconds the server asked for (None if it did not), and
    `attempts` is how many calls were made. The API key never appears in any of them.
    """

    def __init__(
        self,
        message: str,
        *,
        provider: str,
        status_code: int | None = None,
        retryable: bool = False,
        retry_after: float | None = None,
        attempts: int = 1,
    ) -> None:
        self.reason = message
        self.provider = provider
        self.status_code = status_code
        self.retryable = retryable
        self.retry_after = retry_after
        self.attempts = attempts
        super().__init__(message if attempts == 1 else f"{message} (gave up after {attempts} attempts)")

    def __repr__(self) -> str:
        return f"ProviderError({self.reason!r}, provider={self.provider!r}, status_code={self.status_code!r})"

    def retried(self, attempts: int) -> ProviderError:
        """This error as the outcome of `attempts` calls."""
        return ProviderError(
            self.reason,
            provider=self.provider,
            status_code=self.status_code,
            retryable=self.retryable,
            retry_after=self.retry_after,
            attempts=attempts,
        )


class SummaryError(CtxkeepError):
    """A summarizer returned no usable summary; the previous summary and the messages are unchanged.

    `request` (what the model was asked, JSON-ready) and `response` (its raw reply, or the error
    text) are what the workspace saves for debugging; None when the summarizer did not give them.
    """

    def __init__(self, message: str, *, request: Mapping[str, Any] | None = None, response: str | None = None) -> None:
        self.request = request
        self.response = response
        super().__init__(message)


class MessageError(CtxkeepError):
    """A message cannot join the live context. `index` is its position in the batch given."""

    def __init__(self, message: str, *, index: int | None = None) -> None:
        self.index = index
        super().__init__(message)
