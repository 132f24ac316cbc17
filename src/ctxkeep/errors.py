"""ctxkeep's exceptions.

CtxkeepError
├── FormatError          a transcript cannot be read (.path, .line)
│   └── UnknownFormatError   no importer recognises the file
└── TokenizerError       an encoding or tokenizer.json cannot be loaded
"""

from __future__ import annotations

__all__ = ["CtxkeepError", "FormatError", "TokenizerError", "UnknownFormatError"]


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
