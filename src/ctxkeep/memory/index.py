"""The memory index: SQLite full-text (FTS5) and vectors (sqlite-vec) over the memory files and the archive.

    index/memory.sqlite   files (path, size, mtime, sha256), chunks (path, line range, text), their words
                          in FTS5, their vectors in a vec0 table, and a cache of vectors by text and model

`update` reads only files whose size or time changed, and re-embeds only chunks whose text is new (the cache),
so keeping the index current after each write is cheap; `rebuild` starts over. The new texts of the changed
files are embedded together (up to 4 MB of files at a time), before any write, then each file is written in
a transaction of its own. The index is derived data: it
can always be deleted. Search: `ctxkeep.memory.search`. Vectors need ``sqlite-vec``, which the stdlib
``sqlite3`` here cannot load (`pysqlite3-binary` can; the ``memory`` extra installs it); without it, or
without an embedder, the index holds full text only, and search still answers.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from ctxkeep.errors import StorageError
from ctxkeep.store import DIALOG_DIR, MEMORY_FILE, FileInfo, Store

from .chunks import Chunk, dialog_chunks, markdown_chunks
from .embed import Embedder
from .files import DAILY_NAME
from .terms import index_terms

log = logging.getLogger("ctxkeep")

SOURCES = ("memory", "dialog")
_SCHEMA = 1
# An update reads, chunks and embeds the changed files this many bytes at a time, then writes them one by one.
_GROUP_BYTES = 4 * 1024 * 1024


def _sqlite() -> tuple[ModuleType, bool]:
    """The SQLite module to use, and whether it can load sqlite-vec."""
    try:
        import pysqlite3.dbapi2 as sqlite

        return sqlite, True
    except ImportError:
        import sqlite3

        return sqlite3, hasattr(sqlite3.Connection, "enable_load_extension")


@dataclass(frozen=True, slots=True)
class Update:
    """What one `update` changed: files (re)indexed and removed, chunks written, vectors computed."""

    files: int
    removed: int
    chunks: int
    embedded: int


def source_of(name: str) -> str | None:
    """Which part of the workspace a file belongs to for search: "memory", "dialog", or None (not indexed)."""
    if name == MEMORY_FILE or DAILY_NAME.fullmatch(name):
        return "memory"
    if name.startswith(f"{DIALOG_DIR}/") and name.endswith(".jsonl"):
        return "dialog"
    return None


class MemoryIndex:
    """The search index of a workspace's memory files and archive. Close it (or use ``with``) when done."""

    def __init__(self, store: Store, *, embedder: Embedder | None = None, embed_dialog: bool = False) -> None:
        """Open (or create) the index of `store`; `embedder` None keeps full text only.

        The archive gets vectors only with `embed_dialog`: a long session archives thousands of messages, and
        what an agent looks for there (a command, a path, an error) is found by its words.
        """
        self.store = store
        self.embedder = embedder
        self.embed_dialog = embed_dialog
        sqlite, loadable = _sqlite()
        path = _database(store)
        self._sqlite, self._path = sqlite, path
        try:
            self._open(sqlite, path, loadable=loadable)
        except sqlite.DatabaseError as exc:
            if not _damaged(exc) or path == ":memory:":
                raise _storage_error(exc, path) from None
            # Derived data (module docstring): a damaged index is deleted and made again from the files.
            log.warning("the memory index %s is damaged (%s): it is rebuilt from the memory files", path, exc)
            for name in (path, path + "-wal", path + "-shm"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(name)
            try:
                self._open(sqlite, _database(store), loadable=loadable)
            except sqlite.DatabaseError as again:
                raise _storage_error(again, path) from None

    def _open(self, sqlite: ModuleType, path: str, *, loadable: bool) -> None:
        self._db: Any = sqlite.connect(path, timeout=60.0, isolation_level=None)
        try:
            self._db.execute("PRAGMA busy_timeout = 60000")
            if path != ":memory:":
                self._db.execute("PRAGMA journal_mode = WAL")
            self.vectors = self.embedder is not None and loadable and _load_vec(self._db)
            if self.embedder is not None and not self.vectors:
                log.warning(
                    "sqlite-vec cannot be loaded here: memory search uses full text only (install ctxkeep[memory])"
                )
            with self._write():
                self._create()
        except BaseException:
            self._db.close()
            raise

    def __enter__(self) -> MemoryIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the database."""
        self._db.close()

    @property
    def db(self) -> Any:
        """The SQLite connection (for search)."""
        return self._db

    @contextlib.contextmanager
    def _write(self) -> Iterator[None]:
        # IMMEDIATE: two processes updating at once take turns instead of failing half-way.
        error = self._sqlite.Error
        try:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield
            except BaseException:
                with contextlib.suppress(error):  # SQLite may have rolled back already (a full disk)
                    self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
        except error as exc:
            if _damaged(exc):
                raise  # opening the index deletes and rebuilds it
            # A full disk, an I/O error: ctxkeep's error in one line, out of the tools and the CLI alike.
            raise _storage_error(exc, self._path) from None

    def _create(self) -> None:
        db = self._db
        db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        db.execute(
            "CREATE TABLE IF NOT EXISTS files (path TEXT PRIMARY KEY, source TEXT NOT NULL, size INTEGER NOT NULL,"
            " mtime REAL NOT NULL, sha TEXT NOT NULL)"
        )
        db.execute(
            "CREATE TABLE IF NOT EXISTS chunks (id INTEGER PRIMARY KEY, path TEXT NOT NULL, source TEXT NOT NULL,"
            " start_line INTEGER NOT NULL, end_line INTEGER NOT NULL, text TEXT NOT NULL, sha TEXT NOT NULL)"
        )
        db.execute("CREATE INDEX IF NOT EXISTS chunks_path ON chunks (path)")
        db.execute("CREATE VIRTUAL TABLE IF NOT EXISTS chunks_fts USING fts5(terms, tokenize='porter unicode61')")
        db.execute(
            "CREATE TABLE IF NOT EXISTS embeddings (sha TEXT NOT NULL, model TEXT NOT NULL, vector BLOB NOT NULL,"
            " PRIMARY KEY (sha, model))"
        )
        db.execute("INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (str(_SCHEMA),))
        if not self.vectors:
            return
        assert self.embedder is not None
        model = f"{self.embedder.name}/{self.embedder.dim}"
        row = db.execute("SELECT value FROM meta WHERE key = 'vectors'").fetchone()
        if row is None or row[0] != model:
            # Another model's vectors never mix with this one's: start the vector table over.
            db.execute("DROP TABLE IF EXISTS chunks_vec")
            db.execute(
                f"CREATE VIRTUAL TABLE chunks_vec USING vec0(embedding float[{int(self.embedder.dim)}]"
                " distance_metric=cosine, source text)"
            )
            db.execute("INSERT OR REPLACE INTO meta VALUES ('vectors', ?)", (model,))
            ids = [r[0] for r in db.execute("SELECT id FROM chunks")]
            self._embed_chunks(ids)

    # --- keeping it current ---------------------------------------------------------

    def files(self) -> list[FileInfo]:
        """The workspace files the index covers: MEMORY.md, the day logs, the archive."""
        return indexed_files(self.store)

    def update(self) -> Update:
        """Bring the index up to date with the files: new and changed ones re-indexed, removed ones dropped."""
        known = {row[0]: (row[1], row[2]) for row in self._db.execute("SELECT path, size, mtime FROM files")}
        changed, gone = changes(self.files(), known)
        chunks = embedded = 0
        for group in _groups(changed):
            loaded: list[tuple[FileInfo, bytes, str, list[Chunk] | None]] = []
            for info in group:
                data = read_indexed(self.store, info)
                if data is None:  # removed since the listing
                    gone.append(info.name)
                    continue
                sha = hashlib.sha256(data).hexdigest()
                row = self._db.execute("SELECT sha FROM files WHERE path = ?", (info.name,)).fetchone()
                touched = row is not None and row[0] == sha
                loaded.append((info, data, sha, None if touched else self._chunk(info.name, data)))
            # The group's new texts in one call, before any write: the embedder sorts and batches them across
            # files and runs them side by side, and no other process waits on the index meanwhile.
            embedded += self._cache_vectors(
                [c.text for info, _, _, pieces in loaded if pieces and self._embeds(info.name) for c in pieces]
            )
            for info, data, sha, pieces in loaded:
                with self._write():
                    row = self._db.execute("SELECT sha FROM files WHERE path = ?", (info.name,)).fetchone()
                    if row is not None and row[0] == sha:  # touched, not changed
                        self._db.execute(
                            "UPDATE files SET size = ?, mtime = ? WHERE path = ?", (info.size, info.mtime, info.name)
                        )
                        continue
                    self._drop(info.name)
                    ids = self._insert(pieces if pieces is not None else self._chunk(info.name, data))
                    embedded += self._embed_chunks(ids)  # none but what changed since: the rest is cached
                    chunks += len(ids)
                    self._db.execute(
                        "INSERT OR REPLACE INTO files VALUES (?, ?, ?, ?, ?)",
                        (info.name, source_of(info.name), info.size, info.mtime, sha),
                    )
        for name in gone:
            with self._write():
                self._drop(name)
                self._db.execute("DELETE FROM files WHERE path = ?", (name,))
        return Update(files=len(changed), removed=len(gone), chunks=chunks, embedded=embedded)

    def rebuild(self) -> Update:
        """Forget every file and index them all again (cached vectors are reused)."""
        with self._write():
            self._db.execute("DELETE FROM files")
            self._db.execute("DELETE FROM chunks")
            self._db.execute("DELETE FROM chunks_fts")
            if self.vectors:
                self._db.execute("DELETE FROM chunks_vec")
        return self.update()

    def add_chunks(self, chunks: Sequence[Chunk]) -> int:
        """Index chunks that no file holds (benchmarks, tests); how many vectors were computed."""
        with self._write():
            return self._embed_chunks(self._insert(chunks))

    def stats(self) -> dict[str, int]:
        """How many files, chunks and vectors the index holds."""
        count = {
            "files": self._db.execute("SELECT count(*) FROM files").fetchone()[0],
            "chunks": self._db.execute("SELECT count(*) FROM chunks").fetchone()[0],
        }
        count["vectors"] = self._db.execute("SELECT count(*) FROM chunks_vec").fetchone()[0] if self.vectors else 0
        return count

    def _chunk(self, name: str, data: bytes) -> list[Chunk]:
        return file_chunks(name, data)

    def _drop(self, name: str) -> None:
        ids = [row[0] for row in self._db.execute("SELECT id FROM chunks WHERE path = ?", (name,))]
        self._db.executemany("DELETE FROM chunks_fts WHERE rowid = ?", [(i,) for i in ids])
        if self.vectors:
            self._db.executemany("DELETE FROM chunks_vec WHERE rowid = ?", [(i,) for i in ids])
        self._db.execute("DELETE FROM chunks WHERE path = ?", (name,))

    def _insert(self, chunks: Sequence[Chunk]) -> list[int]:
        ids = []
        for chunk in chunks:
            sha = hashlib.sha256(chunk.text.encode()).hexdigest()
            cursor = self._db.execute(
                "INSERT INTO chunks (path, source, start_line, end_line, text, sha) VALUES (?, ?, ?, ?, ?, ?)",
                (chunk.path, source_of(chunk.path) or "memory", chunk.start_line, chunk.end_line, chunk.text, sha),
            )
            ids.append(cursor.lastrowid)
        self._db.executemany(
            "INSERT INTO chunks_fts (rowid, terms) VALUES (?, ?)",
            [(i, index_terms(c.text)) for i, c in zip(ids, chunks, strict=True)],
        )
        return ids

    def _embeds(self, name: str) -> bool:
        """Whether the chunks of file `name` get vectors."""
        return self.vectors and (self.embed_dialog or source_of(name) != "dialog")

    def _cache_vectors(self, texts: list[str]) -> int:
        """Embed the texts the cache lacks, in one call, and keep their vectors; how many were computed."""
        if not self.vectors or not texts:
            return 0
        assert self.embedder is not None
        model = f"{self.embedder.name}/{self.embedder.dim}"
        missing: dict[str, str] = {}
        for text in texts:
            sha = hashlib.sha256(text.encode()).hexdigest()
            known = self._db.execute("SELECT 1 FROM embeddings WHERE sha = ? AND model = ?", (sha, model)).fetchone()
            if known is None:
                missing[sha] = text
        if not missing:
            return 0
        from array import array

        shas = list(missing)
        vectors = self.embedder.embed([missing[s] for s in shas])
        with self._write():
            self._db.executemany(
                "INSERT OR REPLACE INTO embeddings VALUES (?, ?, ?)",
                [(s, model, array("f", v).tobytes()) for s, v in zip(shas, vectors, strict=True)],
            )
        return len(missing)

    def _embed_chunks(self, ids: list[int]) -> int:
        """Give chunks their vectors, from the cache or the embedder; how many the embedder computed."""
        if not self.vectors or not ids:
            return 0
        assert self.embedder is not None
        model = f"{self.embedder.name}/{self.embedder.dim}"
        rows = []
        for at in range(0, len(ids), 500):
            part = ids[at : at + 500]
            marks = ",".join("?" * len(part))
            rows += self._db.execute(f"SELECT id, sha, text, source FROM chunks WHERE id IN ({marks})", part).fetchall()
        if not self.embed_dialog:
            rows = [row for row in rows if row[3] != "dialog"]
        cached = {}
        for _, sha, _, _ in rows:
            hit = self._db.execute("SELECT vector FROM embeddings WHERE sha = ? AND model = ?", (sha, model)).fetchone()
            if hit is not None:
                cached[sha] = hit[0]
        missing = {sha: text for _, sha, text, _ in rows if sha not in cached}
        if missing:
            from array import array

            shas = list(missing)
            vectors = self.embedder.embed([missing[s] for s in shas])
            for sha, vector in zip(shas, vectors, strict=True):
                cached[sha] = array("f", vector).tobytes()
            self._db.executemany(
                "INSERT OR REPLACE INTO embeddings VALUES (?, ?, ?)", [(s, model, cached[s]) for s in shas]
            )
        self._db.executemany(
            "INSERT INTO chunks_vec (rowid, embedding, source) VALUES (?, ?, ?)",
            [(i, cached[sha], source) for i, sha, _, source in rows],
        )
        return len(missing)


def indexed_files(store: Store) -> list[FileInfo]:
    """The files of `store` that memory search covers: MEMORY.md, the day logs, the archive."""
    listed = [*store.memory_files(), *store.archive_files()]
    return [f for f in listed if source_of(f.name) is not None]


def changes(present: Sequence[FileInfo], known: Mapping[str, tuple[int, float]]) -> tuple[list[FileInfo], list[str]]:
    """Of the indexed files `present`, those whose size or time differ from what the index `known` (name ->
    size, time) says, and the names it knows that are no longer there."""
    names = {f.name for f in present}
    changed = [f for f in present if known.get(f.name) != (f.size, f.mtime)]
    return changed, [name for name in known if name not in names]


def read_indexed(store: Store, info: FileInfo) -> bytes | None:
    """The bytes of an indexed file, None when it is gone since the listing."""
    return store.read_memory(info.name) if source_of(info.name) == "memory" else _archived(store, info)


def file_chunks(name: str, data: bytes) -> list[Chunk]:
    """The chunks the index keeps of file `name`: a message each of an archive file, ~400 tokens of Markdown."""
    if source_of(name) == "dialog":
        return dialog_chunks(name, data)
    # Imported here: the tokenizer costs a search that finds nothing changed ~60 ms it does not need.
    from ctxkeep.tokens import get_counter

    counter = get_counter("o200k_base")
    return markdown_chunks(name, data.decode("utf-8", errors="replace"), counter.count_texts)


def _groups(files: Sequence[FileInfo], limit: int = _GROUP_BYTES) -> Iterator[list[FileInfo]]:
    """`files` in groups of at most `limit` bytes together (a larger file is a group alone)."""
    group: list[FileInfo] = []
    size = 0
    for info in files:
        if group and size + info.size > limit:
            yield group
            group, size = [], 0
        group.append(info)
        size += info.size
    if group:
        yield group


def _load_vec(db: Any) -> bool:
    try:
        db.enable_load_extension(True)
        try:
            db.load_extension(_vec_path())
        finally:
            db.enable_load_extension(False)
        return True
    except Exception as exc:  # ImportError, a build without load_extension, the module's own errors
        log.debug("sqlite-vec not loaded: %s", exc)
        return False


def _vec_path() -> str:
    """sqlite-vec's loadable extension, found without importing its package: the package imports numpy, which
    would cost every search ~0.15 s for nothing."""
    import importlib.util

    spec = importlib.util.find_spec("sqlite_vec")
    if spec is None or spec.origin is None:
        raise ImportError("sqlite-vec is not installed: pip install 'ctxkeep[memory]'")
    return os.path.join(os.path.dirname(spec.origin), "vec0")  # the package's own `loadable_path()`


# SQLite's result codes for a file that is no database, or a damaged one.
_DAMAGED = {11, 26}  # SQLITE_CORRUPT, SQLITE_NOTADB


def _damaged(exc: Exception) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return int(code) & 0xFF in _DAMAGED  # the primary code of an extended one
    return any(words in str(exc) for words in ("not a database", "malformed"))


def _storage_error(exc: Exception, path: str) -> StorageError:
    """A SQLite error as ctxkeep's: a full disk, a locked or unreadable index, named in one line."""
    return StorageError(
        f"cannot use the memory index {path}: {exc}; free some space or fix its permissions, or delete it"
        " (it is rebuilt from the memory files)",
        path=path,
    )


def _database(store: Store) -> str:
    """Where the index lives: the store's local file (``index/memory.sqlite`` of a `LocalFolder`), else in memory,
    built again from the files at each open (search works the same, at the cost of re-indexing)."""
    return store.index_path() or ":memory:"


def _archived(store: Store, info: FileInfo) -> bytes | None:
    """An archive file's bytes, None when it is gone since the listing (an archive file is never empty)."""
    return store.read_archive(info.name) or (None if info.size else b"")
