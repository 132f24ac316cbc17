"""The tables of a workspace on PostgreSQL, and the migrations that bring a database to this version.

Every table is keyed by the workspace's id (`ctxkeep_workspace`), so one database holds any number of
workspaces. A log that grows by appends (a generation's live log, an archive file, the compaction records)
is kept as chunks (`ctxkeep_log`): an append inserts one row at the log's end, a cut deletes the rows
past it and shortens the one it falls in, so no step rewrites what is already there.

``ctxkeep_schema`` holds the version. `migrate` applies the missing migrations in one transaction, under
an advisory lock, so two processes migrating at once do it once; `PostgresStore` migrates an empty
database itself and refuses one at another version, naming ``ctxkeep store migrate URL`` (or an upgrade).
"""

from __future__ import annotations

from typing import Any

# The classid half of ctxkeep's advisory locks (pg_advisory_lock(int4, int4)): "ck" and a kind.
MIGRATE_LOCK = 0x636B7000
SESSION_LOCK = 0x636B7001
MEMORY_LOCK = 0x636B7002
INDEX_LOCK = 0x636B7003

# The dimension of the vectors the database keeps: the default embedder's (MiniLM's); another's searches full text.
VECTOR_DIM = 384
# The chunks' vectors, by the model that made them, under HNSW for cosine distance, in a table of their own (a
# chunk's row stays as narrow as without them: full text reads it); only where the server has pgvector (Debian's
# packages have none). Idempotent, and applied again by `migrate` on a current database: one migrated before the
# extension was installed gets its vectors from the next ``ctxkeep store migrate``. Creating the extension takes
# a superuser (pgvector is no trusted extension): without one, an administrator runs ``CREATE EXTENSION vector``
# once, and search keeps to full text until then.
VECTORS = f"""
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'vector') THEN
        BEGIN
            CREATE EXTENSION IF NOT EXISTS vector;
        EXCEPTION WHEN insufficient_privilege THEN
            RAISE NOTICE 'ctxkeep: CREATE EXTENSION vector takes a superuser; memory search keeps to full text';
        END;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'vector') THEN
        CREATE TABLE IF NOT EXISTS ctxkeep_index_vector (
            id bigint PRIMARY KEY REFERENCES ctxkeep_index_chunk ON DELETE CASCADE,
            workspace integer NOT NULL,
            source text NOT NULL,
            model text NOT NULL,
            embedding vector({VECTOR_DIM}) NOT NULL
        );
        -- in the row, neither compressed nor out of line: a search reads the distance of up to a hundred
        ALTER TABLE ctxkeep_index_vector ALTER COLUMN embedding SET STORAGE PLAIN;
        CREATE INDEX IF NOT EXISTS ctxkeep_index_vector_embedding ON ctxkeep_index_vector
            USING hnsw (embedding vector_cosine_ops);
        -- the exact path for a workspace holding few of the vectors: HNSW's iterative scan of every workspace's
        -- stops at hnsw.max_scan_tuples (20,000 by default) and would come back short
        CREATE INDEX IF NOT EXISTS ctxkeep_index_vector_workspace ON ctxkeep_index_vector (workspace, model);
    END IF;
END $$;
"""

# One script per version, applied in order; never edit one that has shipped: add the next.
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE ctxkeep_workspace (
        id integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        name text NOT NULL UNIQUE,
        created timestamptz NOT NULL DEFAULT now()
    );
    -- the commit point of a session, and the copy of the summary kept for people
    CREATE TABLE ctxkeep_state (
        workspace integer PRIMARY KEY REFERENCES ctxkeep_workspace ON DELETE CASCADE,
        data bytea NOT NULL,
        saved timestamptz NOT NULL DEFAULT now()
    );
    CREATE TABLE ctxkeep_summary (
        workspace integer PRIMARY KEY REFERENCES ctxkeep_workspace ON DELETE CASCADE,
        data bytea NOT NULL,
        saved timestamptz NOT NULL DEFAULT now()
    );
    -- live logs (name: the generation), archive files (dialog/YYYY-MM-DD.jsonl), records (compactions.jsonl)
    CREATE TABLE ctxkeep_log (
        workspace integer NOT NULL REFERENCES ctxkeep_workspace ON DELETE CASCADE,
        part text NOT NULL CHECK (part IN ('live', 'archive', 'records')),
        name text NOT NULL,
        at bigint NOT NULL CHECK (at >= 0),
        data bytea NOT NULL CHECK (octet_length(data) > 0),
        saved timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (workspace, part, name, at)
    );
    -- offloaded originals (tool_result/<uuid>.txt) and refused summaries (failed/<name>.json)
    CREATE TABLE ctxkeep_original (
        workspace integer NOT NULL REFERENCES ctxkeep_workspace ON DELETE CASCADE,
        name text NOT NULL,
        data bytea NOT NULL,
        saved timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (workspace, name)
    );
    CREATE TABLE ctxkeep_failure (
        workspace integer NOT NULL REFERENCES ctxkeep_workspace ON DELETE CASCADE,
        name text NOT NULL,
        data bytea NOT NULL,
        saved timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (workspace, name)
    );
    -- MEMORY.md, memory/…, AGENTS.md
    CREATE TABLE ctxkeep_memory (
        workspace integer NOT NULL REFERENCES ctxkeep_workspace ON DELETE CASCADE,
        name text NOT NULL,
        data bytea NOT NULL,
        saved timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (workspace, name)
    );
    """,
    # 2: memory's search index (ctxkeep.memory.pgindex): the indexed files by content hash, and their chunks
    # with their words (terms.py's, stemmed as SQLite's porter tokenizer does) in a tsvector under GIN, and how
    # often each occurs (for BM25: a tsvector's counts cost an unnest of every matching row to read).
    """
    CREATE TABLE ctxkeep_index_file (
        workspace integer NOT NULL REFERENCES ctxkeep_workspace ON DELETE CASCADE,
        path text NOT NULL,
        size bigint NOT NULL,
        mtime double precision NOT NULL,
        sha text NOT NULL,
        PRIMARY KEY (workspace, path)
    );
    CREATE TABLE ctxkeep_index_chunk (
        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        workspace integer NOT NULL REFERENCES ctxkeep_workspace ON DELETE CASCADE,
        path text NOT NULL,
        source text NOT NULL CHECK (source IN ('memory', 'dialog')),
        start_line integer NOT NULL,
        end_line integer NOT NULL,
        text text NOT NULL,
        length integer NOT NULL,
        terms tsvector NOT NULL,
        counts jsonb NOT NULL
    );
    CREATE INDEX ctxkeep_index_chunk_path ON ctxkeep_index_chunk (workspace, path);
    CREATE INDEX ctxkeep_index_chunk_terms ON ctxkeep_index_chunk USING gin (terms);
    """,
    # 3: each workspace's count of chunks and of their words, kept by triggers in the transaction that changes
    # them (BM25 reads both at every search: counting them there scanned the whole index); the GIN index without
    # its pending list (a search scanned it whole until a vacuum); and the chunks' vectors, when the server has
    # the `vector` extension.
    """
    CREATE TABLE ctxkeep_index_total (
        workspace integer PRIMARY KEY,
        chunks bigint NOT NULL,
        tokens bigint NOT NULL
    );
    INSERT INTO ctxkeep_index_total
        SELECT workspace, count(*), sum(length) FROM ctxkeep_index_chunk GROUP BY workspace;
    CREATE FUNCTION ctxkeep_index_added() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO ctxkeep_index_total AS t
            SELECT workspace, count(*), sum(length) FROM added GROUP BY workspace
            ON CONFLICT (workspace)
            DO UPDATE SET chunks = t.chunks + excluded.chunks, tokens = t.tokens + excluded.tokens;
        RETURN NULL;
    END $$;
    CREATE FUNCTION ctxkeep_index_removed() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        UPDATE ctxkeep_index_total t SET chunks = t.chunks - r.chunks, tokens = t.tokens - r.tokens
            FROM (SELECT workspace, count(*) AS chunks, sum(length) AS tokens FROM removed GROUP BY workspace) r
            WHERE t.workspace = r.workspace;
        DELETE FROM ctxkeep_index_total WHERE chunks = 0;  -- and so a removed workspace's
        RETURN NULL;
    END $$;
    CREATE TRIGGER ctxkeep_index_added AFTER INSERT ON ctxkeep_index_chunk
        REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION ctxkeep_index_added();
    CREATE TRIGGER ctxkeep_index_removed AFTER DELETE ON ctxkeep_index_chunk
        REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION ctxkeep_index_removed();
    ALTER INDEX ctxkeep_index_chunk_terms SET (fastupdate = off);
    """
    + VECTORS,
)
VERSION = len(MIGRATIONS)


def has_vectors(conn: Any) -> bool:
    """Whether the database `conn` is connected to keeps memory chunks' vectors (pgvector was there at the last
    migration, `VECTORS`): without them its memory search is full text alone."""
    row = conn.execute("SELECT to_regclass('ctxkeep_index_vector') IS NOT NULL").fetchone()
    return bool(row and row[0])


def version(conn: Any) -> int:
    """The schema version of the database `conn` is connected to: 0 when ctxkeep has no tables there."""
    found = conn.execute("SELECT to_regclass('ctxkeep_schema') IS NOT NULL").fetchone()
    if not found[0]:
        return 0
    row = conn.execute("SELECT version FROM ctxkeep_schema").fetchone()
    return int(row[0]) if row else 0


def migrate(conn: Any) -> tuple[int, int]:
    """Bring the database to `VERSION` in one transaction; the version before and after. A database at `VERSION`
    gets its vectors when pgvector has been installed since; one newer than this ctxkeep is left as it is (the
    caller says to upgrade)."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s, 0)", (MIGRATE_LOCK,))
        conn.execute("CREATE TABLE IF NOT EXISTS ctxkeep_schema (version integer NOT NULL)")
        before = version(conn)
        if before > VERSION:
            return before, before
        for script in MIGRATIONS[before:]:
            conn.execute(script)
        if before == VERSION:
            conn.execute(VECTORS)
        conn.execute("DELETE FROM ctxkeep_schema")
        conn.execute("INSERT INTO ctxkeep_schema (version) VALUES (%s)", (VERSION,))
    return before, VERSION
