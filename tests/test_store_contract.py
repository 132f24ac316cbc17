"""The `Store` contract, run against every store: a local folder, the in-memory folder and PostgreSQL (a
throwaway server the tests start, tests/conftest.py). What the session, recovery and memory rely on of a
store is here once; a new store passes this module before anything else."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ctxkeep.errors import StorageError, WorkspaceError, WorkspaceLockedError
from ctxkeep.folder import LocalFolder, MemoryFolder
from ctxkeep.session import Session
from ctxkeep.store import Store

sys.path.insert(0, str(Path(__file__).parent))
import crash_worker

ORIGINAL = "tool_result/0b5e1a50-7c4a-5d2e-9f1a-2b3c4d5e6f70.txt"
SRC = str(Path(__file__).parents[1] / "src")


class Stores:
    """Handles on one workspace of one kind of store: `open` another handle (another process would), `close` all."""

    def __init__(self, opener: Callable[[], Store], kind: str) -> None:
        self.kind = kind
        self._opener = opener
        self._opened: list[Store] = []

    def open(self) -> Store:
        store = self._opener()
        self._opened.append(store)
        return store

    def close(self) -> None:
        for store in self._opened:
            close = getattr(store, "close", None)
            if close is not None:
                close()


@pytest.fixture(params=["folder", "memory", pytest.param("postgres", marks=pytest.mark.extra("postgres"))])
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Stores]:
    if request.param == "folder":
        handles = Stores(lambda: LocalFolder(tmp_path / "ws"), "folder")
    elif request.param == "memory":
        one = MemoryFolder()  # a dict in this process: every handle is the same store
        handles = Stores(lambda: one, "memory")
    else:
        from ctxkeep.postgres.store import PostgresStore

        url, name = request.getfixturevalue("postgres_url"), f"contract-{uuid.uuid4().hex}"
        handles = Stores(lambda: PostgresStore(url, name), "postgres")
    try:
        yield handles
    finally:
        handles.close()


@pytest.fixture
def store(stores: Stores) -> Store:
    return stores.open()


def test_a_new_workspace_holds_nothing(store: Store) -> None:
    assert store.read_state() is None
    assert store.live_generations() == [] and store.read_live(0) == b""
    assert store.archive_files() == [] and store.read_archive("dialog/2026-05-02.jsonl") == b""
    assert store.originals() == [] and store.read_records() == b"" and store.read_summary() is None
    assert store.memory_files() == [] and store.read_memory("MEMORY.md") is None


def test_the_state_is_replaced_whole(store: Store) -> None:
    store.commit_state(b'{"generation": 0}')
    store.commit_state(b'{"generation": 1}')
    assert store.read_state() == b'{"generation": 1}'


def test_live_logs_by_generation(store: Store) -> None:
    store.start_live(10, b"a\n")
    store.start_live(2, b"header\n")
    store.append_live(2, b"one\n")
    store.append_live(2, b"two\n")
    assert store.live_generations() == [2, 10]
    assert store.read_live(2) == b"header\none\ntwo\n"
    store.cut_live(2, len(b"header\non"))  # a line a crash left half-written
    assert store.read_live(2) == b"header\non"
    store.append_live(2, b"e\n")
    assert store.read_live(2) == b"header\none\n"
    store.start_live(2, b"rewritten\n")
    assert store.read_live(2) == b"rewritten\n"
    store.drop_live(10)
    assert store.live_generations() == [2] and store.read_live(10) == b""


def test_archive_appends_return_sizes_and_cut_back(store: Store) -> None:
    day, other = "dialog/2026-05-02.jsonl", "dialog/2026-05-01.jsonl"
    assert store.append_archive(day, b"12345\n") == 6
    assert store.append_archive(day, b"789\n") == 10
    assert store.append_archive(other, b"x\n") == 2
    assert [(f.name, f.size) for f in store.archive_files()] == [(other, 2), (day, 10)]
    store.cut_archive(day, 8)
    assert store.read_archive(day) == b"12345\n78"
    assert store.append_archive(day, b"9\n") == 10
    store.cut_archive(other, 0)  # an append never committed, of a file it made
    assert [f.name for f in store.archive_files()] == [day]
    assert store.read_archive(day) == b"12345\n789\n"


def test_originals_failures_records_and_summary(store: Store) -> None:
    store.save_original(ORIGINAL, b"the full output")
    assert [(f.name, f.size) for f in store.originals()] == [(ORIGINAL, 15)]
    assert abs(store.originals()[0].mtime - time.time()) < 600
    read = getattr(store, "read_original", None)
    if read is not None:
        assert read(ORIGINAL) == b"the full output"
        assert read("state.json") is None  # only the names ctxkeep gives its originals
    store.save_failure("20260502T183000000000-4000.json", b"{}")
    assert [f.name for f in store.originals()] == [ORIGINAL]  # a refused summary is no original
    store.drop_original(ORIGINAL)
    assert store.originals() == []
    store.append_record(b'{"a": 1}\n')
    store.append_record(b'{"b": 2}\n')
    assert store.read_records() == b'{"a": 1}\n{"b": 2}\n'
    store.write_summary(b"old")
    store.write_summary(b"new")
    assert store.read_summary() == b"new"


def test_memory_files(store: Store) -> None:
    store.write_memory("AGENTS.md", b"# rules\n")
    store.write_memory("MEMORY.md", b"# Memory\n")
    assert store.append_memory("memory/2026-05-02.md", b"- one\n") == 6
    assert store.append_memory("memory/2026-05-02.md", b"- two\n") == 12
    store.write_memory("memory/2026-05-01.md", b"- zero\n")
    assert [(f.name, f.size) for f in store.memory_files()] == [
        ("MEMORY.md", 9),
        ("memory/2026-05-01.md", 7),
        ("memory/2026-05-02.md", 12),
    ]  # AGENTS.md is the workspace's, not memory's
    assert store.read_memory("AGENTS.md") == b"# rules\n"
    assert store.read_memory("memory/2026-05-02.md") == b"- one\n- two\n"


def test_the_memory_lock_excludes_another_writer(store: Store) -> None:
    order: list[str] = []

    def other() -> None:
        with store.memory_lock():
            order.append("other")

    with store.memory_lock():
        thread = threading.Thread(target=other)
        thread.start()
        time.sleep(0.3)
        order.append("first")
    thread.join(timeout=30)
    assert order == ["first", "other"]


def test_a_second_holder_waits_then_is_refused(stores: Stores) -> None:
    first, second = stores.open(), stores.open()
    with first.lock(1.0):
        started = time.monotonic()
        with pytest.raises(WorkspaceLockedError), second.lock(0.3 if stores.kind != "memory" else 0):
            pass
        waited = time.monotonic() - started
        assert stores.kind == "memory" or 0.25 <= waited < 10
    with second.lock(1.0):
        pass  # released with the first block


@pytest.mark.parametrize("name", ["", "../state.json", "dialog/../x.jsonl", "dialog//x.jsonl", "a\x00b"])
def test_a_bad_name_is_refused_before_anything_is_written(stores: Stores, name: str) -> None:
    if stores.kind == "memory":
        pytest.skip("the in-memory folder trusts its caller: it has no names to protect")
    store = stores.open()
    store.append_archive("dialog/2026-05-02.jsonl", b"kept\n")
    for write in (
        lambda: store.append_archive(name, b"x\n"),
        lambda: store.save_original(name, b"x"),
        lambda: store.write_memory(name, b"x"),
    ):
        # A ctxkeep error either way: the folder's WorkspaceError (a name leaving it), PostgreSQL's StorageError.
        with pytest.raises((WorkspaceError, StorageError)):
            write()
    assert [(f.name, f.size) for f in store.archive_files()] == [("dialog/2026-05-02.jsonl", 5)]
    assert store.originals() == [] and store.memory_files() == []


def _replay(store: Store, messages: list[object]) -> None:
    with Session(store, settings=crash_worker.SETTINGS, now=crash_worker.NOW) as session:
        for message in messages:
            session.add(message)
            if getattr(message, "role", None) == "user":
                session.prepare("You are a careful agent.", now=crash_worker.NOW)


def test_a_session_compacts_and_reopens_the_same_on_every_store(stores: Stores) -> None:
    conversation = crash_worker.conversation()
    _replay(stores.open(), list(conversation))
    store = stores.open()
    with Session(store, settings=crash_worker.SETTINGS, now=crash_worker.NOW) as session:
        assert [m.id for m in session.history()] == [m.id for m in conversation]
        assert session.live.archive.files, "the conversation must compact at least once"
        assert session.summary is not None
        assert (store.read_summary() or b"").decode() == session.summary
        assert store.originals(), "its long outputs are offloaded"


def test_a_killed_holder_releases_the_workspace(stores: Stores, tmp_path: Path) -> None:
    if stores.kind == "memory":
        pytest.skip("the in-memory folder lives in one process")
    store = stores.open()
    if stores.kind == "folder":
        assert isinstance(store, LocalFolder)
        code = f"from ctxkeep.folder import LocalFolder as S; store = S({str(store.root)!r})"
    else:
        code = (
            "from ctxkeep.postgres.store import PostgresStore as S;"
            f" store = S({store.url!r}, {store.workspace!r})"  # type: ignore[attr-defined]
        )
    with subprocess.Popen(
        [sys.executable, "-c", f"{code}\nwith store.lock(5):\n    print('held', flush=True)\n    input()"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": SRC},
    ) as holder:
        try:
            assert holder.stdout is not None and holder.stdout.readline() == "held\n"
            with pytest.raises(WorkspaceLockedError), store.lock(0.2):
                pass
            os.kill(holder.pid, signal.SIGKILL)
            holder.wait(timeout=30)
            with store.lock(30):  # the server drops the dead process's connection, and its lock with it
                pass
        finally:
            holder.kill()


def test_importing_ctxkeep_imports_no_database_driver() -> None:
    code = "import sys, ctxkeep, ctxkeep.postgres, ctxkeep.cli; print(sorted(m for m in sys.modules if 'psycopg' in m))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, "PYTHONPATH": SRC}
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
