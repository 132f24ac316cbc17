"""The dialog archive and the Folder it writes through."""

from __future__ import annotations

import errno
import os
from datetime import date

import orjson
import pytest

from ctxkeep import archive
from ctxkeep.codec import message_from_dict
from ctxkeep.errors import StorageError, WorkspaceError, WorkspaceLockedError
from ctxkeep.folder import LocalFolder, MemoryFolder
from ctxkeep.messages import Message

DAY = date(2026, 12, 3)


def _msgs(n: int, start: int = 0) -> list[Message]:
    return [Message.of("user", f"message {i} 你好", id=f"m{i}") for i in range(start, start + n)]


@pytest.fixture(params=["local", "memory"])
def folder(request: pytest.FixtureRequest, tmp_path):  # type: ignore[no-untyped-def]
    return LocalFolder(tmp_path / "ws") if request.param == "local" else MemoryFolder()


def test_append_keeps_order_and_counts_lines(folder) -> None:  # type: ignore[no-untyped-def]
    index = archive.append(folder, archive.Archive(), _msgs(3), DAY)
    index = archive.append(folder, index, _msgs(2, 3), DAY)
    name = "dialog/2026-12-03.jsonl"
    assert index.files[name].lines == 5
    assert index.files[name].bytes == folder.size(name)
    lines = folder.read(name).splitlines()
    assert [message_from_dict(orjson.loads(x)).id for x in lines] == [f"m{i}" for i in range(5)]


def test_restore_undoes_an_uncommitted_append(folder) -> None:  # type: ignore[no-untyped-def]
    committed = archive.append(folder, archive.Archive(), _msgs(2), DAY)
    archive.append(folder, committed, _msgs(4, 2), DAY)  # never committed
    archive.append(folder, committed, _msgs(1, 9), date(2026, 12, 4))  # a new day's file, never committed
    changed = archive.restore(folder, committed)
    assert sorted(changed) == ["dialog/2026-12-03.jsonl", "dialog/2026-12-04.jsonl"]
    assert len(folder.read("dialog/2026-12-03.jsonl").splitlines()) == 2
    assert folder.read("dialog/2026-12-04.jsonl") is None


def test_append_after_a_lost_commit_overwrites_the_uncommitted_tail(folder) -> None:  # type: ignore[no-untyped-def]
    committed = archive.append(folder, archive.Archive(), _msgs(2), DAY)
    archive.append(folder, committed, _msgs(3, 2), DAY)  # crash before commit
    again = archive.append(folder, committed, _msgs(3, 2), DAY)  # the retry
    assert again.files["dialog/2026-12-03.jsonl"].lines == 5
    assert len(folder.read("dialog/2026-12-03.jsonl").splitlines()) == 5


def test_guide_names_every_file_and_its_lines() -> None:
    folder = MemoryFolder()
    index = archive.append(folder, archive.Archive(), _msgs(3), DAY)
    index = archive.append(folder, index, _msgs(2, 3), date(2026, 12, 4))
    text = archive.guide(index)
    assert "dialog/2026-12-03.jsonl (3 lines)" in text and "dialog/2026-12-04.jsonl (2 lines)" in text
    assert "oldest first" in text and "end backwards" in text
    assert "dialog/2026-12-03.jsonl（3 行）" in archive.guide(index, language="zh")
    assert archive.guide(archive.Archive()) == ""


def test_archive_index_round_trips() -> None:
    index = archive.append(MemoryFolder(), archive.Archive(), _msgs(3), DAY)
    assert archive.Archive.from_dict(orjson.loads(orjson.dumps(index.to_dict()))) == index


def test_local_folder_write_is_atomic_and_leaves_no_temp_files(tmp_path) -> None:  # type: ignore[no-untyped-def]
    folder = LocalFolder(tmp_path)
    folder.write("a/b.txt", b"one")
    folder.write("a/b.txt", b"two")
    assert folder.read("a/b.txt") == b"two"
    assert os.listdir(tmp_path / "a") == ["b.txt"]
    assert [f.name for f in folder.list("a/")] == ["a/b.txt"]


def test_local_folder_refuses_names_outside_it(tmp_path) -> None:  # type: ignore[no-untyped-def]
    folder = LocalFolder(tmp_path)
    for bad in ("../x", "/etc/passwd", "a/../../x", ""):
        with pytest.raises(WorkspaceError, match="relative"):  # a ctxkeep error, never a bare ValueError
            folder.write(bad, b"")


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores file permissions")
def test_read_only_folder_gives_a_clear_error(tmp_path) -> None:  # type: ignore[no-untyped-def]
    folder = LocalFolder(tmp_path)
    folder.write("x.txt", b"keep")
    tmp_path.chmod(0o500)
    try:
        with pytest.raises(StorageError, match="writable") as info:
            folder.write("y.txt", b"new")
        assert info.value.errno in (errno.EACCES, errno.EPERM)
        assert folder.read("x.txt") == b"keep"
    finally:
        tmp_path.chmod(0o700)


def test_disk_full_gives_a_clear_error_and_keeps_the_old_file(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    folder = LocalFolder(tmp_path)
    folder.write("x.txt", b"old")

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    monkeypatch.setattr(os, "fdatasync", full, raising=False)
    with pytest.raises(StorageError, match="disk is full") as info:
        folder.write("x.txt", b"new")
    assert info.value.errno == errno.ENOSPC
    monkeypatch.undo()
    assert folder.read("x.txt") == b"old"
    assert [f.name for f in folder.list("")] == ["x.txt"]


def test_lock_times_out_with_a_clear_error(tmp_path) -> None:  # type: ignore[no-untyped-def]
    a, b = LocalFolder(tmp_path), LocalFolder(tmp_path)
    with a.lock(1.0), pytest.raises(WorkspaceLockedError, match="in use by another process"), b.lock(0.1):
        pass
    with b.lock(0.1):
        pass
