"""Reading a transcript file: bytes to text, text to JSON records, with every problem noted.

Only a regular file (or a stream, such as standard input) is read, and at most `MAX_BYTES` of it:
a named pipe, a device or a folder is refused rather than waited on or read without end. Invalid
UTF-8 is decoded with U+FFFD replacements and reported, never a crash. A line that is not JSON
raises `FormatError` naming file and line, or, when `lenient`, is skipped and reported.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from ctxkeep.errors import FormatError
from ctxkeep.messages import Message

_UNSET: Any = object()

# What reading an odd record can raise; importers turn these into `Source.skip` (FormatError).
RECORD_ERRORS = (KeyError, TypeError, ValueError, AttributeError, IndexError)

# The most a transcript may hold, in bytes: generous (the largest real sessions are a few hundred MB),
# yet a stream without end (/dev/zero behind standard input) stops with an error, not a MemoryError.
MAX_BYTES = 2 * 1024**3
_CHUNK = 1 << 20
_TRANSCRIPT_INSTEAD = "give a transcript file, or send it to standard input and give - as the file"


def read_file(path: str | Path, *, max_bytes: int = MAX_BYTES, instead: str = "give a regular file") -> bytes:
    """The bytes of the regular file `path`, at most `max_bytes` of them; else `FormatError` saying why.

    A named pipe, a device, a socket or a folder is refused before it is opened, so nothing waits
    for a writer that never comes (`instead` says what to do; read standard input with `read_stream`).
    """
    where = str(path)
    try:
        _regular(os.stat(path).st_mode, where, instead)
        # O_NONBLOCK: should the path become a named pipe after the check, opening it does not wait.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
        with open(fd, "rb") as f:
            info = os.fstat(fd)
            _regular(info.st_mode, where, instead)
            if info.st_size > max_bytes:
                raise _too_big(where, max_bytes)
            data = f.read()
    except OSError as exc:
        raise FormatError(f"cannot read file: {exc.strerror or exc}", path=where) from exc
    except MemoryError:
        raise FormatError("not enough memory to read the file", path=where) from None
    if len(data) > max_bytes:  # it grew while being read
        raise _too_big(where, max_bytes)
    return data


def read_stream(stream: BinaryIO, *, path: str = "<stdin>", max_bytes: int = MAX_BYTES) -> bytes:
    """The bytes of `stream` to its end, at most `max_bytes` of them; else `FormatError` naming `path`."""
    buf = bytearray()
    try:
        while chunk := stream.read(min(_CHUNK, max_bytes + 1 - len(buf))):
            buf += chunk
            if len(buf) > max_bytes:
                raise _too_big(path, max_bytes)
    except OSError as exc:
        raise FormatError(f"cannot read: {exc.strerror or exc}", path=path) from exc
    except MemoryError:
        raise FormatError("not enough memory to read the input", path=path) from None
    return bytes(buf)


_KINDS = {
    stat.S_IFIFO: "a named pipe",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
    stat.S_IFDIR: "a folder",
}


def _regular(mode: int, where: str, instead: str) -> None:
    if not stat.S_ISREG(mode):
        kind = _KINDS.get(stat.S_IFMT(mode), "anything but a regular file")
        raise FormatError(f"cannot read {kind}; {instead}", path=where)


def _too_big(where: str, max_bytes: int) -> FormatError:
    return FormatError(
        f"more than {max_bytes:,} bytes, the most ctxkeep reads; raise the limit with --max-bytes"
        " (or load(..., max_bytes=)) if the file really is a transcript",
        path=where,
    )


def few(ids: Sequence[str], shown: int = 3) -> str:
    """The first few ids, for a note: ``a, b, c ...``."""
    return ", ".join(ids[:shown]) + (" ..." if len(ids) > shown else "")


def describe(exc: BaseException) -> str:
    """A short reason for a record that could not be read: ``missing field 'x'`` or the error's text."""
    return f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)


@dataclass(frozen=True, kw_only=True, slots=True)
class Conversation:
    """One conversation of a transcript file (a file may hold several: tau-bench, OpenHands)."""

    id: str
    messages: tuple[Message, ...]
    title: str = ""  # e.g. "subagent a485154", "sidechain", "task 17"


@dataclass(kw_only=True)
class Source:
    """A transcript's text and what went wrong reading it.

    `notes` collects human-readable reports (replaced bytes, skipped lines) as an importer
    runs; they end up in `Transcript.notes`. `left_out` counts the records that became no message,
    by kind (``event_msg token_count``, ``unreadable``): what `ctxkeep inspect` lists as left out,
    so nothing an importer drops goes unseen.
    """

    path: str
    text: str
    lenient: bool = False
    notes: list[str] = field(default_factory=list)
    left_out: dict[str, int] = field(default_factory=dict)
    _whole: Any = field(default=_UNSET, init=False, repr=False)
    _sample: Any = field(default=_UNSET, init=False, repr=False)
    _surrogates: set[int] = field(default_factory=set, init=False, repr=False)  # lines noted
    _surrogate_note: str | None = field(default=None, init=False, repr=False)

    @classmethod
    def from_path(cls, path: str | Path, *, lenient: bool = False, max_bytes: int = MAX_BYTES) -> Source:
        """Read the regular file `path` (see `read_file`), decoding invalid UTF-8 with replacement characters."""
        raw = read_file(path, max_bytes=max_bytes, instead=_TRANSCRIPT_INSTEAD)
        return cls.from_bytes(raw, path=str(path), lenient=lenient)

    @classmethod
    def from_stream(
        cls, stream: BinaryIO, *, path: str = "<stdin>", lenient: bool = False, max_bytes: int = MAX_BYTES
    ) -> Source:
        """Read `stream` to its end (see `read_stream`); `path` names it in errors and notes."""
        return cls.from_bytes(read_stream(stream, path=path, max_bytes=max_bytes), path=path, lenient=lenient)

    @classmethod
    def from_bytes(cls, raw: bytes, *, path: str = "<input>", lenient: bool = False) -> Source:
        """Decode `raw` as UTF-8 with replacement, noting each line that had invalid bytes."""
        notes: list[str] = []
        if raw.startswith(b"\xef\xbb\xbf"):
            raw = raw[3:]
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            text = raw.decode("utf-8", errors="replace")
            bad_lines = _lines_with_invalid_utf8(raw)
            shown = ", ".join(str(n) for n in bad_lines[:10]) + (" ..." if len(bad_lines) > 10 else "")
            notes.append(f"invalid UTF-8 on {len(bad_lines)} line(s) ({shown}); bytes replaced with U+FFFD")
        return cls(path=path, text=text, lenient=lenient, notes=notes)

    def error(self, message: str, line: int | None = None) -> FormatError:
        """A `FormatError` for this file."""
        return FormatError(message, path=self.path, line=line)

    def head(self, n_bytes: int = 65536) -> str:
        """The start of the text, for format detection."""
        return self.text[:n_bytes]

    def whole(self) -> Any:
        """The file parsed as one JSON value; None when it is not one (JSONL, or not JSON). Cached."""
        if self._whole is _UNSET:
            try:
                self._whole = self.loads(self.text)
            except orjson.JSONDecodeError:
                self._whole = None
        return self._whole

    def sample(self) -> Any:
        """The first JSON value of the file: its first JSONL line, else the whole document.

        None when neither parses. Cached; used by `sniff` functions.
        """
        if self._sample is _UNSET:
            stripped = self.text.lstrip()
            line = self.text.count("\n", 0, len(self.text) - len(stripped)) + 1
            try:
                self._sample = self.loads(stripped.split("\n", 1)[0], line)
            except orjson.JSONDecodeError:
                self._sample = self.whole()
        return self._sample

    def records(self) -> Iterator[tuple[int, Any]]:
        """(line number, parsed JSON) for each non-blank line of a JSONL file."""
        # split on "\n" only: JSON strings may hold U+2028 and other characters splitlines() cuts at
        for lineno, line in enumerate(self.text.split("\n"), start=1):
            if not line.strip():
                continue
            try:
                value = self.loads(line, lineno)
            except orjson.JSONDecodeError as exc:
                self.skip(lineno, f"not valid JSON ({_short(exc)})")
                continue
            yield lineno, value

    def loads(self, text: str, line: int = 1) -> Any:
        """`text` (which starts on `line`) parsed as JSON. Lone UTF-16 surrogate escapes, which Node's
        JSON.stringify writes and orjson refuses, are read as U+FFFD and noted, like invalid UTF-8."""
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            if "\\u" not in text:
                raise
            fixed, lines = _without_lone_surrogates(text)
            if not lines:
                raise
            try:
                value = orjson.loads(fixed)
            except orjson.JSONDecodeError:
                raise exc from None  # the first error: its position is in the text as read
        self._note_surrogates(line - 1 + n for n in lines)
        return value

    def _note_surrogates(self, lines: Iterable[int]) -> None:
        """One note for the whole file, kept up to date as lines are read."""
        self._surrogates.update(lines)
        numbers = sorted(self._surrogates)
        shown = ", ".join(str(n) for n in numbers[:10]) + (" ..." if len(numbers) > 10 else "")
        note = f"lone UTF-16 surrogate escapes on {len(numbers)} line(s) ({shown}); replaced with U+FFFD"
        if self._surrogate_note in self.notes:
            self.notes[self.notes.index(self._surrogate_note)] = note
        else:
            self.notes.append(note)
        self._surrogate_note = note

    def document(self) -> Any:
        """The whole file parsed as one JSON document."""
        value = self.whole()
        if value is not None:
            return value
        try:  # again, for the position of the error
            return orjson.loads(self.text)
        except orjson.JSONDecodeError as exc:
            line = self.text.count("\n", 0, exc.pos) + 1 if exc.pos is not None else None
            raise self.error(f"not valid JSON ({_short(exc)})", line) from exc

    def skip(self, line: int | None, reason: str) -> None:
        """Raise for a bad line, or note and skip it when lenient."""
        if not self.lenient:
            raise self.error(reason + " (use --lenient to skip bad lines)", line)
        where = f"line {line}" if line is not None else "record"
        self.notes.append(f"skipped {where}: {reason}")
        self.leave_out("unreadable")

    def leave_out(self, kind: str, n: int = 1) -> None:
        """Count `n` records of `kind` that the importer read and made no message of."""
        if n > 0:
            self.left_out[kind] = self.left_out.get(kind, 0) + n


def parse_timestamp(value: Any) -> datetime | None:
    """A timezone-aware time from ISO 8601 text or epoch milliseconds; None when unreadable.

    Text that names no zone is read as UTC (what the agents that write it mean).
    """
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            return datetime.fromtimestamp(value / 1000, tz=UTC)
        except (OverflowError, OSError, ValueError):
            return None
    if not isinstance(value, str):
        return None
    try:
        stamp = datetime.fromisoformat(value)
    except ValueError:
        return None
    return stamp if stamp.tzinfo is not None else stamp.replace(tzinfo=UTC)


def _short(exc: Exception) -> str:
    msg = str(exc)
    return msg.split(": line ")[0] if ": line " in msg else msg


def _lines_with_invalid_utf8(raw: bytes) -> list[int]:
    bad: list[int] = []
    for lineno, line in enumerate(raw.split(b"\n"), start=1):
        try:
            line.decode("utf-8")
        except UnicodeDecodeError:
            bad.append(lineno)
    return bad


# A \uD800-\uDFFF escape not preceded by an odd number of backslashes: a high surrogate with its low
# one (a pair, kept), a high one alone, or a low one alone.
_SURROGATE_ESCAPE = re.compile(
    r"(?<!\\)((?:\\\\)*)\\u([dD][89abAB][0-9a-fA-F]{2})(\\u[dD][c-fC-F][0-9a-fA-F]{2})?"
    r"|(?<!\\)((?:\\\\)*)\\u[dD][c-fC-F][0-9a-fA-F]{2}"
)


def _without_lone_surrogates(text: str) -> tuple[str, list[int]]:
    """`text` (JSON) with each lone surrogate escape replaced by ``\\ufffd``, and the lines (1-based) where."""
    lines: list[int] = []
    line, at = 1, 0

    def fix(m: re.Match[str]) -> str:
        nonlocal line, at
        if m[3] is not None:  # a pair: one character
            return m[0]
        line += text.count("\n", at, m.start())
        at = m.start()
        if not lines or lines[-1] != line:
            lines.append(line)
        return (m[1] if m[1] is not None else m[4]) + "\\ufffd"

    return _SURROGATE_ESCAPE.sub(fix, text), lines
