"""Memory search on PostgreSQL (ctxkeep.memory.pgindex): the index kept in the database finds and ranks what the
folder's SQLite index does for the same files, follows edits by content hash, keeps workspaces apart, and says
once that it searches full text only."""

from __future__ import annotations

import logging
import random
import uuid
from collections.abc import Iterator
from datetime import UTC, date, datetime

import pytest

from ctxkeep.archive import Archive
from ctxkeep.archive import append as archive_append
from ctxkeep.folder import MemoryFolder
from ctxkeep.memory import pgindex
from ctxkeep.memory.files import append_daily, append_to_section
from ctxkeep.memory.index import MemoryIndex
from ctxkeep.memory.pgindex import PostgresIndex
from ctxkeep.memory.search import Hit, open_index, search
from ctxkeep.messages import Message, ToolCall, ToolResult
from ctxkeep.postgres.store import PostgresStore
from ctxkeep.store import Store

pytestmark = pytest.mark.extra("postgres")

WORDS = [
    "deploy",
    "deploys",
    "deployed",
    "package",
    "packages",
    "install",
    "installed",
    "installing",
    "billing",
    "review",
    "reviews",
    "reviewer",
    "staging",
    "database",
    "port",
    "migration",
    "migrations",
    "thursday",
    "friday",
    "cache",
    "caches",
    "cached",
    "token",
    "tokens",
    "rotate",
    "secret",
    "editor",
    "theme",
    "dark",
    "mode",
    "pytest",
    "failure",
    "failed",
    "fixed",
    "module",
    "import",
    "latency",
    "replica",
    "replicas",
]
CHINESE = ("用户喜欢深色主题", "周四的会议改到周五", "数据库迁移失败了", "部署在周四", "缓存过期时间是十分钟")
QUERIES = (
    "how do we deploy packages",
    "installing package",
    "billing reviewer",
    "staging database port migration",
    "the and of",
    "cached tokens rotate secret",
    "用户喜欢",
    "周四的会议",
    "迁移",
    "周",
    "深色 theme",
    "pytest failed module import",
    "replicas latency friday",
    "nothing matches zebra",
)


@pytest.fixture
def pg_store(postgres_url: str) -> Iterator[PostgresStore]:
    with PostgresStore(postgres_url, f"search/{uuid.uuid4().hex}") as store:
        yield store


def _fill(store: Store, seed: int) -> None:
    """Day logs, a MEMORY.md section and an archive made from a seeded mix of English and Chinese."""
    rng = random.Random(seed)
    for day in range(1, 6):
        at = datetime(2026, 3, day, 9, 0, tzinfo=UTC)
        for _ in range(rng.randint(3, 12)):
            words = rng.choices(WORDS, k=rng.randint(4, 40))
            text = " ".join(words) + (f" {rng.choice(CHINESE)}" if rng.random() < 0.4 else "")
            append_daily(store, text, at=at)
    for _ in range(4):
        append_to_section(store, " ".join(rng.choices(WORDS, k=12)) + " " + rng.choice(CHINESE), section="Notes")
    messages = []
    for i in range(12):
        words = " ".join(rng.choices(WORDS, k=rng.randint(3, 15)))
        if i % 3 == 2:
            call = ToolCall(id=f"c{i}", name="bash", arguments='{"command": "pytest"}')
            messages.append(Message(role="assistant", content=(call,)))
            messages.append(Message(role="tool", content=(ToolResult(call_id=f"c{i}", content=words),)))
        else:
            messages.append(Message.of("user", words + " " + rng.choice(CHINESE)))
    archive_append(store, Archive(), messages, date(2026, 3, 6))


def _shown(hits: list[Hit]) -> list[tuple[object, ...]]:
    return [(h.path, h.start_line, h.end_line, round(h.score, 6), h.words, h.fts_rank, h.lines) for h in hits]


@pytest.mark.parametrize("seed", [1, 2])
def test_search_on_postgres_finds_and_ranks_what_the_folder_does(pg_store: PostgresStore, seed: int) -> None:
    folder = MemoryFolder()
    _fill(folder, seed)
    _fill(pg_store, seed)
    with MemoryIndex(folder) as sqlite, open_index(pg_store) as pg:
        assert isinstance(pg, PostgresIndex)
        sqlite.update()
        done = pg.update()
        assert done.chunks == sqlite.stats()["chunks"] and done.files == 7
        assert pg.stats() == sqlite.stats()
        found = 0
        for query in QUERIES:
            for source in ("memory", "dialog", None):
                for k in (3, 10):
                    want = search(sqlite, query, k=k, source=source, mode="fts", min_relevance=0)
                    got = search(pg, query, k=k, source=source, mode="fts", min_relevance=0)
                    assert _shown(got) == _shown(want), (query, source, k)
                    found += len(want)
        assert found > 100  # the queries do find things: the comparison is not of empty lists


def test_an_edited_file_is_indexed_again_and_an_unchanged_one_is_not(pg_store: PostgresStore) -> None:
    pg_store.write_memory("MEMORY.md", b"# Notes\n- the staging database listens on port 6543\n")
    with open_index(pg_store) as index:
        assert index.update().chunks == 1
        assert [h.path for h in search(index, "staging port")] == ["MEMORY.md"]
        assert index.update().files == 0  # nothing changed since
        pg_store.write_memory("MEMORY.md", b"# Notes\n- the staging database listens on port 6543\n")
        assert index.update().chunks == 0  # rewritten with the same bytes: touched, not changed
        pg_store.write_memory("MEMORY.md", b"# Notes\n- billing reviews go to Ana\n")
        done = index.update()
        assert (done.files, done.chunks) == (1, 1)
        assert search(index, "staging port") == []
        assert [h.line for h in search(index, "who reviews billing")] == [2]
        pg_store.write_memory("MEMORY.md", b"")
        index.update()
        assert index.stats()["chunks"] == 0 and search(index, "billing") == []


def test_a_second_workspace_does_not_find_the_first_ones_memory(postgres_url: str) -> None:
    name = uuid.uuid4().hex
    with PostgresStore(postgres_url, f"{name}/a") as a, PostgresStore(postgres_url, f"{name}/b") as b:
        append_daily(a, "the deploy key rotates every friday", at=datetime(2026, 3, 1, tzinfo=UTC))
        append_daily(b, "lunch is at noon", at=datetime(2026, 3, 1, tzinfo=UTC))
        with open_index(a) as first, open_index(b) as second:
            first.update()
            second.update()
            assert len(search(first, "deploy key friday")) == 1
            assert search(second, "deploy key friday", min_relevance=0) == []
            assert second.stats()["chunks"] == 1


def test_full_text_only_is_said_once(pg_store: PostgresStore, caplog: pytest.LogCaptureFixture) -> None:
    class Fixed:
        name, dim = "fixed", 2

        def embed(self, texts: list[str]) -> list[list[float]]:
            return [[1.0, 0.0] for _ in texts]

    pgindex._said_full_text_only = False
    with caplog.at_level(logging.WARNING, logger="ctxkeep"):
        for _ in range(2):
            with open_index(pg_store, embedder=Fixed()) as index:
                assert not index.vectors
    said = [r.message for r in caplog.records if "full text only" in r.message]
    assert len(said) == 1 and "PostgreSQL" in said[0]


def test_a_database_of_schema_1_migrates_to_the_index_tables(postgres_url: str) -> None:
    import psycopg

    from ctxkeep.postgres import schema
    from ctxkeep.postgres.database import migrate

    name = f"db_{uuid.uuid4().hex}"
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    url = postgres_url.replace("@/postgres?", f"@/{name}?")
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(schema.MIGRATIONS[0])
            conn.execute("CREATE TABLE ctxkeep_schema (version integer NOT NULL)")
            conn.execute("INSERT INTO ctxkeep_schema VALUES (1)")
        assert migrate(url) == (1, schema.VERSION)
        with PostgresStore(url, "upgraded") as store, open_index(store) as index:
            append_daily(store, "the cache expires after ten minutes", at=datetime(2026, 3, 1, tzinfo=UTC))
            index.update()
            assert len(search(index, "cache expires")) == 1
    finally:
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE {name} WITH (FORCE)")


def test_two_processes_updating_at_once_index_each_file_once(postgres_url: str) -> None:
    import threading

    name = f"search/{uuid.uuid4().hex}"
    with PostgresStore(postgres_url, name) as first, PostgresStore(postgres_url, name) as second:
        _fill(first, 3)
        with MemoryIndex(MemoryFolder()) as alone:
            _fill(alone.store, 3)
            alone.update()
            want = alone.stats()["chunks"]
        indexes = [open_index(first), open_index(second)]
        threads = [threading.Thread(target=index.update) for index in indexes]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert [index.stats()["chunks"] for index in indexes] == [want, want]


def test_the_totals_bm25_reads_follow_every_change(postgres_url: str) -> None:
    from ctxkeep.postgres.database import drop_workspace

    name = f"search/{uuid.uuid4().hex}"

    def totals(store: PostgresStore) -> tuple[object, ...]:
        with store.connection("read") as conn:
            kept = conn.execute(
                "SELECT chunks, tokens FROM ctxkeep_index_total WHERE workspace = %s", (store.workspace_id,)
            ).fetchone()
            counted = conn.execute(
                "SELECT count(*), sum(length) FROM ctxkeep_index_chunk WHERE workspace = %s", (store.workspace_id,)
            ).fetchone()
        return (kept, counted)

    with PostgresStore(postgres_url, name) as store, open_index(store) as index:
        _fill(store, 5)
        index.update()
        kept, counted = totals(store)
        assert kept == counted and counted[0] > 10
        store.write_memory("MEMORY.md", b"# Notes\n- only this now\n")
        index.update()
        kept, counted = totals(store)
        assert kept == counted
        workspace = store.workspace_id
    drop_workspace(postgres_url, name)
    with PostgresStore(postgres_url, "search/other") as other, other.connection("read") as conn:
        left = conn.execute("SELECT count(*) FROM ctxkeep_index_total WHERE workspace = %s", (workspace,)).fetchone()
    assert left == (0,)
