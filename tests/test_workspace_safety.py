"""A workspace under abuse: a full disk, links inside it, other users, a kill's leftovers, files not ctxkeep's."""

from __future__ import annotations

import errno
import logging
import os
import shutil
import stat
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from ctxkeep.errors import StorageError, WorkspaceLockedError
from ctxkeep.folder import LocalFolder, MemoryFolder
from ctxkeep.messages import Message, make_id
from ctxkeep.retention import cleanup
from ctxkeep.session import Session
from ctxkeep.settings import DURABILITIES, CompactSettings, EngineSettings, OffloadSettings
from test_engine import NOW, Garbage, turn

SETTINGS = EngineSettings(
    compact=CompactSettings(max_input_length=2_000, compact_ratio=0.7, reserve_ratio=0.2),
    offload=OffloadSettings(recent_n=1, recent_max_bytes=200, old_max_bytes=100),
)
LIVE = "live/00000000.jsonl"
DIALOG = "dialog/2026-12-03.jsonl"
DAY = 86_400.0
PRECIOUS = b"the user's own file\nwith a last line that has no newline"


def ids(session: Session) -> list[str]:
    return [m.id for m in session.messages]


def precious(tmp_path: Path) -> Path:
    """A file outside the workspace that ctxkeep must never touch."""
    path = tmp_path / "precious.txt"
    path.write_bytes(PRECIOUS)
    return path


# --- 4. a full disk ------------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 256 KiB file system (tmpfs): the kernel itself says the disk is full, part-way through a write."""
    if os.geteuid() != 0:
        pytest.skip("a real full disk needs a tmpfs mount, which needs root (CI runs this as root)")
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    try:
        proc = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount_point)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except OSError as exc:
        pytest.skip(f"cannot run mount here ({exc}); CI runs this as root with mount available")
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({proc.stderr.strip() or proc.returncode}); CI runs this as root")
    try:
        yield mount_point
    finally:
        if subprocess.run(["umount", str(mount_point)], timeout=60, check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(mount_point)], timeout=60, check=False)


def fill(disk: Path) -> Path:
    """Take every free byte of `disk`; returns the file to remove to free them again."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for chunk in (65_536, 4_096, 1):
            while True:
                try:
                    if os.write(fd, b"\0" * chunk) < chunk:
                        break
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
    finally:
        os.close(fd)
    return filler


@pytest.mark.parametrize("durability", DURABILITIES)
def test_a_full_disk_during_add_loses_no_acknowledged_message(small_disk: Path, durability: str) -> None:
    ws = small_disk / "ws"
    acknowledged: list[str] = []
    with Session.open(ws, settings=SETTINGS, durability=durability) as s:
        for i in range(3):
            s.add(Message.of("user", f"before the disk filled up {i}", id=f"b{i}"))
            acknowledged.append(f"b{i}")
        live = ws / LIVE
        size = live.stat().st_size
        filler = fill(small_disk)
        big = Message.of("user", "x" * 20_000, id="big")
        # The kernel takes what fits in the live log's last page, then refuses the rest.
        with pytest.raises(StorageError, match="disk is full") as info:
            s.add(big)
        assert info.value.errno == errno.ENOSPC and info.value.path == str(live)
        assert ids(s) == acknowledged
        assert live.stat().st_size == size, "the part of the line the disk took is cut back"
        # A short line may still fit in that page; before the fix it went after the torn one.
        try:
            s.add(Message.of("user", "short", id="short"))
            acknowledged.append("short")
        except StorageError:
            pass
        filler.unlink()
        s.add(Message.of("user", "after the disk was freed", id="after"))
        s.add(big)
        acknowledged += ["after", "big"]
    with Session.open(ws, settings=SETTINGS, durability=durability) as s:
        assert ids(s) == acknowledged


@pytest.mark.parametrize("durability", DURABILITIES)
def test_a_full_disk_during_compaction_keeps_the_workspace_as_it_was(small_disk: Path, durability: str) -> None:
    ws = small_disk / "ws"
    with Session.open(ws, settings=SETTINGS, durability=durability) as s:
        for i in range(3):
            s.add(turn(i))
        messages, summary = s.messages, s.summary
        filler = fill(small_disk)
        with pytest.raises(StorageError, match="disk is full"):
            s.compact(now=NOW)
        assert s.messages == messages and s.summary == summary
        filler.unlink()
    assert not [p for p in ws.rglob("*.tmp")], "no temporary file is left behind"
    assert not (ws / DIALOG).exists(), "the refused archive append is undone"
    with Session.open(ws, settings=SETTINGS, durability=durability) as s:
        assert s.messages == messages and s.summary == summary
        step = s.compact(now=NOW)
    assert step.compaction is not None


def test_a_line_the_kernel_cuts_short_is_undone(tmp_path: Path) -> None:
    """RLIMIT_FSIZE makes the kernel write part of a line and refuse the rest (EFBIG): a real refusal, without root."""
    script = textwrap.dedent(
        """
        import resource, signal, sys
        from pathlib import Path
        from ctxkeep import Message, Session, StorageError

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        ws = Path(sys.argv[1])
        with Session.open(ws) as s:
            s.add(Message.of("user", "first", id="m0"))
            size = (ws / "live" / "00000000.jsonl").stat().st_size
            soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
            resource.setrlimit(resource.RLIMIT_FSIZE, (size + 100, hard))
            try:
                s.add(Message.of("user", "x" * 5000, id="refused"))
            except StorageError as exc:
                print("refused", exc.errno, (ws / "live" / "00000000.jsonl").stat().st_size == size)
            resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
            s.add(Message.of("user", "after", id="m1"))
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["refused", str(errno.EFBIG), "True"]
    with Session.open(tmp_path) as s:
        assert ids(s) == ["m0", "m1"]


@pytest.mark.parametrize("method", ["append_live", "append_record"])
def test_an_append_the_disk_refuses_is_cut_back_to_the_last_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, method: str
) -> None:
    folder = LocalFolder(tmp_path)
    name, append = {
        "append_live": (LIVE, lambda data: folder.append_live(0, data)),
        "append_archive": (DIALOG, lambda data: folder.append_archive(DIALOG, data)),
        "append_record": ("compactions.jsonl", folder.append_record),
    }[method]
    append(b'{"line": 1}\n')

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    # The bytes reach the file; the disk refuses them when they are made durable.
    monkeypatch.setattr(os, "fsync", full)
    monkeypatch.setattr(os, "fdatasync", full, raising=False)
    with pytest.raises(StorageError, match="disk is full"):
        append(b'{"line": 2}\n')
    monkeypatch.undo()
    assert (tmp_path / name).read_bytes() == b'{"line": 1}\n'


def test_a_compaction_the_disk_refuses_to_sync_is_undone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The archive append and the originals are synced with the commit: a refusal there commits nothing."""
    with Session.open(tmp_path, settings=SETTINGS) as s:
        for i in range(3):
            s.add(turn(i))
            s.prepare("sys", now=NOW)
        messages, summary = s.messages, s.summary

        def full(fd: int) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(os, "fsync", full)
        monkeypatch.setattr(os, "fdatasync", full, raising=False)
        with pytest.raises(StorageError, match="disk is full"):
            s.compact(now=NOW)
        monkeypatch.undo()
        assert s.messages == messages and s.summary == summary
    assert not (tmp_path / DIALOG).exists(), "the archive append the commit could not sync is undone"
    assert not (tmp_path / "live" / "00000001.jsonl").exists()
    with Session.open(tmp_path, settings=SETTINGS) as s:
        assert s.messages == messages and s.summary == summary
        assert s.compact(now=NOW).compaction is not None


class TearingFolder(LocalFolder):
    """A store whose next append leaves half its bytes and fails without cutting them back."""

    tear = False

    def append(self, name: str, data: bytes) -> int:
        if self.tear:
            self.tear = False
            super().append(name, data[: len(data) // 2])
            raise StorageError(f"cannot append to {name}: the disk is full", path=name, errno=errno.ENOSPC)
        return super().append(name, data)


def test_a_torn_line_inside_the_live_log_is_dropped_on_reopen(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    folder = TearingFolder(tmp_path)
    # Text that looks like records, so the tear's leftovers hold braces and quotes.
    tricky = 'see {"v": "ctxkeep-batch/1", "messages": []} and {"id": "m2"} ' * 5
    with Session(folder) as s:
        s.add(Message.of("user", "first", id="m0"))
        folder.tear = True
        with pytest.raises(StorageError):
            s.add(Message.of("user", tricky, id="m1"))
        s.add([Message.of("user", "second", id="m2"), Message.of("assistant", "ok", id="m3")])
        s.add(Message.of("user", "third", id="m4"))
    with caplog.at_level(logging.WARNING, logger="ctxkeep"), Session.open(tmp_path) as s:
        assert ids(s) == ["m0", "m2", "m3", "m4"]
    # Line 1 is the log's header, line 2 m0's.
    assert f"{tmp_path / LIVE}:3" in caplog.text and "torn" in caplog.text
    records = [orjson.loads(x) for x in (tmp_path / "compactions.jsonl").read_bytes().splitlines()]
    assert [r["kind"] for r in records] == ["repaired"] and records[0]["line"] == 3
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="ctxkeep"), Session.open(tmp_path) as s:
        assert ids(s) == ["m0", "m2", "m3", "m4"]
        s.add(Message.of("user", "fourth", id="m5"))
    assert "torn" not in caplog.text, "the repair is done once"


# --- 5. retention cleanup deletes only ctxkeep's originals ---------------------------------


@pytest.mark.parametrize("kind", ["memory", "local"])
def test_cleanup_removes_only_the_originals_ctxkeep_saved(kind: str, tmp_path: Path) -> None:
    folder: MemoryFolder | LocalFolder = MemoryFolder() if kind == "memory" else LocalFolder(tmp_path)
    ours = f"tool_result/{make_id('m1', 'c1')}.txt"
    theirs = [
        "tool_result/notes.txt",
        "tool_result/build.log",
        f"tool_result/{make_id('m1', 'c1').upper()}.txt",
        f"tool_result/{uuid.uuid4()}.txt",  # the shape of a UUID, but not one make_id gives
        f"{ours}.bak",
        f"tool_result/{make_id('m1', 'c1')}.txt.orig",
        f"tool_result/x{make_id('m1', 'c1')}.txt",
    ]
    now = 1_000 * DAY
    for name in [ours, *theirs]:
        folder.write(name, b"x")
        if isinstance(folder, MemoryFolder):
            folder.mtimes[name] = now - 90 * DAY
        else:
            os.utime(tmp_path / name, (now - 90 * DAY, now - 90 * DAY))
    assert cleanup(folder, [], retention_days=30, now=now) == [ours]
    for name in theirs:
        assert folder.read(name) == b"x", f"{name} is not ctxkeep's and must stay"


# --- 6. links inside a workspace are never followed ----------------------------------------


def test_a_linked_live_log_is_refused_not_truncated(tmp_path: Path) -> None:
    ws, target = tmp_path / "ws", precious(tmp_path)
    with Session.open(ws) as s:
        s.add(Message.of("user", "hello", id="m0"))
    (ws / LIVE).unlink()
    (ws / LIVE).symlink_to(target)
    with pytest.raises(StorageError, match="symbolic link") as info:
        Session.open(ws)
    assert info.value.path == str(ws / LIVE)
    assert target.read_bytes() == PRECIOUS


@pytest.mark.parametrize("name", ["state.json", "live"])
def test_a_linked_state_or_folder_is_refused(tmp_path: Path, name: str) -> None:
    ws = tmp_path / "ws"
    with Session.open(ws) as s:
        s.add(Message.of("user", "hello", id="m0"))
    moved = tmp_path / f"moved-{name}"
    (ws / name).rename(moved)
    (ws / name).symlink_to(moved)
    with pytest.raises(StorageError, match="symbolic link") as info:
        Session.open(ws)
    assert info.value.path == str(ws / name) and str(ws / name) in str(info.value)


def test_a_linked_archive_file_is_never_cut(tmp_path: Path) -> None:
    ws, target = tmp_path / "ws", tmp_path / "precious.jsonl"
    with Session.open(ws, settings=SETTINGS) as s:
        s.add(turn(0))
        s.add(turn(1))
        s.compact(now=NOW)
    day = ws / DIALOG
    content = day.read_bytes() + b'{"the user": "appended this"}\n'
    target.write_bytes(content)
    day.unlink()
    day.symlink_to(target)
    # Before, reopening cut the target back to the committed size. Now the link is refused, when the
    # archive is first read or written.
    with pytest.raises(StorageError, match="symbolic link") as info, Session.open(ws, settings=SETTINGS) as s:
        s.add(turn(2))
        s.compact(now=NOW)
    assert info.value.path == str(day)
    assert target.read_bytes() == content


def test_records_are_never_appended_through_a_link(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    ws, target = tmp_path / "ws", precious(tmp_path)
    with Session.open(ws, settings=SETTINGS) as s:
        s.add(turn(0))
        s.add(turn(1))
    (ws / "compactions.jsonl").symlink_to(target)
    with caplog.at_level(logging.WARNING, logger="ctxkeep"), Session.open(ws, settings=SETTINGS) as s:
        assert s.compact(now=NOW).compaction is not None
    assert target.read_bytes() == PRECIOUS
    assert "symbolic link" in caplog.text and str(ws / "compactions.jsonl") in caplog.text


def test_offloads_are_never_written_through_a_linked_folder(tmp_path: Path) -> None:
    ws, elsewhere = tmp_path / "ws", tmp_path / "elsewhere"
    elsewhere.mkdir()
    with Session.open(ws, settings=SETTINGS) as s:
        (ws / "tool_result").symlink_to(elsewhere)
        s.add(turn(0, size=200))
        messages = s.messages
        with pytest.raises(StorageError, match="symbolic link") as info:
            s.prepare(now=NOW)
        assert info.value.path == str(ws / "tool_result")
        assert s.messages == messages
    assert list(elsewhere.iterdir()) == []


def test_a_planted_temporary_file_cannot_redirect_a_write(tmp_path: Path) -> None:
    ws, target = tmp_path / "ws", precious(tmp_path)
    with Session.open(ws, settings=SETTINGS) as s:
        s.add(turn(0))
    # The name the old code would use next: a link there made it write through to the target.
    planted = [ws / f".state.json.{os.getpid()}.tmp", ws / f".summary.md.{os.getpid()}.tmp"]
    for link in planted:
        link.symlink_to(target)
    with Session.open(ws, settings=SETTINGS) as s:
        s.add(turn(1))
        s.pin("u1")
        s.compact(now=NOW)
    assert target.read_bytes() == PRECIOUS
    assert all(link.is_symlink() for link in planted), "a link ctxkeep did not make is left alone"
    assert not (ws / "state.json").is_symlink()


def test_the_workspace_itself_may_be_reached_through_a_link(tmp_path: Path) -> None:
    real, link = tmp_path / "real", tmp_path / "link"
    link.symlink_to(real, target_is_directory=True)
    with Session.open(link) as s:
        s.add(Message.of("user", "hello", id="m0"))
    with Session.open(link) as s:
        assert ids(s) == ["m0"]
    assert (real / "state.json").is_file() and (real / LIVE).is_file()


# --- 7. private files ------------------------------------------------------------------------


@pytest.mark.parametrize("umask", [0o022, 0o000, 0o277])
def test_workspace_files_are_private_whatever_the_umask(tmp_path: Path, umask: int) -> None:
    ws = tmp_path / "ws"
    old = os.umask(umask)
    try:
        with Session.open(ws, settings=SETTINGS) as s:
            s.add(turn(0, size=200))
            s.add(turn(1, size=200))
            s.compact(now=NOW)
        with Session.open(ws, settings=SETTINGS, summarizer=Garbage()) as s:
            s.add(turn(2))
            s.compact(now=NOW)
    finally:
        os.umask(old)
    made = sorted(ws.rglob("*"))
    assert {p.relative_to(ws).parts[0] for p in made} >= {
        ".lock",
        "state.json",
        "summary.md",
        "compactions.jsonl",
        "live",
        "dialog",
        "tool_result",
        "failed",
    }
    for path in [ws, *made]:
        mode = stat.S_IMODE(path.lstat().st_mode)
        assert mode == (0o700 if path.is_dir() else 0o600), f"{path} is {oct(mode)}"


def test_a_folder_ctxkeep_did_not_create_keeps_its_mode(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    ws.chmod(0o755)
    (ws / "dialog").mkdir()
    (ws / "dialog").chmod(0o750)
    with Session.open(ws, settings=SETTINGS) as s:
        s.add(turn(0))
        s.add(turn(1))
        s.compact(now=NOW)
    assert stat.S_IMODE(ws.stat().st_mode) == 0o755
    assert stat.S_IMODE((ws / "dialog").stat().st_mode) == 0o750
    assert stat.S_IMODE((ws / "live").stat().st_mode) == 0o700
    assert stat.S_IMODE((ws / DIALOG).stat().st_mode) == 0o600


# --- 8. what a kill leaves behind ----------------------------------------------------------


def test_temporaries_a_kill_left_are_removed_on_open_and_nothing_else(tmp_path: Path) -> None:
    ws, target = tmp_path / "ws", precious(tmp_path)
    with Session.open(ws, settings=SETTINGS) as s:
        s.add(turn(0, size=200))
        s.prepare(now=NOW)
        s.add(Message.of("user", "go on", id="m"))
    original = make_id("x", "y")
    stale = [
        ws / ".state.json.12345.tmp",  # the name ctxkeep used before: the writer's pid
        ws / f".summary.md.{'0f' * 8}.tmp",  # the name it uses now: 16 random hex digits
        ws / "live" / ".00000000.jsonl.999.tmp",
        ws / "tool_result" / f".{original}.txt.4242.tmp",
        ws / "failed" / ".20261203T093000000000-512.json.77.tmp",
    ]
    foreign = [
        ws / ".notes.tmp",
        ws / ".state.json.tmp",
        ws / ".state.json.backup.tmp",
        ws / "state.json.123.tmp",
        ws / ".mine.txt.123.tmp",
        ws / "tool_result" / ".notes.txt.123.tmp",
        ws / "dialog" / ".2026-12-03.jsonl.5.tmp",
    ]
    for path in stale + foreign:
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(b"half a file")
    link = ws / ".state.json.555.tmp"
    link.symlink_to(target)
    with Session.open(ws, settings=SETTINGS) as s:
        assert ids(s)[-1] == "m"
    assert [p for p in stale if p.exists()] == []
    assert [p for p in foreign if not p.exists()] == []
    assert link.is_symlink() and target.read_bytes() == PRECIOUS


def test_temporaries_are_removed_only_once_the_lock_is_held(tmp_path: Path) -> None:
    holder, other = LocalFolder(tmp_path), LocalFolder(tmp_path)
    with holder.lock(1.0):
        temp = tmp_path / ".state.json.12345.tmp"  # a write in progress, as far as anyone else can tell
        temp.write_bytes(b"being written")
        with pytest.raises(WorkspaceLockedError), other.lock(0.1):
            pass
        assert temp.exists()
    with other.lock(0.1):
        assert not temp.exists()


def test_a_lock_taken_while_the_workspace_was_replaced_is_the_new_ones(tmp_path: Path) -> None:
    # `compact --replace` swaps a new folder in; a process that was waiting on the old folder's lock file
    # must end up holding the new one's, or two processes would both believe they hold the workspace.
    ws = tmp_path / "ws"
    holder = LocalFolder(ws).lock(5.0)
    holder.__enter__()
    got = threading.Event()
    release = threading.Event()

    def waiter() -> None:
        with LocalFolder(ws).lock(60.0):
            got.set()
            release.wait(60.0)

    thread = threading.Thread(target=waiter)
    thread.start()
    try:
        time.sleep(0.3)  # the waiter is now blocked on the old lock file
        ws.rename(tmp_path / "old")
        ws.mkdir()
        (ws / ".lock").touch()
        holder.__exit__(None, None, None)
        assert got.wait(60.0)
        with pytest.raises(WorkspaceLockedError), LocalFolder(ws).lock(0.0):
            pass
    finally:
        release.set()
        thread.join(60.0)


@pytest.mark.parametrize("how", ["moved", "deleted", "deleted and made again"])
def test_a_workspace_moved_or_deleted_under_an_open_session_refuses_the_next_write(tmp_path: Path, how: str) -> None:
    """Never a silent write elsewhere, to deleted files, or into a new folder without the lock (where another
    process got in, and the first one's acknowledged messages were lost)."""
    ws = tmp_path / "ws"
    first = Session.open(ws)
    first.add(Message.of("user", "kept", id="kept"))
    if how == "moved":
        ws.rename(tmp_path / "elsewhere")
    else:
        shutil.rmtree(ws)
    second = Session.open(ws) if how == "deleted and made again" else None
    if second is not None:
        second.add(Message.of("user", "theirs", id="theirs"))
    with pytest.raises(StorageError, match="moved or deleted while this session had it open"):
        first.add(Message.of("user", "lost?", id="late"))
    first.close()
    if second is not None:
        second.close()
        with Session.open(ws) as s:
            assert [m.id for m in s.messages] == ["theirs"]
    elif how == "moved":
        assert not ws.exists()  # not made again at the old path
        with Session.open(tmp_path / "elsewhere") as s:
            assert [m.id for m in s.messages] == ["kept"]
    else:
        assert not ws.exists()
