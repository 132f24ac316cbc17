"""Memory through the `Store` seam: a store that is no folder (a database backend's shape) gets the flush, the
AGENTS.md rules, the memory tools and search, and a local folder keeps its lock and index file on disk."""

from __future__ import annotations

import os
import stat
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ctxkeep import EngineSettings, Session
from ctxkeep.disk import INDEX_FILE
from ctxkeep.folder import LocalFolder, MemoryFolder
from ctxkeep.host.core import memory_tools_of
from ctxkeep.memory.files import entries_of
from ctxkeep.memory.index import MemoryIndex
from ctxkeep.messages import Message
from ctxkeep.settings import CompactSettings, MemorySettings
from ctxkeep.store import FileStore, Store

NOW = datetime(2026, 5, 2, 18, 30, tzinfo=UTC)
STORE_METHODS = frozenset(name for name in vars(Store) if not name.startswith("_"))
AGENTS_MD = "# AGENTS\n\n## Red Lines\n\n- Never push to main.\n\n## Style\n\nShort answers.\n"


class OnlyStore:
    """The `Store` protocol's methods of a `MemoryFolder` and nothing else: no file operation, no `FileStore`,
    so memory that went around the seam (a downcast, a `read` of a folder) fails here."""

    def __init__(self) -> None:
        self.inner = MemoryFolder()

    def __getattr__(self, name: str) -> Any:
        if name in STORE_METHODS:
            return getattr(self.inner, name)
        raise AttributeError(f"{name} is not part of the Store protocol")


def _settings() -> EngineSettings:
    return EngineSettings(
        compact=CompactSettings(max_input_length=4_000, reserve_cap=400),
        summary_max_chars=2_500,
        memory=MemorySettings(flush=True),
    )


def test_the_protocol_names_the_memory_operations() -> None:
    memory = {"read_memory", "write_memory", "append_memory", "memory_files", "memory_lock", "index_path"}
    assert memory <= STORE_METHODS
    assert not isinstance(OnlyStore(), FileStore) and not hasattr(OnlyStore(), "read")


def test_a_store_that_is_no_folder_flushes_and_puts_the_rules_back() -> None:
    store = OnlyStore()
    store.write_memory("AGENTS.md", AGENTS_MD.encode())
    with Session(store, settings=_settings()) as session:
        session.add([Message.of("user", f"Turn {i}: I prefer tabs, variant {i}.") for i in range(8)])
        step = session.compact(system="system", now=NOW)
    assert step.compaction is not None and step.archived
    log = (store.read_memory("memory/2026-05-02.md") or b"").decode()
    noted = [e.text for e in entries_of(log)]
    assert noted and all("[preference] Turn" in text for text in noted)
    summary = step.context.summary or ""
    assert "<workspace-rules source=AGENTS.md>" in summary and "Never push to main." in summary
    assert "Short answers" not in summary  # only the rule sections


def test_memory_tools_of_a_session_on_a_store_that_is_no_folder_write_and_search() -> None:
    store = OnlyStore()
    with Session(store, settings=_settings()) as session:
        tools = {t.name: t for t in memory_tools_of(session, True)}
        assert tools["memory_write"].invoke({"text": "Ana reviews every PR touching billing/"}).startswith("saved to")
        tools["memory_write"].invoke({"text": "deploys go out on Thursdays", "target": "memory", "section": "Ops"})
        read = tools["memory_read"].invoke({"path": "MEMORY.md"})
        assert read.endswith("3: ## Ops\n4: \n5: - deploys go out on Thursdays")
        assert store.index_path() is None  # no local file: the index is built in memory at each search
        found = tools["memory_search"].invoke({"query": "who reviews billing"})
        assert found.startswith("[memory/") and "Ana reviews every PR" in found
        assert "deploys go out on Thursdays" in tools["memory_search"].invoke({"query": "when do deploys go out"})


def test_the_index_reads_the_archive_through_the_store() -> None:
    store = OnlyStore()
    with Session(store, settings=_settings()) as session:
        session.add([Message.of("user", "the build broke on the arm runner " + "words " * 300)])
        session.add([Message.of("assistant", "ok")])
        session.compact(now=NOW)
    with MemoryIndex(store) as index:
        update = index.update()
        assert update.chunks >= 1
        assert any(info.name.startswith("dialog/") for info in index.files())


def test_a_local_folder_keeps_its_index_file_and_lock_on_disk(tmp_path: Path) -> None:
    folder = LocalFolder(tmp_path)
    path = folder.index_path()
    assert path == os.path.join(os.fspath(tmp_path), INDEX_FILE)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    with folder.memory_lock():
        assert (tmp_path / "memory" / ".lock").is_file()
    assert MemoryFolder().index_path() is None
