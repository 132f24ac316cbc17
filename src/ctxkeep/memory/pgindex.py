"""Memory's search index kept in the workspace's PostgreSQL database, shared by every process that opens it.

    ctxkeep_index_file    each indexed file (MEMORY.md, day logs, archive): size, time, sha256 of its bytes
    ctxkeep_index_chunk   its chunks (`chunks.py`): line range, text, their words in a tsvector (GIN), and how
                          often each occurs (jsonb), for BM25
    ctxkeep_index_total   how many chunks and words each workspace's index holds (kept by triggers)
    ctxkeep_index_vector  where the server has pgvector: each chunk's vector and the model that made it (HNSW,
                          cosine)

The words are those of the SQLite index: `terms.index_terms` (Chinese cut into pairs), stemmed by SQLite's own
``porter unicode61`` tokenizer (`terms.stems`), stored verbatim as lexemes (no text search configuration
touches them: ``simple`` at its simplest).
So the candidates, their order (FTS5's BM25, computed from the same counts) and the words each holds are
the SQLite index's, and `ctxkeep.memory.search` ranks them by its one rule.

`update` re-reads a file only when its size or time changed and re-indexes it only when its content hash did,
each file in one transaction under an advisory lock, so two processes updating at once do it once. A re-indexed
file keeps the vectors of the chunks whose text it still holds; then the chunks lacking a vector of this index's
model get one (the model changed, or a process without an embedder indexed them), outside any transaction.
A search is one statement (`candidates`): each half's candidates, the words asked that each holds, their
distances and their chunks. Without the `vector` extension (or for an embedder of other than
`schema.VECTOR_DIM` floats) search is full text only, said once in a log line.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ctxkeep.postgres.schema import INDEX_LOCK, VECTOR_DIM, has_vectors
from ctxkeep.store import IndexDatabase, Store

from .chunks import Chunk
from .embed import Embedder
from .index import Update, changes, file_chunks, indexed_files, read_indexed, source_of
from .terms import content_terms, index_terms, is_cjk, query_terms, stems

log = logging.getLogger("ctxkeep")

# FTS5's BM25 constants (fts5_aux.c), so the candidates come in the SQLite index's order.
_K1 = 1.2
_B = 0.75
# A tsvector keeps lexemes of under 2 KB.
_MAX_LEXEME_BYTES = 2046
_said_full_text_only = False
# The workspaces (`Store.where`) and models whose every chunk this process saw given a vector, and when: updates
# look only at the files they re-index, and at the whole index again once `_LOOK_OVER_SECONDS` have passed (chunks
# another process indexed without an embedder get theirs then, not only when this process restarts).
_filled: dict[tuple[str, str], float] = {}
_LOOK_OVER_SECONDS = 60.0
# Vectors computed and written this many chunks at a time.
_EMBED_BATCH = 256
_INSERT = (
    "INSERT INTO ctxkeep_index_chunk (workspace, path, source, start_line, end_line, text, length, terms, counts)"
    " VALUES (%s, %s, %s, %s, %s, %s, %s, array_to_tsvector(%s::text[]), %s::jsonb)"
)


@dataclass(frozen=True, kw_only=True, slots=True)
class Candidates:
    """What the index answers a search with (`search.DatabaseIndex`), in one statement: the candidates of each
    half, what `search` ranks them by, and their chunks."""

    fts: list[int]  # the full-text candidates, best first (BM25 as FTS5's, ties by id)
    nearest: dict[int, float]  # the chunks nearest the query's vector, nearest first: their cosine distance
    distance: dict[int, float]  # every candidate's cosine distance to the query (those with a vector)
    held: dict[str, set[int]]  # for each word asked (`terms.content_terms`), the candidates that hold it
    anywhere: dict[str, bool]  # for each Chinese word asked, whether any chunk of the source holds it
    rows: dict[int, tuple[str, int, int, str, str]]  # each candidate's path, first and last line, text, source


class PostgresIndex:
    """The search index of a PostgreSQL workspace's memory files and archive (a `search.DatabaseIndex`)."""

    def __init__(self, store: Store, *, embedder: Embedder | None = None, embed_dialog: bool = False) -> None:
        """The index of `store`, which must keep it (`IndexDatabase`). With an `embedder` of `VECTOR_DIM` floats on
        a database with pgvector, chunks carry its vectors (the archive's only with `embed_dialog`, as
        `MemoryIndex`); else search is full text only, said once."""
        if not isinstance(store, IndexDatabase):
            raise TypeError(f"{type(store).__name__} keeps no database for the index; use MemoryIndex")
        self.store = store
        self._db: IndexDatabase = store
        self._stems: dict[str, list[str]] = {}
        self.embed_dialog = embed_dialog
        with store.connection("read the memory index in") as conn:
            self._kept = has_vectors(conn)  # the database keeps vectors
        self.vectors = embedder is not None and self._kept and embedder.dim == VECTOR_DIM
        self.embedder = embedder if self.vectors else None
        self._model = f"{embedder.name}/{embedder.dim}" if embedder is not None else ""
        if embedder is not None and not self.vectors:
            _say_full_text_only(store, embedder if self._kept else None)

    def __enter__(self) -> PostgresIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Nothing to close: the store owns the connections."""

    # --- keeping it current ---------------------------------------------------------

    def update(self) -> Update:
        """Bring the index up to date with the files: changed ones (by content hash) re-indexed, removed dropped."""
        workspace = self._db.workspace_id
        with self._db.connection("read the memory index in") as conn:
            rows = conn.execute(
                "SELECT path, size, mtime, sha FROM ctxkeep_index_file WHERE workspace = %s", (workspace,)
            ).fetchall()
        known = {path: (size, mtime, sha) for path, size, mtime, sha in rows}
        changed, gone = changes(indexed_files(self.store), {path: was[:2] for path, was in known.items()})
        chunks = 0
        for info in changed:
            data = read_indexed(self.store, info)
            if data is None:  # removed since the listing
                gone.append(info.name)
                continue
            sha = hashlib.sha256(data).hexdigest()
            was = known.get(info.name)
            pieces = None if was is not None and was[2] == sha else file_chunks(info.name, data)
            rows = [] if pieces is None else _rows(pieces)
            with self._db.connection("update the memory index in") as conn, conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", (INDEX_LOCK, workspace))
                now = conn.execute(
                    "SELECT sha FROM ctxkeep_index_file WHERE workspace = %s AND path = %s", (workspace, info.name)
                ).fetchone()
                if now is None or now[0] != sha:  # else touched, not changed (or another process indexed it)
                    pieces = pieces if pieces is not None else file_chunks(info.name, data)
                    rows = rows or _rows(pieces)
                    self._replace(conn, info.name, rows)
                    chunks += len(rows)
                conn.execute(
                    "INSERT INTO ctxkeep_index_file VALUES (%s, %s, %s, %s, %s) ON CONFLICT (workspace, path)"
                    " DO UPDATE SET size = excluded.size, mtime = excluded.mtime, sha = excluded.sha",
                    (workspace, info.name, info.size, info.mtime, sha),
                )
        for name in gone:
            with self._db.connection("update the memory index in") as conn, conn.transaction():
                conn.execute("DELETE FROM ctxkeep_index_chunk WHERE workspace = %s AND path = %s", (workspace, name))
                conn.execute("DELETE FROM ctxkeep_index_file WHERE workspace = %s AND path = %s", (workspace, name))
        embedded = self._embed_missing([info.name for info in changed] if self._filled() else None)
        return Update(files=len(changed), removed=len(gone), chunks=chunks, embedded=embedded)

    def _replace(self, conn: Any, path: str, rows: list[tuple[Any, ...]]) -> None:
        """The chunks of file `path` replaced by `rows`; a new chunk whose text an old one held takes its vector."""
        workspace = self._db.workspace_id
        old = [
            r[0]
            for r in conn.execute(
                "SELECT id FROM ctxkeep_index_chunk WHERE workspace = %s AND path = %s", (workspace, path)
            ).fetchall()
        ]
        with conn.cursor() as cursor:
            cursor.executemany(_INSERT, [(workspace, *row) for row in rows])
        if old and self._kept:
            conn.execute(
                "INSERT INTO ctxkeep_index_vector (id, workspace, source, model, embedding)"
                " SELECT DISTINCT ON (n.id) n.id, n.workspace, n.source, v.model, v.embedding"
                " FROM ctxkeep_index_chunk n JOIN ctxkeep_index_chunk o ON o.id = ANY(%s) AND o.text = n.text"
                " JOIN ctxkeep_index_vector v ON v.id = o.id"
                " WHERE n.workspace = %s AND n.path = %s AND NOT n.id = ANY(%s)",
                (old, workspace, path, old),
            )
        conn.execute("DELETE FROM ctxkeep_index_chunk WHERE id = ANY(%s)", (old,))  # their vectors with them

    def _filled(self) -> bool:
        """Whether this process gave every chunk of the workspace a vector of this model less than a minute ago."""
        at = _filled.get((self.store.where(""), self._model))
        return at is not None and time.monotonic() - at < _LOOK_OVER_SECONDS

    def _embed_missing(self, paths: list[str] | None = None) -> int:
        """Give the chunks lacking a vector of this index's model one (of the files `paths` only: the whole index
        is looked over once per process and model, ~20 ms at 10,000 chunks); how many texts the embedder turned."""
        if not self.vectors or self.embedder is None or paths == []:
            return 0
        with self._db.connection("read the memory index in") as conn:
            rows = conn.execute(
                "SELECT c.id, c.text FROM ctxkeep_index_chunk c LEFT JOIN ctxkeep_index_vector v ON v.id = c.id"
                " WHERE c.workspace = %s AND (v.id IS NULL OR v.model <> %s)"
                + ("" if self.embed_dialog else " AND c.source <> 'dialog'")
                + ("" if paths is None else " AND c.path = ANY(%s)")
                + " ORDER BY c.id",
                (self._db.workspace_id, self._model, *([] if paths is None else [paths])),
            ).fetchall()
        embedded = 0
        for at in range(0, len(rows), _EMBED_BATCH):
            part = rows[at : at + _EMBED_BATCH]
            texts = list(dict.fromkeys(text for _, text in part))
            vectors = dict(zip(texts, self.embedder.embed(texts), strict=True))
            embedded += len(texts)
            with self._db.connection("update the memory index in") as conn:
                # Joined to the chunks: one another process re-indexed meanwhile is gone, and so is its vector.
                conn.execute(
                    "INSERT INTO ctxkeep_index_vector (id, workspace, source, model, embedding)"
                    " SELECT c.id, c.workspace, c.source, %s, v.e::vector"
                    " FROM unnest(%s::bigint[], %s::text[]) AS v(id, e) JOIN ctxkeep_index_chunk c ON c.id = v.id"
                    " ON CONFLICT (id) DO UPDATE SET model = excluded.model, embedding = excluded.embedding",
                    (self._model, [i for i, _ in part], [_vector(vectors[text]) for _, text in part]),
                )
        if paths is None:
            _filled[(self.store.where(""), self._model)] = time.monotonic()
        return embedded

    def rebuild(self) -> Update:
        """Forget every file and index them all again."""
        with self._db.connection("clear the memory index in") as conn, conn.transaction():
            conn.execute("DELETE FROM ctxkeep_index_chunk WHERE workspace = %s", (self._db.workspace_id,))
            conn.execute("DELETE FROM ctxkeep_index_file WHERE workspace = %s", (self._db.workspace_id,))
        return self.update()

    def add_chunks(self, chunks: Sequence[Chunk]) -> int:
        """Index chunks that no file holds (benchmarks, tests); how many vectors were computed."""
        with self._db.connection("update the memory index in") as conn, conn.transaction(), conn.cursor() as cursor:
            cursor.executemany(_INSERT, [(self._db.workspace_id, *row) for row in _rows(chunks)])
        return self._embed_missing()

    def stats(self) -> dict[str, int]:
        """How many files, chunks and vectors (of any model) the index holds."""
        vectors = "(SELECT count(*) FROM ctxkeep_index_vector WHERE workspace = %(w)s)" if self._kept else "0"
        with self._db.connection("read the memory index in") as conn:
            files, chunks, held = conn.execute(
                "SELECT (SELECT count(*) FROM ctxkeep_index_file WHERE workspace = %(w)s),"
                " (SELECT count(*) FROM ctxkeep_index_chunk WHERE workspace = %(w)s), " + vectors,
                {"w": self._db.workspace_id},
            ).fetchone()
        return {"files": int(files), "chunks": int(chunks), "vectors": int(held)}

    # --- what search asks (search.DatabaseIndex) ------------------------------------

    def candidates(self, query: str, source: str | None, limit: int, vector: list[float] | None) -> Candidates:
        """At most `limit` chunks of each half: those holding any word of `query` best first by FTS5's BM25 (ties
        by id), and with `vector` those nearest it; with the words asked each holds, their distances and their
        chunks. One statement: each round trip costs a loaded server more than the work."""
        terms = [t for t in query_terms(query) if self._lexemes(t)]
        asked = [t for t in content_terms(query_terms(query)) if self._lexemes(t)] if terms else []
        near = vector is not None and self.vectors
        if not terms and not near:
            return Candidates(fts=[], nearest={}, distance={}, held={}, anywhere={}, rows={})
        workspace = self._db.workspace_id
        ctes: list[str] = []
        args: list[object] = []
        if terms:
            sql, more = self._full_text(terms, source, limit)
            ctes.append(sql)
            args += more
        else:
            ctes.append("f AS (SELECT NULL::bigint AS id, NULL::float8 AS score WHERE false)")
        shown = _vector(vector) if vector is not None and near else None
        if shown is not None:
            # The HNSW index holds every workspace's vectors: it scans on (hnsw.iterative_scan, set per connection)
            # until enough of this workspace, model and source are found, or hnsw.max_scan_tuples were read; for a
            # workspace holding few of them the planner takes the exact path (the (workspace, model) index).
            ctes.append(
                "n AS MATERIALIZED (SELECT id, embedding <=> %s::vector AS d FROM ctxkeep_index_vector"
                " WHERE workspace = %s AND model = %s"
                + (" AND source = %s" if source else "")
                + " ORDER BY embedding <=> %s::vector LIMIT %s)"
            )
            args += [shown, workspace, self._model, *([source] if source else []), shown, limit]
        else:
            ctes.append("n AS (SELECT NULL::bigint AS id, NULL::float8 AS d WHERE false)")
        columns = ["c.id", "f.score", "n.d"]
        columns.append("v.embedding <=> %s::vector" if shown is not None else "NULL::float8")
        args += [shown] if shown is not None else []
        columns += ["c.path", "c.start_line", "c.end_line", "c.text", "c.source"]
        for term in asked:
            columns.append("c.terms @@ %s::tsquery")
            args.append(self._tsquery(term))
        cjk = [t for t in asked if is_cjk(t)]
        for term in cjk:
            columns.append(
                "EXISTS (SELECT 1 FROM ctxkeep_index_chunk WHERE workspace = %s AND terms @@ %s::tsquery"
                + (" AND source = %s" if source else "")
                + ")"
            )
            args += [workspace, self._tsquery(term), *([source] if source else [])]
        sql = (
            "WITH "
            + ", ".join(ctes)
            + ", x AS (SELECT id FROM f UNION SELECT id FROM n) SELECT "
            + ", ".join(columns)
            + " FROM x JOIN ctxkeep_index_chunk c ON c.id = x.id LEFT JOIN f ON f.id = c.id LEFT JOIN n ON n.id = c.id"
            + (" LEFT JOIN ctxkeep_index_vector v ON v.id = c.id AND v.model = %s" if shown is not None else "")
        )
        args += [self._model] if shown is not None else []
        with self._db.connection("search the memory index in") as conn:
            found = conn.execute(sql, args, prepare=False).fetchall()
        fts = sorted((r for r in found if r[1] is not None), key=lambda r: (-r[1], r[0]))
        nearest = sorted((r for r in found if r[2] is not None), key=lambda r: (r[2], r[0]))
        return Candidates(
            fts=[r[0] for r in fts],
            nearest={r[0]: float(r[2]) for r in nearest},
            distance={r[0]: float(r[3]) for r in found if r[3] is not None},
            held={t: {r[0] for r in found if r[9 + i]} for i, t in enumerate(asked)},
            anywhere={t: bool(found[0][9 + len(asked) + i]) for i, t in enumerate(cjk)} if found else {},
            rows={r[0]: (r[4], r[5], r[6], r[7], r[8]) for r in found},
        )

    def _full_text(self, terms: list[str], source: str | None, limit: int) -> tuple[str, list[object]]:
        """The CTE ``f`` (id, score): at most `limit` chunks holding any of `terms`, best first by FTS5's BM25."""
        workspace = self._db.workspace_id
        matches = [self._tsquery(t) for t in terms]
        # The index's size (kept by triggers: `schema`), each word's IDF over the whole index (every source, as
        # FTS5 counts it), then FTS5's sum term by term in the same order of operations (fts5_aux.c), so equal
        # scores tie as they do there.
        hits = ", ".join("count(*) FILTER (WHERE terms @@ %s::tsquery)" for _ in terms)
        logs = [f"ln((0.5::float8 + s.n - h.h[{i}]) / (0.5::float8 + h.h[{i}]))" for i in range(1, len(terms) + 1)]
        idf = [f"(CASE WHEN {x} > 0.0::float8 THEN {x} ELSE 1e-6::float8 END)" for x in logs]
        parts: list[str] = []
        score_args: list[object] = []
        for term, weight in zip(terms, idf, strict=True):
            count, count_args = self._count_sql(term)
            parts.append(
                f"{weight} * ({count} * %s::float8) / ({count} + %s::float8 * (1.0::float8 - %s::float8"
                " + %s::float8 * c.length / (s.tokens / s.n)))"
            )
            score_args += [*count_args, _K1 + 1.0, *count_args, _K1, _B, _B]
        score = f"0.0::float8 + {' + '.join(parts)}"
        anything = " | ".join(f"({m})" for m in matches)
        sql = (
            # MATERIALIZED: once each; a planner without statistics yet (a new index) re-ran them per row.
            "s AS MATERIALIZED (SELECT coalesce(max(chunks), 0)::float8 AS n, coalesce(max(tokens), 0)::float8"
            " AS tokens FROM ctxkeep_index_total WHERE workspace = %s),"
            f" h AS MATERIALIZED (SELECT ARRAY[{hits}]::float8[] AS h FROM ctxkeep_index_chunk WHERE workspace = %s"
            " AND terms @@ %s::tsquery),"
            f" f AS MATERIALIZED (SELECT c.id, {score} AS score FROM ctxkeep_index_chunk c, s, h"
            " WHERE c.workspace = %s AND c.terms @@ %s::tsquery"
            + (" AND c.source = %s" if source else "")
            + " ORDER BY 2 DESC, c.id LIMIT %s)"
        )
        args: list[object] = [workspace, *matches, workspace, anything, *score_args, workspace, anything]
        return sql, [*args, *([source] if source else []), limit]

    def line_counts(self, lines: list[str], terms: list[str]) -> list[int]:
        """How many of `terms` each line holds, its words stemmed as the chunks' are."""
        if not terms:
            return [0] * len(lines)
        held = [Counter(words) for words in stems([index_terms(line) for line in lines])]
        return [sum(1 for t in terms if self._count(t, words)) for words in held]

    # --- words --------------------------------------------------------------------

    def _lexemes(self, term: str) -> list[str]:
        """A query word as the index stores it (one lexeme, or a few when the tokenizer splits it)."""
        if term not in self._stems:
            self._stems[term] = [w for w in stems([index_terms(term)])[0] if len(w.encode()) <= _MAX_LEXEME_BYTES]
        return self._stems[term]

    def _tsquery(self, term: str) -> str:
        """A tsquery of one word: its lexemes quoted (taken verbatim); a single CJK character matches the pairs it
        starts, as FTS5's prefix query does."""
        return " & ".join(_quoted(w) + (":*" if _prefix(term) else "") for w in self._lexemes(term))

    def _count_sql(self, term: str) -> tuple[str, list[str]]:
        """SQL for how often chunk ``c`` holds `term` (as `_count`), and its arguments."""
        if _prefix(term):
            return "(SELECT coalesce(sum(n::float8), 0) FROM jsonb_each_text(c.counts) w(k, n) WHERE k LIKE %s)", [
                term + "%"
            ]
        lexemes = self._lexemes(term)
        one = "coalesce((c.counts->>%s)::float8, 0.0::float8)"
        return ("least(" + ", ".join([one] * len(lexemes)) + ")" if len(lexemes) > 1 else one), lexemes

    def _count(self, term: str, words: Counter[str]) -> int:
        """How often a chunk with `words` (lexeme counts) holds `term`; a split word counts as its rarest part."""
        if _prefix(term):
            return sum(n for w, n in words.items() if w.startswith(term))
        return min((words.get(w, 0) for w in self._lexemes(term)), default=0)


def _vector(vector: Sequence[float]) -> str:
    """A vector as pgvector reads it (text: no driver adapter needed): each float as Python writes it, exact."""
    return "[" + ",".join(repr(float(x)) for x in vector) + "]"


def _prefix(term: str) -> bool:
    return len(term) == 1 and is_cjk(term)


def _quoted(lexeme: str) -> str:
    return "'" + lexeme.replace("\\", "\\\\").replace("'", "''") + "'"


def _rows(pieces: Sequence[Chunk]) -> list[tuple[str, str, int, int, str, int, list[str], str]]:
    """The rows of chunks: path, source, lines, text, length in words, their words and how often each occurs."""
    words = stems([index_terms(c.text) for c in pieces])
    out = []
    for chunk, said in zip(pieces, words, strict=True):
        counts = Counter(w for w in said if len(w.encode()) <= _MAX_LEXEME_BYTES)
        source = source_of(chunk.path) or "memory"
        out.append(
            (
                chunk.path,
                source,
                chunk.start_line,
                chunk.end_line,
                chunk.text,
                len(said),
                list(counts),
                json.dumps(counts),
            )
        )
    return out


def _say_full_text_only(store: IndexDatabase, embedder: Embedder | None) -> None:
    """Say once per process that memory search on PostgreSQL uses full text only, and why (`embedder`: the
    database keeps vectors, of another size than this embedder's)."""
    global _said_full_text_only
    if _said_full_text_only:
        return
    _said_full_text_only = True
    if embedder is not None:
        why = f"the database keeps vectors of {VECTOR_DIM} floats, {embedder.name} makes {embedder.dim}"
    else:
        with store.connection("read the extensions of") as conn:
            row = conn.execute("SELECT count(*) FROM pg_available_extensions WHERE name = 'vector'").fetchone()
        why = (
            "the database has no vector column yet: run `ctxkeep store migrate URL` as a superuser"
            if row[0]
            else "the server has no `vector` extension (pgvector)"
        )
    log.warning("memory search on PostgreSQL uses full text only: %s", why)
