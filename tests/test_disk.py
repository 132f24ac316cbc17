"""A session on disk: one durable write per step, counts saved with the live log, a log rewritten without
its replaced lines, and originals rewritten from the live log when a power loss cut them short."""

from __future__ import annotations

import errno
import gc
import os
import subprocess
import sys
import textwrap
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import orjson
import pytest
from tests.builders import shell_turn

from ctxkeep import fileops
from ctxkeep.errors import StorageError
from ctxkeep.folder import LocalFolder
from ctxkeep.messages import Message
from ctxkeep.offload import original_file
from ctxkeep.session import Session
from ctxkeep.settings import DurabilitySettings, EngineSettings, OffloadSettings
from ctxkeep.tokens import TokenCounter, get_counter, load_tokenizer

LIVE = Path("live") / "00000000.jsonl"
NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
SETTINGS = EngineSettings(offload=OffloadSettings(recent_n=1, recent_max_bytes=4_000, old_max_bytes=600))


def turn(i: int, size: int = 9_000) -> list[Message]:
    """A user ask, a tool call and its (big) result, an answer."""
    body = "\n".join(f"line {k} of run {i}: value {k * i}" for k in range(size // 28))
    return shell_turn(i, ask=f"step {i}", output=body, answer=f"done {i}")


class Syncs:
    """Counts fsync and fdatasync calls."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        for name in ("fsync", "fdatasync"):
            real = getattr(os, name, None)
            if real is not None:
                monkeypatch.setattr(os, name, self._counted(real))

    def _counted(self, real):  # type: ignore[no-untyped-def]
        def call(fd: int) -> None:
            self.count += 1
            real(fd)

        return call


def test_a_step_makes_one_durable_write_offloads_included(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with Session.open(tmp_path, settings=SETTINGS) as s:
        s.add(turn(0))
        s.prepare("sys")
        syncs = Syncs(monkeypatch)
        offloaded = 0
        for i in range(1, 8):
            before = syncs.count
            s.add(turn(i))
            step = s.prepare("sys")
            assert step.compaction is None
            offloaded += len(step.live.offloaded)
            assert syncs.count - before == 1, f"step {i}: {syncs.count - before} fsyncs"
    assert offloaded >= 7  # each new result was cut, and each older one aged: all in the steps above


def test_offloads_a_crash_lost_are_made_again_the_same_way(tmp_path: Path) -> None:
    clean = tmp_path / "clean"
    with Session.open(clean, settings=SETTINGS) as s:
        for i in range(3):
            s.add(turn(i))
            s.prepare("sys")
        expected = s.messages
    crashed = tmp_path / "crashed"
    # A process that dies (no close) right after a prepare that offloaded: the offloads were not written yet.
    script = f"""
        import os, sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_disk import SETTINGS, turn
        from ctxkeep.session import Session
        s = Session.open({str(crashed)!r}, settings=SETTINGS)
        for i in range(3):
            s.add(turn(i))
            step = s.prepare("sys")
        assert step.live.offloaded
        os._exit(0)
    """
    _python(script)
    with Session.open(crashed, settings=SETTINGS) as s:
        assert [m.id for m in s.messages] == [m.id for m in expected]
        s.prepare("sys")
        # The same cuts, pointing at the same files (their paths differ by the workspace's name only).
        assert [_text(m).replace("crashed", "clean") for m in s.messages] == [_text(m) for m in expected]


def test_counts_are_saved_and_reopening_does_not_recount(tmp_path: Path) -> None:
    counter = CountingCounter()
    with Session.open(tmp_path, settings=SETTINGS, counter=counter) as s:
        for i in range(4):
            s.add(turn(i))
            s.prepare("sys")
        counts = s.live.counts
    counter.counted.clear()
    with Session.open(tmp_path, settings=SETTINGS, counter=counter) as s:
        assert s.live.counts == counts
        assert not counter.counted, "reopening recounted live messages"


def test_another_counter_recounts_and_rewrites_the_log(tmp_path: Path) -> None:
    with Session.open(tmp_path, settings=SETTINGS) as s:
        for i in range(3):
            s.add(turn(i))
            s.prepare("sys")
    cl100k = get_counter("cl100k_base")
    with Session.open(tmp_path, settings=SETTINGS, counter=cl100k) as s:
        assert list(s.live.counts) == cl100k.count_each(list(s.messages))
    header = orjson.loads((tmp_path / LIVE).read_bytes().split(b"\n", 1)[0])
    assert header["counter"].startswith("cl100k_base/")


def test_closing_rewrites_a_log_with_replaced_lines(tmp_path: Path) -> None:
    with Session.open(tmp_path, settings=SETTINGS) as s:
        for i in range(4):
            s.add(turn(i))
            s.prepare("sys")
        assert b"ctxkeep-replace/1" in (tmp_path / LIVE).read_bytes()
        messages = s.messages
    lines = (tmp_path / LIVE).read_bytes().splitlines()
    assert b"ctxkeep-replace/1" not in b"".join(lines)
    assert len(lines) == 1 + len(messages)  # the header, then one line per message as it is now
    with Session.open(tmp_path, settings=SETTINGS) as s:
        assert s.messages == messages


def test_an_original_a_power_loss_cut_short_is_rewritten_from_the_live_log(tmp_path: Path) -> None:
    script = f"""
        import os, sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_disk import SETTINGS, turn
        from ctxkeep.session import Session
        s = Session.open({str(tmp_path)!r}, settings=SETTINGS)
        for i in range(3):
            s.add(turn(i))
            s.prepare("sys")
        s.add(turn(3))  # writes the offloads of the steps before
        os._exit(0)
    """
    _python(script)
    log = (tmp_path / LIVE).read_bytes()
    assert b"ctxkeep-replace/1" in log
    result = turn(0)[2].tool_result
    assert result is not None
    full = result.text
    with Session.open(tmp_path, settings=SETTINGS) as s:
        name = original_file(next(m for m in s.messages if m.id == "r0").content[0])  # type: ignore[arg-type]
    assert name is not None
    original = tmp_path / name
    assert original.read_text() == full
    # What a power loss can leave of a file written without fsync: its name, and less than its bytes.
    original.write_text(full[:100])
    (tmp_path / LIVE).write_bytes(log)  # the log as the crash left it (closing above rewrote it)
    with Session.open(tmp_path, settings=SETTINGS):
        pass
    assert original.read_text() == full


class SyncLog:
    """Notes, in order, each fsync and fdatasync (with the path of what it synced) and each rename; and the most
    syncs in flight at once, each held `hold` seconds (a slow disk) so that syncs run together overlap."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, root: Path, hold: float = 0.0) -> None:
        self.root = root
        self.events: list[tuple[str, str]] = []
        self.hold = hold
        self.in_flight = self.most_in_flight = 0
        self._count = threading.Lock()
        for name in ("fsync", "fdatasync"):
            real = getattr(os, name, None)
            if real is not None:
                monkeypatch.setattr(os, name, self._synced(real))
        rename = os.rename

        def renamed(src: str, dst: str, **kw: int) -> None:
            rename(src, dst, **kw)
            self.events.append(("rename", str(dst)))

        monkeypatch.setattr(os, "rename", renamed)

    def _synced(self, real):  # type: ignore[no-untyped-def]
        def call(fd: int) -> None:
            path = Path(os.readlink(f"/proc/self/fd/{fd}"))
            self.events.append(("sync", str(path.relative_to(self.root)) if path != self.root else "."))
            with self._count:
                self.in_flight += 1
                self.most_in_flight = max(self.most_in_flight, self.in_flight)
            try:
                time.sleep(self.hold)
                real(fd)
            finally:
                with self._count:
                    self.in_flight -= 1

        return call

    def synced(self) -> list[str]:
        return [what for kind, what in self.events if kind == "sync"]


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="names what each sync synced through /proc")
def test_a_compaction_is_one_durable_commit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with Session.open(tmp_path, settings=SETTINGS) as s:
        for i in range(4):
            s.add(turn(i))
            s.prepare("sys")
        s.compact(now=NOW)  # the first makes the archive and the records: their folders change once
        kept = {f.name for f in s.store.originals()}  # type: ignore[attr-defined]
        for i in range(4, 8):
            s.add(turn(i))
            s.prepare("sys")
        saved = {f.name for f in s.store.originals()} - kept  # type: ignore[attr-defined]
        log = SyncLog(monkeypatch, tmp_path, hold=0.02)
        s.compact(now=NOW)
    synced = log.synced()
    commit = log.events.index(("rename", "state.json"))
    before = {what for kind, what in log.events[:commit] if kind == "sync"}
    # Everything the commit makes real is durable before the state names it: originals, archive, new log.
    assert saved and saved <= before
    assert {"dialog/2026-12-03.jsonl", "live/00000002.jsonl", "live", "tool_result"} <= before
    # One sync per file written and per folder changed, none twice; summary.md (a copy for people) none.
    assert len(synced) == len(set(synced)), f"synced twice: {synced}"
    assert "summary.md" not in synced
    # Beyond the originals: the archive, the new log and its folder, tool_result/, state.json's new bytes and
    # the root, the records.
    assert len(synced) == len(saved) + 7, synced
    # The commit's files and folders are synced at once (they share the disk's journal commits), not one by one.
    assert log.most_in_flight > 1


def test_syncs_that_cost_nothing_run_one_by_one_and_slow_ones_at_once() -> None:
    ran: list[str] = []
    fileops.sync_together([lambda: ran.append(threading.current_thread().name)] * 5)
    assert ran == [threading.current_thread().name] * 5, "no thread started for syncs that cost nothing"

    lock, in_flight, most = threading.Lock(), [0], [0]

    def slow(fail: bool = False) -> None:
        with lock:
            in_flight[0] += 1
            most[0] = max(most[0], in_flight[0])
        time.sleep(0.02)
        with lock:
            in_flight[0] -= 1
            ran.append("slow")
        if fail:
            raise OSError(errno.EIO, "Input/output error")

    ran.clear()
    with pytest.raises(OSError, match="Input/output"):
        fileops.sync_together([slow, slow, lambda: slow(fail=True), slow, slow])
    assert ran == ["slow"] * 5, "the failure is raised once every sync has finished"
    assert most[0] > 1


@pytest.mark.parametrize("durability", ["step", "batch", "off"])
def test_a_step_syncs_as_its_durability_says(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, durability: str) -> None:
    # A window longer than the test: in "batch" the thread never syncs during the steps, the close does.
    mode = DurabilitySettings(mode=durability, window=60.0)  # type: ignore[arg-type]
    with Session.open(tmp_path, settings=SETTINGS, durability=mode) as s:
        s.add(turn(0))
        s.prepare("sys")
        syncs = Syncs(monkeypatch)
        for i in range(1, 4):
            s.add(turn(i))
            assert s.prepare("sys").compaction is None
        assert syncs.count == {"step": 3, "batch": 0, "off": 0}[durability]
    with Session.open(tmp_path, settings=SETTINGS) as s:
        assert [m.id for m in s.messages][-1] == turn(3)[-1].id


def test_a_batch_is_synced_when_the_session_closes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with Session.open(tmp_path, durability=DurabilitySettings(mode="batch", window=60.0)) as s:
        syncs = Syncs(monkeypatch)
        s.add(Message.of("user", "one", id="m1"))
        s.add(Message.of("user", "two", id="m2"))
        assert syncs.count == 0
    assert syncs.count == 1, "the close makes what it acknowledged durable, in one fdatasync"


def test_a_batch_is_synced_by_the_thread_within_its_window(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mode = DurabilitySettings(mode="batch", window=0.02)
    with Session.open(tmp_path, settings=SETTINGS, durability=mode) as s:
        syncs = Syncs(monkeypatch)
        s.add(Message.of("user", "one", id="m1"))
        s.add(Message.of("user", "two", id="m2"))
        assert syncs.count == 0, "the steps do not wait for the disk"
        deadline = time.monotonic() + 30
        while syncs.count == 0 and time.monotonic() < deadline:
            time.sleep(0.005)
        assert syncs.count == 1, "one fdatasync covers both appends"


def test_a_sync_the_batch_thread_could_not_make_is_raised_by_the_next_append(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mode = DurabilitySettings(mode="batch", window=0.01)
    with Session.open(tmp_path, settings=SETTINGS, durability=mode) as s:
        s.add(Message.of("user", "one", id="m1"))
        time.sleep(0.1)  # the first append's file is open and synced

        failed = threading.Event()

        def refused(fd: int) -> None:
            failed.set()
            raise OSError(errno.EIO, "Input/output error")

        monkeypatch.setattr(os, "fdatasync", refused)
        s.add(Message.of("user", "two", id="m2"))
        assert failed.wait(30)
        time.sleep(0.05)
        monkeypatch.undo()
        with pytest.raises(StorageError, match="Input/output error"):
            s.add(Message.of("user", "three", id="m3"))
        s.add(Message.of("user", "four", id="m4"))  # reported once: the next append goes on
    with Session.open(tmp_path, settings=SETTINGS) as s:
        assert [m.id for m in s.messages] == ["m1", "m2", "m4"]


def test_a_sync_the_batch_thread_could_not_make_is_raised_by_the_close(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = Session.open(tmp_path, durability=DurabilitySettings(mode="batch", window=0.01))
    session.add(Message.of("user", "one", id="m1"))
    failed = threading.Event()

    def refused(fd: int) -> None:
        failed.set()
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fdatasync", refused)
    session.add(Message.of("user", "two", id="m2"))
    assert failed.wait(30)
    monkeypatch.undo()
    time.sleep(0.05)
    with pytest.raises(StorageError, match="Input/output error"):
        session.close()  # the last steps may not be durable: said, not swallowed
    with Session.open(tmp_path) as s:  # the lock was released all the same
        assert [m.id for m in s.messages] == ["m1", "m2"]


def test_durability_names_its_modes() -> None:
    with pytest.raises(ValueError, match="durability must be one of step, batch, off"):
        DurabilitySettings(mode="always")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="window must be"):
        DurabilitySettings(mode="batch", window=0)


class CountingCounter(TokenCounter):
    """o200k_base, noting every message it counts."""

    def __init__(self) -> None:
        super().__init__(load_tokenizer("o200k_base"))
        self.counted: list[str] = []

    def count_each(self, messages):  # type: ignore[no-untyped-def]
        msgs = list(messages)
        self.counted += [m.id for m in msgs]
        return super().count_each(msgs)


def _python(script: str) -> None:
    src = Path(__file__).parents[1] / "src"
    env = {**os.environ, "PYTHONPATH": str(src)}
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def _text(msg: Message) -> str:
    result = msg.tool_result
    return msg.text if result is None else result.text


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc to list open descriptors")
def test_the_live_log_stays_open_while_the_session_holds_the_workspace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = _open_fds()
    folder = LocalFolder(tmp_path)
    with Session(folder, settings=SETTINGS) as s:
        s.add(turn(0))
        s.prepare("sys")
        opened: list[str] = []
        real_open = os.open

        def counted(path, *args, **kw):  # type: ignore[no-untyped-def]
            opened.append(str(path))
            return real_open(path, *args, **kw)

        monkeypatch.setattr(os, "open", counted)
        for i in range(1, 4):
            s.add(Message.of("user", f"more {i}", id=f"m{i}"))
        assert opened == []  # appended through the descriptor kept open: no folder nor file opened again
        monkeypatch.undo()
        s.compact()  # the next generation's log replaces this one: appends go to the new file
        s.add(Message.of("user", "after", id="after"))
        held = [m.id for m in s.messages]
    assert _open_fds() == before  # nothing left open once the lock is released
    with Session(LocalFolder(tmp_path), settings=SETTINGS) as s:
        assert [m.id for m in s.messages] == held and held[-1] == "after"


def test_a_refused_sync_on_the_kept_log_cuts_the_append_back_and_the_next_append_works(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Session.open(tmp_path) as s:
        s.add(Message.of("user", "first", id="m0"))
        size = (tmp_path / LIVE).stat().st_size

        def full(fd: int) -> None:
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(os, "fdatasync", full, raising=False)
        monkeypatch.setattr(os, "fsync", full)
        with pytest.raises(StorageError, match="disk is full"):
            s.add(Message.of("user", "refused", id="m1"))
        monkeypatch.undo()
        assert (tmp_path / LIVE).stat().st_size == size
        s.add(Message.of("user", "second", id="m2"))
    with Session.open(tmp_path) as s:
        assert [m.id for m in s.messages] == ["m0", "m2"]


def test_reopening_leaves_the_garbage_collector_as_it_found_it(tmp_path: Path) -> None:
    with Session.open(tmp_path) as s:
        s.add([Message.of("user", f"m{i}", id=f"m{i}") for i in range(3)])
    assert gc.isenabled()
    with Session.open(tmp_path) as s:
        assert len(s.messages) == 3
    assert gc.isenabled()
    gc.disable()
    try:
        with Session.open(tmp_path) as s:
            assert len(s.messages) == 3
        assert not gc.isenabled()  # a host that turned it off keeps it off
    finally:
        gc.enable()
