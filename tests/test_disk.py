"""A session on disk: one durable write per step, counts saved with the live log, a log rewritten without
its replaced lines, and originals rewritten from the live log when a power loss cut them short."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import orjson
import pytest
from tests.builders import shell_turn

from ctxkeep.errors import StorageError
from ctxkeep.folder import LocalFolder
from ctxkeep.messages import Message
from ctxkeep.offload import original_file
from ctxkeep.session import Session
from ctxkeep.settings import EngineSettings, OffloadSettings
from ctxkeep.tokens import TokenCounter, get_counter, load_tokenizer

LIVE = Path("live") / "00000000.jsonl"
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


def test_originals_are_made_durable_before_a_compaction_drops_their_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = LocalFolder(tmp_path)
    synced: list[str] = []
    real = LocalFolder.sync_originals

    def sync(self: LocalFolder) -> None:
        synced.extend(self._unsynced)
        real(self)

    monkeypatch.setattr(LocalFolder, "sync_originals", sync)
    with Session(folder, settings=SETTINGS) as s:
        for i in range(3):
            s.add(turn(i))
            s.prepare("sys")
        saved = {f.name for f in folder.originals()}
        assert saved and not synced
        s.compact()
    assert saved <= set(synced)


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
