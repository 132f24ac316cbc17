"""Outside formats: one module per format, each with `sniff` and `parse`.

Every importer module defines

    NAME: str
    def sniff(source: Source) -> bool          # cheap look at the head of the file
    def parse(source: Source) -> list[Conversation]

and two-way formats (openai, anthropic, agentscope) also `to_<format>(messages)` and
`from_<format>(...)` functions for in-memory use. `load` reads a file, detects its format
(or takes the one given) and returns a `Transcript`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from ctxkeep.errors import FormatError, UnknownFormatError
from ctxkeep.formats.source import MAX_BYTES, Conversation, Source
from ctxkeep.messages import Message

__all__ = ["Conversation", "Source", "Transcript", "detect", "format_names", "load", "parse"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Transcript:
    """What `load` returns: the conversations of one file and notes on anything skipped.

    `left_out` counts the records that became no message, by kind (see `Source.left_out`).
    """

    path: str
    format: str
    conversations: tuple[Conversation, ...]
    notes: tuple[str, ...] = ()
    left_out: Mapping[str, int] = field(default_factory=dict)

    @property
    def messages(self) -> tuple[Message, ...]:
        """All messages of all conversations, in file order."""
        return tuple(m for c in self.conversations for m in c.messages)


# Every importer's NAME and module, in detection order: the most specific sniffers first. Detection
# imports the importers one at a time, stopping at the first that recognises the file, so a Claude
# Code session never pays for the OpenHands or Codex importers, nor `--format NAME` for any importer
# but NAME's.
_IMPORTERS: dict[str, str] = {
    "ctxkeep": "ctxkeep.formats.native",
    "claude_code": "ctxkeep.formats.claude_code",
    "codex": "ctxkeep.formats.codex",
    "pi": "ctxkeep.formats.pi",
    "openhands": "ctxkeep.formats.openhands",
    "swe_agent": "ctxkeep.formats.swe_agent",
    "tau_bench": "ctxkeep.formats.tau_bench",
    "agentscope": "ctxkeep.formats.agentscope",
    "anthropic": "ctxkeep.formats.anthropic",
    "openai": "ctxkeep.formats.openai",
}


def _importer(name: str) -> ModuleType:
    """The importer module of format `name` (a key of `_IMPORTERS`), imported on first use."""
    # `__import__` with a fromlist returns the module itself; unlike `importlib.import_module` it goes
    # through the import statement's path, which `python -X importtime` times (bench/bench_startup.py).
    module: ModuleType = __import__(_IMPORTERS[name], fromlist=["sniff"])
    return module


def format_names() -> list[str]:
    """The names `load(..., format=)` and `ctxkeep inspect --format` accept."""
    return list(_IMPORTERS)


def detect(source: Source) -> str:
    """The name of the format of `source`, or `UnknownFormatError`."""
    for name in _IMPORTERS:
        sniff: Callable[[Source], bool] = _importer(name).sniff
        if sniff(source):
            return name
    raise UnknownFormatError(
        f"unrecognised transcript format; pass one of {', '.join(format_names())} with --format",
        path=source.path,
    )


def parse(source: Source, format: str | None = None) -> Transcript:
    """Parse an already-read `source` (see `load`)."""
    if not source.text.strip():
        raise source.error("the file is empty")
    name = format or detect(source)
    if name not in _IMPORTERS:
        raise FormatError(f"unknown format {name!r}; choose one of {', '.join(_IMPORTERS)}", path=source.path)
    conversations = _importer(name).parse(source)
    if not any(c.messages for c in conversations):
        raise source.error(_nothing_read(source, name, forced=format is not None, found=len(conversations)))
    return Transcript(
        path=source.path,
        format=name,
        conversations=tuple(conversations),
        notes=tuple(source.notes),
        left_out=dict(sorted(source.left_out.items(), key=lambda kv: (-kv[1], kv[0]))),
    )


def _nothing_read(source: Source, name: str, *, forced: bool, found: int) -> str:
    """Why a file gave no message, and what to try: a file read as the wrong format reads as nothing."""
    what = "no conversation" if not found else "no messages"
    reason = f"{what} found in this file read as {name}"
    skipped = sum(note.startswith("skipped ") for note in source.notes)
    if skipped:
        reason += f" ({skipped} record(s) skipped as unreadable)"
    if not forced:
        return reason
    try:
        detected = detect(source)
    except FormatError:
        return reason + "; check --format"
    if detected == name:
        return reason
    return reason + f"; it looks like {detected}: pass --format {detected}, or leave --format out"


def load(
    path: str | Path, *, format: str | None = None, lenient: bool = False, max_bytes: int = MAX_BYTES
) -> Transcript:
    """Read a transcript file of any supported format.

    Raises `FormatError` (with `.path` and `.line`) for a malformed file, for one that holds no
    message, and for anything but a regular file or over `max_bytes`; with `lenient=True` bad
    lines are skipped and listed in `Transcript.notes` instead. Invalid UTF-8 never raises: it is
    replaced and noted.
    """
    return parse(Source.from_path(path, lenient=lenient, max_bytes=max_bytes), format)
