"""MEMORY.md and the day logs: entries, sections, reading, privacy, and two processes writing at once."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
from datetime import UTC, datetime
from pathlib import Path

import pytest

from ctxkeep.errors import StorageError
from ctxkeep.folder import LocalFolder, MemoryFolder
from ctxkeep.memory.files import (
    MEMORY_FILE,
    append_daily,
    append_to_section,
    daily_logs,
    entries_of,
    format_entry,
    insert_in_section,
    read_lines,
)

NOW = datetime(2026, 3, 14, 9, 26, tzinfo=UTC)


def test_a_daily_entry_gets_the_days_heading_once_and_its_time_and_tag() -> None:
    folder = MemoryFolder()
    append_daily(folder, "The user prefers tabs", at=NOW, tag="preference")
    append_daily(folder, "first line\nsecond line", at=NOW)
    text = folder.read("memory/2026-03-14.md")
    assert text == b"# 2026-03-14\n\n- 09:26 [preference] The user prefers tabs\n- 09:26 first line\n  second line\n"
    assert [e.text for e in entries_of(text.decode())] == [
        "09:26 [preference] The user prefers tabs",
        "09:26 first line\nsecond line",
    ]


def test_an_empty_entry_is_refused_and_nothing_is_written() -> None:
    folder = MemoryFolder()
    with pytest.raises(ValueError, match="needs some text"):
        append_daily(folder, "  \n ", at=NOW)
    assert folder.files == {}


def test_section_entries_go_to_the_end_of_their_section_and_new_sections_are_added() -> None:
    doc = "# MEMORY\n\n## Preferences\n\n- tabs\n\n## Lessons\n\n- old lesson\n"
    doc = insert_in_section(doc, "preferences", format_entry("dark mode"))
    doc = insert_in_section(doc, "Contacts", format_entry("Ana: ana@example.org"))
    assert doc == (
        "# MEMORY\n\n## Preferences\n\n- tabs\n- dark mode\n\n## Lessons\n\n- old lesson\n"
        "\n## Contacts\n\n- Ana: ana@example.org\n"
    )
    assert [(e.section, e.text) for e in entries_of(doc)] == [
        ("Preferences", "tabs"),
        ("Preferences", "dark mode"),
        ("Lessons", "old lesson"),
        ("Contacts", "Ana: ana@example.org"),
    ]


def test_read_lines_numbers_lines_and_refuses_files_outside_memory(tmp_path: object) -> None:
    folder = MemoryFolder()
    append_to_section(folder, "one", section="Notes")
    text, total = read_lines(folder, MEMORY_FILE, start=3, count=2)
    assert total == 5
    assert text == "3: ## Notes\n4: "
    for name in ("state.json", "../etc/passwd", "memory/flush.json", "tool_result/x.txt"):
        with pytest.raises(ValueError, match="can be read"):
            read_lines(folder, name)
    with pytest.raises(FileNotFoundError):
        read_lines(folder, "memory/2020-01-01.md")


def test_files_are_private_and_a_planted_link_is_refused(tmp_path: os.PathLike[str]) -> None:
    root = os.path.join(os.fspath(tmp_path), "ws")
    folder = LocalFolder(root)
    append_daily(folder, "x", at=NOW)
    assert stat.S_IMODE(os.stat(os.path.join(root, "memory")).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(os.path.join(root, "memory", "2026-03-14.md")).st_mode) == 0o600
    outside = os.path.join(os.fspath(tmp_path), "outside.md")  # beside the workspace, not in it
    with open(outside, "w") as f:
        f.write("not ctxkeep's\n")
    os.symlink(outside, os.path.join(root, MEMORY_FILE))
    with pytest.raises(StorageError, match="symbolic link"):
        append_to_section(folder, "y", section="Notes")
    with open(outside) as f:
        assert f.read() == "not ctxkeep's\n"
    assert daily_logs(folder)[0][1] == "memory/2026-03-14.md"


_WRITER = textwrap.dedent(
    """
    import sys
    from datetime import datetime, timezone
    from ctxkeep.folder import LocalFolder
    from ctxkeep.memory.files import append_daily, append_to_section
    root, who, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    folder = LocalFolder(root)
    at = datetime(2026, 3, 14, 12, 0, tzinfo=timezone.utc)
    for i in range(n):
        append_daily(folder, f"{who}-{i} " + "x" * 3000 + f"\\ncontinued {who}-{i}", at=at)
        append_to_section(folder, f"{who}-{i}", section=f"S{i % 3}")
    """
)


def test_two_processes_writing_at_once_never_interleave_nor_lose_an_entry(tmp_path: os.PathLike[str]) -> None:
    root = os.fspath(tmp_path)
    n = 40
    procs = [
        subprocess.Popen([sys.executable, "-c", _WRITER, root, who, str(n)], stderr=subprocess.PIPE)
        for who in ("a", "b")
    ]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err.decode()
    folder = LocalFolder(root)
    log = (folder.read("memory/2026-03-14.md") or b"").decode()
    entries = entries_of(log)
    assert sorted(e.text.split(" ", 2)[1] for e in entries) == sorted(f"{w}-{i}" for w in "ab" for i in range(n))
    for e in entries:  # each entry whole: its two lines together, nothing of another between
        name = e.text.split(" ", 2)[1]
        assert e.text == f"12:00 {name} {'x' * 3000}\ncontinued {name}"
    memory = entries_of((folder.read(MEMORY_FILE) or b"").decode())
    assert sorted(e.text for e in memory) == sorted(f"{w}-{i}" for w in "ab" for i in range(n))
    assert all(e.section == f"S{int(e.text.split('-')[1]) % 3}" for e in memory)


@pytest.mark.parametrize("title", ["Title\u2028# Fake", "Title\r## Fake", "Title\x85X", "Title\nX", "  ", ""])
def test_a_section_title_with_any_line_break_is_refused(title: str) -> None:
    folder = MemoryFolder()
    with pytest.raises(ValueError, match="one non-empty line"):
        append_to_section(folder, "entry", section=title)
    assert folder.read("MEMORY.md") is None


def test_a_full_disk_while_indexing_is_a_storage_error(tmp_path: Path) -> None:
    """SQLite's "database or disk is full" (here: the index may not grow) is ctxkeep's error, not sqlite's."""
    from ctxkeep.memory.index import MemoryIndex

    folder = LocalFolder(tmp_path)
    append_daily(folder, "first note", at=datetime(2026, 3, 14, 9, 0, tzinfo=UTC))
    with MemoryIndex(folder) as index:
        index.update()
        pages = index.db.execute("PRAGMA page_count").fetchone()[0]
        index.db.execute(f"PRAGMA max_page_count = {pages}")
        for day in range(1, 20):
            text = " ".join(f"word{day}x{i}" for i in range(1000))
            append_daily(folder, text, at=datetime(2026, 4, day, 9, 0, tzinfo=UTC))
        with pytest.raises(StorageError, match="memory index"):
            index.update()
