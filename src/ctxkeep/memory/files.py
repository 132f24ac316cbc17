"""The memory files of a workspace: ``MEMORY.md`` (the long-term trunk) and ``memory/YYYY-MM-DD.md`` (a day's log).

Every write goes through the memory part of the workspace's `Store` (``LocalFolder``: private modes, no link
followed, atomic replace, durable append) and holds its memory lock (``LocalFolder``: a ``flock`` on
``memory/.lock``), separate from the session's lock (a session holds that one for its whole life, while the
agent, a CLI and a scheduler all write memory). Under it an append never interleaves with another process's,
and a section edit of ``MEMORY.md`` (read, change, replace) never loses a line another writer added.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from datetime import date, datetime

from ctxkeep.store import DIALOG_DIR, MEMORY_DIR, MEMORY_FILE, ORIGINAL_NAME, TOOL_RESULT_DIR, Store
from ctxkeep.workspace.recall import read_original

DAILY_NAME = re.compile(r"memory/(?P<day>[0-9]{4}-[0-9]{2}-[0-9]{2})\.md")
# What an agent may read with the memory tools: the trunk, the logs, the archived dialog and the saved originals
# of what was cut from it (only the names ctxkeep gives them: anything else in tool_result/ is not ctxkeep's).
READABLE = re.compile(
    r"MEMORY\.md|memory/[0-9]{4}-[0-9]{2}-[0-9]{2}\.md|dialog/[0-9]{4}-[0-9]{2}-[0-9]{2}\.jsonl"
    rf"|{TOOL_RESULT_DIR}/{ORIGINAL_NAME.pattern}"
)
MEMORY_HEADING = "# MEMORY"
MAX_ENTRY_BYTES = 16_384  # one entry written by `append_daily` or `append_to_section` (the memory tools, the CLI)
# An entry is one Markdown list item; its further lines are indented by two spaces.
_ITEM = re.compile(r"^[-*] ")
_SECTION = re.compile(r"^## +(?P<title>.+?)\s*$")


@dataclass(frozen=True, slots=True)
class Entry:
    """One entry of a memory file: its text (without the list marker) and the line where it starts (1-based)."""

    text: str
    line: int
    section: str | None = None


def daily_name(day: date) -> str:
    """The day's log: ``memory/YYYY-MM-DD.md``."""
    return f"{MEMORY_DIR}/{day.isoformat()}.md"


def daily_logs(store: Store) -> list[tuple[date, str]]:
    """The day logs of the workspace, oldest first."""
    out = []
    for info in store.memory_files():
        m = DAILY_NAME.fullmatch(info.name)
        if m is not None:
            with contextlib.suppress(ValueError):
                out.append((date.fromisoformat(m["day"]), info.name))
    return sorted(out)


def memory_lock(store: Store) -> contextlib.AbstractContextManager[None]:
    """Hold the memory files against every other writer, in this process or another, until the block ends."""
    return store.memory_lock()


def format_entry(text: str, *, at: datetime | None = None, tag: str | None = None) -> str:
    """`text` as one list item (further lines indented), with the time and a tag such as ``preference``."""
    lines = [line.rstrip() for line in text.strip().splitlines() if line.strip()]
    if not lines:
        raise ValueError("a memory entry needs some text; got only whitespace")
    head = lines[0]
    if tag:
        head = f"[{tag}] {head}"
    if at is not None:
        head = f"{at.strftime('%H:%M')} {head}"
    return "\n".join([f"- {head}", *(f"  {line}" for line in lines[1:])]) + "\n"


def _check_size(text: str) -> None:
    # A note, not a store of outputs: one 20 MB entry made every later search hold it (925 MB).
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_ENTRY_BYTES:
        raise ValueError(
            f"a memory entry holds at most {MAX_ENTRY_BYTES:,} bytes; got {size:,}: write the facts to keep,"
            " not the whole text (or save it as a file and note its path)"
        )


def append_daily(store: Store, text: str, *, at: datetime, tag: str | None = None) -> str:
    """Append an entry to the day's log of `at` (created with its heading); the log's name.
    At most `MAX_ENTRY_BYTES`, else `ValueError`."""
    _check_size(text)
    return append_entries(store, [text], at=at, tag=tag)


def append_entries(store: Store, texts: list[str], *, at: datetime, tag: str | None = None) -> str:
    """Append entries to the day's log of `at` in one write, so no other writer's lines come between them."""
    name = daily_name(at.date())
    data = "".join(format_entry(t, at=at, tag=tag) for t in texts).encode()
    with store.memory_lock():
        existing = store.read_memory(name) or b""
        if not existing:
            data = f"# {at.date().isoformat()}\n\n".encode() + data
        elif not existing.endswith(b"\n"):
            data = b"\n" + data
        store.append_memory(name, data)
    return name


def append_to_section(store: Store, text: str, *, section: str) -> str:
    """Add an entry at the end of `section` of ``MEMORY.md`` (the section is made when missing); atomic.
    At most `MAX_ENTRY_BYTES`, else `ValueError`."""
    _check_size(text)
    title = section.strip()
    # Any line break, not only \n: \r, \u2028 and the like end a line for `splitlines`, which reads the file.
    if len(title.splitlines()) != 1:
        raise ValueError(f"a section title is one non-empty line; got {section!r}")
    entry = format_entry(text)
    with store.memory_lock():
        current = (store.read_memory(MEMORY_FILE) or b"").decode("utf-8", errors="replace")
        store.write_memory(MEMORY_FILE, insert_in_section(current, title, entry).encode())
    return MEMORY_FILE


def insert_in_section(document: str, title: str, entry: str) -> str:
    """`document` with `entry` added as the last item of its ``## title`` section (added at the end when missing)."""
    lines = document.splitlines(keepends=True) if document.strip() else [f"{MEMORY_HEADING}\n"]
    start = next((i for i, line in enumerate(lines) if _is_section(line, title)), None)
    if start is None:
        if lines and not lines[-1].endswith("\n"):
            lines[-1] += "\n"
        return "".join([*lines, "\n", f"## {title}\n", "\n", entry])
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    # After the section's last non-blank line, so the blank line before the next section stays.
    last = end
    while last > start + 1 and not lines[last - 1].strip():
        last -= 1
    before = lines[:last]
    if before and not before[-1].endswith("\n"):
        before[-1] += "\n"
    if last == start + 1:
        before.append("\n")
    return "".join([*before, entry, *lines[last:]])


def _is_section(line: str, title: str) -> bool:
    m = _SECTION.match(line)
    return m is not None and m["title"].casefold() == title.casefold()


def entries_of(text: str) -> list[Entry]:
    """The entries of a memory file: its list items, and each paragraph outside a list as one entry."""
    out: list[Entry] = []
    section: str | None = None
    current: list[str] = []
    start = 0

    def close() -> None:
        if current:
            out.append(Entry("\n".join(current).strip(), start, section))
            current.clear()

    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.rstrip()
        if line.startswith("#"):
            close()
            m = _SECTION.match(line)
            section = m["title"] if m is not None else section
        elif _ITEM.match(line):
            close()
            current.append(line[2:])
            start = number
        elif not line.strip():
            close()
        elif current:
            current.append(line.strip())
        else:
            current.append(line.strip())
            start = number
    close()
    return out


def read_lines(store: Store, name: str, *, start: int = 1, count: int = 200) -> tuple[str, int]:
    """Lines `start`.. (1-based, at most `count`) of a memory or archive file, numbered; and the file's line count.

    Only ``MEMORY.md``, ``memory/YYYY-MM-DD.md``, ``dialog/YYYY-MM-DD.jsonl`` and the saved originals
    ``tool_result/<uuid>.txt`` can be read (never through a link, never written): a tool given to
    a model must not open the rest of the workspace. Raises `ValueError` for any other name, `FileNotFoundError`
    when the file does not exist.
    """
    if READABLE.fullmatch(name) is None:
        raise ValueError(
            "only MEMORY.md, memory/YYYY-MM-DD.md, dialog/YYYY-MM-DD.jsonl and tool_result/<uuid>.txt can be read;"
            f" got {name!r}"
        )
    if start < 1 or count < 1:
        raise ValueError(f"start and count are 1 or more; got start={start}, count={count}")
    # each through its own part of the seam: the archive, the kept originals, the memory files
    if name.startswith(f"{DIALOG_DIR}/"):
        data = store.read_archive(name) or None
    elif name.startswith(f"{TOOL_RESULT_DIR}/"):
        data = read_original(store, name)
    else:
        data = store.read_memory(name)
    if data is None:
        raise FileNotFoundError(name)
    lines = data.decode("utf-8", errors="replace").splitlines()
    shown = lines[start - 1 : start - 1 + count]
    return "\n".join(f"{start + i}: {line}" for i, line in enumerate(shown)), len(lines)
