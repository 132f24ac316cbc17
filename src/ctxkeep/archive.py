"""The dialog archive: compacted messages, in order, one JSON message per line (seed name `mark_compressed`).

Messages compacted on a given day are appended to ``dialog/YYYY-MM-DD.jsonl`` and flushed to disk
before they leave the live context. `Archive` is the index of those files (bytes and lines each),
kept in the session state, so a crash after an append but before the commit can be undone by cutting
each file back to its recorded size (`restore`): every message ends up either live or archived,
exactly once.

`guide` writes the paragraph that opens every summary and tells the agent where to look;
`with_guide` puts it in front of a summary, and `projected` says what the index will be after an
append, so the guide's size is known before the summary is written.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date
from types import MappingProxyType
from typing import Any

import orjson

from .codec import dumps, message_from_dict
from .errors import CtxkeepError
from .messages import Message
from .store import DIALOG_DIR, Store


@dataclass(frozen=True, slots=True)
class ArchiveFile:
    """One archive file as committed: its size in bytes and its number of lines."""

    bytes: int
    lines: int


@dataclass(frozen=True, slots=True)
class Archive:
    """The committed archive files by name (``dialog/YYYY-MM-DD.jsonl``), oldest first."""

    files: Mapping[str, ArchiveFile] = field(default_factory=lambda: MappingProxyType({}))

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready form for the session state."""
        return {name: {"bytes": f.bytes, "lines": f.lines} for name, f in self.files.items()}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Archive:
        """The inverse of `to_dict`."""
        return cls(MappingProxyType({str(k): ArchiveFile(int(v["bytes"]), int(v["lines"])) for k, v in d.items()}))

    @property
    def lines(self) -> int:
        """How many messages are archived in all."""
        return sum(f.lines for f in self.files.values())


def archive_name(day: date) -> str:
    """The archive file for messages compacted on `day`."""
    return f"{DIALOG_DIR}/{day.isoformat()}.jsonl"


def append(store: Store, archive: Archive, messages: Sequence[Message], day: date) -> Archive:
    """Append `messages` to the day's file and return the archive index that includes them: durable once the
    compaction commits (a `LocalFolder` syncs it with the next generation's live log, before the state).

    The returned index is what the caller commits; until then, `restore` with the old index undoes
    the append. Raises `StorageError` (the old index still describes the files) when the disk refuses.
    """
    if not messages:
        return archive
    name = archive_name(day)
    known = archive.files.get(name, ArchiveFile(0, 0))
    sizes = {f.name: f.size for f in store.archive_files()}
    if sizes.get(name, 0) != known.bytes:
        # An earlier append was never committed: cut it off before adding ours after it.
        store.cut_archive(name, known.bytes)
    try:
        size = store.append_archive(name, b"".join(dumps(m) for m in messages))
    except CtxkeepError:
        if not known.bytes:  # a file this append made: nothing of it was committed, so it goes again
            with contextlib.suppress(CtxkeepError):
                store.cut_archive(name, 0)
        raise
    files = dict(archive.files)
    files[name] = ArchiveFile(size, known.lines + len(messages))
    return Archive(MappingProxyType(dict(sorted(files.items()))))


def restore(store: Store, archive: Archive) -> list[str]:
    """Cut every archive file back to its committed size, removing uncommitted files; the names changed."""
    changed: list[str] = []
    for info in store.archive_files():
        known = archive.files.get(info.name)
        if known is None:
            store.cut_archive(info.name, 0)
            changed.append(info.name)
        elif info.size > known.bytes:
            store.cut_archive(info.name, known.bytes)
            changed.append(info.name)
    return changed


def guide(archive: Archive, *, language: str = "en") -> str:
    """The paragraph that opens a summary: which archive files hold the earlier conversation, and how to read them."""
    if not archive.files:
        return ""
    if language == "zh":
        parts = "、".join(f"{name}（{f.lines} 行）" for name, f in archive.files.items())
        return f"完整的早期对话保存在 {parts}，每行一条 JSON 消息，按时间从旧到新；需要细节时从文件末尾往前读。"
    parts = ", ".join(f"{name} ({f.lines} lines)" for name, f in archive.files.items())
    return (
        f"The full earlier conversation is in {parts}: one JSON message per line, oldest first;"
        " read from the end backwards when you need a detail."
    )


def short_guide(archive: Archive, *, language: str = "en") -> str:
    """The guide at its shortest, for a context with room for nothing more: where the archive is, and its size."""
    if not archive.files:
        return ""
    if language == "zh":
        return f"早期对话在 {DIALOG_DIR}/*.jsonl（{archive.lines} 行，每行一条 JSON 消息）。"
    return f"Earlier conversation: {DIALOG_DIR}/*.jsonl ({archive.lines} lines, one JSON message each)."


def with_guide(summary: str, archive: Archive, language: str) -> str:
    """`summary` opened by the archive guide in `language` ("zh", else English)."""
    lead = guide(archive, language="zh" if language == "zh" else "en")
    return f"{lead}\n\n{summary}" if lead else summary


def projected(archive: Archive, added: int, day: date) -> Archive:
    """The index after `added` more lines on `day` (sizes left as they are: the guide shows lines only)."""
    files = dict(archive.files)
    name = archive_name(day)
    known = files.get(name, ArchiveFile(0, 0))
    files[name] = ArchiveFile(known.bytes, known.lines + added)
    return Archive(MappingProxyType(dict(sorted(files.items()))))


def lines_added(before: Archive, after: Archive, day: date) -> tuple[int, int]:
    """The first and last line (from 1) of the day's file that an append took `before` to `after`; (0, 0) if none."""
    name = archive_name(day)
    old = before.files.get(name, ArchiveFile(0, 0)).lines
    new = after.files.get(name, ArchiveFile(0, 0)).lines
    return (old + 1, new) if new > old else (0, 0)


def user_messages(store: Store) -> Iterator[Message]:
    """The user's archived messages (tool results left out), oldest first; a line that is no message is passed over.

    Read when a squeezed summary left some of the user's words out (`ctxkeep.summarize.verbatim.with_recalled`):
    only the lines of user messages are parsed, the rest is skipped by a look at their first bytes.
    """
    for info in store.archive_files():
        for line in store.read_archive(info.name).splitlines():
            if _USER not in line[:_ROLE_WITHIN]:
                continue
            try:
                msg = message_from_dict(orjson.loads(line))
            except (orjson.JSONDecodeError, TypeError, ValueError, KeyError):
                continue
            if msg.role == "user" and msg.tool_result is None:
                yield msg


_USER = b'"role":"user"'
_ROLE_WITHIN = 200  # `codec.message_to_dict` writes the role right after the version and the id
