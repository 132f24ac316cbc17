"""Memory's search index kept in the workspace's PostgreSQL database, shared by every process that opens it.

    ctxkeep_index_file    each indexed file (MEMORY.md, day logs, archive): size, time, sha256 of its bytes
    ctxkeep_index_chunk   its chunks (`chunks.py`): line range, text, their words in a tsvector (GIN), and how
                          often each occurs (jsonb), for BM25

The words are those of the SQLite index: `terms.index_terms` (Chinese cut into pairs), stemmed by SQLite's own
``porter unicode61`` tokenizer (`terms.stems`), stored verbatim as lexemes (no text search configuration
touches them: ``simple`` at its simplest).
So the candidates, their order (FTS5's BM25, computed from the same counts) and the words each holds are
the SQLite index's, and `ctxkeep.memory.search` ranks them by its one rule.

`update` re-reads a file only when its size or time changed and re-indexes it only when its content hash did,
each file in one transaction under an advisory lock, so two processes updating at once do it once.
Vectors (pgvector) are not kept here: search on PostgreSQL is full text only, said once in a log line.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import Counter
from collections.abc import Sequence

from ctxkeep.postgres.schema import INDEX_LOCK
from ctxkeep.store import IndexDatabase, Store

from .chunks import Chunk
from .embed import Embedder
from .index import Update, file_chunks, indexed_files, read_indexed, source_of
from .terms import index_terms, is_cjk, query_terms, stems

log = logging.getLogger("ctxkeep")

# FTS5's BM25 constants (fts5_aux.c), so the candidates come in the SQLite index's order.
_K1 = 1.2
_B = 0.75
# A tsvector keeps lexemes of under 2 KB.
_MAX_LEXEME_BYTES = 2046
_said_full_text_only = False
_INSERT = (
    "INSERT INTO ctxkeep_index_chunk (workspace, path, source, start_line, end_line, text, length, terms, counts)"
    " VALUES (%s, %s, %s, %s, %s, %s, %s, array_to_tsvector(%s::text[]), %s::jsonb)"
)


class PostgresIndex:
    """The search index of a PostgreSQL workspace's memory files and archive (a `search.FullTextIndex`)."""

    vectors = False

    def __init__(self, store: Store, *, embedder: Embedder | None = None) -> None:
        """The index of `store`, which must keep it (`IndexDatabase`); an `embedder` is noted, not used: vectors
        on PostgreSQL are not kept (the module docstring)."""
        if not isinstance(store, IndexDatabase):
            raise TypeError(f"{type(store).__name__} keeps no database for the index; use MemoryIndex")
        self.store = store
        self._db: IndexDatabase = store
        self._stems: dict[str, list[str]] = {}
        self.embedder = None
        if embedder is not None:
            _say_full_text_only(store)

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
        present = {f.name: f for f in indexed_files(self.store)}
        changed = [f for f in present.values() if known.get(f.name, (None, None))[:2] != (f.size, f.mtime)]
        gone = [name for name in known if name not in present]
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
                    conn.execute(
                        "DELETE FROM ctxkeep_index_chunk WHERE workspace = %s AND path = %s", (workspace, info.name)
                    )
                    with conn.cursor() as cursor:
                        cursor.executemany(_INSERT, [(workspace, *row) for row in rows])
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
        return Update(files=len(changed), removed=len(gone), chunks=chunks, embedded=0)

    def rebuild(self) -> Update:
        """Forget every file and index them all again."""
        with self._db.connection("clear the memory index in") as conn, conn.transaction():
            conn.execute("DELETE FROM ctxkeep_index_chunk WHERE workspace = %s", (self._db.workspace_id,))
            conn.execute("DELETE FROM ctxkeep_index_file WHERE workspace = %s", (self._db.workspace_id,))
        return self.update()

    def add_chunks(self, chunks: Sequence[Chunk]) -> int:
        """Index chunks that no file holds (benchmarks, tests); how many vectors were computed (none here)."""
        with self._db.connection("update the memory index in") as conn, conn.transaction(), conn.cursor() as cursor:
            cursor.executemany(_INSERT, [(self._db.workspace_id, *row) for row in _rows(chunks)])
        return 0

    def stats(self) -> dict[str, int]:
        """How many files, chunks and vectors (none) the index holds."""
        with self._db.connection("read the memory index in") as conn:
            files = conn.execute(
                "SELECT count(*) FROM ctxkeep_index_file WHERE workspace = %s", (self._db.workspace_id,)
            ).fetchone()[0]
            chunks = conn.execute(
                "SELECT count(*) FROM ctxkeep_index_chunk WHERE workspace = %s", (self._db.workspace_id,)
            ).fetchone()[0]
        return {"files": int(files), "chunks": int(chunks), "vectors": 0}

    # --- what search asks (search.FullTextIndex) ------------------------------------

    def full_text(self, query: str, source: str | None, limit: int) -> list[int]:
        """At most `limit` chunks holding any word of `query`, best first by FTS5's BM25, ties by id."""
        terms = [t for t in query_terms(query) if self._lexemes(t)]
        if not terms:
            return []
        workspace = self._db.workspace_id
        matches = [self._tsquery(t) for t in terms]
        # One statement (each round trip costs a loaded server more than the work): the index's size, each word's
        # IDF over the whole index (every source, as FTS5 counts it), then FTS5's sum term by term in the same
        # order of operations (fts5_aux.c), so equal scores tie as they do there.
        hits = ", ".join("count(*) FILTER (WHERE terms @@ %s::tsquery)" for _ in terms)
        logs = [f"ln((0.5::float8 + s.n - h.h[{i}]) / (0.5::float8 + h.h[{i}]))" for i in range(1, len(terms) + 1)]
        idf = [f"(CASE WHEN {x} > 0.0::float8 THEN {x} ELSE 1e-6::float8 END)" for x in logs]
        parts, args = [], []
        for term, weight in zip(terms, idf, strict=True):
            count, count_args = self._count_sql(term)
            parts.append(
                f"{weight} * ({count} * %s::float8) / ({count} + %s::float8 * (1.0::float8 - %s::float8"
                " + %s::float8 * c.length / (s.tokens / s.n)))"
            )
            args += [*count_args, _K1 + 1.0, *count_args, _K1, _B, _B]
        sql = (
            # MATERIALIZED: once each; a planner without statistics yet (a new index) re-ran them per row.
            "WITH s AS MATERIALIZED (SELECT count(*)::float8 AS n, coalesce(sum(length), 0)::float8 AS tokens"
            " FROM ctxkeep_index_chunk WHERE workspace = %s),"
            f" h AS MATERIALIZED (SELECT ARRAY[{hits}]::float8[] AS h FROM ctxkeep_index_chunk WHERE workspace = %s"
            " AND terms @@ %s::tsquery)"
            " SELECT c.id FROM ctxkeep_index_chunk c, s, h WHERE c.workspace = %s AND c.terms @@ %s::tsquery"
            + (" AND c.source = %s" if source else "")
            + f" ORDER BY 0.0::float8 + {' + '.join(parts)} DESC, c.id LIMIT %s"
        )
        anything = " | ".join(f"({m})" for m in matches)
        with self._db.connection("search the memory index in") as conn:
            found = conn.execute(
                sql,
                (
                    workspace,
                    *matches,
                    workspace,
                    anything,
                    workspace,
                    anything,
                    *([source] if source else []),
                    *args,
                    limit,
                ),
            ).fetchall()
        return [row[0] for row in found]

    def holding(self, term: str, candidates: Sequence[int]) -> set[int]:
        """Those of `candidates` that hold the word `term`."""
        if not self._lexemes(term) or not candidates:
            return set()
        with self._db.connection("search the memory index in") as conn:
            rows = conn.execute(
                "SELECT id FROM ctxkeep_index_chunk WHERE workspace = %s AND id = ANY(%s) AND terms @@ %s::tsquery",
                (self._db.workspace_id, list(candidates), self._tsquery(term)),
            ).fetchall()
        return {row[0] for row in rows}

    def anywhere(self, term: str, source: str | None) -> bool:
        """Whether any chunk of `source` holds the word `term`."""
        if not self._lexemes(term):
            return False
        with self._db.connection("search the memory index in") as conn:
            row = conn.execute(
                "SELECT 1 FROM ctxkeep_index_chunk WHERE workspace = %s AND terms @@ %s::tsquery"
                + (" AND source = %s" if source else "")
                + " LIMIT 1",
                (self._db.workspace_id, self._tsquery(term), *([source] if source else [])),
            ).fetchone()
        return row is not None

    def chunks(self, ids: Sequence[int]) -> dict[int, tuple[str, int, int, str, str]]:
        """Each chunk's path, first and last line, text and source."""
        with self._db.connection("search the memory index in") as conn:
            rows = conn.execute(
                "SELECT id, path, start_line, end_line, text, source FROM ctxkeep_index_chunk"
                " WHERE workspace = %s AND id = ANY(%s)",
                (self._db.workspace_id, list(ids)),
            ).fetchall()
        return {row[0]: (row[1], row[2], row[3], row[4], row[5]) for row in rows}

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


def _say_full_text_only(store: IndexDatabase) -> None:
    """Say once per process that memory search on PostgreSQL uses full text only, and why."""
    global _said_full_text_only
    if _said_full_text_only:
        return
    _said_full_text_only = True
    with store.connection("read the extensions of") as conn:
        row = conn.execute("SELECT count(*) FROM pg_available_extensions WHERE name = 'vector'").fetchone()
    why = "vectors in PostgreSQL are not kept yet" if row[0] else "the server has no `vector` extension (pgvector)"
    log.warning("memory search on PostgreSQL uses full text only: %s", why)
