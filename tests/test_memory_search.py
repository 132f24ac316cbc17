"""The memory index and search: chunks with line ranges, Chinese and English words, incremental updates,
vectors from the bundled MiniLM, hybrid ranking, the archive, and full text alone with no embedder."""

from __future__ import annotations

import itertools
import os
import stat
from collections.abc import Sequence
from datetime import UTC, date, datetime

import pytest

from ctxkeep.archive import Archive
from ctxkeep.archive import append as archive_append
from ctxkeep.disk import INDEX_FILE
from ctxkeep.errors import StorageError
from ctxkeep.folder import LocalFolder, MemoryFolder
from ctxkeep.memory.chunks import markdown_chunks
from ctxkeep.memory.embed import MiniLMEmbedder, default_embedder
from ctxkeep.memory.files import append_daily, append_to_section
from ctxkeep.memory.index import MemoryIndex
from ctxkeep.memory.search import search
from ctxkeep.memory.terms import index_terms, match_query
from ctxkeep.messages import Message, ToolCall, ToolResult
from ctxkeep.tokens import get_counter

NOW = datetime(2026, 3, 14, 9, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def minilm() -> MiniLMEmbedder:
    embedder = default_embedder()
    assert isinstance(embedder, MiniLMEmbedder), "the memory extra (scripts/test installs it) brings MiniLM"
    return embedder


def test_chinese_is_cut_into_pairs_and_english_kept_as_words() -> None:
    assert index_terms("用户喜欢深色 theme, Port 8080") == "用户 户喜 喜欢 欢深 深色 theme port 8080"
    assert match_query('深色 "x" OR') == '"深色" OR "x" OR "or"'
    assert match_query("猫") == '"猫"*'
    assert match_query("  ...  ") is None


def test_chunks_stay_under_the_size_overlap_and_cover_every_line() -> None:
    counter = get_counter("o200k_base")
    text = "\n".join(f"line {i}: " + "word " * 30 for i in range(60))
    chunks = markdown_chunks("MEMORY.md", text, counter.count_texts, size=200, overlap=40)
    assert len(chunks) > 3
    for chunk in chunks:
        assert counter.count_text(chunk.text + "\n") <= 200 + 2 * len(chunk.text.splitlines())
        assert chunk.text == "\n".join(text.splitlines()[chunk.start_line - 1 : chunk.end_line])
    for a, b in itertools.pairwise(chunks):
        assert a.start_line < b.start_line <= a.end_line  # overlapping, moving forward
    assert chunks[0].start_line == 1 and chunks[-1].end_line == 60


def _memory(folder: MemoryFolder | LocalFolder) -> None:
    append_daily(folder, "The user prefers dark mode in every editor", at=NOW, tag="preference")
    append_daily(folder, "pytest failed with ModuleNotFoundError; `pip install -e .` fixed it", at=NOW, tag="lesson")
    append_to_section(folder, "用户喜欢深色主题，不喜欢亮色", section="Preferences")
    append_to_section(folder, "部署到生产环境之前必须先跑完整的测试", section="Rules")


def test_full_text_alone_answers_english_and_chinese_with_file_and_lines() -> None:
    folder = MemoryFolder()
    _memory(folder)
    with MemoryIndex(folder, embedder=None) as index:
        assert not index.vectors
        index.update()
        hits = search(index, "ModuleNotFoundError", k=3)
        assert [(h.path, h.start_line, h.end_line) for h in hits] == [("memory/2026-03-14.md", 1, 4)]
        assert "pip install -e ." in hits[0].text
        assert search(index, "深色", k=3)[0].path == "MEMORY.md"
        assert search(index, "生产环境", k=3)[0].path == "MEMORY.md"
        assert search(index, "quantum chromodynamics", k=3) == []


def test_the_index_follows_changes_and_removals_and_rebuilds(tmp_path: os.PathLike[str]) -> None:
    folder = LocalFolder(tmp_path)
    _memory(folder)
    with MemoryIndex(folder) as index:
        first = index.update()
        assert (first.files, first.removed) == (2, 0)
        assert index.update().files == 0  # nothing changed: nothing read
        append_daily(folder, "The deploy key lives in vault path secret/deploy", at=NOW)
        again = index.update()
        assert again.files == 1
        assert search(index, "vault", k=1)[0].path == "memory/2026-03-14.md"
        folder.remove("memory/2026-03-14.md")
        assert index.update().removed == 1
        assert search(index, "vault", k=1) == []
        assert index.rebuild().files == 1
        assert index.stats()["files"] == 1
    mode = stat.S_IMODE(os.stat(os.path.join(os.fspath(tmp_path), INDEX_FILE)).st_mode)
    assert mode == 0o600


def test_a_link_where_the_index_belongs_is_refused(tmp_path: os.PathLike[str]) -> None:
    root = os.path.join(os.fspath(tmp_path), "ws")
    os.makedirs(os.path.join(root, "index"), mode=0o700)
    target = os.path.join(os.fspath(tmp_path), "elsewhere.sqlite")  # beside the workspace
    os.symlink(target, os.path.join(root, INDEX_FILE))
    with pytest.raises(StorageError, match="link"):
        MemoryIndex(LocalFolder(root))
    assert not os.path.exists(target)


@pytest.mark.extra("memory")
def test_vectors_answer_a_query_that_shares_no_word_and_hybrid_keeps_both(minilm: MiniLMEmbedder) -> None:
    folder = MemoryFolder()
    _memory(folder)
    for i, topic in enumerate(
        [
            "invoices are due on the first Monday",
            "shipping labels print on the Zebra printer",
            "the staging database is restored nightly",
            "lunch orders go in the team sheet",
        ]
    ):
        append_daily(folder, topic, at=NOW.replace(day=i + 1))
    with MemoryIndex(folder, embedder=minilm) as index:
        assert index.vectors
        index.update()
        assert index.stats()["vectors"] == index.stats()["chunks"]
        query = "what repairs an absent python package when testing"
        assert search(index, query, k=1, mode="fts") == []  # no word in common
        assert search(index, query, k=1, mode="vector")[0].path == "memory/2026-03-14.md"
        hybrid = search(index, query, k=2)
        assert hybrid[0].path == "memory/2026-03-14.md"
        assert hybrid[0].vector_rank == 1 and hybrid[0].fts_rank is None
        exact = search(index, "Zebra", k=1)  # a name the words find first, whatever the vectors say
        assert exact[0].path == "memory/2026-03-02.md" and exact[0].fts_rank == 1


@pytest.mark.extra("memory")
def test_a_changed_model_starts_the_vectors_over(minilm: MiniLMEmbedder, tmp_path: os.PathLike[str]) -> None:
    class Halves:
        name = "halves"
        dim = 2

        def embed(self, texts: Sequence[str]) -> list[list[float]]:
            return [[0.6, 0.8] for _ in texts]

    folder = LocalFolder(tmp_path)
    _memory(folder)
    with MemoryIndex(folder, embedder=minilm) as index:
        index.update()
    with MemoryIndex(folder, embedder=Halves()) as index:
        assert index.stats()["vectors"] == index.stats()["chunks"] > 0
        assert search(index, "anything", k=1, mode="vector")


def test_the_archive_is_searched_by_message_line() -> None:
    folder = MemoryFolder()
    messages = [
        Message.of("user", "please open the billing report"),
        Message(
            role="assistant",
            content=(ToolCall(id="c1", name="bash", arguments='{"command": "cat /srv/reports/billing-2026.csv"}'),),
        ),
        Message(role="tool", content=(ToolResult(call_id="c1", content="No such file", is_error=True),)),
        Message.of("assistant", "The report is missing; I will regenerate it."),
    ]
    archive_append(folder, Archive(), messages, date(2026, 3, 13))
    _memory(folder)
    with MemoryIndex(folder) as index:
        index.update()
        hits = search(index, "billing-2026.csv", k=3, source="dialog")
        assert (hits[0].path, hits[0].start_line) == ("dialog/2026-03-13.jsonl", 2)
        assert search(index, "billing", k=5, source="memory") == []
        assert {h.source for h in search(index, "billing dark", k=5, source=None)} == {"dialog", "memory"}
    with pytest.raises(ValueError, match="source"):
        search(MemoryIndex(folder), "x", source="elsewhere")


@pytest.mark.extra("memory")
def test_the_archive_gets_vectors_only_when_asked(minilm: MiniLMEmbedder) -> None:
    folder = MemoryFolder()
    archive_append(
        folder, Archive(), [Message.of("user", f"message {i} about the build") for i in range(5)], date(2026, 3, 1)
    )
    append_daily(folder, "one memory entry", at=NOW)
    with MemoryIndex(folder, embedder=minilm) as index:
        index.update()
        assert (index.stats()["chunks"], index.stats()["vectors"]) == (6, 1)
        assert search(index, "build", k=2, source="dialog")[0].vector_rank is None
    with MemoryIndex(MemoryFolder(), embedder=minilm, embed_dialog=True) as index:
        archive_append(index.store, Archive(), [Message.of("user", "compiling the project")], date(2026, 3, 1))
        index.update()
        assert index.stats()["vectors"] == 1
        assert search(index, "build", k=1, source="dialog")[0].vector_rank == 1


def test_relevance_is_the_share_of_words_held_and_a_weak_match_is_no_answer() -> None:
    folder = MemoryFolder()
    for i, text in enumerate(["The wheel is built with hatchling", "CI runs ruff then mypy", "Ana likes small PRs"]):
        append_daily(folder, text, at=NOW.replace(hour=9 + i))
    with MemoryIndex(folder, embedder=None) as index:
        index.update()
        (hit,) = search(index, "how is the wheel built", k=3)
        assert (hit.score, hit.words, hit.meaning) == (100.0, 1.0, None)  # "how", "is", "the" say nothing
        assert [(x.number, x.match) for x in hit.lines] == [(2, False), (3, True), (4, False)]
        assert hit.line == 3 and hit.lines[1].text == "- 09:00 The wheel is built with hatchling"
        assert search(index, "wheel kubernetes", k=3)[0].score == 50.0
        assert search(index, "wheel kubernetes cluster upgrade", k=3) == []  # one word of four
        assert search(index, "wheel kubernetes cluster upgrade", k=3, min_relevance=25)[0].score == 25.0
        with pytest.raises(ValueError, match="min_relevance must be a number from 0 to 100"):
            search(index, "wheel", min_relevance=-1)


def test_a_long_chunk_shows_its_best_lines_not_all_of_it() -> None:
    folder = MemoryFolder()
    entries = [f"entry {i} about the nightly report" for i in range(15)]
    entries[9] = "the backup of db-1 runs at 02:00 from cron"
    for i, text in enumerate(entries):
        append_daily(folder, text, at=NOW.replace(minute=i))
    with MemoryIndex(folder, embedder=None) as index:
        index.update()
        (hit,) = search(index, "when does the db-1 backup run", k=1)
        assert hit.end_line - hit.start_line >= 10
        assert [(x.number, x.match) for x in hit.lines] == [(11, False), (12, True), (13, False)]
        assert "db-1" in hit.lines[1].text and hit.to_dict()["line"] == 12


def test_meaning_is_the_cosine_on_a_fixed_scale() -> None:
    from ctxkeep.memory.search import COSINE_FLOOR, COSINE_FULL, meaning_of

    assert meaning_of(-0.3) == meaning_of(COSINE_FLOOR) == 0.0
    assert meaning_of(COSINE_FULL) == meaning_of(0.95) == 1.0
    assert meaning_of((COSINE_FLOOR + COSINE_FULL) / 2) == pytest.approx(0.5)


@pytest.mark.extra("memory")
def test_an_unrelated_query_finds_nothing_while_a_paraphrase_is_found_by_meaning(minilm: MiniLMEmbedder) -> None:
    folder = MemoryFolder()
    notes = [
        "The build uses hatchling; python -m build makes the wheel and the sdist",
        "CI tests Python 3.11 and 3.13; ruff and mypy must be clean before a commit",
        "pytest failed with ModuleNotFoundError; `pip install -e .` fixed it",
        "The release job uploads to PyPI with trusted publishing",
    ]
    for i, text in enumerate(notes):
        append_daily(folder, text, at=NOW.replace(day=i + 1))
    with MemoryIndex(folder, embedder=minilm) as index:
        index.update()
        assert search(index, "kubernetes", k=3) == []
        assert search(index, "kubernetes pod scheduling", k=3) == []
        assert search(index, "kubernetes", k=3, min_relevance=0) == []  # no word, and a cosine under the floor
        query = "how to fix a missing module error"  # "fix" is the only word it shares: too little alone
        assert search(index, query, k=3, mode="fts") == []
        (hit, *_) = search(index, query, k=3)
        assert hit.path == "memory/2026-03-03.md" and hit.words is not None and hit.words < 0.3
        assert hit.meaning is not None and hit.score >= 30 and hit.vector_rank == 1
