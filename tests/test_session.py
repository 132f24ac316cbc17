"""A session kept in a workspace folder: reopening, pins, locks, and a disk that refuses."""

from __future__ import annotations

import contextlib
import errno
import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from ctxkeep.errors import MessageError, PinnedOverBudgetError, StorageError, WorkspaceError, WorkspaceLockedError
from ctxkeep.folder import LocalFolder
from ctxkeep.messages import Message
from ctxkeep.session import Session
from ctxkeep.settings import CompactSettings, EngineSettings, OffloadSettings
from ctxkeep.store import FileInfo
from test_engine import NOW, turn

SETTINGS = EngineSettings(
    compact=CompactSettings(max_input_length=2_000, compact_ratio=0.7, reserve_ratio=0.2),
    offload=OffloadSettings(recent_n=2, recent_max_bytes=1_500, old_max_bytes=300),
)


def fill(session: Session, turns: range) -> None:
    for i in turns:
        t = turn(i)
        session.add(t[:1])
        session.prepare("be brief", now=NOW)
        session.add(t[1:])


def test_a_session_reopens_where_it_stopped(tmp_path: Path) -> None:
    with Session.open(tmp_path, settings=SETTINGS) as s:
        fill(s, range(12))
        messages, summary = s.messages, s.summary
        s.pin(messages[-1].id)
    assert summary is not None
    with Session.open(tmp_path, settings=SETTINGS) as s:
        assert s.messages == messages and s.summary == summary
        assert s.live.pinned == {messages[-1].id}
        assert s.live.total == sum(s.counter.count_each(s.messages))
    assert (tmp_path / "summary.md").read_text() == summary
    records = [r for r in (tmp_path / "compactions.jsonl").read_text().splitlines() if '"kind":"steps"' not in r]
    assert records and all('"kind":"compaction"' in r for r in records)


class KindStore:
    """A `Store` that is no file system: one dict per kind of thing a workspace keeps, as a database would."""

    def __init__(self) -> None:
        self.state: bytes | None = None
        self.live: dict[int, bytearray] = {}
        self.archive: dict[str, bytearray] = {}
        self.originals_: dict[str, bytes] = {}
        self.records = bytearray()
        self.failures: dict[str, bytes] = {}
        self.summary: bytes | None = None
        self.memory: dict[str, bytearray] = {}  # MEMORY.md, memory/..., AGENTS.md by name

    @contextlib.contextmanager
    def lock(self, timeout: float) -> Iterator[None]:
        yield

    def where(self, name: str) -> str:
        return f"kind-store:{name}"

    def read_state(self) -> bytes | None:
        return self.state

    def commit_state(self, data: bytes) -> None:
        self.state = data

    def live_generations(self) -> list[int]:
        return sorted(self.live)

    def read_live(self, generation: int) -> bytes:
        return bytes(self.live.get(generation, b""))

    def start_live(self, generation: int, data: bytes) -> None:
        self.live[generation] = bytearray(data)

    def append_live(self, generation: int, data: bytes) -> None:
        self.live.setdefault(generation, bytearray()).extend(data)

    def cut_live(self, generation: int, size: int) -> None:
        del self.live[generation][size:]

    def drop_live(self, generation: int) -> None:
        self.live.pop(generation, None)

    def archive_files(self) -> list[FileInfo]:
        return [FileInfo(name, len(data), 0.0) for name, data in sorted(self.archive.items())]

    def read_archive(self, name: str) -> bytes:
        return bytes(self.archive.get(name, b""))

    def append_archive(self, name: str, data: bytes) -> int:
        self.archive.setdefault(name, bytearray()).extend(data)
        return len(self.archive[name])

    def cut_archive(self, name: str, size: int) -> None:
        if size == 0:
            self.archive.pop(name, None)
        else:
            del self.archive[name][size:]

    def save_original(self, name: str, data: bytes) -> None:
        self.originals_[name] = data

    def originals(self) -> list[FileInfo]:
        return [FileInfo(name, len(data), 0.0) for name, data in sorted(self.originals_.items())]

    def drop_original(self, name: str) -> None:
        self.originals_.pop(name, None)

    def append_record(self, data: bytes) -> None:
        self.records.extend(data)

    def read_records(self) -> bytes:
        return bytes(self.records)

    def save_failure(self, name: str, data: bytes) -> None:
        self.failures[name] = data

    def read_summary(self) -> bytes | None:
        return self.summary

    def write_summary(self, data: bytes) -> None:
        self.summary = data

    def read_memory(self, name: str) -> bytes | None:
        found = self.memory.get(name)
        return None if found is None else bytes(found)

    def write_memory(self, name: str, data: bytes) -> None:
        self.memory[name] = bytearray(data)

    def append_memory(self, name: str, data: bytes) -> int:
        self.memory.setdefault(name, bytearray()).extend(data)
        return len(self.memory[name])

    def memory_files(self) -> list[FileInfo]:
        return [FileInfo(name, len(data), 0.0) for name, data in sorted(self.memory.items())]

    @contextlib.contextmanager
    def memory_lock(self) -> Iterator[None]:
        yield

    def index_path(self) -> str | None:
        return None


def test_a_session_needs_only_the_store_seam() -> None:
    # What a database backend would implement: no paths, no file operations.
    store = KindStore()
    with Session(store, settings=SETTINGS) as s:
        fill(s, range(12))
        messages, summary = s.messages, s.summary
    assert summary is not None and store.summary == summary.encode()
    assert list(store.live) == [json.loads(store.state or b"{}")["generation"]]
    assert sum(data.count(b"\n") for data in store.archive.values()) + len(messages) == 12 * 4
    assert b'"kind":"compaction"' in store.records
    with Session(store, settings=SETTINGS) as s:
        assert s.messages == messages and s.summary == summary


def test_what_a_session_holds_is_read_only(tmp_path: Path) -> None:
    with Session.open(tmp_path, settings=SETTINGS) as s:
        for name in ("live", "store", "settings", "counter", "summarizer"):
            with pytest.raises(AttributeError):
                setattr(s, name, None)


def test_offloaded_results_are_kept_across_reopening(tmp_path: Path) -> None:
    offload = OffloadSettings(recent_n=1, recent_max_bytes=200, old_max_bytes=100, age_batch_bytes=0)
    big = EngineSettings(offload=offload)
    with Session.open(tmp_path, settings=big) as s:
        fill(s, range(3))
        s.prepare(now=NOW)
        messages = s.messages
    assert any("tool_result/" in (m.tool_result.text if m.tool_result else "") for m in messages)
    with Session.open(tmp_path, settings=big) as s:
        assert s.messages == messages


def test_pin_checks_the_budget_and_unknown_ids(tmp_path: Path) -> None:
    with Session.open(tmp_path, settings=SETTINGS) as s:
        s.add(Message.of("user", "big " * 1_500, id="big"))
        with pytest.raises(PinnedOverBudgetError):
            s.pin("big")
        with pytest.raises(MessageError, match="no live message"):
            s.pin("nope")


def test_a_pin_the_session_accepts_never_fails_a_later_compaction(tmp_path: Path) -> None:
    # One budget rule for pins, the system prompt included: before, `pin` left the system prompt out and
    # accepted this pin, then the next `prepare` raised PinnedOverBudgetError from the compaction.
    settings = EngineSettings(compact=CompactSettings(max_input_length=4_000))  # threshold 2,800
    system = "Follow the house rules. " * 300  # about 1,500 tokens
    with Session.open(tmp_path, settings=settings) as s:
        s.add(Message.of("user", "start", id="u0"))
        assert s.prepare(system, now=NOW).compaction is None
        s.add(Message.of("assistant", "word " * 1_500, id="big"))
        with pytest.raises(PinnedOverBudgetError, match="after the system prompt, tool schemas and summary"):
            s.pin("big")
        assert s.live.pinned == frozenset()
        s.add(Message.of("user", "go on", id="u1"))
        step = s.prepare(system, now=NOW)
    assert step.compaction is not None and step.context.tokens <= settings.compact.compact_threshold


def test_manual_compaction_with_focus(tmp_path: Path) -> None:
    with Session.open(tmp_path, settings=SETTINGS) as s:
        fill(s, range(2))
        step = s.compact("the /srv paths", now=NOW)
    assert step.compaction is not None and step.compaction.focus == "the /srv paths"
    assert (tmp_path / "dialog" / "2026-12-03.jsonl").exists()


def test_a_second_process_waits_then_gets_a_clear_error(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                f"""
                import sys, time
                from ctxkeep.session import Session
                with Session.open({str(tmp_path)!r}):
                    print("locked", flush=True)
                    sys.stdin.readline()
                """
            ),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        with pytest.raises(WorkspaceLockedError, match="in use by another process"):
            Session.open(tmp_path, lock_timeout=0.3)
    finally:
        holder.communicate("\n", timeout=30)
    with Session.open(tmp_path, lock_timeout=5):
        pass


def _turn_ops(s: Session, i: int) -> list:  # type: ignore[type-arg]
    t = turn(i)
    return [lambda: s.add(t[:1]), lambda: s.prepare("be brief", now=NOW), lambda: s.add(t[1:])]


class RefusingFolder(LocalFolder):
    """A folder whose disk fills up (or turns read-only) after `allowed` more writes."""

    def __init__(self, root: Path, code: int) -> None:
        super().__init__(root)
        self.allowed: int | None = None
        self.code = code

    def _check(self, name: str) -> None:
        if self.allowed is not None:
            if self.allowed <= 0:
                raise StorageError(f"cannot write {name}: refused", path=name, errno=self.code)
            self.allowed -= 1

    def write(self, name: str, data: bytes) -> None:
        self._check(name)
        super().write(name, data)

    def append(self, name: str, data: bytes) -> int:
        self._check(name)
        return super().append(name, data)


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS])
@pytest.mark.parametrize("allowed", [0, 1, 2, 3])
def test_a_refusing_disk_leaves_the_live_context_unchanged(tmp_path: Path, code: int, allowed: int) -> None:
    folder = RefusingFolder(tmp_path, code)
    with Session(folder, settings=SETTINGS) as s:
        fill(s, range(4))
        before_messages, before_summary = s.messages, s.summary
        folder.allowed = allowed
        ops = [op for i in range(4, 30) for op in _turn_ops(s, i)]
        with pytest.raises(StorageError):
            for op in ops:
                op()
                before_messages, before_summary = s.messages, s.summary
        assert s.messages == before_messages and s.summary == before_summary
    with Session.open(tmp_path, settings=SETTINGS) as s:
        assert s.messages == before_messages and s.summary == before_summary


def test_a_missing_or_damaged_state_is_an_error_not_a_fresh_start(tmp_path: Path) -> None:
    with Session.open(tmp_path, settings=SETTINGS) as s:
        fill(s, range(12))
    state = tmp_path / "state.json"
    state.write_text("{not json")
    with pytest.raises(WorkspaceError, match="damaged"):
        Session.open(tmp_path)
    state.unlink()
    with pytest.raises(WorkspaceError, match="missing"):
        Session.open(tmp_path)


def test_pinning_a_result_pins_its_call_and_siblings(tmp_path: Path) -> None:
    with Session.open(tmp_path, settings=SETTINGS) as s:
        fill(s, range(2))
        s.pin("r0")
        assert s.live.pinned == {"a0", "r0"}
        s.unpin("a0")
        assert s.live.pinned == frozenset()


def test_a_refused_summary_is_saved_for_debugging(tmp_path: Path) -> None:
    from test_engine import Garbage

    with Session.open(tmp_path, settings=SETTINGS, summarizer=Garbage()) as s:
        fill(s, range(12))
        messages, summary = s.messages, s.summary
    assert summary is None and len(messages) == 48
    saved = sorted((tmp_path / "failed").glob("*.json"))
    assert saved
    detail = json.loads(saved[0].read_text())
    assert detail["response"] == "lorem ipsum, no sections at all" and "lacks the sections" in detail["reason"]
    assert detail["request"]["summarizer"] == "Garbage" and detail["request"]["messages"]
    records = [json.loads(x) for x in (tmp_path / "compactions.jsonl").read_text().splitlines()]
    records = [r for r in records if r["kind"] != "steps"]  # the steps' token counts, noted at close
    assert records[0]["kind"] == "failed" and records[0]["saved"] == f"failed/{saved[0].name}"
    assert len(records) == len(saved), "one attempt per growth of the context, not one per step"


def test_history_gives_back_the_whole_conversation_a_host_can_sync_again(tmp_path: Path) -> None:
    from ctxkeep import to_openai

    settings = EngineSettings(compact=CompactSettings(max_input_length=2_000, compact_ratio=0.7))
    turns = [
        m
        for i in range(12)
        for m in (
            {"role": "user", "content": f"step {i}: " + "please look at the build log " * 30},
            {"role": "assistant", "content": f"done with step {i}"},
        )
    ]
    with Session.open(tmp_path / "ws", settings=settings) as session:
        for k in range(0, len(turns), 2):
            session.add(turns[k : k + 2])
            session.prepare("be brief")
        assert session.summary is not None  # some of it was compacted into the archive
        whole = session.history()
    assert [m.text for m in whole] == [t["content"] for t in turns]
    with Session.open(tmp_path / "ws", settings=settings) as session:  # a restarted host rebuilds its list
        assert session.sync(to_openai(session.history())) == []
