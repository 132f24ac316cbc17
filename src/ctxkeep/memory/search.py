"""Memory search: full text (BM25 over FTS5) and vectors (cosine, sqlite-vec), fused into one ranking.

The two lists are fused by reciprocal rank (each chunk scores ``w / (60 + rank)`` in every list it is in):
a chunk both find rises above one only one finds, a query that shares no word with its answer is still
answered by the vectors, and an exact name or number the vectors blur is still found by the words. Scores
of the two kinds are never compared directly, so neither needs calibrating. With no vectors, the ranking
is full text alone.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass
from typing import Literal

from .index import SOURCES, MemoryIndex
from .terms import match_query

Mode = Literal["hybrid", "fts", "vector"]
MODES: tuple[Mode, ...] = ("hybrid", "fts", "vector")
# The usual constant of reciprocal rank fusion: ranks 1 and 2 differ little, ranks 1 and 50 much.
RRF_K = 60
# How many candidates each list gives the fusion, per result asked for.
_CANDIDATES = 8


@dataclass(frozen=True, slots=True)
class Hit:
    """A search result: where it is (file, lines, 1-based inclusive), its fused score and text."""

    path: str
    start_line: int
    end_line: int
    score: float
    text: str
    source: str
    fts_rank: int | None = None
    vector_rank: int | None = None

    def to_dict(self) -> dict[str, object]:
        """A JSON-ready form."""
        return {
            "path": self.path,
            "start_line": self.start_line,
            "end_line": self.end_line,
            "score": round(self.score, 6),
            "source": self.source,
            "text": self.text,
        }


def search(
    index: MemoryIndex, query: str, *, k: int = 5, source: str | None = "memory", mode: Mode = "hybrid"
) -> list[Hit]:
    """The `k` best chunks for `query` in `source` ("memory", "dialog", or None for both)."""
    if not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be a whole number, 1 or more; got {k!r}")
    if source is not None and source not in SOURCES:
        raise ValueError(f"source must be one of {', '.join(SOURCES)} or None; got {source!r}")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}; got {mode!r}")
    wanted = k * _CANDIDATES
    lists: list[tuple[str, list[int], float]] = []
    if mode != "vector":
        lists.append(("fts", _fts(index, query, source, wanted), 1.0))
    if mode != "fts" and index.vectors and query.strip():
        lists.append(("vector", _nearest(index, query, source, wanted), 1.0))
    scores: dict[int, float] = {}
    ranks: dict[int, dict[str, int]] = {}
    for kind, ids, weight in lists:
        for rank, chunk in enumerate(ids, 1):
            scores[chunk] = scores.get(chunk, 0.0) + weight / (RRF_K + rank)
            ranks.setdefault(chunk, {})[kind] = rank
    best = sorted(scores, key=lambda c: (-scores[c], c))[:k]
    return [_hit(index, c, scores[c], ranks[c]) for c in best]


def _fts(index: MemoryIndex, query: str, source: str | None, limit: int) -> list[int]:
    expression = match_query(query)
    if expression is None:
        return []
    sql = (
        "SELECT c.id FROM chunks_fts JOIN chunks c ON c.id = chunks_fts.rowid WHERE chunks_fts MATCH ?"
        + (" AND c.source = ?" if source else "")
        + " ORDER BY bm25(chunks_fts), c.id LIMIT ?"
    )
    args = (expression, source, limit) if source else (expression, limit)
    return [row[0] for row in index.db.execute(sql, args)]


def _nearest(index: MemoryIndex, query: str, source: str | None, limit: int) -> list[int]:
    assert index.embedder is not None
    vector = array("f", index.embedder.embed([query])[0]).tobytes()
    sql = "SELECT rowid FROM chunks_vec WHERE embedding MATCH ? AND k = ?" + (" AND source = ?" if source else "")
    args = (vector, limit, source) if source else (vector, limit)
    return [row[0] for row in index.db.execute(sql + " ORDER BY distance", args)]


def _hit(index: MemoryIndex, chunk: int, score: float, ranks: dict[str, int]) -> Hit:
    path, start, end, text, source = index.db.execute(
        "SELECT path, start_line, end_line, text, source FROM chunks WHERE id = ?", (chunk,)
    ).fetchone()
    return Hit(
        path=path,
        start_line=start,
        end_line=end,
        score=score,
        text=text,
        source=source,
        fts_rank=ranks.get("fts"),
        vector_rank=ranks.get("vector"),
    )
