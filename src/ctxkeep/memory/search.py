"""Memory search: full text (FTS5) and vectors (cosine, sqlite-vec), each result scored 0-100 and shown by its lines.
On PostgreSQL the index is the database's (`ctxkeep.memory.pgindex`: tsvector and pgvector), ranked by the same rule.

    candidates   the chunks full text ranks best (BM25) and the chunks nearest the query's vector
    words        of the query's words ("the", "how" and other common words aside), the share the chunk holds,
                 as the full-text index reads them (stemmed: "packages" holds "package")
    meaning      the cosine of the query's and the chunk's vectors on a fixed scale: `COSINE_FLOOR` (what
                 MiniLM gives unrelated English texts) or less is 0, `COSINE_FULL` or more is 1
    relevance    100 × (1 − (1 − words) × (1 − meaning)): either half alone can make a result, both together
                 make a better one; words alone with no vectors. Results under `min_relevance` are left out,
                 so a query nothing matches well gets no answer rather than the least bad chunks.

Each score is on a fixed scale, so 80 means the same in any workspace and a threshold can be set once. Each
result carries the lines of its chunk that hold the most query words (`Hit.lines`), with a line of context;
the chunk's whole text stays in `Hit.text`.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal, Protocol

from ctxkeep.store import IndexDatabase, Store

from .embed import Embedder
from .index import SOURCES, MemoryIndex
from .terms import content_terms, index_terms, is_cjk, match_query, match_term, query_terms

if TYPE_CHECKING:
    from .pgindex import Candidates, PostgresIndex

Mode = Literal["hybrid", "fts", "vector"]
MODES: tuple[Mode, ...] = ("hybrid", "fts", "vector")
# The usual constant of reciprocal rank fusion, which breaks ties of relevance: ranks 1 and 2 differ little.
RRF_K = 60
# How many candidates each half gives, per result asked for.
_CANDIDATES = 8
# The cosine scale of `meaning`: MiniLM gives 95% of unrelated English pairs 0.2 or less, and a paraphrase of
# a note about 0.5-0.8; whole chunks of many entries dilute it, so full marks come at 0.6.
COSINE_FLOOR = 0.2
COSINE_FULL = 0.6
# Below this relevance (0-100) a chunk is no answer: a query sharing one word of three, or a vaguely related
# chunk (cosine under ~0.33), is left out.
MIN_RELEVANCE = 30.0
# Of each result, how many of its best lines (those holding the most query words) are shown, each with
# `CONTEXT` lines either side.
SHOWN_MATCHES = 2
CONTEXT = 1


@dataclass(frozen=True, slots=True)
class Line:
    """One line of a result: its number in the file (1-based), its text, and whether it holds a query word."""

    number: int
    text: str
    match: bool


@dataclass(frozen=True, kw_only=True, slots=True)
class Hit:
    """A search result: where its chunk is (file, lines, 1-based inclusive), its relevance (0-100) and the two
    halves behind it (0-1; None when that half did not look), the lines to show and the chunk's whole text."""

    path: str
    start_line: int
    end_line: int
    score: float
    text: str
    source: str
    words: float | None = None
    meaning: float | None = None
    lines: tuple[Line, ...] = ()
    fts_rank: int | None = None
    vector_rank: int | None = None

    @property
    def line(self) -> int:
        """The file line to look at first: the best-matching line, else the chunk's first."""
        return next((x.number for x in self.lines if x.match), self.start_line)

    def to_dict(self) -> dict[str, object]:
        """A JSON-ready form."""
        return {
            "path": self.path,
            "line": self.line,
            "start_line": self.start_line,
            "end_line": self.end_line,
            "score": round(self.score),
            "words": None if self.words is None else round(self.words, 3),
            "meaning": None if self.meaning is None else round(self.meaning, 3),
            "source": self.source,
            "lines": [{"line": x.number, "text": x.text, "match": x.match} for x in self.lines],
            "text": self.text,
        }


class DatabaseIndex(Protocol):
    """An index kept outside SQLite (PostgreSQL's): it gives the candidates and what ranks them in one round
    trip, and `search` ranks them by the same rule as the SQLite index's."""

    @property
    def vectors(self) -> bool:
        """Whether its chunks carry vectors of its embedder's model (and so the meaning half looks)."""
        ...

    @property
    def embedder(self) -> Embedder | None:
        """What turns the query into its vector."""
        ...

    def candidates(self, query: str, source: str | None, limit: int, vector: list[float] | None) -> Candidates:
        """At most `limit` candidates of each half (none of full text with no `query`, none of vectors with no
        `vector`) and what `search` needs of them, in one statement."""
        ...

    def line_counts(self, lines: list[str], terms: list[str]) -> list[int]:
        """How many of `terms` each line holds, read as the index reads its chunks."""
        ...


def open_index(store: Store, *, embedder: Embedder | None = None) -> MemoryIndex | PostgresIndex:
    """The index to search `store` with: the one its database keeps (PostgreSQL), else the SQLite one (a local
    file, or one in memory built from the files). Close it, or use ``with``; `update` it before searching."""
    if isinstance(store, IndexDatabase):
        from .pgindex import PostgresIndex

        return PostgresIndex(store, embedder=embedder)
    return MemoryIndex(store, embedder=embedder)


def search(
    index: MemoryIndex | DatabaseIndex,
    query: str,
    *,
    k: int = 5,
    source: str | None = "memory",
    mode: Mode = "hybrid",
    min_relevance: float = MIN_RELEVANCE,
) -> list[Hit]:
    """At most `k` chunks for `query` in `source` ("memory", "dialog", or None for both), best first, none
    under `min_relevance` (0-100; 0 keeps every candidate either half finds something in)."""
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise ValueError(f"k must be a whole number, 1 or more; got {k!r}")
    if source is not None and source not in SOURCES:
        raise ValueError(f"source must be one of {', '.join(SOURCES)} or None; got {source!r}")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}; got {mode!r}")
    if isinstance(min_relevance, bool) or not isinstance(min_relevance, int | float) or not 0 <= min_relevance <= 100:
        raise ValueError(f"min_relevance must be a number from 0 to 100; got {min_relevance!r}")
    if not isinstance(index, MemoryIndex):
        return _search_database(index, query, k=k, source=source, mode=mode, min_relevance=min_relevance)
    wanted = k * _CANDIDATES
    text = _Sqlite(index)
    fts = text.full_text(query, source, wanted) if mode != "vector" else []
    vectors = index if index.vectors and mode != "fts" and query.strip() else None
    vector = array("f", _embed(vectors, query)).tobytes() if vectors is not None else None
    nearest = _nearest(vectors, vector, source, wanted) if vectors is not None and vector is not None else {}
    candidates = list(dict.fromkeys([*fts, *nearest]))
    words = _words(text.holding, text.anywhere, query, source, candidates) if mode != "vector" else {}
    meaning = _meanings(vectors, vector, candidates, nearest) if vectors is not None and vector is not None else {}
    ranked = _ranked(candidates, (fts, nearest), (words if mode != "vector" else None, meaning), min_relevance)
    rows = text.chunks([chunk for _, chunk, _, _ in ranked[:k]])
    return _hits(text.line_counts, rows, ranked[:k], (fts, nearest), query)


def _search_database(
    index: DatabaseIndex, query: str, *, k: int, source: str | None, mode: Mode, min_relevance: float
) -> list[Hit]:
    """`search` on an index kept in a database: its candidates and what ranks them in one round trip."""
    wanted = k * _CANDIDATES
    looks = index.vectors and index.embedder is not None and mode != "fts" and bool(query.strip())
    vector = index.embedder.embed([query])[0] if looks and index.embedder is not None else None
    found = index.candidates(query if mode != "vector" else "", source, wanted, vector)
    candidates = list(dict.fromkeys([*found.fts, *found.nearest]))
    words = {}
    if mode != "vector":
        held, anywhere = found.held, found.anywhere
        words = _words(lambda t, _: held.get(t, set()), lambda t, _: anywhere.get(t, False), query, source, candidates)
    meaning = {c: meaning_of(1.0 - d) for c, d in found.distance.items()} if vector is not None else {}
    ranked = _ranked(
        candidates, (found.fts, found.nearest), (words if mode != "vector" else None, meaning), min_relevance
    )
    return _hits(index.line_counts, found.rows, ranked[:k], (found.fts, found.nearest), query)


def _ranked(
    candidates: list[int],
    ranks: tuple[Sequence[int], dict[int, float]],
    halves: tuple[dict[int, float] | None, dict[int, float]],
    min_relevance: float,
) -> list[tuple[float, int, float | None, float | None]]:
    """The candidates with their relevance and halves, best first, none under `min_relevance` (`words` None:
    the words half did not look)."""
    words, meaning = halves
    fts_rank = {c: r for r, c in enumerate(ranks[0], 1)}
    vector_rank = {c: r for r, c in enumerate(ranks[1], 1)}
    scored = []
    for chunk in candidates:
        w = words.get(chunk, 0.0) if words is not None else None
        m = meaning.get(chunk)
        relevance = 100 * (1 - (1 - (w or 0.0)) * (1 - (m or 0.0)))
        if relevance >= max(min_relevance, 1e-9):  # a chunk neither half finds anything in is never an answer
            scored.append((relevance, chunk, w, m))
    # Ties (common in full text: several chunks holding every word) go to the chunk both halves rank higher
    # (reciprocal rank fusion: `1 / (60 + rank)` from each list a chunk is in).
    fused = {c: sum(1 / (RRF_K + r[c]) for r in (fts_rank, vector_rank) if c in r) for c in candidates}
    scored.sort(key=lambda s: (-round(s[0], 6), -fused[s[1]], s[1]))
    return scored


def _hits(
    line_counts: Callable[[list[str], list[str]], list[int]],
    rows: dict[int, tuple[str, int, int, str, str]],
    ranked: list[tuple[float, int, float | None, float | None]],
    ranks: tuple[Sequence[int], dict[int, float]],
    query: str,
) -> list[Hit]:
    fts_rank = {c: r for r, c in enumerate(ranks[0], 1)}
    vector_rank = {c: r for r, c in enumerate(ranks[1], 1)}
    hits = [
        _hit(rows[chunk], relevance, (w, m), (fts_rank.get(chunk), vector_rank.get(chunk)))
        for relevance, chunk, w, m in ranked
    ]
    return _with_lines(line_counts, hits, content_terms(query_terms(query)))


class _Sqlite:
    """The SQLite index's full text (FTS5): candidates, the words they hold, their chunks."""

    def __init__(self, index: MemoryIndex) -> None:
        self.db = index.db

    def full_text(self, query: str, source: str | None, limit: int) -> list[int]:
        expression = match_query(query)
        if expression is None:
            return []
        sql = (
            "SELECT c.id FROM chunks_fts JOIN chunks c ON c.id = chunks_fts.rowid WHERE chunks_fts MATCH ?"
            + (" AND c.source = ?" if source else "")
            + " ORDER BY bm25(chunks_fts), c.id LIMIT ?"
        )
        args = (expression, source, limit) if source else (expression, limit)
        return [row[0] for row in self.db.execute(sql, args)]

    def holding(self, term: str, candidates: Sequence[int]) -> set[int]:
        marks = ",".join("?" * len(candidates))
        sql = f"SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH ? AND rowid IN ({marks})"
        return {row[0] for row in self.db.execute(sql, (match_term(term), *candidates))}

    def anywhere(self, term: str, source: str | None) -> bool:
        sql = "SELECT 1 FROM chunks_fts JOIN chunks c ON c.id = chunks_fts.rowid WHERE chunks_fts MATCH ?"
        sql += " AND c.source = ? LIMIT 1" if source else " LIMIT 1"
        args = (match_term(term), source) if source else (match_term(term),)
        return self.db.execute(sql, args).fetchone() is not None

    def chunks(self, ids: Sequence[int]) -> dict[int, tuple[str, int, int, str, str]]:
        sql = "SELECT path, start_line, end_line, text, source FROM chunks WHERE id = ?"
        return {chunk: tuple(self.db.execute(sql, (chunk,)).fetchone()) for chunk in ids}

    def line_counts(self, lines: list[str], terms: list[str]) -> list[int]:
        return line_counts(self.db, lines, terms)


def _embed(index: MemoryIndex, query: str) -> list[float]:
    assert index.embedder is not None
    return index.embedder.embed([query])[0]


def _nearest(index: MemoryIndex, vector: bytes, source: str | None, limit: int) -> dict[int, float]:
    """The chunks nearest `vector`, nearest first, with their cosine distance."""
    sql = "SELECT rowid, distance FROM chunks_vec WHERE embedding MATCH ? AND k = ?"
    sql += " AND source = ?" if source else ""
    args = (vector, limit, source) if source else (vector, limit)
    return {row[0]: row[1] for row in index.db.execute(sql + " ORDER BY distance", args)}


def _words(
    holding: Callable[[str, Sequence[int]], set[int]],
    anywhere: Callable[[str, str | None], bool],
    query: str,
    source: str | None,
    candidates: Sequence[int],
) -> dict[int, float]:
    """Of the query's words, the share each candidate holds (common English words aside): `holding` says which
    candidates hold a word, `anywhere` whether any chunk of `source` does."""
    terms = content_terms(query_terms(query))
    if not terms or not candidates:
        return {}
    held: dict[int, int] = {}
    counted = 0
    for term in terms:
        found = holding(term, candidates)
        if not found and is_cjk(term) and not anywhere(term, source):
            # A pair of characters no chunk holds spans two words ("周四的会议" -> "四的"): not a word asked for.
            continue
        counted += 1
        for chunk in found:
            held[chunk] = held.get(chunk, 0) + 1
    return {chunk: n / counted for chunk, n in held.items()} if counted else {}


def _meanings(
    index: MemoryIndex, vector: bytes, candidates: Sequence[int], nearest: dict[int, float]
) -> dict[int, float]:
    """Each candidate's cosine with the query on the 0-1 scale of `meaning` (a chunk with no vector has none)."""
    distance = dict(nearest)
    others = [c for c in candidates if c not in distance]
    if others:
        marks = ",".join("?" * len(others))
        sql = f"SELECT rowid, vec_distance_cosine(embedding, ?) FROM chunks_vec WHERE rowid IN ({marks})"
        distance.update({row[0]: row[1] for row in index.db.execute(sql, (vector, *others))})
    return {chunk: meaning_of(1.0 - d) for chunk, d in distance.items()}


def meaning_of(cosine: float) -> float:
    """A cosine on the fixed 0-1 scale of `meaning`: `COSINE_FLOOR` or less is 0, `COSINE_FULL` or more 1."""
    return min(1.0, max(0.0, (cosine - COSINE_FLOOR) / (COSINE_FULL - COSINE_FLOOR)))


def _hit(
    row: tuple[str, int, int, str, str],
    relevance: float,
    halves: tuple[float | None, float | None],
    ranks: tuple[int | None, int | None],
) -> Hit:
    path, start, end, text, source = row
    return Hit(
        path=path,
        start_line=start,
        end_line=end,
        score=relevance,
        text=text,
        source=source,
        words=halves[0],
        meaning=halves[1],
        fts_rank=ranks[0],
        vector_rank=ranks[1],
    )


def _with_lines(
    line_counts: Callable[[list[str], list[str]], list[int]], hits: list[Hit], terms: list[str]
) -> list[Hit]:
    """The hits with the lines to show: those holding the most query words, with `CONTEXT` lines around."""
    if not hits:
        return hits
    texts = [hit.text.splitlines() or [""] for hit in hits]
    counts = line_counts([line for lines in texts for line in lines], terms)
    out, at = [], 0
    for hit, lines in zip(hits, texts, strict=True):
        held = counts[at : at + len(lines)]
        at += len(lines)
        # A markdown chunk's lines are the file's; an archive chunk is one message on one file line.
        numbers = [hit.start_line + i for i in range(len(lines))] if hit.end_line > hit.start_line else None
        out.append(_shown(hit, lines, held, numbers))
    return out


def _shown(hit: Hit, lines: list[str], held: list[int], numbers: list[int] | None) -> Hit:
    top = max(held, default=0)
    # Only the lines holding the most words: a line holding one common word of several is no match to show.
    best = [i for i, n in enumerate(held) if n and n == top][:SHOWN_MATCHES]
    if best:
        keep = sorted({j for i in best for j in range(i - CONTEXT, i + CONTEXT + 1) if 0 <= j < len(lines)})
    else:  # found by meaning alone: its first lines say what it is about
        keep = [i for i, line in enumerate(lines) if line.strip()][: 1 + 2 * CONTEXT]
    matched = set(best)
    shown = tuple(
        Line(number=numbers[i] if numbers else hit.start_line, text=lines[i], match=i in matched) for i in keep
    )
    return replace(hit, lines=shown)


def line_counts(db: Any, lines: list[str], terms: list[str]) -> list[int]:
    """How many of `terms` each line holds, read by the same tokenizer and stemmer as the index (in a temporary
    table of the SQLite connection `db`)."""
    counts = [0] * len(lines)
    if not terms:
        return counts
    db.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.shown_lines USING fts5(terms, tokenize='porter unicode61')")
    db.execute("DELETE FROM temp.shown_lines")
    db.executemany(
        "INSERT INTO temp.shown_lines (rowid, terms) VALUES (?, ?)",
        [(i + 1, index_terms(line)) for i, line in enumerate(lines)],
    )
    for term in terms:
        for (row,) in db.execute("SELECT rowid FROM temp.shown_lines WHERE shown_lines MATCH ?", (match_term(term),)):
            counts[row - 1] += 1
    db.execute("DELETE FROM temp.shown_lines")
    return counts
