"""`PostgresStore`: a workspace kept in a PostgreSQL database, for fleets of agents and proxy replicas.

The same commit protocol as a folder (``ctxkeep.workspace``): ``state`` is the commit point, and what a
crash leaves past it (an archive append, a live line, a next generation) is cut back by recovery. Each
write is one transaction, committed with ``synchronous_commit`` on before it returns: durable as the
folder's fdatasync, and whole or absent (a transaction leaves no torn line, unlike a killed write).

Connections come from a pool: the store's own, or with ``shared=True`` (`Session.open`'s, and so the proxy's,
which opens a workspace per request) the process's one pool for that URL (`pool.shared_pool`), so a session opened
again reuses the connections of the last instead of starting a server process each.

The workspace lock is a session-level advisory lock held on a connection of the pool for as long as a
session is open: a second holder waits up to the lock timeout (``lock_timeout``), then gets
`WorkspaceLockedError`; a process that dies drops its connection and with it the lock. While it is held,
every read and write goes through that connection, so a process whose connection was lost (and so its
lock) writes nothing more: its next write fails instead of racing the process that took over. Errors of
the driver and the server become a `StorageError` with a one-line message.
"""

from __future__ import annotations

import contextlib
import logging
import math
import re
import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import psycopg.conninfo
import psycopg.errors
import psycopg_pool

from ctxkeep.errors import StorageError, WorkspaceLockedError
from ctxkeep.store import FAILED_DIR, MEMORY_DIR, MEMORY_FILE, ORIGINAL_NAME, TOOL_RESULT_DIR, FileInfo

from . import schema
from .pool import new_pool, session_connection, shared_pool

log = logging.getLogger("ctxkeep")

# The URLs whose schema version a store found current (`PostgresStore(shared=True)` checks it once).
_checked: set[str] = set()

# A workspace's name in the database: printable, short enough to read in a log line; parts may be joined by
# "/" (the proxy names a conversation's branch ``<conversation>/<branch>``, as its folders are).
_WORKSPACE = re.compile(r"[^\x00-\x1f\x7f\\/]+(?:/[^\x00-\x1f\x7f\\/]+)*")
_MAX_NAME = 1000  # characters of a name inside a workspace (a file name of the folder has at most 255 a part)


class PostgresStore:
    """A `Store` in the PostgreSQL database at `url`, for the workspace called `workspace`.

    Opens a small connection pool (closed by `close`, or the ``with`` block), brings an empty database to
    the current schema and creates the workspace when it is new. Raises `StorageError` when the database
    cannot be reached or holds a schema of another version (the message says which command fixes it).
    """

    def __init__(
        self,
        url: str,
        workspace: str,
        *,
        create: bool = True,
        pool_size: int = 4,
        connect_timeout: float = 10.0,
        shared: bool = False,
    ) -> None:
        """`url`: a libpq URL (``postgresql://user@host/db``; a password in it is never shown); `workspace`:
        the workspace's name in that database (printable, at most 200 characters; ``a/b`` groups names).
        Without `create`, a workspace the database does not hold is a `StorageError` (for commands that read).
        With `shared`, the connections are the process's pool for `url` (`pool.shared_pool`; `pool_size` unused),
        which `close` leaves open."""
        if (
            not isinstance(workspace, str)
            or len(workspace) > 200
            or not _WORKSPACE.fullmatch(workspace)
            or workspace.strip() != workspace
        ):
            raise StorageError(
                "a PostgreSQL workspace name is 1 to 200 printable characters, no surrounding spaces, no \\, parts"
                f" joined by single /; got {workspace!r}"
            )
        if not isinstance(pool_size, int) or isinstance(pool_size, bool) or pool_size < 1:
            raise StorageError(f"pool_size is the number of connections, 1 or more; got {pool_size!r}")
        self.url = url
        self.workspace = workspace
        self._shown = shown_url(url)
        self._connect_timeout = connect_timeout
        self._held: psycopg.Connection[Any] | None = None  # the lock's connection while a session holds it
        self._held_guard = threading.Lock()  # one statement at a time on it (a summary thread reads too)
        self._shared = shared
        self._pool = shared_pool(url, connect_timeout) if shared else new_pool(url, pool_size, connect_timeout)
        try:
            if not shared:
                with self._errors("connect to"):
                    self._pool.open(wait=True, timeout=connect_timeout)
            self._id = self._open_workspace(create)
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> PostgresStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"PostgresStore({self._shown!r}, workspace={self.workspace!r})"

    def close(self) -> None:
        """Close the store's own connection pool (a shared one stays for the next store; a lock still held keeps
        its connection until its block ends)."""
        if not self._shared:
            self._pool.close()

    def _open_workspace(self, create: bool) -> int:
        with self._errors("open the workspace in"), self._pool.connection() as conn:
            if self._shared and create and self.url in _checked:
                # The schema was found current for this URL: the workspace in one round trip (a proxy's request).
                try:
                    row = conn.execute(_MAKE_WORKSPACE, (self.workspace, self.workspace)).fetchone()
                    row = row or conn.execute(_MAKE_WORKSPACE, (self.workspace, self.workspace)).fetchone()
                except psycopg.errors.UndefinedTable:
                    # The tables went since (the database dropped and made again under a running proxy, say): the
                    # schema is checked again below, as on a first open, rather than every request failing.
                    _checked.discard(self.url)
                    row = None
                if row is not None:
                    return int(row[0])
            found = schema.version(conn)
            if found == 0 and create:
                schema.migrate(conn)
                found = schema.VERSION
            elif 0 < found < schema.VERSION:
                raise StorageError(
                    f"{self._shown} holds ctxkeep's schema version {found}, this ctxkeep uses {schema.VERSION}:"
                    f" run `ctxkeep store migrate URL` (stop the older ctxkeep processes first)"
                )
            elif found > schema.VERSION:
                raise StorageError(
                    f"{self._shown} holds ctxkeep's schema version {found}, newer than this ctxkeep's"
                    f" {schema.VERSION}: upgrade ctxkeep"
                )
            if found == schema.VERSION:
                _checked.add(self.url)
            if found and create:
                conn.execute(
                    "INSERT INTO ctxkeep_workspace (name) VALUES (%s) ON CONFLICT (name) DO NOTHING", (self.workspace,)
                )
            row = (
                conn.execute("SELECT id FROM ctxkeep_workspace WHERE name = %s", (self.workspace,)).fetchone()
                if found
                else None  # a reader on an empty database: nothing is made for it
            )
            if row is None:
                raise StorageError(
                    f"{self._shown} holds no workspace {self.workspace!r}; `ctxkeep store ls URL` lists those it holds",
                    path=self._shown,
                )
            return int(row[0])

    # --- connections and errors ---------------------------------------------------------------

    def _errors(self, doing: str) -> contextlib.AbstractContextManager[None]:
        return driver_errors(doing, self._shown)

    @contextlib.contextmanager
    def _conn(self, doing: str) -> Iterator[psycopg.Connection[Any]]:
        """The connection to use: the lock's while a session holds the workspace (so a lost lock writes
        nothing), else one of the pool."""
        with self._errors(doing):
            held = self._held
            if held is not None:
                with self._held_guard:
                    yield held
            else:
                with self._pool.connection() as conn:
                    yield conn

    # --- the lock --------------------------------------------------------------------------------

    @contextlib.contextmanager
    def lock(self, timeout: float) -> Iterator[None]:
        """Hold the workspace on a connection of its own; wait up to `timeout` seconds, then
        `WorkspaceLockedError`. Dropped with the connection: a process that dies releases it."""
        if self._held is not None:
            raise WorkspaceLockedError(
                f"this PostgresStore already holds workspace {self.workspace!r}; open another store object",
                path=self._shown,
            )
        with contextlib.ExitStack() as holding:
            # Back to its pool at the end, whose reset releases the lock (`pool.reset`; a connection failing it is
            # closed), or closed: the lock goes with the connection.
            with self._errors("lock the workspace in"):
                conn = holding.enter_context(self._session_connection())
                if not _advisory_lock(conn, schema.SESSION_LOCK, self._id, timeout):
                    raise WorkspaceLockedError(
                        f"the workspace {self.workspace!r} in {self._shown} is in use by another process; wait for"
                        " it to finish or pass a longer lock timeout",
                        path=self._shown,
                    )
            self._held = conn
            try:
                yield
            finally:
                self._held = None
                # Released now: the pool resets a returned connection on its worker thread, a moment later, and
                # the next request of this conversation (here or in another process) would wait for that.
                with contextlib.suppress(psycopg.Error):
                    conn.execute("SELECT pg_advisory_unlock(%s, %s)", (schema.SESSION_LOCK, self._id))

    def _session_connection(self) -> contextlib.AbstractContextManager[psycopg.Connection[Any]]:
        """The connection a session holds: from the process's session pool (`shared`), else the store's own."""
        if self._shared:
            return session_connection(self.url, self._connect_timeout)
        return self._pool.connection()

    def memory_lock(self) -> contextlib.AbstractContextManager[None]:
        return self._memory_lock()

    @contextlib.contextmanager
    def _memory_lock(self) -> Iterator[None]:
        # A connection of the pool, not the session's: the agent, a CLI and a scheduler write memory while a
        # session holds the workspace, and a block that writes memory reads through the session's connection.
        with self._errors("lock the memory files in"), self._pool.connection() as conn:
            _advisory_lock(conn, schema.MEMORY_LOCK, self._id, math.inf)
            try:
                yield
            finally:
                with contextlib.suppress(psycopg.Error):
                    conn.execute("SELECT pg_advisory_unlock(%s, %s)", (schema.MEMORY_LOCK, self._id))

    @property
    def workspace_id(self) -> int:
        """The workspace's key in the tables (`IndexDatabase`: memory's search index lives beside its files)."""
        return self._id

    def connection(self, doing: str) -> contextlib.AbstractContextManager[psycopg.Connection[Any]]:
        """A connection for the block (the session's while one holds the workspace), errors as `StorageError`."""
        return self._conn(doing)

    def where(self, name: str) -> str:
        return f"{self._shown}#{self.workspace}/{name}"

    def index_path(self) -> str | None:
        return None

    # --- the state and the summary ---------------------------------------------------------------

    def read_state(self) -> bytes | None:
        return self._read_one("ctxkeep_state")

    def commit_state(self, data: bytes) -> None:
        self._write_one("ctxkeep_state", _bytes(data))

    def read_summary(self) -> bytes | None:
        return self._read_one("ctxkeep_summary")

    def write_summary(self, data: bytes) -> None:
        self._write_one("ctxkeep_summary", _bytes(data))

    def _read_one(self, table: str) -> bytes | None:
        with self._conn("read") as conn:
            row = conn.execute(f"SELECT data FROM {table} WHERE workspace = %s", (self._id,)).fetchone()
        return None if row is None else bytes(row[0])

    def _write_one(self, table: str, data: bytes) -> None:
        with self._conn("write") as conn:
            conn.execute(
                f"INSERT INTO {table} (workspace, data) VALUES (%s, %s)"
                " ON CONFLICT (workspace) DO UPDATE SET data = excluded.data, saved = now()",
                (self._id, data),
            )

    # --- the logs: live, archive, records --------------------------------------------------------

    def live_generations(self) -> list[int]:
        return sorted(int(name) for name in self._log_names("live"))

    def read_live(self, generation: int) -> bytes:
        return self._read_log("live", _generation(generation))

    def start_live(self, generation: int, data: bytes) -> None:
        name, data = _generation(generation), _bytes(data)
        with self._conn("write") as conn, conn.transaction():
            self._delete_log(conn, "live", name)
            if data:
                self._insert_chunk(conn, "live", name, 0, data)

    def append_live(self, generation: int, data: bytes) -> None:
        self._append_log("live", _generation(generation), _bytes(data))

    def cut_live(self, generation: int, size: int) -> None:
        self._cut_log("live", _generation(generation), _size(size))

    def drop_live(self, generation: int) -> None:
        name = _generation(generation)
        with self._conn("write") as conn:
            self._delete_log(conn, "live", name)

    def archive_files(self) -> list[FileInfo]:
        return self._log_infos("archive")

    def read_archive(self, name: str) -> bytes:
        return self._read_log("archive", _name(name))

    def append_archive(self, name: str, data: bytes) -> int:
        return self._append_log("archive", _name(name), _bytes(data))

    def cut_archive(self, name: str, size: int) -> None:
        self._cut_log("archive", _name(name), _size(size))

    def append_record(self, data: bytes) -> None:
        self._append_log("records", "", _bytes(data))

    def read_records(self) -> bytes:
        return self._read_log("records", "")

    def _log_names(self, part: str) -> list[str]:
        with self._conn("read") as conn:
            rows = conn.execute(
                "SELECT DISTINCT name FROM ctxkeep_log WHERE workspace = %s AND part = %s", (self._id, part)
            ).fetchall()
        return [row[0] for row in rows]

    def _log_infos(self, part: str) -> list[FileInfo]:
        with self._conn("read") as conn:
            rows = conn.execute(
                "SELECT name, sum(octet_length(data)), extract(epoch FROM max(saved)) FROM ctxkeep_log"
                " WHERE workspace = %s AND part = %s GROUP BY name ORDER BY name",
                (self._id, part),
            ).fetchall()
        return [FileInfo(name, int(size), float(mtime)) for name, size, mtime in rows]

    def _read_log(self, part: str, name: str) -> bytes:
        with self._conn("read") as conn:
            rows = conn.execute(
                "SELECT data FROM ctxkeep_log WHERE workspace = %s AND part = %s AND name = %s ORDER BY at",
                (self._id, part, name),
            ).fetchall()
        return b"".join(bytes(row[0]) for row in rows)

    def _append_log(self, part: str, name: str, data: bytes) -> int:
        with self._conn("write") as conn, conn.transaction():
            end = self._log_end(conn, part, name)
            if data:
                self._insert_chunk(conn, part, name, end, data)
        return end + len(data)

    def _cut_log(self, part: str, name: str, size: int) -> None:
        with self._conn("write") as conn, conn.transaction():
            conn.execute(
                "DELETE FROM ctxkeep_log WHERE workspace = %s AND part = %s AND name = %s AND at >= %s",
                (self._id, part, name, size),
            )
            conn.execute(
                "UPDATE ctxkeep_log SET data = substring(data FROM 1 FOR (%s - at)::integer)"
                " WHERE workspace = %s AND part = %s AND name = %s AND at < %s AND at + octet_length(data) > %s",
                (size, self._id, part, name, size, size),
            )

    def _log_end(self, conn: psycopg.Connection[Any], part: str, name: str) -> int:
        # The last chunk by the primary key's order: one index probe, however long the log.
        row = conn.execute(
            "SELECT at + octet_length(data) FROM ctxkeep_log WHERE workspace = %s AND part = %s AND name = %s"
            " ORDER BY at DESC LIMIT 1 FOR UPDATE",
            (self._id, part, name),
        ).fetchone()
        return 0 if row is None else int(row[0])

    def _insert_chunk(self, conn: psycopg.Connection[Any], part: str, name: str, at: int, data: bytes) -> None:
        conn.execute(
            "INSERT INTO ctxkeep_log (workspace, part, name, at, data) VALUES (%s, %s, %s, %s, %s)",
            (self._id, part, name, at, data),
        )

    def _delete_log(self, conn: psycopg.Connection[Any], part: str, name: str) -> None:
        conn.execute("DELETE FROM ctxkeep_log WHERE workspace = %s AND part = %s AND name = %s", (self._id, part, name))

    # --- originals and failures ------------------------------------------------------------------

    def save_original(self, name: str, data: bytes) -> None:
        self._put("ctxkeep_original", _name(name), _bytes(data))

    def read_original(self, name: str) -> bytes | None:
        """A kept original's full text, or None when it is not kept (see `FileStore.read_original`)."""
        folder, _, base = name.partition("/")
        if folder != TOOL_RESULT_DIR or not ORIGINAL_NAME.fullmatch(base):
            return None  # only a name ctxkeep gives (a record in an imported message may say anything)
        return self._get("ctxkeep_original", name)

    def originals(self) -> list[FileInfo]:
        return self._infos("ctxkeep_original", "")

    def drop_original(self, name: str) -> None:
        with self._conn("write") as conn:
            conn.execute("DELETE FROM ctxkeep_original WHERE workspace = %s AND name = %s", (self._id, _name(name)))

    def save_failure(self, name: str, data: bytes) -> None:
        self._put("ctxkeep_failure", f"{FAILED_DIR}/{_name(name)}", _bytes(data))

    # --- memory ----------------------------------------------------------------------------------

    def read_memory(self, name: str) -> bytes | None:
        return self._get("ctxkeep_memory", _name(name))

    def write_memory(self, name: str, data: bytes) -> None:
        self._put("ctxkeep_memory", _name(name), _bytes(data))

    def append_memory(self, name: str, data: bytes) -> int:
        name, data = _name(name), _bytes(data)
        with self._conn("write") as conn:
            row = conn.execute(
                "INSERT INTO ctxkeep_memory (workspace, name, data) VALUES (%s, %s, %s) ON CONFLICT (workspace, name)"
                " DO UPDATE SET data = ctxkeep_memory.data || excluded.data, saved = now()"
                " RETURNING octet_length(data)",
                (self._id, name, data),
            ).fetchone()
        assert row is not None
        return int(row[0])

    def memory_files(self) -> list[FileInfo]:
        files = self._infos("ctxkeep_memory", f"{MEMORY_DIR}/")
        return [*[f for f in self._infos("ctxkeep_memory", MEMORY_FILE) if f.name == MEMORY_FILE], *files]

    # --- files kept whole --------------------------------------------------------------------------

    def _get(self, table: str, name: str) -> bytes | None:
        with self._conn("read") as conn:
            row = conn.execute(
                f"SELECT data FROM {table} WHERE workspace = %s AND name = %s",
                (self._id, name),
            ).fetchone()
        return None if row is None else bytes(row[0])

    def _put(self, table: str, name: str, data: bytes) -> None:
        with self._conn("write") as conn:
            conn.execute(
                f"INSERT INTO {table} (workspace, name, data) VALUES (%s, %s, %s)"
                " ON CONFLICT (workspace, name) DO UPDATE SET data = excluded.data, saved = now()",
                (self._id, name, data),
            )

    def _infos(self, table: str, prefix: str) -> list[FileInfo]:
        with self._conn("read") as conn:
            rows = conn.execute(
                f"SELECT name, octet_length(data), extract(epoch FROM saved) FROM {table}"
                ' WHERE workspace = %s AND starts_with(name, %s) ORDER BY name COLLATE "C"',
                (self._id, prefix),
            ).fetchall()
        return [FileInfo(name, int(size), float(mtime)) for name, size, mtime in rows]


# A workspace made when new and its id, in one statement; no row when another transaction made it meanwhile
# (this statement's snapshot does not see it: the caller asks again).
_MAKE_WORKSPACE = (
    "WITH made AS (INSERT INTO ctxkeep_workspace (name) VALUES (%s) ON CONFLICT (name) DO NOTHING RETURNING id)"
    " SELECT id FROM made UNION ALL SELECT id FROM ctxkeep_workspace WHERE name = %s"
)


@contextlib.contextmanager
def driver_errors(doing: str, shown: str) -> Iterator[None]:
    """A driver's or server's error as a `StorageError` with one line: what failed (`doing`, at the URL `shown`
    without its password), why, what to check."""
    try:
        yield
    except psycopg.Error as exc:
        why = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        fix = "; check that the server is up and the URL" if isinstance(exc, psycopg.OperationalError) else ""
        raise StorageError(f"cannot {doing} PostgreSQL at {shown}: {why}{fix}", path=shown) from None
    except psycopg_pool.PoolTimeout as exc:
        raise StorageError(
            f"cannot {doing} PostgreSQL at {shown}: no connection within the timeout ({exc});"
            " check that the server is up and the URL",
            path=shown,
        ) from None


def shown_url(url: str) -> str:
    """`url` as a person may see it: ``postgresql://user@host:port/db``, never the password. Raises
    `StorageError` for what is no libpq URL."""
    if not isinstance(url, str):
        raise StorageError(f"a PostgreSQL store is named by a URL string, postgresql://user@host/db; got {url!r}")
    try:
        parts = psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError as exc:
        why = (str(exc).strip().splitlines() or ["unreadable"])[0]
        raise StorageError(f"not a PostgreSQL URL ({why}); write postgresql://user@host:port/dbname") from None
    user = f"{parts['user']}@" if parts.get("user") else ""
    host = str(parts.get("host") or "")
    port = f":{parts['port']}" if parts.get("port") else ""
    db = parts.get("dbname") or ""
    if host.startswith("/"):  # a unix socket's folder
        return f"postgresql://{user}/{db}?host={host}{port.replace(':', '&port=')}"
    return f"postgresql://{user}{host}{port}/{db}"


def _advisory_lock(conn: psycopg.Connection[Any], space: int, key: int, timeout: float) -> bool:
    """Take the session-level advisory lock (`space`, `key`) on `conn`, waiting up to `timeout` seconds
    (``inf``: as long as it takes); False when another connection still holds it then."""
    if timeout <= 0:
        row = conn.execute("SELECT pg_try_advisory_lock(%s, %s)", (space, key)).fetchone()
        return bool(row and row[0])
    wait = "0" if math.isinf(timeout) else f"{max(1, round(timeout * 1000))}ms"  # 0: no limit
    # One round trip: the timeout set, the lock, the timeout as it was (the role's, say) set again, in the order
    # PostgreSQL evaluates a select list; the one it was is read first (a materialized CTE runs before the list). A
    # lock not had in time fails the statement, and its transaction's setting goes with it.
    try:
        conn.execute(
            "WITH was AS MATERIALIZED (SELECT current_setting('lock_timeout') AS timeout)"
            " SELECT set_config('lock_timeout', %s, false), pg_advisory_lock(%s, %s),"
            " set_config('lock_timeout', was.timeout, false) FROM was",
            (wait, space, key),
        )
    except psycopg.errors.LockNotAvailable:
        return False
    return True


def _bytes(data: object) -> bytes:
    if not isinstance(data, bytes | bytearray | memoryview):
        raise StorageError(f"a store keeps bytes; got {type(data).__name__} (encode text as UTF-8 first)")
    return bytes(data)


def _name(name: object) -> str:
    """A workspace-relative name (``dialog/2026-05-02.jsonl``), refused before anything is written when it is
    none: the names a folder would refuse (empty parts, ``.``, ``..``) and what no file name can hold."""
    if (
        not isinstance(name, str)
        or not name
        or len(name) > _MAX_NAME
        or "\x00" in name
        or any(part in ("", ".", "..") for part in name.split("/"))
    ):
        raise StorageError(
            f"{name!r} is no name inside a workspace: relative, parts separated by /, none empty, . or ..",
            path=None,
        )
    return name


def _generation(generation: object) -> str:
    if not isinstance(generation, int) or isinstance(generation, bool) or generation < 0:
        raise StorageError(f"a live log's generation is a whole number, 0 or more; got {generation!r}")
    return str(generation)


def _size(size: object) -> int:
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise StorageError(f"a size is a whole number of bytes, 0 or more; got {size!r}")
    return size
